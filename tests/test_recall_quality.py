"""Hybrid recall (``RecallSettings``), context-enriched entries, and the recall-quality
bench's measure on a tiny synthetic conversation (no model, no LoCoMo data)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import pytest
import trio

from actors import HashingEmbedder, open_memory, open_store
from actors._bm25 import Bm25Index
from actors._events import EventHub
from actors._fusion import FusedHit, neighbor_boost, rrf
from actors._recall import RecallActor
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    RecallSettings,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    contextual_entry,
    projection,
)
from protocol.messages import Recall

DIM = 64
STORE = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)
BENCH = Path(__file__).resolve().parent.parent / "benches" / "recall_quality.py"

TEXTS = [
    "Caroline: I went to the LGBTQ support group yesterday",
    "Melanie: I painted a sunrise over the lake last year",
    "Caroline: my dog Oscar loves the beach",
    "Melanie: we ran a charity race for mental health",
    "Caroline: the support group was inspiring, everyone was kind",
    "Melanie: my kids love pottery class on weekends",
    "Caroline: Oscar chewed my running shoes again",
    "Melanie: the lake was calm and the sunrise was orange",
]


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recall_quality", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recall_quality"] = module
    spec.loader.exec_module(module)
    return module


async def recall_with(store: Any, request: Recall) -> Any:
    return await RecallActor(store, EventHub(), 4).recall(request)


# --- settings and messages ----------------------------------------------------------------


def test_default_memory_config_recalls_hybrid() -> None:
    config = MemoryConfig()
    assert config.recall == RecallSettings()
    assert config.recall.search == "hybrid"
    # Memory.retrieve sends a Recall without settings: it gets the same defaults.
    assert Recall(query="q", k=1, namespace="n").settings == config.recall


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("search", "sparse"),
        ("fetch_k", 0),
        ("fetch_k", True),
        ("rrf_k", 0),
        ("rrf_k", float("inf")),
        ("dense_weight", -1.0),
        ("bm25_weight", "1"),
    ],
)
def test_recall_settings_refuse_bad_values(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"RecallSettings.{field}"):
        kwargs: dict[str, Any] = {field: value}
        RecallSettings(**kwargs)


def test_recall_settings_need_one_list() -> None:
    with pytest.raises(ConfigError, match="both 0"):
        RecallSettings(dense_weight=0, bm25_weight=0)


def test_memory_config_refuses_bad_recall() -> None:
    with pytest.raises(ConfigError, match=r"MemoryConfig\.recall"):
        MemoryConfig(recall={"search": "dense"})  # type: ignore[arg-type]


def test_settings_round_trip() -> None:
    settings = RecallSettings(search="dense", fetch_k=7, rrf_k=10.0, bm25_weight=2.0)
    config = MemoryConfig(recall=settings)
    assert msgspec.json.decode(msgspec.json.encode(config), type=MemoryConfig) == config
    recall = Recall(query="q", k=3, namespace="n", settings=settings)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(recall), type=Recall) == recall


def test_contextual_entry_puts_the_turn_first() -> None:
    entry = contextual_entry("B: yes, last Saturday!", context=["A: did you run?"], date="May 8")
    assert entry == "B: yes, last Saturday!\nDate: May 8\nBefore: A: did you run?"
    assert contextual_entry("B: hi") == "B: hi"


# --- hybrid recall ----------------------------------------------------------------------


def test_neighbor_boost_lends_the_better_neighbours_score() -> None:
    hits = [
        FusedHit(key="a", score=0.5, ranks={}),
        FusedHit(key="b", score=0.4, ranks={}),
        FusedHit(key="e", score=0.3, ranks={}),
        FusedHit(key="c", score=0.1, ranks={}),
        FusedHit(key="d", score=0.1, ranks={}),
    ]
    # Written in the order c a b ... d, e has no sequence: c and b sit beside a.
    sequences = {"c": 1, "a": 2, "b": 3, "d": 9}
    boosted = neighbor_boost(hits, sequences, 0.5)
    scores = {h.key: h.score for h in boosted}
    assert scores == pytest.approx({"a": 0.7, "b": 0.65, "c": 0.35, "d": 0.1, "e": 0.3})
    assert [h.key for h in boosted] == ["a", "b", "c", "e", "d"]
    # Weight 0 changes no score and keeps the order (ties keep their input order).
    assert neighbor_boost(hits, sequences, 0.0) == hits


def bm25_order(texts: list[str], ids: list[str], query: str) -> list[str]:
    index = Bm25Index(len(texts))
    for slot, text in enumerate(texts):
        index.add(slot, text)
    # Stored in order, so sequence order is slot order (BM25 ties go newest first).
    slots, _ = index.top(query, len(texts), seqs=np.arange(len(texts), dtype=np.int64))
    return [ids[s] for s in slots.tolist()]


@pytest.mark.parametrize("query", ["support group", "Oscar shoes", "sunrise lake", "zebra"])
@pytest.mark.parametrize("fetch_k", [2, 50])
@pytest.mark.parametrize("neighbor_weight", [0.0, 0.5])
async def test_hybrid_recall_is_rrf_of_dense_and_bm25(
    query: str, fetch_k: int, neighbor_weight: float
) -> None:
    settings = RecallSettings(
        fetch_k=fetch_k, rrf_k=5.0, dense_weight=0.5, neighbor_weight=neighbor_weight
    )
    with trio.fail_after(10):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            stored = await store.store_turns([UnifiedMessage.user(t) for t in TEXTS], "ns")
            request = Recall(query=query, k=4, namespace="ns", settings=settings)
            report = await recall_with(store, request)
            everything = await store.retrieve_in("ns", query, len(TEXTS))
    cosine = {t.id: t.score for t in everything.turns}
    depth = max(4, fetch_k)
    dense = [t.id for t in everything.turns][:depth]
    sparse = bm25_order(TEXTS, stored.ids, query)[:depth]
    expected = rrf({"dense": dense, "bm25": sparse}, k=5.0, weights={"dense": 0.5, "bm25": 1.0})
    if neighbor_weight:
        sequences = {t.id: t.sequence for t in everything.turns}
        expected = neighbor_boost(expected, sequences, neighbor_weight)
    assert [t.id for t in report.turns] == [h.key for h in expected[:4]]
    # Every hit keeps its true cosine, BM25-only hits beyond the dense list included.
    assert all(t.score == cosine[t.id] for t in report.turns)
    assert report.scanned == len(TEXTS)


class Flat:
    """An embedder that sees nothing: every text is the same vector."""

    dimensions = 4

    def embed(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


async def test_hybrid_recall_finds_a_keyword_the_embedding_misses() -> None:
    # Dense ties go newest first, so the oldest entry is dense's last; BM25 sees the
    # one rare word, and the fused list puts it first.
    texts = ["the password is xylophone"]
    texts += [f"filler text number {i} about nothing much" for i in range(20)]
    dense_only = RecallSettings(search="dense")
    with trio.fail_after(10):
        async with open_store(
            VectorStoreConfig(max_entries=32, dimensions=4, max_entry_bytes=512), Flat()
        ) as store:
            await store.store_turns([UnifiedMessage.user(t) for t in texts], "ns")
            hybrid = await recall_with(store, Recall(query="xylophone", k=1, namespace="ns"))
            dense = await recall_with(
                store, Recall(query="xylophone", k=1, namespace="ns", settings=dense_only)
            )
    assert projection(hybrid.turns[0].message) == texts[0]
    assert hybrid.turns[0].score == pytest.approx(1.0)  # its cosine, found by deepening
    assert projection(dense.turns[0].message) == texts[-1]


async def test_dense_setting_is_plain_retrieve_in() -> None:
    with trio.fail_after(10):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            await store.store_turns([UnifiedMessage.user(t) for t in TEXTS], "ns")
            settings = RecallSettings(search="dense")
            report = await recall_with(
                store, Recall(query="Oscar", k=3, namespace="ns", settings=settings)
            )
            plain = await store.retrieve_in("ns", "Oscar", 3)
    assert report == plain


async def test_hybrid_recall_keeps_namespaces_apart_and_filters_by_cosine() -> None:
    with trio.fail_after(10):
        async with open_memory(
            store=STORE, memory=MemoryConfig(min_similarity=0.2), embedder=HashingEmbedder(DIM)
        ) as memory:
            await memory.store.store_turns(
                [UnifiedMessage.user(t) for t in TEXTS], memory.config.namespace
            )
            await memory.store.store_turns(
                [UnifiedMessage.user("Oscar secret in another namespace")], "other"
            )
            report = await memory.retrieve("Oscar")
            unfiltered = await memory.retrieve("Oscar", min_similarity=-1.0)
    assert report.turns
    assert all(t.namespace == memory.config.namespace for t in unfiltered.turns)
    assert all(t.score >= 0.2 for t in report.turns)
    assert [t.id for t in report.turns] == [t.id for t in unfiltered.turns if t.score >= 0.2]


async def test_hybrid_recall_over_documents_and_an_empty_namespace() -> None:
    with trio.fail_after(10):
        # No floor: this compares recall's order with the store's own hybrid search.
        async with open_memory(
            store=STORE, memory=MemoryConfig(min_similarity=None), embedder=HashingEmbedder(DIM)
        ) as memory:
            assert (await memory.retrieve("anything")).turns == []
            docs = [
                Document(text=contextual_entry(t, date="May 2023"), id=f"d{i}")
                for i, t in enumerate(TEXTS)
            ]
            await memory.store.add_documents(docs, namespace=memory.config.namespace)
            report = await memory.retrieve("charity race", k=2)
            hits = await memory.store.search(
                SearchRequest(
                    query="charity race",
                    k=2,
                    kind="hybrid",
                    fetch_k=50,
                    namespace=memory.config.namespace,
                )
            )
    assert report.turns[0].id == "d3"
    assert [t.id for t in report.turns] == [h.document.id for h in hits]


# --- the bench's measure ----------------------------------------------------------------


def synthetic_conversation(tmp_path: Path) -> Path:
    turn = {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog called Biscuit"}
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:00 pm on 1 May, 2023",
        "session_1": [
            turn,
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! What breed is it?"},
            {
                "speaker": "Ann",
                "dia_id": "D1:3",
                "text": "A beagle",
                "blip_caption": "a photo of a beagle puppy",
            },
        ],
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "I started learning the violin"},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Play me something sometime"},
        ],
    }
    qa = [
        {"question": "Biscuit, who?", "evidence": ["D1:1"], "category": 4},
        {"question": "Which breed and name?", "evidence": ["D1:1; D1:3"], "category": 1},
        {"question": "What does Bob play, violin?", "evidence": ["D2:1", "D9:9"], "category": 2},
        {"question": "Unanswerable", "evidence": ["D1:2"], "category": 5},
        {"question": "No evidence", "evidence": [], "category": 4},
    ]
    path = tmp_path / "c1.json"
    path.write_text(json.dumps({"conversation": conv, "qa": qa}))
    return path


def test_bench_loads_and_cleans_evidence(tmp_path: Path) -> None:
    rq = bench()
    (conv,) = rq.load(synthetic_conversation(tmp_path).parent)
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [sorted(q.evidence) for q in conv.questions] == [
        ["D1:1"],
        ["D1:1", "D1:3"],  # "D1:1; D1:3" is split
        ["D2:1"],  # D9:9 names no turn
    ]  # category 5 and the question with no evidence are left out
    assert rq.plain_text(conv.turns[2]) == "Ann: A beagle a photo of a beagle puppy"
    ctx = rq.EntryStyle("c", date=True, previous=1)
    assert (
        ctx.texts(conv)[3][1] == "Bob: I started learning the violin\nDate: 2:00 pm on 9 May, 2023"
    )


def test_tally_is_evidence_recall_at_k() -> None:
    rq = bench()
    tally = rq.Tally()
    ranked = ["x1", "e1", *[f"x{i}" for i in range(2, 9)], "e2"]  # e2 at rank 10
    tally.add(ranked, frozenset({"e1", "e2"}))
    tally.add(["e3"], frozenset({"e3"}))
    assert tally.row() == {"R@1": 0.5, "R@5": 0.75, "R@10": 1.0, "R@25": 1.0, "questions": 2}


async def test_bench_measures_a_tiny_conversation(tmp_path: Path) -> None:
    rq = bench()
    convs = rq.load(synthetic_conversation(tmp_path))
    configs = [
        rq.Config("hashing", "", embedder="hashing", kind="dense"),
        rq.Config("bm25", "", embedder="hashing", kind="bm25"),
        rq.Config(
            "ctx-bm25", "", style=rq.EntryStyle("c", previous=1), embedder="hashing", kind="bm25"
        ),
        rq.Config("default-hashing", "", embedder="hashing", kind="default"),
    ]
    tallies: dict[str, Any] = {c.name: {} for c in configs}
    floors: dict[str, Any] = {}
    with trio.fail_after(20):
        await rq.run_conversation(convs[0], configs, rq.CachedEmbedder(None, 1), tallies, floors)
    # The floors are measured on the default configuration's one ranking: no floor is
    # R@k itself, and a higher floor never keeps more nor injects more.
    rows = floors["default-hashing"].rows()
    assert rows["none"]["R@25"] == tallies["default-hashing"][0].row()["R@25"]
    assert rows["none"]["injected"] == 5  # 5 turns, and a turn injects top_k = 5
    kept = [rows[key]["injected"] for key in ("none", "0.0", "0.1", "0.2", "0.3", "0.4")]
    assert kept == sorted(kept, reverse=True)
    assert all(r["noise"] <= r["injected"] for r in rows.values())
    for c in configs:
        row = tallies[c.name][0].row()
        assert row["questions"] == 3
        assert row["R@25"] == 1.0  # 5 turns: every evidence turn is in the top 25
    assert tallies["ctx-bm25"][0].row()["questions"] == 3
    bm25 = tallies["bm25"]
    assert bm25[4].row()["R@1"] == 1.0  # only D1:1 says "Biscuit"
    assert set(bm25) == {0, 1, 2, 4}
