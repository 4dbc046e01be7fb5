"""Hostile read arguments (issue 14, items 3, 4 and 9) through the public entry points.

Every case runs on the in-memory store (inline scans, and every scan in threads), on
PostgreSQL, and where it applies through ``open_memory``'s ``retrieve``. Each rejected
input must raise a ``VectorStoreError`` naming what was wrong, and leave the store
usable: every test ends with a normal read that must succeed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
import trio
from pg_support import REQUIRED_ENV, pg_dsn, pg_table  # noqa: F401

from actors import HashingEmbedder, open_memory, open_store
from protocol import (
    MemoryConfig,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 8
TIMEOUT = 30
CAP = 16
TEXTS = [f"note {i} about apples and pears" for i in range(6)]
HUGE = [2**63, 2**64, 2**200, np.uint64(2**64 - 1)]
BACKENDS = ["memory", "memory-threads", "pg"]


def cfg() -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=CAP, dimensions=DIM, max_entry_bytes=512)


@asynccontextmanager
async def opened(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A store of ``backend`` holding TEXTS, each with metadata ``{"i": i}``."""
    embedder = HashingEmbedder(DIM)
    if backend == "pg":
        try:
            from actors._pg_store import open_pg_store
        except ImportError as error:  # pragma: no cover - depends on the extras
            if os.environ.get(REQUIRED_ENV) == "1":
                raise
            pytest.skip(f"the pg extra is not installed ({error})")
        dsn = request.getfixturevalue("pg_dsn")
        table = request.getfixturevalue("pg_table")
        manager: Any = open_pg_store(dsn, cfg(), embedder, table=table, retries=0)
    else:
        threshold = 0 if backend == "memory-threads" else 2**24
        manager = open_store(cfg(), embedder, thread_scan_threshold=threshold)
    async with manager as store:
        for i, text in enumerate(TEXTS):
            await store.store_turns([UnifiedMessage.user(text)], metadata={"i": i})
        yield store


async def still_usable(store: Any) -> None:
    """The store answers a normal read after whatever was refused."""
    report = await store.retrieve("apples", 2)
    assert len(report.turns) == 2
    assert not store.statistics().poisoned


# --- k and fetch_k of any size ----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_any_k_means_at_most_that_many(backend: str, request: pytest.FixtureRequest) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            vector = np.ones(DIM)
            for k in [*HUGE, np.int64(3), np.int8(2)]:
                want = min(int(k), len(TEXTS))
                assert len((await store.retrieve("apples", k)).turns) == want
                assert len((await store.retrieve_in("memory-default", "pears", k)).turns) == want
                assert len((await store.retrieve_embedding(vector, k)).turns) == want
                assert len(await store.search(SearchRequest(query="apples", k=k))) == want
                threshold = SearchRequest(query="apples", k=k, score_threshold=-1.0)
                assert len(await store.search(threshold)) == want
                for kind in ("mmr", "hybrid"):
                    deep = max(int(k), 2**64)
                    search = SearchRequest(query="apples", k=k, fetch_k=deep, kind=kind)
                    assert len(await store.search(search)) == want
                filtered = SearchRequest(vector=vector.tolist(), k=k, filter={"i": {"$gte": 2}})
                assert len(await store.search(filtered)) == min(int(k), 4)
            await still_usable(store)


@pytest.mark.parametrize("kind", ["mmr", "hybrid"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_huge_fetch_k_with_a_small_k(
    backend: str, kind: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            for fetch_k in HUGE:
                search = SearchRequest(query="apples", k=2, fetch_k=fetch_k, kind=kind)
                assert len(await store.search(search)) == 2
            await still_usable(store)


async def test_memory_retrieve_takes_any_k() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=cfg(), memory=MemoryConfig()) as memory:
            for text in TEXTS:
                await memory.remember(text)
            for k in HUGE:
                assert len((await memory.retrieve("apples", k=k)).turns) == len(TEXTS)
            assert len((await memory.retrieve("apples", k=2)).turns) == 2
