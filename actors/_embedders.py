"""Embedders: the sync and async protocols, the hashing embedder, and the adapter that
lets the store call either kind without blocking the trio loop."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import trio

from protocol import ConfigError, EmbedderError, EmbeddingError

__all__ = ["AsyncEmbedder", "Embedder", "EmbedderAdapter", "HashingEmbedder", "VectorLike"]

VectorLike = Sequence[float] | npt.NDArray[Any]
Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """A sync embedder. It runs in a worker thread, so it never blocks the trio loop.

    It may also define ``embed_batch(texts) -> list of vectors`` (or a 2-D array); the
    store then embeds a whole batch in one call.
    """

    def embed(self, text: str) -> VectorLike: ...


@runtime_checkable
class AsyncEmbedder(Protocol):
    """An async embedder, with separate document and query paths."""

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[VectorLike] | Matrix: ...

    async def embed_query(self, text: str) -> VectorLike: ...


_TOKEN = re.compile(rb"[A-Za-z0-9]+")
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


class HashingEmbedder:
    """A deterministic bag of words, for tests and the offline default.

    Tokens are maximal runs of ASCII letters and digits, ASCII-lowercased. Each token
    adds 1.0 to bucket ``fnv1a_64(token) % dimensions``. Vectors are not normalized; the
    store normalizes at insert.
    """

    def __init__(self, dimensions: int) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions <= 0:
            raise ConfigError(f"dimensions is {dimensions!r}; expected an int > 0")
        self.dimensions = dimensions
        self._buckets: dict[bytes, int] = {}

    def _bucket(self, token: bytes) -> int:
        bucket = self._buckets.get(token)
        if bucket is None:
            bucket = fnv1a_64(token) % self.dimensions
            if len(self._buckets) < 65536:  # a bounded memo, not a leak
                self._buckets[token] = bucket
        return bucket

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for token in _TOKEN.findall(text.encode("utf-8", "surrogatepass")):
            vector[self._bucket(token.lower())] += 1.0
        return vector

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.encode("utf-8", "surrogatepass")):
                out[row, self._bucket(token.lower())] += 1.0
        return out

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self.dimensions})"


class EmbedderAdapter:
    """Calls a sync or async embedder the same way, and wraps its failures.

    A sync embedder runs in ``trio.to_thread.run_sync``; when the caller is cancelled the
    thread finishes its call and the result is dropped. Any exception the embedder raises
    becomes :class:`EmbedderError` with the original as ``.error`` and ``__cause__``.
    """

    def __init__(self, embedder: object) -> None:
        self.embedder = embedder
        docs = getattr(embedder, "embed_documents", None)
        self._async = docs is not None and inspect.iscoroutinefunction(docs)
        if self._async:
            if not inspect.iscoroutinefunction(getattr(embedder, "embed_query", None)):
                raise ConfigError(
                    f"embedder {type(embedder).__name__} has async embed_documents but no "
                    "async embed_query; an AsyncEmbedder needs both"
                )
        elif not callable(getattr(embedder, "embed", None)):
            raise ConfigError(
                f"embedder {type(embedder).__name__} has neither embed(text) nor async "
                "embed_documents(texts); expected an Embedder or an AsyncEmbedder"
            )

    async def documents(self, texts: list[str]) -> object:
        """Embed ``texts`` in one call where the embedder batches."""
        if not texts:
            return []
        embedder: Any = self.embedder
        try:
            if self._async:
                return await embedder.embed_documents(texts)
            batch = getattr(embedder, "embed_batch", None)
            if callable(batch):
                return await trio.to_thread.run_sync(batch, texts)
            return await trio.to_thread.run_sync(lambda: [embedder.embed(t) for t in texts])
        except Exception as error:
            raise EmbedderError(error) from error

    async def query(self, text: str) -> object:
        embedder: Any = self.embedder
        try:
            if self._async:
                return await embedder.embed_query(text)
            return await trio.to_thread.run_sync(embedder.embed, text)
        except Exception as error:
            raise EmbedderError(error) from error


def as_matrix(vectors: object, count: int, dimensions: int) -> npt.NDArray[np.float64]:
    """Check an embedder's output for a batch of ``count`` texts and return it as a
    float64 ``[count, dimensions]`` array (the caller must not modify it).

    The common shapes (a 2-D array, or a list of equal-width vectors) are checked in one
    vectorized pass; anything else, or a batch that fails, is checked row by row so the
    error names the offending vector.

    Raises:
        EmbeddingError: the wrong number of vectors, a wrong width, something that is not
            numbers, or a non-finite component.
    """
    if not isinstance(vectors, Sequence | np.ndarray):
        raise EmbeddingError(
            f"embedder returned a {type(vectors).__name__}; expected a list of vectors"
        )
    try:
        fast: npt.NDArray[np.float64] | None = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError):
        fast = None
    if fast is not None and fast.shape == (count, dimensions) and bool(np.isfinite(fast).all()):
        return fast
    rows: list[Any] = list(vectors)
    if len(rows) != count:
        raise EmbeddingError(f"embedder returned {len(rows)} vectors for {count} texts")
    out = np.empty((count, dimensions), dtype=np.float64)
    for i, row in enumerate(rows):
        out[i] = as_vector(row, dimensions, what=f"embedding {i} of the batch")
    return out


def as_vector(
    vector: object, dimensions: int, *, what: str = "embedding"
) -> npt.NDArray[np.float64]:
    """One vector as a float64 copy, checked for width and finiteness."""
    try:
        arr = np.array(vector, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as error:
        raise EmbeddingError(
            f"{what} is not a vector of numbers ({type(vector).__name__}): {error}"
        ) from None
    if arr.ndim != 1:
        raise EmbeddingError(f"{what} has shape {arr.shape}; expected a flat vector")
    if arr.shape[0] != dimensions:
        raise EmbeddingError(f"{what} has {arr.shape[0]} floats; this store takes {dimensions}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise EmbeddingError(
            f"{what} has the non-finite component {float(arr[bad])!r} at index {bad}"
        )
    return arr


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def normalize_rows(
    matrix: npt.NDArray[np.float64], *, what: str = "embedding"
) -> tuple[Matrix, npt.NDArray[np.bool_]]:
    """Normalize each row once, into float32; return the rows and their zero-norm flags.

    Norms are taken in float64, so a tiny but nonzero vector still normalizes; a row
    whose squared norm is past float32's range is refused, since the same vector could
    not be scored in float32 without overflow.

    Raises:
        EmbeddingError: a row's squared norm is not finite in float32.
    """
    squared = np.einsum("ij,ij->i", matrix, matrix)
    over = ~(squared <= _FLOAT32_MAX)
    if over.any():
        bad = int(np.flatnonzero(over)[0])
        raise EmbeddingError(
            f"{what} {bad} has a squared norm that overflows float32 "
            f"(max |component| {np.abs(matrix[bad]).max():.3g}); expected a finite norm"
        )
    zero = squared == 0.0
    scale = np.zeros_like(squared)
    np.divide(1.0, np.sqrt(squared), out=scale, where=~zero)
    out = (matrix * scale[:, None]).astype(np.float32)
    return out, zero
