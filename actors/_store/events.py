"""The event hub, its subscriptions, the store watch that turns writes into events, and
the event each store operation becomes (design §9).

A write that commits becomes ``vector_store.added`` or ``vector_store.deleted``; a read
becomes ``vector_store.searched``, whose query appears only as a fingerprint, and which
carries the retriever name and run id of the retrieval it served.

The hub fans each event out to every subscriber's own bounded buffer with
``send_nowait``. When a subscriber's buffer is full the event is dropped for that
subscriber alone and counted in its ``dropped``: a slow subscriber never blocks an
actor, and no buffer grows without bound.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import TypeVar, final

import attrs
import trio

from protocol import (
    DeleteResult,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    SearchRequest,
)
from protocol._events import SearchOperation
from protocol.checks import check_int
from protocol.events import (
    DocumentsAdded,
    DocumentsDeleted,
    Evicted,
    StoreNearCap,
    StoreSearched,
    fingerprint,
)
from protocol.messages import (
    Clear,
    Cleared,
    Delete,
    DocumentsUpserted,
    Forget,
    Forgotten,
    StoreReply,
    StoreTurns,
    TurnsStored,
    UpsertDocuments,
)

from .backend import PutDocuments, PutTurns, Write
from .contract import Store

__all__ = [
    "CURRENT_RUN",
    "STORE_RETRIEVER",
    "EventHub",
    "StoreWatch",
    "Subscription",
    "new_run_id",
    "now",
    "read_event",
    "retrieve_event",
    "search_event",
    "write_event",
]

R = TypeVar("R")


# --- events ---------------------------------------------------------------------------------


@final
@attrs.define(eq=False)
class Subscription:
    """One subscriber's view of the event stream: an async iterator with a bounded buffer.

    Iteration ends when the memory closes or :meth:`aclose` is called. Use it as
    ``async with memory.events() as events: async for event in events: ...`` so that it
    unsubscribes as soon as the block ends.

    Attributes:
        dropped: events this subscriber lost because its buffer was full.
        buffer_size: the buffer's capacity.
    """

    _hub: EventHub
    _send: trio.MemorySendChannel[Event]
    _receive: trio.MemoryReceiveChannel[Event]
    buffer_size: int
    dropped: int = 0

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        """The next event; waits until one arrives or the stream ends."""
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    def receive_nowait(self) -> Event:
        """The next buffered event, or ``trio.WouldBlock`` when there is none."""
        return self._receive.receive_nowait()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Unsubscribe; buffered events are discarded."""
        self._hub._unsubscribe(self)
        self._receive.close()
        await trio.lowlevel.checkpoint()

    def _offer(self, event: Event) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._hub._unsubscribe(self)


@attrs.define(eq=False)
class EventHub:
    """Fans events out to subscribers; :meth:`publish` never blocks."""

    _subscribers: list[Subscription] = attrs.field(factory=list)
    _closed: bool = False
    published: int = 0

    def subscribe(self, buffer_size: int = 256) -> Subscription:
        """A new subscription that sees every event published from now on.

        Raises:
            ConfigError: ``buffer_size`` is not an int > 0.
            trio.ClosedResourceError: the hub has closed.
        """
        size = check_int("buffer_size", buffer_size)
        if self._closed:
            raise trio.ClosedResourceError("the memory is closed; it publishes no more events")
        send, receive = trio.open_memory_channel[Event](size)
        subscription = Subscription(self, send, receive, size)
        self._subscribers.append(subscription)
        return subscription

    def publish(self, event: Event) -> None:
        """Offer ``event`` to every subscriber without waiting; full buffers drop it."""
        if self._closed:
            return
        self.published += 1
        for subscription in list(self._subscribers):
            subscription._offer(event)

    def close(self) -> None:
        """End every subscription's iteration (after what it has buffered)."""
        self._closed = True
        for subscription in self._subscribers:
            subscription._send.close()
        self._subscribers.clear()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)
        subscription._send.close()


def now() -> float:
    """The event timestamp: the trio clock, which is monotonic."""
    return trio.current_time()


@attrs.define(eq=False)
class StoreWatch:
    """Turns the outcome of each store write into ``Evicted`` and ``StoreNearCap`` events.

    ``StoreNearCap`` is edge-triggered: it is sent when a write takes the store from
    under ``warn_fraction`` to at or over it, not on every write while it stays there.
    """

    hub: EventHub
    store: Store
    namespace: str
    _near_cap: bool = False

    def after_write(self, stored: TurnsStored) -> None:
        usage = self.store.usage()
        if stored.evicted:
            self.hub.publish(
                Evicted(
                    at=now(),
                    namespace=self.namespace,
                    count=stored.evicted,
                    total=usage.evicted_entries,
                )
            )
        if usage.near_cap and not self._near_cap:
            self.hub.publish(
                StoreNearCap(
                    at=now(),
                    namespace=self.namespace,
                    entries=usage.entries,
                    capacity=usage.capacity,
                    fraction=usage.fraction,
                )
            )
        self._near_cap = usage.near_cap


# --- the event each store operation becomes -------------------------------------------


STORE_RETRIEVER = "store"
"""The retriever name of a direct read of a store handle (``search``, ``retrieve``,
``retrieve_in``, ``retrieve_embedding``) in its ``vector_store.searched`` event."""


#: The (retriever name, run id) of the retrieval the current task reads for: the recall
#: actor sets it around its store read, and a door's ``actors.doors.named_run`` around
#: its reads, so that the read's ``vector_store.searched``
#: carries the memory's run while the public ``Store`` protocol takes no run argument
#: (a store of the user's own simply never reads it). None: a direct read is a run of
#: its own, named :data:`STORE_RETRIEVER`.
CURRENT_RUN: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "trio_recall_run", default=None
)


def new_run_id() -> str:
    """A fresh run id for one retrieval's events: 32 hex characters (a random UUID4)."""
    return uuid.uuid4().hex


def write_event(request: Write, result: StoreReply) -> Event | None:
    """The event of a committed write, or None for a write that has none."""
    at = trio.current_time()
    match request, result:
        case PutTurns(request=StoreTurns(namespace=namespace, source=source)), TurnsStored():
            return DocumentsAdded(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                source=source,
                replaced=0,
                evicted=result.evicted,
            )
        case PutDocuments(request=UpsertDocuments(namespace=namespace)), DocumentsUpserted():
            return DocumentsAdded(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                source="document",
                replaced=result.replaced,
                evicted=result.evicted,
            )
        case Delete(namespace=namespace), DeleteResult():
            return DocumentsDeleted(
                at=at,
                namespace=namespace,
                count=len(result.deleted),
                ids=list(result.deleted),
                missing=len(result.missing),
            )
        case Forget(namespace=namespace), Forgotten():
            return DocumentsDeleted(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                missing=0,
            )
        case Clear(namespace=namespace), Cleared():
            return DocumentsDeleted(
                at=at,
                namespace=namespace or "",
                count=result.removed,
                ids=[],
                missing=0,
                cleared=True,
            )
    return None


def search_event(
    backend: str,
    profile: EmbeddingProfile | None,
    request: SearchRequest,
    namespace: str,
    k: int,
    scores: Sequence[float],
    started: float,
    run: tuple[str, str] | None = None,
) -> StoreSearched:
    """``vector_store.searched`` for a ``search`` whose hits scored ``scores``; ``k`` is
    the request's, cut to the store's capacity; ``run`` the (retriever, run id) of the
    retrieval it serves, None for a direct read (see :func:`read_event`)."""
    return read_event(
        "search",
        backend=backend,
        profile=profile,
        namespace=namespace,
        kind=request.kind,
        query=request.query,
        by_vector=request.vector is not None,
        filtered=request.filter is not None,
        k=k,
        scores=list(scores),
        started=started,
        run=run,
    )


def retrieve_event(
    backend: str,
    profile: EmbeddingProfile | None,
    namespace: str | None,
    query: str | None,
    k: int,
    report: RetrievalReport,
    started: float,
    run: tuple[str, str] | None = None,
) -> StoreSearched:
    """``vector_store.searched`` for ``retrieve`` (``query`` is its text) or, with
    ``query`` None, ``retrieve_embedding``; ``run`` as :func:`search_event` has it (see
    :func:`read_event`)."""
    return read_event(
        "retrieve_embedding" if query is None else "retrieve",
        backend=backend,
        profile=profile,
        namespace=namespace,
        kind="similarity",
        query=query,
        by_vector=query is None,
        filtered=False,
        k=k,
        scores=[t.score for t in report.turns],
        started=started,
        run=run,
    )


def read_event(
    operation: SearchOperation,
    *,
    backend: str,
    profile: EmbeddingProfile | None,
    namespace: str | None,
    kind: str,
    query: str | None,
    by_vector: bool,
    filtered: bool,
    k: int,
    scores: list[float],
    started: float,
    run: tuple[str, str] | None = None,
) -> StoreSearched:
    """``vector_store.searched`` for a read whose hits scored ``scores`` (best first),
    started at ``started`` (``time.perf_counter()``); ``namespace`` None is every one.
    ``backend`` is ``"memory"`` or ``"pg"``; ``profile`` the store's bound profile;
    ``run`` the (retriever name, run id) of the retrieval the read serves, or None for
    a direct read of the store: a run of its own, named :data:`STORE_RETRIEVER`."""
    retriever, run_id = (STORE_RETRIEVER, new_run_id()) if run is None else run
    return StoreSearched(
        at=trio.current_time(),
        namespace=namespace or "",
        operation=operation,
        kind=kind,
        backend=backend,
        profile=None if profile is None else profile.name,
        query_fingerprint=None if query is None else fingerprint(query),
        by_vector=by_vector,
        filtered=filtered,
        k=k,
        hits=len(scores),
        best=scores[0] if scores else None,
        seconds=time.perf_counter() - started,
        retriever=retriever,
        run_id=run_id,
    )
