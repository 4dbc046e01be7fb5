"""Typed events on ``Memory.events()``.

Every event carries ``at`` (a monotonic timestamp from the trio clock, in seconds) and
the ``namespace`` it concerns; ``""`` (never a valid namespace) means every namespace,
for a read or a clear that is not scoped. Tags are dotted, ``<area>.<what>``:

- ``compaction.offloaded``, ``compaction.summarized``;
- ``recall.recalled``, ``recall.failed``, ``recall.injected``;
- ``retriever.started``, ``retriever.completed``, ``retriever.failed`` (``Memory.retrieve``);
- ``embedding.started``, then ``embedding.completed`` or ``embedding.failed`` (every
  embedder call, with its usage record; a cancelled call sends nothing more). Until
  0.2, ``embedding.completed`` was ``embedding.embedded`` (:class:`EmbeddingEmbedded`);
  see :class:`EmbeddingCompleted` for what still works under the old name;
- ``vector_store.added``, ``vector_store.deleted``, ``vector_store.searched``,
  ``vector_store.near_cap``, ``vector_store.evicted``;
- ``indexing.started``, ``indexing.batch_completed``, ``indexing.completed``,
  ``indexing.failed``.

Queries never appear in clear: an event about a query carries a fingerprint, the first
16 hex characters of the query's sha256 (:func:`fingerprint`).

Runs: the ``retriever.*`` events and ``vector_store.searched`` name the ``retriever``
that read and carry a ``run_id`` (32 hex characters, fresh for each retrieval), as
LangChain's retriever callbacks do. The ``retriever.started`` and
``retriever.completed``/``retriever.failed`` of one ``Memory.retrieve`` share it, and so
does the ``vector_store.searched`` of the store read it made. A door names its reads
(``actors.doors.named_run``: ``"mcp"``, ``"cli"``, ``"langchain"``, ``"langgraph"``,
one run per call); a direct read of a store outside any named run is a run of its own,
named ``"store"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Literal

import msgspec

from ._embedding import EmbeddingCall, InputType


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


class InjectedItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item that entered the prompt: its store id, source and score (provenance)."""

    id: str
    source: str
    score: float


class RecallInjected(Event, frozen=True, kw_only=True, tag="recall.injected"):
    """``inject`` ran; ``outcome`` is the ``RecallInjection`` value, ``digest`` the new
    request's digest.

    ``items`` counts the items in the block, ``injected`` names each of them, best
    first, and ``dropped`` counts the hits left out to fit
    ``RecallSettings.max_block_bytes``.
    """

    outcome: str
    items: int
    digest: str
    injected: list[InjectedItem] = msgspec.field(default_factory=list)
    dropped: int = 0


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


class _RetrieverEvent(Event, frozen=True, kw_only=True):
    """What every ``retriever.*`` event carries: the query, k, and who answered."""

    query_fingerprint: str
    k: int
    #: Which store answered (``"memory"`` or ``"pg"``), with which bound embedding
    #: profile (its name, or None), and the recall's search kind (``"hybrid"``/``"dense"``).
    backend: str | None = None
    profile: str | None = None
    kind: str | None = None
    #: The retriever's name (``MemoryConfig.retriever_name``, ``"memory"`` by default) and
    #: this retrieval's run id, shared by its start and end events and by the
    #: ``vector_store.searched`` of its store read. Always set by this release; None only
    #: in an event decoded from an older log.
    retriever: str | None = None
    run_id: str | None = None


class RetrieverStarted(_RetrieverEvent, frozen=True, kw_only=True, tag="retriever.started"):
    """``Memory.retrieve`` started: the ``embedding.*`` and ``vector_store.searched``
    events of this retrieval follow, then ``retriever.completed`` or ``retriever.failed``."""


class RetrieverCompleted(_RetrieverEvent, frozen=True, kw_only=True, tag="retriever.completed"):
    """``Memory.retrieve`` returned ``hits`` of the ``scanned`` entries in ``seconds``
    (wall time); ``best`` is the top score."""

    hits: int
    scanned: int
    best: float | None
    seconds: float


class RetrieverFailed(_RetrieverEvent, frozen=True, kw_only=True, tag="retriever.failed"):
    """``Memory.retrieve`` raised; ``error`` is ``"TypeName: message"``."""

    error: str
    seconds: float


class EmbeddingStarted(Event, frozen=True, kw_only=True, tag="embedding.started"):
    """An embedder call began. ``embedding.completed`` or ``embedding.failed`` follows it
    (with the same provider and model), unless the call is cancelled.

    Attributes:
        provider: the model's provider (``"local"`` for a plain embedder).
        model: the model's name (a plain embedder's class name).
        input_type: ``"document"`` or ``"query"``.
        texts: how many texts the call embeds (cache hits included).
    """

    provider: str
    model: str
    input_type: InputType
    texts: int


class EmbeddingEmbedded(Event, frozen=True, kw_only=True, tag="embedding.embedded"):
    """Deprecated since 0.2 (removed in 0.3): the old name and tag of
    :class:`EmbeddingCompleted`, which subclasses it.

    Nothing sends it any more. It stays so that, for one release, a subscriber that
    filters with ``isinstance(event, EmbeddingEmbedded)`` still receives every
    ``embedding.completed`` event, and a log written before the rename (tag
    ``embedding.embedded``) still decodes as :data:`MemoryEvent`. Importing it from
    ``protocol.events`` warns with a ``DeprecationWarning``.
    """

    usage: EmbeddingCall


class EmbeddingCompleted(EmbeddingEmbedded, frozen=True, kw_only=True, tag="embedding.completed"):
    """One embedder call finished. ``usage`` is its record: texts asked for, cache hits
    (counted apart from what reached the provider), texts embedded, characters, tokens
    where the model reports them, batches, dimensions, wall time and cost.

    Named ``EmbeddingEmbedded`` (tag ``embedding.embedded``) before 0.2; it subclasses
    that deprecated class, so ``isinstance`` checks against the old name still match.
    A filter on the tag string must change to ``"embedding.completed"``.
    """


class EmbeddingFailed(Event, frozen=True, kw_only=True, tag="embedding.failed"):
    """One embedder call raised; ``usage.error`` names the exception type, and nothing
    of the call counts as provider usage."""

    usage: EmbeddingCall


class DocumentsAdded(Event, frozen=True, kw_only=True, tag="vector_store.added"):
    """A write committed ``count`` entries (documents or turns) as ``ids``.

    Attributes:
        source: ``"document"`` for documents, else the turns' source (``"offload"``,
            ``"compaction"``, ``"user"``, ``"explicit"``, ...).
        replaced: live entries with the same id that the write replaced.
        evicted: entries pushed out (FIFO), the dropped head of a batch included.
    """

    count: int
    ids: list[str]
    source: str
    replaced: int
    evicted: int


class DocumentsDeleted(Event, frozen=True, kw_only=True, tag="vector_store.deleted"):
    """A delete (or a clear) committed. ``ids`` are the deleted ids (empty for a clear),
    ``missing`` counts the ids that were not there, and ``cleared`` marks a clear (of
    every namespace when ``namespace`` is ``""``)."""

    count: int
    ids: list[str]
    missing: int
    cleared: bool = False


SearchOperation = Literal["search", "retrieve", "retrieve_embedding"]


class StoreSearched(Event, frozen=True, kw_only=True, tag="vector_store.searched"):
    """A read of the store returned ``hits``.

    Attributes:
        operation: ``"search"`` (a ``SearchRequest``), ``"retrieve"`` (text, one
            namespace or all) or ``"retrieve_embedding"`` (a vector).
        kind: ``"similarity"``, ``"mmr"``, ``"hybrid"`` or ``"bm25"``.
        backend: the store that answered: ``"memory"`` (``open_store``) or ``"pg"``
            (``open_pg_store``).
        profile: the name of the embedding profile the store is bound to (see
            :class:`~protocol.EmbeddingProfile`), or ``None`` for an unbound store.
        query_fingerprint: the query text's fingerprint, or ``None`` for a read by vector
            alone.
        by_vector: the caller gave the dense query vector.
        filtered: a metadata filter applied.
        k: the hits asked for.
        best: the top score, or ``None`` when nothing was found.
        seconds: wall time of the read, query embedding included.
        retriever: who read: the ``retriever_name`` of the memory whose
            ``Memory.retrieve`` made this read (``"memory"`` by default), the door's
            name for a read made in an ``actors.doors.named_run`` (``"mcp"``,
            ``"cli"``, ``"langchain"``, ``"langgraph"``), or ``"store"`` for a direct
            read of a store handle. None only in an event decoded from an older log.
        run_id: the retrieval's run id (32 hex characters): the one its
            ``retriever.*`` events carry, the named run's, or a fresh one for a
            direct read.
    """

    operation: SearchOperation
    kind: str
    backend: str
    profile: str | None
    query_fingerprint: str | None
    by_vector: bool
    filtered: bool
    k: int
    hits: int
    best: float | None
    seconds: float
    retriever: str | None = None
    run_id: str | None = None


class IndexingStarted(Event, frozen=True, kw_only=True, tag="indexing.started"):
    """``index()`` started its run ``run`` (the record manager's run number)."""

    run: int
    cleanup: str | None
    batch_size: int


class _IndexingCounts(Event, frozen=True, kw_only=True):
    """The counts an ``indexing.*`` event after the start carries: run ``run`` has read
    ``seen`` documents and added, updated, skipped and deleted these many."""

    run: int
    seen: int
    num_added: int
    num_updated: int
    num_skipped: int
    num_deleted: int


class IndexingBatchCompleted(
    _IndexingCounts, frozen=True, kw_only=True, tag="indexing.batch_completed"
):
    """Batch ``batch`` (0-based) of ``documents`` is written; the counts are the run's
    totals so far, ``seen`` documents read in all."""

    batch: int
    documents: int


class IndexingCompleted(_IndexingCounts, frozen=True, kw_only=True, tag="indexing.completed"):
    """``index()`` finished, cleanup included; the counts are its ``IndexResult``."""

    seconds: float


class IndexingFailed(_IndexingCounts, frozen=True, kw_only=True, tag="indexing.failed"):
    """``index()`` raised ``error`` (``"TypeName: message"``); the counts are what it
    had done (and written) before. A cancelled run sends nothing."""

    error: str
    seconds: float


MemoryEvent = (
    TurnsOffloaded
    | TurnsSummarized
    | Recalled
    | RecallFailed
    | RecallInjected
    | StoreNearCap
    | Evicted
    | RetrieverStarted
    | RetrieverCompleted
    | RetrieverFailed
    | EmbeddingStarted
    | EmbeddingCompleted
    | EmbeddingEmbedded
    | EmbeddingFailed
    | DocumentsAdded
    | DocumentsDeleted
    | StoreSearched
    | IndexingStarted
    | IndexingBatchCompleted
    | IndexingCompleted
    | IndexingFailed
)
"""Every event, as one tagged union to decode a log with (``msgspec.json.decode(line,
type=MemoryEvent)``). It holds the deprecated :class:`EmbeddingEmbedded` so that a log
written before 0.2 still decodes; nothing sends that event any more."""

EventSink = Callable[[Event], None]
"""Where a store or ``index()`` sends its events: called synchronously, so it must not
block (``EventHub.publish`` and ``Memory.publish`` never do)."""


def fingerprint(text: str) -> str:
    """The first 16 hex characters of sha256(text), for events that must not leak it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
