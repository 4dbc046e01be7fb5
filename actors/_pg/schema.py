"""The pg store's names, schema and value encodings: its tables' DDL, the schema check
and the text, jsonb and vector forms values take in SQL.

The statements live where they run: writes in ``sql.py``, reads in ``reads.py``, search
in ``search.py``, filters in ``filters.py``, and the connection set-up in ``store.py``;
the forms values take in SQL are in ``values.py`` (re-exported here).

Each store is seven objects named after its table ``T``:

- ``T``: one row per stored version of an entry, turn or document (schema 7:
  docs/pages/how-to/memory-over-time.md). A memory is ``(namespace, id)``; its versions
  1, 2, 3... share
  the id, and exactly one is *current* (``valid_to`` NULL): the unique index
  ``T_ns_id_cur`` on ``(namespace, id) WHERE valid_to IS NULL`` holds an id once among
  current rows, and every replace-by-id statement touches current rows only. Closed
  versions stay (history) until forgotten, deleted, evicted or expired.
  ``valid_from`` is when the version became valid (NULL: its ``occurred_at``, which it
  is for every row a version 6 table had, so the migration rewrites no row; every
  version 7 write sets it), ``valid_to`` when it stopped (NULL: current), ``version``
  its number from 1, ``supersedes`` the number it replaced (NULL for version 1), and
  ``expires_at`` when it stops being visible (NULL: never). A read sees what
  ``filters.Visibility`` says: ``valid_to IS NULL AND (expires_at IS NULL OR
  expires_at > now)`` by default, ``coalesce(valid_from, occurred_at) <= as_of <
  coalesce(valid_to, infinity)`` and unexpired with ``as_of``; ``now`` is the store
  clock's, a bound parameter (the server's clock is never read). The indexes of
  version 7: ``(namespace, id, version)`` (``history``, ``as_of`` by id, forget and
  delete by id, every version), ``(expires_at) WHERE expires_at IS NOT NULL`` (each
  write's reclaim of at most 256 expired rows, and the unscoped count of expired
  current rows), ``(namespace, expires_at) INCLUDE (doc_len) WHERE valid_to IS NULL
  AND expires_at IS NOT NULL`` (a namespace's expired current rows, which BM25's N and
  length leave out), and ``(namespace, md5(text)) WHERE valid_to IS NULL``
  (``dedupe="exact"``: the candidates with the same text, compared exactly after).
  The two on ``expires_at`` are empty, and cost a write nothing, while nothing expires.
  ``text`` is the searchable copy of the entry's text
  (NUL and lone surrogates replaced); ``exact_text`` keeps the exact text, only where it
  differs. ``metadata`` is the jsonb that filters read, with top-level floats written as
  their exact decimal value (so that numbers compare exactly, as in Python) and each
  string (keys included) in :func:`jsonb_string`'s form, which jsonb can hold and which
  keeps equality and code point order (a NUL or a lone surrogate is escaped);
  ``meta_raw`` is the exact metadata as msgpack (``protocol._surrogates.pack``), which
  is what reads return.
  ``index_text`` is the searchable copy of the index text the store derived for the
  entry (``actors._store.index_text.derived_index_texts``: its own text, date and predecessor
  in its conversation), or NULL when it is indexed by ``text``; BM25's postings and
  ``doc_len`` are of the index text, and reads never return it.
  ``doc_len`` is the BM25 length of the text;
  ``occurred_at`` is when the entry happened (the write time unless its writer said),
  indexed with its namespace for ``since``/``until`` (:func:`actors._pg.filters.and_time_window`);
  ``conversation`` and ``position`` (NULL for an entry without a conversation) are its
  conversation and its place there, 1, 2, 3... in commit order, indexed on
  ``(namespace, conversation, position)``;
- ``T_terms``: the BM25 postings of the current entries that never expire, one row per
  (entry, distinct term), with the term frequency and the entry's ``doc_len`` (so that
  BM25 reads the postings' index alone, never the entries); every statement that
  deletes entries deletes their postings too (no foreign key: its per-row check cost
  half of a bulk write; tables made before this keep theirs, ``ON DELETE CASCADE``,
  which is then a no-op);
- ``T_xterms`` (schema 7): the same for every other entry, closed or expiring, with
  its entry's ``valid_to`` and ``expires_at``, indexed on ``(namespace, term) INCLUDE
  (seq, tf, doc_len, valid_to, expires_at)``. A write puts an expiring entry's
  postings here; an update moves the closed version's here (or sets their
  ``valid_to``). So a current read takes ``T_terms`` whole and the visible rows of
  ``T_xterms``, each through its index alone: while nothing in a namespace is closed or
  expires, BM25 reads what it read before version 7 plus one empty index probe per
  term, and never the entries. (Chosen over copying the two columns onto every
  posting, which would make each posting's index tuple 8 bytes wider, or a count of
  hidden rows per namespace, which would send a namespace to the slow path, a join
  with the entries, for good after its first update; and it needs no rebuild of the
  postings' index on migration.) A read ``as_of`` an instant takes both tables whole
  and joins the entries for their validity;
- ``T_ns``: one row per namespace that holds current entries, with how many and their
  total ``doc_len``: BM25's N and average length, and a scoped read's count, without
  counting the namespace's entries (130 ms a read at 1M entries), less its current
  entries that have expired but are not reclaimed yet (an index probe, empty while
  none has). Every statement that inserts, closes or deletes entries keeps it in the
  same transaction, and a namespace's row goes with its last current entry;
- ``T_meta``: one row, the table's version record and its counters (``live_entries``
  counts every row, closed versions too, as ``usage().entries`` does;
  ``closed_entries`` those closed, so that an unscoped read's count is the current
  ones). Its row lock is what
  serializes writers across processes, and it keeps the usage counters, so that they are
  in the database and every process sees one cap. ``keyword_index`` says whether writes
  fill ``T_terms`` (see :func:`ensure_schema`): each write reads it under that lock, so a
  batch never half fills the postings whatever another process switched;
- ``T_seq``: the sequence that numbers entries, monotonic across processes;
- ``T_conv``: one row per (namespace, conversation) ever written, with the last
  position given there. Writers draw positions from it under the meta row's lock, in
  the write's transaction, so a position is never given twice, even after its entry
  is deleted, evicted or replaced (an upsert gets a new one); rows are never deleted
  (``clear`` keeps them too), so a conversation that comes back goes on counting.

Every value goes to the server as a bound parameter. Only names (validated, quoted with
:class:`psycopg.sql.Identifier`) and the vector width (an int) are composed into SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs
import msgspec
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from protocol import ConfigError, EmbeddingProfile, StoreUnavailable
from protocol.checks import unpack_metadata

from .._embedding.protocols import precision_hint
from .._retrieval.bm25 import MAX_TERM_BYTES, term_counts
from .values import check_pg_text as check_pg_text
from .values import exact_text as exact_text
from .values import filter_json as filter_json
from .values import jsonb_binary as jsonb_binary
from .values import jsonb_string as jsonb_string
from .values import search_text as search_text
from .values import vector_binary as vector_binary
from .values import vector_literal as vector_literal

__all__ = [
    "MAX_DIMENSIONS",
    "SCHEMA_VERSION",
    "Names",
    "Opened",
    "bound_profile",
    "exact_text",
    "filter_json",
    "jsonb_binary",
    "jsonb_string",
    "profile_json",
    "check_pg_text",
    "ensure_schema",
    "search_text",
    "vector_binary",
    "vector_literal",
]

SCHEMA_VERSION = 7
# Older versions migrated in place when opened, each to the next (see _migrate):
# version 2 (before keyword_index) gains that column and the entries' row options;
# version 3 (before T_ns and the postings' doc_len) gains both; version 4 (before
# long terms were digests and metadata strings escaped) is rewritten where it differs;
# version 5 (before time and conversations) gains their columns, indexes and T_conv;
# version 6 (before versions and expiry) gains their columns, indexes and T_xterms.
_MIGRATES_FROM = (2, 3, 4, 5, 6)
# A row stays whole in its page up to 8,160 bytes (PostgreSQL's limit for this option)
# instead of 2,032: with the default, a 384-float row with a text of about 165 bytes or
# more (a turn's text is there twice: the text and the message) has its vector moved
# out of line, to TOAST, which an exact scan then reads and detoasts row by row. With
# 350-byte texts, at 50k rows, this option made the rows' COPY 1.66x faster and the exact
# read 2.2x faster (benches/README.md, "pg at scale"). Longer rows are still TOASTed.
_ROW_OPTIONS = "toast_tuple_target = 8160"
# pgvector's ``vector`` type holds at most 16,000 dimensions.
MAX_DIMENSIONS = 16000
# 63 bytes is PostgreSQL's identifier limit; the longest derived name adds "_ns_seq_idx".
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,51}")


class Names:
    """The quoted names of one store's table, meta table, sequence and index."""

    def __init__(self, table: object) -> None:
        if not isinstance(table, str) or not _TABLE.fullmatch(table):
            raise ConfigError(
                f"table is {table!r}; expected a lowercase SQL identifier of 1 to 52 "
                "characters: a letter or '_', then letters, digits or '_'"
            )
        self.table_name = table
        self.table = sql.Identifier(table)
        self.meta = sql.Identifier(f"{table}_meta")
        self.seq = sql.Identifier(f"{table}_seq")
        self.index = sql.Identifier(f"{table}_ns_seq_idx")
        self.terms = sql.Identifier(f"{table}_terms")
        self.terms_index = sql.Identifier(f"{table}_terms_idx")
        self.namespaces_name = f"{table}_ns"
        self.namespaces = sql.Identifier(self.namespaces_name)
        self.conversations_name = f"{table}_conv"
        self.conversations = sql.Identifier(self.conversations_name)
        self.time_index = sql.Identifier(f"{table}_ns_t_idx")
        self.conversation_index = sql.Identifier(f"{table}_ns_cp_idx")
        self.terms_name = f"{table}_terms"
        self.seq_name = f"{table}_seq"
        # Version 6's UNIQUE (namespace, id), which version 7 drops (see _migrate_6_to_7).
        self.unique = sql.Identifier(f"{table}_ns_id_key")
        self.current_index = sql.Identifier(f"{table}_ns_id_cur")
        self.history_index = sql.Identifier(f"{table}_ns_idv_idx")
        self.expiry_index = sql.Identifier(f"{table}_exp_idx")
        self.expiring_index = sql.Identifier(f"{table}_ns_exp_idx")
        self.text_index = sql.Identifier(f"{table}_ns_md5_idx")
        self.xterms_name = f"{table}_xterms"
        self.xterms = sql.Identifier(self.xterms_name)
        self.xterms_index = sql.Identifier(f"{table}_xterms_idx")
        self.hnsw = sql.Identifier(f"{table}_hnsw_idx")
        # nextval() takes a regclass: the quoted name travels as a bound text parameter.
        self.seq_regclass = f'"{table}_seq"'
        self.meta_regclass = f'"{table}_meta"'
        self.table_regclass = f'"{table}"'


def profile_json(profile: object) -> str | None:
    """The part of an embedding profile that a table is bound to, as canonical JSON, or
    None when the embedder has no profile.

    It is what changes the vectors: the provider, the model, the dimensions and the
    options. The batch size and the input limit may change between opens.
    """
    if not isinstance(profile, EmbeddingProfile):
        return None
    return msgspec.json.encode(
        {
            "provider": profile.provider,
            "model": profile.model,
            "dimensions": profile.dimensions,
            "options": dict(sorted(profile.options.items())),
        }
    ).decode("utf-8")


# --- schema ----------------------------------------------------------------------------------


def _ddl(names: Names, dimensions: int) -> list[sql.Composed]:
    return [
        sql.SQL(
            "CREATE TABLE {meta} ("
            " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
            " schema_version integer NOT NULL,"
            " dimensions integer NOT NULL,"
            " max_entries bigint NOT NULL,"
            # The embedding profile the table is bound to (see profile_json), or NULL.
            " profile text,"
            # Named live_entries from version 4 on (see _migrate).
            " live_entries bigint NOT NULL DEFAULT 0,"
            " evicted_entries bigint NOT NULL DEFAULT 0,"
            " zero_norm_entries bigint NOT NULL DEFAULT 0,"
            " version bigint NOT NULL DEFAULT 0,"
            # Of live_entries, the closed versions (schema 7).
            " closed_entries bigint NOT NULL DEFAULT 0,"
            " created_at timestamptz NOT NULL DEFAULT now(),"
            # Whether writes fill the BM25 postings (``T_terms``); see ensure_schema.
            " keyword_index boolean NOT NULL DEFAULT true)"
        ).format(meta=names.meta),
        sql.SQL("CREATE SEQUENCE {seq} AS bigint MINVALUE 0 START 0").format(seq=names.seq),
        sql.SQL(
            "CREATE TABLE {table} ("
            " seq bigint PRIMARY KEY,"
            " id text NOT NULL,"
            " namespace text NOT NULL,"
            " source text NOT NULL,"
            " source_id text,"
            " text text NOT NULL,"
            " exact_text bytea,"
            " message bytea,"
            " metadata jsonb NOT NULL DEFAULT '{{}}',"
            " meta_raw bytea,"
            " doc_len integer NOT NULL DEFAULT 0,"
            " embedding vector({dimensions}) NOT NULL,"
            " zero_norm boolean NOT NULL," + _ENTRY_COLUMNS_6 + "," + _ENTRY_COLUMNS_7 + ") "
            "WITH (" + _ROW_OPTIONS + ")"
        ).format(table=names.table, dimensions=sql.Literal(dimensions)),
        sql.SQL("CREATE INDEX {index} ON {table} (namespace, seq) INCLUDE (doc_len)").format(
            index=names.index, table=names.table
        ),
        sql.SQL(
            "CREATE TABLE {terms} ("
            " seq bigint NOT NULL,"
            " term text NOT NULL,"
            " namespace text NOT NULL,"
            " tf integer NOT NULL,"
            " doc_len integer NOT NULL)"
        ).format(terms=names.terms, table=names.table),
        *_postings_keys(names),
        _namespaces_ddl(names),
        *_time_ddl(names),
        *_versions_ddl(names),
    ]


# The entries' columns of version 6, in the order a new table has them.
_ENTRY_COLUMNS_6 = (
    " occurred_at timestamptz NOT NULL, conversation text, position bigint, index_text text"
)


# The entries' columns that version 7 added, in the order a new table has them.
_ENTRY_COLUMNS_7 = (
    " valid_from timestamptz, valid_to timestamptz, version integer NOT NULL DEFAULT 1,"
    " supersedes integer, expires_at timestamptz"
)


def _versions_ddl(names: Names) -> list[sql.Composed]:
    """Version 7's indexes and ``T_xterms`` (see the module docstring)."""
    f = {"table": names.table}
    return [
        sql.SQL(
            "CREATE UNIQUE INDEX {index} ON {table} (namespace, id) WHERE valid_to IS NULL"
        ).format(index=names.current_index, **f),
        sql.SQL("CREATE INDEX {index} ON {table} (namespace, id, version)").format(
            index=names.history_index, **f
        ),
        sql.SQL(
            "CREATE INDEX {index} ON {table} (expires_at) WHERE expires_at IS NOT NULL"
        ).format(index=names.expiry_index, **f),
        sql.SQL(
            "CREATE INDEX {index} ON {table} (namespace, expires_at) INCLUDE (doc_len) "
            "WHERE valid_to IS NULL AND expires_at IS NOT NULL"
        ).format(index=names.expiring_index, **f),
        sql.SQL(
            "CREATE INDEX {index} ON {table} (namespace, md5(text)) WHERE valid_to IS NULL"
        ).format(index=names.text_index, **f),
        sql.SQL(
            "CREATE TABLE {xterms} ("
            " seq bigint NOT NULL,"
            " term text NOT NULL,"
            " namespace text NOT NULL,"
            " tf integer NOT NULL,"
            " doc_len integer NOT NULL,"
            " valid_to timestamptz,"
            " expires_at timestamptz,"
            " PRIMARY KEY (seq, term))"
        ).format(xterms=names.xterms),
        sql.SQL(
            "CREATE INDEX {index} ON {xterms} (namespace, term) "
            "INCLUDE (seq, tf, doc_len, valid_to, expires_at)"
        ).format(index=names.xterms_index, xterms=names.xterms),
    ]


def _time_ddl(names: Names) -> list[sql.Composed]:
    """Version 6's indexes and ``T_conv`` (see the module docstring)."""
    return [
        sql.SQL("CREATE INDEX {index} ON {table} (namespace, occurred_at)").format(
            index=names.time_index, table=names.table
        ),
        sql.SQL(
            "CREATE INDEX {index} ON {table} (namespace, conversation, position) "
            "WHERE conversation IS NOT NULL"
        ).format(index=names.conversation_index, table=names.table),
        sql.SQL(
            "CREATE TABLE {conv} ("
            " namespace text NOT NULL,"
            " conversation text NOT NULL,"
            " last_position bigint NOT NULL,"
            " PRIMARY KEY (namespace, conversation))"
        ).format(conv=names.conversations),
    ]


def _namespaces_ddl(names: Names) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE {ns} ("
        " namespace text PRIMARY KEY,"
        " entries bigint NOT NULL,"
        " total_len bigint NOT NULL)"
    ).format(ns=names.namespaces)


def _postings_keys(names: Names) -> list[sql.Composed]:
    """The postings' key and index: BM25 reads a term's postings (with their entries'
    lengths) through the index alone; deletes find an entry's through the key."""
    return [
        sql.SQL("ALTER TABLE {terms} ADD PRIMARY KEY (seq, term)").format(terms=names.terms),
        sql.SQL(
            "CREATE INDEX {index} ON {terms} (namespace, term) INCLUDE (seq, tf, doc_len)"
        ).format(index=names.terms_index, terms=names.terms),
    ]


@attrs.frozen
class Opened:
    """What :func:`ensure_schema` found: the meta row's counters ``(entries,
    evicted_entries, zero_norm_entries, version)``, the profile the table is bound to
    (as :func:`profile_json` wrote it, or None), and whether it keeps a keyword index."""

    counts: tuple[int, int, int, int]
    profile: str | None
    keyword_index: bool


def ensure_schema(
    conn: psycopg.Connection[TupleRow],
    names: Names,
    dimensions: int,
    max_entries: int,
    *,
    profile: str | None = None,
    hnsw: bool = False,
    keyword_index: bool | None = None,
) -> Opened:
    """Create the store's schema on first open, or check the one that is there.

    Runs in one transaction under an advisory lock keyed on the table, so processes that
    open the same table at once do not race on ``CREATE``.

    A table is bound to the first embedding profile it is opened with (``profile``, from
    :func:`profile_json`); an embedder without a profile neither binds nor is checked.
    ``hnsw`` adds the approximate index if it is missing; it never removes one (exact
    reads do not use it).

    ``keyword_index`` is the table's BM25 postings (what ``bm25`` and ``hybrid`` search
    read): None keeps the table's setting (a new table has one); True builds the
    postings of every entry already there if the table had none; False empties them and
    stops writes from filling them. Either change takes the meta row's lock, so it waits
    for a write in flight, and every later write, from any process, follows it.

    Older tables are migrated in place, in this same transaction (:func:`_migrate`):
    version 2 (made before ``keyword_index``) to 3, then 3 to 4, 4 to 5, 5 to 6 and 6
    to 7.

    Raises:
        ConfigError: pgvector is missing and cannot be created; the table exists but is
            not a trio-recall store; or it was made with another schema version that is
            not migrated, dimensions, capacity or embedding profile.
    """
    with conn.transaction():
        # Each step reads what the one before it (or another process) committed.
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        _schema_lock(conn, names)
        _ensure_pgvector(conn)
        _create_if_missing(conn, names, dimensions, max_entries, profile, keyword_index)
        built = _migrate(conn, names)
        version, dims, cap, entries, evicted, zero, commits, bound, kept = _read_meta(conn, names)
        _check_meta(names, version, dims, cap, bound, dimensions, max_entries, profile)
        if bound is None and profile is not None:
            conn.execute(
                sql.SQL("UPDATE {meta} SET profile = %s").format(meta=names.meta), (profile,)
            )
        if keyword_index is not None and keyword_index != kept:
            _switch_keyword_index(conn, names, keyword_index)
            kept = keyword_index
            built = keyword_index
        if hnsw:
            conn.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {index} ON {table} "
                    "USING hnsw (embedding vector_ip_ops)"
                ).format(index=names.hnsw, table=names.table)
            )
    if built and conn.autocommit:
        # Freshly built postings are not yet marked all-visible, so BM25's index-only
        # scans would visit the table's pages too until autovacuum came by (at 100k
        # entries, 103 ms a 3-word query against 48 ms), and the planner would have no
        # statistics for them. Outside the transaction: VACUUM cannot run in one; and
        # without the session's statement timeout (at 1M entries, 15M postings), which
        # is set back after.
        timeout = conn.execute("SHOW statement_timeout").fetchone()
        conn.execute("SET statement_timeout = 0")
        try:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {terms}").format(terms=names.terms))
        finally:
            if timeout is not None:
                conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout[0],))
    return Opened((entries, evicted, zero, commits), profile if bound is None else bound, kept)


def _schema_lock(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    """Take the table's schema lock; another process may hold it for a migration or a
    keyword index build (about 80 s at 1M entries), which the session's statement
    timeout bounds: past it, say so instead of failing as an unreachable server."""
    try:
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('trio_recall:schema:' || %s))",
                (names.table_name,),
            )
    except psycopg.errors.QueryCanceled:
        timeout = conn.execute("SHOW statement_timeout").fetchone()
        raise StoreUnavailable(
            f"table {names.table_name!r} is being set up by another process (a schema "
            "migration or a keyword index build holds its schema lock; at 1M entries "
            f"either takes about 80 s), longer than the statement timeout "
            f"({timeout[0] if timeout else '?'}); open it again once that is done, or "
            "with a longer statement_timeout"
        ) from None


def _refuse_taken_names(
    conn: psycopg.Connection[TupleRow], names: Names, wanted: list[str]
) -> None:
    """Refuse to create relations whose names another object already has (a store
    named ``<table>_ns`` or ``<table>_terms`` has an entries table of that name)."""
    for name in wanted:
        row = conn.execute("SELECT to_regclass(%s)", (f'"{name}"',)).fetchone()
        if row is not None and row[0] is not None:
            raise ConfigError(
                f"table {names.table_name!r} needs the name {name!r} for its own use, "
                f"but a relation {name!r} already exists (another store's table?); "
                "pick another table name, or rename that relation"
            )


def _migrate(conn: psycopg.Connection[TupleRow], names: Names) -> bool:
    """Bring an older table to :data:`SCHEMA_VERSION` in the caller's transaction, one
    version at a time; any other version is left for :func:`_check_meta` to refuse.

    - 2 to 3: the meta table gains ``keyword_index`` (true), the entries table its row
      options;
    - 3 to 4: ``T_ns`` is made from the entries, and the postings gain ``doc_len``:
      they are emptied, then rebuilt from the texts if the table keeps a keyword index
      (about 80 s at 1M entries), with the wider index. The meta row's ``entries``
      becomes ``live_entries``: every write and read of an older trio-recall names it,
      so a process still running one on the table fails loudly at its next call rather
      than write without keeping ``T_ns`` (this version's writers check the schema
      version under the write lock instead, so later migrations need no such rename);
    - 4 to 5: see :func:`_migrate_4_to_5`;
    - 5 to 6: see :func:`_migrate_5_to_6`;
    - 6 to 7: see :func:`_migrate_6_to_7`.

    Returns whether it filled the postings.
    """
    row = conn.execute(
        sql.SQL("SELECT schema_version FROM {meta}").format(meta=names.meta)
    ).fetchone()
    if row is None or int(row[0]) not in _MIGRATES_FROM:
        return False
    version = int(row[0])
    # The meta row's lock first: no write of this version runs meanwhile.
    conn.execute(sql.SQL("SELECT 1 FROM {meta} FOR UPDATE").format(meta=names.meta))
    conn.execute("SET LOCAL statement_timeout = 0")
    built = version < 4 and _migrate_to_4(conn, names, version)
    if version < 5:
        _migrate_4_to_5(conn, names)
    if version < 6:
        _migrate_5_to_6(conn, names)
    _migrate_6_to_7(conn, names)
    conn.execute(
        sql.SQL("UPDATE {meta} SET schema_version = %s").format(meta=names.meta),
        (SCHEMA_VERSION,),
    )
    return built


def _migrate_to_4(conn: psycopg.Connection[TupleRow], names: Names, version: int) -> bool:
    """Versions 2 and 3 to 4 (see :func:`_migrate`), under the meta row's lock; returns
    whether it filled the postings."""
    if version == 2:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {meta} ADD COLUMN IF NOT EXISTS keyword_index boolean NOT NULL "
                "DEFAULT true"
            ).format(meta=names.meta)
        )
        # Rows written from now on stay whole; older ones stay as they are until
        # rewritten (VACUUM FULL of the table rewrites them all).
        conn.execute(
            sql.SQL("ALTER TABLE {table} SET (" + _ROW_OPTIONS + ")").format(table=names.table)
        )
    # 3 to 4.
    kept = conn.execute(sql.SQL("SELECT keyword_index FROM {meta}").format(meta=names.meta))
    keyword_index = bool(kept.fetchone() == (True,))
    _refuse_taken_names(conn, names, [names.namespaces_name])
    conn.execute(
        sql.SQL("ALTER TABLE {meta} RENAME COLUMN entries TO live_entries").format(meta=names.meta)
    )
    conn.execute(_namespaces_ddl(names))
    conn.execute(
        sql.SQL(
            "INSERT INTO {ns} (namespace, entries, total_len) "
            "SELECT namespace, count(*), sum(doc_len) FROM {table} GROUP BY namespace"
        ).format(ns=names.namespaces, table=names.table)
    )
    _drop_postings_keys(conn, names)
    conn.execute(sql.SQL("TRUNCATE {terms}").format(terms=names.terms))
    conn.execute(
        sql.SQL("ALTER TABLE {terms} ADD COLUMN doc_len integer NOT NULL").format(
            terms=names.terms
        )
    )
    if keyword_index:
        _fill_postings(conn, names, indexed="text")  # no index_text before version 6
    for statement in _postings_keys(names):
        conn.execute(statement)
    return keyword_index


def _migrate_4_to_5(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    """Version 4 to 5, under the meta row's lock: rewrite what version 5 writes
    otherwise, and nothing else (one scan of the postings and one of the metadata).

    - A posting whose term is longer than ``MAX_TERM_BYTES`` (a version 4 table kept
      terms of up to about 2,700 bytes, the btree's limit) gets the term's digest,
      computed in SQL exactly as ``actors._retrieval.bm25.index_term`` computes it, so reads
      find it by the same mapping as new postings. Term frequencies and lengths are
      unchanged: a term and its digest count alike.
    - The jsonb metadata of an entry whose exact metadata holds a str that
      :func:`jsonb_string` escapes is rewritten from ``meta_raw``. Version 4 wrote a
      NUL or a lone surrogate as U+FFFD (so filters could not tell them apart, nor
      find them), and U+0001 and U+D7FF as themselves: such an entry's jsonb text holds
      U+FFFD, the escape ``\u0001`` or U+D7FF, which is what is looked for.
    """
    conn.execute(
        sql.SQL(
            "UPDATE {terms} SET term = '#' || left(encode(sha256(convert_to(term, 'UTF8')), "
            "'hex'), 32) WHERE octet_length(term) > %s"
        ).format(terms=names.terms),
        (MAX_TERM_BYTES,),
    )
    rows = conn.execute(
        sql.SQL(
            "SELECT seq, meta_raw FROM {table} WHERE meta_raw IS NOT NULL AND "
            "(strpos(metadata::text, %s) > 0 OR strpos(metadata::text, %s) > 0 "
            "OR strpos(metadata::text, %s) > 0)"
        ).format(table=names.table),
        ("\ufffd", "\\u0001", "\ud7ff"),
    ).fetchall()
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("UPDATE {table} SET metadata = %s::jsonb WHERE seq = %s").format(
                table=names.table
            ),
            [(filter_json(unpack_metadata(bytes(raw))), seq) for seq, raw in rows],
        )


def _migrate_5_to_6(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    """Version 5 to 6, under the meta row's lock: the entries gain ``occurred_at``,
    ``conversation``, ``position`` and ``index_text``, with their two indexes, and
    ``T_conv`` is made.

    Every entry already there gets the time of the migration (its transaction's start)
    as its ``occurred_at``: version 5 kept no time per entry, and that is the last
    moment it is known to have been written by (``SELECT created_at FROM T_meta`` keeps
    the table's creation time, the earliest). They have no conversation, no position
    and no index text of their own, so their postings and vectors stand. Adding the
    columns rewrites no row (the time is stored once, as the column's default, which
    is then dropped: every write gives one); building the two indexes reads the table
    once each.
    """
    _refuse_taken_names(conn, names, [names.conversations_name])
    conn.execute(
        sql.SQL(
            "ALTER TABLE {table} ADD COLUMN occurred_at timestamptz NOT NULL DEFAULT now(), "
            "ADD COLUMN conversation text, ADD COLUMN position bigint, "
            "ADD COLUMN index_text text"
        ).format(table=names.table)
    )
    conn.execute(
        sql.SQL("ALTER TABLE {table} ALTER COLUMN occurred_at DROP DEFAULT").format(
            table=names.table
        )
    )
    for statement in _time_ddl(names):
        conn.execute(statement)


def _migrate_6_to_7(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    """Version 6 to 7, under the meta row's lock: the entries gain ``valid_from``,
    ``valid_to``, ``version``, ``supersedes`` and ``expires_at``, ``UNIQUE (namespace,
    id)`` becomes a unique index over current rows, with the versions' other indexes,
    and ``T_xterms`` is made (empty).

    No row is rewritten: every entry already there is the current version 1 of its
    memory, which is what the new columns' defaults say (``valid_from`` NULL: its
    ``occurred_at``; ``version`` 1, stored once as the column's default; the others
    NULL). Its postings stay in ``T_terms`` (it never expires). Rewriting the rows
    (say, to copy ``occurred_at`` into ``valid_from``) would write every row again,
    vectors and TOAST included, and every index entry with it, an HNSW index's too.
    The new indexes are built from one read of the table each; ``T_ns`` counts stand
    (every entry is current).
    """
    _refuse_taken_names(conn, names, [names.xterms_name])
    conn.execute(
        sql.SQL("ALTER TABLE {meta} ADD COLUMN closed_entries bigint NOT NULL DEFAULT 0").format(
            meta=names.meta
        )
    )
    conn.execute(
        sql.SQL(
            "ALTER TABLE {table} ADD COLUMN valid_from timestamptz, "
            "ADD COLUMN valid_to timestamptz, ADD COLUMN version integer NOT NULL DEFAULT 1, "
            "ADD COLUMN supersedes integer, ADD COLUMN expires_at timestamptz"
        ).format(table=names.table)
    )
    # Version 6's unique constraint: a memory's closed versions share its id.
    conn.execute(
        sql.SQL("ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {unique}").format(
            table=names.table, unique=names.unique
        )
    )
    for statement in _versions_ddl(names):
        conn.execute(statement)


# Entries read per round trip while the postings of a table are built.
_BACKFILL_ROWS = 5000


def _switch_keyword_index(conn: psycopg.Connection[TupleRow], names: Names, on: bool) -> None:
    """Turn a table's keyword index on (build every entry's postings) or off (empty
    them), under the meta row's lock, in the caller's transaction."""
    conn.execute(sql.SQL("SELECT 1 FROM {meta} FOR UPDATE").format(meta=names.meta))
    # Building the postings of a big table may take longer than one statement may.
    conn.execute("SET LOCAL statement_timeout = 0")
    conn.execute(
        sql.SQL("TRUNCATE {terms}, {xterms}").format(terms=names.terms, xterms=names.xterms)
    )
    if on:
        _build_postings(conn, names)
    conn.execute(sql.SQL("UPDATE {meta} SET keyword_index = %s").format(meta=names.meta), (on,))


def _build_postings(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    """Fill the (empty) postings from every entry's text, with their key and index
    dropped while they fill and built once at the end: several times faster than
    keeping them up to date posting by posting. The entries that are closed or expire
    (few) go to ``T_xterms``, with its index in place."""
    _drop_postings_keys(conn, names)
    _fill_postings(conn, names, where=_PLAIN)
    for statement in _postings_keys(names):
        conn.execute(statement)
    _fill_postings(conn, names, where=f"NOT ({_PLAIN})", xterms=True)


def _drop_postings_keys(conn: psycopg.Connection[TupleRow], names: Names) -> None:
    key = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
        (f'"{names.table_name}_terms"',),
    ).fetchone()
    if key is not None:
        conn.execute(
            sql.SQL("ALTER TABLE {terms} DROP CONSTRAINT {key}").format(
                terms=names.terms, key=sql.Identifier(str(key[0]))
            )
        )
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {index}").format(index=names.terms_index))


# The entries whose postings are in ``T_terms``: current, and never expiring.
_PLAIN = "valid_to IS NULL AND expires_at IS NULL"


def _fill_postings(
    conn: psycopg.Connection[TupleRow],
    names: Names,
    *,
    indexed: str = "coalesce(index_text, text)",
    where: str = "true",
    xterms: bool = False,
) -> None:
    """COPY the postings of the entries that pass ``where`` (an SQL condition), of what
    each is indexed by (``indexed``, an SQL expression: its index text, or else its
    text), into the empty ``T_terms``, or with ``xterms`` into ``T_xterms`` (with the
    entry's ``valid_to`` and ``expires_at``)."""
    if xterms:
        copy_postings = sql.SQL(
            "COPY {terms} (seq, term, namespace, tf, doc_len, valid_to, expires_at) "
            "FROM STDIN (FORMAT binary)"
        ).format(terms=names.xterms)
        columns, types = ", valid_to, expires_at", [20, 25, 25, 23, 23, 1184, 1184]
    else:
        copy_postings = sql.SQL(
            "COPY {terms} (seq, term, namespace, tf, doc_len) FROM STDIN (FORMAT binary)"
        ).format(terms=names.terms)
        columns, types = "", [20, 25, 25, 23, 23]
    with conn.cursor(name="trio_recall_backfill") as rows, conn.cursor() as cur:
        rows.execute(
            sql.SQL(
                "SELECT seq, namespace, " + indexed + ", doc_len" + columns + " FROM {table} "
                "WHERE " + where
            ).format(table=names.table)
        )
        while chunk := rows.fetchmany(_BACKFILL_ROWS):
            _, counts = term_counts([str(r[2]) for r in chunk])
            with cur.copy(copy_postings) as copy:
                copy.set_types(types)
                for row, terms in zip(chunk, counts, strict=True):
                    seq, namespace, _text, doc_len, *validity = row
                    for term, tf in terms.items():
                        copy.write_row((seq, term, namespace, tf, doc_len, *validity))


def _ensure_pgvector(conn: psycopg.Connection[TupleRow]) -> None:
    """Create the pgvector extension if it is missing and the role may."""
    have_vector = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if have_vector is None:
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as error:
            raise ConfigError(
                "the pgvector extension is not installed in this database and could "
                f"not be created ({type(error).__name__}: {error}); run CREATE EXTENSION "
                "vector as a superuser, or use a server that ships pgvector"
            ) from None


def _create_if_missing(
    conn: psycopg.Connection[TupleRow],
    names: Names,
    dimensions: int,
    max_entries: int,
    profile: str | None,
    keyword_index: bool | None,
) -> None:
    """Create the five objects and the meta row when the table has no meta table; refuse
    a table of that name that is not a trio-recall store, or a name another object
    already has."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
        (names.table_regclass, names.meta_regclass),
    ).fetchone()
    assert row is not None
    table_exists, meta_exists = bool(row[0]), bool(row[1])
    if table_exists and not meta_exists:
        raise ConfigError(
            f"table {names.table_name!r} exists but has no {names.table_name}_meta "
            "table: it is not a trio-recall store; pick another table name"
        )
    if not meta_exists:
        _refuse_taken_names(
            conn,
            names,
            [
                names.terms_name,
                names.namespaces_name,
                names.seq_name,
                names.conversations_name,
                names.xterms_name,
            ],
        )
        for statement in _ddl(names, dimensions):
            conn.execute(statement)
        conn.execute(
            sql.SQL(
                "INSERT INTO {meta} (schema_version, dimensions, max_entries, profile, "
                "keyword_index) VALUES (%s, %s, %s, %s, %s)"
            ).format(meta=names.meta),
            (SCHEMA_VERSION, dimensions, max_entries, profile, keyword_index is not False),
        )


def _read_meta(
    conn: psycopg.Connection[TupleRow], names: Names
) -> tuple[int, int, int, int, int, int, int, str | None, bool]:
    """The meta row: schema version, dimensions, capacity, the usage counters (entries,
    evicted, zero-norm), the commit version, the bound profile and the keyword index
    (true for a version this trio-recall does not read: the version check refuses it)."""
    meta = conn.execute(
        sql.SQL("SELECT to_jsonb(m) FROM {meta} m").format(meta=names.meta)
    ).fetchone()
    if meta is None:
        raise ConfigError(f"table {names.table_name}_meta is empty: it is not a trio-recall store")
    row: dict[str, object] = meta[0]
    version, dims, cap, entries, evicted, zero, commits = (
        _meta_int(names, row, key)
        for key in (
            "schema_version",
            "dimensions",
            "max_entries",
            "live_entries" if "live_entries" in row else "entries",
            "evicted_entries",
            "zero_norm_entries",
            "version",
        )
    )
    bound = row["profile"]
    if bound is not None and not isinstance(bound, str):
        raise ConfigError(
            f"table {names.table_name}_meta has the profile {bound!r:.60}; expected text or "
            "null: it is not a trio-recall store"
        )
    return (
        version,
        dims,
        cap,
        entries,
        evicted,
        zero,
        commits,
        bound,
        bool(row.get("keyword_index", True)),
    )


def bound_profile(text: str | None) -> EmbeddingProfile | None:
    """The :class:`EmbeddingProfile` that :func:`profile_json` wrote, or None."""
    if text is None:
        return None
    fields = msgspec.json.decode(text)
    return EmbeddingProfile(
        provider=fields["provider"],
        model=fields["model"],
        dimensions=fields["dimensions"],
        options=fields["options"],
    )


def _migrates() -> str:
    *rest, last = (str(v) for v in _MIGRATES_FROM)
    return f"{', '.join(rest)} and {last}" if rest else last


def _check_meta(
    names: Names,
    version: int,
    dims: int,
    cap: int,
    bound: str | None,
    dimensions: int,
    max_entries: int,
    profile: str | None,
) -> None:
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"table {names.table_name!r} has schema version {version}; this trio-recall "
            f"reads version {SCHEMA_VERSION} (and migrates {_migrates()}): it was made "
            "by a newer trio-recall, so open it with that one"
        )
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"table {names.table_name!r} has schema version {version}; this trio-recall "
            f"reads version {SCHEMA_VERSION} and migrates versions {_migrates()} in "
            f"place. Version {version} tables (before documents) are not migrated: "
            "export its entries, drop the table (and its _meta, _terms, _ns and _seq) "
            "or open another one"
        )
    if dims != dimensions:
        raise ConfigError(
            f"table {names.table_name!r} holds {dims}-float vectors; this store takes "
            f"{dimensions} (dimensions): open another table, or use the same dimensions"
        )
    if cap != max_entries:
        raise ConfigError(
            f"table {names.table_name!r} was made with max_entries={cap}; this config "
            f"has {max_entries}: every process that shares a table shares one cap"
        )
    if bound is not None and profile is not None and bound != profile:
        held, used = (
            msgspec.json.decode(text, type=dict[str, object]) for text in (bound, profile)
        )
        hint = ""
        if held.get("model") == used.get("model"):
            old, new = (p.get("options") for p in (held, used))
            if isinstance(old, dict) and isinstance(new, dict):
                hint = precision_hint(old, new)
        raise ConfigError(
            f"table {names.table_name!r} is bound to the embedding profile {bound}; this "
            f"embedder's profile is {profile}. Vectors from another model do not compare: "
            f"open another table, or use the same model{hint}"
        )


def _meta_int(names: Names, row: Mapping[str, object], key: str) -> int:
    value = row[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(
        f"table {names.table_name}_meta has {key} = {value!r:.60}; expected an integer: it "
        "is not a trio-recall store"
    )
