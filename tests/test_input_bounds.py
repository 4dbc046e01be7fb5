"""Hostile read arguments (design §3: any k, filter depth, only bugs poison) through
the public entry points.

Every case runs on the in-memory store (inline scans, and every scan in threads), on
PostgreSQL, and where it applies through ``open_memory``'s ``retrieve``. Each rejected
input must raise a ``VectorStoreError`` naming what was wrong, and leave the store
usable: every test ends with a normal read that must succeed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import numpy as np
import pytest
import trio
import trio.testing

from actors import HashingEmbedder, open_memory, open_store
from protocol import (
    ConfigError,
    Document,
    EmbeddingError,
    Filter,
    FilterError,
    JsonError,
    MemoryConfig,
    SearchRequest,
    StoreUnavailable,
    UnifiedMessage,
    VectorStoreConfig,
    parse_filter,
)
from protocol._filters import matches
from protocol.filters import And, Eq, Not, Or

# protocol._filters' documented limits (test_the_limits_are_documented pins them).
MAX_FILTER_DEPTH = 32
MAX_FILTER_NODES = 10_000

DIM = 8
TIMEOUT = 30
CAP = 16
TEXTS = [f"note {i} about apples and pears" for i in range(6)]
HUGE = [2**63, 2**64, 2**200, np.uint64(2**64 - 1)]
BACKENDS = ["memory", "memory-threads", "pg"]


def cfg() -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=CAP, dimensions=DIM, max_entry_bytes=512)


@pytest.fixture(autouse=True)
def _pg_ready(request: pytest.FixtureRequest) -> None:
    """A pg case gets its store's fixtures at setup: without the pg extra it skips there,
    naming the extra (a skip raised inside the test's trio loop loses its reason)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "pg":
        request.getfixturevalue("pg_open")


@asynccontextmanager
async def opened(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A store of ``backend`` holding TEXTS, each with metadata ``{"i": i}``."""
    embedder = HashingEmbedder(DIM)
    if backend == "pg":
        manager: Any = request.getfixturevalue("pg_open")(cfg(), embedder, retries=0)
    else:
        threshold = 0 if backend == "memory-threads" else 2**24
        manager = open_store(cfg(), embedder, thread_scan_threshold=threshold)
    async with manager as store:
        for i, text in enumerate(TEXTS):
            await store.store_turns([UnifiedMessage.user(text)], metadata={"i": i})
        yield store


async def still_usable(store: Any) -> None:
    """The store answers a normal read after whatever was refused."""
    report = await store.retrieve("apples", 2)
    assert len(report.turns) == 2
    assert not store.statistics().poisoned


# --- k and fetch_k of any size ----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_any_k_means_at_most_that_many(backend: str, request: pytest.FixtureRequest) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            vector = np.ones(DIM)
            for k in [*HUGE, np.int64(3), np.int8(2)]:
                want = min(int(k), len(TEXTS))
                assert len((await store.retrieve("apples", k)).turns) == want
                assert len((await store.retrieve_in("memory-default", "pears", k)).turns) == want
                assert len((await store.retrieve_embedding(vector, k)).turns) == want
                assert len(await store.search(SearchRequest(query="apples", k=k))) == want
                threshold = SearchRequest(query="apples", k=k, score_threshold=-1.0)
                assert len(await store.search(threshold)) == want
                for kind in ("mmr", "hybrid"):
                    deep = max(int(k), 2**64)
                    search = SearchRequest(query="apples", k=k, fetch_k=deep, kind=kind)
                    assert len(await store.search(search)) == want
                filtered = SearchRequest(vector=vector.tolist(), k=k, filter={"i": {"$gte": 2}})
                assert len(await store.search(filtered)) == min(int(k), 4)
            await still_usable(store)


@pytest.mark.parametrize("kind", ["mmr", "hybrid"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_huge_fetch_k_with_a_small_k(
    backend: str, kind: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            for fetch_k in HUGE:
                search = SearchRequest(query="apples", k=2, fetch_k=fetch_k, kind=kind)
                assert len(await store.search(search)) == 2
            await still_usable(store)


async def test_memory_retrieve_takes_any_k_and_its_events_stay_loggable() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=cfg(), memory=MemoryConfig()) as memory:
            for text in TEXTS:
                await memory.remember(text)
            async with memory.events() as events:
                for k in HUGE:
                    assert len((await memory.retrieve("apples", k=k)).turns) == len(TEXTS)
                await trio.testing.wait_all_tasks_blocked()
                seen = []
                while True:
                    try:
                        seen.append(events.receive_nowait())
                    except trio.WouldBlock:
                        break
            # Events (and actor messages) are logged as msgpack, which stops at 64 bits.
            assert {type(e).__name__ for e in seen} >= {"RetrieverStarted", "Recalled"}
            for event in seen:
                msgspec.msgpack.encode(event)
                if hasattr(event, "k"):
                    assert event.k == CAP
            assert len((await memory.retrieve("apples", k=2)).turns) == 2


@pytest.mark.parametrize("backend", ["memory", "memory-threads"])
async def test_read_events_report_a_k_that_msgpack_can_log(
    backend: str, request: pytest.FixtureRequest
) -> None:
    events: list[Any] = []
    threshold = 0 if backend == "memory-threads" else 2**24
    with trio.fail_after(TIMEOUT):
        async with open_store(
            cfg(), HashingEmbedder(DIM), thread_scan_threshold=threshold, on_event=events.append
        ) as store:
            await store.store_turns([UnifiedMessage.user(t) for t in TEXTS])
            await store.retrieve("apples", 2**200)
            await store.retrieve_embedding(np.ones(DIM), 2**64)
            await store.search(SearchRequest(query="apples", k=2**70, fetch_k=2**70, kind="mmr"))
            searched = [e for e in events if type(e).__name__ == "StoreSearched"]
            assert [e.k for e in searched] == [CAP, CAP, CAP]
            for event in events:
                msgspec.msgpack.encode(event)
            await still_usable(store)


# --- filters: the depth and size limits hold for every form -----------------------------


def not_chain(depth: int) -> Filter:
    """A tree ``depth`` levels deep: ``Not(Not(...Eq...))``."""
    node: Filter = Eq(key="i", value=1)
    for _ in range(depth - 1):
        node = Not(filter=node)
    return node


def nested_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> dict[str, Any]:
    """A flat dict ``{"leaf": 1}`` under ``depth`` levels of ``{"down": ...}``."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"down": value}
    return value


DEEP = 900


def test_the_limits_are_documented() -> None:
    import protocol._filters as filters

    assert (filters.MAX_FILTER_DEPTH, filters.MAX_FILTER_NODES) == (32, 10_000)
    assert "32" in (filters.__doc__ or "") and "10,000" in (filters.__doc__ or "")


def test_every_filter_form_is_depth_limited() -> None:
    too_deep = "nested deeper than the limit of 32 levels"
    assert parse_filter(not_chain(MAX_FILTER_DEPTH)) == not_chain(MAX_FILTER_DEPTH)
    for spec in (
        not_chain(MAX_FILTER_DEPTH + 1),
        not_chain(DEEP),
        {"$or": [not_chain(DEEP), {"i": 1}]},  # a tree inside a dict
        {"$and": [{"i": 1}, {"$not": not_chain(MAX_FILTER_DEPTH)}]},
    ):
        with pytest.raises(FilterError, match=too_deep):
            parse_filter(spec)
        with pytest.raises(FilterError, match=too_deep):
            SearchRequest(query="q", filter=spec)  # type: ignore[arg-type]
        if not isinstance(spec, dict):  # the reference evaluator checks a tree too
            with pytest.raises(FilterError, match=too_deep):
                matches(spec, {"i": 1})
    # A field-level $not chain is a dict form too.
    field: dict[str, Any] = {"$eq": 1}
    for _ in range(DEEP):
        field = {"$not": field}
    with pytest.raises(FilterError, match=too_deep):
        parse_filter({"i": field})
    # A tree decoded with its request: msgspec reports the FilterError as the reason.
    tree = msgspec.json.encode(not_chain(DEEP)).decode()
    for blob in (f'{{"query": "q", "filter": {tree}}}',):
        with pytest.raises(msgspec.ValidationError, match=too_deep):
            msgspec.json.decode(blob, type=SearchRequest)
    packed = msgspec.msgpack.encode({"query": "q", "filter": not_chain(DEEP)})
    with pytest.raises(msgspec.ValidationError, match=too_deep):
        msgspec.msgpack.decode(packed, type=SearchRequest)


def test_filter_size_is_limited_before_any_backend() -> None:
    wide = {"$or": [{"i": j} for j in range(40_000)]}
    with pytest.raises(FilterError, match=r"more than the limit of 10000 nodes"):
        SearchRequest(query="q", filter=wide)
    with pytest.raises(FilterError, match=r"more than 10000 nodes"):
        parse_filter({"$and": [{"$or": [{"i": j} for j in range(5_000)]}] * 3})
    many_keys = {f"k{j}": j for j in range(MAX_FILTER_NODES + 1)}
    with pytest.raises(FilterError, match=r"10000"):
        parse_filter(many_keys)


def test_deep_operands_are_a_filter_error() -> None:
    deep = nested_list(100_000)
    for spec in (
        {"i": {"$eq": deep}},
        {"i": {"$in": deep}},
        {"i": {"$in": [deep]}},
        {"i": {"$nin": [deep]}},
        {"i": deep},
        {"i": {"$gt": deep}},
        {"i": {"$exists": deep}},
        {"$or": deep},
    ):
        with pytest.raises(FilterError, match="list"):
            parse_filter(spec)


async def search_refused(store: Any, request: SearchRequest, match: str) -> None:
    with pytest.raises(FilterError, match=match):
        await store.search(request)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_tree_grown_after_its_request_is_refused_by_the_store(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            # A tree's child lists are mutable: each backend checks again, before it
            # embeds the query (this embedder's output would be an EmbeddingError).
            store._actor.embedder.embedder = Returning(None)
            grown = And(filters=[Eq(key="i", value=1)])
            req = SearchRequest(query="apples", filter=grown)
            grown.filters.append(not_chain(DEEP))
            await search_refused(store, req, "nested deeper than the limit of 32")
            cycle = Or(filters=[Eq(key="i", value=1)])
            req = SearchRequest(query="apples", filter=cycle)
            cycle.filters.append(cycle)
            await search_refused(store, req, "nested deeper than the limit of 32")
            wide = Or(filters=[])
            req = SearchRequest(query="apples", filter=wide, kind="hybrid")
            wide.filters.extend(Eq(key="i", value=j) for j in range(40_000))
            await search_refused(store, req, "10000")
            store._actor.embedder.embedder = HashingEmbedder(DIM)
            await still_usable(store)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_filters_at_the_limits_work_on_every_backend(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            vector = np.ones(DIM).tolist()
            # The widest filter allowed: one $or over 9,999 leaves, 10,000 nodes.
            widest = {"$or": [{"i": j} for j in range(1, MAX_FILTER_NODES)]}
            for kind in ("similarity", "hybrid"):
                hits = await store.search(
                    SearchRequest(query="apples", k=CAP, filter=widest, kind=kind)  # type: ignore[arg-type]
                )
                assert sorted(h.document.metadata["i"] for h in hits) == [1, 2, 3, 4, 5]
            # The deepest: 32 levels (31 Nots around a leaf: an odd count negates it).
            deepest = SearchRequest(vector=vector, k=CAP, filter=not_chain(MAX_FILTER_DEPTH))
            assert sorted(h.document.metadata["i"] for h in await store.search(deepest)) == [
                0,
                2,
                3,
                4,
                5,
            ]
            huge = 10**5000  # past what int() prints, but a valid operand
            for spec, want in (({"i": huge}, []), ({"i": {"$lt": huge}}, [0, 1, 2, 3, 4, 5])):
                hits = await store.search(SearchRequest(vector=vector, k=CAP, filter=spec))
                assert sorted(h.document.metadata["i"] for h in hits) == want
            await still_usable(store)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_hostile_metadata_is_refused_not_a_crash(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            turn = [UnifiedMessage.user("pears")]
            with pytest.raises(JsonError, match="nested deeper than 64"):
                await store.store_turns(turn, metadata={"a": nested_list(100_000)})
            # Dicts whose leaf's item is one level too deep: a flat dict's fast path once
            # skipped the limit (one level less is accepted: test_write_fast_paths.py).
            with pytest.raises(JsonError, match="nested deeper than 64"):
                await store.store_turns(turn, metadata={"a": nested_dict(63)})
            with pytest.raises(JsonError, match="nested deeper than 64"):
                await store.add_documents([Document(text="x", metadata={"a": nested_dict(63)})])
            # An int past what Python prints: the error describes it instead.
            with pytest.raises(JsonError, match=r"an int of \d+ bits"):
                await store.store_turns(turn, metadata={"a": 10**5000})
            with pytest.raises(JsonError, match=r"an int of \d+ bits"):
                await store.add_documents([Document(text="x", metadata={"a": -(10**5000)})])
            assert len(store) == len(TEXTS)
            await still_usable(store)


# --- vectors: one check everywhere -------------------------------------------------------

ONES = [1.0] * DIM


def bad_vectors() -> list[tuple[str, object, str]]:
    """(label, vector, what the error must say) for each shape of bad vector."""
    masked = np.ma.masked_array(np.ones(DIM), mask=[True] + [False] * (DIM - 1))
    return [
        ("complex", np.ones(DIM, dtype=np.complex128), "complex128"),
        ("bool array", np.ones(DIM, dtype=np.bool_), "dtype bool"),
        ("str array", np.array(["1.5"] * DIM), "<U3"),
        ("object array", np.array([1.0] * DIM, dtype=object), "dtype object"),
        ("masked", masked, "masked array"),
        ("unmasked masked", np.ma.masked_array(np.ones(DIM)), "masked array"),
        ("0-d array", np.array(1.0), "shape ()"),
        ("numpy scalar", np.float32(1.0), "shape ()"),
        ("python float", 1.0, "float"),
        ("2-D", np.ones((1, DIM)), "shape (1, 8)"),
        ("list of lists", [ONES], "list"),
        ("list of bools", [True] * DIM, "bool"),
        ("bool inside", [1.0] * (DIM - 1) + [True], "bool"),
        ("list of str", ["1.0"] * DIM, "str"),
        ("huge int", [10**400] + [0.0] * (DIM - 1), "too large for float64"),
        ("complex scalar", [1j] + [0.0] * (DIM - 1), "complex"),
        ("numpy complex scalar", [np.complex64(1)] + [0.0] * (DIM - 1), "complex64"),
        ("inf", [np.inf] + [0.0] * (DIM - 1), "inf"),
        ("nan float16", np.array([np.nan] * DIM, dtype=np.float16), "nan"),
        ("str", "1" * DIM, "str"),
        ("narrow", np.ones(DIM - 1), "7"),
    ]


GOOD_VECTORS = [
    np.ones(DIM, dtype=np.float16),
    np.ones(DIM, dtype=np.float32),
    np.ones(DIM, dtype=np.int8),
    np.full(DIM, 2**40, dtype=np.uint64),
    np.ones(DIM, dtype=np.longdouble),
    [1] * DIM,
    [np.float32(1.0)] * DIM,
    [np.int64(2**40)] * (DIM - 1) + [2**40],
    tuple(ONES),
]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_vectors_are_checked_alike_everywhere(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            for label, vector, needle in bad_vectors():
                with pytest.raises(EmbeddingError, match=re.escape(needle)) as info:
                    await store.retrieve_embedding(vector, 2)
                assert "query embedding" in str(info.value), label
                if label == "narrow":  # only the store knows its width
                    with pytest.raises(EmbeddingError, match="has 7 floats; this store takes 8"):
                        await store.search(SearchRequest(vector=vector, k=2))  # type: ignore[arg-type]
                    continue
                with pytest.raises(EmbeddingError, match=re.escape(needle)):
                    SearchRequest(vector=vector, k=2)  # type: ignore[arg-type]
            # Every accepted form ranks the same entries, on both paths.
            want = [t.id for t in (await store.retrieve_embedding(np.ones(DIM), 3)).turns]
            for vector in GOOD_VECTORS:
                report = await store.retrieve_embedding(vector, 3)
                assert [t.id for t in report.turns] == want, vector
                hits = await store.search(SearchRequest(vector=vector, k=3))  # type: ignore[arg-type]
                assert [h.document.id for h in hits] == want, vector
            await still_usable(store)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_finite_vector_whose_square_overflows_is_an_embedding_error(
    backend: str, request: pytest.FixtureRequest
) -> None:
    # Only the store knows: SearchRequest checks components, not the norm. The in-memory
    # fast path's dot raised a RuntimeWarning here (an error under -W error).
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            for vector in (np.full(DIM, 1e300), np.full(DIM, 1e20, dtype=np.float32)):
                with pytest.raises(EmbeddingError, match="overflows float32"):
                    await store.retrieve_embedding(vector, 2)
                with pytest.raises(EmbeddingError, match="overflows float32"):
                    await store.search(SearchRequest(vector=vector.tolist(), k=2))
            await still_usable(store)


class Returning:
    """A sync embedder that returns ``vector`` for every text (batched or not)."""

    def __init__(self, vector: object) -> None:
        self.vector = vector

    def embed(self, text: str) -> object:
        return self.vector

    def embed_batch(self, texts: list[str]) -> object:
        if isinstance(self.vector, np.ndarray) and self.vector.ndim == 1:
            return np.stack([self.vector] * len(texts))
        return [self.vector] * len(texts)


@pytest.mark.parametrize("backend", ["memory", "pg"])
async def test_embedder_output_is_checked_like_a_query(
    backend: str, request: pytest.FixtureRequest
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened(backend, request) as store:
            for label, vector, needle in bad_vectors():
                if label in ("0-d array", "numpy scalar", "python float", "2-D", "str"):
                    continue  # as a batch these have other shapes; covered below
                store._actor.embedder.embedder = Returning(vector)
                with pytest.raises(EmbeddingError, match=re.escape(needle)):
                    await store.store_turns([UnifiedMessage.user("x"), UnifiedMessage.user("y")])
                with pytest.raises(EmbeddingError, match=re.escape(needle)):
                    await store.retrieve("anything", 2)
            for batch in (np.ones((2, DIM), dtype=np.complex64), np.ones((2, DIM), dtype=bool)):
                store._actor.embedder.embedder = Returning(None)
                store._actor.embedder.embedder.embed_batch = lambda texts, b=batch: b  # type: ignore[method-assign]
                with pytest.raises(EmbeddingError, match="dtype"):
                    await store.store_turns([UnifiedMessage.user("x"), UnifiedMessage.user("y")])
            store._actor.embedder.embedder = HashingEmbedder(DIM)
            assert len(store) == len(TEXTS)
            await still_usable(store)


# --- pg: a read cut off by the server says what it was doing ----------------------------


def kill_at_commit(store: Any, dsn: str, name: str, times: int) -> list[int]:
    """Make the next ``times`` calls of ``store._actor.reads.<name>`` lose their
    connection just after their statements ran, so that their COMMIT fails: another
    connection terminates the backend, as a server crash or restart would."""
    import psycopg

    reads = store._actor.reads
    original = getattr(reads, name)
    killed: list[int] = []

    def wrapped(conn: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(conn, *args, **kwargs)
        if len(killed) < times:
            pid = conn.info.backend_pid
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            killed.append(pid)
        return result

    setattr(reads, name, wrapped)
    return killed


async def test_pg_read_cut_off_at_commit_is_retried_and_named(
    request: pytest.FixtureRequest,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with opened("pg", request) as store:
            dsn = request.getfixturevalue("pg_dsn")
            store._actor.retries = 0
            kill_at_commit(store, dsn, "retrieve", times=1)
            with pytest.raises(StoreUnavailable) as info:
                await store.retrieve("apples", 2)
            message = str(info.value)
            assert message.startswith("retrieve failed after 1 attempt(s)"), message
            assert "committing" not in message
            kill_at_commit(store, dsn, "dense", times=1)
            with pytest.raises(StoreUnavailable, match=r"^search failed after 1 attempt"):
                await store.search(SearchRequest(query="apples", k=2))
            # With retries, the read runs again on a new connection and answers.
            store._actor.retries = 2
            store._actor.retry_delay = 0.001
            killed = kill_at_commit(store, dsn, "retrieve", times=1)
            assert len((await store.retrieve("apples", 3)).turns) == 3
            assert len(killed) == 1
            await still_usable(store)


# --- huge ints in the other numeric settings: a ConfigError, never an OverflowError -------


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: SearchRequest(query="q", rrf_k=10**400), "rrf_k is"),
        (lambda: SearchRequest(query="q", lambda_mult=10**400), "lambda_mult is"),
        (lambda: SearchRequest(query="q", score_threshold=-(10**400)), "score_threshold is"),
        (lambda: SearchRequest(query="q", weights={"bm25": 10**5000}), "an int of"),
        (
            lambda: VectorStoreConfig(max_entries=10**5000, dimensions=8, max_entry_bytes=1),
            "arena",
        ),
        (
            lambda: VectorStoreConfig(max_entries=-(10**5000), dimensions=8, max_entry_bytes=1),
            "an int of",
        ),
    ],
)
def test_huge_ints_in_settings_are_a_config_error(build: Any, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build()


async def test_a_huge_top_k_is_clamped_like_k() -> None:
    with trio.fail_after(TIMEOUT):
        config = MemoryConfig(top_k=2**70)
        async with open_memory(store=cfg(), memory=config) as memory:
            for text in TEXTS:
                await memory.remember(text)
            async with memory.events() as events:
                assert len((await memory.retrieve("apples")).turns) == len(TEXTS)
                await trio.testing.wait_all_tasks_blocked()
                started = events.receive_nowait()
            assert type(started).__name__ == "RetrieverStarted"
            assert started.k == CAP  # type: ignore[union-attr]
