"""trio-recall as LangGraph's long-term memory store (docs/pages/tutorials/langgraph.md).

:class:`TrioRecallStore` is a ``langgraph.store.base.BaseStore``: pass it to
``StateGraph.compile(store=...)`` and nodes reach it through ``runtime.store`` (or
``get_store()``), from sync and async nodes alike. The trio-recall store runs in a trio
loop on a thread of its own (``actors.integrations._bridge``): ``batch`` blocks on it,
``abatch`` awaits it without blocking the asyncio loop, and cancelling an asyncio caller
cancels its trio call.

How LangGraph's model maps onto trio-recall's (``_langgraph_ops`` has the details):

- every item is one document of one trio-recall namespace (``namespace=``, default
  ``"langgraph"``); its LangGraph namespace and key are encoded injectively into the
  document id and into its metadata, so a namespace-prefix search is a filter the store
  applies inside its scan, before top-k;
- the value's top-level keys are the document's metadata (under ``"v:"``), so LangGraph
  filters become trio-recall filters; the index fields' text is what is embedded;
- an item that is not indexed (no ``index``, ``index=False``, or none of its fields
  present) keeps a zero vector: it is found by listing and filters, never ranked;
- a search with a query ranks by the store's tuned recall (``ranking="recall"``, the
  default: what ``Memory.retrieve`` runs, with no relevance floor, so every indexed item
  in scope can be reached), or by cosine alone (``ranking="similarity"``, as
  ``InMemoryStore`` ranks); each item's ``score`` is its cosine either way. ``offset``
  pages through one ranking: the store is asked for ``offset + limit`` hits and the first
  ``offset`` are dropped;
- a value's top-level ``"occurred_at"`` (ISO 8601 text) and ``"conversation"`` (a str)
  are also the entry's own fields: when the item happened (default: when it was put),
  which recall's time channel reads, and the conversation whose items, put in order,
  are neighbours for recall. They stay in the value;
- a put on a key already there is an update of the item (docs/pages/how-to/memory-over-time.md):
  a new version, the old one closed and kept, which the store handle's
  ``history(item_id(namespace, key), namespace=...)`` lists; the new version holds
  from the value's ``occurred_at`` when that is later than the old one's start, else
  from the time of the put, and keeps the item's conversation. ``get``, ``search`` and
  ``list_namespaces`` see current versions only. A delete forgets the item: every
  version, and every trace of its text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar

import attrs
import trio
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
)
from langgraph.store.base.embed import AEmbeddingsFunc, EmbeddingsFunc, EmbeddingsLambda

from actors import AnyEmbedder, HashingEmbedder, Store, StoreHandle
from actors.doors import named_run
from protocol import ConfigError, Document, SearchRequest, VectorStoreConfig, parse_filter
from protocol._public import fixup_module_metadata as _fixup_module_metadata
from protocol.checks import check_int, shown

from . import _langgraph_ops as mapping
from ._backends import AdapterStore, BridgedStore, PgOptions, store_opener
from ._bridge import TrioBridge
from ._embeddings import LangChainEmbedder, SyncEmbeddings

__all__ = ["TrioRecallStore"]

DEFAULT_NAMESPACE = "langgraph"
_WHAT = "TrioRecallStore"
#: The retriever name of the store's reads (``search``, ``list_namespaces``) in their
#: ``vector_store.searched`` events (``actors.doors.named_run``).
RETRIEVER = "langgraph"
_INDEX_KEYS = ("dims", "embed", "fields")
_RANKINGS = ("recall", "similarity")
Ranking = Literal["recall", "similarity"]
T = TypeVar("T")
#: The least step between two versions' starts (the store's times have microseconds).
_TICK = timedelta(microseconds=1)


class TrioRecallStore(BridgedStore["_Core"], BaseStore):
    """A LangGraph store over a trio-recall store, in memory or on PostgreSQL.

    Args:
        index: LangGraph's index config, as ``InMemoryStore`` takes it:
            ``{"embed": ..., "dims": ..., "fields": [...]}``. ``embed`` is a LangChain
            ``Embeddings``, a sync or async function of a list of texts, or a provider
            string (``langgraph.store.base.ensure_embeddings``); ``fields`` are the
            JSON paths whose text is embedded (default ``["$"]``, the whole value).
            Without ``index``, ``query`` is ignored, as by ``InMemoryStore``.
        max_entries: the most items the store holds; past it the oldest-written item
            is evicted (trio-recall's FIFO cap).
        max_entry_bytes: the most bytes one item takes: its value as compact JSON, its
            index text, its id (encoded namespace and key) and 134 bytes of bookkeeping,
            plus 2 per top-level key (``EntryTooLarge`` past it).
        namespace: the trio-recall namespace every item lives in.
        dsn: a PostgreSQL DSN: the store is ``open_pg_store`` on that database (the
            ``pg`` extra), so items survive restarts and processes share them.
        table: the pg table (with ``dsn`` only).
        embed_timeout: seconds each embedding call may take (None: no limit).
        pg_options: more keyword arguments for ``open_pg_store`` (``pool_size``,
            ``statement_timeout``, ``index="hnsw"``...); only with ``dsn``.
        ranking: how a search with a query ranks the indexed items: ``"recall"`` (the
            store's tuned recall: keywords and meaning, the speaker and the date the
            query names, the neighbours of a strong hit) or ``"similarity"`` (cosine
            alone, as ``InMemoryStore``).

    ``close()``/``aclose()`` close the store (one made by :meth:`from_store` stays
    open) and stop its thread; calls in flight raise ``trio.ClosedResourceError``. It is
    a context manager, sync and async.

    Raises:
        ConfigError: a bad bound or index config; anything opening the store raises.
    """

    supports_ttl: bool = False

    def __init__(
        self,
        *,
        index: IndexConfig | None = None,
        max_entries: int = 10_000,
        max_entry_bytes: int = 65_536,
        namespace: str = DEFAULT_NAMESPACE,
        dsn: str | None = None,
        table: str = "trio_recall_langgraph",
        embed_timeout: float | None = None,
        pg_options: PgOptions | None = None,
        ranking: Ranking = "recall",
    ) -> None:
        order = _check_ranking(ranking)
        fields, embedder, dims = _index_settings(index)
        config = VectorStoreConfig(
            max_entries=max_entries, dimensions=dims, max_entry_bytes=max_entry_bytes
        )
        space = _check_space(namespace)
        opener = store_opener(
            dsn, config, embedder, table=table, embed_timeout=embed_timeout, pg_options=pg_options
        )
        bridge = TrioBridge.start(lambda: _open_core(opener, space, fields, order), what=_WHAT)
        self._setup(bridge, space, fields, dims)

    @classmethod
    def from_store(
        cls,
        store: Store,
        *,
        index: IndexConfig | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        ranking: Ranking = "recall",
    ) -> TrioRecallStore:
        """A LangGraph store over a trio-recall store already open in this trio run.

        Call it inside the trio run that opened ``store`` (the store stays its owner's:
        :meth:`close` ends this adapter's calls, not the store), then use the adapter
        from other threads or from asyncio. The store's own embedder embeds, so
        ``index`` takes only ``fields`` (and ``dims``, checked against the store).

        Raises:
            ConfigError: ``index`` has ``embed``, or ``dims`` is not the store's width.
            RuntimeError: not called inside a trio run.
        """
        dims = store.config.dimensions
        fields: list[tuple[str, str | list[str]]] | None = None
        if index is not None:
            _check_index_keys(index)
            if "embed" in index:
                raise ConfigError(
                    "index has 'embed', but a store that is already open embeds with its "
                    "own embedder; pass index={'fields': [...]} only"
                )
            if "dims" in index and index["dims"] != dims:
                raise ConfigError(
                    f"index['dims'] is {shown(index['dims'])}; the store holds {dims}"
                )
            fields = mapping.tokenized_fields(_check_fields(index.get("fields")))
        space = _check_space(namespace)
        core = _Core(store=store, namespace=space, fields=fields, ranking=_check_ranking(ranking))
        self = cls.__new__(cls)
        self._setup(TrioBridge.borrow(core, what=_WHAT), space, fields, dims)
        return self

    def _setup(
        self,
        bridge: TrioBridge[_Core],
        namespace: str,
        fields: list[tuple[str, str | list[str]]] | None,
        dims: int,
    ) -> None:
        self._bridge = bridge
        self._namespace = namespace
        self._fields = fields
        self._dims = dims

    # --- BaseStore ------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, reads before writes, as ``InMemoryStore`` does: every
        get, search and listing sees the store as it was before the batch's puts, and
        of several puts to one item the last wins.

        Blocks the calling thread until done. Everything is checked before anything
        runs; the puts of new items are then applied in one write, each put of an item
        already there is an update of its own (a new version, the old one kept as
        history), and the deletes forget their items in one more write.

        Raises:
            InvalidNamespaceError, FilterError, ConfigError: a bad op; nothing ran.
            EntryTooLarge, JsonError, EmbedderError: a put was refused; no put of the
                batch was applied (a refused update: the puts of new items were).
            NotImplementedError: a put with a TTL.
            RuntimeError: called from the store's own trio thread.
            trio.ClosedResourceError: the store is closed.
        """
        return self._bridge.call(_execute, self._plan(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch`, awaited: the asyncio loop is never blocked.

        Cancellation: cancelling the caller cancels the trio call and waits for it to
        end; a read leaves nothing behind, and a write the store had already queued is
        applied all or nothing (design §3).
        """
        return await self._bridge.acall(_execute, self._plan(ops))

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"TrioRecallStore(namespace={self._namespace!r}, {state})"

    # --- planning: every check, in the caller's thread --------------------------------

    def _plan(self, batch: Iterable[Op]) -> _Plan:
        now = datetime.now(UTC)
        reads: list[tuple[int, _Read]] = []
        writes: dict[str, Document | None] = {}
        size = 0
        for i, op in enumerate(batch):
            size += 1
            if isinstance(op, GetOp):
                reads.append((i, _get(op)))
            elif isinstance(op, SearchOp):
                reads.append((i, _search(op, semantic=self._fields is not None)))
            elif isinstance(op, ListNamespacesOp):
                reads.append((i, _listing(op)))
            elif isinstance(op, PutOp):
                entry_id, document = self._put(op, now)
                writes.pop(entry_id, None)  # the last put of an item wins, in its place
                writes[entry_id] = document
            else:
                raise ValueError(
                    f"op {i} is a {type(op).__name__}; expected a GetOp, PutOp, SearchOp or "
                    "ListNamespacesOp"
                )
        upserts = [d for d in writes.values() if d is not None]
        deletes = [entry_id for entry_id, d in writes.items() if d is None]
        return _Plan(size=size, reads=reads, upserts=upserts, deletes=deletes)

    def _put(self, op: PutOp, now: datetime) -> tuple[str, Document | None]:
        namespace = mapping.check_namespace(op.namespace)
        entry_id = mapping.item_id(namespace, op.key)
        if op.ttl is not None:
            raise NotImplementedError(
                f"PutOp for {op.key!r} has ttl={op.ttl!r}; TrioRecallStore has no TTL "
                "(supports_ttl is False): pass ttl=None"
            )
        if op.value is None:
            return entry_id, None
        if (
            op.index is not None
            and op.index is not False
            and not (
                isinstance(op.index, list) and all(isinstance(p, str) and p for p in op.index)
            )
        ):
            raise ConfigError(
                f"PutOp for {op.key!r} has index={shown(op.index)}; expected None, False "
                "or a list of JSON paths"
            )
        text = mapping.index_text(op.value, op.index, self._fields)
        occurred_at, conversation = mapping.item_time(op.key, op.value)
        document = mapping.item_document(
            namespace,
            op.key,
            op.value,
            text=text,
            created_at=now,
            updated_at=now,
            dimensions=self._dims,
            occurred_at=occurred_at,
            conversation=conversation,
        )
        return entry_id, document


# --- the plan: plain data that crosses to the trio thread ------------------------------


@attrs.frozen
class _Get:
    entry_id: str | None  # None: a namespace no put can make (empty), so never found


@attrs.frozen
class _Search:
    scope: dict[str, object]
    post: mapping.PostFilter | None
    query: str | None
    limit: int
    offset: int


@attrs.frozen
class _Listing:
    scope: dict[str, object]
    conditions: tuple[MatchCondition, ...]
    max_depth: int | None
    limit: int
    offset: int


_Read = _Get | _Search | _Listing


@attrs.frozen
class _Plan:
    size: int
    reads: list[tuple[int, _Read]]
    upserts: list[Document]
    deletes: list[str]


def _get(op: GetOp) -> _Get:
    namespace = tuple(op.namespace)
    if not namespace:
        return _Get(None)
    return _Get(mapping.item_id(mapping.check_namespace(namespace), op.key))


def _search(op: SearchOp, *, semantic: bool) -> _Search:
    prefix = _check_path("namespace_prefix", op.namespace_prefix)
    scan, post = mapping.translate_filter(op.filter)
    if op.query is not None and not isinstance(op.query, str):
        raise ConfigError(f"query is {shown(op.query)}; expected a str or None")
    return _Search(
        scope={**mapping.prefix_filter(prefix), **scan},
        post=post,
        query=op.query if semantic and op.query else None,
        limit=check_int("limit", op.limit, minimum=0),
        offset=check_int("offset", op.offset, minimum=0),
    )


def _listing(op: ListNamespacesOp) -> _Listing:
    conditions = tuple(op.match_conditions or ())
    heads: list[tuple[str, ...]] = []
    for condition in conditions:
        if not isinstance(condition, MatchCondition):
            raise ConfigError(
                f"match condition {shown(condition)} is a {type(condition).__name__}; "
                "expected a MatchCondition"
            )
        path = _check_path("match condition path", condition.path)
        if condition.match_type == "prefix":
            heads.append(mapping.literal_head(path))
        elif condition.match_type != "suffix":
            raise ConfigError(
                f"match_type is {shown(condition.match_type)}; expected 'prefix' or 'suffix'"
            )
    max_depth = op.max_depth
    if max_depth is not None:
        max_depth = check_int("max_depth", max_depth)
    return _Listing(
        scope=mapping.prefix_filter(max(heads, key=len, default=())),
        conditions=conditions,
        max_depth=max_depth,
        limit=check_int("limit", op.limit, minimum=0),
        offset=check_int("offset", op.offset, minimum=0),
    )


def _check_path(what: str, path: object) -> tuple[str, ...]:
    if not isinstance(path, tuple | list) or not all(isinstance(p, str) for p in path):
        raise ConfigError(f"{what} is {shown(path)}; expected a tuple of str")
    return tuple(path)


# --- in the trio thread ----------------------------------------------------------------


@attrs.define(eq=False)
class _Core:
    """What the bridge's calls run against: the store, in its trio thread."""

    store: Store
    namespace: str
    fields: list[tuple[str, str | list[str]]] | None
    ranking: Ranking = "recall"
    # Serializes this adapter's writes, so a put that keeps an item's created_at reads
    # and writes it with no other put of this process in between.
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def everything(self, scope: Mapping[str, object], k: int) -> list[Document]:
        """The newest-written ``k`` entries in scope (a zero query scores all 0.0, and
        ties go to the newest)."""
        request = SearchRequest(
            vector=[0.0] * self.store.config.dimensions,
            k=max(k, 1),
            filter=parse_filter(dict(scope)) if scope else None,
            namespace=self.namespace,
        )
        return [hit.document for hit in await self.store.search(request)]

    async def search(self, op: _Search) -> list[SearchItem]:
        # In the trio thread (one task per batch): one run per search, whose reads
        # (the ranked one, then the unranked rest) share its id.
        with named_run(RETRIEVER):
            return await self._search(op)

    async def _search(self, op: _Search) -> list[SearchItem]:
        want = op.offset + op.limit
        if op.limit == 0:
            return []
        everything = self.store.capacity
        k = everything if op.post is not None else want
        ranked: list[SearchItem] = []
        scope = dict(op.scope)
        if op.query is not None:
            # No relevance floor: an indexed item in scope is always ranked, as in
            # InMemoryStore, so paging reaches every one.
            request = SearchRequest(
                query=op.query,
                k=k,
                kind=self.ranking,
                filter=parse_filter({**scope, mapping.INDEXED_KEY: True}),
                namespace=self.namespace,
            )
            hits = await self.store.search(request)
            ranked = _kept([mapping.search_item(h, h.score) for h in hits], op.post)
            scope[mapping.INDEXED_KEY] = False  # then the items no query can rank
        if len(ranked) < want:
            rest = await self.everything(scope, k - len(ranked) if op.post is None else k)
            ranked += _kept([mapping.search_item(d, None) for d in rest], op.post)
        return ranked[op.offset : want]

    async def listing(self, op: _Listing) -> list[tuple[str, ...]]:
        if op.limit == 0:
            return []
        with named_run(RETRIEVER):
            documents = await self.everything(op.scope, self.store.capacity)
        spaces = {
            ns
            for ns in mapping.distinct_namespaces(documents)
            if all(mapping.namespace_matches(c, ns) for c in op.conditions)
        }
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]

    async def write(self, upserts: list[Document], deletes: list[str]) -> None:
        """Apply a batch's puts and deletes. A put of a new item is written with the
        batch's other new items (one write); a put of an item already there is an
        update of it (a new version, keeping the old one as history:
        docs/pages/how-to/memory-over-time.md); a delete forgets the item, every version of it."""
        async with self.lock:
            if upserts:
                ids = [d.id for d in upserts if d.id is not None]
                current = {d.id: d for d in await self.store.get_by_ids(ids, self.namespace)}
                fresh = [d for d in upserts if d.id not in current]
                if fresh:
                    await self.store.add_documents(fresh, self.namespace)
                for document in upserts:
                    before = current.get(document.id)
                    if before is not None:
                        await self._update(document, before)
            if deletes:
                await self.store.forget(deletes, namespace=self.namespace)

    async def _update(self, document: Document, before: Document) -> None:
        """Put ``document`` over the item's current version ``before``: a new version,
        which keeps the item's ``created_at``. It holds from the value's
        ``occurred_at`` when that is later than ``before``'s start, else from the
        store's now (or just after ``before``'s start, when that is later than now: a
        future-dated item)."""
        assert document.id is not None
        metadata = {
            **document.metadata,
            mapping.CREATED_KEY: before.metadata[mapping.CREATED_KEY],
        }
        start = before.valid_from or before.occurred_at
        when = document.occurred_at
        if start is not None and (when is None or when <= start):
            # None: the store's now (a version given no time is not dated in its index
            # text, so a re-put of the same value still scores as its own text does).
            when = None if _now(self.store) > start else start + _TICK
        await self.store.update(
            document.id,
            document.text,
            metadata,
            namespace=self.namespace,
            valid_from=when,
            create=True,  # forgotten meanwhile by another process: version 1 again
        )


def _now(store: Store) -> datetime:
    """The store's clock's now (a handle's ``clock``), else the wall clock's."""
    return store.clock() if isinstance(store, StoreHandle) else datetime.now(UTC)


def _kept(items: list[SearchItem], post: mapping.PostFilter | None) -> list[SearchItem]:
    return items if post is None else [item for item in items if post(item.value)]


async def _execute(core: _Core, plan: _Plan) -> list[Result]:
    results: list[Result] = [None] * plan.size
    gets = [(i, read.entry_id) for i, read in plan.reads if isinstance(read, _Get)]
    wanted = [entry_id for _, entry_id in gets if entry_id is not None]
    if wanted:
        found = {d.id: d for d in await core.store.get_by_ids(wanted, core.namespace)}
        for i, entry_id in gets:
            document = found.get(entry_id)
            results[i] = None if document is None else mapping.item_from_document(document)
    for i, read in plan.reads:
        if isinstance(read, _Search):
            results[i] = await core.search(read)
        elif isinstance(read, _Listing):
            results[i] = await core.listing(read)
    if plan.upserts or plan.deletes:
        await core.write(plan.upserts, plan.deletes)
    return results


@asynccontextmanager
async def _open_core(
    opener: Callable[[], AbstractAsyncContextManager[AdapterStore]],
    namespace: str,
    fields: list[tuple[str, str | list[str]]] | None,
    ranking: Ranking,
) -> AsyncIterator[_Core]:
    async with opener() as store:
        yield _Core(store=store, namespace=namespace, fields=fields, ranking=ranking)


def _check_ranking(ranking: object) -> Ranking:
    if ranking == "recall" or ranking == "similarity":
        return ranking
    raise ConfigError(f"ranking is {shown(ranking)}; expected one of {', '.join(_RANKINGS)}")


# --- the index config ------------------------------------------------------------------


def _index_settings(
    index: IndexConfig | None,
) -> tuple[list[tuple[str, str | list[str]]] | None, AnyEmbedder, int]:
    """The tokenized fields, the embedder and the width an index config asks for."""
    if index is None:
        # Nothing is ever embedded: every item keeps a one-float zero vector.
        return None, HashingEmbedder(1), 1
    _check_index_keys(index)
    if "dims" not in index:
        raise ConfigError("index has no 'dims'; expected the embedding width, an int > 0")
    dims = check_int("index['dims']", index["dims"])
    if index.get("embed") is None:
        raise ConfigError(
            "index has no 'embed'; expected a LangChain Embeddings, an embedding "
            "function or a provider string"
        )
    embeddings: SyncEmbeddings = ensure_embeddings(index["embed"])
    if isinstance(embeddings, EmbeddingsLambda) and getattr(embeddings, "func", None) is None:
        embeddings = _AsyncFunction(embeddings.afunc)
    fields = mapping.tokenized_fields(_check_fields(index.get("fields")))
    return fields, LangChainEmbedder(embeddings), dims


def _check_index_keys(index: object) -> None:
    if not isinstance(index, Mapping):
        raise ConfigError(f"index is {shown(index)}; expected a dict (LangGraph's IndexConfig)")
    unknown = sorted(str(k) for k in index if k not in _INDEX_KEYS)
    if unknown:
        raise ConfigError(
            f"index has the keys {', '.join(unknown)}; expected only {', '.join(_INDEX_KEYS)}"
        )


def _check_fields(fields: object) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str) or not isinstance(fields, list | tuple):
        raise ConfigError(f"index['fields'] is {shown(fields)}; expected a list of JSON paths")
    for field in fields:
        if not isinstance(field, str) or not field:
            raise ConfigError(
                f"index['fields'] holds {shown(field)}; expected non-empty str JSON paths"
            )
    return list(fields)


class _AsyncFunction:
    """An async embedding function (LangGraph accepts one as ``index["embed"]``) called
    from the store's embedding worker thread, where no asyncio loop runs: each call runs
    it to completion in a fresh loop of that thread (``asyncio.run``)."""

    def __init__(self, afunc: EmbeddingsFunc | AEmbeddingsFunc) -> None:
        self.afunc = afunc  # LangGraph types it either way; it is async when func is None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = self.afunc(list(texts))
        if isinstance(vectors, list):
            return vectors
        return asyncio.run(_awaited(vectors))

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _check_space(namespace: object) -> str:
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"namespace is {shown(namespace)}; expected a non-empty str")
    return namespace


_fixup_module_metadata(__name__, globals(), __all__)
