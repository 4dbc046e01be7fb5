"""Any text or id the in-memory store takes, the pg store takes (issue 29), through the
paths a user takes, and what the pg store does with a database error it cannot retry.

The shared contract is in the conformance suites (``actors.testing``: a text of one
10,000-byte token, the longest ids, NUL and surrogates under every filter form), which
``test_pg_documents.py`` and ``test_pg_store.py`` run here. This module covers:

- ``Memory.remember``, the auto-store of the user's input and ``Offload`` over a pg
  store, with texts holding one long token: stored, and recalled by that token;
- a deterministic database error (PostgreSQL refusing a value, a program limit) is
  never retried: the write rolls back, changes nothing, and the caller gets a
  ``ConfigError`` naming what PostgreSQL refused; a transient one is still retried and
  reported as ``StoreUnavailable``; anything else is raised unchanged, at once.
"""

from __future__ import annotations

import logging
import os
import random
import string
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
    import psycopg

    from actors._pg.store import PgStoreHandle, open_pg_store
except ImportError as error:  # pragma: no cover - depends on the installed extras
    if os.environ.get(REQUIRED_ENV) == "1":
        raise
    pytest.skip(f"the pg extra is not installed ({error})", allow_module_level=True)

from actors import HashingEmbedder, open_memory
from actors.testing._conformance_inputs import long_token
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    Offload,
    StoreUnavailable,
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


# --- deterministic database errors -----------------------------------------------------------


def _raise(sqlstate: str) -> Any:
    """A statement that makes PostgreSQL raise ``sqlstate``, deterministically."""

    def run(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '"
            + sqlstate
            + "', MESSAGE = 'refused on purpose'; END $$"
        )

    return run


def _btree_overflow(conn: psycopg.Connection[Any]) -> None:
    """A real ``program_limit_exceeded``: a key past a btree's row limit (2,704 bytes),
    random so that PostgreSQL cannot compress it below."""
    rng = random.Random(7)
    conn.execute("CREATE TEMPORARY TABLE probe (k text PRIMARY KEY) ON COMMIT DROP")
    key = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(8000))
    conn.execute("INSERT INTO probe VALUES (%s)", (key,))


class _Counted:
    """``fn`` counting how many times it was tried."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.attempts = 0

    def __call__(self, conn: psycopg.Connection[Any]) -> Any:
        self.attempts += 1
        return self.fn(conn)


@pytest.mark.parametrize("write", [True, False])
@pytest.mark.parametrize(
    ("fn", "says"),
    [
        (_btree_overflow, "54000 program_limit_exceeded: index row size"),
        (_raise("54001"), "54001 statement_too_complex: refused on purpose"),
        (_raise("22023"), "22023 invalid_parameter_value: refused on purpose"),
        (lambda conn: conn.execute("SELECT 1 / 0"), "22012 division_by_zero"),
        (lambda conn: conn.execute("SELECT %s::text", ("a\x00b",)), "NUL"),
    ],
)
async def test_a_refused_statement_is_a_config_error_at_once(
    opener: Any, caplog: pytest.LogCaptureFixture, fn: Any, says: str, write: bool
) -> None:
    counted = _Counted(fn)
    with trio.fail_after(TIMEOUT):
        async with opener(retries=3) as store:
            with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as caught:
                await store._actor.call(counted, write=write, what="probe")
            assert counted.attempts == 1
            assert "retrying" not in caplog.text
            message = str(caught.value)
            assert message.startswith("probe: PostgreSQL refused it") and says in message
            assert "not retried" in message
            assert isinstance(caught.value.__cause__, psycopg.Error)


@pytest.mark.parametrize("sqlstate", ["40001", "40P01", "57P01", "53300", "55P03", "08006"])
async def test_a_transient_error_is_retried_then_unavailable(
    opener: Any, caplog: pytest.LogCaptureFixture, sqlstate: str
) -> None:
    counted = _Counted(_raise(sqlstate))
    with trio.fail_after(TIMEOUT):
        async with opener(retries=2) as store:
            with caplog.at_level(logging.WARNING), pytest.raises(StoreUnavailable) as caught:
                await store._actor.call(counted, write=True, what="probe")
            assert counted.attempts == 3
            assert "failed after 3 attempt(s)" in str(caught.value)
            assert caplog.text.count("retrying") == 2


@pytest.mark.parametrize("sqlstate", ["42P01", "23505", "XX000", "55006"])
async def test_any_other_database_error_is_raised_at_once(opener: Any, sqlstate: str) -> None:
    counted = _Counted(_raise(sqlstate))
    with trio.fail_after(TIMEOUT):
        async with opener(retries=3) as store:
            with pytest.raises(psycopg.Error) as caught:
                await store._actor.call(counted, write=True, what="probe")
            assert caught.value.sqlstate == sqlstate
            assert counted.attempts == 1


async def test_a_write_the_database_refuses_changes_nothing(
    opener: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole write path: a statement of the batch's transaction that PostgreSQL
    refuses rolls the batch back, reaches the caller as a ConfigError, and leaves the
    store usable (not poisoned, not retried)."""
    with trio.fail_after(TIMEOUT):
        async with opener(retries=3) as store:
            await store.add_documents([Document(id="kept", text="kept")])
            statements = store._actor._statements
            original = statements.store
            calls: list[int] = []

            def refusing(conn: psycopg.Connection[Any], *args: Any) -> Any:
                calls.append(1)
                result = original(conn, *args)  # the batch is written, then refused
                _raise("54000")(conn)
                return result

            monkeypatch.setattr(statements, "store", refusing)
            with pytest.raises(ConfigError, match="upsert: PostgreSQL refused it"):
                await store.add_documents([Document(id="new", text="new")])
            monkeypatch.setattr(statements, "store", original)
            assert calls == [1]
            assert await store.get_by_ids(["new"]) == []
            assert (await store.refresh()).entries == 1
            await store.add_documents([Document(id="after", text="after")])
            assert len(store) == 2
