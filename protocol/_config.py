"""Store configuration, validated when built and again when a store opens."""

from __future__ import annotations

import os

import msgspec

from ._checks import check_int, shown
from ._errors import ConfigError

__all__ = ["VectorStoreConfig", "physical_memory_bytes"]


def physical_memory_bytes() -> int:
    """The machine's physical memory, the default ceiling for an arena."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 40


class VectorStoreConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds of one store.

    Args:
        max_entries: slots in the arena; the oldest entry is evicted past it.
        dimensions: the width of every vector.
        max_entry_bytes: the most an entry may count: its payload (``payload_bytes``)
            plus its metadata, source, id, index text and a fixed overhead per block
            (design §3, "Memory bound").
        warn_fraction: ``usage().near_cap`` turns true at this fill fraction, in (0, 1].
        max_arena_bytes: the ceiling for ``max_entries × dimensions × 4``; ``None`` means
            the machine's physical memory.

    Raises:
        ConfigError: a bound is ≤ 0, ``warn_fraction`` is outside (0, 1], or the arena is
            over the ceiling.
    """

    max_entries: int
    dimensions: int
    max_entry_bytes: int
    warn_fraction: float | None = None
    max_arena_bytes: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every bound; :func:`actors.open_store` calls this again at open."""
        check_int("max_entries", self.max_entries, python=True)
        check_int("dimensions", self.dimensions, python=True)
        check_int("max_entry_bytes", self.max_entry_bytes, python=True)
        wf = self.warn_fraction
        if wf is not None:
            if isinstance(wf, bool) or not isinstance(wf, int | float):
                raise ConfigError(
                    f"warn_fraction is {shown(wf)}; expected a float in (0, 1] or None"
                )
            if not 0.0 < wf <= 1.0:
                raise ConfigError(
                    f"warn_fraction is {shown(wf)}; expected a float in (0, 1] or None"
                )
        ceiling = self.max_arena_bytes
        if ceiling is None:
            ceiling = physical_memory_bytes()
        else:
            check_int("max_arena_bytes", ceiling, python=True)
        arena = self.arena_bytes
        if arena > ceiling:
            raise ConfigError(
                f"arena of {shown(self.max_entries)} × {shown(self.dimensions)} float32 is "
                f"{shown(arena)} bytes; the ceiling is {shown(ceiling)} bytes"
            )

    @property
    def arena_bytes(self) -> int:
        """The size of the float32 matrix, ``max_entries × dimensions × 4``."""
        return self.max_entries * self.dimensions * 4
