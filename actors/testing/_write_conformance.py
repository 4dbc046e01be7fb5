"""``WriteConformance``: the turns API and the write path (design §3) as pytest tests.

The companion of :class:`~actors.testing.StoreConformance` (documents and search): what
``store_turns``, ``retrieve``, ``retrieve_in``, ``retrieve_embedding``, ``delete``,
``clear``, ``usage()`` and ``statistics()`` promise, and the write path of documents
(ids, upserts, whole-batch rejection). Subclass it under a name pytest collects and
override :meth:`WriteConformance.open_store_under_test`::

    class TestMyStoreWrites(WriteConformance):
        def open_store_under_test(self, config, embedder, **options):
            return open_my_store(config, embedder, dsn=..., **options)

``options`` holds the keyword arguments both built-in ``open_*`` functions take
(``inbox_size``). Every test runs under ``trio.fail_after(self.timeout)``. What the suite
assumes of a store, beyond ``StoreConformance``'s list:

- each call of ``open_store_under_test`` yields a new, empty store whose sequences start
  at 0 and whose turn ids are ``turn-<sequence>``;
- the store applies writes one at a time, in arrival order, through a bounded inbox;
- scores are cosine similarity to within :attr:`WriteConformance.score_tolerance`;
  rankings and ties (newest first) are exact.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import pytest
import trio
import trio.lowlevel
import trio.testing

from protocol import (
    ConfigError,
    EmbedderError,
    EmbeddingError,
    EntryTooLarge,
    JsonError,
    Poisoned,
    SearchRequest,
    ToolCall,
    UnifiedMessage,
    payload_bytes,
)
from protocol.checks import MAX_ID_BYTES, MAX_NAMESPACE_BYTES

from ._conformance_base import StoreUnderTest, call_unchecked
from ._conformance_inputs import long_token
from ._crash import inject_crash
from ._document_writes import DocumentWriteCases
from ._write_base import (
    _DIM,
    _GateEmbedder,
    _msg,
    _TableEmbedder,
    _texts,
    _unit,
    _write_victims_cancelled,
)

__all__ = ["WriteConformance"]


class WriteConformance(DocumentWriteCases):
    """Conformance tests for the turns API and the write path. See the module docs.

    Attributes (from its base):
        timeout: seconds each test may take, opening and closing its stores included.
        score_tolerance: how far a store's score may be from the exact float64 cosine.
    """

    # --- writes, batches, eviction --------------------------------------------------------

    async def test_fifo_eviction_takes_the_oldest(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=3)) as store:
                for i in range(5):
                    await store.store_turns([_msg(f"t{i}")])
                texts, _, seqs = await self.contents(store)
                assert sorted(texts) == ["t2", "t3", "t4"]
                assert sorted(seqs) == [2, 3, 4]
                assert store.usage().evicted_entries == 2
                assert len(store) == 3

    async def test_writes_apply_in_arrival_order(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=64)) as store:
                results = [
                    await store.store_turns([_msg(f"a{i}"), _msg(f"b{i}")]) for i in range(5)
                ]
                assert [s for r in results for s in r.sequences] == list(range(10))
                assert [i for r in results for i in r.ids] == [f"turn-{s}" for s in range(10)]

    async def test_oversized_turn_anywhere_rejects_the_batch(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=2)) as store:
                await store.store_turns([_msg("keep me")])
                before = await self.contents(store)
                # The oversized turn is in the head that trimming would drop: still rejected.
                with pytest.raises(EntryTooLarge) as info:
                    await store.store_turns([_msg("x" * 300), _msg("a"), _msg("b")])
                # 300 text bytes and the source, "offload".
                assert (info.value.bytes, info.value.max_entry_bytes, info.value.index) == (
                    307,
                    256,
                    0,
                )
                assert "307 payload bytes (turn 0 of the batch)" in str(info.value)
                assert await self.contents(store) == before
                assert store.usage().evicted_entries == 0

    async def test_long_batch_keeps_newest_and_embeds_only_survivors(self) -> None:
        embedder = _TableEmbedder({f"t{i}": _unit(i) for i in range(7)})
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=3), embedder) as store:
                stored = await store.store_turns([_msg(f"t{i}") for i in range(7)])
                assert (stored.evicted, stored.sequences) == (4, [0, 1, 2])
                # One batched call, with only the three survivors.
                assert embedder.batches == [["t4", "t5", "t6"]]
                assert embedder.single == []
                assert sorted((await self.contents(store))[0]) == ["t4", "t5", "t6"]
                assert store.usage().evicted_entries == 4
                # A second full batch evicts the three older entries in the same write.
                stored = await store.store_turns([_msg(f"t{i}") for i in range(3)])
                assert stored.evicted == 3
                assert store.usage().evicted_entries == 7

    @pytest.mark.parametrize(
        ("bad", "error"),
        [
            ([1.0] * (_DIM - 1), r"embedding 1 of the batch has 7 floats; this store takes 8"),
            (
                [np.nan] + [0.0] * (_DIM - 1),
                r"embedding 1 of the batch has the non-finite component nan",
            ),
            ([np.inf] + [0.0] * (_DIM - 1), r"non-finite component inf at index 0"),
            ([3e20] + [0.0] * (_DIM - 1), r"squared norm that overflows float32"),
            ("not a vector", r"embedding 1 of the batch is not a vector of numbers \(str\)"),
        ],
    )
    async def test_bad_vectors_reject_the_whole_batch(self, bad: object, error: str) -> None:
        embedder = _TableEmbedder({"good": _unit(0), "bad": bad, "seed": _unit(1)})
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder) as store:
                await store.store_turns([_msg("seed")])
                before = await self.contents(store)
                with pytest.raises(EmbeddingError, match=error):
                    await store.store_turns([_msg("good"), _msg("bad")])
                assert await self.contents(store) == before
                assert len(store) == 1

    async def test_wrong_vector_count_is_an_embedding_error(self) -> None:
        class Short:
            def embed(self, text: str) -> list[float]:
                return _unit(0)

            def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
                return [_unit(0)]

        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), Short()) as store:
                with pytest.raises(EmbeddingError, match="returned 1 vectors for 2 texts"):
                    await store.store_turns([_msg("a"), _msg("b")])
                assert store.is_empty()

    async def test_normalized_once_and_zero_norm_scores_exactly_zero(self) -> None:
        long = [3.0, 4.0] + [0.0] * (_DIM - 2)
        embedder = _TableEmbedder({"long": long, "zero": [0.0] * _DIM})
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder) as store:
                stored = await store.store_turns([_msg("zero"), _msg("long")])
                assert stored.zero_norm == 1
                assert store.usage().zero_norm_entries == 1
                report = await store.retrieve_embedding(long, k=2)
                assert _texts(report) == ["long", "zero"]
                assert report.turns[0].score == pytest.approx(1.0, abs=self.score_tolerance)
                for query in ([-1.0] * _DIM, _unit(0), [0.5] * _DIM):
                    report = await store.retrieve_embedding(query, k=2)
                    hit = next(h for h in report.turns if h.message.text() == "zero")
                    assert hit.score == 0.0
                    assert str(hit.score) == "0.0"  # exactly zero, never -0.0
                await store.delete([stored.ids[0]])
                assert store.usage().zero_norm_entries == 0

    async def test_sequences_are_monotonic_and_never_reused(self) -> None:
        seen: list[int] = []
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=4)) as store:
                for i in range(6):
                    stored = await store.store_turns([_msg(f"a{i}"), _msg(f"b{i}")])
                    seen.extend(stored.sequences)
                    if i % 2:
                        await store.delete([stored.ids[0]])
                    if i == 3:
                        await store.clear()
        assert seen == sorted(set(seen)) == list(range(12))

    async def test_delete_and_clear(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                a = await store.store_turns([_msg("a1"), _msg("a2")], namespace="a")
                b = await store.store_turns([_msg("b1")], namespace="b")
                result = await store.delete([a.ids[0], "nope", a.ids[0], b.ids[0]], namespace="a")
                assert (result.deleted, result.missing) == ([a.ids[0]], ["nope", b.ids[0]])
                assert len(store) == 2
                assert (await store.clear("a")).removed == 1
                assert (await store.clear("a")).removed == 0
                assert (await store.clear()).removed == 1
                assert store.is_empty()

    # --- reads ---------------------------------------------------------------------------

    async def test_k_is_checked_and_a_large_k_returns_everything(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.store_turns([_msg(f"t{i}") for i in range(3)])
                for k in (0, -1):
                    with pytest.raises(ConfigError, match=rf"k is {k}; expected an int > 0"):
                        await store.retrieve("a", k)
                    with pytest.raises(ConfigError, match=rf"k is {k}"):
                        await store.retrieve_in("memory-default", "a", k)
                    with pytest.raises(ConfigError, match=rf"k is {k}"):
                        await store.retrieve_embedding(_unit(0), k)
                with pytest.raises(ConfigError, match=r"k is 2.0 \(float\)"):
                    await call_unchecked(store.retrieve, "a", 2.0)
                report = await store.retrieve("t1", 100)
                assert len(report.turns) == 3
                assert report.scanned == 3
                assert report.exact

    async def test_query_vector_is_normalized_on_a_copy_and_zero_scores_zero(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.store_turns([_msg("a b c"), _msg("d e"), _msg("f")])
                query = np.arange(1, _DIM + 1, dtype=np.float32) * 10
                original = query.copy()
                await store.retrieve_embedding(query, k=1)
                np.testing.assert_array_equal(query, original)
                as_list = [float(x) for x in original]
                await store.retrieve_embedding(as_list, k=1)
                assert as_list == [float(x) for x in original]
                report = await store.retrieve_embedding(np.zeros(_DIM), k=3)
                assert [h.score for h in report.turns] == [0.0, 0.0, 0.0]
                # All tied: newest first.
                assert [h.sequence for h in report.turns] == [2, 1, 0]

    async def test_scan_is_exact_against_float64_brute_force(self) -> None:
        rng = np.random.default_rng(7)
        n, dim = 300, 32
        vectors = rng.standard_normal((n, dim))
        embedder = _TableEmbedder({f"v{i}": vectors[i] for i in range(n)})
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(n, dim), embedder) as store:
                await store.store_turns([_msg(f"v{i}") for i in range(n)])
                rows = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
                for _ in range(20):
                    q = rng.standard_normal(dim)
                    k = int(rng.integers(1, 40))
                    report = await store.retrieve_embedding(q, k=k)
                    expected = rows @ (q / np.linalg.norm(q))
                    best = np.lexsort((-np.arange(n), -expected))[:k]
                    assert [h.sequence for h in report.turns] == best.tolist()
                    np.testing.assert_allclose(
                        [h.score for h in report.turns], expected[best], atol=self.score_tolerance
                    )
                    assert report.scanned == n

    async def test_ties_go_newest_first_at_the_kth_boundary(self) -> None:
        # Ten identical vectors plus a better one: the k-th boundary falls inside the tie.
        best = [1.0, 0.2] + [0.0] * (_DIM - 2)
        embedder = _TableEmbedder({"same": _unit(0), "best": best})
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=32), embedder) as store:
                await store.store_turns([_msg("same")] * 5 + [_msg("best")] + [_msg("same")] * 5)
                report = await store.retrieve_embedding(_unit(0), k=4)
                assert [h.sequence for h in report.turns] == [10, 9, 8, 7]
                report = await store.retrieve_embedding(best, k=4)
                assert [h.sequence for h in report.turns] == [5, 10, 9, 8]

    async def test_same_contents_and_query_give_identical_results(self) -> None:
        rng = np.random.default_rng(3)
        vectors = rng.standard_normal((200, 64)).astype(np.float32)
        embedder = _TableEmbedder({f"v{i}": vectors[i] for i in range(200)})
        q = rng.standard_normal(64)
        results = []
        with trio.fail_after(self.timeout):
            for _ in range(2):
                async with self.fresh_store(self.config(200, 64), embedder) as store:
                    await store.store_turns([_msg(f"v{i}") for i in range(200)])
                    first = await store.retrieve_embedding(q, k=50)
                    assert first == await store.retrieve_embedding(q, k=50)
                    results.append(first)
        assert [h.score for h in results[0].turns] == [h.score for h in results[1].turns]
        assert [h.sequence for h in results[0].turns] == [h.sequence for h in results[1].turns]

    async def test_turn_namespaces_are_isolated(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(max_entries=16)) as store:
                await store.store_turns([_msg("alice secret plan")] * 3, namespace="alice")
                await store.store_turns([_msg("bob public plan")] * 2, namespace="bob")
                for query in ("alice secret plan", "bob public plan", "plan"):
                    alice = await store.retrieve_in("alice", query, k=10)
                    bob = await store.retrieve_in("bob", query, k=10)
                    assert {h.namespace for h in alice.turns} == {"alice"}
                    assert alice.scanned == 3
                    assert {h.namespace for h in bob.turns} == {"bob"}
                    assert bob.scanned == 2
                scoped = await store.retrieve_embedding(np.ones(_DIM), k=10, namespace="bob")
                assert {h.namespace for h in scoped.turns} == {"bob"}
                empty = await store.retrieve_in("carol", "plan", k=10)
                assert empty.turns == []
                assert empty.scanned == 0
                assert (await store.retrieve("plan", k=10)).scanned == 5

    async def test_hits_carry_source_metadata_and_id(self) -> None:
        metadata = {"tags": ["shopping"], "n": 3, "x": 0.1, "nested": {"ok": True, "none": None}}
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                stored = await store.store_turns(
                    [_msg("remember the milk ☕")], source="explicit", metadata=metadata
                )
                hit = (await store.retrieve("milk", 1)).turns[0]
                assert (hit.source, hit.metadata, hit.id) == ("explicit", metadata, stored.ids[0])
                assert hit.message == _msg("remember the milk ☕")

    # --- snapshots, the inbox, cancellation ------------------------------------------------

    async def test_slow_write_does_not_block_reads(self) -> None:
        embedder = _GateEmbedder()
        embedder.gate.set()
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder) as store:
                async with trio.open_nursery() as nursery:
                    await store.store_turns([_msg("old turn")])
                    embedder.gate, embedder.entered = trio.Event(), trio.Event()
                    nursery.start_soon(
                        store.store_turns, [_msg("new turn"), _msg("another new turn")]
                    )
                    await embedder.entered.wait()
                    # The write is parked in the embedder; reads see the old snapshot.
                    assert _texts(await store.retrieve("new turn", 10)) == ["old turn"]
                    assert len(store) == 1
                    embedder.gate.set()
                assert len(store) == 3

    async def test_a_full_inbox_makes_callers_wait(self) -> None:
        embedder = _GateEmbedder()
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder, inbox_size=1) as store:
                async with trio.open_nursery() as nursery:
                    for i in range(3):
                        nursery.start_soon(store.store_turns, [_msg(f"w{i}")])
                    await trio.testing.wait_all_tasks_blocked()
                    stats = store.statistics()
                    # One write is in the actor (parked in the embedder), one fills the
                    # inbox, and the third caller waits to send.
                    assert (stats.inbox_size, stats.inbox_used, stats.tasks_waiting_send) == (
                        1,
                        1,
                        1,
                    )
                    assert len(store) == 0
                    embedder.gate.set()
                assert len(store) == 3
                assert store.statistics().version == 3

    async def test_writer_cancelled_while_waiting_to_send_never_commits(self) -> None:
        embedder = _GateEmbedder()
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder, inbox_size=1) as store:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.store_turns, [_msg("in the actor")])
                    await embedder.entered.wait()
                    nursery.start_soon(store.store_turns, [_msg("fills the inbox")])
                    await trio.testing.wait_all_tasks_blocked()
                    await _write_victims_cancelled(store, nursery)
                    embedder.gate.set()
                texts = (await self.contents(store))[0]
                assert sorted(texts) == ["fills the inbox", "in the actor"]

    async def test_writer_cancelled_after_queueing_commits_its_whole_batch(self) -> None:
        embedder = _GateEmbedder()
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), embedder) as store:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.store_turns, [_msg("first")])
                    await embedder.entered.wait()
                    await _write_victims_cancelled(store, nursery)
                    assert store.statistics().inbox_used == 1  # queued; its caller has gone
                    embedder.gate.set()
                # A write of nothing is a barrier: once it replies, every earlier write has
                # been applied (the actor did not block replying to nobody).
                await store.clear("barrier")
                assert len(store) == 3
                texts = (await self.contents(store))[0]
                assert sorted(texts) == ["first", "victim 1", "victim 2"]

    async def test_writer_cancelled_before_it_sends_queues_nothing(self) -> None:
        """A write queues without send()'s checkpoint when the inbox has room; a caller
        that is already cancelled must still send nothing."""
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await store.store_turns([_msg("never sent")])
                assert scope.cancelled_caught
                assert store.statistics().inbox_used == 0
                await trio.testing.wait_all_tasks_blocked()
                assert store.is_empty()
                assert store.statistics().version == 0
                stored = await store.store_turns([_msg("sent")])  # the handle still works
                assert stored.sequences == [0]

    async def test_closing_fails_queued_writes_instead_of_hanging(self) -> None:
        embedder = _GateEmbedder()
        outcomes: list[str] = []

        async def write(store: StoreUnderTest, text: str) -> None:
            try:
                await store.store_turns([_msg(text)])
                outcomes.append("stored")
            except trio.ClosedResourceError:
                outcomes.append("closed")

        with trio.fail_after(self.timeout):
            async with trio.open_nursery() as outer, self.fresh_store(None, embedder) as store:
                outer.start_soon(write, store, "in flight")
                outer.start_soon(write, store, "queued")
                await trio.testing.wait_all_tasks_blocked()
            assert outcomes == ["closed", "closed"]
            with pytest.raises(trio.ClosedResourceError, match="closed"):
                await store.store_turns([_msg("late")])

    # --- usage -----------------------------------------------------------------------------

    async def test_usage_len_is_empty_capacity_and_near_cap(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(4, warn_fraction=0.75)) as store:
                assert store.is_empty()
                assert len(store) == 0
                assert store.capacity == 4
                await store.store_turns([_msg("a"), _msg("b")])
                usage = store.usage()
                assert (usage.entries, usage.capacity, usage.fraction, usage.near_cap) == (
                    2,
                    4,
                    0.5,
                    False,
                )
                await store.store_turns([_msg("c")])
                assert store.usage().near_cap is True
                assert store.usage().fraction == 0.75
                await store.store_turns([_msg("d"), _msg("e")])
                usage = store.usage()
                assert (usage.entries, usage.evicted_entries, usage.near_cap) == (4, 1, True)
            async with self.fresh_store(self.config(max_entries=1)) as store:
                await store.store_turns([_msg("a")])
                assert store.usage().near_cap is False  # no warn_fraction, no warning

    # --- errors ----------------------------------------------------------------------------

    async def test_embedder_error_carries_the_original_and_changes_nothing(self) -> None:
        original = ConnectionError("provider down")

        class Broken:
            fail = False

            def embed(self, text: str) -> list[float]:
                if self.fail:
                    raise original
                return _unit(len(text))

        broken = Broken()
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.config(), broken) as store:
                await store.store_turns([_msg("before")])
                broken.fail = True
                with pytest.raises(EmbedderError) as info:
                    await store.store_turns([_msg("x"), _msg("y")])
                assert info.value.error is original
                assert info.value.__cause__ is original
                with pytest.raises(EmbedderError) as info:
                    await store.retrieve("q", 1)
                assert info.value.error is original
                broken.fail = False
                assert _texts(await store.retrieve("before", 5)) == ["before"]

    async def test_json_error_for_unserializable_arguments_changes_nothing(self) -> None:
        args: dict[str, object] = {"ok": True}
        call = UnifiedMessage.assistant(tool_calls=[ToolCall(id="c1", name="f", arguments=args)])
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                args["when"] = {1, 2}  # mutated after construction
                with pytest.raises(
                    JsonError, match=r"arguments of tool call 'c1'\['when'\] holds a set"
                ):
                    await store.store_turns([_msg("fine"), call])
                assert store.is_empty()
                with pytest.raises(JsonError, match="metadata"):
                    await store.store_turns([_msg("fine")], metadata={"x": object()})
                assert store.is_empty()

    async def test_bad_arguments_to_store_methods(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                with pytest.raises(ConfigError, match="turns is a str"):
                    await call_unchecked(store.store_turns, "hello")
                with pytest.raises(ConfigError, match="turn 1 of the batch is a dict"):
                    await call_unchecked(store.store_turns, [_msg("a"), {"role": "user"}])
                with pytest.raises(ConfigError, match="namespace is ''"):
                    await store.store_turns([_msg("a")], namespace="")
                with pytest.raises(ConfigError, match="query is a int"):
                    await call_unchecked(store.retrieve, 5, 1)
                with pytest.raises(EmbeddingError, match="query embedding has 3 floats"):
                    await store.retrieve_embedding([1.0, 2.0, 3.0], 1)
                with pytest.raises(EmbeddingError, match="non-finite"):
                    await store.retrieve_embedding([np.nan] * _DIM, 1)
                assert store.is_empty()

    async def test_payload_bytes_is_what_the_cap_checks(self) -> None:
        # The payload and the source ("offload": 7 bytes) count against the cap.
        exact = _msg("z" * 249)
        assert payload_bytes(exact) == 249
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.store_turns([exact])  # exactly at the cap is allowed
                with pytest.raises(EntryTooLarge):
                    await store.store_turns([_msg("z" * 250)])
                await store.store_turns([_msg("z" * 255)], source="s")
                assert len(store) == 2

    async def test_a_turn_of_one_long_token_with_the_longest_id_is_stored(self) -> None:
        token = long_token(10_000)
        text = f"the marmot said {token}"
        longest, space = "t" * MAX_ID_BYTES, "n" * MAX_NAMESPACE_BYTES
        config = self.config(dimensions=64, max_entry_bytes=32_768)
        with trio.fail_after(self.timeout):
            async with self.fresh_store(config) as store:
                stored = await store.store_turns([_msg(text)], namespace=space, ids=[longest])
                assert stored.ids == [longest]
                await store.store_turns([_msg("the marmot slept")], namespace=space)
                report = await store.retrieve_in(space, text, k=1)
                assert [(h.id, h.message.text()) for h in report.turns] == [(longest, text)]
                for query, found in ((token, [longest]), ("marmot", [longest, "turn-1"])):
                    request = SearchRequest(query=query, kind="bm25", k=5, namespace=space)
                    hits = await store.search(request)
                    assert sorted(h.document.id or "" for h in hits) == sorted(found)
                with pytest.raises(ConfigError, match=f"{MAX_ID_BYTES + 1} bytes"):
                    await store.store_turns([_msg("a")], namespace=space, ids=[longest + "x"])
                with pytest.raises(ConfigError, match=f"{MAX_NAMESPACE_BYTES + 1} bytes"):
                    await store.store_turns([_msg("a")], namespace=space + "n")
                assert len(store) == 2

    # --- a crash: Poisoned -----------------------------------------------------------------

    async def test_crash_poisons_every_call_and_the_exit(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        crash = RuntimeError("boom")
        caplog.set_level(logging.ERROR)
        with trio.fail_after(self.timeout), pytest.raises(Poisoned) as exit_info:
            await self._crash_with_writes_in_flight(crash)
        assert exit_info.value.__cause__ is crash
        crash_logs = [r for r in caplog.records if "poisoned" in r.getMessage()]
        assert len(crash_logs) == 1
        assert crash_logs[0].exc_info is not None

    async def _crash_with_writes_in_flight(self, crash: BaseException) -> None:
        """One write in the actor and two queued when ``crash`` happens: all three get
        ``Poisoned``, then so does every call, and leaving the block raises it."""
        embedder = _GateEmbedder()
        embedder.gate.set()
        errors: list[BaseException] = []
        async with self.fresh_store(self.config(), embedder, inbox_size=4) as store:

            async def write(text: str) -> None:
                try:
                    await store.store_turns([_msg(text)])
                except Poisoned as error:
                    errors.append(error)

            await store.store_turns([_msg("committed")])
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
            await self._every_call_is_poisoned(store, crash)

    async def _every_call_is_poisoned(self, store: StoreUnderTest, crash: BaseException) -> None:
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.store_turns([_msg("later")]),
            lambda: store.retrieve("committed", 1),
            lambda: store.retrieve_in("memory-default", "committed", 1),
            lambda: store.retrieve_embedding(_unit(0), 1),
            lambda: store.delete(["turn-0"]),
            lambda: store.clear(),
        ]
        for call in calls:
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

    async def test_crash_does_not_tear_down_the_callers_nursery(self) -> None:
        survivor_ran = trio.Event()

        async def survivor() -> None:
            await trio.lowlevel.checkpoint()
            survivor_ran.set()

        with trio.fail_after(self.timeout):
            async with trio.open_nursery() as nursery:
                with pytest.raises(Poisoned):
                    await self._crash_while(nursery.start_soon, survivor, survivor_ran)
            assert survivor_ran.is_set()

    async def _crash_while(
        self,
        start_soon: Callable[[Callable[[], Awaitable[None]]], None],
        survivor: Callable[[], Awaitable[None]],
        survivor_ran: trio.Event,
    ) -> None:
        async with self.fresh_store() as store:
            start_soon(survivor)
            inject_crash(store)
            with pytest.raises(Poisoned):
                await store.store_turns([_msg("x")])
            await survivor_ran.wait()

    async def test_body_error_wins_and_carries_the_crash_as_a_note(self) -> None:
        with trio.fail_after(self.timeout), pytest.raises(KeyError) as info:
            await self._crash_then_raise(KeyError("body failed"))
        notes = getattr(info.value, "__notes__", [])
        assert any("poisoned" in note and "actor bug" in note for note in notes)

    async def _crash_then_raise(self, error: BaseException) -> None:
        async with self.fresh_store() as store:
            inject_crash(store, ValueError("actor bug"))
            with pytest.raises(Poisoned):
                await store.store_turns([_msg("x")])
            raise error

    async def test_body_error_is_not_wrapped_in_a_group(self) -> None:
        with trio.fail_after(self.timeout), pytest.raises(ZeroDivisionError):
            await self._raise_in_the_body(ZeroDivisionError())

    async def _raise_in_the_body(self, error: BaseException) -> None:
        async with self.fresh_store():
            raise error
