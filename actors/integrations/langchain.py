"""trio-recall as a LangChain ``VectorStore`` (docs/pages/tutorials/langchain.md; needs
the ``langchain`` extra).

:class:`TrioRecallVectorStore` runs an in-memory store (or, with ``dsn``, a PostgreSQL +
pgvector store) in a trio loop on a thread of its own (``_bridge``); its sync methods
block on that loop and its async twins await it without blocking the asyncio loop, so
it serves sync code, threads and any number of concurrent coroutines. What the store
promises holds here too: a fixed memory bound (FIFO eviction past ``max_entries``),
exact ranking with ties to the newest, all-or-nothing writes, and metadata filters in
trio-recall's own language (``protocol.filters``), which refuses an unknown operator
instead of ignoring it.

Choices where LangChain leaves it open:

- ``similarity_search_with_score`` returns cosine similarity in [-1, 1] (higher is
  nearer, on both backends), as LangChain's ``InMemoryVectorStore`` does; relevance
  scores are the same similarity clipped to [0, 1] (an opposite vector is "not
  relevant", 0), so a relevance ``score_threshold`` means a cosine similarity.
- A document without an id gets a content hash (``protocol.document_id``), not a random
  uuid: adding the same text and metadata twice keeps one entry.
- ``delete`` forgets (docs/pages/how-to/memory-over-time.md): every version of each document and
  every trace of its text. ``delete(None)`` forgets every document of this store's
  namespace, and returns True (missing ids are not an error, as LangChain's standard
  tests require).
- ``max_marginal_relevance_search`` raises ``fetch_k`` to ``k`` when it is smaller.
- An unknown keyword argument is a ``ConfigError`` naming it, not silently ignored.

What trio-recall adds:

- :meth:`~TrioRecallVectorStore.recall_search` (and ``arecall_search``, ``..._with_score``)
  is the store's tuned recall, what ``Memory.retrieve`` runs (hybrid BM25 and dense lists,
  speaker focus, the time channel, entity links, the neighbour boost), with ``Memory``'s
  relevance floor; ``as_retriever(search_type="recall")`` retrieves with it, and so does
  ``search(query, "recall")``. ``similarity_search`` and the other LangChain methods keep
  LangChain's contract (the k nearest by cosine).
- Two metadata keys are the store's own fields too. ``metadata["occurred_at"]`` (ISO 8601
  text, such as ``"2023-05-25"`` or ``"2023-05-25T13:14:00+02:00"``, a date or a time
  without an offset being UTC; or an aware ``datetime``) is when the document happened:
  ``since``/``until`` and recall's time channel read it (a document without it is dated
  by its write). ``metadata["conversation"]`` (a str) names its conversation: documents of
  one conversation, added in order, are neighbours for recall, each indexed with its date
  and the one before it. Both stay in the metadata, so they come back on every read
  (``occurred_at`` as ISO 8601 text in UTC, whatever form it was given in) and metadata
  filters see them.
- Every search takes ``since=`` and ``until=`` (the same forms as ``occurred_at``): only
  documents that happened at or after ``since`` and before ``until``, before top-k.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar

import msgspec
import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from actors import Embedder
from protocol import (
    DEFAULT_NAMESPACE,
    ConfigError,
    Document,
    RecallSettings,
    ScoredDocument,
    SearchKind,
    SearchRequest,
    VectorStoreConfig,
)
from protocol._public import fixup_module_metadata as _fixup_module_metadata
from protocol.checks import check_conversation, check_int, filter_option, shown

from ..doors import check_similarity, door_time, named_run, relevance_floor
from ._backends import AdapterStore, BridgedStore, PgOptions, store_opener
from ._bridge import TrioBridge
from ._embeddings import LangChainEmbedder, embedding_width

__all__ = ["TrioRecallEmbeddings", "TrioRecallRetriever", "TrioRecallVectorStore"]

_WHAT = "TrioRecallVectorStore"
#: The metadata keys that are also the store's fields (module docstring).
OCCURRED_AT_KEY = "occurred_at"
CONVERSATION_KEY = "conversation"
#: The retriever name of the store's searches and retriever in their
#: ``vector_store.searched`` events (``actors.doors.named_run``).
RETRIEVER = "langchain"


class TrioRecallVectorStore(BridgedStore[AdapterStore], VectorStore):
    """A LangChain vector store backed by a trio-recall store.

    Args:
        embedding: any LangChain ``Embeddings``. Stored texts go through its
            ``embed_documents`` and queries through its ``embed_query``, never the
            other way; both run in worker threads of the store's trio loop.
        max_entries: the store's capacity; past it the oldest entry is evicted. The
            in-memory store allocates ``max_entries × dimensions`` float32 at once.
        max_entry_bytes: the most one document may count: its text, id and metadata
            as JSON (``EntryTooLarge`` past it; nothing of the batch is stored).
        namespace: the trio-recall namespace this store reads and writes (None: the
            default namespace). Two vector stores over one pg table with different
            namespaces never see each other's documents.
        dsn: a PostgreSQL connection string: the documents then live in ``table``
            (PostgreSQL + pgvector, the ``pg`` extra), shared by every process that
            opens it; None keeps them in memory.
        table: the pg table (ignored in memory).
        dimensions: the embedding width; None asks ``embedding`` once, with a probe
            query.
        embed_timeout: seconds one embedding call may take, or None (no limit).
        pg_options: more keyword arguments for ``open_pg_store`` (``pool_size``,
            ``connect_timeout``, ``statement_timeout``, ``index="hnsw"``...); only with
            ``dsn``.

    Raises:
        ConfigError: a bad bound, an object that is not an ``Embeddings``, or ``dsn``
            without the ``pg`` extra.
        StoreUnavailable: (pg) the database could not be reached.
    """

    def __init__(
        self,
        embedding: Embeddings,
        *,
        max_entries: int = 10_000,
        max_entry_bytes: int = 65_536,
        namespace: str | None = None,
        dsn: str | None = None,
        table: str = "trio_recall_langchain",
        dimensions: int | None = None,
        embed_timeout: float | None = None,
        pg_options: PgOptions | None = None,
    ) -> None:
        embedder = LangChainEmbedder(embedding)
        width = embedding_width(embedding) if dimensions is None else dimensions
        config = VectorStoreConfig(
            max_entries=max_entries,
            dimensions=check_int("dimensions", width),
            max_entry_bytes=max_entry_bytes,
        )
        opener = store_opener(
            dsn, config, embedder, table=table, embed_timeout=embed_timeout, pg_options=pg_options
        )
        self._setup(embedding, namespace, TrioBridge.start(opener, what=_WHAT))

    def _setup(
        self,
        embedding: Embeddings | None,
        namespace: str | None,
        bridge: TrioBridge[AdapterStore],
    ) -> None:
        self._embedding = embedding
        self._space = DEFAULT_NAMESPACE if namespace is None else namespace
        self._bridge = bridge

    @classmethod
    def from_store(
        cls,
        store: AdapterStore,
        *,
        embedding: Embeddings | None = None,
        namespace: str | None = None,
    ) -> TrioRecallVectorStore:
        """A vector store over a trio-recall store already open in this trio run.

        Call it inside that run (a trio task); use the vector store from other threads
        (``trio.to_thread.run_sync``) or from an asyncio loop in another thread. Queries
        are embedded by the store's own embedder; ``embedding`` is only what
        :attr:`embeddings` reports. :meth:`close` ends the vector store, not the
        store, which stays the caller's to close.

        Raises:
            RuntimeError: called outside a trio run.
        """
        self = cls.__new__(cls)
        self._setup(embedding, namespace, TrioBridge.borrow(store, what=_WHAT))
        return self

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: Sequence[Mapping[str, object]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,  # LangChain's signature; the constructor checks them
    ) -> Self:
        """A new store (``kwargs`` are the constructor's) holding ``texts``."""
        return _filled(
            lambda: cls(embedding, **kwargs), lambda s: s.add_texts(texts, metadatas, ids=ids)
        )

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: Sequence[Mapping[str, object]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,  # LangChain's signature; the constructor checks them
    ) -> Self:
        """:meth:`from_texts` for asyncio: the store opens in a worker thread (opening
        a pg store connects), then the texts are added natively."""
        return await _afilled(
            lambda: cls(embedding, **kwargs), lambda s: s.aadd_texts(texts, metadatas, ids=ids)
        )

    @classmethod
    def from_documents(
        cls,
        documents: list[LCDocument],
        embedding: Embeddings,
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,  # LangChain's signature; the constructor checks them
    ) -> Self:
        """A new store (``kwargs`` are the constructor's, plus ``ids``) holding
        ``documents``; their ids are kept."""
        return _filled(
            lambda: cls(embedding, **kwargs), lambda s: s.add_documents(documents, ids=ids)
        )

    @classmethod
    async def afrom_documents(
        cls,
        documents: list[LCDocument],
        embedding: Embeddings,
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,  # LangChain's signature; the constructor checks them
    ) -> Self:
        """:meth:`from_documents` for asyncio (opening as in :meth:`afrom_texts`)."""
        return await _afilled(
            lambda: cls(embedding, **kwargs), lambda s: s.aadd_documents(documents, ids=ids)
        )

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embedding

    @property
    def namespace(self) -> str:
        """The trio-recall namespace this store reads and writes."""
        return self._space

    # --- writes ------------------------------------------------------------------------

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: Sequence[Mapping[str, object]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: object,
    ) -> list[str]:
        """Embed and store ``texts``, all or nothing; return their ids in order.

        ``ids[i]`` names text i (an id already stored is replaced); without it the id
        is the content hash. Blocks until stored.

        Raises:
            ConfigError: lengths differ, or an unknown keyword argument.
            EntryTooLarge, JsonError, EmbedderError, EmbeddingError: nothing stored.
        """
        return self._write(_text_documents(texts, metadatas, ids, kwargs))

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: Sequence[Mapping[str, object]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: object,
    ) -> list[str]:
        """:meth:`add_texts`, awaited. Cancelled after the write was queued, the write
        is still applied, all or nothing."""
        return await self._awrite(_text_documents(texts, metadatas, ids, kwargs))

    def add_documents(
        self,
        documents: list[LCDocument],
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: object,
    ) -> list[str]:
        """Store documents, all or nothing. An id in ``ids=`` wins over the document's
        own ``id``; a document with neither gets its content hash. Re-adding an id
        replaces that document. The documents passed are not modified."""
        return self._write(_documents(documents, ids, kwargs))

    async def aadd_documents(
        self,
        documents: list[LCDocument],
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: object,
    ) -> list[str]:
        """:meth:`add_documents`, awaited (cancellation as :meth:`aadd_texts`)."""
        return await self._awrite(_documents(documents, ids, kwargs))

    def _write(self, documents: list[Document]) -> list[str]:
        return list(self._bridge.call(_upsert, documents, self._space))

    async def _awrite(self, documents: list[Document]) -> list[str]:
        return list(await self._bridge.acall(_upsert, documents, self._space))

    def delete(self, ids: list[str] | None = None, **kwargs: object) -> bool:
        """Forget these ids (missing ones are skipped), or with ``ids=None`` every
        document of this store's namespace: every version of each (the store's
        ``update`` keeps history) and every trace of its text, so no search, recall or
        ``get_by_ids`` returns it again. Returns True."""
        _no_extra("delete", kwargs)
        self._bridge.call(_delete, None if ids is None else list(ids), self._space)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: object) -> bool:
        """:meth:`delete`, awaited."""
        _no_extra("adelete", kwargs)
        await self._bridge.acall(_delete, None if ids is None else list(ids), self._space)
        return True

    # --- reads -------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        """The stored documents with these ids; missing ids are skipped, and the order
        is not promised."""
        return [_lc(d) for d in self._bridge.call(_get, list(ids), self._space)]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        """:meth:`get_by_ids`, awaited."""
        return [_lc(d) for d in await self._bridge.acall(_get, list(ids), self._space)]

    def similarity_search(self, query: str, k: int = 4, **kwargs: object) -> list[LCDocument]:
        """The ``k`` nearest documents to ``query`` (exact, ties to the newest).
        ``filter=`` is a trio-recall metadata filter (``protocol.filters``), applied
        before top-k."""
        return _docs(self._search(self._request(kwargs, query=query, k=k)))

    async def asimilarity_search(
        self, query: str, k: int = 4, **kwargs: object
    ) -> list[LCDocument]:
        """:meth:`similarity_search`, awaited."""
        return _docs(await self._asearch(self._request(kwargs, query=query, k=k)))

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: object
    ) -> list[tuple[LCDocument, float]]:
        """:meth:`similarity_search` with each hit's cosine similarity, in [-1, 1]."""
        return _scored(self._search(self._request(kwargs, query=query, k=k)))

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: object
    ) -> list[tuple[LCDocument, float]]:
        """:meth:`similarity_search_with_score`, awaited."""
        return _scored(await self._asearch(self._request(kwargs, query=query, k=k)))

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: object
    ) -> list[LCDocument]:
        """The ``k`` nearest documents to a query vector (as wide as the store's)."""
        return _docs(self._search(self._request(kwargs, vector=embedding, k=k)))

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: object
    ) -> list[LCDocument]:
        """:meth:`similarity_search_by_vector`, awaited."""
        return _docs(await self._asearch(self._request(kwargs, vector=embedding, k=k)))

    def recall_search(
        self,
        query: str,
        k: int = 4,
        *,
        min_similarity: float | None = None,
        settings: RecallSettings | None = None,
        **kwargs: object,
    ) -> list[LCDocument]:
        """The ``k`` documents that best answer ``query`` by the store's tuned recall
        (what ``Memory.retrieve`` runs; module docstring), best first.

        Args:
            query: the question.
            k: at most this many documents.
            min_similarity: drop hits whose cosine similarity is below this, in [-1, 1];
                None: ``Memory``'s floor (0.02).
            settings: recall's :class:`~protocol.RecallSettings` (None: the defaults,
                as ``Memory`` uses them), e.g. ``RecallSettings(date_weight=0)``.
            kwargs: ``filter``, ``since``, ``until``, as for :meth:`similarity_search`.
        """
        request = self._recall(query, k, min_similarity, settings, kwargs)
        return _docs(self._search(request))

    async def arecall_search(
        self,
        query: str,
        k: int = 4,
        *,
        min_similarity: float | None = None,
        settings: RecallSettings | None = None,
        **kwargs: object,
    ) -> list[LCDocument]:
        """:meth:`recall_search`, awaited."""
        request = self._recall(query, k, min_similarity, settings, kwargs)
        return _docs(await self._asearch(request))

    def recall_search_with_score(
        self,
        query: str,
        k: int = 4,
        *,
        min_similarity: float | None = None,
        settings: RecallSettings | None = None,
        **kwargs: object,
    ) -> list[tuple[LCDocument, float]]:
        """:meth:`recall_search` with each hit's cosine similarity, in [-1, 1] (the
        order is recall's, not the scores')."""
        request = self._recall(query, k, min_similarity, settings, kwargs)
        return _scored(self._search(request))

    async def arecall_search_with_score(
        self,
        query: str,
        k: int = 4,
        *,
        min_similarity: float | None = None,
        settings: RecallSettings | None = None,
        **kwargs: object,
    ) -> list[tuple[LCDocument, float]]:
        """:meth:`recall_search_with_score`, awaited."""
        request = self._recall(query, k, min_similarity, settings, kwargs)
        return _scored(await self._asearch(request))

    def _recall(
        self,
        query: str,
        k: int,
        min_similarity: float | None,
        settings: RecallSettings | None,
        kwargs: Mapping[str, object],
    ) -> SearchRequest:
        extra = sorted(set(kwargs) - _SEARCH_OPTIONS)
        if extra:
            raise ConfigError(
                f"unknown recall_search arguments {extra}; it takes k, filter, since, until, "
                "min_similarity and settings"
            )
        given = None if min_similarity is None else check_similarity(min_similarity)
        return self._request(
            kwargs,
            query=query,
            k=k,
            kind="recall",
            score_threshold=relevance_floor("recall", given),
            settings=settings,
        )

    def _recall_options(self, query: str, kwargs: Mapping[str, object]) -> SearchRequest:
        """:meth:`_recall` from keyword arguments that arrived untyped (``search``, the
        retriever's ``search_kwargs``): ``k``, ``min_similarity`` and ``settings`` are
        checked here, the rest as :meth:`recall_search` checks them."""
        options = dict(kwargs)
        k = check_int("k", options.pop("k", 4))
        floor = options.pop("min_similarity", None)
        settings = options.pop("settings", None)
        if settings is not None and not isinstance(settings, RecallSettings):
            raise ConfigError(f"settings is a {type(settings).__name__}; expected RecallSettings")
        given = None if floor is None else check_similarity(floor)
        return self._recall(query, k, given, settings, options)

    def search(self, query: str, search_type: str, **kwargs: object) -> list[LCDocument]:
        """LangChain's ``search``, with ``search_type="recall"`` too (:meth:`recall_search`)."""
        if search_type == "recall":
            return _docs(self._search(self._recall_options(query, kwargs)))
        # Typed here: some langchain-core releases annotate the base method loosely.
        hits: list[LCDocument] = super().search(query, search_type, **kwargs)
        return hits

    async def asearch(self, query: str, search_type: str, **kwargs: object) -> list[LCDocument]:
        """:meth:`search`, awaited."""
        if search_type == "recall":
            return _docs(await self._asearch(self._recall_options(query, kwargs)))
        hits: list[LCDocument] = await super().asearch(query, search_type, **kwargs)
        return hits

    def as_retriever(self, **kwargs: object) -> TrioRecallRetriever:
        """LangChain's ``VectorStoreRetriever`` over this store, which also takes
        ``search_type="recall"`` (:meth:`recall_search`, with ``search_kwargs`` as its
        keyword arguments: ``k``, ``filter``, ``since``, ``until``, ``min_similarity``,
        ``settings``). The default stays LangChain's ``"similarity"``."""
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        # pydantic checks each field, as the constructor would with these keywords.
        retriever: TrioRecallRetriever = TrioRecallRetriever.model_validate(
            {**kwargs, "vectorstore": self, "tags": tags}
        )
        return retriever

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return _relevance

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: object,
    ) -> list[LCDocument]:
        """``k`` documents chosen by maximal marginal relevance among the ``fetch_k``
        nearest (``lambda_mult`` 1 is pure relevance, 0 pure diversity)."""
        request = self._mmr(query, None, k, fetch_k, lambda_mult, kwargs)
        return _docs(self._search(request))

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: object,
    ) -> list[LCDocument]:
        """:meth:`max_marginal_relevance_search`, awaited."""
        request = self._mmr(query, None, k, fetch_k, lambda_mult, kwargs)
        return _docs(await self._asearch(request))

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: object,
    ) -> list[LCDocument]:
        """:meth:`max_marginal_relevance_search` from a query vector."""
        request = self._mmr(None, embedding, k, fetch_k, lambda_mult, kwargs)
        return _docs(self._search(request))

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: object,
    ) -> list[LCDocument]:
        """:meth:`max_marginal_relevance_search_by_vector`, awaited."""
        request = self._mmr(None, embedding, k, fetch_k, lambda_mult, kwargs)
        return _docs(await self._asearch(request))

    def _mmr(
        self,
        query: str | None,
        vector: list[float] | None,
        k: int,
        fetch_k: int,
        lambda_mult: float,
        kwargs: Mapping[str, object],
    ) -> SearchRequest:
        if isinstance(k, int) and isinstance(fetch_k, int) and fetch_k < k:
            fetch_k = k
        return self._request(
            kwargs,
            query=query,
            vector=vector,
            k=k,
            kind="mmr",
            fetch_k=fetch_k,
            lambda_mult=lambda_mult,
        )

    def _request(
        self,
        options: Mapping[str, object],
        *,
        query: str | None = None,
        vector: list[float] | None = None,
        k: int,
        kind: SearchKind = "similarity",
        fetch_k: int | None = None,
        lambda_mult: float | None = None,
        score_threshold: float | None = None,
        settings: RecallSettings | None = None,
    ) -> SearchRequest:
        """The request of one search: the method's own arguments, and ``options``, the
        keyword arguments a caller may add (``filter``, ``since``, ``until``)."""
        extra = sorted(set(options) - _SEARCH_OPTIONS)
        if extra:
            raise ConfigError(
                f"unknown search arguments {extra}; {_WHAT} takes k, filter, since, "
                "until (and fetch_k, lambda_mult for MMR; min_similarity, settings for "
                "recall_search)"
            )
        request = SearchRequest(
            query=query,
            vector=vector,
            k=k,
            kind=kind,
            score_threshold=score_threshold,
            settings=settings,
            filter=filter_option(options.get("filter")),
            namespace=self._space,
            since=door_time("since", options.get("since")),
            until=door_time("until", options.get("until")),
        )
        if fetch_k is None and lambda_mult is None:
            return request
        # MMR's own two: given, they replace the request's defaults (checked again).
        return msgspec.structs.replace(
            request,
            fetch_k=request.fetch_k if fetch_k is None else fetch_k,
            lambda_mult=request.lambda_mult if lambda_mult is None else lambda_mult,
        )

    def _search(self, request: SearchRequest) -> list[ScoredDocument]:
        return list(self._bridge.call(_search, request))

    async def _asearch(self, request: SearchRequest) -> list[ScoredDocument]:
        return list(await self._bridge.acall(_search, request))

    def __repr__(self) -> str:
        state = "closed" if self._bridge.closed else "open"
        return f"<{_WHAT} namespace={self._space!r} {state}>"


class TrioRecallRetriever(VectorStoreRetriever):
    """LangChain's ``VectorStoreRetriever``, with ``search_type="recall"`` besides
    ``"similarity"``, ``"similarity_score_threshold"`` and ``"mmr"``: the store's tuned
    recall (:meth:`TrioRecallVectorStore.recall_search`). Made by
    :meth:`TrioRecallVectorStore.as_retriever`."""

    allowed_search_types: ClassVar[Collection[str]] = (
        "similarity",
        "similarity_score_threshold",
        "mmr",
        "recall",
    )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: object
    ) -> list[LCDocument]:
        if self.search_type == "recall":
            store = _store_of(self)
            return _docs(store._search(store._recall_options(query, self.search_kwargs | kwargs)))
        hits: list[LCDocument] = super()._get_relevant_documents(
            query, run_manager=run_manager, **kwargs
        )
        return hits

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        **kwargs: object,
    ) -> list[LCDocument]:
        if self.search_type == "recall":
            store = _store_of(self)
            request = store._recall_options(query, self.search_kwargs | kwargs)
            return _docs(await store._asearch(request))
        hits: list[LCDocument] = await super()._aget_relevant_documents(
            query, run_manager=run_manager, **kwargs
        )
        return hits


def _store_of(retriever: VectorStoreRetriever) -> TrioRecallVectorStore:
    store = retriever.vectorstore
    if not isinstance(store, TrioRecallVectorStore):
        raise ConfigError(
            f"search_type 'recall' needs a TrioRecallVectorStore; this retriever's store "
            f"is a {type(store).__name__}"
        )
    return store


class TrioRecallEmbeddings(Embeddings):
    """A trio-recall sync embedder as a LangChain ``Embeddings``: the offline
    :class:`~actors.MiniLMEmbedder` (or a ``HashingEmbedder``) for LangChain code.

    ``embed_documents`` uses the embedder's ``embed_batch`` when it has one (one forward
    pass per batch), else ``embed`` per text; ``embed_query`` uses ``embed``. Both block;
    LangChain's ``aembed_*`` run them in its executor, and :class:`TrioRecallVectorStore`
    runs them in its own worker threads.

    Raises:
        ConfigError: ``embedder`` has no ``embed(text)``.
    """

    def __init__(self, embedder: Embedder) -> None:
        if not callable(getattr(embedder, "embed", None)):
            raise ConfigError(
                f"embedder {type(embedder).__name__} has no embed(text); expected a "
                "trio-recall Embedder such as MiniLMEmbedder or HashingEmbedder"
            )
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        batch = getattr(self.embedder, "embed_batch", None)
        if callable(batch):
            rows: list[list[float]] = np.asarray(batch(list(texts)), dtype=np.float64).tolist()
            return rows
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        row: list[float] = np.asarray(self.embedder.embed(text), dtype=np.float64).tolist()
        return row

    def __repr__(self) -> str:
        return f"TrioRecallEmbeddings({self.embedder!r})"


#: The keyword arguments every search takes beside its own (module docstring).
_SEARCH_OPTIONS = frozenset({"filter", "since", "until"})


# --- run in the store's trio loop: plain data in, plain data out ------------------------


S = TypeVar("S", bound=TrioRecallVectorStore)


def _filled(make: Callable[[], S], fill: Callable[[S], object]) -> S:
    """A new store from ``make()``, filled by ``fill``; closed again if filling fails."""
    store = make()
    try:
        fill(store)
    except BaseException:
        store.close()
        raise
    return store


async def _afilled(make: Callable[[], S], fill: Callable[[S], Awaitable[object]]) -> S:
    """:func:`_filled` for asyncio: ``make()`` runs in a worker thread (opening a pg store
    connects), then ``fill`` is awaited."""
    store = await asyncio.to_thread(make)
    try:
        await fill(store)
    except BaseException:
        await store.aclose()
        raise
    return store


async def _upsert(store: AdapterStore, documents: list[Document], namespace: str) -> list[str]:
    ids: list[str] = await store.upsert(documents, namespace)
    return ids


async def _delete(store: AdapterStore, ids: list[str] | None, namespace: str) -> None:
    # Forgotten: every version of each document, and every trace of its text (docs/pages/how-to/
    # memory-over-time.md); None selects the whole namespace.
    if ids is None:
        await store.forget(namespace=namespace)
    elif ids:
        await store.forget(ids, namespace=namespace)


async def _get(store: AdapterStore, ids: list[str], namespace: str) -> list[Document]:
    documents: list[Document] = await store.get_by_ids(ids, namespace)
    return documents


async def _search(store: AdapterStore, request: SearchRequest) -> list[ScoredDocument]:
    # In the trio thread: the run names this task's read, not the caller's thread.
    with named_run(RETRIEVER):
        return await store.search(request)


# --- conversions, in the caller's thread ------------------------------------------------


def _no_extra(method: str, kwargs: Mapping[str, object]) -> None:
    if kwargs:
        raise ConfigError(f"{_WHAT}.{method} got unknown arguments {sorted(kwargs)}")


def _text_documents(
    texts: Iterable[str],
    metadatas: Sequence[Mapping[str, object]] | None,
    ids: Sequence[str | None] | None,
    kwargs: Mapping[str, object],
) -> list[Document]:
    _no_extra("add_texts", kwargs)
    if isinstance(texts, str):
        raise ConfigError("texts is a str; expected a list of str")
    texts = list(texts)
    for name, column in (("metadatas", metadatas), ("ids", ids)):
        if column is not None and len(column) != len(texts):
            raise ConfigError(
                f"{name} has {len(column)} items and texts has {len(texts)}; expected one per text"
            )
    return [
        _document(text, {} if metadatas is None else metadatas[i], None if ids is None else ids[i])
        for i, text in enumerate(texts)
    ]


def _document(text: str, metadata: Mapping[str, object], id: str | None) -> Document:
    """A LangChain text and metadata as the store's document: ``occurred_at`` and
    ``conversation`` (module docstring) are read from the metadata into the document's
    fields, and ``occurred_at`` is kept there as ISO 8601 text in UTC."""
    meta = dict(metadata)
    when = door_time(f"metadata[{OCCURRED_AT_KEY!r}]", meta.get(OCCURRED_AT_KEY))
    if when is not None:
        meta[OCCURRED_AT_KEY] = when.isoformat()
    thread = meta.get(CONVERSATION_KEY)
    if thread is not None and not isinstance(thread, str):
        raise ConfigError(
            f"metadata[{CONVERSATION_KEY!r}] is {shown(thread)} ({type(thread).__name__}); "
            "expected a str, the conversation's name"
        )
    return Document(
        text=text,
        metadata=meta,
        id=id,
        occurred_at=when,
        conversation=check_conversation(thread),
    ).with_id()


def _documents(
    documents: list[LCDocument], ids: Sequence[str | None] | None, kwargs: Mapping[str, object]
) -> list[Document]:
    _no_extra("add_documents", kwargs)
    if ids is not None and len(ids) != len(documents):
        raise ConfigError(
            f"ids has {len(ids)} items and documents has {len(documents)}; expected one "
            "per document"
        )
    return _text_documents(
        [d.page_content for d in documents],
        [d.metadata for d in documents],
        [d.id if ids is None or ids[i] is None else ids[i] for i, d in enumerate(documents)],
        {},
    )


def _lc(document: Document) -> LCDocument:
    return LCDocument(page_content=document.text, metadata=document.metadata, id=document.id)


def _docs(hits: list[ScoredDocument]) -> list[LCDocument]:
    return [_lc(hit.document) for hit in hits]


def _scored(hits: list[ScoredDocument]) -> list[tuple[LCDocument, float]]:
    return [(_lc(hit.document), float(hit.score)) for hit in hits]


def _relevance(similarity: float) -> float:
    return min(1.0, max(0.0, similarity))


_fixup_module_metadata(__name__, globals(), __all__)
