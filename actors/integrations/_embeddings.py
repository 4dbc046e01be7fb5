"""A LangChain ``Embeddings`` as a trio-recall :class:`~actors.AsyncEmbedder`.

The store calls ``embed_documents`` for what it stores and ``embed_query`` for what it
searches with, and so does this adapter: the two are never mixed, as models with an
instruction prefix per side (E5, BGE, Nomic) require. The model's sync methods run in a
trio worker thread, so they never block the store's trio loop (nor any asyncio loop: the
store has its own thread, see ``_bridge``). Its async methods are asyncio coroutines,
which a trio loop cannot await, so they are not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from protocol import ConfigError

__all__ = ["LangChainEmbedder", "SyncEmbeddings", "embedding_width"]


class SyncEmbeddings(Protocol):
    """What the adapters embed with: a LangChain ``Embeddings`` (its sync half)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


class LangChainEmbedder:
    """Wraps any object with ``embed_documents(texts)`` and ``embed_query(text)``.

    Cancellation: the worker thread is abandoned (its result dropped), as for every
    sync embedder of the store; ``embed_timeout`` on the store bounds each call.
    """

    def __init__(self, embedding: SyncEmbeddings) -> None:
        for method in ("embed_documents", "embed_query"):
            if not callable(getattr(embedding, method, None)):
                raise ConfigError(
                    f"embedding {type(embedding).__name__} has no {method}(); expected a "
                    "LangChain Embeddings (embed_documents and embed_query)"
                )
        self.embedding = embedding

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = await trio.to_thread.run_sync(
            self.embedding.embed_documents, list(texts), abandon_on_cancel=True
        )
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        vector: list[float] = await trio.to_thread.run_sync(
            self.embedding.embed_query, text, abandon_on_cancel=True
        )
        return vector

    def __repr__(self) -> str:
        return f"LangChainEmbedder({type(self.embedding).__name__})"


def embedding_width(embedding: SyncEmbeddings) -> int:
    """How many floats ``embedding`` returns, found by embedding one short query (a
    store needs its width before it holds a vector).

    Raises:
        ConfigError: the model returned something that is not a non-empty list.
    """
    probe = embedding.embed_query("dimensions")
    if not hasattr(probe, "__len__") or len(probe) == 0:
        raise ConfigError(
            f"embedding {type(embedding).__name__}.embed_query returned {probe!r:.60}; "
            "expected a non-empty list of floats"
        )
    return len(probe)
