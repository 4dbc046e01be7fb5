"""Result fusion and diversification: reciprocal rank fusion and MMR.

Both are pure functions over ranked candidates, so the in-memory store and any other
backend fuse and diversify the same way.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from protocol import ConfigError
from protocol.checks import check_int

__all__ = ["RRF_K", "Fused", "FusedHit", "fuse", "lend", "mmr", "neighbor_boost", "rrf"]

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
    """Reciprocal rank fusion of ranked lists, best first: :func:`fuse` (the one
    fusion every search kind and recall use), with each hit's ranks.

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
    fused = fuse(lists, k=k, weights=weights)
    ranks: dict[K, dict[str, int]] = {}
    for name, keys in lists.items():
        for rank, key in enumerate(keys, start=1):
            ranks.setdefault(key, {})[name] = rank
    end = len(fused.keys) if limit is None else min(limit, len(fused.keys))
    scores = fused.scores.tolist()
    return [
        FusedHit(key=key, score=scores[i], ranks=ranks[key])
        for i, key in enumerate(fused.keys[:end])
    ]


def neighbor_boost(
    hits: Sequence[FusedHit[K]], sequences: Mapping[K, int], weight: float
) -> list[FusedHit[K]]:
    """Lend each hit ``weight`` times the better fused score of its two neighbours
    (:func:`lend`, the step recall runs after :func:`fuse`), over :class:`FusedHit`.

    Neighbours are the entries whose neighbour keys (``sequences``) differ by one: for
    a conversation's turns, the turns said just before and after. The evidence for a
    question often sits beside the turn that matches it best (the answer after the
    question, the detail after the topic), so a turn whose neighbour is a strong hit is
    likelier to matter than its own score says. A neighbour that is not among ``hits``
    lends nothing; a hit without a key borrows nothing. Ties keep the order of
    ``hits``, so the result is deterministic.

    Args:
        hits: fused hits, best first (``rrf`` with no limit).
        sequences: each hit's neighbour key (its sequence number, for entries that
            belong to no conversation).
        weight: the share of the neighbour's score lent, finite and >= 0.
    """
    keys = [h.key for h in hits]
    scores = np.array([h.score for h in hits], dtype=np.float64)
    lent = lend(keys, scores, sequences, weight)
    by_key = {h.key: h for h in hits}
    return [
        FusedHit(key=key, score=score, ranks=by_key[key].ranks)
        for key, score in zip(lent.keys, lent.scores.tolist(), strict=True)
    ]


@attrs.frozen(slots=True)
class Fused(Generic[K]):
    """Fused keys, best first, with their scores; ``lent`` is what each borrowed from
    its neighbours (zeros when nothing was lent)."""

    keys: list[K]
    scores: npt.NDArray[np.float64]
    lent: npt.NDArray[np.float64]


def fuse(
    lists: Mapping[str, Sequence[K]],
    *,
    k: float,
    weights: Mapping[str, float] | None = None,
) -> Fused[K]:
    """The one fusion: reciprocal rank fusion of ``lists`` over arrays, best first.

    A hit at 1-based rank ``r`` in list ``L`` earns ``weights[L] / (k + r)``, summed in
    the order of ``lists`` (``0.0 + w / (k + r)``, list by list: the floats are the
    same whatever the number of lists); ties go to the best (rank, list index) pair, so
    the order is total. :func:`rrf` checks the arguments and adds the ranks; hybrid
    search and recall call this directly, with arguments already checked.

    Raises:
        ConfigError: a key repeated within one list.
    """
    weights = {} if weights is None else weights
    # Each key's column, in order of first appearance (a dict keeps insertion order).
    index: dict[K, int] = {}
    claim = index.setdefault
    positions: list[npt.NDArray[np.intp]] = []
    for name, members in lists.items():
        # Recall fuses two lists of 200: per-element numpy writes cost more than this.
        at = [claim(key, len(index)) for key in members]
        if len(set(at)) != len(at):
            seen: set[K] = set()
            for key in members:
                if key in seen:
                    raise ConfigError(f"list {name!r} holds {key!r} more than once")
                seen.add(key)
        positions.append(np.array(at, dtype=np.intp))
    keys = list(index)
    m = len(keys)
    scores = np.zeros(m, dtype=np.float64)
    best_rank = np.full(m, np.inf, dtype=np.float64)
    best_list = np.zeros(m, dtype=np.intp)
    for list_index, (name, cols) in enumerate(zip(lists, positions, strict=True)):
        ranks = np.arange(1, cols.shape[0] + 1, dtype=np.float64)
        scores[cols] += float(weights.get(name, 1.0)) / (k + ranks)
        better = ranks < best_rank[cols]
        best_rank[cols[better]] = ranks[better]
        best_list[cols[better]] = list_index
    order = np.lexsort((best_list, best_rank, -scores))
    return Fused([keys[i] for i in order.tolist()], scores[order], np.zeros(m, dtype=np.float64))


def lend(
    keys: Sequence[K],
    scores: npt.NDArray[np.float64],
    neighbors: Mapping[K, int],
    weight: float,
) -> Fused[K]:
    """``keys`` (best first, with their ``scores``) once each has borrowed ``weight``
    times the better score of its two neighbours among them: the hits whose neighbour
    keys (``neighbors``) are one below and one above its own. Re-sorted best first,
    ties in the order given. The lender of a key held by two hits is the later one.
    ``weight`` 0 (or no hits) returns them as they are."""
    m = len(keys)
    if weight <= 0 or not m:
        return Fused(list(keys), scores, np.zeros(m, dtype=np.float64))
    seq_of = [neighbors.get(key) for key in keys]
    has = np.array([s is not None for s in seq_of], dtype=np.bool_)
    seqs = np.array([0 if s is None else s for s in seq_of], dtype=np.int64)
    by_seq = np.argsort(seqs[has], kind="stable")
    lender_seqs, lender_scores = seqs[has][by_seq], scores[has][by_seq]
    last = np.ones(lender_seqs.shape[0], dtype=np.bool_)
    last[:-1] = lender_seqs[1:] != lender_seqs[:-1]
    lender_seqs, lender_scores = lender_seqs[last], lender_scores[last]
    lent = np.maximum(
        _lent(lender_seqs, lender_scores, seqs - 1),
        _lent(lender_seqs, lender_scores, seqs + 1),
    )
    lent[~has] = 0.0
    lent *= float(weight)
    boosted = scores + lent
    again = np.argsort(-boosted, kind="stable")
    return Fused([keys[i] for i in again.tolist()], boosted[again], lent[again])


def _lent(
    seqs: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], wanted: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """The score of the hit with each ``wanted`` key (``seqs`` ascending, distinct), 0.0
    where there is none."""
    if seqs.shape[0] == 0:
        return np.zeros(wanted.shape[0], dtype=np.float64)
    at = np.minimum(np.searchsorted(seqs, wanted), seqs.shape[0] - 1)
    out: npt.NDArray[np.float64] = np.where(seqs[at] == wanted, scores[at], 0.0)
    return out


def _as_matrix(what: str, value: npt.ArrayLike, ndim: int) -> npt.NDArray[np.float64]:
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
    query_vec: npt.ArrayLike,
    candidate_vecs: npt.ArrayLike,
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
