"""Documents that carry their own embedding (``Document(embedding=[...])``, design §9).

Both backends build a batch's vectors here: the precomputed ones are checked like any
vector (``as_vector``: real numbers, flat, finite, the store's width) before anything is
embedded, and the documents without one are embedded together, in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt

from protocol._documents import Document

from ._embedders import EmbedderAdapter, _real_type, as_matrix, as_vector

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
    if not missing:
        matrix = _all_at_once(documents, dimensions)
        if matrix is not None:
            return matrix
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


def _all_at_once(documents: Sequence[Document], dimensions: int) -> npt.NDArray[np.float64] | None:
    """Every embedding as one float64 matrix, checked in a few C-speed passes, when each
    is a list of the store's width holding real numbers only, all finite (a bulk load of
    precomputed vectors); else None, and the per-document checks name what is wrong."""
    rows: list[list[float]] = []
    for document in documents:
        row = document.embedding
        if not isinstance(row, list) or len(row) != dimensions:
            return None
        rows.append(row)
    if not all(map(_real_type, set(map(type, chain.from_iterable(rows))))):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            matrix = np.array(rows, dtype=np.float64)
        except (OverflowError, TypeError, ValueError):
            return None
    return matrix if bool(np.isfinite(matrix).all()) else None
