"""The store's data: usage, retrieval reports, and the store actor's messages.

The actor messages form one tagged union, ``StoreRequest``, dispatched with ``match``.
Commands are verbs (``StoreTurns``); replies are past tense (``TurnsStored``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._chat import UnifiedMessage
from ._documents import DeleteResult, Document

__all__ = [
    "Clear",
    "Cleared",
    "Delete",
    "Deleted",
    "DocumentsUpserted",
    "UpsertDocuments",
    "RetrievalReport",
    "RetrievedTurn",
    "StoreMsg",
    "StoreReply",
    "StoreRequest",
    "StoreTurns",
    "TurnsStored",
    "VectorStoreUsage",
]

DEFAULT_NAMESPACE = "memory-default"


class VectorStoreUsage(msgspec.Struct, frozen=True, kw_only=True):
    """A store's fill level, read in O(1).

    ``evicted_entries`` counts every entry that FIFO eviction pushed out since the store
    opened, including the dropped head of an over-long batch. ``zero_norm_entries``
    counts the live entries whose vector had zero norm.
    """

    entries: int
    capacity: int
    fraction: float
    near_cap: bool
    evicted_entries: int
    zero_norm_entries: int


class RetrievedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One hit. ``score`` is cosine similarity in [-1, 1]."""

    message: UnifiedMessage
    score: float
    sequence: int
    namespace: str
    source: str
    metadata: dict[str, Any]
    id: str


class RetrievalReport(msgspec.Struct, frozen=True, kw_only=True):
    """Hits best first; ``scanned`` is how many live entries in scope were scored.

    ``exact`` is false only for a backend whose index is approximate.
    """

    turns: list[RetrievedTurn]
    scanned: int
    exact: bool = True


class StoreMsg(msgspec.Struct, frozen=True, tag_field="kind"):
    """Base of the store actor's messages."""


class StoreTurns(StoreMsg, frozen=True, kw_only=True, tag="store_turns"):
    """Store a batch of turns, all or nothing (SPEC §3).

    ``ids``, when given, names each turn (an explicit memory's id); an id already live
    in the namespace is replaced. Without ids, each turn's id is ``turn-<sequence>``.
    ``texts``, when given, is what each turn is indexed and embedded by, in place of
    its projection (for example the turn with its context, see
    :func:`protocol.contextual_entry`); the message itself is kept and returned as is.
    """

    turns: list[UnifiedMessage]
    namespace: str = DEFAULT_NAMESPACE
    source: str = "offload"
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    ids: list[str] | None = None
    texts: list[str] | None = None


class UpsertDocuments(StoreMsg, frozen=True, kw_only=True, tag="upsert_documents"):
    """Store documents, all or nothing; a document whose id is live in the namespace is
    replaced (new vector, text and metadata, and a new sequence number)."""

    documents: list[Document]
    namespace: str = DEFAULT_NAMESPACE


class Delete(StoreMsg, frozen=True, kw_only=True, tag="delete"):
    """Delete entries of one namespace by id (an id is unique within its namespace)."""

    ids: list[str]
    namespace: str = DEFAULT_NAMESPACE


class Clear(StoreMsg, frozen=True, kw_only=True, tag="clear"):
    """Remove every entry of one namespace, or of all when ``namespace`` is None."""

    namespace: str | None = None


StoreRequest = StoreTurns | UpsertDocuments | Delete | Clear


class TurnsStored(StoreMsg, frozen=True, kw_only=True, tag="turns_stored"):
    """The batch committed. ``evicted`` counts both the dropped head of the batch and the
    old entries whose slots it took."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    zero_norm: int


class DocumentsUpserted(StoreMsg, frozen=True, kw_only=True, tag="documents_upserted"):
    """The documents committed. ``replaced`` counts ids that were already live."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    replaced: int


#: The reply to :class:`Delete` is the toolkit's :class:`~protocol.DeleteResult`.
Deleted = DeleteResult


class Cleared(StoreMsg, frozen=True, kw_only=True, tag="cleared"):
    removed: int


StoreReply = TurnsStored | DocumentsUpserted | DeleteResult | Cleared
