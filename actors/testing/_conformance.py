"""``StoreConformance``: the documents-and-search contract (design §9) as pytest tests.

Subclass it in a test module, under a name pytest collects (``Test...``), and override
:meth:`StoreConformance.open_store_under_test` to check your own store::

    class TestMyStore(StoreConformance):
        def open_store_under_test(self, config, embedder):
            return open_my_store(config, embedder, dsn=...)

Every test is an ``async def`` method marked ``pytest.mark.trio`` (through the class's
``pytestmark``), so pytest-trio runs it whether or not ``trio_mode`` is on. Every test
runs under ``trio.fail_after(self.timeout)``, so a store that hangs fails the test.

The scenarios are our own. They cover what LangChain's standard vector-store tests
cover (an empty store, add, a fresh store per test, delete, bulk delete, deleting
missing ids, idempotent adds with ids, re-adding an id with new content, get by ids,
missing ids, adding documents, documents that carry their own ids), plus metadata
filters, MMR, score thresholds, hybrid search, search by vector and namespaces.

What the suite assumes of a store:

- it has the ``StoreHandle`` documents API: ``add_documents``, ``upsert``, ``delete``,
  ``get_by_ids``, ``search``, ``len()`` and ``is_empty()``;
- each call of ``open_store_under_test`` yields a new, empty store (a fresh table, a
  fresh schema), and leaving its block releases it;
- dense scores are cosine similarity, to within :attr:`StoreConformance.score_tolerance`.
"""

from __future__ import annotations

import datetime as dt
import math
import random

import msgspec
import numpy as np
import pytest
import trio

from protocol import (
    DEFAULT_NAMESPACE,
    ConfigError,
    DeleteResult,
    Document,
    EntryTooLarge,
    FilterError,
    SearchRequest,
    Text,
    UnifiedMessage,
    document_id,
)

from ._conformance_base import StoreUnderTest, _ids, call_unchecked, untimed
from ._conformance_checks import check_namespace_walk, mmr_reference
from ._conformance_inputs import InputShapeTests
from ._conformance_keywords import KeywordSearchTests

__all__ = ["StoreConformance"]


class StoreConformance(KeywordSearchTests, InputShapeTests):
    """Conformance tests for a document store. Subclass it; see the module docs.

    Its settings and helpers are :class:`~actors.testing._conformance_base.ConformanceBase`'s
    (``dimensions``, ``max_entries``, ``max_entry_bytes``, ``timeout``,
    ``score_tolerance``, ``namespace_rounds``; override ``open_store_under_test``).
    """

    # --- the twelve basic scenarios --------------------------------------------------------

    async def test_a_new_store_is_empty(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                assert store.is_empty()
                assert len(store) == 0
                assert await self.search(store, query="anything at all", k=4) == []
                assert await store.get_by_ids(["a", "b"]) == []

    async def test_add_then_find(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                ids = await store.add_documents(
                    [Document(text="red apples"), Document(text="blue bicycles")]
                )
                assert len(ids) == 2
                assert len(store) == 2
                assert not store.is_empty()
                hits = await self.search(store, query="red apples", k=1)
                assert _ids(hits) == [ids[0]]
                assert hits[0].document.text == "red apples"
                assert math.isclose(hits[0].score, 1.0, abs_tol=self.score_tolerance)

    async def test_every_store_starts_empty(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as first:
                await first.add_documents([Document(text="left behind", id="x")])
                async with self.fresh_store() as second:
                    assert second.is_empty()
                    assert await second.get_by_ids(["x"]) == []
            async with self.fresh_store() as third:
                assert third.is_empty()
                assert await self.search(third, query="left behind", k=4) == []

    async def test_delete(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                ids = await store.add_documents([Document(text="short lived", id="gone")])
                assert ids == ["gone"]
                result = await store.delete(["gone"])
                assert result == DeleteResult(deleted=["gone"], missing=[])
                assert store.is_empty()
                assert await store.get_by_ids(["gone"]) == []
                assert await self.search(store, query="short lived", k=4) == []

    async def test_bulk_delete(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [Document(text=f"note number {i}", id=f"n{i}") for i in range(6)]
                )
                result = await store.delete(["n1", "n3", "n4", "n1"])
                assert result.deleted == ["n1", "n3", "n4"]
                assert result.missing == []
                assert len(store) == 3
                left = await store.get_by_ids([f"n{i}" for i in range(6)])
                assert sorted(str(d.id) for d in left) == ["n0", "n2", "n5"]
                hits = await self.search(store, query="note number", k=10)
                assert sorted(_ids(hits)) == ["n0", "n2", "n5"]  # type: ignore[type-var]

    async def test_delete_missing_ids(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                assert await store.delete(["never"]) == DeleteResult(deleted=[], missing=["never"])
                await store.add_documents([Document(text="kept", id="k")])
                result = await store.delete(["ghost", "k", "ghost", "phantom"])
                assert result == DeleteResult(deleted=["k"], missing=["ghost", "phantom"])
                assert store.is_empty()
                again = await store.delete(["k"])
                assert again == DeleteResult(deleted=[], missing=["k"])

    async def test_adding_the_same_ids_twice_is_idempotent(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                docs = [
                    Document(text="first text", id="1", metadata={"n": 1}),
                    Document(text="second text", id="2", metadata={"n": 2}),
                ]
                assert await store.add_documents(docs) == ["1", "2"]
                assert await store.add_documents(docs) == ["1", "2"]
                assert len(store) == 2
                got = await store.get_by_ids(["1", "2"])
                assert sorted(untimed(got), key=lambda d: d.id or "") == docs
                hits = await self.search(store, query="first text", k=10)
                assert sorted(_ids(hits)) == ["1", "2"]  # type: ignore[type-var]

    async def test_re_adding_an_id_replaces_its_content(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="orange cat", id="pet", metadata={"v": 1}),
                        Document(text="green tree", id="plant"),
                    ]
                )
                await store.add_documents([Document(text="grey dog", id="pet", metadata={"v": 2})])
                assert len(store) == 2
                (pet,) = await store.get_by_ids(["pet"])
                assert (pet.text, pet.metadata) == ("grey dog", {"v": 2})
                hits = await self.search(store, query="grey dog", k=1)
                assert _ids(hits) == ["pet"]
                assert math.isclose(hits[0].score, 1.0, abs_tol=self.score_tolerance)
                # The old vector went with the old text.
                stale = await self.search(store, query="orange cat", k=2)
                for h in stale:
                    assert h.score < 0.5 or h.document.text != "orange cat"
                    assert h.document.text in ("grey dog", "green tree")

    async def test_get_by_ids(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                docs = [
                    Document(text="alpha", id="a", metadata={"tag": "x"}, source_id="s1"),
                    Document(text="beta", id="b", metadata={"nested": {"k": [1, 2]}}),
                    Document(text="gamma", id="c"),
                ]
                await store.add_documents(docs)
                got = await store.get_by_ids(["c", "a"])
                # No order is promised.
                assert sorted(untimed(got), key=lambda d: d.id or "") == [docs[0], docs[2]]
                assert untimed(await store.get_by_ids(["b", "b"])) == [docs[1]]

    async def test_get_missing_ids(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents([Document(text="present", id="here")])
                assert await store.get_by_ids(["not-here"]) == []
                got = await store.get_by_ids(["not-here", "here", "nor-here"])
                assert [d.id for d in got] == ["here"]
                assert await store.get_by_ids([]) == []

    async def test_add_documents_returns_ids_in_order(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                docs = [
                    Document(text="no id here", metadata={"lang": "en"}),
                    Document(text="with an id", id="explicit"),
                    Document(text="no id either"),
                ]
                ids = await store.add_documents(docs)
                # A document without an id gets a content hash: the same on every run.
                assert ids == [
                    document_id("no id here", {"lang": "en"}),
                    "explicit",
                    document_id("no id either", {}),
                ]
                got = {d.id: d for d in await store.get_by_ids(ids)}
                assert got[ids[0]].text == "no id here"
                assert got[ids[0]].metadata == {"lang": "en"}
                assert got["explicit"].text == "with an id"
                # The same content again keeps one entry.
                assert await store.add_documents([Document(text="no id either")]) == [ids[2]]
                assert len(store) == 3

    async def test_documents_keep_their_time_and_conversation(self) -> None:
        when = dt.datetime(2023, 5, 25, 13, 14, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        docs = [
            Document(id="q", text="did you run the race?", conversation="chat"),
            Document(id="a", text="yes, on Saturday", occurred_at=when, conversation="chat"),
        ]
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                before = dt.datetime.now(dt.UTC)
                await store.add_documents(docs)
                after = dt.datetime.now(dt.UTC)
                got = {d.id: d for d in await store.get_by_ids(["q", "a"])}
                hits = await self.search(store, query="race Saturday", k=2)
                # A document given no time comes back with the time of its write, in UTC.
                stamped = got["q"].occurred_at
                assert stamped is not None
                assert stamped.tzinfo is dt.UTC
                assert before <= stamped <= after
                assert got["a"].occurred_at == when
                assert got["a"].occurred_at.tzinfo is dt.UTC
                assert [got[i].conversation for i in ("q", "a")] == ["chat", "chat"]
                # The text comes back as given, whatever the store indexed it by.
                assert [got[i].text for i in ("q", "a")] == [d.text for d in docs]
                assert {h.document.id: h.document for h in hits} == got

    async def test_documents_keep_their_own_ids(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                first = await store.add_documents(
                    [Document(text="one", id="id-1"), Document(text="two", id="id-2")]
                )
                assert first == ["id-1", "id-2"]
                # One id known, one new: the known one is replaced, not duplicated.
                second = await store.upsert(
                    [Document(text="two again", id="id-2"), Document(text="three", id="id-3")]
                )
                assert second == ["id-2", "id-3"]
                assert len(store) == 3
                got = {d.id: d.text for d in await store.get_by_ids(["id-1", "id-2", "id-3"])}
                assert got == {"id-1": "one", "id-2": "two again", "id-3": "three"}
                hits = await self.search(store, query="two again", k=1)
                assert _ids(hits) == ["id-2"]

    # --- search: similarity, vectors, thresholds -----------------------------------------

    async def test_similarity_scores_are_cosine_and_ranked(self) -> None:
        texts = ["red car", "red car fast", "blue boat", "red bus slow", "green tea"]
        with trio.fail_after(self.timeout):
            async with self._numbered_store(texts) as store:
                query = "red car"
                hits = await self.search(store, query=query, k=3)
                assert len(hits) == 3
                assert hits[0].document.id == "d0"
                scores = [h.score for h in hits]
                assert scores == sorted(scores, reverse=True)
                self.assert_scores_are_cosine(query, hits)
                # k beyond the entries returns every entry.
                assert len(await self.search(store, query=query, k=50)) == len(texts)

    async def test_search_by_vector(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [Document(text="sunny beach", id="s"), Document(text="snowy peak", id="w")]
                )
                hits = await self.search(
                    store, vector=self.embed("snowy peak"), k=2, profile=self.profile_of(store)
                )
                assert _ids(hits) == ["w", "s"]
                self.assert_scores_are_cosine("snowy peak", hits)
                # The vector need not be normalized.
                scaled = [3.5 * x for x in self.embed("sunny beach")]
                hits = await self.search(store, vector=scaled, k=1, profile=self.profile_of(store))
                assert _ids(hits) == ["s"]
                assert math.isclose(hits[0].score, 1.0, abs_tol=self.score_tolerance)

    async def test_score_threshold_is_cosine(self) -> None:
        texts = ["apple pie", "apple tart crust", "apple", "motor oil", "pie chart"]
        with trio.fail_after(self.timeout):
            async with self._numbered_store(texts) as store:
                query = "apple pie"
                everything = await self.search(store, query=query, k=10)
                for threshold in (-1.0, 0.0, 0.3, 0.5, 0.9, 1.0 - self.score_tolerance):
                    hits = await self.search(store, query=query, k=10, score_threshold=threshold)
                    self.assert_scores_are_cosine(query, hits)
                    expected = [h.document.id for h in everything if h.score >= threshold]
                    assert _ids(hits) == expected, threshold
                    assert all(h.score >= threshold for h in hits)
                exact = await self.search(
                    store, query=query, k=10, score_threshold=1.0 - self.score_tolerance
                )
                assert _ids(exact) == ["d0"]
                # Hybrid scores are fused ranks, not cosine: a threshold is refused.
                with pytest.raises(ConfigError):
                    SearchRequest(query=query, kind="hybrid", score_threshold=0.5)

    async def test_similarity_ranks_and_threshold(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [Document(text=t) for t in ("red apple", "green apple", "blue car")]
                )
                hits = await self.search(store, query="red apple", k=3)
                assert [h.document.text for h in hits][:1] == ["red apple"]
                assert [h.ranks["dense"] for h in hits] == [1, 2, 3]
                assert all(-1.0 <= h.score <= 1.0 for h in hits)
                cut = await self.search(store, query="red apple", k=3, score_threshold=0.4)
                assert cut
                assert all(h.score >= 0.4 for h in cut)
                assert len(cut) < len(hits)
                by_vector = await self.search(
                    store, vector=self.embed("blue car"), k=1, profile=self.profile_of(store)
                )
                assert by_vector[0].document.text == "blue car"

    # --- filters ------------------------------------------------------------------------

    async def _catalog(self, store: StoreUnderTest) -> None:
        rows: list[tuple[str, str, dict[str, object]]] = [
            ("c1", "cheap red shirt", {"color": "red", "price": 10, "tags": "sale"}),
            ("c2", "red shirt deluxe", {"color": "red", "price": 80}),
            ("c3", "blue shirt", {"color": "blue", "price": 25, "tags": "new"}),
            ("c4", "green shirt", {"color": "green", "price": 40}),
            ("c5", "red shirt vintage", {"color": "red", "price": 55, "tags": "sale"}),
            ("c6", "shirt without color", {"price": 5}),
        ]
        await store.add_documents([Document(text=t, id=i, metadata=m) for i, t, m in rows])

    async def test_filters(self) -> None:
        cases: list[tuple[dict[str, object], set[str]]] = [
            ({"color": "red"}, {"c1", "c2", "c5"}),
            ({"color": {"$eq": "blue"}}, {"c3"}),
            ({"color": {"$ne": "red"}}, {"c3", "c4", "c6"}),
            ({"price": {"$gt": 40}}, {"c2", "c5"}),
            ({"price": {"$gte": 40}}, {"c2", "c4", "c5"}),
            ({"price": {"$lt": 25}}, {"c1", "c6"}),
            ({"price": {"$lte": 25}}, {"c1", "c3", "c6"}),
            ({"color": {"$in": ["blue", "green"]}}, {"c3", "c4"}),
            ({"color": {"$nin": ["red"]}}, {"c3", "c4", "c6"}),
            ({"tags": {"$exists": True}}, {"c1", "c3", "c5"}),
            ({"tags": {"$exists": False}}, {"c2", "c4", "c6"}),
            ({"$and": [{"color": "red"}, {"price": {"$lt": 60}}]}, {"c1", "c5"}),
            ({"$or": [{"color": "blue"}, {"price": {"$gt": 70}}]}, {"c2", "c3"}),
            ({"$not": {"color": "red"}}, {"c3", "c4", "c6"}),
            ({"color": "red", "tags": "sale"}, {"c1", "c5"}),
            ({"color": "purple"}, set()),
        ]
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await self._catalog(store)
                for where, expected in cases:
                    hits = await self.search(store, query="shirt", k=10, filter=where)
                    assert {h.document.id for h in hits} == expected, where
                    for h in hits:
                        assert h.document.id is not None
                        assert (
                            h.document.metadata
                            == (await store.get_by_ids([h.document.id]))[0].metadata
                        )

    async def test_filter_applies_before_top_k(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                # Many close non-matches and two far matches: k=2 must still find both.
                await store.add_documents(
                    [
                        Document(text="gold coin", id=f"near{i}", metadata={"keep": False})
                        for i in range(20)
                    ]
                    + [
                        Document(text="old boot", id="far1", metadata={"keep": True}),
                        Document(text="rusty nail", id="far2", metadata={"keep": True}),
                    ]
                )
                hits = await self.search(store, query="gold coin", k=2, filter={"keep": True})
                assert sorted(_ids(hits)) == ["far1", "far2"]  # type: ignore[type-var]
                mmr = await self.search(
                    store, query="gold coin", k=2, kind="mmr", fetch_k=2, filter={"keep": True}
                )
                assert sorted(_ids(mmr)) == ["far1", "far2"]  # type: ignore[type-var]

    async def test_filter_applies_before_top_k_on_every_kind(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                # The best matches for the query are all "public"; only two are "private".
                await store.add_documents(
                    [
                        Document(text=f"report {i} quarterly report", metadata={"tag": "public"})
                        for i in range(10)
                    ]
                )
                await store.add_documents(
                    [
                        Document(text=f"misc {i}", metadata={"tag": "private", "n": i})
                        for i in range(2)
                    ]
                )
                for kind in ("similarity", "mmr", "hybrid"):
                    hits = await self.search(
                        store,
                        query="quarterly report",
                        k=2,
                        kind=kind,
                        fetch_k=2,
                        filter={"tag": "private"},
                    )
                    assert sorted(h.document.metadata["n"] for h in hits) == [0, 1], kind
                ranged = await self.search(store, query="misc", k=5, filter={"n": {"$gte": 1}})
                assert [h.document.metadata["n"] for h in ranged] == [1]

    async def test_bad_filters_raise(self) -> None:
        bad: list[object] = [
            {"price": {"$between": [1, 2]}},
            {"price": {"$gt": [10]}},
            {"price": {"$lt": True}},
            {"color": {"$in": "red"}},
            {"$and": {"color": "red"}},
            {"tags": {"$exists": "yes"}},
        ]
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await self._catalog(store)
                for where in bad:
                    with pytest.raises(FilterError):
                        await self.search(store, query="shirt", k=2, filter=where)

    # --- MMR ---------------------------------------------------------------------------

    async def test_mmr_prefers_diversity(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="apple banana", id="twin1"),
                        Document(text="apple banana", id="twin2"),
                        Document(text="apple cherry", id="other"),
                        Document(text="zebra", id="far"),
                    ]
                )
                query = "apple banana"
                plain = await self.search(store, query=query, k=2)
                assert sorted(_ids(plain)) == ["twin1", "twin2"]  # type: ignore[type-var]
                # "far" shares nothing with anything, so it is the most diverse; fetch_k=3
                # keeps it out of the candidates (it is the 4th nearest).
                diverse = await self.search(
                    store, query=query, k=2, kind="mmr", fetch_k=3, lambda_mult=0.3
                )
                assert len(diverse) == 2
                assert diverse[0].document.id in ("twin1", "twin2")
                assert diverse[1].document.id == "other"
                # A hit's score stays its cosine similarity.
                self.assert_scores_are_cosine(query, diverse)
                # lambda_mult=1 is pure relevance: the similarity ranking.
                relevant = await self.search(
                    store, query=query, k=3, kind="mmr", fetch_k=4, lambda_mult=1.0
                )
                top3 = await self.search(store, query=query, k=3)
                assert [h.score for h in relevant] == pytest.approx([h.score for h in top3])
                assert set(_ids(relevant)[:2]) == {"twin1", "twin2"}

    async def test_mmr_is_deterministic_and_within_fetch_k(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                words = ["sun", "moon", "star", "sky", "cloud", "rain"]
                rng = random.Random(7)
                docs = [
                    Document(text=" ".join(rng.sample(words, 3)), id=f"d{i}") for i in range(12)
                ]
                await store.add_documents(docs)
                request: dict[str, object] = {
                    "query": "sun moon",
                    "k": 3,
                    "kind": "mmr",
                    "fetch_k": 5,
                    "lambda_mult": 0.5,
                }
                first = await self.search(store, **request)
                assert len(first) == 3
                assert len(set(_ids(first))) == 3
                for _ in range(3):
                    assert _ids(await self.search(store, **request)) == _ids(first)
                nearest = {h.document.id for h in await self.search(store, query="sun moon", k=5)}
                top_score = (await self.search(store, query="sun moon", k=1))[0].score
                assert first[0].score == pytest.approx(top_score, abs=self.score_tolerance)
                # Every MMR pick is among the fetch_k nearest (ties at the boundary aside).
                fifth = (await self.search(store, query="sun moon", k=5))[-1].score
                for h in first:
                    assert h.document.id in nearest or math.isclose(
                        h.score, fifth, abs_tol=self.score_tolerance
                    )

    async def test_mmr_matches_a_brute_force_reference(self) -> None:
        rng = np.random.default_rng(5)
        words = ["cat", "dog", "fish", "bird", "tree", "rock"]
        texts = [" ".join(rng.choice(words, 4)) + f" {i}" for i in range(20)]
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents([Document(text=t) for t in texts])
                hits = await self.search(
                    store, query="cat dog", k=4, kind="mmr", fetch_k=10, lambda_mult=0.5
                )
        chosen = mmr_reference(
            [self.embed(t) for t in texts], self.embed("cat dog"), k=4, fetch_k=10, lambda_mult=0.5
        )
        assert [h.document.text for h in hits] == [texts[i] for i in chosen]

    # --- namespaces ----------------------------------------------------------------------

    async def test_namespaces_are_isolated(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [Document(text="alice secret", id="same", metadata={"who": "a"})],
                    namespace="alice",
                )
                await store.add_documents(
                    [Document(text="bob secret", id="same", metadata={"who": "b"})],
                    namespace="bob",
                )
                assert len(store) == 2
                (a,) = await store.get_by_ids(["same"], namespace="alice")
                (b,) = await store.get_by_ids(["same"], namespace="bob")
                assert (a.text, b.text) == ("alice secret", "bob secret")
                assert await store.get_by_ids(["same"]) == []
                for space, text in (("alice", "alice secret"), ("bob", "bob secret")):
                    hits = await self.search(store, query="bob secret", k=10, namespace=space)
                    assert [h.document.text for h in hits] == [text]
                    hits = await self.search(
                        store,
                        vector=self.embed("alice"),
                        k=10,
                        namespace=space,
                        profile=self.profile_of(store),
                    )
                    assert [h.document.text for h in hits] == [text]
                assert await self.search(store, query="secret", k=10, namespace="carol") == []
                # A delete in one namespace never reaches another.
                gone = await store.delete(["same"], namespace="alice")
                assert gone == DeleteResult(deleted=["same"], missing=[])
                assert await store.get_by_ids(["same"], namespace="alice") == []
                (b,) = await store.get_by_ids(["same"], namespace="bob")
                assert b.text == "bob secret"

    async def test_none_is_the_default_namespace(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents([Document(text="plain", id="p")])
                await store.upsert([Document(text="named", id="n")], namespace=DEFAULT_NAMESPACE)
                got = await store.get_by_ids(["p", "n"], namespace=DEFAULT_NAMESPACE)
                assert sorted(str(d.id) for d in got) == ["n", "p"]
                got = await store.get_by_ids(["p", "n"])
                assert sorted(str(d.id) for d in got) == ["n", "p"]
                hits = await self.search(store, query="plain", k=5, namespace=DEFAULT_NAMESPACE)
                assert {h.document.id for h in hits} == {"p", "n"}
                assert await store.delete(["p"], namespace=None) == DeleteResult(
                    deleted=["p"], missing=[]
                )

    async def test_no_sequence_of_operations_leaks_across_namespaces(self) -> None:
        """The namespace-isolation property: random upserts, deletes and clears over
        namespaces sharing ids and texts, reads checked after every step. Half the walks
        run on a 6-entry store, so that eviction is in them too; each walk starts from
        a store emptied with ``clear()``."""
        with trio.fail_after(self.timeout):
            for evicting in (False, True):
                config = self.make_config()
                if evicting:
                    config = msgspec.structs.replace(config, max_entries=6)
                async with self.open_store_under_test(config, self.make_embedder()) as store:
                    for seed in range(evicting, self.namespace_rounds, 2):
                        rng = random.Random(seed)
                        await store.clear()
                        await check_namespace_walk(
                            store, rng, steps=rng.randint(1, 25), evicting=evicting
                        )

    # --- validation ----------------------------------------------------------------------

    async def test_turns_with_their_own_index_texts(self) -> None:
        """``store_turns(texts=...)`` indexes and embeds the given text; the message is
        kept as it was; a bad ``texts`` is refused and changes nothing."""
        turns = [UnifiedMessage.user("Yes, last Saturday!"), UnifiedMessage.assistant("Nice.")]
        texts = ["Yes, last Saturday! Before: did you run the charity race", "Nice."]
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                for bad, error in [
                    (texts[:1], ConfigError),
                    ([texts[0], 7], ConfigError),
                    ("one string", ConfigError),
                    ([texts[0], "x" * self.max_entry_bytes], EntryTooLarge),
                ]:
                    with pytest.raises(error):
                        await call_unchecked(store.store_turns, turns, texts=bad)
                    assert store.is_empty()
                stored = await store.store_turns(turns, texts=texts)
                report = await store.retrieve_in(DEFAULT_NAMESPACE, "charity race", 2)
                assert [t.id for t in report.turns] == stored.ids
                assert report.turns[0].message == turns[0]
                assert math.isclose(
                    report.turns[0].score,
                    self.cosine("charity race", texts[0]),
                    abs_tol=self.score_tolerance,
                )
                hits = await self.search(
                    store,
                    query="charity",
                    kind="hybrid",
                    k=2,
                    vector=[0.0] * self.dimensions,
                    weights={"dense": 0.0},
                )
                assert [h.document.id for h in hits if "bm25" in h.ranks] == stored.ids[:1]
                assert hits[0].document.text == texts[0]

    async def test_entry_points_validate(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                with pytest.raises(ConfigError):
                    await store.get_by_ids("abc")
                with pytest.raises(ConfigError):
                    await store.delete("abc")
                with pytest.raises(ConfigError):
                    await store.delete([""])
                with pytest.raises(ConfigError):
                    await call_unchecked(store.add_documents, ["just a string"])
                with pytest.raises(ConfigError):
                    await call_unchecked(store.add_documents, Document(text="not in a list"))
                with pytest.raises(ConfigError):
                    await call_unchecked(store.search, {"query": "not a request"})
                with pytest.raises(ConfigError):
                    await store.get_by_ids(["x"], namespace="")
                # turn-<number> is how the store names turns stored without ids.
                with pytest.raises(ConfigError, match="turn-<number>"):
                    await store.add_documents([Document(text="x", id="turn-3")])
                with pytest.raises(ConfigError, match="turn-<number>"):
                    await store.store_turns([UnifiedMessage.user("x")], ids=["turn-0"])
                # msgspec does not type-check fields at construction; a bad one is the
                # caller's error, not a crash (the store stays usable).
                odd = UnifiedMessage(role="user", content=[Text(text=123)])  # type: ignore[arg-type]
                with pytest.raises(ConfigError, match="wrong type"):
                    await store.store_turns([odd])
                assert store.is_empty()
