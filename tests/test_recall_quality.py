"""Hybrid recall (``RecallSettings``), context-enriched entries, and the recall-quality
bench's measure on a tiny synthetic conversation (no model, no LoCoMo data)."""

from __future__ import annotations

import datetime as dt
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
from hypothesis import given
from hypothesis import strategies as st
from pg_support import pg_store_opener

from actors import HashingEmbedder, open_memory, open_store
from actors._agent.recall_actor import RecallActor
from actors._retrieval.bm25 import Bm25Index
from actors._retrieval.focus import (
    _SPEAKER,
    DateMention,
    entry_date,
    named_speakers,
    near,
    query_dates,
    speaker_of,
    without_names,
)
from actors._retrieval.fusion import FusedHit, neighbor_boost, rrf
from actors._store.events import EventHub
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    RecallSettings,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    projection,
)
from protocol.compaction import (
    Offload,
    Offloaded,
    contextual_entry,
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
        ("speaker_weight", -0.5),
        ("speaker_weight", float("nan")),
        ("date_weight", True),
        ("date_weight", float("inf")),
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
    # The fusion stage as the hand-tuned ranking leaves it (the learned ranker, which
    # reorders its top hits, is tests/test_ranker.py's).
    settings = RecallSettings(
        fetch_k=fetch_k,
        rrf_k=5.0,
        dense_weight=0.5,
        neighbor_weight=neighbor_weight,
        ranker="none",
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
    assert [(t.id, t.score) for t in report.turns] == [(t.id, t.score) for t in plain.turns]
    assert (report.scanned, report.exact) == (plain.scanned, plain.exact)
    # Recall's own fields say it ranked them, by the dense list alone.
    assert [(t.rank, t.channels) for t in report.turns] == [
        (place, ["dense"]) for place in range(1, len(report.turns) + 1)
    ]


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


# --- speaker focus and the time channel --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "speaker"),
    [
        ("Melanie: hi", "Melanie"),
        ("John Smith: hi\nDate: 8 May, 2023", "John Smith"),
        ("Anne-Marie O'Neil: hi", "Anne-Marie O'Neil"),
        ("Émile: salut", "Émile"),
        ("hello: there", None),  # not capitalized
        ("Note to self: buy milk", None),  # "to" is not a name's word
        ("A B C D: four words", None),
        ("Melanie said: hi", None),
        ("Melanie:hi", None),
        ("", None),
        ("A" + "b" * 39 + ": forty characters", "A" + "b" * 39),
        ("A" + "b" * 40 + ": forty-one characters", None),
        ("Ann Bo Cy: at 9:30", "Ann Bo Cy"),
    ],
)
def test_speaker_of_reads_a_leading_name(text: str, speaker: str | None) -> None:
    assert speaker_of(text) == speaker


def reference_speaker_of(text: str) -> str | None:
    """``speaker_of`` as the regex over the whole text says it."""
    match = _SPEAKER.match(text)
    if match is None or len(match.group(1)) > 40:
        return None
    name = match.group(1)
    return name if all(word[0].isupper() for word in name.split(" ")) else None


@given(
    st.lists(
        st.sampled_from(["Ann", "bob", "Émile", "O'Neil", "A-b", "X1", "Z", "The", " ", ":"])
        | st.text(alphabet="Ab9 :.'-_\n", max_size=6),
        max_size=12,
    ).map("".join)
    | st.text(max_size=60)
)
def test_speaker_of_reads_the_head_as_the_regex_reads_the_text(text: str) -> None:
    """The head-only, cached ``speaker_of`` answers as the regex over the whole text,
    long and colon-less texts included."""
    assert speaker_of(text) == reference_speaker_of(text)
    assert speaker_of(text + ": more") == reference_speaker_of(text + ": more")


def test_named_speakers_need_someone_else() -> None:
    speakers = ["Melanie", "Caroline", None, "Melanie"]
    assert named_speakers("What does Melanie do to destress?", speakers) == {"Melanie"}
    assert named_speakers("What is Melanie's job?", speakers) == {"Melanie"}
    # Naming every speaker, nobody, or a lowercase word focuses on no one.
    assert named_speakers("Did Melanie and Caroline meet?", speakers) == frozenset()
    assert named_speakers("What do they like?", speakers) == frozenset()
    assert named_speakers("what does melanie do?", speakers) == frozenset()
    assert named_speakers("Where did Smith go?", ["John Smith", "Ann"]) == {"John Smith"}


def test_without_names_keeps_the_rest_of_the_query() -> None:
    assert without_names("What is Caroline's identity?", ["Caroline"]) == "What is identity?"
    assert without_names("Did John Smith run?", ["John Smith"]) == "Did run?"
    assert without_names("Carolines Caroline", ["Caroline"]) == "Carolines"
    assert without_names("Caroline?", ["Caroline"]) == "Caroline?"  # nothing else left
    assert without_names("no names", []) == "no names"


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ("What did Mel paint in July 2023?", [DateMention(2023, 7, None)]),
        ("on October 13, 2023?", [DateMention(2023, 10, 13)]),
        ("on the 1st of February, 2023", [DateMention(2023, 2, 1)]),
        ("What happened on 2023-05-08?", [DateMention(2023, 5, 8)]),
        ("camping in june", [DateMention(None, 6, None)]),
        ("in 2022", [DateMention(2022, None, None)]),
        ("May I ask? She may go in May.", []),  # "May" alone is read as the verb
        ("in May 2023", [DateMention(2023, 5, None)]),
        ("on 30 February", []),  # no calendar date
        ("at 10:30 with 200 people", []),
    ],
)
def test_query_dates(query: str, mentions: list[DateMention]) -> None:
    assert query_dates(query) == mentions


def test_entry_date_reads_the_date_line() -> None:
    entry = contextual_entry("Ann: hi", context=["Bob: yo"], date="1:56 pm on 8 May, 2023")
    assert entry_date(entry) == dt.date(2023, 5, 8)
    # Offload's own default: the current UTC date and time.
    assert entry_date("Ann: hi\nDate: 01 December 2026, 11:40 UTC") == dt.date(2026, 12, 1)
    assert entry_date("Ann: in May 2023\nDate: sometime") is None
    assert entry_date("Ann: on 8 May, 2023") is None  # no date line: the turn's own words


@pytest.mark.parametrize(
    ("mention", "day", "expected"),
    [
        (DateMention(2023, 5, 8), dt.date(2023, 5, 15), True),
        (DateMention(2023, 5, 8), dt.date(2023, 5, 16), False),
        (DateMention(2023, 5, None), dt.date(2023, 4, 24), True),
        (DateMention(2023, 5, None), dt.date(2023, 4, 23), False),
        (DateMention(2023, 5, None), dt.date(2023, 6, 30), True),  # "last month"
        (DateMention(2023, 5, None), dt.date(2023, 7, 1), False),
        (DateMention(2023, 12, None), dt.date(2024, 1, 31), True),
        (DateMention(None, 12, None), dt.date(2019, 1, 3), True),
        (DateMention(None, 12, None), dt.date(2019, 2, 3), False),
        (DateMention(2022, None, None), dt.date(2022, 12, 31), True),
        (DateMention(2022, None, None), dt.date(2023, 1, 1), False),
    ],
)
def test_near(mention: DateMention, day: dt.date, expected: bool) -> None:
    assert near(mention, day) is expected


CHAT = [
    # Bob says Ann's name and the question's words; only Ann's own turns answer it.
    ("8 May, 2023", "Ann", "Hiking in the hills is what I do"),
    ("8 May, 2023", "Ann", "Not really, I order takeaway"),
    ("8 May, 2023", "Bob", "Ann, what do you like to do on weekends? I like to know"),
    ("8 May, 2023", "Bob", "Nice. Ann, do you like to cook too?"),
    # The same words a month apart: only the date tells these two apart (recall keeps
    # one content once, so the one recalled is the one that ranks first).
    ("3 June, 2023", "Bob", "I went to the market for fresh bread"),
    ("2 July, 2023", "Bob", "I went to the market for fresh bread"),
]
FOCUS_STORE = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=4096)


async def offload_chat(store: Any) -> dict[str, str]:
    """Offload CHAT through compaction, one ``compress`` per date (the user's path);
    entry id → its date and line."""
    ids: dict[str, str] = {}
    async with open_memory(store=store, memory=MemoryConfig(strategies=[Offload(turns=8)])) as m:
        for date in dict.fromkeys(d for d, _, _ in CHAT):
            lines = [f"{who}: {text}" for d, who, text in CHAT if d == date]
            messages = [UnifiedMessage.user(line) for line in lines]
            compressed = await m.compress([*messages, UnifiedMessage.user("(next)")], date=date)
            for action in compressed.report.actions:
                assert isinstance(action, Offloaded)
                for i, entry_id in zip(action.indices, action.ids, strict=True):
                    ids[entry_id] = f"{date} | {lines[i]}"
    return ids


async def ranked(store: Any, query: str, ids: dict[str, str], **settings: Any) -> list[str]:
    """What Memory.retrieve ranks for ``query`` with these ``RecallSettings``."""
    config = MemoryConfig(recall=RecallSettings(**settings), min_similarity=None)
    async with open_memory(store=store, memory=config) as memory:
        report = await memory.retrieve(query, k=len(ids))
    return [ids[t.id] for t in report.turns]


async def check_focus(store: Any) -> None:
    ids = await offload_chat(store)
    question = "What does Ann like to do?"
    # Without focus, Bob's turns that say "Ann" and "like" come first; with it, Ann's
    # (the hand-tuned channel's boost). The learned ranker weighs the speaker with the
    # rest: on this toy, whose Bob turns hold every word of the question, it puts Ann's
    # answer first (Bob's questions put to Ann weigh less, the "asks_named" feature),
    # then Bob's question, whose words outweigh Ann's other turn.
    unfocused = await ranked(store, question, ids, speaker_weight=0.0, ranker="none")
    assert [line.split(" | ")[1][:4] for line in unfocused[:2]] == ["Bob:", "Bob:"]
    focused = await ranked(store, question, ids, ranker="none")
    assert [line.split(" | ")[1][:4] for line in focused[:2]] == ["Ann:", "Ann:"]
    # The learned ranker reorders the hand-tuned top hits, and only them.
    learned = await ranked(store, question, ids)
    assert sorted(learned) == sorted(focused)
    assert learned[0] == "8 May, 2023 | Ann: Hiking in the hills is what I do"
    # Hit scores are the cosine of the query that was embedded: Ann's name left out.
    config = MemoryConfig(min_similarity=None)
    async with open_memory(store=store, memory=config) as memory:
        report = await memory.retrieve(question, k=len(ids))
    plain = await store.retrieve_in(config.namespace, "What does like to do?", len(ids))
    cosine = {t.id: t.score for t in plain.turns}
    assert all(t.score == cosine[t.id] for t in report.turns)
    bread = "Bob: I went to the market for fresh bread"
    for query, date in [
        ("Where did Bob go in June 2023?", "3 June, 2023"),
        ("Where did Bob go on 30 June, 2023?", "2 July, 2023"),  # within 7 days
        ("Where did Bob go in July?", "2 July, 2023"),
        ("Where did Bob go on 2023-06-05?", "3 June, 2023"),
    ]:
        assert (await ranked(store, query, ids))[0] == f"{date} | {bread}", query
    # With the time channel off, the June entry's date line matches "June" by BM25 (the
    # same content is recalled once, at its best rank: this is the one that ranks first).
    order = await ranked(store, "Where did Bob go on 30 June, 2023?", ids, date_weight=0.0)
    assert f"3 June, 2023 | {bread}" in order


async def test_speaker_focus_and_time_channel_through_memory() -> None:
    with trio.fail_after(20):
        async with open_store(FOCUS_STORE, HashingEmbedder(DIM)) as store:
            await check_focus(store)


async def test_speaker_focus_and_time_channel_on_pg(pg_dsn: str, pg_table: str) -> None:
    open_pg_store = pg_store_opener()
    with trio.fail_after(60):
        async with open_pg_store(
            pg_dsn, FOCUS_STORE, HashingEmbedder(DIM), table=pg_table
        ) as store:
            await check_focus(store)


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
    assert list(rows) == ["none", "0", "0.01", "0.02", "0.05", "0.1", "0.2", "0.3", "0.4"]
    kept = [row["injected"] for row in rows.values()]
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
