"""The settings, factory and helpers the documents-and-search suite shares (design §9).

:class:`~actors.testing.StoreConformance` is built from these parts (one module would be
over 900 lines): :class:`ConformanceBase` here, the keyword and hybrid tests in
``_conformance_keywords.py``, and the rest in ``_conformance.py``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec
import numpy as np
import pytest

from actors import AnyEmbedder
from protocol import (
    Document,
    EmbeddingProfile,
    RetrievalReport,
    ScoredDocument,
    SearchRequest,
    VectorStoreConfig,
)
from protocol.messages import Dedupe

from .. import HashingEmbedder, Store, StoreStatistics, open_store

__all__ = ["ConformanceBase", "StoreUnderTest", "call_unchecked"]

T = TypeVar("T")


class StoreUnderTest(Store, Protocol):
    """What the suites call on a store: the :class:`~actors.Store` protocol and the
    rest of a store handle's API that they check (``upsert``, ``add_texts``,
    ``retrieve``, ``retrieve_in``, ``len``, ``is_empty`` and ``statistics``: both store
    handles have them)."""

    async def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = ...,
        ids: Sequence[str] | None = ...,
        namespace: str | None = ...,
        *,
        embeddings: object = ...,
        dedupe: Dedupe | None = ...,
        near_threshold: float | None = ...,
        ttl: float | dt.timedelta | None = ...,
    ) -> list[str]: ...

    async def retrieve(self, query: str, k: int) -> RetrievalReport: ...

    async def retrieve_in(self, namespace: str, query: str, k: int) -> RetrievalReport: ...

    def __len__(self) -> int: ...

    def is_empty(self) -> bool: ...

    async def upsert(
        self,
        documents: Sequence[Document],
        namespace: str | None = ...,
        *,
        embeddings: object = ...,
        dedupe: Dedupe | None = ...,
        near_threshold: float | None = ...,
        ttl: float | dt.timedelta | None = ...,
    ) -> list[str]: ...

    def statistics(self) -> StoreStatistics: ...


async def call_unchecked(
    method: Callable[..., Awaitable[T]], *args: object, **kwargs: object
) -> T:
    """``method(*args, **kwargs)`` with arguments its signature refuses, on purpose: what
    a test checks is the refusal at run time."""
    return await method(*args, **kwargs)


def _ids(hits: Sequence[ScoredDocument]) -> list[str | None]:
    return [h.document.id for h in hits]


def untimed(documents: Sequence[Document]) -> list[Document]:
    """``documents`` without their ``occurred_at`` and the version fields the store
    sets (``valid_from``, ``valid_to``, ``version``, ``supersedes``): a stored document
    always comes back with them (its time is the write's, when its writer gave none),
    which a test that wrote it without them cannot know."""
    return [
        msgspec.structs.replace(
            d, occurred_at=None, valid_from=None, valid_to=None, version=None, supersedes=None
        )
        for d in documents
    ]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 or ny == 0.0:
        return 0.0
    return float(np.dot(x, y) / (nx * ny))


class ConformanceBase:
    """What every test of the conformance suites shares: its settings, the factory to
    override, and the helpers. :class:`StoreConformance` is the suite to subclass.

    Attributes:
        dimensions: the store's width (and the embedder's).
        max_entries: the store's capacity; every test stays well under it.
        max_entry_bytes: the store's per-entry cap.
        timeout: seconds each test may take, opening and closing the store included.
        score_tolerance: how far a store's score may be from the exact float64 cosine.
        namespace_rounds: how many random walks the namespace-isolation property takes.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.trio]

    dimensions: ClassVar[int] = 64
    max_entries: ClassVar[int] = 128
    max_entry_bytes: ClassVar[int] = 4096
    timeout: ClassVar[float] = 30.0
    score_tolerance: ClassVar[float] = 1e-5
    namespace_rounds: ClassVar[int] = 24

    # --- overridable ---------------------------------------------------------------------

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: AnyEmbedder
    ) -> AbstractAsyncContextManager[StoreUnderTest]:
        """Return an async context manager that yields a new, empty store to test."""
        return open_store(config, embedder)

    def make_config(self) -> VectorStoreConfig:
        """The config every test opens its stores with."""
        return VectorStoreConfig(
            max_entries=self.max_entries,
            dimensions=self.dimensions,
            max_entry_bytes=self.max_entry_bytes,
        )

    def make_embedder(self) -> HashingEmbedder:
        """The embedder every test uses: a bag of words, so that sharing words is
        being similar and the expected scores can be computed here."""
        return HashingEmbedder(self.dimensions)

    # --- helpers -------------------------------------------------------------------------

    @asynccontextmanager
    async def fresh_store(self) -> AsyncIterator[StoreUnderTest]:
        """A new store from :meth:`open_store_under_test`."""
        async with self.open_store_under_test(self.make_config(), self.make_embedder()) as store:
            yield store

    @asynccontextmanager
    async def _numbered_store(self, texts: Sequence[str]) -> AsyncIterator[StoreUnderTest]:
        """A fresh store holding ``texts`` as documents with the ids d0, d1, ... in order."""
        async with self.fresh_store() as store:
            await store.add_documents([Document(text=t, id=f"d{i}") for i, t in enumerate(texts)])
            yield store

    def embed(self, text: str) -> list[float]:
        """``text``'s vector, as the store's embedder makes it."""
        vector: list[float] = self.make_embedder().embed(text).tolist()
        return vector

    def cosine(self, a: str, b: str) -> float:
        """The exact cosine similarity of two texts' embeddings."""
        return _cosine(self.embed(a), self.embed(b))

    def profile_of(self, store: Store) -> EmbeddingProfile | None:
        """The profile ``store`` is bound to (its ``profile``), for searches by vector."""
        profile = getattr(store, "profile", None)
        return profile if isinstance(profile, EmbeddingProfile) else None

    async def search(self, store: Store, **kwargs: Any) -> list[ScoredDocument]:
        return await store.search(SearchRequest(**kwargs))

    def assert_scores_are_cosine(self, query: str, hits: Sequence[ScoredDocument]) -> None:
        for h in hits:
            expected = self.cosine(query, h.document.text)
            assert math.isclose(h.score, expected, abs_tol=self.score_tolerance), (
                f"{h.document.id}: score {h.score}, cosine {expected}"
            )
