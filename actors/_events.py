"""The event hub, and the small mailbox plumbing the memory actors share.

The hub fans each event out to every subscriber's own bounded buffer with
``send_nowait``. When a subscriber's buffer is full the event is dropped for that
subscriber alone and counted in its ``dropped``: a slow subscriber never blocks an
actor, and no buffer grows without bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Generic, TypeVar

import attrs
import trio

from protocol import ConfigError, Event, Evicted, StoreNearCap, TurnsStored

from ._handle import Store
from ._mailbox import Envelope, ReplySlot, answer_base_exception, drain

__all__ = ["EventHub", "Mailbox", "StoreWatch", "Subscription", "check_size", "now"]

R = TypeVar("R")


def check_size(name: str, value: object) -> int:
    """An int > 0 for a buffer or inbox size, or :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} is {value!r}; expected an int > 0")
    return value


# --- mailboxes ------------------------------------------------------------------------------


@attrs.define(eq=False)
class Mailbox(Generic[R]):
    """A bounded inbox for one actor, and the way callers ask it something.

    The actor owns ``receive``; callers use :meth:`ask`. The actor replies through the
    envelope's slot, which never blocks, so an actor never waits on a caller that has
    gone.
    """

    name: str
    size: int
    send: trio.MemorySendChannel[Envelope[R]]
    receive: trio.MemoryReceiveChannel[Envelope[R]]
    #: Set by ``open_memory``: poisons the store, and gives what a crashed request raises.
    crashed: Callable[[BaseException], BaseException] | None = None

    @classmethod
    def open(cls, name: str, size: int) -> Mailbox[R]:
        send, receive = trio.open_memory_channel[Envelope[R]](check_size(f"{name} inbox", size))
        return cls(name, size, send, receive)

    async def ask(self, request: R) -> object:
        """Send ``request`` and wait for the reply.

        Blocks while the inbox is full, then until the actor replies. If the caller is
        cancelled while it waits, the actor still handles the request and its reply is
        dropped.

        Raises:
            trio.ClosedResourceError: the memory has closed.
            Exception: whatever the actor's handler raised for this request.
        """
        reply = ReplySlot()
        try:
            await self.send.send(Envelope(request, reply))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise trio.ClosedResourceError(f"the {self.name} actor is closed") from None
        return await reply.wait()

    async def serve(
        self,
        handle: Callable[[R], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run an actor: answer each request with ``await handle(request)``, in order.

        An exception from ``handle`` is that caller's reply, not a crash. When the actor
        stops (its inbox closes, or it is cancelled), the request in flight and every
        queued one fail with ``trio.ClosedResourceError``, so no caller waits forever;
        the inbox is drained before it is closed, or the drain would find nothing.
        """
        in_flight: Envelope[R] | None = None
        try:
            task_status.started()
            async for envelope in self.receive:
                in_flight = envelope
                del envelope  # an idle actor must not keep the last request alive
                try:
                    result = await handle(in_flight.request)
                except Exception as error:
                    in_flight.reply.fail(error)
                except BaseException as error:
                    # A summarizer's KeyboardInterrupt reaches its caller as itself; any
                    # other BaseException is a crash of the store this actor works for.
                    in_flight.reply.fail(answer_base_exception(error, self._crashed))
                else:
                    in_flight.reply.succeed(result)
                in_flight = None
        finally:
            if in_flight is not None:
                in_flight.reply.fail(
                    trio.ClosedResourceError(f"the {self.name} actor closed mid-request")
                )
            self.fail_leftovers()

    def fail_leftovers(self) -> None:
        """Fail every queued request and close the inbox, so no caller waits on an
        actor that has stopped."""
        drain(
            self.receive,
            lambda: trio.ClosedResourceError(f"the {self.name} actor closed before it replied"),
        )

    def _crashed(self, crash: BaseException) -> BaseException:
        if self.crashed is None:
            raise crash
        return self.crashed(crash)

    def used(self) -> int:
        return self.send.statistics().current_buffer_used


# --- events ---------------------------------------------------------------------------------


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
        size = check_size("buffer_size", buffer_size)
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
