"""The base of the write-path conformance suite: its overridable opener and helpers.

See :mod:`actors.testing._write_conformance` for the suite and what it assumes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

import numpy as np
import pytest
import trio
import trio.testing

from actors import AnyEmbedder
from protocol import (
    Document,
    RetrievalReport,
    UnifiedMessage,
    VectorStoreConfig,
)

from .. import HashingEmbedder, open_store
from ._conformance_base import StoreUnderTest

__all__ = ["WriteSuiteBase"]

_DIM = 8


def _msg(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


def _unit(i: int, dim: int = _DIM) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def _texts(report: RetrievalReport) -> list[str]:
    return [hit.message.text() for hit in report.turns]


def _docs(*texts: str) -> list[Document]:
    return [Document(text=t) for t in texts]


class _TableEmbedder:
    """Sync embedder: each text is a key into a table of vectors. Records its calls.

    A table value may be anything, a bad vector on purpose: the store checks what it
    gets."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        self.batches: list[list[str]] = []
        self.single: list[str] = []

    def embed(self, text: str) -> Any:
        self.single.append(text)
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> list[Any]:
        self.batches.append(list(texts))
        return [self.table[t] for t in texts]


class _GateEmbedder:
    """Async embedder whose document calls wait until ``gate`` is set."""

    def __init__(self, dimensions: int = _DIM) -> None:
        self.inner = HashingEmbedder(dimensions)
        self.gate = trio.Event()
        self.entered = trio.Event()

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.entered.set()
        await self.gate.wait()
        return self.inner.embed_batch(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed(text)


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def _write_victims_cancelled(store: StoreUnderTest, nursery: trio.Nursery) -> None:
    """Write the turns "victim 1" and "victim 2", cancelling the writer once every task
    is blocked; the cancellation must have caught it."""
    with trio.CancelScope() as scope:
        nursery.start_soon(_cancel_when_blocked, scope)
        await store.store_turns([_msg("victim 1"), _msg("victim 2")])
    assert scope.cancelled_caught


class WriteSuiteBase:
    """What :class:`WriteConformance` is built on: the opener to override and helpers.

    Attributes:
        timeout: seconds each test may take, opening and closing its stores included.
        score_tolerance: how far a store's score may be from the exact float64 cosine.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.trio]

    timeout: ClassVar[float] = 30.0
    score_tolerance: ClassVar[float] = 1e-5

    # --- overridable ---------------------------------------------------------------------

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: AnyEmbedder, *, inbox_size: int = 64
    ) -> AbstractAsyncContextManager[StoreUnderTest]:
        """Return an async context manager that yields a new, empty store to test;
        ``inbox_size`` is ``open_store``'s (given only by the tests that need it)."""
        return open_store(config, embedder, inbox_size=inbox_size)

    # --- helpers -------------------------------------------------------------------------

    def config(
        self,
        max_entries: int = 8,
        dimensions: int = _DIM,
        max_entry_bytes: int = 256,
        warn_fraction: float | None = None,
    ) -> VectorStoreConfig:
        return VectorStoreConfig(
            max_entries=max_entries,
            dimensions=dimensions,
            max_entry_bytes=max_entry_bytes,
            warn_fraction=warn_fraction,
        )

    @asynccontextmanager
    async def fresh_store(
        self,
        config: VectorStoreConfig | None = None,
        embedder: AnyEmbedder | None = None,
        inbox_size: int | None = None,
    ) -> AsyncIterator[StoreUnderTest]:
        """A new store from :meth:`open_store_under_test` (default: 8 entries of 8
        floats, 256 bytes each, a :class:`HashingEmbedder`)."""
        config = self.config() if config is None else config
        embedder = HashingEmbedder(config.dimensions) if embedder is None else embedder
        # Only a test that sets the inbox passes it: an override may take no options.
        options = {} if inbox_size is None else {"inbox_size": inbox_size}
        async with self.open_store_under_test(config, embedder, **options) as store:
            yield store

    async def contents(self, store: StoreUnderTest) -> tuple[list[str], list[float], list[int]]:
        """Every entry's text, score against an all-ones query, and sequence."""
        report = await store.retrieve_embedding(np.ones(store.config.dimensions), k=10_000)
        return _texts(report), [h.score for h in report.turns], [h.sequence for h in report.turns]

    def documents_config(self, max_entries: int = 32) -> VectorStoreConfig:
        """64 floats and 512 bytes per entry: room for the documents tests' texts."""
        return self.config(max_entries, 64, 512)
