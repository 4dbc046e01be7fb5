"""The PostgreSQL side of the pg store: names, schema, and every SQL statement it runs.

Each store is three objects named after its table ``T``:

- ``T``: one row per live entry (see :data:`SCHEMA_VERSION` for the columns);
- ``T_meta``: one row, the table's version record and its counters. Its row lock is what
  serializes writers across processes, and it keeps the usage counters, so that they are
  in the database and every process sees one cap;
- ``T_seq``: the sequence that numbers entries, monotonic across processes.

Every value goes to the server as a bound parameter. Only names (validated, quoted with
:class:`psycopg.sql.Identifier`) and the vector width (an int) are composed into SQL.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from protocol import ConfigError, JsonError

__all__ = [
    "MAX_DIMENSIONS",
    "SCHEMA_VERSION",
    "Names",
    "check_pg_text",
    "check_pg_json",
    "ensure_schema",
    "search_text",
    "vector_literal",
]

SCHEMA_VERSION = 1
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
        # nextval() takes a regclass: the quoted name travels as a bound text parameter.
        self.seq_regclass = f'"{table}_seq"'
        self.meta_regclass = f'"{table}_meta"'
        self.table_regclass = f'"{table}"'


def check_pg_text(what: str, value: str) -> str:
    """Refuse a name that PostgreSQL's ``text`` cannot hold: a NUL or a lone surrogate."""
    if "\x00" in value:
        raise ConfigError(f"{what} {value!r:.60} holds a NUL character; PostgreSQL text cannot")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(
            f"{what} {value!r:.60} is not valid UTF-8 ({error.reason}); PostgreSQL text "
            "takes UTF-8 only"
        ) from None
    return value


def check_pg_json(value: Any, what: str = "metadata") -> None:
    """Refuse strings that ``jsonb`` cannot hold (NUL, lone surrogates) anywhere in a
    JSON value that :func:`protocol._json.check_json` has already accepted."""
    if isinstance(value, str):
        if "\x00" in value:
            raise JsonError(f"{what} holds a NUL character; PostgreSQL jsonb cannot store it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonError(
                f"{what} holds a string that is not valid UTF-8 (a lone surrogate); "
                "PostgreSQL jsonb cannot store it"
            ) from None
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_pg_json(item, f"{what}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_pg_json(key, f"{what} key {key!r:.40}")
            check_pg_json(item, f"{what}[{key!r:.40}]")


def search_text(text: str) -> str:
    """The ``text`` column's copy of a projection: NULs and lone surrogates become U+FFFD.

    The column is for search (phase 2: BM25, documents); the exact message is kept as
    msgpack in ``message``.
    """
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def vector_literal(row: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a float32 row, exactly.

    ``repr`` of each float32 (as a float64) is the shortest string that reads back as
    that float64, which is the float32 value itself, so pgvector's ``strtof`` stores the
    very same bits.
    """
    return "[" + ",".join(map(repr, row.tolist())) + "]"


# --- schema ----------------------------------------------------------------------------------


def _ddl(names: Names, dimensions: int) -> list[sql.Composed]:
    return [
        sql.SQL(
            "CREATE TABLE {meta} ("
            " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
            " schema_version integer NOT NULL,"
            " dimensions integer NOT NULL,"
            " max_entries bigint NOT NULL,"
            # Phase 2: the embedding profile a table is bound to; NULL until then.
            " profile text,"
            " entries bigint NOT NULL DEFAULT 0,"
            " evicted_entries bigint NOT NULL DEFAULT 0,"
            " zero_norm_entries bigint NOT NULL DEFAULT 0,"
            " version bigint NOT NULL DEFAULT 0,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        ).format(meta=names.meta),
        sql.SQL("CREATE SEQUENCE {seq} AS bigint MINVALUE 0 START 0").format(seq=names.seq),
        sql.SQL(
            "CREATE TABLE {table} ("
            " seq bigint PRIMARY KEY,"
            " id text NOT NULL UNIQUE,"
            " namespace text NOT NULL,"
            " source text NOT NULL,"
            " source_id text,"
            " text text NOT NULL,"
            " message bytea,"
            " metadata jsonb NOT NULL DEFAULT '{{}}',"
            " embedding vector({dimensions}) NOT NULL,"
            " zero_norm boolean NOT NULL)"
        ).format(table=names.table, dimensions=sql.Literal(dimensions)),
        sql.SQL("CREATE INDEX {index} ON {table} (namespace, seq)").format(
            index=names.index, table=names.table
        ),
    ]


def ensure_schema(
    conn: psycopg.Connection[Any], names: Names, dimensions: int, max_entries: int
) -> tuple[int, int, int, int]:
    """Create the store's schema on first open, or check the one that is there.

    Runs in one transaction under an advisory lock keyed on the table, so processes that
    open the same table at once do not race on ``CREATE``.

    Returns:
        The meta row's ``(entries, evicted_entries, zero_norm_entries, version)``.

    Raises:
        ConfigError: pgvector is missing and cannot be created; the table exists but is
            not a trio-recall store; or it was made with another schema version,
            dimensions or capacity.
    """
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('trio_recall:schema:' || %s))",
            (names.table_name,),
        )
        have_vector = conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
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
            for statement in _ddl(names, dimensions):
                conn.execute(statement)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {meta} (schema_version, dimensions, max_entries) "
                    "VALUES (%s, %s, %s)"
                ).format(meta=names.meta),
                (SCHEMA_VERSION, dimensions, max_entries),
            )
        meta = conn.execute(
            sql.SQL(
                "SELECT schema_version, dimensions, max_entries, entries, evicted_entries, "
                "zero_norm_entries, version FROM {meta}"
            ).format(meta=names.meta)
        ).fetchone()
    if meta is None:
        raise ConfigError(f"table {names.table_name}_meta is empty: it is not a trio-recall store")
    version, dims, cap, entries, evicted, zero, commits = (int(v) for v in meta)
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"table {names.table_name!r} has schema version {version}; this trio-recall "
            f"reads version {SCHEMA_VERSION}"
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
    return entries, evicted, zero, commits
