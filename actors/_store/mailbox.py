"""What every actor shares: the envelope and one-shot reply slot it answers through, the
serve loop of a store actor that can crash (drain on close, poison on crash), and the
:class:`Mailbox` the memory's own actors serve."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs
import trio

from protocol import Poisoned, VectorStoreConfig, VectorStoreError

if TYPE_CHECKING:  # backend.py imports this module: only the type, for mypy
    from .backend import Write

__all__ = [
    "PROPAGATE",
    "REPLIED",
    "CrashableActor",
    "Envelope",
    "Mailbox",
    "ReplySlot",
    "answer_base_exception",
    "drain",
]

R = TypeVar("R")
#: The reply type of a request, so that a caller gets what the actor answers, typed.
A = TypeVar("A")


@attrs.define(eq=False)
class ReplySlot(Generic[A]):
    """A one-shot reply, of type ``A``. Setting it never blocks, so an actor never waits
    on a caller that has gone away; only the first answer counts.

    Built on ``wait_task_rescheduled`` and ``reschedule``, the primitives ``trio.Event``
    is built on, without the Event's parking lot: every write makes one slot and
    answers it once, and the lot cost about 8 us of each write's round trip here.
    """

    _waiter: trio.lowlevel.Task | None = None  # the caller, while it waits
    _done: bool = False
    _error: BaseException | None = None
    # Set only by succeed(), and read only once it has been, so it needs no default.
    _value: A = attrs.field(init=False)

    def succeed(self, value: A) -> None:
        if not self._done:
            self._value = value
            self._answered()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            self._error = error
            self._answered()

    # Like trio.Event.set: a KeyboardInterrupt between the flag and the wake-up would
    # leave the waiter asleep.
    @trio.lowlevel.enable_ki_protection
    def _answered(self) -> None:
        self._done = True
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            trio.lowlevel.reschedule(waiter)

    async def wait(self) -> A:
        """Wait for the answer; raise the error, or return the value.

        If the caller is cancelled while it waits, the answer is simply never read.
        """
        if self._done:
            await trio.lowlevel.checkpoint()
        else:
            self._waiter = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._waiter = None  # a later answer wakes nobody
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        if self._error is not None:
            raise self._error
        return self._value


@attrs.frozen
class Envelope(Generic[R, A]):
    """A request and its one-shot reply slot."""

    request: R
    reply: ReplySlot[A]


def drain(
    receive: trio.MemoryReceiveChannel[Envelope[R, A]], error: Callable[[], BaseException]
) -> None:
    """Fail every request still queued in ``receive``, then close it.

    Drain first, close after: a closed channel has nothing left to receive, so the other
    order leaves those callers waiting forever (a bug this project had twice).
    """
    while True:
        try:
            leftover = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
        leftover.reply.fail(error())
    receive.close()


class CrashableActor:
    """The lifecycle of a store actor: serve the inbox in order, and when the actor
    stops, fail the request in flight and every queued one instead of stranding them.

    A subclass sets ``config``, ``send``, ``receive``, ``crash`` and ``what`` (its name
    in messages) and implements ``_handle``, which answers through the envelope's reply
    slot. An
    unexpected exception becomes a crash through ``_poison``: every later call raises
    :class:`~protocol.Poisoned`, with the crash as its cause.
    """

    config: VectorStoreConfig
    send: trio.MemorySendChannel[Envelope[Write, object]]
    receive: trio.MemoryReceiveChannel[Envelope[Write, object]]
    crash: BaseException | None
    what: str
    logger: logging.Logger

    async def _handle(self, envelope: Envelope[Write, object]) -> None:
        raise NotImplementedError

    async def _prepare(self, request: Write) -> object:
        raise NotImplementedError

    async def _prepared_or_replied(self, envelope: Envelope[Write, object]) -> object:
        """Phase 1 of a write, the same on every backend: validate and embed (it may
        await and fail, and changes nothing). Returns the prepared write, or
        :data:`REPLIED` once the caller has its answer: ``Poisoned`` on a crashed store,
        the ``VectorStoreError`` itself (a reply, not a crash), or ``Poisoned`` after any
        other exception, which is a crash."""
        if self.crash is not None:
            envelope.reply.fail(self.poisoned())
            return REPLIED
        try:
            return await self._prepare(envelope.request)
        except VectorStoreError as error:
            envelope.reply.fail(error)
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
        return REPLIED

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the inbox until it closes or the actor is cancelled.

        ``_handle`` answers ordinary exceptions itself; what escapes it is sorted by
        :func:`answer_base_exception`, so nothing but ``Cancelled`` ever leaves this task
        (an exception leaving an actor task would tear down the caller's nursery).
        """
        in_flight: Envelope[Write, object] | None = None
        try:
            task_status.started()
            async for envelope in self.receive:
                in_flight = envelope
                # Drop the loop's reference: an idle actor must not keep the last batch
                # (up to max_entries × max_entry_bytes) alive.
                del envelope
                try:
                    await self._handle(in_flight)
                except BaseException as error:
                    in_flight.reply.fail(answer_base_exception(error, self.crashed))
                in_flight = None
        finally:
            if in_flight is not None:
                in_flight.reply.fail(self._closing_error())
            drain(self.receive, self._closing_error)

    def services(self) -> list[Callable[..., Awaitable[None]]]:
        """Tasks the actor needs besides :meth:`run` (``task_status``-style), started
        with it by the store lifecycle and stopped with it (the scan runner, say)."""
        return []

    def _closing_error(self) -> BaseException:
        if self.crash is not None:
            return self.poisoned()
        return trio.ClosedResourceError("the store closed before this request was applied")

    def poisoned(self) -> Poisoned:
        crash = self.crash
        error = Poisoned(
            f"the {self.what} crashed ({type(crash).__name__}: {crash}); the store is poisoned"
        )
        error.__cause__ = crash
        return error

    def check_usable(self) -> None:
        if self.crash is not None:
            raise self.poisoned()

    def _poison(self, crash: BaseException) -> None:
        if self.crash is not None:
            return  # the first crash is the cause; it is logged once
        self.crash = crash
        self.logger.error("%s crashed; the store is poisoned", self.what, exc_info=crash)

    def crashed(self, crash: BaseException) -> Poisoned:
        """Poison the store with ``crash`` (a bug seen by any task working for it) and
        return the :class:`~protocol.Poisoned` that task should raise."""
        self._poison(crash)
        return self.poisoned()


#: What :meth:`CrashableActor._prepared_or_replied` returns once the caller has its answer.
REPLIED = object()

#: Exceptions that are a request to stop the program, not a bug: they reach the caller
#: as themselves and never poison a store.
PROPAGATE: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)


def answer_base_exception(
    error: BaseException, crashed: Callable[[BaseException], BaseException]
) -> BaseException:
    """What a caller gets for an exception raised while an actor worked for it.

    ``Cancelled`` is re-raised (the actor itself is being cancelled). ``KeyboardInterrupt``
    and ``SystemExit`` are returned unchanged, to be raised in the caller's task: the
    request had not changed anything. Anything else is a crash: ``crashed(error)``
    poisons the store and gives the error to raise instead.
    """
    if isinstance(error, trio.Cancelled):
        raise error
    if isinstance(error, PROPAGATE):
        return error
    return crashed(error)


@attrs.define(eq=False)
class Mailbox(Generic[R, A]):
    """A bounded inbox for one actor, and the way callers ask it something: requests
    of type ``R``, each answered with an ``A``.

    The actor owns ``receive``; callers use :meth:`ask`. The actor replies through the
    envelope's slot, which never blocks, so an actor never waits on a caller that has
    gone.
    """

    name: str
    size: int
    send: trio.MemorySendChannel[Envelope[R, A]]
    receive: trio.MemoryReceiveChannel[Envelope[R, A]]
    #: Set by ``open_memory``: poisons the store, and gives what a crashed request raises.
    crashed: Callable[[BaseException], BaseException] | None = None

    @classmethod
    def open(cls, name: str, size: int) -> Mailbox[R, A]:
        # ``size`` is checked by whoever takes it from a user (``open_memory``).
        send, receive = trio.open_memory_channel[Envelope[R, A]](size)
        return cls(name, size, send, receive)

    async def ask(self, request: R) -> A:
        """Send ``request`` and wait for the reply.

        Blocks while the inbox is full, then until the actor replies. If the caller is
        cancelled while it waits, the actor still handles the request and its reply is
        dropped.

        Raises:
            trio.ClosedResourceError: the memory has closed.
            trio.BrokenResourceError: the actor stopped while the memory was open.
            Exception: whatever the actor's handler raised for this request.
        """
        reply = ReplySlot[A]()
        try:
            await self.send.send(Envelope(request, reply))
        except trio.ClosedResourceError:
            raise trio.ClosedResourceError(f"the {self.name} actor is closed") from None
        except trio.BrokenResourceError:
            raise trio.BrokenResourceError(f"the {self.name} actor has stopped") from None
        return await reply.wait()

    async def serve(
        self,
        handle: Callable[[R], Awaitable[A]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run an actor: answer each request with ``await handle(request)``, in order.

        An exception from ``handle`` is that caller's reply, not a crash. When the actor
        stops (its inbox closes, or it is cancelled), the request in flight and every
        queued one fail with ``trio.ClosedResourceError``, so no caller waits forever;
        the inbox is drained before it is closed, or the drain would find nothing.
        """
        in_flight: Envelope[R, A] | None = None
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
