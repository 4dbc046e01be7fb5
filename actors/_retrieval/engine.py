"""The retrieval engine: every search kind, written once over one snapshot view (design §9).

``recall`` is the engine's tuned recall (``actors/_retrieval/recall.py``: keyword and dense lists,
fusion, neighbours, speaker focus, the time channel, entity links, content dedupe), what
``Memory.retrieve`` and every door run by default. ``similarity`` ranks the dense top-k;
``mmr`` re-ranks the dense top ``fetch_k`` for diversity; ``hybrid`` fuses the dense top
``fetch_k`` with BM25's top ``fetch_k`` by reciprocal rank fusion; ``bm25`` ranks by
keywords alone (the query is not embedded). An in-memory store opened with a sparse
model fuses its sparse ranking (``actors/_inmemory/sparse_index.py``, list ``"sparse"``,
weighed by ``weights["bm25"]``) in place of BM25's in ``hybrid``; ``bm25`` and recall
still mean BM25.

:func:`rank` is the one place these rules live (the score threshold, rank numbering,
MMR's candidates, the fusion, recall's stages); a backend only answers the questions
of :class:`View`: the dense list, the BM25 list, cosines, texts, term statistics and
neighbour keys of some candidates, and the documents or turns of the hits. The
in-memory store answers them in ``actors/_inmemory/view.py``, the PostgreSQL store in
``actors/_pg/search.py``.

A view is made for one search and reads one snapshot: in memory, the scan engine's
pinned rows (no commit interleaves with the synchronous ranking on the trio thread);
on pg, one read-only ``REPEATABLE READ`` transaction. The query vector, the namespace,
the filter and the time window (``since``/``until``) are bound when it is built. A
filter and a time window narrow the candidates before top-k, so ``k`` hits come back
whenever ``k`` entries match.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from protocol import SearchRequest

from .._store.prepare import clamp_k
from .fusion import mmr, rrf
from .recall import Shaped, rank_recall, recall_depth
from .view import Candidate, Pick, View

__all__ = ["depths", "rank"]


def depths(request: SearchRequest, capacity: int) -> tuple[int, int]:
    """``k`` and the depth of the lists a request reads, cut to the store's capacity (a
    request may ask for any number, and a LIMIT is a ``bigint``)."""
    k = clamp_k(request.k, capacity)
    if request.kind == "recall":
        return k, clamp_k(recall_depth(request, k), capacity)
    if request.kind in ("mmr", "hybrid"):
        return k, clamp_k(request.fetch_k, capacity)
    return k, k


def rank(
    request: SearchRequest,
    view: View,
    k: int,
    depth: int,
    query: npt.NDArray[np.float32] | None,
    *,
    sparse_list: Callable[[int], list[Candidate]] | None = None,
    shaped: object = None,
) -> list[Pick]:
    """``request``'s hits from ``view``, as picks; ``k`` and ``depth`` are from
    :func:`depths`, and ``query`` the normalized query vector (None: zero).
    ``sparse_list`` (depth → the sparse top ``depth``), when given, is hybrid's keyword
    list instead of BM25's, named ``"sparse"`` and weighed by ``weights["bm25"]``.
    ``shaped``: for ``recall``, what :func:`actors._retrieval.recall.shape` read before the query
    was embedded."""
    threshold = request.score_threshold
    if request.kind == "recall":
        assert isinstance(shaped, Shaped)
        return rank_recall(request, view, shaped, k, depth)
    if request.kind in ("similarity", "mmr"):
        kept = [
            (place, c)
            for place, c in enumerate(view.dense(depth, vectors=request.kind == "mmr"), 1)
            if threshold is None or c.score >= threshold
        ]
        if request.kind == "mmr" and kept:
            rows = view.vectors([c.key for _, c in kept])
            q = np.zeros(rows.shape[1], dtype=np.float32) if query is None else query
            kept = [kept[i] for i in mmr(q, rows, k, request.lambda_mult)]
        return [Pick(c.key, c.score, c.raw, {"dense": place}) for place, c in kept]
    assert request.query is not None
    if request.kind == "bm25":
        sparse = view.bm25(request.query, k)
        # BM25 scores are unbounded: the documented score is the best hit's share.
        best = sparse[0].score if sparse else 1.0
        return [
            Pick(c.key, c.score / best, c.raw, {"bm25": place})
            for place, c in enumerate(sparse, 1)
        ]
    dense = view.dense(depth)
    weights = request.weights
    if sparse_list is None:
        keyword = ("bm25", view.bm25(request.query, depth))
    else:
        keyword = ("sparse", sparse_list(depth))
        if weights is not None and "bm25" in weights:
            weights = {**weights, "sparse": weights["bm25"]}
            del weights["bm25"]
    fused = rrf(
        {"dense": [c.key for c in dense], keyword[0]: [c.key for c in keyword[1]]},
        k=request.rrf_k,
        weights=weights,
        limit=k,
    )
    return [Pick(h.key, h.score, h.score, dict(h.ranks)) for h in fused]
