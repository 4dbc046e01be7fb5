"""The one lifecycle of a running store, and the nursery pattern every ``open_*`` uses.

``open_store``, ``open_pg_store`` and ``open_memory`` all start their actors through
:func:`run_store` (and ``open_memory`` its own actors through :func:`supervise`), so
that starting every task the actor needs (its scan runner too), closing the inbox,
draining queued requests, reporting a crash as :class:`~protocol.Poisoned`, and never
letting an ``ExceptionGroup`` out are written once. A second copy of this once forgot
the scan runner, and every big read through ``open_memory`` hung.

**What leaving a block does.** The inbox closes, so a request still queued or in flight
fails with ``trio.ClosedResourceError`` (or ``Poisoned``), and the actor's tasks are
cancelled: an embedder call in flight is abandoned, never waited for. An exception
from the body propagates as itself, never wrapped in a group; if the store crashed, it
carries the crash as a note. A body that ends normally on a crashed store raises
``Poisoned``, so a crash never passes silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar

import trio

from .mailbox import PROPAGATE, CrashableActor

__all__ = ["run_store", "supervise"]

T = TypeVar("T")


@asynccontextmanager
async def supervise(
    start: Callable[[trio.Nursery], Awaitable[T]],
    stop: Callable[[], None],
    crashed: Callable[[BaseException], BaseException],
) -> AsyncIterator[T]:
    """Run ``start(nursery)``'s tasks for the duration of the block, which gets its value.

    On the way out, ``stop()`` closes what the tasks serve, then the nursery is
    cancelled. The body's exception is re-raised outside the nursery, so it is never
    wrapped in a group. The tasks are built never to raise (an actor answers its
    callers instead); if one does anyway, ``KeyboardInterrupt`` or ``SystemExit`` leaves
    as itself and anything else as ``crashed(group)``: the store is poisoned.
    """
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                value = await start(nursery)
            except BaseException as error:
                # A task that failed to start: the same way out as the body's error.
                body_error = error
                stop()
                nursery.cancel_scope.cancel()
            else:
                try:
                    yield value
                except BaseException as error:
                    body_error = error
                finally:
                    stop()
                    nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if isinstance(body_error, trio.Cancelled) and group.split(trio.Cancelled)[1] is None:
            # An outer cancel scope cancelled the body and the tasks alike: leave with
            # the body's Cancelled, not a group of them.
            raise body_error from None
        raise _collapse(group, crashed) from None
    if body_error is not None:
        raise body_error


def _collapse(
    group: BaseExceptionGroup[BaseException], crashed: Callable[[BaseException], BaseException]
) -> BaseException:
    # split() sorts the leaves by type; subgroup(lambda e: not Cancelled) would also
    # test the group itself, which is not a Cancelled, and call an outer cancel a crash.
    _, rest = group.split(trio.Cancelled)
    if rest is None:
        return group  # only cancellation: the enclosing cancel scope absorbs it
    stop = rest.subgroup(lambda e: isinstance(e, PROPAGATE))
    if stop is not None:
        first: BaseException = stop
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        return first
    return crashed(rest)


A = TypeVar("A", bound=CrashableActor)


class _Handle(Protocol):
    """What :func:`run_store` needs of a store handle: closing its side."""

    def _close(self) -> None: ...


H = TypeVar("H", bound=_Handle)


@asynccontextmanager
async def run_store(actor: A, handle: H) -> AsyncIterator[H]:
    """Run a store ``actor`` (and its :meth:`~CrashableActor.services`) for the block.

    ``handle`` (the caller's side) is yielded once every task has
    started. See the module docstring for what leaving the block does.
    """

    async def start(nursery: trio.Nursery) -> H:
        await nursery.start(actor.run)
        for service in actor.services():
            await nursery.start(service)
        return handle

    def stop() -> None:
        handle._close()
        actor.send.close()

    try:
        async with supervise(start, stop, actor.crashed) as running:
            yield running
    except BaseException as error:
        if actor.crash is not None and actor.crash is not error.__cause__:
            error.add_note(f"trio-recall: the store was poisoned by {actor.crash!r}")
        raise
    if actor.crash is not None:
        raise actor.poisoned()
