"""Fixtures of the asyncio suite (docs/pages/tutorials/langchain.md).

The pg fixtures are tests/pg_fixtures.py's, the trio suite's own, so the rules are the
same: the server named by
``TRIO_RECALL_PG_DSN``, else an embedded one, else a skip, and a failure instead of a skip
with ``TRIO_RECALL_PG_REQUIRED=1`` (as ``.ci/run`` sets). Each test gets its own table.

A test still running after :data:`HANG_SECONDS` (set-up and tear-down included) dumps
every thread's stack and ends the run, so a hang fails CI instead of stalling it: the
standard tests of LangChain cannot be wrapped in a timeout of ours.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pg_fixtures import pg_dsn, pg_table

__all__ = ["pg_dsn", "pg_table"]

HANG_SECONDS = 120


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
