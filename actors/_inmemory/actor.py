"""The in-memory store's actor: one writer that owns the arena, fed by one bounded
channel (its handle and ``open_store`` are in ``store.py``).

Writes (``store_turns``, ``delete``, ``clear``) are msgspec messages sent through the
actor's inbox and applied one at a time, in arrival order. Each is validated and embedded
first (awaiting, with nothing changed) and then committed in one synchronous step, which
publishes a new snapshot. Reads never touch the inbox: they scan the arena as of the
last published snapshot, so no read can see part of a commit. A small scan runs inline;
a big one runs in worker threads, coalesced with concurrent reads, while the arena is
pinned against commits (``scan.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import msgspec
import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    DeleteResult,
    Document,
    EmbeddingError,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    RetrievedTurn,
    Role,
    SearchRequest,
    SparseVector,
    Text,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreError,
    entry_text,
    projection,
)
from protocol.checks import unpack_message, utf8_bytes
from protocol.messages import (
    Clear,
    Cleared,
    Dedupe,
    Delete,
    DocumentsUpserted,
    Forget,
    Forgotten,
    StoreReply,
    Supersede,
    TurnsStored,
)

from .._embedding.adapter import EmbedderAdapter
from .._embedding.protocols import AnyEmbedder
from .._embedding.sparse import SparseEmbeddingModel
from .._retrieval.links import body_terms
from .._store.backend import Counters, Hits, PutDocuments, PutTurns, Query, StaleVersion, Write
from .._store.events import write_event
from .._store.index_text import (
    CONTEXT_CHARS,
    document_times,
    fit_index_text,
    indexed_texts,
    stamp_time,
    turn_index_texts,
)
from .._store.mailbox import REPLIED, CrashableActor, Envelope
from .._store.precomputed import document_vectors
from .._store.prepare import (
    NEAR_DUPLICATE_COSINE,
    Clock,
    checked_rows,
    clock_now,
    default_clock,
    private_json,
)
from .._store.queries import checked_query, normalize_query
from .arena import NEVER, OPEN, Arena, Entries, Snapshot, from_micros, kept_text, micros
from .blas import BlasControl, LeaveThreads
from .filtering import PackedMetadata, compile_filter
from .scan import DEFAULT_THREAD_SCAN_THRESHOLD, ScanEngine, ScanResult
from .sparse_index import SparseIndex, SparsePair, checked_sparse
from .view import run_search

__all__ = ["metadata_copy", "packed_metadata"]

logger = logging.getLogger("trio_recall.store")

_ENCODER = msgspec.msgpack.Encoder()
_EMPTY_METADATA: Mapping[str, Any] = {}
# Below this squared norm a query's float32 square cannot overflow (float32 max ≈ 3.4e38).


_Envelope = Envelope[Write, object]

#: The most expired entries one write (or one wake of the actor) reclaims.
RECLAIM_BATCH = 256
#: The longest the actor sleeps before it looks at the store clock again for expiries
#: (a store clock need not follow trio's).
_EXPIRY_NAP = 60.0


@attrs.frozen
class _Removal:
    """A delete or forget, prepared: the memories found (``ids``) and not (``missing``),
    every version's slot and sequence, and the entries to give a new index text
    (``rewrites``: slot, sequence, text or None) with their new vectors."""

    ids: list[str]
    missing: list[str]
    slots: list[int]
    seqs: list[int]
    rewrites: list[tuple[int, int, str | None]]
    #: The memory each of ``slots`` is a version of, and every id asked for, in order.
    owners: list[str] = attrs.field(factory=list)
    asked: list[str] = attrs.field(factory=list)
    vectors: npt.NDArray[np.float32] | None = None
    zero: npt.NDArray[np.bool_] | None = None
    sparse: list[SparsePair] | None = None


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


def _expiries(documents: Sequence[Document]) -> npt.NDArray[np.int64] | int:
    """Each document's ``expires_at`` as micros (:data:`NEVER`: none), or NEVER for a
    batch in which none expires."""
    if all(d.expires_at is None for d in documents):
        return NEVER
    return np.array(
        [NEVER if d.expires_at is None else micros(d.expires_at) for d in documents],
        dtype=np.int64,
    )


def packed_metadata(json: bytes) -> Mapping[str, Any]:
    """How the arena keeps a metadata object: its compact JSON, or one shared ``{}``."""
    return PackedMetadata(json) if json else _EMPTY_METADATA


def metadata_copy(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of stored metadata that the caller may mutate."""
    if type(metadata) is PackedMetadata:
        return metadata.decoded()
    return {} if not metadata else private_json(dict(metadata))


def _first(earlier: Mapping[int, int], row: int) -> int:
    """The written row a duplicate row comes down to (through earlier duplicates)."""
    while row in earlier:
        row = earlier[row]
    return row


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
        embedder: AnyEmbedder,
        inbox_size: int,
        *,
        thread_scan_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD,
        blas: BlasControl | None = None,
        profile: EmbeddingProfile | None = None,
        on_event: Callable[[Event], None] | None = None,
        embed_timeout: float | None = None,
        sparse: SparseEmbeddingModel | None = None,
        clock: Clock = default_clock,
    ) -> None:
        self.config = config
        #: The store's clock: every "now" of the store (``Backend.clock``).
        self.clock = clock
        # Set by a write that brings an expiry, so a sleeping reclaimer looks again.
        self._expiry_changed = trio.Event()
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
            blas=LeaveThreads() if blas is None else blas,
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
        return [self.scans.run, self._reclaimer]

    async def _reclaimer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Reclaim expired entries by the store's own bounded work: sleep until the
        earliest expiry (by the store clock, at most a minute at a time, or until a
        write brings one), then free at most :data:`RECLAIM_BATCH` of them in one
        commit, and again. Cancelled as the store closes (a plain sleep: nothing holds
        the close, and ``Cancelled`` passes through)."""
        task_status.started()
        while True:
            if self.crash is not None:
                return
            following = self.arena.next_expiry()
            if following == NEVER:
                self._expiry_changed = trio.Event()
                await self._expiry_changed.wait()
                continue
            try:
                now_us = self.now_us()
            except VectorStoreError as error:
                self._poison(error)  # a store clock that gives no aware datetime
                return
            wait = (following - now_us) / 1e6
            if wait > 0:
                with trio.move_on_after(min(wait, _EXPIRY_NAP)):
                    self._expiry_changed = trio.Event()
                    await self._expiry_changed.wait()
                continue
            if self.scans.pinned:
                await self.scans.wait_unpinned()
            try:
                reclaimed = self._reclaim(now_us)
                if reclaimed:
                    self._publish()
            except Exception as crash:
                self._poison(crash)
                return
            if reclaimed:
                await trio.lowlevel.checkpoint()
            else:
                # Nothing had expired after all (the clock went back): look again
                # after a nap rather than spin.
                await trio.sleep(1.0)

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
        request = envelope.request
        # Phase 1 validates and embeds, changing nothing; a failure there is a reply.
        prepared = await self._prepared_or_replied(envelope)
        if prepared is REPLIED:
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
            try:
                now_us = self.now_us()
            except VectorStoreError as error:
                envelope.reply.fail(error)
                return
            # An update's version check, in the same synchronous step as its commit.
            stale = self._stale(request, now_us)
            if stale is not None:
                envelope.reply.fail(stale)
                return
            result = self._commit(request, prepared, now_us)
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

    def _emit_write(self, request: Write, result: StoreReply) -> None:
        event = write_event(request, result)
        if event is not None and self.on_event is not None:
            self.on_event(event)

    def checked_query(
        self, vector: object, profile: EmbeddingProfile | None
    ) -> npt.NDArray[np.float32] | None:
        """``vector`` normalized once its ``profile`` is checked against the store's
        (:func:`~actors._store.queries.checked_query`, shared with the pg store)."""
        return checked_query(self.profile, self.config.dimensions, vector, profile)

    async def _prepare(self, request: Write) -> object:
        match request:
            case PutTurns():
                return await self._prepare_turns(request)
            case PutDocuments():
                return await self._prepare_documents(request)
            case Delete() | Forget():
                return await self._prepare_removal(request)
            case Clear():
                return None
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    # No KeyboardInterrupt may land in the middle of a commit: it is one synchronous step.
    @trio.lowlevel.enable_ki_protection
    def _commit(self, request: Write, prepared: object, now_us: int) -> StoreReply:
        if self.armed_crash is not None:
            crash, self.armed_crash = self.armed_crash, None
            raise crash
        # Each write also reclaims a bounded share of the expired entries.
        reclaimed = self._reclaim(now_us)
        match request:
            case PutTurns(batch=batch):
                assert isinstance(prepared, _Prepared)
                ids, seqs, evicted, _, duplicates = self._commit_entries(
                    prepared, now_us, batch.dedupe, batch.near_threshold
                )
                zero = int(np.count_nonzero(prepared.entries.zero))
                return TurnsStored(
                    ids=ids,
                    sequences=seqs,
                    evicted=evicted,
                    zero_norm=zero,
                    duplicates=duplicates,
                )
            case PutDocuments(batch=batch):
                assert isinstance(prepared, _Prepared)
                ids, seqs, evicted, replaced, duplicates = self._commit_entries(
                    prepared,
                    now_us,
                    batch.dedupe,
                    batch.near_threshold,
                    supersede=request.request.supersede,
                )
                return DocumentsUpserted(
                    ids=ids,
                    sequences=seqs,
                    evicted=evicted,
                    replaced=replaced,
                    duplicates=duplicates,
                )
            case Delete():
                assert isinstance(prepared, _Removal)
                deleted, missing, _ = self._commit_removal(prepared, reclaimed)
                return DeleteResult(deleted=deleted, missing=missing)
            case Clear(namespace=namespace):
                return self._commit_clear(namespace, reclaimed)
            case Forget():
                assert isinstance(prepared, _Removal)
                forgotten, _, versions = self._commit_removal(prepared, reclaimed)
                return Forgotten(ids=forgotten, versions=versions)
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    def now_us(self) -> int:
        """The store clock's now, as micros (``ConfigError`` for a bad clock)."""
        return micros(clock_now(self.clock))

    def _current(self, namespace: str, entry_id: str, now_us: int) -> int | None:
        """The slot of memory ``entry_id``'s current, unexpired version, or None."""
        slot = self.arena.slot_of(namespace, entry_id)
        if slot is None or self.arena.expires_us[slot] <= now_us:
            return None
        return slot

    def _stale(self, request: Write, now_us: int) -> StaleVersion | None:
        """An update whose version is no longer current: the refusal, or None."""
        if not isinstance(request, PutDocuments) or request.request.supersede is None:
            return None
        supersede = request.request.supersede
        namespace = request.request.namespace
        slot = self._current(namespace, supersede.id, now_us)
        current = 0 if slot is None else int(self.arena.versions[slot])
        if current == supersede.version:
            return None
        return StaleVersion(supersede.id, namespace, supersede.version, current)

    def _reclaim(self, now_us: int) -> bool:
        """Free at most :data:`RECLAIM_BATCH` expired entries; whether any went."""
        slots = self.arena.expired_slots(now_us, RECLAIM_BATCH)
        for slot in slots:
            self.arena.remove(slot)
            self.sparse.drop(slot)
        if slots:
            self.arena.settle()
        return bool(slots)

    async def _prepare_turns(self, write: PutTurns) -> _Prepared:
        # The handle has checked the batch (``check_turns``); it is trusted here.
        batch, namespace, source = write.batch, write.request.namespace, write.request.source
        config = self.config
        # Kept as the compact JSON that max_entry_bytes counted, which is also the copy
        # that the caller's later mutations cannot reach.
        metadata = packed_metadata(batch.metadata_json)
        keep = len(batch.survivors)
        when = batch.occurred_at or clock_now(self.clock)
        conversation = batch.conversation
        before = self._before(namespace, [conversation], batch.ids)
        index_texts = turn_index_texts(batch, when, before, config.max_entry_bytes)
        indexed = indexed_texts(batch.texts, index_texts)
        vectors, scale, zero = await self._embed(indexed)
        sparse = await self._embed_sparse(indexed)
        # A plain turn (one Text block and nothing else) is kept as its role and text,
        # which rebuild it exactly, instead of its msgpack (a third of a batch's
        # prepare time); a turn indexed by the caller's text still needs its message.
        # Only ASCII text: an ASCII str holds its bytes plus a constant, as the
        # msgpack copy did, while another str may also hold a cached UTF-8 copy of
        # itself (up to twice its UTF-8 size), which the memory bound does not allow.
        plain = batch.plain
        return _Prepared(
            entries=Entries(
                vectors=vectors,
                zero=zero,
                texts=batch.texts,
                payloads=[None] * keep if plain else [*batch.messages_msgpack()],
                metadata=[metadata] * keep,
                ids=batch.ids,
                source_ids=[None] * keep,
                namespace=namespace,
                source=source,
                derived_texts=not batch.given and not plain,
                roles=batch.roles if plain else None,
                ascii_texts=plain,
                scale=scale,
                occurred=micros(when),
                conversations=None if conversation is None else [conversation] * keep,
                index_texts=index_texts,
                expires=NEVER if batch.expires_at is None else micros(batch.expires_at),
            ),
            dropped=batch.dropped,
            sparse=sparse,
        )

    def _before(
        self, namespace: str, conversations: Sequence[str | None], ids: Sequence[str] | None
    ) -> dict[str, str]:
        """The own text (projection) of the newest live entry of each of
        ``conversations`` in ``namespace``, the live entries ``ids`` replace left out:
        the predecessor of a batch's first entry there (``derived_index_texts``)."""
        wanted = [c for c in dict.fromkeys(conversations) if c is not None]
        if not wanted:
            return {}
        arena = self.arena
        replaced: list[int] = []
        for entry_id in ids or ():
            slot = arena.slot_of(namespace, entry_id)
            if slot is not None:
                replaced.append(slot)
        before: dict[str, str] = {}
        for conversation in wanted:
            slot = arena.newest_in(namespace, conversation, replaced)
            if slot is not None:
                before[conversation] = self.projection_of(slot)
        return before

    async def _prepare_documents(self, write: PutDocuments) -> _Prepared:
        # The handle has checked the batch (``check_documents``); it is trusted here.
        batch, namespace = write.batch, write.request.namespace
        survivors = batch.survivors
        keep = len(survivors)
        texts = [d.text for d in survivors]

        async def before(conversations: list[str | None], ids: list[str]) -> dict[str, str]:
            return self._before(namespace, conversations, ids)

        times = await document_times(
            survivors,
            batch.sizes,
            self.config.max_entry_bytes,
            before,
            stamp_time(write.request, self.clock),
        )
        index_texts = times.index_texts
        indexed = indexed_texts(texts, index_texts)
        raw = await document_vectors(
            self.embedder,
            survivors,
            self.config.dimensions,
            embeddings=batch.embeddings,
            texts=indexed,
        )
        vectors, scale, zero = checked_rows(raw, keep, self.config.dimensions)
        sparse = await self._embed_sparse(indexed)
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
                occurred=np.array([micros(w) for w in times.occurred], dtype=np.int64),
                conversations=times.stored_conversations,
                index_texts=index_texts,
                expires=_expiries(survivors),
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

    def _commit_entries(
        self,
        p: _Prepared,
        now_us: int,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        *,
        supersede: Supersede | None = None,
    ) -> tuple[list[str], list[int], int, int, list[str]]:
        """Commit a prepared batch: skip duplicates (``dedupe``), close the version an
        update supersedes, replace live ids, take slots, write, publish.

        Returns the ids and sequences (a duplicate's are the memory's it duplicates),
        how many entries were evicted (the dropped head included), how many live
        entries were replaced, and the duplicates' ids.
        """
        arena, entries, sparse = self.arena, p.entries, p.sparse
        namespace = entries.namespace
        count = len(entries)
        existing: dict[int, int] = {}  # row -> the slot it duplicates
        earlier: dict[int, int] = {}  # row -> the earlier row of the batch it duplicates
        if dedupe == "exact":
            self._exact_duplicates(entries, now_us, existing, earlier)
        elif dedupe == "near":
            threshold = NEAR_DUPLICATE_COSINE if near_threshold is None else near_threshold
            self._near_duplicates(entries, now_us, threshold, existing, earlier)
        # What the duplicates map to, read before anything moves.
        found = {row: (arena.ids[slot], int(arena.seqs[slot])) for row, slot in existing.items()}
        kept = [row for row in range(count) if row not in existing and row not in earlier]
        if len(kept) < count:
            entries = entries.subset(kept)
            sparse = None if sparse is None else [sparse[row] for row in kept]
        replaced = 0
        if supersede is not None:
            entries = self._supersede(entries, supersede, now_us)
        elif entries.ids is not None:
            # Free the replaced slots first, so the batch takes them back instead of
            # evicting the oldest entries (or another target of the same batch). A
            # replaced current version keeps its version number and valid_from.
            versions: npt.NDArray[np.int32] | None = None
            valid_from: npt.NDArray[np.int64] | None = None
            for row, entry_id in enumerate(entries.ids):
                slot = arena.slot_of(namespace, entry_id)
                if slot is None:
                    continue
                if versions is None or valid_from is None:
                    versions = np.ones(len(entries), dtype=np.int32)
                    valid_from = np.broadcast_to(
                        np.asarray(entries.occurred, dtype=np.int64), (len(entries),)
                    ).copy()
                versions[row] = arena.versions[slot]
                valid_from[row] = arena.valid_from_us[slot]
                arena.remove(slot)
                self.sparse.drop(slot)
                replaced += 1
            if versions is not None:
                entries = attrs.evolve(entries, versions=versions, valid_from=valid_from)
        slots, evicted = arena.take_slots(len(entries))
        arena.evicted_total += p.dropped
        written_ids, written_seqs = arena.write(slots, entries)
        # An evicted slot is refilled here, so put replaces its old vector.
        if sparse is not None:
            for slot, pair in zip(slots, sparse, strict=True):
                self.sparse.put(slot, pair)
        if not isinstance(entries.expires, int) or entries.expires != NEVER:
            self._expiry_changed.set()
        self._publish()
        if len(kept) == count:
            return written_ids, written_seqs, evicted + p.dropped, replaced, []
        ids: list[str] = []
        seqs: list[int] = []
        duplicates: list[str] = []
        written = dict(zip(kept, zip(written_ids, written_seqs, strict=True), strict=True))
        for row in range(count):
            if row in written:
                entry_id, seq = written[row]
            else:
                source = found.get(row)
                if source is None:
                    source = written[_first(earlier, row)]
                assert source[0] is not None
                entry_id, seq = source[0], source[1]
                duplicates.append(entry_id)
            ids.append(entry_id)
            seqs.append(seq)
        return ids, seqs, evicted + p.dropped, replaced, duplicates

    def _supersede(self, entries: Entries, supersede: Supersede, now_us: int) -> Entries:
        """Close the version ``supersede`` names (checked current by :meth:`_stale`)
        at its ``valid_from`` and make ``entries`` (one document) version n + 1; with
        version 0, first drop whatever is left of the memory (an expired version, the
        history of one evicted)."""
        arena, namespace = self.arena, entries.namespace
        valid_from = micros(supersede.valid_from)
        if supersede.version == 0:
            for slot in arena.versions_of(namespace, supersede.id):
                arena.remove(slot)
                self.sparse.drop(slot)
        else:
            current = self._current(namespace, supersede.id, now_us)
            assert current is not None, "the version check runs just before the commit"
            arena.close(current, valid_from)
        return attrs.evolve(entries, versions=supersede.version + 1, valid_from=valid_from)

    def _exact_duplicates(
        self, entries: Entries, now_us: int, existing: dict[int, int], earlier: dict[int, int]
    ) -> None:
        """Which rows repeat the text of a current, unexpired entry of the namespace
        (``existing``) or of an earlier row (``earlier``)."""
        arena = self.arena
        ns_id = arena.namespace_id(entries.namespace)
        seen: dict[str, int] = {}
        for row, text in enumerate(entries.texts):
            if ns_id is not None:
                for slot in arena.hash_matches(hash(text)):
                    if (
                        arena.ns_ids[slot] == ns_id
                        and arena.expires_us[slot] > now_us
                        and arena.text_of(slot) == text
                    ):
                        existing[row] = slot
                        break
                if row in existing:
                    continue
            first = seen.setdefault(text, row)
            if first != row:
                earlier[row] = first

    def _near_duplicates(
        self,
        entries: Entries,
        now_us: int,
        threshold: float,
        existing: dict[int, int],
        earlier: dict[int, int],
    ) -> None:
        """Which rows have a cosine of at least ``threshold`` with a current, unexpired
        entry of the namespace (``existing``: the nearest) or with an earlier written
        row (``earlier``)."""
        arena = self.arena
        rows = entries.normalized().astype(np.float32, copy=False)
        ns_id = arena.namespace_id(entries.namespace)
        if ns_id is not None:
            end = arena.high
            held = (
                (arena.ns_ids[:end] == ns_id)
                & (arena.valid_to_us[:end] == OPEN)
                & (arena.expires_us[:end] > now_us)
            )
            if held.any():
                # The whole prefix in one product, the others masked after: gathering
                # the candidates' rows first copied them all (36x slower at 10k).
                scores = self.vectors[:end] @ rows.T
                scores[~held] = -np.inf
                best = scores.argmax(axis=0)
                top = scores[best, np.arange(len(rows))]
                for row in np.flatnonzero(top >= threshold).tolist():
                    existing[row] = int(best[row])
        written: list[int] = []
        for row in range(len(rows)):
            if row in existing:
                continue
            if written:
                sims = rows[written] @ rows[row]
                at = int(sims.argmax())
                if sims[at] >= threshold:
                    earlier[row] = written[at]
                    continue
            written.append(row)

    def _purge(self, slots: Sequence[int]) -> None:
        """Before ``slots`` are removed by a delete, clear or forget: tell the
        embedder's cache to drop their texts and index texts, and clear the links
        term cache, so no trace of the texts stays there."""
        if not slots:
            return
        arena = self.arena
        texts: set[str] = set()
        for slot in slots:
            texts.add(arena.text_of(slot))
            texts.add(arena.index_text_of(slot))
        self.embedder.forget_texts(texts)
        body_terms.cache_clear()

    def _remove_all(self, slots: Sequence[int]) -> None:
        """Remove ``slots`` whole: the entries, their sparse vectors, their BM25
        postings and statistics (applied now), and their texts from the caches."""
        self._purge(slots)
        for slot in slots:
            self.arena.remove(slot)
            self.sparse.drop(slot)
        self.arena.settle()
        self.arena.flush_removals()

    def _commit_clear(self, namespace: str | None, reclaimed: bool) -> Cleared:
        slots = self.arena.live_slots(namespace)
        self._remove_all(slots)
        if slots or reclaimed:
            self._publish()
        return Cleared(removed=len(slots))

    async def _prepare_removal(self, request: Delete | Forget) -> _Removal:
        """What a delete or forget removes (every version of each memory), and the
        entries whose index text quoted a removed one as its conversation predecessor:
        each gets its index text again without it, embedded here (so no vector, posting
        or cache entry keeps a trace of the removed text)."""
        arena, namespace = self.arena, request.namespace
        if isinstance(request, Delete) or request.ids is not None:
            chosen = list(dict.fromkeys(request.ids or ()))
        else:
            # A selection picks memories by their current version (a closed version
            # that matches does not take the memory's current one with it).
            held = [s for s in arena.live_slots(namespace) if arena.valid_to_us[s] == OPEN]
            if request.filter is not None and held:
                mask = arena.meta.mask(compile_filter(request.filter), arena.high)
                held = [slot for slot in held if mask[slot]]
            if request.before is not None:
                before = micros(request.before)
                occurred = arena.occurred_us
                held = [slot for slot in held if occurred[slot] < before]
            chosen = sorted({i for i in (arena.ids[slot] for slot in held) if i is not None})
        ids: list[str] = []
        missing: list[str] = []
        slots: list[int] = []
        owners: list[str] = []
        for entry_id in chosen:
            versions = arena.versions_of(namespace, entry_id)
            if versions:
                ids.append(entry_id)
                slots.extend(versions)
                owners.extend([entry_id] * len(versions))
            else:
                missing.append(entry_id)
        rewrites = self._successor_texts(slots)
        removal = _Removal(
            ids=ids,
            missing=missing,
            slots=slots,
            seqs=[int(arena.seqs[slot]) for slot in slots],
            rewrites=rewrites,
            owners=owners,
            asked=chosen,
        )
        if not rewrites:
            return removal
        own = [arena.text_of(slot) for slot, _, _ in rewrites]
        texts = [
            own_text if index is None else index
            for own_text, (_, _, index) in zip(own, rewrites, strict=True)
        ]
        vectors, scale, zero = await self._embed(texts)
        rows = vectors if scale is None else vectors * scale
        sparse = await self._embed_sparse(texts)
        return attrs.evolve(
            removal, vectors=np.array(rows, dtype=np.float32), zero=zero, sparse=sparse
        )

    def _successor_texts(self, removed: list[int]) -> list[tuple[int, int, str | None]]:
        """Each held entry, not removed, whose derived index text quotes a removed
        entry (its conversation predecessor): its slot, sequence and new index text
        (with the predecessor it has once those are gone, or None: its own text)."""
        arena = self.arena
        gone = set(removed)
        codes = {int(arena.conv_codes[slot]) for slot in removed} - {0}
        out: list[tuple[int, int, str | None]] = []
        for code in codes:
            previous: int | None = None
            quoted: str | None = None
            for slot in arena.conversation_members(code):
                if slot in gone:
                    quoted = self.projection_of(slot)[:CONTEXT_CHARS]
                    continue
                index = arena.index_texts[slot]
                if quoted is not None and index is not None and quoted in kept_text(index):
                    own = arena.text_of(slot)
                    context = (
                        [] if previous is None else [self.projection_of(previous)[:CONTEXT_CHARS]]
                    )
                    fresh = entry_text(
                        own, occurred_at=arena.occurred_at_of(slot), context=context
                    )
                    budget = len(utf8_bytes(kept_text(index)))
                    out.append((slot, int(arena.seqs[slot]), fit_index_text(own, fresh, budget)))
                quoted = None
                previous = slot
        return out

    def _commit_removal(
        self, removal: _Removal, reclaimed: bool
    ) -> tuple[list[str], list[str], int]:
        """Remove what ``removal`` names (still held: this commit's reclaim, or the
        reclaimer since, may have taken an expired one), rewrite the entries that quoted
        it, and publish; the ids removed and those not there (in the order asked, a
        memory whose every version was reclaimed first counting as not there), and the
        number of versions removed."""
        arena = self.arena
        seqs = arena.seqs
        held = [
            (s, owner)
            for s, q, owner in zip(removal.slots, removal.seqs, removal.owners, strict=True)
            if seqs[s] == q
        ]
        slots = [s for s, _ in held]
        present = {owner for _, owner in held}
        ids = [i for i in removal.asked if i in present]
        missing = [i for i in removal.asked if i not in present]
        stale: set[str] = set()
        for row, (slot, seq, index) in enumerate(removal.rewrites):
            if seqs[slot] != seq:
                continue
            stale.add(arena.index_text_of(slot))
            assert removal.vectors is not None
            assert removal.zero is not None
            if arena.zero[slot] != removal.zero[row]:
                arena.zero_count += 1 if removal.zero[row] else -1
                arena.zero[slot] = removal.zero[row]
            arena.vectors[slot] = removal.vectors[row]
            arena.reindex(slot, index)
            if removal.sparse is not None:
                self.sparse.put(slot, removal.sparse[row])
        if stale:
            self.embedder.forget_texts(stale)
        self._remove_all(slots)
        if slots or stale or reclaimed:
            self._publish()
        return ids, missing, len(slots)

    def _publish(self) -> None:
        self.snapshot = self.arena.snapshot(self.snapshot.version + 1)

    # --- reads -------------------------------------------------------------------------

    def query_vector(self, vector: object) -> npt.NDArray[np.float32] | None:
        """A normalized float32 copy of ``vector``, or None for a zero query
        (:func:`~actors._store.queries.normalize_query`, shared with the pg store)."""
        return normalize_query(vector, self.config.dimensions)

    async def scan(
        self, query: npt.NDArray[np.float32] | None, k: int, namespace: str | None
    ) -> RetrievalReport:
        """Score every live entry in scope against ``query`` and rank the best ``k``.

        A small scan runs inline on the snapshot current when it is called; a big one is
        coalesced with concurrent reads and scored in worker threads (see ``scan.py``).
        """
        self.check_usable()
        now_us = self.now_us()
        arena = self.arena

        def visible(snap: Snapshot) -> npt.NDArray[np.bool_] | None:
            return arena.visible(snap.high, now_us)

        report = await self.scans.scan(query, k, namespace, mask=visible)
        assert isinstance(report, RetrievalReport)
        return report

    async def search(
        self, request: SearchRequest, namespace: str, query: Query, *, turns: bool = False
    ) -> Hits:
        """Run ``request`` in ``namespace`` (``actors/_retrieval/engine.py``): the hits (documents,
        or with ``turns`` turns) and how many entries the scan scored. ``query`` is the
        normalized query vector of a kind other than ``recall`` (None: zero)."""
        self.check_usable()
        sparse = None
        if request.kind == "hybrid":
            assert request.query is not None
            sparse = await self.sparse_query(request.query)

        async def embed(text: str) -> npt.NDArray[np.float32] | None:
            return self.query_vector(await self.embedder.query(text))

        return await run_search(self, request, namespace, embed, query, sparse=sparse, turns=turns)

    async def fetch(
        self, ids: list[str], namespace: str, as_of: dt.datetime | None = None
    ) -> list[Document]:
        """The current, unexpired documents with these ids in ``namespace`` (with
        ``as_of``, the versions valid then), from the last commit (after one
        checkpoint, with no await while it reads)."""
        self.check_usable()
        await trio.lowlevel.checkpoint()
        self.check_usable()
        now_us = self.now_us()
        arena = self.arena
        found: list[Document] = []
        for entry_id in dict.fromkeys(ids):
            if as_of is None:
                slot = self._current(namespace, entry_id, now_us)
                if slot is not None:
                    found.append(self.document_of(slot))
                continue
            at = micros(as_of)
            for slot in arena.versions_of(namespace, entry_id):
                if (
                    arena.valid_from_us[slot] <= at < arena.valid_to_us[slot]
                    and arena.expires_us[slot] > now_us
                ):
                    found.append(self.document_of(slot))
                    break
        return found

    async def history(self, id: str, namespace: str) -> list[Document]:
        """Every held, unexpired version of memory ``id`` in ``namespace``, oldest
        first, from the last commit (after one checkpoint)."""
        self.check_usable()
        await trio.lowlevel.checkpoint()
        self.check_usable()
        now_us = self.now_us()
        expires = self.arena.expires_us
        return [
            self.document_of(slot)
            for slot in self.arena.versions_of(namespace, id)
            if expires[slot] > now_us
        ]

    async def check_keyword_search(self) -> None:
        """An in-memory store always has its keyword index."""

    @property
    def exact(self) -> bool:
        """Every in-memory read scores every entry in scope."""
        return True

    def counters(self) -> Counters:
        snap = self.snapshot
        return Counters(snap.live, self.arena.evicted_total, self.arena.zero_count, snap.version)

    async def refresh(self) -> None:
        """Nothing to read: the counters are this process's own, always current."""
        await trio.lowlevel.checkpoint()

    def _report(self, result: ScanResult) -> RetrievalReport:
        # Called while the scanned rows are pinned, so each payload matches its score.
        turns = self.turns_at(result.slots, result.scores.tolist())
        return RetrievalReport(turns=turns, scanned=result.scanned)

    def turns_at(self, slots: npt.NDArray[np.intp], scores: list[float]) -> list[RetrievedTurn]:
        """The live entries in ``slots`` as turns, with their ``scores``."""
        # Per-hit numpy scalar access and method calls are the bulk of a small read's
        # overhead, so the columns are read as lists in one go and the lookups inlined.
        arena = self.arena
        ids, sources, payloads = arena.ids, arena.sources, arena.payloads
        texts, roles = arena.texts, arena.roles
        metadata_of = arena.meta.get
        decode = unpack_message
        turns = []
        listed = slots.tolist()
        for slot, score, seq, namespace, occurred, conversation in zip(
            listed,
            scores,
            self.seqs[slots].tolist(),
            arena.namespaces_of(slots),
            arena.occurred_us[slots].tolist(),
            arena.conversations_of(listed),
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
                    occurred_at=from_micros(occurred),
                    conversation=conversation,
                )
            )
        return turns

    def projection_of(self, slot: int) -> str:
        """The projection of the message in ``slot`` (what ``message_of`` would give,
        without building it for an entry stored without a payload)."""
        arena = self.arena
        payload = arena.payloads[slot]
        if payload is None:
            return arena.text_of(slot)
        return projection(unpack_message(payload))

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
        """The entry in ``slot`` as a :class:`Document` (a turn's text is its projection,
        or the index text its writer gave), with its ``occurred_at`` and conversation."""
        arena = self.arena
        version = int(arena.versions[slot])
        valid_to = int(arena.valid_to_us[slot])
        expires = int(arena.expires_us[slot])
        return Document(
            text=arena.text_of(slot),
            id=arena.ids[slot],
            metadata=self.metadata_copy(slot),
            source_id=arena.source_ids[slot],
            occurred_at=arena.occurred_at_of(slot),
            conversation=arena.conversation_of(slot),
            expires_at=None if expires == NEVER else from_micros(expires),
            valid_from=from_micros(int(arena.valid_from_us[slot])),
            valid_to=None if valid_to == OPEN else from_micros(valid_to),
            version=version,
            supersedes=version - 1 if version > 1 else None,
        )
