"""A reusable conformance suite for record managers (design §8 and §9).

Subclass :class:`RecordManagerConformance` as a pytest test class and define
``make_record_manager(namespace)``::

    from actors.testing import RecordManagerConformance

    class TestMyRecordManager(RecordManagerConformance):
        def make_record_manager(self, namespace):
            return MyRecordManager(namespace, url=...)

Each test runs :func:`actors.index` with the record manager against a fresh in-memory
store (override ``open_store_under_test`` for another) and an embedder that counts what
it embeds. The tests cover the indexing list of the embeddings-layer document:
deterministic hashes, metadata changes as updates, dedupe, the incremental no-op,
cleanup of stale documents (full, scoped and incremental), and divergence between the
store and the record manager (either one ahead), plus the protocol itself (run numbers
grow, ``list_keys`` filters by run and source).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest
import trio

from actors import AnyEmbedder
from protocol import Document, IndexResult, VectorStoreConfig

from .. import HashingEmbedder, Record, RecordManager, index, open_store
from ._conformance_base import StoreUnderTest

__all__ = ["RecordManagerConformance"]


class _CountingEmbedder:
    """A bag of words (a :class:`~actors.HashingEmbedder`) that logs every text it
    embeds."""

    def __init__(self, dimensions: int) -> None:
        self._inner = HashingEmbedder(dimensions)
        self.dimensions = dimensions
        self.embedded: list[str] = []

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self._inner.embed(text)

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.embedded.extend(texts)
        return self._inner.embed_batch(texts)


class RecordManagerConformance:
    """Conformance tests for a record manager. Subclass it; see the module docs.

    Attributes:
        namespace: the namespace each test's record manager is made for.
        timeout: seconds each test may take.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.trio]

    namespace: ClassVar[str] = "conformance-docs"
    dimensions: ClassVar[int] = 32
    timeout: ClassVar[float] = 30.0

    # --- overridable ---------------------------------------------------------------------

    def make_record_manager(self, namespace: str) -> RecordManager:
        """Return a new, empty record manager for ``namespace``."""
        raise NotImplementedError(
            "define make_record_manager(namespace) in your RecordManagerConformance subclass"
        )

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: AnyEmbedder
    ) -> AbstractAsyncContextManager[StoreUnderTest]:
        """The store the documents go to (the in-memory store by default)."""
        return open_store(config, embedder)

    # --- helpers -------------------------------------------------------------------------

    @asynccontextmanager
    async def setup(
        self,
    ) -> AsyncIterator[tuple[StoreUnderTest, RecordManager, _CountingEmbedder]]:
        """A fresh store, its counting embedder, and a fresh record manager."""
        embedder = _CountingEmbedder(self.dimensions)
        config = VectorStoreConfig(
            max_entries=256, dimensions=self.dimensions, max_entry_bytes=4096
        )
        manager = self.make_record_manager(self.namespace)
        assert isinstance(manager, RecordManager), (
            f"{type(manager).__name__} lacks part of the RecordManager protocol"
        )
        assert manager.namespace == self.namespace
        with trio.fail_after(self.timeout):
            async with self.open_store_under_test(config, embedder) as store:
                yield store, manager, embedder

    def docs(self, *texts: str, source: str | None = None) -> list[Document]:
        return [Document(text=t, id=f"id-{t}", source_id=source) for t in texts]

    async def ids_in(self, store: StoreUnderTest, ids: Sequence[str]) -> set[str | None]:
        return {d.id for d in await store.get_by_ids(list(ids), namespace=self.namespace)}

    # --- the tests -----------------------------------------------------------------------

    async def test_runs_grow_and_records_round_trip(self) -> None:
        async with self.setup() as (_, manager, _e):
            first, second = await manager.begin_run(), await manager.begin_run()
            assert second > first
            records = [
                Record(key="a", hash="h1", source_id="s", run=first, updated_at=1.0),
                Record(key="b", hash="h2", source_id=None, run=second, updated_at=2.0),
            ]
            await manager.update(records)
            got = await manager.get(["a", "b", "missing"])
            assert set(got) == {"a", "b"}
            assert (got["a"].hash, got["a"].source_id, got["a"].run) == ("h1", "s", first)
            assert set(await manager.list_keys(before_run=second)) == {"a"}
            assert set(await manager.list_keys(before_run=second + 1, source_ids=["s"])) == {"a"}
            await manager.delete_keys(["a", "never-there"])
            assert set(await manager.get(["a", "b"])) == {"b"}

    async def test_hashes_are_deterministic(self) -> None:
        async with self.setup() as (store, manager, _e):
            batch = self.docs("red", "green", source="file")
            await index(batch, store, manager)
            other = self.make_record_manager(self.namespace)
            await index(batch, store, other)
            keys = [d.id for d in batch if d.id is not None]
            mine, theirs = await manager.get(keys), await other.get(keys)
            assert {k: r.hash for k, r in mine.items()} == {k: r.hash for k, r in theirs.items()}
            assert len(set(r.hash for r in mine.values())) == 2

    async def test_a_metadata_change_is_an_update(self) -> None:
        async with self.setup() as (store, manager, embedder):
            await index([Document(text="t", id="d", metadata={"v": 1})], store, manager)
            before = (await manager.get(["d"]))["d"].hash
            result = await index([Document(text="t", id="d", metadata={"v": 2})], store, manager)
            assert result == IndexResult(num_updated=1)
            assert (await manager.get(["d"]))["d"].hash != before
            [stored] = await store.get_by_ids(["d"], namespace=self.namespace)
            assert stored.metadata == {"v": 2}
            assert embedder.embedded == ["t", "t"]

    async def test_duplicates_are_written_once(self) -> None:
        async with self.setup() as (store, manager, embedder):
            result = await index(self.docs("a", "b", "a", "a"), store, manager, batch_size=2)
            assert result == IndexResult(num_added=2, num_skipped=2)
            assert embedder.embedded == ["a", "b"]

    async def test_an_unchanged_rerun_is_a_no_op(self) -> None:
        async with self.setup() as (store, manager, embedder):
            batch = self.docs("a", "b", "c", source="s")
            assert await index(batch, store, manager, cleanup="incremental") == IndexResult(
                num_added=3
            )
            embedder.embedded.clear()
            again = await index(batch, store, manager, cleanup="incremental")
            assert again == IndexResult(num_skipped=3)
            assert embedder.embedded == []

    async def test_cleanup_deletes_stale_documents(self) -> None:
        async with self.setup() as (store, manager, _e):
            await index(
                self.docs("a", "b", source="s1") + self.docs("c", source="s2"), store, manager
            )
            # scoped_full: s1 is re-indexed without b; s2 is not seen and stays.
            scoped = await index(
                self.docs("a", source="s1"), store, manager, cleanup="scoped_full"
            )
            assert scoped == IndexResult(num_skipped=1, num_deleted=1)
            assert await self.ids_in(store, ["id-a", "id-b", "id-c"]) == {"id-a", "id-c"}
            # full: everything this run did not see goes.
            full = await index(self.docs("d", source="s3"), store, manager, cleanup="full")
            assert full == IndexResult(num_added=1, num_deleted=2)
            assert await self.ids_in(store, ["id-a", "id-c", "id-d"]) == {"id-d"}
            assert set(await manager.get(["id-a", "id-c", "id-d"])) == {"id-d"}

    async def test_documents_lost_by_the_store_are_written_again(self) -> None:
        # The record manager is ahead of the store (an eviction, a lost write).
        async with self.setup() as (store, manager, embedder):
            await index(self.docs("a", "b"), store, manager)
            await store.delete(["id-a"], namespace=self.namespace)
            embedder.embedded.clear()
            result = await index(self.docs("a", "b"), store, manager)
            assert result == IndexResult(num_added=1, num_skipped=1)
            assert embedder.embedded == ["a"]
            assert await self.ids_in(store, ["id-a", "id-b"]) == {"id-a", "id-b"}

    async def test_records_lost_by_the_manager_are_rewritten(self) -> None:
        # The store is ahead of the record manager (records dropped): the documents are
        # written again (an upsert by id, so no duplicates) and known from then on.
        async with self.setup() as (store, manager, _e):
            await index(self.docs("a", "b"), store, manager)
            await manager.delete_keys(["id-a"])
            result = await index(self.docs("a", "b"), store, manager)
            assert result == IndexResult(num_added=1, num_skipped=1)
            assert len(store) == 2
            assert set(await manager.get(["id-a", "id-b"])) == {"id-a", "id-b"}
