"""index() and the record manager, against small fake stores (healthy, faulty, lossy)."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Sequence

import attrs
import msgspec
import pytest
import trio

from actors import HashingEmbedder, open_store
from actors._store.indexing import InMemoryRecordManager, hash_document, index
from protocol import ConfigError, VectorStoreConfig
from protocol._documents import DeleteResult, Document, IndexResult, document_id

NS = "docs"


@attrs.define(eq=False)
class FakeStore:
    """A dict per namespace. ``written`` logs every upserted id, in order, which is what
    would have been embedded."""

    data: dict[str, dict[str, Document]] = attrs.field(factory=dict)
    written: list[str] = attrs.field(factory=list)
    upserts: int = 0

    async def upsert(self, docs: Sequence[Document], namespace: str | None = None) -> list[str]:
        await trio.lowlevel.checkpoint()
        assert namespace is not None
        self.upserts += 1
        ids = []
        for doc in docs:
            assert doc.id is not None
            self.data.setdefault(namespace, {})[doc.id] = doc
            self.written.append(doc.id)
            ids.append(doc.id)
        return ids

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> DeleteResult:
        await trio.lowlevel.checkpoint()
        assert namespace is not None
        space = self.data.setdefault(namespace, {})
        deleted = [i for i in ids if space.pop(i, None) is not None]
        return DeleteResult(deleted=deleted, missing=[i for i in ids if i not in deleted])

    async def get_by_ids(self, ids: Sequence[str], namespace: str | None = None) -> list[Document]:
        await trio.lowlevel.checkpoint()
        assert namespace is not None
        space = self.data.get(namespace, {})
        return [space[i] for i in ids if i in space]

    def texts(self, namespace: str = NS) -> list[str]:
        return sorted(doc.text for doc in self.data.get(namespace, {}).values())


@attrs.define(eq=False)
class FaultyStore(FakeStore):
    """Fails the n-th upsert (1-based) or every delete, before changing anything."""

    fail_upsert: int | None = None
    fail_delete: bool = False

    async def upsert(self, docs: Sequence[Document], namespace: str | None = None) -> list[str]:
        if self.fail_upsert is not None and self.upserts + 1 == self.fail_upsert:
            self.upserts += 1
            raise OSError("store write failed")
        return await super().upsert(docs, namespace)

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> DeleteResult:
        if self.fail_delete:
            raise OSError("store delete failed")
        return await super().delete(ids, namespace)


@attrs.define(eq=False)
class LossyStore(FakeStore):
    """Acknowledges a write and then loses it: the records run ahead of the store."""

    lose: set[str] = attrs.field(factory=set)

    async def upsert(self, docs: Sequence[Document], namespace: str | None = None) -> list[str]:
        ids = await super().upsert(docs, namespace)
        for doc_id in self.lose:
            self.data.get(NS, {}).pop(doc_id, None)
        return ids


def docs(*texts: str, source: str | None = None) -> list[Document]:
    return [Document(text=t, source_id=source) for t in texts]


async def run(*args: object, **kwargs: object) -> IndexResult:
    with trio.fail_after(5):
        return await index(*args, **kwargs)  # type: ignore[arg-type]


async def test_first_run_adds_and_rerun_is_a_no_op() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    batch = docs("a", "b", "c")
    assert await run(batch, store, records, batch_size=2) == IndexResult(num_added=3)
    assert store.texts() == ["a", "b", "c"]
    assert set(store.data[NS]) == {document_id(t) for t in "abc"}
    store.written.clear()
    again = await run(batch, store, records, batch_size=2)
    assert again == IndexResult(num_skipped=3)
    assert store.written == []


async def test_duplicates_are_dropped_keeping_order() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    result = await run(docs("b", "a", "b", "c", "a"), store, records)
    assert result == IndexResult(num_added=3, num_skipped=2)
    assert store.written == [document_id(t) for t in ("b", "a", "c")]


async def test_duplicates_across_batches_are_dropped_too() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    result = await run(docs("a", "b", "a", "b"), store, records, batch_size=1)
    assert result == IndexResult(num_added=2, num_skipped=2)
    assert store.written == [document_id("a"), document_id("b")]


async def test_same_id_with_other_content_is_refused() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    clash = [Document(id="x", text="one"), Document(id="x", text="two")]
    with pytest.raises(ConfigError, match="id 'x', which an earlier document"):
        await run(clash, store, records)


async def test_changed_content_under_a_known_id_is_an_update() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run([Document(id="x", text="one"), Document(id="y", text="same")], store, records)
    store.written.clear()
    result = await run(
        [Document(id="x", text="two"), Document(id="y", text="same")], store, records
    )
    assert result == IndexResult(num_updated=1, num_skipped=1)
    assert store.written == ["x"]
    assert store.data[NS]["x"].text == "two"


async def test_metadata_and_source_are_part_of_the_hash() -> None:
    plain = Document(id="x", text="t")
    assert hash_document(plain, None) != hash_document(
        Document(id="x", text="t", metadata={"k": 1}), None
    )
    assert hash_document(plain, None) != hash_document(plain, "s")
    assert len(hash_document(plain, None)) == 64


async def test_a_new_time_or_conversation_is_indexed_again() -> None:
    """Through a real store: the same text said at another time, or in another
    conversation, is an update (its index text and neighbours change); the same again
    is skipped, and the store keeps the newest time."""
    may = dt.datetime(2023, 5, 8, tzinfo=dt.UTC)
    june = dt.datetime(2023, 6, 8, tzinfo=dt.UTC)
    config = VectorStoreConfig(max_entries=16, dimensions=32, max_entry_bytes=4096)
    with trio.fail_after(10):
        async with open_store(config, HashingEmbedder(32)) as store:
            records = InMemoryRecordManager(NS)
            first = [Document(id="x", text="Ann: the garden", occurred_at=may)]
            assert await run(first, store, records) == IndexResult(num_added=1)
            assert await run(first, store, records) == IndexResult(num_skipped=1)
            later = [Document(id="x", text="Ann: the garden", occurred_at=june)]
            assert await run(later, store, records) == IndexResult(num_updated=1)
            threaded = [msgspec.structs.replace(later[0], conversation="c1")]
            assert await run(threaded, store, records) == IndexResult(num_updated=1)
            (stored,) = await store.get_by_ids(["x"], NS)
    assert (stored.occurred_at, stored.conversation) == (june, "c1")


async def test_full_cleanup_deletes_what_the_run_did_not_see() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run(docs("a", "b", "c"), store, records)
    result = await run(docs("a", "b2"), store, records, cleanup="full")
    assert result == IndexResult(num_added=1, num_skipped=1, num_deleted=2)
    assert store.texts() == ["a", "b2"]
    assert len(records) == 2


@pytest.mark.parametrize("cleanup", ["full", "scoped_full", "incremental"])
async def test_cleanup_across_batches_never_deletes_this_runs_documents(cleanup: str) -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run(docs("v1 a", "v1 b", "v1 c", source="s"), store, records, batch_size=1)
    result = await run(
        docs("v2 a", "v2 b", "v2 c", source="s"), store, records, cleanup=cleanup, batch_size=1
    )
    assert result == IndexResult(num_added=3, num_deleted=3)
    assert store.texts() == ["v2 a", "v2 b", "v2 c"]


@pytest.mark.parametrize("cleanup", ["full", "scoped_full", "incremental"])
async def test_unchanged_source_spanning_batches_is_a_no_op(cleanup: str) -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    batch = docs("a", "b", "c", source="s") + docs("d", source="t")
    await run(batch, store, records, cleanup=cleanup, batch_size=1)
    store.written.clear()
    result = await run(batch, store, records, cleanup=cleanup, batch_size=1)
    assert result == IndexResult(num_skipped=4)
    assert store.written == []
    assert store.texts() == ["a", "b", "c", "d"]


async def test_scoped_cleanup_leaves_unseen_sources_alone() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run(docs("a1", "a2", source="a") + docs("b1", source="b"), store, records)
    for cleanup in ("scoped_full", "incremental"):
        result = await run(docs("a1", source="a"), store, records, cleanup=cleanup)
        assert store.texts() == ["a1", "b1"]
        assert result.num_skipped == 1
    result = await run(docs("a1", source="a"), store, records, cleanup="full")
    assert result.num_deleted == 1
    assert store.texts() == ["a1"]


async def test_incremental_cleans_a_source_once_the_input_moves_on() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run(docs("a old", source="a") + docs("b old", source="b"), store, records)
    seen: list[list[str]] = []

    class Watch(FakeStore):
        async def upsert(
            self, batch: Sequence[Document], namespace: str | None = None
        ) -> list[str]:
            seen.append(store.texts())
            return await store.upsert(batch, namespace)

    watch = Watch()
    watch.data = store.data
    result = await run(
        docs("a new", source="a") + docs("b new", source="b"),
        watch,
        records,
        cleanup="incremental",
        batch_size=1,
    )
    assert result == IndexResult(num_added=2, num_deleted=2)
    # When "b new" was written, source "a" had already been cleaned.
    assert seen[1] == ["a new", "b old"]
    assert store.texts() == ["a new", "b new"]


async def test_cleanup_modes_that_scope_need_a_source_id() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    with pytest.raises(ConfigError, match=r"document 0 .* has no source id in source_id"):
        await run(docs("a"), store, records, cleanup="incremental")
    with pytest.raises(ConfigError, match=r"no source id in metadata\['src'\]"):
        await run(docs("a"), store, records, cleanup="scoped_full", source_id_key="src")
    assert store.upserts == 0


async def test_source_id_key_reads_the_metadata() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    first = [
        Document(text="a", metadata={"src": "f1"}),
        Document(text="b", metadata={"src": "f2"}),
    ]
    await run(first, store, records, source_id_key="src")
    result = await run(
        [Document(text="a2", metadata={"src": "f1"})],
        store,
        records,
        cleanup="scoped_full",
        source_id_key="src",
    )
    assert result.num_deleted == 1
    assert store.texts() == ["a2", "b"]
    with pytest.raises(ConfigError, match="a source id must be a str"):
        await run([Document(text="c", metadata={"src": 3})], store, records, source_id_key="src")


async def test_a_failed_write_is_repaired_by_the_next_run() -> None:
    store, records = FaultyStore(fail_upsert=2), InMemoryRecordManager(NS)
    batch = docs("a", "b", "c", "d")
    with pytest.raises(OSError, match="store write failed"):
        await run(batch, store, records, batch_size=2, cleanup="full")
    assert store.texts() == ["a", "b"]
    assert len(records) == 2
    store.fail_upsert = None
    store.written.clear()
    result = await run(batch, store, records, batch_size=2, cleanup="full")
    assert result == IndexResult(num_added=2, num_skipped=2)
    assert store.written == [document_id("c"), document_id("d")]
    assert store.texts() == ["a", "b", "c", "d"]


async def test_records_ahead_of_the_store_are_repaired() -> None:
    store = LossyStore(lose={document_id("b")})
    records = InMemoryRecordManager(NS)
    await run(docs("a", "b", "c"), store, records)
    assert store.texts() == ["a", "c"]
    assert len(records) == 3
    store.lose.clear()
    store.written.clear()
    result = await run(docs("a", "b", "c"), store, records)
    assert result == IndexResult(num_added=1, num_skipped=2)
    assert store.written == [document_id("b")]
    assert store.texts() == ["a", "b", "c"]


async def test_a_failed_cleanup_is_retried_by_the_next_run() -> None:
    store, records = FaultyStore(), InMemoryRecordManager(NS)
    await run(docs("a", "b"), store, records)
    store.fail_delete = True
    with pytest.raises(OSError, match="store delete failed"):
        await run(docs("a"), store, records, cleanup="full")
    assert store.texts() == ["a", "b"]
    store.fail_delete = False
    result = await run(docs("a"), store, records, cleanup="full")
    assert result == IndexResult(num_skipped=1, num_deleted=1)
    assert store.texts() == ["a"]


async def test_namespaces_are_separate() -> None:
    store = FakeStore()
    await run(docs("a"), store, InMemoryRecordManager("one"))
    result = await run(docs("b"), store, InMemoryRecordManager("two"), cleanup="full")
    assert result == IndexResult(num_added=1)
    assert store.texts("one") == ["a"]
    assert store.texts("two") == ["b"]


async def test_progress_line_only_when_asked_or_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    await run(docs("a", "b", "c"), store, records, batch_size=2)
    assert capsys.readouterr().err == ""
    stream = io.StringIO()
    await run(docs("a", "d"), store, records, progress=stream, cleanup="full")
    out = stream.getvalue()
    assert out.startswith("\rindexing docs: 2 docs, 1 added, 0 updated, 1 skipped")
    assert out.endswith("2 deleted\n")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"cleanup": "partial"}, "cleanup is 'partial'"),
        ({"batch_size": 0}, "batch_size is 0"),
        ({"batch_size": True}, "batch_size is True"),
        ({"source_id_key": ""}, "source_id_key is ''"),
    ],
)
async def test_bad_arguments_are_refused(kwargs: dict[str, object], needle: str) -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    with pytest.raises(ConfigError) as info:
        await run(docs("a"), store, records, **kwargs)
    assert needle in str(info.value)
    assert store.upserts == 0


async def test_bad_inputs_are_refused() -> None:
    store, records = FakeStore(), InMemoryRecordManager(NS)
    with pytest.raises(ConfigError, match="docs is a str"):
        await run("abc", store, records)
    with pytest.raises(ConfigError, match="document 1 is a str; expected Document"):
        await run([Document(text="a"), "b"], store, records)
    with pytest.raises(ConfigError, match="store is a dict"):
        await run([], {}, records)
    with pytest.raises(ConfigError, match="record_manager is a str"):
        await run([], store, "rm")
    with pytest.raises(ConfigError, match="namespace is ''"):
        InMemoryRecordManager("")
