"""The embeddings layer's newer parts (design §9): precomputed document embeddings, indexing's
``force_update`` and ``key_encoder``, prices, profile fields, ``embedding.started``."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import numpy as np
import pytest
import trio
from pg_support import (  # noqa: F401 (pg_dsn and pg_table are fixtures)
    drop_table,
    new_table_name,
    pg_dsn,
    pg_store_opener,
    pg_table,
)

from actors import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingResult,
    EmbeddingUsageLog,
    HashingEmbedder,
    InMemoryRecordManager,
    SparseEmbeddingModel,
    index,
    open_memory,
    open_store,
)
from protocol import (
    ConfigError,
    Document,
    EmbedderError,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPrice,
    EmbeddingProfile,
    IndexResult,
    SparseVector,
    VectorStoreConfig,
)

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
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An opener of the backend's store; ``.twin``, where there is one, opens a second
    store of the same kind (pg: on a table of its own, dropped afterwards)."""
    if request.param == "memory":
        yield lambda embedder: open_store(CONFIG, embedder)
        return
    dsn = request.getfixturevalue("pg_dsn")
    table = request.getfixturevalue("pg_table")
    opener = pg_store_opener()
    twin = new_table_name()

    def open_pg(embedder: object, table: str = table) -> Any:
        return opener(dsn, CONFIG, embedder, table=table)

    open_pg.twin = lambda embedder: open_pg(embedder, twin)  # type: ignore[attr-defined]
    yield open_pg
    drop_table(dsn, twin)


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


# --- add_documents(..., embeddings=matrix) -------------------------------------------------


def _rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)


async def _stored(store: Any, query: np.ndarray) -> list[tuple[str, float]]:
    report = await store.retrieve_embedding(query, 10)
    return [(t.id, t.score) for t in report.turns]


async def test_a_matrix_of_embeddings_stores_what_documents_would(backend: Any) -> None:
    """``add_documents(docs, embeddings=m)``, ``upsert`` and ``add_texts`` store the very
    vectors that ``Document(embedding=m[i])`` would, without calling the embedder; an
    id given twice keeps one entry, and the same id with other rows is refused."""
    embedder = CountingEmbedder(DIM)
    m = _rows(6)
    texts = [f"text {i}" for i in range(6)]
    with trio.fail_after(30):
        async with opened(backend, embedder) as a, opened(backend_twin(backend), embedder) as b:
            ids = await a.add_documents(
                [Document(text=t, id=f"d{i}") for i, t in enumerate(texts[:4])], embeddings=m[:4]
            )
            await b.add_documents(
                [Document(text=t, id=f"d{i}", embedding=m[i]) for i, t in enumerate(texts[:4])]
            )
            assert ids == [f"d{i}" for i in range(4)]
            await a.add_texts(texts[4:], ids=["d4", "d5"], embeddings=m[4:].tolist())
            await b.add_texts(texts[4:], ids=["d4", "d5"])
            await b.upsert(
                [
                    Document(text=t, id=f"d{i + 4}", embedding=m[i + 4])
                    for i, t in enumerate(texts[4:])
                ]
            )
            assert embedder.batches == [texts[4:]]  # b's add_texts only
            for q in _rows(3, seed=1):
                assert await _stored(a, q) == await _stored(b, q)
            # Duplicates: the same id and the same row is one entry; other rows refused.
            twice = [Document(text="x", id="x"), Document(text="x", id="x")]
            await a.upsert(twice, embeddings=np.stack([m[0], m[0]]))
            assert len(a) == 7
            with pytest.raises(ConfigError, match="appears twice in the batch"):
                await a.upsert(twice, embeddings=m[:2])


async def test_bad_embedding_matrices_change_nothing(backend: Any) -> None:
    embedder = CountingEmbedder(DIM)
    docs = [Document(text="a", id="a"), Document(text="b", id="b")]
    good = _rows(2)
    nan = good.copy()
    nan[1, 3] = np.nan
    cases: list[tuple[object, type[Exception], str]] = [
        (good[:1], EmbeddingError, r"shape \(1, 16\) for 2 documents"),
        (good[:, :-1], EmbeddingError, f"15 columns; this store takes {DIM}"),
        (good.reshape(-1), EmbeddingError, r"shape \(32,\)"),
        (nan, EmbeddingError, "row 1 holds a NaN or an infinity"),
        (good.astype(np.complex64), EmbeddingError, "dtype complex64"),
        (np.ma.masked_array(good), EmbeddingError, "masked array"),
        ("1.0", EmbeddingError, "embeddings is a str"),
        ([[1.0] * DIM, [1.0] * (DIM - 1)], EmbeddingError, "embeddings"),
    ]
    with trio.fail_after(30):
        async with opened(backend, embedder) as store:
            for bad, error, needle in cases:
                with pytest.raises(error, match=needle):
                    await store.add_documents(docs, embeddings=bad)
            with pytest.raises(ConfigError, match="has its own embedding"):
                await store.add_documents(
                    [docs[0], Document(text="c", embedding=good[0])], embeddings=good
                )
            assert embedder.batches == [] and store.is_empty()


async def test_documents_loaded_with_a_matrix_are_what_a_memory_recalls(backend: Any) -> None:
    """The user's path: a memory over a store bulk-loaded with ``embeddings=`` recalls
    those documents by their vectors and their words (hybrid recall, the default)."""
    embedder = HashingEmbedder(DIM)
    texts = ["the owl sits in the old oak", "a red kite over the hill", "fresh bread at dawn"]
    matrix = np.stack([embedder.embed(t) for t in texts])
    with trio.fail_after(30):
        async with opened(backend, embedder) as store, open_memory(store=store) as memory:
            ids = await store.add_documents(
                [Document(text=t, id=f"m{i}") for i, t in enumerate(texts)],
                namespace=memory.config.namespace,
                embeddings=matrix,
            )
            for i, query in enumerate(["owl oak", "red kite", "bread dawn"]):
                report = await memory.retrieve(query)
                assert [t.id for t in report.turns][:1] == [ids[i]]


def backend_twin(backend: Any) -> Any:
    """A second store like ``backend``'s (pg: on a table of its own)."""
    return getattr(backend, "twin", backend)


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


# --- EmbeddingPrice and EmbeddingUsageLog.set_price -----------------------------------------


def test_price_per_vector_and_per_request() -> None:
    price = EmbeddingPrice(per_vector=0.5, per_request=2.0, per_million_characters=1e6)
    assert price.cost(tokens=None, characters=3, vectors=4, requests=1) == 3 + 2 + 2
    assert EmbeddingPrice().cost(tokens=10, characters=10, vectors=10, requests=10) == 0.0
    assert EmbeddingPrice(per_million_tokens=1.0).cost(tokens=None, characters=1) is None
    for field in ("per_vector", "per_request"):
        with pytest.raises(ConfigError, match=f"{field} is -1"):
            EmbeddingPrice(**{field: -1})
        with pytest.raises(ConfigError, match=f"{field} is True"):
            EmbeddingPrice(**{field: True})


class TokenModel:
    """An async EmbeddingModel that reports one token per character."""

    profile = EmbeddingProfile(provider="test", model="tok", dimensions=4)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return (await self.embed_with_report(texts, "document")).vectors

    async def embed_query(self, text: str) -> Any:
        return (await self.embed_with_report([text], "query")).vectors[0]

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        await trio.lowlevel.checkpoint()
        vectors = np.ones((len(texts), 4), dtype=np.float32)
        return EmbeddingResult(
            vectors=vectors, tokens=sum(len(t) for t in texts), truncated=0, batches=1
        )


async def test_set_price_reprices_the_totals_without_rebuilding_the_log() -> None:
    usage = EmbeddingUsageLog(pricing={"test/tok": EmbeddingPrice(per_request=1.0)})
    embedder = CachedEmbedder(TokenModel(), cache=EmbeddingCache(), usage=usage)
    with trio.fail_after(5):
        await embedder.embed_documents(["ab", "cd"])  # 1 request, 2 vectors, 4 tokens
        await embedder.embed_documents(["ab"])  # a cache hit: free
        await embedder.embed_query("xyz")  # 1 request, 1 vector, 3 tokens
    assert [r.cost for r in usage.records()] == [1.0, 0.0, 1.0]
    assert usage.totals().cost == 2.0
    usage.set_price("tok", EmbeddingPrice(per_vector=10.0))  # a bare model name
    usage.set_price("test/tok", None)  # removed: the bare name now applies
    assert usage.totals().cost == 30.0
    assert usage.totals_by_model()["test/tok"].cost == 30.0
    usage.set_price("test/tok", EmbeddingPrice(per_million_tokens=1e6))
    assert usage.totals().cost == 7.0
    assert usage.totals().unpriced_calls == 0
    # The records keep what each call cost when it was made.
    assert [r.cost for r in usage.records()] == [1.0, 0.0, 1.0]
    with trio.fail_after(5):
        await embedder.embed_query("new text")
    assert usage.records()[-1].cost == 8.0
    with pytest.raises(ConfigError, match="expected an EmbeddingPrice"):
        usage.set_price("tok", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="price name is ''"):
        usage.set_price("", EmbeddingPrice())


def test_a_per_token_price_leaves_calls_without_tokens_unpriced() -> None:
    usage = EmbeddingUsageLog()
    call = EmbeddingCall(
        provider="p", model="m", input_type="document", texts=1, cache_hits=0,
        texts_embedded=1, characters=5, tokens=None, truncated=0, batches=1,
        dimensions=4, seconds=0.1, cost=None,
    )  # fmt: skip
    usage.record(call)
    assert (usage.totals().cost, usage.totals().unpriced_calls) == (0.0, 1)
    usage.set_price("p/m", EmbeddingPrice(per_million_characters=1e6))
    assert (usage.totals().cost, usage.totals().unpriced_calls) == (5.0, 0)
    usage.set_price("p/m", EmbeddingPrice(per_million_tokens=1.0))
    assert (usage.totals().cost, usage.totals().unpriced_calls) == (0.0, 1)


# --- EmbeddingProfile's new fields ----------------------------------------------------------


def test_profile_fields_default_validate_and_round_trip() -> None:
    plain = EmbeddingProfile(provider="p", model="m", dimensions=8)
    assert plain.allowed_dimensions is None
    assert (plain.supports_documents, plain.supports_queries, plain.supports_sparse) == (
        True,
        True,
        False,
    )
    assert plain.distance_metrics == ["cosine"]
    assert plain.accepts_dimensions(8) and not plain.accepts_dimensions(4)
    full = EmbeddingProfile(
        provider="p",
        model="m",
        dimensions=8,
        allowed_dimensions=[4, 8, 16],
        supports_queries=False,
        supports_sparse=True,
        distance_metrics=["dot", "cosine"],
    )
    assert full.accepts_dimensions(4)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(full), type=EmbeddingProfile) == full
    assert msgspec.json.decode(msgspec.json.encode(full), type=EmbeddingProfile) == full
    for kwargs, needle in [
        ({"allowed_dimensions": [4, 16]}, "expected dimensions among the allowed widths"),
        ({"allowed_dimensions": []}, "expected None or a non-empty list"),
        ({"allowed_dimensions": [8, 8]}, "each width once"),
        ({"allowed_dimensions": [8, 0]}, r"allowed_dimensions\[1\]"),
        ({"distance_metrics": []}, "non-empty list"),
        ({"distance_metrics": ["manhattan"]}, "holds 'manhattan'"),
        ({"distance_metrics": ["dot", "dot"]}, "each metric once"),
        ({"supports_documents": False, "supports_queries": False}, "both False"),
        ({"supports_sparse": 1}, "supports_sparse is 1; expected a bool"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            EmbeddingProfile(provider="p", model="m", dimensions=8, **kwargs)


# --- embedding.started ----------------------------------------------------------------------


class SlowModel:
    """An EmbeddingModel whose calls can fail or hang."""

    profile = EmbeddingProfile(provider="test", model="slow", dimensions=DIM)

    def __init__(self) -> None:
        self.mode = "ok"

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        if self.mode == "hang":
            await trio.sleep_forever()
        if self.mode == "fail":
            raise OSError("offline")
        await trio.lowlevel.checkpoint()
        return HashingEmbedder(DIM).embed_batch(list(texts))

    async def embed_query(self, text: str) -> Any:
        return (await self.embed_documents([text]))[0]


def drain(subscription: Any) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            out.append(subscription.receive_nowait())
        except trio.WouldBlock:
            return out


def tag(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def assert_started_first(events: list[Any], expected: list[tuple[str, str]]) -> None:
    """Every embedding.* event pair is started → embedded/failed, naming the same model;
    ``expected`` lists the (tag of the end event, error or "") in order."""
    pairs = [e for e in events if tag(e).startswith("embedding.")]
    assert [tag(e) for e in pairs[0::2]] == ["embedding.started"] * len(expected)
    ends = pairs[1::2]
    assert [(tag(e), e.usage.error or "") for e in ends] == expected
    for start, end in zip(pairs[0::2], ends, strict=True):
        assert (start.provider, start.model) == (end.usage.provider, end.usage.model)
        assert (start.input_type, start.texts) == (end.usage.input_type, end.usage.texts)
        assert start.at <= end.at


@pytest.mark.parametrize("plain", [True, False])
async def test_embedding_started_comes_before_every_embedded_and_failed(plain: bool) -> None:
    model = SlowModel()
    embedder: object = FailingHash(DIM) if plain else model
    with trio.fail_after(20):
        async with (
            open_memory(store=CONFIG, embedder=embedder, embed_timeout=0.5) as memory,
            memory.events() as events,
        ):
            await memory.store.add_texts(["one", "two"])
            await memory.retrieve("one")
            if plain:
                FailingHash.fail = True
            else:
                model.mode = "fail"
            with pytest.raises(EmbedderError):
                await memory.store.add_texts(["three"])
            if not plain:
                model.mode = "hang"
                with pytest.raises(EmbedderError) as timed_out:
                    await memory.store.add_texts(["four"])
                assert isinstance(timed_out.value.error, TimeoutError)
            got = drain(events)
    FailingHash.fail = False
    expected = [
        ("embedding.completed", ""),
        ("embedding.completed", ""),
        ("embedding.failed", "OSError"),
    ]
    if not plain:
        expected.append(("embedding.failed", "TimeoutError"))
    assert_started_first(got, expected)


class FailingHash(HashingEmbedder):
    fail = False

    def embed_batch(self, texts: Sequence[str]) -> Any:
        if FailingHash.fail:
            raise OSError("offline")
        return super().embed_batch(texts)


# --- SparseVector and SparseEmbeddingModel ----------------------------------------------------


def test_sparse_vector_validates_and_round_trips() -> None:
    v = SparseVector(indices=[0, 3, np.int64(9)], values=[1, 0.5, np.float32(2.0)])  # type: ignore[list-item]
    assert (v.indices, v.values) == ([0, 3, 9], [1.0, 0.5, 2.0])
    assert type(v.indices[2]) is int and type(v.values[2]) is float
    w = SparseVector(indices=[3, 9, 12], values=[2.0, 1.0, 5.0])
    assert v.dot(w) == 0.5 * 2.0 + 2.0 * 1.0 == w.dot(v)
    assert SparseVector(indices=[], values=[]).dot(w) == 0.0
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(v), type=SparseVector) == v
    assert msgspec.json.decode(msgspec.json.encode(v), type=SparseVector) == v
    for kwargs, needle in [
        ({"indices": [1, 2], "values": [1.0]}, "2 indices and 1 values"),
        ({"indices": [2, 1], "values": [1.0, 1.0]}, "strictly increasing"),
        ({"indices": [1, 1], "values": [1.0, 1.0]}, "strictly increasing"),
        ({"indices": [-1], "values": [1.0]}, r"indices\[0\]"),
        ({"indices": [True], "values": [1.0]}, r"indices\[0\]"),
        ({"indices": [0], "values": [float("inf")]}, "finite"),
        ({"indices": [0], "values": [True]}, "expected a number"),
        ({"indices": (0,), "values": "1"}, "takes lists"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            SparseVector(**kwargs)


def test_a_sparse_model_satisfies_the_protocol() -> None:
    class Splade:
        profile = EmbeddingProfile(
            provider="local", model="splade", dimensions=30522, supports_sparse=True
        )

        async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
            return [SparseVector(indices=[len(t)], values=[1.0]) for t in texts]

        async def embed_sparse_query(self, text: str) -> SparseVector:
            return SparseVector(indices=[len(text)], values=[1.0])

    assert isinstance(Splade(), SparseEmbeddingModel)
    assert not isinstance(HashingEmbedder(4), SparseEmbeddingModel)
