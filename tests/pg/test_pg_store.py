"""The PostgreSQL + pgvector store: what only a server has (schema checks, shared
counters, reopening, lost connections, hostile input), the state machine, and
``actors.testing.WriteConformance`` (design §3's rules, shared with the in-memory store).

Also what the pg store does with texts the in-memory store takes (through the paths a
user takes: ``Memory.remember``, the auto-store of the user's input and ``Offload``,
with a text of one long token) and with database errors: a deterministic one (a value
PostgreSQL refuses, a program limit) is never retried, rolls back, changes nothing and
is a ``ConfigError`` naming what PostgreSQL refused; a transient one is retried, then
``StoreUnavailable``; anything else is raised unchanged, at once.

Scores come from pgvector's float32 ``<#>``, so they are compared with a tolerance of
1e-5 against a float64 reference (see ``actors/_pg/store.py``); rankings and ties are
compared exactly.
"""

from __future__ import annotations

import logging
import random
import string
from typing import Any

import numpy as np
import psycopg
import pytest
import trio
import trio.testing
from hypothesis.stateful import invariant, run_state_machine_as_test
from pg_support import drop_table, fresh_pg_store, new_table_name, session_dsn
from psycopg import sql

from actors import HashingEmbedder, open_memory
from actors._pg.store import PgStoreHandle, StoreUnavailable, open_pg_store
from actors.testing import SCORE_TOLERANCE, VectorStoreMachine, WriteConformance, inject_crash
from actors.testing._conformance_inputs import long_token
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    Poisoned,
    RetrievalReport,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import Offload

DIM = 8
TIMEOUT = 20
# A text of one 10,000-byte token, and the recall of it, fit in this config.
ROOMY = VectorStoreConfig(max_entries=64, dimensions=64, max_entry_bytes=65_536)


def cfg(max_entries: int = 8, dimensions: int = DIM, **kw: Any) -> VectorStoreConfig:
    return VectorStoreConfig(
        max_entries=max_entries, dimensions=dimensions, max_entry_bytes=256, **kw
    )


def msg(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


def texts_of(report: RetrievalReport) -> list[str]:
    return [hit.message.text() for hit in report.turns]


async def contents(store: PgStoreHandle) -> tuple[list[str], list[float], list[int]]:
    report = await store.retrieve_embedding(np.ones(store.config.dimensions), k=10_000)
    return texts_of(report), [h.score for h in report.turns], [h.sequence for h in report.turns]


# --- sequences, hostile values --------------------------------------------------------------


async def test_sequences_carry_on_after_reopening(opener: Any) -> None:
    # Monotonic, never reused sequences: WriteConformance; here, across a reopen.
    seen: list[int] = []
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            seen.extend((await store.store_turns([msg("a"), msg("b")])).sequences)
            await store.delete(["turn-1"])
            await store.clear()
        # Reopening the table carries on from the database sequence.
        async with opener(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            seen.extend((await store.store_turns([msg("after reopen")])).sequences)
    assert seen == [0, 1, 2]


async def test_hostile_values_are_bound_never_spliced(opener: Any, pg_dsn: str) -> None:
    hostile = "x'); DROP TABLE pg_class; --"
    metadata = {hostile: hostile, "$where": {"'\"": "\\"}}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(
                [msg(hostile)], namespace=hostile, source=hostile, metadata=metadata
            )
            hit = (await store.retrieve_in(hostile, hostile, 1)).turns[0]
            assert (hit.namespace, hit.source, hit.metadata) == (hostile, hostile, metadata)
            assert (await store.delete([hostile, stored.ids[0]], namespace=hostile)).deleted == [
                stored.ids[0]
            ]
            # Values that PostgreSQL text cannot hold are refused before the transaction.
            with pytest.raises(ConfigError, match="namespace 'a\\\\x00b' holds a NUL"):
                await store.store_turns([msg("x")], namespace="a\x00b")
            # ... and match nothing when they are only looked up.
            assert (await store.retrieve_in("a\x00b", "x", 1)).scanned == 0
            assert (await store.delete(["a\x00"])).missing == ["a\x00"]
            assert store.is_empty()
            # Metadata may hold them: reads return it exactly (jsonb keeps an escaped copy).
            odd = {"k": "a\x00", "\x00": "\ud800"}
            stored = await store.store_turns([msg("x")], metadata=odd)
            assert (await store.retrieve("x", 1)).turns[0].metadata == odd
    for bad in ("Bad", "a-b", "1abc", "x" * 53, 'a"b', "a;drop", ""):
        with pytest.raises(ConfigError, match="expected a lowercase SQL identifier"):
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=bad):
                pass  # pragma: no cover


# --- usage and counters ---------------------------------------------------------------------


async def test_counters_live_in_the_database_and_are_shared(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            opener(cfg(max_entries=4), HashingEmbedder(DIM)) as one,
            opener(cfg(max_entries=4), HashingEmbedder(DIM)) as two,
        ):
            await one.store_turns([msg(f"a{i}") for i in range(3)])
            assert len(two) == 0  # not refreshed yet: as of its own last commit or read
            await two.store_turns([msg("b0"), msg("b1")])  # one cap: evicts one of one's
            assert (two.usage().entries, two.usage().evicted_entries) == (4, 1)
            assert len(one) == 3
            await one.retrieve("a", 1)  # a read refreshes the counters
            assert (one.usage().entries, one.usage().evicted_entries) == (4, 1)
            await two.clear()
            assert (await one.refresh()).entries == 0


async def test_the_pg_handle_is_the_one_handle_plus_its_table(opener: Any, pg_table: str) -> None:
    from actors import StoreHandle

    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            assert isinstance(store, StoreHandle)
            assert (store.backend, store.table) == ("pg", pg_table)
            with pytest.raises(
                TypeError,
                match="PgStoreHandle has no public constructor; it is made by open_pg_store",
            ):
                PgStoreHandle(store._actor)


async def test_reopen_checks_dimensions_and_capacity(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("kept")])
        with pytest.raises(ConfigError, match="holds 8-float vectors; this store takes 16"):
            async with opener(cfg(dimensions=16), HashingEmbedder(16)):
                pass  # pragma: no cover
        with pytest.raises(ConfigError, match="was made with max_entries=8; this config has 9"):
            async with opener(cfg(max_entries=9), HashingEmbedder(DIM)):
                pass  # pragma: no cover
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            assert texts_of(await store.retrieve("kept", 1)) == ["kept"]
            assert len(store) == 1


async def test_open_validates_its_arguments(pg_dsn: str, pg_table: str) -> None:
    bad_calls: list[tuple[dict[str, Any], str]] = [
        ({"pool_size": 1}, "pool_size is 1; expected an int >= 2"),
        ({"inbox_size": 0}, "inbox_size is 0"),
        ({"retries": -1}, "retries is -1"),
        ({"statement_timeout": 0}, "statement_timeout is 0"),
    ]
    for kwargs, error in bad_calls:
        with pytest.raises(ConfigError, match=error):
            async with open_pg_store(
                pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table, **kwargs
            ):
                pass  # pragma: no cover
    with pytest.raises(ConfigError, match="makes 4-float vectors; this store takes 8"):
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(4), table=pg_table):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="dsn is not a valid PostgreSQL connection string"):
        async with open_pg_store("not a dsn", cfg(), HashingEmbedder(DIM)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="has neither embed"):
        async with open_pg_store(pg_dsn, cfg(), object(), table=pg_table):
            pass  # pragma: no cover


async def test_an_unreachable_server_is_a_clear_error() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(StoreUnavailable, match="could not reach"):
        async with open_pg_store(
            "postgresql://nobody@/nowhere?host=/nonexistent-trio-recall",
            cfg(),
            HashingEmbedder(DIM),
            connect_timeout=1,
        ):
            pass  # pragma: no cover


async def test_a_table_that_is_not_a_store_is_refused(pg_dsn: str) -> None:
    table = new_table_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(table)))
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(ConfigError, match="not a trio-recall"):
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=table):
                pass  # pragma: no cover
    finally:
        drop_table(pg_dsn, table)


# --- errors ---------------------------------------------------------------------------------


async def test_a_crash_keeps_what_was_committed(opener: Any) -> None:
    # Poisoned calls and exit: WriteConformance; here, what the table holds after.
    crash = RuntimeError("boom")
    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned) as exit_info:
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([msg("committed")])
            inject_crash(store, crash)  # type: ignore[arg-type]
            with pytest.raises(Poisoned) as info:
                await store.store_turns([msg("never")])
            assert info.value.__cause__ is crash
    assert exit_info.value.__cause__ is crash
    async with opener(cfg(), HashingEmbedder(DIM)) as store:
        assert texts_of(await store.retrieve("never", 5)) == ["committed"]


async def _hold_oldest_row_and_kill_the_writer(
    dsn: str, table: str, store: PgStoreHandle, turns: list[UnifiedMessage], kills: int
) -> BaseException | None:
    """Block the writer's eviction on a row lock, then terminate its backend ``kills``
    times, so the connection is lost mid-transaction, after the batch's INSERT."""
    outcome: list[BaseException | None] = []

    async def write() -> None:
        try:
            await store.store_turns(turns)
            outcome.append(None)
        except StoreUnavailable as error:
            outcome.append(error)

    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as admin:
        holder.execute(
            sql.SQL("SELECT seq FROM {} ORDER BY seq LIMIT 1 FOR UPDATE").format(
                sql.Identifier(table)
            )
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            for _ in range(kills):
                while True:
                    row = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock' AND query LIKE 'WITH gone AS (DELETE%%'",
                        (f"trio-recall:{table}",),
                    ).fetchone()
                    if row is not None:
                        break
                    await trio.sleep(0.02)
                admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            holder.rollback()  # release the row lock: a retry can go through
    return outcome[0]


async def test_a_lost_connection_rolls_the_batch_back(
    opener: Any,
    pg_dsn: str,
    pg_table: str,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=2), HashingEmbedder(DIM), retries=0) as store:
            await store.store_turns([msg("old 1"), msg("old 2")])
            before = await contents(store)
            error = await _hold_oldest_row_and_kill_the_writer(
                pg_dsn, pg_table, store, [msg("new 1"), msg("new 2")], kills=1
            )
            assert isinstance(error, StoreUnavailable)
            assert "rolled back; nothing was applied" in str(error)
            assert await contents(store) == before
            assert (store.usage().entries, store.usage().evicted_entries) == (2, 0)
            # The store is not poisoned: the next write goes through.
            await store.store_turns([msg("new 3")])
            assert sorted((await contents(store))[0]) == ["new 3", "old 2"]


async def test_a_transient_loss_is_retried_and_the_batch_lands_once(
    opener: Any,
    pg_dsn: str,
    pg_table: str,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=2), HashingEmbedder(DIM), retries=2) as store:
            await store.store_turns([msg("old 1"), msg("old 2")])
            error = await _hold_oldest_row_and_kill_the_writer(
                pg_dsn, pg_table, store, [msg("new 1"), msg("new 2")], kills=1
            )
            assert error is None
            texts, _, seqs = await contents(store)
            assert sorted(texts) == ["new 1", "new 2"]
            assert (store.usage().entries, store.usage().evicted_entries) == (2, 2)
            assert len(set(seqs)) == 2


# --- a text of one long token through the user's paths ------------------------------------


@pytest.mark.parametrize("path", ["remember", "auto-store", "offload"])
async def test_a_memory_over_pg_stores_and_recalls_a_long_token(opener: Any, path: str) -> None:
    token = long_token(10_000)
    text = f"the vault key is {token}"
    config = MemoryConfig(
        strategies=[Offload(turns=2)] if path == "offload" else [],
        auto_store_user_input=path == "auto-store",
    )
    with trio.fail_after(TIMEOUT):
        async with (
            opener(ROOMY, HashingEmbedder(64), retry_delay=0.01) as store,
            open_memory(store=store, memory=config) as memory,
        ):
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


# --- database errors: transient ones are retried, refused values are a ConfigError ----------


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
        async with opener(cfg(), HashingEmbedder(DIM), retries=3, retry_delay=0.01) as store:
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
        async with opener(cfg(), HashingEmbedder(DIM), retries=2, retry_delay=0.01) as store:
            with caplog.at_level(logging.WARNING), pytest.raises(StoreUnavailable) as caught:
                await store._actor.call(counted, write=True, what="probe")
            assert counted.attempts == 3
            assert "failed after 3 attempt(s)" in str(caught.value)
            assert caplog.text.count("retrying") == 2


@pytest.mark.parametrize("sqlstate", ["42P01", "23505", "XX000", "55006"])
async def test_any_other_database_error_is_raised_at_once(opener: Any, sqlstate: str) -> None:
    counted = _Counted(_raise(sqlstate))
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM), retries=3, retry_delay=0.01) as store:
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
        async with opener(cfg(), HashingEmbedder(DIM), retries=3, retry_delay=0.01) as store:
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


# --- the conformance state machine ----------------------------------------------------------


class PgStoreMachine(VectorStoreMachine):
    """VectorStoreMachine against the pg store: a fresh table per example.

    Scores are pgvector's float32 inner products; the machine's model compares them with
    ``actors.testing.SCORE_TOLERANCE`` (1e-5), which this backend meets with a wide
    margin (measured: at most 9e-8 from 16 to 1,536 dimensions). Rankings, ties, counters
    and sequences are compared exactly, as for the in-memory store.
    """

    dsn: str = ""

    def open_store_under_test(self, config: VectorStoreConfig, embedder: object) -> Any:
        return fresh_pg_store(self.dsn, config, embedder, clock=self.store_clock)

    @invariant()
    def runs_on_the_machine_clock(self) -> None:
        # The rules of memory over time run against pg too.
        assert self.store is None or self.timed, "the store is not on store_clock"


def test_pg_store_passes_the_state_machine(pg_dsn: str) -> None:
    assert SCORE_TOLERANCE == 1e-5  # the tolerance this backend is documented to meet

    class Machine(PgStoreMachine):
        dsn = pg_dsn

    run_state_machine_as_test(Machine)


# --- the write-path conformance suite --------------------------------------------------------


class TestPgWrites(WriteConformance):
    """``WriteConformance`` against the pg store: a fresh table per store, dropped after.

    Scores are pgvector's float32 inner products, within ``SCORE_TOLERANCE`` (1e-5) of
    the float64 cosine; rankings, ties, counters and sequences are compared exactly.
    """

    score_tolerance = SCORE_TOLERANCE
    timeout = 60.0

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object, **options: Any
    ) -> Any:
        return fresh_pg_store(session_dsn(), config, embedder, **options)
