"""Documents that carry their own embedding (``Document(embedding=[...])``, design §9).

Both backends build a batch's vectors here: the precomputed ones are checked like any
vector (``as_vector``: real numbers, flat, finite, the store's width) before anything is
embedded, and the documents without one are embedded together, in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import msgspec
import numpy as np
import numpy.typing as npt

from protocol import Document, EmbeddingError
from protocol.checks import FLOAT64_MARKER, msgpack_array_header

from .._embedding.adapter import EmbedderAdapter, _real_type, as_matrix, as_vector

__all__ = ["document_vectors", "embedding_matrix"]

_MSGPACK = msgspec.msgpack.Encoder()


async def document_vectors(
    embedder: EmbedderAdapter,
    documents: Sequence[Document],
    dimensions: int,
    *,
    embeddings: npt.NDArray[np.float64] | None = None,
    texts: Sequence[str] | None = None,
) -> object:
    """The batch's raw vectors, in order: the embedder's output when no document has
    an embedding (unchanged, so the store's fast paths still apply), else a float64
    ``[len(documents), dimensions]`` array. The embedder embeds ``texts`` (one per
    document: what each is indexed by), or else each document's text.

    ``embeddings`` is the documents' rows of the request's matrix
    (``UpsertDocuments.embeddings``, as ``check_documents`` cut them): then the vectors
    are those rows, checked, with no embedder call.

    Raises:
        EmbeddingError: a precomputed embedding of the wrong width or not finite
            (nothing is embedded then), or a bad vector from the embedder.
        EmbedderError: the embedder failed.
    """
    if embeddings is not None:
        return _checked_rows(embeddings, dimensions)
    indexed = [d.text for d in documents] if texts is None else list(texts)
    missing = [i for i, d in enumerate(documents) if d.embedding is None]
    if len(missing) == len(documents):
        return await embedder.documents(indexed)
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
        raw = await embedder.documents([indexed[i] for i in missing])
        out[missing] = as_matrix(raw, len(missing), dimensions)
    return out


def _checked_rows(matrix: npt.NDArray[np.float64], dimensions: int) -> npt.NDArray[np.float64]:
    """The batch's rows of ``embeddings=``, of the store's width and finite."""
    if matrix.shape[1] != dimensions:
        raise EmbeddingError(
            f"embeddings have {matrix.shape[1]} columns; this store takes {dimensions} "
            "(dimensions)"
        )
    _refuse_non_finite(matrix, " of the stored batch")
    return matrix


def _refuse_non_finite(matrix: npt.NDArray[np.float64], where: str) -> None:
    finite = np.isfinite(matrix).all(axis=1)
    if not bool(finite.all()):
        bad = int(np.flatnonzero(~finite)[0])
        raise EmbeddingError(
            f"embeddings row {bad}{where} holds a NaN or an infinity; expected finite numbers"
        )


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
    floats = _float_matrix(rows, dimensions)
    if floats is not None:
        return floats
    if not all(map(_real_type, set(map(type, chain.from_iterable(rows))))):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            matrix = np.array(rows, dtype=np.float64)
        except (OverflowError, TypeError, ValueError):
            return None
    return matrix if bool(np.isfinite(matrix).all()) else None


def _float_matrix(rows: list[list[float]], dimensions: int) -> npt.NDArray[np.float64] | None:
    """The rows (lists of ``dimensions`` items) as a float64 matrix when every item is a
    Python float and finite, read from one msgpack encoding of the batch: else None.

    What a ``Document`` holds after its own checks is such a list, so this is the common
    case; it reads the floats at C speed instead of asking each item its type. The proof
    is :func:`protocol._documents._finite_floats`', row by row: each row is a plain list
    of ``dimensions`` items, so its header has a known size, and the float64 marker at
    every item's place means each item is a float of 9 bytes, so the next one starts
    where this layout says. The floats are then big-endian float64s at a fixed stride.
    """
    if not all(type(row) is list for row in rows):
        return None  # a list subclass may iterate otherwise than msgpack reads it
    count = len(rows)
    try:
        encoded = _MSGPACK.encode(rows)
    except Exception:  # TypeError for an item of another type: the general path decides
        return None
    head, row_head = msgpack_array_header(count), msgpack_array_header(dimensions)
    stride = row_head + 9 * dimensions
    if count == 0 or len(encoded) != head + count * stride:
        return None
    shape, strides = (count, dimensions), (stride, 9)
    first = head + row_head  # the marker of row 0's first item
    markers = np.ndarray(shape, dtype=np.uint8, buffer=encoded, offset=first, strides=strides)
    if not bool((markers == FLOAT64_MARKER).all()):
        return None
    big = np.ndarray(shape, dtype=">f8", buffer=encoded, offset=first + 1, strides=strides)
    matrix = big.astype(np.float64)
    return matrix if bool(np.isfinite(matrix).all()) else None


def embedding_matrix(value: object, count: int) -> bytes | None:
    """``add_documents(..., embeddings=value)`` for ``count`` documents as
    ``UpsertDocuments.embeddings`` (a C-ordered float64 matrix's bytes), or None.

    Raises:
        EmbeddingError: not a 2-D array of real numbers with ``count`` rows, or a
            component that is not finite.
    """
    if value is None:
        return None
    if isinstance(value, np.ma.MaskedArray):
        raise EmbeddingError(
            "embeddings is a masked array; expected a plain array: fill the masked "
            "components first (.filled())"
        )
    if isinstance(value, str | bytes):
        raise EmbeddingError(f"embeddings is a {type(value).__name__}; expected a 2-D array")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise EmbeddingError(
            f"embeddings is a {type(value).__name__} numpy cannot read as an array "
            f"({error}); expected a 2-D array of real numbers"
        ) from None
    if array.dtype.kind not in ("f", "i", "u") or array.dtype.itemsize > 8:
        raise EmbeddingError(
            f"embeddings have dtype {array.dtype} and shape {array.shape}; expected real "
            "numbers (a float or int dtype of at most 64 bits)"
        )
    if array.ndim != 2 or array.shape[0] != count:
        raise EmbeddingError(
            f"embeddings have shape {array.shape} for {count} documents; expected one "
            "row per document (a 2-D array)"
        )
    matrix = np.ascontiguousarray(array, dtype=np.float64)
    _refuse_non_finite(matrix, "")
    return matrix.tobytes()
