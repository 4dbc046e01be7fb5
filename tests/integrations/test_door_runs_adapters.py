"""The LangChain and LangGraph adapters name their store reads (``actors.doors.named_run``):
each search's ``vector_store.searched`` event says ``"langchain"`` or ``"langgraph"``,
with a run id of its own per call, whether it is called from a plain thread or from an
asyncio loop.

The store is one the test opened in its trio run with an ``on_event`` sink and lent to
the adapter (``from_store``), the path a trio program takes to share its store; the
adapter is driven from a worker thread and from an asyncio loop in one, as a LangChain
or LangGraph program calls it. The run is named on the trio side of the bridge: a run
the calling thread names itself never reaches the store's events.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import trio

from actors import HashingEmbedder, open_store
from actors.doors import named_run
from protocol import Event, VectorStoreConfig
from protocol.events import StoreSearched

DIMS = 64
CONFIG = VectorStoreConfig(max_entries=16, dimensions=DIMS, max_entry_bytes=4096)
RUN_ID = re.compile("[0-9a-f]{32}")


def reads(got: list[Event]) -> list[StoreSearched]:
    return [e for e in got if isinstance(e, StoreSearched)]


def check_runs(searched: list[StoreSearched], name: str) -> None:
    """Every read is named ``name``, each with a run id of its own."""
    assert searched
    assert {e.retriever for e in searched} == {name}
    ids = [e.run_id for e in searched]
    assert all(i is not None and RUN_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_langchain_names_its_searches_and_its_retriever_langchain() -> None:
    from actors.integrations.langchain import RETRIEVER, TrioRecallVectorStore

    got: list[Event] = []

    def in_thread(vs: TrioRecallVectorStore) -> None:
        vs.similarity_search("cat", k=1)
        vs.similarity_search_by_vector([1.0] * DIMS, k=1)
        vs.max_marginal_relevance_search("cat", k=1, fetch_k=2)
        vs.search("cat", "recall", k=1)
        vs.as_retriever(search_type="recall").invoke("dog")
        vs.as_retriever().invoke("dog")
        # A run the calling thread names stays in that thread: the bridge's trio task
        # names the read.
        with named_run("caller"):
            vs.similarity_search("cat", k=1)

    async def in_asyncio(vs: TrioRecallVectorStore) -> None:
        await vs.asimilarity_search("cat", k=1)
        await vs.arecall_search("cat", k=1)
        await vs.as_retriever(search_type="mmr").ainvoke("dog")

    async def main() -> None:
        with trio.fail_after(60):
            async with open_store(CONFIG, HashingEmbedder(DIMS), on_event=got.append) as store:
                vs = TrioRecallVectorStore.from_store(store)
                await trio.to_thread.run_sync(vs.add_texts, ["a cat", "a dog"])
                await trio.to_thread.run_sync(in_thread, vs)
                await trio.to_thread.run_sync(asyncio.run, in_asyncio(vs))
                vs.close()

    trio.run(main)
    assert RETRIEVER == "langchain"
    searched = reads(got)
    assert len(searched) == 10
    check_runs(searched, "langchain")
    assert {e.kind for e in searched} == {"similarity", "mmr", "recall"}


def test_langgraph_names_its_searches_langgraph() -> None:
    pytest.importorskip("langgraph.store.base")
    from actors.integrations.langgraph import RETRIEVER, TrioRecallStore

    got: list[Event] = []

    def in_thread(store: TrioRecallStore) -> None:
        store.put(("t",), "a", {"text": "trio owns this store"})
        store.put(("t",), "b", {"text": "something else"})
        with named_run("caller"):
            assert [h.key for h in store.search(("t",), query="trio store")] == ["a", "b"]
        store.search(("t",))  # no query: the newest items, still one read of the store
        store.list_namespaces()

    async def in_asyncio(store: TrioRecallStore) -> None:
        await store.asearch(("t",), query="something")

    async def main() -> None:
        with trio.fail_after(60):
            async with open_store(CONFIG, HashingEmbedder(DIMS), on_event=got.append) as handle:
                store = TrioRecallStore.from_store(handle, index={"fields": ["text"]})
                await trio.to_thread.run_sync(in_thread, store)
                await trio.to_thread.run_sync(asyncio.run, in_asyncio(store))
                store.close()

    trio.run(main)
    assert RETRIEVER == "langgraph"
    searched = reads(got)
    assert {e.retriever for e in searched} == {"langgraph"}
    # A search is one run, whatever reads it makes (the ranked items, then the rest).
    runs: dict[str | None, list[StoreSearched]] = {}
    for e in searched:
        runs.setdefault(e.run_id, []).append(e)
    assert len(runs) == 4  # search with a query, search without, list_namespaces, asearch
    assert all(i is not None and RUN_ID.fullmatch(i) for i in runs)
