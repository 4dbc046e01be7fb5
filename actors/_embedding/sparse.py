"""Sparse embedding models (the retrieval toolkit, design §9): the protocol only.

A sparse model (SPLADE, a learned BM25) gives each text a :class:`~protocol.SparseVector`.
Using one in hybrid search is the store's business; this module only says what such a
model looks like, so that implementations and the stores agree on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from protocol import EmbeddingProfile, SparseVector

__all__ = ["SparseEmbeddingModel"]


@runtime_checkable
class SparseEmbeddingModel(Protocol):
    """A model that makes sparse vectors; documents and queries apart, as for dense ones.

    Its ``profile`` says ``supports_sparse=True``.
    """

    @property
    def profile(self) -> EmbeddingProfile:
        """What the model is (its ``dimensions`` is the vocabulary size)."""
        ...

    async def embed_sparse_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        """One sparse vector per text, in order."""
        ...

    async def embed_sparse_query(self, text: str) -> SparseVector:
        """The sparse vector of one query."""
        ...
