"""Which trio-recall store an adapter opens: in memory, or on PostgreSQL with a DSN."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from actors import open_store
from protocol import ConfigError, VectorStoreConfig

__all__ = ["store_opener"]


def store_opener(
    dsn: str | None,
    config: VectorStoreConfig,
    embedder: object,
    *,
    table: str,
    embed_timeout: float | None,
) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """A function opening the store (``open_store``, or ``open_pg_store`` on ``dsn``),
    for :meth:`TrioBridge.start` to enter in its trio thread.

    Raises:
        ConfigError: ``dsn`` is set but the ``pg`` extra (psycopg) is not installed.
    """
    if dsn is None:
        return lambda: open_store(config, embedder, embed_timeout=embed_timeout)
    try:
        from .._pg.store import open_pg_store
    except ImportError as error:
        raise ConfigError(
            f"dsn is set but the pg extra is not installed ({error}); install "
            "trio-recall[pg] or leave dsn=None for an in-memory store"
        ) from None
    return lambda: open_pg_store(dsn, config, embedder, table=table, embed_timeout=embed_timeout)
