"""The write SQL of the pg store: one object per table, with every statement composed once.

Every value is a bound parameter; only the validated, quoted names are composed in.
Each method runs inside the transaction that :meth:`_PgStoreActor.call` opened, after
it has locked the meta row (every writer, in every process, takes that lock first), so
what a method reads there (the current version of a memory, a duplicate's text) is
still so when it commits. The reads are in ``reads.py``; the filter translation in
``filters.py``; the schema (what ``T_terms``, ``T_xterms`` and ``T_ns`` hold) in
``schema.py``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from protocol import (
    ConfigError,
    DeleteResult,
)
from protocol.messages import Cleared, Dedupe, Forget, Forgotten, Supersede

from .._retrieval.bm25 import term_counts
from .._store.backend import StaleVersion
from .._store.index_text import indexed_texts
from .._store.prepare import NEAR_DUPLICATE_COSINE
from .filters import translate, visible
from .schema import SCHEMA_VERSION, Names, vector_literal

__all__ = [
    "RECLAIM_ROWS",
    "Committed",
    "Counts",
    "PreparedEntries",
    "Removed",
    "Rewrite",
    "Statements",
]

_T = TypeVar("_T")

#: How many expired rows each write deletes at most (the store's own bounded reclaim:
#: no clock thread, no sweep of the table).
RECLAIM_ROWS = 256


@attrs.frozen
class Counts:
    entries: int
    evicted: int
    zero: int
    version: int


@attrs.frozen
class PreparedEntries:
    """A validated, embedded batch of turns or documents, ready to commit.

    Attributes:
        vectors: each normalized vector in pgvector's binary input form
            (``schema.vector_binary``).
        zero: which vectors had zero norm.
        payloads: a turn's message as msgpack, or None for a document.
        texts: the searchable text (``schema.search_text``).
        exact: the exact text where the searchable one differs, else None.
        metadata: the jsonb that filters read (``schema.filter_json``), in jsonb's
            binary input form (``schema.jsonb_binary``).
        meta_raw: the exact metadata as msgpack, or None for ``{}``.
        ids: one id per entry, or None for turns named ``turn-<sequence>``.
        source_ids: a document's source id, or None.
        doc_lens: each text's BM25 length.
        terms: each text's distinct BM25 terms and their frequencies, or None when the
            store was opened on a table without a keyword index (the commit computes
            them if the table has one by then).
        dropped: the head of an over-long batch, counted as evicted.
        occurred: each entry's ``occurred_at`` (given, or the write time), aware.
        conversations: each entry's conversation (or None), or None when none has one;
            the commit gives each entry of one its position.
        index_texts: the searchable copy (``schema.search_text``) of the index text the
            store derived for each entry, or None where it is indexed by its text;
            None for the whole batch when none is.
        expires: each entry's ``expires_at`` (aware), or None: it never expires; an
            empty list when none expires.
        matrix: the normalized vectors as float32 rows (what ``dedupe="near"``
            compares), or None.
        dedupe, near_threshold: the write's (``protocol.messages.Dedupe``; the
            threshold None: ``NEAR_DUPLICATE_COSINE``).
        supersede: an update's (``protocol.messages.Supersede``), or None.
    """

    vectors: list[bytes]
    zero: list[bool]
    payloads: list[bytes | None]
    texts: list[str]
    exact: list[bytes | None]
    metadata: list[bytes]
    meta_raw: list[bytes | None]
    ids: list[str] | None
    source_ids: list[str | None]
    doc_lens: list[int]
    terms: list[dict[str, int]] | None
    namespace: str
    source: str
    dropped: int
    occurred: list[dt.datetime] = attrs.field(factory=list)
    conversations: list[str | None] | None = None
    index_texts: list[str | None] | None = None
    expires: list[dt.datetime | None] = attrs.field(factory=list)
    matrix: npt.NDArray[np.float32] | None = None
    dedupe: Dedupe | None = None
    near_threshold: float | None = None
    supersede: Supersede | None = None

    def exact_text(self, i: int) -> str:
        """Entry ``i``'s exact text (what ``dedupe="exact"`` compares)."""
        raw = self.exact[i]
        return self.texts[i] if raw is None else raw.decode("utf-8", "surrogatepass")

    def expiry(self, i: int) -> dt.datetime | None:
        return self.expires[i] if self.expires else None

    def keeping(self, keep: Sequence[int]) -> PreparedEntries:
        """The batch with only the entries ``keep`` (indexes, in order)."""

        def pick(values: list[_T]) -> list[_T]:
            return [values[i] for i in keep]

        return attrs.evolve(
            self,
            vectors=pick(self.vectors),
            zero=pick(self.zero),
            payloads=pick(self.payloads),
            texts=pick(self.texts),
            exact=pick(self.exact),
            metadata=pick(self.metadata),
            meta_raw=pick(self.meta_raw),
            ids=None if self.ids is None else pick(self.ids),
            source_ids=pick(self.source_ids),
            doc_lens=pick(self.doc_lens),
            terms=None if self.terms is None else pick(self.terms),
            occurred=pick(self.occurred) if self.occurred else [],
            conversations=None if self.conversations is None else pick(self.conversations),
            index_texts=None if self.index_texts is None else pick(self.index_texts),
            expires=pick(self.expires) if self.expires else [],
            matrix=None if self.matrix is None else self.matrix[list(keep)],
        )


@attrs.frozen
class Committed:
    """A committed batch: per entry of the batch (in order), its id and sequence (a
    duplicate's are the entry it duplicates), the ids that were duplicates, and the
    counts."""

    ids: list[str]
    sequences: list[int]
    evicted: int  # the dropped head included
    replaced: int
    zero_norm: int
    duplicates: list[str] = attrs.field(factory=list)


@attrs.frozen
class Removed:
    """What a delete, a clear or a forget took: the memories' ids (each once, oldest
    first), how many rows (versions), and the texts to drop from the embedding cache
    (None: every text of the table, for a clear of every namespace)."""

    ids: list[str]
    rows: int
    texts: list[str] | None


@attrs.frozen
class Rewrite:
    """An entry whose derived index text quoted a memory being deleted or forgotten
    (its conversation predecessor): its row (``seq``) gets ``index_text`` (the
    searchable copy, or None: indexed by its own text) and the vector, zero-norm flag,
    BM25 length and terms of what it is now indexed by. ``stale`` is the index text it
    had, which the embedding cache may hold."""

    seq: int
    index_text: str | None
    vector: str
    zero: bool
    doc_len: int
    terms: dict[str, int]
    stale: str


# COPY's column types, by oid, for psycopg's binary dumpers: int8, text x4, bytea x2,
# then the jsonb and the vector as bytea (their values are already in their types'
# binary input form, which binary COPY sends as they are), int4, bool, then
# timestamptz, text, int8, text, then timestamptz, int4 x2, timestamptz.
_ENTRY_TYPES = [20, 25, 25, 25, 25, 25, 17, 17, 17, 17, 23, 17, 16, 1184, 25, 20, 25]
_ENTRY_TYPES += [1184, 23, 23, 1184]
_TERM_TYPES = [20, 25, 25, 23, 23]
_XTERM_TYPES = [*_TERM_TYPES, 1184, 1184]


def _check_version(names: Names, version: int) -> None:
    """Refuse to write a table that a newer trio-recall migrated while this store had
    it open: this version's statements would not keep what that one needs."""
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"table {names.table_name!r} is now at schema version {version} (another "
            f"process migrated it since this store opened it at {SCHEMA_VERSION}); "
            "nothing was written: reopen it with the trio-recall that migrated it"
        )


def _md5(text: str) -> str:
    """PostgreSQL's ``md5(text)`` of a searchable text (valid UTF-8)."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _decoded(text: str, exact: bytes | None) -> str:
    """A row's exact text from its ``text`` and ``exact_text`` columns."""
    return text if exact is None else bytes(exact).decode("utf-8", "surrogatepass")


class _Delta:
    """What a write changed in the meta row's counters, summed over its statements."""

    __slots__ = ("closed", "entries", "evicted", "zero")

    def __init__(self) -> None:
        self.entries = self.evicted = self.zero = self.closed = 0

    def gone(self, row: TupleRow | None) -> int:
        """Count a ``gone`` statement's ``(rows, zero-norm, closed)`` as removed."""
        assert row is not None
        rows, zero, closed = (int(v) for v in row)
        self.entries -= rows
        self.zero -= zero
        self.closed -= closed
        return rows


class Statements:
    """The write SQL of one table, composed once; every value is a bound parameter."""

    def __init__(self, names: Names) -> None:
        self.names = names
        f = {
            "table": names.table,
            "meta": names.meta,
            "terms": names.terms,
            "xterms": names.xterms,
            "ns": names.namespaces,
            "current": visible(current=True),
        }
        # Every write starts here: the lock, and the table's schema version, which a
        # newer trio-recall may have migrated since this store opened.
        self.lock_meta = sql.SQL(
            "SELECT live_entries, schema_version FROM {meta} FOR UPDATE"
        ).format(**f)
        # The write lock, and whether the table keeps a keyword index, read under the
        # lock that any switch of it takes (schema.ensure_schema), so a batch follows
        # the table.
        self.lock_meta_keyword = sql.SQL(
            "SELECT live_entries, keyword_index, schema_version FROM {meta} FOR UPDATE"
        ).format(**f)
        # A batch's n sequence numbers, as one block: the last one (the first is
        # nextval's). Only writers draw from the sequence, under the meta row's lock, so
        # no other draw comes between the two calls.
        self.next_seqs = sql.SQL("SELECT setval(%s::regclass, nextval(%s::regclass) + %s - 1)")
        # A batch is written by COPY in binary (no per-row statement, no text parsing
        # of the vectors), inside the batch's one transaction: a failing row aborts the
        # COPY and so the whole batch (design §9: all or nothing).
        self.copy_entries = sql.SQL(
            "COPY {table} (seq, id, namespace, source, source_id, text, exact_text, message, "
            "metadata, meta_raw, doc_len, embedding, zero_norm, occurred_at, conversation, "
            "position, index_text, valid_from, version, supersedes, expires_at) "
            "FROM STDIN (FORMAT binary)"
        ).format(**f)
        # A batch's positions, drawn under the meta row's lock: each conversation's
        # counter moves on by its entries in the batch (%s each), and the new last
        # position comes back. Rows are never deleted, so no position is given twice.
        self.draw_positions = sql.SQL(
            "INSERT INTO {conv} AS c (namespace, conversation, last_position) "
            "SELECT %s, u.name, u.n FROM unnest(%s::text[], %s::bigint[]) AS u(name, n) "
            "ON CONFLICT (namespace, conversation) DO UPDATE "
            "SET last_position = c.last_position + excluded.last_position "
            "RETURNING conversation, last_position"
        ).format(conv=names.conversations)
        self.copy_terms = sql.SQL(
            "COPY {terms} (seq, term, namespace, tf, doc_len) FROM STDIN (FORMAT binary)"
        ).format(**f)
        self.copy_xterms = sql.SQL(
            "COPY {xterms} (seq, term, namespace, tf, doc_len, valid_to, expires_at) "
            "FROM STDIN (FORMAT binary)"
        ).format(**f)
        # Every delete takes its entries' BM25 postings in the same statement, from both
        # postings tables: they have no foreign key, whose per-row check was half of a
        # bulk write's time (tables made before keep theirs; its cascade then finds
        # nothing). It also takes the current ones out of their namespaces' counts
        # (T_ns counts current rows): a namespace's row goes with its last current
        # entry, so the table does not grow with namespaces gone.
        gone = "RETURNING seq, zero_norm, namespace, doc_len, valid_to IS NULL AS cur"
        postings = (
            "postings AS (DELETE FROM {terms} WHERE seq IN (SELECT seq FROM gone)), "
            "xpostings AS (DELETE FROM {xterms} WHERE seq IN (SELECT seq FROM gone)), "
        )
        after = (
            postings + "per AS (SELECT namespace, count(*) FILTER (WHERE cur) AS n, "
            "coalesce(sum(doc_len) FILTER (WHERE cur), 0) AS len FROM gone "
            "GROUP BY namespace), "
            "kept AS (UPDATE {ns} s SET entries = s.entries - per.n, "
            "total_len = s.total_len - per.len FROM per "
            "WHERE s.namespace = per.namespace AND s.entries > per.n), "
            "emptied AS (DELETE FROM {ns} s USING per "
            "WHERE s.namespace = per.namespace AND s.entries <= per.n) "
        )
        # (rows, zero-norm rows, closed rows) of what went.
        counted = (
            "SELECT count(*), count(*) FILTER (WHERE zero_norm), count(*) FILTER (WHERE NOT cur) "
            "FROM gone"
        )
        # The replaced entries (the current versions of the batch's ids) and the batch
        # that replaces them are in one namespace: its count changes once, by the
        # batch's size (%s) less what it replaced. Each replaced row's version comes
        # back: its replacement keeps it (an upsert replaces the current version in
        # place, with no history).
        self.replace = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE namespace = %s AND id = ANY(%s) "
            "AND valid_to IS NULL "
            + gone
            + ", id, version, supersedes, valid_from, occurred_at), "
            + postings
            + "counted AS (INSERT INTO {ns} AS s (namespace, entries, total_len) "
            "SELECT %s, %s - count(*), %s - coalesce(sum(doc_len), 0) FROM gone "
            "ON CONFLICT (namespace) DO UPDATE SET entries = s.entries + excluded.entries, "
            "total_len = s.total_len + excluded.total_len) "
            "SELECT id, zero_norm, version, supersedes, coalesce(valid_from, occurred_at) "
            "FROM gone"
        ).format(**f)
        self.evict = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE seq IN "
            "(SELECT seq FROM {table} WHERE seq < %s ORDER BY seq LIMIT %s) "
            + gone
            + "), "
            + after
            + counted
        ).format(**f)
        # Each write's reclaim: at most RECLAIM_ROWS rows expired by now (%s), any
        # version, found through the partial index on expires_at.
        self.reclaim = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE seq IN "
            "(SELECT seq FROM {table} WHERE expires_at <= %s LIMIT %s) "
            + gone
            + "), "
            + after
            + counted
        ).format(**f)
        self.update_meta = sql.SQL(
            "UPDATE {meta} SET live_entries = live_entries + %s, "
            "evicted_entries = evicted_entries + %s, "
            "zero_norm_entries = zero_norm_entries + %s, "
            "closed_entries = closed_entries + %s, version = version + 1 "
            "RETURNING live_entries, evicted_entries, zero_norm_entries, version"
        ).format(**f)
        self.read_counts = sql.SQL(
            "SELECT live_entries, evicted_entries, zero_norm_entries, version FROM {meta}"
        ).format(**f)
        # A delete, a forget: every version of the memories, with what the embedding
        # cache may hold of their texts.
        forgotten = (
            ", id, text, exact_text, index_text), "
            + after
            + "SELECT id, zero_norm, cur, text, exact_text, index_text FROM gone ORDER BY seq"
        )
        self.delete_in = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE id = ANY(%s) AND namespace = %s "
            + gone
            + forgotten
        ).format(**f)
        self.delete_namespace = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE namespace = %s " + gone + forgotten
        ).format(**f)
        self.clear_all = sql.SQL(
            "WITH gone AS (DELETE FROM {table} " + gone + "), " + after + counted
        ).format(**f)
        # The current, unexpired version of one memory (an update's check).
        self.current_version = sql.SQL(
            "SELECT seq, version FROM {table} WHERE namespace = %(ns)s AND id = %(id)s "
            "AND {current}"
        ).format(**f)
        # An update closes the current version at the new one's valid_from: its row,
        # its postings (moved to T_xterms, or closed there if it expires) and its
        # namespace's count of current entries and their length.
        self.close = sql.SQL(
            "WITH closed AS (UPDATE {table} SET valid_to = %(at)s WHERE seq = %(seq)s "
            "RETURNING namespace, doc_len, expires_at), "
            "moved AS (DELETE FROM {terms} WHERE seq = %(seq)s "
            "RETURNING seq, term, namespace, tf, doc_len), "
            "xmoved AS (INSERT INTO {xterms} (seq, term, namespace, tf, doc_len, valid_to, "
            "expires_at) SELECT m.seq, m.term, m.namespace, m.tf, m.doc_len, %(at)s, "
            "c.expires_at FROM moved m CROSS JOIN closed c), "
            "xclosed AS (UPDATE {xterms} SET valid_to = %(at)s WHERE seq = %(seq)s) "
            "UPDATE {ns} s SET entries = s.entries - 1, total_len = s.total_len - c.doc_len "
            "FROM closed c WHERE s.namespace = c.namespace"
        ).format(**f)
        # ``dedupe="exact"``: the current, unexpired entries of the namespace whose
        # text has one of these digests, one probe of the (namespace, md5(text)) index
        # of current rows per digest (with ``= ANY`` and ``ORDER BY seq`` the planner
        # walked the primary key, or filtered every row on a fresh table: 1.7x the
        # write of 100 documents; OFFSET 0 keeps the lateral subquery from being
        # flattened into a hash join over the whole namespace, which a stale row
        # estimate chose); the texts themselves are compared, and the rows ordered,
        # after.
        self.same_texts = sql.SQL(
            "SELECT e.id, e.seq, e.text, e.exact_text FROM unnest(%(digests)s::text[]) "
            "AS d(h) CROSS JOIN LATERAL (SELECT id, seq, text, exact_text FROM {table} "
            "WHERE namespace = %(ns)s AND md5(text) = d.h AND {current} OFFSET 0) e"
        ).format(**f)
        # ``dedupe="near"``: each vector's nearest current, unexpired entry of the
        # namespace, exactly (the second key keeps the planner off an HNSW index).
        self.nearest = sql.SQL(
            "SELECT u.i, n.id, n.seq, n.dist FROM unnest(%(vectors)s::text[]) "
            "WITH ORDINALITY AS u(v, i) CROSS JOIN LATERAL (SELECT id, seq, "
            "embedding <#> u.v::vector AS dist FROM {table} WHERE namespace = %(ns)s "
            "AND {current} ORDER BY dist, seq DESC LIMIT 1) n"
        ).format(**f)
        self._select = (
            "SELECT id FROM {table} WHERE namespace = %(ns)s AND {current} AND {filter} "
            "GROUP BY id ORDER BY min(seq)"
        )
        # A rewrite's row as it is now, then the row with its new index text.
        self.rewritten = sql.SQL(
            "SELECT namespace, doc_len, zero_norm, valid_to IS NULL, valid_to, expires_at "
            "FROM {table} WHERE seq = %s"
        ).format(**f)
        self.rewrite = sql.SQL(
            "UPDATE {table} SET index_text = %s, embedding = %s::vector, zero_norm = %s, "
            "doc_len = %s WHERE seq = %s"
        ).format(**f)
        self.rewrite_length = sql.SQL(
            "UPDATE {ns} SET total_len = total_len + %s WHERE namespace = %s"
        ).format(**f)
        self.drop_postings = sql.SQL(
            "WITH a AS (DELETE FROM {terms} WHERE seq = %(seq)s) "
            "DELETE FROM {xterms} WHERE seq = %(seq)s"
        ).format(**f)
        self.insert_terms = sql.SQL(
            "INSERT INTO {terms} (seq, term, namespace, tf, doc_len) VALUES (%s, %s, %s, %s, %s)"
        ).format(**f)
        self.insert_xterms = sql.SQL(
            "INSERT INTO {xterms} (seq, term, namespace, tf, doc_len, valid_to, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)"
        ).format(**f)
        self.keyword_index = sql.SQL("SELECT keyword_index FROM {meta}").format(**f)

    def selection(
        self, request: Forget, now: dt.datetime
    ) -> tuple[sql.Composed, dict[str, object]]:
        """The statement (and its parameters) of the ids a forget by filter and
        ``before`` selects: those whose current, unexpired version matches, oldest
        first."""
        where = translate(request.filter, sql.Identifier("metadata"))
        condition = where.where
        if request.before is not None:
            condition = sql.SQL("{} AND occurred_at < {}::timestamptz").format(
                condition, where.bind(request.before)
            )
        statement = sql.SQL(self._select).format(
            table=self.names.table, current=visible(current=True), filter=condition
        )
        return statement, {**where.params, "ns": request.namespace, "now": now, "as_of": None}

    def _rewrite(
        self, conn: psycopg.Connection[TupleRow], rewrites: Sequence[Rewrite], delta: _Delta
    ) -> list[str]:
        """Give each entry of ``rewrites`` that is still there (by its sequence) its
        new index text, vector and postings, in the caller's transaction; the stale
        index texts."""
        stale: list[str] = []
        keyword_index: bool | None = None
        for r in rewrites:
            row = conn.execute(self.rewritten, (r.seq,)).fetchone()
            if row is None:
                continue  # gone since (evicted, reclaimed, removed itself)
            namespace, old_len, old_zero, current, valid_to, expires_at = row
            conn.execute(self.rewrite, (r.index_text, r.vector, r.zero, r.doc_len, r.seq))
            delta.zero += int(r.zero) - int(bool(old_zero))
            if current and r.doc_len != old_len:
                conn.execute(self.rewrite_length, (r.doc_len - int(old_len), namespace))
            if keyword_index is None:
                flag = conn.execute(self.keyword_index).fetchone()
                keyword_index = bool(flag is not None and flag[0])
            if keyword_index:
                conn.execute(self.drop_postings, {"seq": r.seq})
                with conn.cursor() as cur:
                    if valid_to is None and expires_at is None:
                        cur.executemany(
                            self.insert_terms,
                            [(r.seq, t, namespace, tf, r.doc_len) for t, tf in r.terms.items()],
                        )
                    else:
                        cur.executemany(
                            self.insert_xterms,
                            [
                                (r.seq, t, namespace, tf, r.doc_len, valid_to, expires_at)
                                for t, tf in r.terms.items()
                            ],
                        )
            stale.append(r.stale)
        return stale

    def _lock(self, conn: psycopg.Connection[TupleRow]) -> None:
        locked = conn.execute(self.lock_meta).fetchone()
        assert locked is not None
        _check_version(self.names, int(locked[1]))

    def _finish(self, conn: psycopg.Connection[TupleRow], delta: _Delta) -> Counts:
        row = conn.execute(
            self.update_meta, (delta.entries, delta.evicted, delta.zero, delta.closed)
        ).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))

    def _reclaim(
        self, conn: psycopg.Connection[TupleRow], now: dt.datetime, delta: _Delta
    ) -> None:
        """Delete at most :data:`RECLAIM_ROWS` rows expired by ``now``, under the lock."""
        delta.gone(conn.execute(self.reclaim, (now, RECLAIM_ROWS)).fetchone())

    def store(
        self, conn: psycopg.Connection[TupleRow], p: PreparedEntries, cap: int, now: dt.datetime
    ) -> tuple[Committed, Counts]:
        """Reclaim expired rows; for an update, check and close the current version;
        leave out the duplicates (``dedupe``); replace the batch's current ids, insert
        it, evict the oldest past the cap."""
        locked = conn.execute(self.lock_meta_keyword).fetchone()
        assert locked is not None
        _check_version(self.names, int(locked[2]))
        keyword_index = bool(locked[1])
        delta = _Delta()
        self._reclaim(conn, now, delta)
        if p.supersede is not None:
            self._supersede(conn, p.namespace, p.supersede, now, delta)
        survivors = len(p.vectors)
        # Per entry of the batch: None (written), or the index of the earlier entry it
        # duplicates, or the (id, sequence) of the stored entry it duplicates.
        dupes: list[int | tuple[str, int] | None] = [None] * survivors
        if p.dedupe == "exact":
            dupes = self._exact_duplicates(conn, p, now)
        elif p.dedupe == "near":
            dupes = self._near_duplicates(conn, p, now)
        keep = [i for i, dupe in enumerate(dupes) if dupe is None]
        written = p if len(keep) == survivors else p.keeping(keep)
        n = len(keep)
        seqs: list[int] = []
        if n:
            seq = self.names.seq_regclass
            row = conn.execute(self.next_seqs, (seq, seq, n)).fetchone()
            assert row is not None
            seqs = list(range(int(row[0]) - n + 1, int(row[0]) + 1))
        ids = [f"turn-{seq}" for seq in seqs] if written.ids is None else written.ids
        evicted = replaced = 0
        if n:
            # An id is unique among current versions of its namespace: a current one is
            # replaced (its row goes, the new row gets a new sequence and keeps its
            # version), which frees its place before eviction.
            rows = conn.execute(
                self.replace,
                (written.namespace, ids, written.namespace, n, sum(written.doc_lens)),
            ).fetchall()
            replaced = len(rows)
            delta.entries -= replaced
            delta.zero -= sum(1 for r in rows if r[1])
            versions = {
                str(r[0]): (int(r[2]), None if r[3] is None else int(r[3]), r[4]) for r in rows
            }
            terms = None
            if keyword_index:
                indexed = indexed_texts(written.texts, written.index_texts)
                terms = written.terms if written.terms is not None else term_counts(indexed)[1]
            self._copy(
                conn,
                written,
                seqs,
                ids,
                terms,
                self._positions(conn, written),
                self._versions(written, ids, versions),
            )
            delta.entries += n
            excess = int(locked[0]) + delta.entries - cap
            if excess > 0:
                # Insert first, then evict: the sequence guard keeps the new rows.
                evicted = delta.gone(conn.execute(self.evict, (seqs[0], excess)).fetchone())
                delta.evicted += evicted
        new_zero = sum(written.zero)
        delta.zero += new_zero
        delta.evicted += p.dropped
        counts = self._finish(conn, delta)
        out_ids, out_seqs, duplicates = _outcome(dupes, keep, ids, seqs)
        committed = Committed(
            ids=out_ids,
            sequences=out_seqs,
            evicted=evicted + p.dropped,
            replaced=replaced,
            zero_norm=new_zero,
            duplicates=duplicates,
        )
        return committed, counts

    def _supersede(
        self,
        conn: psycopg.Connection[TupleRow],
        namespace: str,
        supersede: Supersede,
        now: dt.datetime,
        delta: _Delta,
    ) -> None:
        """An update's check, under the lock: the memory's current version must still
        be ``supersede.version`` (0: none), else :class:`StaleVersion`, which rolls the
        transaction back. Then close it at ``valid_from``; or, for version 0, delete
        what is left of a memory of that id (an expired current version not reclaimed
        yet, the closed versions of one whose current version went), so that it starts
        again at version 1."""
        params = {"ns": namespace, "id": supersede.id, "now": now, "as_of": None}
        row = conn.execute(self.current_version, params).fetchone()
        current = 0 if row is None else int(row[1])
        if current != supersede.version:
            raise StaleVersion(supersede.id, namespace, supersede.version, current)
        if row is None:
            rows = conn.execute(self.delete_in, ([supersede.id], namespace)).fetchall()
            _count_removed(rows, delta)
            return
        conn.execute(self.close, {"at": supersede.valid_from, "seq": int(row[0])})
        delta.closed += 1

    def _exact_duplicates(
        self, conn: psycopg.Connection[TupleRow], p: PreparedEntries, now: dt.datetime
    ) -> list[int | tuple[str, int] | None]:
        """Each entry's duplicate under ``dedupe="exact"``: the oldest current,
        unexpired entry of the namespace with the same exact text, else the first
        entry of the batch with it, else None."""
        digests = sorted({_md5(t) for t in p.texts})
        params = {"ns": p.namespace, "digests": digests, "now": now, "as_of": None}
        stored: dict[str, tuple[str, int]] = {}
        rows = sorted(conn.execute(self.same_texts, params).fetchall(), key=lambda r: int(r[1]))
        for entry_id, seq, text, exact in rows:
            stored.setdefault(_decoded(str(text), exact), (str(entry_id), int(seq)))
        first: dict[str, int] = {}
        out: list[int | tuple[str, int] | None] = []
        for i in range(len(p.texts)):
            text = p.exact_text(i)
            if text in stored:
                out.append(stored[text])
            elif text in first:
                out.append(first[text])
            else:
                first[text] = i
                out.append(None)
        return out

    def _near_duplicates(
        self, conn: psycopg.Connection[TupleRow], p: PreparedEntries, now: dt.datetime
    ) -> list[int | tuple[str, int] | None]:
        """Each entry's duplicate under ``dedupe="near"``: the nearest current,
        unexpired entry of the namespace if its cosine is at least the threshold, else
        the nearest earlier written entry of the batch that is, else None."""
        assert p.matrix is not None
        threshold = NEAR_DUPLICATE_COSINE if p.near_threshold is None else p.near_threshold
        params = {
            "ns": p.namespace,
            "vectors": [vector_literal(row) for row in p.matrix],
            "now": now,
            "as_of": None,
        }
        nearest: dict[int, tuple[str, int]] = {}
        for i, entry_id, seq, dist in conn.execute(self.nearest, params).fetchall():
            # - turns pgvector's negative inner product into the cosine.
            if -float(dist) >= threshold:
                nearest[int(i) - 1] = (str(entry_id), int(seq))
        out: list[int | tuple[str, int] | None] = []
        kept: list[int] = []
        for i in range(len(p.vectors)):
            if i in nearest:
                out.append(nearest[i])
                continue
            if kept:
                cosines = p.matrix[kept] @ p.matrix[i]
                best = int(np.argmax(cosines))
                if float(cosines[best]) >= threshold:
                    out.append(kept[best])
                    continue
            kept.append(i)
            out.append(None)
        return out

    def _versions(
        self,
        p: PreparedEntries,
        ids: list[str],
        replaced: dict[str, tuple[int, int | None, dt.datetime]],
    ) -> list[tuple[dt.datetime, int, int | None]]:
        """Each new row's ``(valid_from, version, supersedes)``: an update's new
        version; a replaced current version's own (its number and ``valid_from``, the
        ``valid_to`` of the one before, as the in-memory store keeps them); else
        version 1, valid from its ``occurred_at``."""
        out: list[tuple[dt.datetime, int, int | None]] = []
        for entry_id, occurred in zip(ids, p.occurred, strict=True):
            if p.supersede is not None:
                version = p.supersede.version + 1
                out.append((p.supersede.valid_from, version, p.supersede.version or None))
                continue
            old = replaced.get(entry_id)
            out.append((occurred, 1, None) if old is None else (old[2], old[0], old[1]))
        return out

    def _positions(
        self, conn: psycopg.Connection[TupleRow], p: PreparedEntries
    ) -> list[int | None]:
        """Each entry's position in its conversation (None without one), drawn from
        ``T_conv`` in the caller's transaction, in batch order."""
        n = len(p.vectors)
        if p.conversations is None:
            return [None] * n
        counts = Counter(c for c in p.conversations if c is not None)
        if not counts:
            return [None] * n
        rows = conn.execute(
            self.draw_positions, (p.namespace, list(counts), list(counts.values()))
        ).fetchall()
        # The batch's first position in each conversation, less one.
        given = {str(name): int(last) - counts[str(name)] for name, last in rows}
        positions: list[int | None] = []
        for conversation in p.conversations:
            if conversation is None:
                positions.append(None)
                continue
            given[conversation] += 1
            positions.append(given[conversation])
        return positions

    def _copy(
        self,
        conn: psycopg.Connection[TupleRow],
        p: PreparedEntries,
        seqs: list[int],
        ids: list[str],
        terms: list[dict[str, int]] | None,
        positions: list[int | None],
        versions: list[tuple[dt.datetime, int, int | None]],
    ) -> None:
        """COPY the batch's rows and (unless ``terms`` is None) BM25 postings in, in
        binary: those of entries that expire into ``T_xterms``, the others into
        ``T_terms``."""
        n = len(seqs)
        conversations = [None] * n if p.conversations is None else p.conversations
        index_texts = [None] * n if p.index_texts is None else p.index_texts
        expires: list[dt.datetime | None] = p.expires if p.expires else [None] * n
        with conn.cursor() as cur:
            with cur.copy(self.copy_entries) as copy:
                copy.set_types(_ENTRY_TYPES)
                write = copy.write_row
                # Each row as zip makes it: no per-row tuple of our own.
                for row in zip(
                    seqs,
                    ids,
                    [p.namespace] * n,
                    [p.source] * n,
                    p.source_ids,
                    p.texts,
                    p.exact,
                    p.payloads,
                    p.metadata,
                    p.meta_raw,
                    p.doc_lens,
                    p.vectors,
                    p.zero,
                    p.occurred,
                    conversations,
                    positions,
                    index_texts,
                    *zip(*versions, strict=True),
                    expires,
                    strict=True,
                ):
                    write(row)
            if terms is None or not any(terms):
                return
            plain = [i for i in range(n) if expires[i] is None]
            if plain:
                with cur.copy(self.copy_terms) as copy:
                    copy.set_types(_TERM_TYPES)
                    write = copy.write_row
                    for i in plain:
                        seq, length = seqs[i], p.doc_lens[i]
                        for term, tf in terms[i].items():
                            write((seq, term, p.namespace, tf, length))
            if len(plain) < n:
                with cur.copy(self.copy_xterms) as copy:
                    copy.set_types(_XTERM_TYPES)
                    write = copy.write_row
                    for i in range(n):
                        if expires[i] is None:
                            continue
                        seq, length, until = seqs[i], p.doc_lens[i], expires[i]
                        for term, tf in terms[i].items():
                            write((seq, term, p.namespace, tf, length, None, until))

    def delete(
        self,
        conn: psycopg.Connection[TupleRow],
        wanted: list[str],
        storable: list[str],
        namespace: str | None,
        now: dt.datetime,
        rewrites: Sequence[Rewrite] = (),
    ) -> tuple[DeleteResult, Counts, Removed]:
        """Forget by ids (every version of each), as a :class:`DeleteResult`; the
        entries that quoted them get their new index texts (``rewrites``)."""
        self._lock(conn)
        delta = _Delta()
        self._reclaim(conn, now, delta)
        rows: list[TupleRow] = []
        if storable and namespace is not None:
            rows = conn.execute(self.delete_in, (storable, namespace)).fetchall()
        removed = _count_removed(rows, delta, self._rewrite(conn, rewrites, delta))
        counts = self._finish(conn, delta)
        gone = set(removed.ids)
        result = DeleteResult(
            deleted=[i for i in wanted if i in gone],
            missing=[i for i in wanted if i not in gone],
        )
        return result, counts, removed

    def forget(
        self,
        conn: psycopg.Connection[TupleRow],
        request: Forget,
        now: dt.datetime,
        rewrites: Sequence[Rewrite] = (),
    ) -> tuple[Forgotten, Counts, Removed]:
        """Every version of the memories ``request`` selects: by ids; or those whose
        current, unexpired version matches its filter and happened before its
        ``before``; or (neither) every memory of the namespace, whatever is left of
        it. The entries that quoted them get their new index texts (``rewrites``)."""
        self._lock(conn)
        delta = _Delta()
        self._reclaim(conn, now, delta)
        namespace = request.namespace
        if request.ids is not None:
            rows = conn.execute(self.delete_in, (request.ids, namespace)).fetchall()
            order = {i: n for n, i in enumerate(request.ids)}
            ids = sorted(_ids_of(rows), key=lambda i: order.get(i, len(order)))
        elif request.filter is None and request.before is None:
            rows = conn.execute(self.delete_namespace, (namespace,)).fetchall()
            ids = _ids_of(rows)
        else:
            statement, params = self.selection(request, now)
            ids = [str(r[0]) for r in conn.execute(statement, params).fetchall()]
            rows = conn.execute(self.delete_in, (ids, namespace)).fetchall() if ids else []
        removed = _count_removed(rows, delta, self._rewrite(conn, rewrites, delta))
        counts = self._finish(conn, delta)
        return Forgotten(ids=ids, versions=removed.rows), counts, removed

    def clear(
        self, conn: psycopg.Connection[TupleRow], namespace: str | None, now: dt.datetime
    ) -> tuple[Cleared, Counts, Removed]:
        self._lock(conn)
        delta = _Delta()
        # Every write reclaims first (as in memory), so an expired entry is never
        # counted as cleared, whatever the scope.
        self._reclaim(conn, now, delta)
        if namespace is None:
            removed = Removed([], delta.gone(conn.execute(self.clear_all).fetchone()), None)
        else:
            rows = conn.execute(self.delete_namespace, (namespace,)).fetchall()
            removed = _count_removed(rows, delta)
        counts = self._finish(conn, delta)
        return Cleared(removed=removed.rows), counts, removed

    def counts(self, conn: psycopg.Connection[TupleRow]) -> Counts:
        row = conn.execute(self.read_counts).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))


def _ids_of(rows: list[TupleRow]) -> list[str]:
    """The ids of a ``delete_in``/``delete_namespace`` statement's rows, each once."""
    return list(dict.fromkeys(str(row[0]) for row in rows))


def _count_removed(rows: list[TupleRow], delta: _Delta, stale: Sequence[str] = ()) -> Removed:
    """Count what a ``delete_in``/``delete_namespace`` statement removed (its rows:
    ``(id, zero_norm, cur, text, exact_text, index_text)``, oldest first); ``stale``
    are the index texts of the entries rewritten, which the cache may hold too."""
    ids: dict[str, None] = {}
    texts: dict[str, None] = dict.fromkeys(stale)
    for entry_id, zero, cur, text, exact, index_text in rows:
        ids[str(entry_id)] = None
        delta.entries -= 1
        delta.zero -= bool(zero)
        delta.closed -= not cur
        texts[_decoded(str(text), exact)] = None
        if index_text is not None:
            texts[str(index_text)] = None
    return Removed(list(ids), len(rows), list(texts))


def _outcome(
    dupes: list[int | tuple[str, int] | None], keep: list[int], ids: list[str], seqs: list[int]
) -> tuple[list[str], list[int], list[str]]:
    """Per entry of the batch, its id and sequence (a duplicate's: those of the entry it
    duplicates), and the duplicates' ids, one per duplicate, in order."""
    written = {i: (ids[k], seqs[k]) for k, i in enumerate(keep)}
    out_ids: list[str] = []
    out_seqs: list[int] = []
    duplicates: list[str] = []
    for i, dupe in enumerate(dupes):
        if dupe is None:
            entry_id, seq = written[i]
        else:
            entry_id, seq = written[dupe] if isinstance(dupe, int) else dupe
            duplicates.append(entry_id)
        out_ids.append(entry_id)
        out_seqs.append(seq)
    return out_ids, out_seqs, duplicates
