"""The pg store's bulk write path (binary ``COPY`` inside the batch's one transaction),
through ``open_pg_store`` against a real server.

- a row the server refuses in the middle of a big batch leaves nothing of the batch: no
  entry, no BM25 posting, unchanged counters; so does a refused posting, which the
  server sees after every entry of the batch was copied;
- vectors travel in pgvector's binary form: the table holds the very float32 bits of
  the store's normalization;
- every delete (replace, eviction, ``delete``, ``clear``) takes its entries' postings
  with it, with or without the foreign key that tables made before this had;
- an HNSW store's connections hold the documented search settings, and a filtered read
  deeper than their ``ef_search`` still fills its ``k``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest
import trio
from psycopg import sql

from actors import HashingEmbedder
from actors._embedding.adapter import normalize_rows
from actors._pg import reads as reads_module
from actors._pg.reads import (
    DEFAULT_EF_SEARCH,
    HNSW_CANDIDATES,
    HNSW_FILTERED_EF_SEARCH,
    HNSW_SETTINGS,
    parse_vector,
)
from actors._pg.store import open_pg_store
from protocol import (
    ConfigError,
    Document,
    Poisoned,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 16
TIMEOUT = 60
BATCH = 1500


def cfg(max_entries: int = 10_000) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=max_entries, dimensions=DIM, max_entry_bytes=1024)


def docs(start: int, count: int, rng: np.random.Generator) -> list[Document]:
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    return [
        Document(
            text=f"bulk word{i % 7} entry {i}",
            id=f"d{i}",
            metadata={"i": i, "even": i % 2 == 0},
            embedding=vectors[i - start],
        )
        for i in range(start, start + count)
    ]


def table_state(dsn: str, table: str) -> tuple[list[str], int, int, tuple[Any, ...]]:
    """The ids in the table, its postings, the postings of entries that are gone, and
    the meta row's counters."""
    t, terms, meta = (sql.Identifier(n) for n in (table, f"{table}_terms", f"{table}_meta"))
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} ORDER BY seq").format(t))]
        postings = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(terms)).fetchone()
        orphans = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {} p "
                "WHERE NOT EXISTS (SELECT 1 FROM {} e WHERE e.seq = p.seq)"
            ).format(terms, t)
        ).fetchone()
        counters = conn.execute(
            sql.SQL("SELECT live_entries, evicted_entries, zero_norm_entries FROM {}").format(meta)
        ).fetchone()
    assert postings is not None and orphans is not None and counters is not None
    return ids, int(postings[0]), int(orphans[0]), tuple(counters)


def refuse(dsn: str, table: str, target: str, column: str, value: str) -> None:
    """A trigger that makes the server refuse one row of ``target`` mid-COPY."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.{col} = {value} THEN RAISE EXCEPTION 'refused %', NEW.{col}; END IF; "
                "RETURN NEW; END $$"
            ).format(
                fn=sql.Identifier(f"{table}_refuse"),
                col=sql.Identifier(column),
                value=sql.Literal(value),
            )
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER refuse BEFORE INSERT ON {target} "
                "FOR EACH ROW EXECUTE FUNCTION {fn}()"
            ).format(target=sql.Identifier(target), fn=sql.Identifier(f"{table}_refuse"))
        )


def allow(dsn: str, table: str, target: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TRIGGER refuse ON {}").format(sql.Identifier(target)))
        conn.execute(sql.SQL("DROP FUNCTION {}()").format(sql.Identifier(f"{table}_refuse")))


@pytest.mark.parametrize(
    ("target", "column", "value"),
    [("entries", "id", f"d{1000 + BATCH - 300}"), ("postings", "term", "word3")],
)
async def test_a_refused_row_in_a_bulk_batch_leaves_nothing(
    pg_dsn: str,
    pg_table: str,
    target: str,
    column: str,
    value: str,
) -> None:
    rng = np.random.default_rng(0)
    table = pg_table if target == "entries" else f"{pg_table}_terms"
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table) as store:
            await store.add_documents(docs(0, 10, rng)[:10])
            await store.store_turns([UnifiedMessage.user("a turn before")])
        before = table_state(pg_dsn, pg_table)
        refuse(pg_dsn, pg_table, table, column, value)
        # The server refusing a row that phase 1 accepted is not an input error: the
        # store is poisoned (design §3), and the batch's transaction rolled back.
        with pytest.raises(Poisoned):
            async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table) as store:
                with pytest.raises(Poisoned) as info:
                    await store.add_documents(docs(1000, BATCH, rng))
                assert "refused" in str(info.value.__cause__)
        assert table_state(pg_dsn, pg_table) == before
        allow(pg_dsn, pg_table, table)
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table) as store:
            assert len(store) == 11
            hits = await store.search(SearchRequest(query="word3", kind="bm25", k=50))
            assert sorted(h.document.id for h in hits) == ["d3"]
            # The same batch goes through once the server takes it.
            await store.add_documents(docs(1000, BATCH, rng))
            assert len(store) == 11 + BATCH
    ids, postings, orphans, counters = table_state(pg_dsn, pg_table)
    assert len(ids) == 11 + BATCH and orphans == 0 and counters == (11 + BATCH, 0, 0)
    assert postings > before[1]


async def test_vectors_are_stored_bit_exactly(pg_dsn: str, pg_table: str) -> None:
    rng = np.random.default_rng(1)
    batch = docs(0, 300, rng)
    raw = np.array([d.embedding for d in batch], dtype=np.float64)
    expected, _ = normalize_rows(raw)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table) as store:
            await store.add_documents(batch)
            query = rng.standard_normal(DIM)
            report = await store.retrieve_embedding(query, k=5)
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT embedding::text FROM {} ORDER BY seq").format(sql.Identifier(pg_table))
        ).fetchall()
    stored = np.stack([parse_vector(r[0]) for r in rows])
    assert stored.dtype == np.float32
    assert np.array_equal(stored.view(np.uint32), expected.astype(np.float32).view(np.uint32))
    scores = expected.astype(np.float64) @ (query / np.linalg.norm(query))
    best = np.argsort(-scores)[:5]
    assert [h.id for h in report.turns] == [f"d{i}" for i in best]
    assert np.allclose([h.score for h in report.turns], scores[best], atol=1e-5)


@pytest.mark.parametrize("foreign_key", [False, True])
async def test_every_delete_takes_its_postings(
    pg_dsn: str,
    pg_table: str,
    foreign_key: bool,
) -> None:
    rng = np.random.default_rng(2)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(max_entries=40), HashingEmbedder(DIM), table=pg_table
        ) as store:
            if foreign_key:
                # A table made before the postings lost their foreign key keeps it.
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL(
                            "ALTER TABLE {} ADD FOREIGN KEY (seq) REFERENCES {} (seq) "
                            "ON DELETE CASCADE"
                        ).format(sql.Identifier(f"{pg_table}_terms"), sql.Identifier(pg_table))
                    )
            await store.add_documents(docs(0, 30, rng))
            await store.add_documents(docs(20, 25, rng))  # 10 replaced, d0..d4 evicted
            _, postings, orphans, _ = table_state(pg_dsn, pg_table)
            assert orphans == 0 and postings > 0
            await store.delete(["d25", "d26", "missing"])
            await store.store_turns(
                [UnifiedMessage.user(f"turn {i}") for i in range(3)], namespace="other"
            )
            assert table_state(pg_dsn, pg_table)[2] == 0
            await store.clear("other")
            ids, _, orphans, counters = table_state(pg_dsn, pg_table)
            # The turns evicted d5; clearing their namespace took them.
            live = {f"d{i}" for i in range(6, 45)} - {"d25", "d26"}
            assert orphans == 0 and set(ids) == live and counters[0] == len(live)
            hits = await store.search(SearchRequest(query="bulk", kind="bm25", k=100))
            assert sorted(h.document.id for h in hits) == sorted(ids)
            await store.clear()
    ids, postings, orphans, counters = table_state(pg_dsn, pg_table)
    assert (ids, postings, orphans, counters[0]) == ([], 0, 0, 0)


async def shown_settings(store: Any, names: list[str]) -> list[str]:
    """What ``SHOW`` gives for ``names`` on one of the store's pooled connections."""

    def show() -> list[str]:
        with store._actor.pool.connection() as conn:
            conn.execute("SELECT '[1]'::vector")  # loads pgvector's settings
            return [
                str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in names
            ]

    return await trio.to_thread.run_sync(show)


async def test_hnsw_reads_run_with_the_documented_settings(
    pg_dsn: str,
    pg_table: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(3)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table, index="hnsw"
        ) as store:
            await store.add_documents(docs(0, 1000, rng))
            names = list(HNSW_SETTINGS)
            assert await shown_settings(store, names) == list(HNSW_SETTINGS.values())
            assert HNSW_SETTINGS["hnsw.iterative_scan"] == "relaxed_order"
            even = {"even": True}
            query = rng.standard_normal(DIM)
            # A table this small fetches k rows a read; one of more than HNSW_FETCH_FROM
            # entries asks the index for HNSW_CANDIDATES and keeps the best k by exact
            # distance: the first k of a read of HNSW_CANDIDATES, under a filter too.
            assert store._actor.reads.fetch(5) == 5
            reads = store._actor.reads
            assert reads.ef_search(5, filtered=True) == reads.ef_search(5) == DEFAULT_EF_SEARCH
            monkeypatch.setattr(reads_module, "HNSW_FETCH_FROM", len(store) - 1)
            assert store._actor.reads.fetch(5) == HNSW_CANDIDATES
            # And a filtered read there takes the longer candidate list.
            assert reads.ef_search(5, filtered=True) == HNSW_FILTERED_EF_SEARCH
            assert reads.ef_search(5) == DEFAULT_EF_SEARCH
            for flt in (None, even):
                request = SearchRequest(vector=query, k=HNSW_CANDIDATES, filter=flt)
                wide = [(h.document.id, h.score) for h in await store.search(request)]
                assert len(wide) == HNSW_CANDIDATES
                for k in (1, 5, HNSW_CANDIDATES - 1):
                    hits = await store.search(SearchRequest(vector=query, k=k, filter=flt))
                    assert [(h.document.id, h.score) for h in hits] == wide[:k]
                if flt is None:  # the other statement, retrieve's
                    report = await store.retrieve_embedding(query, 5)
                    assert [(t.id, t.score) for t in report.turns] == wide[:5]
            # 500 even entries; a read of 450 is deeper than ef_search.
            assert int(HNSW_SETTINGS["hnsw.ef_search"]) < 450
            hits = await store.search(SearchRequest(vector=query, k=450, filter=even))
            assert len(hits) == 450 and all(h.document.metadata["even"] for h in hits)
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True)


async def test_ef_search_sets_the_candidate_list_of_every_connection(
    pg_dsn: str,
    pg_table: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(4)
    with trio.fail_after(TIMEOUT):
        async with open_pg_store(
            pg_dsn, cfg(), HashingEmbedder(DIM), table=pg_table, index="hnsw", ef_search=20
        ) as store:
            await store.add_documents(docs(0, 300, rng))
            assert await shown_settings(store, ["hnsw.ef_search"]) == ["20"]
            # The store's own ef_search serves filtered reads on a big table too.
            monkeypatch.setattr(reads_module, "HNSW_FETCH_FROM", len(store) - 1)
            assert store._actor.reads.ef_search(5, filtered=True) == HNSW_CANDIDATES
            monkeypatch.undo()
            # Reads still fetch HNSW_CANDIDATES (the list grows to it for them), and a
            # read deeper than that gets as many hits as it asks for.
            query = rng.standard_normal(DIM)
            assert len(await store.search(SearchRequest(vector=query, k=5))) == 5
            assert len(await store.search(SearchRequest(vector=query, k=120))) == 120


@pytest.mark.parametrize(
    ("index", "ef_search", "says"),
    [
        ("hnsw", 0, "an int in [1, 1000]"),
        ("hnsw", 1001, "an int in [1, 1000]"),
        ("hnsw", True, "ef_search"),
        ("hnsw", 64.0, "ef_search"),
        (None, 64, "needs index='hnsw'"),
    ],
)
async def test_a_bad_ef_search_is_refused_before_connecting(
    index: str | None, ef_search: object, says: str
) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(ConfigError) as caught:
        async with open_pg_store(
            "host=/nonexistent dbname=none",
            cfg(),
            HashingEmbedder(DIM),
            index=index,
            ef_search=ef_search,  # type: ignore[arg-type]
        ):
            pass  # pragma: no cover
    message = str(caught.value)
    assert "ef_search" in message and says in message and repr(ef_search) in message


def test_the_c_stemmer_stems_like_the_pure_python_one() -> None:
    # The pg extra installs PyStemmer, which snowballstemmer then runs: BM25 postings
    # written with it must match the in-memory index's, with or without it.
    stemmer_c = pytest.importorskip("Stemmer")
    from snowballstemmer.english_stemmer import EnglishStemmer

    sample = (
        "running runs ran generously generalizations happiness caresses ponies ties "
        "caress cats feed agreed plastered bled motoring sing conflated troubled sized "
        "hopping tanned falling hissing fizzed failing filing happy sky relational "
        "conditional rational valenci hesitanci digitizer conformabli radicalli "
        "differentli vileli analogousli vietnamization predication operator feudalism "
        "decisiveness hopefulness callousness formaliti sensitiviti sensibiliti "
        "triplicate formative formalize electriciti electrical hopeful goodness "
        "revival allowance inference airliner gyroscopic adjustable defensible "
        "irritant replacement adjustment dependent adoption homologou communism "
        "activate angulariti homologous effective bowdlerize probate rate cease "
        "controll roll naïve café straße 東京 42 row123 x2s ies sses"
    )
    words = sample.split()
    pure = EnglishStemmer()
    assert stemmer_c.Stemmer("english").stemWords(words) == [pure.stemWord(w) for w in words]
