"""Memory over time (docs/pages/how-to/memory-over-time.md), in memory, through the user's paths
(``open_store``, ``open_memory``): versions and history, ``as_of`` on every read,
concurrent updates, expiry by the store clock, dedupe, and a forget that leaves no
trace anywhere."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import numpy as np
import pytest
import trio

from actors import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingResult,
    HashingEmbedder,
    StoreHandle,
    open_memory,
    open_store,
)
from actors._embedding.adapter import EmbedderAdapter
from actors._retrieval.bm25 import tokenize
from actors._retrieval.links import body_terms
from protocol import (
    ConfigError,
    Document,
    EmbeddingProfile,
    Event,
    MemoryConfig,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.events import DocumentsDeleted

DIM = 64
TIMEOUT = 20
CONFIG = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=2048)
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
KINDS = ("similarity", "mmr", "hybrid", "bm25", "recall")


class FakeClock:
    """A store clock the test moves by hand."""

    def __init__(self, start: dt.datetime = T0) -> None:
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class HashModel:
    """An EmbeddingModel over the hashing embedder, so a store's embedder has a cache."""

    def __init__(self) -> None:
        self._hash = HashingEmbedder(DIM)
        self.profile = EmbeddingProfile(provider="test", model="hash", dimensions=DIM)

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        await trio.lowlevel.checkpoint()
        return EmbeddingResult(vectors=self._hash.embed_batch(list(texts)), tokens=None, batches=1)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return (await self.embed_with_report(texts, "document")).vectors

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self.embed_with_report([text], "query")).vectors[0]


@asynccontextmanager
async def store_with(
    clock: FakeClock | None = None, **kwargs: object
) -> AsyncIterator[StoreHandle]:
    async with open_store(
        CONFIG,
        HashingEmbedder(DIM),
        clock=clock,
        **kwargs,
    ) as store:
        yield store


async def search_ids(
    store: StoreHandle, query: str, kind: str, **fields: object
) -> list[str | None]:
    request = SearchRequest(query=query, kind=kind, k=10, **fields)
    return [hit.document.id for hit in await store.search(request)]


async def every_read(
    store: StoreHandle, query: str, namespace: str | None = None, **fields: object
) -> dict[str, list[str]]:
    """What each read path returns for ``query``: the ids of every search kind, of
    the recall turns, and of the dense export."""
    found: dict[str, list[str]] = {}
    for kind in KINDS:
        request = SearchRequest(
            query=query,
            kind=kind,
            k=10,
            namespace=namespace,
            **fields,
        )
        found[kind] = [h.document.id or "" for h in await store.search(request)]
        if kind == "recall":
            report = await store.search_turns(request)
            found["recall_turns"] = [t.id or "" for t in report.turns]
    if not fields:
        report = await store.retrieve_embedding(np.zeros(DIM), 64, namespace)
        found["export"] = [t.id or "" for t in report.turns]
    return found


# --- versions and history ------------------------------------------------------------


async def test_update_keeps_history_and_reads_see_the_current_version() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            (first,) = await store.add_documents(
                [Document(id="city", text="Alice lives in Paris", metadata={"k": 1})]
            )
            clock.advance(60)
            new = await store.update("city", "Alice lives in Berlin")
            assert new.version == 2
            assert new.supersedes == 1
            assert new.valid_from == T0 + dt.timedelta(seconds=60)
            assert new.occurred_at == new.valid_from
            assert new.metadata == {"k": 1}  # kept
            versions = await store.history("city")
            assert [v.version for v in versions] == [1, 2]
            assert [v.text for v in versions] == ["Alice lives in Paris", "Alice lives in Berlin"]
            assert versions[0].valid_from == T0
            assert versions[0].valid_to == new.valid_from
            assert versions[1].valid_to is None
            assert versions[1].supersedes == 1
            assert versions[0].supersedes is None
            # Every read sees the current version only.
            (got,) = await store.get_by_ids(["city"])
            assert got.text == "Alice lives in Berlin"
            assert got.version == 2
            for kind, ids in (await every_read(store, "Alice lives Paris Berlin")).items():
                assert ids.count("city") == 1, kind
            hits = await store.search(SearchRequest(query="Paris", kind="bm25", k=5))
            assert [h.document.id for h in hits] == []
            # Counting: the closed version occupies a slot.
            assert store.usage().entries == 2
            assert first == "city"
            assert await store.history("nope") == []


async def test_update_rules() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            with pytest.raises(ConfigError, match="no current memory with id 'x'"):
                await store.update("x", "text")
            created = await store.update("x", "made by update", create=True)
            assert created.version == 1
            assert created.supersedes is None
            with pytest.raises(ConfigError, match="not later than version 1"):
                await store.update("x", "too early", valid_from=T0 - dt.timedelta(days=1))
            with pytest.raises(ConfigError, match="not later than"):
                await store.update("x", "same instant")  # the clock has not moved
            clock.advance(1)
            expiry = T0 + dt.timedelta(days=9)
            second = await store.update("x", metadata={"m": True}, expires_at=expiry)
            assert second.text == "made by update"
            assert second.expires_at == expiry
            clock.advance(1)
            third = await store.update("x", "third")
            assert third.expires_at == expiry  # kept
            assert third.metadata == {"m": True}
            # The store sets the version fields; a write that sets one is refused.
            with pytest.raises(ConfigError, match="the store sets"):
                await store.add_documents([Document(id="y", text="t", version=3)])


async def test_a_turn_memory_updates_into_a_document() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            stored = await store.store_turns([UnifiedMessage.user("my car is red")])
            (turn_id,) = stored.ids
            clock.advance(5)
            new = await store.update(turn_id, "my car is blue")
            assert new.id == turn_id
            assert [d.text for d in await store.history(turn_id)] == [
                "my car is red",
                "my car is blue",
            ]
            report = await store.search_turns(SearchRequest(query="car", kind="recall", k=5))
            assert [t.message.text() for t in report.turns] == ["my car is blue"]


async def test_upsert_replaces_the_current_version_in_place() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents([Document(id="a", text="one")])
            clock.advance(1)
            await store.update("a", "two")
            await store.upsert([Document(id="a", text="two, corrected")])
            versions = await store.history("a")
            assert [(v.version, v.text) for v in versions] == [(1, "one"), (2, "two, corrected")]
            assert versions[1].valid_from == T0 + dt.timedelta(seconds=1)


async def test_as_of_reads_every_kind_and_get_by_ids() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents([Document(id="job", text="Bob works as a baker")])
            clock.advance(3600)
            await store.update("job", "Bob works as a pilot")
            clock.advance(3600)
            await store.add_documents([Document(id="late", text="Bob bought a pilot hat")])
            before = T0 + dt.timedelta(minutes=30)
            for kind in KINDS:
                old = await search_ids(store, "Bob works baker pilot", kind, as_of=before)
                assert old == ["job"], kind
                now = await search_ids(store, "Bob works baker pilot", kind)
                assert "job" in now, kind
                assert "late" in now, kind
            hits = await store.search(
                SearchRequest(query="Bob works", kind="similarity", k=5, as_of=before)
            )
            assert [h.document.text for h in hits] == ["Bob works as a baker"]
            (old_doc,) = await store.get_by_ids(["job"], as_of=before)
            assert old_doc.text == "Bob works as a baker"
            assert old_doc.version == 1
            (now_doc,) = await store.get_by_ids(["job"], as_of=clock.now)
            assert now_doc.version == 2
            assert await store.get_by_ids(["late"], as_of=before) == []


async def test_memory_retrieve_as_of_and_remember_options() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with (
            store_with(clock) as store,
            open_memory(store=store, memory=MemoryConfig(dedupe="exact")) as memory,
        ):
            first = await memory.remember("the spare key is under the blue pot")
            again = await memory.remember("the spare key is under the blue pot")
            assert again == first
            assert len(store) == 1
            other = await memory.remember("the spare key is under the blue pot", dedupe="near")
            assert other == first
            clock.advance(60)
            await memory.update(first, "the spare key is in the red box")
            history = await memory.history(first)
            assert [v.version for v in history] == [1, 2]
            then = await memory.retrieve("spare key", as_of=T0 + dt.timedelta(seconds=30))
            assert [t.message.text() for t in then.turns] == [
                "the spare key is under the blue pot"
            ]
            now = await memory.retrieve("spare key")
            assert [t.message.text() for t in now.turns] == ["the spare key is in the red box"]
            brief = await memory.remember("a short-lived note", ttl=10)
            clock.advance(11)
            assert brief not in [t.id for t in (await memory.retrieve("short-lived note")).turns]
            assert await memory.forget([first]) == [first]
            assert await memory.history(first) == []


# --- concurrent updates ----------------------------------------------------------------


async def test_concurrent_updates_of_one_memory_lose_no_version() -> None:
    ticks = iter(range(1, 10_000))

    def clock() -> dt.datetime:
        # Strictly increasing, so each try of an update gets a later valid_from.
        return T0 + dt.timedelta(seconds=next(ticks))

    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, HashingEmbedder(DIM), clock=clock) as store:
            await store.add_documents([Document(id="n", text="count 0")])
            texts = [f"count {i}" for i in range(1, 7)]
            async with trio.open_nursery() as nursery:
                for text in texts:
                    nursery.start_soon(store.update, "n", text)
            versions = await store.history("n")
            assert [v.version for v in versions] == list(range(1, 8))
            assert sorted(v.text for v in versions[1:]) == sorted(texts)
            for closed, following in itertools.pairwise(versions):
                assert closed.valid_to == following.valid_from
            assert [v.valid_to is None for v in versions] == [False] * 6 + [True]


# --- expiry ------------------------------------------------------------------------------


async def test_expired_memories_are_invisible_at_once_and_reclaimed() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.store_turns(
                [UnifiedMessage.user("the milk expires soon")],
                ids=["milk"],
                ttl=dt.timedelta(minutes=5),
            )
            await store.add_documents(
                [Document(id="bread", text="the bread expires soon")], ttl=300
            )
            await store.add_documents(
                [
                    Document(
                        id="cheese",
                        text="the cheese expires later",
                        expires_at=T0 + dt.timedelta(hours=1),
                    )
                ]
            )
            await store.add_documents([Document(id="salt", text="the salt never expires")])
            (bread,) = await store.get_by_ids(["bread"])
            assert bread.expires_at == T0 + dt.timedelta(minutes=5)
            seen = await every_read(store, "milk bread cheese salt expires")
            for kind, ids in seen.items():
                assert {"milk", "bread"} <= set(ids), kind
            clock.advance(300)  # exactly the expiry: invisible from this instant
            seen = await every_read(store, "milk bread cheese salt expires")
            for kind, ids in seen.items():
                assert not {"milk", "bread"} & set(ids), kind
                assert "salt" in ids, kind
            assert await store.get_by_ids(["milk", "bread", "salt"]) == [
                (await store.get_by_ids(["salt"]))[0]
            ]
            assert await store.history("milk") == []
            # Not reclaimed yet (no write since): they still count.
            assert store.usage().entries == 4
            await store.add_documents([Document(id="pepper", text="pepper")])
            assert store.usage().entries == 3  # the write reclaimed both
            clock.advance(3600)
            await store.delete(["pepper"])
            assert store.usage().entries == 1
            with pytest.raises(ConfigError, match="at most one"):
                await store.store_turns(
                    [UnifiedMessage.user("x")], expires_at=T0, ttl=dt.timedelta(seconds=1)
                )
            with pytest.raises(ConfigError, match="ttl"):
                await store.add_documents([Document(text="x")], ttl=-1)
            with pytest.raises(ConfigError, match="time zone"):
                await store.store_turns(
                    [UnifiedMessage.user("x")], expires_at=dt.datetime(2030, 1, 1)
                )


async def test_the_actor_reclaims_expired_entries_by_itself(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The store clock follows trio's (virtual, autojumping) clock, so the actor's own
    # wake at the earliest expiry is what reclaims the entry, with no write after it.
    def clock() -> dt.datetime:
        return T0 + dt.timedelta(seconds=trio.current_time())

    embedder = CachedEmbedder(HashModel())  # async: no worker thread under the mock clock
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, embedder, clock=clock) as store:
            await store.add_documents([Document(id="soon", text="gone in a moment")], ttl=5)
            await store.add_documents([Document(id="stays", text="here to stay")])
            assert store.usage().entries == 2
            await trio.sleep(6)
            assert store.usage().entries == 1
            assert await store.get_by_ids(["soon"]) == []
            # A far expiry: the actor sleeps, and closing does not wait for it.
            await store.add_documents([Document(text="a year from now")], ttl=365 * 86400)
            await trio.sleep(10)
            assert store.usage().entries == 2
        with trio.CancelScope() as scope:
            async with open_store(CONFIG, embedder, clock=clock) as store:
                await store.add_documents([Document(text="x")], ttl=3600)
                scope.cancel()
                await trio.sleep(1)
        assert scope.cancelled_caught


# --- dedupe ------------------------------------------------------------------------------


async def test_exact_dedupe_across_writes_and_within_a_batch() -> None:
    with trio.fail_after(TIMEOUT):
        async with store_with() as store:
            turns = [UnifiedMessage.user(t) for t in ("tea at five", "coffee", "tea at five")]
            stored = await store.store_turns(turns, dedupe="exact")
            assert stored.ids[0] == stored.ids[2]
            assert stored.duplicates == [stored.ids[0]]
            assert len(store) == 2
            again = await store.store_turns([UnifiedMessage.user("coffee")], dedupe="exact")
            assert again.ids == [stored.ids[1]]
            assert again.duplicates == [stored.ids[1]]
            assert len(store) == 2
            # Another namespace is another memory.
            other = await store.store_turns(
                [UnifiedMessage.user("coffee")], namespace="other", dedupe="exact"
            )
            assert other.duplicates == []
            # Documents: the returned id is the existing memory's.
            ids = await store.add_documents(
                [Document(id="d1", text="coffee"), Document(id="d2", text="water")],
                dedupe="exact",
            )
            assert ids == [stored.ids[1], "d2"]
            assert await store.get_by_ids(["d1"]) == []
            # Without dedupe, memories accumulate (the library's default).
            await store.store_turns([UnifiedMessage.user("coffee")])
            assert len(store) == 5
            with pytest.raises(ConfigError, match="dedupe"):
                await store.store_turns(
                    [UnifiedMessage.user("x")],
                    dedupe="fuzzy",
                )
            with pytest.raises(ConfigError, match="near_threshold"):
                await store.store_turns(
                    [UnifiedMessage.user("x")], dedupe="exact", near_threshold=0.9
                )


async def test_exact_dedupe_skips_closed_and_expired_versions() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents([Document(id="a", text="old words")])
            clock.advance(1)
            await store.update("a", "new words")
            (written,) = await store.add_documents([Document(text="old words")], dedupe="exact")
            assert written != "a"
            await store.add_documents([Document(id="e", text="short")], ttl=5)
            clock.advance(5)
            (fresh,) = await store.add_documents([Document(text="short")], dedupe="exact")
            assert fresh != "e"


async def test_near_dedupe() -> None:
    with trio.fail_after(TIMEOUT):
        async with store_with() as store:
            first = await store.store_turns([UnifiedMessage.user("I like green tea a lot")])
            near = await store.store_turns(
                [UnifiedMessage.user("I like green tea a lot!")],
                dedupe="near",
                near_threshold=0.8,
            )
            assert near.duplicates == first.ids
            far = await store.store_turns(
                [UnifiedMessage.user("the train leaves at noon")], dedupe="near"
            )
            assert far.duplicates == []
            batch = await store.add_documents(
                [Document(text="bright red apples"), Document(text="bright red apples.")],
                dedupe="near",
                near_threshold=0.8,
            )
            assert batch[0] == batch[1]
            assert len(store) == 3


async def test_concurrent_writers_of_one_text_write_it_once() -> None:
    with trio.fail_after(TIMEOUT):
        async with store_with() as store:
            results: list[list[str]] = []

            async def write() -> None:
                stored = await store.store_turns(
                    [UnifiedMessage.user("same fact")], dedupe="exact"
                )
                results.append(stored.ids)

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(write)
            assert len(store) == 1
            assert len({ids[0] for ids in results}) == 1


# --- forget --------------------------------------------------------------------------


async def test_forget_by_ids_filter_and_before_all_or_nothing() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents(
                [
                    Document(id="a", text="alpha", metadata={"user": "u1"}, occurred_at=T0),
                    Document(
                        id="b",
                        text="beta",
                        metadata={"user": "u2"},
                        occurred_at=T0 + dt.timedelta(days=2),
                    ),
                    Document(
                        id="c",
                        text="gamma",
                        metadata={"user": "u1"},
                        occurred_at=T0 + dt.timedelta(days=3),
                    ),
                ]
            )
            clock.advance(10)
            await store.update("a", "alpha two")
            assert await store.forget(["zz", "a", "a"]) == ["a"]
            assert await store.history("a") == []
            assert await store.forget(filter={"user": "u2"}) == ["b"]
            assert await store.forget(before=T0 + dt.timedelta(days=1)) == []
            assert await store.forget(before=T0 + dt.timedelta(days=4)) == ["c"]
            assert len(store) == 0
            await store.add_documents([Document(id="x", text="x")], namespace="n2")
            assert await store.forget(namespace="n2") == ["x"]
            with pytest.raises(ConfigError, match="either ids"):
                await store.forget(["a"], filter={"user": "u1"})
            with pytest.raises(ConfigError, match="time zone"):
                await store.forget(before=dt.datetime(2030, 1, 1))


async def test_delete_and_clear_remove_every_version() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents([Document(id="a", text="one"), Document(id="b", text="b")])
            clock.advance(1)
            await store.update("a", "two")
            result = await store.delete(["a"])
            assert result.deleted == ["a"]
            assert await store.history("a") == []
            assert len(store) == 1
            clock.advance(1)
            await store.update("b", "b two")
            assert (await store.clear()).removed == 2
            assert len(store) == 0


async def test_a_forgotten_memory_leaves_no_trace_on_any_path() -> None:
    secret = "zanzibar orchid password"
    cache = EmbeddingCache()
    embedder = CachedEmbedder(HashModel(), cache=cache)
    events: list[Event] = []
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with open_store(CONFIG, embedder, clock=clock, on_event=events.append) as store:
            await store.add_documents(
                [
                    Document(id="s", text=secret, conversation="chat"),
                    Document(id="keep", text="an ordinary orchid note", conversation="chat"),
                ]
            )
            clock.advance(1)
            await store.update("s", f"{secret} again")
            # Warm every cache and index that could hold the text.
            found = await every_read(store, "zanzibar orchid password")
            assert "s" in found["bm25"]
            body_terms(secret)
            store_adapter = store._actor.embedder
            assert isinstance(store_adapter, EmbedderAdapter)
            assert any(secret in key[-1] for key in cache._data)
            assert await store.forget(["s"]) == ["s"]
            after = len(events)
            # The embedding cache and the links term cache hold none of it.
            assert not any(secret in key[-1] for key in cache._data)
            assert body_terms.cache_info().currsize == 0
            for kind, ids in (await every_read(store, "zanzibar orchid password")).items():
                assert "s" not in ids, kind
            as_of = await every_read(store, "zanzibar orchid password", as_of=T0)
            for kind, ids in as_of.items():
                assert "s" not in ids, kind
            assert await store.get_by_ids(["s"]) == []
            assert await store.get_by_ids(["s"], as_of=T0) == []
            assert await store.history("s") == []
            report = await store.retrieve_embedding(np.zeros(DIM), 64)
            assert all(secret not in t.message.text() for t in report.turns)
            # BM25: no posting, and statistics as if it had never been written.
            bm25 = store._actor.arena.bm25()
            for term in tokenize(secret):
                if term not in tokenize("an ordinary orchid note"):
                    assert bm25.document_frequency(term) == 0, term
            entries, counts = bm25.term_counts(tokenize("orchid"), 0)
            assert entries == 1
            assert counts == {"orchid": 1}
            # Reads since embedded their queries; no stored text came back.
            assert not any(secret in key[-1] for key in cache._data if key[2] == "document")
            # No event after the forget carries the text.
            forgotten = events[after - 1]
            assert isinstance(forgotten, DocumentsDeleted)
            assert forgotten.ids == ["s"]
            for event in events[after - 1 :]:
                assert "zanzibar" not in repr(event)


async def test_a_read_builds_no_visibility_mask_where_nothing_is_hidden() -> None:
    clock = FakeClock()
    with trio.fail_after(TIMEOUT):
        async with store_with(clock) as store:
            await store.add_documents([Document(id="a", text="plain")], namespace="quiet")
            await store.add_documents([Document(id="b", text="one")], namespace="busy")
            arena = store._actor.arena
            now = store._actor.now_us()
            assert arena.visible(arena.high, now, None, "quiet") is None
            clock.advance(1)
            await store.update("b", "two", namespace="busy")
            now = store._actor.now_us()
            # Only the namespace with a closed version (or an as_of read) pays for it.
            assert arena.visible(arena.high, now, None, "quiet") is None
            busy = arena.visible(arena.high, now, None, "busy")
            assert busy is not None
            assert int(busy.sum()) == 2  # "a" and the current "b"
            assert arena.visible(arena.high, now, now, "quiet") is not None
            await store.add_documents([Document(id="c", text="brief")], namespace="quiet", ttl=1)
            clock.advance(1)
            assert arena.visible(arena.high, store._actor.now_us(), None, "quiet") is not None
