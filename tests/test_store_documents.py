"""The store's documents API and search kinds (design §9), on the in-memory store."""

from __future__ import annotations

import math

import numpy as np
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from actors import HashingEmbedder, open_store
from actors._bm25 import tokenize
from actors.testing import inject_crash
from protocol import (
    ConfigError,
    Document,
    EmbedderError,
    EntryTooLarge,
    Poisoned,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    document_id,
)

DIM = 64
TIMEOUT = 10


def cfg(max_entries: int = 32) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=max_entries, dimensions=DIM, max_entry_bytes=512)


def docs(*texts: str, **metadata: object) -> list[Document]:
    return [Document(text=t, metadata=dict(metadata)) for t in texts]


async def test_add_generates_deterministic_ids_and_is_idempotent() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            first = await store.add_documents(docs("alpha", "beta"))
            assert first == [document_id("alpha", {}), document_id("beta", {})]
            again = await store.add_documents(docs("alpha", "beta"))
            assert again == first
            assert len(store) == 2


async def test_upsert_replaces_vector_text_and_metadata() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.upsert([Document(id="d1", text="apples and pears", metadata={"v": 1})])
            await store.upsert([Document(id="d2", text="unrelated words")])
            await store.upsert([Document(id="d1", text="bicycles", metadata={"v": 2})])
            assert len(store) == 2
            (got,) = await store.get_by_ids(["d1"])
            assert (got.text, got.metadata) == ("bicycles", {"v": 2})
            hits = await store.search(SearchRequest(query="bicycles", k=1))
            assert hits[0].document.id == "d1" and hits[0].score == pytest.approx(1.0)
            hybrid = await store.search(SearchRequest(query="apples", k=2, kind="hybrid"))
            assert all("apples" not in h.document.text for h in hybrid)


async def test_delete_reports_missing_and_reuses_the_slot() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            ids = await store.add_documents(docs("a", "b", "c"))
            result = await store.delete([ids[1], "nope", ids[1]])
            assert (result.deleted, result.missing) == ([ids[1]], ["nope"])
            high = store._actor.arena.high
            await store.add_documents(docs("d"))
            assert store._actor.arena.high == high  # the freed slot was reused
            assert store.usage().evicted_entries == 0
            assert sorted(d.text for d in await store.get_by_ids([*ids, "zzz"])) == ["a", "c"]


async def test_turns_are_documents_in_one_id_space() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns([UnifiedMessage.user("remember the milk")])
            (doc,) = await store.get_by_ids(stored.ids)
            assert (doc.id, doc.text) == (stored.ids[0], "remember the milk")
            assert (await store.delete(stored.ids)).deleted == stored.ids
            assert store.is_empty()


async def test_explicit_turn_ids_replace() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([UnifiedMessage.user("v1")], source="explicit", ids=["m1"])
            await store.store_turns([UnifiedMessage.user("v2")], source="explicit", ids=["m1"])
            (doc,) = await store.get_by_ids(["m1"])
            assert doc.text == "v2" and len(store) == 1
            with pytest.raises(ConfigError, match="2 ids for 1 turns"):
                await store.store_turns([UnifiedMessage.user("x")], ids=["a", "b"])


async def test_bad_documents_change_nothing() -> None:
    class Broken:
        def embed(self, text: str) -> list[float]:
            raise RuntimeError("provider down")

    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.add_documents(docs("keep"))
            with pytest.raises(EntryTooLarge) as info:
                await store.add_documents(docs("ok", "x" * 600))
            assert info.value.index == 1 and info.value.bytes > 512
            with pytest.raises(ConfigError, match="appears twice in the batch"):
                await store.upsert([Document(id="same", text="a"), Document(id="same", text="b")])
            with pytest.raises(ConfigError, match="document 0 of the batch is a str"):
                await store.upsert(["text"])  # type: ignore[list-item]
            assert [d.text for d in await store.get_by_ids([document_id("keep", {})])] == ["keep"]
            assert len(store) == 1
        async with open_store(cfg(), Broken()) as store:
            with pytest.raises(EmbedderError):
                await store.add_documents(docs("a"))
            assert store.is_empty()


async def test_same_content_in_two_namespaces_is_two_entries() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            (a,) = await store.add_documents(docs("shared text"), namespace="a")
            (b,) = await store.add_documents(docs("shared text"), namespace="b")
            assert a == b and len(store) == 2
            assert (await store.delete([a], namespace="a")).deleted == [a]
            assert [d.text for d in await store.get_by_ids([b], namespace="b")] == ["shared text"]
            assert await store.get_by_ids([a], namespace="a") == []


async def test_similarity_scores_and_threshold() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.add_documents(docs("red apple", "green apple", "blue car"))
            hits = await store.search(SearchRequest(query="red apple", k=3))
            assert [h.document.text for h in hits][:1] == ["red apple"]
            assert [h.ranks["dense"] for h in hits] == [1, 2, 3]
            assert all(-1.0 <= h.score <= 1.0 for h in hits)
            cut = await store.search(SearchRequest(query="red apple", k=3, score_threshold=0.4))
            assert cut and all(h.score >= 0.4 for h in cut)
            assert len(cut) < len(hits)
            by_vector = await store.search(
                SearchRequest(vector=HashingEmbedder(DIM).embed("blue car").tolist(), k=1)
            )
            assert by_vector[0].document.text == "blue car"


async def test_filter_applies_before_top_k() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            # The best matches for the query are all "public"; only two are "private".
            await store.add_documents(
                [
                    Document(text=f"report {i} quarterly report", metadata={"tag": "public"})
                    for i in range(10)
                ]
            )
            await store.add_documents(
                [Document(text=f"misc {i}", metadata={"tag": "private", "n": i}) for i in range(2)]
            )
            request = SearchRequest(query="quarterly report", k=2, filter={"tag": "private"})
            hits = await store.search(request)
            assert sorted(h.document.metadata["n"] for h in hits) == [0, 1]
            ranged = await store.search(
                SearchRequest(query="misc", k=5, filter={"n": {"$gte": 1}})
            )
            assert [h.document.metadata["n"] for h in ranged] == [1]


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n else v


async def test_mmr_matches_a_brute_force_reference() -> None:
    rng = np.random.default_rng(5)
    texts = [
        " ".join(rng.choice(["cat", "dog", "fish", "bird", "tree", "rock"], 4)) + f" {i}"
        for i in range(20)
    ]
    embed = HashingEmbedder(DIM)
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), embed) as store:
            await store.add_documents(docs(*texts))
            q = "cat dog"
            hits = await store.search(
                SearchRequest(query=q, k=4, kind="mmr", fetch_k=10, lambda_mult=0.5)
            )
    vectors = {t: _unit(embed.embed(t).astype(np.float64)) for t in texts}
    qv = _unit(embed.embed(q).astype(np.float64))
    order = sorted(range(len(texts)), key=lambda i: (-float(vectors[texts[i]] @ qv), -i))[:10]
    chosen: list[int] = []
    while len(chosen) < 4:

        def value(i: int) -> float:
            redundancy = max(
                (float(vectors[texts[i]] @ vectors[texts[j]]) for j in chosen), default=0.0
            )
            return 0.5 * float(vectors[texts[i]] @ qv) - 0.5 * redundancy

        best = max(
            (i for i in order if i not in chosen), key=lambda i: (value(i), -order.index(i))
        )
        chosen.append(best)
    assert [h.document.text for h in hits] == [texts[i] for i in chosen]


async def test_hybrid_fuses_dense_and_bm25_with_ranks() -> None:
    texts = ["the zebra grazes", "zebra zebra stripes", "a quiet river", "stripes on a shirt"]
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.add_documents(docs(*texts))
            hits = await store.search(
                SearchRequest(query="zebra stripes", k=3, kind="hybrid", fetch_k=4)
            )
            dense = await store.search(SearchRequest(query="zebra stripes", k=4))
    dense_rank = {h.document.text: h.ranks["dense"] for h in dense}
    for h in hits:
        assert h.ranks["dense"] == dense_rank[h.document.text]
        expected = sum(1.0 / (60 + r) for r in h.ranks.values())
        assert h.score == pytest.approx(expected)
    # BM25 ranks: only documents holding a query term appear in that list.
    for h in hits:
        has_term = set(tokenize("zebra stripes")) & set(tokenize(h.document.text))
        assert ("bm25" in h.ranks) == bool(has_term)
    assert hits[0].document.text == "zebra zebra stripes"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_bm25_follows_deletes_and_evictions() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=3), HashingEmbedder(DIM)) as store:
            ids = await store.add_documents(docs("walrus one", "walrus two", "walrus three"))
            await store.delete([ids[0]])
            await store.add_documents(docs("penguin", "seal"))  # evicts "walrus two"
            hits = await store.search(SearchRequest(query="walrus", k=3, kind="hybrid"))
            bm25 = [h.document.text for h in hits if "bm25" in h.ranks]
            assert bm25 == ["walrus three"]


async def test_search_after_a_crash_is_poisoned() -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(Poisoned):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            inject_crash(store)
            with pytest.raises(Poisoned):
                await store.add_documents(docs("x"))
            for request in (SearchRequest(query="x"), SearchRequest(query="x", kind="hybrid")):
                with pytest.raises(Poisoned):
                    await store.search(request)
            with pytest.raises(Poisoned):
                await store.get_by_ids(["x"])


_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "delete", "clear", "upsert"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=25,
)


@given(ops=_ops, query=st.sampled_from(["apple", "secret", "doc 3", "zzz"]))
async def test_no_sequence_of_operations_leaks_across_namespaces(
    ops: list[tuple[str, str, int]], query: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=6), HashingEmbedder(DIM)) as store:
            for op, space, i in ops:
                # Both namespaces use the same ids and texts: only the namespace differs.
                doc = Document(
                    id=f"doc-{i}", text=f"doc {i} apple secret", metadata={"owner": space}
                )
                if op in ("add", "upsert"):
                    await store.upsert([doc], namespace=space)
                elif op == "delete":
                    await store.delete([f"doc-{i}"], namespace=space)
                else:
                    await store.clear(space)
            for space in ("a", "b"):
                seen = [
                    d.metadata["owner"]
                    for d in await store.get_by_ids(
                        [f"doc-{i}" for i in range(6)], namespace=space
                    )
                ]
                for kind in ("similarity", "mmr", "hybrid"):
                    hits = await store.search(
                        SearchRequest(query=query, k=6, kind=kind, fetch_k=6, namespace=space)
                    )
                    seen += [h.document.metadata["owner"] for h in hits]
                report = await store.retrieve_in(space, query, 6)
                seen += [t.metadata["owner"] for t in report.turns]
                assert set(seen) <= {space}


def test_score_threshold_meaning_is_cosine() -> None:
    with pytest.raises(ConfigError, match=r"expected a cosine similarity in \[-1, 1\]"):
        SearchRequest(query="x", score_threshold=1.5)
    assert math.isclose(SearchRequest(query="x", score_threshold=-1).score_threshold or 0, -1.0)
