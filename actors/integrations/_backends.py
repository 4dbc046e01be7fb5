"""Which trio-recall store an adapter opens: in memory, or on PostgreSQL with a DSN."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Self

from actors import AnyEmbedder, open_store
from protocol import ConfigError, VectorStoreConfig

from ._bridge import TrioBridge

__all__ = ["BridgedStore", "store_opener"]


class BridgedStore:
    """The lifecycle every adapter shares: its store behind ``self._bridge``."""

    _bridge: TrioBridge[Any]

    def close(self) -> None:
        """Close the store (see ``TrioBridge.close``): calls in flight raise
        ``trio.ClosedResourceError``, and so does every call afterwards. A store made by
        ``from_store`` stays open. Calling it again does nothing."""
        self._bridge.close()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the asyncio loop."""
        await self._bridge.aclose()

    @property
    def closed(self) -> bool:
        return self._bridge.closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def store_opener(
    dsn: str | None,
    config: VectorStoreConfig,
    embedder: AnyEmbedder,
    *,
    table: str,
    embed_timeout: float | None,
    pg_options: dict[str, Any] | None = None,
) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """A function opening the store (``open_store``, or ``open_pg_store`` on ``dsn``,
    with ``pg_options`` as more keyword arguments), for :meth:`TrioBridge.start` to enter
    in its trio thread.

    Raises:
        ConfigError: ``dsn`` is set but the ``pg`` extra (psycopg) is not installed, or
            ``pg_options`` is set without ``dsn``.
    """
    if dsn is None:
        if pg_options is not None:
            raise ConfigError("pg_options is set but dsn is None; pg_options are for pg only")
        return lambda: open_store(config, embedder, embed_timeout=embed_timeout)
    try:
        from .. import open_pg_store
    except ImportError as error:
        raise ConfigError(
            f"dsn is set but the pg extra is not installed ({error}); install "
            "trio-recall[pg] or leave dsn=None for an in-memory store"
        ) from None
    options = dict(pg_options or {})
    return lambda: open_pg_store(
        dsn, config, embedder, table=table, embed_timeout=embed_timeout, **options
    )
