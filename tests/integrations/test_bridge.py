"""The bridge between asyncio (or plain threads) and the store's trio loop: concurrency,
cancellation, close() with calls in flight, and the call that would deadlock. Through
TrioRecallVectorStore where a user would see it, through TrioBridge where only the trio
side can tell (was the trio call cancelled? did the store close in its loop?)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from langchain_core.embeddings import Embeddings

from actors import HashingEmbedder, open_store
from actors.integrations._bridge import TrioBridge
from actors.integrations.langchain import TrioRecallVectorStore
from protocol import ConfigError, SearchRequest, VectorStoreConfig

CONFIG = VectorStoreConfig(max_entries=1000, dimensions=32, max_entry_bytes=1024)


class Gated(Embeddings):
    """Queries wait on a gate (a threading.Event), so a call can be caught mid-flight;
    documents embed at once."""

    def __init__(self) -> None:
        self._hash = HashingEmbedder(32)
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._hash.embed(t).tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if text != "dimensions":  # the width probe passes
            self.waiting.set()
            self.gate.wait(30)
        return self._hash.embed(text).tolist()


@asynccontextmanager
async def recorded_store(log: list[str]) -> AsyncIterator[Any]:
    async with open_store(CONFIG, HashingEmbedder(32)) as store:
        log.append(f"opened in {threading.current_thread().name}")
        try:
            yield store
        finally:
            log.append(f"closing in {threading.current_thread().name}")


async def test_fifty_concurrent_callers() -> None:
    async with asyncio.timeout(60):
        async with TrioRecallVectorStore(Gated(), max_entries=1000) as vs:
            vs.embeddings.gate.set()  # type: ignore[union-attr]
            texts = [f"doc{i} shared" for i in range(50)]
            written = await asyncio.gather(
                *(vs.aadd_texts([t], ids=[str(i)]) for i, t in enumerate(texts))
            )
            assert written == [[str(i)] for i in range(50)]
            expected = [vs.similarity_search(f"doc{i}", k=1) for i in range(50)]
            got = await asyncio.gather(*(vs.asimilarity_search(f"doc{i}", k=1) for i in range(50)))
            assert got == expected
            assert len(vs.get_by_ids([str(i) for i in range(50)])) == 50


async def test_the_asyncio_loop_runs_while_a_call_is_in_flight() -> None:
    embedding = Gated()
    async with asyncio.timeout(30):
        vs = TrioRecallVectorStore(embedding)
        try:
            await vs.aadd_texts(["hello"], ids=["h"])
            search = asyncio.ensure_future(vs.asimilarity_search("hello", k=1))
            await asyncio.to_thread(embedding.waiting.wait)
            assert not search.done()
            # This coroutine runs (the loop is not blocked), and it is what opens the gate.
            embedding.gate.set()
            assert [d.id for d in await search] == ["h"]
        finally:
            vs.close()


async def test_cancelling_the_asyncio_caller_cancels_the_trio_call() -> None:
    log: list[str] = []
    bridge: TrioBridge[Any] = TrioBridge.start(lambda: recorded_store(log))
    started = threading.Event()

    async def slow(store: Any) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            log.append("trio call cancelled")
            raise

    try:
        async with asyncio.timeout(30):
            call = asyncio.ensure_future(bridge.acall(slow))
            await asyncio.to_thread(started.wait)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            # The caller's cancellation ended only once the trio task had ended.
            assert log[-1] == "trio call cancelled"

            async def count(store: Any) -> int:
                return len(store)

            assert await bridge.acall(count) == 0  # the bridge still serves
    finally:
        bridge.close()
    assert log[-1] == "closing in trio-recall"


async def test_cancelled_search_leaves_the_store_usable() -> None:
    embedding = Gated()
    async with asyncio.timeout(30):
        async with TrioRecallVectorStore(embedding) as vs:
            await vs.aadd_texts(["kept"], ids=["k"])
            search = asyncio.ensure_future(vs.asimilarity_search("kept", k=1))
            await asyncio.to_thread(embedding.waiting.wait)
            search.cancel()
            with pytest.raises(asyncio.CancelledError):
                await search  # returns while the embedding thread is still stuck
            embedding.gate.set()
            assert [d.id for d in await vs.asimilarity_search("kept", k=1)] == ["k"]


async def test_close_with_calls_in_flight() -> None:
    embedding = Gated()
    async with asyncio.timeout(30):
        vs = TrioRecallVectorStore(embedding)
        await vs.aadd_texts(["x"], ids=["x"])
        calls = [asyncio.ensure_future(vs.asimilarity_search("x", k=1)) for _ in range(5)]
        await asyncio.to_thread(embedding.waiting.wait)
        await vs.aclose()
        for call in calls:
            with pytest.raises(trio.ClosedResourceError, match="did not answer: it closed"):
                await call
        embedding.gate.set()
        with pytest.raises(trio.ClosedResourceError):
            await vs.asimilarity_search("x", k=1)
    assert not any(t.name == "trio-recall" for t in threading.enumerate())


def test_close_runs_in_the_trio_thread_and_joins_it() -> None:
    log: list[str] = []
    bridge: TrioBridge[Any] = TrioBridge.start(lambda: recorded_store(log))
    bridge.close()
    assert log == ["opened in trio-recall", "closing in trio-recall"]
    assert not any(t.name == "trio-recall" for t in threading.enumerate())


def test_a_call_from_the_bridge_thread_is_a_clear_error() -> None:
    bridge: TrioBridge[Any] = TrioBridge.start(lambda: open_store(CONFIG, HashingEmbedder(32)))

    async def reenter(store: Any) -> None:
        async def inner(store: Any) -> None:
            return None

        bridge.call(inner)

    async def close_inside(store: Any) -> None:
        bridge.close()

    try:
        with pytest.raises(RuntimeError, match="would wait for itself forever"):
            bridge.call(reenter)
        with pytest.raises(RuntimeError, match="closed from its own trio thread"):
            bridge.call(close_inside)
    finally:
        bridge.close()


def test_sync_calls_from_plain_threads() -> None:
    bridge: TrioBridge[Any] = TrioBridge.start(lambda: open_store(CONFIG, HashingEmbedder(32)))

    async def write_and_read(store: Any, t: int) -> list[str]:
        space = f"writer{t}"
        ids = await store.add_texts([f"item{i}" for i in range(20)], namespace=space)
        hits = await store.search(SearchRequest(query="item", k=50, namespace=space))
        assert len(await store.get_by_ids(ids, space)) == 20
        return sorted(h.document.id for h in hits)

    results: dict[int, list[str]] = {}

    def worker(t: int) -> None:
        results[t] = bridge.call(write_and_read, t)

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(results) == list(range(8))
        assert all(len(ids) == 20 for ids in results.values())
        assert len({tuple(ids) for ids in results.values()}) == 1  # same texts, same ids
    finally:
        bridge.close()


def test_an_error_opening_the_store_raises_as_itself() -> None:
    bad = VectorStoreConfig(max_entries=10, dimensions=8, max_entry_bytes=100)
    before = threading.active_count()
    with pytest.raises(ConfigError, match="dimensions"):
        TrioBridge.start(lambda: open_store(bad, HashingEmbedder(16)))
    assert threading.active_count() == before


def test_errors_cross_as_themselves() -> None:
    bridge: TrioBridge[Any] = TrioBridge.start(lambda: open_store(CONFIG, HashingEmbedder(32)))

    async def fail(store: Any) -> None:
        raise KeyError("seen on the other side")

    try:
        with pytest.raises(KeyError, match="seen on the other side"):
            bridge.call(fail)
        with pytest.raises(ConfigError, match="k is 0"):
            bridge.call(lambda store: store.retrieve("q", 0))
    finally:
        bridge.close()


class GatedDocuments(Gated):
    """Documents whose text starts with "slow" wait on the gate; queries embed at once."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if texts[0].startswith("slow"):
            self.waiting.set()
            self.gate.wait(30)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._hash.embed(text).tolist()


async def test_a_cancelled_write_already_queued_is_still_applied_whole() -> None:
    embedding = GatedDocuments()
    async with asyncio.timeout(30):
        async with TrioRecallVectorStore(embedding) as vs:
            write = asyncio.ensure_future(vs.aadd_texts(["slow one", "slow two"], ids=["1", "2"]))
            await asyncio.to_thread(embedding.waiting.wait)  # the actor is embedding it
            write.cancel()
            with pytest.raises(asyncio.CancelledError):
                await write
            embedding.gate.set()
            # Writes are applied in order: once this one is, the cancelled one was too.
            await vs.aadd_texts(["fast"], ids=["3"])
            assert sorted(d.id for d in await vs.aget_by_ids(["1", "2", "3"])) == ["1", "2", "3"]


def test_an_error_closing_the_store_is_raised_by_close_once() -> None:
    @asynccontextmanager
    async def fails_on_close() -> AsyncIterator[None]:
        yield None
        raise KeyError("the store could not close")

    bridge: TrioBridge[None] = TrioBridge.start(fails_on_close)
    with pytest.raises(KeyError, match="could not close"):
        bridge.close()
    bridge.close()  # reported once; closing again does nothing
