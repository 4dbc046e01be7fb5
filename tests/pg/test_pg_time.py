"""The pg store's time and conversation columns (schema version 6), against a real
server: what version 6 adds beyond ``test_time_and_conversation.py``, which runs on
both backends.

- a version 5 table is migrated in place when opened: its entries keep their texts,
  postings and BM25 hits, and get the migration's time as ``occurred_at``, no
  conversation and no position; new writes then get both;
- positions come from ``T_conv``, which keeps counting after a conversation's every
  entry is gone (the in-memory store forgets such a conversation and starts it again
  at 1);
- ``and_time_window`` ANDs ``since <= occurred_at < until`` into a filter's condition,
  for the dense and the BM25 statements alike;
- a read's ``DocRow`` carries ``occurred_at``, ``conversation`` and ``position``;
- a conversation PostgreSQL text cannot hold (a lone surrogate) is a ConfigError.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
import trio
from old_schemas import make_version
from psycopg import sql

from actors import HashingEmbedder, open_store
from actors._pg.filters import Visibility, and_time_window, translate
from actors._pg.schema import SCHEMA_VERSION
from actors._pg.store import open_pg_store
from protocol import ConfigError, Document, SearchRequest, UnifiedMessage, VectorStoreConfig
from protocol.filters import Eq

DIM = 32
TIMEOUT = 60
NS = "memory-default"
T0 = dt.datetime(2023, 5, 1, tzinfo=dt.UTC)


def cfg() -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)


def _query(dsn: str, statement: str, table: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        names = {
            "t": sql.Identifier(table),
            "meta": sql.Identifier(f"{table}_meta"),
            "conv": sql.Identifier(f"{table}_conv"),
        }
        return conn.execute(sql.SQL(statement).format(**names), params).fetchall()


async def _bm25(store: Any, query: str) -> list[tuple[str | None, float]]:
    hits = await store.search(SearchRequest(query=query, k=20, kind="bm25"))
    return [(h.document.id, round(h.score, 9)) for h in hits]


async def test_a_version_5_table_is_migrated_in_place(pg_dsn: str, pg_table: str) -> None:
    embedder = HashingEmbedder(DIM)
    docs = [Document(id=f"d{i}", text=f"owl number {i} in the tree") for i in range(6)]
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs)
            await store.store_turns([UnifiedMessage.user("a fish under the owl")])
            before = await _bm25(store, "owl")
        make_version(pg_dsn, pg_table, 5)
        opened = dt.datetime.now(dt.UTC)
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            migrated = dt.datetime.now(dt.UTC)
            version = _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table)
            assert version == [(SCHEMA_VERSION,)] == [(7,)]
            assert await _bm25(store, "owl") == before
            old = await store.get_by_ids([d.id for d in docs if d.id])
            # Every entry already there: the migration's time, and no conversation.
            times = {d.occurred_at for d in old}
            assert len(times) == 1
            (when,) = times
            assert when is not None and opened <= when <= migrated
            assert {d.conversation for d in old} == {None}
            rows = _query(pg_dsn, "SELECT count(*) FROM {t} WHERE position IS NULL", pg_table)
            assert rows == [(7,)]
            indexes = _query(
                pg_dsn, "SELECT indexname FROM pg_indexes WHERE tablename = %s", pg_table, pg_table
            )
            assert {f"{pg_table}_ns_t_idx", f"{pg_table}_ns_cp_idx"} <= {i for (i,) in indexes}
            # New writes get both; the old entries are no one's predecessor.
            stored = await store.store_turns(
                [UnifiedMessage.user("first"), UnifiedMessage.user("second")],
                conversation="chat",
                occurred_at=T0,
            )
            rows = _query(
                pg_dsn,
                "SELECT id, position, occurred_at FROM {t} WHERE conversation = 'chat' "
                "ORDER BY position",
                pg_table,
            )
            assert rows == [(stored.ids[0], 1, T0), (stored.ids[1], 2, T0)]
            assert len(store) == 9


async def test_positions_go_on_after_a_conversation_is_emptied(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """pg keeps every conversation's counter (``T_conv``); the in-memory store forgets
    a conversation with no live entry (its bookkeeping is bounded) and starts again."""
    embedder = HashingEmbedder(DIM)

    async def positions(store: Any) -> list[int]:
        await store.add_documents([Document(id="x", text="x", conversation="c")])
        await store.add_documents([Document(id="y", text="y", conversation="c")])
        await store.clear()
        await store.add_documents([Document(id="z", text="z", conversation="c")])
        if store.backend == "memory":
            arena = store._actor.arena
            return [int(arena.positions[arena.slot_of(NS, "z")])]
        return [p for (p,) in _query(pg_dsn, "SELECT position FROM {t}", pg_table)]

    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            assert await positions(store) == [3]
            counters = _query(
                pg_dsn, "SELECT namespace, conversation, last_position FROM {conv}", pg_table
            )
            assert counters == [(NS, "c", 3)]
        async with open_store(cfg(), embedder) as memory:
            assert await positions(memory) == [1]


async def test_the_time_window_narrows_dense_and_bm25_statements(
    pg_dsn: str,
    pg_table: str,
) -> None:
    embedder = HashingEmbedder(DIM)
    docs = [
        Document(id=f"d{i}", text=f"owl {i}", metadata={"odd": i % 2 == 1}, occurred_at=when)
        for i, when in enumerate(T0 + dt.timedelta(days=d) for d in range(6))
    ]
    since, until = T0 + dt.timedelta(days=1), T0 + dt.timedelta(days=4)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs)
            reads = store._actor.reads
            query = store._actor.query_literal(embedder.embed("owl"))

            vis = Visibility(dt.datetime.now(dt.UTC))

            def run(conn: psycopg.Connection[Any]) -> dict[str, Any]:
                def window(node: Any, low: Any, high: Any) -> Any:
                    return and_time_window(translate(node, sql.Identifier("metadata")), low, high)

                out: dict[str, Any] = {}
                for name, where in (
                    ("window", window(None, since, until)),
                    ("since", window(None, since, None)),
                    ("none", window(None, None, None)),
                    ("filtered", window(Eq(key="odd", value=True), since, until)),
                ):
                    dense = reads.dense(conn, query, 10, NS, where, vis)
                    out[name] = sorted(row.id for row, _, _ in dense)
                    seqs = [seq for seq, _ in reads.bm25(conn, "owl", 10, NS, where, vis)]
                    out[name + " bm25"] = sorted(
                        reads.by_seqs(conn, seqs, vis)[s].id for s in seqs
                    )
                (row,) = reads.rows_by_ids(conn, ["d2"], NS, vis)
                out["row"] = (row.occurred_at, row.conversation, row.position)
                return out

            got = await store._actor.read(run, "test")
    assert got["window"] == got["window bm25"] == ["d1", "d2", "d3"]
    assert got["since"] == got["since bm25"] == ["d1", "d2", "d3", "d4", "d5"]
    assert len(got["none"]) == len(got["none bm25"]) == 6
    assert got["filtered"] == got["filtered bm25"] == ["d1", "d3"]
    assert got["row"] == (T0 + dt.timedelta(days=2), None, None)
    with pytest.raises(ConfigError, match="no time zone"):
        and_time_window(translate(None, sql.Identifier("metadata")), dt.datetime(2023, 1, 1), None)


async def test_a_conversation_pg_text_cannot_hold_is_refused(
    pg_dsn: str,
    pg_table: str,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table) as store:
            with pytest.raises(ConfigError, match="conversation"):
                await store.store_turns([UnifiedMessage.user("x")], conversation="a\ud800")
            with pytest.raises(ConfigError, match="conversation"):
                await store.add_documents([Document(text="x", conversation="a\ud800")])
            assert len(store) == 0
