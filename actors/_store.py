"""The in-memory store: :class:`StoreHandle`, the caller's side, and :func:`open_store`,
which runs the actor (``_store_actor.py`` says how writes and reads work)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import ClassVar, final

import numpy as np
import trio

from protocol import (
    ConfigError,
    Document,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    RetrievedTurn,
    ScoredDocument,
    SearchRequest,
    VectorStoreConfig,
    VectorStoreUsage,
)
from protocol._filters import check_filter

from ._blas import blas_control
from ._handle import OPENED, StoreHandleBase
from ._lifecycle import run_store
from ._prepare import (
    check_ids,
    check_int,
    check_k,
    check_name,
    check_store_config,
    clamp_k,
)
from ._ranked import Ranked, RankedList
from ._scan import DEFAULT_THREAD_SCAN_THRESHOLD
from ._search import run_search
from ._sparse import SparseEmbeddingModel
from ._store_actor import StoreStatistics, _StoreActor
from ._store_hooks import (
    bound_profile,
    check_query_profile,
    ranked_event,
    retrieve_event,
    search_event,
)

__all__ = ["StoreHandle", "StoreStatistics", "open_store"]


@final
class StoreHandle(StoreHandleBase[_StoreActor]):
    """The caller's side of a store. Get one from :func:`open_store`.

    Writes go through the actor's bounded inbox; reads scan the last snapshot. Once the
    actor has crashed, every method raises :class:`~protocol.Poisoned`; once the store
    has closed, every method raises ``trio.ClosedResourceError``.
    """

    #: Which backend this is (``"memory"``), as events and ``Memory`` report it.
    backend: ClassVar[str] = "memory"

    # --- reads -------------------------------------------------------------------------

    async def get_by_ids(self, ids: Sequence[str], namespace: str | None = None) -> list[Document]:
        """The live documents with these ids in one namespace (``None``: the default).

        Missing ids are left out; the order is not promised. Reads the last snapshot
        without using the inbox, so a full inbox never delays it; it changes nothing,
        and a cancelled caller leaves at its one checkpoint.
        """
        self._check()
        wanted = check_ids(ids)
        space = self._namespace(namespace)
        await trio.lowlevel.checkpoint()
        self._check()
        actor = self._actor
        slots = (actor.arena.slot_of(space, i) for i in dict.fromkeys(wanted))
        return [actor.document_of(slot) for slot in slots if slot is not None]

    async def search(self, request: SearchRequest) -> list[ScoredDocument]:
        """Run one search: similarity, MMR or hybrid, with an optional metadata filter
        and score threshold (see :class:`~protocol.SearchRequest`).

        Every kind scores the same exact scan; the filter is applied inside it, before
        top-k, so ``k`` hits come back whenever ``k`` entries match. Dense scores are
        cosine similarity in [-1, 1]; a hybrid hit's score is its fused RRF score, and
        ``ranks`` gives its 1-based rank in each list (``"dense"``, ``"bm25"``).

        A store bound to an embedding profile (see :attr:`profile`) refuses a non-zero
        ``request.vector`` that does not name the same profile in ``request.profile``.

        Does not use the inbox, and changes nothing; on cancellation it behaves like
        :meth:`retrieve` (the cancel reaches the query's embedder call, and a scan
        waiting for the scan runner drops its answer).

        Raises:
            ConfigError: not a SearchRequest.
            EmbeddingError: the query could not be embedded, or its vector was made by
                another model or at another width than the store's profile.
            EmbedderError: the embedder failed.
            Poisoned: the actor has crashed.
        """
        self._check()
        started = time.perf_counter()
        if not isinstance(request, SearchRequest):
            raise ConfigError(f"request is a {type(request).__name__}; expected a SearchRequest")
        actor = self._actor
        namespace = self._namespace(request.namespace)
        if request.filter is not None:
            check_filter(request.filter)  # before the query is embedded, as on pg
        if request.vector is not None:
            query = actor.checked_query(request.vector, request.profile)
        else:
            assert request.query is not None
            if request.profile is not None:
                check_query_profile(actor.profile, actor.config.dimensions, None, request.profile)
            # A bm25 search reads keywords alone: its query is never embedded.
            query = (
                None
                if request.kind == "bm25"
                else actor.query_vector(await actor.embedder.query(request.query))
            )
        sparse = None
        if request.kind == "hybrid":
            assert request.query is not None
            sparse = await actor.sparse_query(request.query)
        hits = await run_search(actor, request, namespace, query, sparse)
        if actor.on_event is not None:
            k = clamp_k(request.k, actor.config.max_entries)
            actor.on_event(
                search_event("memory", actor.profile, request, namespace, k, hits, started)
            )
        return hits

    async def retrieve_embedding(
        self,
        vector: object,
        k: int,
        namespace: str | None = None,
        *,
        profile: EmbeddingProfile | None = None,
    ) -> RetrievalReport:
        """Rank entries against a vector you already have.

        The vector need not be normalized: a normalized copy is scored, and the caller's
        array is never changed. A zero vector scores 0.0 everywhere.

        A scan over at least ``thread_scan_threshold`` floats, or one of at least 2**20
        floats that starts together with other reads (or while a batch runs), waits for
        the store's scan runner, which may be scoring earlier reads; it then shares one
        matrix product with every read that waited with it. A smaller lone read runs
        inline, at once. It does not use the inbox, so a full inbox never delays it. If
        the caller is cancelled while it waits, its answer is dropped and the other reads
        are not affected; a read changes nothing.

        A store bound to an embedding profile refuses a non-zero vector unless
        ``profile`` names that same profile (see :class:`~protocol.SearchRequest`).

        Raises:
            ConfigError: ``k ≤ 0`` or an empty namespace.
            EmbeddingError: a vector of the wrong width or with a non-finite component,
                or from another model than the store's profile.
            Poisoned: the actor has crashed.
            trio.ClosedResourceError: the store closed before the scan ran.
        """
        self._check()
        started = time.perf_counter()
        actor = self._actor
        k = clamp_k(check_k(k), actor.config.max_entries)
        if namespace is not None:
            check_name("namespace", namespace)
        query = actor.checked_query(vector, profile)
        report = await actor.scan(query, k, namespace)
        if actor.on_event is not None:
            actor.on_event(
                retrieve_event("memory", actor.profile, namespace, None, k, report, started)
            )
        return report

    async def _retrieve(self, query: str, k: int, namespace: str | None) -> RetrievalReport:
        self._check()
        started = time.perf_counter()
        actor = self._actor
        # Any k means "at most that many": cut to the capacity, so that the scan and
        # the event it reports carry a k that fits anywhere (msgpack stops at 64 bits).
        k = clamp_k(check_k(k), actor.config.max_entries)
        if not isinstance(query, str):
            raise ConfigError(f"query is a {type(query).__name__}; expected str")
        raw = await actor.embedder.query(query)
        report = await actor.scan(actor.query_vector(raw), k, namespace)
        if actor.on_event is not None:
            actor.on_event(
                retrieve_event("memory", actor.profile, namespace, query, k, report, started)
            )
        return report

    # --- recall's internal reads (see StoreHandleBase) -------------------------------

    async def _dense_ranked(
        self, namespace: str, query: str, depth: int, also: Sequence[str] = ()
    ) -> RankedList:
        self._check()
        started = time.perf_counter()
        actor = self._actor
        k = clamp_k(check_k(depth), actor.config.max_entries)
        scope = check_name("namespace", namespace)
        raw = await actor.embedder.query(query)
        vector = actor.query_vector(raw)
        ranked: RankedList = await actor.scans.scan(
            vector, k, scope, build=partial(actor.ranked, also=(scope, also, vector))
        )
        if actor.on_event is not None:
            actor.on_event(
                ranked_event(
                    "memory", actor.profile, namespace, query, k, ranked.hits, started, bm25=False
                )
            )
        return ranked

    async def _bm25_ranked(self, namespace: str, query: str, depth: int) -> list[Ranked]:
        self._check()
        started = time.perf_counter()
        actor = self._actor
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        arena = actor.arena
        group = arena.namespace_id(namespace)
        hits: list[Ranked] = []
        if group is not None:
            found, scores = arena.bm25().top(query, depth, seqs=actor.seqs, group=group)
            ids, text_of = arena.ids, arena.text_of
            hits = [
                Ranked(ids[slot] or "", seq, score, text_of(slot))
                for slot, score, seq in zip(
                    found.tolist(), scores.tolist(), actor.seqs[found].tolist(), strict=True
                )
            ]
        if actor.on_event is not None:
            k = clamp_k(depth, actor.config.max_entries)
            actor.on_event(
                ranked_event(
                    "memory", actor.profile, namespace, query, k, hits, started, bm25=True
                )
            )
        return hits

    async def _texts(
        self, namespace: str, ids: Sequence[str], *, projections: bool
    ) -> dict[str, str]:
        self._check()
        await trio.lowlevel.checkpoint()
        self._check()
        actor = self._actor
        slot_of, read = (
            actor.arena.slot_of,
            (actor.projection_of if projections else actor.arena.text_of),
        )
        found = ((i, slot_of(namespace, i)) for i in ids)
        return {i: read(slot) for i, slot in found if slot is not None}

    async def _turns(self, namespace: str, hits: Sequence[Ranked]) -> list[RetrievedTurn]:
        self._check()
        await trio.lowlevel.checkpoint()
        self._check()
        actor = self._actor
        slot_of, seqs = actor.arena.slot_of, actor.seqs
        kept = [
            (slot, h.score)
            for h in hits
            if (slot := slot_of(namespace, h.id)) is not None and int(seqs[slot]) == h.sequence
        ]
        slots = np.array([slot for slot, _ in kept], dtype=np.intp)
        return actor.turns_at(slots, [score for _, score in kept])

    async def _term_counts(
        self, namespace: str, terms: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        self._check()
        await trio.lowlevel.checkpoint()
        self._check()
        group = self._actor.arena.namespace_id(namespace)
        if group is None:
            return 0, dict.fromkeys(terms, 0)
        return self._actor.arena.bm25().term_counts(terms, group)

    # --- state -------------------------------------------------------------------------

    def usage(self) -> VectorStoreUsage:
        """The fill level, in O(1)."""
        self._check()
        actor = self._actor
        snap, capacity = actor.snapshot, actor.config.max_entries
        fraction = snap.live / capacity
        warn = actor.config.warn_fraction
        return VectorStoreUsage(
            entries=snap.live,
            capacity=capacity,
            fraction=fraction,
            near_cap=warn is not None and fraction >= warn,
            evicted_entries=actor.arena.evicted_total,
            zero_norm_entries=actor.arena.zero_count,
        )

    def __len__(self) -> int:
        self._check()
        return self._actor.snapshot.live

    @property
    def profile(self) -> EmbeddingProfile | None:
        """The embedding profile the store is bound to: its embedder's ``profile``, or
        None when the embedder has none (then query vectors are checked for width
        only). Pass it as ``SearchRequest(profile=...)`` with a vector you embedded."""
        return self._actor.profile

    def statistics(self) -> StoreStatistics:
        """The inbox and the actor now (see :class:`StoreStatistics`): ``inbox_size``
        (its capacity), ``inbox_used`` (writes queued), ``tasks_waiting_send`` (callers
        waiting for room), ``version`` (commits so far) and ``poisoned``."""
        stats = self._send.statistics()
        return StoreStatistics(
            inbox_size=self._actor.inbox_size,
            inbox_used=stats.current_buffer_used,
            tasks_waiting_send=stats.tasks_waiting_send,
            version=self._actor.snapshot.version,
            poisoned=self._actor.crash is not None,
        )


@asynccontextmanager
async def open_store(
    config: VectorStoreConfig,
    embedder: object,
    *,
    inbox_size: int = 64,
    thread_scan_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD,
    blas_threads: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    embed_timeout: float | None = None,
    sparse: SparseEmbeddingModel | None = None,
) -> AsyncIterator[StoreHandle]:
    """Open an in-memory store and run its actor for the duration of the block.

    The arena (``max_entries × dimensions`` float32) is allocated here, once. Leaving the
    block closes the inbox and stops the actor: a request still queued or in flight is
    not applied and its caller gets ``trio.ClosedResourceError``; an embedder call in
    flight is abandoned, never waited for.

    If the actor crashed, leaving the block raises :class:`~protocol.Poisoned`, so a crash
    never passes silently; if the body is already raising, that exception wins and
    carries the crash as a note. No ``ExceptionGroup`` ever leaves the block
    (``actors._lifecycle``, the lifecycle every store shares).

    Cancellation: entering only allocates and starts tasks; a cancelled body leaves as
    above, and its ``Cancelled`` propagates. A full inbox makes writers wait (see
    ``inbox_size``); reads never use it.

    Args:
        config: the store's bounds; validated again here.
        embedder: an :class:`Embedder` (sync, run in a worker thread) or an
            :class:`AsyncEmbedder`.
        inbox_size: how many writes may queue before callers wait.
        thread_scan_threshold: a read that scans at least this many floats (rows ×
            dimensions) runs in worker threads, coalesced with concurrent reads into one
            matrix product, so the trio loop stays responsive; a smaller lone read runs
            inline. The default, 2**24 floats (64 MiB), bounds how long a read holds the
            trio loop to about 3 ms here (4.5 ms when the other core is busy); below it
            a worker-thread round trip (0.5 ms with the BLAS call) costs a good share of
            the scan. Reads of at least 2**20 floats that start together are coalesced
            in worker threads whatever this says. 0 sends every read to threads.
        blas_threads: None (the default) or ``"auto"``. With None, a read never
            changes the BLAS thread count or any other process-wide state: a scan
            that should run on one core (on a busy machine: the store times its recent
            scans both ways) calls BLAS on row blocks small enough that OpenBLAS runs
            them on the calling thread, and otherwise BLAS runs with the threads the
            process gave it. With ``"auto"``, such a scan instead sets OpenBLAS's
            process-wide thread count to one while it runs (through threadpoolctl,
            counted across every store that opted in; the count in force before the
            first such scan comes back when the last one ends), so any other thread
            of the process calling BLAS meanwhile runs on one thread too. README "The
            store" says what each costs.
        on_event: an event sink, called synchronously with a ``vector_store.added`` or
            ``vector_store.deleted`` event after each commit (in the actor, after the
            caller's reply) and a ``vector_store.searched`` event after each read (in
            the reader's task). It must not block: ``EventHub.publish`` is one. If it
            raises after a write, the store is poisoned (it is a crash inside the
            actor); after a read, the exception propagates to the reader.
        embed_timeout: seconds each embedder call may take, or None (the default) for no
            limit. A call over it raises :class:`~protocol.EmbedderError` whose
            ``.error`` is a ``TimeoutError``, and changes nothing; a sync embedder's
            thread is abandoned and its late result dropped.
        sparse: a :class:`~actors.SparseEmbeddingModel`, or None (the default). With
            one, each write's texts are also embedded by it (in the same prepare phase,
            under ``embed_timeout``, all or nothing), every entry keeps its sparse
            vector, and the keyword list of a ``hybrid`` search (``ranks["sparse"]``,
            weighed by ``weights["bm25"]``) ranks by the dot product of the query's
            sparse vector with each entry's, in the namespace and filter, ties to the
            newest; an entry sharing no index with the query is not a candidate.
            ``kind="bm25"`` (and so recall's keyword list) still means BM25. A sparse
            vector counts 12 bytes per non-zero and must itself fit in
            ``max_entry_bytes`` (else :class:`~protocol.EntryTooLarge`), so an entry
            may hold up to twice ``max_entry_bytes``. A model that raises is an
            ``EmbedderError``; a wrong count or a non-``SparseVector`` is an
            ``EmbeddingError``; either changes nothing.

    Faults in the embedder: an ``Exception`` is an ``EmbedderError`` (a reply, not a
    crash); ``KeyboardInterrupt`` and ``SystemExit`` reach the caller as themselves and
    change nothing; any other ``BaseException`` but ``Cancelled`` is a crash, and the
    store is poisoned with it as the cause.

    Embedding profile: when ``embedder`` has a ``profile`` (an
    :class:`~protocol.EmbeddingProfile`, as ``CachedEmbedder`` and every
    ``EmbeddingModel`` do), the store is bound to it. A query vector given to
    ``search`` or ``retrieve_embedding`` must then name that profile, and one made by
    another provider, model, width or options is refused with
    :class:`~protocol.EmbeddingError`.

    Raises:
        ConfigError: a bad config, embedder, inbox size, thread_scan_threshold,
            blas_threads, on_event, embed_timeout or sparse, or a profile whose
            dimensions differ from the config's.

    (Long only for this docstring, which documents every argument; the body checks the
    arguments and runs the actor through the one lifecycle.)
    """
    config = check_store_config(config, embedder)
    check_int("inbox_size", inbox_size)
    check_int("thread_scan_threshold", thread_scan_threshold, minimum=0)
    blas = blas_control(blas_threads)
    if on_event is not None and not callable(on_event):
        raise ConfigError(f"on_event is {on_event!r:.60}; expected None or a callable")
    if sparse is not None and not isinstance(sparse, SparseEmbeddingModel):
        raise ConfigError(
            f"sparse is {sparse!r:.60} ({type(sparse).__name__}); expected None or a "
            "SparseEmbeddingModel (profile, embed_sparse_documents, embed_sparse_query)"
        )
    actor = _StoreActor(
        config,
        embedder,
        inbox_size,
        thread_scan_threshold=thread_scan_threshold,
        blas=blas,
        profile=bound_profile(embedder, config),
        on_event=on_event,
        embed_timeout=embed_timeout,
        sparse=sparse,
    )
    async with run_store(actor, StoreHandle(actor, _opened=OPENED)) as handle:
        yield handle
