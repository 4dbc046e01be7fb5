"""The scan engine: exact top-k reads, coalesced, pinned and moved off the trio thread.

A read asks for the ``k`` best live entries in its scope (every namespace, one
namespace, optionally narrowed by a per-slot boolean mask). The engine answers in one of
two ways:

- **Inline.** A lone scan over fewer than ``thread_threshold`` floats (rows × dimensions,
  2**24 by default: about 3 ms of scan) runs synchronously on the trio thread, as soon
  as it is asked for. It has no await, so no commit can interleave with it.
- **In worker threads.** A bigger scan is queued for the engine's runner task, which
  lives in the store's nursery. So are reads of at least ``COALESCE_FLOATS`` that start
  together (in one scheduler tick: each says so before its checkpoint) or while a batch
  is running. The runner takes every read that is waiting (up to ``max_batch``), scores
  them all in one matrix product (GEMM) on one snapshot, and ranks each caller's own
  top-k with its own scope. Only one such batch runs at a time per store. A lone read
  starts at once: the runner never waits for company, it only gathers the reads that
  arrived together or while the previous batch was running.

**Pinning.** While a batch runs in threads, the engine holds a pin. The store's writer
calls :meth:`ScanEngine.wait_unpinned` just before its synchronous commit, so a commit
never overwrites rows under a running scan. While a writer waits, the runner starts no
new batch, so a steady stream of reads cannot starve writes. The hits are built (payloads
decoded) before the pin is dropped, so they match the scores.

**Threads.** On this 2-core machine a two-thread OpenBLAS call stalls for 8–28 ms
whenever the other core is busy, while on a quiet machine it is about 1.5× faster than
one thread. So every scan of at least ``BLAS_SINGLE_BELOW`` floats asks a
:class:`ThreadChooser` (``blas.py``), which follows the measured times of recent scans,
whether to run on one core or to leave BLAS as configured. How a scan gets one core
is the store's :class:`BlasControl`:

- **By default** nothing process-wide changes: a one-core scan calls BLAS on row blocks
  of fewer than ``BLAS_SINGLE_BELOW`` floats, which OpenBLAS runs on the calling thread
  by its own size rule; a batch of several queries scores each block for every query
  in turn while the block is in cache. BLAS as configured is one call over the arena
  (a batch: one GEMM), with whatever threads the process gave BLAS.
- **With** ``blas_threads="auto"`` a one-core scan holds OpenBLAS's process-wide thread
  count at one (``BlasThreads``) and makes one call (a batch: one GEMM).

Either way, a one-core threaded batch over at least ``2 × SPLIT_FLOATS`` floats is
split by rows into one chunk per core, each scored and ranked in its own worker thread,
and the per-chunk candidates are merged exactly: that split degrades to the
single-thread time under load, because a thread that finishes its half frees its core.
With BLAS as configured, the batch runs in one worker thread and BLAS splits it.

**Allocation.** Scores, the partition scratch and the scope flags live in buffers that
are allocated once per store and reused, since only one batch runs at a time. Masking
writes ``-inf`` into the scores in place; the arena is never copied. A query allocates
its candidates (about ``k`` indices per chunk) and its results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .arena import Snapshot
from .blas import BLAS_SINGLE_BELOW, BlasControl, LeaveThreads, ThreadChooser, cores

__all__ = [
    "COALESCE_FLOATS",
    "DEFAULT_THREAD_SCAN_THRESHOLD",
    "SPLIT_FLOATS",
    "ScanEngine",
    "ScanResult",
]

#: Scans over at least this many floats run in worker threads; a smaller lone read runs
#: inline on the trio thread. This bounds how long a read may hold the trio loop: 2**24
#: float32 (64 MiB, for example 16384 × 1024 or 8192 × 2048) take about 3 ms on two
#: OpenBLAS threads here, 4.5 ms on one. Below it, moving the scan to a thread costs
#: more than it frees: a trio thread round trip is 0.2–0.35 ms here and a BLAS call from
#: a fresh worker thread about 0.3 ms more, which is 40% of an 8192 × 768 scan (1.2 ms).
DEFAULT_THREAD_SCAN_THRESHOLD = 1 << 24

#: Reads of at least this many floats (4 MiB, about 250 µs of scan) that start together
#: are coalesced into one GEMM in worker threads, whatever ``thread_threshold`` says: a
#: GEMM of B queries reads the arena once instead of B times. Smaller reads always run
#: inline, where a thread round trip would cost more than the scan.
COALESCE_FLOATS = 1 << 20

#: Each row chunk of a threaded scan covers at least this many floats; smaller chunks
#: cost more in thread round trips than the second core gives back.
SPLIT_FLOATS = 1 << 20

_NEG_INF = np.float32(-np.inf)

#: How far below the k-th float32 score a candidate may be and still be re-scored.
#: OpenBLAS sums a row in an order that depends on where the row sits (its kernels
#: block rows), so two identical vectors in different rows can score a few ulps apart
#: (seen: 0.020396173 and 0.020396158); 2e-6 is far above that noise for unit vectors.
TIE_SLACK = np.float32(2e-6)
_NO_CANDIDATES = np.empty(0, dtype=np.intp)

#: Candidates re-scored in reused scratch; more (a big k, many ties) allocate, a block
#: of at most ``EXACT_FLOATS`` float64 products (512 KiB) at a time, so that many tied
#: candidates (zero-norm entries, repeated texts) never need memory near the arena's. A
#: coalesced batch re-scores all its reads' candidates in one gather when they come to
#: at most ``BATCH_EXACT_FLOATS`` (8 MiB of float64), and read by read otherwise.
EXACT_ROWS = 32
EXACT_FLOATS = 1 << 16
BATCH_EXACT_FLOATS = 1 << 20

Mask = npt.NDArray[np.bool_]


def _lot() -> trio.lowlevel.ParkingLot:
    return trio.lowlevel.ParkingLot()


@attrs.frozen
class ScanResult:
    """One caller's answer: slots best first, their scores, and how many were scored."""

    slots: npt.NDArray[np.intp]
    scores: npt.NDArray[np.float32]
    scanned: int


@attrs.define(eq=False)
class _Request:
    query: npt.NDArray[np.float32] | None
    k: int
    namespace: str | None
    mask: Mask | Callable[[Snapshot], Mask | None] | None
    build: Callable[[ScanResult], Any]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: object = None
    error: BaseException | None = None
    abandoned: bool = False


@attrs.define(eq=False)
class _Scope:
    """A request's scope resolved against the batch's snapshot (on the trio thread)."""

    ns_id: int | None  # None: every namespace; -2: a namespace with no entries
    mask: Mask | None
    valid: int  # in-scope live entries; -1 when a mask makes it unknown until the scan


#: The bounded selection of :func:`_chunk_candidates` runs when a row holds at least this
#: many entries per wanted hit (below, its groups are too small to bound anything).
GROUPED_SELECT_MIN = 8


def _chunk_candidates(
    row: npt.NDArray[np.float32],
    k: int,
    masked: bool,
    part: npt.NDArray[np.float32],
    flags: Mask,
) -> npt.NDArray[np.intp]:
    """Indices into ``row`` of its best ``k`` scores, plus every score within
    ``TIE_SLACK`` of the k-th, in ascending order.

    Out-of-scope entries hold ``-inf`` and are never returned. ``part`` and ``flags`` are
    scratch of ``row``'s length. Ties are all kept so that the merge can break them by
    sequence, which makes the answer independent of how the partition splits them.

    The k-th score is found without partitioning the whole row: the row is cut into
    ``k`` contiguous groups, and the lowest of the groups' maxima is a lower bound on
    the k-th score (those maxima are ``k`` distinct entries at or above it). Only the
    entries at or above that bound take part in the partition: a few times ``k`` on
    real data, against the whole row. The answer is the same set as the full
    partition's; a group with nothing in scope (its maximum ``-inf``) falls back to it.
    """
    n = row.shape[0]
    if k < n:
        if n >= GROUPED_SELECT_MIN * k:
            width = n // k
            bound = row[: width * k].reshape(k, width).max(axis=1).min()
            if bound != _NEG_INF:
                np.greater_equal(row, bound - TIE_SLACK, out=flags)
                candidates = np.flatnonzero(flags)
                values = row[candidates]
                # Every entry at or above the k-th score is a candidate, so the k-th
                # best candidate is the k-th best entry.
                threshold = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
                kept: npt.NDArray[np.intp] = candidates[values >= threshold - TIE_SLACK]
                return kept
        np.copyto(part, row)
        part.partition(n - k)
        threshold = part[n - k]
        if threshold == _NEG_INF:
            # Fewer than k entries are in scope here: take exactly those.
            np.greater(row, _NEG_INF, out=flags)
        else:
            # Everything within TIE_SLACK of the k-th score is re-scored exactly (see
            # ScanEngine._exact), so BLAS noise cannot decide a tie.
            np.greater_equal(row, threshold - TIE_SLACK, out=flags)
        return np.flatnonzero(flags)
    if masked:
        np.greater(row, _NEG_INF, out=flags)
        return np.flatnonzero(flags)
    return np.arange(n)


def rank_candidates(
    candidates: npt.NDArray[np.intp],
    scores: npt.NDArray[np.float32] | npt.NDArray[np.float64],
    seqs: npt.NDArray[np.int64],
    k: int,
) -> npt.NDArray[np.intp]:
    """Rank ``candidates`` (slots) by score descending, ties to the newest; keep ``k``."""
    order = np.lexsort((-seqs[candidates], -scores))[:k]
    result: npt.NDArray[np.intp] = order
    return result


def scores_into(
    rows: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    blocks: bool,
) -> None:
    """``out[i] = rows @ queries[i]`` for every query (``out`` is queries × rows).

    With ``blocks``, BLAS is called on row blocks of fewer than ``BLAS_SINGLE_BELOW``
    floats, which OpenBLAS runs on the calling thread (a block of several queries is
    scored for each query in turn while it is in cache). Without, one call: a matvec,
    or one GEMM for several queries, with BLAS's threads as they are.
    """
    b, length = out.shape
    if not blocks:
        if b == 1:
            np.matmul(rows, queries[0], out=out[0])
        else:
            np.matmul(queries, rows.T, out=out)
        return
    # Never a GEMM here: OpenBLAS threads any GEMM past 2**18 multiply-adds, far below
    # a block worth scoring several queries against.
    step = max(1, BLAS_SINGLE_BELOW // rows.shape[1])
    for lo in range(0, length, step):
        block = rows[lo : lo + step]
        for i in range(b):
            np.matmul(block, queries[i], out=out[i, lo : lo + step])


@attrs.define(eq=False)
class ScanEngine:
    """Scores and ranks reads against one arena, one batch at a time.

    Args:
        vectors, seqs, ns_ids: read-only views of the arena's arrays.
        snapshot: returns the last published snapshot.
        namespace_id: maps a namespace to its per-slot id, or None when it has no entry.
        build: turns one caller's :class:`ScanResult` into its reply; called on the trio
            thread while the rows are still pinned.
        check_usable: raises (``Poisoned``) when the store may no longer be read.
        on_crash: told about an unexpected exception in a batch, which poisons the store.
        thread_threshold: scans over at least this many floats run in worker threads.
        blas: how a one-core scan gets one core (:class:`BlasControl`); the default
            never changes the process's BLAS thread count.
    """

    vectors: npt.NDArray[np.float32]
    seqs: npt.NDArray[np.int64]
    ns_ids: npt.NDArray[np.int32]
    snapshot: Callable[[], Snapshot]
    namespace_id: Callable[[str], int | None]
    build: Callable[[ScanResult], Any]
    check_usable: Callable[[], None]
    on_crash: Callable[[BaseException], BaseException]
    thread_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD
    blas: BlasControl = attrs.field(factory=LeaveThreads)
    workers: int = attrs.field(factory=cores)
    max_batch: int = attrs.field(init=False)
    batches: int = attrs.field(init=False, default=0)
    largest_batch: int = attrs.field(init=False, default=0)
    _pending: list[_Request] = attrs.field(init=False, factory=list)
    _busy: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _pins: int = attrs.field(init=False, default=0)
    _writers: int = attrs.field(init=False, default=0)
    _runner_lot: trio.lowlevel.ParkingLot = attrs.field(init=False, factory=_lot)
    _writer_lot: trio.lowlevel.ParkingLot = attrs.field(init=False, factory=_lot)
    _scores: npt.NDArray[np.float32] = attrs.field(init=False)
    _part: npt.NDArray[np.float32] = attrs.field(init=False)
    _flags: Mask = attrs.field(init=False)
    _scope_flags: Mask = attrs.field(init=False)
    _products: npt.NDArray[np.float64] = attrs.field(init=False)
    chooser: ThreadChooser = attrs.field(init=False, factory=ThreadChooser)
    _arriving: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        capacity, dimensions = self.vectors.shape
        capacity = max(capacity, 1)
        # A batch's scores are max_batch × capacity floats: keep them within a quarter of
        # the arena (or 1 MiB for a tiny one), and at most 64 queries per GEMM.
        budget = max(capacity * dimensions // 4, 1 << 18)
        self.max_batch = int(min(64, max(1, budget // capacity)))
        self._scores = np.empty(0, dtype=np.float32)
        self._part = np.empty(capacity, dtype=np.float32)
        self._flags = np.empty(capacity, dtype=np.bool_)
        self._scope_flags = np.empty(capacity, dtype=np.bool_)
        # The exact re-score's products: enough rows for a usual k and its ties.
        self._products = np.empty((min(capacity, EXACT_ROWS), dimensions), dtype=np.float64)

    # --- the caller's side -------------------------------------------------------------

    async def scan(
        self,
        query: npt.NDArray[np.float32] | None,
        k: int,
        namespace: str | None = None,
        mask: Mask | Callable[[Snapshot], Mask | None] | None = None,
        build: Callable[[ScanResult], Any] | None = None,
    ) -> Any:
        """Score ``query`` against every live entry in scope and return ``build``'s reply.

        ``query`` is a unit float32 vector, or None for a zero query (every score 0.0).
        ``mask``, when given, is indexed by slot (``True``: in scope), or a function that
        makes one from the snapshot the scan runs on (None: no mask); it narrows the
        namespace scope.
        ``build``, when given, replaces the engine's ``build`` for this read; it runs on
        the trio thread while the rows are pinned, so it may read the arena.

        A big scan waits for the runner: if the caller is cancelled while it is queued or
        running, its answer is dropped and nothing else is affected. Raises whatever
        ``check_usable`` raises, and ``trio.ClosedResourceError`` once the store closes.
        """
        width = self.vectors.shape[1]
        # Reads big enough to gain from sharing a GEMM say so before the checkpoint, so
        # that reads started together (in one scheduler tick) find each other after it.
        company = self.snapshot().high * width >= COALESCE_FLOATS
        if company:
            self._arriving += 1
        try:
            # A checkpoint like any trio call (the inline path has no other), taken
            # before the snapshot is read so the scan sees every commit made before it.
            await trio.lowlevel.checkpoint()
        finally:
            if company:
                self._arriving -= 1
        snap = self.snapshot()
        if (
            not self._busy
            and not self._pending
            and not (company and self._arriving)
            and (snap.high * width < self.thread_threshold)
        ):
            # Inline: nothing else is using the buffers, and no await until we return.
            self.check_usable()
            reply = self.build if build is None else build
            if callable(mask):
                # Resolved on this snapshot, with no await until the scan: a function
                # that finds nothing to mask (None) keeps the unmasked fast path.
                mask = mask(snap)
            if mask is None:
                return reply(self._inline(query, k, namespace, snap))
            request = _Request(query=query, k=k, namespace=namespace, mask=mask, build=reply)
            return reply(self._run_inline(request, snap)[0])
        request = _Request(
            query=query,
            k=k,
            namespace=namespace,
            mask=mask,
            build=self.build if build is None else build,
        )
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        self._pending.append(request)
        self._runner_lot.unpark_all()
        try:
            await request.done.wait()
        except BaseException:
            # Queued: leave the queue. Running: the runner sees the flag and drops it.
            request.abandoned = True
            if not request.done.is_set() and request in self._pending:
                self._pending.remove(request)
            raise
        if request.error is not None:
            raise request.error
        return request.result

    # --- the writer's side -------------------------------------------------------------

    async def wait_unpinned(self) -> None:
        """Return once no batch is scoring the arena in a thread.

        The caller must then commit with no await in between. While a writer waits, no
        new batch starts. Cancellation is safe: the wait is simply abandoned.
        """
        if self._pins == 0:
            return
        self._writers += 1
        try:
            while self._pins:
                await self._writer_lot.park()
        finally:
            self._writers -= 1
            # The runner resumes only after our caller's synchronous commit.
            self._runner_lot.unpark_all()

    @property
    def pinned(self) -> bool:
        """Whether a batch is scoring the arena in worker threads right now."""
        return self._pins > 0

    # --- the runner --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The runner task: one batch at a time, until cancelled (the store closing)."""
        task_status.started()
        try:
            while True:
                while not self._pending or self._writers:
                    await self._runner_lot.park()
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                await self._run_batch(batch)
        finally:
            self._closed = True
            closed = trio.ClosedResourceError("the store closed before this read ran")
            for request in self._pending:
                self._fail(request, closed)
            self._pending.clear()

    async def _run_batch(self, batch: list[_Request]) -> None:
        try:
            self.check_usable()
        except Exception as error:
            for request in batch:
                self._fail(request, error)
            return
        self._busy = True
        self._pins += 1
        try:
            snap = self.snapshot()
            scopes: list[_Scope] = []
            for request in list(batch):
                try:
                    scopes.append(self._resolve(request, snap))
                except ValueError as error:
                    self._fail(request, error)
                    batch.remove(request)
            try:
                results = await self._score_in_threads(batch, scopes, snap)
                # Still pinned: the hits are built from the rows that were scored.
                for request, result in zip(batch, results, strict=True):
                    if not request.abandoned:
                        request.result = request.build(result)
                        request.done.set()
            except Exception as crash:
                poisoned = self.on_crash(crash)
                for request in batch:
                    self._fail(request, poisoned)
            self.batches += 1
            self.largest_batch = max(self.largest_batch, len(batch))
        except BaseException:
            closed = trio.ClosedResourceError("the store closed while this read ran")
            for request in batch:
                self._fail(request, closed)
            raise
        finally:
            self._pins -= 1
            self._busy = False
            self._writer_lot.unpark_all()

    @staticmethod
    def _fail(request: _Request, error: BaseException) -> None:
        if not request.done.is_set():
            request.error = error
            request.done.set()

    # --- scoring -----------------------------------------------------------------------

    def _resolve(self, request: _Request, snap: Snapshot) -> _Scope:
        # Resolved at batch time, never at request time: a namespace id freed by a clear
        # may be reused by another namespace while the read is queued.
        mask = request.mask(snap) if callable(request.mask) else request.mask
        if mask is not None:
            mask = np.asarray(mask, dtype=np.bool_)
            if mask.ndim != 1 or mask.shape[0] < snap.high:
                raise ValueError(
                    f"scan mask has shape {mask.shape}; expected a flat bool array of at "
                    f"least {snap.high} slots"
                )
        if request.namespace is None:
            return _Scope(None, mask, -1 if mask is not None else snap.live)
        count = snap.namespace_counts.get(request.namespace, 0)
        ns_id = self.namespace_id(request.namespace) if count else None
        if ns_id is None:
            return _Scope(-2, None, 0)
        return _Scope(ns_id, mask, -1 if mask is not None else count)

    def _inline(
        self,
        query: npt.NDArray[np.float32] | None,
        k: int,
        namespace: str | None,
        snap: Snapshot,
    ) -> ScanResult:
        """One unmasked query, inline: the general path without its per-batch overhead,
        which is a good part of a small read's cost."""
        n = snap.high
        if namespace is None:
            valid, ns_id = snap.live, None
        else:
            valid = snap.namespace_counts.get(namespace, 0)
            ns_id = self.namespace_id(namespace) if valid else None
        if valid == 0:
            return ScanResult(_NO_CANDIDATES, np.empty(0, dtype=np.float32), 0)
        self._ensure_scores(1, n)
        row = self._scores[:n]
        if query is None:
            row.fill(0.0)
        else:
            floats = n * self.vectors.shape[1]
            if floats < BLAS_SINGLE_BELOW:
                np.matmul(self.vectors[:n], query, out=row)
            else:
                single = self.blas.acquire(self.chooser.single(floats, 0))
                try:
                    start = time.perf_counter()
                    scores_into(
                        self.vectors[:n], query[None, :], row[None, :], single and self.blas.blocks
                    )
                    elapsed = time.perf_counter() - start
                finally:
                    self.blas.release()
                self.chooser.record(floats, 0, single, elapsed)
        flags = self._scope_flags[:n]
        masked = True
        if ns_id is not None:
            np.not_equal(self.ns_ids[:n], ns_id, out=flags)
        elif not snap.dense:
            np.less(self.ns_ids[:n], 0, out=flags)
        else:
            masked = False
        if masked:
            np.copyto(row, _NEG_INF, where=flags)
        k = min(k, valid)
        local = _chunk_candidates(row, k, masked, self._part[:n], self._flags[:n])
        exact = self._exact(local, query)
        order = rank_candidates(local, exact, self.seqs, k)
        return ScanResult(local[order], exact[order], valid)

    def _exact(
        self, slots: npt.NDArray[np.intp], query: npt.NDArray[np.float32] | None
    ) -> npt.NDArray[np.float32]:
        """The candidates' scores again, computed the same way for every row, then
        rounded to float32: the scores callers see, and rank by.

        Products of two float32 values are exact in float64, and a reduction along a
        row sums it the same way wherever the row sits, so identical vectors score
        identically and the tie goes to the sequence, as design §3 says. Ranking on the
        rounded score keeps that true for scores that differ only below float32's
        precision. It costs ``len(slots) × dimensions`` multiply-adds: about k of them,
        in blocks of bounded scratch when there are many ties.
        """
        m = slots.shape[0]
        if query is None:
            return np.zeros(m, dtype=np.float32)
        wide = query.astype(np.float64)
        if m <= self._products.shape[0]:
            # Into reused scratch (the trio thread's only): the float32 rows are widened
            # inside the multiply, exactly as astype would.
            products = self._products[:m]
            np.multiply(self.vectors[slots], wide, out=products)
            exact: npt.NDArray[np.float32] = np.add.reduce(products, axis=1).astype(np.float32)
            return exact
        out = np.empty(m, dtype=np.float32)
        step = max(1, EXACT_FLOATS // self.vectors.shape[1])
        for lo in range(0, m, step):
            block = self.vectors[slots[lo : lo + step]].astype(np.float64)
            block *= wide
            out[lo : lo + step] = np.add.reduce(block, axis=1)
        return out

    def _run_inline(self, request: _Request, snap: Snapshot) -> list[ScanResult]:
        scope = self._resolve(request, snap)
        floats = snap.high * self.vectors.shape[1]
        if floats < BLAS_SINGLE_BELOW:
            return self._score([request], [scope], snap, blocks=False)
        # A masked read times more than the product, so it follows the plain reads'
        # setting without adding to their record.
        single = self.blas.acquire(self.chooser.current(floats, 0))
        try:
            return self._score([request], [scope], snap, blocks=single and self.blas.blocks)
        finally:
            self.blas.release()

    async def _score_in_threads(
        self, batch: list[_Request], scopes: list[_Scope], snap: Snapshot
    ) -> list[ScanResult]:
        n = snap.high
        floats = n * self.vectors.shape[1]
        # Small batches run on one core; a big one asks the chooser. One core: split
        # the rows over our own threads (a thread that finishes early frees its core).
        # BLAS as configured: one thread of ours, BLAS splits.
        big = floats >= BLAS_SINGLE_BELOW
        # Acquired here, on the trio thread, while none of our threads is inside BLAS:
        # OpenBLAS was seen to ignore a count set from a worker thread while another
        # thread was inside a call.
        path = self.chooser.path(len(batch))
        single = self.blas.acquire(self.chooser.single(floats, path) if big else True)
        try:
            chunks = int(min(self.workers, max(1, floats // SPLIT_FLOATS))) if single else 1
            start = time.perf_counter()
            parts = await self._run_chunks(
                batch, scopes, snap, chunks, blocks=single and self.blas.blocks
            )
            elapsed = time.perf_counter() - start
        finally:
            self.blas.release()
        if big:
            self.chooser.record(floats, path, single, elapsed)
        if len(batch) > 1:
            return self._merge_batch(parts, batch, scopes)
        return [
            self._merge(parts, i, r, s) for i, (r, s) in enumerate(zip(batch, scopes, strict=True))
        ]

    async def _run_chunks(
        self,
        batch: list[_Request],
        scopes: list[_Scope],
        snap: Snapshot,
        chunks: int,
        blocks: bool,
    ) -> list[list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]]]:
        n = snap.high
        bounds = [n * c // chunks for c in range(chunks + 1)]
        parts: list[list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]]] = [
            [] for _ in range(chunks)
        ]
        queries = self._queries(batch)
        self._ensure_scores(len(batch), n)

        def work(c: int) -> None:
            parts[c] = self._score_chunk(
                queries, batch, scopes, bounds[c], bounds[c + 1], snap.dense, blocks
            )

        # abandon_on_cancel=False (the default): a cancelled runner still waits for its
        # threads, so the pin outlives every read of the arena.
        if chunks == 1:
            await trio.to_thread.run_sync(work, 0)
        else:
            async with trio.open_nursery() as nursery:
                for c in range(chunks):
                    nursery.start_soon(trio.to_thread.run_sync, work, c)
        return parts

    def _score(
        self, batch: list[_Request], scopes: list[_Scope], snap: Snapshot, blocks: bool
    ) -> list[ScanResult]:
        n = snap.high
        queries = self._queries(batch)
        self._ensure_scores(len(batch), n)
        parts = [self._score_chunk(queries, batch, scopes, 0, n, snap.dense, blocks)]
        return [
            self._merge(parts, i, r, s) for i, (r, s) in enumerate(zip(batch, scopes, strict=True))
        ]

    def _queries(self, batch: list[_Request]) -> npt.NDArray[np.float32] | None:
        if all(r.query is None for r in batch):
            return None
        if len(batch) == 1 and batch[0].query is not None:
            return batch[0].query[None, :]
        width = self.vectors.shape[1]
        queries = np.zeros((len(batch), width), dtype=np.float32)
        for i, request in enumerate(batch):
            if request.query is not None:
                queries[i] = request.query
        return queries

    def _ensure_scores(self, rows: int, n: int) -> None:
        if self._scores.shape[0] < rows * n:
            # Grown to the largest batch seen, at most max_batch × capacity floats.
            capacity = self.vectors.shape[0]
            self._scores = np.empty(max(rows, 1) * max(capacity, 1), dtype=np.float32)

    def _score_chunk(
        self,
        queries: npt.NDArray[np.float32] | None,
        batch: list[_Request],
        scopes: list[_Scope],
        lo: int,
        hi: int,
        dense: bool = False,
        blocks: bool = True,
    ) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]]:
        """Score rows ``[lo, hi)`` for every query; return each one's chunk candidates.

        Runs in a worker thread (or inline). Writes only to this chunk's slices of the
        shared buffers, so chunks never touch each other's memory. ``blocks``: call
        BLAS on row blocks that OpenBLAS runs on this thread (see :func:`scores_into`).
        """
        length = hi - lo
        b = len(batch)
        out: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]] = []
        if length == 0:
            return [(_NO_CANDIDATES, np.empty(0, dtype=np.float32), 0)] * b
        # This chunk's scores: a contiguous b × length block of the shared buffer.
        block = self._scores[lo * b : hi * b].reshape(b, length)
        rows = self.vectors[lo:hi]
        if queries is None:
            block.fill(0.0)
        else:
            scores_into(rows, queries, block, blocks)
        ns = self.ns_ids[lo:hi]
        part, flags, scope_flags = self._part[lo:hi], self._flags[lo:hi], self._scope_flags[lo:hi]
        snap_live_dense = all(s.ns_id is None and s.mask is None for s in scopes)
        has_holes = not dense
        if snap_live_dense and has_holes:
            # One live check shared by every unscoped query of the batch.
            np.less(ns, 0, out=scope_flags)
            has_holes = bool(scope_flags.any())
        for i, scope in enumerate(scopes):
            row = block[i]
            if scope.ns_id == -2:
                out.append((_NO_CANDIDATES, np.empty(0, dtype=np.float32), 0))
                continue
            masked = True
            if scope.ns_id is not None:
                np.not_equal(ns, scope.ns_id, out=scope_flags)
            elif scope.mask is None and snap_live_dense:
                masked = has_holes
            else:
                np.less(ns, 0, out=scope_flags)
            if scope.mask is not None:
                np.logical_or(scope_flags, ~scope.mask[lo:hi], out=scope_flags)
            if masked:
                np.copyto(row, _NEG_INF, where=scope_flags)
            in_scope = length - int(np.count_nonzero(scope_flags)) if scope.valid < 0 else 0
            local = _chunk_candidates(row, batch[i].k, masked, part, flags)
            out.append((local + lo, row[local], in_scope))
        return out

    def _merge(
        self,
        parts: list[list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]]],
        i: int,
        request: _Request,
        scope: _Scope,
    ) -> ScanResult:
        pieces = [p[i] for p in parts]
        valid = scope.valid if scope.valid >= 0 else sum(p[2] for p in pieces)
        k = min(request.k, valid)
        if k <= 0:
            return ScanResult(_NO_CANDIDATES, np.empty(0, dtype=np.float32), valid)
        if len(pieces) == 1:
            slots, scores = pieces[0][0], pieces[0][1]
        else:
            slots = np.concatenate([p[0] for p in pieces])
            scores = np.concatenate([p[1] for p in pieces])
        del scores  # ranked on the exact re-scores, not on the BLAS ones
        exact = self._exact(slots, request.query)
        order = rank_candidates(slots, exact, self.seqs, k)
        return ScanResult(slots[order], exact[order], valid)

    def _merge_batch(
        self,
        parts: list[list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float32], int]]],
        batch: list[_Request],
        scopes: list[_Scope],
    ) -> list[ScanResult]:
        """:meth:`_merge` for every read of a coalesced batch at once: one gather and
        one row sum re-score every read's candidates, and one sort ranks them all, by
        read, then score, then sequence (a read's calls cost about 50 µs each here).

        Each product and each row's sum are those of :meth:`_exact` (the product of a
        float32 row and the query, both widened to float64, is exact however it is
        computed; then numpy's pairwise sum along the row), so a coalesced read's scores
        are bit-identical to the same read alone.
        """
        b = len(batch)
        pieces = [[p[i][0] for p in parts] for i in range(b)]
        sizes = [sum(piece.shape[0] for piece in read) for read in pieces]
        slots = np.concatenate([piece for read in pieces for piece in read])
        ends = np.cumsum(sizes).tolist()
        spans = list(zip([0, *ends[:-1]], ends, strict=True))
        exact = np.zeros(slots.shape[0], dtype=np.float32)  # a zero query scores 0
        scored = [i for i in range(b) if batch[i].query is not None and sizes[i]]
        if sum(sizes[i] for i in scored) * self.vectors.shape[1] <= BATCH_EXACT_FLOATS:
            # The common case: every read's candidates in one gather and one row sum.
            # The rows are widened once and each read's block is multiplied in place by
            # its widened query: a same-type multiply of a block that stays in cache,
            # about twice as fast as a float32 × float64 one per read. The products are
            # the same exact float64 values.
            everyone = len(scored) == b
            picked = (
                None
                if everyone
                else np.concatenate([np.arange(*spans[i]) for i in scored] or [_NO_CANDIDATES])
            )
            products = self.vectors[slots if picked is None else slots[picked]].astype(np.float64)
            queries = [batch[i].query for i in scored]
            size = sizes[scored[0]] if scored else 0
            if everyone and all(sizes[i] == size for i in scored):
                # The usual batch: k candidates per read, one broadcast multiply.
                wide = np.array(queries, dtype=np.float64)[:, None, :]
                np.multiply(products.reshape(b, size, -1), wide, out=products.reshape(b, size, -1))
            else:
                at = 0
                for i, query in zip(scored, queries, strict=True):
                    assert query is not None
                    products[at : at + sizes[i]] *= query.astype(np.float64)
                    at += sizes[i]
            sums = np.add.reduce(products, axis=1)
            if picked is None:
                exact[:] = sums
            else:
                exact[picked] = sums
        else:
            # Many ties: each read re-scores its own candidates in bounded blocks.
            for i in scored:
                lo, hi = spans[i]
                exact[lo:hi] = self._exact(slots[lo:hi], batch[i].query)
        owner = np.repeat(np.arange(b), sizes)
        order = np.lexsort((-self.seqs[slots], -exact, owner))
        ranked, scores = slots[order], exact[order]
        results: list[ScanResult] = []
        start = 0
        for i, (request, scope) in enumerate(zip(batch, scopes, strict=True)):
            valid = scope.valid if scope.valid >= 0 else sum(p[i][2] for p in parts)
            # Never past this read's own candidates, whatever the counts say.
            k = max(0, min(request.k, valid, sizes[i]))
            results.append(ScanResult(ranked[start : start + k], scores[start : start + k], valid))
            start += sizes[i]
        return results
