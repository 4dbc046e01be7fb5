"""The pg store's answers to the engine (``actors/_retrieval/engine.py``,
``actors/_retrieval/recall.py``).

:func:`actors._retrieval.engine.rank` holds every rule (threshold, rank numbering, MMR, fusion,
recall's stages); this module reads what it asks for: the exact dense top-k
(``reads.py``), BM25's top-k (computed in SQL, see ``reads.py``), cosines, texts and
term statistics of some candidates, and the hits' rows. The metadata filter is part of
each statement's WHERE clause, so it narrows the candidates before top-k, and ``k``
hits come back whenever ``k`` entries match. A search is one transaction,
``REPEATABLE READ READ ONLY`` when it runs more than one statement, so every list, text
and document come from one snapshot. A recall embeds its shaped query inside that
transaction (``embed``, which calls back into trio from the worker thread).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import attrs
import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from protocol import RetrievedTurn, ScoredDocument, SearchRequest

from .._inmemory.conversations import CONVERSATION_SHIFT
from .._retrieval.engine import depths, rank
from .._retrieval.recall import shape
from .._retrieval.view import Candidate, Pick
from .filters import FilterSql, Visibility, and_time_window, translate
from .reads import DocRow, Reads
from .schema import vector_literal

__all__ = ["run_search"]

_METADATA = sql.Identifier("metadata")


@attrs.define
class _PgView:
    """One search's statements, on one connection (one transaction)."""

    conn: psycopg.Connection[TupleRow]
    reads: Reads
    query: str
    namespace: str
    where: FilterSql
    vis: Visibility
    rows: dict[int, DocRow] = attrs.field(factory=dict)
    vecs: dict[int, npt.NDArray[np.float32]] = attrs.field(factory=dict)
    scanned: int = 0

    @property
    def exact(self) -> bool:
        return not self.reads.hnsw

    def version(self) -> object:
        return 0  # one transaction: one snapshot

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        hits = self.reads.dense(
            self.conn, self.query, depth, self.namespace, self.where, self.vis, vectors=vectors
        )
        out = []
        for row, score, vec in hits:
            self.rows[row.seq] = row
            if vec is not None:
                self.vecs[row.seq] = vec
            # The raw score is pgvector's distance (<#>, the negative inner product).
            out.append(Candidate(row.seq, score, 0.0 - score))
        return out

    def cosines(self, keys: Sequence[int]) -> dict[int, float]:
        if not keys:
            return {}
        return self.reads.cosines(self.conn, self.query, list(keys), self.vis)

    def bm25(self, text: str, depth: int) -> list[Candidate]:
        sparse = self.reads.bm25(self.conn, text, depth, self.namespace, self.where, self.vis)
        return [Candidate(seq, score, score) for seq, score in sparse]

    def _rows(self, keys: Sequence[int]) -> dict[int, DocRow]:
        missing = [key for key in dict.fromkeys(keys) if key not in self.rows]
        if missing:
            self.rows.update(self.reads.by_seqs(self.conn, missing, self.vis))
        return self.rows

    def texts(self, keys: Sequence[int], *, projections: bool) -> dict[int, str]:
        rows = self._rows(keys)
        return {
            key: row.projection() if projections else row.indexed()
            for key in keys
            if (row := rows.get(key)) is not None
        }

    def days(self, keys: Sequence[int]) -> dict[int, dt.date]:
        rows = self._rows(keys)
        return {key: row.occurred_at.date() for key in keys if (row := rows.get(key))}

    def neighbors(self, keys: Sequence[int]) -> dict[int, int]:
        """As the in-memory arena keys them (``Arena.neighbor_keys``): an entry of a
        conversation is ``(code << CONVERSATION_SHIFT) | position``, with a code per
        conversation drawn for this view; any other entry is its sequence number."""
        rows = self._rows(keys)
        codes: dict[str, int] = {}
        out = {}
        for key in keys:
            row = rows[key]
            if row.conversation is None or row.position is None:
                out[key] = key
            else:
                code = codes.setdefault(row.conversation, len(codes) + 1)
                out[key] = (code << CONVERSATION_SHIFT) | row.position
        return out

    def term_counts(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        return self.reads.term_counts(self.conn, list(terms), self.namespace, self.vis)

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        return np.stack([self.vecs[key] for key in keys])

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        rows = self._rows([p.key for p in picks])
        return [
            rows[p.key].scored(p.score, p.ranks, p.raw, rank=p.rank, channels=p.channels)
            for p in picks
        ]

    def turns(self, picks: Sequence[Pick]) -> list[RetrievedTurn]:
        rows = self._rows([p.key for p in picks])
        return [rows[p.key].turn(p.score, rank=p.rank, channels=p.channels) for p in picks]


def run_search(
    conn: psycopg.Connection[TupleRow],
    reads: Reads,
    request: SearchRequest,
    namespace: str,
    vector: npt.NDArray[np.float32],
    max_entries: int,
    embed: Callable[[str], npt.NDArray[np.float32]],
    now: dt.datetime,
    turns: bool = False,
) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
    """Run ``request`` in ``namespace``: the hits (documents, or with ``turns`` turns)
    and how many entries the namespace holds. ``vector`` is the normalized query
    (zeros for a zero query, or for a recall, which embeds its shaped query with
    ``embed``). Every statement sees the versions :class:`Visibility` says: current
    and unexpired at ``now`` (the store clock's), or those valid at
    ``request.as_of``."""
    vis = Visibility(now, request.as_of)
    where = and_time_window(translate(request.filter, _METADATA), request.since, request.until)
    k, depth = depths(request, max_entries)
    keyword = request.kind in ("hybrid", "bm25") or (
        request.kind == "recall" and request.recall_settings.search == "hybrid"
    )
    if keyword or request.kind == "recall" or turns:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
    if keyword:
        reads.check_keyword_index(conn)  # before the dense list, which a hybrid reads first
    view = _PgView(conn, reads, vector_literal(vector), namespace, where, vis)
    shaped = None
    if request.kind == "recall":
        shaped = shape(request, view, depth)
        vector = embed(shaped.embedded)
        view.query = vector_literal(vector)
    if turns:
        view.scanned = reads.entries_in(conn, namespace, vis)
    picks = rank(request, view, k, depth, vector, shaped=shaped)
    return (view.turns(picks) if turns else view.hits(picks)), view.scanned
