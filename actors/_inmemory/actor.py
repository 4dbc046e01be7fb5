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
    projection,
)
from protocol.checks import unpack_message
from protocol.messages import (
    Clear,
    Cleared,
    Delete,
    DocumentsUpserted,
    StoreReply,
    TurnsStored,
)

from .._embedding.adapter import EmbedderAdapter
from .._embedding.protocols import AnyEmbedder
from .._embedding.sparse import SparseEmbeddingModel
from .._store.backend import Counters, Hits, PutDocuments, PutTurns, Query, Write
from .._store.events import write_event
from .._store.index_text import document_times, indexed_texts, turn_index_texts, write_time
from .._store.mailbox import REPLIED, CrashableActor, Envelope
from .._store.precomputed import document_vectors
from .._store.prepare import Clock, checked_rows, default_clock, private_json
from .._store.queries import checked_query, normalize_query
from .arena import Arena, Entries, Snapshot, from_micros, kept_text, micros
from .blas import BlasControl, LeaveThreads
from .filtering import PackedMetadata
from .scan import DEFAULT_THREAD_SCAN_THRESHOLD, ScanEngine, ScanResult
from .sparse_index import SparseIndex, SparsePair, checked_sparse
from .view import run_search

__all__ = ["metadata_copy", "packed_metadata"]

logger = logging.getLogger("trio_recall.store")

_ENCODER = msgspec.msgpack.Encoder()
_EMPTY_METADATA: Mapping[str, Any] = {}
# Below this squared norm a query's float32 square cannot overflow (float32 max ≈ 3.4e38).


_Envelope = Envelope[Write, object]


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
            case Delete() | Clear():
                return None
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    # No KeyboardInterrupt may land in the middle of a commit: it is one synchronous step.
    @trio.lowlevel.enable_ki_protection
    def _commit(self, request: Write, prepared: object) -> StoreReply:
        if self.armed_crash is not None:
            crash, self.armed_crash = self.armed_crash, None
            raise crash
        match request:
            case PutTurns():
                assert isinstance(prepared, _Prepared)
                ids, seqs, evicted, _ = self._commit_entries(prepared)
                zero = int(np.count_nonzero(prepared.entries.zero))
                return TurnsStored(ids=ids, sequences=seqs, evicted=evicted, zero_norm=zero)
            case PutDocuments():
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

    async def _prepare_turns(self, write: PutTurns) -> _Prepared:
        # The handle has checked the batch (``check_turns``); it is trusted here.
        batch, namespace, source = write.batch, write.request.namespace, write.request.source
        config = self.config
        # Kept as the compact JSON that max_entry_bytes counted, which is also the copy
        # that the caller's later mutations cannot reach.
        metadata = packed_metadata(batch.metadata_json)
        keep = len(batch.survivors)
        when = batch.occurred_at or write_time()
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

        times = await document_times(survivors, batch.sizes, self.config.max_entry_bytes, before)
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
        self.arena.settle()
        if deleted:
            self._publish()
        return DeleteResult(deleted=deleted, missing=missing)

    def _commit_clear(self, namespace: str | None) -> Cleared:
        slots = self.arena.live_slots(namespace)
        for slot in slots:
            self.arena.remove(slot)
            self.sparse.drop(slot)
        self.arena.settle()
        if slots:
            self._publish()
        return Cleared(removed=len(slots))

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
        report = await self.scans.scan(query, k, namespace)
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
        """The live documents with these ids in ``namespace``, from the last commit
        (after one checkpoint, with no await while it reads)."""
        self.check_usable()
        await trio.lowlevel.checkpoint()
        self.check_usable()
        slots = (self.arena.slot_of(namespace, i) for i in dict.fromkeys(ids))
        return [self.document_of(slot) for slot in slots if slot is not None]

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
        return Document(
            text=arena.text_of(slot),
            id=arena.ids[slot],
            metadata=self.metadata_copy(slot),
            source_id=arena.source_ids[slot],
            occurred_at=arena.occurred_at_of(slot),
            conversation=arena.conversation_of(slot),
        )
