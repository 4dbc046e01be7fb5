"""The actors' messages: one base, one tagged union per actor (design §7).

Every actor message is a frozen msgspec Struct tagged by ``kind``, so a message stream
can be logged and replayed through msgpack. Commands are verbs (``StoreTurns``,
``Compress``, ``Recall``, ``Inject``); replies are past tense (``TurnsStored``,
``Compressed``). The store's reply to :class:`Delete` is the toolkit's
:class:`~protocol.DeleteResult`; the injection actor's is :class:`~protocol.Injected`.
Users rarely build these: the handles and ``Memory`` do.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import msgspec

from ._chat import UnifiedMessage, UnifiedRequest
from ._documents import DeleteResult, Document
from ._filters import Filter
from ._memory import CompressionReport, RecallSettings
from ._store import DEFAULT_NAMESPACE, RetrievalReport


class Msg(msgspec.Struct, frozen=True, tag_field="kind"):
    """The base of every actor message. Subclasses repeat ``kw_only=True``."""


#: How a write treats a memory that is already there: ``"exact"``, the same text (a
#: turn's projection, a document's text) current in the namespace; ``"near"``, a current
#: entry whose cosine similarity to it is at least the store's near-duplicate threshold.
#: Either way the write returns the existing id, flagged as a duplicate, and writes
#: nothing for it. None: memories accumulate (the library's default, seed 001).
Dedupe = Literal["exact", "near"]


class StoreTurns(Msg, frozen=True, kw_only=True, tag="store_turns"):
    """Store a batch of turns, all or nothing (design §3).

    ``ids``, when given, names each turn (an explicit memory's id); an id already live
    in the namespace is replaced. Without ids, each turn's id is ``turn-<sequence>``.
    ``occurred_at`` (None: the time of the write) and ``conversation`` apply to every
    turn of the batch, in order (see :class:`~protocol.Document`).
    ``texts``, when given, is what each turn is indexed and embedded by, in place of
    its projection (for example the turn with its context, see
    :func:`protocol.compaction.contextual_entry`); the message itself is kept and
    returned as is. ``expires_at`` (None: never) applies to every turn of the batch;
    offloaded history never expires unless its writer says so (design §3). ``dedupe``
    (see :data:`Dedupe`) and ``near_threshold`` (a cosine in (0, 1]; None: the
    store's documented default) say how a turn already there is treated.
    """

    turns: list[UnifiedMessage]
    namespace: str = DEFAULT_NAMESPACE
    source: str = "offload"
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    ids: list[str] | None = None
    texts: list[str] | None = None
    occurred_at: dt.datetime | None = None
    conversation: str | None = None
    expires_at: dt.datetime | None = None
    dedupe: Dedupe | None = None
    near_threshold: float | None = None


class Supersede(msgspec.Struct, frozen=True, kw_only=True):
    """What makes an upsert an update with history: the one document of the batch
    becomes version ``version + 1`` of the memory ``id``, valid from ``valid_from``,
    and the current version, which must still be ``version``, is closed at
    ``valid_from`` (its ``valid_to``) and kept. With ``version`` 0 the memory must not
    exist yet (the document becomes version 1)."""

    id: str
    version: int
    valid_from: dt.datetime


class UpsertDocuments(Msg, frozen=True, kw_only=True, tag="upsert_documents"):
    """Store documents, all or nothing; a document whose id is live in the namespace is
    replaced (new vector, text and metadata, and a new sequence number).

    ``embeddings``: the documents' precomputed embeddings as one matrix, row i for
    document i, in the bytes of a C-ordered float64 array of ``len(documents)`` rows
    (what ``add_documents(..., embeddings=)`` sends: no Python float per component), or
    None. With it, no document may carry its own ``embedding``.
    """

    documents: list[Document]
    namespace: str = DEFAULT_NAMESPACE
    embeddings: bytes | None = None
    dedupe: Dedupe | None = None
    near_threshold: float | None = None
    supersede: Supersede | None = None


class Delete(Msg, frozen=True, kw_only=True, tag="delete"):
    """Delete entries of one namespace by id (an id is unique within its namespace)."""

    ids: list[str]
    namespace: str = DEFAULT_NAMESPACE


class Clear(Msg, frozen=True, kw_only=True, tag="clear"):
    """Remove every entry of one namespace, or of all when ``namespace`` is None."""

    namespace: str | None = None


class Forget(Msg, frozen=True, kw_only=True, tag="forget"):
    """Forget every version of the matching memories, all or nothing, and every trace
    of their text (indexes, statistics, caches).

    Either ``ids`` (in ``namespace``), or a selection: every memory of ``namespace``
    that matches ``filter`` (None: any) and whose ``occurred_at`` is before ``before``
    (None: any time). An empty selection (no ids, no filter, no ``before``) forgets
    the whole namespace.
    """

    ids: list[str] | None = None
    namespace: str = DEFAULT_NAMESPACE
    filter: Filter | None = None
    before: dt.datetime | None = None


StoreRequest = StoreTurns | UpsertDocuments | Delete | Clear | Forget


class TurnsStored(Msg, frozen=True, kw_only=True, tag="turns_stored"):
    """The batch committed. ``evicted`` counts both the dropped head of the batch and the
    old entries whose slots it took. ``duplicates`` lists the ids of ``ids`` that were
    already there (a deduplicated write, ``dedupe=``): nothing was written for them."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    zero_norm: int
    duplicates: list[str] = msgspec.field(default_factory=list)


class DocumentsUpserted(Msg, frozen=True, kw_only=True, tag="documents_upserted"):
    """The documents committed. ``replaced`` counts ids that were already live."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    replaced: int
    duplicates: list[str] = msgspec.field(default_factory=list)


class Cleared(Msg, frozen=True, kw_only=True, tag="cleared"):
    """Every entry of the namespace (or of all) is gone; ``removed`` counts them."""

    removed: int


class Forgotten(Msg, frozen=True, kw_only=True, tag="forgotten"):
    """The ids of the memories forgotten (deduplicated; for ``ids``, in input order,
    leaving out those not there), and how many stored versions went with them."""

    ids: list[str]
    versions: int


StoreReply = TurnsStored | DocumentsUpserted | DeleteResult | Cleared | Forgotten


class Compress(Msg, frozen=True, kw_only=True, tag="compress"):
    """Apply the configured strategies to ``messages``; ``date`` is when they were said
    (any human-readable form), for the entries ``Offload`` writes."""

    messages: list[UnifiedMessage]
    date: str | None = None


class Compressed(Msg, frozen=True, kw_only=True, tag="compressed"):
    """The new prompt and what each strategy did."""

    messages: list[UnifiedMessage]
    report: CompressionReport


class Recall(Msg, frozen=True, kw_only=True, tag="recall"):
    """Rank the ``k`` best entries of ``namespace`` for ``query`` as ``settings`` says,
    then drop those whose cosine similarity is under ``min_similarity``. ``as_of``
    reads each memory's version valid at that instant instead of the current one.

    ``retriever`` and ``run_id`` name the retrieval this read belongs to, for the
    ``vector_store.searched`` event it sends (None: the recall actor's own run)."""

    query: str
    k: int
    namespace: str
    min_similarity: float | None = None
    settings: RecallSettings = msgspec.field(default_factory=RecallSettings)
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    retriever: str | None = None
    run_id: str | None = None
    as_of: dt.datetime | None = None


class Inject(Msg, frozen=True, kw_only=True, tag="inject"):
    """Render ``report`` and place it in ``request``."""

    report: RetrievalReport
    request: UnifiedRequest
