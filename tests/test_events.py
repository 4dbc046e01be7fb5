"""Events: what each stage publishes, slow subscribers, and the end of the stream."""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

from actors import open_memory
from actors._store.events import EventHub
from protocol import (
    ConfigError,
    Event,
    MemoryConfig,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import (
    Offload,
    Summarize,
)
from protocol.events import (
    Evicted,
    MemoryEvent,
    Recalled,
    RecallFailed,
    RecallInjected,
    StoreNearCap,
    TurnsOffloaded,
    TurnsSummarized,
)

DIM = 32


def drain(subscription: object) -> list[Event]:
    out: list[Event] = []
    while True:
        try:
            out.append(subscription.receive_nowait())  # type: ignore[attr-defined]
        except trio.WouldBlock:
            return out


def tagged(events: list[Event], *prefixes: str) -> list[Event]:
    """The events whose tag starts with one of ``prefixes`` (the store, embedding and
    retriever events are tested in test_store_events.py)."""
    return [e for e in events if str(type(e).__struct_config__.tag).startswith(prefixes)]


def prompt() -> list[UnifiedMessage]:
    return [
        UnifiedMessage.system("s"),
        UnifiedMessage.user("the cat is Miso"),
        UnifiedMessage.assistant("ok"),
        UnifiedMessage.user("what is the cat called"),
    ]


async def test_each_stage_publishes_a_typed_event() -> None:
    store = VectorStoreConfig(max_entries=8, dimensions=DIM, max_entry_bytes=1024)
    config = MemoryConfig(strategies=[Offload(turns=2)], namespace="alice")
    with trio.fail_after(10):
        async with open_memory(store=store, memory=config) as memory, memory.events() as events:
            out = await memory.compress(prompt())
            report = await memory.retrieve("what is the cat called")
            request = UnifiedRequest(model="m", messages=out.messages)
            injected = await memory.inject(report, request)
            got = tagged(drain(events), "compaction.", "recall.")
    offloaded, recalled, injected_event = got
    assert isinstance(offloaded, TurnsOffloaded)
    assert offloaded.count == 2
    assert offloaded.ids == out.report.actions[0].ids  # type: ignore[union-attr]
    assert isinstance(recalled, Recalled)
    assert recalled.hits == 2
    assert recalled.scanned == 2
    assert recalled.best == report.turns[0].score
    # The query is never in clear, only its fingerprint.
    assert "cat" not in msgspec.json.encode(recalled).decode()
    assert len(recalled.query_fingerprint) == 16
    assert isinstance(injected_event, RecallInjected)
    assert injected_event.outcome == injected.outcome.value == "inserted"
    assert injected_event.items == 2
    assert all(e.namespace == "alice" for e in got)
    stamps = [e.at for e in got]
    assert stamps == sorted(stamps)


async def test_events_round_trip_as_one_union() -> None:
    event = Recalled(at=1.5, namespace="n", query_fingerprint="ab", hits=1, scanned=2, best=0.5)
    data = msgspec.msgpack.encode(event)
    assert msgspec.msgpack.decode(data, type=MemoryEvent) == event
    assert msgspec.json.decode(msgspec.json.encode(event))["event"] == "recall.recalled"


async def test_summaries_evictions_and_near_cap() -> None:
    store = VectorStoreConfig(
        max_entries=3, dimensions=DIM, max_entry_bytes=1024, warn_fraction=0.6
    )
    with trio.fail_after(10):
        async with (
            open_memory(
                store=store, memory=MemoryConfig(strategies=[Summarize(turns=2)])
            ) as memory,
            memory.events() as events,
        ):
            await memory.compress(prompt())  # 1 entry: 1/3, under the warning
            await memory.remember("two")  # 2/3: crosses 0.6
            await memory.remember("three")  # 3/3: still over, no second warning
            await memory.remember("four")  # evicts one
            got = tagged(drain(events), "compaction.", "vector_store.near_cap", "vector_store.ev")
    kinds = [type(e) for e in got]
    assert kinds == [TurnsSummarized, StoreNearCap, Evicted]
    summarized, near, evicted = got
    assert isinstance(summarized, TurnsSummarized)
    assert summarized.count == 2
    assert summarized.stored_id is not None
    assert isinstance(near, StoreNearCap)
    assert (near.entries, near.capacity) == (2, 3)
    assert isinstance(evicted, Evicted)
    assert (evicted.count, evicted.total) == (1, 1)


async def test_a_failed_recall_publishes_recall_failed() -> None:
    class Broken:
        dimensions = DIM

        def embed(self, text: str) -> list[float]:
            raise RuntimeError("down")

    store = VectorStoreConfig(max_entries=4, dimensions=DIM, max_entry_bytes=1024)
    with trio.fail_after(10):
        async with (
            open_memory(store=store, embedder=Broken()) as memory,
            memory.events() as events,
        ):
            turned = await memory.turn(UnifiedRequest(model="m", messages=prompt()))
            got = drain(events)
    assert turned.report.recall_error is not None
    failed = next(e for e in got if isinstance(e, RecallFailed))
    assert failed.error.startswith("EmbedderError")
    assert isinstance(got[-1], RecallInjected)
    assert got[-1].outcome == "absent"


async def test_a_slow_subscriber_loses_events_and_never_blocks() -> None:
    store = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=1024)
    with trio.fail_after(10):
        async with open_memory(store=store) as memory:
            slow = memory.events(buffer_size=2)
            fast = memory.events(buffer_size=1024)
            # Nobody reads while ten recalls publish their events: none of them waits.
            for i in range(10):
                await memory.retrieve(f"query {i}")
            published = memory.statistics().events_published
            assert published > 10  # each recall publishes several events
            assert slow.dropped == published - 2
            assert fast.dropped == 0
            assert len(drain(slow)) == 2
            assert len(drain(fast)) == published
            # Once it has room again, the slow subscriber gets new events.
            await memory.retrieve("one more")
            assert len(tagged(drain(slow), "recall.")) <= 1
            assert slow.dropped > published - 2
            await slow.aclose()
            await memory.retrieve("after unsubscribe")
            assert memory.statistics().subscribers == 1
            assert len(tagged(drain(fast), "recall.")) == 2


async def test_iteration_ends_when_the_memory_closes() -> None:
    store = VectorStoreConfig(max_entries=8, dimensions=DIM, max_entry_bytes=1024)
    seen: list[Event] = []

    async def consume(events: object) -> None:
        async for event in events:  # type: ignore[attr-defined]
            seen.append(event)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, open_memory(store=store) as memory:
            nursery.start_soon(consume, memory.events())
            await trio.testing.wait_all_tasks_blocked()
            await memory.retrieve("a")
            await memory.retrieve("b")
            # Leaving open_memory ends the stream, so the consumer returns by itself.
    assert [type(e) for e in tagged(seen, "recall.")] == [Recalled, Recalled]


def test_hub_validates_and_stops_after_close() -> None:
    hub = EventHub()
    with pytest.raises(ConfigError, match="buffer_size is 0"):
        hub.subscribe(0)
    sub = hub.subscribe(1)
    hub.close()
    hub.publish(Recalled(at=0, namespace="n", query_fingerprint="", hits=0, scanned=0, best=None))
    assert hub.published == 0
    with pytest.raises(trio.ClosedResourceError):
        hub.subscribe(1)
    with pytest.raises(trio.EndOfChannel):
        sub.receive_nowait()
