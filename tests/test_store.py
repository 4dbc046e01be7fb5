"""The store actor, one test (or more) per rule of design §3."""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Sequence

import msgspec
import numpy as np
import pytest
import trio
import trio.lowlevel
import trio.testing

from actors import HashingEmbedder, open_store
from actors.testing import inject_crash
from protocol import (
    ConfigError,
    EmbedderError,
    EmbeddingError,
    EntryTooLarge,
    JsonError,
    Poisoned,
    RetrievalReport,
    ToolCall,
    UnifiedMessage,
    VectorStoreConfig,
    payload_bytes,
)

DIM = 8
TIMEOUT = 10


def cfg(max_entries: int = 8, dimensions: int = DIM, **kw: object) -> VectorStoreConfig:
    return VectorStoreConfig(
        max_entries=max_entries,
        dimensions=dimensions,
        max_entry_bytes=256,
        **kw,  # type: ignore[arg-type]
    )


def msg(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


class TableEmbedder:
    """Sync embedder: each text is a key into a table of vectors. Records its calls."""

    def __init__(self, table: dict[str, Sequence[float] | np.ndarray]) -> None:
        self.table = table
        self.batches: list[list[str]] = []
        self.single: list[str] = []

    def embed(self, text: str) -> Sequence[float] | np.ndarray:
        self.single.append(text)
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> list[Sequence[float] | np.ndarray]:
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


def unit(i: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def texts_of(report: RetrievalReport) -> list[str]:
    return [hit.message.text() for hit in report.turns]


async def snapshot_of(store: object) -> tuple[list[str], list[float], list[int]]:
    report = await store.retrieve_embedding(np.ones(DIM), k=1000)  # type: ignore[attr-defined]
    return texts_of(report), [h.score for h in report.turns], [h.sequence for h in report.turns]


# --- arena --------------------------------------------------------------------------------


async def test_arena_is_allocated_once_and_never_moves() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=16), HashingEmbedder(DIM)) as store:
            arena = store._actor.arena
            address = arena.vectors.__array_interface__["data"][0]
            for round_ in range(250):
                await store.store_turns([msg(f"turn {round_} {j}") for j in range(12)])
            assert arena.vectors.__array_interface__["data"][0] == address
            assert arena.vectors.shape == (16, DIM)
            assert len(store) == 16
            assert store.usage().evicted_entries == 250 * 12 - 16


async def test_fifo_eviction_takes_the_oldest_slot() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=3), HashingEmbedder(DIM)) as store:
            for i in range(5):
                await store.store_turns([msg(f"t{i}")])
            texts, _, seqs = await snapshot_of(store)
            assert sorted(texts) == ["t2", "t3", "t4"]
            assert sorted(seqs) == [2, 3, 4]
            assert store.usage().evicted_entries == 2


# --- writes: the inbox --------------------------------------------------------------------


async def test_a_full_inbox_makes_callers_wait() -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), embedder, inbox_size=1) as store:
            async with trio.open_nursery() as n:
                for i in range(3):
                    n.start_soon(store.store_turns, [msg(f"w{i}")])
                await trio.testing.wait_all_tasks_blocked()
                stats = store.statistics()
                # One write is in the actor (parked in the embedder), one fills the inbox,
                # and the third caller waits to send.
                assert (stats.inbox_size, stats.inbox_used, stats.tasks_waiting_send) == (1, 1, 1)
                assert len(store) == 0
                embedder.gate.set()
            assert len(store) == 3


async def test_writes_apply_in_arrival_order() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=64), HashingEmbedder(DIM)) as store:
            results = [await store.store_turns([msg(f"a{i}"), msg(f"b{i}")]) for i in range(5)]
            seqs = [s for r in results for s in r.sequences]
            assert seqs == list(range(10))


# --- batch semantics ----------------------------------------------------------------------


async def test_oversized_turn_anywhere_rejects_the_batch() -> None:
    big = msg("x" * 300)
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=2), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("keep me")])
            before = await snapshot_of(store)
            # The oversized turn is in the head that trimming would drop: still rejected.
            with pytest.raises(EntryTooLarge) as info:
                await store.store_turns([big, msg("a"), msg("b")])
            # 300 text bytes and the source, "offload".
            assert (info.value.bytes, info.value.max_entry_bytes, info.value.index) == (
                307,
                256,
                0,
            )
            assert "307 payload bytes (turn 0 of the batch)" in str(info.value)
            assert await snapshot_of(store) == before
            assert store.usage().evicted_entries == 0


async def test_long_batch_keeps_newest_and_embeds_only_survivors() -> None:
    table = {f"t{i}": unit(i) for i in range(7)}
    embedder = TableEmbedder(table)
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=3), embedder) as store:
            stored = await store.store_turns([msg(f"t{i}") for i in range(7)])
            assert stored.evicted == 4
            assert stored.sequences == [0, 1, 2]
            # One batched call, with only the three survivors.
            assert embedder.batches == [["t4", "t5", "t6"]]
            assert embedder.single == []
            texts, _, _ = await snapshot_of(store)
            assert sorted(texts) == ["t4", "t5", "t6"]
            assert store.usage().evicted_entries == 4


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ([1.0] * (DIM - 1), r"embedding 1 of the batch has 7 floats; this store takes 8"),
        (
            [np.nan] + [0.0] * (DIM - 1),
            r"embedding 1 of the batch has the non-finite component nan",
        ),
        ([np.inf] + [0.0] * (DIM - 1), r"non-finite component inf at index 0"),
        ([3e20] + [0.0] * (DIM - 1), r"squared norm that overflows float32"),
        ("not a vector", r"embedding 1 of the batch is not a vector of numbers \(str\)"),
    ],
)
async def test_bad_vectors_reject_the_whole_batch(bad: object, error: str) -> None:
    table: dict[str, object] = {"good": unit(0), "bad": bad, "seed": unit(1)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            await store.store_turns([msg("seed")])
            before = await snapshot_of(store)
            with pytest.raises(EmbeddingError, match=error):
                await store.store_turns([msg("good"), msg("bad")])
            assert await snapshot_of(store) == before
            assert len(store) == 1


async def test_wrong_vector_count_is_an_embedding_error() -> None:
    class Short:
        def embed(self, text: str) -> list[float]:
            return unit(0)

        def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
            return [unit(0)]

    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), Short()) as store:
            with pytest.raises(EmbeddingError, match="returned 1 vectors for 2 texts"):
                await store.store_turns([msg("a"), msg("b")])
            assert store.is_empty()


async def test_vectors_are_normalized_once_at_insert() -> None:
    table = {"long": [3.0, 4.0] + [0.0] * (DIM - 2)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            await store.store_turns([msg("long")])
            row = store._actor.arena.vectors[0]
            np.testing.assert_allclose(row[:2], [0.6, 0.8], rtol=1e-6)
            report = await store.retrieve_embedding([3.0, 4.0] + [0.0] * (DIM - 2), k=1)
            assert report.turns[0].score == pytest.approx(1.0, abs=1e-6)


async def test_zero_norm_vector_is_kept_and_scores_exactly_zero() -> None:
    table = {"zero": [0.0] * DIM, "x": unit(0)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            stored = await store.store_turns([msg("zero"), msg("x")])
            assert stored.zero_norm == 1
            assert store.usage().zero_norm_entries == 1
            for query in ([-1.0] * DIM, unit(0), [0.5] * DIM):
                report = await store.retrieve_embedding(query, k=2)
                zero_hit = next(h for h in report.turns if h.message.text() == "zero")
                assert zero_hit.score == 0.0
                assert str(zero_hit.score) == "0.0"  # never -0.0


async def test_sequences_are_monotonic_and_never_reused() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            seen: list[int] = []
            for i in range(6):
                stored = await store.store_turns([msg(f"a{i}"), msg(f"b{i}")])
                seen.extend(stored.sequences)
                if i % 2:
                    await store.delete([stored.ids[0]])
                if i == 3:
                    await store.clear()
            assert seen == sorted(set(seen))
            assert seen == list(range(12))


# --- reads --------------------------------------------------------------------------------


async def test_k_must_be_positive() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("a")])
            for k in (0, -1):
                with pytest.raises(ConfigError, match=rf"k is {k}; expected an int > 0"):
                    await store.retrieve("a", k)
                with pytest.raises(ConfigError, match=rf"k is {k}"):
                    await store.retrieve_in("memory-default", "a", k)
                with pytest.raises(ConfigError, match=rf"k is {k}"):
                    await store.retrieve_embedding(unit(0), k)
            with pytest.raises(ConfigError, match=r"k is 2.0 \(float\)"):
                await store.retrieve("a", 2.0)  # type: ignore[arg-type]


async def test_k_larger_than_entries_returns_every_entry() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg(f"t{i}") for i in range(3)])
            report = await store.retrieve("t1", 100)
            assert len(report.turns) == 3
            assert report.scanned == 3


async def test_query_vector_is_normalized_on_a_copy() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("alpha beta")])
            query = np.arange(1, DIM + 1, dtype=np.float32) * 10
            original = query.copy()
            query.flags.writeable = True
            await store.retrieve_embedding(query, k=1)
            np.testing.assert_array_equal(query, original)
            as_list = [float(x) for x in original]
            await store.retrieve_embedding(as_list, k=1)
            assert as_list == [float(x) for x in original]


async def test_zero_query_scores_zero_everywhere() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("a b c"), msg("d e"), msg("f")])
            report = await store.retrieve_embedding(np.zeros(DIM), k=3)
            assert [h.score for h in report.turns] == [0.0, 0.0, 0.0]
            # All tied: newest first.
            assert [h.sequence for h in report.turns] == [2, 1, 0]


async def test_scan_is_exact_against_float64_brute_force() -> None:
    rng = np.random.default_rng(7)
    n, dim = 300, 32
    vectors = rng.standard_normal((n, dim))
    table = {f"v{i}": vectors[i] for i in range(n)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=n, dimensions=dim), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            await store.store_turns([msg(f"v{i}") for i in range(n)])
            unit_rows = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            for _ in range(20):
                q = rng.standard_normal(dim)
                k = int(rng.integers(1, 40))
                report = await store.retrieve_embedding(q, k=k)
                expected = unit_rows @ (q / np.linalg.norm(q))
                best = np.lexsort((-np.arange(n), -expected))[:k]
                assert [h.sequence for h in report.turns] == best.tolist()
                np.testing.assert_allclose(
                    [h.score for h in report.turns], expected[best], atol=1e-5
                )
                assert report.scanned == n


async def test_ties_go_newest_first_at_the_kth_boundary() -> None:
    # Ten identical vectors plus two better ones: the k-th boundary falls inside the tie.
    table = {"same": unit(0), "best": [1.0, 0.2] + [0.0] * (DIM - 2)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=32), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            await store.store_turns([msg("same")] * 5 + [msg("best")] + [msg("same")] * 5)
            report = await store.retrieve_embedding(unit(0), k=4)
            assert [h.sequence for h in report.turns] == [10, 9, 8, 7]
            report = await store.retrieve_embedding([1.0, 0.2] + [0.0] * (DIM - 2), k=4)
            assert [h.sequence for h in report.turns] == [5, 10, 9, 8]


async def test_same_contents_and_query_are_bit_identical() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((200, 64)).astype(np.float32)
    table = {f"v{i}": vectors[i] for i in range(200)}
    q = rng.standard_normal(64)
    results = []
    for _ in range(2):
        with trio.fail_after(TIMEOUT):
            async with open_store(
                cfg(max_entries=200, dimensions=64), TableEmbedder(table)
            ) as store:  # type: ignore[arg-type]
                await store.store_turns([msg(f"v{i}") for i in range(200)])
                first = await store.retrieve_embedding(q, k=50)
                second = await store.retrieve_embedding(q, k=50)
                assert first == second
                results.append(first)
    assert [h.score for h in results[0].turns] == [h.score for h in results[1].turns]
    assert [h.sequence for h in results[0].turns] == [h.sequence for h in results[1].turns]


async def test_namespaces_are_isolated() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=16), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("alice secret plan")] * 3, namespace="alice")
            await store.store_turns([msg("bob public plan")] * 2, namespace="bob")
            for query in ("alice secret plan", "bob public plan", "plan"):
                alice = await store.retrieve_in("alice", query, k=10)
                bob = await store.retrieve_in("bob", query, k=10)
                assert {h.namespace for h in alice.turns} == {"alice"} and alice.scanned == 3
                assert {h.namespace for h in bob.turns} == {"bob"} and bob.scanned == 2
            vector_scoped = await store.retrieve_embedding(np.ones(DIM), k=10, namespace="bob")
            assert {h.namespace for h in vector_scoped.turns} == {"bob"}
            empty = await store.retrieve_in("carol", "plan", k=10)
            assert empty.turns == [] and empty.scanned == 0
            everything = await store.retrieve("plan", k=10)
            assert everything.scanned == 5


async def test_hits_carry_source_metadata_and_id() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(
                [msg("remember the milk")], source="explicit", metadata={"tags": ["shopping"]}
            )
            hit = (await store.retrieve("milk", 1)).turns[0]
            assert (hit.source, hit.metadata, hit.id) == (
                "explicit",
                {"tags": ["shopping"]},
                stored.ids[0],
            )
            assert hit.message == msg("remember the milk")


# --- snapshots and concurrency ------------------------------------------------------------


async def test_slow_write_does_not_block_reads_which_see_the_previous_snapshot() -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    embedder.gate.set()
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), embedder) as store:
            async with trio.open_nursery() as nursery:
                await store.store_turns([msg("old turn")])
                embedder.gate = trio.Event()
                embedder.entered = trio.Event()
                nursery.start_soon(store.store_turns, [msg("new turn"), msg("another new turn")])
                await embedder.entered.wait()
                # The write is parked in the embedder; reads go on with the old snapshot.
                report = await store.retrieve("new turn", 10)
                assert texts_of(report) == ["old turn"]
                assert len(store) == 1
                embedder.gate.set()
            assert len(store) == 3


async def test_writer_cancelled_while_waiting_to_send_never_commits() -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), embedder, inbox_size=1) as store:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.store_turns, [msg("in the actor")])
                await embedder.entered.wait()
                nursery.start_soon(store.store_turns, [msg("fills the inbox")])
                await trio.testing.wait_all_tasks_blocked()
                with trio.CancelScope() as scope:
                    nursery.start_soon(_cancel_when_blocked, scope)
                    await store.store_turns([msg("victim 1"), msg("victim 2")])
                assert scope.cancelled_caught
                embedder.gate.set()
            texts = texts_of(await store.retrieve_embedding(np.ones(DIM), k=10))
            assert sorted(texts) == ["fills the inbox", "in the actor"]


async def test_writer_cancelled_after_queueing_commits_its_whole_batch() -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), embedder) as store:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.store_turns, [msg("first")])
                await embedder.entered.wait()
                with trio.CancelScope() as scope:
                    nursery.start_soon(_cancel_when_blocked, scope)
                    await store.store_turns([msg("victim 1"), msg("victim 2")])
                assert scope.cancelled_caught
                assert store.statistics().inbox_used == 1  # queued; its caller has gone
                embedder.gate.set()
            # The actor applied the batch and did not block replying to nobody.
            for _ in range(10):
                if len(store) == 3:
                    break
                await trio.testing.wait_all_tasks_blocked()
            texts = texts_of(await store.retrieve_embedding(np.ones(DIM), k=10))
            assert sorted(texts) == ["first", "victim 1", "victim 2"]


async def test_writer_cancelled_before_it_sends_queues_nothing() -> None:
    """A write queues without send()'s checkpoint when the inbox has room; a caller
    that is already cancelled must still send nothing."""
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            with trio.CancelScope() as scope:
                scope.cancel()
                await store.store_turns([msg("never sent")])
            assert scope.cancelled_caught
            assert store.statistics().inbox_used == 0
            await trio.testing.wait_all_tasks_blocked()
            assert store.is_empty() and store.statistics().version == 0
            stored = await store.store_turns([msg("sent")])  # the handle still works
            assert stored.sequences == [0]


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def test_closing_fails_queued_writes_instead_of_hanging() -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    outcomes: list[str] = []

    async def write(text: str) -> None:
        try:
            await store.store_turns([msg(text)])
            outcomes.append("stored")
        except trio.ClosedResourceError:
            outcomes.append("closed")

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outer, open_store(cfg(), embedder) as store:
            outer.start_soon(write, "in flight")
            outer.start_soon(write, "queued")
            await trio.testing.wait_all_tasks_blocked()
        assert outcomes == ["closed", "closed"]
    with pytest.raises(trio.ClosedResourceError, match="closed"):
        await store.store_turns([msg("late")])


# --- usage ----------------------------------------------------------------------------------


async def test_usage_len_is_empty_capacity_and_near_cap() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(
            cfg(max_entries=4, warn_fraction=0.75), HashingEmbedder(DIM)
        ) as store:
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
            assert store.usage().near_cap is True and store.usage().fraction == 0.75
            await store.store_turns([msg("d"), msg("e")])
            usage = store.usage()
            assert (usage.entries, usage.evicted_entries, usage.near_cap) == (4, 1, True)
        async with open_store(cfg(max_entries=1), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("a")])
            assert store.usage().near_cap is False  # no warn_fraction, no warning


async def test_memory_stays_within_the_bound() -> None:
    config = VectorStoreConfig(max_entries=200, dimensions=64, max_entry_bytes=2000)
    namespace = "memory-default"
    constant = 1024  # per-entry bookkeeping: slot lists, the FIFO map, the id map, ids
    bound = config.max_entries * (
        config.max_entry_bytes + config.dimensions * 4 + len(namespace) + constant
    )
    gc.collect()
    tracemalloc.start()
    try:
        with trio.fail_after(TIMEOUT):
            async with open_store(config, HashingEmbedder(64)) as store:
                baseline, _ = tracemalloc.get_traced_memory()
                for round_ in range(6):
                    batch = [msg(f"{round_}-{i} " + "y" * 1900) for i in range(100)]
                    await store.store_turns(batch, namespace=namespace)
                del batch  # only what the store holds counts
                gc.collect()
                current, _ = tracemalloc.get_traced_memory()
                assert len(store) == 200
                held = current
                assert held <= bound, f"store holds {held} bytes; the bound is {bound}"
                assert baseline > config.max_entries * config.dimensions * 4  # arena counted
    finally:
        tracemalloc.stop()


# --- errors from the table --------------------------------------------------------------


async def test_open_store_revalidates_config_and_embedder() -> None:
    config = cfg()
    msgspec.structs.force_setattr(config, "max_entries", 0)  # bypass the frozen struct
    with pytest.raises(ConfigError, match="max_entries is 0"):
        async with open_store(config, HashingEmbedder(DIM)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="makes 4-float vectors; this store takes 8"):
        async with open_store(cfg(), HashingEmbedder(4)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="has neither embed"):
        async with open_store(cfg(), object()):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="inbox_size is 0"):
        async with open_store(cfg(), HashingEmbedder(DIM), inbox_size=0):
            pass  # pragma: no cover


async def test_embedder_error_carries_the_original_and_changes_nothing() -> None:
    original = ConnectionError("provider down")

    class Broken:
        fail = False

        def embed(self, text: str) -> list[float]:
            if self.fail:
                raise original
            return unit(len(text))

    broken = Broken()
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), broken) as store:
            await store.store_turns([msg("before")])
            broken.fail = True
            with pytest.raises(EmbedderError) as info:
                await store.store_turns([msg("x"), msg("y")])
            assert info.value.error is original and info.value.__cause__ is original
            with pytest.raises(EmbedderError) as info:
                await store.retrieve("q", 1)
            assert info.value.error is original
            broken.fail = False
            assert texts_of(await store.retrieve("before", 5)) == ["before"]


async def test_json_error_for_unserializable_arguments_changes_nothing() -> None:
    args: dict[str, object] = {"ok": True}
    call = UnifiedMessage.assistant(tool_calls=[ToolCall(id="c1", name="f", arguments=args)])
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            args["when"] = {1, 2}  # mutated after construction
            with pytest.raises(
                JsonError, match=r"arguments of tool call 'c1'\['when'\] holds a set"
            ):
                await store.store_turns([msg("fine"), call])
            assert store.is_empty()
            with pytest.raises(JsonError, match="metadata"):
                await store.store_turns([msg("fine")], metadata={"x": object()})
            assert store.is_empty()


async def test_bad_arguments_to_store_methods() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            with pytest.raises(ConfigError, match="turns is a str"):
                await store.store_turns("hello")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="turn 1 of the batch is a dict"):
                await store.store_turns([msg("a"), {"role": "user"}])  # type: ignore[list-item]
            with pytest.raises(ConfigError, match="namespace is ''"):
                await store.store_turns([msg("a")], namespace="")
            with pytest.raises(ConfigError, match="query is a int"):
                await store.retrieve(5, 1)  # type: ignore[arg-type]
            with pytest.raises(EmbeddingError, match="query embedding has 3 floats"):
                await store.retrieve_embedding([1.0, 2.0, 3.0], 1)
            with pytest.raises(EmbeddingError, match="non-finite"):
                await store.retrieve_embedding([np.nan] * DIM, 1)
            assert store.is_empty()


async def test_payload_bytes_is_what_the_cap_checks() -> None:
    # The payload and the source ("offload": 7 bytes) count against the cap.
    exact = msg("z" * 249)
    assert payload_bytes(exact) == 249
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([exact])  # exactly at the cap is allowed
            with pytest.raises(EntryTooLarge):
                await store.store_turns([msg("z" * 250)])
            await store.store_turns([msg("z" * 255)], source="s")
            assert len(store) == 2


# --- crash -> Poisoned ------------------------------------------------------------------------


async def test_crash_poisons_every_call_and_the_exit(caplog: pytest.LogCaptureFixture) -> None:
    embedder = GateEmbedder(HashingEmbedder(DIM))
    crash = RuntimeError("boom")
    errors: list[BaseException] = []

    async def write(text: str) -> None:
        try:
            await store.store_turns([msg(text)])
        except Poisoned as error:
            errors.append(error)

    caplog.set_level(logging.ERROR, logger="trio_recall.store")
    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned) as exit_info:
        async with open_store(cfg(), embedder, inbox_size=4) as store:
            await store.store_turns([msg("committed")]) if embedder.gate.set() is None else None
            embedder.gate = trio.Event()
            inject_crash(store, crash)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write, "in flight")
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(write, "queued 1")
                nursery.start_soon(write, "queued 2")
                await trio.testing.wait_all_tasks_blocked()
                embedder.gate.set()
            assert len(errors) == 3
            assert all(e.__cause__ is crash for e in errors)
            for call in (
                lambda: store.store_turns([msg("later")]),
                lambda: store.retrieve("committed", 1),
                lambda: store.retrieve_in("memory-default", "committed", 1),
                lambda: store.retrieve_embedding(unit(0), 1),
                lambda: store.delete(["turn-0"]),
                lambda: store.clear(),
            ):
                with pytest.raises(Poisoned) as info:
                    await call()
                assert info.value.__cause__ is crash
            for sync_call in (
                store.usage,
                store.is_empty,
                lambda: len(store),
                lambda: store.capacity,
            ):
                with pytest.raises(Poisoned):
                    sync_call()
    assert exit_info.value.__cause__ is crash
    crash_logs = [r for r in caplog.records if "poisoned" in r.getMessage()]
    assert len(crash_logs) == 1 and crash_logs[0].exc_info is not None


async def test_crash_does_not_tear_down_the_callers_nursery() -> None:
    survivor_ran = trio.Event()

    async def survivor() -> None:
        await trio.lowlevel.checkpoint()
        survivor_ran.set()

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            with pytest.raises(Poisoned):
                async with open_store(cfg(), HashingEmbedder(DIM)) as store:
                    nursery.start_soon(survivor)
                    inject_crash(store)
                    with pytest.raises(Poisoned):
                        await store.store_turns([msg("x")])
                    await survivor_ran.wait()
        assert survivor_ran.is_set()


async def test_body_error_wins_and_carries_the_crash_as_a_note() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(KeyError) as info:
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            inject_crash(store, ValueError("actor bug"))
            with pytest.raises(Poisoned):
                await store.store_turns([msg("x")])
            raise KeyError("body failed")
    notes = getattr(info.value, "__notes__", [])
    assert any("poisoned" in note and "actor bug" in note for note in notes)


async def test_body_error_is_not_wrapped_in_a_group() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(ZeroDivisionError):
        async with open_store(cfg(), HashingEmbedder(DIM)):
            raise ZeroDivisionError


class ArrayEmbedder:
    """Sync embedder returning one float32 array per batch (the fast normalize path)."""

    def __init__(self, table: dict[str, np.ndarray], dimensions: int) -> None:
        self.table = table
        self.dimensions = dimensions

    def embed(self, text: str) -> np.ndarray:
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


async def test_a_vector_is_stored_the_same_whatever_its_batch_holds() -> None:
    # A zero vector in the batch once sent the whole batch down the float64 path, so
    # the same vector stored twice came out a few ulp apart and did not tie.
    rng = np.random.default_rng(11)
    table = {f"t{i}": (rng.standard_normal(64) * 3).astype(np.float32) for i in range(40)}
    table["zero"] = np.zeros(64, dtype=np.float32)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            cfg(max_entries=128, dimensions=64), ArrayEmbedder(table, 64)
        ) as store:
            for i in range(40):
                older = await store.store_turns([msg(f"t{i}"), msg("zero")])
                newer = await store.store_turns([msg(f"t{i}")])
                report = await store.retrieve_embedding(table[f"t{i}"], k=2)
                assert [h.id for h in report.turns] == [newer.ids[0], older.ids[0]]
                assert report.turns[0].score == report.turns[1].score


@pytest.mark.parametrize("threshold", [None, 0])
async def test_scores_that_round_to_a_tie_still_rank_newest_first(threshold: int | None) -> None:
    # Two vectors one ulp apart: in float64 the older scores a hair higher, but callers
    # see float32 scores, where the two are equal, so the newer must come first.
    rng = np.random.default_rng(5)
    q = rng.standard_normal(64).astype(np.float32)
    q /= np.linalg.norm(q)
    ties = 0
    kwargs = {} if threshold is None else {"thread_scan_threshold": threshold}
    table: dict[str, np.ndarray] = {}
    config = cfg(max_entries=16, dimensions=64)
    with trio.fail_after(TIMEOUT * 3):
        async with open_store(config, ArrayEmbedder(table, 64), **kwargs) as store:
            for _ in range(100):
                a = rng.standard_normal(64).astype(np.float32)
                b = a.copy()
                i = int(rng.integers(64))
                b[i] = np.nextafter(b[i], np.float32(np.inf) * np.sign(q[i]))
                table.update(old=b, new=a)
                await store.store_turns([msg("old")])
                await store.store_turns([msg("new")])
                first, second = (await store.retrieve_embedding(q, k=2)).turns
                if first.score == second.score:
                    ties += 1
                    assert first.sequence > second.sequence
                else:
                    assert first.score > second.score
                await store.clear()
    assert ties > 10  # the case this test is about did occur


async def _read_into(results: list[RetrievalReport], store: object, vector: np.ndarray) -> None:
    results.append(await store.retrieve_embedding(vector, k=5))  # type: ignore[attr-defined]


async def test_many_ties_and_zero_queries_need_bounded_scratch() -> None:
    # Zero-norm entries all score 0, so at the k-th boundary every one of them is a
    # candidate; a zero query makes every entry one. Re-scoring them once gathered
    # them all as float64: twice the arena.
    n, d = 8192, 256
    arena = n * d * 4

    class Zeros:
        dimensions = d

        def embed(self, text: str) -> np.ndarray:
            return self.embed_batch([text])[0]

        def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
            out = np.zeros((len(texts), d), dtype=np.float32)
            for i, t in enumerate(texts):
                if t.startswith("v"):
                    out[i] = np.random.default_rng(i).standard_normal(d)
            return out

    q = np.random.default_rng(9).standard_normal(d)
    with trio.fail_after(TIMEOUT * 3):
        for threshold in (None, 0):
            kwargs = {} if threshold is None else {"thread_scan_threshold": threshold}
            config = cfg(max_entries=n, dimensions=d)
            async with open_store(config, Zeros(), **kwargs) as store:
                turns = [msg(("v" if i < 3 else "z") + str(i)) for i in range(n)]
                await store.store_turns(turns)
                await store.retrieve_embedding(q, k=1)  # scratch allocated once
                tracemalloc.start()
                try:
                    lone = await store.retrieve_embedding(q, k=5)
                    results: list[RetrievalReport] = []
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_read_into, results, store, np.zeros(d))
                        nursery.start_soon(_read_into, results, store, q)
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                assert len(lone.turns) == 5 and all(len(r.turns) == 5 for r in results)
                assert peak < arena // 2, f"peak {peak} bytes against an arena of {arena}"
