"""A progress bar on stderr when stderr is a terminal, and nothing otherwise.

One line, rewritten in place at most ten times a second: ``import [#####.....] 50%
1,200/2,400``. Neither rich nor tqdm is a dependency of trio-recall, and a bar of one
line does not justify adding one.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

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
