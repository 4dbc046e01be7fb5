"""The write SQL of the pg store: one object per table, with every statement composed once.

Every value is a bound parameter; only the validated, quoted names are composed in.
Each method runs inside the transaction that :meth:`_PgStoreActor.call` opened. The
reads are in ``reads.py``; the filter translation in ``filters.py``.
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
from psycopg import sql

from protocol import Cleared, DeleteResult

from .schema import Names

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
        vectors: pgvector literals, normalized.
        zero: which vectors had zero norm.
        payloads: a turn's message as msgpack, or None for a document.
        texts: the searchable text (``schema.search_text``).
        exact: the exact text where the searchable one differs, else None.
        metadata: the jsonb text that filters read (``schema.filter_json``).
        meta_raw: the exact metadata as msgpack, or None for ``{}``.
        ids: one id per entry, or None for turns named ``turn-<sequence>``.
        source_ids: a document's source id, or None.
        doc_lens: each text's BM25 length.
        terms: each text's distinct BM25 terms and their frequencies.
        dropped: the head of an over-long batch, counted as evicted.
    """

    vectors: list[str]
    zero: list[bool]
    payloads: list[bytes | None]
    texts: list[str]
    exact: list[bytes | None]
    metadata: list[str]
    meta_raw: list[bytes | None]
    ids: list[str] | None
    source_ids: list[str | None]
    doc_lens: list[int]
    terms: list[dict[str, int]]
    namespace: str
    source: str
    dropped: int


@attrs.frozen
class Committed:
    ids: list[str]
    sequences: list[int]
    evicted: int  # the dropped head included
    replaced: int
    zero_norm: int


class Statements:
    """The write SQL of one table, composed once; every value is a bound parameter."""

    def __init__(self, names: Names) -> None:
        self.names = names
        f = {"table": names.table, "meta": names.meta, "terms": names.terms}
        self.lock_meta = sql.SQL("SELECT entries FROM {meta} FOR UPDATE").format(**f)
        self.next_seqs = sql.SQL("SELECT nextval(%s::regclass) FROM generate_series(1, %s)")
        self.insert = sql.SQL(
            "INSERT INTO {table} (seq, id, namespace, source, source_id, text, exact_text, "
            "message, metadata, meta_raw, doc_len, embedding, zero_norm) "
            "SELECT u.seq, u.id, %s, %s, u.source_id, u.text, u.exact_text, u.message, "
            "u.metadata::jsonb, u.meta_raw, u.doc_len, u.embedding::vector, u.zero_norm "
            "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::bytea[], "
            "%s::bytea[], %s::text[], %s::bytea[], %s::integer[], %s::text[], %s::boolean[]) "
            "AS u(seq, id, source_id, text, exact_text, message, metadata, meta_raw, doc_len, "
            "embedding, zero_norm)"
        ).format(**f)
        self.insert_terms = sql.SQL(
            "INSERT INTO {terms} (seq, term, namespace, tf) "
            "SELECT u.seq, u.term, %s, u.tf "
            "FROM unnest(%s::bigint[], %s::text[], %s::integer[]) AS u(seq, term, tf)"
        ).format(**f)
        self.replace = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE namespace = %s AND id = ANY(%s) "
            "RETURNING zero_norm) "
            "SELECT count(*), count(*) FILTER (WHERE zero_norm) FROM gone"
        ).format(**f)
        self.evict = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE seq IN "
            "(SELECT seq FROM {table} WHERE seq < %s ORDER BY seq LIMIT %s) "
            "RETURNING zero_norm) "
            "SELECT count(*), count(*) FILTER (WHERE zero_norm) FROM gone"
        ).format(**f)
        self.update_meta = sql.SQL(
            "UPDATE {meta} SET entries = entries + %s, evicted_entries = evicted_entries + %s, "
            "zero_norm_entries = zero_norm_entries + %s, version = version + 1 "
            "RETURNING entries, evicted_entries, zero_norm_entries, version"
        ).format(**f)
        self.read_counts = sql.SQL(
            "SELECT entries, evicted_entries, zero_norm_entries, version FROM {meta}"
        ).format(**f)
        self.delete_in = sql.SQL(
            "WITH gone AS (DELETE FROM {table} WHERE id = ANY(%s) AND namespace = %s "
            "RETURNING id, zero_norm) SELECT id, zero_norm FROM gone"
        ).format(**f)
        clear = (
            "WITH gone AS (DELETE FROM {table}{scope} RETURNING zero_norm) "
            "SELECT count(*), count(*) FILTER (WHERE zero_norm) FROM gone"
        )
        self.clear_all = sql.SQL(clear).format(scope=sql.SQL(""), **f)
        self.clear_in = sql.SQL(clear).format(scope=sql.SQL(" WHERE namespace = %s"), **f)

    def _finish(
        self, conn: psycopg.Connection[Any], d_entries: int, d_evicted: int, d_zero: int
    ) -> Counts:
        row = conn.execute(self.update_meta, (d_entries, d_evicted, d_zero)).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))

    def store(
        self, conn: psycopg.Connection[Any], p: PreparedEntries, cap: int
    ) -> tuple[Committed, Counts]:
        """Replace the batch's live ids, insert it, evict the oldest past the cap."""
        locked = conn.execute(self.lock_meta).fetchone()
        assert locked is not None
        entries = int(locked[0])
        n = len(p.vectors)
        seqs = sorted(
            int(r[0])
            for r in conn.execute(self.next_seqs, (self.names.seq_regclass, n)).fetchall()
        )
        ids = [f"turn-{seq}" for seq in seqs] if p.ids is None else p.ids
        evicted = evicted_zero = replaced = replaced_zero = 0
        if n:
            # An id is unique within its namespace: a live one is replaced (its row goes,
            # the new row gets a new sequence), which frees its place before eviction.
            row = conn.execute(self.replace, (p.namespace, ids)).fetchone()
            assert row is not None
            replaced, replaced_zero = int(row[0]), int(row[1])
            conn.execute(
                self.insert,
                (
                    p.namespace,
                    p.source,
                    seqs,
                    ids,
                    p.source_ids,
                    p.texts,
                    p.exact,
                    p.payloads,
                    p.metadata,
                    p.meta_raw,
                    p.doc_lens,
                    p.vectors,
                    p.zero,
                ),
            )
            t_seqs: list[int] = []
            t_terms: list[str] = []
            t_tfs: list[int] = []
            for seq, terms in zip(seqs, p.terms, strict=True):
                for term, tf in terms.items():
                    t_seqs.append(seq)
                    t_terms.append(term)
                    t_tfs.append(tf)
            if t_seqs:
                conn.execute(self.insert_terms, (p.namespace, t_seqs, t_terms, t_tfs))
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

    def delete(
        self,
        conn: psycopg.Connection[Any],
        wanted: list[str],
        storable: list[str],
        namespace: str | None,
    ) -> tuple[DeleteResult, Counts]:
        conn.execute(self.lock_meta)
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
        self, conn: psycopg.Connection[Any], namespace: str | None
    ) -> tuple[Cleared, Counts]:
        conn.execute(self.lock_meta)
        if namespace is None:
            row = conn.execute(self.clear_all).fetchone()
        else:
            row = conn.execute(self.clear_in, (namespace,)).fetchone()
        assert row is not None
        removed, zero = int(row[0]), int(row[1])
        counts = self._finish(conn, -removed, 0, -zero) if removed else self.counts(conn)
        return Cleared(removed=removed), counts

    def counts(self, conn: psycopg.Connection[Any]) -> Counts:
        row = conn.execute(self.read_counts).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))
