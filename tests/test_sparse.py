"""A sparse model in the in-memory store: ``open_store(..., sparse=model)`` keeps one
sparse vector per entry, and hybrid search fuses their dot-product ranking (list
``"sparse"``) in place of BM25's; ``kind="bm25"`` still means BM25. The pg backend
refuses a sparse model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
import trio
from extras import require_extra

from actors import HashingEmbedder, open_store
from protocol import (
    ConfigError,
    Document,
    EmbedderError,
    EmbeddingError,
    EmbeddingProfile,
    EntryTooLarge,
    SearchRequest,
    SparseVector,
    VectorStoreConfig,
)

DIM = 16
TIMEOUT = 20
CONFIG = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=512)
# "car" and "automobile" share an index: the sparse model knows they are synonyms,
# which BM25 cannot.
VOCAB = {"car": 0, "automobile": 0, "red": 1, "blue": 2, "tree": 3, "green": 4}


class VocabModel:
    """A deterministic sparse model: counts of the words of ``VOCAB`` (by index)."""

    profile = EmbeddingProfile(
        provider="test", model="vocab", dimensions=len(VOCAB), supports_sparse=True
    )

    def __init__(self) -> None:
        self.document_calls = 0

    def vector(self, text: str) -> SparseVector:
        counts: dict[int, float] = {}
        for word in re.findall(r"[a-z]+", text.lower()):
            if word in VOCAB:
                counts[VOCAB[word]] = counts.get(VOCAB[word], 0.0) + 1.0
        keys = sorted(counts)
        return SparseVector(indices=keys, values=[counts[i] for i in keys])

    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        self.document_calls += 1
        await trio.lowlevel.checkpoint()
        return [self.vector(t) for t in texts]

    async def embed_sparse_query(self, text: str) -> SparseVector:
        await trio.lowlevel.checkpoint()
        return self.vector(text)


class FailingModel(VocabModel):
    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        raise RuntimeError("sparse model down")


class ShortModel(VocabModel):
    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        return [self.vector(t) for t in texts][:-1]


class WrongTypeModel(VocabModel):
    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[Any]:
        return [[1.0, 2.0] for _ in texts]


class WideModel(VocabModel):
    """``n`` non-zeros per text, where the text is ``"n"``."""

    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        return [SparseVector(indices=list(range(int(t))), values=[1.0] * int(t)) for t in texts]


class StuckModel(VocabModel):
    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


DOCS = [
    Document(text="car car red", id="a", metadata={"color": "red"}),
    Document(text="automobile blue", id="b", metadata={"color": "blue"}),
    Document(text="green tree", id="c", metadata={"color": "green"}),
]


def hybrid(query: str, **kw: Any) -> SearchRequest:
    return SearchRequest(query=query, k=3, fetch_k=3, kind="hybrid", **kw)


def sparse_ranks(hits: Sequence[Any]) -> dict[str, int]:
    return {h.document.id: h.ranks["sparse"] for h in hits if "sparse" in h.ranks}


async def test_hybrid_fuses_the_sparse_ranking_not_bm25() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            await store.upsert(DOCS)
            hits = await store.search(hybrid("automobile"))
            # "a" has "car" twice (dot product 2), "b" "automobile" once (1); "c"
            # shares nothing, so it is in no sparse list. BM25 would only find "b".
            assert sparse_ranks(hits) == {"a": 1, "b": 2}
            assert all("bm25" not in h.ranks for h in hits)
            # kind="bm25" still means BM25.
            bm25 = await store.search(SearchRequest(query="automobile", k=3, kind="bm25"))
            assert [h.document.id for h in bm25] == ["b"]
        # The same search without a sparse model fuses BM25 (the control).
        async with open_store(CONFIG, HashingEmbedder(DIM)) as plain:
            await plain.upsert(DOCS)
            hits = await plain.search(hybrid("automobile"))
            assert {h.document.id: h.ranks["bm25"] for h in hits if "bm25" in h.ranks} == {"b": 1}


async def test_bm25_weight_weighs_the_sparse_list() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            await store.upsert(DOCS)
            hits = await store.search(hybrid("automobile", weights={"dense": 0.0}))
            assert [h.document.id for h in hits][:2] == ["a", "b"]
            assert hits[0].score == pytest.approx(1 / 61)
            off = await store.search(hybrid("automobile", weights={"bm25": 0.0, "dense": 1.0}))
            assert all(h.score == pytest.approx(1 / (60 + h.ranks["dense"])) for h in off)


async def test_ties_go_to_the_newest_entry() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            await store.upsert([Document(text="red", id="old")])
            await store.upsert([Document(text="red", id="new")])
            hits = await store.search(hybrid("red"))
            assert sparse_ranks(hits) == {"new": 1, "old": 2}


async def test_namespace_and_filter_bound_the_sparse_list() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            await store.upsert(DOCS)
            await store.upsert([Document(text="car car car car", id="x")], namespace="other")
            hits = await store.search(hybrid("car"))
            assert sparse_ranks(hits) == {"a": 1, "b": 2}
            other = await store.search(hybrid("car", namespace="other"))
            assert sparse_ranks(other) == {"x": 1}
            blue = await store.search(hybrid("car", filter={"color": "blue"}))
            assert sparse_ranks(blue) == {"b": 1}


async def test_delete_replace_evict_and_clear_drop_sparse_vectors() -> None:
    config = VectorStoreConfig(max_entries=3, dimensions=DIM, max_entry_bytes=512)
    with trio.fail_after(TIMEOUT):
        async with open_store(config, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            index = store._actor.sparse
            await store.upsert(DOCS)
            assert len(index) == 3
            await store.delete(["a"])
            assert len(index) == 2
            assert sparse_ranks(await store.search(hybrid("car"))) == {"b": 1}
            # Replacing "b" by a text without the word drops its old vector.
            await store.upsert([Document(text="green", id="b")])
            assert sparse_ranks(await store.search(hybrid("car"))) == {}
            assert len(index) == 2
            # Filling past the cap evicts the oldest ("c"), whose vector goes with it.
            await store.upsert([Document(text="red", id="d"), Document(text="tree tree", id="e")])
            assert len(store) == 3
            assert sparse_ranks(await store.search(hybrid("tree"))) == {"e": 1}
            assert len(index) == 3
            await store.clear()
            assert len(index) == 0


async def test_turns_get_sparse_vectors_too() -> None:
    from protocol import Text, UnifiedMessage

    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=VocabModel()) as store:
            await store.store_turns(
                [UnifiedMessage(role="user", content=[Text(text="my automobile")])]
            )
            hits = await store.search(hybrid("car"))
            assert len(sparse_ranks(hits)) == 1


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (FailingModel(), EmbedderError),
        (ShortModel(), EmbeddingError),
        (WrongTypeModel(), EmbeddingError),
    ],
)
async def test_a_bad_sparse_model_changes_nothing(model: VocabModel, error: type) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=model) as store:
            with pytest.raises(error):
                await store.upsert(DOCS)
            assert len(store) == 0
            assert len(store._actor.sparse) == 0
            assert store.statistics().version == 0
            assert not store.statistics().poisoned


async def test_the_sparse_model_is_under_embed_timeout() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(
            CONFIG, HashingEmbedder(DIM), sparse=StuckModel(), embed_timeout=0.05
        ) as store:
            with pytest.raises(EmbedderError) as caught:
                await store.upsert(DOCS)
            assert isinstance(caught.value.error, TimeoutError)
            assert len(store) == 0


async def test_a_sparse_vector_counts_12_bytes_per_nonzero() -> None:
    # max_entry_bytes is 512: 42 non-zeros count 504 bytes, 43 count 516.
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), sparse=WideModel()) as store:
            await store.upsert([Document(text="42", id="fits")])
            with pytest.raises(EntryTooLarge) as caught:
                await store.upsert([Document(text="1"), Document(text="43")])
            assert (caught.value.bytes, caught.value.max_entry_bytes) == (516, 512)
            assert caught.value.index == 1
            assert len(store) == 1


async def test_open_store_refuses_a_non_model() -> None:
    with trio.fail_after(TIMEOUT):
        with pytest.raises(ConfigError, match="sparse is 'splade'"):
            async with open_store(CONFIG, HashingEmbedder(DIM), sparse="splade"):  # type: ignore[arg-type]
                pass


async def test_pg_refuses_a_sparse_model() -> None:
    require_extra("pg")
    from actors import open_pg_store

    with trio.fail_after(TIMEOUT):
        with pytest.raises(ConfigError, match="the pg backend has no sparse index"):
            async with open_pg_store(
                "postgresql://localhost/none", CONFIG, HashingEmbedder(DIM), sparse=VocabModel()
            ):
                pass
