"""The store's data: usage and retrieval reports (its actor's messages are in
``protocol.messages``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from ._chat import UnifiedMessage

__all__ = ["DEFAULT_NAMESPACE", "RetrievalReport", "RetrievedTurn", "VectorStoreUsage"]

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
    """One hit. ``score`` is cosine similarity in [-1, 1].

    ``occurred_at`` is when the entry happened (its write time unless the writer said),
    ``conversation`` the conversation it belongs to; ``rank`` and ``channels`` are
    recall's (see :class:`~protocol.ScoredDocument`), for a hit recall ranked.
    """

    message: UnifiedMessage
    score: float
    sequence: int
    namespace: str
    source: str
    metadata: dict[str, Any]
    id: str
    occurred_at: dt.datetime | None = None
    conversation: str | None = None
    rank: int | None = None
    channels: list[str] = msgspec.field(default_factory=list)


class RetrievalReport(msgspec.Struct, frozen=True, kw_only=True):
    """Hits best first; ``scanned`` is how many live entries in scope were scored.

    ``exact`` is false only for a backend whose index is approximate.
    """

    turns: list[RetrievedTurn]
    scanned: int
    exact: bool = True
