"""A reusable conformance suite for embedding providers (design §8 and §9).

Subclass :class:`EmbedderConformance` as a pytest test class and define
``make_embedder()``::

    from actors.testing import EmbedderConformance

    class TestMyEmbedder(EmbedderConformance):
        def make_embedder(self):
            return MyEmbedder(dimensions=64)

The embedder may be sync (``embed`` and optionally ``embed_batch``) or async
(``embed_documents``/``embed_query``, with a ``profile`` for an ``EmbeddingModel``).
The suite calls the embedder as its protocol says (``Embedder``: ``embed`` and
``embed_batch``, in a worker thread, as a store runs them; ``AsyncEmbedder``:
``embed_documents`` and ``embed_query``) and holds every vector to what a store takes
from one: the right count, the right width, finite real numbers. The tests cover what the
embeddings-layer document lists for providers: count matches input, one query vector,
dimensions match the profile, empty input, Unicode (lone surrogates included), batch
sizing, concurrent async calls, cache hit and miss through ``CachedEmbedder``, usage
records, cancellation and ``embed_timeout`` through a store, and error classification
(``EmbedderError``).

Set ``deterministic = False`` for an embedder whose vectors are random
(``RandomFakeEmbedding``): the tests that compare vectors of the same text are skipped.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence, Sized
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest
import trio

from actors import AnyEmbedder
from protocol import (
    EmbedderError,
    EmbeddingProfile,
    VectorStoreConfig,
)
from protocol.checks import shown

from .. import CachedEmbedder, EmbeddingCache, EmbeddingModel, EmbeddingUsageLog, open_store

__all__ = ["EmbedderConformance"]

#: Texts every Unicode test embeds: accents, CJK, an emoji, a NUL, a lone surrogate
#: (the store keeps such text exactly, design §3), and a long run of one character.
UNICODE_TEXTS = (
    "naïve café",
    "日本語のテキスト",
    "emoji 🚀 here",
    "nul\x00inside",
    "lone \ud800 surrogate",
    "x" * 2000,
)


def _is_async(embedder: object) -> bool:
    return inspect.iscoroutinefunction(getattr(embedder, "embed_documents", None))


async def _embed_documents(embedder: Any, texts: list[str]) -> object:
    """``texts`` through the embedder's own protocol: ``embed_documents`` awaited, or
    ``embed_batch`` (else ``embed`` per text) in a worker thread."""
    if _is_async(embedder):
        return await embedder.embed_documents(texts)
    batch = getattr(embedder, "embed_batch", None)
    if callable(batch):
        return await trio.to_thread.run_sync(batch, texts)
    return await trio.to_thread.run_sync(lambda: [embedder.embed(t) for t in texts])


async def _embed_query(embedder: Any, text: str) -> object:
    if _is_async(embedder):
        return await embedder.embed_query(text)
    return await trio.to_thread.run_sync(embedder.embed, text)


def _rows(raw: object, count: int, width: int, what: str) -> npt.NDArray[np.float64]:
    """``raw`` as a float64 ``[count, width]`` array, asserting what a store takes from
    an embedder: that many vectors of that width, real numbers (an int or float dtype:
    not bool, str, complex or a ragged object array), all finite."""
    if isinstance(raw, np.ma.MaskedArray):
        raise AssertionError(f"the embedder returned a masked array for {what}")
    try:
        array = np.asarray(raw)
    except (TypeError, ValueError) as error:
        raise AssertionError(
            f"the embedder returned {shown(raw)} for {what}; expected {count} vector(s) of "
            f"{width} real numbers ({error})"
        ) from None
    assert array.dtype.kind in "fiu", (
        f"the embedder returned {array.dtype} values for {what}; expected real numbers "
        "(a float or int dtype)"
    )
    assert array.shape == (count, width), (
        f"the embedder returned the shape {array.shape} for {what}; expected ({count}, {width})"
    )
    rows = array.astype(np.float64)
    assert bool(np.isfinite(rows).all()), f"the embedder returned a non-finite number for {what}"
    return rows


class _SyncModel:
    """A sync embedder as an :class:`EmbeddingModel`, so a ``CachedEmbedder`` can sit
    over it: the calls run in a worker thread, as a store runs them."""

    def __init__(self, embedder: AnyEmbedder, dimensions: int) -> None:
        self._embedder = embedder
        self.profile = EmbeddingProfile(
            provider="local", model=type(embedder).__name__, dimensions=dimensions
        )

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return await _embed_documents(self._embedder, list(texts))

    async def embed_query(self, text: str) -> Any:
        return await _embed_query(self._embedder, text)


class EmbedderConformance:
    """Conformance tests for an embedder. Subclass it; see the module docs.

    Attributes:
        deterministic: the same text always gives the same vector (within
            ``tolerance``, as cosine similarity).
        tolerance: how far from 1.0 the cosine of two embeddings of one text may be (a
            batch may pad or order texts differently from a single call).
        batch_texts: how many texts the batch-sizing test sends: past the profile's
            ``max_batch_size`` when the embedder has a profile, so it must split.
        timeout: seconds each test may take.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.trio]

    deterministic: ClassVar[bool] = True
    tolerance: ClassVar[float] = 1e-4
    batch_texts: ClassVar[int | None] = None
    timeout: ClassVar[float] = 60.0

    # --- overridable ---------------------------------------------------------------------

    def make_embedder(self) -> AnyEmbedder:
        """Return a new embedder to test."""
        raise NotImplementedError("define make_embedder() in your EmbedderConformance subclass")

    # --- helpers -------------------------------------------------------------------------

    def profile_of(self, embedder: AnyEmbedder) -> EmbeddingProfile | None:
        profile = getattr(embedder, "profile", None)
        return profile if isinstance(profile, EmbeddingProfile) else None

    def dimensions_of(self, embedder: AnyEmbedder) -> int:
        """The width the embedder promises: its profile's, else its ``dimensions``."""
        profile = self.profile_of(embedder)
        if profile is not None:
            return profile.dimensions
        width = getattr(embedder, "dimensions", None)
        if not isinstance(width, int) or width <= 0:
            raise AssertionError(
                f"{type(embedder).__name__} has neither a profile nor an int `dimensions`; "
                "the suite cannot know what width to expect"
            )
        return width

    async def documents(
        self, embedder: AnyEmbedder, texts: Sequence[str]
    ) -> npt.NDArray[np.float64]:
        """``texts`` embedded as documents, checked: one finite row per text."""
        raw = await _embed_documents(embedder, list(texts))
        return _rows(raw, len(texts), self.dimensions_of(embedder), f"{len(texts)} text(s)")

    async def query(self, embedder: AnyEmbedder, text: str) -> npt.NDArray[np.float64]:
        raw = await _embed_query(embedder, text)
        # One flat vector: as a batch of one, a 2-D answer has the wrong shape.
        row: npt.NDArray[np.float64] = _rows([raw], 1, self.dimensions_of(embedder), "a query")[0]
        return row

    def cached(self, embedder: AnyEmbedder) -> CachedEmbedder:
        """A ``CachedEmbedder`` with a fresh cache over the embedder (a sync one is
        wrapped as an ``EmbeddingModel`` first)."""
        if isinstance(embedder, CachedEmbedder):
            return CachedEmbedder(embedder.model, cache=EmbeddingCache())
        model: EmbeddingModel
        if not isinstance(embedder, EmbeddingModel) or self.profile_of(embedder) is None:
            model = _SyncModel(embedder, self.dimensions_of(embedder))
        else:
            model = embedder
        return CachedEmbedder(model, cache=EmbeddingCache(), usage=EmbeddingUsageLog())

    def assert_same(self, a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> None:
        """Two embeddings of one text: equal up to ``tolerance`` in cosine (zero
        vectors must both be zero)."""
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        if na == 0.0 or nb == 0.0:
            assert na == nb == 0.0, f"one embedding is zero and the other is not ({na}, {nb})"
            return
        cosine = float(a @ b) / (na * nb)
        assert cosine >= 1.0 - self.tolerance, f"cosine {cosine} between two embeddings"

    # --- the tests -----------------------------------------------------------------------

    async def test_count_matches_input(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            for n in (1, 2, 7):
                texts = [f"text number {i} of {n}" for i in range(n)]
                rows = await self.documents(embedder, texts)
                assert rows.shape == (n, self.dimensions_of(embedder))

    async def test_query_is_one_vector(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            vector = await self.query(embedder, "what is the capital of France?")
            assert vector.shape == (self.dimensions_of(embedder),)
            assert float(np.linalg.norm(vector)) > 0.0
            if self.deterministic:
                self.assert_same(
                    vector, await self.query(embedder, "what is the capital of France?")
                )

    async def test_dimensions_match_the_profile(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            profile = self.profile_of(embedder)
            width = getattr(embedder, "dimensions", None)
            if profile is not None and isinstance(width, int):
                assert width == profile.dimensions, (
                    f"dimensions is {width}, the profile says {profile.dimensions}"
                )
            rows = await self.documents(embedder, ["one", "two"])
            assert rows.shape[1] == self.dimensions_of(embedder)
            if profile is not None:
                assert profile.accepts_dimensions(rows.shape[1])
                assert profile.supports_documents
                assert profile.supports_queries

    async def test_empty_input(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            width = self.dimensions_of(embedder)
            # No texts: no rows (a store does not call the embedder at all, but an
            # embedder may be asked for none).
            docs = getattr(embedder, "embed_documents", None)
            if docs is not None and inspect.iscoroutinefunction(docs):
                assert len(await docs([])) == 0
            elif callable(batch := getattr(embedder, "embed_batch", None)):
                out: object = batch([])
                assert isinstance(out, Sized)
                assert len(out) == 0
            # The empty string is a text like any other: one vector of the right width.
            rows = await self.documents(embedder, ["", "not empty"])
            assert rows.shape == (2, width)

    async def test_unicode(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            rows = await self.documents(embedder, UNICODE_TEXTS)
            assert rows.shape == (len(UNICODE_TEXTS), self.dimensions_of(embedder))
            if self.deterministic:
                again = await self.documents(embedder, list(reversed(UNICODE_TEXTS)))
                for i in range(len(UNICODE_TEXTS)):
                    self.assert_same(rows[i], again[len(UNICODE_TEXTS) - 1 - i])
            query = await self.query(embedder, "lone \udfff surrogate")
            assert query.shape == (self.dimensions_of(embedder),)

    async def test_batch_sizing(self) -> None:
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            profile = self.profile_of(embedder)
            n = self.batch_texts or (profile.max_batch_size + 3 if profile else 67)
            texts = [f"document {i}: {'word ' * (i % 5)}" for i in range(n)]
            rows = await self.documents(embedder, texts)
            assert rows.shape == (n, self.dimensions_of(embedder))
            if self.deterministic:
                # Order is kept across the split: each row is its own text's vector.
                for i in (0, n // 2, n - 1):
                    self.assert_same(rows[i], await self.query_as_document(embedder, texts[i]))

    async def query_as_document(self, embedder: AnyEmbedder, text: str) -> npt.NDArray[np.float64]:
        row: npt.NDArray[np.float64] = (await self.documents(embedder, [text]))[0]
        return row

    async def test_concurrent_async_calls(self) -> None:
        # Several calls in flight at once on one embedder (a store's writer and its
        # readers do this): each gets its own texts' vectors.
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            texts = [[f"batch {b} text {i}" for i in range(3)] for b in range(4)]
            results: dict[int, npt.NDArray[np.float64]] = {}

            async def one(b: int) -> None:
                results[b] = await self.documents(embedder, texts[b])

            async with trio.open_nursery() as nursery:
                for b in range(len(texts)):
                    nursery.start_soon(one, b)
            for b, batch in enumerate(texts):
                assert results[b].shape == (len(batch), self.dimensions_of(embedder))
                if self.deterministic:
                    alone = await self.documents(embedder, batch)
                    for i in range(len(batch)):
                        self.assert_same(results[b][i], alone[i])

    async def test_cache_hit_and_miss(self) -> None:
        with trio.fail_after(self.timeout):
            cached = self.cached(self.make_embedder())
            width = cached.profile.dimensions
            first = await cached.embed_documents(["alpha", "beta"])
            second = await cached.embed_documents(["beta", "alpha", "gamma"])
            miss, hit = cached.usage.records()[-2:]
            assert (miss.cache_hits, miss.texts_embedded) == (0, 2)
            assert (hit.cache_hits, hit.texts_embedded) == (2, 1)
            assert np.asarray(second).shape == (3, width)
            # A hit is the cached vector itself, whatever the model would say now.
            assert np.array_equal(np.asarray(second)[0], np.asarray(first)[1])
            query = await cached.embed_query("alpha")
            assert np.asarray(query).shape == (width,)
            assert cached.usage.records()[-1].input_type == "query"

    async def test_usage_records(self) -> None:
        with trio.fail_after(self.timeout):
            cached = self.cached(self.make_embedder())
            texts = ["one two", "three"]
            await cached.embed_documents(texts)
            [call] = cached.usage.records()
            assert call.error is None
            assert (call.texts, call.texts_embedded, call.cache_hits) == (2, 2, 0)
            assert call.characters == sum(len(t) for t in texts)
            assert call.dimensions == cached.profile.dimensions
            assert call.batches >= 1
            assert call.tokens is None or call.tokens > 0
            assert call.seconds >= 0.0
            totals = cached.usage.totals()
            assert (totals.calls, totals.texts_embedded) == (1, 2)

    async def test_cancellation_and_timeout_through_a_store(self) -> None:
        embedder = self.make_embedder()
        width = self.dimensions_of(embedder)
        config = VectorStoreConfig(max_entries=16, dimensions=width, max_entry_bytes=4096)
        with trio.fail_after(self.timeout):
            async with open_store(config, embedder, embed_timeout=1e-6) as store:
                # Over the timeout: the call fails as EmbedderError(TimeoutError), or
                # finishes first (an embedder that never yields); never half applied.
                failure: EmbedderError | None = None
                try:
                    await store.add_texts(["first", "second"])
                except EmbedderError as error:
                    failure = error
                if failure is not None:
                    assert isinstance(failure.error, TimeoutError), repr(failure.error)
                    assert failure.__cause__ is failure.error
                assert len(store) in (0, 2)
            async with open_store(config, embedder) as store:
                # Cancelled while embedding: all or nothing, and the store goes on.
                with trio.move_on_after(0):
                    await store.add_texts(["cancelled"])
                assert len(store) in (0, 1)
                before = len(store)
                await store.add_texts(["after the cancel"])
                assert len(store) == before + 1

    async def test_errors_are_classified(self) -> None:
        # Whatever the embedder raises for input it cannot take becomes EmbedderError,
        # carrying the original; it is never a crash (a BaseException) or a bad vector.
        with trio.fail_after(self.timeout):
            embedder = self.make_embedder()
            failure: Exception | None = None
            try:
                raw = await _embed_documents(embedder, [12345])  # type: ignore[list-item]
            except Exception as error:  # a store raises it as EmbedderError(error)
                failure = error
            if failure is None:
                _rows(raw, 1, self.dimensions_of(embedder), "the text 12345")
