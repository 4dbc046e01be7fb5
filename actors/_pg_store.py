"""The scale-out store: PostgreSQL + pgvector behind the same API as :func:`open_store`.

Writes go through one actor task and its bounded inbox, exactly as in the in-memory
store: the actor validates and embeds a batch (changing nothing), then commits it in one
transaction. Cap, FIFO eviction and the usage counters are applied in that same
transaction, after it has locked the table's meta row, so writers in every process are
serialized and share one cap. Sequence numbers come from a database sequence drawn under
that lock, so they are unique and increase in commit order across processes. They may
skip values: a rolled-back or retried write, or a server crash (PostgreSQL logs a
sequence 32 values ahead), leaves a gap. They are never reused.

Reads do not use the inbox. Each is one SQL statement, so it sees one committed state of
the table (PostgreSQL's statement snapshot) and never part of a batch.

psycopg's async connection needs asyncio, so this module uses sync psycopg and its
connection pool from worker threads (``trio.to_thread.run_sync``). Trio capacity limiters
bound those threads to the pool's size: one connection is kept for the writer, the rest
serve reads, and callers queue in trio (where they can be cancelled), not inside the
pool.

**Scores and tolerance.** pgvector computes ``<#>`` (negative inner product) in float32
with its own summation order; the in-memory store uses BLAS. Measured on random unit
vectors of 16 to 1,536 dimensions, pg scores are within 9e-8 of a float64 reference and of
the in-memory store's; the documented bound, which the conformance machine checks, is
``actors.testing.SCORE_TOLERANCE`` (1e-5). Within one server, the same contents and query
give the same scores and ranking, and ties still go to the newest sequence, but scores
are not bit-identical to the in-memory store's.

**Freshness of the synchronous counters.** ``usage()``, ``len()`` and ``is_empty()`` stay
synchronous and O(1): they return the table's counters as of the last commit or read that
*this handle* made. Another process's commits show up after this handle's next write or
read, or after :meth:`PgStoreHandle.refresh`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import msgspec
import psycopg
import psycopg_pool
import trio

from protocol import (
    DEFAULT_NAMESPACE,
    Clear,
    Cleared,
    ConfigError,
    Delete,
    Deleted,
    EntryTooLarge,
    Poisoned,
    RetrievalReport,
    StoreRequest,
    StoreTurns,
    StoreUnavailable,
    TurnsStored,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreError,
    VectorStoreUsage,
    payload_bytes,
    projection,
)
from protocol._json import check_json_object

from ._embedders import EmbedderAdapter, as_matrix, as_vector, normalize_rows
from ._mailbox import ReplySlot
from ._pg_schema import (
    MAX_DIMENSIONS,
    Names,
    check_pg_json,
    check_pg_text,
    ensure_schema,
    search_text,
    vector_literal,
)
from ._pg_sql import Counts, PreparedTurns, Statements
from ._store import StoreStatistics, check_ids, check_k, check_name, exact_msgpack

__all__ = ["PgStoreHandle", "StoreUnavailable", "open_pg_store"]

logger = logging.getLogger("trio_recall.pg_store")

T = TypeVar("T")


class _AmbiguousCommit(Exception):
    """The connection broke during COMMIT: the server may or may not have applied it."""


@attrs.frozen
class _Envelope:
    request: StoreRequest
    reply: ReplySlot


def _representable(value: str) -> bool:
    """Whether PostgreSQL text can hold ``value`` (no NUL, valid UTF-8)."""
    try:
        check_pg_text("value", value)
    except ConfigError:
        return False
    return True


class _PgStoreActor:
    """Owns the write side: the inbox's receive end and the writer's connection slot."""

    def __init__(
        self,
        config: VectorStoreConfig,
        embedder: object,
        names: Names,
        pool: psycopg_pool.ConnectionPool[Any],
        *,
        inbox_size: int,
        pool_size: int,
        retries: int,
        retry_delay: float,
        acquire_timeout: float,
        counts: Counts,
    ) -> None:
        self.config = config
        self.embedder = EmbedderAdapter(embedder)
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
        self.crash: BaseException | None = None
        # Set by actors.testing.inject_crash: raised at the next write, before its commit.
        self.armed_crash: BaseException | None = None
        self._statements = Statements(names)

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        in_flight: _Envelope | None = None
        try:
            task_status.started()
            async for envelope in self.receive:
                in_flight = envelope
                del envelope
                await self._handle(in_flight)
                in_flight = None
        finally:
            if in_flight is not None:
                in_flight.reply.fail(self._closing_error())
            while True:
                try:
                    leftover = self.receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                leftover.reply.fail(self._closing_error())
            self.receive.close()

    def _closing_error(self) -> BaseException:
        if self.crash is not None:
            return self.poisoned()
        return trio.ClosedResourceError("the store closed before this request was applied")

    def poisoned(self) -> Poisoned:
        crash = self.crash
        error = Poisoned(
            f"the store actor crashed ({type(crash).__name__}: {crash}); the store is poisoned"
        )
        error.__cause__ = crash
        return error

    def check_usable(self) -> None:
        if self.crash is not None:
            raise self.poisoned()

    def _poison(self, crash: BaseException) -> None:
        self.crash = crash
        logger.error("pg store actor crashed; the store is poisoned", exc_info=crash)

    def observe(self, counts: Counts) -> None:
        """Keep the newest counters seen; a slow read never moves them backwards."""
        if counts.version >= self.counts.version:
            self.counts = counts

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

        Raises:
            StoreUnavailable: the database failed every attempt, or the connection was
                lost while committing.
        """
        limiter = self.write_limiter if write else self.read_limiter
        attempt = 0
        while True:
            try:
                with trio.CancelScope(shield=write):
                    return await trio.to_thread.run_sync(self._transaction, fn, limiter=limiter)
            except _AmbiguousCommit as error:
                cause = error.__cause__
                raise StoreUnavailable(
                    f"{what}: the connection was lost while committing ({cause}); the "
                    "server may or may not have applied it, so it was not retried"
                ) from cause
            except psycopg.OperationalError as error:
                if attempt >= self.retries:
                    rolled = " and was rolled back; nothing was applied" if write else ""
                    raise StoreUnavailable(
                        f"{what} failed after {attempt + 1} attempt(s){rolled}: "
                        f"{type(error).__name__}: {str(error).strip()}"
                    ) from error
                logger.warning("%s failed (%s: %s); retrying", what, type(error).__name__, error)
            attempt += 1
            await trio.sleep(self.retry_delay * 2 ** (attempt - 1))

    def _transaction(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self.pool.connection(timeout=self.acquire_timeout) as conn:
            committing = False
            try:
                with conn.transaction():
                    result = fn(conn)
                    committing = True
            except psycopg.OperationalError as error:
                if committing:
                    raise _AmbiguousCommit() from error
                raise
            return result

    # --- writes ------------------------------------------------------------------------

    async def _handle(self, envelope: _Envelope) -> None:
        if self.crash is not None:
            envelope.reply.fail(self.poisoned())
            return
        request = envelope.request
        try:
            prepared = await self._prepare(request)
        except VectorStoreError as error:
            envelope.reply.fail(error)
            return
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
            return
        try:
            if self.armed_crash is not None:
                armed, self.armed_crash = self.armed_crash, None
                raise armed
            result, counts = await self._commit(request, prepared)
        except VectorStoreError as error:
            # StoreUnavailable: the transaction rolled back, the store is still sound.
            envelope.reply.fail(error)
            return
        except Exception as crash:
            self._poison(crash)
            envelope.reply.fail(self.poisoned())
            return
        self.observe(counts)
        envelope.reply.succeed(result)

    async def _prepare(self, request: StoreRequest) -> PreparedTurns | None:
        match request:
            case StoreTurns():
                return await self._prepare_turns(request)
            case Delete() | Clear():
                return None
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    async def _prepare_turns(self, request: StoreTurns) -> PreparedTurns:
        namespace = check_pg_text("namespace", check_name("namespace", request.namespace))
        source = check_pg_text("source", check_name("source", request.source))
        metadata = check_json_object(request.metadata)
        check_pg_json(metadata)
        turns = request.turns
        limit = self.config.max_entry_bytes
        for i, turn in enumerate(turns):
            if not isinstance(turn, UnifiedMessage):
                raise ConfigError(
                    f"turn {i} of the batch is a {type(turn).__name__}; expected UnifiedMessage"
                )
            size = payload_bytes(turn)
            if size > limit:
                raise EntryTooLarge(size, limit, i)
        survivors = turns[-self.config.max_entries :] if turns else []
        texts = [projection(t) for t in survivors]
        raw = await self.embedder.documents(texts)
        matrix = as_matrix(raw, len(survivors), self.config.dimensions)
        vectors, zero = normalize_rows(matrix)
        return PreparedTurns(
            vectors=[vector_literal(row) for row in vectors],
            zero=[bool(z) for z in zero],
            payloads=[exact_msgpack(t) for t in survivors],
            texts=[search_text(t) for t in texts],
            namespace=namespace,
            source=source,
            metadata=msgspec.json.encode(metadata).decode("utf-8"),
            dropped=len(turns) - len(survivors),
        )

    async def _commit(
        self, request: StoreRequest, prepared: PreparedTurns | None
    ) -> tuple[TurnsStored | Deleted | Cleared, Counts]:
        s = self._statements
        match request:
            case StoreTurns():
                assert prepared is not None
                p = prepared
                cap = self.config.max_entries
                return await self.call(
                    lambda conn: s.store_turns(conn, p, cap), write=True, what="store_turns"
                )
            case Delete(ids=ids, namespace=namespace):
                wanted = list(dict.fromkeys(ids))
                # An id or namespace that PostgreSQL text cannot hold matches nothing.
                storable = [i for i in wanted if _representable(i)]
                if namespace is not None and not _representable(namespace):
                    storable = []
                return await self.call(
                    lambda conn: s.delete(conn, wanted, storable, namespace),
                    write=True,
                    what="delete",
                )
            case Clear(namespace=namespace):
                if namespace is not None and not _representable(namespace):
                    return Cleared(removed=0), self.counts
                return await self.call(
                    lambda conn: s.clear(conn, namespace), write=True, what="clear"
                )
        raise TypeError(f"unknown store request {type(request).__name__}")  # pragma: no cover

    # --- reads -------------------------------------------------------------------------

    def query_literal(self, vector: object) -> str:
        """pgvector text of a normalized float32 copy of ``vector`` (zeros stay zeros)."""
        arr = as_vector(vector, self.config.dimensions, what="query embedding")
        normalized, _ = normalize_rows(arr[None, :], what="query embedding")
        return vector_literal(normalized[0])

    async def scan(self, query: str, k: int, namespace: str | None) -> RetrievalReport:
        """Rank the best ``k`` entries in scope against a normalized query, exactly."""
        self.check_usable()
        if namespace is not None and not _representable(namespace):
            return RetrievalReport(turns=[], scanned=0)
        s = self._statements
        try:
            report, counts = await self.call(
                lambda conn: s.retrieve(conn, query, k, namespace), write=False, what="retrieve"
            )
        except VectorStoreError:
            raise
        except Exception as crash:
            self._poison(crash)
            raise self.poisoned() from None
        self.observe(counts)
        return report

    async def refresh(self) -> Counts:
        self.check_usable()
        counts = await self.call(self._statements.counts, write=False, what="refresh")
        self.observe(counts)
        return self.counts


class PgStoreHandle:
    """The caller's side of a pg store. Get one from :func:`open_pg_store`.

    It has the methods, the semantics and the errors of :class:`~actors.StoreHandle`,
    plus :class:`StoreUnavailable` when the database cannot be reached, and
    :meth:`refresh`. Once the actor has crashed every method raises
    :class:`~protocol.Poisoned`; once the store has closed, ``trio.ClosedResourceError``.
    """

    def __init__(self, actor: _PgStoreActor) -> None:
        self._actor = actor
        self._send = actor.send.clone()
        self._closed = False

    # --- writes ------------------------------------------------------------------------

    async def store_turns(
        self,
        turns: Sequence[UnifiedMessage],
        namespace: str = DEFAULT_NAMESPACE,
        source: str = "offload",
        metadata: dict[str, Any] | None = None,
    ) -> TurnsStored:
        """Store a batch of turns in one transaction, all or nothing (SPEC §3).

        Blocks while the inbox is full, then until the actor has applied the batch. If
        the caller is cancelled while it waits, the batch is either fully committed or
        not at all.

        Raises:
            EntryTooLarge, JsonError, EmbeddingError, EmbedderError, ConfigError: the
                batch was rejected and the store is unchanged. A namespace or source with
                a NUL character, or metadata strings with one, are ConfigError and
                JsonError here, because PostgreSQL text and jsonb cannot hold them.
            StoreUnavailable: the database failed after the retries; rolled back.
            Poisoned: the actor has crashed.
        """
        if isinstance(turns, str | bytes) or not isinstance(turns, Sequence):
            raise ConfigError(
                f"turns is a {type(turns).__name__}; expected a list of UnifiedMessage"
            )
        request = StoreTurns(
            turns=list(turns),
            namespace=namespace,
            source=source,
            metadata={} if metadata is None else metadata,
        )
        result = await self._request(request)
        assert isinstance(result, TurnsStored)
        return result

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> Deleted:
        """Delete entries of one namespace by id (``None``: the default namespace), in
        one transaction; report what was deleted and what was missing."""
        wanted = check_ids(ids)
        space = DEFAULT_NAMESPACE if namespace is None else check_name("namespace", namespace)
        result = await self._request(Delete(ids=wanted, namespace=space))
        assert isinstance(result, Deleted)
        return result

    async def clear(self, namespace: str | None = None) -> Cleared:
        """Remove every entry of ``namespace``, or every entry when it is None."""
        if namespace is not None:
            check_name("namespace", namespace)
        result = await self._request(Clear(namespace=namespace))
        assert isinstance(result, Cleared)
        return result

    async def _request(self, request: StoreRequest) -> object:
        self._check()
        reply = ReplySlot()
        try:
            await self._send.send(_Envelope(request, reply))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._check()
            raise trio.ClosedResourceError("the store is closed") from None
        return await reply.wait()

    # --- reads -------------------------------------------------------------------------

    async def retrieve(self, query: str, k: int) -> RetrievalReport:
        """Embed ``query`` and return the ``k`` best entries across every namespace.

        One SQL statement, so it sees one committed state. Does not use the inbox. If
        cancelled, it returns once the statement in its worker thread has finished.

        Raises:
            ConfigError: ``k ≤ 0``.
            EmbedderError, EmbeddingError: the query could not be embedded.
            StoreUnavailable: the database failed after the retries.
            Poisoned: the actor has crashed.
        """
        return await self._retrieve(query, k, None)

    async def retrieve_in(self, namespace: str, query: str, k: int) -> RetrievalReport:
        """Like :meth:`retrieve`, scoped to one namespace; never returns another's entries."""
        return await self._retrieve(query, k, check_name("namespace", namespace))

    async def retrieve_embedding(
        self, vector: object, k: int, namespace: str | None = None
    ) -> RetrievalReport:
        """Rank entries against a vector you already have (normalized on a copy)."""
        self._check()
        k = check_k(k)
        if namespace is not None:
            check_name("namespace", namespace)
        query = self._actor.query_literal(vector)
        return await self._actor.scan(query, k, namespace)

    async def _retrieve(self, query: str, k: int, namespace: str | None) -> RetrievalReport:
        self._check()
        k = check_k(k)
        if not isinstance(query, str):
            raise ConfigError(f"query is a {type(query).__name__}; expected str")
        raw = await self._actor.embedder.query(query)
        return await self._actor.scan(self._actor.query_literal(raw), k, namespace)

    # --- state -------------------------------------------------------------------------

    async def refresh(self) -> VectorStoreUsage:
        """Read the table's counters now, so :meth:`usage` and ``len()`` include every
        process's commits, and return the usage."""
        self._check()
        await self._actor.refresh()
        return self.usage()

    def usage(self) -> VectorStoreUsage:
        """The table's counters as of this handle's last commit or read, in O(1).

        Another process's commits count from this handle's next read, write or
        :meth:`refresh`.
        """
        self._check()
        counts, config = self._actor.counts, self._actor.config
        fraction = counts.entries / config.max_entries
        warn = config.warn_fraction
        return VectorStoreUsage(
            entries=counts.entries,
            capacity=config.max_entries,
            fraction=fraction,
            near_cap=warn is not None and fraction >= warn,
            evicted_entries=counts.evicted,
            zero_norm_entries=counts.zero,
        )

    def __len__(self) -> int:
        self._check()
        return self._actor.counts.entries

    def is_empty(self) -> bool:
        return len(self) == 0

    @property
    def capacity(self) -> int:
        self._check()
        return self._actor.config.max_entries

    @property
    def config(self) -> VectorStoreConfig:
        return self._actor.config

    @property
    def table(self) -> str:
        """The table's name."""
        return self._actor.names.table_name

    def statistics(self) -> StoreStatistics:
        """The inbox's fill and the table's commit count as last seen (every process)."""
        stats = self._send.statistics()
        return StoreStatistics(
            inbox_size=self._actor.inbox_size,
            inbox_used=stats.current_buffer_used,
            tasks_waiting_send=stats.tasks_waiting_send,
            version=self._actor.counts.version,
            poisoned=self._actor.crash is not None,
        )

    def _check(self) -> None:
        self._actor.check_usable()
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")

    def _close(self) -> None:
        self._closed = True
        self._send.close()


def _positive(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} is {value!r}; expected an int >= {minimum}")
    return value


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{name} is {value!r}; expected a number of seconds > 0")
    return float(value)


def _where(dsn: str) -> str:
    """The DSN's host and database, for error messages; never its password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"dsn is not a valid PostgreSQL connection string: {error}") from None
    return f"host={parts.get('host', '(default)')} dbname={parts.get('dbname', '(default)')}"


@asynccontextmanager
async def open_pg_store(
    dsn: str,
    config: VectorStoreConfig,
    embedder: object,
    *,
    table: str = "trio_recall",
    pool_size: int = 4,
    inbox_size: int = 64,
    retries: int = 2,
    retry_delay: float = 0.05,
    connect_timeout: float = 10.0,
    statement_timeout: float = 60.0,
) -> AsyncIterator[PgStoreHandle]:
    """Open a PostgreSQL + pgvector store and run its actor for the duration of the block.

    The first open of ``table`` creates it (and the pgvector extension if the role may),
    its ``<table>_meta`` row (schema version, dimensions, capacity and the usage
    counters) and its ``<table>_seq`` sequence. Later opens, from any process, check that
    the dimensions and ``max_entries`` match. Leaving the block stops the actor and
    closes the pool; a request still queued is not applied and its caller gets
    ``trio.ClosedResourceError``. A commit already running finishes first.

    Args:
        dsn: a libpq connection string or URI. Do not modify the tables by hand: the
            counters in the meta row are kept by the store's own transactions.
        config: the store's bounds; ``max_entries`` is the table's cap, shared by every
            process; ``max_entry_bytes`` is checked by each process.
        embedder: an :class:`Embedder` or :class:`AsyncEmbedder`.
        table: the table's name: a lowercase identifier of at most 52 characters.
        pool_size: the pool's connections (>= 2): one for the writer, the rest for reads.
        inbox_size: how many writes may queue before callers wait.
        retries: how many times a failed connection or transient error is retried.
        retry_delay: the first retry's delay in seconds; it doubles each time.
        connect_timeout: seconds to wait for the first connection, and for a pooled one.
        statement_timeout: the server-side limit for one statement, in seconds.

    Raises:
        ConfigError: a bad argument, config or embedder, a table made with other
            dimensions or another cap, or a database without pgvector.
        StoreUnavailable: the database could not be reached.
    """
    if not isinstance(dsn, str):
        raise ConfigError(f"dsn is a {type(dsn).__name__}; expected a connection string")
    where = _where(dsn)
    if not isinstance(config, VectorStoreConfig):
        raise ConfigError(f"config is a {type(config).__name__}; expected VectorStoreConfig")
    config.validate()
    if config.dimensions > MAX_DIMENSIONS:
        raise ConfigError(
            f"dimensions is {config.dimensions}; pgvector's vector type holds at most "
            f"{MAX_DIMENSIONS}"
        )
    names = Names(table)
    _positive("pool_size", pool_size, minimum=2)
    _positive("inbox_size", inbox_size)
    _positive("retries", retries, minimum=0)
    delay = _seconds("retry_delay", retry_delay)
    connect = _seconds("connect_timeout", connect_timeout)
    statement_ms = int(_seconds("statement_timeout", statement_timeout) * 1000)
    width = getattr(embedder, "dimensions", None)
    if isinstance(width, int) and width != config.dimensions:
        raise ConfigError(
            f"embedder {embedder!r} makes {width}-float vectors; this store takes "
            f"{config.dimensions} (dimensions)"
        )
    EmbedderAdapter(embedder)  # validates the embedder before anything connects

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{statement_ms}ms",))

    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        open=False,
        kwargs={"autocommit": True, "application_name": f"trio-recall:{names.table_name}"},
        configure=configure,
        check=psycopg_pool.ConnectionPool.check_connection,
        timeout=connect,
        name=f"trio-recall:{names.table_name}",
    )
    try:
        counts = await trio.to_thread.run_sync(_open_pool, pool, names, config, connect, where)
        actor = _PgStoreActor(
            config,
            embedder,
            names,
            pool,
            inbox_size=inbox_size,
            pool_size=pool_size,
            retries=retries,
            retry_delay=delay,
            acquire_timeout=connect,
            counts=counts,
        )
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            handle = PgStoreHandle(actor)
            try:
                yield handle
            except BaseException as error:
                body_error = error
            finally:
                handle._close()
                actor.send.close()
                # A batch still being embedded, or queued, is not applied; a commit
                # already in its worker thread is shielded and finishes first.
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close, 10.0)
    if body_error is not None:
        if actor.crash is not None:
            body_error.add_note(f"trio-recall: the store was poisoned by {actor.crash!r}")
        raise body_error
    if actor.crash is not None:
        raise actor.poisoned()


def _open_pool(
    pool: psycopg_pool.ConnectionPool[Any],
    names: Names,
    config: VectorStoreConfig,
    timeout: float,
    where: str,
) -> Counts:
    try:
        pool.open(wait=True, timeout=timeout)
        with pool.connection(timeout=timeout) as conn:
            entries, evicted, zero, version = ensure_schema(
                conn, names, config.dimensions, config.max_entries
            )
    except psycopg.OperationalError as error:
        raise StoreUnavailable(
            f"could not reach PostgreSQL at {where} within {timeout} s: "
            f"{type(error).__name__}: {str(error).strip()}"
        ) from error
    return Counts(entries, evicted, zero, version)
