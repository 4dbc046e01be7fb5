"""The store actor: one writer that owns the arena, fed by one bounded channel.

Writes (``store_turns``, ``delete``, ``clear``) are msgspec messages sent through the
actor's inbox and applied one at a time, in arrival order. Each is validated and embedded
first (awaiting, with nothing changed) and then committed in one synchronous step, which
publishes a new snapshot. Reads never touch the inbox: they scan the arena as of the
last published snapshot, so no read can see part of a commit. A small scan runs inline;
a big one runs in worker threads, coalesced with concurrent reads, while the arena is
pinned against commits (``_scan.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar, final

import attrs
import msgspec
import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    Cleared,
    ConfigError,
    DeleteResult,
    Document,
    EmbeddingError,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    RetrievedTurn,
    Role,
    ScoredDocument,
    SearchRequest,
    SparseVector,
    Text,
    TurnsStored,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreError,
    VectorStoreUsage,
)
from protocol._filters import check_filter
from protocol._json import check_json_object
from protocol._surrogates import unpack_message
from protocol.messages import (
    Clear,
    Delete,
    DocumentsUpserted,
    StoreReply,
    StoreRequest,
    StoreTurns,
    UpsertDocuments,
)

from ._arena import Arena, Entries, Snapshot, kept_text
from ._embedders import EmbedderAdapter
from ._filtering import PackedMetadata
from ._handle import OPENED, StoreHandleBase
from ._lifecycle import run_store
from ._mailbox import CrashableActor, Envelope
from ._precomputed import document_vectors
from ._prepare import (
    check_documents,
    check_ids,
    check_int,
    check_k,
    check_name,
    check_store_config,
    check_turns,
    checked_rows,
    clamp_k,
    exact_msgpack_many,
    private_json,
)
from ._scan import DEFAULT_THREAD_SCAN_THRESHOLD, ScanEngine, ScanResult
from ._search import run_search
from ._sparse import SparseEmbeddingModel
from ._sparse_index import SparseIndex, SparsePair, checked_sparse
from ._store_hooks import (
    bound_profile,
    check_query_profile,
    checked_query,
    normalize_query,
    retrieve_event,
    search_event,
    write_event,
)

__all__ = ["StoreHandle", "StoreStatistics", "open_store"]

logger = logging.getLogger("trio_recall.store")

_ENCODER = msgspec.msgpack.Encoder()
_EMPTY_METADATA: Mapping[str, Any] = {}
# Below this squared norm a query's float32 square cannot overflow (float32 max ≈ 3.4e38).


_Envelope = Envelope[StoreRequest]


@attrs.frozen
class StoreStatistics:
    """A point-in-time view of the actor's inbox and state.

    Attributes:
        inbox_size: the inbox's capacity.
        inbox_used: requests waiting in the inbox.
        tasks_waiting_send: callers blocked because the inbox is full.
        version: commits so far.
        poisoned: whether the actor has crashed.
    """

    inbox_size: int
    inbox_used: int
    tasks_waiting_send: int
    version: int
    poisoned: bool


@attrs.frozen
class _Prepared:
    """A write that passed every check and is embedded: committing it cannot fail."""

    entries: Entries
    dropped: int  # the head of an over-long batch, counted as evicted
    sparse: list[SparsePair] | None = None  # one per entry, with a sparse model

    def detached(self) -> _Prepared:
        """The same write, holding no array of the embedder's (see ``checked_rows``)."""
        if self.entries.scale is None:
            return self
        entries = attrs.evolve(self.entries, vectors=self.entries.normalized(), scale=None)
        return _Prepared(entries=entries, dropped=self.dropped, sparse=self.sparse)


def packed_metadata(json: bytes) -> Mapping[str, Any]:
    """How the arena keeps a metadata object: its compact JSON, or one shared ``{}``."""
    return PackedMetadata(json) if json else _EMPTY_METADATA


def metadata_copy(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of stored metadata that the caller may mutate."""
    if type(metadata) is PackedMetadata:
        return metadata.decoded()
    return {} if not metadata else private_json(dict(metadata))


def _plain_message(role: Role | None, text: str | None) -> UnifiedMessage:
    """An entry stored without a payload: a plain turn, kept as its role and text, or a
    document (no role), which reads as a user message holding its text."""
    assert text is not None, "an entry without a payload keeps its own text"
    return UnifiedMessage(role=role or "user", content=[Text(text=text)])


class _StoreActor(CrashableActor):
    """Owns the arena and the receive side of the inbox. Nothing else writes."""

    def __init__(
        self,
        config: VectorStoreConfig,
        embedder: object,
        inbox_size: int,
        *,
        thread_scan_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD,
        profile: EmbeddingProfile | None = None,
        on_event: Callable[[Event], None] | None = None,
        embed_timeout: float | None = None,
        sparse: SparseEmbeddingModel | None = None,
    ) -> None:
        self.config = config
        # With a sparse model, each entry's sparse vector (by slot) for hybrid search.
        self.sparse_model = sparse
        self.sparse = SparseIndex()
        self.crash: BaseException | None = None
        self.embedder = EmbedderAdapter(
            embedder, dimensions=config.dimensions, timeout=embed_timeout, on_crash=self.crashed
        )
        self.profile = profile
        self.event_sinks: list[Callable[[Event], None]] = [] if on_event is None else [on_event]
        self.arena = Arena(config.max_entries, config.dimensions)
        self.vectors, self.seqs, self.ns_ids = self.arena.readonly_views()
        self.snapshot: Snapshot = self.arena.snapshot(0)
        self.scans = ScanEngine(
            vectors=self.vectors,
            seqs=self.seqs,
            ns_ids=self.ns_ids,
            snapshot=lambda: self.snapshot,
            namespace_id=self.arena.namespace_id,
            build=self._report,
            check_usable=self.check_usable,
            on_crash=self.crashed,
            thread_threshold=thread_scan_threshold,
        )
        self.inbox_size = inbox_size
        self.send, self.receive = trio.open_memory_channel[_Envelope](inbox_size)
        self.armed_crash: BaseException | None = None
        self.what = "store actor"
        self.logger = logger

    # --- lifecycle ---------------------------------------------------------------------

    def services(self) -> list[Callable[..., Awaitable[None]]]:
        # The scan runner: big and concurrent reads wait for it, so a store without it
        # hangs on its first such read.
        return [self.scans.run]

    @property
    def on_event(self) -> Callable[[Event], None] | None:
        """The event sink: every sink in :attr:`event_sinks` in turn, or None."""
        sinks = self.event_sinks
        if not sinks:
            return None
        if len(sinks) == 1:
            return sinks[0]
        return self._fan_out

    def _fan_out(self, event: Event) -> None:
        for sink in list(self.event_sinks):
            sink(event)

    # --- writes ------------------------------------------------------------------------

    async def _handle(self, envelope: _Envelope) -> None:
        if self.crash is not None:
            envelope.reply.fail(self.poisoned())
            return
        request = envelope.request
        # Phase 1 validates and embeds. It may await and may fail, and it changes nothing:
        # a failure here is a reply, not a crash.
        try:
            prepared = await self._prepare(request)
        except VectorStoreError as error:
            envelope.reply.fail(error)
            return
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
            return
        # Phase 2 commits in one synchronous step; any exception here is a crash.
        try:
            # A read scoring the arena in a worker thread pins it: wait for it here,
            # then commit with no await in between, so the commit never tears a scan.
            if self.scans.pinned:
                # The batch may still read the embedder's own array, normalized only as
                # it is committed; other tasks run while we wait, so copy it first (the
                # copy does the commit's arithmetic early, so it may crash as commit can).
                if isinstance(prepared, _Prepared):
                    prepared = prepared.detached()
                await self.scans.wait_unpinned()
            result = self._commit(request, prepared)
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
            return
        envelope.reply.succeed(result)
        if self.on_event is not None:
            try:
                self._emit_write(request, result)
            except Exception as crash:
                # The write has committed and its caller has its reply; a sink that
                # raises is a bug inside the actor, so it poisons the store like any.
                self._poison(crash)

    def _emit_write(self, request: StoreRequest, result: StoreReply) -> None:
        event = write_event(request, result)
        if event is not None and self.on_event is not None:
            self.on_event(event)

    def checked_query(
        self, vector: object, profile: EmbeddingProfile | None
    ) -> npt.NDArray[np.float32] | None:
        """``vector`` normalized once its ``profile`` is checked against the store's
        (:func:`~actors._store_hooks.checked_query`, shared with the pg store)."""
        return checked_query(self.profile, self.config.dimensions, vector, profile)

    async def _prepare(self, request: StoreRequest) -> object:
        match request:
            case StoreTurns():
                return await self._prepare_turns(request)
            case UpsertDocuments():
                return await self._prepare_documents(request)
            case Delete() | Clear():
                return None
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    # No KeyboardInterrupt may land in the middle of a commit: it is one synchronous step.
    @trio.lowlevel.enable_ki_protection
    def _commit(self, request: StoreRequest, prepared: object) -> StoreReply:
        if self.armed_crash is not None:
            crash, self.armed_crash = self.armed_crash, None
            raise crash
        match request:
            case StoreTurns():
                assert isinstance(prepared, _Prepared)
                ids, seqs, evicted, _ = self._commit_entries(prepared)
                zero = int(np.count_nonzero(prepared.entries.zero))
                return TurnsStored(ids=ids, sequences=seqs, evicted=evicted, zero_norm=zero)
            case UpsertDocuments():
                assert isinstance(prepared, _Prepared)
                ids, seqs, evicted, replaced = self._commit_entries(prepared)
                return DocumentsUpserted(
                    ids=ids, sequences=seqs, evicted=evicted, replaced=replaced
                )
            case Delete(ids=ids, namespace=namespace):
                return self._commit_delete(ids, namespace)
            case Clear(namespace=namespace):
                return self._commit_clear(namespace)
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    async def _prepare_turns(self, request: StoreTurns) -> _Prepared:
        namespace = check_name("namespace", request.namespace)
        source = check_name("source", request.source)
        check_json_object(request.metadata)
        config = self.config
        batch = check_turns(
            request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
        )
        # Kept as the compact JSON that max_entry_bytes counted, which is also the copy
        # that the caller's later mutations cannot reach.
        metadata = packed_metadata(batch.metadata_json)
        vectors, scale, zero = await self._embed(batch.texts)
        sparse = await self._embed_sparse(batch.texts)
        keep = len(batch.survivors)
        # A plain turn (one Text block and nothing else) is kept as its role and text,
        # which rebuild it exactly, instead of its msgpack (a third of a batch's
        # prepare time); a turn indexed by the caller's text still needs its message.
        # Only ASCII text: an ASCII str holds its bytes plus a constant, as the
        # msgpack copy did, while another str may also hold a cached UTF-8 copy of
        # itself (up to twice its UTF-8 size), which the memory bound does not allow.
        plain = batch.roles is not None and batch.all_ascii and not batch.given
        return _Prepared(
            entries=Entries(
                vectors=vectors,
                zero=zero,
                texts=batch.texts,
                payloads=[None] * keep if plain else exact_msgpack_many(batch.survivors),
                metadata=[metadata] * keep,
                ids=batch.ids,
                source_ids=[None] * keep,
                namespace=namespace,
                source=source,
                derived_texts=not batch.given and not plain,
                roles=batch.roles if plain else None,
                ascii_texts=plain,
                scale=scale,
            ),
            dropped=batch.dropped,
            sparse=sparse,
        )

    async def _prepare_documents(self, request: UpsertDocuments) -> _Prepared:
        namespace = check_name("namespace", request.namespace)
        batch = check_documents(
            request,
            max_entry_bytes=self.config.max_entry_bytes,
            max_entries=self.config.max_entries,
        )
        survivors = batch.survivors
        keep = len(survivors)
        texts = [d.text for d in survivors]
        raw = await document_vectors(self.embedder, survivors, self.config.dimensions)
        vectors, scale, zero = checked_rows(raw, keep, self.config.dimensions)
        sparse = await self._embed_sparse(texts)
        return _Prepared(
            entries=Entries(
                vectors=vectors,
                zero=zero,
                texts=texts,
                payloads=[None] * keep,
                metadata=[packed_metadata(m) for m in batch.metadata_json],
                ids=[d.id for d in survivors if d.id is not None],
                source_ids=[d.source_id for d in survivors],
                namespace=namespace,
                source="document",
                scale=scale,
            ),
            dropped=batch.dropped,
            sparse=sparse,
        )

    async def _embed(
        self, texts: list[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None, npt.NDArray[np.bool_]]:
        """The batch's vectors, checked: ``(rows, scale, zero)`` as ``checked_rows``
        gives them. ``rows`` may be the embedder's own array: the caller commits it
        before its next await, or takes a copy (see :meth:`_Prepared.detached`)."""
        raw = await self.embedder.documents(texts)
        return checked_rows(raw, len(texts), self.config.dimensions)

    async def _embed_sparse(self, texts: list[str]) -> list[SparsePair] | None:
        """The batch's sparse vectors, checked, or None without a sparse model. The
        call goes through the embedder adapter's timeout and fault handling: an
        Exception from the model is an ``EmbedderError``."""
        model = self.sparse_model
        if model is None:
            return None
        if not texts:
            return []
        raw = await self.embedder._call(
            "document", texts, 1, lambda: model.embed_sparse_documents(texts)
        )
        return checked_sparse(raw, len(texts), self.config.max_entry_bytes)

    async def sparse_query(self, text: str) -> SparseVector | None:
        """The query's sparse vector, or None without a sparse model."""
        model = self.sparse_model
        if model is None:
            return None
        raw = await self.embedder._call("query", [text], 1, lambda: model.embed_sparse_query(text))
        if not isinstance(raw, SparseVector):
            raise EmbeddingError(
                f"the sparse model's query vector is a {type(raw).__name__}; expected a "
                "SparseVector"
            )
        return raw

    def _commit_entries(self, p: _Prepared) -> tuple[list[str], list[int], int, int]:
        """Commit a prepared batch: replace live ids, take slots, write, publish.

        Returns the ids, the sequences, how many entries were evicted (the dropped head
        included) and how many live entries were replaced.
        """
        arena, entries = self.arena, p.entries
        replaced = 0
        if entries.ids is not None:
            # Free the replaced slots first, so the batch takes them back instead of
            # evicting the oldest entries (or another target of the same batch).
            for entry_id in entries.ids:
                slot = arena.slot_of(entries.namespace, entry_id)
                if slot is not None:
                    arena.remove(slot)
                    self.sparse.drop(slot)
                    replaced += 1
        slots, evicted = arena.take_slots(len(entries))
        arena.evicted_total += p.dropped
        ids, seqs = arena.write(slots, entries)
        # An evicted slot is refilled here, so put replaces its old vector.
        if p.sparse is not None:
            for slot, pair in zip(slots, p.sparse, strict=True):
                self.sparse.put(slot, pair)
        self._publish()
        return ids, seqs, evicted + p.dropped, replaced

    def _commit_delete(self, ids: list[str], namespace: str) -> DeleteResult:
        deleted: list[str] = []
        missing: list[str] = []
        for entry_id in dict.fromkeys(ids):
            slot = self.arena.slot_of(namespace, entry_id)
            if slot is None:
                missing.append(entry_id)
                continue
            self.arena.remove(slot)
            self.sparse.drop(slot)
            deleted.append(entry_id)
        if deleted:
            self._publish()
        return DeleteResult(deleted=deleted, missing=missing)

    def _commit_clear(self, namespace: str | None) -> Cleared:
        slots = self.arena.live_slots(namespace)
        for slot in slots:
            self.arena.remove(slot)
            self.sparse.drop(slot)
        if slots:
            self._publish()
        return Cleared(removed=len(slots))

    def _publish(self) -> None:
        self.snapshot = self.arena.snapshot(self.snapshot.version + 1)

    # --- reads -------------------------------------------------------------------------

    def query_vector(self, vector: object) -> npt.NDArray[np.float32] | None:
        """A normalized float32 copy of ``vector``, or None for a zero query
        (:func:`~actors._store_hooks.normalize_query`, shared with the pg store)."""
        return normalize_query(vector, self.config.dimensions)

    async def scan(
        self, query: npt.NDArray[np.float32] | None, k: int, namespace: str | None
    ) -> RetrievalReport:
        """Score every live entry in scope against ``query`` and rank the best ``k``.

        A small scan runs inline on the snapshot current when it is called; a big one is
        coalesced with concurrent reads and scored in worker threads (see ``_scan.py``).
        """
        self.check_usable()
        report = await self.scans.scan(query, k, namespace)
        assert isinstance(report, RetrievalReport)
        return report

    def _report(self, result: ScanResult) -> RetrievalReport:
        # Called while the scanned rows are pinned, so each payload matches its score.
        # Per-hit numpy scalar access and method calls are the bulk of a small read's
        # overhead, so the columns are read as lists in one go and the lookups inlined.
        arena = self.arena
        slots = result.slots
        ids, sources, payloads = arena.ids, arena.sources, arena.payloads
        texts, roles = arena.texts, arena.roles
        metadata_of = arena.meta.get
        decode = unpack_message
        turns = []
        for slot, score, seq, namespace in zip(
            slots.tolist(),
            result.scores.tolist(),
            self.seqs[slots].tolist(),
            arena.namespaces_of(slots),
            strict=True,
        ):
            entry_id, source, payload = ids[slot], sources[slot], payloads[slot]
            metadata = metadata_of(slot)
            assert entry_id is not None
            assert source is not None
            assert namespace is not None
            assert metadata is not None
            turns.append(
                RetrievedTurn(
                    message=decode(payload)
                    if payload is not None
                    else _plain_message(roles[slot], kept_text(texts[slot])),
                    # + 0.0 turns a -0.0 (a zero vector against a negative query) into 0.0.
                    score=score + 0.0,
                    sequence=seq,
                    namespace=namespace,
                    source=source,
                    metadata=metadata_copy(metadata),
                    id=entry_id,
                )
            )
        return RetrievalReport(turns=turns, scanned=result.scanned)

    def message_of(self, slot: int) -> UnifiedMessage:
        """A fresh copy of the message in ``slot``; a document reads as a user message
        holding its text."""
        arena = self.arena
        payload = arena.payloads[slot]
        if payload is None:
            return _plain_message(arena.roles[slot], arena.text_of(slot))
        return unpack_message(payload)

    def metadata_copy(self, slot: int) -> dict[str, Any]:
        """A copy of the metadata in ``slot`` that the caller may mutate."""
        return metadata_copy(self.arena.metadata_of(slot))

    def document_of(self, slot: int) -> Document:
        """The entry in ``slot`` as a :class:`Document` (a turn's text is its projection)."""
        arena = self.arena
        return Document(
            text=arena.text_of(slot),
            id=arena.ids[slot],
            metadata=self.metadata_copy(slot),
            source_id=arena.source_ids[slot],
        )


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
            on_event, embed_timeout or sparse, or a profile whose dimensions differ from
            the config's.

    (Long only for this docstring, which documents every argument; the body checks the
    arguments and runs the actor through the one lifecycle.)
    """
    config = check_store_config(config, embedder)
    check_int("inbox_size", inbox_size)
    check_int("thread_scan_threshold", thread_scan_threshold, minimum=0)
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
        profile=bound_profile(embedder, config),
        on_event=on_event,
        embed_timeout=embed_timeout,
        sparse=sparse,
    )
    async with run_store(actor, StoreHandle(actor, _opened=OPENED)) as handle:
        yield handle
