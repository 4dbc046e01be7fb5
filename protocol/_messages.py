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
from typing import Any

import msgspec

from ._chat import UnifiedMessage, UnifiedRequest
from ._documents import DeleteResult, Document
from ._memory import CompressionReport, RecallSettings
from ._store import DEFAULT_NAMESPACE, RetrievalReport


class Msg(msgspec.Struct, frozen=True, tag_field="kind"):
    """The base of every actor message. Subclasses repeat ``kw_only=True``."""


class StoreTurns(Msg, frozen=True, kw_only=True, tag="store_turns"):
    """Store a batch of turns, all or nothing (design §3).

    ``ids``, when given, names each turn (an explicit memory's id); an id already live
    in the namespace is replaced. Without ids, each turn's id is ``turn-<sequence>``.
    ``occurred_at`` (None: the time of the write) and ``conversation`` apply to every
    turn of the batch, in order (see :class:`~protocol.Document`).
    ``texts``, when given, is what each turn is indexed and embedded by, in place of
    its projection (for example the turn with its context, see
    :func:`protocol.compaction.contextual_entry`); the message itself is kept and
    returned as is.
    """

    turns: list[UnifiedMessage]
    namespace: str = DEFAULT_NAMESPACE
    source: str = "offload"
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    ids: list[str] | None = None
    texts: list[str] | None = None
    occurred_at: dt.datetime | None = None
    conversation: str | None = None


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


class Delete(Msg, frozen=True, kw_only=True, tag="delete"):
    """Delete entries of one namespace by id (an id is unique within its namespace)."""

    ids: list[str]
    namespace: str = DEFAULT_NAMESPACE


class Clear(Msg, frozen=True, kw_only=True, tag="clear"):
    """Remove every entry of one namespace, or of all when ``namespace`` is None."""

    namespace: str | None = None


StoreRequest = StoreTurns | UpsertDocuments | Delete | Clear


class TurnsStored(Msg, frozen=True, kw_only=True, tag="turns_stored"):
    """The batch committed. ``evicted`` counts both the dropped head of the batch and the
    old entries whose slots it took."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    zero_norm: int


class DocumentsUpserted(Msg, frozen=True, kw_only=True, tag="documents_upserted"):
    """The documents committed. ``replaced`` counts ids that were already live."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    replaced: int


class Cleared(Msg, frozen=True, kw_only=True, tag="cleared"):
    """Every entry of the namespace (or of all) is gone; ``removed`` counts them."""

    removed: int


StoreReply = TurnsStored | DocumentsUpserted | DeleteResult | Cleared


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
    then drop those whose cosine similarity is under ``min_similarity``.

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


class Inject(Msg, frozen=True, kw_only=True, tag="inject"):
    """Render ``report`` and place it in ``request``."""

    report: RetrievalReport
    request: UnifiedRequest
