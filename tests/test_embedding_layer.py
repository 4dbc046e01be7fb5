"""The embedding layer: profiles, registry, cache, usage records and CachedEmbedder."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import pytest
import trio
import trio.lowlevel
from hypothesis import given
from hypothesis import strategies as st

from actors import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingModel,
    EmbeddingRegistry,
    EmbeddingResult,
    EmbeddingUsageLog,
    HashingEmbedder,
    open_store,
)
from actors._embedding.protocols import check_profile
from protocol import (
    ConfigError,
    EmbedderError,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPrice,
    EmbeddingProfile,
    EmbeddingUsageTotals,
    UnifiedMessage,
    VectorStoreConfig,
)

DIMS = 16


class CountingModel:
    """A hashing model that counts what reaches it, reports tokens, and can fail."""

    def __init__(self, *, model: str = "counting", dims: int = DIMS, tokens: bool = True) -> None:
        self._hash = HashingEmbedder(dims)
        self.profile = EmbeddingProfile(provider="test", model=model, dimensions=dims)
        self.calls: list[tuple[list[str], str]] = []
        self.report_tokens = tokens
        self.fail_with: Exception | None = None
        self.wrong_count = False

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        await trio.lowlevel.checkpoint()
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((list(texts), input_type))
        vectors = self._hash.embed_batch(list(texts))
        if input_type == "query":
            vectors = vectors * 2.0  # different from documents, so a mix-up shows
        if self.wrong_count:
            vectors = vectors[:-1]
        tokens = sum(len(t.split()) for t in texts) if self.report_tokens else None
        return EmbeddingResult(vectors=vectors, tokens=tokens, batches=1)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return (await self.embed_with_report(texts, "document")).vectors

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self.embed_with_report([text], "query")).vectors[0]


class PlainModel:
    """Only the EmbeddingModel protocol: no embed_with_report."""

    def __init__(self) -> None:
        self._hash = HashingEmbedder(DIMS)
        self.profile = EmbeddingProfile(provider="test", model="plain", dimensions=DIMS)
        self.document_calls = 0
        self.query_calls = 0

    async def embed_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        self.document_calls += 1
        return [self._hash.embed(t) for t in texts]

    async def embed_query(self, text: str) -> np.ndarray:
        self.query_calls += 1
        return self._hash.embed(text)


# --- profiles ---------------------------------------------------------------------------


def test_profile_round_trips_and_validates() -> None:
    profile = EmbeddingProfile(
        provider="openai", model="text-embedding-3-small", dimensions=512, options={"a": 1}
    )
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(profile), type=EmbeddingProfile)
    assert again == profile
    assert profile.name == "openai/text-embedding-3-small"
    assert (
        EmbeddingProfile(
            provider="p", model="m", dimensions=1, options={"b": 1, "a": 2}
        ).options_key()
        == '{"a":2,"b":1}'
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"provider": ""}, "provider is ''"),
        ({"model": 3}, "model is 3"),
        ({"dimensions": 0}, "dimensions is 0"),
        ({"dimensions": True}, "dimensions is True"),
        ({"max_batch_size": -1}, "max_batch_size is -1"),
        ({"max_input_tokens": 1.5}, "max_input_tokens is 1.5"),
    ],
)
def test_profile_rejects_bad_fields(kwargs: dict[str, object], match: str) -> None:
    fields: dict[str, object] = {"provider": "p", "model": "m", "dimensions": 8, **kwargs}
    with pytest.raises(ConfigError, match=match):
        EmbeddingProfile(**fields)  # type: ignore[arg-type]


def test_check_profile_rejects_another_model_or_width() -> None:
    bound = EmbeddingProfile(provider="local", model="a", dimensions=8)
    check_profile(bound, EmbeddingProfile(provider="local", model="a", dimensions=8))
    with pytest.raises(EmbeddingError, match="model is 'b', expected 'a'"):
        check_profile(bound, EmbeddingProfile(provider="local", model="b", dimensions=8))
    with pytest.raises(EmbeddingError, match="dimensions is 16, expected 8"):
        check_profile(bound, EmbeddingProfile(provider="local", model="a", dimensions=16))
    with pytest.raises(EmbeddingError, match="options"):
        check_profile(
            bound, EmbeddingProfile(provider="local", model="a", dimensions=8, options={"x": 1})
        )


# --- registry ---------------------------------------------------------------------------


def test_registry_names_and_default() -> None:
    registry = EmbeddingRegistry()
    with pytest.raises(ConfigError, match="registry is empty"):
        registry.get()
    first, second = CountingModel(model="one"), CountingModel(model="two")
    registry.register("one", first)
    registry.register("two", second)
    assert registry.get() is first
    assert registry.default_name == "one"
    registry.set_default("two")
    assert registry.get() is second
    assert registry.get("one") is first
    assert registry.names() == ["one", "two"] == list(registry)
    assert "two" in registry and len(registry) == 2
    assert registry.profiles()["one"].model == "one"
    third = CountingModel(model="three")
    registry.register("three", third, default=True)
    assert registry.get() is third


def test_registry_rejects_bad_input() -> None:
    registry = EmbeddingRegistry()
    registry.register("a", CountingModel())
    with pytest.raises(ConfigError, match="already registered as 'a'"):
        registry.register("a", CountingModel())
    with pytest.raises(ConfigError, match="model name is ''"):
        registry.register("", CountingModel())
    with pytest.raises(ConfigError, match="HashingEmbedder is not an EmbeddingModel"):
        registry.register("h", HashingEmbedder(4))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no embedding model named 'zz'; registered: \['a'\]"):
        registry.get("zz")
    with pytest.raises(ConfigError, match="no embedding model named 'zz'"):
        registry.set_default("zz")


def test_models_satisfy_the_protocol() -> None:
    assert isinstance(CountingModel(), EmbeddingModel)
    assert isinstance(CachedEmbedder(CountingModel()), EmbeddingModel)


# --- cache ------------------------------------------------------------------------------


def _profile(model: str = "m", dims: int = 4, **options: object) -> EmbeddingProfile:
    return EmbeddingProfile(provider="p", model=model, dimensions=dims, options=options)  # type: ignore[arg-type]


def test_cache_key_separates_every_field() -> None:
    base = EmbeddingCache.key(_profile(), "document", "t")
    variants = [
        EmbeddingCache.key(_profile(), "query", "t"),
        EmbeddingCache.key(_profile(model="n"), "document", "t"),
        EmbeddingCache.key(_profile(dims=5), "document", "t"),
        EmbeddingCache.key(_profile(prefix="x"), "document", "t"),
        EmbeddingCache.key(
            EmbeddingProfile(provider="q", model="m", dimensions=4), "document", "t"
        ),
        EmbeddingCache.key(_profile(), "document", "u"),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_cache_is_lru_by_count() -> None:
    cache = EmbeddingCache(max_entries=2)
    keys = [EmbeddingCache.key(_profile(), "document", t) for t in "abc"]
    cache.put(keys[0], np.ones(4))
    cache.put(keys[1], np.ones(4) * 2)
    assert cache.get(keys[0]) is not None  # a is now the most recent
    cache.put(keys[2], np.ones(4) * 3)  # evicts b
    assert cache.get(keys[1]) is None
    got = cache.get(keys[0])
    assert got is not None and got.tolist() == [1.0] * 4
    assert not got.flags.writeable
    stats = cache.statistics()
    assert (stats.entries, stats.hits, stats.misses, stats.evictions) == (2, 2, 1, 1)


def test_cache_is_bounded_by_bytes() -> None:
    one = 4 * 4 + 1 + 256  # vector, one-byte text, overhead
    cache = EmbeddingCache(max_entries=100, max_bytes=3 * one)
    for t in "abcdef":
        cache.put(EmbeddingCache.key(_profile(), "document", t), np.zeros(4))
    stats = cache.statistics()
    assert stats.entries == 3 and stats.bytes == 3 * one and stats.evictions == 3
    # An entry bigger than the whole budget is not stored and evicts nothing.
    cache.put(EmbeddingCache.key(_profile(dims=400), "document", "big"), np.zeros(400))
    assert cache.statistics().entries == 3


@given(
    ops=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.booleans()), max_size=60),
    max_entries=st.integers(1, 5),
)
def test_cache_matches_a_reference_lru(ops: list[tuple[str, bool]], max_entries: int) -> None:
    cache = EmbeddingCache(max_entries=max_entries)
    model: list[str] = []  # least recent first
    for text, is_put in ops:
        key = EmbeddingCache.key(_profile(), "document", text)
        if is_put:
            cache.put(key, np.full(4, ord(text), dtype=np.float32))
            if text in model:
                model.remove(text)
            model.append(text)
            del model[: max(0, len(model) - max_entries)]
        else:
            got = cache.get(key)
            if text in model:
                assert got is not None and got[0] == ord(text)
                model.remove(text)
                model.append(text)
            else:
                assert got is None
        assert len(cache) == len(model) <= max_entries


def test_disabled_cache_stores_nothing() -> None:
    for cache in (EmbeddingCache.disabled(), EmbeddingCache(max_entries=0)):
        key = EmbeddingCache.key(_profile(), "document", "a")
        cache.put(key, np.ones(4))
        assert cache.get(key) is None
        stats = cache.statistics()
        assert not stats.enabled and stats.entries == 0 and stats.misses == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"max_entries": -1}, "max_entries is -1"), ({"max_bytes": 1.5}, "max_bytes is 1.5")],
)
def test_cache_rejects_bad_bounds(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EmbeddingCache(**kwargs)  # type: ignore[arg-type]


# --- usage and prices -------------------------------------------------------------------


def test_price_cost() -> None:
    price = EmbeddingPrice(per_million_tokens=0.02)
    assert price.cost(tokens=1_000_000, characters=5) == pytest.approx(0.02)
    assert price.cost(tokens=None, characters=5) is None
    by_char = EmbeddingPrice(per_million_characters=1.0)
    assert by_char.cost(tokens=None, characters=2_000_000) == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="per_million_tokens is -1"):
        EmbeddingPrice(per_million_tokens=-1)
    with pytest.raises(ConfigError, match="per_million_characters is nan"):
        EmbeddingPrice(per_million_characters=float("nan"))


def test_usage_log_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="max_records is -1"):
        EmbeddingUsageLog(max_records=-1)
    with pytest.raises(ConfigError, match=r"pricing\['m'\] is a float"):
        EmbeddingUsageLog(pricing={"m": 0.1})  # type: ignore[dict-item]


def test_usage_records_are_bounded_and_totals_are_not() -> None:
    seen: list[EmbeddingCall] = []
    log = EmbeddingUsageLog(max_records=2, listener=seen.append)
    for i in range(5):
        log.record(
            EmbeddingCall(
                provider="p", model="m", input_type="document", texts=2, cache_hits=1,
                texts_embedded=1, characters=10 + i, tokens=3, truncated=0, batches=1,
                dimensions=4, seconds=0.5, cost=0.25,
            )
        )  # fmt: skip
    assert len(log.records()) == 2 and [r.characters for r in log.records()] == [13, 14]
    assert len(seen) == 5
    totals = log.totals()
    assert totals == EmbeddingUsageTotals(
        calls=5, texts=10, cache_hits=5, texts_embedded=5, characters=60, tokens=15,
        batches=5, seconds=2.5, cost=1.25,
    )  # fmt: skip
    assert log.totals_by_model() == {"p/m": totals}


# --- CachedEmbedder ---------------------------------------------------------------------


async def test_hits_are_never_provider_usage() -> None:
    model = CountingModel()
    usage = EmbeddingUsageLog(pricing={"test/counting": EmbeddingPrice(per_million_tokens=1e6)})
    embedder = CachedEmbedder(model, EmbeddingCache(), usage)
    with trio.fail_after(5):
        first = await embedder.embed_documents(["a b", "c", "a b"])
        second = await embedder.embed_documents(["c", "a b", "d e f"])
    # Repeated texts within a call go to the model once; cached ones not at all.
    assert model.calls == [(["a b", "c"], "document"), (["d e f"], "document")]
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_array_equal(first[1], second[0])
    calls = usage.records()
    assert [(c.texts, c.cache_hits, c.texts_embedded) for c in calls] == [(3, 0, 2), (3, 2, 1)]
    assert [c.tokens for c in calls] == [3, 3]
    assert [c.characters for c in calls] == [4, 5]
    assert [c.cost for c in calls] == [pytest.approx(3.0), pytest.approx(3.0)]
    totals = usage.totals()
    assert (totals.texts, totals.cache_hits, totals.texts_embedded, totals.tokens) == (6, 2, 3, 6)
    assert embedder.cache.statistics().hits == 2


async def test_an_all_hit_call_costs_nothing() -> None:
    model = CountingModel()
    usage = EmbeddingUsageLog(pricing={"counting": EmbeddingPrice(per_million_tokens=5.0)})
    embedder = CachedEmbedder(model, EmbeddingCache(), usage)
    with trio.fail_after(5):
        await embedder.embed_documents(["x"])
        await embedder.embed_documents(["x", "x"])
    last = usage.records()[-1]
    assert (last.cache_hits, last.texts_embedded, last.batches, last.characters) == (2, 0, 0, 0)
    assert last.cost == 0.0 and last.tokens is None
    assert len(model.calls) == 1


async def test_queries_and_documents_are_cached_apart() -> None:
    model = CountingModel()
    embedder = CachedEmbedder(model, EmbeddingCache())
    with trio.fail_after(5):
        doc = (await embedder.embed_documents(["same text"]))[0]
        query = await embedder.embed_query("same text")
        query_again = await embedder.embed_query("same text")
    np.testing.assert_array_equal(query, doc * 2.0)
    np.testing.assert_array_equal(query, query_again)
    assert [c[1] for c in model.calls] == ["document", "query"]


async def test_no_cache_means_every_call_reaches_the_model() -> None:
    model = CountingModel()
    embedder = CachedEmbedder(model)
    with trio.fail_after(5):
        await embedder.embed_documents(["a"])
        await embedder.embed_documents(["a"])
    assert len(model.calls) == 2
    assert embedder.usage.totals().cache_hits == 0


async def test_plain_models_work_and_report_no_tokens() -> None:
    model = PlainModel()
    usage = EmbeddingUsageLog(pricing={"plain": EmbeddingPrice(per_million_tokens=1.0)})
    embedder = CachedEmbedder(model, EmbeddingCache(), usage)
    with trio.fail_after(5):
        docs = await embedder.embed_documents(["a", "b"])
        await embedder.embed_query("a")
    assert docs.shape == (2, DIMS) and docs.dtype == np.float32
    assert (model.document_calls, model.query_calls) == (1, 1)
    totals = usage.totals()
    assert totals.calls_without_tokens == 2 and totals.unpriced_calls == 2


async def test_failures_propagate_are_recorded_and_cache_nothing() -> None:
    model = CountingModel()
    usage = EmbeddingUsageLog()
    cache = EmbeddingCache()
    embedder = CachedEmbedder(model, cache, usage)
    model.fail_with = RuntimeError("provider down")
    with trio.fail_after(5), pytest.raises(RuntimeError, match="provider down"):
        await embedder.embed_documents(["a"])
    model.fail_with = None
    model.wrong_count = True
    with trio.fail_after(5), pytest.raises(EmbeddingError, match=r"shape \(1, 16\) for 2 texts"):
        await embedder.embed_documents(["a", "b"])
    assert len(cache) == 0
    assert [r.error for r in usage.records()] == ["RuntimeError", "EmbeddingError"]
    assert usage.totals().failed_calls == 2 and usage.totals().tokens == 0


async def test_cancelled_calls_record_nothing() -> None:
    class Slow(CountingModel):
        async def embed_with_report(
            self, texts: Sequence[str], input_type: str
        ) -> EmbeddingResult:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    embedder = CachedEmbedder(Slow(), EmbeddingCache())
    with trio.fail_after(5):
        with trio.move_on_after(0.01) as scope:
            await embedder.embed_documents(["a"])
    assert scope.cancelled_caught
    assert embedder.usage.records() == [] and len(embedder.cache) == 0


async def test_input_validation() -> None:
    embedder = CachedEmbedder(CountingModel())
    with trio.fail_after(5):
        with pytest.raises(TypeError, match="texts is a str"):
            await embedder.embed_documents("abc")
        with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
            await embedder.embed_documents(["a", 1])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="query is a list"):
            await embedder.embed_query(["a"])  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="input_type is 'passage'"):
            await embedder.embed(["a"], "passage")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is not an EmbeddingModel"):
        CachedEmbedder(HashingEmbedder(4))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cache is a dict"):
        CachedEmbedder(CountingModel(), {})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="usage is a list"):
        CachedEmbedder(CountingModel(), None, [])  # type: ignore[arg-type]


async def test_cached_embedder_plugs_into_open_store() -> None:
    model = CountingModel()
    embedder = CachedEmbedder(model, EmbeddingCache())
    config = VectorStoreConfig(max_entries=8, dimensions=DIMS, max_entry_bytes=1024)
    turns = [UnifiedMessage.user("apples and pears"), UnifiedMessage.user("trains and buses")]
    with trio.fail_after(10):
        async with open_store(config, embedder) as store:
            await store.store_turns(turns)
            report = await store.retrieve("buses", 1)
            model.fail_with = RuntimeError("boom")
            with pytest.raises(EmbedderError) as info:
                await store.store_turns([UnifiedMessage.user("new")])
    assert report.turns[0].message == turns[1]
    assert isinstance(info.value.error, RuntimeError)
    assert embedder.usage.totals().texts_embedded == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"batch_size": 0}, "batch_size is 0"), ({"query_prompt": 3}, "query_prompt is 3")],
)
def test_sentence_transformer_adapter_validates_before_importing(
    kwargs: dict[str, object], match: str
) -> None:
    from actors import SentenceTransformerEmbedder

    with pytest.raises(ConfigError, match=match):
        SentenceTransformerEmbedder("any-model", **kwargs)  # type: ignore[arg-type]
