"""The SQL of the pg store: one object per table, with every statement composed once.

Every value is a bound parameter; only the validated, quoted names are composed in.
Each method runs inside the transaction that :meth:`_PgStoreActor.call` opened.
"""

from __future__ import annotations

from typing import Any

import attrs
import msgspec
import psycopg
from psycopg import sql

from protocol import (
    Cleared,
    Deleted,
    RetrievalReport,
    RetrievedTurn,
    TurnsStored,
    UnifiedMessage,
)

from ._pg_schema import Names

__all__ = ["Counts", "PreparedTurns", "Statements"]

_MESSAGE_DECODER = msgspec.msgpack.Decoder(UnifiedMessage)
_METADATA_DECODER = msgspec.json.Decoder(dict[str, Any])


@attrs.frozen
class Counts:
    entries: int
    evicted: int
    zero: int
    version: int


@attrs.frozen
class PreparedTurns:
    vectors: list[str]
    zero: list[bool]
    payloads: list[bytes]
    texts: list[str]
    namespace: str
    source: str
    metadata: str
    dropped: int


class Statements:
    """The SQL of one table, composed once; every value is a bound parameter."""

    def __init__(self, names: Names) -> None:
        self.names = names
        f = {"table": names.table, "meta": names.meta}
        self.lock_meta = sql.SQL("SELECT entries FROM {meta} FOR UPDATE").format(**f)
        self.next_seqs = sql.SQL("SELECT nextval(%s::regclass) FROM generate_series(1, %s)")
        self.insert = sql.SQL(
            "INSERT INTO {table} "
            "(seq, id, namespace, source, text, message, metadata, embedding, zero_norm) "
            "SELECT u.seq, u.id, %s, %s, u.text, u.message, %s::jsonb, u.embedding::vector, "
            "u.zero_norm FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bytea[], "
            "%s::text[], %s::boolean[]) AS u(seq, id, text, message, embedding, zero_norm)"
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
        delete = (
            "WITH gone AS (DELETE FROM {table} WHERE id = ANY(%s){scope} "
            "RETURNING id, zero_norm) SELECT id, zero_norm FROM gone"
        )
        self.delete_any = sql.SQL(delete).format(scope=sql.SQL(""), **f)
        self.delete_in = sql.SQL(delete).format(scope=sql.SQL(" AND namespace = %s"), **f)
        clear = (
            "WITH gone AS (DELETE FROM {table}{scope} RETURNING zero_norm) "
            "SELECT count(*), count(*) FILTER (WHERE zero_norm) FROM gone"
        )
        self.clear_all = sql.SQL(clear).format(scope=sql.SQL(""), **f)
        self.clear_in = sql.SQL(clear).format(scope=sql.SQL(" WHERE namespace = %s"), **f)
        # One statement, so the hits, the count in scope and the counters come from one
        # snapshot. The distance is pgvector's negative inner product, ascending; ties go
        # to the newest sequence. The second sort key also keeps an approximate index
        # (phase 2, opt-in) from being used by this exact query.
        read = (
            "SELECT m.entries, m.evicted_entries, m.zero_norm_entries, m.version, c.n, "
            "h.seq, h.id, h.namespace, h.source, h.message, h.metadata, h.dist "
            "FROM {meta} m "
            "CROSS JOIN (SELECT count(*) AS n FROM {table}{where}) c "
            "LEFT JOIN LATERAL (SELECT seq, id, namespace, source, message, "
            "metadata::text AS metadata, embedding <#> %(q)s::vector AS dist "
            "FROM {table}{where} ORDER BY dist, seq DESC LIMIT %(k)s) h ON true "
            "ORDER BY h.dist, h.seq DESC"
        )
        self.read_all = sql.SQL(read).format(where=sql.SQL(""), **f)
        self.read_in = sql.SQL(read).format(where=sql.SQL(" WHERE namespace = %(ns)s"), **f)

    def _finish(
        self, conn: psycopg.Connection[Any], d_entries: int, d_evicted: int, d_zero: int
    ) -> Counts:
        row = conn.execute(self.update_meta, (d_entries, d_evicted, d_zero)).fetchone()
        assert row is not None
        return Counts(*(int(v) for v in row))

    def store_turns(
        self, conn: psycopg.Connection[Any], p: PreparedTurns, cap: int
    ) -> tuple[TurnsStored, Counts]:
        locked = conn.execute(self.lock_meta).fetchone()
        assert locked is not None
        entries = int(locked[0])
        n = len(p.payloads)
        seqs = sorted(
            int(r[0])
            for r in conn.execute(self.next_seqs, (self.names.seq_regclass, n)).fetchall()
        )
        ids = [f"turn-{seq}" for seq in seqs]
        evicted = evicted_zero = 0
        if n:
            # Insert first, then evict: the sequence guard keeps the new rows.
            conn.execute(
                self.insert,
                (
                    p.namespace,
                    p.source,
                    p.metadata,
                    seqs,
                    ids,
                    p.texts,
                    p.payloads,
                    p.vectors,
                    p.zero,
                ),
            )
            excess = entries + n - cap
            if excess > 0:
                row = conn.execute(self.evict, (seqs[0], excess)).fetchone()
                assert row is not None
                evicted, evicted_zero = int(row[0]), int(row[1])
        new_zero = sum(p.zero)
        counts = self._finish(conn, n - evicted, evicted + p.dropped, new_zero - evicted_zero)
        stored = TurnsStored(
            ids=ids, sequences=seqs, evicted=evicted + p.dropped, zero_norm=new_zero
        )
        return stored, counts

    def delete(
        self,
        conn: psycopg.Connection[Any],
        wanted: list[str],
        storable: list[str],
        namespace: str | None,
    ) -> tuple[Deleted, Counts]:
        conn.execute(self.lock_meta)
        gone: dict[str, bool] = {}
        if storable:
            if namespace is None:
                rows = conn.execute(self.delete_any, (storable,)).fetchall()
            else:
                rows = conn.execute(self.delete_in, (storable, namespace)).fetchall()
            gone = {str(r[0]): bool(r[1]) for r in rows}
        if gone:
            counts = self._finish(conn, -len(gone), 0, -sum(gone.values()))
        else:
            counts = self.counts(conn)
        return (
            Deleted(
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

    def retrieve(
        self, conn: psycopg.Connection[Any], query: str, k: int, namespace: str | None
    ) -> tuple[RetrievalReport, Counts]:
        params: dict[str, object] = {"q": query, "k": k}
        if namespace is None:
            rows = conn.execute(self.read_all, params).fetchall()
        else:
            params["ns"] = namespace
            rows = conn.execute(self.read_in, params).fetchall()
        first = rows[0]
        counts = Counts(int(first[0]), int(first[1]), int(first[2]), int(first[3]))
        turns = [
            RetrievedTurn(
                message=_MESSAGE_DECODER.decode(row[9]),
                # - turns the distance into the similarity; + 0.0 turns -0.0 into 0.0.
                score=-float(row[11]) + 0.0,
                sequence=int(row[5]),
                namespace=row[7],
                source=row[8],
                metadata=_METADATA_DECODER.decode(row[10]),
                id=row[6],
            )
            for row in rows
            if row[5] is not None
        ]
        return RetrievalReport(turns=turns, scanned=int(first[4])), counts
