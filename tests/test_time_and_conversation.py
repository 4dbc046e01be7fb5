"""Time and conversation on every entry, on both backends, through the
paths users take: ``open_store``/``open_pg_store`` with ``store_turns``,
``add_documents``, ``get_by_ids``, ``search`` and ``retrieve``, and ``open_memory``
with ``Memory.remember`` and ``compress``.

- every entry comes back with its ``occurred_at`` (an aware UTC datetime: the writer's,
  or the time of the write) and its conversation;
- entries of a conversation get positions 1, 2, 3... in commit order, never given
  twice (a delete, an eviction or an upsert does not free one);
- the one index-text rule: an entry of a conversation is found by a word only its
  predecessor says, a dated entry by its date's words, and reads return the caller's
  own text; a derived text never takes an entry over ``max_entry_bytes``;
- a naive datetime or a bad conversation is a ConfigError naming it, and nothing is
  written;
- the engine's primitives: the arena's ``neighbor_keys`` and ``time_mask``, and pg's
  ``and_time_window`` fragment.

The pg schema's migration from version 5 is in ``test_pg_time.py``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
from pg_support import pg_dsn, pg_table  # noqa: F401

from actors import HashingEmbedder, open_memory, open_store
from actors._retrieval.focus import entry_date
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.compaction import (
    Offload,
    Offloaded,
)

DIM = 32
TIMEOUT = 30
NS = "memory-default"
MAY = dt.datetime(2023, 5, 25, 13, 14, tzinfo=dt.timezone(dt.timedelta(hours=2)))
NOVEMBER = dt.datetime(2023, 11, 3, 9, 0, tzinfo=dt.UTC)

Opener = Callable[..., AbstractAsyncContextManager[Any]]


def cfg(max_entries: int = 32, max_entry_bytes: int = 4096) -> VectorStoreConfig:
    return VectorStoreConfig(
        max_entries=max_entries, dimensions=DIM, max_entry_bytes=max_entry_bytes
    )


class Backend:
    """One backend: how to open a fresh store of it, and how to read an entry's
    position (not part of any read's answer: the engine reads it)."""

    def __init__(self, name: str, request: pytest.FixtureRequest) -> None:
        self.name = name
        self.dsn: str | None = None
        self.table: str | None = None
        if name == "pg":
            try:
                import actors._pg.store  # noqa: F401
            except ImportError as error:  # pragma: no cover - depends on the extras
                if os.environ.get("TRIO_RECALL_PG_REQUIRED") == "1":
                    raise
                pytest.skip(f"the pg extra is not installed ({error})")
            self.dsn = request.getfixturevalue("pg_dsn")
            self.table = request.getfixturevalue("pg_table")

    def open(self, config: VectorStoreConfig, embedder: object | None = None) -> Any:
        embedder = HashingEmbedder(DIM) if embedder is None else embedder
        if self.name == "memory":
            return open_store(config, embedder)
        from actors._pg.store import open_pg_store

        assert self.dsn is not None
        return open_pg_store(self.dsn, config, embedder, table=self.table)

    def positions(self, store: Any, namespace: str = NS) -> dict[str, int | None]:
        """Every live entry's position in ``namespace``, by id."""
        if self.name == "memory":
            arena = store._actor.arena
            out: dict[str, int | None] = {}
            for slot in arena.live_slots(namespace):
                position = int(arena.positions[slot])
                out[arena.ids[slot]] = position or None
            return out
        import psycopg
        from psycopg import sql

        assert self.dsn is not None and self.table is not None
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT id, position FROM {} WHERE namespace = %s").format(
                    sql.Identifier(self.table)
                ),
                (namespace,),
            ).fetchall()
        return {str(i): None if p is None else int(p) for i, p in rows}


@pytest.fixture(params=["memory", "pg"])
def backend(request: pytest.FixtureRequest) -> Backend:
    return Backend(request.param, request)


def user(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


async def bm25(store: Any, query: str, namespace: str = NS) -> list[str]:
    hits = await store.search(SearchRequest(query=query, k=20, kind="bm25", namespace=namespace))
    return [h.document.id or "" for h in hits]


# --- round trips ------------------------------------------------------------------------


async def test_documents_come_back_with_their_time_and_conversation(backend: Backend) -> None:
    docs = [
        Document(id="a", text="the owl hooted at dusk", occurred_at=MAY, conversation="night"),
        Document(id="b", text="a fox crossed the road", conversation="night"),
        Document(id="c", text="the river froze", occurred_at=NOVEMBER),
    ]
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            await store.add_documents(docs)
            got = {d.id: d for d in await store.get_by_ids(["a", "b", "c"])}
            hits = await store.search(SearchRequest(query="owl fox river", k=3))
            report = await store.retrieve("owl", 3)
    assert got["a"].occurred_at == MAY and got["a"].conversation == "night"
    assert got["a"].occurred_at is not None and got["a"].occurred_at.tzinfo is dt.UTC
    assert got["b"].conversation == "night" and got["c"].conversation is None
    assert got["c"].occurred_at == NOVEMBER
    # The text comes back as given, not as it was indexed.
    assert {i: d.text for i, d in got.items()} == {d.id: d.text for d in docs}
    assert {h.document.id: h.document for h in hits} == got
    turns = {t.id: t for t in report.turns}
    assert turns["a"].occurred_at == MAY and turns["a"].conversation == "night"
    assert turns["c"].occurred_at == NOVEMBER and turns["c"].conversation is None
    assert turns["a"].message == user("the owl hooted at dusk")


async def test_turns_come_back_with_their_time_and_conversation(backend: Backend) -> None:
    turns = [user("did you run the charity race?"), UnifiedMessage.assistant("yes, on Saturday")]
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            stored = await store.store_turns(turns, occurred_at=MAY, conversation="chat")
            plain = await store.store_turns([user("no time given")])
            report = await store.retrieve_embedding([1.0] * DIM, k=10)
            got = {d.id: d for d in await store.get_by_ids(stored.ids + plain.ids)}
    by_id = {t.id: t for t in report.turns}
    for entry_id, turn in zip(stored.ids, turns, strict=True):
        assert by_id[entry_id].message == turn
        assert by_id[entry_id].occurred_at == MAY
        assert by_id[entry_id].conversation == "chat"
        assert got[entry_id].text == turn.text() and got[entry_id].conversation == "chat"
    assert by_id[plain.ids[0]].conversation is None


async def test_an_entry_without_a_time_gets_the_time_of_its_write(backend: Backend) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            before = dt.datetime.now(dt.UTC)
            (doc,) = await store.add_documents([Document(text="undated")])
            stored = await store.store_turns([user("undated turn")], conversation="c")
            after = dt.datetime.now(dt.UTC)
            got = await store.get_by_ids([doc, *stored.ids])
    assert len(got) == 2
    for document in got:
        assert document.occurred_at is not None
        assert document.occurred_at.tzinfo is dt.UTC
        assert before <= document.occurred_at <= after


# --- positions --------------------------------------------------------------------------


async def test_positions_are_consecutive_per_conversation_and_never_given_twice(
    backend: Backend,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg(max_entries=8)) as store:
            await store.store_turns(
                [user("a1"), user("a2")], ids=["t1", "t2"], source="explicit", conversation="a"
            )
            await store.store_turns([user("loose")], ids=["loose"], source="explicit")
            await store.add_documents(
                [
                    Document(id="d3", text="a3", conversation="a"),
                    Document(id="b1", text="b1", conversation="b"),
                    Document(id="d4", text="a4", conversation="a"),
                ]
            )
            await store.add_documents([Document(id="x1", text="other", conversation="a")], "x")
            assert backend.positions(store) == {
                "t1": 1, "t2": 2, "loose": None, "d3": 3, "b1": 1, "d4": 4,
            }  # fmt: skip
            # A conversation's name is its namespace's: "a" elsewhere counts apart.
            assert backend.positions(store, "x") == {"x1": 1}
            # The newest is deleted: the next entry does not get its position.
            await store.delete(["d4"])
            await store.add_documents([Document(id="d5", text="a5", conversation="a")])
            assert backend.positions(store)["d5"] == 5
            # An upsert of an entry is a new entry: it gets the next position.
            await store.upsert([Document(id="t1", text="a1 again", conversation="a")])
            assert backend.positions(store)["t1"] == 6
            # The one live entry of "b" is replaced: "b" goes on counting.
            await store.upsert([Document(id="b1", text="b1 again", conversation="b")])
            assert backend.positions(store)["b1"] == 2
            # Eviction (8 entries at most) does not free positions either.
            await store.add_documents(
                [Document(id=f"e{i}", text=f"e {i}", conversation="a") for i in range(4)]
            )
            positions = backend.positions(store)
            assert len(positions) == 7  # 8 live in the store, one of them in "x"
            assert [positions[f"e{i}"] for i in range(4)] == [7, 8, 9, 10]
            assert "t2" not in positions and "loose" not in positions  # evicted


# --- the index text ---------------------------------------------------------------------


async def test_an_entry_of_a_conversation_is_found_by_what_its_predecessor_says(
    backend: Backend,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            first = await store.store_turns(
                [user("Did you run the charity marathon?")], conversation="chat"
            )
            # Its predecessor is in the store: the entry before, in an earlier write.
            second = await store.store_turns([user("Yes, last Saturday!")], conversation="chat")
            # In one batch, each document's predecessor is the one before it there.
            await store.add_documents(
                [
                    Document(id="owl", text="An owl nested in the barn", conversation="farm"),
                    Document(id="loud", text="It was loud all night", conversation="farm"),
                ]
            )
            await store.add_documents([Document(id="alone", text="marathon owl, no conversation")])
            marathon = await bm25(store, "marathon")
            owl = await bm25(store, "owl")
            (answer,) = await store.get_by_ids(second.ids)
            hits = await store.search(SearchRequest(query="marathon", k=5, kind="bm25"))
    assert set(marathon) == {first.ids[0], second.ids[0], "alone"}
    assert set(owl) == {"owl", "loud", "alone"}
    # What a read returns is the caller's own text, not the text it was indexed by.
    assert answer.text == "Yes, last Saturday!"
    assert {h.document.text for h in hits} == {
        "Did you run the charity marathon?",
        "Yes, last Saturday!",
        "marathon owl, no conversation",
    }


async def test_a_dated_entry_is_found_by_its_date(backend: Backend) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            await store.add_documents(
                [
                    Document(id="dated", text="the lake froze over", occurred_at=NOVEMBER),
                    Document(id="undated", text="the lake thawed"),
                ]
            )
            await store.store_turns(
                [user("we skated on it")], ids=["turn"], source="explicit", occurred_at=NOVEMBER
            )
            november = await bm25(store, "november 2023")
            utc = await bm25(store, "UTC")
            (dated,) = await store.get_by_ids(["dated"])
    # Without a conversation the date line comes only with an explicit time.
    assert set(november) == {"dated", "turn"} and set(utc) == {"dated", "turn"}
    assert dated.text == "the lake froze over"


async def test_a_derived_index_text_is_cut_to_fit_the_entry(backend: Backend) -> None:
    cap = 300
    long = "context " * 30 + "zebra"  # its last word is past what the cut keeps
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg(max_entry_bytes=cap)) as store:
            await store.add_documents([Document(id="p", text=long, conversation="c")])
            # Own text (half the cap and more) cannot be held twice: indexed by itself.
            big = "quokka " * 24
            await store.add_documents([Document(id="big", text=big, conversation="c")])
            await store.add_documents([Document(id="small", text="short one", conversation="c")])
            assert set(await bm25(store, "quokka")) == {"big", "small"}
            assert await bm25(store, "context") == ["p"]  # not in "big"'s index text
            assert await bm25(store, "zebra") == ["p"]  # cut from "small"'s
            assert len(store) == 3
            got = {d.id: d.text for d in await store.get_by_ids(["p", "big", "small"])}
    assert got == {"p": long, "big": big, "small": "short one"}


# --- refused input ----------------------------------------------------------------------


async def test_a_naive_time_or_a_bad_conversation_is_refused_and_nothing_is_written(
    backend: Backend,
) -> None:
    naive = dt.datetime(2023, 5, 25, 13, 14)
    with trio.fail_after(TIMEOUT):
        async with backend.open(cfg()) as store:
            with pytest.raises(ConfigError, match="2023-05-25T13:14:00, which has no time zone"):
                await store.store_turns([user("x")], occurred_at=naive)
            with pytest.raises(ConfigError, match="'yesterday'"):
                await store.store_turns([user("x")], occurred_at="yesterday")  # type: ignore[arg-type]
            for bad in ("", "a\x00b", 7):
                with pytest.raises(ConfigError, match="conversation is"):
                    await store.store_turns([user("x")], conversation=bad)  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="600 UTF-8 bytes"):
                await store.store_turns([user("x")], conversation="c" * 600)
            with pytest.raises(ConfigError, match="no time zone"):
                Document(text="x", occurred_at=naive)
            with pytest.raises(ConfigError, match="conversation is ''"):
                Document(text="x", conversation="")
            assert len(store) == 0


# --- the memory -------------------------------------------------------------------------


async def test_remember_keeps_the_time_and_the_conversation(backend: Backend) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            backend.open(cfg()) as store,
            open_memory(store=store, memory=MemoryConfig(namespace=NS)) as memory,
        ):
            question = await memory.remember(
                "Caroline: did you run the charity marathon?", occurred_at=MAY, conversation="s1"
            )
            answer = await memory.remember("Melanie: yes, last Saturday!", conversation="s1")
            plain = await memory.remember("a note without either")
            got = {d.id: d for d in await store.get_by_ids([question, answer, plain])}
            found = await bm25(store, "marathon")
            with pytest.raises(ConfigError, match="no time zone"):
                await memory.remember("x", occurred_at=dt.datetime(2023, 5, 25))
            with pytest.raises(ConfigError, match="conversation is"):
                await memory.remember("x", conversation="")
            assert len(store) == 3
            report = await memory.retrieve("charity marathon")
    assert got[question].occurred_at == MAY and got[question].conversation == "s1"
    assert got[answer].conversation == "s1" and got[plain].conversation is None
    assert got[answer].text == "Melanie: yes, last Saturday!"
    assert set(found) == {question, answer}
    turns = {t.id: t for t in report.turns}
    assert turns[question].occurred_at == MAY and turns[question].conversation == "s1"


async def test_offload_dates_its_turns_by_an_iso_date() -> None:
    messages = [
        UnifiedMessage.system("sys"),
        user("first question about cats"),
        UnifiedMessage.assistant("cats are great"),
        user("the newest question"),
    ]
    store = cfg()
    with trio.fail_after(TIMEOUT):
        async with open_memory(
            store=store,
            memory=MemoryConfig(strategies=[Offload(turns=2)]),
            embedder=HashingEmbedder(DIM),
        ) as memory:
            out = await memory.compress(messages, date="2023-05-25T13:14:00+02:00")
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            iso = await memory.store.get_by_ids(action.ids, namespace=NS)
            before = dt.datetime.now(dt.UTC)
            out = await memory.compress(messages, date="25 May 2023")
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            human = await memory.store.get_by_ids(action.ids, namespace=NS)
    assert [d.occurred_at for d in iso] == [MAY, MAY]
    # Its index texts are Offload's own, the date written as every date line is
    # (format_date, in UTC), which the time channel reads.
    assert iso[1].text == (
        "cats are great\nDate: 25 May 2023, 11:14 UTC\nBefore: first question about cats"
    )
    assert entry_date(iso[1].text) == MAY.date()
    # A date in another form only dates the text: the entries keep the write time.
    assert all(d.occurred_at is not None and d.occurred_at >= before for d in human)
    assert all(d.conversation is None for d in iso + human)


# --- the engine's primitives ------------------------------------------------------------


@asynccontextmanager
async def _memory_store() -> AsyncIterator[Any]:
    async with open_store(cfg(), HashingEmbedder(DIM)) as store:
        yield store


async def test_neighbor_keys_differ_by_one_exactly_between_neighbours() -> None:
    with trio.fail_after(TIMEOUT):
        async with _memory_store() as store:
            arena = store._actor.arena
            await store.add_documents(
                [Document(id=f"a{i}", text=f"a {i}", conversation="a") for i in range(4)]
            )
            await store.add_documents([Document(id="b0", text="b 0", conversation="b")])
            loose = await store.store_turns([user("l0"), user("l1")])
            await store.delete(["a2"])
            ids = ["a0", "a1", "a3", "b0", *loose.ids]
            slots = [arena.slot_of(NS, i) for i in ids]
            keys = dict(zip(ids, arena.neighbor_keys(slots).tolist(), strict=True))
    assert keys["a1"] - keys["a0"] == 1
    assert keys["a3"] - keys["a1"] == 2  # a2 was deleted: a gap, no neighbours
    assert abs(keys["b0"] - keys["a0"]) > 1 << 39  # another conversation, far apart
    # Entries without a conversation: their sequences, consecutive when written so.
    assert keys[loose.ids[1]] - keys[loose.ids[0]] == 1
    assert keys[loose.ids[0]] < 1 << 40 <= keys["a0"]


async def test_time_mask_keeps_since_up_to_until() -> None:
    times = [MAY, NOVEMBER, NOVEMBER + dt.timedelta(days=1)]
    with trio.fail_after(TIMEOUT):
        async with _memory_store() as store:
            arena = store._actor.arena
            await store.add_documents(
                [Document(id=f"d{i}", text=f"d {i}", occurred_at=t) for i, t in enumerate(times)]
            )
            await store.delete(["d0"])
            slot = {f"d{i}": arena.slot_of(NS, f"d{i}") for i in (1, 2)}
            window = arena.time_mask(NOVEMBER, NOVEMBER + dt.timedelta(days=1))
            unbounded = arena.time_mask(None, None)
            early = arena.time_mask(None, NOVEMBER)
            assert arena.occurred_at_of(slot["d1"]) == NOVEMBER
    assert window.tolist().count(True) == 1 and window[slot["d1"]]  # until is excluded
    assert unbounded.tolist().count(True) == 2  # the deleted entry's slot is free
    assert not early.any()
