"""A progress bar, and a spinner for a wait, on stderr when stderr is a terminal, and
nothing otherwise.

One line, rewritten in place at most ten times a second: ``import [#####.....] 50%
1,200/2,400``, or ``| starting the database...`` while a wait lasts (:func:`waiting`),
cleared when it ends. Neither rich nor tqdm is a dependency of trio-recall, and a line
does not justify adding one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TextIO

import trio

__all__ = ["Progress", "on_terminal", "waiting"]

_WIDTH = 30
_INTERVAL = 0.1


class Progress:
    """A bar for ``total`` items (``stream`` defaults to stderr; shown only on a tty)."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(callable(isatty) and isatty())
        self.label = label
        self.total = total
        self.done = 0
        self._shown = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._shown >= _INTERVAL or self.done >= self.total):
            self._shown = now
            self._draw()

    def _draw(self) -> None:
        fraction = 1.0 if self.total <= 0 else min(self.done / self.total, 1.0)
        filled = round(fraction * _WIDTH)
        bar = "#" * filled + "." * (_WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {fraction:4.0%} {self.done:,}/{self.total:,}")
        self.stream.flush()

    def close(self) -> None:
        """End the line (only if the bar was drawn)."""
        if self.enabled and self._shown:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


#: A wait shorter than this shows nothing (the line would only flash).
SPINNER_DELAY = 0.3
_FRAMES = "|/-\\"
_CLEAR = "\r\x1b[K"  # to the line's start, and erase it


def on_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal."""
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


@asynccontextmanager
async def waiting(
    what: str, stream: TextIO | None = None, *, delay: float = SPINNER_DELAY
) -> AsyncIterator[Callable[[str], None]]:
    """Show ``WHAT`` behind a spinner on ``stream`` (default stderr) while the block
    runs, when the stream is a terminal and the wait lasts ``delay`` seconds or more
    (a wait that is often short, as attaching to a running server, shows nothing);
    erase the line when the block ends. Nothing is written elsewhere.

    Yields:
        A function that writes a line for the user to ``stream`` without mixing it into
        the spinner's (the spinner draws again below it).
    """
    out = sys.stderr if stream is None else stream
    if not on_terminal(out):

        def plain(line: str) -> None:
            print(line, file=out, flush=True)

        yield plain
        return
    shown = [False]

    def clear() -> None:
        if shown[0]:
            out.write(_CLEAR)
            out.flush()
            shown[0] = False

    def line(text: str) -> None:
        clear()
        print(text, file=out, flush=True)

    async def spin() -> None:
        await trio.sleep(delay)
        frame = 0
        while True:
            out.write(f"{_CLEAR}{_FRAMES[frame % len(_FRAMES)]} {what}")
            out.flush()
            shown[0] = True
            frame += 1
            await trio.sleep(0.1)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spin)
            try:
                yield line
            finally:
                nursery.cancel_scope.cancel()
    finally:
        clear()
