"""TrioRecallStore through LangGraph's own API, sync and async, in memory and on pg.

Every op kind goes through ``BaseStore``'s public methods (``put``/``aput``, ``get``,
``search``, ``delete``, ``list_namespaces``) and through ``batch``/``abatch``; a sync
call is made from the test's thread, an async one from a fresh asyncio loop, as an
application would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

import trio
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from langgraph_support import DIMS, backend, hashing_index

from actors import HashingEmbedder
from actors.integrations._langgraph_ops import item_id
from actors.integrations.langgraph import TrioRecallStore
from protocol import ConfigError, Document, EntryTooLarge, FilterError, JsonError

__all__ = ["backend"]  # the fixture
Caller = Callable[..., Any]


@pytest.fixture
def make_store(backend: dict[str, Any]) -> Iterator[Callable[..., TrioRecallStore]]:
    """A factory of open stores on the backend under test, all closed afterwards."""
    opened: list[TrioRecallStore] = []

    def make(**kw: Any) -> TrioRecallStore:
        store = TrioRecallStore(**{"max_entries": 256, **backend, **kw})
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Caller:
    """``call(store, "put", ...)``: the sync method, or its async twin awaited in a loop."""

    def sync(store: TrioRecallStore, method: str, *args: Any, **kw: Any) -> Any:
        return getattr(store, method)(*args, **kw)

    def run_async(store: TrioRecallStore, method: str, *args: Any, **kw: Any) -> Any:
        async def main() -> Any:
            async with asyncio.timeout(60):
                return await getattr(store, "a" + method)(*args, **kw)

        return asyncio.run(main())

    return sync if request.param == "sync" else run_async


def test_put_get_replace_delete(make_store: Callable[..., TrioRecallStore], call: Caller) -> None:
    store = make_store(index=hashing_index())
    assert call(store, "get", ("users", "1"), "prefs") is None
    call(store, "put", ("users", "1"), "prefs", {"text": "dark theme", "n": 1})
    first = call(store, "get", ("users", "1"), "prefs")
    assert first.value == {"text": "dark theme", "n": 1}
    assert (first.namespace, first.key) == (("users", "1"), "prefs")
    assert first.created_at == first.updated_at
    assert first.created_at.tzinfo is not None
    call(store, "put", ("users", "1"), "prefs", {"text": "light theme"})  # put replaces
    second = call(store, "get", ("users", "1"), "prefs")
    assert second.value == {"text": "light theme"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    call(store, "delete", ("users", "1"), "prefs")
    assert call(store, "get", ("users", "1"), "prefs") is None
    call(store, "delete", ("users", "1"), "never-there")  # a missing delete is a no-op


def test_search_by_query_ranks_and_lists_unindexed_items_after(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(index=hashing_index())
    ns = ("docs",)
    call(store, "put", ns, "py", {"text": "python tutorial for beginners"})
    call(store, "put", ns, "ts", {"text": "typescript guide"})
    call(store, "put", ns, "raw", {"text": "python tutorial"}, index=False)
    call(store, "put", ns, "other", {"title": "no text field"})
    hits = call(store, "search", ns, query="python tutorial")
    assert [h.key for h in hits[:2]] == ["py", "ts"]
    assert hits[0].score > 0.5
    assert hits[1].score == pytest.approx(0.0, abs=1e-6)
    assert {h.key for h in hits[2:]} == {"raw", "other"}
    assert [h.score for h in hits[2:]] == [None, None]
    # Paging walks the same order: ranked items, then the unranked ones.
    paged = [
        call(store, "search", ns, query="python tutorial", limit=1, offset=i) for i in range(5)
    ]
    assert [p[0].key for p in paged[:4]] == [h.key for h in hits]
    assert paged[4] == []
    assert call(store, "search", ns, query="python", limit=0) == []


def test_search_without_query_lists_newest_first_within_the_prefix(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store()  # no index: a query is ignored, as by InMemoryStore
    for i, ns in enumerate([("docs",), ("docs", "a"), ("docsx",), ("doc",), ("docs", "b", "c")]):
        call(store, "put", ns, f"k{i}", {"i": i})
    hits = call(store, "search", ("docs",), query="anything")
    assert [(h.namespace, h.key) for h in hits] == [
        (("docs", "b", "c"), "k4"),
        (("docs", "a"), "k1"),
        (("docs",), "k0"),
    ]
    assert all(h.score is None for h in hits)
    assert [h.key for h in call(store, "search", ("docs", "a"))] == ["k1"]
    assert len(call(store, "search", ())) == 5
    assert [h.key for h in call(store, "search", (), limit=2, offset=1)] == ["k3", "k2"]


def test_filters_translate_to_the_store_or_run_after_it(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(index=hashing_index())
    ns = ("items",)
    rows = [
        {"text": "red apple", "color": "red", "score": 4.5, "meta": {"tier": 1}, "tags": ["a"]},
        {"text": "red car", "color": "red", "score": 3, "meta": {"tier": 2}, "tags": ["a", "b"]},
        {"text": "blue sky", "color": "blue", "score": 5, "meta": {"tier": 1}},
        {"text": "green", "color": "green", "score": "high"},
    ]
    for i, row in enumerate(rows):
        call(store, "put", ns, f"k{i}", row)

    def keys(**kw: Any) -> set[str]:
        return {h.key for h in call(store, "search", ns, **kw)}

    assert keys(filter={"color": "red"}) == {"k0", "k1"}
    assert keys(filter={"color": {"$eq": "red"}, "score": {"$gt": 4}}) == {"k0"}
    assert keys(filter={"color": {"$ne": "red"}}) == {"k2", "k3"}
    assert keys(filter={"score": {"$gte": 4.5}}) == {"k0", "k2"}  # "high" is not a number
    assert keys(filter={"score": {"$lt": 4.5}}) == {"k1"}
    assert keys(filter={"score": {"$lte": 4.5, "$gte": 3}}) == {"k0", "k1"}
    assert keys(filter={"meta": {"tier": 1}}) == {"k0", "k2"}  # nested: after the scan
    assert keys(filter={"tags": ["a", "b"]}) == {"k1"}
    assert keys(filter={"missing": {"$ne": 1}}) == {"k0", "k1", "k2", "k3"}
    hits = call(store, "search", ns, query="red apple", filter={"meta": {"tier": 1}}, limit=1)
    assert [h.key for h in hits] == ["k0"]
    with pytest.raises(FilterError, match=r"\$regex"):
        call(store, "search", ns, filter={"color": {"$regex": "r.*"}})


def test_list_namespaces(make_store: Callable[..., TrioRecallStore], call: Caller) -> None:
    store = make_store()
    spaces = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    spaces += [("a", "c", "f"), ("x", "v1"), ("y", "z", "v1")]
    for ns in spaces:
        call(store, "put", ns, "k", {"x": 1})
    assert call(store, "list_namespaces") == sorted(spaces)
    assert call(store, "list_namespaces", prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert call(store, "list_namespaces", suffix=("v1",)) == [("x", "v1"), ("y", "z", "v1")]
    assert call(store, "list_namespaces", prefix=("a", "*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert call(store, "list_namespaces", prefix=("a",), suffix=("*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert call(store, "list_namespaces", max_depth=1) == [("a",), ("x",), ("y",)]
    assert call(store, "list_namespaces", limit=2, offset=1) == sorted(spaces)[1:3]
    assert call(store, "list_namespaces", prefix=("nope",)) == []


def test_a_batch_reads_before_it_writes_and_the_last_put_wins(
    make_store: Callable[..., TrioRecallStore],
) -> None:
    store = make_store(index=hashing_index())
    ns = ("b",)
    batch = [
        PutOp(ns, "k", {"text": "one"}),
        GetOp(ns, "k"),
        SearchOp(ns),
        ListNamespacesOp(),
        PutOp(ns, "k", {"text": "two"}),
        PutOp(ns, "gone", {"text": "x"}),
        PutOp(ns, "gone", None),
    ]
    assert store.batch(batch) == [None, None, [], [], None, None, None]
    assert store.get(ns, "k").value == {"text": "two"}
    assert store.get(ns, "gone") is None
    results = asyncio.run(store.abatch([GetOp(ns, "k"), GetOp(ns, "none"), GetOp((), "k")]))
    assert [r and r.value for r in results] == [{"text": "two"}, None, None]


def test_namespace_parts_holding_the_separator_never_alias(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(index=hashing_index())
    spaces = [("a/b",), ("a", "b"), ("a%002Fb",), ("a", "b/"), ("a", "b", ""), ("a\x00b",)]
    spaces += [("a\ud83d",), ("a",), ("a", "b.c"), ("a.b", "c")]
    # Through batch: LangGraph's public methods refuse some of these labels ("", ".",
    # NUL), but batch is what every store must accept, and no label may alias another.
    call(store, "batch", [PutOp(ns, "k", {"text": "x", "ns": list(ns)}) for ns in spaces])
    call(store, "batch", [PutOp(("a",), "b/k", {"text": "key with a slash"})])
    found = call(store, "batch", [GetOp(ns, "k") for ns in spaces])
    assert [(i.namespace, i.value) for i in found] == [
        (ns, {"text": "x", "ns": list(ns)}) for ns in spaces
    ]
    assert call(store, "get", ("a",), "b/k").value == {"text": "key with a slash"}
    assert call(store, "get", ("a", "b"), "/k") is None
    assert call(store, "list_namespaces") == sorted(spaces)
    under_a = {(h.namespace, h.key) for h in call(store, "batch", [SearchOp(("a",))])[0]}
    assert under_a == {
        (("a", "b"), "k"),
        (("a", "b/"), "k"),
        (("a", "b", ""), "k"),
        (("a", "b.c"), "k"),
        (("a",), "k"),
        (("a",), "b/k"),
    }
    assert {h.namespace for h in call(store, "search", ("a/b",))} == {("a/b",)}
    call(store, "delete", ("a", "b"), "k")
    assert call(store, "batch", [GetOp(("a/b",), "k")])[0] is not None
    assert call(store, "get", ("a", "b"), "k") is None


def test_bad_ops_are_refused_and_change_nothing(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(index=hashing_index(), max_entry_bytes=2_000)
    ns = ("bad",)
    good = PutOp(ns, "good", {"text": "fine"})
    with pytest.raises(FilterError):
        store.batch([good, SearchOp(ns, filter={"x": {"$near": 1}})])
    with pytest.raises(EntryTooLarge):
        store.batch([good, PutOp(ns, "big", {"text": "x" * 5_000})])
    with pytest.raises(JsonError):
        store.batch([good, PutOp(ns, "odd", {"when": object()})])
    with pytest.raises(NotImplementedError, match="TTL"):
        call(store, "put", ns, "ttl", {"text": "x"}, ttl=5)
    with pytest.raises(NotImplementedError, match=r"ttl=1\.0"):
        store.batch([good, PutOp(ns, "ttl", {"text": "x"}, ttl=1.0)])
    with pytest.raises(ValueError, match="non-empty tuple"):
        store.batch([good, PutOp((), "k", {"text": "x"})])
    with pytest.raises(ValueError, match="expected None, False or a list"):
        store.batch([good, PutOp(ns, "k", {"text": "x"}, index=True)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        call(store, "search", ns, limit=-1)
    with pytest.raises(ValueError, match="expected a GetOp"):
        store.batch([good, "not an op"])  # type: ignore[list-item]
    assert call(store, "search", ()) == []
    assert store.supports_ttl is False


def test_an_item_takes_what_the_readme_says(make_store: Callable[..., TrioRecallStore]) -> None:
    # The value JSON {"t":"x..."} is n + 8 bytes, the id "s/k" 3, the bookkeeping 134 + 2.
    store = make_store(max_entry_bytes=1_000)
    store.put(("s",), "k", {"t": "x" * 853})
    with pytest.raises(EntryTooLarge):
        store.put(("s",), "k", {"t": "x" * 854})
    assert store.get(("s",), "k").value == {"t": "x" * 853}


async def _stored(core: Any, ids: list[str]) -> list[Document]:
    documents: list[Document] = await core.store.get_by_ids(ids, core.namespace)
    return documents


def test_a_values_time_and_conversation_are_the_entrys_own(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(index=hashing_index())
    ns = ("chat", "ana")
    value = {"text": "Ana: the kiln is fixed", "occurred_at": "2023-05-08T20:30:00+02:00",
             "conversation": "pottery"}  # fmt: skip
    call(store, "put", ns, "t1", value)
    call(store, "put", ns, "t2", {"text": "Ben: great", "conversation": "pottery"})
    assert call(store, "get", ns, "t1").value == value  # the value keeps them as given
    got = {d.id: d for d in store._bridge.call(_stored, [item_id(ns, "t1"), item_id(ns, "t2")])}
    first, second = got[item_id(ns, "t1")], got[item_id(ns, "t2")]
    assert (first.occurred_at, first.conversation) == (
        dt.datetime(2023, 5, 8, 18, 30, tzinfo=dt.UTC), "pottery"
    )  # fmt: skip
    # Without one, the item happened when it was put.
    assert second.conversation == "pottery" and second.occurred_at is not None
    assert second.occurred_at > first.occurred_at
    with pytest.raises(ConfigError, match="value\\['occurred_at'\\] of 'bad' is 'soon'"):
        call(store, "put", ns, "bad", {"text": "x", "occurred_at": "soon"})
    with pytest.raises(ConfigError, match="value\\['conversation'\\] of 'bad' is 7 \\(int\\)"):
        call(store, "put", ns, "bad", {"text": "x", "conversation": 7})
    assert call(store, "get", ns, "bad") is None


def test_the_ranking_is_recall_or_similarity(backend: dict[str, Any]) -> None:
    with pytest.raises(
        ConfigError, match="ranking is 'fuzzy'; expected one of recall, similarity"
    ):
        TrioRecallStore(ranking="fuzzy", **backend)  # type: ignore[arg-type]
    texts = ["python tutorial", "python tutorial for beginners", "a guide"]
    for ranking in ("recall", "similarity"):
        with TrioRecallStore(index=hashing_index(), ranking=ranking, **backend) as store:  # type: ignore[arg-type]
            for i, text in enumerate(texts):
                store.put(("d",), f"k{i}", {"text": text})
            hits = store.search(("d",), query="python tutorial")
            assert [h.key for h in hits] == ["k0", "k1", "k2"], ranking
            assert hits[0].score == pytest.approx(1.0, abs=1e-5)  # a cosine either way
            assert [h.key for h in store.search(("d",), query="python tutorial", offset=1)] == [
                "k1",
                "k2",
            ]


def test_the_index_config_is_checked() -> None:
    with pytest.raises(ValueError, match="no 'dims'"):
        TrioRecallStore(index={"embed": HashingEmbedder(4).embed_batch})  # type: ignore[typeddict-item]
    with pytest.raises(ValueError, match="no 'embed'"):
        TrioRecallStore(index={"dims": 4})
    with pytest.raises(ValueError, match="keys colour"):
        TrioRecallStore(index={"dims": 4, "embed": len, "colour": 1})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="index\\['fields'\\]"):
        TrioRecallStore(index={"dims": 4, "embed": len, "fields": "text"})  # type: ignore[typeddict-item]


def test_embeddings_of_every_kind_langgraph_accepts() -> None:
    async def afunc(texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return HashingEmbedder(DIMS).embed_batch(texts).tolist()

    index = {"dims": DIMS, "fields": ["text"]}
    for embed in [afunc, HashingEmbedder(DIMS).embed_batch, DeterministicFakeEmbedding(size=DIMS)]:
        with TrioRecallStore(index={**index, "embed": embed}) as store:  # type: ignore[typeddict-item]
            store.put(("e",), "a", {"text": "alpha beta"})
            store.put(("e",), "b", {"text": "gamma"})
            hits = store.search(("e",), query="alpha beta")
            assert hits[0].key == "a"
            assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_close_and_context_managers() -> None:
    store = TrioRecallStore()
    with store:
        store.put(("c",), "k", {"v": 1})
    assert store.closed
    with pytest.raises(trio.ClosedResourceError, match="closed"):
        store.get(("c",), "k")
    store.close()  # idempotent

    async def main() -> None:
        async with TrioRecallStore() as astore:
            await astore.aput(("c",), "k", {"v": 1})
        with pytest.raises(trio.ClosedResourceError):
            await astore.aget(("c",), "k")

    asyncio.run(main())
    assert "closed" in repr(store)


def test_over_a_store_already_open_in_a_trio_run() -> None:
    from actors import open_store
    from protocol import VectorStoreConfig

    def use(store: TrioRecallStore) -> list[str]:
        store.put(("t",), "a", {"text": "trio owns this store"})
        store.put(("t",), "b", {"text": "something else"})
        return [h.key for h in store.search(("t",), query="trio store")]

    async def main() -> None:
        config = VectorStoreConfig(max_entries=16, dimensions=DIMS, max_entry_bytes=4096)
        with trio.fail_after(60):
            async with open_store(config, HashingEmbedder(DIMS)) as handle:
                store = TrioRecallStore.from_store(handle, index={"fields": ["text"]})
                assert await trio.to_thread.run_sync(use, store) == ["a", "b"]
                with pytest.raises(RuntimeError, match="wait for itself"):
                    store.get(("t",), "a")
                store.close()
                assert len(handle) == 2  # the store is still the caller's, and open
        with pytest.raises(ValueError, match="embeds with its own"):
            async with open_store(config, HashingEmbedder(DIMS)) as handle:
                TrioRecallStore.from_store(handle, index=hashing_index())  # type: ignore[arg-type]

    trio.run(main)


def _over_a_handle(
    backend: dict[str, Any], use: Callable[[TrioRecallStore, Any], Any], check: Any
) -> None:
    """Run ``use(adapter, handle)`` in a worker thread against a TrioRecallStore over a
    store handle this test opened (in memory, or on the backend's pg table), then
    ``await check(handle, result)`` in the handle's trio run."""
    from actors import open_pg_store, open_store
    from protocol import VectorStoreConfig

    async def main() -> None:
        config = VectorStoreConfig(max_entries=64, dimensions=DIMS, max_entry_bytes=4096)
        embedder = HashingEmbedder(DIMS)
        opener = (
            open_pg_store(backend["dsn"], config, embedder, table=backend["table"])
            if backend
            else open_store(config, embedder)
        )
        with trio.fail_after(90):
            async with opener as handle:
                store = TrioRecallStore.from_store(handle, index={"fields": ["text"]})
                result = await trio.to_thread.run_sync(use, store, handle)
                await check(handle, result)
                store.close()

    trio.run(main)


def test_a_put_over_an_item_is_an_update_kept_in_its_history(
    backend: dict[str, Any], call: Caller
) -> None:
    ns = ("users", "ana")
    entry = item_id(ns, "home")

    def use(store: TrioRecallStore, handle: Any) -> Any:
        call(store, "put", ns, "home", {"text": "Ana lives in Lisbon", "n": 1})
        first = call(store, "get", ns, "home")
        call(store, "put", ns, "home", {"text": "Ana moved to Porto", "n": 2})
        call(store, "put", ns, "home", {"text": "Ana moved to Porto", "n": 3})
        second = call(store, "get", ns, "home")
        hits = call(store, "search", ns, query="Ana Lisbon Porto")
        listed = call(store, "search", ("users",))
        return first, second, hits, listed

    async def check(handle: Any, result: Any) -> None:
        first, second, hits, listed = result
        assert second.value == {"text": "Ana moved to Porto", "n": 3}
        assert second.created_at == first.created_at < second.updated_at
        # Reads see the current version only: one item, once.
        assert [(h.key, h.value["n"]) for h in hits] == [("home", 3)]
        assert [(h.key, h.value["n"]) for h in listed] == [("home", 3)]
        versions = await handle.history(entry, namespace="langgraph")
        assert [(v.version, v.text, v.metadata["v:n"]) for v in versions] == [
            (1, "Ana lives in Lisbon", 1),
            (2, "Ana moved to Porto", 2),
            (3, "Ana moved to Porto", 3),
        ]
        assert [v.valid_to for v in versions[:-1]] == [v.valid_from for v in versions[1:]]
        assert versions[-1].valid_to is None
        # The store reads the old version as of its time.
        (old,) = await handle.get_by_ids([entry], "langgraph", as_of=versions[0].valid_from)
        assert old.text == "Ana lives in Lisbon"

    _over_a_handle(backend, use, check)


def test_a_deleted_item_leaves_no_trace(backend: dict[str, Any], call: Caller) -> None:
    """delete forgets every version of an item: LangGraph's get, search and
    list_namespaces, and every read of the store beneath, no longer return its text."""
    from protocol import SearchRequest

    ns = ("secrets",)
    texts = ["the vault pin is 8804", "the vault pin is 8805"]

    def use(store: TrioRecallStore, handle: Any) -> Any:
        for text in texts:
            call(store, "put", ns, "pin", {"text": text})
        call(store, "put", ("other",), "note", {"text": "the vault is in the cellar"})
        call(store, "delete", ns, "pin")
        return (
            call(store, "get", ns, "pin"),
            call(store, "search", ns, query="vault pin"),
            call(store, "search", (), query="vault pin 8804 8805"),
            call(store, "list_namespaces"),
        )

    async def check(handle: Any, result: Any) -> None:
        got, scoped, everywhere, spaces = result
        assert got is None and scoped == []
        assert [h.key for h in everywhere] == ["note"]
        assert spaces == [("other",)]
        assert await handle.history(item_id(ns, "pin"), namespace="langgraph") == []
        for kind in ("recall", "similarity", "bm25", "hybrid", "mmr"):
            found = await handle.search(
                SearchRequest(
                    query="vault pin 8804 8805", k=50, fetch_k=50, kind=kind, namespace="langgraph"
                )
            )
            assert not {h.document.text for h in found} & set(texts), kind

    _over_a_handle(backend, use, check)


def test_items_survive_a_restart_on_pg(pg_dsn: str, pg_table: str) -> None:
    with TrioRecallStore(index=hashing_index(), dsn=pg_dsn, table=pg_table) as store:
        store.put(("p", "q/r"), "k", {"text": "durable memory", "n": [1, {"a": None}]})
        created = store.get(("p", "q/r"), "k").created_at
    with TrioRecallStore(index=hashing_index(), dsn=pg_dsn, table=pg_table) as store:
        item = store.get(("p", "q/r"), "k")
        assert item.value == {"text": "durable memory", "n": [1, {"a": None}]}
        assert item.created_at == created
        assert store.list_namespaces() == [("p", "q/r")]
        assert store.search(("p",), query="durable memory")[0].key == "k"


def test_pg_options_go_to_the_pg_store(backend: dict[str, Any]) -> None:
    if not backend:
        with pytest.raises(ValueError, match="pg_options are for pg only"):
            TrioRecallStore(pg_options={"pool_size": 2})
        return
    with TrioRecallStore(pg_options={"pool_size": 2, "statement_timeout": 5.0}, **backend) as s:
        s.put(("o",), "k", {"v": 1})
        assert s.get(("o",), "k").value == {"v": 1}
    with pytest.raises(TypeError, match="colour"):
        TrioRecallStore(pg_options={"colour": 1}, **backend)


def test_a_full_store_evicts_the_oldest_written_item(
    make_store: Callable[..., TrioRecallStore], call: Caller
) -> None:
    store = make_store(max_entries=3)
    for key in ["a", "b", "c"]:
        call(store, "put", ("f",), key, {"v": key})
    call(store, "put", ("f",), "a", {"v": "a2"})  # rewritten: now the newest
    call(store, "put", ("f",), "d", {"v": "d"})
    assert call(store, "get", ("f",), "b") is None
    assert [h.key for h in call(store, "search", ("f",))] == ["d", "a", "c"]


def test_two_adapters_on_one_pg_table_share_only_their_namespace(
    pg_dsn: str, pg_table: str
) -> None:
    options: dict[str, Any] = {"dsn": pg_dsn, "table": pg_table}
    with (
        TrioRecallStore(namespace="one", **options) as one,
        TrioRecallStore(namespace="one", **options) as also_one,
        TrioRecallStore(namespace="two", **options) as two,
    ):
        one.put(("s",), "k", {"v": 1})
        assert also_one.get(("s",), "k").value == {"v": 1}
        assert two.get(("s",), "k") is None
        assert two.list_namespaces() == []
        assert two.search(()) == []
