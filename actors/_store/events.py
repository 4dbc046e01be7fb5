"""The event hub, its subscriptions, and the store watch that turns writes into events.

The hub fans each event out to every subscriber's own bounded buffer with
``send_nowait``. When a subscriber's buffer is full the event is dropped for that
subscriber alone and counted in its ``dropped``: a slow subscriber never blocks an
actor, and no buffer grows without bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import TypeVar, final

import attrs
import trio

from protocol import Event
from protocol.checks import check_int
from protocol.events import Evicted, StoreNearCap
from protocol.messages import TurnsStored

from .contract import Store

__all__ = ["EventHub", "StoreWatch", "Subscription", "now"]

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
