"""The write SQL of the pg store: one object per table, with every statement composed once.

Every value is a bound parameter; only the validated, quoted names are composed in.
Each method runs inside the transaction that :meth:`_PgStoreActor.call` opened. The
reads are in ``reads.py``; the filter translation in ``filters.py``.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import attrs
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from protocol import (
    ConfigError,
    DeleteResult,
)
from protocol.messages import Cleared

from .._retrieval.bm25 import term_counts
from .._store.index_text import indexed_texts
from .schema import SCHEMA_VERSION, Names

__all__ = ["Committed", "Counts", "PreparedEntries", "Statements"]


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


@attrs.frozen
class Committed:
    ids: list[str]
    sequences: list[int]
    evicted: int  # the dropped head included
    replaced: int
    zero_norm: int


# COPY's column types, by oid, for psycopg's binary dumpers: int8, text x4, bytea x2,
# then the jsonb and the vector as bytea (their values are already in their types'
# binary input form, which binary COPY sends as they are), int4, bool, then
# timestamptz, text, int8, text.
_ENTRY_TYPES = [20, 25, 25, 25, 25, 25, 17, 17, 17, 17, 23, 17, 16, 1184, 25, 20, 25]
_TERM_TYPES = [20, 25, 25, 23, 23]


def _check_version(names: Names, version: int) -> None:
    """Refuse to write a table that a newer trio-recall migrated while this store had
    it open: this version's statements would not keep what that one needs."""
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"table {names.table_name!r} is now at schema version {version} (another "
            f"process migrated it since this store opened it at {SCHEMA_VERSION}); "
            "nothing was written: reopen it with the trio-recall that migrated it"
        )


class Statements:
    """The write SQL of one table, composed once; every value is a bound parameter."""

    def __init__(self, names: Names) -> None:
        self.names = names
        f = {
            "table": names.table,
            "meta": names.meta,
            "terms": names.terms,
            "ns": names.namespaces,
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
            "position, index_text) FROM STDIN (FORMAT binary)"
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
        # Every delete takes its entries' BM25 postings in the same statement: the
        # postings table has no foreign key, whose per-row check was half of a bulk
        # write's time (tables made before keep theirs; its cascade then finds nothing).
        # It also takes them out of their namespaces' counts (T_ns): a namespace's row
        # goes with its last entry, so the table does not grow with namespaces gone.
        gone = "RETURNING seq, zero_norm, namespace, doc_len"
        postings = "postings AS (DELETE FROM {terms} WHERE seq IN (SELECT seq FROM gone)), "
        after = (
            postings + "per AS (SELECT namespace, count(*) AS n, sum(doc_len) AS len FROM gone "
            "GROUP BY namespace), "
            "kept AS (UPDATE {ns} s SET entries = s.entries - per.n, "
            "total_len = s.total_len - per.len FROM per "
            "WHERE s.namespace = per.namespace AND s.entries > per.n), "
            "emptied AS (DELETE FROM {ns} s USING per "
            "WHERE s.namespace = per.namespace AND s.entries <= per.n) "
        )
        counted = "SELECT count(*), count(*) FILTER (WHERE zero_norm) FROM gone"
        # The replaced entries and the batch that replaces them are in one namespace:
        # its count changes once, by the batch's size (%s) less what it replaced.
        self.replace = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE namespace = %s AND id = ANY(%s) "
            + gone
            + "), "
            + postings
            + "counted AS (INSERT INTO {ns} AS s (namespace, entries, total_len) "
            "SELECT %s, %s - count(*), %s - coalesce(sum(doc_len), 0) FROM gone "
            "ON CONFLICT (namespace) DO UPDATE SET entries = s.entries + excluded.entries, "
            "total_len = s.total_len + excluded.total_len) " + counted
        ).format(**f)
        self.evict = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE seq IN "
            "(SELECT seq FROM {table} WHERE seq < %s ORDER BY seq LIMIT %s) "
            + gone
            + "), "
            + after
            + counted
        ).format(**f)
        self.update_meta = sql.SQL(
            "UPDATE {meta} SET live_entries = live_entries + %s, "
            "evicted_entries = evicted_entries + %s, "
            "zero_norm_entries = zero_norm_entries + %s, version = version + 1 "
            "RETURNING live_entries, evicted_entries, zero_norm_entries, version"
        ).format(**f)
        self.read_counts = sql.SQL(
            "SELECT live_entries, evicted_entries, zero_norm_entries, version FROM {meta}"
        ).format(**f)
        self.delete_in = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE id = ANY(%s) AND namespace = %s "
            + gone
            + ", id), "
            + after
            + "SELECT id, zero_norm FROM gone"
        ).format(**f)
        clear = "WITH gone AS (DELETE FROM {table}{scope} " + gone + "), " + after + counted
        self.clear_all = sql.SQL(clear).format(scope=sql.SQL(""), **f)
        self.clear_in = sql.SQL(clear).format(scope=sql.SQL(" WHERE namespace = %s"), **f)

    def _lock(self, conn: psycopg.Connection[TupleRow]) -> None:
        locked = conn.execute(self.lock_meta).fetchone()
        assert locked is not None
        _check_version(self.names, int(locked[1]))

    def _finish(
        self, conn: psycopg.Connection[TupleRow], d_entries: int, d_evicted: int, d_zero: int
    ) -> Counts:
        row = conn.execute(self.update_meta, (d_entries, d_evicted, d_zero)).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))

    def store(
        self, conn: psycopg.Connection[TupleRow], p: PreparedEntries, cap: int
    ) -> tuple[Committed, Counts]:
        """Replace the batch's live ids, insert it, evict the oldest past the cap."""
        locked = conn.execute(self.lock_meta_keyword).fetchone()
        assert locked is not None
        _check_version(self.names, int(locked[2]))
        entries, keyword_index = int(locked[0]), bool(locked[1])
        n = len(p.vectors)
        seqs: list[int] = []
        if n:
            seq = self.names.seq_regclass
            row = conn.execute(self.next_seqs, (seq, seq, n)).fetchone()
            assert row is not None
            seqs = list(range(int(row[0]) - n + 1, int(row[0]) + 1))
        ids = [f"turn-{seq}" for seq in seqs] if p.ids is None else p.ids
        evicted = evicted_zero = replaced = replaced_zero = 0
        if n:
            # An id is unique within its namespace: a live one is replaced (its row goes,
            # the new row gets a new sequence), which frees its place before eviction.
            row = conn.execute(
                self.replace, (p.namespace, ids, p.namespace, n, sum(p.doc_lens))
            ).fetchone()
            assert row is not None
            replaced, replaced_zero = int(row[0]), int(row[1])
            terms = None
            if keyword_index:
                indexed = indexed_texts(p.texts, p.index_texts)
                terms = p.terms if p.terms is not None else term_counts(indexed)[1]
            self._copy(conn, p, seqs, ids, terms, self._positions(conn, p))
            excess = entries - replaced + n - cap
            if excess > 0:
                # Insert first, then evict: the sequence guard keeps the new rows.
                row = conn.execute(self.evict, (seqs[0], excess)).fetchone()
                assert row is not None
                evicted, evicted_zero = int(row[0]), int(row[1])
        new_zero = sum(p.zero)
        counts = self._finish(
            conn,
            n - replaced - evicted,
            evicted + p.dropped,
            new_zero - replaced_zero - evicted_zero,
        )
        committed = Committed(
            ids=ids,
            sequences=seqs,
            evicted=evicted + p.dropped,
            replaced=replaced,
            zero_norm=new_zero,
        )
        return committed, counts

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
    ) -> None:
        """COPY the batch's rows and (unless ``terms`` is None) BM25 postings in, in
        binary."""
        n = len(seqs)
        conversations = [None] * n if p.conversations is None else p.conversations
        index_texts = [None] * n if p.index_texts is None else p.index_texts
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
                    strict=True,
                ):
                    write(row)
            if terms is not None and any(terms):
                with cur.copy(self.copy_terms) as copy:
                    copy.set_types(_TERM_TYPES)
                    write = copy.write_row
                    for seq, counts, length in zip(seqs, terms, p.doc_lens, strict=True):
                        for term, tf in counts.items():
                            write((seq, term, p.namespace, tf, length))

    def delete(
        self,
        conn: psycopg.Connection[TupleRow],
        wanted: list[str],
        storable: list[str],
        namespace: str | None,
    ) -> tuple[DeleteResult, Counts]:
        self._lock(conn)
        gone: dict[str, bool] = {}
        if storable and namespace is not None:
            rows = conn.execute(self.delete_in, (storable, namespace)).fetchall()
            gone = {str(r[0]): bool(r[1]) for r in rows}
        if gone:
            counts = self._finish(conn, -len(gone), 0, -sum(gone.values()))
        else:
            counts = self.counts(conn)
        return (
            DeleteResult(
                deleted=[i for i in wanted if i in gone],
                missing=[i for i in wanted if i not in gone],
            ),
            counts,
        )

    def clear(
        self, conn: psycopg.Connection[TupleRow], namespace: str | None
    ) -> tuple[Cleared, Counts]:
        self._lock(conn)
        if namespace is None:
            row = conn.execute(self.clear_all).fetchone()
        else:
            row = conn.execute(self.clear_in, (namespace,)).fetchone()
        assert row is not None
        removed, zero = int(row[0]), int(row[1])
        counts = self._finish(conn, -removed, 0, -zero) if removed else self.counts(conn)
        return Cleared(removed=removed), counts

    def counts(self, conn: psycopg.Connection[TupleRow]) -> Counts:
        row = conn.execute(self.read_counts).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))
