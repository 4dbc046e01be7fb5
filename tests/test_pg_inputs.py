"""Any text or id the in-memory store takes, the pg store takes (issue 29), through the
paths a user takes.

The shared contract is in the conformance suites (``actors.testing``: a text of one
10,000-byte token, the longest ids, NUL and surrogates under every filter form), which
``test_pg_documents.py`` and ``test_pg_store.py`` run here. This module covers:

- ``Memory.remember``, the auto-store of the user's input and ``Offload`` over a pg
  store, with texts holding one long token: stored, and recalled by that token.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from pg_support import (  # noqa: F401 (pg_dsn and pg_table are fixtures)
    REQUIRED_ENV,
    pg_dsn,
    pg_table,
)

try:
    from actors._pg.store import PgStoreHandle, open_pg_store
except ImportError as error:  # pragma: no cover - depends on the installed extras
    if os.environ.get(REQUIRED_ENV) == "1":
        raise
    pytest.skip(f"the pg extra is not installed ({error})", allow_module_level=True)

from actors import HashingEmbedder, open_memory
from actors.testing._conformance_inputs import long_token
from protocol import (
    MemoryConfig,
    Offload,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)

DIM = 64
TIMEOUT = 60
CONFIG = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=65_536)


@pytest.fixture
def opener(pg_dsn: str, pg_table: str) -> Any:  # noqa: F811
    """``opener(**kw)``: open_pg_store on this test's table, retrying fast."""

    @asynccontextmanager
    async def open_(**kw: Any) -> AsyncIterator[PgStoreHandle]:
        kw.setdefault("retry_delay", 0.01)
        async with open_pg_store(pg_dsn, CONFIG, HashingEmbedder(DIM), table=pg_table, **kw) as s:
            yield s

    return open_


# --- the user's paths ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["remember", "auto-store", "offload"])
async def test_a_memory_over_pg_stores_and_recalls_a_long_token(opener: Any, path: str) -> None:
    token = long_token(10_000)
    text = f"the vault key is {token}"
    config = MemoryConfig(
        strategies=[Offload(turns=2)] if path == "offload" else [],
        auto_store_user_input=path == "auto-store",
    )
    with trio.fail_after(TIMEOUT):
        async with opener() as store, open_memory(store=store, memory=config) as memory:
            await memory.remember("an ordinary memory about the garden")
            if path == "remember":
                await memory.remember(text)
            else:
                messages = [UnifiedMessage.user(text), UnifiedMessage.assistant("noted")]
                if path == "offload":
                    messages.append(UnifiedMessage.user("what else?"))
                turned = await memory.turn(UnifiedRequest(model="m", messages=messages))
                assert turned.report.compression.last_error is None
            assert len(store) == (3 if path == "offload" else 2)
            hits = (await memory.retrieve(token, k=1)).turns
            assert [token in h.message.text() for h in hits] == [True]
            hits = (await memory.retrieve("vault key", k=1)).turns
            assert [token in h.message.text() for h in hits] == [True]
