"""Each write's checks run once, at the store handle, on both backends: the actor trusts
the batch the handle built (``actors/_store/backend.py``).

Every reference to each check function, in every module of ``actors`` and ``protocol``,
is replaced by a counting wrapper, so a call from anywhere (``Memory``, the handle, an
actor, the pg preparation) counts.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import msgspec
import numpy as np
import pytest
import trio
import trio.testing
from pg_support import fresh_pg_store, session_dsn

import protocol._json
import protocol._time
from actors import HashingEmbedder, open_memory, open_store
from actors._store import prepare
from protocol import (
    ConfigError,
    Document,
    EmbeddingError,
    JsonError,
    Text,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 16
CONFIG = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=4096)
WHEN = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)

CHECKS: dict[str, Callable[..., Any]] = {
    "check_turns": prepare.check_turns,
    "check_documents": prepare.check_documents,
    "check_json_object": protocol._json.check_json_object,
    "check_time": protocol._time.check_time,
    "check_conversation": protocol._time.check_conversation,
}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each check in :data:`CHECKS` has run since the counting began."""
    counts: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    wrappers = {name: counting(name, fn) for name, fn in CHECKS.items()}
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith(("actors", "protocol")):
            continue
        for attr, value in list(vars(module).items()):
            for name, fn in CHECKS.items():
                if value is fn:
                    monkeypatch.setattr(module, attr, wrappers[name])
    return counts


@asynccontextmanager
async def memory_store() -> AsyncIterator[Any]:
    async with open_store(CONFIG, HashingEmbedder(DIM)) as store:
        yield store


def pg_store() -> AbstractAsyncContextManager[Any]:
    return fresh_pg_store(session_dsn(), CONFIG, HashingEmbedder(DIM))


BACKENDS = pytest.mark.parametrize("opener", [memory_store, pg_store], ids=["memory", "pg"])


@BACKENDS
async def test_remember_checks_each_write_once(
    opener: Callable[[], AbstractAsyncContextManager[Any]], calls: Counter[str]
) -> None:
    with trio.fail_after(30):
        async with opener() as store, open_memory(store=store) as memory:
            calls.clear()
            await memory.remember(
                "the key is under the blue pot",
                metadata={"topic": "keys", "tags": ["home", 1.5]},
                occurred_at=WHEN,
                conversation="c1",
            )
            assert calls == {
                "check_turns": 1,
                "check_json_object": 1,
                "check_time": 1,
                "check_conversation": 1,
            }
            # A refused write is refused by that one check too, and changes nothing.
            calls.clear()
            with pytest.raises(JsonError):
                await memory.remember("x", metadata={"bad": float("nan")})
            assert calls == {
                "check_turns": 1,
                "check_json_object": 1,
                "check_time": 1,
                "check_conversation": 1,
            }
            assert len(store) == 1


@BACKENDS
async def test_store_turns_checks_each_write_once(
    opener: Callable[[], AbstractAsyncContextManager[Any]], calls: Counter[str]
) -> None:
    turns = [UnifiedMessage.user(f"turn {i}") for i in range(5)]
    with trio.fail_after(30):
        async with opener() as store:
            calls.clear()
            await store.store_turns(turns, metadata={"a": 1}, occurred_at=WHEN)
            await store.store_turns(turns[:2], ids=["x", "y"], conversation="c")
            assert calls == {
                "check_turns": 2,
                "check_json_object": 2,
                "check_time": 2,
                "check_conversation": 2,
            }
            assert len(store) == 7


@BACKENDS
async def test_add_documents_checks_each_write_once(
    opener: Callable[[], AbstractAsyncContextManager[Any]], calls: Counter[str]
) -> None:
    documents = [
        Document(text=f"document {i}", metadata={"i": i}, occurred_at=WHEN, conversation="c")
        for i in range(4)
    ]
    with trio.fail_after(30):
        async with opener() as store:
            calls.clear()  # the documents checked themselves as they were made
            ids = await store.add_documents(documents)
            # One batch check; inside it, each document's metadata, time and conversation
            # once (a document may have been changed since it was made).
            assert calls == {
                "check_documents": 1,
                "check_json_object": 4,
                "check_time": 4,
                "check_conversation": 4,
            }
            assert len(await store.get_by_ids(ids)) == 4


class GatedEmbedder:
    """An async embedder whose document calls wait for ``gate`` once it is armed."""

    dimensions = DIM

    def __init__(self) -> None:
        self.inner = HashingEmbedder(DIM)
        self.gate: trio.Event | None = None
        self.waiting = trio.Event()

    async def embed_documents(self, texts: Sequence[str]) -> object:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return self.inner.embed_batch(texts)

    async def embed_query(self, text: str) -> object:
        return self.inner.embed(text)


def gated_memory_store(embedder: GatedEmbedder) -> AbstractAsyncContextManager[Any]:
    return open_store(CONFIG, embedder)


def gated_pg_store(embedder: GatedEmbedder) -> AbstractAsyncContextManager[Any]:
    return fresh_pg_store(session_dsn(), CONFIG, embedder)


@pytest.mark.parametrize("opener", [gated_memory_store, gated_pg_store], ids=["memory", "pg"])
async def test_a_checked_write_ignores_changes_made_while_it_waits(
    opener: Callable[[GatedEmbedder], AbstractAsyncContextManager[Any]],
) -> None:
    """The actor trusts the batch the handle built, so that batch must not read the
    caller's objects again: a message and metadata changed after ``store_turns`` was
    called (here while the write waits in the inbox) are stored as they were checked,
    and nothing poisons the store."""
    embedder = GatedEmbedder()
    first = UnifiedMessage.user("first")
    message = UnifiedMessage(role="user", content=[Text(text="as checked")], name="ann")
    metadata: dict[str, Any] = {"kept": "yes"}
    with trio.fail_after(30):
        async with opener(embedder) as store:
            async with trio.open_nursery() as nursery:
                embedder.gate = trio.Event()
                nursery.start_soon(store.store_turns, [first])
                await embedder.waiting.wait()  # the actor is embedding the first write
                stored: list[Any] = []

                async def second() -> None:
                    stored.append(await store.store_turns([message], metadata=metadata))

                nursery.start_soon(second)
                await trio.testing.wait_all_tasks_blocked()  # checked and queued
                content: list[Any] = message.content
                content.append(object())
                metadata["kept"] = object()
                embedder.gate.set()
            [entry_id] = stored[0].ids
            report = await store.retrieve_embedding(np.ones(DIM), k=8)
            got = {t.id: t for t in report.turns}[entry_id]
            assert got.message == UnifiedMessage(
                role="user", content=[Text(text="as checked")], name="ann"
            )
            assert got.metadata == {"kept": "yes"}
            assert store.usage().entries == 2


@BACKENDS
@pytest.mark.parametrize("block", [None, "a str", 5], ids=["none", "str", "int"])
async def test_a_message_whose_content_list_was_changed_is_refused(
    opener: Callable[[], AbstractAsyncContextManager[Any]], block: object
) -> None:
    """A message checks its blocks when it is made, but its content list stays the
    caller's: one changed afterwards to hold something that is not a block is refused
    by the write's one check (a ConfigError naming it), not stored to break every later
    read of it, and the store is unchanged and usable."""
    message = UnifiedMessage(role="user", content=[Text(text="hello there")])
    content: list[Any] = message.content
    content.append(block)
    with trio.fail_after(30):
        async with opener() as store:
            with pytest.raises(ConfigError, match=r"content\[1\] is a"):
                await store.store_turns([UnifiedMessage.user("fine"), message])
            assert store.usage().entries == 0
            assert not store.statistics().poisoned
            await store.store_turns([UnifiedMessage.user("hello there")])
            report = await store.retrieve_embedding(np.ones(DIM), k=8)
            assert [t.message for t in report.turns] == [UnifiedMessage.user("hello there")]


@pytest.mark.parametrize("opener", [gated_memory_store, gated_pg_store], ids=["memory", "pg"])
async def test_a_checked_document_embedding_ignores_changes_made_while_it_waits(
    opener: Callable[[GatedEmbedder], AbstractAsyncContextManager[Any]],
) -> None:
    """A document's precomputed embedding is a list the caller can still reach
    (``document.embedding``): changed while the write waits in the inbox, the store
    keeps the vector as it was when the write was called, and nothing fails."""
    embedder = GatedEmbedder()
    vector = [1.0] + [0.0] * (DIM - 1)
    document = Document(text="precomputed", id="p", embedding=vector)
    with trio.fail_after(30):
        async with opener(embedder) as store:
            async with trio.open_nursery() as nursery:
                embedder.gate = trio.Event()
                nursery.start_soon(store.store_turns, [UnifiedMessage.user("first")])
                await embedder.waiting.wait()  # the actor is embedding the first write
                nursery.start_soon(store.add_documents, [document])
                await trio.testing.wait_all_tasks_blocked()  # checked and queued
                assert document.embedding is not None
                document.embedding[0] = 0.0
                document.embedding[1] = 1.0
                embedder.gate.set()
            report = await store.retrieve_embedding(np.array(vector), k=1)
            [best] = report.turns
            assert best.id == "p"
            assert best.score == pytest.approx(1.0)
            assert store.usage().entries == 2


@BACKENDS
@pytest.mark.parametrize(
    ("field", "value", "error"),
    [("role", "robot", "role is 'robot'"), ("content", None, "content is a NoneType")],
    ids=["role", "content"],
)
async def test_a_message_changed_past_its_own_check_is_refused(
    opener: Callable[[], AbstractAsyncContextManager[Any]], field: str, value: object, error: str
) -> None:
    """A message whose role or content was set past its own check (``force_setattr``
    on the frozen struct) is refused by the write's one check as a ConfigError naming
    the value, neither a bare TypeError nor a crash of the actor (pg rebuilds a plain
    turn from its role), and the store is unchanged and usable."""
    message = UnifiedMessage.user("hello there")
    msgspec.structs.force_setattr(message, field, value)
    with trio.fail_after(30):
        async with opener() as store:
            with pytest.raises(ConfigError, match=re.escape(error)):
                await store.store_turns([UnifiedMessage.user("fine"), message])
            assert store.usage().entries == 0
            assert not store.statistics().poisoned
            await store.store_turns([UnifiedMessage.user("hello there")])
            report = await store.retrieve_embedding(np.ones(DIM), k=8)
            assert [t.message for t in report.turns] == [UnifiedMessage.user("hello there")]


@BACKENDS
@pytest.mark.parametrize(
    ("field", "value", "error", "seen"),
    [
        ("text", 5, ConfigError, "int"),
        ("id", 5, ConfigError, "int"),
        ("source_id", 5, ConfigError, "int"),
        ("embedding", 3, EmbeddingError, "3"),
    ],
    ids=["text", "id", "source_id", "embedding"],
)
async def test_a_document_changed_past_its_own_check_is_refused(
    opener: Callable[[], AbstractAsyncContextManager[Any]],
    field: str,
    value: object,
    error: type[Exception],
    seen: str,
) -> None:
    """A document whose field was set past its own check (``force_setattr`` on the
    frozen struct) is refused as the store's error naming what it saw, not a bare
    AttributeError or TypeError, and the store is unchanged and usable."""
    document = Document(text="hello", id="a", source_id="s")
    msgspec.structs.force_setattr(document, field, value)
    with trio.fail_after(30):
        async with opener() as store:
            with pytest.raises(error, match=seen):
                await store.add_documents([Document(text="fine", id="b"), document])
            assert store.usage().entries == 0
            assert not store.statistics().poisoned
            await store.add_documents([Document(text="fine", id="b")])
            assert [d.id for d in await store.get_by_ids(["a", "b"])] == ["b"]
