"""The documents write path of :class:`~actors.testing.WriteConformance`: ids, upserts,
deletes, whole-batch rejection, turns as documents, BM25 bookkeeping, a crashed store."""

from __future__ import annotations

import pytest
import trio

from protocol import (
    ConfigError,
    Document,
    EmbedderError,
    EntryTooLarge,
    Poisoned,
    SearchRequest,
    document_id,
)

from ._conformance_base import call_unchecked
from ._crash import inject_crash
from ._write_base import WriteSuiteBase, _docs, _msg

__all__ = ["DocumentWriteCases"]


class DocumentWriteCases(WriteSuiteBase):
    """The documents write path, as conformance tests (a base of ``WriteConformance``)."""

    # --- the documents write path ----------------------------------------------------------

    async def test_add_generates_deterministic_ids_and_is_idempotent(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                first = await store.add_documents(_docs("alpha", "beta"))
                assert first == [document_id("alpha", {}), document_id("beta", {})]
                assert await store.add_documents(_docs("alpha", "beta")) == first
                assert len(store) == 2

    async def test_upsert_replaces_vector_text_and_metadata(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                await store.upsert([Document(id="d1", text="apples and pears", metadata={"v": 1})])
                await store.upsert([Document(id="d2", text="unrelated words")])
                await store.upsert([Document(id="d1", text="bicycles", metadata={"v": 2})])
                assert len(store) == 2
                assert store.usage().evicted_entries == 0
                (got,) = await store.get_by_ids(["d1"])
                assert (got.text, got.metadata) == ("bicycles", {"v": 2})
                hits = await store.search(SearchRequest(query="bicycles", k=1))
                assert hits[0].document.id == "d1"
                assert hits[0].score == pytest.approx(1.0)
                hybrid = await store.search(SearchRequest(query="apples", k=2, kind="hybrid"))
                assert all("apples" not in h.document.text for h in hybrid)

    async def test_delete_reports_missing_and_frees_the_place(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config(max_entries=3)) as store:
                ids = await store.add_documents(_docs("a", "b", "c"))
                result = await store.delete([ids[1], "nope", ids[1]])
                assert (result.deleted, result.missing) == ([ids[1]], ["nope"])
                await store.add_documents(_docs("d"))
                assert store.usage().evicted_entries == 0
                assert len(store) == 3
                got = await store.get_by_ids([*ids, "zzz"])
                assert sorted(d.text for d in got) == ["a", "c"]

    async def test_turns_are_documents_in_one_id_space(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                stored = await store.store_turns([_msg("remember the milk")])
                (doc,) = await store.get_by_ids(stored.ids)
                assert (doc.id, doc.text) == (stored.ids[0], "remember the milk")
                assert (await store.delete(stored.ids)).deleted == stored.ids
                assert store.is_empty()

    async def test_explicit_turn_ids_replace(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                await store.store_turns([_msg("v1")], source="explicit", ids=["m1"])
                await store.store_turns([_msg("v2")], source="explicit", ids=["m1"])
                (doc,) = await store.get_by_ids(["m1"])
                assert doc.text == "v2"
                assert len(store) == 1
                (turn,) = (await store.retrieve("v2", 5)).turns
                assert (turn.id, turn.source, turn.message.text()) == ("m1", "explicit", "v2")
                with pytest.raises(ConfigError, match="2 ids for 1 turns"):
                    await store.store_turns([_msg("x")], ids=["a", "b"])

    async def test_bad_documents_change_nothing(self) -> None:
        class Broken:
            def embed(self, text: str) -> list[float]:
                raise RuntimeError("provider down")

        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                await store.add_documents(_docs("keep"))
                with pytest.raises(EntryTooLarge) as info:
                    await store.add_documents(_docs("ok", "x" * 600))
                assert info.value.index == 1
                assert info.value.bytes > 512
                with pytest.raises(ConfigError, match="appears twice in the batch"):
                    await store.upsert(
                        [Document(id="same", text="a"), Document(id="same", text="b")]
                    )
                with pytest.raises(ConfigError, match="document 0 of the batch is a str"):
                    await call_unchecked(store.upsert, ["text"])
                kept = await store.get_by_ids([document_id("keep", {})])
                assert [d.text for d in kept] == ["keep"]
                assert len(store) == 1
            async with self.fresh_store(self.documents_config(), Broken()) as store:
                with pytest.raises(EmbedderError):
                    await store.add_documents(_docs("a"))
                assert store.is_empty()

    async def test_payload_size_is_document_bytes(self) -> None:
        # document_bytes: text, id and source id in UTF-8, plus compact JSON metadata.
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                meta = {"k": "v"}  # {"k":"v"} is 9 bytes
                exact = Document(id="i" * 10, text="é" * 200, source_id="s" * 93, metadata=meta)
                await store.upsert([exact])  # 10 + 400 + 93 + 9 = 512: at the cap
                over = Document(id="i" * 11, text="é" * 200, source_id="s" * 93, metadata=meta)
                with pytest.raises(EntryTooLarge) as info:
                    await store.upsert([over])
                assert (info.value.bytes, info.value.max_entry_bytes) == (513, 512)

    async def test_same_content_in_two_namespaces_is_two_entries(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                (a,) = await store.add_documents(_docs("shared text"), namespace="a")
                (b,) = await store.add_documents(_docs("shared text"), namespace="b")
                assert a == b
                assert len(store) == 2
                assert (await store.delete([a], namespace="a")).deleted == [a]
                got = await store.get_by_ids([b], namespace="b")
                assert [d.text for d in got] == ["shared text"]
                assert await store.get_by_ids([a], namespace="a") == []

    async def test_exact_text_source_id_and_metadata_round_trip(self) -> None:
        text = "nul \x00 here, a lone \ud800 surrogate, and 😀"
        meta = {"big": 1e23, "neg0": -0.0, "int": 2**63 - 1, "nested": {"l": [1, 2.5, None]}}
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config()) as store:
                (doc_id,) = await store.upsert(
                    [Document(id="r", text=text, metadata=meta, source_id="f.md")]
                )
                (got,) = await store.get_by_ids([doc_id])
                # occurred_at: the time of the write, which the store stamped.
                assert got.occurred_at is not None
                assert got == Document(
                    text=text,
                    id=doc_id,
                    metadata=meta,
                    source_id="f.md",
                    occurred_at=got.occurred_at,
                    # Version 1, valid from its occurred_at, current (memory over time).
                    valid_from=got.occurred_at,
                    version=1,
                )
                assert type(got.metadata["big"]) is float
                assert type(got.metadata["int"]) is int
                (hit,) = await store.search(SearchRequest(query="surrogate", k=1, kind="hybrid"))
                assert hit.document == got
                assert hit.ranks == {"dense": 1, "bm25": 1}

    async def test_bm25_follows_deletes_evictions_and_upserts(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store(self.documents_config(max_entries=3)) as store:
                ids = await store.add_documents(_docs("walrus one", "walrus two", "walrus three"))
                await store.delete([ids[0]])
                await store.add_documents(_docs("penguin", "seal"))  # evicts "walrus two"
                hits = await store.search(SearchRequest(query="walrus", k=3, kind="hybrid"))
                assert [h.document.text for h in hits if "bm25" in h.ranks] == ["walrus three"]
                await store.upsert([Document(id=ids[2], text="no longer")])
                hits = await store.search(SearchRequest(query="walrus", k=3, kind="hybrid"))
                assert not [h for h in hits if "bm25" in h.ranks]

    async def test_search_after_a_crash_is_poisoned(self) -> None:
        with trio.fail_after(self.timeout), pytest.raises(Poisoned):
            await self._use_a_crashed_store()

    async def _use_a_crashed_store(self) -> None:
        """Every documents call on a crashed store raises ``Poisoned``; so does the exit."""
        async with self.fresh_store(self.documents_config()) as store:
            inject_crash(store)
            with pytest.raises(Poisoned):
                await store.add_documents(_docs("x"))
            for request in (SearchRequest(query="x"), SearchRequest(query="x", kind="hybrid")):
                with pytest.raises(Poisoned):
                    await store.search(request)
            with pytest.raises(Poisoned):
                await store.get_by_ids(["x"])
            with pytest.raises(Poisoned):
                await store.upsert(_docs("y"))
