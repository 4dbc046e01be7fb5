"""The scan engine: exactness on both paths, pinning against writers, cancellation,
allocation and the BLAS thread guard."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import open_store
from actors._inmemory.actor import _Prepared
from actors._inmemory.blas import PROBE_EVERY, PROBE_FIRST, ThreadChooser, blas_threads
from actors._inmemory.scan import COALESCE_FLOATS, TIE_SLACK, ScanEngine, _chunk_candidates
from actors._inmemory.store import StoreHandle
from protocol import DEFAULT_NAMESPACE, ConfigError, Poisoned, UnifiedMessage, VectorStoreConfig

TIMEOUT = 30


# The plain kernel the scan engine replaced (argpartition, then a sort), kept here as
# the reference ranking the engine must reproduce on both of its paths.
_NEG_INF = np.float32(-np.inf)


def rank_top_k(
    scores: npt.NDArray[np.float32],
    seqs: npt.NDArray[np.int64],
    k: int,
    valid: int,
) -> npt.NDArray[np.intp]:
    """Return the indices of the best ``min(k, valid)`` scores, best first.

    ``scores`` holds ``-inf`` for every slot out of scope; ``valid`` is how many are in
    scope. Ties at the k-th boundary are resolved by sequence, so the answer does not
    depend on how ``argpartition`` happens to split equal scores.
    """
    n = scores.shape[0]
    k = min(k, valid)
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    if k >= n:
        candidates: npt.NDArray[Any] = np.arange(n)
    else:
        candidates = np.argpartition(scores, n - k)[n - k :]
        threshold = scores[candidates].min()
        # Equal scores may straddle the partition point: take them all, the sort decides.
        if np.count_nonzero(scores >= threshold) != k:
            candidates = np.flatnonzero(scores >= threshold)
    if valid < n:
        candidates = candidates[scores[candidates] != _NEG_INF]
    order = np.lexsort((-seqs[candidates], -scores[candidates]))[:k]
    result: npt.NDArray[np.intp] = candidates[order]
    return result


class TableEmbedder:
    """Returns the next rows of a fixed table, so tests choose every vector."""

    def __init__(self, table: npt.NDArray[np.float32]) -> None:
        self.table = table
        self.next = 0

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [self.table[(self.next + i) % len(self.table)] for i in range(len(texts))]
        self.next += len(texts)
        return np.asarray(rows, dtype=np.float32)

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_batch([text])[0]


def turns(count: int, tag: str = "t") -> list[UnifiedMessage]:
    return [UnifiedMessage.user(f"{tag}{i}") for i in range(count)]


def unit(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (rows / norms).astype(np.float32)


def reference(
    vectors: npt.NDArray[np.float32],
    seqs: npt.NDArray[np.int64],
    in_scope: npt.NDArray[np.bool_],
    query: npt.NDArray[np.float32],
    k: int,
) -> list[int]:
    """Float32 scores (the same product), ranked by the kernel this engine replaces."""
    scores = (vectors @ query).astype(np.float32)
    scores[~in_scope] = -np.inf
    return [int(s) for s in rank_top_k(scores, seqs, k, int(in_scope.sum()))]


# --- open_store's new argument ---------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, True, 1.5, "0", None])
async def test_thread_scan_threshold_is_validated(bad: object) -> None:
    config = VectorStoreConfig(max_entries=4, dimensions=4, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT), pytest.raises(ConfigError, match="thread_scan_threshold is"):
        async with open_store(
            config, TableEmbedder(np.eye(4, dtype=np.float32)), thread_scan_threshold=bad
        ):  # type: ignore[arg-type]
            pass


# --- both paths give the same exact answer -------------------------------------------


@pytest.mark.parametrize("threshold", [0, 1 << 40])
async def test_both_paths_match_the_reference(threshold: int) -> None:
    rng = np.random.default_rng(7)
    n, d = 300, 16
    table = unit(rng.standard_normal((n, d)))
    table[10] = table[20] = table[30]  # exact ties, broken by sequence
    table[40] = 0.0  # a zero-norm entry
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            config, TableEmbedder(table), thread_scan_threshold=threshold
        ) as store:
            stored_a = await store.store_turns(turns(150, "a"), namespace="a")
            await store.store_turns(turns(150, "b"), namespace="b")
            await store.delete(stored_a.ids[::7])  # holes below high
            actor = store._actor
            live = actor.ns_ids[:n] >= 0
            seqs = np.asarray(actor.seqs[:n])
            for trial in range(20):
                query = table[30] if trial == 0 else unit(rng.standard_normal(d))
                k = int(rng.integers(1, 40))
                for namespace in (None, "a", "b", "missing"):
                    if namespace is None:
                        scope = live
                    elif namespace == "missing":
                        scope = np.zeros(n, dtype=np.bool_)
                    else:
                        scope = actor.ns_ids[:n] == actor.arena.namespace_id(namespace)
                    report = await store.retrieve_embedding(query, k, namespace=namespace)
                    got = [actor.arena.slot_of(t.namespace, t.id) for t in report.turns]
                    assert got == reference(actor.vectors[:n], seqs, scope, query, k)
                    assert report.scanned == int(scope.sum())
                    assert all(namespace in (None, t.namespace) for t in report.turns)
            batches = actor.scans.batches
            assert (batches > 0) == (threshold == 0)


@pytest.mark.parametrize("capacity", [1, 2, 5])
async def test_thread_path_on_tiny_arenas(capacity: int) -> None:
    table = np.eye(5, 3, dtype=np.float32)
    config = VectorStoreConfig(max_entries=capacity, dimensions=3, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            empty = await store.retrieve_embedding([1.0, 0.0, 0.0], 3)
            assert empty.turns == []
            assert empty.scanned == 0
            await store.store_turns(turns(capacity))
            report = await store.retrieve_embedding([1.0, 0.0, 0.0], 10)
            assert report.scanned == capacity
            assert len(report.turns) == capacity
            assert report.turns[0].score == pytest.approx(1.0)
            zero = await store.retrieve_embedding([0.0, 0.0, 0.0], 10)
            assert [t.score for t in zero.turns] == [0.0] * capacity
            # A zero query ties everywhere: newest first.
            assert [t.sequence for t in zero.turns] == sorted(
                (t.sequence for t in zero.turns), reverse=True
            )
            assert (await store.retrieve_embedding([1.0, 0, 0], 2, namespace="nope")).turns == []


# --- writers never tear a scan running in a thread ----------------------------------


async def test_concurrent_writes_never_tear_a_threaded_scan() -> None:
    """Every write replaces the whole arena with one version's vector. A read that saw
    rows of two versions, or a payload that does not match its score, was torn."""
    n, d, versions = 4096, 256, 12
    rng = np.random.default_rng(3)
    base = rng.standard_normal((versions, d))
    table = unit(np.repeat(base, n, axis=0))
    query = unit(rng.standard_normal(d))
    expected = {v: float(table[v * n] @ query) for v in range(versions)}
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    seen_versions: set[int] = set()
    reads = 0
    with trio.fail_after(120):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns(turns(n, "v0-"))

            async def writer() -> None:
                for v in range(1, versions):
                    await store.store_turns(turns(n, f"v{v}-"))

            async def reader() -> None:
                nonlocal reads
                while store._actor.snapshot.version < versions:
                    report = await store.retrieve_embedding(query, 16)
                    text = {t.message.content[0].text.split("-")[0] for t in report.turns}  # type: ignore[union-attr]
                    assert len(text) == 1, f"a read mixed versions {text}"
                    version = int(text.pop()[1:])
                    for hit in report.turns:
                        assert hit.score == pytest.approx(expected[version], abs=1e-5)
                    assert report.scanned == n
                    seen_versions.add(version)
                    reads += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer)
                for _ in range(4):
                    nursery.start_soon(reader)
            assert not store._actor.scans.pinned
    assert reads > versions
    assert len(seen_versions) > 1  # the reads really did overlap the writes


# --- cancellation ---------------------------------------------------------------------


class Gate:
    """Holds every threaded chunk until released, to freeze a batch mid-scan."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.calls = 0
        inner = ScanEngine._score_chunk

        def gated(engine: ScanEngine, *args: Any) -> Any:
            self.calls += 1
            self.open.wait(timeout=20)
            return inner(engine, *args)

        monkeypatch.setattr(ScanEngine, "_score_chunk", gated)


async def test_cancelled_readers_do_not_break_others_or_leak_a_pin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(5)
    n, d = 64, 8
    table = unit(rng.standard_normal((n, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    queries = unit(rng.standard_normal((5, d)))
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
            await store.store_turns(turns(n))
            expected = [
                [t.id for t in (await store.retrieve_embedding(q, 5)).turns] for q in queries
            ]
            engine = store._actor.scans
            gate = Gate(monkeypatch)
            results: dict[int, list[str]] = {}
            scopes = {i: trio.CancelScope() for i in range(5)}

            async def read(i: int) -> None:
                with scopes[i]:
                    report = await store.retrieve_embedding(queries[i], 5)
                    results[i] = [t.id for t in report.turns]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, 0)  # runs alone, held at the gate
                nursery.start_soon(read, 1)
                await trio.testing.wait_all_tasks_blocked()
                assert engine.pinned
                for i in (2, 3, 4):  # queued behind the running batch
                    nursery.start_soon(read, i)
                await trio.testing.wait_all_tasks_blocked()
                scopes[1].cancel()  # cancelled while its batch runs
                scopes[3].cancel()  # cancelled while queued
                await trio.testing.wait_all_tasks_blocked()
                gate.open.set()
            assert results == {i: expected[i] for i in (0, 2, 4)}
            assert engine.largest_batch == 2  # 0 and 1, then 2 and 4
            assert not engine.pinned
            # A write goes through: no pin leaked.
            await store.store_turns(turns(1, "after"))


class HandingEmbedder:
    """An async embedder that hands out one array it keeps (and may change later)."""

    def __init__(self, d: int) -> None:
        self.rows = np.zeros((0, d), dtype=np.float32)

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.rows

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.rows[0]


async def test_a_write_waiting_on_a_pin_keeps_the_vectors_it_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A float32 batch is normalized as it is committed, from the embedder's own
    array. A write that must wait for a pinned scan copies it first: a change to that
    array while the write waits never reaches the arena."""
    n, d = 8, 4
    embedder = HandingEmbedder(d)
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, embedder, thread_scan_threshold=0) as store:
            embedder.rows = np.eye(d, dtype=np.float32)
            await store.store_turns(turns(d))
            gate = Gate(monkeypatch)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.retrieve_embedding, np.ones(d), 2)
                await trio.testing.wait_all_tasks_blocked()
                assert store._actor.scans.pinned
                embedder.rows = np.full((1, d), 2.0, dtype=np.float32)
                nursery.start_soon(store.store_turns, turns(1, "late"))
                await trio.testing.wait_all_tasks_blocked()  # validated; waits on the pin
                embedder.rows[:] = np.nan  # the embedder changes its array meanwhile
                gate.open.set()
            assert len(store) == d + 1
            np.testing.assert_array_equal(store._actor.arena.vectors[d], np.full(d, 0.5))


async def test_a_crash_copying_a_write_that_waits_on_a_pin_poisons_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy a write takes before it waits for a pinned scan does the commit's
    arithmetic early, so it may crash as a commit can: that poisons the store (the
    caller gets Poisoned), and the caller's nursery is not torn down."""
    n, d = 8, 4
    embedder = HandingEmbedder(d)
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)

    def broken(self: object) -> object:
        raise FloatingPointError("underflow encountered in multiply")

    outcome: dict[str, BaseException] = {}

    async def write(store: StoreHandle) -> None:
        try:
            await store.store_turns(turns(1, "late"))
        except Poisoned as error:
            outcome["write"] = error

    with trio.fail_after(TIMEOUT):
        with pytest.raises(Poisoned):
            async with open_store(config, embedder, thread_scan_threshold=0) as store:
                embedder.rows = np.eye(d, dtype=np.float32)
                await store.store_turns(turns(d))
                gate = Gate(monkeypatch)
                monkeypatch.setattr(_Prepared, "detached", broken)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.retrieve_embedding, np.ones(d), 2)
                    await trio.testing.wait_all_tasks_blocked()
                    assert store._actor.scans.pinned
                    embedder.rows = np.full((1, d), 2.0, dtype=np.float32)
                    nursery.start_soon(write, store)
                    await trio.testing.wait_all_tasks_blocked()
                    gate.open.set()
                assert isinstance(outcome["write"], Poisoned)
                assert isinstance(outcome["write"].__cause__, FloatingPointError)
                assert len(store._actor.arena.ids) == n  # nothing was half written
                assert store._actor.snapshot.live == d


async def test_an_ndarray_subclass_from_the_embedder_is_stored_row_by_row() -> None:
    """A subclass may redefine ``*`` (np.matrix makes it a matrix product): it takes the
    general path, so consecutive and scattered slots both store each row normalized."""
    d = 4
    rows = np.arange(1, 1 + 3 * d, dtype=np.float32).reshape(3, d)

    class Product(np.ndarray):
        def __mul__(self, other: Any) -> Any:
            return np.asarray(self) @ np.asarray(other)

    class ProductEmbedder:
        async def embed_documents(self, texts: Sequence[str]) -> Any:
            return rows[: len(texts)].copy().view(Product)

        async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
            return np.ones(d, dtype=np.float32)

    config = VectorStoreConfig(max_entries=8, dimensions=d, max_entry_bytes=100)
    expected = rows / np.linalg.norm(rows.astype(np.float64), axis=1, keepdims=True)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, ProductEmbedder()) as store:
            first = await store.store_turns(turns(3))
            np.testing.assert_allclose(store._actor.arena.vectors[:3], expected, rtol=1e-6)
            await store.delete([first.ids[0], first.ids[2]])
            again = await store.store_turns(turns(2, "again"))  # into slots 0 and 2
            arena = store._actor.arena
            slots = [arena.slot_of(DEFAULT_NAMESPACE, entry_id) for entry_id in again.ids]
            assert set(slots) == {0, 2}
            np.testing.assert_allclose(arena.vectors[slots], expected[:2], rtol=1e-6)


async def test_close_fails_queued_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    n, d = 16, 4
    table = unit(np.random.default_rng(1).standard_normal((n, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    outcomes: dict[str, str] = {}
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outer:
            async with open_store(config, TableEmbedder(table), thread_scan_threshold=0) as store:
                await store.store_turns(turns(n))
                gate = Gate(monkeypatch)

                async def read(name: str) -> None:
                    try:
                        await store.retrieve_embedding(table[0], 3)
                        outcomes[name] = "answered"
                    except trio.ClosedResourceError:
                        outcomes[name] = "closed"

                outer.start_soon(read, "running")
                await trio.testing.wait_all_tasks_blocked()
                outer.start_soon(read, "queued-1")
                outer.start_soon(read, "queued-2")
                await trio.testing.wait_all_tasks_blocked()
                gate.open.set()
                # Leaving the block cancels the runner; a running batch still finishes
                # its thread first, so the pin holds until nothing reads the arena.
            assert not store._actor.scans.pinned
    assert outcomes["queued-1"] == outcomes["queued-2"] == "closed"
    assert outcomes["running"] in ("answered", "closed")


# --- allocation -----------------------------------------------------------------------


async def test_a_scoped_scan_does_not_copy_the_arena() -> None:
    n, d = 4096, 64
    rng = np.random.default_rng(2)
    table = unit(rng.standard_normal((n, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            config, TableEmbedder(table), thread_scan_threshold=1 << 40
        ) as store:
            await store.store_turns(turns(n // 2), namespace="a")
            await store.store_turns(turns(n // 2), namespace="b")
            query = table[0]
            await store.retrieve_embedding(query, 8, namespace="a")  # warm the buffers
            tracemalloc.start()
            try:
                await store.retrieve_embedding(query, 8, namespace="a")
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    # Not even one scores vector (n × 4 bytes) is allocated per query, let alone the
    # arena (n × d × 4): the scores, flags and partition scratch are reused.
    assert peak < n * 4


# --- BLAS threads ---------------------------------------------------------------------


async def test_threaded_scans_restore_the_blas_thread_count() -> None:
    libs = blas_threads.libraries()
    before = [lib.get_num_threads() for lib in libs]
    n, d = 2048, 1024  # over the inline BLAS limit and over the split size
    table = unit(np.random.default_rng(4).standard_normal((64, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            config, TableEmbedder(table), thread_scan_threshold=0, blas_threads="auto"
        ) as store:
            await store.store_turns(turns(n))
            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(store.retrieve_embedding, table[i], 4)
    assert [lib.get_num_threads() for lib in libs] == before
    assert blas_threads._holders == 0


def test_acquire_without_single_leaves_the_count_and_joins_a_holder() -> None:
    libs = blas_threads.libraries()
    before = [lib.get_num_threads() for lib in libs]
    configured_single = all(count == 1 for count in before)
    assert blas_threads.acquire(False) == configured_single
    assert [lib.get_num_threads() for lib in libs] == before
    blas_threads.release()
    assert blas_threads.acquire(True)
    # A holder that joins gets the setting in force, not the one it asked for.
    assert blas_threads.acquire(False)
    assert all(lib.get_num_threads() == 1 for lib in libs)
    blas_threads.release()
    blas_threads.release()
    assert [lib.get_num_threads() for lib in libs] == before
    assert blas_threads._holders == 0


def drive(chooser: ThreadChooser, cost: dict[bool, float], scans: int) -> list[bool]:
    """Run ``scans`` scans of 2**20 floats, each costing ``cost[single]`` per float."""
    floats = 1 << 20
    used = []
    for _ in range(scans):
        single = chooser.single(floats, 0)
        chooser.record(floats, 0, single, cost[single] * floats)
        used.append(single)
    return used


def test_the_chooser_follows_the_load_both_ways() -> None:
    chooser = ThreadChooser()
    quiet = {False: 1.0, True: 1.5}  # two threads win
    busy = {False: 8.0, True: 1.6}  # two threads stall
    used = drive(chooser, quiet, 200)
    assert used[: PROBE_FIRST - 1] == [False] * (PROBE_FIRST - 1)
    assert used[PROBE_FIRST - 1]  # the first probe tries one thread, and loses
    assert sum(used) <= 1 + 200 // PROBE_EVERY
    assert not any(used[-PROBE_EVERY:-1])
    used = drive(chooser, busy, 200)
    assert used.index(True) <= 3  # three stalls of five move it to one thread
    assert sum(not u for u in used) <= 2 + 200 // PROBE_EVERY  # the probes back
    used = drive(chooser, quiet, 600)
    first = used.index(False)
    assert first < 256  # a probe finds the quiet machine within the longest back-off
    assert all(not u for u in used[first + 1 : first + PROBE_EVERY])


def test_preempted_one_thread_scans_do_not_flip_the_choice() -> None:
    # Busy: two threads stall (12), one thread is fast (1.6) but preempted now and then,
    # twice in a row (13): about as slow as a stall, which must not look like one.
    chooser = ThreadChooser()
    floats = 1 << 20
    drive(chooser, {False: 12.0, True: 1.6}, 40)
    used = []
    for i in range(200):
        single = chooser.single(floats, 0)
        cost = (13.0 if i % 20 in (0, 1) else 1.6) if single else 12.0
        chooser.record(floats, 0, single, cost * floats)
        used.append(single)
    assert sum(not u for u in used) <= 200 // PROBE_EVERY  # only the probes


def test_the_chooser_keeps_size_classes_and_paths_apart() -> None:
    chooser = ThreadChooser()
    big, small = 1 << 24, 1 << 20
    one, many = ThreadChooser.path(1), ThreadChooser.path(64)
    for _ in range(3):
        chooser.record(big, one, False, 8.0 * big)
        chooser.record(big, one, True, 1.0 * big)
        chooser.record(small, one, False, 1.0 * small)
        chooser.record(big, many, False, 1.0 * big)
    assert chooser.classes[(big.bit_length(), one)].single
    assert not chooser.classes[(small.bit_length(), one)].single
    assert not chooser.classes[(big.bit_length(), many)].single
    assert (big.bit_length(), 0) not in chooser.classes
    assert chooser.current(big, one) and not chooser.current(big, 0)


# --- coalescing mid-size reads that start together -------------------------------------


async def test_mid_size_reads_run_inline_alone_and_coalesce_together() -> None:
    d = 1024
    n = COALESCE_FLOATS // d  # big enough to share a GEMM, under the thread threshold
    rng = np.random.default_rng(12)
    table = unit(rng.standard_normal((n, d)))
    queries = unit(rng.standard_normal((6, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, TableEmbedder(table)) as store:
            await store.store_turns(turns(n))
            engine = store._actor.scans
            alone = [await store.retrieve_embedding(q, 5) for q in queries]
            assert engine.batches == 0  # a lone read never waits for company
            together: dict[int, Any] = {}

            async def read(i: int) -> None:
                together[i] = await store.retrieve_embedding(queries[i], 5)

            async with trio.open_nursery() as nursery:
                for i in range(len(queries)):
                    nursery.start_soon(read, i)
            assert engine.batches == 1
            assert engine.largest_batch == len(queries)
            for i, report in enumerate(alone):
                assert [t.id for t in together[i].turns] == [t.id for t in report.turns]
                assert [t.score for t in together[i].turns] == [t.score for t in report.turns]
            assert engine._arriving == 0
            # A read cancelled at its checkpoint leaves no arrival behind, so the next
            # lone read still runs inline.
            with trio.CancelScope() as cancelled:
                cancelled.cancel()
                await store.retrieve_embedding(queries[0], 5)
            assert engine._arriving == 0
            await store.retrieve_embedding(queries[0], 5)
            assert engine.batches == 1


# --- masks (the seam for metadata filters) ------------------------------------------


@pytest.mark.parametrize("threshold", [0, 1 << 40])
async def test_a_mask_narrows_the_scope_on_both_paths(threshold: int) -> None:
    rng = np.random.default_rng(9)
    n, d = 200, 8
    table = unit(rng.standard_normal((n, d)))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            config, TableEmbedder(table), thread_scan_threshold=threshold
        ) as store:
            await store.store_turns(turns(n // 2), namespace="a")
            await store.store_turns(turns(n // 2), namespace="b")
            actor = store._actor
            engine = actor.scans
            seqs = np.asarray(actor.seqs[:n])
            mask = rng.random(n) < 0.3
            a_id = actor.arena.namespace_id("a")
            for namespace, scope in ((None, mask), ("a", mask & (actor.ns_ids[:n] == a_id))):
                for given in (mask, lambda snap: mask):
                    report = await engine.scan(table[0], 12, namespace, mask=given)
                    got = [actor.arena.slot_of(t.namespace, t.id) for t in report.turns]
                    assert got == reference(actor.vectors[:n], seqs, scope, table[0], 12)
                    assert report.scanned == int(scope.sum())
            with pytest.raises(ValueError, match="scan mask has shape"):
                await engine.scan(table[0], 3, None, mask=np.ones(3, dtype=np.bool_))


@pytest.mark.parametrize("threshold", [0, 1 << 40], ids=["threaded", "inline"])
async def test_identical_vectors_tie_exactly_and_the_newest_wins(threshold: int) -> None:
    # Candidates are re-scored in float64, the same way for every row, so duplicates
    # tie exactly whatever BLAS kernel scored them, alone or coalesced with other reads.
    rng = np.random.default_rng(11)
    d, n, distinct = 96, 480, 7
    base = rng.standard_normal((distinct, d)).astype(np.float32)
    table = np.stack([base[i % distinct] for i in range(n)])
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=100)
    queries = base + 0.3 * rng.standard_normal((distinct, d)).astype(np.float32)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            config, TableEmbedder(table), thread_scan_threshold=threshold
        ) as store:
            await store.store_turns(turns(n))
            reports: dict[int, Any] = {}

            async def read(i: int) -> None:
                reports[i] = await store.retrieve_embedding(queries[i], n)

            async with trio.open_nursery() as nursery:
                for i in range(distinct):
                    nursery.start_soon(read, i)
    for report in reports.values():
        groups: dict[int, list[tuple[float, int]]] = {}
        for hit in report.turns:
            groups.setdefault(hit.sequence % distinct, []).append((hit.score, hit.sequence))
        for members in groups.values():
            assert len({score for score, _ in members}) == 1
            sequences = [seq for _, seq in members]
            assert sequences == sorted(sequences, reverse=True)


# --- the bounded selection gives the full partition's candidates ----------------------


def full_partition_candidates(row: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Every in-scope entry at or within TIE_SLACK of the k-th best score (all of them
    when fewer than k are in scope): what the whole-row partition returns."""
    in_scope = np.flatnonzero(row > _NEG_INF)
    if in_scope.shape[0] <= k:
        return in_scope
    kth = np.sort(row)[row.shape[0] - k]
    return np.flatnonzero(row >= kth - TIE_SLACK)


@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 40),
    per_hit=st.integers(1, 12),
    levels=st.integers(1, 6),
    masked_share=st.sampled_from([0.0, 0.1, 0.5, 0.95]),
    sorted_row=st.booleans(),
)
@settings(max_examples=400, deadline=None)
def test_bounded_selection_matches_the_full_partition(
    seed: int, k: int, per_hit: int, levels: int, masked_share: float, sorted_row: bool
) -> None:
    # Rows of 1 to 12 entries per wanted hit cover both sides of GROUPED_SELECT_MIN. A
    # few levels, each jittered by less and more than TIE_SLACK, put ties and near-ties
    # at the k-th score and at the groups' bound; a sorted row puts every good score in
    # one group (the bound's worst case); -inf marks entries out of scope.
    rng = np.random.default_rng(seed)
    n = k * per_hit + int(rng.integers(0, k))
    jitter = rng.choice([0.0, 0.5, 1.0, 1.5, 2.0, 3.0], n) * float(TIE_SLACK)
    row = (rng.integers(0, levels, n) / levels + jitter).astype(np.float32)
    if sorted_row:
        row.sort()
    row[rng.random(n) < masked_share] = _NEG_INF
    masked = bool((row == _NEG_INF).any())
    part, flags = np.empty(n, np.float32), np.empty(n, np.bool_)
    got = _chunk_candidates(row.copy(), k, masked, part, flags)
    want = full_partition_candidates(row, k) if k < n else np.flatnonzero(row > _NEG_INF)
    assert got.tolist() == want.tolist()
