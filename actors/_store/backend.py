"""The one seam between the store handle and a backend (httpx's ``BaseTransport``).

:class:`~actors.StoreHandle` (``handle.py``) is the only class callers hold, for every
backend: it checks every argument, builds each write's checked message (:data:`Write`),
sends it through the backend's bounded inbox, emits the read events and binds query
vectors to the embedding profile. Below it, a backend's actor implements
:class:`Backend` and nothing more: it embeds and commits what the handle built, and
answers reads from one snapshot. The in-memory actor is ``actors/_inmemory/actor.py``,
the PostgreSQL one ``actors/_pg/actor.py``.

**Writes are committed batches.** A :data:`Write` is a checked command: the handle ran
every shared check on it (``prepare.py``: sizes, names, metadata, times), once, in the
caller's task, so an error there changes nothing and never reaches the actor. The actor
trusts it: it only adds what it alone cannot hold (PostgreSQL text cannot hold a NUL),
embeds, sizes what needs the embedder (a derived index text), and commits the batch in
one step (one arena commit, one transaction), all or nothing. A later command (an update
that closes an old version, an expiry, a forget by filter) joins :data:`Write` the same
way: checked and built at the handle, prepared and committed whole by each backend.

**Reads are snapshot reads.** Each read sees one committed state: ``scan`` ranks the
dense top-k; ``search`` builds a :class:`~actors._retrieval.view.View` of one snapshot
(the dense, keyword and sparse lists, cosines, texts, term statistics and the hits'
documents or turns) and runs the one engine over it (``actors/_retrieval/engine.py``);
``fetch`` gets documents by id. None of them uses the inbox.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import NamedTuple, Protocol

import attrs
import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    Document,
    EmbeddingProfile,
    Event,
    Poisoned,
    RetrievalReport,
    RetrievedTurn,
    ScoredDocument,
    SearchRequest,
    VectorStoreConfig,
)
from protocol.messages import Clear, Delete, Forget, StoreTurns, UpsertDocuments

from .._embedding.adapter import EmbedderAdapter
from .mailbox import Envelope
from .prepare import DocumentBatch, TurnBatch

__all__ = [
    "Backend",
    "Counters",
    "Hits",
    "PutDocuments",
    "PutTurns",
    "StaleVersion",
    "Write",
]


@attrs.frozen
class PutTurns:
    """A ``store_turns`` batch the handle has checked (:func:`~.prepare.check_turns`).

    Attributes:
        request: the message as the caller's arguments made it (namespace, source).
        batch: what the checks found: the survivors, their texts, ids and sizes, the
            metadata as compact JSON. A backend reads the batch, never the request's
            mutable parts again.
    """

    request: StoreTurns
    batch: TurnBatch


@attrs.frozen
class PutDocuments:
    """An ``upsert`` batch the handle has checked (:func:`~.prepare.check_documents`)."""

    request: UpsertDocuments
    batch: DocumentBatch


#: What a backend's inbox carries: a checked write, committed all or nothing. A
#: ``Forget`` is checked by ``prepare.check_forget`` before it is sent.
Write = PutTurns | PutDocuments | Delete | Clear | Forget


class StaleVersion(Exception):
    """An update's ``Supersede`` named a version that is no longer the current one (a
    concurrent update won): the backend refused it and changed nothing. Private: the
    handle reads the current version again and retries (``StoreHandle.update``).

    Attributes:
        id, namespace: the memory.
        expected: the version the update was built on (0: none).
        current: the current version the backend holds (0: none).
    """

    def __init__(self, id: str, namespace: str, expected: int, current: int) -> None:
        super().__init__(
            f"memory {id!r} in namespace {namespace!r} is at version {current}; the update "
            f"was built on version {expected}"
        )
        self.id = id
        self.namespace = namespace
        self.expected = expected
        self.current = current


#: A read's query vector, normalized once: None where the kind reads no dense list
#: (bm25), or embeds its own query later (recall, once it knows which names to leave out).
Query = npt.NDArray[np.float32] | None

#: A search's hits (documents, or turns) and how many entries it scored.
Hits = tuple[list[ScoredDocument] | list[RetrievedTurn], int]


class Counters(NamedTuple):
    """A backend's counters as its handle knows them now (O(1), no I/O)."""

    entries: int
    evicted: int
    zero_norm: int
    version: int


class Backend(Protocol):
    """What the one store handle asks of a backend's actor.

    Everything here either never blocks or is a snapshot read; the only write path is
    the inbox (:attr:`send`), which the actor serves one :data:`Write` at a time.
    """

    @property
    def config(self) -> VectorStoreConfig:
        """The store's bounds."""
        ...

    @property
    def profile(self) -> EmbeddingProfile | None:
        """The embedding profile the store is bound to, or None."""
        ...

    @property
    def embedder(self) -> EmbedderAdapter:
        """The store's embedder, behind its adapter (timeouts, faults, usage)."""
        ...

    @property
    def on_event(self) -> Callable[[Event], None] | None:
        """The sink the handle gives each read's ``vector_store.searched`` event."""
        ...

    @property
    def clock(self) -> Callable[[], dt.datetime]:
        """The store's clock (``open_store(clock=)``): every "now" of the store (write
        times, ttl, update's default ``valid_from``, expiry on reads, reclaim)."""
        ...

    # --- commit: one checked batch at a time, through the bounded inbox ---------------

    @property
    def send(self) -> trio.MemorySendChannel[Envelope[Write, object]]:
        """The inbox's send side: the handle clones it and sends ``Envelope(write,
        reply)``; the actor embeds, commits the batch whole and answers the reply."""
        ...

    @property
    def inbox_size(self) -> int:
        """The inbox's capacity."""
        ...

    # --- health -----------------------------------------------------------------------

    @property
    def crash(self) -> BaseException | None:
        """What crashed the actor, or None."""
        ...

    def check_usable(self) -> None:
        """Raise :class:`~protocol.Poisoned` once the actor has crashed."""
        ...

    def crashed(self, crash: BaseException) -> Poisoned:
        """Poison the store with ``crash``; the error its callers should raise."""
        ...

    #: A crash to raise at the next write, before its commit (set by
    #: ``actors.testing.inject_crash``, on either backend).
    armed_crash: BaseException | None

    # --- snapshot reads ----------------------------------------------------------------

    def query_vector(self, vector: object) -> npt.NDArray[np.float32] | None:
        """``vector`` (an embedder's query) normalized, or None for a zero query."""
        ...

    def checked_query(
        self, vector: object, profile: EmbeddingProfile | None
    ) -> npt.NDArray[np.float32] | None:
        """A caller's vector, normalized once ``profile`` is checked against the
        store's (``queries.checked_query``)."""
        ...

    async def scan(
        self, query: npt.NDArray[np.float32] | None, k: int, namespace: str | None
    ) -> RetrievalReport:
        """The dense top ``k`` in scope (every namespace when None), from one snapshot."""
        ...

    async def search(
        self, request: SearchRequest, namespace: str, query: Query, *, turns: bool = False
    ) -> Hits:
        """Run the engine's ``request`` over a view of one snapshot: dense, keyword
        (BM25, or the sparse index) and term statistics read there; the hits as
        documents, or with ``turns`` as turns."""
        ...

    async def fetch(
        self, ids: list[str], namespace: str, as_of: dt.datetime | None = None
    ) -> list[Document]:
        """The current, unexpired documents with these ids in ``namespace`` (missing ids
        left out), each with its ``version``, ``valid_from`` and ``expires_at``; with
        ``as_of``, instead the version valid at that instant
        (``valid_from <= as_of < valid_to``), still unexpired."""
        ...

    async def history(self, id: str, namespace: str) -> list[Document]:
        """Every version of memory ``id`` still held in ``namespace``, oldest first
        (version 1..n), expired ones left out; ``[]`` for an unknown id."""
        ...

    async def check_keyword_search(self) -> None:
        """Raise ConfigError when a ``bm25`` or ``hybrid`` search cannot run now."""
        ...

    @property
    def exact(self) -> bool:
        """Whether dense reads are exact (False through an approximate index)."""
        ...

    # --- state -------------------------------------------------------------------------

    def counters(self) -> Counters:
        """The live, evicted and zero-norm entries and the commits, as known now."""
        ...

    async def refresh(self) -> None:
        """Read the counters afresh where other processes share the store."""
        ...
