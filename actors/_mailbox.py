"""The one-shot reply slot that every actor answers through."""

from __future__ import annotations

import attrs
import trio

__all__ = ["ReplySlot"]


@attrs.define(eq=False)
class ReplySlot:
    """A one-shot reply. Setting it never blocks, so an actor never waits on a caller
    that has gone away; only the first answer counts."""

    _event: trio.Event = attrs.field(factory=trio.Event)
    _value: object = None
    _error: BaseException | None = None

    def succeed(self, value: object) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    async def wait(self) -> object:
        """Wait for the answer; raise the error, or return the value.

        If the caller is cancelled while it waits, the answer is simply never read.
        """
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value
