"""A store of the user's own: a class that implements only :class:`actors.Store` (no
library base class) runs a whole memory turn, as ``open_memory(store=...)`` promises."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import trio
from memory_support import conversation

from actors import EchoDispatcher, HashingEmbedder, Store, StoreHandle, open_memory, open_store
from protocol import (
    RECALL_MARKER,
    DeleteResult,
    Document,
    EmbeddingProfile,
    MemoryConfig,
    RecallInjection,
    RetrievalReport,
    ScoredDocument,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreUsage,
)
from protocol.compaction import Offload
from protocol.filters import Filter
from protocol.messages import Cleared, Dedupe, TurnsStored

DIM = 64
CONFIG = VectorStoreConfig(max_entries=16, dimensions=DIM, max_entry_bytes=2048)


class LoggingStore:
    """Implements ``Store`` by delegating to an inner store, and logs what is called.

    It inherits from nothing of the library's: it is what a user writes to put a
    store behind a proxy, a cache or an audit log.
    """

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.calls: list[str] = []

    async def store_turns(
        self,
        turns: Sequence[UnifiedMessage],
        namespace: str = "memory-default",
        source: str = "offload",
        metadata: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
        texts: Sequence[str] | None = None,
        *,
        occurred_at: dt.datetime | None = None,
        conversation: str | None = None,
        expires_at: dt.datetime | None = None,
        ttl: float | dt.timedelta | None = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
    ) -> TurnsStored:
        self.calls.append("store_turns")
        return await self._inner.store_turns(
            turns,
            namespace,
            source,
            metadata,
            ids,
            texts,
            occurred_at=occurred_at,
            conversation=conversation,
            expires_at=expires_at,
            ttl=ttl,
            dedupe=dedupe,
            near_threshold=near_threshold,
        )

    async def add_documents(
        self,
        documents: Sequence[Document],
        namespace: str | None = None,
        *,
        embeddings: object = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[str]:
        self.calls.append("add_documents")
        return await self._inner.add_documents(
            documents,
            namespace,
            embeddings=embeddings,
            dedupe=dedupe,
            near_threshold=near_threshold,
            ttl=ttl,
        )

    async def upsert(
        self,
        documents: Sequence[Document],
        namespace: str | None = None,
        *,
        embeddings: object = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[str]:
        self.calls.append("upsert")
        return await self._inner.upsert(
            documents,
            namespace,
            embeddings=embeddings,
            dedupe=dedupe,
            near_threshold=near_threshold,
            ttl=ttl,
        )

    async def update(
        self,
        id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        namespace: str | None = None,
        valid_from: dt.datetime | None = None,
        expires_at: dt.datetime | Literal["keep"] | None = "keep",
        create: bool = False,
    ) -> Document:
        self.calls.append("update")
        return await self._inner.update(
            id,
            text,
            metadata,
            namespace=namespace,
            valid_from=valid_from,
            expires_at=expires_at,
            create=create,
        )

    async def history(self, id: str, namespace: str | None = None) -> list[Document]:
        self.calls.append("history")
        return await self._inner.history(id, namespace)

    async def forget(
        self,
        ids: Sequence[str] | None = None,
        *,
        namespace: str | None = None,
        filter: Mapping[str, object] | Filter | None = None,
        before: dt.datetime | None = None,
    ) -> list[str]:
        self.calls.append("forget")
        return await self._inner.forget(ids, namespace=namespace, filter=filter, before=before)

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> DeleteResult:
        self.calls.append("delete")
        return await self._inner.delete(ids, namespace)

    async def clear(self, namespace: str | None = None) -> Cleared:
        self.calls.append("clear")
        return await self._inner.clear(namespace)

    async def search(self, request: SearchRequest) -> list[ScoredDocument]:
        self.calls.append("search")
        return await self._inner.search(request)

    async def search_turns(self, request: SearchRequest) -> RetrievalReport:
        self.calls.append("search_turns")
        return await self._inner.search_turns(request)

    async def retrieve_embedding(
        self,
        vector: object,
        k: int,
        namespace: str | None = None,
        *,
        profile: EmbeddingProfile | None = None,
    ) -> RetrievalReport:
        self.calls.append("retrieve_embedding")
        return await self._inner.retrieve_embedding(vector, k, namespace, profile=profile)

    async def get_by_ids(
        self,
        ids: Sequence[str],
        namespace: str | None = None,
        *,
        as_of: dt.datetime | None = None,
    ) -> list[Document]:
        self.calls.append("get_by_ids")
        return await self._inner.get_by_ids(ids, namespace, as_of=as_of)

    async def check_keyword_search(self) -> None:
        self.calls.append("check_keyword_search")
        await self._inner.check_keyword_search()

    async def refresh(self) -> VectorStoreUsage:
        return await self._inner.refresh()

    def usage(self) -> VectorStoreUsage:
        return self._inner.usage()

    @property
    def capacity(self) -> int:
        return self._inner.capacity

    @property
    def config(self) -> VectorStoreConfig:
        return self._inner.config

    @property
    def backend(self) -> str:
        return "logging"

    @property
    def profile(self) -> EmbeddingProfile | None:
        return self._inner.profile


async def test_a_memory_turn_runs_over_a_store_of_the_users_own() -> None:
    config = MemoryConfig(strategies=[Offload(turns=4)], top_k=2)
    with trio.fail_after(10):
        async with open_store(CONFIG, HashingEmbedder(DIM)) as inner:
            store = LoggingStore(inner)
            assert isinstance(store, Store)
            assert not isinstance(store, StoreHandle)
            async with open_memory(
                store=store, memory=config, dispatcher=EchoDispatcher()
            ) as memory:
                assert memory.store is store
                turned = await memory.turn(conversation("what is my cat called"))
            report = turned.report
            # compress: Offload stored the four oldest turns through the user's store.
            assert report.compression.before == 6
            assert report.compression.after == 2
            # retrieve: recall ran over the user's store and found what was stored.
            assert report.recall is not None
            assert report.recall_error is None
            assert report.recall.scanned == 4
            assert report.recall.turns[0].message.text() == "my cat is called Miso"
            # inject and dispatch.
            assert report.injection is RecallInjection.INSERTED
            assert turned.request.messages[1].text().startswith(RECALL_MARKER)
            assert turned.reply.text().startswith("[echo] I read 3 message(s). Recalled 2 item(s)")
            # Every call went through the Store protocol: the hybrid check once, the
            # offload's one write, one recall.
            assert store.calls == ["check_keyword_search", "store_turns", "search_turns"]
            assert len(inner) == 4


async def test_remember_and_retrieve_over_a_store_of_the_users_own() -> None:
    with trio.fail_after(10):
        async with open_store(CONFIG, HashingEmbedder(DIM)) as inner:
            store = LoggingStore(inner)
            async with open_memory(store=store) as memory:
                memory_id = await memory.remember("the spare key is in the shed")
                report = await memory.retrieve("where is the spare key")
            assert [t.id for t in report.turns] == [memory_id]
            assert (await inner.get_by_ids([memory_id], "memory-default"))[0].text == (
                "the spare key is in the shed"
            )
