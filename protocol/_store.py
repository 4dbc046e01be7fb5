"""The store's data: usage, retrieval reports, and the store actor's messages.

The actor messages form one tagged union, ``StoreRequest``, dispatched with ``match``.
Commands are verbs (``StoreTurns``); replies are past tense (``TurnsStored``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._chat import UnifiedMessage

__all__ = [
    "Clear",
    "Cleared",
    "Delete",
    "Deleted",
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
    """Store a batch of turns, all or nothing (SPEC §3)."""

    turns: list[UnifiedMessage]
    namespace: str = DEFAULT_NAMESPACE
    source: str = "offload"
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Delete(StoreMsg, frozen=True, kw_only=True, tag="delete"):
    """Delete entries by id; ``namespace=None`` looks in every namespace."""

    ids: list[str]
    namespace: str | None = None


class Clear(StoreMsg, frozen=True, kw_only=True, tag="clear"):
    """Remove every entry of one namespace, or of all when ``namespace`` is None."""

    namespace: str | None = None


StoreRequest = StoreTurns | Delete | Clear


class TurnsStored(StoreMsg, frozen=True, kw_only=True, tag="turns_stored"):
    """The batch committed. ``evicted`` counts both the dropped head of the batch and the
    old entries whose slots it took."""

    ids: list[str]
    sequences: list[int]
    evicted: int
    zero_norm: int


class Deleted(StoreMsg, frozen=True, kw_only=True, tag="deleted"):
    deleted: list[str]
    missing: list[str]


class Cleared(StoreMsg, frozen=True, kw_only=True, tag="cleared"):
    removed: int


StoreReply = TurnsStored | Deleted | Cleared
