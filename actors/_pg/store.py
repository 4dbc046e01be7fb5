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

**Documents and search** (design §9's API, with the in-memory store's semantics, which the
tests compare operation by operation). Turns and documents share one id space, and
``(namespace, id)`` is unique among current versions in the schema. An upsert deletes the
current rows of its ids, inserts the new ones (each keeping the version it replaces) with
new sequence numbers and evicts past the cap, all in its one transaction. Metadata
filters become SQL over jsonb (``filters.py``) inside each statement's WHERE clause, so
they apply before top-k. MMR reads the exact top ``fetch_k`` and their vectors back and
runs ``actors._retrieval.fusion.mmr``. Hybrid search fuses the dense list with BM25 by
``actors._retrieval.fusion.rrf``; BM25 is computed in SQL from
postings that each write stores (``reads.py``), so a query reads the postings of its
own terms through an index rather than loading the namespace's texts: its cost grows
with those postings, not with the table.

**Memory over time** (docs/pages/how-to/memory-over-time.md; the schema in ``schema.py``). Every
read binds the store clock's now (and ``as_of``) and sees current, unexpired versions (or
those valid then) in every statement: dense reads and export, BM25 and its statistics,
term counts, the rows of hits, ``get_by_ids``. An update runs in the write's transaction,
under the meta row's lock: it checks that the memory's current version is still the one
it was built on (else ``StaleVersion``, rolled back, and the handle retries), closes it
and writes the next. ``dedupe`` is checked there too, against the ``(namespace,
md5(text))`` index of current rows (``"exact"``) or an exact nearest-neighbour scan of
the namespace (``"near"``). A delete, a clear or a forget takes every version, their
postings and their statistics, gives the entries that quoted a removed text (as their
conversation predecessor) a new index text, vector and postings, and then tells the
embedder's cache to drop the removed texts. Each write first deletes at most 256 rows
expired by the store clock (:data:`actors._pg.sql.RECLAIM_ROWS`); between writes, expired
rows stay in the table, invisible. Closed versions count in ``usage().entries``.

**Differences from the in-memory store.**

- Scores: see above (within 1e-5, not bit-identical). BM25 scores agree with
  ``actors._retrieval.bm25`` to 1e-12 relative and rank alike; fused RRF scores are equal.
- PostgreSQL text and jsonb cannot hold a NUL or a lone surrogate: such an id, source id,
  namespace or source is a ConfigError, and such a string in metadata a JsonError. A
  text may hold them (its exact copy is kept as bytes); reads and filters never fail on
  them (an id that cannot be stored is simply missing).
- ``index="hnsw"`` makes reads approximate (``RetrievalReport.exact`` is False).
- Expired entries are reclaimed by writes only (the in-memory actor also wakes at the
  earliest expiry); reads never see them either way.
- Reads in one call see one snapshot, but two calls may see other processes' commits in
  between; there is no cross-call snapshot.

**Freshness of the synchronous counters.** ``usage()``, ``len()`` and ``is_empty()`` stay
synchronous and O(1): they return the table's counters as of the last commit or read that
*this handle* made. Another process's commits show up after this handle's next write or
read, or after :meth:`PgStoreHandle.refresh`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar, final

import psycopg
import psycopg_pool
import trio

from protocol import (
    ConfigError,
    EmbeddingProfile,
    Event,
    StoreUnavailable,
    VectorStoreConfig,
)
from protocol.checks import check_int

from .._embedding.adapter import EmbedderAdapter, check_timeout
from .._embedding.protocols import AnyEmbedder
from .._store.handle import StoreHandle
from .._store.lifecycle import run_store
from .._store.prepare import check_clock, check_store_config
from .actor import _PgStoreActor, refused
from .reads import DEFAULT_EF_SEARCH, hnsw_settings
from .schema import (
    MAX_DIMENSIONS,
    Names,
    Opened,
    bound_profile,
    ensure_schema,
    profile_json,
)
from .sql import Counts

__all__ = ["PgStoreHandle", "StoreUnavailable", "open_pg_store"]


@final
class PgStoreHandle(StoreHandle):
    """The caller's side of a pg store. Get one from :func:`open_pg_store`.

    It is :class:`~actors.StoreHandle` (the methods, the semantics and the errors of
    every store, ``refresh()`` included), plus :attr:`table`, and
    :class:`StoreUnavailable` when the database cannot be reached (after the retries;
    a write is then rolled back). Each write is one transaction. A namespace, source,
    id or source id that PostgreSQL text cannot hold (a NUL, a lone surrogate) is a
    :class:`~protocol.ConfigError`, and such a string in metadata a
    :class:`~protocol.JsonError`; a text may hold them. Once the actor has crashed
    every method raises :class:`~protocol.Poisoned`; once the store has closed,
    ``trio.ClosedResourceError``.
    """

    _opened_by: ClassVar[str] = "open_pg_store"

    def __init__(self, actor: _PgStoreActor) -> None:
        super().__init__(actor, "pg")
        self._table = actor.names.table_name

    @property
    def table(self) -> str:
        """The table's name."""
        return self._table


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
    embedder: AnyEmbedder,
    *,
    table: str = "trio_recall",
    pool_size: int = 4,
    inbox_size: int = 64,
    retries: int = 2,
    retry_delay: float = 0.05,
    connect_timeout: float = 10.0,
    statement_timeout: float = 60.0,
    index: str | None = None,
    ef_search: int | None = None,
    keyword_index: bool | None = None,
    embed_timeout: float | None = None,
    on_event: Callable[[Event], None] | None = None,
    sparse: None = None,
    clock: Callable[[], dt.datetime] | None = None,
) -> AsyncIterator[PgStoreHandle]:
    """Open a PostgreSQL + pgvector store and run its actor for the duration of the block.

    The first open of ``table`` creates it (and the pgvector extension if the role may),
    its ``<table>_meta`` row (schema version, dimensions, capacity, embedding profile and
    the usage counters), its ``<table>_terms`` BM25 postings, its ``<table>_ns``
    counts per namespace and its ``<table>_seq`` sequence. Later opens, from any
    process, check that the dimensions, ``max_entries`` and the embedding profile
    match. Leaving the block stops the actor and
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
        index: ``None`` (the default) ranks every read exactly, by a full scan of the
            scope. ``"hnsw"`` creates an HNSW index (inner product) if the table has
            none, and ranks ``retrieve*`` and ``search`` through it: faster on big
            tables, but approximate, so every ``RetrievalReport`` says ``exact=False``
            (``scanned`` still counts the entries in scope). Filters and namespaces use
            pgvector 0.8's iterative scans, so they do not starve the result. A store
            opened without ``index`` stays exact even on a table that has the index.
        ef_search: with ``index="hnsw"``, the length of the index's candidate list
            (pgvector's ``hnsw.ef_search``, 1 to 1000), or None for 400: recall@10 of
            0.98 at 1M entries of 384 floats (docs/pages/benchmarks/pg-scale.md), and 1000 for a
            read with a metadata filter on a table of more than 250,000 entries (0.96
            under a 1% filter at 1M, against 0.95 at 400, in the same time). Lower is
            faster and less exact; a read deeper than it raises it for that read. A
            value given here serves every read, filtered or not.
        keyword_index: the table's BM25 postings (``<table>_terms``), which ``bm25``
            and ``hybrid`` search read. ``None`` (the default) keeps the table's
            setting; a new table has the index. ``False`` empties the postings and
            makes every write, from any process, skip them: writes are about 2.7x faster
            (``docs/pages/benchmarks/pg-scale.md``, "Final run and its targets"), and a
            ``bm25`` or ``hybrid`` search then raises ConfigError. ``True`` on a table
            without one builds the postings of every entry in the open's transaction
            (the writers wait), so a bulk load can run without the index and turn it on
            once at the end.
        embed_timeout: seconds each embedder call may take, or None (no limit); as in
            :func:`~actors.open_store`.
        on_event: called on the trio thread with a ``vector_store.searched`` event
            (:class:`~protocol.events.StoreSearched`, ``backend="pg"``) after every
            read; writes emit no events on this backend yet.
        sparse: must be None: the pg backend has no sparse index (hybrid search ranks
            its keyword list by BM25); a sparse model raises ConfigError.
        clock: the store's clock, as :func:`~actors.open_store`'s (None:
            ``datetime.now(UTC)``): every "now" of the store comes from it, and every
            read binds it as a parameter (which versions have expired), so a test
            advances a fake clock instead of sleeping. The server's own clock is never
            read.

    The lifecycle (leaving the block, crashes, faults in the embedder) is the in-memory
    store's: ``actors._store.lifecycle``. Cancellation: a cancelled open closes the pool and
    leaves nothing running; a cancelled body leaves as above. A full inbox makes writers
    wait (see ``inbox_size``); reads never use it.

    (Long only for this docstring, which documents every argument; the body is the
    checks, the schema and the lifecycle.)

    The table is bound to the embedder's :class:`~protocol.EmbeddingProfile` (its
    ``profile`` attribute, if it has one): its provider, model, dimensions and options.
    Reopening with another profile raises ConfigError. An embedder without a profile is
    not checked (and does not bind a new table).

    Raises:
        ConfigError: a bad argument, config or embedder, a table made with other
            dimensions, another cap or another embedding profile, or a database
            without pgvector.
        StoreUnavailable: the database could not be reached.
    """
    if not isinstance(dsn, str):
        raise ConfigError(f"dsn is a {type(dsn).__name__}; expected a connection string")
    if sparse is not None:
        raise ConfigError(
            f"sparse is {sparse!r:.60} ({type(sparse).__name__}); the pg backend has no "
            "sparse index, so it takes no sparse model (expected None; hybrid search "
            "uses BM25 there)"
        )
    where = _where(dsn)
    config = check_store_config(config, embedder)
    checked_clock = check_clock(clock)
    if config.dimensions > MAX_DIMENSIONS:
        raise ConfigError(
            f"dimensions is {config.dimensions}; pgvector's vector type holds at most "
            f"{MAX_DIMENSIONS}"
        )
    names = Names(table)
    check_int("pool_size", pool_size, minimum=2)
    check_int("inbox_size", inbox_size)
    check_int("retries", retries, minimum=0)
    delay = _seconds("retry_delay", retry_delay)
    connect = _seconds("connect_timeout", connect_timeout)
    statement_ms = int(_seconds("statement_timeout", statement_timeout) * 1000)
    check_timeout("embed_timeout", embed_timeout)
    EmbedderAdapter(embedder)  # validates the embedder before anything connects
    if index not in (None, "hnsw"):
        raise ConfigError(f"index is {index!r}; expected None (exact) or 'hnsw'")
    if ef_search is not None:
        if index != "hnsw":
            raise ConfigError(
                f"ef_search is {ef_search!r:.60} with index={index!r}; it sets the HNSW "
                "index's candidate list, so it needs index='hnsw'"
            )
        check_int("ef_search", ef_search, minimum=1, maximum=1000)
    ef = DEFAULT_EF_SEARCH if ef_search is None else ef_search
    if keyword_index is not None and not isinstance(keyword_index, bool):
        raise ConfigError(
            f"keyword_index is {keyword_index!r:.60}; expected None (the table's "
            "setting), True or False"
        )
    profile, bound = _embedder_profile(embedder, config)
    pool = _new_pool(dsn, names, pool_size, connect, statement_ms, hnsw_settings(ef))
    try:
        opened = await trio.to_thread.run_sync(
            _open_pool, pool, names, config, connect, where, bound, index == "hnsw", keyword_index
        )
        binding = opened.profile
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
            counts=Counts(*opened.counts),
            hnsw=index == "hnsw",
            ef_search=ef_search,
            keyword_index=opened.keyword_index,
            profile=profile if isinstance(profile, EmbeddingProfile) else bound_profile(binding),
            embed_timeout=embed_timeout,
            clock=checked_clock,
        )
        actor.on_event = on_event
        # Leaving: a batch still being embedded, or queued, is not applied; a commit
        # already in its worker thread is shielded and finishes first.
        async with run_store(actor, PgStoreHandle._create(actor)) as handle:
            yield handle
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close, 10.0)


def _embedder_profile(
    embedder: object, config: VectorStoreConfig
) -> tuple[EmbeddingProfile | None, str | None]:
    """The embedder's profile (if it has one) and its JSON form for the meta row."""
    profile = getattr(embedder, "profile", None)
    bound = profile_json(profile)
    if bound is None:
        return None, None
    assert isinstance(profile, EmbeddingProfile)
    if profile.dimensions != config.dimensions:
        raise ConfigError(
            f"embedder profile {profile.name} makes {profile.dimensions}-float "
            f"vectors; this store takes {config.dimensions} (dimensions)"
        )
    return profile, bound


def _new_pool(
    dsn: str,
    names: Names,
    pool_size: int,
    connect: float,
    statement_ms: int,
    hnsw: dict[str, str],
) -> psycopg_pool.ConnectionPool[Any]:
    """A closed pool of autocommit connections, each with the statement timeout set."""

    def configure(conn: psycopg.Connection[Any]) -> None:
        # The HNSW settings are set on every connection (an exact read ignores them),
        # so that an approximate read needs no round trip of its own to set them.
        names = ["statement_timeout", *hnsw]
        values = [f"{statement_ms}ms", *hnsw.values()]
        conn.execute(
            "SELECT set_config(name, value, false) FROM unnest(%s::text[], %s::text[]) "
            "AS s(name, value)",
            (names, values),
        )

    return psycopg_pool.ConnectionPool(
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


def _open_pool(
    pool: psycopg_pool.ConnectionPool[Any],
    names: Names,
    config: VectorStoreConfig,
    timeout: float,
    where: str,
    profile: str | None,
    hnsw: bool,
    keyword_index: bool | None,
) -> Opened:
    try:
        pool.open(wait=True, timeout=timeout)
        with pool.connection(timeout=timeout) as conn:
            opened = ensure_schema(
                conn,
                names,
                config.dimensions,
                config.max_entries,
                profile=profile,
                hnsw=hnsw,
                keyword_index=keyword_index,
            )
    except (psycopg.OperationalError, psycopg.DataError) as error:
        # A value or a limit PostgreSQL refuses is refused again: not "unreachable".
        refusal = refused(f"opening table {names.table_name!r}", error)
        if refusal is not None:
            raise refusal from error
        if not isinstance(error, psycopg.OperationalError):
            raise
        raise StoreUnavailable(
            f"could not reach PostgreSQL at {where} within {timeout} s: "
            f"{type(error).__name__}: {str(error).strip()}"
        ) from error
    return opened
