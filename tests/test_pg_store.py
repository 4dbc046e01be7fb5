"""The PostgreSQL + pgvector store: design §3's rules, ported from test_store.py, plus what
only a server has (schema checks, shared counters, lost connections, hostile input).

Scores come from pgvector's float32 ``<#>``, so they are compared with a tolerance of
1e-5 against a float64 reference (see ``actors/_pg/store.py``); rankings and ties are
compared exactly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing
from pg_support import REQUIRED_ENV, drop_table, new_table_name, pg_dsn, pg_table  # noqa: F401

try:
    import psycopg
    from psycopg import sql

    from actors._pg.store import PgStoreHandle, StoreUnavailable, open_pg_store
except ImportError as error:  # pragma: no cover - depends on the installed extras
    if os.environ.get(REQUIRED_ENV) == "1":
        raise
    pytest.skip(f"the pg extra is not installed ({error})", allow_module_level=True)

from hypothesis.stateful import run_state_machine_as_test

from actors import HashingEmbedder
from actors.testing import SCORE_TOLERANCE, VectorStoreMachine, inject_crash
from protocol import (
    ConfigError,
    EmbedderError,
    EmbeddingError,
    EntryTooLarge,
    Poisoned,
    RetrievalReport,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 8
TIMEOUT = 20


def cfg(max_entries: int = 8, dimensions: int = DIM, **kw: Any) -> VectorStoreConfig:
    return VectorStoreConfig(
        max_entries=max_entries, dimensions=dimensions, max_entry_bytes=256, **kw
    )


def msg(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


def unit(i: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def texts_of(report: RetrievalReport) -> list[str]:
    return [hit.message.text() for hit in report.turns]


async def contents(store: PgStoreHandle) -> tuple[list[str], list[float], list[int]]:
    report = await store.retrieve_embedding(np.ones(store.config.dimensions), k=10_000)
    return texts_of(report), [h.score for h in report.turns], [h.sequence for h in report.turns]


class TableEmbedder:
    """Sync embedder: each text is a key into a table of vectors. Records its calls."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        self.batches: list[list[str]] = []

    def embed(self, text: str) -> Any:
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> list[Any]:
        self.batches.append(list(texts))
        return [self.table[t] for t in texts]


class GateEmbedder:
    """Async embedder whose document calls wait until ``gate`` is set."""

    def __init__(self, inner: HashingEmbedder) -> None:
        self.inner = inner
        self.gate = trio.Event()
        self.entered = trio.Event()

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.entered.set()
        await self.gate.wait()
        return self.inner.embed_batch(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed(text)


@pytest.fixture
def opener(pg_dsn: str, pg_table: str) -> Any:  # noqa: F811
    """``opener(config, embedder, **kw)``: open_pg_store on this test's table."""

    @asynccontextmanager
    async def open_(
        config: VectorStoreConfig, embedder: object, **kw: Any
    ) -> AsyncIterator[PgStoreHandle]:
        kw.setdefault("table", pg_table)
        async with open_pg_store(pg_dsn, config, embedder, **kw) as store:
            yield store

    return open_


# --- writes, batches, eviction ------------------------------------------------------------


async def test_fifo_eviction_takes_the_oldest(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=3), HashingEmbedder(DIM)) as store:
            for i in range(5):
                await store.store_turns([msg(f"t{i}")])
            texts, _, seqs = await contents(store)
            assert sorted(texts) == ["t2", "t3", "t4"]
            assert sorted(seqs) == [2, 3, 4]
            assert store.usage().evicted_entries == 2
            assert len(store) == 3


async def test_writes_apply_in_arrival_order(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=64), HashingEmbedder(DIM)) as store:
            results = [await store.store_turns([msg(f"a{i}"), msg(f"b{i}")]) for i in range(5)]
            assert [s for r in results for s in r.sequences] == list(range(10))
            assert [i for r in results for i in r.ids] == [f"turn-{s}" for s in range(10)]


async def test_oversized_turn_anywhere_rejects_the_batch(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=2), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("keep me")])
            before = await contents(store)
            with pytest.raises(EntryTooLarge) as info:
                await store.store_turns([msg("x" * 300), msg("a"), msg("b")])
            assert (info.value.bytes, info.value.index) == (307, 0)  # and "offload"
            assert await contents(store) == before
            assert store.usage().evicted_entries == 0


async def test_long_batch_keeps_newest_and_embeds_only_survivors(opener: Any) -> None:
    embedder = TableEmbedder({f"t{i}": unit(i) for i in range(7)})
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=3), embedder) as store:
            stored = await store.store_turns([msg(f"t{i}") for i in range(7)])
            assert (stored.evicted, stored.sequences) == (4, [0, 1, 2])
            assert embedder.batches == [["t4", "t5", "t6"]]
            assert sorted((await contents(store))[0]) == ["t4", "t5", "t6"]
            assert store.usage().evicted_entries == 4
            # A second full batch evicts the three older entries in the same transaction.
            stored = await store.store_turns([msg(f"t{i}") for i in range(3)])
            assert stored.evicted == 3 and store.usage().evicted_entries == 7


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ([1.0] * (DIM - 1), r"embedding 1 of the batch has 7 floats; this store takes 8"),
        ([np.nan] + [0.0] * (DIM - 1), r"non-finite component nan"),
        ([3e20] + [0.0] * (DIM - 1), r"squared norm that overflows float32"),
    ],
)
async def test_bad_vectors_reject_the_whole_batch(opener: Any, bad: object, error: str) -> None:
    embedder = TableEmbedder({"good": unit(0), "bad": bad, "seed": unit(1)})
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), embedder) as store:
            await store.store_turns([msg("seed")])
            before = await contents(store)
            with pytest.raises(EmbeddingError, match=error):
                await store.store_turns([msg("good"), msg("bad")])
            assert await contents(store) == before
            assert len(store) == 1


async def test_normalized_once_and_zero_norm_scores_exactly_zero(opener: Any) -> None:
    table = {"long": [3.0, 4.0] + [0.0] * (DIM - 2), "zero": [0.0] * DIM}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), TableEmbedder(table)) as store:
            stored = await store.store_turns([msg("zero"), msg("long")])
            assert stored.zero_norm == 1 and store.usage().zero_norm_entries == 1
            report = await store.retrieve_embedding([3.0, 4.0] + [0.0] * (DIM - 2), k=2)
            assert texts_of(report) == ["long", "zero"]
            assert report.turns[0].score == pytest.approx(1.0, abs=SCORE_TOLERANCE)
            for query in ([-1.0] * DIM, unit(0)):
                hit = next(
                    h
                    for h in (await store.retrieve_embedding(query, k=2)).turns
                    if h.message.text() == "zero"
                )
                assert str(hit.score) == "0.0"  # exactly zero, never -0.0
            await store.delete([stored.ids[0]])
            assert store.usage().zero_norm_entries == 0


async def test_sequences_are_monotonic_and_never_reused(opener: Any) -> None:
    seen: list[int] = []
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            for i in range(6):
                stored = await store.store_turns([msg(f"a{i}"), msg(f"b{i}")])
                seen.extend(stored.sequences)
                if i % 2:
                    await store.delete([stored.ids[0]])
                if i == 3:
                    await store.clear()
        # Reopening the table carries on from the database sequence.
        async with opener(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            seen.extend((await store.store_turns([msg("after reopen")])).sequences)
    assert seen == sorted(set(seen)) == list(range(13))


async def test_delete_and_clear(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            a = await store.store_turns([msg("a1"), msg("a2")], namespace="a")
            b = await store.store_turns([msg("b1")], namespace="b")
            result = await store.delete([a.ids[0], "nope", a.ids[0], b.ids[0]], namespace="a")
            assert (result.deleted, result.missing) == ([a.ids[0]], ["nope", b.ids[0]])
            assert len(store) == 2
            assert (await store.clear("a")).removed == 1
            assert (await store.clear("a")).removed == 0
            assert (await store.clear()).removed == 1
            assert store.is_empty()


# --- reads ----------------------------------------------------------------------------------


async def test_k_is_checked_and_a_large_k_returns_everything(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg(f"t{i}") for i in range(3)])
            for k in (0, -1):
                with pytest.raises(ConfigError, match=rf"k is {k}; expected an int > 0"):
                    await store.retrieve("a", k)
                with pytest.raises(ConfigError, match=rf"k is {k}"):
                    await store.retrieve_in("memory-default", "a", k)
                with pytest.raises(ConfigError, match=rf"k is {k}"):
                    await store.retrieve_embedding(unit(0), k)
            report = await store.retrieve("t1", 100)
            assert len(report.turns) == 3 and report.scanned == 3 and report.exact


async def test_query_vector_is_normalized_on_a_copy_and_zero_scores_zero(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("a b c"), msg("d e"), msg("f")])
            query = np.arange(1, DIM + 1, dtype=np.float32) * 10
            original = query.copy()
            await store.retrieve_embedding(query, k=1)
            np.testing.assert_array_equal(query, original)
            report = await store.retrieve_embedding(np.zeros(DIM), k=3)
            assert [h.score for h in report.turns] == [0.0, 0.0, 0.0]
            assert [h.sequence for h in report.turns] == [2, 1, 0]


async def test_scan_is_exact_against_float64_brute_force(opener: Any) -> None:
    rng = np.random.default_rng(7)
    n, dim = 300, 32
    vectors = rng.standard_normal((n, dim))
    table = {f"v{i}": vectors[i] for i in range(n)}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=n, dimensions=dim), TableEmbedder(table)) as store:
            await store.store_turns([msg(f"v{i}") for i in range(n)])
            rows = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            for _ in range(20):
                q = rng.standard_normal(dim)
                k = int(rng.integers(1, 40))
                report = await store.retrieve_embedding(q, k=k)
                expected = rows @ (q / np.linalg.norm(q))
                best = np.lexsort((-np.arange(n), -expected))[:k]
                assert [h.sequence for h in report.turns] == best.tolist()
                np.testing.assert_allclose(
                    [h.score for h in report.turns], expected[best], atol=SCORE_TOLERANCE
                )
                assert report.scanned == n


async def test_ties_go_newest_first_at_the_kth_boundary(opener: Any) -> None:
    table = {"same": unit(0), "best": [1.0, 0.2] + [0.0] * (DIM - 2)}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=32), TableEmbedder(table)) as store:
            await store.store_turns([msg("same")] * 5 + [msg("best")] + [msg("same")] * 5)
            report = await store.retrieve_embedding(unit(0), k=4)
            assert [h.sequence for h in report.turns] == [10, 9, 8, 7]
            report = await store.retrieve_embedding([1.0, 0.2] + [0.0] * (DIM - 2), k=4)
            assert [h.sequence for h in report.turns] == [5, 10, 9, 8]


async def test_same_contents_and_query_give_identical_results(opener: Any) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((200, 64)).astype(np.float32)
    table = {f"v{i}": vectors[i] for i in range(200)}
    q = rng.standard_normal(64)
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=200, dimensions=64), TableEmbedder(table)) as store:
            await store.store_turns([msg(f"v{i}") for i in range(200)])
            first = await store.retrieve_embedding(q, k=50)
            assert first == await store.retrieve_embedding(q, k=50)


async def test_namespaces_are_isolated(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=16), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("alice secret plan")] * 3, namespace="alice")
            await store.store_turns([msg("bob public plan")] * 2, namespace="bob")
            for query in ("alice secret plan", "bob public plan", "plan"):
                alice = await store.retrieve_in("alice", query, k=10)
                bob = await store.retrieve_in("bob", query, k=10)
                assert {h.namespace for h in alice.turns} == {"alice"} and alice.scanned == 3
                assert {h.namespace for h in bob.turns} == {"bob"} and bob.scanned == 2
            scoped = await store.retrieve_embedding(np.ones(DIM), k=10, namespace="bob")
            assert {h.namespace for h in scoped.turns} == {"bob"}
            empty = await store.retrieve_in("carol", "plan", k=10)
            assert empty.turns == [] and empty.scanned == 0
            assert (await store.retrieve("plan", k=10)).scanned == 5


async def test_hits_carry_source_metadata_and_id(opener: Any) -> None:
    metadata = {"tags": ["shopping"], "n": 3, "x": 0.1, "nested": {"ok": True, "none": None}}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(
                [msg("remember the milk ☕")], source="explicit", metadata=metadata
            )
            hit = (await store.retrieve("milk", 1)).turns[0]
            assert (hit.source, hit.metadata, hit.id) == ("explicit", metadata, stored.ids[0])
            assert hit.message == msg("remember the milk ☕")


async def test_hostile_values_are_bound_never_spliced(opener: Any, pg_dsn: str) -> None:  # noqa: F811
    hostile = "x'); DROP TABLE pg_class; --"
    metadata = {hostile: hostile, "$where": {"'\"": "\\"}}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(
                [msg(hostile)], namespace=hostile, source=hostile, metadata=metadata
            )
            hit = (await store.retrieve_in(hostile, hostile, 1)).turns[0]
            assert (hit.namespace, hit.source, hit.metadata) == (hostile, hostile, metadata)
            assert (await store.delete([hostile, stored.ids[0]], namespace=hostile)).deleted == [
                stored.ids[0]
            ]
            # Values that PostgreSQL text cannot hold are refused before the transaction.
            with pytest.raises(ConfigError, match="namespace 'a\\\\x00b' holds a NUL"):
                await store.store_turns([msg("x")], namespace="a\x00b")
            # ... and match nothing when they are only looked up.
            assert (await store.retrieve_in("a\x00b", "x", 1)).scanned == 0
            assert (await store.delete(["a\x00"])).missing == ["a\x00"]
            assert store.is_empty()
            # Metadata may hold them: reads return it exactly (jsonb keeps a U+FFFD copy).
            odd = {"k": "a\x00", "\x00": "\ud800"}
            stored = await store.store_turns([msg("x")], metadata=odd)
            assert (await store.retrieve("x", 1)).turns[0].metadata == odd
    for bad in ("Bad", "a-b", "1abc", "x" * 53, 'a"b', "a;drop", ""):
        with pytest.raises(ConfigError, match="expected a lowercase SQL identifier"):
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=bad):
                pass  # pragma: no cover


# --- snapshots, the inbox, cancellation -----------------------------------------------------


async def test_slow_write_does_not_block_reads(opener: Any) -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    embedder.gate.set()
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), embedder) as store:
            async with trio.open_nursery() as nursery:
                await store.store_turns([msg("old turn")])
                embedder.gate, embedder.entered = trio.Event(), trio.Event()
                nursery.start_soon(store.store_turns, [msg("new turn"), msg("another new turn")])
                await embedder.entered.wait()
                assert texts_of(await store.retrieve("new turn", 10)) == ["old turn"]
                assert len(store) == 1
                embedder.gate.set()
            assert len(store) == 3


async def test_a_full_inbox_makes_callers_wait(opener: Any) -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), embedder, inbox_size=1) as store:
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(store.store_turns, [msg(f"w{i}")])
                await trio.testing.wait_all_tasks_blocked()
                stats = store.statistics()
                assert (stats.inbox_size, stats.inbox_used, stats.tasks_waiting_send) == (1, 1, 1)
                embedder.gate.set()
            assert len(store) == 3 and store.statistics().version == 3


async def test_writer_cancelled_after_queueing_commits_its_whole_batch(opener: Any) -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), embedder) as store:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.store_turns, [msg("first")])
                await embedder.entered.wait()
                with trio.CancelScope() as scope:
                    nursery.start_soon(_cancel_when_blocked, scope)
                    await store.store_turns([msg("victim 1"), msg("victim 2")])
                assert scope.cancelled_caught
                embedder.gate.set()
            # A write of nothing is a barrier: once it replies, every earlier write has
            # been applied, the cancelled caller's batch included.
            await store.clear("barrier")
            assert len(store) == 3
            assert sorted((await contents(store))[0]) == ["first", "victim 1", "victim 2"]


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def test_closing_fails_queued_writes_instead_of_hanging(opener: Any) -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    outcomes: list[str] = []

    async def write(store: PgStoreHandle, text: str) -> None:
        try:
            await store.store_turns([msg(text)])
            outcomes.append("stored")
        except trio.ClosedResourceError:
            outcomes.append("closed")

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outer, opener(cfg(), embedder) as store:
            outer.start_soon(write, store, "in flight")
            outer.start_soon(write, store, "queued")
            await trio.testing.wait_all_tasks_blocked()
        assert outcomes == ["closed", "closed"]
        with pytest.raises(trio.ClosedResourceError, match="closed"):
            await store.store_turns([msg("late")])


# --- usage and counters ---------------------------------------------------------------------


async def test_usage_len_is_empty_capacity_and_near_cap(opener: Any) -> None:
    config = cfg(max_entries=4, warn_fraction=0.75)
    with trio.fail_after(TIMEOUT):
        async with opener(config, HashingEmbedder(DIM)) as store:
            assert store.is_empty() and len(store) == 0 and store.capacity == 4
            await store.store_turns([msg("a"), msg("b")])
            usage = store.usage()
            assert (usage.entries, usage.capacity, usage.fraction, usage.near_cap) == (
                2,
                4,
                0.5,
                False,
            )
            await store.store_turns([msg("c")])
            assert store.usage().near_cap is True
            await store.store_turns([msg("d"), msg("e")])
            usage = store.usage()
            assert (usage.entries, usage.evicted_entries, usage.near_cap) == (4, 1, True)


async def test_counters_live_in_the_database_and_are_shared(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            opener(cfg(max_entries=4), HashingEmbedder(DIM)) as one,
            opener(cfg(max_entries=4), HashingEmbedder(DIM)) as two,
        ):
            await one.store_turns([msg(f"a{i}") for i in range(3)])
            assert len(two) == 0  # not refreshed yet: as of its own last commit or read
            await two.store_turns([msg("b0"), msg("b1")])  # one cap: evicts one of one's
            assert (two.usage().entries, two.usage().evicted_entries) == (4, 1)
            assert len(one) == 3
            await one.retrieve("a", 1)  # a read refreshes the counters
            assert (one.usage().entries, one.usage().evicted_entries) == (4, 1)
            await two.clear()
            assert (await one.refresh()).entries == 0


async def test_reopen_checks_dimensions_and_capacity(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("kept")])
        with pytest.raises(ConfigError, match="holds 8-float vectors; this store takes 16"):
            async with opener(cfg(dimensions=16), HashingEmbedder(16)):
                pass  # pragma: no cover
        with pytest.raises(ConfigError, match="was made with max_entries=8; this config has 9"):
            async with opener(cfg(max_entries=9), HashingEmbedder(DIM)):
                pass  # pragma: no cover
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            assert texts_of(await store.retrieve("kept", 1)) == ["kept"]
            assert len(store) == 1


async def test_open_validates_its_arguments(pg_dsn: str, pg_table: str) -> None:  # noqa: F811
    bad_calls: list[tuple[dict[str, Any], str]] = [
        ({"pool_size": 1}, "pool_size is 1; expected an int >= 2"),
        ({"inbox_size": 0}, "inbox_size is 0"),
        ({"retries": -1}, "retries is -1"),
        ({"statement_timeout": 0}, "statement_timeout is 0"),
    ]
    for kwargs, error in bad_calls:
        with pytest.raises(ConfigError, match=error):
            async with open_pg_store(
                pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table, **kwargs
            ):
                pass  # pragma: no cover
    with pytest.raises(ConfigError, match="makes 4-float vectors; this store takes 8"):
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(4), table=pg_table):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="dsn is not a valid PostgreSQL connection string"):
        async with open_pg_store("not a dsn", cfg(), HashingEmbedder(DIM)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="has neither embed"):
        async with open_pg_store(pg_dsn, cfg(), object(), table=pg_table):
            pass  # pragma: no cover


async def test_an_unreachable_server_is_a_clear_error() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(StoreUnavailable, match="could not reach"):
        async with open_pg_store(
            "postgresql://nobody@/nowhere?host=/nonexistent-trio-recall",
            cfg(),
            HashingEmbedder(DIM),
            connect_timeout=1,
        ):
            pass  # pragma: no cover


async def test_a_table_that_is_not_a_store_is_refused(pg_dsn: str) -> None:  # noqa: F811
    table = new_table_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(table)))
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(ConfigError, match="not a trio-recall"):
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=table):
                pass  # pragma: no cover
    finally:
        drop_table(pg_dsn, table)


# --- errors ---------------------------------------------------------------------------------


async def test_embedder_error_carries_the_original_and_changes_nothing(opener: Any) -> None:
    original = ConnectionError("provider down")

    class Broken:
        fail = False

        def embed(self, text: str) -> list[float]:
            if self.fail:
                raise original
            return unit(len(text))

    broken = Broken()
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), broken) as store:
            await store.store_turns([msg("before")])
            broken.fail = True
            with pytest.raises(EmbedderError) as info:
                await store.store_turns([msg("x"), msg("y")])
            assert info.value.error is original
            broken.fail = False
            assert texts_of(await store.retrieve("before", 5)) == ["before"]


async def test_crash_poisons_every_call_and_the_exit(
    opener: Any, caplog: pytest.LogCaptureFixture
) -> None:
    crash = RuntimeError("boom")
    caplog.set_level(logging.ERROR, logger="trio_recall.pg_store")
    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned) as exit_info:
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("committed")])
            inject_crash(store, crash)  # type: ignore[arg-type]
            with pytest.raises(Poisoned) as info:
                await store.store_turns([msg("never")])
            assert info.value.__cause__ is crash
            for call in (
                lambda: store.store_turns([msg("later")]),
                lambda: store.retrieve("committed", 1),
                lambda: store.retrieve_embedding(unit(0), 1),
                lambda: store.delete(["turn-0"]),
                lambda: store.clear(),
            ):
                with pytest.raises(Poisoned):
                    await call()
            for sync_call in (store.usage, store.is_empty, lambda: len(store)):
                with pytest.raises(Poisoned):
                    sync_call()
    assert exit_info.value.__cause__ is crash
    assert len([r for r in caplog.records if "poisoned" in r.getMessage()]) == 1
    async with opener(cfg(), HashingEmbedder(DIM)) as store:
        assert texts_of(await store.retrieve("never", 5)) == ["committed"]


async def _hold_oldest_row_and_kill_the_writer(
    dsn: str, table: str, store: PgStoreHandle, turns: list[UnifiedMessage], kills: int
) -> BaseException | None:
    """Block the writer's eviction on a row lock, then terminate its backend ``kills``
    times, so the connection is lost mid-transaction, after the batch's INSERT."""
    outcome: list[BaseException | None] = []

    async def write() -> None:
        try:
            await store.store_turns(turns)
            outcome.append(None)
        except StoreUnavailable as error:
            outcome.append(error)

    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as admin:
        holder.execute(
            sql.SQL("SELECT seq FROM {} ORDER BY seq LIMIT 1 FOR UPDATE").format(
                sql.Identifier(table)
            )
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            for _ in range(kills):
                while True:
                    row = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock' AND query LIKE 'WITH gone AS (DELETE%%'",
                        (f"trio-recall:{table}",),
                    ).fetchone()
                    if row is not None:
                        break
                    await trio.sleep(0.02)
                admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            holder.rollback()  # release the row lock: a retry can go through
    return outcome[0]


async def test_a_lost_connection_rolls_the_batch_back(
    opener: Any,
    pg_dsn: str,  # noqa: F811
    pg_table: str,  # noqa: F811
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=2), HashingEmbedder(DIM), retries=0) as store:
            await store.store_turns([msg("old 1"), msg("old 2")])
            before = await contents(store)
            error = await _hold_oldest_row_and_kill_the_writer(
                pg_dsn, pg_table, store, [msg("new 1"), msg("new 2")], kills=1
            )
            assert isinstance(error, StoreUnavailable)
            assert "rolled back; nothing was applied" in str(error)
            assert await contents(store) == before
            assert (store.usage().entries, store.usage().evicted_entries) == (2, 0)
            # The store is not poisoned: the next write goes through.
            await store.store_turns([msg("new 3")])
            assert sorted((await contents(store))[0]) == ["new 3", "old 2"]


async def test_a_transient_loss_is_retried_and_the_batch_lands_once(
    opener: Any,
    pg_dsn: str,  # noqa: F811
    pg_table: str,  # noqa: F811
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=2), HashingEmbedder(DIM), retries=2) as store:
            await store.store_turns([msg("old 1"), msg("old 2")])
            error = await _hold_oldest_row_and_kill_the_writer(
                pg_dsn, pg_table, store, [msg("new 1"), msg("new 2")], kills=1
            )
            assert error is None
            texts, _, seqs = await contents(store)
            assert sorted(texts) == ["new 1", "new 2"]
            assert (store.usage().entries, store.usage().evicted_entries) == (2, 2)
            assert len(set(seqs)) == 2


# --- the conformance state machine ----------------------------------------------------------


class PgStoreMachine(VectorStoreMachine):
    """VectorStoreMachine against the pg store: a fresh table per example.

    Scores are pgvector's float32 inner products; the machine's model compares them with
    ``actors.testing.SCORE_TOLERANCE`` (1e-5), which this backend meets with a wide
    margin (measured: at most 9e-8 from 16 to 1,536 dimensions). Rankings, ties, counters
    and sequences are compared exactly, as for the in-memory store.
    """

    dsn: str = ""

    def open_store_under_test(self, config: VectorStoreConfig, embedder: object) -> Any:
        dsn, table = self.dsn, new_table_name()

        @asynccontextmanager
        async def open_() -> AsyncIterator[PgStoreHandle]:
            try:
                async with open_pg_store(dsn, config, embedder, table=table) as store:
                    yield store
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(drop_table, dsn, table)

        return open_()


def test_pg_store_passes_the_state_machine(pg_dsn: str) -> None:  # noqa: F811
    assert SCORE_TOLERANCE == 1e-5  # the tolerance this backend is documented to meet

    class Machine(PgStoreMachine):
        dsn = pg_dsn

    run_state_machine_as_test(Machine)
