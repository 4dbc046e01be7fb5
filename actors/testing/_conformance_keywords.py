"""The keyword, hybrid and write-extras tests of :class:`~actors.testing.StoreConformance`
(design §9): hybrid fusion, keyword-only (BM25) search, precomputed embeddings and
``add_texts``."""

from __future__ import annotations

import math

import pytest
import trio

from protocol import (
    ConfigError,
    Document,
    EmbeddingError,
    document_id,
)

from ._conformance_base import ConformanceBase, _ids

__all__ = ["KeywordSearchTests"]


class KeywordSearchTests(ConformanceBase):
    """Hybrid and keyword-only search, and the newer write forms; part of StoreConformance."""

    # --- hybrid ------------------------------------------------------------------------

    async def test_hybrid_fuses_dense_and_bm25(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="the quick brown fox", id="fox"),
                        Document(text="a lazy brown dog", id="dog"),
                        Document(text="quantum chromodynamics lecture", id="physics"),
                        Document(text="brown bread recipe", id="bread"),
                    ]
                )
                hits = await self.search(
                    store, query="quantum chromodynamics", kind="hybrid", k=4, fetch_k=4
                )
                assert hits[0].document.id == "physics"
                assert hits[0].ranks == {"dense": 1, "bm25": 1}
                for h in hits:
                    assert set(h.ranks) <= {"dense", "bm25"}
                    assert h.ranks
                    expected = sum(1.0 / (60 + r) for r in h.ranks.values())
                    assert math.isclose(h.score, expected, rel_tol=1e-9, abs_tol=1e-12)
                scores = [h.score for h in hits]
                assert scores == sorted(scores, reverse=True)
                # Only the documents holding a query word are in the BM25 list.
                for h in hits:
                    if "bm25" in h.ranks:
                        assert h.document.id == "physics"

    async def test_hybrid_ranks_are_the_dense_and_bm25_ranks(self) -> None:
        texts = ["the zebra grazes", "zebra zebra stripes", "a quiet river", "stripes on a shirt"]
        query = "zebra stripes"
        holding_a_query_term = {"the zebra grazes", "zebra zebra stripes", "stripes on a shirt"}
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents([Document(text=t) for t in texts])
                hits = await self.search(store, query=query, k=3, kind="hybrid", fetch_k=4)
                dense = await self.search(store, query=query, k=4)
        dense_rank = {h.document.text: h.ranks["dense"] for h in dense}
        for h in hits:
            assert h.ranks["dense"] == dense_rank[h.document.text]
            expected = sum(1.0 / (60 + r) for r in h.ranks.values())
            assert h.score == pytest.approx(expected)
            # Only the documents holding a query term are in the BM25 list.
            assert ("bm25" in h.ranks) == (h.document.text in holding_a_query_term)
        assert hits[0].document.text == "zebra zebra stripes"
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    async def test_hybrid_weights_and_rrf_k(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="river bank loan", id="a"),
                        Document(text="river stream water", id="b"),
                        Document(text="bank account money", id="c"),
                    ]
                )
                hits = await self.search(
                    store,
                    query="river bank",
                    kind="hybrid",
                    k=3,
                    fetch_k=3,
                    rrf_k=10,
                    weights={"dense": 0.0, "bm25": 2.0},
                )
                for h in hits:
                    expected = 2.0 / (10 + h.ranks["bm25"]) if "bm25" in h.ranks else 0.0
                    assert math.isclose(h.score, expected, rel_tol=1e-9, abs_tol=1e-12)
                bm25_order = sorted(
                    (h for h in hits if "bm25" in h.ranks), key=lambda h: h.ranks["bm25"]
                )
                assert _ids(hits)[: len(bm25_order)] == _ids(bm25_order)
                assert hits[0].document.id == "a"  # holds both query words

    async def test_hybrid_respects_filters_and_namespaces(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="solar panel", id="p1", metadata={"ok": True}),
                        Document(text="solar flare", id="p2", metadata={"ok": False}),
                    ]
                )
                await store.add_documents(
                    [Document(text="solar wind", id="p3", metadata={"ok": True})],
                    namespace="other",
                )
                hits = await self.search(
                    store, query="solar", kind="hybrid", k=5, fetch_k=5, filter={"ok": True}
                )
                assert _ids(hits) == ["p1"]
                hits = await self.search(
                    store, query="solar", kind="hybrid", k=5, fetch_k=5, namespace="other"
                )
                assert _ids(hits) == ["p3"]

    # --- bm25 (keyword-only) ------------------------------------------------------------

    async def test_bm25_ranks_by_keywords_alone(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [
                        Document(text="river bank loan", id="a", metadata={"ok": True}),
                        Document(text="river stream water", id="b", metadata={"ok": True}),
                        Document(text="bank account money", id="c", metadata={"ok": False}),
                        Document(text="mountain air", id="d", metadata={"ok": True}),
                    ]
                )
                hits = await self.search(store, query="river bank", kind="bm25", k=4)
                # Only the documents holding a query word, the one holding both first.
                assert set(_ids(hits)) == {"a", "b", "c"}
                assert hits[0].document.id == "a"
                assert [h.ranks for h in hits] == [{"bm25": r} for r in range(1, 4)]
                # score: the BM25 score over the best hit's; raw_score: the BM25 score.
                assert hits[0].score == 1.0
                best = hits[0].raw_score
                assert best is not None
                for h in hits:
                    assert h.raw_score is not None
                    assert h.raw_score > 0
                    assert math.isclose(h.score, h.raw_score / best, rel_tol=1e-9)
                scores = [h.score for h in hits]
                assert scores == sorted(scores, reverse=True)
                # The same list hybrid search fuses as its BM25 side.
                fused = await self.search(store, query="river bank", kind="hybrid", k=4, fetch_k=4)
                by_rank = sorted(
                    (h for h in fused if "bm25" in h.ranks), key=lambda h: h.ranks["bm25"]
                )
                assert _ids(by_rank) == _ids(hits)
                assert _ids(await self.search(store, query="river", kind="bm25", k=1)) == ["b"]
                filtered = await self.search(
                    store, query="river bank", kind="bm25", k=4, filter={"ok": True}
                )
                assert set(_ids(filtered)) == {"a", "b"}
                assert await self.search(store, query="unrelated words", kind="bm25") == []
                assert await self.search(store, query="river", kind="bm25", namespace="x") == []

    # --- precomputed embeddings and add_texts (design §9) -----------------------------------

    async def test_precomputed_embedding(self) -> None:
        # "alpha" is stored with the vector of "omega words": a query for "omega words"
        # finds it with cosine 1.0, which it could not if the store had embedded its text.
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                given = Document(text="alpha", id="given", embedding=self.embed("omega words"))
                plain = Document(text="omega words beta", id="plain")
                assert await store.add_documents([given, plain]) == ["given", "plain"]
                hits = await self.search(store, query="omega words", k=2)
                assert [h.document.id for h in hits] == ["given", "plain"]
                assert math.isclose(hits[0].score, 1.0, abs_tol=self.score_tolerance)
                self.assert_scores_are_cosine("omega words", hits[1:])
                [back] = await store.get_by_ids(["given"])
                assert back.text == "alpha"
                assert back.embedding is None
                wide = Document(text="x", embedding=[1.0] * (self.dimensions + 1))
                with pytest.raises(EmbeddingError, match=str(self.dimensions)):
                    await store.add_documents([Document(text="y"), wide])
                assert len(store) == 2

    async def test_add_texts(self) -> None:
        with trio.fail_after(self.timeout):
            async with self.fresh_store() as store:
                ids = await store.add_texts(
                    ["red apple", "green pear"], metadatas=[{"n": 1}, {"n": 2}], ids=["a", "p"]
                )
                assert ids == ["a", "p"]
                docs = {d.id: d for d in await store.get_by_ids(ids)}
                assert (docs["a"].text, docs["a"].metadata) == ("red apple", {"n": 1})
                assert (docs["p"].text, docs["p"].metadata) == ("green pear", {"n": 2})
                [derived] = await store.add_texts(["plain text"])
                assert derived == document_id("plain text")
                with pytest.raises(ConfigError, match="metadatas has 1 items"):
                    await store.add_texts(["one", "two"], metadatas=[{}])
                with pytest.raises(ConfigError, match="expected a list"):
                    await store.add_texts("not a list")
                assert len(store) == 3
