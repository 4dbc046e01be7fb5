"""TrioRecallStore as a compiled graph's store, under concurrency and cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
import trio

pytest.importorskip("langgraph.graph")

from langchain_core.embeddings import Embeddings
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph_support import DIMS, backend, hashing_index

from actors import HashingEmbedder
from actors.integrations.langgraph import TrioRecallStore

__all__ = ["backend"]  # the fixture


class State(TypedDict, total=False):
    user: str
    text: str
    recalled: list[str]


@pytest.fixture
def store(backend: dict[str, Any]) -> Iterator[TrioRecallStore]:
    with TrioRecallStore(index=hashing_index(), max_entries=1024, **backend) as opened:
        yield opened


def remember(state: State, runtime: Runtime) -> State:
    """A sync node: writes through the blocking API."""
    assert runtime.store is not None
    namespace = ("memories", state["user"])
    key = f"m{len(runtime.store.search(namespace, limit=100))}"
    runtime.store.put(namespace, key, {"text": state["text"]})
    return {}


def recall(state: State, runtime: Runtime) -> State:
    assert runtime.store is not None
    hits = runtime.store.search(("memories", state["user"]), query=state["text"], limit=2)
    return {"recalled": [h.value["text"] for h in hits]}


async def arecall(state: State, runtime: Runtime) -> State:
    """An async node: awaits the store without blocking the graph's loop."""
    assert runtime.store is not None
    hits = await runtime.store.asearch(("memories", state["user"]), query=state["text"], limit=2)
    await runtime.store.aput(("seen", state["user"]), "last", {"text": state["text"]})
    return {"recalled": [h.value["text"] for h in hits]}


def build(store: TrioRecallStore, recall_node: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall_node)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


def test_a_compiled_graph_writes_and_searches_from_sync_nodes(store: TrioRecallStore) -> None:
    graph = build(store, recall)
    graph.invoke({"user": "alice", "text": "my cat is called Miso"})
    graph.invoke({"user": "alice", "text": "I live in Lyon"})
    graph.invoke({"user": "bob", "text": "my cat is a tabby"})
    out = graph.invoke({"user": "alice", "text": "what is my cat called"})
    # The question just remembered and the fact it asks about are the two best; recall
    # orders them (items without a conversation lend to their neighbours in write order).
    assert set(out["recalled"]) == {"what is my cat called", "my cat is called Miso"}
    assert len(store.search(("memories", "alice"), limit=100)) == 3
    assert store.list_namespaces(prefix=("memories",)) == [
        ("memories", "alice"),
        ("memories", "bob"),
    ]


def test_a_compiled_graph_with_sync_and_async_nodes_under_ainvoke(
    store: TrioRecallStore,
) -> None:
    graph = build(store, arecall)

    async def main() -> list[State]:
        async with asyncio.timeout(60):
            await graph.ainvoke({"user": "carol", "text": "the launch code is 42"})
            return await asyncio.gather(
                *(graph.ainvoke({"user": f"u{i}", "text": f"note {i} launch"}) for i in range(5)),
                graph.ainvoke({"user": "carol", "text": "launch code"}),
            )

    outs = asyncio.run(main())
    assert outs[-1]["recalled"] == ["launch code", "the launch code is 42"]
    for i, out in enumerate(outs[:-1]):
        assert out["recalled"] == [f"note {i} launch"]  # each user sees only their own
    assert store.get(("seen", "carol"), "last").value == {"text": "launch code"}


def test_fifty_concurrent_asyncio_callers(store: TrioRecallStore) -> None:
    async def one(i: int) -> tuple[int, list[str], Any]:
        ns = ("users", str(i))
        await store.aput(ns, "fact", {"text": f"user {i} likes topic{i}", "i": i})
        hits = await store.asearch(ns, query=f"topic{i}")
        item = await store.aget(ns, "fact")
        return i, [h.key for h in hits], item.value

    async def main() -> tuple[list[tuple[int, list[str], Any]], int]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:  # the loop keeps running while 50 calls wait
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        async with asyncio.timeout(120):
            tick = asyncio.create_task(ticker())
            results = await asyncio.gather(*(one(i) for i in range(50)))
            stop.set()
            await tick
        return results, ticks

    results, ticks = asyncio.run(main())
    assert ticks > 50
    for i, keys, value in results:
        assert keys == ["fact"]
        assert value == {"text": f"user {i} likes topic{i}", "i": i}
    assert len(store.list_namespaces(prefix=("users",))) == 50


class Gate(Embeddings):
    """An Embeddings whose calls on texts holding "block" wait until released."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(DIMS)
        self.entered = threading.Event()
        self.release = threading.Event()

    def _wait(self, texts: list[str]) -> None:
        if any("block" in t for t in texts):
            self.entered.set()
            self.release.wait(60)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self._wait(texts)
        return self.inner.embed_batch(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        self._wait([text])
        return self.inner.embed(text).tolist()


@pytest.fixture
def gated(backend: dict[str, Any]) -> Iterator[tuple[Gate, TrioRecallStore]]:
    """A store whose embedder waits at "block" until the gate is released (at the end)."""
    gate = Gate()
    store = TrioRecallStore(index={"embed": gate, "dims": DIMS, "fields": ["text"]}, **backend)
    try:
        yield gate, store
    finally:
        gate.release.set()
        store.close()


def test_cancelling_an_asyncio_caller_mid_search(gated: tuple[Gate, TrioRecallStore]) -> None:
    gate, store = gated

    async def main() -> None:
        async with asyncio.timeout(60):
            await store.aput(("c",), "k", {"text": "stored before"})
            task = asyncio.create_task(store.asearch(("c",), query="block this query"))
            await asyncio.to_thread(gate.entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The store serves at once: the abandoned embedding does not hold it.
            assert (await store.aget(("c",), "k")).value == {"text": "stored before"}
            assert [h.key for h in await store.asearch(("c",), query="stored")] == ["k"]

    asyncio.run(main())


def test_cancelling_an_asyncio_caller_mid_put(gated: tuple[Gate, TrioRecallStore]) -> None:
    gate, store = gated

    async def main() -> None:
        async with asyncio.timeout(60):
            task = asyncio.create_task(store.aput(("c",), "slow", {"text": "block me"}))
            await asyncio.to_thread(gate.entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task  # returns while the store is still embedding the put
            assert await store.aget(("c",), "slow") is None  # reads do not wait
            gate.release.set()
            # The put was queued: the store applies it, all or nothing (design §3).
            await store.aput(("c",), "after", {"text": "queued behind it"})
            slow = await store.aget(("c",), "slow")
            assert slow is not None
            assert slow.value == {"text": "block me"}

    asyncio.run(main())


def test_closing_with_a_call_in_flight_ends_it(gated: tuple[Gate, TrioRecallStore]) -> None:
    gate, store = gated

    async def main() -> None:
        async with asyncio.timeout(60):
            task = asyncio.create_task(store.asearch(("c",), query="block"))
            await asyncio.to_thread(gate.entered.wait, 30)
            await store.aclose()
            with pytest.raises(trio.ClosedResourceError, match="closed"):
                await task

    asyncio.run(main())
