"""Search kinds through the public names, on both backends: ``SearchRequest(kind=
"bm25")`` and ``ScoredDocument.raw_score`` (``actors/_retrieval/engine.py`` writes each kind once).
The contract parts also live in ``StoreConformance``; these tests pin what differs by
backend (the raw dense score) and what a conformance store cannot see (the embedder)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
import trio

from actors import HashingEmbedder, open_store
from protocol import (
    ConfigError,
    Document,
    EmbeddingProfile,
    Event,
    SearchRequest,
    VectorStoreConfig,
)
from protocol.events import StoreSearched

DIM = 16
TIMEOUT = 20
CONFIG = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=512)
DOCS = [
    Document(text="river bank loan", id="a"),
    Document(text="river stream water", id="b"),
    Document(text="bank account money", id="c"),
]


class CountingEmbedder:
    """A HashingEmbedder that counts its query embeddings."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(DIM)
        self.queries = 0

    def embed(self, text: str) -> Any:
        self.queries += 1
        return self.inner.embed(text)

    def embed_batch(self, texts: Sequence[str]) -> Any:
        return self.inner.embed_batch(texts)


class ProfiledEmbedder(HashingEmbedder):
    """A HashingEmbedder bound to a profile, so a store reports its name."""

    profile = EmbeddingProfile(provider="test", model="hashing", dimensions=DIM)


@pytest.fixture(params=["memory", "pg"])
def opener(request: pytest.FixtureRequest) -> Any:
    """``opener(embedder, **kw)``: a fresh store of the parametrized backend."""
    if request.param == "memory":
        return lambda embedder, **kw: open_store(CONFIG, embedder, **kw)
    pg_open = request.getfixturevalue("pg_open")
    return lambda embedder, **kw: pg_open(CONFIG, embedder, **kw)


async def test_bm25_search_never_embeds_the_query(opener: Any) -> None:
    embedder = CountingEmbedder()
    with trio.fail_after(TIMEOUT):
        async with opener(embedder) as store:
            await store.add_documents(DOCS)
            hits = await store.search(SearchRequest(query="river bank", kind="bm25", k=3))
            assert hits[0].document.id == "a"
            assert embedder.queries == 0
            await store.search(SearchRequest(query="river bank", kind="hybrid", k=3))
            assert embedder.queries == 1


async def test_raw_score_is_the_backends_own(opener: Any, request: pytest.FixtureRequest) -> None:
    pg = request.node.callspec.params["opener"] == "pg"
    with trio.fail_after(TIMEOUT):
        async with opener(HashingEmbedder(DIM)) as store:
            await store.add_documents(DOCS)
            for kind in ("similarity", "mmr"):
                hits = await store.search(SearchRequest(query="river bank", kind=kind, k=3))
                assert len(hits) == 3
                for h in hits:
                    # Memory scores by cosine; pgvector's <#> distance is its negation.
                    expected = -h.score if pg else h.score
                    assert h.raw_score is not None
                    assert math.isclose(h.raw_score, expected, abs_tol=1e-12)
            fused = await store.search(SearchRequest(query="river bank", kind="hybrid", k=3))
            assert [h.raw_score for h in fused] == [h.score for h in fused]
            keyword = await store.search(SearchRequest(query="river bank", kind="bm25", k=3))
            raws = [h.raw_score for h in keyword]
            assert all(r is not None and r > 0 for r in raws)
            assert raws == sorted(raws, reverse=True)
            # The documented score stays normalized: the best hit's share, in (0, 1].
            assert [h.score for h in keyword] == [r / raws[0] for r in raws]  # type: ignore[operator]


async def test_search_events_name_the_backend_the_profile_and_the_kind(
    opener: Any, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["opener"]
    events: list[Event] = []
    embedder = ProfiledEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with opener(embedder, on_event=events.append) as store:
            await store.add_documents(DOCS)
            for kind in ("similarity", "mmr", "hybrid", "bm25"):
                await store.search(SearchRequest(query="river bank", kind=kind, k=2))
            await store.retrieve("river", 2)
            await store.retrieve_embedding(
                embedder.embed("river"), 2, profile=ProfiledEmbedder.profile
            )
    searched = [e for e in events if isinstance(e, StoreSearched)]
    assert [(e.operation, e.kind) for e in searched] == [
        ("search", "similarity"),
        ("search", "mmr"),
        ("search", "hybrid"),
        ("search", "bm25"),
        ("retrieve", "similarity"),
        ("retrieve_embedding", "similarity"),
    ]
    assert {(e.backend, e.profile) for e in searched} == {(backend, "test/hashing")}
    assert [e.hits for e in searched] == [2] * 6


def test_bm25_request_validation() -> None:
    with pytest.raises(ConfigError, match="takes no vector; use hybrid"):
        SearchRequest(query="x", vector=[1.0, 0.0], kind="bm25")
    with pytest.raises(ConfigError, match="bm25 search computes no cosine"):
        SearchRequest(query="x", kind="bm25", score_threshold=0.5)
    with pytest.raises(ConfigError, match="bm25 search needs query text"):
        SearchRequest(vector=[1.0, 0.0], kind="bm25")
    # fetch_k is not bm25's: any k goes with the default fetch_k.
    assert SearchRequest(query="x", kind="bm25", k=50).k == 50
