"""The in-memory store: :func:`open_store`, which runs the actor (``actor.py`` says how
writes and reads work) behind the one :class:`~actors.StoreHandle`
(``actors/_store/handle.py``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from protocol import (
    ConfigError,
    Event,
    VectorStoreConfig,
)
from protocol.checks import check_int

from .._embedding.protocols import AnyEmbedder
from .._embedding.sparse import SparseEmbeddingModel
from .._store.handle import StoreHandle
from .._store.lifecycle import run_store
from .._store.prepare import check_clock, check_store_config
from .._store.queries import bound_profile
from .actor import _StoreActor
from .blas import blas_control
from .scan import DEFAULT_THREAD_SCAN_THRESHOLD

__all__ = ["open_store"]


@asynccontextmanager
async def open_store(
    config: VectorStoreConfig,
    embedder: AnyEmbedder,
    *,
    inbox_size: int = 64,
    thread_scan_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD,
    blas_threads: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    embed_timeout: float | None = None,
    sparse: SparseEmbeddingModel | None = None,
    clock: Callable[[], dt.datetime] | None = None,
) -> AsyncIterator[StoreHandle]:
    """Open an in-memory store and run its actor for the duration of the block.

    The arena (``max_entries × dimensions`` float32) is allocated here, once. Leaving the
    block closes the inbox and stops the actor: a request still queued or in flight is
    not applied and its caller gets ``trio.ClosedResourceError``; an embedder call in
    flight is abandoned, never waited for.

    If the actor crashed, leaving the block raises :class:`~protocol.Poisoned`, so a crash
    never passes silently; if the body is already raising, that exception wins and
    carries the crash as a note. No ``ExceptionGroup`` ever leaves the block
    (``actors._store.lifecycle``, the lifecycle every store shares).

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
            of the process calling BLAS meanwhile runs on one thread too.
            docs/pages/reference/store.md says what each costs.
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
        clock: the store's clock, a zero-argument callable returning an aware datetime
            (None: ``datetime.now(UTC)``). Every "now" of the store comes from it: the
            time a write stamps, a ``ttl``'s start, ``update``'s default
            ``valid_from``, whether an entry has expired on a read, and when expired
            entries are reclaimed. A test passes a fake clock and advances it instead
            of sleeping.

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
            blas_threads, on_event, embed_timeout, sparse or clock, or a profile whose
            dimensions differ from the config's.

    (Long only for this docstring, which documents every argument; the body checks the
    arguments and runs the actor through the one lifecycle.)
    """
    config = check_store_config(config, embedder)
    checked_clock = check_clock(clock)
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
        clock=checked_clock,
    )
    async with run_store(actor, StoreHandle._create(actor, "memory")) as handle:
        yield handle
