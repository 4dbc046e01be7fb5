"""The pg store's actor: the one writer, its inbox, and the database calls of every read.

See ``store.py`` for the store's semantics. The actor validates and embeds a write
(``prepare.py``), changing nothing, then commits it in one transaction
(``sql.py``). Reads run their statements (``reads.py``, ``search.py``) in a
worker thread from the pool's read connections.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
import psycopg_pool
import trio

from protocol import (
    ConfigError,
    DeleteResult,
    Document,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    SearchRequest,
    StoreUnavailable,
    VectorStoreConfig,
    VectorStoreError,
)
from protocol.messages import (
    Clear,
    Cleared,
    Delete,
    DocumentsUpserted,
    Forget,
    Forgotten,
    TurnsStored,
)

from .._embedding.adapter import EmbedderAdapter
from .._embedding.cache import EmbeddingCache
from .._embedding.protocols import AnyEmbedder
from .._retrieval.bm25 import term_counts
from .._retrieval.links import body_terms
from .._store.backend import Counters as StoreCounters
from .._store.backend import Hits, PutDocuments, PutTurns, Query, StaleVersion, Write
from .._store.mailbox import REPLIED, CrashableActor, Envelope
from .._store.prepare import Clock, clamp_k, clock_now, default_clock
from .._store.queries import checked_query, normalize_query
from .filters import Visibility
from .prepare import embedded_rows, prepare_documents, prepare_turns
from .reads import DocRow, Reads
from .schema import (
    Names,
    check_pg_text,
    search_text,
    vector_literal,
)
from .search import run_search
from .sql import Counts, PreparedEntries, Removed, Rewrite, Statements

__all__ = ["_Envelope", "_PgStoreActor", "_representable", "refused", "transient"]

logger = logging.getLogger("trio_recall.pg_store")

T = TypeVar("T")


class _AmbiguousCommit(Exception):
    """The connection broke during COMMIT: the server may or may not have applied it."""


# What a retry may cure (SQLSTATE classes, then single states): a lost or refused
# connection (08), a transaction rolled back by a serialization failure or a deadlock
# (40), the server out of a resource such as connections or memory (53), an operator
# or a timeout ending the statement or the server (57: admin and crash shutdown,
# cannot connect now, query canceled, which is also the statement timeout), a system
# error such as an I/O failure (58), and a lock that was not available (55P03).
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_TRANSIENT_STATES = frozenset({"55P03"})
# What PostgreSQL refuses of the values themselves, every time: a data exception (22: a
# value out of range, a bad encoding, a division by zero) and a program limit exceeded
# (54: an index row past its btree's limit, a statement too complex).
_REFUSED_CLASSES = frozenset({"22", "54"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def transient(error: psycopg.Error) -> bool:
    """Whether retrying ``error`` may succeed: a connection or pool failure on the
    client's side (an ``OperationalError`` without a SQLSTATE), or a state in
    :data:`_TRANSIENT_CLASSES` or :data:`_TRANSIENT_STATES`. Anything else fails the
    same way each time, so it is never retried."""
    state = error.sqlstate
    if state is None:
        return isinstance(error, psycopg.OperationalError)
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


def refused(what: str, error: psycopg.Error) -> ConfigError | None:
    """The :class:`~protocol.ConfigError` for a statement PostgreSQL refuses for its
    values (SQLSTATE class 22 or 54, or a value psycopg cannot send, such as a NUL in a
    text), or None for any other error."""
    state = error.sqlstate
    if state is None:
        if not isinstance(error, psycopg.DataError):
            return None
        name = type(error).__name__
    elif state[:2] in _REFUSED_CLASSES:
        # psycopg names each state's class after its condition: ProgramLimitExceeded.
        name = f"{state} {_CAMEL.sub('_', type(error).__name__).lower()}"
    else:
        return None
    return ConfigError(
        f"{what}: PostgreSQL refused it ({name}: {str(error).strip()}); it was rolled "
        "back, so nothing changed, and it was not retried, since it would fail the "
        "same way again"
    )


_Envelope = Envelope[Write, object]


def _representable(value: str) -> bool:
    """Whether PostgreSQL text can hold ``value`` (no NUL, valid UTF-8)."""
    try:
        check_pg_text("value", value)
    except ConfigError:
        return False
    return True


class _PgStoreActor(CrashableActor):
    """Owns the write side: the inbox's receive end and the writer's connection slot."""

    def __init__(
        self,
        config: VectorStoreConfig,
        embedder: AnyEmbedder,
        names: Names,
        pool: psycopg_pool.ConnectionPool[Any],
        *,
        inbox_size: int,
        pool_size: int,
        retries: int,
        retry_delay: float,
        acquire_timeout: float,
        counts: Counts,
        hnsw: bool = False,
        ef_search: int | None = None,
        keyword_index: bool = True,
        profile: EmbeddingProfile | None = None,
        embed_timeout: float | None = None,
        clock: Clock = default_clock,
    ) -> None:
        self.config = config
        #: The store's clock: every "now" of the store (``Backend.clock``).
        self.clock = clock
        self.crash: BaseException | None = None
        # Set by open_pg_store: the sink of the read events (``vector_store.searched``).
        self.on_event: Callable[[Event], None] | None = None
        self.embedder = EmbedderAdapter(
            embedder, dimensions=config.dimensions, timeout=embed_timeout, on_crash=self.crashed
        )
        self.names = names
        self.pool = pool
        self.inbox_size = inbox_size
        self.retries = retries
        self.retry_delay = retry_delay
        self.acquire_timeout = acquire_timeout
        self.counts = counts
        self.write_limiter = trio.CapacityLimiter(1)
        self.read_limiter = trio.CapacityLimiter(pool_size - 1)
        self.send, self.receive = trio.open_memory_channel[_Envelope](inbox_size)
        # Set by actors.testing.inject_crash: raised at the next write, before its commit.
        self.armed_crash: BaseException | None = None
        self.what = "pg store actor"
        self.logger = logger
        self._statements = Statements(names)
        self.reads = Reads(names, hnsw=hnsw, ef_search=ef_search)
        self.reads.table_entries = counts.entries
        # The table's setting when it was opened: whether a write's preparation computes
        # the BM25 terms (the commit follows the table as it is then; see sql.py).
        self.keyword_index = keyword_index
        self.profile = profile

    # --- lifecycle ---------------------------------------------------------------------

    def observe(self, counts: Counts) -> None:
        """Keep the newest counters seen; a slow read never moves them backwards."""
        if counts.version >= self.counts.version:
            self.counts = counts
            self.reads.table_entries = counts.entries

    # --- the database ------------------------------------------------------------------

    async def call(
        self,
        fn: Callable[[psycopg.Connection[Any]], T],
        *,
        write: bool,
        what: str,
    ) -> T:
        """Run ``fn(conn)`` in one transaction in a worker thread, retrying lost
        connections and transient failures up to ``retries`` times.

        A write's thread is shielded from cancellation: once its transaction has started
        it runs to its end, so the caller learns whether it committed. It is bounded by
        the server's ``statement_timeout``.

        Only what a retry may cure is retried (:func:`transient`). Any other database
        error rolls the transaction back and is raised at once: one that PostgreSQL
        raises for the statement's values as a ``ConfigError`` (:func:`refused`),
        anything else (a table changed under the store, a bug) as it is.

        Raises:
            StoreUnavailable: the database failed every attempt with a transient error
                (the message names ``what``), or a write's connection was lost while
                committing.
            ConfigError: PostgreSQL refused the statement for its values.
        """
        limiter = self.write_limiter if write else self.read_limiter
        attempt = 0
        while True:
            try:
                with trio.CancelScope(shield=write):
                    return await trio.to_thread.run_sync(
                        self._transaction, fn, write, limiter=limiter
                    )
            except _AmbiguousCommit as error:
                cause = error.__cause__
                raise StoreUnavailable(
                    f"{what}: the connection was lost while committing ({cause}); the "
                    "server may or may not have applied it, so it was not retried"
                ) from cause
            except psycopg.Error as error:
                if not transient(error):
                    config_error = refused(what, error)
                    if config_error is not None:
                        raise config_error from error
                    raise
                if attempt >= self.retries:
                    rolled = " and was rolled back; nothing was applied" if write else ""
                    raise StoreUnavailable(
                        f"{what} failed after {attempt + 1} attempt(s){rolled}: "
                        f"{type(error).__name__}: {str(error).strip()}"
                    ) from error
                logger.warning("%s failed (%s: %s); retrying", what, type(error).__name__, error)
            attempt += 1
            await trio.sleep(self.retry_delay * 2 ** (attempt - 1))

    def _transaction(self, fn: Callable[[psycopg.Connection[Any]], T], write: bool) -> T:
        with self.pool.connection(timeout=self.acquire_timeout) as conn:
            committing = False
            try:
                with conn.transaction():
                    result = fn(conn)
                    committing = True
            except psycopg.OperationalError as error:
                # Only a write's lost COMMIT is ambiguous. A read changed nothing, so
                # losing the connection at its end is one more failed attempt, retried
                # and reported as that read (never "while committing").
                if committing and write:
                    raise _AmbiguousCommit() from error
                raise
            return result

    # --- writes ------------------------------------------------------------------------

    async def _handle(self, envelope: _Envelope) -> None:
        request = envelope.request
        # Phase 1 validates and embeds, changing nothing; a failure there is a reply.
        prepared = await self._prepared_or_replied(envelope)
        if prepared is REPLIED:
            return
        assert prepared is None or isinstance(prepared, PreparedEntries | list)
        try:
            if self.armed_crash is not None:
                armed, self.armed_crash = self.armed_crash, None
                raise armed
            result, counts = await self._commit(request, prepared)
        except StaleVersion as stale:
            # An update built on a version another write has replaced: rolled back,
            # nothing changed; the handle reads the memory again and retries.
            envelope.reply.fail(stale)
            return
        except VectorStoreError as error:
            # StoreUnavailable, or a ConfigError for a statement PostgreSQL refused:
            # the transaction rolled back, the store is still sound.
            envelope.reply.fail(error)
            return
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
            return
        self.observe(counts)
        envelope.reply.succeed(result)

    async def _rewrites(
        self, namespace: str, ids: list[str] | None, selection: Forget | None
    ) -> list[Rewrite]:
        """What a delete or forget (of ``ids``, or of what ``selection`` selects)
        rewrites: the entries whose derived index text quoted one of the memories'
        versions as its predecessor, each with its new index text embedded here, so no
        vector, posting or cache entry keeps a trace of the removed text (as the
        in-memory store does). Read before the write's transaction, as a write's
        predecessors are (``newest_texts``); the commit rewrites those still there."""
        if not _representable(namespace):
            return []
        reads, statements, now = self.reads, self._statements, clock_now(self.clock)

        def read(conn: psycopg.Connection[Any]) -> list[tuple[DocRow, str | None]]:
            wanted = [i for i in ids or [] if _representable(i)]
            if selection is not None:
                statement, params = statements.selection(selection, now)
                wanted = [str(r[0]) for r in conn.execute(statement, params).fetchall()]
            return reads.quoting(conn, namespace, wanted) if wanted else []

        found = await self.read(read, "forget")
        if not found:
            return []
        texts = [row.text if index is None else index for row, index in found]
        _, zero, matrix = embedded_rows(
            await self.embedder.documents(texts), len(texts), self.config.dimensions
        )
        lengths, terms = term_counts(texts)
        return [
            Rewrite(
                seq=row.seq,
                index_text=None if index is None else search_text(index),
                vector=vector_literal(matrix[i]),
                zero=zero[i],
                doc_len=lengths[i],
                terms=terms[i],
                stale=row.indexed(),
            )
            for i, (row, index) in enumerate(found)
        ]

    async def _prepare(self, request: Write) -> PreparedEntries | list[Rewrite] | None:
        match request:
            case PutTurns():
                return await prepare_turns(
                    request,
                    self.config,
                    self.embedder,
                    keyword_index=self.keyword_index,
                    before=self.newest_texts,
                    clock=self.clock,
                )
            case PutDocuments():
                return await prepare_documents(
                    request,
                    self.config,
                    self.embedder,
                    keyword_index=self.keyword_index,
                    before=self.newest_texts,
                    clock=self.clock,
                )
            case Delete(ids=ids, namespace=namespace) if namespace is not None:
                return await self._rewrites(namespace, list(ids), None)
            case Forget() if request.ids is not None:
                return await self._rewrites(request.namespace, request.ids, None)
            case Forget() if request.filter is not None or request.before is not None:
                return await self._rewrites(request.namespace, None, request)
            case Delete() | Clear() | Forget():
                # (a whole namespace, or every one: nothing is left to quote it)
                return None
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    async def newest_texts(
        self, namespace: str, conversations: Sequence[str | None], ids: Sequence[str]
    ) -> dict[str, str]:
        """The predecessors a write's preparation reads (``prepare.Before``), in one
        read transaction of their own."""
        wanted = [c for c in dict.fromkeys(conversations) if c is not None]
        if not wanted:
            return {}
        reads, leaving_out, now = self.reads, list(ids), clock_now(self.clock)
        return await self.read(
            lambda conn: reads.newest_texts(conn, namespace, wanted, leaving_out, now), "write"
        )

    async def _commit(
        self, request: Write, prepared: PreparedEntries | list[Rewrite] | None
    ) -> tuple[TurnsStored | DocumentsUpserted | DeleteResult | Cleared | Forgotten, Counts]:
        s = self._statements
        rewrites = prepared if isinstance(prepared, list) else []
        cap = self.config.max_entries
        # The store clock's now, once per write: its reclaim, its dedupe's and its
        # update's view of what has expired.
        now = clock_now(self.clock)
        match request:
            case PutTurns() | PutDocuments():
                assert isinstance(prepared, PreparedEntries)
                p = prepared
                turns = isinstance(request, PutTurns)
                done, counts = await self.call(
                    lambda conn: s.store(conn, p, cap, now),
                    write=True,
                    what="store_turns" if turns else "upsert",
                )
                ids, seqs, evicted = done.ids, done.sequences, done.evicted
                if turns:
                    reply: TurnsStored | DocumentsUpserted = TurnsStored(
                        ids=ids,
                        sequences=seqs,
                        evicted=evicted,
                        zero_norm=done.zero_norm,
                        duplicates=done.duplicates,
                    )
                else:
                    reply = DocumentsUpserted(
                        ids=ids,
                        sequences=seqs,
                        evicted=evicted,
                        replaced=done.replaced,
                        duplicates=done.duplicates,
                    )
                return reply, counts
            case Delete(ids=ids, namespace=namespace):
                wanted = list(dict.fromkeys(ids))
                # An id or namespace that PostgreSQL text cannot hold matches nothing.
                storable = [i for i in wanted if _representable(i)]
                if namespace is not None and not _representable(namespace):
                    storable = []
                result, counts, removed = await self.call(
                    lambda conn: s.delete(conn, wanted, storable, namespace, now, rewrites),
                    write=True,
                    what="delete",
                )
                self._forget_texts(removed)
                return result, counts
            case Clear(namespace=namespace):
                if namespace is not None and not _representable(namespace):
                    return Cleared(removed=0), self.counts
                cleared, counts, removed = await self.call(
                    lambda conn: s.clear(conn, namespace, now), write=True, what="clear"
                )
                self._forget_texts(removed)
                return cleared, counts
            case Forget():
                forget = request
                if not _representable(forget.namespace):
                    return Forgotten(ids=[], versions=0), self.counts
                if forget.ids is not None:
                    forget = Forget(
                        ids=[i for i in forget.ids if _representable(i)],
                        namespace=forget.namespace,
                    )
                forgotten, counts, removed = await self.call(
                    lambda conn: s.forget(conn, forget, now, rewrites),
                    write=True,
                    what="forget",
                )
                self._forget_texts(removed)
                return forgotten, counts
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    def _forget_texts(self, removed: Removed) -> None:
        """Tell the embedder's cache to drop what it may hold of the removed texts
        (their texts and index texts), once the removal has committed (a clear of every
        namespace drops the whole cache), and clear the links term cache, as the
        in-memory store does."""
        if removed.rows or removed.texts:
            body_terms.cache_clear()
        if removed.texts is None:
            cache = getattr(self.embedder.embedder, "cache", None)
            if isinstance(cache, EmbeddingCache):
                cache.clear()
            return
        if removed.texts:
            self.embedder.forget_texts(set(removed.texts))

    # --- reads -------------------------------------------------------------------------

    def query_vector(self, vector: object) -> npt.NDArray[np.float32]:
        """A normalized float32 copy of ``vector`` (zeros stay zeros), by the in-memory
        store's :func:`~actors._store.queries.normalize_query`."""
        return self._or_zeros(normalize_query(vector, self.config.dimensions))

    def checked_query(
        self, vector: object, profile: EmbeddingProfile | None
    ) -> npt.NDArray[np.float32]:
        """:meth:`query_vector`, once ``profile`` is checked against the store's, as on
        the in-memory store (:func:`~actors._store.queries.checked_query`)."""
        return self._or_zeros(checked_query(self.profile, self.config.dimensions, vector, profile))

    def _or_zeros(self, query: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32]:
        # pgvector needs a vector literal, so a zero query stays zeros here.
        if query is None:
            return np.zeros(self.config.dimensions, dtype=np.float32)
        return query

    def query_literal(self, vector: object) -> str:
        """pgvector text of a normalized float32 copy of ``vector`` (zeros stay zeros)."""
        return vector_literal(self.query_vector(vector))

    async def read(self, fn: Callable[[psycopg.Connection[Any]], T], what: str) -> T:
        """Run a read in one transaction; an unexpected exception poisons the store."""
        self.check_usable()
        try:
            return await self.call(fn, write=False, what=what)
        except VectorStoreError:
            raise
        except Exception as crash:
            self._poison(crash)
            raise self.poisoned() from None

    async def scan(
        self, query: npt.NDArray[np.float32] | None, k: int, namespace: str | None
    ) -> RetrievalReport:
        """Rank the best ``k`` entries in scope against a normalized query (None: zero),
        exactly (or through the HNSW index, when the store was opened with one)."""
        self.check_usable()
        if namespace is not None and not _representable(namespace):
            return RetrievalReport(turns=[], scanned=0, exact=not self.reads.hnsw)
        # No scope holds more than the cap, and a LIMIT is a bigint: any k fits after this.
        k = clamp_k(k, self.config.max_entries)
        reads, literal = self.reads, vector_literal(self._or_zeros(query))
        now = clock_now(self.clock)
        report, counts = await self.read(
            lambda conn: reads.retrieve(conn, literal, k, namespace, now), "retrieve"
        )
        self.observe(counts)
        return report

    async def search(
        self, request: SearchRequest, namespace: str, query: Query, *, turns: bool = False
    ) -> Hits:
        """Run ``request`` in ``namespace`` in one read-only transaction: the hits
        (documents, or with ``turns`` turns) and how many entries are in scope.

        ``query`` is the normalized query vector of a kind other than ``recall``.
        Recall embeds its shaped query inside the transaction (the worker thread calls
        back into trio for it), so its keyword list, dense list, texts and statistics
        all come from one snapshot; the read holds its connection while the embedder
        runs."""
        self.check_usable()
        if not _representable(namespace):
            return [], 0
        reads, cap = self.reads, self.config.max_entries

        def embed(text: str) -> npt.NDArray[np.float32]:
            return self.query_vector(trio.from_thread.run(self.embedder.query, text))

        vector, now = self._or_zeros(query), clock_now(self.clock)
        return await self.read(
            lambda conn: run_search(
                conn, reads, request, namespace, vector, cap, embed, now, turns
            ),
            "search",
        )

    async def fetch(
        self, ids: list[str], namespace: str, as_of: dt.datetime | None = None
    ) -> list[Document]:
        """The current, unexpired documents with these ids (with ``as_of``, each id's
        version valid then, still unexpired), in one statement."""
        self.check_usable()
        wanted = [i for i in dict.fromkeys(ids) if _representable(i)]
        if not wanted or not _representable(namespace):
            return []
        reads, vis = self.reads, Visibility(clock_now(self.clock), as_of)
        return await self.read(
            lambda conn: reads.get_by_ids(conn, wanted, namespace, vis), "get_by_ids"
        )

    async def history(self, id: str, namespace: str) -> list[Document]:
        """Every version of memory ``id`` still held and unexpired, oldest first."""
        self.check_usable()
        if not _representable(id) or not _representable(namespace):
            return []
        reads, now = self.reads, clock_now(self.clock)
        return await self.read(lambda conn: reads.history(conn, id, namespace, now), "history")

    async def refresh(self) -> None:
        """Read the table's counters now (one statement), every process's commits in."""
        self.check_usable()
        counts = await self.call(self._statements.counts, write=False, what="refresh")
        self.observe(counts)

    def counters(self) -> StoreCounters:
        """The table's counters as of this handle's last commit or read."""
        counts = self.counts
        return StoreCounters(counts.entries, counts.evicted, counts.zero, counts.version)

    @property
    def exact(self) -> bool:
        """False through the HNSW index (``index="hnsw"``)."""
        return not self.reads.hnsw

    async def check_keyword_search(self) -> None:
        """Raise ConfigError on a table opened with ``keyword_index=False``."""
        reads = self.reads
        await self.read(reads.check_keyword_index, "search")
