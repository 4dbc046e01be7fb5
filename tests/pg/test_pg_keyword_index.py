"""The pg store's per-table keyword index (``open_pg_store(..., keyword_index=)``) and the
in-place migration of version 2, 3, 4, 5 and 6 tables, through ``open_pg_store`` against a
real server.

- ``keyword_index=False`` writes no BM25 posting, refuses a ``bm25`` or ``hybrid`` search
  with a ConfigError naming the table and the way out, and still answers similarity
  search, deletes and upserts;
- ``keyword_index=True`` on such a table builds every entry's postings, after which BM25
  scores and order are those of a table that always had the index (and of the in-memory
  store);
- a store opened before another process switched the index follows the table at its
  next write, either way;
- a version 3 table (postings without lengths, no ``T_ns``) and a version 2 table are
  migrated in place when opened: the same entries, postings and BM25 hits, the
  namespaces' counts made; a version 4 table gets its long terms' digests and its
  escaped metadata strings, with the same BM25 hits and exact filters after; a version
  5 table gains its entries' times (the migration's), conversations and positions
  (``test_pg_time.py``); a version 6 table its versions (``test_pg_versions.py``); a
  version 1 or a newer version is refused with the table,
  the version found and the one expected.
"""

from __future__ import annotations

import random
import string
from typing import Any

import psycopg
import pytest
import trio
from old_schemas import make_version
from pg_support import drop_table, namespace_counts, new_table_name
from psycopg import sql

from actors import HashingEmbedder, open_memory, open_store
from actors._pg.store import open_pg_store
from actors._retrieval.bm25 import MAX_TERM_BYTES
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    RecallSettings,
    SearchRequest,
    StoreUnavailable,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 16
TIMEOUT = 60
WORDS = ["cat", "dog", "fish", "owl", "tree", "rock", "running", "runs"]


def cfg(max_entry_bytes: int = 1024) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=1000, dimensions=DIM, max_entry_bytes=max_entry_bytes)


def docs(start: int, count: int) -> list[Document]:
    return [
        Document(
            text=" ".join(WORDS[(i * j + i) % len(WORDS)] for j in range(1 + i % 5)) + f" e{i}",
            id=f"d{i}",
            metadata={"i": i},
        )
        for i in range(start, start + count)
    ]


def _query(dsn: str, statement: str, table: str) -> Any:
    names = {
        "t": sql.Identifier(table),
        "terms": sql.Identifier(f"{table}_terms"),
        "meta": sql.Identifier(f"{table}_meta"),
    }
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL(statement).format(**names)).fetchone()
    assert row is not None
    return row[0]


def postings(dsn: str, table: str) -> int:
    return int(_query(dsn, "SELECT count(*) FROM {terms}", table))


def flag(dsn: str, table: str) -> bool:
    return bool(_query(dsn, "SELECT keyword_index FROM {meta}", table))


async def bm25_hits(store: Any, query: str) -> list[tuple[str | None, float]]:
    hits = await store.search(SearchRequest(query=query, k=50, kind="bm25"))
    return [(h.document.id, h.score) for h in hits]


QUERIES = ["cat", "run dog", "owl owl tree", "e3 fish", "nothing"]


async def test_without_keyword_index_writes_no_postings_and_refuses_keyword_search(
    pg_dsn: str,
    pg_table: str,
) -> None:
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False
        ) as store:
            await store.add_documents(docs(0, 40))
            await store.store_turns([UnifiedMessage.user("owl tree turn")])
            assert postings(pg_dsn, pg_table) == 0
            assert not flag(pg_dsn, pg_table)
            for kind in ("bm25", "hybrid"):
                with pytest.raises(ConfigError) as caught:
                    await store.search(SearchRequest(query="cat", k=3, kind=kind))
                message = str(caught.value)
                assert pg_table in message and "keyword_index=True" in message
            # The store is still sound: the other reads and every write work.
            hits = await store.search(SearchRequest(query="cat", k=3, kind="similarity"))
            assert len(hits) == 3
            assert (await store.delete(["d1", "d2"])).deleted == ["d1", "d2"]
            await store.upsert(docs(5, 2))
            assert store.usage().entries == 39
        # Reopened with the default (None), the table keeps its setting.
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            with pytest.raises(ConfigError):
                await store.search(SearchRequest(query="cat", k=3, kind="bm25"))
            assert postings(pg_dsn, pg_table) == 0


async def test_turning_the_index_on_builds_the_postings_of_every_entry(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """BM25 after the build is the in-memory store's, and a table's that always had it."""
    embedder = HashingEmbedder(DIM)
    reference = new_table_name()
    ops = [docs(0, 30), docs(20, 25)]
    try:
        with trio.fail_after(TIMEOUT):
            async with (
                open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False) as a,
                open_pg_store(pg_dsn, cfg(), embedder, table=reference) as b,
                open_store(cfg(), embedder) as mem,
            ):
                for batch in ops:
                    for store in (a, b, mem):
                        await store.add_documents(batch)
                for store in (a, b, mem):
                    await store.delete(["d3", "d40"])
            async with open_pg_store(
                pg_dsn, cfg(), embedder, table=pg_table, keyword_index=True
            ) as a:
                assert flag(pg_dsn, pg_table)
                assert postings(pg_dsn, pg_table) == postings(pg_dsn, reference) > 0
                assert vacuumed(pg_dsn, pg_table)
                async with (
                    open_pg_store(pg_dsn, cfg(), embedder, table=reference) as b,
                    open_store(cfg(), embedder) as mem,
                ):
                    for batch in ops:
                        await mem.add_documents(batch)
                    await mem.delete(["d3", "d40"])
                    for query in QUERIES:
                        got = await bm25_hits(a, query)
                        assert got == await bm25_hits(b, query)
                        want = await bm25_hits(mem, query)
                        assert [i for i, _ in got] == [i for i, _ in want]
                        for (_, g), (_, w) in zip(got, want, strict=True):
                            assert abs(g - w) <= 1e-12 * max(1.0, abs(w))
                    hybrid = SearchRequest(query="owl tree", k=5, kind="hybrid")
                    assert [h.document.id for h in await a.search(hybrid)] == [
                        h.document.id for h in await b.search(hybrid)
                    ]
    finally:
        drop_table(pg_dsn, reference)


async def test_a_store_follows_a_switch_made_by_another_open(pg_dsn: str, pg_table: str) -> None:
    """Each write reads the table's setting under the meta row's lock: a store opened
    before the switch writes postings, or skips them, as the table now says."""
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False
        ) as early:
            await early.add_documents(docs(0, 10))
            async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=True):
                pass
            built = postings(pg_dsn, pg_table)
            assert built > 0
            # Prepared without terms (its open said no index): the commit makes them.
            await early.add_documents(docs(10, 10))
            assert postings(pg_dsn, pg_table) > built
            assert await bm25_hits(early, "cat")  # the early store reads the index now
            async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False):
                pass
            assert postings(pg_dsn, pg_table) == 0
            with pytest.raises(ConfigError):
                await early.search(SearchRequest(query="cat", k=3, kind="hybrid"))
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as late:
            await late.add_documents(docs(20, 5))
            assert postings(pg_dsn, pg_table) == 0
        # And back on: the postings are those of the 25 entries, as if always kept.
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=True) as s:
            reference = new_table_name()
            try:
                async with open_pg_store(pg_dsn, cfg(), embedder, table=reference) as r:
                    for batch in (docs(0, 10), docs(10, 10), docs(20, 5)):
                        await r.add_documents(batch)
                    for query in QUERIES:
                        assert await bm25_hits(s, query) == await bm25_hits(r, query)
            finally:
                drop_table(pg_dsn, reference)


def row_options(dsn: str, table: str) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (table,))
        return row.fetchone()[0]  # type: ignore[index]


async def test_a_long_turn_keeps_its_vector_in_its_row(pg_dsn: str, pg_table: str) -> None:
    """A 384-float row whose turn text is a few hundred bytes (there twice: the text and
    the message) stays under the table's toast_tuple_target, so no vector goes to TOAST,
    where every exact scan would have to fetch it."""
    config = VectorStoreConfig(max_entries=1000, dimensions=384, max_entry_bytes=8192)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, config, HashingEmbedder(384), table=pg_table) as store:
            # 350 bytes of text that does not compress (TOAST compresses before it
            # moves anything out of line), then the words the search looks for.
            rng = random.Random(5)
            texts = [
                " ".join("".join(rng.choices(string.ascii_letters, k=9)) for _ in range(35))
                for _ in range(50)
            ]
            await store.store_turns([UnifiedMessage.user(f"{t} owl tree") for t in texts])
            hits = await store.retrieve("owl tree", 3)
            assert len(hits.turns) == 3
    toasted = _query(
        pg_dsn,
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = "
        + f"'{pg_table}'::regclass",
        pg_table,
    )
    assert toasted == 0
    assert row_options(pg_dsn, pg_table) == ["toast_tuple_target=8160"]


@pytest.mark.parametrize("bad", [1, 0, "yes", "false"])
async def test_a_bad_keyword_index_is_refused_before_connecting(bad: object) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(ConfigError) as caught:
        async with open_pg_store(
            "host=/nonexistent dbname=none",
            cfg(),
            HashingEmbedder(DIM),
            keyword_index=bad,  # type: ignore[arg-type]
        ):
            pass  # pragma: no cover
    assert "keyword_index" in str(caught.value) and repr(bad) in str(caught.value)


def vacuumed(dsn: str, table: str) -> bool:
    """Whether the postings were vacuumed and analyzed by hand (by the open that built
    them: autovacuum's runs are counted apart), which marks their pages all-visible so
    that BM25 reads them through their index alone. (The pages themselves are not
    checked: a long transaction elsewhere on the server keeps VACUUM from marking
    them.)"""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL "
            "FROM pg_stat_user_tables WHERE relid = %s::regclass",
            (f"{table}_terms",),
        ).fetchone()
    return row is not None and bool(row[0])


def lengths_agree(dsn: str, table: str) -> bool:
    """Every posting carries its entry's doc_len."""
    return not _query(
        dsn,
        "SELECT count(*) FROM {terms} p JOIN {t} t USING (seq) WHERE p.doc_len <> t.doc_len",
        table,
    )


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6])
async def test_an_older_table_is_migrated_in_place(
    pg_dsn: str,
    pg_table: str,
    version: int,
) -> None:
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs(0, 20))
            await store.store_turns([UnifiedMessage.user("cat owl")], namespace="other")
            before = {q: await bm25_hits(store, q) for q in QUERIES}
            counts = namespace_counts(pg_dsn, pg_table)
        make_version(pg_dsn, pg_table, version)
        kept = postings(pg_dsn, pg_table)
        assert (row_options(pg_dsn, pg_table) is None) == (version == 2)
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            assert _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table) == 7
            assert row_options(pg_dsn, pg_table) == ["toast_tuple_target=8160"]
            assert flag(pg_dsn, pg_table)
            assert postings(pg_dsn, pg_table) == kept
            assert lengths_agree(pg_dsn, pg_table)
            assert vacuumed(pg_dsn, pg_table) == (version < 4)  # 4, 5 and 6 rebuild none
            assert namespace_counts(pg_dsn, pg_table) == counts
            for query, hits in before.items():
                assert await bm25_hits(store, query) == hits
            assert store.usage().entries == 21
            await store.add_documents(docs(20, 5))
            assert postings(pg_dsn, pg_table) > kept
            assert lengths_agree(pg_dsn, pg_table)
            assert namespace_counts(pg_dsn, pg_table)["memory-default"][0] == 25
        # An older table opened straight into keyword_index=False: migrated, emptied.
        make_version(pg_dsn, pg_table, version)
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False):
            assert not flag(pg_dsn, pg_table)
            assert postings(pg_dsn, pg_table) == 0
            assert namespace_counts(pg_dsn, pg_table)["memory-default"][0] == 25


@pytest.mark.parametrize(
    ("version", "says"),
    [(1, "migrates versions 2, 3, 4, 5 and 6 in place"), (8, "made by a newer trio-recall")],
)
async def test_other_versions_are_refused_and_left_alone(
    pg_dsn: str,
    pg_table: str,
    version: int,
    says: str,
) -> None:
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs(0, 5))
        make_version(pg_dsn, pg_table, version)
        with pytest.raises(ConfigError) as caught:
            async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table):
                pass  # pragma: no cover
        message = str(caught.value)
        assert repr(pg_table) in message and f"schema version {version}" in message
        assert "reads version 7" in message and says in message
        assert _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table) == version
        assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == 5


async def test_a_version_4_table_gets_digests_and_exact_filters(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """A version 4 table could hold terms between ``MAX_TERM_BYTES`` and the btree's
    limit (about 2,700 bytes) as themselves, and NUL or lone surrogates in its jsonb as
    U+FFFD: after the migration, a search for such a term finds it as before, and
    filters on those strings match as in memory."""
    embedder = HashingEmbedder(DIM)
    token = "".join(f"{i:08x}" for i in range(125))  # one 1,000-byte token
    rows = [
        Document(id="long", text=f"the key {token}", metadata={"k\x00": "a\x00", "s": "\x01"}),
        Document(id="fffd", text="the plain key", metadata={"k\ufffd": "a\ufffd"}),
        Document(id="hangul", text="x", metadata={"h": "\ud7ff", "s": "\ud800"}),
        *docs(0, 5),
    ]
    filters: list[tuple[dict[str, Any], list[str]]] = [
        ({"k\x00": "a\x00"}, ["long"]),
        ({"k\ufffd": "a\ufffd"}, ["fffd"]),
        ({"k\x00": {"$exists": True}}, ["long"]),
        ({"h": "\ud7ff"}, ["hangul"]),
        ({"s": {"$gt": "\x00"}}, ["long", "hangul"]),
        ({"s": {"$gt": "\ud7ff"}}, ["hangul"]),
    ]
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(8192), embedder, table=pg_table) as store:
            await store.add_documents(rows)
            before = {q: await bm25_hits(store, q) for q in (token, "key", *QUERIES)}
        make_version(pg_dsn, pg_table, 4)
        kept = postings(pg_dsn, pg_table)
        longest = "SELECT max(octet_length(term)) FROM {terms}"
        assert _query(pg_dsn, longest, pg_table) > MAX_TERM_BYTES
        async with open_pg_store(pg_dsn, cfg(8192), embedder, table=pg_table) as store:
            assert _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table) == 7
            assert postings(pg_dsn, pg_table) == kept
            assert _query(pg_dsn, longest, pg_table) <= MAX_TERM_BYTES
            for query, hits in before.items():
                assert await bm25_hits(store, query) == hits
            assert [i for i, _ in before[token]] == ["long"]
            for where, expected in filters:
                hits = await store.search(SearchRequest(query="x", k=20, filter=where))
                assert sorted(h.document.id or "" for h in hits) == sorted(expected), where


async def test_open_memory_refuses_hybrid_recall_over_a_table_without_the_index(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """The user's path: ``open_memory`` over such a table fails when it opens, naming the
    table and both ways out, rather than every turn's recall failing (a turn only logs a
    failed recall). Dense recall works over it, and the table's state is read when the
    memory opens, so a table another handle turned the index on for is accepted."""
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(), embedder, table=pg_table, keyword_index=False
        ) as store:
            await store.add_documents(docs(0, 10))
            with pytest.raises(ConfigError) as caught:
                async with open_memory(store=store):
                    pass  # pragma: no cover
            message = str(caught.value)
            assert "'hybrid'" in message and pg_table in message
            assert "keyword_index=True" in message and "search='dense'" in message
            dense = MemoryConfig(namespace="mem", recall=RecallSettings(search="dense"))
            async with open_memory(store=store, memory=dense) as memory:
                await memory.remember("a fish under the rock")
                owl = await memory.remember("the owl sits in the tree")
                report = await memory.retrieve("owl tree")
                assert [t.id for t in report.turns][:1] == [owl]
            # Another handle builds the index: hybrid recall now opens and answers.
            async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table, keyword_index=True):
                pass
            async with open_memory(store=store, memory=MemoryConfig(namespace="mem")) as memory:
                report = await memory.retrieve("owl tree")
                assert [t.id for t in report.turns][:1] == [owl]


async def test_the_namespaces_counts_follow_every_write(pg_dsn: str, pg_table: str) -> None:
    """``T_ns`` (BM25's N and lengths, a scoped read's count) after inserts, upserts,
    deletes, eviction across namespaces and both clears: it agrees with the entries, a
    namespace's row goes with its last entry, and a scoped read counts from it."""
    embedder = HashingEmbedder(DIM)
    config = VectorStoreConfig(max_entries=12, dimensions=DIM, max_entry_bytes=1024)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, config, embedder, table=pg_table) as store:
            await store.add_documents(docs(0, 5), namespace="a")
            await store.add_documents(docs(0, 4), namespace="b")
            assert namespace_counts(pg_dsn, pg_table).keys() == {"a", "b"}
            await store.upsert(docs(3, 4), namespace="a")  # replaces d3 and d4
            assert namespace_counts(pg_dsn, pg_table)["a"][0] == 7
            assert (await store.retrieve_in("a", "cat", 3)).scanned == 7
            await store.delete(["d0", "d1"], namespace="b")
            assert namespace_counts(pg_dsn, pg_table)["b"][0] == 2
            # 9 entries, then 6 turns in "c": the oldest 3 (a's d0, d1, d2) are evicted.
            await store.store_turns(
                [UnifiedMessage.user(f"owl {i}") for i in range(6)], namespace="c"
            )
            counts = namespace_counts(pg_dsn, pg_table)
            assert {ns: n for ns, (n, _) in counts.items()} == {"a": 4, "b": 2, "c": 6}
            assert (await store.clear("b")).removed == 2
            assert namespace_counts(pg_dsn, pg_table).keys() == {"a", "c"}
            assert (await store.retrieve_in("b", "cat", 3)).scanned == 0
            await store.delete([f"d{i}" for i in range(3, 7)], namespace="a")
            assert namespace_counts(pg_dsn, pg_table).keys() == {"c"}
            assert (await store.clear()).removed == 6
            assert namespace_counts(pg_dsn, pg_table) == {}
            hits = await store.search(SearchRequest(query="owl", k=3, kind="bm25", namespace="c"))
            assert hits == []


async def test_a_store_open_when_a_newer_version_migrates_its_table_writes_nothing(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """Each write reads the schema version under the write lock: a table migrated by a
    newer trio-recall since this store opened is refused, whole, with what to do."""
    embedder = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store:
            await store.add_documents(docs(0, 3))
            make_version(pg_dsn, pg_table, 8)
            for write in (
                store.add_documents(docs(3, 2)),
                store.store_turns([UnifiedMessage.user("owl")]),
                store.delete(["d0"]),
                store.clear(),
            ):
                with pytest.raises(ConfigError) as caught:
                    await write
                message = str(caught.value)
                assert repr(pg_table) in message and "schema version 8" in message
            assert _query(pg_dsn, "SELECT count(*) FROM {t}", pg_table) == 3


async def test_a_name_another_relation_has_is_refused(pg_dsn: str, pg_table: str) -> None:
    """A new store needs ``<table>_ns`` (and ``_terms``, ``_seq``); if another relation
    has one of those names, nothing is created and the error names it."""
    taken = f"{pg_table}_ns"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(taken)))
    try:
        with trio.fail_after(TIMEOUT), pytest.raises(ConfigError) as caught:
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table):
                pass  # pragma: no cover
        assert repr(taken) in str(caught.value) and "pick another table name" in str(caught.value)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f"{pg_table}_meta",)).fetchone()
        assert row is not None and row[0] is None
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(taken)))


async def test_an_open_that_waits_past_its_timeout_on_a_migration_says_so(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """Another process holding the table's schema lock (a migration, an index build)
    past the statement timeout: the open fails with what is going on, not as an
    unreachable server."""
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute(
            "SELECT pg_advisory_xact_lock(hashtext('trio_recall:schema:' || %s))", (pg_table,)
        )
        with trio.fail_after(TIMEOUT), pytest.raises(StoreUnavailable) as caught:
            async with open_pg_store(
                pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table, statement_timeout=0.5
            ):
                pass  # pragma: no cover
        holder.execute("ROLLBACK")
    message = str(caught.value)
    assert repr(pg_table) in message and "being set up by another process" in message


async def test_a_memory_over_an_older_table_recalls_after_the_migration(
    pg_dsn: str,
    pg_table: str,
) -> None:
    """The user's path after an upgrade: ``open_memory`` over a store whose table an
    older trio-recall made migrates it on open, then hybrid recall (the default) finds
    what it found before, and new turns are counted in ``T_ns``."""
    embedder = HashingEmbedder(DIM)
    config = MemoryConfig(namespace="mem")
    queries = ["owl tree", "fish rock", "cat"]
    with trio.fail_after(TIMEOUT):
        async with (
            open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store,
            open_memory(store=store, memory=config) as memory,
        ):
            for text in ("the owl sits in the tree", "a fish under the rock", "the cat"):
                await memory.remember(text)
            before = [[t.id for t in (await memory.retrieve(q)).turns] for q in queries]
        make_version(pg_dsn, pg_table, 3)
        async with (
            open_pg_store(pg_dsn, cfg(), embedder, table=pg_table) as store,
            open_memory(store=store, memory=config) as memory,
        ):
            assert _query(pg_dsn, "SELECT schema_version FROM {meta}", pg_table) == 7
            after = [[t.id for t in (await memory.retrieve(q)).turns] for q in queries]
            assert after == before and all(after)
            await memory.remember("an owl again")
            assert namespace_counts(pg_dsn, pg_table)["mem"][0] == 4
