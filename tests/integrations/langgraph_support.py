"""Shared by the LangGraph store's tests: the backends and an offline index."""

from __future__ import annotations

from typing import Any

import pytest

from actors import HashingEmbedder

DIMS = 64


def hashing_index(fields: list[str] | None = None) -> Any:
    """A lexical, deterministic index config: texts sharing words score high."""
    return {"embed": HashingEmbedder(DIMS).embed_batch, "dims": DIMS, "fields": fields or ["text"]}


@pytest.fixture(params=["memory", "pg"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The TrioRecallStore options of the backend under test ({} in memory; a dsn and a
    table of its own on pg, through the suite's pg fixtures)."""
    if request.param == "memory":
        return {}
    return {"dsn": request.getfixturevalue("pg_dsn"), "table": request.getfixturevalue("pg_table")}
