"""Memory over time on the pg store (schema version 7), against a real server, through
``open_pg_store`` (and ``open_memory`` over it for recall):

- an update writes version n + 1 and keeps version n, closed at the new one's
  ``valid_from``: every search kind (similarity, mmr, bm25, hybrid, recall),
  ``retrieve`` and ``get_by_ids`` see the current version, ``as_of`` the one valid
  then, and ``history`` lists both; a memory's recall sees the new text;
- an update built on a version another write replaced is refused by the commit
  (``StaleVersion``, nothing changed, the store sound), and two concurrent updates of
  one memory both land, one after a retry;
- expiry with a fake clock: an expired entry is invisible to every read at once (and
  to BM25's statistics), each write deletes at most 256 expired rows;
- ``dedupe="exact"`` and ``"near"`` write nothing for a duplicate and return the
  existing id;
- ``forget`` leaves no trace: no read path returns the memory, no posting (in either
  postings table) or statistic counts it, ``history`` is empty, export through
  ``retrieve_embedding`` misses it; by filter and ``before`` too; ``delete`` takes
  every version;
- a version 6 table is migrated in place: its rows are version 1, valid from their
  ``occurred_at``, and can be updated with history.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pytest
import trio
from old_schemas import make_version
from psycopg import sql

from actors import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingResult,
    HashingEmbedder,
    open_memory,
)
from actors._pg.filters import Visibility
from actors._pg.sql import RECLAIM_ROWS
from actors._pg.store import open_pg_store
from actors._retrieval.bm25 import index_term, stem_words
from actors._store.backend import PutDocuments, StaleVersion
from actors._store.prepare import check_documents
from protocol import (
    Document,
    EmbeddingProfile,
    MemoryConfig,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.messages import Supersede, UpsertDocuments

DIM = 32
TIMEOUT = 60
NS = "memory-default"
T0 = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
KINDS = ("similarity", "mmr", "bm25", "hybrid", "recall")


def cfg(max_entries: int = 64) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=max_entries, dimensions=DIM, max_entry_bytes=4096)


class FakeClock:
    """A store clock a test moves by hand."""

    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> dt.datetime:
        self.now += dt.timedelta(**delta)
        return self.now


def _query(dsn: str, statement: str, table: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        names = {
            "t": sql.Identifier(table),
            "terms": sql.Identifier(f"{table}_terms"),
            "xterms": sql.Identifier(f"{table}_xterms"),
            "ns": sql.Identifier(f"{table}_ns"),
            "meta": sql.Identifier(f"{table}_meta"),
        }
        return conn.execute(sql.SQL(statement).format(**names), params).fetchall()


def _counts_agree(dsn: str, table: str) -> None:
    """``T_ns`` counts the current rows of each namespace (and their length), the meta
    row every row and the closed ones, and every posting's entry is in the right
    postings table: ``T_terms`` for current rows that never expire, ``T_xterms`` for
    the others, with their ``valid_to`` and ``expires_at``."""
    kept = _query(dsn, "SELECT namespace, entries, total_len FROM {ns} ORDER BY 1", table)
    counted = _query(
        dsn,
        "SELECT namespace, count(*), sum(doc_len) FROM {t} WHERE valid_to IS NULL "
        "GROUP BY 1 ORDER BY 1",
        table,
    )
    assert kept == counted
    meta = _query(dsn, "SELECT live_entries, closed_entries FROM {meta}", table)
    rows = _query(
        dsn, "SELECT count(*), count(*) FILTER (WHERE valid_to IS NOT NULL) FROM {t}", table
    )
    assert meta == rows
    misplaced = _query(
        dsn,
        "SELECT (SELECT count(*) FROM {terms} p JOIN {t} e USING (seq) "
        "WHERE e.valid_to IS NOT NULL OR e.expires_at IS NOT NULL), "
        "(SELECT count(*) FROM {xterms} p JOIN {t} e USING (seq) "
        "WHERE (e.valid_to IS NULL AND e.expires_at IS NULL) "
        "OR p.valid_to IS DISTINCT FROM e.valid_to "
        "OR p.expires_at IS DISTINCT FROM e.expires_at), "
        "(SELECT count(*) FROM {terms} p "
        "WHERE NOT EXISTS (SELECT 1 FROM {t} e WHERE e.seq = p.seq)), "
        "(SELECT count(*) FROM {xterms} p "
        "WHERE NOT EXISTS (SELECT 1 FROM {t} e WHERE e.seq = p.seq))",
        table,
    )
    assert misplaced == [(0, 0, 0, 0)]


async def _texts(store: Any, query: str, **kw: Any) -> dict[str, list[str]]:
    """What each search kind returns for ``query``: the hits' texts."""
    out: dict[str, list[str]] = {}
    for kind in KINDS:
        hits = await store.search(SearchRequest(query=query, k=10, kind=kind, **kw))
        out[kind] = sorted(h.document.text for h in hits)
    return out


async def _term_stats(store: Any, terms: list[str], vis: Visibility) -> tuple[int, dict[str, int]]:
    reads = store._actor.reads
    result: tuple[int, dict[str, int]] = await store._actor.read(
        lambda conn: reads.term_counts(conn, terms, NS, vis), "test"
    )
    return result


def _term(word: str) -> str:
    (stem,) = stem_words([word])
    return index_term(stem)


async def test_an_update_keeps_history_and_every_read_sees_one_version(
    pg_dsn: str, pg_table: str
) -> None:
    clock = FakeClock()
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, clock=clock) as store:
            await store.add_documents(
                [
                    Document(id="sky", text="the sky colour is green", occurred_at=T0),
                    Document(id="sea", text="the sea colour is grey", occurred_at=T0),
                ]
            )
            t1 = clock.advance(days=1)
            new = await store.update("sky", "the sky colour is blue", metadata={"k": 1})
            assert (new.version, new.supersedes, new.valid_from) == (2, 1, t1)
            clock.advance(days=1)
            # Default reads: the current version only, on every kind.
            for kind, texts in (await _texts(store, "sky colour")).items():
                assert "the sky colour is green" not in texts, kind
                assert "the sky colour is blue" in texts, kind
            (current,) = await store.get_by_ids(["sky"])
            assert (current.text, current.version, current.valid_to) == (
                "the sky colour is blue",
                2,
                None,
            )
            assert current.metadata == {"k": 1} and current.occurred_at == t1
            report = await store.retrieve("sky colour", 10)
            assert sorted(t.id for t in report.turns) == ["sea", "sky"]
            assert report.scanned == 2
            # As of a time between the two: version 1, on every kind.
            middle = T0 + dt.timedelta(hours=12)
            for kind, texts in (await _texts(store, "sky colour", as_of=middle)).items():
                assert "the sky colour is green" in texts, kind
                assert "the sky colour is blue" not in texts, kind
            (old,) = await store.get_by_ids(["sky"], as_of=middle)
            assert (old.text, old.version, old.valid_from, old.valid_to) == (
                "the sky colour is green",
                1,
                T0,
                t1,
            )
            assert await store.get_by_ids(["sky"], as_of=T0 - dt.timedelta(seconds=1)) == []
            history = await store.history("sky")
            assert [(d.version, d.supersedes, d.text) for d in history] == [
                (1, None, "the sky colour is green"),
                (2, 1, "the sky colour is blue"),
            ]
            assert history[0].valid_to == history[1].valid_from == t1
            assert await store.history("nothing") == []
            # BM25's statistics: the namespace's current entries only, then as of then.
            terms = [_term("green"), _term("blue"), _term("colour")]
            now = Visibility(clock.now)
            assert await _term_stats(store, terms, now) == (
                2,
                dict(zip(terms, [0, 1, 2], strict=True)),
            )
            then = Visibility(clock.now, middle)
            assert await _term_stats(store, terms, then) == (
                2,
                dict(zip(terms, [1, 0, 2], strict=True)),
            )
            # An upsert replaces the current version in place: no new history.
            await store.upsert([Document(id="sky", text="the sky colour is cyan")])
            history = await store.history("sky")
            assert [(d.version, d.text) for d in history] == [
                (1, "the sky colour is green"),
                (2, "the sky colour is cyan"),
            ]
            assert history[1].valid_from == t1
            assert store.usage().entries == 3  # the closed version holds a row
            _counts_agree(pg_dsn, pg_table)


async def test_a_stale_update_is_refused_and_concurrent_updates_both_land(
    pg_dsn: str, pg_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Gated:
        """An async embedder whose first document call says so and waits for the gate."""

        def __init__(self) -> None:
            self.inner = HashingEmbedder(DIM)
            self.gate = trio.Event()
            self.entered = trio.Event()
            self.calls = 0

        async def embed_documents(self, texts: Sequence[str]) -> Any:
            self.calls += 1
            if self.calls == 1:
                self.entered.set()
                await self.gate.wait()
            return np.stack([self.inner.embed(t) for t in texts])

        async def embed_query(self, text: str) -> Any:
            return self.inner.embed(text)

    clock = FakeClock()
    embedder = Gated()
    embedder.gate.set()
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, clock=clock) as store:
            await store.add_documents([Document(id="m", text="version one")])
            # Built on version 7 while version 1 is current: refused, nothing changed.
            request = UpsertDocuments(
                documents=[Document(id="m", text="stale", occurred_at=clock.advance(seconds=1))],
                namespace=NS,
                supersede=Supersede(id="m", version=7, valid_from=clock.now),
            )
            batch = check_documents(request, max_entry_bytes=4096, max_entries=64)
            with pytest.raises(StaleVersion) as caught:
                await store._request(PutDocuments(request, batch))
            assert (caught.value.expected, caught.value.current) == (7, 1)
            assert [d.text for d in await store.history("m")] == ["version one"]
            assert store._actor.crash is None
            # Two updates read version 1 before either commits: one retries.
            embedder.calls, embedder.gate, embedder.entered = 0, trio.Event(), trio.Event()
            results: list[Document] = []
            fetched, reads = trio.Event(), [0]
            fetch = store._actor.fetch

            async def counted_fetch(*args: Any) -> list[Document]:
                found: list[Document] = await fetch(*args)
                reads[0] += 1
                if reads[0] == 2:
                    fetched.set()
                return found

            monkeypatch.setattr(store._actor, "fetch", counted_fetch)

            async def update(text: str) -> None:
                results.append(await store.update("m", text, valid_from=clock.advance(seconds=1)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(update, "from a")
                await embedder.entered.wait()  # a read version 1 and is being embedded
                nursery.start_soon(update, "from b")
                await fetched.wait()  # b read version 1 too
                embedder.gate.set()
            assert sorted(d.version for d in results if d.version) == [2, 3]
            assert embedder.calls == 3  # a, b on version 1 (refused), b again on 2
            history = await store.history("m")
            assert [d.version for d in history] == [1, 2, 3]
            assert history[2].text == results[1].text
            _counts_agree(pg_dsn, pg_table)


async def test_expiry_hides_at_once_and_each_write_reclaims_at_most_256(
    pg_dsn: str, pg_table: str
) -> None:
    clock = FakeClock()
    embedder = HashingEmbedder(DIM)
    many = RECLAIM_ROWS + 44
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(max_entries=1024), embedder, table=pg_table, clock=clock
        ) as store:
            await store.add_documents([Document(id="keep", text="a lasting owl")])
            await store.add_documents(
                [Document(id=f"e{i}", text=f"a fleeting owl {i}") for i in range(many)], ttl=60
            )
            stored = await store.store_turns(
                [UnifiedMessage.user("an owl turn that fades")],
                expires_at=T0 + dt.timedelta(seconds=30),
            )
            clock.advance(seconds=1)
            await store.update("keep", "a lasting owl, seen again", expires_at=None)
            assert len((await _texts(store, "owl"))["bm25"]) == 10
            _counts_agree(pg_dsn, pg_table)
            stats = await _term_stats(store, [_term("owl")], Visibility(clock.now))
            assert stats == (many + 2, {_term("owl"): many + 2})
            clock.advance(seconds=45)  # the turn has expired, the documents not yet
            assert await store.get_by_ids([stored.ids[0]]) == []
            assert await store.history(stored.ids[0]) == []
            clock.advance(seconds=30)  # everything with a ttl has expired
            for kind, texts in (await _texts(store, "owl")).items():
                assert texts == ["a lasting owl, seen again"], kind
            for kind, texts in (await _texts(store, "owl", as_of=T0)).items():
                assert texts == ["a lasting owl"], kind
            assert await store.get_by_ids(["e0", "e1"]) == []
            assert await store.get_by_ids(["e0"], as_of=T0 + dt.timedelta(seconds=1)) == []
            report = await store.retrieve("owl", 500)
            assert [t.id for t in report.turns] == ["keep"] and report.scanned == 1
            stats = await _term_stats(store, [_term("owl")], Visibility(clock.now))
            assert stats == (1, {_term("owl"): 1})
            # Nothing is reclaimed until a write, which takes at most 256 rows.
            total = many + 3
            assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == [(total,)]
            await store.add_documents([Document(id="other", text="unrelated")])
            left = total + 1 - RECLAIM_ROWS
            assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == [(left,)]
            _counts_agree(pg_dsn, pg_table)
            await store.delete(["nothing"])
            assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == [(3,)]
            assert store.usage().entries == 3
            _counts_agree(pg_dsn, pg_table)
            # T_xterms keeps the closed version's postings, no expiring one's.
            held = _query(
                pg_dsn, "SELECT DISTINCT seq, expires_at IS NULL FROM {xterms}", pg_table
            )
            closed = _query(pg_dsn, "SELECT seq FROM {t} WHERE valid_to IS NOT NULL", pg_table)
            assert held == [(closed[0][0], True)] and len(closed) == 1


async def test_dedupe_exact_and_near_write_nothing_for_a_duplicate(
    pg_dsn: str, pg_table: str
) -> None:
    clock = FakeClock()
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, clock=clock) as store:
            await store.add_documents([Document(id="a", text="the cat sat on the mat")])
            ids = await store.add_documents(
                [
                    Document(id="b", text="the cat sat on the mat"),
                    Document(id="c", text="a dog barked"),
                    Document(id="d", text="a dog barked"),
                    Document(id="e", text="The cat sat on the mat"),
                ],
                dedupe="exact",
            )
            assert ids == ["a", "c", "c", "e"]
            assert sorted(d.id or "" for d in await store.get_by_ids(list("abcde"))) == [
                "a",
                "c",
                "e",
            ]
            # Another namespace holds nothing of it; an expired entry is no duplicate.
            assert await store.add_documents(
                [Document(id="b", text="the cat sat on the mat")], "other", dedupe="exact"
            ) == ["b"]
            await store.add_documents([Document(id="f", text="fading words")], ttl=10)
            clock.advance(seconds=11)
            assert await store.add_documents(
                [Document(id="g", text="fading words")], dedupe="exact"
            ) == ["g"]
            first = await store.store_turns([UnifiedMessage.user("hello there")])
            again = await store.store_turns(
                [UnifiedMessage.user("hello there"), UnifiedMessage.user("new words")],
                dedupe="exact",
            )
            assert again.ids[0] == first.ids[0] and again.sequences[0] == first.sequences[0]
            assert again.duplicates == [first.ids[0]] and again.ids[1] != first.ids[0]
            # Near: the same words in another order embed alike (the hashing embedder).
            # (a and e embed alike too: the tie goes to the newest, as in reads.)
            ids = await store.add_documents(
                [Document(id="h", text="mat the on sat cat the")], dedupe="near"
            )
            assert ids == ["e"]
            ids = await store.add_documents(
                [Document(id="h", text="mat the on sat cat the")],
                dedupe="near",
                near_threshold=1.0 - 1e-6,
            )
            assert ids == ["e"]
            ids = await store.add_documents(
                [Document(id="i", text="a bird sang"), Document(id="j", text="sang a bird")],
                dedupe="near",
            )
            assert ids == ["i", "i"]
            assert await store.get_by_ids(["h", "j"]) == []
            _counts_agree(pg_dsn, pg_table)


async def test_forget_leaves_no_trace_on_any_read_path(pg_dsn: str, pg_table: str) -> None:
    clock = FakeClock()
    embedder = HashingEmbedder(DIM)
    secret = "zanzibar"
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, clock=clock) as store:
            await store.add_documents(
                [
                    Document(id="s", text=f"the {secret} code is 1234", occurred_at=T0),
                    Document(id="o", text="the other code is 99", occurred_at=T0),
                    Document(
                        id="x",
                        text=f"{secret} expires soon",
                        occurred_at=T0,
                        expires_at=T0 + dt.timedelta(days=30),
                    ),
                ]
            )
            clock.advance(hours=2)
            await store.update("x", f"{secret} expires soon indeed", expires_at=None)
            clock.advance(days=1)
            await store.update("s", f"the {secret} code is 5678")
            await store.store_turns([UnifiedMessage.user(f"my {secret} pin")], namespace="chat")
            assert (await _texts(store, secret))["bm25"] != []
            assert await store.forget(["s", "x", "missing"]) == ["s", "x"]
            forgotten = _query(pg_dsn, "SELECT seq FROM {t} WHERE id IN ('s', 'x')", pg_table)
            assert forgotten == []
            for as_of in (None, T0 + dt.timedelta(hours=1)):
                for kind, texts in (await _texts(store, f"{secret} code", as_of=as_of)).items():
                    assert not any(secret in t for t in texts), (kind, as_of)
                    assert texts == ["the other code is 99"], (kind, as_of)
                assert await store.get_by_ids(["s", "x"], as_of=as_of) == []
            assert await store.history("s") == [] and await store.history("x") == []
            exported = await store.retrieve_embedding(embedder.embed(secret), 64, NS)
            assert [t.id for t in exported.turns] == ["o"]
            stats = await _term_stats(store, [_term(secret)], Visibility(clock.now))
            assert stats == (1, {_term(secret): 0})
            as_of = Visibility(clock.now, T0 + dt.timedelta(hours=1))
            assert await _term_stats(store, [_term(secret)], as_of) == (1, {_term(secret): 0})
            for postings in ("{terms}", "{xterms}"):
                held = _query(
                    pg_dsn,
                    "SELECT count(*) FROM " + postings + " WHERE term = %s AND namespace = %s",
                    pg_table,
                    _term(secret),
                    NS,
                )
                assert held == [(0,)]
            _counts_agree(pg_dsn, pg_table)
            # The other namespace still holds its turn; forget by selection takes it.
            assert len((await store.retrieve_in("chat", secret, 5)).turns) == 1
            assert await store.forget(namespace="chat", before=T0) == []
            stored = await store.store_turns(
                [UnifiedMessage.user("keep me")], namespace="chat", metadata={"keep": True}
            )
            clock.advance(days=1)
            gone = await store.forget(namespace="chat", filter={"keep": {"$ne": True}})
            assert len(gone) == 1 and gone != stored.ids
            assert [t.id for t in (await store.retrieve_in("chat", "keep", 5)).turns] == stored.ids
            # delete takes every version too.
            await store.update("o", "the other code is 100")
            result = await store.delete(["o"])
            assert result.deleted == ["o"] and await store.history("o") == []
            assert await store.forget(namespace="chat") == stored.ids
            assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == [(0,)]
            assert _query(pg_dsn, "SELECT count(*) FROM {terms}", pg_table) == [(0,)]
            assert _query(pg_dsn, "SELECT count(*) FROM {xterms}", pg_table) == [(0,)]
            assert _query(pg_dsn, "SELECT count(*) FROM {ns}", pg_table) == [(0,)]
            assert store.usage().entries == 0
            _counts_agree(pg_dsn, pg_table)


async def test_a_memory_recalls_the_current_version(pg_dsn: str, pg_table: str) -> None:
    embedder = HashingEmbedder(DIM)
    config = MemoryConfig(namespace="mem")
    with trio.fail_after(TIMEOUT):
        async with (
            open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store,
            open_memory(store=store, memory=config) as memory,
        ):
            fact = await memory.remember("my favourite colour is green")
            await memory.remember("I live by the sea")
            await store.update(fact, "my favourite colour is blue", namespace="mem")
            turns = (await memory.retrieve("favourite colour")).turns
            texts = [t.message.content[0].text for t in turns]  # type: ignore[union-attr]
            assert "my favourite colour is blue" in texts
            assert "my favourite colour is green" not in texts


async def test_a_version_6_table_is_migrated_with_its_rows_as_version_1(
    pg_dsn: str, pg_table: str
) -> None:
    embedder = HashingEmbedder(DIM)
    docs = [
        Document(id=f"d{i}", text=f"owl number {i}", occurred_at=T0 + dt.timedelta(days=i))
        for i in range(4)
    ]
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs)
            before = await store.search(SearchRequest(query="owl", k=10, kind="bm25"))
        make_version(pg_dsn, pg_table, 6)
        columns = _query(
            pg_dsn,
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
            pg_table,
            pg_table,
        )
        assert "version" not in {c for (c,) in columns}
        clock = FakeClock(T0 + dt.timedelta(days=10))
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, clock=clock) as store:
            assert _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table) == [(7,)]
            # No row was rewritten: valid_from is NULL (its occurred_at), version 1.
            assert _query(
                pg_dsn,
                "SELECT count(*) FROM {t} WHERE valid_from IS NULL AND version = 1",
                pg_table,
            ) == [(4,)]
            after = await store.search(SearchRequest(query="owl", k=10, kind="bm25"))
            assert [(h.document.id, h.score) for h in after] == [
                (h.document.id, h.score) for h in before
            ]
            got = await store.get_by_ids([d.id for d in docs if d.id])
            assert sorted((d.id, d.version, d.valid_from, d.valid_to) for d in got) == [
                (d.id, 1, d.occurred_at, None) for d in docs
            ]
            assert await store.history("d2") == [next(d for d in got if d.id == "d2")]
            # The unique constraint is gone: an update keeps the old row as history.
            await store.update("d2", "owl number two")
            history = await store.history("d2")
            assert [(d.version, d.text) for d in history] == [
                (1, "owl number 2"),
                (2, "owl number two"),
            ]
            (old,) = await store.get_by_ids(["d2"], as_of=T0 + dt.timedelta(days=5))
            assert old.text == "owl number 2" and old.valid_from == T0 + dt.timedelta(days=2)
            indexes = _query(
                pg_dsn, "SELECT indexname FROM pg_indexes WHERE tablename = %s", pg_table, pg_table
            )
            assert {
                f"{pg_table}_ns_id_cur",
                f"{pg_table}_ns_idv_idx",
                f"{pg_table}_exp_idx",
                f"{pg_table}_ns_exp_idx",
                f"{pg_table}_ns_md5_idx",
            } <= {i for (i,) in indexes}
            assert f"{pg_table}_ns_id_key" not in {i for (i,) in indexes}
            _counts_agree(pg_dsn, pg_table)


async def test_forget_rewrites_what_quoted_the_forgotten_text(pg_dsn: str, pg_table: str) -> None:
    """An entry indexed with its conversation predecessor's text quotes it: a forget
    gives it its index text again without it (vector, postings, length), and the
    embedding cache drops every text of the forgotten memory and the old index text."""
    secret = "zanzibar orchid password"
    cache = EmbeddingCache()
    embedder = CachedEmbedder(_HashModel(), cache=cache)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(
                [
                    Document(id="s", text=secret, conversation="chat"),
                    Document(id="keep", text="an ordinary orchid note", conversation="chat"),
                ]
            )
            quoted = _query(pg_dsn, "SELECT index_text FROM {t} WHERE id = 'keep'", pg_table)
            assert "zanzibar" in quoted[0][0]
            hits = await store.search(SearchRequest(query="zanzibar", k=5, kind="bm25"))
            assert sorted(h.document.id or "" for h in hits) == ["keep", "s"]
            assert any("zanzibar" in key[-1] for key in cache._data)
            assert await store.forget(["s"]) == ["s"]
            (index,) = _query(pg_dsn, "SELECT index_text FROM {t} WHERE id = 'keep'", pg_table)
            assert index[0] is None or "zanzibar" not in index[0]
            for kind in KINDS:
                hits = await store.search(SearchRequest(query="zanzibar", k=5, kind=kind))
                assert all("zanzibar" not in h.document.text for h in hits), kind
            assert await store.search(SearchRequest(query="zanzibar", k=5, kind="bm25")) == []
            # (A query's own cached vector is the reader's, not a stored text.)
            assert not any("zanzibar" in key[-1] for key in cache._data if key[2] == "document")
            for postings in ("{terms}", "{xterms}"):
                held = _query(
                    pg_dsn,
                    "SELECT count(*) FROM " + postings + " WHERE term = %s",
                    pg_table,
                    _term("zanzibar"),
                )
                assert held == [(0,)]
            # Its vector is that of what it is indexed by now.
            (row,) = _query(pg_dsn, "SELECT embedding::text FROM {t} WHERE id = 'keep'", pg_table)
            now_indexed = "an ordinary orchid note" if index[0] is None else index[0]
            want = HashingEmbedder(DIM).embed(now_indexed)
            got = np.array(row[0][1:-1].split(","), dtype=np.float32)
            assert np.allclose(got, want / np.linalg.norm(want), atol=1e-6)
            _counts_agree(pg_dsn, pg_table)


class _HashModel:
    """An EmbeddingModel over the hashing embedder, so a store's embedder has a cache."""

    def __init__(self) -> None:
        self._hash = HashingEmbedder(DIM)
        self.profile = EmbeddingProfile(provider="test", model="hash", dimensions=DIM)

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        await trio.lowlevel.checkpoint()
        return EmbeddingResult(vectors=self._hash.embed_batch(list(texts)), tokens=None, batches=1)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return (await self.embed_with_report(texts, "document")).vectors

    async def embed_query(self, text: str) -> Any:
        return (await self.embed_with_report([text], "query")).vectors[0]


async def test_closed_versions_take_rows_and_are_evicted_first_in_first_out(
    pg_dsn: str, pg_table: str
) -> None:
    """A closed version holds a row of the cap (``usage().entries``) and is evicted
    oldest first like any entry; the counts stay whole through it."""
    clock = FakeClock()
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(max_entries=4), embedder, table=pg_table, clock=clock
        ) as store:
            await store.add_documents([Document(id="m", text="step 0")])
            for step in range(1, 6):
                clock.advance(seconds=1)
                await store.update("m", f"step {step}")
                _counts_agree(pg_dsn, pg_table)
            assert store.usage().entries == 4
            history = await store.history("m")
            assert [d.version for d in history] == [3, 4, 5, 6]
            assert [d.text for d in history][-1] == "step 5"
            (old,) = await store.get_by_ids(["m"], as_of=T0 + dt.timedelta(seconds=2.5))
            assert old.version == 3
            assert await store.get_by_ids(["m"], as_of=T0 + dt.timedelta(seconds=0.5)) == []
            report = await store.retrieve("step", 10)
            assert [t.id for t in report.turns] == ["m"] and report.scanned == 1
