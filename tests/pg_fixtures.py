"""The pg fixtures both suites share (the trio suite's ``tests/conftest.py`` and the
asyncio suite's ``tests/integrations/conftest.py``, each of which imports them): the
server and a fresh table per test, by ``pg_support``'s rules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from pg_support import drop_table, new_table_name, session_dsn

__all__ = ["pg_dsn", "pg_table"]


@pytest.fixture
def pg_dsn() -> str:
    """A DSN for a server with pgvector, or a skip (``pg_support``'s docstring)."""
    return session_dsn()


@pytest.fixture
def pg_table(pg_dsn: str) -> Iterator[str]:
    """A fresh table name for one test; the table is dropped afterwards."""
    table = new_table_name()
    yield table
    with contextlib.suppress(Exception):  # the server may be the one a test stopped
        drop_table(pg_dsn, table)
