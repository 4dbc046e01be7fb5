"""Coalescing: concurrent reads share one GEMM, and each still gets its own exact top-k."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from actors import open_store
from actors._inmemory.scan import ScanEngine
from protocol import RetrievalReport, UnifiedMessage, VectorStoreConfig

TIMEOUT = 30
NEAR = 1e-6


class TableEmbedder:
    def __init__(self, table: npt.NDArray[np.float32]) -> None:
        self.table = table
        self.next = 0

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = self.table[self.next : self.next + len(texts)]
        self.next += len(texts)
        return rows

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_batch([text])[0]


class Gate:
    """Holds every threaded chunk until released, to keep a batch running."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        inner = ScanEngine._score_chunk

        def gated(engine: ScanEngine, *args: Any) -> Any:
            self.calls += 1
            self.entered.set()
            self.open.wait(timeout=20)
            return inner(engine, *args)

        monkeypatch.setattr(ScanEngine, "_score_chunk", gated)


def check_same_ranking(
    coalesced: RetrievalReport, single: RetrievalReport, exact: dict[str, float]
) -> None:
    """Equal rankings, except that two entries whose scores are within 1e-6 may swap."""
    assert coalesced.scanned == single.scanned
    assert len(coalesced.turns) == len(single.turns)
    for got, want in zip(coalesced.turns, single.turns, strict=True):
        assert abs(got.score - want.score) <= NEAR
        if got.id != want.id:
            assert abs(exact[got.id] - exact[want.id]) <= NEAR, (got, want)


async def concurrently(calls: list[Any]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(one, i)
    return results


NAMESPACES = ["a", "b", "c"]


@given(
    data=st.data(),
    n=st.integers(1, 120),
    d=st.integers(2, 12),
    queries=st.integers(2, 16),
)
async def test_coalesced_rankings_equal_the_single_query_path(
    data: st.DataObject, n: int, d: int, queries: int
) -> None:
    # Small integer components make exact ties and zero vectors common.
    grid = st.lists(st.integers(-2, 2), min_size=d, max_size=d)
    rows = np.asarray(data.draw(st.lists(grid, min_size=n, max_size=n)), dtype=np.float32)
    owners = data.draw(st.lists(st.sampled_from(NAMESPACES), min_size=n, max_size=n))
    scopes = data.draw(
        st.lists(
            st.sampled_from([None, *NAMESPACES, "absent"]), min_size=queries, max_size=queries
        )
    )
    ks = data.draw(st.lists(st.integers(1, n + 3), min_size=queries, max_size=queries))
    qs = np.asarray(data.draw(st.lists(grid, min_size=queries, max_size=queries)), np.float32)
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(rows), thread_scan_threshold=0) as store:
            # Runs of one namespace are stored as one batch, in row order.
            start = 0
            for end in range(1, n + 1):
                if end == n or owners[end] != owners[start]:
                    messages = [UnifiedMessage.user(f"r{i}") for i in range(start, end)]
                    await store.store_turns(messages, namespace=owners[start])
                    start = end
            single = [
                await store.retrieve_embedding(qs[i], ks[i], namespace=scopes[i])
                for i in range(queries)
            ]
            engine = store._actor.scans
            before = engine.batches
            coalesced = await concurrently(
                [
                    (lambda i=i: store.retrieve_embedding(qs[i], ks[i], namespace=scopes[i]))
                    for i in range(queries)
                ]
            )
            # Every read queued before the runner woke: one GEMM for all of them.
            assert engine.batches - before == 1
            assert engine.largest_batch == queries
            norms = np.linalg.norm(rows.astype(np.float64), axis=1)
            unit = rows / np.where(norms == 0, 1.0, norms)[:, None]
            for i in range(queries):
                q = qs[i].astype(np.float64)
                qn = np.linalg.norm(q)
                scores = unit @ (q / qn if qn else q)
                exact = {f"turn-{j}": float(scores[j]) for j in range(n)}
                check_same_ranking(coalesced[i], single[i], exact)
                for hit in coalesced[i].turns:
                    assert scopes[i] in (None, hit.namespace)


async def test_64_concurrent_reads_equal_64_sequential_reads() -> None:
    rng = np.random.default_rng(11)
    n, d = 2048, 96
    table = rng.standard_normal((n, d)).astype(np.float32)
    qs = rng.standard_normal((64, d)).astype(np.float32)
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns([UnifiedMessage.user(f"r{i}") for i in range(n)])
            sequential = [await store.retrieve_embedding(q, 8) for q in qs]
            together = await concurrently(
                [(lambda q=q: store.retrieve_embedding(q, 8)) for q in qs]
            )
            assert store._actor.scans.largest_batch > 1
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    for q, got, want in zip(qs, together, sequential, strict=True):
        scores = unit.astype(np.float64) @ (q / np.linalg.norm(q))
        check_same_ranking(got, want, {f"turn-{j}": float(scores[j]) for j in range(n)})
        # Both paths re-score their candidates the same exact way: identical answers.
        assert [(t.id, t.score) for t in got.turns] == [(t.id, t.score) for t in want.turns]


async def test_a_lone_read_runs_at_once_as_a_batch_of_one() -> None:
    table = np.eye(8, dtype=np.float32)
    config = VectorStoreConfig(max_entries=8, dimensions=8, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns([UnifiedMessage.user(f"r{i}") for i in range(8)])
            report = await store.retrieve_embedding(table[3], 1)
            assert [t.id for t in report.turns] == ["turn-3"]
            assert store._actor.scans.batches == 1
            assert store._actor.scans.largest_batch == 1


async def test_one_batch_at_a_time_and_reads_that_wait_are_gathered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = np.eye(8, dtype=np.float32)
    config = VectorStoreConfig(max_entries=8, dimensions=8, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns([UnifiedMessage.user(f"r{i}") for i in range(8)])
            engine = store._actor.scans
            gate = Gate(monkeypatch)
            answers: dict[int, list[str]] = {}

            async def read(i: int) -> None:
                answers[i] = [t.id for t in (await store.retrieve_embedding(table[i], 1)).turns]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, 0)
                # wait_all_tasks_blocked does not wait for worker threads: wait until the
                # first batch's thread is really holding the gate.
                await trio.to_thread.run_sync(gate.entered.wait, 20)
                for i in range(1, 6):
                    nursery.start_soon(read, i)
                await trio.testing.wait_all_tasks_blocked()
                assert gate.calls == 1  # the second batch has not started
                gate.open.set()
            assert engine.batches == 2
            assert engine.largest_batch == 5
            assert answers == {i: [f"turn-{i}"] for i in range(6)}


async def test_batches_are_capped_at_max_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    table = np.eye(4, dtype=np.float32)
    config = VectorStoreConfig(max_entries=4, dimensions=4, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns([UnifiedMessage.user(f"r{i}") for i in range(4)])
            engine = store._actor.scans
            reads = 2 * engine.max_batch + 3
            gate = Gate(monkeypatch)
            gate.open.set()
            results = await concurrently(
                [(lambda i=i: store.retrieve_embedding(table[i % 4], 1)) for i in range(reads)]
            )
            assert engine.largest_batch == engine.max_batch
            assert engine.batches == 3
            assert [r.turns[0].id for r in results] == [f"turn-{i % 4}" for i in range(reads)]
