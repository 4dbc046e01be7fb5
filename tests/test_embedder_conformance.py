"""EmbedderConformance and RecordManagerConformance on everything the project ships,
and on deliberately broken implementations, which must fail them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
import trio
from extras import missing_extra
from test_openai_embeddings import FakeServer, client

from actors import CachedEmbedder, HashingEmbedder, InMemoryRecordManager, RecordManager
from actors.testing import (
    DeterministicFakeEmbedding,
    EmbedderConformance,
    RandomFakeEmbedding,
    RecordManagerConformance,
)
from protocol import ConfigError

DIM = 24
EMBED_MISSING = missing_extra("embed")


class TestHashingEmbedder(EmbedderConformance):
    def make_embedder(self) -> object:
        return HashingEmbedder(DIM)


class TestDeterministicFakeEmbedding(EmbedderConformance):
    def make_embedder(self) -> object:
        return DeterministicFakeEmbedding(DIM, seed=3)


class TestRandomFakeEmbedding(EmbedderConformance):
    deterministic = False

    def make_embedder(self) -> object:
        return RandomFakeEmbedding(DIM, seed=7)


class TestCachedHashingEmbedder(EmbedderConformance):
    def make_embedder(self) -> object:
        return TestCachedEmbedderOver.model_of(HashingEmbedder(DIM))


class TestCachedEmbedderOver(EmbedderConformance):
    """CachedEmbedder over DeterministicFakeEmbedding made an EmbeddingModel."""

    @staticmethod
    def model_of(embedder: Any) -> CachedEmbedder:
        return EmbedderConformance().cached(embedder)

    def make_embedder(self) -> object:
        return self.model_of(DeterministicFakeEmbedding(DIM))


@pytest.mark.skipif(EMBED_MISSING is not None, reason=str(EMBED_MISSING))
class TestMiniLMEmbedder(EmbedderConformance):
    batch_texts = 20  # a real forward pass per text: keep the suite quick on 2 cores
    tolerance = 1e-3  # padding in a batch moves float32 sums a little

    _shared: Any = None

    def make_embedder(self) -> object:
        from actors import MiniLMEmbedder

        if TestMiniLMEmbedder._shared is None:
            TestMiniLMEmbedder._shared = MiniLMEmbedder(blas_threads=1, batch_size=8)
        return TestMiniLMEmbedder._shared


@pytest.mark.skipif(EMBED_MISSING is not None, reason=str(EMBED_MISSING))
class TestCachedMiniLM(TestMiniLMEmbedder):
    def make_embedder(self) -> object:
        return CachedEmbedder(super().make_embedder())  # type: ignore[arg-type]


class TestOpenAIEmbeddings(EmbedderConformance):
    """OpenAIEmbeddings against the local fake server of test_openai_embeddings."""

    batch_texts = 10

    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        self.server = FakeServer()
        self.server.thread.start()
        try:
            yield
        finally:
            self.server.close()

    def make_embedder(self) -> object:
        return client(self.server, max_batch_size=4)  # the fake server makes 4-wide vectors


class TestCachedOpenAIEmbeddings(TestOpenAIEmbeddings):
    def make_embedder(self) -> object:
        return CachedEmbedder(super().make_embedder())  # type: ignore[arg-type]


class TestInMemoryRecordManager(RecordManagerConformance):
    def make_record_manager(self, namespace: str) -> RecordManager:
        return InMemoryRecordManager(namespace)


# --- broken implementations fail the suites ---------------------------------------------------


class DropsLastRow(HashingEmbedder):
    """Loses the last vector of any batch of more than one text."""

    def embed_batch(self, texts: Sequence[str]) -> Any:
        rows = super().embed_batch(texts)
        return rows[:-1] if len(texts) > 1 else rows


class WrongWidthQueries(HashingEmbedder):
    def embed(self, text: str) -> Any:
        return np.ones(DIM + 1, dtype=np.float32) if "?" in text else super().embed(text)


class NaNOnUnicode(HashingEmbedder):
    def embed_batch(self, texts: Sequence[str]) -> Any:
        rows = np.array(super().embed_batch(texts), dtype=np.float32)
        rows[[not t.isascii() for t in texts]] = np.nan
        return rows


class ShuffledBatches(DeterministicFakeEmbedding):
    """Returns a big batch's rows in reverse order (a mis-merged split)."""

    def embed_batch(self, texts: Sequence[str]) -> Any:
        rows = super().embed_batch(texts)
        return rows[::-1] if len(texts) > 10 else rows


class CrashesOnNonText(HashingEmbedder):
    def embed_batch(self, texts: Sequence[str]) -> Any:
        if any(not isinstance(t, str) for t in texts):
            raise KeyboardInterrupt  # not an Exception: never classifiable
        return super().embed_batch(texts)


def conformance_tests() -> list[str]:
    return sorted(n for n in dir(EmbedderConformance) if n.startswith("test_"))


async def failures_of(embedder: object) -> set[str]:
    """The EmbedderConformance tests that fail on ``embedder``."""

    class Suite(EmbedderConformance):
        timeout = 10.0

        def make_embedder(self) -> object:
            return embedder

    failed = set()
    for name in conformance_tests():
        try:
            await getattr(Suite(), name)()
        except (AssertionError, Exception, KeyboardInterrupt):
            failed.add(name)
    return failed


@pytest.mark.parametrize(
    ("broken", "must_fail"),
    [
        (DropsLastRow(DIM), {"test_count_matches_input", "test_unicode", "test_batch_sizing"}),
        (WrongWidthQueries(DIM), {"test_query_is_one_vector"}),
        (NaNOnUnicode(DIM), {"test_unicode"}),
        (ShuffledBatches(DIM), {"test_batch_sizing"}),
        (CrashesOnNonText(DIM), {"test_errors_are_classified"}),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, set) else "",
)
async def test_a_broken_embedder_fails_the_suite(broken: object, must_fail: set[str]) -> None:
    failed = await failures_of(broken)
    assert must_fail <= failed, f"passed but should not have: {must_fail - failed}"


async def test_a_sound_embedder_passes_the_same_harness() -> None:
    # The harness above reports no failure for a good embedder: its failures are real.
    assert await failures_of(HashingEmbedder(DIM)) == set()


class ForgetfulRecordManager(InMemoryRecordManager):
    """Drops every update: nothing is ever known, so every run rewrites everything."""

    async def update(self, records: Sequence[Any]) -> None:
        return None


class SameRunRecordManager(InMemoryRecordManager):
    """Hands out the same run number every time, so cleanup cannot tell runs apart."""

    async def begin_run(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("manager", "must_fail"),
    [
        (
            ForgetfulRecordManager,
            {"test_an_unchanged_rerun_is_a_no_op", "test_runs_grow_and_records_round_trip"},
        ),
        (SameRunRecordManager, {"test_cleanup_deletes_stale_documents"}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
async def test_a_broken_record_manager_fails_the_suite(manager: Any, must_fail: set[str]) -> None:
    class Suite(RecordManagerConformance):
        def make_record_manager(self, namespace: str) -> RecordManager:
            made: RecordManager = manager(namespace)
            return made

    failed = set()
    for name in sorted(n for n in dir(RecordManagerConformance) if n.startswith("test_")):
        try:
            with trio.fail_after(10):
                await getattr(Suite(), name)()
        except (AssertionError, Exception):
            failed.add(name)
    assert must_fail <= failed, f"passed but should not have: {must_fail - failed}"


def test_random_fake_embedding() -> None:
    a, b = RandomFakeEmbedding(8, seed=1), RandomFakeEmbedding(8, seed=1)
    assert np.array_equal(a.embed_batch(["x", "y"]), b.embed_batch(["x", "y"]))
    first, second = a.embed("same"), a.embed("same")
    assert first.shape == (8,) and first.dtype == np.float32
    assert not np.array_equal(first, second)  # fresh draws every call
    assert RandomFakeEmbedding(4).embed_batch([]).shape == (0, 4)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="seed is"):
            RandomFakeEmbedding(4, seed=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dimensions"):
        RandomFakeEmbedding(0)
