"""Reads leave the process's BLAS thread count alone unless the store opts in.

A watcher counts every ``set_num_threads`` that threadpoolctl makes on any BLAS library
(the class-level method, which ``threadpool_limits``, ``ThreadpoolController.limit``
and the stores' own guard all end in), and a thread samples the count while the reads
run. Both go through the user's path: ``open_store`` and ``open_memory``, every read
path (inline, in worker threads, coalesced, masked by a filter), with scans big enough
that the store's chooser tries both of its settings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import trio
from threadpoolctl import ThreadpoolController

from actors import HashingEmbedder, open_memory, open_store
from actors._inmemory.blas import blas_threads
from protocol import ConfigError, MemoryConfig, SearchRequest, UnifiedMessage, VectorStoreConfig

TIMEOUT = 60
# 2048 × 256 = 524 288 floats: over the size where OpenBLAS's sgemv uses its threads,
# so every read here is one the store must decide about.
N, D = 2048, 256


class Watch:
    """Every ``set_num_threads`` threadpoolctl makes, and the counts a sampler saw."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.seen: set[tuple[int, ...]] = set()
        self.libs = ThreadpoolController().select(user_api="blas").lib_controllers
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def counts(self) -> tuple[int, ...]:
        return tuple(int(lib.get_num_threads()) for lib in self.libs)

    def counts_above_one(self) -> tuple[int, ...]:
        """The counts now, when one of them is over one (else the test is skipped)."""
        counts = self.counts()
        if all(count == 1 for count in counts):
            pytest.skip("BLAS cannot run on two threads here")
        return counts

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.seen.add(self.counts())
            self._stop.wait(0.0002)

    def __enter__(self) -> Watch:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    found = Watch()
    if not found.libs:
        pytest.skip("numpy's BLAS is not one threadpoolctl controls")
    for cls in {type(lib) for lib in found.libs} | {type(lib) for lib in blas_threads.libraries()}:
        original = cls.set_num_threads

        def counted(self: Any, num_threads: int, _original: Any = original) -> Any:
            found.calls.append(int(num_threads))
            return _original(self, num_threads)

        monkeypatch.setattr(cls, "set_num_threads", counted)
    # Two threads where the machine allows, so a change to one would be seen.
    saved = found.counts()
    for lib in found.libs:
        lib.set_num_threads(2)
    found.calls.clear()
    yield found
    for lib, count in zip(found.libs, saved, strict=True):
        lib.set_num_threads(count)


def table(seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    rows = np.random.default_rng(seed).standard_normal((N, D)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


class Rows:
    """Hands out the rows of a table in order (so tests choose every vector)."""

    def __init__(self, rows: np.ndarray[Any, np.dtype[np.float32]]) -> None:
        self.rows, self.next = rows, 0

    def embed_batch(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        picked = self.rows[[(self.next + i) % len(self.rows) for i in range(len(texts))]]
        self.next += len(texts)
        return picked

    def embed(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        return self.embed_batch([text])[0]


def entries(count: int) -> list[UnifiedMessage]:
    return [UnifiedMessage.user(f"entry {i}") for i in range(count)]


async def every_read_path(store: Any, queries: np.ndarray[Any, np.dtype[np.float32]]) -> None:
    """Inline reads (enough for the chooser to probe both settings), filtered ones,
    and a burst of concurrent reads that coalesce into batches."""
    for q in queries[:24]:
        await store.retrieve_embedding(q, 5)
    for q in queries[:6]:
        await store.search(
            SearchRequest(vector=q, k=5, filter={"n": {"$gte": 0}}, profile=store.profile)
        )
    async with trio.open_nursery() as nursery:
        for q in queries:
            nursery.start_soon(store.retrieve_embedding, q, 5)


def one_core_scans(store: Any) -> int:
    """How many scans the store ran on one core (its chooser's count)."""
    stats = store._actor.scans.chooser.statistics().values()
    return sum(s["scans_one_blas_thread"] for s in stats)


@pytest.mark.parametrize("threshold", [None, 0], ids=["inline", "threads"])
async def test_a_default_store_never_changes_the_blas_thread_count(
    watch: Watch, threshold: int | None
) -> None:
    rows = table(1)
    config = VectorStoreConfig(max_entries=N, dimensions=D, max_entry_bytes=100)
    kw = {} if threshold is None else {"thread_scan_threshold": threshold}
    before = watch.counts()
    with trio.fail_after(TIMEOUT), watch:
        async with open_store(config, Rows(rows), **kw) as store:
            await store.add_texts(
                [f"doc {i}" for i in range(N)], metadatas=[{"n": i} for i in range(N)]
            )
            await every_read_path(store, rows[:40])
            # The chooser tried one core too: that path ran, and changed nothing.
            assert one_core_scans(store) > 0
    assert watch.calls == []
    assert watch.seen == {before}
    assert watch.counts() == before


async def test_a_default_memory_never_changes_the_blas_thread_count(watch: Watch) -> None:
    config = VectorStoreConfig(max_entries=N, dimensions=D, max_entry_bytes=200)
    before = watch.counts()
    with trio.fail_after(TIMEOUT), watch:
        async with open_memory(
            store=config, memory=MemoryConfig(), embedder=HashingEmbedder(D)
        ) as memory:
            namespace = memory.config.namespace
            await memory.store.store_turns(entries(N), namespace=namespace)
            for i in range(30):
                await memory.retrieve(f"entry {i * 7}")
            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(memory.retrieve, f"entry {i}")
            assert one_core_scans(memory.store) > 0
    assert watch.calls == []
    assert watch.seen == {before}


async def test_blas_threads_auto_holds_openblas_at_one_thread_per_scan(watch: Watch) -> None:
    small = N // 4  # 131 072 floats: under the size the chooser decides about
    rows = table(2)[:small]
    config = VectorStoreConfig(max_entries=small, dimensions=D, max_entry_bytes=100)
    before = watch.counts_above_one()
    with trio.fail_after(TIMEOUT):
        # Every read in a thread: a small one always runs on one core, so each one
        # holds the count at one and gives it back.
        async with open_store(
            config, Rows(rows), thread_scan_threshold=0, blas_threads="auto"
        ) as store:
            await store.store_turns(entries(small))
            watch.calls.clear()
            for q in rows[:4]:
                await store.retrieve_embedding(q, 5)
                assert watch.counts() == before
            assert one_core_scans(store) == 0  # none was big enough to ask the chooser
    # Set to one, then back to the count in force, once per read.
    assert watch.calls == [1, *before] * 4
    assert blas_threads._holders == 0


async def test_blas_threads_auto_follows_the_chooser_through_open_memory(watch: Watch) -> None:
    config = VectorStoreConfig(max_entries=N, dimensions=D, max_entry_bytes=200)
    before = watch.counts_above_one()
    with trio.fail_after(TIMEOUT):
        async with open_memory(
            store=config, embedder=HashingEmbedder(D), blas_threads="auto"
        ) as memory:
            await memory.store.store_turns(entries(N), namespace=memory.config.namespace)
            for i in range(30):
                await memory.retrieve(f"entry {i}")
            single = one_core_scans(memory.store)
    assert single > 0
    # Each one-core scan set the count to one and back; nothing else changed it.
    assert watch.calls == [1, *before] * single
    assert watch.counts() == before


@pytest.mark.parametrize("bad", ["AUTO", "", 1, 0, True, 2.0, ["auto"]])
async def test_a_bad_blas_threads_is_refused(bad: object) -> None:
    config = VectorStoreConfig(max_entries=8, dimensions=4, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        with pytest.raises(ConfigError, match=r"blas_threads is .*expected None .* or 'auto'"):
            async with open_store(config, HashingEmbedder(4), blas_threads=bad):  # type: ignore[arg-type]
                pass
        with pytest.raises(ConfigError, match=r"blas_threads is .*expected None"):
            async with open_memory(store=config, blas_threads=bad):  # type: ignore[arg-type]
                pass


async def test_blas_threads_with_a_borrowed_handle_is_refused() -> None:
    config = VectorStoreConfig(max_entries=8, dimensions=4, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, HashingEmbedder(4)) as store:
            with pytest.raises(ConfigError, match="blas_threads is 'auto' with an open store"):
                async with open_memory(store=store, blas_threads="auto"):
                    pass
