"""Embedders: the sync and async protocols, the hashing embedder, and the adapter that
lets the store call either kind without blocking the trio loop."""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    ConfigError,
    EmbedderError,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPrice,
    EmbeddingProfile,
)

from ._embedding import CachedEmbedder, EmbeddingModel, EmbeddingUsageLog
from ._mailbox import PROPAGATE

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


class _TeeUsageLog(EmbeddingUsageLog):
    """A store's usage log in front of the caller's own (a ``CachedEmbedder``'s): every
    record goes to both, the caller's pricing applies, and the totals here are the
    store's only."""

    def __init__(self, inner: EmbeddingUsageLog, listener: Callable[[EmbeddingCall], None]):
        super().__init__(listener=listener)
        self._inner = inner

    def price_for(self, profile: EmbeddingProfile) -> EmbeddingPrice | None:
        return self._inner.price_for(profile)

    def record(self, call: EmbeddingCall) -> None:
        self._inner.record(call)
        super().record(call)


class EmbedderAdapter:
    """Calls a sync or async embedder the same way, bounds and meters each call, and
    sorts its failures. Every store (both backends) calls its embedder through one.

    - A sync embedder runs in a worker thread (``trio.to_thread.run_sync``) that is
      abandoned on cancellation: the call's result is dropped, and nobody waits for
      the thread, so leaving a store never waits for a stuck embedder.
    - ``timeout`` (seconds, or None for no limit) bounds each call: over it, the call
      raises :class:`~protocol.EmbedderError` whose ``.error`` is a ``TimeoutError``.
    - An ``Exception`` from the embedder becomes :class:`~protocol.EmbedderError`, with
      the original as ``.error`` and ``__cause__``. ``Cancelled``, ``KeyboardInterrupt``
      and ``SystemExit`` propagate as themselves. Any other ``BaseException`` is a crash:
      ``on_crash(error)`` (the store's, which poisons it) gives what to raise instead.
    - Metering: every call is an :class:`~protocol.EmbeddingCall` record in
      :attr:`usage`, and each record is offered to every callable in :attr:`listeners`
      (a memory over this store adds its own while it is open). A ``CachedEmbedder``
      keeps its model, cache and log (a tee records into it too); an
      ``EmbeddingModel`` goes behind a ``CachedEmbedder`` without a cache; any other
      embedder is metered here, with the provider ``"local"`` and its class as the
      model, and only while someone listens.
    """

    def __init__(
        self,
        embedder: object,
        *,
        dimensions: int = 0,
        timeout: float | None = None,
        on_crash: Callable[[BaseException], BaseException] | None = None,
    ) -> None:
        self.original = embedder
        self.dimensions = dimensions
        self.timeout = check_timeout("embed_timeout", timeout)
        self._on_crash = on_crash
        self.listeners: list[Callable[[EmbeddingCall], None]] = []
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
        # Metering: the records of a CachedEmbedder (which knows cache hits and tokens)
        # or of this adapter.
        self._meter = False
        self.embedder: object = embedder
        if isinstance(embedder, CachedEmbedder):
            self.usage: EmbeddingUsageLog = _TeeUsageLog(embedder.usage, self._fan_out)
            self.embedder = CachedEmbedder(embedder.model, cache=embedder.cache, usage=self.usage)
        elif (
            self._async
            and isinstance(embedder, EmbeddingModel)
            and isinstance(getattr(embedder, "profile", None), EmbeddingProfile)
        ):
            self.usage = EmbeddingUsageLog(listener=self._fan_out)
            self.embedder = CachedEmbedder(embedder, usage=self.usage)
        else:
            self.usage = EmbeddingUsageLog(listener=self._fan_out)
            self._meter = True

    def _fan_out(self, call: EmbeddingCall) -> None:
        for listener in list(self.listeners):
            listener(call)

    async def documents(self, texts: list[str]) -> object:
        """Embed ``texts`` in one call where the embedder batches."""
        if not texts:
            return []
        embedder: Any = self.embedder
        if self._async:
            return await self._call("document", texts, 1, lambda: embedder.embed_documents(texts))
        batch = getattr(embedder, "embed_batch", None)
        if callable(batch):
            return await self._call("document", texts, 1, lambda: _in_thread(batch, texts))
        return await self._call(
            "document",
            texts,
            len(texts),
            lambda: _in_thread(lambda: [embedder.embed(t) for t in texts]),
        )

    async def query(self, text: str) -> object:
        """Embed one query."""
        embedder: Any = self.embedder
        if self._async:
            return await self._call("query", [text], 1, lambda: embedder.embed_query(text))
        return await self._call("query", [text], 1, lambda: _in_thread(embedder.embed, text))

    async def _call(
        self,
        input_type: str,
        texts: list[str],
        batches: int,
        start: Callable[[], Awaitable[object]],
    ) -> object:
        began = time.perf_counter()
        try:
            if self.timeout is None:
                result = await start()
            else:
                with trio.move_on_after(self.timeout) as scope:
                    result = await start()
                if scope.cancelled_caught:
                    raise _Timeout(
                        f"the embedder's {input_type} call for {len(texts)} text(s) took "
                        f"over {self.timeout} s (embed_timeout); its result is dropped"
                    )
        except trio.Cancelled:
            raise
        except Exception as error:
            cause = TimeoutError(str(error)) if isinstance(error, _Timeout) else error
            self._record(input_type, texts, 0, began, type(cause).__name__)
            raise EmbedderError(cause) from cause
        except BaseException as error:
            if isinstance(error, PROPAGATE) or self._on_crash is None:
                raise
            raise self._on_crash(error) from error
        self._record(input_type, texts, batches, began, None)
        return result

    def _record(
        self, input_type: str, texts: list[str], batches: int, began: float, error: str | None
    ) -> None:
        if not self._meter or not self.listeners:
            return  # nobody reads these records: keep the hot path free of them
        sent = texts if error is None else []
        self.usage.record(
            EmbeddingCall(
                provider="local",
                model=type(self.original).__name__,
                input_type=input_type,  # type: ignore[arg-type]
                texts=len(texts),
                cache_hits=0,
                texts_embedded=len(sent),
                characters=sum(len(t) for t in sent),
                tokens=None,
                truncated=0,
                batches=batches,
                dimensions=self.dimensions,
                seconds=time.perf_counter() - began,
                error=error,
            )
        )


class _Timeout(Exception):
    """An embedder call over ``embed_timeout`` (becomes ``EmbedderError(TimeoutError)``)."""


async def _in_thread(fn: Callable[..., object], *args: object) -> object:
    # Abandoned on cancellation: a stuck sync embedder never holds up a cancel, a
    # timeout or leaving the store; its late result is dropped with its thread.
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


def check_timeout(name: str, value: object) -> float | None:
    """A timeout in seconds (> 0 and finite), or None for no limit."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise ConfigError(f"{name} is {value!r}; expected None or a number of seconds > 0")
    return float(value)


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
