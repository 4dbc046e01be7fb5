"""Reciprocal rank fusion against a reference, and MMR against a brute-force reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from actors._retrieval.fusion import fuse, lend, mmr, neighbor_boost, rrf
from protocol import ConfigError

# --- RRF -----------------------------------------------------------------------------


def reference_rrf(
    lists: dict[str, list[int]], k: float, weights: dict[str, float]
) -> list[tuple[int, float, dict[str, int]]]:
    """Score each key by Σ w/(k+rank) over the lists in order; order by score, then by
    the best rank, then by the earlier list holding that rank."""
    keys = {key for ranked in lists.values() for key in ranked}
    out = []
    for key in keys:
        score = 0.0
        ranks: dict[str, int] = {}
        for name, ranked in lists.items():
            if key in ranked:
                rank = ranked.index(key) + 1
                ranks[name] = rank
                score += weights.get(name, 1.0) / (k + rank)
        out.append((key, score, ranks))
    names = list(lists)

    def tie(item: tuple[int, float, dict[str, int]]) -> tuple[float, int, int]:
        rank, name = min((r, names.index(n)) for n, r in item[2].items())
        return (-item[1], rank, name)

    return sorted(out, key=tie)


LISTS = st.dictionaries(
    st.sampled_from(["dense", "bm25", "other"]),
    st.lists(st.integers(0, 12), unique=True, max_size=8),
    max_size=3,
)


@given(
    lists=LISTS,
    k=st.sampled_from([60, 1, 0.5, 1000]),
    weights=st.dictionaries(
        st.sampled_from(["dense", "bm25", "other"]), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.3])
    ),
)
def test_rrf_agrees_with_the_reference(
    lists: dict[str, list[int]], k: float, weights: dict[str, float]
) -> None:
    weights = {name: w for name, w in weights.items() if name in lists}
    hits = rrf(lists, k=k, weights=weights)
    expected = reference_rrf(lists, k, weights)
    assert [(h.key, h.score, h.ranks) for h in hits] == expected
    for hit in hits:
        for name, rank in hit.ranks.items():
            assert lists[name][rank - 1] == hit.key
    assert [h.key for h in rrf(lists, k=k, weights=weights, limit=3)] == [
        key for key, _, _ in expected[:3]
    ]


def reference_neighbor_boost(
    hits: list[tuple[int, float]], sequences: dict[int, int], weight: float
) -> list[tuple[int, float]]:
    """Lend each hit ``weight`` times the better score of the hits whose sequences are
    one below and one above its own (the later hit holding a sequence lends); re-sort,
    ties in the order given."""
    by_sequence = {sequences[key]: score for key, score in hits if key in sequences}
    boosted = []
    for position, (key, score) in enumerate(hits):
        seq = sequences.get(key)
        lent = (
            0.0
            if seq is None
            else max(by_sequence.get(seq - 1, 0.0), by_sequence.get(seq + 1, 0.0))
        )
        boosted.append((score + weight * lent, position, key))
    boosted.sort(key=lambda item: (-item[0], item[1]))
    return [(key, score) for score, _, key in boosted]


@given(
    dense=st.lists(st.integers(0, 40), unique=True, max_size=30),
    keyword=st.lists(st.integers(0, 40), unique=True, max_size=30),
    # Few distinct sequences, so neighbours, gaps, shared and missing sequences all occur.
    sequences=st.dictionaries(st.integers(0, 40), st.integers(0, 12)),
    k=st.sampled_from([10, 10.0, 60, 0.5, 7.25]),
    dense_weight=st.sampled_from([0.0, 1, 1.0, 0.7, 2.5]),
    bm25_weight=st.sampled_from([0.0, 1.0, 0.3, 3]),
    neighbor_weight=st.sampled_from([0.0, 0.5, 1, 0.1]),
)
# Two hits share a sequence: the later one in fused order lends to its neighbour.
@example(
    dense=[0, 1, 2],
    keyword=[2],
    sequences={0: 5, 1: 5, 2: 6},
    k=10,
    dense_weight=1.0,
    bm25_weight=1.0,
    neighbor_weight=0.5,
)
def test_fuse_then_lend_is_rrf_then_the_neighbor_boost(
    dense: list[int],
    keyword: list[int],
    sequences: dict[int, int],
    k: float,
    dense_weight: float,
    bm25_weight: float,
    neighbor_weight: float,
) -> None:
    """Recall's fusion over arrays (``fuse``, then ``lend``) gives the keys, order and
    floats of the two reference definitions, ties and equal scores included; so do
    ``rrf`` and ``neighbor_boost``, which are written over them."""
    weights = {"dense": dense_weight, "bm25": bm25_weight}
    expected = [
        (key, score)
        for key, score, _ in reference_rrf({"dense": dense, "bm25": keyword}, k, weights)
    ]
    if neighbor_weight > 0:
        expected = reference_neighbor_boost(expected, sequences, neighbor_weight)
    fused = fuse({"dense": dense, "bm25": keyword}, k=k, weights=weights)
    lent = lend(fused.keys, fused.scores, sequences, neighbor_weight)
    assert list(zip(lent.keys, lent.scores.tolist(), strict=True)) == expected
    hits = rrf({"dense": dense, "bm25": keyword}, k=k, weights=weights)
    if neighbor_weight > 0:
        hits = neighbor_boost(hits, sequences, neighbor_weight)
    assert [(h.key, h.score) for h in hits] == expected
    # What each hit borrowed is what lifted it past its fused score.
    before = dict(zip(fused.keys, fused.scores.tolist(), strict=True))
    for key, score, borrowed in zip(
        lent.keys, lent.scores.tolist(), lent.lent.tolist(), strict=True
    ):
        assert borrowed >= 0.0
        assert score == before[key] + borrowed


def test_fuse_refuses_a_repeated_key() -> None:
    for dense, keyword in (([1, 2, 1], [3]), ([1], [3, 2, 3])):
        with pytest.raises(ConfigError, match="more than once"):
            fuse({"dense": dense, "bm25": keyword}, k=10)


def test_rrf_worked_example() -> None:
    hits = rrf({"dense": ["a", "b", "c"], "bm25": ["b", "d"]})
    assert [h.key for h in hits] == ["b", "a", "d", "c"]
    assert hits[0].score == 1 / 62 + 1 / 61
    assert hits[0].ranks == {"dense": 2, "bm25": 1}
    assert hits[1].score == 1 / 61 and hits[2].score == 1 / 62


def test_rrf_ties_are_deterministic() -> None:
    hits = rrf({"dense": ["x", "y"], "bm25": ["y", "x"]})
    # Equal scores and equal best ranks: the hit ranked first in the earlier list wins.
    assert hits[0].score == hits[1].score
    assert [h.key for h in hits] == ["x", "y"]


def test_rrf_weights_shift_the_order() -> None:
    lists = {"dense": ["a", "b"], "bm25": ["b", "a"]}
    assert rrf(lists, weights={"bm25": 2.0})[0].key == "b"
    assert rrf(lists, weights={"dense": 2.0})[0].key == "a"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"lists": {"a": [1, 1]}}, "holds 1 more than once"),
        ({"lists": {"a": [1]}, "k": 0}, "rrf k is 0"),
        ({"lists": {"a": [1]}, "k": float("nan")}, "rrf k is nan"),
        ({"lists": {"a": [1]}, "weights": {"b": 1.0}}, "not among ['a']"),
        ({"lists": {"a": [1]}, "weights": {"a": -1.0}}, "weight of 'a' is -1.0"),
        ({"lists": {"a": [1]}, "limit": 0}, "limit is 0"),
    ],
)
def test_rrf_refuses_bad_input(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        rrf(**kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)


# --- MMR -----------------------------------------------------------------------------


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    return 0.0 if na * nb == 0.0 else dot / (na * nb)


def brute_force_mmr(query: list[float], cands: list[list[float]], k: int, lam: float) -> list[int]:
    """LangChain's maximal_marginal_relevance, recomputing every similarity each step."""
    if not cands:
        return []
    to_query = [cosine(c, query) for c in cands]
    picked = [max(range(len(cands)), key=lambda i: (to_query[i], -i))]
    while len(picked) < min(k, len(cands)):
        best, best_score = -1, -math.inf
        for i in range(len(cands)):
            if i in picked:
                continue
            redundancy = max(cosine(cands[i], cands[j]) for j in picked)
            score = lam * to_query[i] - (1.0 - lam) * redundancy
            if score > best_score:
                best, best_score = i, score
        picked.append(best)
    return picked


# Small integer components: every dot product and squared norm is exact in float64, so
# the fast and the brute-force versions compute bit-identical similarities and must
# agree exactly, ties included (and small integers make ties common).
VEC = st.lists(st.integers(-2, 2), min_size=3, max_size=3)


@given(
    query=VEC,
    cands=st.lists(VEC, max_size=9),
    k=st.integers(1, 10),
    lam=st.sampled_from([0.0, 0.25, 0.5, 0.7, 1.0]),
)
def test_mmr_agrees_with_brute_force(
    query: list[int], cands: list[list[int]], k: int, lam: float
) -> None:
    q = [float(x) for x in query]
    c = [[float(x) for x in row] for row in cands]
    matrix = np.array(c, dtype=np.float64).reshape(len(c), 3)
    assert mmr(np.array(q), matrix, k, lam) == brute_force_mmr(q, c, k, lam)


def test_mmr_with_lambda_one_is_plain_ranking() -> None:
    rng = np.random.default_rng(3)
    cands = rng.normal(size=(50, 16))
    query = rng.normal(size=16)
    sims = cands @ query / (np.linalg.norm(cands, axis=1) * np.linalg.norm(query))
    assert mmr(query, cands, 10, 1.0) == np.argsort(-sims, kind="stable")[:10].tolist()


def test_mmr_prefers_a_diverse_second_pick() -> None:
    query = np.array([1.0, 0.0])
    cands = np.array([[1.0, 0.1], [1.0, 0.1], [0.6, -0.8]])
    assert mmr(query, cands, 2, 0.5) == [0, 2]
    assert mmr(query, cands, 2, 1.0) == [0, 1]


def test_mmr_handles_zero_vectors_and_float32() -> None:
    cands = np.array([[0.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    assert mmr(np.array([1.0, 0.0]), cands, 2) == [1, 0]
    assert mmr(np.zeros(2), cands, 2) == [0, 1]
    assert mmr(np.array([1.0, 0.0]), np.empty((0, 2)), 3) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (([1.0], [[1.0]], 0, 0.5), "k is 0"),
        (([1.0], [[1.0]], 1, 1.5), "lambda_mult is 1.5"),
        (([1.0], [[1.0]], 1, True), "lambda_mult is True"),
        (([1.0, 2.0], [[1.0]], 1, 0.5), "width 1; the query has 2"),
        (([1.0], [1.0], 1, 0.5), "candidate_vecs has 1 dimensions"),
        (([float("nan")], [[1.0]], 1, 0.5), "non-finite"),
    ],
)
def test_mmr_refuses_bad_input(args: tuple[object, ...], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        mmr(*args)  # type: ignore[arg-type]
    assert needle in str(info.value)
