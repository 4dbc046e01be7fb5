"""TrioRecallVectorStore beyond LangChain's standard tests: filters, scores, MMR, the
retriever, the capacity bound, namespaces, the embeddings' two paths, native async twins,
from_store, and the lifecycle. Both backends where the behaviour is the store's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import trio
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import VectorStore

from actors import HashingEmbedder, open_store
from actors.integrations import langchain as module
from actors.integrations.langchain import TrioRecallRetriever, TrioRecallVectorStore
from protocol import (
    ConfigError,
    EntryTooLarge,
    FilterError,
    RecallSettings,
    StoreUnavailable,
    VectorStoreConfig,
)

PETS = [
    Document(page_content="my cat sleeps on the sofa", metadata={"kind": "cat", "age": 3}),
    Document(page_content="the dog barks at the mail", metadata={"kind": "dog", "age": 5}),
    Document(page_content="a cat and a dog play", metadata={"kind": "both", "age": 1}),
    Document(page_content="the stock market fell", metadata={"kind": "news", "age": 9}),
]


class Words(Embeddings):
    """trio-recall's HashingEmbedder as a LangChain Embeddings, so that ranking means
    shared words. Queries get one extra token, so a query and a document of the same
    text embed differently, and the calls are counted per side."""

    def __init__(self) -> None:
        self._hash = HashingEmbedder(64)
        self.calls: dict[str, list[str]] = {"documents": [], "query": []}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls["documents"].extend(texts)
        return [self._hash.embed(t).tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls["query"].append(text)
        return self._hash.embed(text + " queryside").tolist()


@pytest.fixture(params=["memory", "pg"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {}
    dsn = request.getfixturevalue("pg_dsn")
    return {"dsn": dsn, "table": request.getfixturevalue("pg_table")}


@pytest.fixture
def pets(backend: dict[str, Any]) -> Iterator[TrioRecallVectorStore]:
    with TrioRecallVectorStore.from_documents(PETS, Words(), max_entries=50, **backend) as vs:
        yield vs


def test_import_actors_imports_no_langchain() -> None:
    code = (
        "import sys, actors, actors.integrations; "
        "print([m for m in sys.modules if m.startswith(('langchain', 'langgraph'))])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_public_names_are_pinned() -> None:
    assert module.__all__ == [
        "TrioRecallEmbeddings",
        "TrioRecallRetriever",
        "TrioRecallVectorStore",
    ]


def test_filters_use_trio_recalls_language(pets: TrioRecallVectorStore) -> None:
    hits = pets.similarity_search("cat dog", k=4, filter={"kind": {"$in": ["cat", "dog"]}})
    assert {d.metadata["kind"] for d in hits} == {"cat", "dog"}
    older = pets.similarity_search("cat", k=4, filter={"age": {"$gte": 3}})
    assert {d.metadata["age"] for d in older} == {3, 5, 9}
    assert pets.similarity_search("cat", k=4, filter={"$not": {"kind": "news"}}) != []
    # An unknown operator is refused, never read as "match everything".
    with pytest.raises(FilterError, match=r"\$regex"):
        pets.similarity_search("cat", filter={"kind": {"$regex": "c.*"}})


async def test_filters_async(pets: TrioRecallVectorStore) -> None:
    hits = await pets.asimilarity_search("cat", k=4, filter={"kind": "cat"})
    assert [d.page_content for d in hits] == ["my cat sleeps on the sofa"]
    with pytest.raises(FilterError):
        await pets.asimilarity_search("cat", filter={"$nor": []})


def test_scores_are_cosine_and_relevance_is_clipped(pets: TrioRecallVectorStore) -> None:
    scored = pets.similarity_search_with_score("cat sofa", k=4)
    scores = [s for _, s in scored]
    assert scores == sorted(scores, reverse=True)
    assert scored[0][0].page_content == "my cat sleeps on the sofa"
    assert all(-1.0 <= s <= 1.0 for s in scores)
    relevance = pets.similarity_search_with_relevance_scores("cat sofa", k=4)
    assert [d for d, _ in relevance] == [d for d, _ in scored]
    assert [r for _, r in relevance] == [min(1.0, max(0.0, s)) for s in scores]
    kept = pets.similarity_search_with_relevance_scores("cat sofa", k=4, score_threshold=0.3)
    assert [d for d, _ in kept] == [d for d, s in scored if s >= 0.3]


async def test_async_scores_equal_sync(pets: TrioRecallVectorStore) -> None:
    sync = pets.similarity_search_with_score("dog mail", k=3)
    assert await pets.asimilarity_search_with_score("dog mail", k=3) == sync
    relevance = await pets.asimilarity_search_with_relevance_scores("dog mail", k=3)
    assert [d for d, _ in relevance] == [d for d, _ in sync]


def test_by_vector_equals_by_query(pets: TrioRecallVectorStore) -> None:
    embedding = pets.embeddings
    assert embedding is not None
    vector = embedding.embed_query("cat")
    assert pets.similarity_search_by_vector(vector, k=3) == pets.similarity_search("cat", k=3)
    with pytest.raises(Exception, match="64"):
        pets.similarity_search_by_vector([1.0, 2.0], k=1)


async def test_mmr_sync_and_async(pets: TrioRecallVectorStore) -> None:
    relevant = pets.max_marginal_relevance_search("cat dog", k=2, fetch_k=4, lambda_mult=1.0)
    assert relevant == pets.similarity_search("cat dog", k=2)
    diverse = pets.max_marginal_relevance_search("cat dog", k=3, fetch_k=4, lambda_mult=0.0)
    assert len({d.id for d in diverse}) == 3
    assert (
        await pets.amax_marginal_relevance_search("cat dog", k=3, fetch_k=4, lambda_mult=0.0)
        == diverse
    )
    # fetch_k below k is raised to k, as a retriever with a large k would need.
    assert len(pets.max_marginal_relevance_search("cat", k=4, fetch_k=1)) == 4
    vector = Words().embed_query("cat dog")
    assert pets.max_marginal_relevance_search_by_vector(vector, k=2, fetch_k=4) == (
        await pets.amax_marginal_relevance_search_by_vector(vector, k=2, fetch_k=4)
    )


async def test_retriever(pets: TrioRecallVectorStore) -> None:
    retriever = pets.as_retriever(search_kwargs={"k": 3})
    assert len(retriever.invoke("cat")) == 3
    assert await retriever.ainvoke("cat") == retriever.invoke("cat")
    filtered = pets.as_retriever(search_kwargs={"k": 3, "filter": {"kind": "news"}})
    assert [d.metadata["kind"] for d in await filtered.ainvoke("cat")] == ["news"]
    mmr = pets.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4})
    assert len(mmr.invoke("cat")) == 2
    threshold = pets.as_retriever(
        search_type="similarity_score_threshold",
        search_kwargs={"k": 4, "score_threshold": 0.3},
    )
    assert all("cat" in d.page_content for d in threshold.invoke("cat"))


async def test_recall_is_a_search_type_of_the_retriever(pets: TrioRecallVectorStore) -> None:
    recall = pets.as_retriever(search_type="recall", search_kwargs={"k": 2})
    assert isinstance(recall, TrioRecallRetriever)
    found = recall.invoke("cat sofa")
    assert found[0].page_content == "my cat sleeps on the sofa" and len(found) == 2
    assert await recall.ainvoke("cat sofa") == found
    assert pets.search("cat sofa", "recall", k=2) == found
    assert await pets.asearch("cat sofa", "recall", k=2) == found
    assert pets.recall_search("cat sofa", k=2) == await pets.arecall_search("cat sofa", k=2)
    # Each hit keeps its cosine; a filter and a floor apply as in similarity search.
    scored = pets.recall_search_with_score("cat sofa", k=4, filter={"kind": {"$ne": "news"}})
    assert scored[0][0].metadata["kind"] == "cat"
    assert all(-1 <= score <= 1 for _, score in scored)
    assert all(d.metadata["kind"] != "news" for d, _ in scored)
    assert (
        await pets.arecall_search_with_score("cat sofa", k=4, filter={"kind": {"$ne": "news"}})
        == scored
    )
    assert pets.recall_search("cat sofa", k=4, min_similarity=0.99) == []
    # The default stays LangChain's similarity search, and an unknown type is refused.
    assert pets.as_retriever().search_type == "similarity"
    with pytest.raises(ValueError, match="recall"):
        pets.as_retriever(search_type="fuzzy")
    with pytest.raises(ConfigError, match=r"unknown recall_search arguments \['fetch_k'\]"):
        pets.recall_search("cat", fetch_k=3)
    with pytest.raises(ConfigError, match=r"min_similarity is 2"):
        pets.recall_search("cat", min_similarity=2)
    with pytest.raises(ConfigError, match="settings is a dict"):
        pets.recall_search("cat", settings={"date_weight": 0})  # type: ignore[arg-type]
    assert pets.recall_search("cat", settings=RecallSettings(date_weight=0))


def test_occurred_at_and_conversation_are_the_stores_fields(backend: dict[str, Any]) -> None:
    may = dt.datetime(2023, 5, 8, 20, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    docs = [
        Document(page_content="Ana: the kiln is fixed", metadata={"occurred_at": may,
                 "conversation": "pottery"}, id="a"),
        Document(page_content="Ben: the kiln broke", metadata={"occurred_at": "2023-06-01"},
                 id="b"),
        Document(page_content="the kiln manual", id="c"),
    ]  # fmt: skip
    with TrioRecallVectorStore(Words(), **backend) as vs:
        vs.add_documents(docs)
        got = {d.id: d.metadata for d in vs.get_by_ids(["a", "b", "c"])}
        # Kept in the metadata as ISO 8601 in UTC, whatever form they were given in.
        assert got == {
            "a": {"occurred_at": "2023-05-08T18:30:00+00:00", "conversation": "pottery"},
            "b": {"occurred_at": "2023-06-01T00:00:00+00:00"},
            "c": {},
        }
        # since and until read the store's time (c was dated by its write, now).
        window = vs.similarity_search("kiln", k=5, since="2023-05-01", until=may.replace(day=30))
        assert [d.id for d in window] == ["a"]
        later = vs.similarity_search("kiln", k=5, since=dt.datetime(2023, 5, 9, tzinfo=dt.UTC))
        assert {d.id for d in later} == {"b", "c"}
        assert {d.id for d in vs.recall_search("kiln", k=5, until="2023-06-02")} == {"a", "b"}
        with pytest.raises(ConfigError, match="metadata\\['occurred_at'\\] is 'soon'"):
            vs.add_texts(["x"], [{"occurred_at": "soon"}])
        with pytest.raises(ConfigError, match="has no time zone"):
            vs.add_texts(["x"], [{"occurred_at": dt.datetime(2023, 5, 8)}])
        with pytest.raises(ConfigError, match="metadata\\['conversation'\\] is 7 \\(int\\)"):
            vs.add_texts(["x"], [{"conversation": 7}])
        with pytest.raises(ConfigError, match="since is 'soon'"):
            vs.similarity_search("kiln", since="soon")


def test_documents_and_queries_take_their_own_path(backend: dict[str, Any]) -> None:
    words = Words()
    with TrioRecallVectorStore(words, **backend) as vs:
        words.calls["query"].clear()  # the width probe
        vs.add_texts(["alpha beta"], ids=["a"])
        vs.similarity_search("alpha", k=1)
        assert words.calls == {"documents": ["alpha beta"], "query": ["alpha"]}


def test_ids_replace_and_missing_ids_are_content_hashes(backend: dict[str, Any]) -> None:
    with TrioRecallVectorStore(DeterministicFakeEmbedding(size=8), **backend) as vs:
        first = vs.add_texts(["same"], [{"n": 1}])
        assert vs.add_texts(["same"], [{"n": 1}]) == first  # one entry, not two
        vs.add_documents([Document(page_content="old", id="x")])
        vs.add_documents([Document(page_content="new", id="ignored")], ids=["x"])
        assert sorted(d.page_content for d in vs.get_by_ids(["x", first[0], "nope"])) == [
            "new",
            "same",
        ]
        vs.delete(["x", "nope"])
        assert vs.get_by_ids(["x"]) == []
        vs.delete()  # every document of this namespace
        assert vs.similarity_search("same", k=5) == []


def test_capacity_evicts_the_oldest() -> None:
    with TrioRecallVectorStore(Words(), max_entries=3) as vs:
        vs.add_texts([f"text number {i}" for i in range(5)], ids=[str(i) for i in range(5)])
        assert sorted(d.id for d in vs.similarity_search("text", k=10)) == ["2", "3", "4"]


def test_bad_input_is_refused_whole(backend: dict[str, Any]) -> None:
    with TrioRecallVectorStore(Words(), max_entry_bytes=200, **backend) as vs:
        with pytest.raises(EntryTooLarge):
            vs.add_texts(["short", "x" * 500], ids=["ok", "big"])
        assert vs.get_by_ids(["ok"]) == []  # all or nothing
        with pytest.raises(ConfigError, match="metadatas has 1 items"):
            vs.add_texts(["a", "b"], [{}])
        with pytest.raises(ConfigError, match="unknown search arguments"):
            vs.similarity_search("a", k=1, filters={"a": 1})
        # Only filter, since and until come as extra keywords; the rest are the method's.
        with pytest.raises(ConfigError, match=r"unknown search arguments \['kind'\]"):
            vs.similarity_search("a", k=1, kind="mmr")
        with pytest.raises(ConfigError, match="settings is a dict; expected RecallSettings"):
            vs.search("a", "recall", settings={"date_weight": 0})
        with pytest.raises(ConfigError, match=r"unknown recall_search arguments \['fetch_k'\]"):
            vs.search("a", "recall", fetch_k=3)
        with pytest.raises(ConfigError, match="k is 0"):
            vs.similarity_search("a", k=0)
        with pytest.raises(ConfigError, match="unknown arguments"):
            vs.delete(["a"], cascade=True)


def test_namespaces_on_one_table_are_apart(pg_dsn: str, pg_table: str) -> None:
    common = {"dsn": pg_dsn, "table": pg_table}
    with (
        TrioRecallVectorStore(Words(), namespace="left", **common) as left,
        TrioRecallVectorStore(Words(), namespace="right", **common) as right,
    ):
        left.add_texts(["shared words"], ids=["1"])
        right.add_texts(["shared words"], ids=["1"])
        left.delete()
        assert left.similarity_search("shared", k=5) == []
        assert [d.id for d in right.similarity_search("shared", k=5)] == ["1"]


async def test_async_twins_are_native() -> None:
    """Every async method works with a default executor that refuses work, so none of
    them is LangChain's run_in_executor fallback."""
    twins = [
        "aadd_texts", "aadd_documents", "adelete", "aget_by_ids", "asimilarity_search",
        "asimilarity_search_with_score", "asimilarity_search_by_vector",
        "amax_marginal_relevance_search", "amax_marginal_relevance_search_by_vector",
    ]  # fmt: skip
    for name in twins:
        assert getattr(TrioRecallVectorStore, name) is not getattr(VectorStore, name), name

    class Refusing(concurrent.futures.ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("an async method used the default executor")

    vs = TrioRecallVectorStore(Words())
    asyncio.get_running_loop().set_default_executor(Refusing())
    try:
        async with asyncio.timeout(30):
            await vs.aadd_texts(["one two"], ids=["1"])
            await vs.aadd_documents([Document(page_content="three four", id="2")])
            assert [d.id for d in await vs.aget_by_ids(["1", "2"])] in (["1", "2"], ["2", "1"])
            assert (await vs.asimilarity_search("one", k=1))[0].id == "1"
            assert (await vs.asimilarity_search_with_score("one", k=1))[0][0].id == "1"
            vector = Words().embed_query("three")
            assert (await vs.asimilarity_search_by_vector(vector, k=1))[0].id == "2"
            assert len(await vs.amax_marginal_relevance_search("one", k=2)) == 2
            assert len(await vs.amax_marginal_relevance_search_by_vector(vector, k=2)) == 2
            assert (await vs.asimilarity_search_with_relevance_scores("one", k=1))[0][1] > 0
            await vs.adelete(["1"])
            assert await vs.aget_by_ids(["1"]) == []
    finally:
        vs.close()


async def test_afrom_texts_and_async_context_manager() -> None:
    async with asyncio.timeout(30):
        store = await TrioRecallVectorStore.afrom_texts(["a b", "c d"], Words(), ids=["1", "2"])
        async with store as vs:
            assert [d.id for d in await vs.asimilarity_search("c", k=1)] == ["2"]
        with pytest.raises(trio.ClosedResourceError, match="closed"):
            await vs.asimilarity_search("c", k=1)
        docs = [Document(page_content="e f", id="e")]
        async with await TrioRecallVectorStore.afrom_documents(docs, Words()) as other:
            assert [d.id for d in await other.aget_by_ids(["e"])] == ["e"]


def test_close_then_every_call_is_refused() -> None:
    vs = TrioRecallVectorStore(Words())
    vs.close()
    vs.close()  # again: nothing
    assert "closed" in repr(vs)
    with pytest.raises(trio.ClosedResourceError, match="TrioRecallVectorStore is closed"):
        vs.add_texts(["a"])


def test_dsn_errors_name_the_problem() -> None:
    with pytest.raises(StoreUnavailable, match=r"nowhere\.invalid"):
        TrioRecallVectorStore(Words(), dsn="postgresql://u@nowhere.invalid:1/db?connect_timeout=1")
    with pytest.raises(ConfigError, match="embed_documents"):
        TrioRecallVectorStore(object())  # type: ignore[arg-type]


def test_from_store_borrows_a_store_open_in_trio() -> None:
    """A trio program lends its open store to LangChain code in a worker thread and in
    an asyncio loop of its own; the store stays the program's."""
    config = VectorStoreConfig(max_entries=10, dimensions=64, max_entry_bytes=1024)
    seen: dict[str, Any] = {}

    async def in_asyncio(vs: TrioRecallVectorStore) -> list[str | None]:
        return [d.id for d in await vs.asimilarity_search("cat", k=1)]

    async def main() -> None:
        with trio.fail_after(30):
            async with open_store(config, HashingEmbedder(64)) as store:
                vs = TrioRecallVectorStore.from_store(store, namespace="pets")
                seen["ids"] = await trio.to_thread.run_sync(vs.add_texts, ["a cat", "a dog"])
                seen["thread"] = await trio.to_thread.run_sync(
                    lambda: [d.page_content for d in vs.similarity_search("dog", k=1)]
                )
                seen["asyncio"] = await trio.to_thread.run_sync(asyncio.run, in_asyncio(vs))
                with pytest.raises(RuntimeError, match="wait for itself forever"):
                    vs.similarity_search("dog", k=1)
                vs.close()  # from the trio thread: ends the bridge, not the store
                seen["still open"] = len(store)

    trio.run(main)
    assert seen["thread"] == ["a dog"]
    assert seen["asyncio"] == seen["ids"][:1]
    assert seen["still open"] == 2
    with pytest.raises(RuntimeError, match="inside the trio run"):
        TrioRecallVectorStore.from_store(object())


def test_delete_forgets_every_version(backend: dict[str, Any]) -> None:
    """A document the store updated (two versions) is gone after ``delete``, from every
    search and from its history; ``adelete(None)`` forgets the whole namespace."""
    from actors import open_pg_store
    from protocol import SearchRequest

    config = VectorStoreConfig(max_entries=20, dimensions=64, max_entry_bytes=1024)
    texts = ["the locker code is 3310", "the locker code is 3311"]

    def use(vs: TrioRecallVectorStore) -> list[list[str]]:
        vs.delete(["pin"])
        seen = [[d.page_content for d in vs.similarity_search("locker code", k=10)]]
        seen.append([d.page_content for d in vs.get_by_ids(["pin", "other"])])
        asyncio.run(vs.adelete(None))
        seen.append([d.page_content for d in vs.similarity_search("locker code", k=10)])
        return seen

    async def main() -> list[list[str]]:
        embedder = HashingEmbedder(64)
        opener = (
            open_pg_store(backend["dsn"], config, embedder, table=backend["table"])
            if backend
            else open_store(config, embedder)
        )
        with trio.fail_after(60):
            async with opener as store:
                vs = TrioRecallVectorStore.from_store(store, namespace="lc")
                await store.add_texts([texts[0], "the locker is red"], ids=["pin", "other"],
                                      namespace="lc")  # fmt: skip
                await store.update("pin", texts[1], namespace="lc")
                assert len(await store.history("pin", namespace="lc")) == 2
                seen = await trio.to_thread.run_sync(use, vs)
                assert await store.history("pin", namespace="lc") == []
                for kind in ("recall", "similarity", "bm25", "hybrid", "mmr"):
                    request = SearchRequest(query="locker code", k=10, kind=kind, namespace="lc")
                    assert await store.search(request) == [], kind
                vs.close()
                return seen

    seen = trio.run(main)
    assert seen == [["the locker is red"], ["the locker is red"], []]


def test_numpy_vectors_and_threads(backend: dict[str, Any]) -> None:
    """Sync use from plain threads: eight threads write and read at once."""
    with TrioRecallVectorStore(Words(), max_entries=500, **backend) as vs:

        def work(t: int) -> list[str]:
            ids = vs.add_texts([f"writer{t} entry{i}" for i in range(10)])
            assert sorted(d.id for d in vs.get_by_ids(ids)) == sorted(ids)
            assert len(vs.similarity_search(f"writer{t} entry3", k=1)) == 1
            return ids

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            written = [i for ids in pool.map(work, range(8)) for i in ids]
        assert len(vs.get_by_ids(written)) == 80
        vector = np.asarray(Words().embed_query("writer0 entry3"), dtype=np.float32)
        assert len(vs.similarity_search_by_vector(vector.tolist(), k=2)) == 2
        assert threading.current_thread() is threading.main_thread()


def test_trio_recall_embedders_as_langchain_embeddings() -> None:
    hashing = HashingEmbedder(16)
    batched = module.TrioRecallEmbeddings(hashing)

    class OneAtATime:
        def embed(self, text: str) -> Any:
            return hashing.embed(text)

    single = module.TrioRecallEmbeddings(OneAtATime())
    expected = [hashing.embed(t).tolist() for t in ["a b", "c"]]
    assert batched.embed_documents(["a b", "c"]) == expected
    assert single.embed_documents(["a b", "c"]) == expected
    assert batched.embed_query("a b") == expected[0]
    assert all(type(x) is float for x in batched.embed_query("a"))
    with pytest.raises(ConfigError, match="no embed"):
        module.TrioRecallEmbeddings(object())
    with TrioRecallVectorStore.from_texts(["a b", "c"], batched, ids=["ab", "c"]) as vs:
        assert [d.id for d in vs.similarity_search("c", k=1)] == ["c"]
