"""The in-memory store's answers to the retrieval engine: :class:`_MemoryView`, one
search's view of the arena (``actors/_retrieval/view.py`` says what a view answers), and
:func:`run_search`, which runs the engine's :func:`~actors._retrieval.engine.rank` over
it while the scanned rows are pinned. The PostgreSQL store's view is in
``actors/_pg/search.py``."""

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

from .._retrieval.engine import depths, rank
from .._retrieval.recall import shape
from .._retrieval.view import Candidate, Pick
from .arena import Snapshot, micros
from .filtering import compile_filter
from .scan import ScanResult

if TYPE_CHECKING:
    from .actor import _StoreActor

__all__ = ["_MemoryView", "run_search"]


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
    #: What the read sees (its versions' visibility alone, without a filter or a time
    #: window), or None when it sees every entry: BM25's statistics count only these.
    visible: npt.NDArray[np.bool_] | None = None

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
            text, depth, mask=self.mask, seqs=self.actor.seqs, group=group, stats=self.visible
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
        return arena.bm25().term_counts(terms, group, self.visible)

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
    k, depth = depths(request, actor.config.max_entries)
    # What this read sees (docs/pages/how-to/memory-over-time.md): the current versions, or those
    # valid at ``as_of``, unexpired by the store clock's now, taken once per read.
    now_us = actor.now_us()
    as_of_us = None if request.as_of is None else micros(request.as_of)
    # The masks of the snapshot the scan runs on, kept for BM25 (same snapshot).
    masks: list[tuple[npt.NDArray[np.bool_] | None, npt.NDArray[np.bool_] | None]] = []

    def masks_now(
        high: int,
    ) -> tuple[npt.NDArray[np.bool_] | None, npt.NDArray[np.bool_] | None]:
        """The mask of the first ``high`` slots (the filter's, the time window's and
        the versions' visibility; None when none narrows anything), and the visibility
        alone."""
        mask = None if compiled is None else arena.meta.mask(compiled, high)
        if request.since is not None or request.until is not None:
            window = arena.time_mask(request.since, request.until, high)
            mask = window if mask is None else mask & window
        visible = arena.visible(high, now_us, as_of_us, namespace)
        if visible is not None:
            mask = visible if mask is None else mask & visible
        return mask, visible

    def view_now(high: int) -> _MemoryView:
        mask, visible = masks_now(high)
        return _MemoryView(actor, namespace, None, mask, visible=visible)

    def mask_of(snap: Snapshot) -> npt.NDArray[np.bool_] | None:
        both = masks_now(snap.high)
        masks.append(both)
        return both[0]

    def built(
        view: _MemoryView, picks: list[Pick]
    ) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
        return (view.turns(picks) if turns else view.hits(picks)), view.scanned

    if request.kind == "bm25":
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        view = view_now(actor.snapshot.high)
        return built(view, rank(request, view, k, 0, None))
    shaped = None
    if request.kind == "recall":
        await trio.lowlevel.checkpoint()
        actor.check_usable()
        first = view_now(actor.snapshot.high)
        shaped = shape(request, first, depth)
        query = await embed(shaped.embedded)

    def build(result: ScanResult) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
        mask, visible = masks[-1] if masks else (None, None)
        view = _MemoryView(
            actor, namespace, result, mask, query=query, sparse_query=sparse, visible=visible
        )
        keyword = None if sparse is None else view.sparse
        return built(
            view, rank(request, view, k, depth, query, sparse_list=keyword, shaped=shaped)
        )

    reply: tuple[list[ScoredDocument] | list[RetrievedTurn], int] = await actor.scans.scan(
        query,
        depth,
        namespace,
        mask=mask_of,
        build=build,
    )
    return reply
