"""The public :class:`Store` protocol: exactly what trio-recall's own users of a store
call, so that a store of the user's own (a wrapper, a proxy, a store elsewhere) can
stand in for a handle from ``open_store`` or ``open_pg_store``.

Its users are ``open_memory(store=...)`` (the compaction, recall and injection actors
and ``Memory``), the CLI's and MCP server's service (``actors/cli/_service.py``, its
export) and the LangChain and LangGraph adapters (``actors/integrations/``). Nothing of
theirs reaches past it. :class:`~actors.StoreHandle` implements it; what a handle has
beyond it (``retrieve``, ``add_texts``, ``statistics``...) is the handle's own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from protocol import (
    DeleteResult,
    Document,
    EmbeddingProfile,
    RetrievalReport,
    ScoredDocument,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreUsage,
)
from protocol.filters import Filter
from protocol.messages import Cleared, Dedupe, TurnsStored

__all__ = ["Store"]


@runtime_checkable
class Store(Protocol):
    """What ``open_memory``, the CLI's service and the adapters ask of a store.

    **Cancellation**, for every async method: a write cancelled before its batch is
    queued has done nothing; once queued it is applied (all or nothing) and its reply
    dropped. A read changes nothing, so a cancelled read leaves nothing behind. A write
    may block while the store's inbox is full; a read never waits for the inbox.

    **Errors**: an error never changes the store. Every method raises
    :class:`~protocol.ConfigError` for a bad argument, :class:`~protocol.Poisoned` once
    the store has crashed, ``trio.ClosedResourceError`` once it has closed, and, on a
    store behind a database, :class:`~protocol.StoreUnavailable` when it cannot be
    reached. Each method names its own further errors.
    """

    async def store_turns(
        self,
        turns: Sequence[UnifiedMessage],
        namespace: str = ...,
        source: str = ...,
        metadata: dict[str, Any] | None = ...,
        ids: Sequence[str] | None = ...,
        texts: Sequence[str] | None = ...,
        *,
        occurred_at: dt.datetime | None = ...,
        conversation: str | None = ...,
        expires_at: dt.datetime | None = ...,
        ttl: float | dt.timedelta | None = ...,
        dedupe: Dedupe | None = ...,
        near_threshold: float | None = ...,
    ) -> TurnsStored:
        """Store a batch of turns, all or nothing (``StoreHandle.store_turns``): with
        an expiry (``expires_at`` or ``ttl``) and duplicates skipped (``dedupe``).

        Raises:
            EntryTooLarge, JsonError: a turn over ``max_entry_bytes``, metadata that is
                not a JSON object.
            EmbeddingError, EmbedderError: the batch could not be embedded.
        """
        ...

    async def add_documents(
        self,
        documents: Sequence[Document],
        namespace: str | None = ...,
        *,
        embeddings: object = ...,
        dedupe: Dedupe | None = ...,
        near_threshold: float | None = ...,
        ttl: float | dt.timedelta | None = ...,
    ) -> list[str]:
        """Store documents, all or nothing; their ids in input order (a duplicate's,
        with ``dedupe``, is the existing memory's).

        Raises:
            EntryTooLarge, EmbeddingError, EmbedderError: as :meth:`store_turns`.
        """
        ...

    async def upsert(
        self,
        documents: Sequence[Document],
        namespace: str | None = ...,
        *,
        embeddings: object = ...,
        dedupe: Dedupe | None = ...,
        near_threshold: float | None = ...,
        ttl: float | dt.timedelta | None = ...,
    ) -> list[str]:
        """:meth:`add_documents`; the same id replaces the stored document's current
        version in place (no history: :meth:`update` keeps it)."""
        ...

    async def update(
        self,
        id: str,
        text: str | None = ...,
        metadata: dict[str, Any] | None = ...,
        *,
        namespace: str | None = ...,
        valid_from: dt.datetime | None = ...,
        expires_at: dt.datetime | Literal["keep"] | None = ...,
        create: bool = ...,
    ) -> Document:
        """Write version n + 1 of memory ``id`` and close version n at ``valid_from``,
        keeping it as history (``StoreHandle.update``); the new current version.

        Raises:
            ConfigError: no current memory ``id`` (without ``create``), or a
                ``valid_from`` not later than the current version's.
            EntryTooLarge, EmbeddingError, EmbedderError: as :meth:`add_documents`.
        """
        ...

    async def history(self, id: str, namespace: str | None = ...) -> list[Document]:
        """Every version of memory ``id`` still held, oldest first; ``[]`` if none."""
        ...

    async def forget(
        self,
        ids: Sequence[str] | None = ...,
        *,
        namespace: str | None = ...,
        filter: Mapping[str, object] | Filter | None = ...,
        before: dt.datetime | None = ...,
    ) -> list[str]:
        """Forget memories (by ids, or those of ``namespace`` matching ``filter`` and
        ``before``), every version and every trace of their text, all or nothing;
        the ids forgotten (``StoreHandle.forget``).

        Raises:
            FilterError: the filter cannot be applied.
        """
        ...

    async def delete(self, ids: Sequence[str], namespace: str | None = ...) -> DeleteResult:
        """Delete entries of one namespace by id, all or nothing, every version of each
        (:meth:`forget` by ids)."""
        ...

    async def clear(self, namespace: str | None = ...) -> Cleared:
        """Remove every entry of ``namespace`` (every entry when None)."""
        ...

    async def search(self, request: SearchRequest) -> list[ScoredDocument]:
        """Run one search (:class:`~protocol.SearchRequest`) over one snapshot.

        Raises:
            FilterError: the filter cannot be applied.
            EmbeddingError, EmbedderError: the query could not be embedded, or its
                vector does not match the store's profile.
        """
        ...

    async def search_turns(self, request: SearchRequest) -> RetrievalReport:
        """:meth:`search`, each hit as the turn it was stored as: what a memory's
        recall actor runs (``kind="recall"``) and injects. Raises as :meth:`search`."""
        ...

    async def retrieve_embedding(
        self,
        vector: object,
        k: int,
        namespace: str | None = ...,
        *,
        profile: EmbeddingProfile | None = ...,
    ) -> RetrievalReport:
        """The ``k`` entries nearest ``vector`` (the CLI's export lists every entry
        with a zero vector).

        Raises:
            EmbeddingError: a vector of the wrong width, non-finite, or of another
                profile than the store's.
        """
        ...

    async def get_by_ids(
        self,
        ids: Sequence[str],
        namespace: str | None = ...,
        *,
        as_of: dt.datetime | None = ...,
    ) -> list[Document]:
        """The current documents with these ids in one namespace (with ``as_of``, the
        versions valid then); missing ids left out."""
        ...

    async def check_keyword_search(self) -> None:
        """Raise ConfigError when a ``bm25`` or ``hybrid`` search cannot run (a memory
        with hybrid recall asks once, as it opens)."""
        ...

    async def refresh(self) -> VectorStoreUsage:
        """:meth:`usage`, read afresh where other processes share the store."""
        ...

    def usage(self) -> VectorStoreUsage:
        """The fill level, in O(1), without I/O."""
        ...

    @property
    def capacity(self) -> int:
        """``config.max_entries``."""
        ...

    @property
    def config(self) -> VectorStoreConfig:
        """The store's bounds (``max_entry_bytes``, ``dimensions``...)."""
        ...

    @property
    def backend(self) -> str:
        """Where the store lives (``"memory"``, ``"pg"``, or the user's own name), as
        events report it."""
        ...

    @property
    def profile(self) -> EmbeddingProfile | None:
        """The embedding profile the store is bound to, or None."""
        ...
