"""The in-memory store passes the conformance suites that other backends subclass
(``tests/pg/test_pg_documents.py`` and ``tests/pg/test_pg_store.py`` run them on PostgreSQL)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from actors import open_store
from actors.testing import StoreConformance, WriteConformance
from protocol import VectorStoreConfig


class TestInMemoryConformance(StoreConformance):
    """``StoreConformance`` against ``actors.open_store``, its default factory; the
    namespace property takes 60 walks here (cheap in memory), 24 elsewhere."""

    namespace_rounds = 60


class TestInMemoryThreadedConformance(StoreConformance):
    """``StoreConformance`` with ``thread_scan_threshold=0``: every scan in a thread."""

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object
    ) -> AbstractAsyncContextManager[Any]:
        return open_store(config, embedder, thread_scan_threshold=0)


class TestInMemoryWrites(WriteConformance):
    """``WriteConformance`` against ``actors.open_store``, its default factory."""


class TestInMemoryThreadedWrites(WriteConformance):
    """``WriteConformance`` with ``thread_scan_threshold=0``: every scan in a thread."""

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object, **options: Any
    ) -> AbstractAsyncContextManager[Any]:
        return open_store(config, embedder, thread_scan_threshold=0, **options)
