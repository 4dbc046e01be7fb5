"""The one store lifecycle, tested through every way a user opens a store.

The composition bugs the one lifecycle fixed (design §1), each tested where a user meets
it: ``open_memory`` over its own store and over a borrowed handle (in memory and on pg),
embedder timeouts, stuck embedders when a store closes, ``BaseException`` from an
embedder or a summarizer, and ``Memory.turn``'s best effort. Every backend-neutral test
runs on both backends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np
import pytest
import trio

from actors import HashingEmbedder, open_memory, open_store
from actors.testing import inject_crash
from protocol import (
    EmbedderError,
    MemoryConfig,
    Poisoned,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import (
    Offload,
    Summarize,
)

DIMS = 16
CONFIG = VectorStoreConfig(max_entries=64, dimensions=DIMS, max_entry_bytes=4096)
StoreFactory = Callable[..., AbstractAsyncContextManager[Any]]


class Custom(BaseException):
    """A BaseException that is neither Cancelled, KeyboardInterrupt nor SystemExit."""


class Raising:
    """A sync embedder that raises ``error`` from every call once armed."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.inner = HashingEmbedder(DIMS)
        self.dimensions = DIMS
        self.error = error

    def embed(self, text: str) -> Any:
        if self.error is not None:
            raise self.error
        return self.inner.embed(text)


class Stuck:
    """A sync embedder whose calls block their thread until released."""

    def __init__(self) -> None:
        self.dimensions = DIMS
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, text: str) -> Any:
        self.entered.set()
        self.release.wait(60)
        return np.ones(DIMS, dtype=np.float32)


class SlowAsync:
    def __init__(self, seconds: float) -> None:
        self.dimensions = DIMS
        self.seconds = seconds

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        await trio.sleep(self.seconds)
        return np.ones((len(texts), DIMS), dtype=np.float32)

    async def embed_query(self, text: str) -> Any:
        await trio.sleep(self.seconds)
        return np.ones(DIMS, dtype=np.float32)


@pytest.fixture(params=["memory", "pg"])
def open_any(request: pytest.FixtureRequest) -> StoreFactory:
    """``open_store`` or ``open_pg_store`` (on its own table), with the same signature."""
    if request.param == "memory":
        return open_store
    dsn = request.getfixturevalue("pg_dsn")
    table = request.getfixturevalue("pg_table")
    from actors import open_pg_store

    def factory(config: VectorStoreConfig, embedder: object, **kw: Any) -> Any:
        return open_pg_store(dsn, config, embedder, table=table, **kw)

    return factory


def turns(*texts: str) -> list[UnifiedMessage]:
    return [UnifiedMessage.user(t) for t in texts]


# --- open_memory: owned store, every task started -------------------------------------------


@pytest.mark.parametrize("threshold", [None, 0])
async def test_open_memory_serves_concurrent_big_reads(threshold: int | None) -> None:
    # On the old main, open_memory built its own store actor without the scan runner:
    # two concurrent reads of 3,000 x 384 (or any read with the threshold at 0) hung.
    config = VectorStoreConfig(max_entries=3000, dimensions=384, max_entry_bytes=256)
    kw = {} if threshold is None else {"thread_scan_threshold": threshold}
    rng = np.random.default_rng(7)
    with trio.fail_after(30):
        async with open_memory(store=config, **kw) as memory:
            await memory.store.store_turns(turns(*(f"turn {i}" for i in range(3000))))
            results: list[int] = []

            async def read() -> None:
                report = await memory.store.retrieve_embedding(rng.standard_normal(384), k=5)
                results.append(len(report.turns))

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(read)
            assert results == [5, 5, 5, 5]
            # And through the memory's own recall path.
            report = await memory.retrieve("turn 17", k=3)
            assert len(report.turns) == 3


# --- open_memory over a borrowed handle ------------------------------------------------------


async def test_two_memories_share_one_borrowed_handle(open_any: StoreFactory) -> None:
    with trio.fail_after(30):
        async with open_any(CONFIG, HashingEmbedder(DIMS)) as store:
            shared = MemoryConfig(namespace="team")
            async with (
                open_memory(store=store, memory=shared) as first,
                open_memory(store=store, memory=shared) as second,
                open_memory(store=store, memory=MemoryConfig(namespace="other")) as third,
            ):
                assert first.store is store
                await first.remember("the deploy key rotates on fridays")
                report = await second.retrieve("when does the deploy key rotate?", k=3)
                assert [t.message.content[0].text for t in report.turns] == [  # type: ignore[union-attr]
                    "the deploy key rotates on fridays"
                ]
                # Another namespace sees nothing of it.
                isolated = await third.retrieve("when does the deploy key rotate?", k=3)
                assert isolated.turns == []
            # The memories never close a handle they borrow.
            assert len(store) == 1
            await store.store_turns(turns("still open"), namespace="team")
            assert len(store) == 2


async def test_a_memory_refuses_an_embedder_or_timeout_with_a_handle() -> None:
    from protocol import ConfigError

    with trio.fail_after(10):
        async with open_store(CONFIG, HashingEmbedder(DIMS)) as store:
            with pytest.raises(ConfigError, match="embedder is given with an open store"):
                async with open_memory(store=store, embedder=HashingEmbedder(DIMS)):
                    pass
            with pytest.raises(ConfigError, match="embed_timeout is given"):
                async with open_memory(store=store, embed_timeout=1.0):
                    pass
            with pytest.raises(ConfigError, match="expected a VectorStoreConfig or an open"):
                async with open_memory(store="not a store"):  # type: ignore[arg-type]
                    pass
    # A closed handle is refused before any actor starts.
    with trio.fail_after(10), pytest.raises(trio.ClosedResourceError):
        async with open_memory(store=store):
            pass


async def test_a_borrowed_store_reports_usage_and_events_to_the_memory() -> None:
    with trio.fail_after(10):
        async with open_store(CONFIG, HashingEmbedder(DIMS)) as store:
            async with open_memory(store=store) as memory, memory.events() as events:
                await memory.remember("alpha beta")
                await memory.retrieve("alpha", k=1)
                totals = memory.embedding_usage()
                assert totals.calls == 2
                kinds = []
                while len(kinds) < 3:
                    kinds.append(type(await events.__anext__()).__struct_config__.tag)
            # The taps are gone with the memory: the store's later calls reach nobody.
            adapter: Any = store._actor.embedder
            assert adapter.listeners == []
            assert store._actor.event_sinks == []
    assert "embedding.completed" in kinds
    assert "vector_store.added" in kinds


async def test_memory_over_pg_runs_a_whole_turn_and_recalls_after_reopen(
    pg_dsn: str,
    pg_table: str,
) -> None:
    from actors import open_pg_store

    config = MemoryConfig(strategies=[Offload(turns=2)], namespace="agent-7")
    messages = [
        UnifiedMessage.system("You are terse."),
        UnifiedMessage.user("my cat is called Miso"),
        UnifiedMessage.assistant("Noted."),
        UnifiedMessage.user("what is my cat called?"),
    ]
    with trio.fail_after(60):
        async with open_pg_store(pg_dsn, CONFIG, HashingEmbedder(DIMS), table=pg_table) as pg:
            async with open_memory(store=pg, memory=config) as memory:
                turned = await memory.turn(UnifiedRequest(model="m", messages=messages))
            assert turned.report.compression.after < turned.report.compression.before
            assert turned.report.recall is not None
            assert any("Miso" in t.message.content[0].text for t in turned.report.recall.turns)  # type: ignore[union-attr]
        # A new store on the same table: what was offloaded is still recalled.
        async with (
            open_pg_store(pg_dsn, CONFIG, HashingEmbedder(DIMS), table=pg_table) as pg,
            open_memory(store=pg, memory=config) as memory,
        ):
            report = await memory.retrieve("what is my cat called?", k=2)
    assert any("Miso" in t.message.content[0].text for t in report.turns)  # type: ignore[union-attr]


# --- embed_timeout and stuck embedders -------------------------------------------------------


async def test_embed_timeout_bounds_each_call_and_changes_nothing(open_any: StoreFactory) -> None:
    with trio.fail_after(30):
        async with open_any(CONFIG, SlowAsync(5.0), embed_timeout=0.05) as store:
            started = time.monotonic()
            with pytest.raises(EmbedderError) as raised:
                await store.store_turns(turns("never stored"))
            assert isinstance(raised.value.error, TimeoutError)
            assert "embed_timeout" in str(raised.value.error)
            with pytest.raises(EmbedderError) as raised:
                await store.retrieve("a query", k=1)
            assert isinstance(raised.value.error, TimeoutError)
            assert time.monotonic() - started < 4.0
            assert len(store) == 0
            assert not store.statistics().poisoned


async def test_embed_timeout_abandons_a_stuck_sync_embedder(open_any: StoreFactory) -> None:
    stuck = Stuck()
    try:
        with trio.fail_after(20):
            async with open_any(CONFIG, stuck, embed_timeout=0.2) as store:
                with pytest.raises(EmbedderError) as raised:
                    await store.store_turns(turns("stuck"))
                assert isinstance(raised.value.error, TimeoutError)
                assert len(store) == 0
    finally:
        stuck.release.set()


async def test_leaving_a_store_never_waits_for_an_embedder_call(open_any: StoreFactory) -> None:
    # No timeout: the write is in the actor, its embedder stuck in a thread, when the
    # block ends. On the old main, leaving waited for the thread (here: for ever).
    stuck = Stuck()
    outcome: list[BaseException] = []

    async def write(store: Any) -> None:
        try:
            await store.store_turns(turns("in flight"))
        except trio.ClosedResourceError as error:
            outcome.append(error)

    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery, open_any(CONFIG, stuck) as store:
                nursery.start_soon(write, store)
                await trio.to_thread.run_sync(stuck.entered.wait, 10)
    finally:
        stuck.release.set()
    assert len(outcome) == 1


async def test_an_outer_cancel_scope_closes_a_store_without_poisoning_it(
    open_any: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # A deadline (or a signal handler's cancel) outside the block cancels the body and the
    # store's tasks at once. That is a cancellation, absorbed by the scope that asked for
    # it: not a crash, no Poisoned, no group (once, every such exit poisoned the store).
    with trio.fail_after(30):
        with trio.move_on_after(0.2) as outer:
            async with open_any(CONFIG, HashingEmbedder(DIMS)) as store:
                await store.store_turns(turns("kept"))
                await trio.sleep_forever()
        assert outer.cancelled_caught
        with trio.move_on_after(0.2) as outer:
            async with open_memory(store=CONFIG, embedder=HashingEmbedder(DIMS)):
                await trio.sleep_forever()
        assert outer.cancelled_caught
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]


# --- BaseException from an embedder or a summarizer ----------------------------------------


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_propagate_as_themselves(
    open_any: StoreFactory, stop: type[BaseException]
) -> None:
    embedder = Raising()
    with trio.fail_after(30):
        async with open_any(CONFIG, embedder) as store:
            embedder.error = stop("from the embedder")
            with pytest.raises(stop):
                await store.store_turns(turns("write"))
            with pytest.raises(stop):
                await store.retrieve("read", k=1)
            # Not a crash: the store is unchanged and still serves.
            embedder.error = None
            assert not store.statistics().poisoned
            await store.store_turns(turns("after"))
            assert len(store) == 1


async def test_another_base_exception_poisons_and_never_escapes_as_a_group(
    open_any: StoreFactory,
) -> None:
    embedder = Raising()
    survived = False
    with trio.fail_after(30):
        # The caller's own nursery must survive: only Poisoned reaches the caller.
        async with trio.open_nursery():
            with pytest.raises(Poisoned) as left:
                async with open_any(CONFIG, embedder) as store:
                    embedder.error = Custom("from the embedder")
                    with pytest.raises(Poisoned) as raised:
                        await store.store_turns(turns("write"))
                    assert isinstance(raised.value.__cause__, Custom)
                    with pytest.raises(Poisoned):
                        await store.retrieve("read", k=1)
                    survived = True
            assert isinstance(left.value.__cause__, Custom)
    assert survived


async def test_a_base_exception_in_a_read_poisons_the_store(open_any: StoreFactory) -> None:
    embedder = Raising()
    with trio.fail_after(30):
        with pytest.raises(Poisoned):
            async with open_any(CONFIG, embedder) as store:
                await store.store_turns(turns("one"))
                embedder.error = Custom("from a query")
                with pytest.raises(Poisoned) as raised:
                    await store.retrieve("read", k=1)
                assert isinstance(raised.value.__cause__, Custom)
                embedder.error = None
                with pytest.raises(Poisoned):
                    await store.store_turns(turns("two"))


def _summarizer(error: BaseException) -> Callable[[list[UnifiedMessage]], str]:
    def summarize(messages: list[UnifiedMessage]) -> str:
        raise error

    return summarize


CHAT = [
    UnifiedMessage.system("sys"),
    UnifiedMessage.user("one"),
    UnifiedMessage.assistant("two"),
    UnifiedMessage.user("three"),
    UnifiedMessage.assistant("four"),
    UnifiedMessage.user("five"),
]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
async def test_a_summarizers_keyboard_interrupt_reaches_the_caller(
    stop: type[BaseException],
) -> None:
    config = MemoryConfig(strategies=[Summarize(turns=2)])
    with trio.fail_after(10):
        async with open_memory(
            store=CONFIG, memory=config, summarizer=_summarizer(stop("stop"))
        ) as memory:
            with pytest.raises(stop):
                await memory.compress(list(CHAT))
            assert not memory.store.statistics().poisoned
            await memory.remember("still serving")


async def test_a_summarizers_base_exception_poisons_without_a_group() -> None:
    config = MemoryConfig(strategies=[Summarize(turns=2)])
    with trio.fail_after(10):
        with pytest.raises(Poisoned) as left:
            async with open_memory(
                store=CONFIG, memory=config, summarizer=_summarizer(Custom("bug"))
            ) as memory:
                with pytest.raises(Poisoned) as raised:
                    await memory.compress(list(CHAT))
                assert isinstance(raised.value.__cause__, Custom)
                # The memory's other actors still answer, with Poisoned.
                with pytest.raises(Poisoned):
                    await memory.retrieve("anything")
    assert isinstance(left.value.__cause__, Custom)


# --- Memory.turn: Poisoned propagates, the auto-stored input is best-effort -----------------


def request(*texts: str) -> UnifiedRequest:
    return UnifiedRequest(model="m", messages=[UnifiedMessage.user(t) for t in texts])


async def test_turn_lets_poisoned_propagate() -> None:
    with trio.fail_after(10):
        with pytest.raises(Poisoned):
            async with open_memory(store=CONFIG) as memory:
                inject_crash(memory.store)
                with pytest.raises(Poisoned):
                    await memory.remember("this write crashes the actor")
                # On the old main, turn swallowed Poisoned as a transient recall error.
                with pytest.raises(Poisoned):
                    await memory.turn(request("hello"))


class FailingDocuments:
    """Queries embed; documents fail (an embedder blip on the write path)."""

    def __init__(self) -> None:
        self.dimensions = DIMS
        self.inner = HashingEmbedder(DIMS)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        raise ConnectionError("embedding service blip")

    async def embed_query(self, text: str) -> Any:
        return self.inner.embed(text)


async def test_a_failed_auto_store_of_the_input_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = MemoryConfig(strategies=[], auto_store_user_input=True)
    small = VectorStoreConfig(max_entries=8, dimensions=DIMS, max_entry_bytes=64)
    with trio.fail_after(10), caplog.at_level(logging.WARNING, logger="trio_recall.memory"):
        async with open_memory(store=small, memory=config, embedder=FailingDocuments()) as m:
            turned = await m.turn(request("hello there"))
            assert turned.reply.role == "assistant"
        async with open_memory(store=small, memory=config) as memory:
            # A user message over max_entry_bytes cannot be stored; the turn goes on.
            turned = await memory.turn(request("x" * 200))
            assert turned.reply.role == "assistant"
            assert len(memory.store) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("embedding service blip" in w for w in warnings)
    assert any("EntryTooLarge" in w or "max_entry_bytes" in w for w in warnings)


async def test_handles_and_memories_are_made_only_by_their_open_functions() -> None:
    from actors import Memory, StoreHandle

    with trio.fail_after(10):
        async with open_store(CONFIG, HashingEmbedder(DIMS)) as store:
            with pytest.raises(
                TypeError,
                match="StoreHandle has no public constructor; it is made by open_store or "
                "open_pg_store",
            ):
                StoreHandle(store._actor, "memory")
            assert isinstance(store, StoreHandle)
    with pytest.raises(
        TypeError, match="Memory has no public constructor; it is made by open_memory"
    ):
        fields = ("config", "store", "hub", "watch", "dispatcher", "compaction", "recall")
        Memory(**dict.fromkeys((*fields, "injection", "inbox_size")))


async def test_compress_raises_poisoned_instead_of_reporting_it() -> None:
    config = MemoryConfig(strategies=[Offload(turns=2)])
    with trio.fail_after(10), pytest.raises(Poisoned):
        async with open_memory(store=CONFIG, memory=config) as memory:
            inject_crash(memory.store)
            # On the old main, compress returned with Poisoned as an Internal last_error.
            with pytest.raises(Poisoned):
                await memory.compress(list(CHAT))


async def test_remember_refuses_metadata_that_is_not_a_mapping() -> None:
    # The hostile layer found it: dict("meta") raised a raw ValueError from remember.
    from protocol import JsonError

    with trio.fail_after(10):
        async with open_memory(store=CONFIG) as memory:
            for bad in ("meta", [("a", 1)], 3):
                with pytest.raises(JsonError, match="expected a JSON object"):
                    await memory.remember("text", metadata=bad)  # type: ignore[arg-type]
            assert len(memory.store) == 0


async def test_retriever_events_name_the_backend_profile_and_kind(open_any: StoreFactory) -> None:
    from protocol import EmbeddingProfile, RecallSettings
    from protocol.events import RetrieverCompleted, RetrieverStarted

    class Profiled(HashingEmbedder):
        profile = EmbeddingProfile(provider="local", model="hashing", dimensions=DIMS)

    config = MemoryConfig(recall=RecallSettings(search="dense"))
    with trio.fail_after(30):
        async with (
            open_any(CONFIG, Profiled(DIMS)) as store,
            open_memory(store=store, memory=config) as memory,
            memory.events() as ev,
        ):
            await memory.remember("alpha beta")
            await memory.retrieve("alpha")
            seen: list[object] = []
            while not any(isinstance(e, RetrieverCompleted) for e in seen):
                seen.append(await ev.__anext__())
    expected = {"backend": store.backend, "profile": "local/hashing", "kind": "dense"}
    assert store.backend in ("memory", "pg")
    for event in seen:
        if isinstance(event, RetrieverStarted | RetrieverCompleted):
            assert {k: getattr(event, k) for k in expected} == expected
