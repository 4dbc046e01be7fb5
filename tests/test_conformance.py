"""The in-memory store passes the conformance suite that other backends subclass."""

from __future__ import annotations

from actors.testing import StoreConformance


class TestInMemoryConformance(StoreConformance):
    """``StoreConformance`` against ``actors.open_store``, its default factory."""
