"""The pg store's reads: retrieve, search (similarity, MMR, hybrid) and get_by_ids.

Each read runs in one transaction. A read of one statement sees one committed state;
a hybrid search runs several statements, so its transaction is ``REPEATABLE READ``: the
dense list, the BM25 list and the documents come from one snapshot.

**BM25 runs in SQL**, over the ``T_terms`` postings that each write fills (the tokens
come from ``actors._retrieval.bm25.tokenize``, in Python, so both stores tokenize alike). A query
reads the postings of its own terms only, each with its entry's length, through the
``(namespace, term) INCLUDE (seq, tf, doc_len)`` index alone, and the namespace's N and
total length from its ``T_ns`` row, so its cost grows with the postings of the query's
terms, not with the table. Only a filtered search joins the entries, for their metadata.
(At 1M entries the join, for ``doc_len``, and the namespace's count were 1.9 of a
3-word query's 2.1 s; benches/README.md, "pg at scale".)
The formula is ``actors._retrieval.bm25``'s (Okapi, k1 = 1.2, b = 0.75, Lucene's idf, statistics
from the namespace only), evaluated in float8 with the same operations in the same
order (the per-term sum is ``sum(... ORDER BY term order)``), so the scores agree with
the in-memory index (the tests check them to 1e-12 and the rankings exactly).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from protocol import (
    ConfigError,
    Document,
    RetrievalReport,
    RetrievedTurn,
    ScoredDocument,
    Text,
    UnifiedMessage,
    entry_text,
    projection,
)
from protocol.checks import unpack_message, unpack_metadata

from .._retrieval.bm25 import K1, B, tokenize
from .._store.index_text import CONTEXT_CHARS, fit_index_text
from .filters import FilterSql, Visibility, visible
from .schema import Names, search_text
from .sql import Counts

__all__ = ["DOC_WIDTH", "DocRow", "Reads", "query_terms"]

_DOC_COLUMNS = (
    "seq, id, namespace, source, source_id, text, exact_text, message, meta_raw, "
    "occurred_at, conversation, position, index_text, "
    "coalesce(valid_from, occurred_at) AS valid_from, valid_to, version, supersedes, expires_at"
)
#: How many columns :class:`DocRow` reads (``_DOC_COLUMNS``): a statement's own columns
#: after them start at this index.
DOC_WIDTH = 18


def query_terms(query: str) -> tuple[list[str], list[int]]:
    """The query's distinct BM25 terms, in order of first appearance, and their counts."""
    counts = Counter(tokenize(query))
    return list(counts), list(counts.values())


class DocRow:
    """One entry as read back (the columns of ``_DOC_COLUMNS``): enough to build a
    Document or a RetrievedTurn.

    Attributes:
        text: what reads return as ``Document.text``: a document's own text, a turn's
            projection or the index text its writer gave (never an index text the
            store derived).
        occurred_at: when the entry happened, an aware UTC datetime.
        conversation: its conversation, or None.
        position: its place in its conversation (1, 2, 3... in commit order, never
            given twice), or None without one.
        index_text: the searchable copy of the index text the store derived for it
            (its own text, date and predecessor), or None when it has none.
        valid_from, valid_to, version, supersedes, expires_at: its version (schema 7):
            aware UTC datetimes (``valid_to`` None for the current version,
            ``expires_at`` None when it never expires), ``version`` from 1,
            ``supersedes`` the version it replaced (None for version 1).
    """

    __slots__ = (
        "conversation",
        "expires_at",
        "id",
        "index_text",
        "message",
        "meta",
        "namespace",
        "occurred_at",
        "position",
        "seq",
        "source",
        "source_id",
        "supersedes",
        "text",
        "valid_from",
        "valid_to",
        "version",
    )

    def __init__(self, row: TupleRow) -> None:
        self.seq = int(row[0])
        self.id: str = row[1]
        self.namespace: str = row[2]
        self.source: str = row[3]
        self.source_id: str | None = row[4]
        exact = row[6]
        self.text: str = row[5] if exact is None else bytes(exact).decode("utf-8", "surrogatepass")
        self.message: bytes | None = None if row[7] is None else bytes(row[7])
        self.meta: bytes | None = None if row[8] is None else bytes(row[8])
        occurred: dt.datetime = row[9]
        self.occurred_at = occurred.astimezone(dt.UTC)
        self.conversation: str | None = row[10]
        self.position: int | None = None if row[11] is None else int(row[11])
        self.index_text: str | None = row[12]
        self.valid_from = _utc(row[13])
        self.valid_to = None if row[14] is None else _utc(row[14])
        self.version = int(row[15])
        self.supersedes: int | None = None if row[16] is None else int(row[16])
        self.expires_at = None if row[17] is None else _utc(row[17])

    def metadata(self) -> dict[str, object]:
        return {} if self.meta is None else unpack_metadata(self.meta)

    def indexed(self) -> str:
        """What the entry is indexed by: the derived index text, or else its text."""
        return self.text if self.index_text is None else self.index_text

    def projection(self) -> str:
        """The projection of the entry's message (a document's is its text)."""
        return self.text if self.message is None else projection(unpack_message(self.message))

    def document(self) -> Document:
        return Document(
            text=self.text,
            id=self.id,
            metadata=self.metadata(),
            source_id=self.source_id,
            occurred_at=self.occurred_at,
            conversation=self.conversation,
            expires_at=self.expires_at,
            valid_from=self.valid_from,
            valid_to=self.valid_to,
            version=self.version,
            supersedes=self.supersedes,
        )

    def scored(
        self,
        score: float,
        ranks: dict[str, int],
        raw: float,
        *,
        rank: int | None = None,
        channels: Sequence[str] = (),
    ) -> ScoredDocument:
        # + 0.0 turns -0.0 into 0.0.
        return ScoredDocument(
            document=self.document(),
            score=score + 0.0,
            ranks=ranks,
            sequence=self.seq,
            raw_score=raw + 0.0,
            rank=rank,
            channels=list(channels),
        )

    def turn(
        self, score: float, *, rank: int | None = None, channels: Sequence[str] = ()
    ) -> RetrievedTurn:
        if self.message is None:
            # A document reads as a user message holding its text, as in open_store.
            message = UnifiedMessage(role="user", content=[Text(text=self.text)])
        else:
            message = unpack_message(self.message)
        return RetrievedTurn(
            message=message,
            # + 0.0 turns -0.0 into 0.0.
            score=score + 0.0,
            sequence=self.seq,
            namespace=self.namespace,
            source=self.source,
            metadata=self.metadata(),
            id=self.id,
            rank=rank,
            channels=list(channels),
            occurred_at=self.occurred_at,
            conversation=self.conversation,
        )


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


def parse_vector(text: str) -> npt.NDArray[np.float32]:
    """pgvector's text form back to float32 (it prints the shortest exact float4)."""
    return np.array(text[1:-1].split(","), dtype=np.float32)


#: The settings every approximate read runs with, set on each of the pool's connections
#: when it connects (docs/pages/benchmarks/pg-scale.md), on pgvector's index defaults (m = 16,
#: ef_construction = 64). Measured through ``search`` with :data:`HNSW_CANDIDATES`, at
#: 1M entries of 384 floats: recall@10 0.90 at ef_search 64 (enough at 100k: 0.97-1.00
#: over five builds), 0.95 at 200, 0.98 at 400, which costs about 2.4 ms more than 200
#: (``benches/README.md``, "pg at scale"). ``relaxed_order`` keeps the candidates that
#: ``strict_order`` drops to stay in distance order, and every read sorts its hits
#: again. ``max_scan_tuples`` is pgvector's default. A read of more than ``ef_search``
#: hits raises it for its transaction (:meth:`Reads.ef_search`).
DEFAULT_EF_SEARCH = 400
HNSW_SETTINGS: dict[str, str] = {
    "hnsw.ef_search": str(DEFAULT_EF_SEARCH),
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.max_scan_tuples": "20000",
}
#: On a table of more than :data:`HNSW_FETCH_FROM` entries, an approximate read asks the
#: index for at least this many rows and keeps the best ``k`` by exact distance. Under a
#: selective filter the iterative scan meets matching rows roughly, not exactly, in
#: distance order, so the first ``k`` it finds miss some nearer ones: at 1M entries and
#: a filter keeping 1% of them, recall@10 was 0.86 with ``k`` rows fetched and 0.95 with
#: 64, at about 3x the time. At 100k it was 0.97 with ``k`` rows, and the 64 would make a
#: filtered read slower than an exact one, hence the size (the two sizes measured are
#: 100k and 1M; the bound between them is a choice). Unfiltered, the 64 are within
#: ef_search's first candidate list, so they cost only their transfer.
HNSW_CANDIDATES = 64
HNSW_FETCH_FROM = 250_000
#: ``hnsw.ef_search`` of a read with a metadata filter on a table of more than
#: :data:`HNSW_FETCH_FROM` entries, unless the store was opened with its own
#: ``ef_search``. At 1M entries and a 1% filter, two builds of the index gave recall@10
#: 0.953 and 0.948 at 400 (so the target sat on the noise of the build), 0.955 at 800
#: and 0.963 at 1000, all at about the same time (150 ms: the iterative scan, not the
#: list, is what a selective filter costs). Unfiltered reads keep the base: there 1000
#: would cost 4x for 0.99 against 0.98.
HNSW_FILTERED_EF_SEARCH = 1000


def hnsw_settings(ef_search: int) -> dict[str, str]:
    """:data:`HNSW_SETTINGS` with the store's own ``ef_search``
    (``open_pg_store(..., ef_search=)``)."""
    return {**HNSW_SETTINGS, "hnsw.ef_search": str(ef_search)}


class Reads:
    """The read statements of one table. ``hnsw``: rank through the approximate index."""

    def __init__(self, names: Names, *, hnsw: bool, ef_search: int | None = None) -> None:
        self.names = names
        self.hnsw = hnsw
        # What each pooled connection holds (``hnsw_settings``), and what a filtered
        # read on a big table takes: the store's own ef_search, if it was given one.
        self.base_ef_search = DEFAULT_EF_SEARCH if ef_search is None else ef_search
        self.filtered_ef_search = HNSW_FILTERED_EF_SEARCH if ef_search is None else ef_search
        # The table's live entries as last seen (the actor keeps it: ``observe``).
        self.table_entries = 0
        f = {
            "table": names.table,
            "meta": names.meta,
            "ns": names.namespaces,
            "terms": names.terms,
            "xterms": names.xterms,
            "cols": sql.SQL(_DOC_COLUMNS),
            "current": visible(current=True),
            "as_of": visible(current=False),
            "current_t": visible(current=True, table="t"),
            "as_of_t": visible(current=False, table="t"),
        }
        # A namespace's current entries that have expired by now but are not reclaimed
        # yet: through the partial index on (namespace, expires_at) of current entries
        # that expire, so an empty probe when none does.
        expired_in = (
            "(SELECT count(*) FROM {table} WHERE namespace = %(ns)s AND valid_to IS NULL "
            "AND expires_at <= %(now)s::timestamptz)"
        )
        # The same over every namespace, through the index on expires_at.
        expired_all = (
            "(SELECT count(*) FROM {table} WHERE expires_at <= %(now)s::timestamptz "
            "AND valid_to IS NULL)"
        )
        # One statement, so the hits, the count in scope and the counters come from one
        # snapshot. The exact order is pgvector's negative inner product, ascending, with
        # ties to the newest sequence; that second key also keeps the planner off an
        # HNSW index. With ``hnsw``, the inner query orders by distance only, so the
        # index serves it, and the outer query breaks the ties.
        order = sql.SQL("dist" if hnsw else "dist, seq DESC")
        # Unscoped, the count is the meta row's current entries (every write keeps its
        # counters in its own transaction: a second pass over the table cost a sixth of
        # a 100k-row read); scoped, the namespace's T_ns row, kept the same way; both
        # less the current entries that have expired since.
        read = (
            "SELECT m.live_entries, m.evicted_entries, m.zero_norm_entries, m.version, {count}, "
            "h.dist, h.seq, h.id, h.namespace, h.source, h.source_id, h.text, h.exact_text, "
            "h.message, h.meta_raw, h.occurred_at, h.conversation, h.position, h.index_text, "
            "h.valid_from, h.valid_to, h.version, h.supersedes, h.expires_at "
            "FROM {meta} m{scope} "
            "LEFT JOIN LATERAL (SELECT {cols}, n.dist FROM (SELECT seq, "
            "embedding <#> %(q)s::vector AS dist FROM {table} WHERE {where} "
            "ORDER BY {order} LIMIT %(fetch)s) n JOIN {table} USING (seq)) h ON true "
            "ORDER BY h.dist, h.seq DESC LIMIT %(k)s"
        )
        self.read_all = sql.SQL(read).format(
            count=sql.SQL("m.live_entries - m.closed_entries - " + expired_all).format(**f),
            scope=sql.SQL(""),
            where=f["current"],
            order=order,
            **f,
        )
        self.read_in = sql.SQL(read).format(
            count=sql.SQL("c.n"),
            scope=sql.SQL(
                " CROSS JOIN (SELECT coalesce((SELECT entries FROM {ns} "
                "WHERE namespace = %(ns)s), 0) - " + expired_in + " AS n) c"
            ).format(**f),
            where=sql.SQL("namespace = %(ns)s AND {current}").format(**f),
            order=order,
            **f,
        )
        by_ids = "SELECT {cols} FROM {table} WHERE namespace = %(ns)s AND id = ANY(%(ids)s) AND "
        self._by_ids = sql.SQL(by_ids + "{current}").format(**f)
        self._by_ids_as_of = sql.SQL(by_ids + "{as_of}").format(**f)
        self._history = sql.SQL(
            "SELECT {cols} FROM {table} WHERE namespace = %(ns)s AND id = %(id)s "
            "AND (expires_at IS NULL OR expires_at > %(now)s::timestamptz) ORDER BY version, seq"
        ).format(**f)
        # How many entries a read sees in a namespace (BM25's N, and what a read of
        # turns reports as scanned): current ones from its T_ns row, less those expired
        # since; as of an instant, counted (a scan of the namespace).
        self._count_current = sql.SQL(
            "SELECT coalesce((SELECT entries FROM {ns} WHERE namespace = %(ns)s), 0) - "
            + expired_in
        ).format(**f)
        self._count_as_of = sql.SQL(
            "SELECT count(*) FROM {table} WHERE namespace = %(ns)s AND {as_of}"
        ).format(**f)
        # A term's df: its postings in T_terms (current, never expiring) and the
        # visible ones of T_xterms (current, not expired by now); as of an instant,
        # every posting of the term whose entry was visible then.
        self._df_current = (
            "(SELECT count(*) FROM {terms} p WHERE p.namespace = %(ns)s AND p.term = q.term) + "
            "(SELECT count(*) FROM {xterms} p WHERE p.namespace = %(ns)s AND p.term = q.term "
            "AND p.valid_to IS NULL AND (p.expires_at IS NULL OR p.expires_at > "
            "%(now)s::timestamptz))"
        )
        self._df_as_of = (
            "(SELECT count(*) FROM (SELECT seq FROM {terms} WHERE namespace = %(ns)s AND "
            "term = q.term UNION ALL SELECT seq FROM {xterms} WHERE namespace = %(ns)s AND "
            "term = q.term) p JOIN {table} t ON t.seq = p.seq WHERE {as_of_t})"
        )
        term_counts = "SELECT ({count}), q.term, {df} FROM unnest(%(terms)s::text[]) AS q(term)"
        self._term_counts = sql.SQL(term_counts).format(
            count=self._count_current, df=sql.SQL(self._df_current).format(**f)
        )
        self._term_counts_as_of = sql.SQL(term_counts).format(
            count=self._count_as_of, df=sql.SQL(self._df_as_of).format(**f)
        )
        cosines = (
            "SELECT seq, embedding <#> %(q)s::vector FROM {table} WHERE seq = ANY(%(seqs)s) AND "
        )
        self._cosines = sql.SQL(cosines + "{current}").format(**f)
        self._cosines_as_of = sql.SQL(cosines + "{as_of}").format(**f)
        self._keyword_index = sql.SQL("SELECT keyword_index FROM {meta}").format(**f)
        # The newest current entry of each conversation, through (namespace,
        # conversation, position), the batch's own ids left out (they are being
        # replaced).
        self._newest = sql.SQL(
            "SELECT c.name, n.text, n.exact_text, n.message FROM unnest(%(names)s::text[]) "
            "AS c(name) CROSS JOIN LATERAL (SELECT text, exact_text, message FROM {table} "
            "WHERE namespace = %(ns)s AND conversation = c.name AND id <> ALL(%(ids)s) "
            "AND {current} ORDER BY position DESC LIMIT 1) n"
        ).format(**f)
        by_seqs = "SELECT {cols} FROM {table} WHERE seq = ANY(%(seqs)s) AND "
        self._by_seqs = sql.SQL(by_seqs + "{current}").format(**f)
        self._by_seqs_as_of = sql.SQL(by_seqs + "{as_of}").format(**f)
        # The top rows are ranked on (dist, seq) alone, then their columns are read (by
        # primary key): a sort that carried every column of every row scanned cost
        # 0.6 ms of a 4 ms read at 10k.
        self._dense = (
            "SELECT {cols}, n.dist{vectors} FROM (SELECT seq, embedding <#> %(q)s::vector "
            "AS dist FROM {table} WHERE namespace = %(ns)s AND {visible} AND {filter} "
            "ORDER BY {order} LIMIT %(depth)s) n JOIN {table} USING (seq) "
            "ORDER BY n.dist, seq DESC"
        )
        # BM25 over the postings a read sees: current reads take T_terms whole (no
        # entry there is closed or expires) and the visible rows of T_xterms, each
        # joined to the query's terms on its own, so each is read through its
        # (namespace, term) index alone (one UNION ALL of the two tables joined to the
        # terms had the planner scan every posting of the namespace: 70 ms against 9 at
        # 10k entries), and N and the total length from T_ns less the expired entries
        # (see ``expired_in``). A read as of an instant takes every posting and joins
        # the entries for their validity, and counts N and the length there. {join} is
        # empty unless the search has a filter (a metadata filter or a time window, over
        # the entries) or reads as of an instant: then ``JOIN T t ON t.seq = p.seq``
        # (see bm25).
        self._bm25_stats_current = sql.SQL(
            "SELECT (s.entries - x.n)::float8 AS n, (s.total_len - x.len)::float8 AS total "
            "FROM {ns} s CROSS JOIN (SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS len "
            "FROM {table} WHERE namespace = %(ns)s AND valid_to IS NULL "
            "AND expires_at <= %(now)s::timestamptz) x WHERE s.namespace = %(ns)s"
        ).format(**f)
        self._bm25_stats_as_of = sql.SQL(
            "SELECT count(*)::float8 AS n, coalesce(sum(t.doc_len), 0)::float8 AS total "
            "FROM {table} t WHERE t.namespace = %(ns)s AND {as_of_t}"
        ).format(**f)
        self._bm25_xvisible_current = sql.SQL(
            "p.valid_to IS NULL AND (p.expires_at IS NULL OR p.expires_at > %(now)s::timestamptz)"
        )
        hits = (
            "SELECT p.seq, p.tf, p.doc_len, w.weight, w.avgdl, w.ord FROM w JOIN {postings} p "
            "ON p.namespace = %(ns)s AND p.term = w.term{{join}} WHERE {{visible}} AND {{filter}}"
        )
        self._bm25 = (
            "WITH q AS (SELECT term, qtf, ord FROM unnest(%(terms)s::text[], "
            "%(qtfs)s::integer[]) WITH ORDINALITY AS q(term, qtf, ord)), "
            "st AS ({stats}), "
            "w AS MATERIALIZED (SELECT q.term, q.ord, st.total / st.n AS avgdl, "
            "q.qtf * ln(1.0::float8 + (st.n - d.df + 0.5::float8) / (d.df + 0.5::float8)) "
            "AS weight FROM q CROSS JOIN st CROSS JOIN LATERAL "
            # OFFSET 0: computed once, not inlined into each of its three uses.
            "(SELECT ({df})::float8 AS df OFFSET 0) d "
            "WHERE st.n > 0 AND d.df > 0) "
            "SELECT x.seq, sum(x.weight * (x.tf * %(k1p1)s::float8) / (x.tf + %(k1)s::float8 "
            "* (1.0::float8 - %(b)s::float8 + %(b)s::float8 * x.doc_len / x.avgdl)) "
            "ORDER BY x.ord) AS score "
            "FROM ({terms_hits} UNION ALL {xterms_hits}) x "
            "GROUP BY x.seq ORDER BY score DESC, x.seq DESC LIMIT %(depth)s"
        )
        self._bm25_terms_hits = hits.format(postings="{terms}")
        self._bm25_xterms_hits = hits.format(postings="{xterms}")
        # A delete's or forget's rows, and every entry of their conversations, in
        # order: what finds the entries whose index text quoted a removed one.
        self._removed = sql.SQL(
            "SELECT seq, conversation FROM {table} WHERE namespace = %(ns)s AND id = ANY(%(ids)s)"
        ).format(**f)
        self._members = sql.SQL(
            "SELECT {cols} FROM {table} WHERE namespace = %(ns)s "
            "AND conversation = ANY(%(convs)s) ORDER BY conversation, position, seq"
        ).format(**f)
        self.f = f

    def fetch(self, k: int) -> int:
        """How many rows a read of ``k`` asks the index for: ``k``, or through HNSW on a
        table of more than :data:`HNSW_FETCH_FROM` entries at least
        :data:`HNSW_CANDIDATES`, of which the read keeps the best ``k`` by exact
        distance."""
        if self.hnsw and self.table_entries > HNSW_FETCH_FROM:
            return max(k, HNSW_CANDIDATES)
        return k

    def ef_search(self, k: int, *, filtered: bool = False) -> int:
        """``hnsw.ef_search`` for a read of ``k``: the candidate list is never shorter
        than what the read fetches (pgvector returns at most ef_search rows per scan
        iteration), a filtered read on a big table takes
        :data:`HNSW_FILTERED_EF_SEARCH`, and pgvector caps it at 1000."""
        base = self.base_ef_search
        if filtered and self.table_entries > HNSW_FETCH_FROM:
            base = self.filtered_ef_search
        return min(max(base, self.fetch(k)), 1000)

    def _approximate(
        self, conn: psycopg.Connection[TupleRow], k: int, *, filtered: bool = False
    ) -> None:
        # The connection already holds HNSW_SETTINGS; only a read that needs a longer
        # list pays a round trip to raise it, for its transaction only.
        ef = self.ef_search(k, filtered=filtered)
        if self.hnsw and ef > self.base_ef_search:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))

    def retrieve(
        self,
        conn: psycopg.Connection[TupleRow],
        query: str,
        k: int,
        namespace: str | None,
        now: dt.datetime,
    ) -> tuple[RetrievalReport, Counts]:
        """The dense top ``k`` of the current, unexpired entries in scope (``now`` the
        store clock's), with the count in scope and the counters."""
        self._approximate(conn, k)
        params: dict[str, object] = {"q": query, "k": k, "fetch": self.fetch(k), "now": now}
        if namespace is None:
            rows = conn.execute(self.read_all, params).fetchall()
        else:
            params["ns"] = namespace
            rows = conn.execute(self.read_in, params).fetchall()
        first = rows[0]
        counts = Counts(int(first[0]), int(first[1]), int(first[2]), int(first[3]))
        # - turns the distance into the similarity.
        turns = [DocRow(row[6:]).turn(-float(row[5])) for row in rows if row[6] is not None]
        report = RetrievalReport(turns=turns, scanned=int(first[4]), exact=not self.hnsw)
        return report, counts

    def get_by_ids(
        self, conn: psycopg.Connection[TupleRow], ids: list[str], namespace: str, vis: Visibility
    ) -> list[Document]:
        return [row.document() for row in self.rows_by_ids(conn, ids, namespace, vis)]

    def rows_by_ids(
        self, conn: psycopg.Connection[TupleRow], ids: list[str], namespace: str, vis: Visibility
    ) -> list[DocRow]:
        """The rows ``vis`` sees of these ids in ``namespace``: each id's current
        version, or its version as of ``vis.as_of``."""
        statement = self._by_ids if vis.current else self._by_ids_as_of
        rows = conn.execute(statement, {**vis.params, "ns": namespace, "ids": ids}).fetchall()
        return [DocRow(row) for row in rows]

    def history(
        self, conn: psycopg.Connection[TupleRow], id: str, namespace: str, now: dt.datetime
    ) -> list[Document]:
        """Every version of memory ``id`` in ``namespace`` that has not expired by
        ``now``, oldest first, through the ``(namespace, id, version)`` index."""
        rows = conn.execute(self._history, {"ns": namespace, "id": id, "now": now}).fetchall()
        return [DocRow(row).document() for row in rows]

    def cosines(
        self, conn: psycopg.Connection[TupleRow], query: str, seqs: list[int], vis: Visibility
    ) -> dict[int, float]:
        """The cosine of each entry of ``seqs`` that ``vis`` sees with a normalized
        query; - turns pgvector's negative inner product into the similarity, as in
        :meth:`retrieve`."""
        statement = self._cosines if vis.current else self._cosines_as_of
        rows = conn.execute(statement, {**vis.params, "q": query, "seqs": seqs}).fetchall()
        return {int(seq): -float(dist) for seq, dist in rows}

    def entries_in(
        self, conn: psycopg.Connection[TupleRow], namespace: str, vis: Visibility
    ) -> int:
        """How many entries of ``namespace`` ``vis`` sees (current ones: its ``T_ns``
        row less those expired since; as of an instant: counted)."""
        statement = self._count_current if vis.current else self._count_as_of
        row = conn.execute(statement, {**vis.params, "ns": namespace}).fetchone()
        return 0 if row is None else int(row[0])

    def term_counts(
        self,
        conn: psycopg.Connection[TupleRow],
        terms: list[str],
        namespace: str,
        vis: Visibility,
    ) -> tuple[int, dict[str, int]]:
        """How many entries of ``namespace`` ``vis`` sees, and how many of them hold
        each of ``terms`` (BM25's N and df), in one statement."""
        statement = self._term_counts if vis.current else self._term_counts_as_of
        params = {**vis.params, "ns": namespace, "terms": terms}
        rows = conn.execute(statement, params).fetchall()
        if not rows:
            return self.entries_in(conn, namespace, vis), {}
        return int(rows[0][0]), {term: int(df) for _, term, df in rows}

    def dense(
        self,
        conn: psycopg.Connection[TupleRow],
        query: str,
        depth: int,
        namespace: str,
        where: FilterSql,
        vis: Visibility,
        *,
        vectors: bool = False,
    ) -> list[tuple[DocRow, float, npt.NDArray[np.float32] | None]]:
        """The exact top ``depth`` in ``namespace`` that ``vis`` sees and pass the
        filter: each hit's row, its cosine similarity and, with ``vectors``, its stored
        vector."""
        self._approximate(conn, depth, filtered=not where.unfiltered)
        statement = sql.SQL(self._dense).format(
            cols=sql.SQL(_DOC_COLUMNS),
            table=self.names.table,
            vectors=sql.SQL(", embedding::text" if vectors else ""),
            visible=vis.condition(),
            filter=where.where,
            order=sql.SQL("dist" if self.hnsw else "dist, seq DESC"),
        )
        params = {
            **where.params,
            **vis.params,
            "q": query,
            "ns": namespace,
            "depth": self.fetch(depth),
        }
        rows = conn.execute(statement, params).fetchall()
        dist = DOC_WIDTH
        if self.hnsw:
            rows.sort(key=lambda row: (row[dist], -row[0]))
            del rows[depth:]
        return [
            (DocRow(row), -float(row[dist]), parse_vector(row[dist + 1]) if vectors else None)
            for row in rows
        ]

    def bm25(
        self,
        conn: psycopg.Connection[TupleRow],
        query: str,
        depth: int,
        namespace: str,
        where: FilterSql,
        vis: Visibility,
    ) -> list[tuple[int, float]]:
        """BM25's top ``depth`` (sequence, score) in ``namespace`` among the entries
        that ``vis`` sees and pass the filter, best first, ties to the newest sequence;
        N, the average length and df are of what ``vis`` sees in the namespace."""
        self.check_keyword_index(conn)
        terms, qtfs = query_terms(query)
        if not terms:
            return []
        statement = self.bm25_statement(where, vis)
        params = {
            **where.params,
            **vis.params,
            "terms": terms,
            "qtfs": qtfs,
            "ns": namespace,
            "depth": depth,
            "k1": K1,
            "k1p1": K1 + 1.0,
            "b": B,
        }
        rows = conn.execute(statement, params).fetchall()
        return [(int(row[0]), float(row[1])) for row in rows]

    def bm25_statement(self, where: FilterSql, vis: Visibility) -> sql.Composed:
        """:meth:`bm25`'s statement for the filter ``where`` and the versions ``vis``
        sees. Current reads without a filter read the postings alone."""
        join: sql.Composable = sql.SQL(" JOIN {table} t ON t.seq = p.seq").format(
            table=self.names.table
        )
        visible: sql.Composable
        xvisible: sql.Composable
        if vis.current:
            join = sql.SQL("") if where.unfiltered else join
            visible, xvisible = sql.SQL("true"), self._bm25_xvisible_current
            stats, df = self._bm25_stats_current, self._df_current
        else:
            visible = xvisible = self.f["as_of_t"]
            stats, df = self._bm25_stats_as_of, self._df_as_of

        def hits(template: str, condition: sql.Composable) -> sql.Composed:
            return sql.SQL(template).format(
                terms=self.names.terms,
                xterms=self.names.xterms,
                join=join,
                visible=condition,
                filter=where.where,
            )

        return sql.SQL(self._bm25).format(
            stats=stats,
            df=sql.SQL(df).format(**self.f),
            terms_hits=hits(self._bm25_terms_hits, visible),
            xterms_hits=hits(self._bm25_xterms_hits, xvisible),
        )

    def check_keyword_index(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Refuse a keyword read on a table without a keyword index, as the table is
        now (another process may have switched it since this store opened)."""
        row = conn.execute(self._keyword_index).fetchone()
        if row is not None and not row[0]:
            raise ConfigError(
                f"table {self.names.table_name!r} has no keyword index (it was opened "
                "with keyword_index=False), so it cannot answer a bm25 or hybrid search; "
                "open it with keyword_index=True to build the index from its texts, or "
                "search with kind='similarity' or 'mmr'"
            )

    def newest_texts(
        self,
        conn: psycopg.Connection[TupleRow],
        namespace: str,
        conversations: Sequence[str],
        leaving_out: Sequence[str],
        now: dt.datetime,
    ) -> dict[str, str]:
        """The own text (a turn's projection, a document's text) of the newest current,
        unexpired entry of each of ``conversations`` in ``namespace``, the entries
        ``leaving_out`` (ids) left out: the predecessor of a write's first entry there."""
        params = {
            "names": list(conversations),
            "ns": namespace,
            "ids": list(leaving_out),
            "now": now,
            "as_of": None,
        }
        rows = conn.execute(self._newest, params).fetchall()
        out: dict[str, str] = {}
        for name, text, exact, message in rows:
            if message is not None:
                out[str(name)] = projection(unpack_message(bytes(message)))
            else:
                out[str(name)] = (
                    str(text) if exact is None else bytes(exact).decode("utf-8", "surrogatepass")
                )
        return out

    def quoting(
        self, conn: psycopg.Connection[TupleRow], namespace: str, ids: list[str]
    ) -> list[tuple[DocRow, str | None]]:
        """The entries, not among the versions of ``ids``, whose derived index text
        quotes one of those versions as its conversation predecessor (the in-memory
        store's rule, ``_successor_texts``), each with its index text once they are
        gone: its own text, date and the predecessor it then has, within the budget
        its index text had (None: indexed by its own text)."""
        removed = conn.execute(self._removed, {"ns": namespace, "ids": ids}).fetchall()
        gone = {int(seq) for seq, _ in removed}
        conversations = sorted({str(c) for _, c in removed if c is not None})
        if not conversations:
            return []
        rows = conn.execute(self._members, {"ns": namespace, "convs": conversations}).fetchall()
        out: list[tuple[DocRow, str | None]] = []
        conversation: str | None = None
        previous: DocRow | None = None
        quoted: str | None = None
        for raw in rows:
            row = DocRow(raw)
            if row.conversation != conversation:
                conversation, previous, quoted = row.conversation, None, None
            if row.seq in gone:
                quoted = search_text(row.projection()[:CONTEXT_CHARS])
                continue
            index = row.index_text
            if quoted is not None and index is not None and quoted in index:
                context = [] if previous is None else [previous.projection()[:CONTEXT_CHARS]]
                fresh = entry_text(row.text, occurred_at=row.occurred_at, context=context)
                budget = len(index.encode("utf-8"))
                out.append((row, fit_index_text(row.text, fresh, budget)))
            quoted = None
            previous = row
        return out

    def by_seqs(
        self, conn: psycopg.Connection[TupleRow], seqs: list[int], vis: Visibility
    ) -> dict[int, DocRow]:
        """The rows of ``seqs`` that ``vis`` sees."""
        statement = self._by_seqs if vis.current else self._by_seqs_as_of
        rows = conn.execute(statement, {**vis.params, "seqs": seqs}).fetchall()
        return {int(row[0]): DocRow(row) for row in rows}
