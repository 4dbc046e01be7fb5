"""Every search kind, written once over a small backend interface (design §9).

``similarity`` ranks the dense top-k; ``mmr`` re-ranks the dense top ``fetch_k`` for
diversity; ``hybrid`` fuses the dense top ``fetch_k`` with BM25's top ``fetch_k`` by
reciprocal rank fusion; ``bm25`` ranks by keywords alone (the query is not embedded).
An in-memory store opened with a sparse model fuses its sparse ranking
(``actors/_sparse_index.py``, list ``"sparse"``, weighed by ``weights["bm25"]``) in
place of BM25's in ``hybrid``; ``bm25`` still means BM25.
:func:`rank` is the one place these rules live (the score threshold, rank numbering,
MMR's candidates, the fusion); a backend only answers the questions of
:class:`SearchBackend`: the dense list, the BM25 list, the vectors of some candidates,
and the documents of the hits. The in-memory store answers them here
(:class:`_MemoryBackend`), the PostgreSQL store in ``actors/_pg/search.py``.

A backend is made for one search: the query vector, the namespace and the filter are
bound when it is built, because the in-memory dense list comes from the scan engine
(scored before :func:`rank` runs, on the rows it pins) and the pg lists from one
transaction. So every list, every vector and every document of one search come from
one snapshot on both backends. A metadata filter narrows the candidates before top-k,
so ``k`` hits come back whenever ``k`` entries match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs
import numpy as np
import numpy.typing as npt
import trio

from protocol import ScoredDocument, SearchRequest, SparseVector

from ._arena import Snapshot
from ._filtering import compile_filter
from ._fusion import mmr, rrf
from ._scan import ScanResult

if TYPE_CHECKING:
    from ._store_actor import _StoreActor

__all__ = ["Candidate", "Pick", "SearchBackend", "rank", "run_search"]


@attrs.frozen(slots=True)
class Candidate:
    """One entry of a ranked list.

    Attributes:
        key: how the backend finds the entry again (a slot, a sequence number).
        score: cosine similarity (dense) or the BM25 score (bm25).
        raw: the backend's own number for the ranking: the cosine in memory,
            pgvector's distance on pg, the BM25 score for BM25.
    """

    key: int
    score: float
    raw: float


# One hit to build: (key, score, raw score, ranks by list name).
Pick = tuple[int, float, float, dict[str, int]]


class SearchBackend(Protocol):
    """What a backend answers for one search (query, namespace and filter bound)."""

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        """The dense top ``depth``, best first, ties to the newest entry. ``vectors``:
        :meth:`vectors` will be asked about these candidates."""
        ...

    def bm25(self, text: str, depth: int) -> list[Candidate]:
        """BM25's top ``depth`` for ``text``, best first, ties to the newest entry."""
        ...

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        """The stored (normalized) vectors of dense candidates, one row per key."""
        ...

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        """The documents of ``picks``, in their order."""
        ...


def rank(
    request: SearchRequest,
    backend: SearchBackend,
    k: int,
    fetch_k: int,
    query: npt.NDArray[np.float32] | None,
    sparse_list: Callable[[int], list[Candidate]] | None = None,
) -> list[ScoredDocument]:
    """``request``'s hits from ``backend``; ``k`` and ``fetch_k`` are the request's, cut
    to the store's capacity, and ``query`` the normalized query vector (None: zero).
    ``sparse_list`` (depth → the sparse top ``depth``), when given, is hybrid's keyword list
    instead of BM25's, named ``"sparse"`` and weighed by ``weights["bm25"]``."""
    threshold = request.score_threshold
    if request.kind in ("similarity", "mmr"):
        depth = k if request.kind == "similarity" else fetch_k
        kept = [
            (place, c)
            for place, c in enumerate(backend.dense(depth, vectors=request.kind == "mmr"), 1)
            if threshold is None or c.score >= threshold
        ]
        if request.kind == "mmr" and kept:
            rows = backend.vectors([c.key for _, c in kept])
            q = np.zeros(rows.shape[1], dtype=np.float32) if query is None else query
            kept = [kept[i] for i in mmr(q, rows, k, request.lambda_mult)]
        return backend.hits([(c.key, c.score, c.raw, {"dense": place}) for place, c in kept])
    assert request.query is not None
    if request.kind == "bm25":
        sparse = backend.bm25(request.query, k)
        # BM25 scores are unbounded: the documented score is the best hit's share.
        best = sparse[0].score if sparse else 1.0
        return backend.hits(
            [(c.key, c.score / best, c.raw, {"bm25": place}) for place, c in enumerate(sparse, 1)]
        )
    dense = backend.dense(fetch_k)
    weights = request.weights
    if sparse_list is None:
        keyword = ("bm25", backend.bm25(request.query, fetch_k))
    else:
        keyword = ("sparse", sparse_list(fetch_k))
        if weights is not None and "bm25" in weights:
            weights = {**weights, "sparse": weights["bm25"]}
            del weights["bm25"]
    fused = rrf(
        {"dense": [c.key for c in dense], keyword[0]: [c.key for c in keyword[1]]},
        k=request.rrf_k,
        weights=weights,
        limit=k,
    )
    return backend.hits([(h.key, h.score, h.score, dict(h.ranks)) for h in fused])


@attrs.define
class _MemoryBackend:
    """The in-memory store's answers, read from the scan's pinned snapshot."""

    actor: _StoreActor
    namespace: str
    result: ScanResult | None
    mask: npt.NDArray[np.bool_] | None
    sparse_query: SparseVector | None = None

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        assert self.result is not None, "a bm25 search has no dense list"
        pairs = zip(
            self.result.slots[:depth].tolist(), self.result.scores[:depth].tolist(), strict=True
        )
        return [Candidate(slot, score, score) for slot, score in pairs]

    def bm25(self, text: str, depth: int) -> list[Candidate]:
        arena = self.actor.arena
        group = arena.namespace_id(self.namespace)
        if group is None:
            return []
        found, scores = arena.bm25().top(
            text, depth, mask=self.mask, seqs=self.actor.seqs, group=group
        )
        return [
            Candidate(slot, score, score)
            for slot, score in zip(found.tolist(), scores.tolist(), strict=True)
        ]

    def sparse(self, depth: int) -> list[Candidate]:
        """The sparse index's top ``depth`` for the bound sparse query."""
        actor, query = self.actor, self.sparse_query
        assert query is not None
        group = actor.arena.namespace_id(self.namespace)
        if group is None:
            return []
        found = actor.sparse.top(
            query, depth, ns_ids=actor.ns_ids, group=group, seqs=actor.seqs, mask=self.mask
        )
        return [Candidate(slot, score, score) for slot, score in found]

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        rows: npt.NDArray[np.float32] = self.actor.vectors[list(keys)]
        return rows

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        actor, seqs = self.actor, self.actor.arena.seqs
        # + 0.0 turns -0.0 into 0.0, as in retrieve.
        return [
            ScoredDocument(
                document=actor.document_of(slot),
                score=score + 0.0,
                ranks=ranks,
                sequence=int(seqs[slot]),
                raw_score=raw + 0.0,
            )
            for slot, score, raw, ranks in picks
        ]


async def run_search(
    actor: _StoreActor,
    request: SearchRequest,
    namespace: str,
    query: npt.NDArray[np.float32] | None,
    sparse: SparseVector | None = None,
) -> list[ScoredDocument]:
    """Run ``request`` in ``namespace`` on the in-memory store, with the normalized
    dense ``query`` (and, for a hybrid search on a store with a sparse model, the
    query's ``sparse`` vector): the scan engine scores it, then :func:`rank` runs on the trio
    thread while the scanned rows are pinned. A ``bm25`` search scans nothing: it
    runs on the trio thread after a checkpoint, against the last commit."""
    arena = actor.arena
    compiled = None if request.filter is None else compile_filter(request.filter)
    # The filter mask of the snapshot the scan runs on, kept for BM25 (same snapshot).
    masks: list[npt.NDArray[np.bool_]] = []

    def mask_of(snap: Snapshot) -> npt.NDArray[np.bool_]:
        assert compiled is not None
        mask = arena.meta.mask(compiled, snap.high)
        masks.append(mask)
        return mask

    def build(result: ScanResult) -> list[ScoredDocument]:
        backend = _MemoryBackend(
            actor, namespace, result, masks[-1] if masks else None, sparse_query=sparse
        )
        keyword = None if sparse is None else backend.sparse
        return rank(request, backend, request.k, request.fetch_k, query, keyword)

    if request.kind == "bm25":
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        high = actor.snapshot.high
        mask = None if compiled is None else arena.meta.mask(compiled, high)
        return rank(request, _MemoryBackend(actor, namespace, None, mask), request.k, 0, None)
    depth = request.k if request.kind == "similarity" else request.fetch_k
    reply: list[ScoredDocument] = await actor.scans.scan(
        query,
        depth,
        namespace,
        mask=None if compiled is None else mask_of,
        build=build,
    )
    return reply
