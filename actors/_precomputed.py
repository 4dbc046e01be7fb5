"""Documents that carry their own embedding (``Document(embedding=[...])``, design §9).

Both backends build a batch's vectors here: the precomputed ones are checked like any
vector (``as_vector``: real numbers, flat, finite, the store's width) before anything is
embedded, and the documents without one are embedded together, in one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from protocol._documents import Document

from ._embedders import EmbedderAdapter, as_matrix, as_vector

__all__ = ["document_vectors"]


async def document_vectors(
    embedder: EmbedderAdapter, documents: Sequence[Document], dimensions: int
) -> object:
    """The batch's raw vectors, in order: the embedder's output when no document has
    an embedding (unchanged, so the store's fast paths still apply), else a float64
    ``[len(documents), dimensions]`` array.

    Raises:
        EmbeddingError: a precomputed embedding of the wrong width (nothing is embedded
            then), or a bad vector from the embedder.
        EmbedderError: the embedder failed.
    """
    missing = [i for i, d in enumerate(documents) if d.embedding is None]
    if len(missing) == len(documents):
        return await embedder.documents([d.text for d in documents])
    out = np.empty((len(documents), dimensions), dtype=np.float64)
    for i, document in enumerate(documents):
        if document.embedding is not None:
            out[i] = as_vector(
                document.embedding, dimensions, what=f"document {document.id!r} embedding"
            )
    if missing:
        raw = await embedder.documents([documents[i].text for i in missing])
        out[missing] = as_matrix(raw, len(missing), dimensions)
    return out
