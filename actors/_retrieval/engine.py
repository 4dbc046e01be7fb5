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
in-memory store answers them here (:class:`_MemoryView`), the PostgreSQL store in
``actors/_pg/search.py``.

A view is made for one search and reads one snapshot: in memory, the scan engine's
pinned rows (no commit interleaves with the synchronous ranking on the trio thread);
on pg, one read-only ``REPEATABLE READ`` transaction. The query vector, the namespace,
the filter and the time window (``since``/``until``) are bound when it is built. A
filter and a time window narrow the candidates before top-k, so ``k`` hits come back
whenever ``k`` entries match.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import msgspec
import numpy as np
import numpy.typing as npt
import trio

from protocol import RetrievedTurn, ScoredDocument, SearchRequest, SparseVector

from .._inmemory.arena import Snapshot
from .._inmemory.filtering import compile_filter
from .._inmemory.scan import ScanResult
from .._store.prepare import clamp_k
from .fusion import mmr, rrf
from .recall import Shaped, rank_recall, recall_depth, shape
from .view import Candidate, Pick, View

if TYPE_CHECKING:
    from .._inmemory.actor import _StoreActor

__all__ = ["depths", "rank", "run_search"]


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


@attrs.define
class _MemoryView:
    """The in-memory store's answers, read on the trio thread from the scan's pinned
    snapshot (or, before a scan, from the last commit, with no await in between)."""

    actor: _StoreActor
    namespace: str
    result: ScanResult | None
    mask: npt.NDArray[np.bool_] | None
    query: npt.NDArray[np.float32] | None = None
    sparse_query: SparseVector | None = None

    @property
    def scanned(self) -> int:
        return 0 if self.result is None else self.result.scanned

    @property
    def exact(self) -> bool:
        return True

    def version(self) -> object:
        return self.actor.snapshot.version

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        assert self.result is not None, "a bm25 search has no dense list"
        pairs = zip(
            self.result.slots[:depth].tolist(), self.result.scores[:depth].tolist(), strict=True
        )
        # + 0.0 turns -0.0 into 0.0, as in retrieve.
        return [Candidate(slot, score + 0.0, score + 0.0) for slot, score in pairs]

    def cosines(self, keys: Sequence[int]) -> dict[int, float]:
        if not keys:
            return {}
        slots = np.array(keys, dtype=np.intp)
        scores = self.actor.scans._exact(slots, self.query).tolist()
        return {slot: score + 0.0 for slot, score in zip(keys, scores, strict=True)}

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

    def texts(self, keys: Sequence[int], *, projections: bool) -> dict[int, str]:
        read = self.actor.projection_of if projections else self.actor.arena.index_text_of
        return {slot: read(slot) for slot in keys}

    def days(self, keys: Sequence[int]) -> dict[int, dt.date]:
        occurred_at = self.actor.arena.occurred_at_of
        return {slot: occurred_at(slot).date() for slot in keys}

    def neighbors(self, keys: Sequence[int]) -> dict[int, int]:
        found = self.actor.arena.neighbor_keys(np.array(keys, dtype=np.intp))
        return dict(zip(keys, found.tolist(), strict=True))

    def term_counts(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        arena = self.actor.arena
        group = arena.namespace_id(self.namespace)
        if group is None:
            return 0, dict.fromkeys(terms, 0)
        return arena.bm25().term_counts(terms, group)

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        rows: npt.NDArray[np.float32] = self.actor.vectors[list(keys)]
        return rows

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        actor, seqs = self.actor, self.actor.arena.seqs
        # + 0.0 turns -0.0 into 0.0, as in retrieve.
        return [
            ScoredDocument(
                document=actor.document_of(p.key),
                score=p.score + 0.0,
                ranks=p.ranks,
                sequence=int(seqs[p.key]),
                raw_score=p.raw + 0.0,
                rank=p.rank,
                channels=list(p.channels),
            )
            for p in picks
        ]

    def turns(self, picks: Sequence[Pick]) -> list[RetrievedTurn]:
        slots = np.array([p.key for p in picks], dtype=np.intp)
        turns = self.actor.turns_at(slots, [p.score for p in picks])
        return [
            t if p.rank is None else _ranked_turn(t, p) for t, p in zip(turns, picks, strict=True)
        ]


def _ranked_turn(turn: RetrievedTurn, pick: Pick) -> RetrievedTurn:
    return msgspec.structs.replace(turn, rank=pick.rank, channels=list(pick.channels))


async def run_search(
    actor: _StoreActor,
    request: SearchRequest,
    namespace: str,
    embed: Callable[[str], Awaitable[npt.NDArray[np.float32] | None]],
    query: npt.NDArray[np.float32] | None,
    *,
    sparse: SparseVector | None = None,
    turns: bool = False,
) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
    """Run ``request`` in ``namespace`` on the in-memory store; returns the hits
    (documents, or with ``turns`` turns) and how many entries the scan scored.

    ``query`` is the normalized dense query vector of a kind other than ``recall``
    (None: zero), ``embed`` what recall embeds its shaped query with, and ``sparse``
    (for a hybrid search on a store with a sparse model) the query's sparse vector. The
    scan engine scores the query, then :func:`rank` runs on the trio thread while the
    scanned rows are pinned. A ``bm25`` search scans nothing: it runs on the trio
    thread after a checkpoint, against the last commit. Recall reads its keyword list
    first, on the trio thread with no await in between, then embeds, then scans."""
    arena = actor.arena
    compiled = None if request.filter is None else compile_filter(request.filter)
    scoped = compiled is not None or request.since is not None or request.until is not None
    k, depth = depths(request, actor.config.max_entries)
    # The mask of the snapshot the scan runs on, kept for BM25 (same snapshot).
    masks: list[npt.NDArray[np.bool_]] = []

    def mask_now(high: int) -> npt.NDArray[np.bool_] | None:
        """The filter's mask and the time window's, of the first ``high`` slots."""
        if not scoped:
            return None
        mask = None if compiled is None else arena.meta.mask(compiled, high)
        if request.since is not None or request.until is not None:
            window = arena.time_mask(request.since, request.until, high)
            mask = window if mask is None else mask & window
        assert mask is not None
        return mask

    def mask_of(snap: Snapshot) -> npt.NDArray[np.bool_]:
        mask = mask_now(snap.high)
        assert mask is not None
        masks.append(mask)
        return mask

    def built(
        view: _MemoryView, picks: list[Pick]
    ) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
        return (view.turns(picks) if turns else view.hits(picks)), view.scanned

    if request.kind == "bm25":
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        view = _MemoryView(actor, namespace, None, mask_now(actor.snapshot.high))
        return built(view, rank(request, view, k, 0, None))
    shaped = None
    if request.kind == "recall":
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        first = _MemoryView(actor, namespace, None, mask_now(actor.snapshot.high))
        shaped = shape(request, first, depth)
        query = await embed(shaped.embedded)

    def build(result: ScanResult) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
        view = _MemoryView(
            actor,
            namespace,
            result,
            masks[-1] if masks else None,
            query=query,
            sparse_query=sparse,
        )
        keyword = None if sparse is None else view.sparse
        return built(
            view, rank(request, view, k, depth, query, sparse_list=keyword, shaped=shaped)
        )

    reply: tuple[list[ScoredDocument] | list[RetrievedTurn], int] = await actor.scans.scan(
        query,
        depth,
        namespace,
        mask=mask_of if scoped else None,
        build=build,
    )
    return reply
