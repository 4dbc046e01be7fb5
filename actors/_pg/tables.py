"""What an existing store table was made with, read without opening a store.

:func:`~actors.open_pg_store` refuses a table made with other dimensions, another cap or
another embedding profile. A program that opens whatever table it is pointed at (the
``trio-recall`` command line does) first asks the table what it holds, then opens it
with that config and a matching embedder: :func:`read_pg_table`.
"""

from __future__ import annotations

from typing import final

import attrs
import psycopg
import trio
from psycopg import sql

from protocol import ConfigError, EmbeddingProfile, StoreUnavailable
from protocol.checks import check_int

from .schema import Names, bound_profile

__all__ = ["PgTableInfo", "read_pg_table"]


@final
@attrs.frozen
class PgTableInfo:
    """An existing store table's bounds and binding (its ``<table>_meta`` row).

    Attributes:
        table: the table's name.
        dimensions: the width of its vectors (``VectorStoreConfig.dimensions``).
        max_entries: its cap, shared by every process (``VectorStoreConfig.max_entries``).
        profile: the embedding profile the table is bound to, or None when it was made
            by an embedder without one.
    """

    table: str
    dimensions: int
    max_entries: int
    profile: EmbeddingProfile | None


async def read_pg_table(
    dsn: str, *, table: str = "trio_recall", connect_timeout: int = 10
) -> PgTableInfo | None:
    """The dimensions, cap and embedding profile of the store table ``table``, or None
    when the database has no such store table yet (the first ``open_pg_store`` makes
    it). Nothing is created or changed.

    The name is checked before anything connects. The read runs in a worker thread on a
    connection of its own; a cancelled call returns once that connection gives up
    (``connect_timeout`` bounds the wait for it).

    Args:
        dsn: a libpq connection string or URI.
        table: the table's name, as given to :func:`~actors.open_pg_store`.
        connect_timeout: seconds to wait for the connection (a whole number > 0).

    Raises:
        ConfigError: a bad table name, or a ``<table>_meta`` that is not a trio-recall
            store's.
        StoreUnavailable: the database could not be reached.
    """
    if not isinstance(dsn, str):
        raise ConfigError(f"dsn is a {type(dsn).__name__}; expected a connection string")
    names = Names(table)
    seconds = check_int("connect_timeout", connect_timeout)
    return await trio.to_thread.run_sync(_read, dsn, names, seconds)


def _read(dsn: str, names: Names, connect_timeout: int) -> PgTableInfo | None:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout) as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (names.meta_regclass,)).fetchone()
            if exists is None or exists[0] is None:
                return None
            row = conn.execute(
                sql.SQL("SELECT dimensions, max_entries, profile FROM {meta}").format(
                    meta=names.meta
                )
            ).fetchone()
    except psycopg.OperationalError as error:
        message = " ".join(str(error).split())
        raise StoreUnavailable(f"could not reach PostgreSQL: {message}") from error
    except psycopg.Error as error:
        message = " ".join(str(error).split())
        raise ConfigError(
            f"table {names.table_name}_meta is not a trio-recall store's: {message}"
        ) from error
    if row is None:
        return None
    return PgTableInfo(names.table_name, int(row[0]), int(row[1]), bound_profile(row[2]))
