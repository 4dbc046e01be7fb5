"""Events from the store, the embedding layer, the retriever and index(); profile
binding; Memory.embedding_usage(); auto_store_user_input (design §9)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

import msgspec
import numpy as np
import pytest
import trio
import trio.testing
from events_support import drain

from actors import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingUsageLog,
    HashingEmbedder,
    InMemoryRecordManager,
    index,
    open_memory,
    open_store,
)
from actors.doors import named_run
from actors.testing import inject_crash
from protocol import (
    ConfigError,
    Document,
    EmbeddingError,
    EmbeddingProfile,
    Event,
    MemoryConfig,
    Poisoned,
    SearchRequest,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.events import (
    DocumentsAdded,
    DocumentsDeleted,
    EmbeddingCompleted,
    EmbeddingFailed,
    EmbeddingStarted,
    IndexingBatchCompleted,
    IndexingCompleted,
    IndexingFailed,
    IndexingStarted,
    MemoryEvent,
    RetrieverCompleted,
    RetrieverFailed,
    RetrieverStarted,
    StoreSearched,
    fingerprint,
)

DIM = 32
TIMEOUT = 10
STORE = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=1024)
SECRET = "zanzibar marmalade password"


class ProfiledModel:
    """An EmbeddingModel: a hashing embedder with a profile, that can fail."""

    def __init__(self, model: str = "hash", dims: int = DIM) -> None:
        self._hash = HashingEmbedder(dims)
        self.profile = EmbeddingProfile(provider="test", model=model, dimensions=dims)
        self.fail: Exception | None = None

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        await trio.lowlevel.checkpoint()
        if self.fail is not None:
            raise self.fail
        return self._hash.embed_batch(list(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        await trio.lowlevel.checkpoint()
        if self.fail is not None:
            raise self.fail
        return self._hash.embed(text)


# --- the store's sink ---------------------------------------------------------------------


async def test_the_store_sink_sees_each_commit_and_read() -> None:
    events: list[Event] = []
    with trio.fail_after(TIMEOUT):
        async with open_store(STORE, HashingEmbedder(DIM), on_event=events.append) as store:
            ids = await store.add_documents([Document(text="red apple", id="a")], namespace="n")
            await store.upsert([Document(text="green apple", id="a")], namespace="n")
            await store.store_turns([UnifiedMessage.user("hello")], namespace="n")
            await store.delete(["a", "zz"], namespace="n")
            await store.search(SearchRequest(query="apple", k=3, namespace="n"))
            await store.search(SearchRequest(vector=[1.0] * DIM, k=2, filter={"x": 1}))
            await store.retrieve("hello", 2)
            await store.retrieve_embedding(np.ones(DIM), 1, namespace="n")
            await store.clear()
            assert len(events) == 9
    added, replaced, turn, deleted, searched, by_vector, retrieved, embedded, cleared = events
    assert isinstance(added, DocumentsAdded)
    assert (added.namespace, added.ids, added.count, added.source) == ("n", ids, 1, "document")
    assert (added.replaced, added.evicted) == (0, 0)
    assert isinstance(replaced, DocumentsAdded)
    assert replaced.replaced == 1
    assert isinstance(turn, DocumentsAdded)
    assert turn.source == "offload"
    assert turn.count == 1
    assert isinstance(deleted, DocumentsDeleted)
    assert (deleted.ids, deleted.count, deleted.missing, deleted.cleared) == (["a"], 1, 1, False)
    assert isinstance(searched, StoreSearched)
    assert (searched.operation, searched.kind, searched.namespace) == ("search", "similarity", "n")
    assert searched.query_fingerprint == fingerprint("apple")
    assert (searched.hits, searched.k, searched.by_vector, searched.filtered) == (
        1,
        3,
        False,
        False,
    )
    assert searched.best is not None
    assert searched.seconds >= 0
    assert isinstance(by_vector, StoreSearched)
    assert by_vector.query_fingerprint is None
    assert (by_vector.by_vector, by_vector.filtered, by_vector.hits) == (True, True, 0)
    assert by_vector.namespace == "memory-default"
    assert isinstance(retrieved, StoreSearched)
    assert (retrieved.operation, retrieved.namespace) == ("retrieve", "")  # every namespace
    assert isinstance(embedded, StoreSearched)
    assert embedded.operation == "retrieve_embedding"
    assert isinstance(cleared, DocumentsDeleted)
    assert cleared.cleared
    assert (cleared.namespace, cleared.count) == ("", 1)
    stamps = [e.at for e in events]
    assert stamps == sorted(stamps)
    for event in events:
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(event), type=MemoryEvent) == event


async def test_a_write_event_is_sent_after_its_commit() -> None:
    with trio.fail_after(TIMEOUT):
        seen: list[int] = []
        holder: dict[str, object] = {}

        def sink(event: Event) -> None:
            if isinstance(event, DocumentsAdded):
                store = holder["store"]
                seen.append(len(store))  # type: ignore[arg-type]

        async with open_store(STORE, HashingEmbedder(DIM), on_event=sink) as store:
            holder["store"] = store
            await store.add_documents([Document(text="one")])
            await store.add_documents([Document(text="two"), Document(text="three")])
        assert seen == [1, 3]


async def test_a_raising_sink_poisons_after_the_write_commits() -> None:
    def sink(event: Event) -> None:
        if isinstance(event, DocumentsAdded):
            raise RuntimeError("sink bug")

    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned) as info:
        async with open_store(STORE, HashingEmbedder(DIM), on_event=sink) as store:
            assert await store.add_documents([Document(text="x", id="x")]) == ["x"]
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(Poisoned):
                await store.get_by_ids(["x"])
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_a_raising_sink_fails_the_read_it_follows() -> None:
    def sink(event: Event) -> None:
        if isinstance(event, StoreSearched):
            raise KeyError("read sink bug")

    with trio.fail_after(TIMEOUT):
        async with open_store(STORE, HashingEmbedder(DIM), on_event=sink) as store:
            await store.add_documents([Document(text="x")])
            with pytest.raises(KeyError, match="read sink bug"):
                await store.search(SearchRequest(query="x"))
            assert not store.statistics().poisoned


async def test_open_store_validates_the_sink() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(ConfigError, match="on_event is 3"):
        async with open_store(STORE, HashingEmbedder(DIM), on_event=3):  # type: ignore[arg-type]
            pass


# --- the memory's stream -------------------------------------------------------------------


async def test_queries_appear_only_as_fingerprints() -> None:
    config = MemoryConfig(auto_store_user_input=True)
    with trio.fail_after(TIMEOUT):
        async with (
            open_memory(store=STORE, memory=config) as memory,
            memory.events(buffer_size=1024) as events,
        ):
            await memory.remember("the marmalade is in the cupboard")
            await memory.retrieve(SECRET)
            await memory.store.search(SearchRequest(query=SECRET, kind="hybrid"))
            await memory.store.retrieve(SECRET, 2)
            with pytest.raises(ConfigError):
                await memory.retrieve(SECRET, k=0)
            await memory.turn(
                UnifiedRequest(model="m", messages=[UnifiedMessage.user("zanzibar?")])
            )
            got = drain(events)
    assert events.dropped == 0
    blob = b"\n".join(msgspec.json.encode(e) for e in got).decode()
    for word in ("zanzibar", "marmalade", "password"):
        assert word not in blob
    prints = {getattr(e, "query_fingerprint", None) for e in got}
    assert fingerprint(SECRET) in prints
    assert fingerprint("zanzibar?") in prints
    assert len(fingerprint(SECRET)) == 16


async def test_retriever_events_bracket_each_retrieve() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory, memory.events() as events:
            await memory.remember("cats purr")
            drain(events)
            report = await memory.retrieve("cats", k=3)
            got = drain(events)
    tags = [type(e).__struct_config__.tag for e in got]
    assert tags[0] == "retriever.started"
    assert tags[-1] == "retriever.completed"
    assert "embedding.completed" in tags
    assert "vector_store.searched" in tags
    started, completed = got[0], got[-1]
    assert isinstance(started, RetrieverStarted)
    assert isinstance(completed, RetrieverCompleted)
    assert started.query_fingerprint == completed.query_fingerprint == fingerprint("cats")
    assert (completed.k, completed.hits, completed.scanned) == (3, 1, report.scanned)
    assert completed.best == report.turns[0].score
    assert completed.seconds >= 0


async def test_a_failed_retrieve_sends_retriever_failed() -> None:
    model = ProfiledModel()
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE, embedder=model) as memory, memory.events() as events:
            model.fail = OSError("offline")
            with pytest.raises(Exception, match="offline"):
                await memory.retrieve("anything")
            got = drain(events)
    failed = [e for e in got if isinstance(e, RetrieverFailed)]
    assert len(failed) == 1
    assert failed[0].error.startswith("EmbedderError")
    assert failed[0].query_fingerprint == fingerprint("anything")
    (embedding,) = [e for e in got if isinstance(e, EmbeddingFailed)]
    assert embedding.usage.error == "OSError"
    assert embedding.usage.texts_embedded == 0


async def test_a_slow_subscriber_never_blocks_the_store_actor() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory:
            stuck = memory.events(buffer_size=1)
            for i in range(20):
                await memory.store.add_documents([Document(text=f"doc {i}")])
                await memory.store.search(SearchRequest(query=f"doc {i}"))
            # 20 writes, 20 reads and their embeddings: one kept, the rest dropped.
            assert stuck.dropped == memory.statistics().events_published - 1
            assert stuck.dropped >= 79
            assert len(drain(stuck)) == 1
            assert len(memory.store) == 20


# --- embedding usage -----------------------------------------------------------------------


async def test_embedding_usage_counts_every_call_by_default() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory, memory.events() as events:
            assert memory.embedding_usage().calls == 0
            await memory.store.add_documents([Document(text="one two"), Document(text="three")])
            await memory.retrieve("one")
            totals = memory.embedding_usage()
            got = [e for e in drain(events) if isinstance(e, EmbeddingCompleted)]
            usage = memory.usage()
    assert usage.entries == 2  # usage() stays the store's
    assert [e.usage.input_type for e in got] == ["document", "query"]
    documents, query = (e.usage for e in got)
    assert (documents.texts, documents.texts_embedded, documents.characters) == (2, 2, 12)
    assert (documents.batches, documents.cache_hits) == (1, 0)
    assert (documents.provider, documents.model) == ("local", "HashingEmbedder")
    assert documents.dimensions == DIM
    assert documents.seconds >= 0
    assert (query.texts, query.characters) == (1, 3)
    assert (totals.calls, totals.texts, totals.characters, totals.batches) == (2, 3, 15, 2)
    assert totals.seconds == pytest.approx(documents.seconds + query.seconds)


async def test_cache_hits_are_counted_apart_and_the_callers_log_sees_them() -> None:
    own_log = EmbeddingUsageLog()
    cached = CachedEmbedder(ProfiledModel(), cache=EmbeddingCache(), usage=own_log)
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE, embedder=cached) as memory, memory.events() as events:
            await memory.store.add_documents([Document(text="alpha beta")])
            await memory.store.add_documents([Document(text="alpha beta", id="again")])
            totals = memory.embedding_usage()
            got = [e for e in drain(events) if isinstance(e, EmbeddingCompleted)]
    first, second = (e.usage for e in got)
    assert (first.cache_hits, first.texts_embedded, first.characters) == (0, 1, 10)
    assert (second.cache_hits, second.texts_embedded, second.characters) == (1, 0, 0)
    assert (second.batches, second.provider, second.model) == (0, "test", "hash")
    assert (totals.calls, totals.cache_hits, totals.texts_embedded) == (2, 1, 1)
    assert own_log.totals() == totals
    assert len(cached.cache) == 1


async def test_failed_embedder_calls_are_events_and_totals() -> None:
    class Broken:
        def embed(self, text: str) -> list[float]:
            raise RuntimeError("down")

    with trio.fail_after(TIMEOUT):
        async with (
            open_memory(store=STORE, embedder=Broken()) as memory,
            memory.events() as events,
        ):
            with pytest.raises(Exception, match="down"):
                await memory.store.add_documents([Document(text="x")])
            got = drain(events)
            totals = memory.embedding_usage()
    started, failed = got
    assert isinstance(started, EmbeddingStarted)
    assert isinstance(failed, EmbeddingFailed)
    assert failed.usage.error == "RuntimeError"
    assert (totals.calls, totals.failed_calls, totals.texts_embedded) == (1, 1, 0)


# --- profile binding -----------------------------------------------------------------------


async def test_a_store_is_bound_to_its_embedders_profile() -> None:
    model = ProfiledModel()
    other = EmbeddingProfile(provider="test", model="another", dimensions=DIM)
    narrow = EmbeddingProfile(provider="test", model="hash", dimensions=DIM // 2)
    vector = HashingEmbedder(DIM).embed("blue car").tolist()
    with trio.fail_after(TIMEOUT):
        async with open_store(STORE, CachedEmbedder(model)) as store:
            assert store.profile == model.profile
            await store.add_documents([Document(text="blue car", id="car")])
            with pytest.raises(EmbeddingError, match="must name the profile"):
                await store.search(SearchRequest(vector=vector))
            with pytest.raises(EmbeddingError, match="model is 'another', expected 'hash'"):
                await store.search(SearchRequest(vector=vector, profile=other))
            with pytest.raises(EmbeddingError, match="dimensions is 16, expected 32"):
                await store.search(SearchRequest(vector=[1.0] * (DIM // 2), profile=narrow))
            with pytest.raises(EmbeddingError, match="must name the profile"):
                await store.retrieve_embedding(vector, 1)
            with pytest.raises(EmbeddingError, match="another"):
                await store.retrieve_embedding(vector, 1, profile=other)
            hits = await store.search(SearchRequest(vector=vector, profile=model.profile))
            assert [h.document.id for h in hits] == ["car"]
            report = await store.retrieve_embedding(vector, 1, profile=model.profile)
            assert [t.id for t in report.turns] == ["car"]
            # A zero vector compares with nothing, so it needs no profile.
            zero = await store.search(SearchRequest(vector=[0.0] * DIM, k=1))
            assert [h.score for h in zero] == [0.0]
            # Text queries are embedded by the store's own model.
            assert len(await store.search(SearchRequest(query="blue car"))) == 1


async def test_profiles_are_checked_where_they_are_given() -> None:
    profile = EmbeddingProfile(provider="p", model="m", dimensions=DIM)
    with pytest.raises(EmbeddingError, match="vector has 3 floats"):
        SearchRequest(vector=[1.0, 2.0, 3.0], profile=profile)
    with pytest.raises(ConfigError, match="profile is a dict"):
        SearchRequest(vector=[1.0], profile={"model": "m"})  # type: ignore[arg-type]
    with trio.fail_after(TIMEOUT):
        # An unbound store checks a given profile's width against its own.
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            assert store.profile is None
            await store.search(SearchRequest(vector=[1.0] * DIM, profile=profile))
            wide = EmbeddingProfile(provider="p", model="m", dimensions=DIM * 2)
            with pytest.raises(EmbeddingError, match="this store takes 32"):
                await store.search(SearchRequest(vector=[1.0] * DIM * 2, profile=wide))
        with pytest.raises(ConfigError, match="makes 16-float vectors"):
            async with open_store(STORE, CachedEmbedder(ProfiledModel(dims=DIM // 2))):
                pass


async def test_a_memory_over_a_profiled_model_is_bound_and_recalls() -> None:
    model = ProfiledModel()
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE, embedder=model) as memory:
            assert memory.store.profile == model.profile
            await memory.remember("the spare key is under the mat")
            report = await memory.retrieve("where is the spare key")
            assert len(report.turns) == 1
            assert memory.embedding_usage().calls >= 2


# --- index() -------------------------------------------------------------------------------


async def test_index_sends_started_batches_and_completed() -> None:
    events: list[Event] = []
    docs = [Document(text=f"page {i}", source_id="book") for i in range(5)]
    manager = InMemoryRecordManager("lib")
    with trio.fail_after(TIMEOUT):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            await index(docs, store, manager, batch_size=2, on_event=events.append)
            result = await index(
                docs[:3], store, manager, cleanup="full", batch_size=2, on_event=events.append
            )
    first, second = events[:5], events[5:]
    assert [type(e) for e in first] == [
        IndexingStarted,
        IndexingBatchCompleted,
        IndexingBatchCompleted,
        IndexingBatchCompleted,
        IndexingCompleted,
    ]
    started = first[0]
    assert isinstance(started, IndexingStarted)
    assert (started.namespace, started.run, started.cleanup, started.batch_size) == (
        "lib",
        1,
        None,
        2,
    )
    batches = [e for e in first if isinstance(e, IndexingBatchCompleted)]
    assert [(b.batch, b.documents, b.seen, b.num_added) for b in batches] == [
        (0, 2, 2, 2),
        (1, 2, 4, 4),
        (2, 1, 5, 5),
    ]
    done = second[-1]
    assert isinstance(done, IndexingCompleted)
    assert (done.run, done.seen, done.num_skipped, done.num_deleted) == (2, 3, 3, 2)
    assert (done.num_added, done.num_updated) == (result.num_added, result.num_updated)


async def test_index_sends_failed_when_the_store_fails() -> None:
    events: list[Event] = []
    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            await index([Document(text="ok")], store, InMemoryRecordManager("x"))
            inject_crash(store)
            with pytest.raises(Poisoned):
                await index(
                    [Document(text="boom")],
                    store,
                    InMemoryRecordManager("x"),
                    on_event=events.append,
                )
    assert [type(e) for e in events] == [IndexingStarted, IndexingFailed]
    failed = events[-1]
    assert isinstance(failed, IndexingFailed)
    assert failed.error.startswith("Poisoned")
    assert (failed.seen, failed.num_added) == (1, 0)


async def test_index_events_reach_the_memory_stream() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory, memory.events() as events:
            manager = InMemoryRecordManager("docs")
            await index([Document(text="a")], memory.store, manager, on_event=memory.publish)
            tags = [type(e).__struct_config__.tag for e in drain(events)]
            with pytest.raises(ConfigError, match="expected an Event"):
                memory.publish("not an event")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="on_event is 'x'"):
                await index([], memory.store, manager, on_event="x")  # type: ignore[arg-type]
    assert tags[0] == "indexing.started"
    assert tags[-1] == "indexing.completed"
    assert "vector_store.added" in tags
    assert "embedding.completed" in tags


# --- auto_store_user_input -----------------------------------------------------------------


def chat(*texts: str) -> UnifiedRequest:
    return UnifiedRequest(model="m", messages=[UnifiedMessage.user(t) for t in texts])


async def test_user_input_is_not_stored_by_default() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory:
            await memory.turn(chat("remember that I like tea"))
            assert memory.store.is_empty()


async def test_auto_store_user_input_stores_each_turns_user_message() -> None:
    config = MemoryConfig(auto_store_user_input=True, namespace="sess")
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE, memory=config) as memory, memory.events() as events:
            await memory.turn(chat("I like green tea"))
            await memory.turn(chat("I like green tea", "my cat is Miso"))
            added = [e for e in drain(events) if isinstance(e, DocumentsAdded)]
            report = await memory.store.retrieve_in("sess", "cat", 5)
            assert len(memory.store) == 2
    assert [(e.source, e.namespace, e.count) for e in added] == [("user", "sess", 1)] * 2
    texts = {t.message.content[0].text for t in report.turns}  # type: ignore[union-attr]
    assert texts == {"I like green tea", "my cat is Miso"}
    assert {t.source for t in report.turns} == {"user"}


# --- seed 004: event names, retriever names and run ids ---------------------------------------


async def test_an_embedder_call_ends_with_embedding_completed_and_the_old_name_still_matches() -> (
    None
):
    import protocol.events

    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory, memory.events() as events:
            await memory.remember("cats purr")
            await memory.retrieve("cats")
            got = drain(events)
    ends = [e for e in got if type(e).__struct_config__.tag.startswith("embedding.")]
    tags = [type(e).__struct_config__.tag for e in ends]
    assert tags == ["embedding.started", "embedding.completed"] * 2
    completed = [e for e in ends if isinstance(e, EmbeddingCompleted)]
    assert [e.usage.input_type for e in completed] == ["document", "query"]
    # The old name is an alias for one release: importing it warns and names the new
    # one, and a subscriber that filters by it still receives every completed call.
    assert "EmbeddingEmbedded" not in protocol.events.__all__
    with pytest.warns(DeprecationWarning, match="use EmbeddingCompleted"):
        from protocol.events import EmbeddingEmbedded
    assert [e for e in got if isinstance(e, EmbeddingEmbedded)] == completed
    # A log written before the rename still decodes, as the old class.
    old_line = msgspec.json.encode(completed[0]).replace(
        b'"embedding.completed"', b'"embedding.embedded"'
    )
    decoded = msgspec.json.decode(old_line, type=MemoryEvent)
    assert type(decoded) is EmbeddingEmbedded
    assert decoded.usage == completed[0].usage
    # The new event round-trips as itself.
    line = msgspec.json.encode(completed[1])
    assert msgspec.json.decode(line, type=MemoryEvent) == completed[1]
    with pytest.raises(AttributeError, match="EmbeddingDone"):
        protocol.events.EmbeddingDone  # noqa: B018


def runs(got: Sequence[Event]) -> list[list[Event]]:
    """The retriever and search events of ``got``, grouped by run id in order."""
    out: dict[str, list[Event]] = {}
    for e in got:
        if isinstance(e, RetrieverStarted | RetrieverCompleted | RetrieverFailed | StoreSearched):
            assert e.run_id is not None
            out.setdefault(e.run_id, []).append(e)
    return list(out.values())


async def test_each_retrieve_is_one_named_run_with_its_store_read() -> None:
    config = MemoryConfig(retriever_name="kb-search")
    with trio.fail_after(TIMEOUT):
        async with (
            open_memory(store=STORE, memory=config) as memory,
            memory.events() as events,
        ):
            await memory.remember("cats purr")
            await memory.remember("dogs bark")
            drain(events)
            await memory.retrieve("cats")
            await memory.retrieve("dogs")
            # A direct read of the store is a run of its own, named "store".
            await memory.store.search(SearchRequest(query="cats", k=1))
            got = drain(events)
    first, second, direct = runs(got)
    for run, query in ((first, "cats"), (second, "dogs")):
        started, searched, completed = run
        assert isinstance(started, RetrieverStarted)
        assert isinstance(searched, StoreSearched)
        assert isinstance(completed, RetrieverCompleted)
        assert {started.retriever, searched.retriever, completed.retriever} == {"kb-search"}
        assert started.query_fingerprint == searched.query_fingerprint == fingerprint(query)
        assert searched.kind == "recall"
        assert started.run_id is not None and re.fullmatch("[0-9a-f]{32}", started.run_id)
    assert first[0].run_id != second[0].run_id  # type: ignore[attr-defined]
    (read,) = direct
    assert isinstance(read, StoreSearched)
    assert read.retriever == "store"
    assert read.run_id is not None and re.fullmatch("[0-9a-f]{32}", read.run_id)
    # Both fields survive the wire form.
    for e in got:
        assert msgspec.json.decode(msgspec.json.encode(e), type=MemoryEvent) == e


async def test_a_failed_retrieve_ends_its_run_and_the_default_name_is_memory() -> None:
    model = ProfiledModel()
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE, embedder=model) as memory, memory.events() as events:
            model.fail = OSError("offline")
            with pytest.raises(Exception, match="offline"):
                await memory.retrieve("anything")
            got = drain(events)
    (run,) = runs(got)
    started, failed = run
    assert isinstance(started, RetrieverStarted)
    assert isinstance(failed, RetrieverFailed)
    assert started.retriever == failed.retriever == "memory"
    assert started.run_id == failed.run_id


@pytest.mark.parametrize("name", ["", "x" * 129, "tab\there", 7])
def test_the_retriever_name_is_validated(name: object) -> None:
    with pytest.raises(ConfigError, match=r"MemoryConfig\.retriever_name is .*1 to 128"):
        MemoryConfig(retriever_name=name)  # type: ignore[arg-type]


# --- a door's named run (actors.doors.named_run) -------------------------------------------


async def test_named_run_names_every_read_inside_it_and_no_read_outside() -> None:
    got: list[Event] = []
    with trio.fail_after(TIMEOUT):
        async with open_store(STORE, HashingEmbedder(DIM), on_event=got.append) as store:
            await store.add_documents([Document(text="cats purr"), Document(text="dogs bark")])
            got.clear()
            with named_run("my-door") as run_id:
                await store.search(SearchRequest(query="cats", k=1))
                await store.retrieve("dogs", 1)
                await store.retrieve_embedding(np.ones(DIM, dtype=np.float32), 1)

                # A task started inside the run reads in it too (contextvars).
                async def child() -> None:
                    await store.search(SearchRequest(query="dogs", k=1, kind="bm25"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(child)
            with named_run("my-door") as second:
                await store.search(SearchRequest(query="cats", k=1))
            await store.search(SearchRequest(query="cats", k=1))
    reads = [e for e in got if isinstance(e, StoreSearched)]
    assert [e.operation for e in reads] == [
        "search",
        "retrieve",
        "retrieve_embedding",
        "search",
        "search",
        "search",
    ]
    assert re.fullmatch("[0-9a-f]{32}", run_id) and re.fullmatch("[0-9a-f]{32}", second)
    assert second != run_id
    assert [(e.retriever, e.run_id) for e in reads[:4]] == [("my-door", run_id)] * 4
    assert (reads[4].retriever, reads[4].run_id) == ("my-door", second)
    # Out of the block the name is gone: the read is a run of its own, named "store".
    assert reads[5].retriever == "store"
    assert reads[5].run_id not in (run_id, second)


async def test_a_named_run_inside_a_memory_names_its_direct_reads_not_its_recalls() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=STORE) as memory, memory.events() as events:
            await memory.remember("cats purr")
            drain(events)
            with named_run("door") as run_id:
                await memory.store.search(SearchRequest(query="cats", k=1))
                await memory.retrieve("cats")  # the memory's own run, nested inside
            got = drain(events)
    direct, recall = runs(got)
    (read,) = direct
    assert isinstance(read, StoreSearched)
    assert (read.retriever, read.run_id) == ("door", run_id)
    assert [type(e) for e in recall] == [RetrieverStarted, StoreSearched, RetrieverCompleted]
    assert {e.retriever for e in recall if isinstance(e, StoreSearched)} == {"memory"}
    assert {e.run_id for e in recall if isinstance(e, StoreSearched)} != {run_id}


@pytest.mark.parametrize("name", ["", "x" * 129, "tab\there", 7, None])
def test_named_run_refuses_a_bad_name_and_sets_nothing(name: object) -> None:
    with (
        pytest.raises(ConfigError, match=r"name is .*expected a str of 1 to 128 printable"),
        named_run(cast(str, name)),  # the name as an untyped caller gives it
    ):
        pass
    from actors._store.events import CURRENT_RUN

    assert CURRENT_RUN.get() is None


def test_named_run_takes_any_printable_name_up_to_128() -> None:
    for name in ("x", "x" * 128, "café search", "langgraph"):
        with named_run(name) as run_id:
            assert re.fullmatch("[0-9a-f]{32}", run_id)
