"""The pg store's answers to the search kinds of ``actors/_search.py``.

:func:`actors._search.rank` holds every rule (threshold, rank numbering, MMR, fusion);
this module reads the lists it asks for: the exact dense top-k (``reads.py``), BM25's
top-k (computed in SQL, see ``reads.py``), the candidates' vectors and the hits' rows.
The metadata filter is part of each statement's WHERE clause, so it narrows the
candidates before top-k, and ``k`` hits come back whenever ``k`` entries match. A
search is one transaction, ``REPEATABLE READ`` when it runs more than one statement, so
every list and every document come from one snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from protocol import ScoredDocument, SearchRequest

from .._prepare import clamp_k
from .._search import Candidate, Pick, rank
from .filters import FilterSql, translate
from .reads import DocRow, Reads

__all__ = ["run_search"]

_METADATA = sql.Identifier("metadata")


@attrs.define
class _PgBackend:
    """One search's statements, on one connection (one transaction)."""

    conn: psycopg.Connection[Any]
    reads: Reads
    query: str
    namespace: str
    where: FilterSql
    rows: dict[int, DocRow] = attrs.field(factory=dict)
    vecs: dict[int, npt.NDArray[np.float32]] = attrs.field(factory=dict)

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        hits = self.reads.dense(
            self.conn, self.query, depth, self.namespace, self.where, vectors=vectors
        )
        out = []
        for row, score, vec in hits:
            self.rows[row.seq] = row
            if vec is not None:
                self.vecs[row.seq] = vec
            # The raw score is pgvector's distance (<#>, the negative inner product).
            out.append(Candidate(row.seq, score, 0.0 - score))
        return out

    def bm25(self, text: str, depth: int) -> list[Candidate]:
        sparse = self.reads.bm25(self.conn, text, depth, self.namespace, self.where)
        return [Candidate(seq, score, score) for seq, score in sparse]

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        return np.stack([self.vecs[key] for key in keys])

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        missing = [key for key, _, _, _ in picks if key not in self.rows]
        if missing:
            self.rows.update(self.reads.by_seqs(self.conn, missing))
        return [self.rows[key].scored(score, ranks, raw) for key, score, raw, ranks in picks]


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
    k, fetch_k = clamp_k(request.k, max_entries), clamp_k(request.fetch_k, max_entries)
    if request.kind in ("hybrid", "bm25"):  # bm25 reads its hits' rows in a second statement
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        reads.check_keyword_index(conn)  # before the dense list, which a hybrid reads first
    backend = _PgBackend(conn, reads, query, namespace, where)
    return rank(request, backend, k, fetch_k, vector)
