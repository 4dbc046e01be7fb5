"""Which trio-recall store an adapter opens: in memory, or on PostgreSQL with a DSN."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, Protocol, Self, TypedDict, TypeVar

from actors import AnyEmbedder, DocumentStore, Store, open_store
from protocol import ConfigError, VectorStoreConfig
from protocol.events import Event

from ._bridge import TrioBridge

__all__ = ["AdapterStore", "BridgedStore", "PgOptions", "store_opener"]


class AdapterStore(Store, DocumentStore, Protocol):
    """What an adapter calls on its store: a :class:`~actors.Store` that also
    upserts (:class:`~actors.DocumentStore`); both backends' handles are one."""


class PgOptions(TypedDict, total=False):
    """More keyword arguments for ``open_pg_store``, as an adapter's ``pg_options``."""

    pool_size: int
    inbox_size: int
    retries: int
    retry_delay: float
    connect_timeout: float
    statement_timeout: float
    index: str | None
    ef_search: int | None
    keyword_index: bool | None
    on_event: Callable[[Event], None] | None


H = TypeVar("H")


class BridgedStore(Generic[H]):
    """The lifecycle every adapter shares: its store (or what its calls run against,
    ``H``) behind ``self._bridge``."""

    _bridge: TrioBridge[H]

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
    pg_options: PgOptions | None = None,
) -> Callable[[], AbstractAsyncContextManager[AdapterStore]]:
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
    options: PgOptions = {} if pg_options is None else PgOptions(**pg_options)
    return lambda: open_pg_store(
        dsn, config, embedder, table=table, embed_timeout=embed_timeout, **options
    )
