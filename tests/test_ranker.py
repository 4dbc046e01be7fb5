"""Recall's learned ranker (``actors/_retrieval/ranker.py``): its features are what they
say on a hand-made store, its scores reorder the candidates, its setting is checked,
and both backends rank alike with it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import trio
from pg_support import pg_store_opener

import actors._retrieval.ranker as ranker
from actors import HashingEmbedder, open_memory, open_store
from actors._retrieval.focus import speaker_of
from actors._retrieval.ranker_weights import WEIGHTS
from protocol import (
    ConfigError,
    MemoryConfig,
    RecallSettings,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.compaction import Offload, Offloaded

DIM = 64
STORE = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)
COLUMN = {name: i for i, name in enumerate(ranker.FEATURES)}
CHAT = [
    ("8 May, 2023", "Ann", "Hiking in the hills is what I do on weekends"),
    ("8 May, 2023", "Bob", "Ann, what do you like to do on weekends?"),
    ("8 May, 2023", "Ann", "I also bake sourdough bread at home"),
    ("8 May, 2023", "Bob", "I went to the market for fresh bread"),
    ("3 June, 2023", "Bob", "My dog chased a duck at the lake"),
    ("3 June, 2023", "Ann", "Your dog is brave, the lake is cold in June"),
    ("2 July, 2023", "Bob", "I went to the market for fresh bread again"),
    ("2 July, 2023", "Ann", "The Alchemist is the book I read this summer"),
    ("2 July, 2023", "Bob", "I read The Alchemist too, at the lake"),
]
QUERIES = [
    "What does Ann like to do on weekends?",
    "Where did Bob go in June 2023?",
    "Which book did Ann read?",
    "bread market",
    "dog lake",
    "When did Bob go to the lake?",
]


async def offload_chat(store: Any) -> str:
    """CHAT offloaded through compaction, one ``compress`` per date; the namespace."""
    config = MemoryConfig(strategies=[Offload(turns=8)])
    async with open_memory(store=store, memory=config) as memory:
        for date in dict.fromkeys(d for d, _, _ in CHAT):
            lines = [f"{who}: {text}" for d, who, text in CHAT if d == date]
            messages = [UnifiedMessage.user(line) for line in lines]
            compressed = await memory.compress(
                [*messages, UnifiedMessage.user("(next)")], date=date
            )
            assert all(isinstance(a, Offloaded) for a in compressed.report.actions)
    return config.namespace


def request(query: str, namespace: str, ranker_name: str = "learned", **kw: Any) -> SearchRequest:
    return SearchRequest(
        query=query,
        k=len(CHAT),
        kind="recall",
        namespace=namespace,
        settings=RecallSettings(ranker=ranker_name, **kw),  # type: ignore[arg-type]
    )


class Captured:
    """The keys, rows and projections of the candidates the ranker was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[ranker.Candidates, dict[str, Any]]] = []
        original = ranker.features

        def capture(**kwargs: Any) -> ranker.Candidates:
            found = original(**kwargs)
            texts = kwargs["view"].texts(found.keys, projections=True)
            self.calls.append((found, {**kwargs, "own": texts}))
            return found

        monkeypatch.setattr(ranker, "features", capture)


# --- the setting ------------------------------------------------------------------------


def test_default_recall_uses_the_learned_ranker() -> None:
    assert RecallSettings().ranker == "learned"
    assert RecallSettings(ranker="none").ranker == "none"


@pytest.mark.parametrize("value", ["linear", "", None, 1, True])
def test_recall_settings_refuse_a_bad_ranker(value: object) -> None:
    with pytest.raises(ConfigError, match=r"RecallSettings\.ranker is .*expected 'learned'"):
        RecallSettings(ranker=value)  # type: ignore[arg-type]


def test_the_weights_match_the_features() -> None:
    assert len(WEIGHTS) == len(ranker.FEATURES)
    assert all(math.isfinite(w) for w in WEIGHTS)


# --- the scores -------------------------------------------------------------------------


def test_scores_are_the_rows_times_the_weights() -> None:
    rows = np.zeros((3, len(ranker.FEATURES)))
    rows[0, COLUMN["cosine"]] = 0.2
    rows[1, COLUMN["cosine"]] = 0.9
    rows[2, COLUMN["cosine"]] = 0.5
    rows[2, COLUMN["speaker"]] = 1.0
    weights = np.zeros(len(ranker.FEATURES))
    weights[COLUMN["cosine"]] = 1.0
    assert np.argsort(-ranker.scores(rows, weights)).tolist() == [1, 2, 0]
    weights[COLUMN["speaker"]] = 1.0
    assert np.argsort(-ranker.scores(rows, weights)).tolist() == [2, 1, 0]
    shipped = ranker.scores(rows)
    assert np.allclose(shipped, rows @ np.array(WEIGHTS))


async def test_the_engine_orders_the_candidates_by_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every weight on the entry's length, recall returns its candidates longest
    first; with the shipped weights, by the shipped scores."""
    weights = [0.0] * len(ranker.FEATURES)
    weights[COLUMN["length"]] = 1.0
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            ns = await offload_chat(store)
            captured = Captured(monkeypatch)
            shipped = await store.search(request("dog lake", ns))
            ((found, given),) = captured.calls
            model = found.matrix @ np.array(WEIGHTS)
            expected = np.argsort(-model, kind="stable").tolist()
            # A hit's text is its index text: the turn's own line first.
            assert [h.document.text.split("\n")[0] for h in shipped] == [
                given["own"][found.keys[i]] for i in expected
            ]
            assert [h.raw_score for h in shipped] == pytest.approx(model[expected].tolist())
            monkeypatch.setattr(ranker, "WEIGHTS", tuple(weights))
            hits = await store.search(request("dog lake", ns))
            own = captured.calls[1][1]["own"]
    assert len(hits) == len(CHAT)
    # Longest own text (the turn, without its Date line and context) first.
    by_text = {text: len(text) for text in own.values()}
    lengths = [by_text[h.document.text.split("\n")[0]] for h in hits]
    assert lengths == sorted(lengths, reverse=True)


# --- the features -----------------------------------------------------------------------


async def test_features_are_what_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            ns = await offload_chat(store)
            captured = Captured(monkeypatch)
            for query in QUERIES:
                await store.search(request(query, ns))
    assert len(captured.calls) == len(QUERIES)
    said_on = {f"{who}: {text}": date for date, who, text in CHAT}
    for query, (found, given) in zip(QUERIES, captured.calls, strict=True):
        x, texts = found.matrix, given["own"]
        assert x.shape == (len(found.keys), len(ranker.FEATURES))
        assert found.keys == list(given["keys"])
        # The best candidate before the ranker: its boosted score is the best, rank 0.
        assert x[0, COLUMN["boosted"]] == 0.0 and x[0, COLUMN["rank"]] == 0.0
        assert np.all(x[:, COLUMN["boosted"]] <= 0.0)
        assert np.all(np.diff(x[:, COLUMN["rank"]]) > 0)
        cosine = given["cosine"]
        day = {key: said_on[texts[key]] for key in found.keys}
        dense = {c.key for c in given["dense"]}
        keyword = {c.key for c in given["keyword"]}
        for i, key in enumerate(found.keys):
            row = dict(zip(ranker.FEATURES, x[i].tolist(), strict=True))
            assert row["cosine"] == pytest.approx(cosine[key])
            assert row["cosine_gap"] == pytest.approx(cosine[key] - given["dense"][0].score)
            assert row["agree"] == float(key in dense and key in keyword)
            assert (row["bm25"] > 0) == (key in keyword)
            assert row["length"] == pytest.approx(math.log1p(len(texts[key])))
            said = speaker_of(texts[key])
            assert row["speaker"] == float(said in given["named"])
            assert row["other_speaker"] == float(
                bool(given["named"]) and said not in given["named"]
            )
            assert 0.0 <= row["coverage"] <= 1.0
            assert row["question"] == float("?" in texts[key])
            # Another speaker's question that says the named speaker's name.
            says = any(name in texts[key] for name in given["named"])
            assert row["asks_named"] == float(
                row["other_speaker"] == 1.0 and row["question"] == 1.0 and says
            )
            assert row["neighbor"] == max(row["previous"], row["following"])
            season = any(w in texts[key] for w in ("June", "summer", "weekends"))
            assert row["when_time"] == float(query.startswith("When") and season)
            assert row["link"] in (0.0, 1.0) and (row["link"] > 0) == (row["link_terms"] > 0)
            # The other candidates said on its day (CHAT's compress dates), and the best
            # boosted score among them.
            peers = [j for j, other in enumerate(found.keys) if j != i and day[other] == day[key]]
            assert row["day_peers"] == pytest.approx(math.log1p(len(peers)))
            share = np.exp(x[peers, COLUMN["boosted"]])
            assert row["day_best"] == pytest.approx(share.max() if peers else 0.0)
        # The second half repeats the features for a question asking "when".
        base = len(ranker.BASE)
        assert np.array_equal(x[:, base:], x[:, :base] if "When" in query else 0 * x[:, :base])
        if query.startswith("What does Ann"):
            assert given["named"] == frozenset({"Ann"})
            assert x[:, COLUMN["speaker"]].sum() > 0
            asks = {texts[k] for i, k in enumerate(found.keys) if x[i, COLUMN["asks_named"]]}
            assert asks == {"Bob: Ann, what do you like to do on weekends?"}
        if "June 2023" in query:
            near = {texts[k] for i, k in enumerate(found.keys) if x[i, COLUMN["date_near"]]}
            far = {texts[k] for i, k in enumerate(found.keys) if x[i, COLUMN["date_far"]]}
            # Near "June 2023": from 7 days before June to the end of July.
            june = {f"{who}: {text}" for d, who, text in CHAT if "May" not in d}
            assert near and near <= june
            assert far and not far & june
        else:
            assert not x[:, COLUMN["date_near"]].any() and not x[:, COLUMN["date_far"]].any()
        if query == "bread market":
            # "bread" and "market" are both in two turns: full coverage there.
            full = {texts[k] for i, k in enumerate(found.keys) if x[i, COLUMN["coverage"]] == 1}
            assert "Bob: I went to the market for fresh bread" in full


async def test_day_features_group_the_candidates_said_on_one_day(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``day_peers`` and ``day_best`` over CHAT's three days, a day with one turn, and
    a memory with no ``Date:`` line (added as a document): the last two have no peer."""
    lone = "Ann: I sold bread at the market in September"
    undated = "Ann: bread from the market is the best"
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            ns = await offload_chat(store)
            config = MemoryConfig(strategies=[Offload(turns=8)])
            async with open_memory(store=store, memory=config) as memory:
                await memory.compress(
                    [UnifiedMessage.user(lone), UnifiedMessage.user("(next)")],
                    date="9 September, 2023",
                )
            await store.add_texts([undated], namespace=ns)
            captured = Captured(monkeypatch)
            await store.search(request("bread market", ns))
    ((found, given),) = captured.calls
    said_on = {f"{who}: {text}": date for date, who, text in CHAT} | {lone: "9 September"}
    own, index = given["own"], given["texts"]
    assert {own[key] for key in found.keys} == set(said_on) | {undated}
    (plain,) = [key for key in found.keys if own[key] == undated]
    assert "Date: " not in index[plain]
    share = np.exp(found.matrix[:, COLUMN["boosted"]])
    for i, key in enumerate(found.keys):
        day = said_on.get(own[key])
        peers = [
            j
            for j, other in enumerate(found.keys)
            if j != i and day is not None and said_on.get(own[other]) == day
        ]
        row = found.matrix[i]
        assert row[COLUMN["day_peers"]] == pytest.approx(math.log1p(len(peers)))
        assert row[COLUMN["day_best"]] == pytest.approx(share[peers].max() if peers else 0.0)
        if own[key] in (lone, undated):
            assert row[COLUMN["day_peers"]] == 0.0 and row[COLUMN["day_best"]] == 0.0


async def test_a_channel_turned_off_gives_no_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            ns = await offload_chat(store)
            captured = Captured(monkeypatch)
            await store.search(
                request(
                    "What did Ann do in June 2023?",
                    ns,
                    speaker_weight=0.0,
                    date_weight=0.0,
                    link_weight=0.0,
                    neighbor_weight=0.0,
                )
            )
    ((found, _),) = captured.calls
    off = ["speaker", "other_speaker", "asks_named", "date_near", "date_far", "link", "link_terms"]
    off += ["neighbor", "previous", "following", "next_to_top", "day_peers", "day_best"]
    assert not found.matrix[:, [COLUMN[name] for name in off]].any()


@pytest.mark.parametrize(
    ("weight", "days_on"), [("neighbor_weight", False), ("date_weight", True)]
)
async def test_the_day_features_are_the_neighbour_channels(
    monkeypatch: pytest.MonkeyPatch, weight: str, days_on: bool
) -> None:
    # Said on one day is a wider neighbourhood: neighbor_weight=0 alone turns the day
    # columns off; the time channel (date_weight) does not.
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            ns = await offload_chat(store)
            captured = Captured(monkeypatch)
            await store.search(request("bread market", ns, **{weight: 0.0}))
    ((found, _),) = captured.calls
    days = found.matrix[:, [COLUMN["day_peers"], COLUMN["day_best"]]]
    assert bool(days.any()) is days_on


# --- both backends ------------------------------------------------------------------------


async def rankings(store: Any) -> dict[str, list[tuple[str, float, list[str]]]]:
    """Each ranker's hits for every query: text, cosine and channels."""
    ns = await offload_chat(store)
    out: dict[str, list[tuple[str, float, list[str]]]] = {}
    for name in ("learned", "none"):
        for query in QUERIES:
            hits = await store.search(request(query, ns, name))
            assert len(hits) == len(CHAT)
            out.setdefault(name, []).extend(
                (h.document.text, round(h.score, 5), h.channels) for h in hits
            )
    return out


async def test_both_backends_rank_alike(pg_dsn: str, pg_table: str) -> None:
    open_pg_store = pg_store_opener()
    with trio.fail_after(60):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            memory = await rankings(store)
        async with open_pg_store(pg_dsn, STORE, HashingEmbedder(DIM), table=pg_table) as store:
            pg = await rankings(store)
    assert pg == memory
