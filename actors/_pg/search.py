"""The pg store's search kinds, with the in-memory store's semantics (``_search.py``).

``similarity`` ranks the exact top-k; ``mmr`` reads the exact top ``fetch_k`` with their
vectors and re-ranks them with :func:`actors._fusion.mmr`; ``hybrid`` fuses the dense top
``fetch_k`` with BM25's top ``fetch_k`` (computed in SQL, see ``reads.py``) by
:func:`actors._fusion.rrf`. The metadata filter is part of each statement's WHERE
clause, so it narrows the candidates before top-k, and ``k`` hits come back whenever
``k`` entries match. A search is one transaction, ``REPEATABLE READ`` when it runs more
than one statement, so every list and every document come from one snapshot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from protocol import ScoredDocument, SearchRequest

from .._fusion import mmr, rrf
from .._prepare import clamp_k
from .filters import translate
from .reads import Reads

__all__ = ["run_search"]

_METADATA = sql.Identifier("metadata")


def run_search(
    conn: psycopg.Connection[Any],
    reads: Reads,
    request: SearchRequest,
    namespace: str,
    query: str,
    vector: npt.NDArray[np.float32],
    max_entries: int,
) -> list[ScoredDocument]:
    """Run ``request`` in ``namespace``; ``query`` is the normalized query's pgvector
    literal and ``vector`` the same query as float32 (zeros for a zero query).

    ``k`` and ``fetch_k`` are cut to ``max_entries`` (the table's cap) first: a request
    may ask for any number, and a LIMIT is a ``bigint``."""
    where = translate(request.filter, _METADATA)
    threshold = request.score_threshold
    k, fetch_k = clamp_k(request.k, max_entries), clamp_k(request.fetch_k, max_entries)
    if request.kind == "similarity":
        hits = reads.dense(conn, query, k, namespace, where)
        return [
            row.scored(score, {"dense": rank})
            for rank, (row, score, _) in enumerate(hits, start=1)
            if threshold is None or score >= threshold
        ]
    if request.kind == "mmr":
        hits = reads.dense(conn, query, fetch_k, namespace, where, vectors=True)
        candidates = [
            (rank, row, score, vec)
            for rank, (row, score, vec) in enumerate(hits, start=1)
            if threshold is None or score >= threshold
        ]
        if not candidates:
            return []
        matrix = np.stack([c[3] for c in candidates if c[3] is not None])
        chosen = mmr(vector, matrix, k, request.lambda_mult)
        return [
            candidates[i][1].scored(candidates[i][2], {"dense": candidates[i][0]}) for i in chosen
        ]
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
    dense = reads.dense(conn, query, fetch_k, namespace, where)
    assert request.query is not None
    sparse = reads.bm25(conn, request.query, fetch_k, namespace, where)
    rows = {row.seq: row for row, _, _ in dense}
    fused = rrf(
        {"dense": [row.seq for row, _, _ in dense], "bm25": [seq for seq, _ in sparse]},
        k=request.rrf_k,
        weights=request.weights,
        limit=k,
    )
    missing = [hit.key for hit in fused if hit.key not in rows]
    if missing:
        rows.update(reads.by_seqs(conn, missing))
    return [rows[hit.key].scored(hit.score, dict(hit.ranks)) for hit in fused]
