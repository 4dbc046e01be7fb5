"""Result fusion and diversification: reciprocal rank fusion and MMR.

Both are pure functions over ranked candidates, so the in-memory store and any other
backend fuse and diversify the same way.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from protocol._checks import check_int
from protocol._errors import ConfigError

__all__ = ["RRF_K", "FusedHit", "fuse_hybrid", "mmr", "neighbor_boost", "rrf"]

RRF_K = 60
K = TypeVar("K", bound=Hashable)


@attrs.frozen
class FusedHit(Generic[K]):
    """One fused hit.

    Attributes:
        key: the hit (a slot, an id: whatever the lists held).
        score: ``Σ weight[list] / (k + rank)`` over the lists it appears in.
        ranks: its 1-based rank in each list it appears in, by list name.
    """

    key: K
    score: float
    ranks: dict[str, int]


def rrf(
    lists: Mapping[str, Sequence[K]],
    *,
    k: float = RRF_K,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> list[FusedHit[K]]:
    """Reciprocal rank fusion of ranked lists, best first.

    A hit at 1-based rank ``r`` in list ``L`` earns ``weights[L] / (k + r)``; the
    contributions are summed in the order of ``lists``. Ties in the fused score go to
    the hit with the best (lowest) rank in any list, and then to the hit that holds that
    rank in the earlier list. That pair names one hit, so the order is total and does
    not depend on hashing.

    Args:
        lists: list name → keys, best first. A key may appear once per list.
        k: the RRF constant, > 0 (60 by default, as in Cormack et al.).
        weights: a finite weight ≥ 0 per list name; a missing name weighs 1.0.
        limit: keep only the best ``limit`` hits (> 0); None keeps all.

    Raises:
        ConfigError: a bad ``k``, weight, ``limit``, an unknown weight name, or a key
            repeated within one list.
    """
    if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k <= 0:
        raise ConfigError(f"rrf k is {k!r}; expected a finite number > 0")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise ConfigError(f"limit is {limit!r}; expected None or an int > 0")
    weights = {} if weights is None else dict(weights)
    for name, weight in weights.items():
        if name not in lists:
            raise ConfigError(
                f"weight given for the list {name!r}, which is not among {sorted(lists)}"
            )
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ConfigError(f"weight of {name!r} is {weight!r}; expected a finite number >= 0")
    scores: dict[K, float] = {}
    ranks: dict[K, dict[str, int]] = {}
    best: dict[K, tuple[int, int]] = {}
    for list_index, (name, keys) in enumerate(lists.items()):
        weight = float(weights.get(name, 1.0))
        seen: set[K] = set()
        for rank, key in enumerate(keys, start=1):
            if key in seen:
                raise ConfigError(f"list {name!r} holds {key!r} more than once")
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            ranks.setdefault(key, {})[name] = rank
            if key not in best or (rank, list_index) < best[key]:
                best[key] = (rank, list_index)
    order = sorted(scores, key=lambda key: (-scores[key], best[key]))
    if limit is not None:
        order = order[:limit]
    return [FusedHit(key=key, score=scores[key], ranks=ranks[key]) for key in order]


def neighbor_boost(
    hits: Sequence[FusedHit[K]], sequences: Mapping[K, int], weight: float
) -> list[FusedHit[K]]:
    """Lend each hit ``weight`` times the better fused score of its two neighbours.

    Neighbours are the entries written just before and just after it (sequence ± 1):
    for a conversation's turns, the turns said just before and after. The evidence for
    a question often sits beside the turn that matches it best (the answer after the
    question, the detail after the topic), so a turn whose neighbour is a strong hit is
    likelier to matter than its own score says. A neighbour that is not among ``hits``
    lends nothing; a hit without a sequence borrows nothing. Ties keep the order of
    ``hits``, so the result is deterministic.

    Args:
        hits: fused hits, best first (``rrf`` with no limit).
        sequences: each hit's sequence number.
        weight: the share of the neighbour's score lent, finite and >= 0.
    """
    by_sequence = {sequences[h.key]: h.score for h in hits if h.key in sequences}
    boosted: list[tuple[float, int, FusedHit[K]]] = []
    for position, hit in enumerate(hits):
        seq = sequences.get(hit.key)
        lent = (
            0.0
            if seq is None
            else max(by_sequence.get(seq - 1, 0.0), by_sequence.get(seq + 1, 0.0))
        )
        boosted.append((hit.score + weight * lent, position, hit))
    boosted.sort(key=lambda item: (-item[0], item[1]))
    return [FusedHit(key=h.key, score=score, ranks=h.ranks) for score, _, h in boosted]


def fuse_hybrid(
    dense: Sequence[K],
    keyword: Sequence[K],
    sequences: Mapping[K, int],
    *,
    k: float,
    dense_weight: float,
    bm25_weight: float,
    neighbor_weight: float,
) -> tuple[list[K], npt.NDArray[np.float64]]:
    """Hybrid recall's fusion over arrays: the keys and scores of
    ``neighbor_boost(rrf({"dense": dense, "bm25": keyword}, ...), sequences,
    neighbor_weight)`` (or of the ``rrf`` alone when ``neighbor_weight`` is 0), in the
    same order and the same floats, without a :class:`FusedHit` or a ranks dict per
    candidate.

    Each IEEE operation of the two reference functions is done once per candidate in
    the same order (``0.0 + w / (k + r)``, plus the BM25 addend; the neighbour's lent
    score times the weight, added), and the two sorts use the same keys (the fused
    score, then the best rank and its list; the boosted score, then the position), so
    the result is bit-identical; ``tests/test_fusion.py`` compares them.

    The arguments are taken as checked (``RecallSettings`` checks the constants).

    Raises:
        ConfigError: a key repeated within one list.
    """
    index: dict[K, int] = dict(zip(dense, range(len(dense)), strict=False))
    if len(index) != len(dense):
        raise ConfigError("list 'dense' holds a key more than once")
    n_dense = len(dense)
    keys = list(dense)
    at = np.empty(len(keyword), dtype=np.intp)
    for j, key in enumerate(keyword):
        c = index.get(key)
        if c is None:
            c = index[key] = len(keys)
            keys.append(key)
        at[j] = c
    if np.unique(at).shape[0] != at.shape[0]:
        raise ConfigError("list 'bm25' holds a key more than once")
    m = len(keys)
    scores = np.zeros(m, dtype=np.float64)
    dense_ranks = np.arange(1, n_dense + 1, dtype=np.float64)
    keyword_ranks = np.arange(1, len(keyword) + 1, dtype=np.float64)
    scores[:n_dense] += float(dense_weight) / (k + dense_ranks)
    scores[at] += float(bm25_weight) / (k + keyword_ranks)
    # The tie-break of rrf: the best (rank, list index) pair.
    best_rank = np.zeros(m, dtype=np.float64)
    best_list = np.zeros(m, dtype=np.intp)
    best_rank[:n_dense] = dense_ranks
    better = (at >= n_dense) | (keyword_ranks < best_rank[at])
    best_rank[at[better]] = keyword_ranks[better]
    best_list[at[better]] = 1
    order = np.lexsort((best_list, best_rank, -scores))
    fused = scores[order]
    if neighbor_weight > 0 and m:
        seq_of = [sequences.get(keys[i]) for i in order.tolist()]
        has = np.array([s is not None for s in seq_of], dtype=np.bool_)
        seqs = np.array([0 if s is None else s for s in seq_of], dtype=np.int64)
        # The lender of a sequence is its last hit in fused order, as in the reference's
        # dict comprehension.
        by_seq = np.argsort(seqs[has], kind="stable")
        lender_seqs, lender_scores = seqs[has][by_seq], fused[has][by_seq]
        last = np.ones(lender_seqs.shape[0], dtype=np.bool_)
        last[:-1] = lender_seqs[1:] != lender_seqs[:-1]
        lender_seqs, lender_scores = lender_seqs[last], lender_scores[last]
        lent = np.maximum(
            _lent(lender_seqs, lender_scores, seqs - 1),
            _lent(lender_seqs, lender_scores, seqs + 1),
        )
        lent[~has] = 0.0
        boosted = fused + float(neighbor_weight) * lent
        again = np.argsort(-boosted, kind="stable")
        order, fused = order[again], boosted[again]
    return [keys[i] for i in order.tolist()], fused


def _lent(
    seqs: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], wanted: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """The score of the hit with each ``wanted`` sequence (``seqs`` ascending, distinct),
    0.0 where there is none."""
    if seqs.shape[0] == 0:
        return np.zeros(wanted.shape[0], dtype=np.float64)
    at = np.minimum(np.searchsorted(seqs, wanted), seqs.shape[0] - 1)
    out: npt.NDArray[np.float64] = np.where(seqs[at] == wanted, scores[at], 0.0)
    return out


def _as_matrix(what: str, value: Any, ndim: int) -> npt.NDArray[np.float64]:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != ndim:
        raise ConfigError(f"{what} has {arr.ndim} dimensions; expected {ndim}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{what} holds a non-finite number; expected finite floats")
    return arr


def _cosine(
    a: npt.NDArray[np.float64],
    a_norms: npt.NDArray[np.float64],
    b: npt.NDArray[np.float64],
    b_norm: float,
) -> npt.NDArray[np.float64]:
    """Cosine of every row of ``a`` with ``b``: ``(a·b) / (|a| |b|)``, 0.0 where a norm
    is zero (as LangChain's ``cosine_similarity`` does)."""
    dots = a @ b
    denom = a_norms * b_norm
    out = np.zeros_like(dots)
    np.divide(dots, denom, out=out, where=denom != 0.0)
    return out


def mmr(
    query_vec: Any,
    candidate_vecs: Any,
    k: int,
    lambda_mult: float = 0.5,
) -> list[int]:
    """Maximal marginal relevance: pick ``k`` candidates that are relevant and diverse.

    The LangChain definition, over cosine similarity: the first pick is the candidate
    most similar to the query; each next pick maximizes
    ``lambda_mult · sim(query, c) − (1 − lambda_mult) · max_{s picked} sim(c, s)``.
    Ties go to the lower candidate index, so pass candidates best first (as the exact
    scan ranks them) and a tie goes to the better-ranked one. Runs in
    ``O(k · n · d)``: each step folds only the newest pick into the redundancy.

    Args:
        query_vec: the query, shape ``(d,)``; it need not be normalized.
        candidate_vecs: shape ``(n, d)``; need not be normalized, zero rows allowed.
        k: how many to pick, > 0; at most ``n`` are returned.
        lambda_mult: in [0, 1]; 1 is pure relevance, 0 pure diversity.

    Returns:
        Indices into ``candidate_vecs``, in the order they were picked.

    Raises:
        ConfigError: a bad shape, a non-finite number, ``k ≤ 0`` or ``lambda_mult``
            outside [0, 1].
    """
    check_int("k", k)
    if (
        isinstance(lambda_mult, bool)
        or not isinstance(lambda_mult, int | float)
        or not 0.0 <= lambda_mult <= 1.0
    ):
        raise ConfigError(f"lambda_mult is {lambda_mult!r}; expected a number in [0, 1]")
    query = _as_matrix("query_vec", query_vec, 1)
    cands = _as_matrix("candidate_vecs", candidate_vecs, 2)
    n = cands.shape[0]
    if n == 0:
        return []
    if cands.shape[1] != query.shape[0]:
        raise ConfigError(
            f"candidate_vecs has width {cands.shape[1]}; the query has {query.shape[0]}"
        )
    norms = np.sqrt(np.einsum("ij,ij->i", cands, cands))
    to_query = _cosine(cands, norms, query, float(np.sqrt(query @ query)))
    first = int(np.argmax(to_query))
    picked = [first]
    taken = np.zeros(n, dtype=np.bool_)
    taken[first] = True
    redundancy = _cosine(cands, norms, cands[first], float(norms[first]))
    lam = float(lambda_mult)
    while len(picked) < min(k, n):
        score = lam * to_query - (1.0 - lam) * redundancy
        score[taken] = -np.inf
        best = int(np.argmax(score))
        picked.append(best)
        taken[best] = True
        np.maximum(
            redundancy, _cosine(cands, norms, cands[best], float(norms[best])), out=redundancy
        )
    return picked
