"""Typed events on ``Memory.events()``.

Every event carries ``at`` (a monotonic timestamp from the trio clock, in seconds) and
the ``namespace`` it concerns. Tags are dotted, ``<area>.<what>``, so that later areas
(``embedding.*``, ``vector_store.*``, ``retriever.*``, ``indexing.*``) join the same
stream without renaming anything. Queries never appear in clear: a recall carries a
fingerprint, the first 16 hex characters of the query's sha256.
"""

from __future__ import annotations

import hashlib

import msgspec

__all__ = [
    "Event",
    "Evicted",
    "MemoryEvent",
    "RecallFailed",
    "RecallInjected",
    "Recalled",
    "StoreNearCap",
    "TurnsOffloaded",
    "TurnsSummarized",
    "fingerprint",
]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """Base of every event."""

    at: float
    namespace: str


class TurnsOffloaded(Event, frozen=True, kw_only=True, tag="compaction.offloaded"):
    """Compaction moved ``count`` messages into the store as ``ids``."""

    count: int
    ids: list[str]


class TurnsSummarized(Event, frozen=True, kw_only=True, tag="compaction.summarized"):
    """Compaction replaced ``count`` messages with one summary; ``stored_id`` is set when
    the summary was also stored. (Not ``Summarized``, which names the compaction action.)"""

    count: int
    stored_id: str | None


class Recalled(Event, frozen=True, kw_only=True, tag="recall.recalled"):
    """A recall returned ``hits`` of the ``scanned`` entries; ``best`` is the top score."""

    query_fingerprint: str
    hits: int
    scanned: int
    best: float | None


class RecallFailed(Event, frozen=True, kw_only=True, tag="recall.failed"):
    """A recall raised; ``error`` is ``"TypeName: message"``."""

    query_fingerprint: str
    error: str


class RecallInjected(Event, frozen=True, kw_only=True, tag="recall.injected"):
    """``inject`` ran; ``outcome`` is the ``RecallInjection`` value, ``digest`` the new
    request's digest."""

    outcome: str
    items: int
    digest: str


class StoreNearCap(Event, frozen=True, kw_only=True, tag="vector_store.near_cap"):
    """A write left the store at or over ``warn_fraction``. Sent when the store crosses
    the threshold, not on every write while it stays over."""

    entries: int
    capacity: int
    fraction: float


class Evicted(Event, frozen=True, kw_only=True, tag="vector_store.evicted"):
    """A write pushed ``count`` entries out (FIFO), the dropped head of a batch included."""

    count: int
    total: int


MemoryEvent = (
    TurnsOffloaded
    | TurnsSummarized
    | Recalled
    | RecallFailed
    | RecallInjected
    | StoreNearCap
    | Evicted
)


def fingerprint(text: str) -> str:
    """The first 16 hex characters of sha256(text), for events that must not leak it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
