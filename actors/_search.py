"""The store's search kinds (design §9) over the one exact scan.

``similarity`` ranks the scan's top-k; ``mmr`` re-ranks the exact top ``fetch_k`` for
diversity; ``hybrid`` fuses the dense top ``fetch_k`` with BM25's top ``fetch_k`` by
reciprocal rank fusion. A metadata filter becomes a per-slot mask inside the scan, so
it narrows the candidates before top-k and ``k`` hits come back whenever ``k`` entries
match. Every reply is built on the trio thread while the scanned rows are pinned, so
the dense scores, the BM25 list, the vectors MMR reads and the documents returned all
come from one snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from protocol import ScoredDocument, SearchRequest

from ._arena import Snapshot
from ._filtering import compile_filter
from ._fusion import mmr, rrf
from ._scan import ScanResult

if TYPE_CHECKING:
    from ._store import _StoreActor

__all__ = ["run_search"]


async def run_search(
    actor: _StoreActor,
    request: SearchRequest,
    namespace: str,
    query: npt.NDArray[np.float32] | None,
) -> list[ScoredDocument]:
    """Run ``request`` in ``namespace`` with the (normalized) dense ``query``."""
    arena = actor.arena
    threshold = request.score_threshold
    compiled = None if request.filter is None else compile_filter(request.filter)
    # The filter mask of the snapshot the scan runs on, kept for BM25 (same snapshot).
    masks: list[npt.NDArray[np.bool_]] = []

    def mask_of(snap: Snapshot) -> npt.NDArray[np.bool_]:
        assert compiled is not None
        mask = arena.meta.mask(compiled, snap.high)
        masks.append(mask)
        return mask

    def hit(slot: int, score: float, ranks: dict[str, int]) -> ScoredDocument:
        # + 0.0 turns -0.0 into 0.0, as in retrieve.
        return ScoredDocument(
            document=actor.document_of(slot),
            score=score + 0.0,
            ranks=ranks,
            sequence=int(arena.seqs[slot]),
        )

    def similarity(result: ScanResult) -> list[ScoredDocument]:
        pairs = zip(result.slots.tolist(), result.scores.tolist(), strict=True)
        return [
            hit(slot, score, {"dense": rank})
            for rank, (slot, score) in enumerate(pairs, start=1)
            if threshold is None or score >= threshold
        ]

    def diverse(result: ScanResult) -> list[ScoredDocument]:
        candidates = [
            (rank, slot, score)
            for rank, (slot, score) in enumerate(
                zip(result.slots.tolist(), result.scores.tolist(), strict=True), start=1
            )
            if threshold is None or score >= threshold
        ]
        if not candidates:
            return []
        rows = actor.vectors[[slot for _, slot, _ in candidates]]
        q: Any = np.zeros(rows.shape[1], dtype=np.float32) if query is None else query
        chosen = mmr(q, rows, request.k, request.lambda_mult)
        return [
            hit(candidates[i][1], candidates[i][2], {"dense": candidates[i][0]}) for i in chosen
        ]

    def hybrid(result: ScanResult) -> list[ScoredDocument]:
        dense = result.slots.tolist()
        group = arena.namespace_id(namespace)
        sparse: list[int] = []
        if group is not None and request.query is not None:
            found, _ = arena.bm25().top(
                request.query,
                request.fetch_k,
                mask=masks[-1] if masks else None,
                seqs=actor.seqs,
                group=group,
            )
            sparse = found.tolist()
        fused = rrf(
            {"dense": dense, "bm25": sparse},
            k=request.rrf_k,
            weights=request.weights,
            limit=request.k,
        )
        return [hit(h.key, h.score, dict(h.ranks)) for h in fused]

    builders = {"similarity": similarity, "mmr": diverse, "hybrid": hybrid}
    depth = request.k if request.kind == "similarity" else request.fetch_k
    reply: list[ScoredDocument] = await actor.scans.scan(
        query,
        depth,
        namespace,
        mask=None if compiled is None else mask_of,
        build=builders[request.kind],
    )
    return reply
