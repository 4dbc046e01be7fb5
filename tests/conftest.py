"""Shared test settings, and the fixtures tests of both backends use.

Hypothesis profiles (pick one with ``HYPOTHESIS_PROFILE``):

- ``ci`` (the default): bounded, so the whole suite fits CI's budget on 2 cores. The
  state machines run 60 examples of up to 25 steps each.
- ``stress``: 2,000 examples of 50 steps for the state machines (opt-in).
- ``nightly``: like stress with 80 steps and no example cap to speak of; run it with
  ``TRIO_RECALL_NIGHTLY_SECONDS`` set, which makes ``test_nightly_until_budget`` run
  fresh rounds of the machines until that many seconds have passed.

The pg fixtures (``pg_dsn``, ``pg_table``, ``pg_open``) live here rather than in
``tests/pg/conftest.py`` because the tests parametrised over both backends use them too;
they skip with the command that installs the pg extra when it is missing, and fail under
``TRIO_RECALL_PG_REQUIRED=1`` (``pg_support``). The pg-only tests are in ``tests/pg/``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from llm_support import llama_url
from pg_fixtures import pg_dsn, pg_table
from pg_support import pg_store_opener

import actors._agent.compaction

# The shared pg fixtures, re-exported so that pytest finds them here.
__all__ = ["llama_url", "pg_dsn", "pg_table"]

# tests/integrations/ is the asyncio suite of the adapters, with its own pytest.ini
# (pytest-asyncio, no trio mode): `pytest -c tests/integrations/pytest.ini tests/integrations`.
collect_ignore = ["integrations"]

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=60, stateful_step_count=25, **_COMMON)
settings.register_profile("stress", max_examples=2000, stateful_step_count=50, **_COMMON)
settings.register_profile("nightly", max_examples=100_000, stateful_step_count=80, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


FIXED_DATE = "1 January 2025, 12:00 UTC"


@pytest.fixture(autouse=True)
def fixed_offload_date(monkeypatch: pytest.MonkeyPatch) -> str:
    """Offload dates its entries with the current UTC time when ``compress`` gets no
    date; the date is part of the indexed text, so rankings would depend on the minute a
    test runs. Every test sees one fixed time instead (``test_compaction.py`` checks the
    real clock's format)."""
    monkeypatch.setattr(actors._agent.compaction, "utc_date", lambda: FIXED_DATE)
    return FIXED_DATE


PgOpen = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture
def pg_open(pg_dsn: str, pg_table: str) -> PgOpen:
    """``pg_open(config, embedder, **kw)``: ``open_pg_store`` on this test's table (a
    ``table=`` keyword opens another)."""
    open_pg_store = pg_store_opener()

    @asynccontextmanager
    async def open_(config: Any, embedder: object, **kw: Any) -> AsyncIterator[Any]:
        kw.setdefault("table", pg_table)
        async with open_pg_store(pg_dsn, config, embedder, **kw) as store:
            yield store

    return open_
