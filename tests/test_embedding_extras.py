"""Issue 15's embeddings-layer additions: precomputed document embeddings, indexing's
``force_update`` and ``key_encoder``, prices, profile fields, ``embedding.started``."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
import trio
from pg_support import pg_dsn, pg_store_opener, pg_table  # noqa: F401

from actors import HashingEmbedder, InMemoryRecordManager, index, open_store
from protocol import ConfigError, Document, EmbeddingError, IndexResult, VectorStoreConfig

DIM = 16
CONFIG = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=2048)


class CountingEmbedder(HashingEmbedder):
    """A HashingEmbedder that logs every batch it is asked for."""

    def __init__(self, dimensions: int) -> None:
        super().__init__(dimensions)
        self.batches: list[list[str]] = []

    def embed_batch(self, texts: Sequence[str]) -> Any:
        self.batches.append(list(texts))
        return np.stack([self.embed(t) for t in texts])


@pytest.fixture(params=["memory", "pg"])
def backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return lambda embedder: open_store(CONFIG, embedder)
    dsn = request.getfixturevalue("pg_dsn")
    table = request.getfixturevalue("pg_table")
    opener = pg_store_opener()
    return lambda embedder: opener(dsn, CONFIG, embedder, table=table)


@asynccontextmanager
async def opened(backend: Any, embedder: object) -> AsyncIterator[Any]:
    async with backend(embedder) as store:
        yield store


# --- Document(embedding=...) ----------------------------------------------------------------


async def test_precomputed_embeddings_skip_the_embedder(backend: Any) -> None:
    embedder = CountingEmbedder(DIM)
    vector = [0.0] * DIM
    vector[3] = -2.0  # a bag of words has no negative component: nothing else scores 1
    with trio.fail_after(20):
        async with opened(backend, embedder) as store:
            await store.add_documents([Document(text="given", id="g", embedding=vector)])
            assert embedder.batches == []
            mixed = [
                Document(text="one", id="1"),
                Document(text="two", id="2", embedding=vector),
                Document(text="three", id="3"),
            ]
            await store.add_documents(mixed)
            # Only the two without an embedding, in one call.
            assert embedder.batches == [["one", "three"]]
            report = await store.retrieve_embedding(np.array(vector), 2)
            assert {t.id for t in report.turns} == {"g", "2"}
            assert all(abs(t.score - 1.0) < 1e-6 for t in report.turns)


async def test_a_bad_precomputed_embedding_changes_nothing(backend: Any) -> None:
    embedder = CountingEmbedder(DIM)
    with trio.fail_after(20):
        async with opened(backend, embedder) as store:
            narrow = Document(text="narrow", embedding=[1.0] * (DIM - 1))
            needle = f"has {DIM - 1} floats; this store takes {DIM}"
            with pytest.raises(EmbeddingError, match=needle):
                await store.add_documents([Document(text="fine"), narrow])
            assert embedder.batches == []  # checked before anything is embedded
            assert store.is_empty()


def test_document_embedding_is_checked_like_any_vector() -> None:
    doc = Document(text="x", embedding=np.arange(3, dtype=np.float32))  # type: ignore[arg-type]
    assert doc.embedding == [0.0, 1.0, 2.0] and type(doc.embedding) is list
    for bad, needle in [
        ([1.0, float("nan")], r"embedding\[1\] is nan"),
        ([True, 1.0], r"embedding\[0\] is True"),
        ([], "embedding is empty"),
        (np.zeros((2, 2)), "shape"),
        ("1.0", "embedding is a str"),
    ]:
        with pytest.raises(EmbeddingError, match=needle):
            Document(text="x", embedding=bad)  # type: ignore[arg-type]


# --- index(force_update=..., key_encoder=...) ------------------------------------------------


async def test_force_update_rewrites_unchanged_documents() -> None:
    embedder = CountingEmbedder(DIM)
    records = InMemoryRecordManager("docs")
    batch = [Document(text="a"), Document(text="b")]
    with trio.fail_after(20):
        async with open_store(CONFIG, embedder) as store:
            assert await index(batch, store, records) == IndexResult(num_added=2)
            assert await index(batch, store, records) == IndexResult(num_skipped=2)
            assert embedder.batches == [["a", "b"]]
            forced = await index(batch, store, records, force_update=True)
            assert forced == IndexResult(num_updated=2)
            assert embedder.batches == [["a", "b"], ["a", "b"]]
            with pytest.raises(ConfigError, match="force_update"):
                await index(batch, store, records, force_update="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("encoder", "length"), [("sha256", 64), ("sha512", 128), ("blake2b", 128)]
)
async def test_key_encoders_by_name(encoder: Any, length: int) -> None:
    records = InMemoryRecordManager("docs")
    with trio.fail_after(20):
        async with open_store(CONFIG, HashingEmbedder(DIM)) as store:
            await index([Document(text="a", id="a")], store, records, key_encoder=encoder)
            [record] = records.records().values()
            assert len(record.hash) == length
            again = await index([Document(text="a", id="a")], store, records, key_encoder=encoder)
            assert again == IndexResult(num_skipped=1)


async def test_a_callable_key_encoder_decides_what_changed() -> None:
    # Hash the text only: a metadata change is then no change.
    def text_only(doc: Document, source_id: str | None) -> str:
        return hashlib.sha256(doc.text.encode()).hexdigest()

    records = InMemoryRecordManager("docs")
    with trio.fail_after(20):
        async with open_store(CONFIG, HashingEmbedder(DIM)) as store:
            first = Document(text="a", id="a", metadata={"v": 1})
            await index([first], store, records, key_encoder=text_only)
            assert records.records()["a"].hash == text_only(first, None)
            moved = Document(text="a", id="a", metadata={"v": 2})
            skipped = await index([moved], store, records, key_encoder=text_only)
            assert skipped == IndexResult(num_skipped=1)
            assert await index([moved], store, records) == IndexResult(num_updated=1)
            with pytest.raises(ConfigError, match="key_encoder is 'md5'"):
                await index([first], store, records, key_encoder="md5")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="key_encoder returned 3"):
                await index([first], store, records, key_encoder=lambda d, s: 3)  # type: ignore[arg-type, return-value]


async def test_a_changed_embedding_is_an_update() -> None:
    records = InMemoryRecordManager("docs")
    with trio.fail_after(20):
        async with open_store(CONFIG, HashingEmbedder(DIM)) as store:
            await index([Document(text="a", id="a", embedding=[1.0] * DIM)], store, records)
            changed = Document(text="a", id="a", embedding=[2.0] + [1.0] * (DIM - 1))
            assert await index([changed], store, records) == IndexResult(num_updated=1)
