"""Tables as older (or newer) trio-recall versions left them: a version 7 table turned
back into version 6, 5, 4, 3 or 2 (or stamped 8), for the migration tests
(``test_pg_keyword_index.py``, ``test_pg_time.py``, ``test_pg_versions.py``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
from psycopg import sql

from actors._retrieval.bm25 import _STEMMER, words_of
from protocol._surrogates import replace_surrogates, unpack_metadata

__all__ = ["make_version"]


def _lossy(value: Any) -> Any:
    """What version 4 wrote in the jsonb metadata: each NUL and lone surrogate as U+FFFD,
    every other character as itself."""
    if isinstance(value, str):
        return replace_surrogates(value.replace("\x00", "\ufffd"))
    if isinstance(value, list):
        return [_lossy(item) for item in value]
    if isinstance(value, dict):
        return {_lossy(key): _lossy(item) for key, item in value.items()}
    return value


def _version_4_postings_and_metadata(conn: psycopg.Connection[Any], table: str) -> None:
    """Rewrite every posting with its stem as the term (version 4 had no digests) and
    every metadata as version 4 encoded it (the tests' metadata has no floats)."""
    names = {
        "t": sql.Identifier(table),
        "terms": sql.Identifier(f"{table}_terms"),
        "meta": sql.Identifier(f"{table}_meta"),
    }
    rows = conn.execute(
        sql.SQL("SELECT seq, namespace, text, doc_len, meta_raw FROM {t}").format(**names)
    ).fetchall()
    postings, metadata = [], []
    for seq, namespace, text, doc_len, raw in rows:
        stems = Counter(_STEMMER.stemWords(words_of(text)))
        postings += [(seq, term, namespace, tf, doc_len) for term, tf in stems.items()]
        if raw is not None:
            metadata.append((json.dumps(_lossy(unpack_metadata(raw)), ensure_ascii=False), seq))
    indexed = conn.execute(sql.SQL("SELECT keyword_index FROM {meta}").format(**names))
    with conn.cursor() as cur:
        if indexed.fetchone() == (True,):
            cur.execute(sql.SQL("TRUNCATE {terms}").format(**names))
            cur.executemany(
                sql.SQL("INSERT INTO {terms} VALUES (%s, %s, %s, %s, %s)").format(**names),
                postings,
            )
        cur.executemany(
            sql.SQL("UPDATE {t} SET metadata = %s::jsonb WHERE seq = %s").format(**names),
            metadata,
        )


def _version_6(conn: psycopg.Connection[Any], table: str) -> None:
    """What version 6 had: no version columns (dropping one drops its indexes), no
    T_xterms, no closed_entries, and ``UNIQUE (namespace, id)``. The table must hold
    current versions that never expire only (version 6 had nothing else)."""
    t = sql.Identifier(table)
    closed = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {} WHERE valid_to IS NOT NULL OR expires_at IS NOT NULL"
        ).format(t)
    ).fetchone()
    assert closed == (0,), "a version 6 table holds no closed or expiring entry"
    conn.execute(
        sql.SQL(
            "ALTER TABLE {} DROP COLUMN valid_from, DROP COLUMN valid_to, DROP COLUMN version, "
            "DROP COLUMN supersedes, DROP COLUMN expires_at"
        ).format(t)
    )
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"{table}_ns_md5_idx")))
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(f"{table}_xterms")))
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP COLUMN closed_entries").format(
            sql.Identifier(f"{table}_meta")
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE (namespace, id)").format(
            t, sql.Identifier(f"{table}_ns_id_key")
        )
    )


def make_version(dsn: str, table: str, version: int) -> None:
    """Turn a version 7 table into what an older (or newer) trio-recall left."""
    meta = sql.Identifier(f"{table}_meta")
    terms = sql.Identifier(f"{table}_terms")
    with psycopg.connect(dsn) as conn:
        if version <= 6:
            _version_6(conn, table)
        if version <= 5:
            # Version 5 had no time, conversation, position nor index text (dropping a
            # column drops its indexes), and no T_conv.
            conn.execute(
                sql.SQL(
                    "ALTER TABLE {} DROP COLUMN occurred_at, DROP COLUMN conversation, "
                    "DROP COLUMN position, DROP COLUMN index_text"
                ).format(sql.Identifier(table))
            )
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(f"{table}_conv")))
        if version <= 4:
            _version_4_postings_and_metadata(conn, table)
        if version <= 3:
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME COLUMN live_entries TO entries").format(meta)
            )
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(f"{table}_ns")))
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(f"{table}_terms_idx")))
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN doc_len").format(terms))
            conn.execute(
                sql.SQL("CREATE INDEX {} ON {} (namespace, term) INCLUDE (seq, tf)").format(
                    sql.Identifier(f"{table}_terms_idx"), terms
                )
            )
        if version == 2:
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN keyword_index").format(meta))
            conn.execute(
                sql.SQL("ALTER TABLE {} RESET (toast_tuple_target)").format(sql.Identifier(table))
            )
        conn.execute(sql.SQL("UPDATE {} SET schema_version = %s").format(meta), (version,))
