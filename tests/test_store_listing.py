"""``StoreHandle.documents(namespace)``: a user's memories, oldest first, through
``open_store`` and ``open_pg_store`` alike: what "hand a user their data" reads
(docs/pages/tutorials/per-user-data.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors import HashingEmbedder, open_store
from protocol import ConfigError, Document, FilterError, VectorStoreConfig

DIM = 64
TIMEOUT = 30
CONFIG = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=512)


@asynccontextmanager
async def backend(name: str) -> AsyncIterator[Any]:
    embedder = HashingEmbedder(DIM)
    if name == "memory":
        async with open_store(CONFIG, embedder) as store:
            yield store
        return
    from pg_support import fresh_pg_store, session_dsn

    async with fresh_pg_store(session_dsn(), CONFIG, embedder) as store:
        yield store


BACKENDS = ["memory", "pg"]  # pg: the suite's server (tests/pg_support.py), else a skip


@pytest.mark.parametrize("name", BACKENDS)
async def test_a_namespace_lists_its_current_memories_oldest_first(name: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend(name) as store:
            first = await store.add_texts(["my cat is Miso", "I live in Lyon"], namespace="alice")
            await store.add_texts(["my dog is Rex"], namespace="bob")
            later = await store.add_documents(
                [Document(text="I moved to Porto", metadata={"topic": "home"})],
                namespace="alice",
            )
            await store.add_texts(["a note of nobody's"])
            listed = await store.documents("alice")
            assert [d.id for d in listed] == [*first, *later]  # write order, no bob
            assert [d.text for d in listed][-1] == "I moved to Porto"
            assert [d.text for d in await store.documents("bob")] == ["my dog is Rex"]
            assert [d.text for d in await store.documents()] == ["a note of nobody's"]
            homes = await store.documents("alice", filter={"topic": "home"})
            assert [d.id for d in homes] == later
            # An update shows its current version only; the old one is history's.
            await store.update(first[1], "I live in Paris", namespace="alice")
            texts = [d.text for d in await store.documents("alice")]
            assert "I live in Paris" in texts and "I live in Lyon" not in texts
            await store.delete([first[0]], "alice")
            assert first[0] not in {d.id for d in await store.documents("alice")}
            assert await store.documents("nobody") == []


@pytest.mark.parametrize("name", BACKENDS)
async def test_listed_memories_copy_into_another_store_with_as_new(name: str) -> None:
    """What the PostgreSQL tutorial does: a namespace's documents, read back (an updated
    one at version 2), written into another store; as read, the store refuses them,
    naming the field and ``as_new``."""
    with trio.fail_after(TIMEOUT):
        async with backend(name) as old, open_store(CONFIG, HashingEmbedder(DIM)) as new:
            ids = await old.add_documents(
                [
                    Document(text="Ana prefers a window seat", metadata={"k": 1}, source_id="a"),
                    Document(text="Ana lives in Lyon", conversation="trip"),
                ],
                namespace="ana",
            )
            await old.update(ids[1], "Ana lives in Paris", namespace="ana")
            listed = await old.documents("ana")
            assert {d.version for d in listed} == {1, 2}
            with pytest.raises(ConfigError, match=r"sets (valid_from|version).*as_new"):
                await new.add_documents(listed, namespace="ana")
            assert new.usage().entries == 0  # nothing half applied
            copies = [d.as_new() for d in listed]
            assert sorted(d.version or 0 for d in listed) == [1, 2]  # the originals keep it
            assert all(
                (c.valid_from, c.valid_to, c.version, c.supersedes) == (None,) * 4 for c in copies
            )
            assert await new.add_documents(copies, namespace="ana") == [d.id for d in listed]
            again = await new.documents("ana")
            fields = ("id", "text", "metadata", "source_id", "occurred_at", "conversation")
            fields += ("expires_at",)
            for field in fields:
                assert [getattr(d, field) for d in again] == [getattr(d, field) for d in listed]
            # The copy is a fresh memory: version 1, its history one version long.
            assert {d.version for d in again} == {1}


@pytest.mark.parametrize("name", BACKENDS)
async def test_bad_arguments_are_refused(name: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with backend(name) as store:
            with pytest.raises(ConfigError, match="namespace"):
                await store.documents("")
            with pytest.raises(FilterError):
                await store.documents("alice", filter={"$nope": 1})
