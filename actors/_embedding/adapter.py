"""The one adapter every store calls its embedder through (:class:`EmbedderAdapter`): it
calls a sync or async embedder the same way without blocking the trio loop, bounds and
meters each call; plus the checks and coercions every vector passes (:func:`as_vector`,
:func:`as_matrix`, :func:`normalize_rows`)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence

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
from protocol.checks import shown

from .._store.mailbox import PROPAGATE
from .cache import CachedEmbedder, EmbeddingCache
from .protocols import AnyEmbedder, AsyncEmbedder, Embedder, EmbeddingModel, Matrix
from .usage import EmbeddingUsageLog

__all__ = [
    "EmbedderAdapter",
    "as_matrix",
    "as_vector",
    "check_timeout",
    "normalize_rows",
]


class _TeeUsageLog(EmbeddingUsageLog):
    """A store's usage log in front of the caller's own (a ``CachedEmbedder``'s): every
    record goes to both, the caller's pricing applies, and the totals here are the
    store's only."""

    def __init__(self, inner: EmbeddingUsageLog, listener: Callable[[EmbeddingCall], None]):
        super().__init__(listener=listener)
        self._inner = inner

    def price_named(self, provider: str, model: str) -> EmbeddingPrice | None:
        return self._inner.price_named(provider, model)

    def set_price(self, name: str, price: EmbeddingPrice | None) -> None:
        self._inner.set_price(name, price)

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
      and ``SystemExit`` propagate as themselves. Every other ``BaseException`` is a crash:
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
        embedder: AnyEmbedder,
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
        # Told (provider, model, input_type, texts) as each call begins, before its
        # record reaches ``listeners`` (the memory's ``embedding.started``).
        self.start_listeners: list[Callable[[str, str, str, int], None]] = []
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
        self.embedder: AnyEmbedder = embedder
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

    def forget_texts(self, texts: set[str]) -> None:
        """Drop these texts' vectors from the embedder's cache, if it has one (a
        ``CachedEmbedder``'s): what a store's forget, delete or clear owes."""
        cache = getattr(self.embedder, "cache", None)
        if isinstance(cache, EmbeddingCache):
            cache.discard(texts)

    def identity(self) -> tuple[str, str]:
        """``(provider, model)`` as this adapter's usage records name them."""
        profile = getattr(self.embedder, "profile", None)
        if not self._meter and isinstance(profile, EmbeddingProfile):
            return profile.provider, profile.model
        return "local", type(self.original).__name__

    def _fan_out(self, call: EmbeddingCall) -> None:
        for listener in list(self.listeners):
            listener(call)

    async def documents(self, texts: list[str]) -> object:
        """Embed ``texts`` in one call where the embedder batches."""
        if not texts:
            return []
        embedder = self.embedder
        if self._async:
            assert isinstance(embedder, AsyncEmbedder)  # checked when the adapter was built
            return await self._call("document", texts, 1, lambda: embedder.embed_documents(texts))
        batch = getattr(embedder, "embed_batch", None)
        if callable(batch):
            return await self._call("document", texts, 1, lambda: _in_thread(batch, texts))
        assert isinstance(embedder, Embedder)  # checked when the adapter was built
        return await self._call(
            "document",
            texts,
            len(texts),
            lambda: _in_thread(lambda: [embedder.embed(t) for t in texts]),
        )

    async def query(self, text: str) -> object:
        """Embed one query."""
        embedder = self.embedder
        if self._async:
            assert isinstance(embedder, AsyncEmbedder)  # checked when the adapter was built
            return await self._call("query", [text], 1, lambda: embedder.embed_query(text))
        assert isinstance(embedder, Embedder)  # checked when the adapter was built
        return await self._call("query", [text], 1, lambda: _in_thread(embedder.embed, text))

    async def _call(
        self,
        input_type: str,
        texts: list[str],
        batches: int,
        start: Callable[[], Awaitable[object]],
    ) -> object:
        began = time.perf_counter()
        if self.start_listeners:
            provider, model = self.identity()
            for listener in list(self.start_listeners):
                listener(provider, model, input_type, len(texts))
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
            timed_out = isinstance(error, _Timeout)
            cause = TimeoutError(str(error)) if timed_out else error
            # A CachedEmbedder records its own calls, but one cancelled by the timeout
            # records nothing: the failure is recorded here, so it is never silent.
            self._record(input_type, texts, 0, began, type(cause).__name__, always=timed_out)
            raise EmbedderError(cause) from cause
        except BaseException as error:
            if isinstance(error, PROPAGATE) or self._on_crash is None:
                raise
            raise self._on_crash(error) from error
        self._record(input_type, texts, batches, began, None)
        return result

    def _record(
        self,
        input_type: str,
        texts: list[str],
        batches: int,
        began: float,
        error: str | None,
        *,
        always: bool = False,
    ) -> None:
        if not (self._meter or always) or not self.listeners:
            return  # nobody reads these records: keep the hot path free of them
        sent = texts if error is None else []
        provider, model = self.identity()
        self.usage.record(
            EmbeddingCall(
                provider=provider,
                model=model,
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


# What a vector may hold (design §2 and §3): real numbers. A numpy float or int
# dtype of any width (float16 to longdouble, int8 to uint64), or Python ints and floats;
# never bool (a flag), complex (its imaginary part would be dropped), str (numpy would
# parse "1.5"), object, or a masked array (its mask would be ignored).
_REAL_KINDS = frozenset("fiu")
_EXPECTED = "expected a flat vector of real numbers (a float or int dtype, or a list of them)"


def _real_type(kind: type) -> bool:
    """Whether a list item of this type is a real number (a numpy scalar included)."""
    if issubclass(kind, bool | np.bool_):
        return False
    return issubclass(kind, int | float | np.integer | np.floating)


def _real_items(items: Sequence[object]) -> bool:
    """Whether every item of a flat list is a real number: one C-speed pass over the
    items' types, then a check per distinct type (there are one or two)."""
    return all(map(_real_type, set(map(type, items))))


def _refuse(vector: object, what: str) -> EmbeddingError:
    """The error for something that is not a flat vector of real numbers, naming its
    type, its dtype and shape when it has them, or its first bad item."""
    if isinstance(vector, np.ma.MaskedArray):
        return EmbeddingError(
            f"{what} is a masked array (dtype {vector.dtype}, shape {vector.shape}); "
            "expected a plain array: fill the masked components first (.filled())"
        )
    if isinstance(vector, np.ndarray | np.generic):
        return EmbeddingError(
            f"{what} has dtype {vector.dtype} and shape {vector.shape}; {_EXPECTED}"
        )
    if isinstance(vector, list | tuple):
        for i, item in enumerate(vector):
            if not _real_type(type(item)):
                return EmbeddingError(
                    f"{what} is not a vector of numbers ({type(vector).__name__}): item {i} "
                    f"is {shown(item)} ({type(item).__name__}); {_EXPECTED}"
                )
    return EmbeddingError(
        f"{what} is not a vector of numbers ({type(vector).__name__}); {_EXPECTED}"
    )


def _float64(vector: object, what: str) -> npt.NDArray[np.float64]:
    """``vector`` as a new float64 array, once its dtype (or its items' types) are real
    numbers; the shape is not checked here."""
    if isinstance(vector, list | tuple):
        if not _real_items(vector):
            raise _refuse(vector, what)
        source: object = vector
    elif isinstance(vector, np.ndarray):
        if isinstance(vector, np.ma.MaskedArray) or vector.dtype.kind not in _REAL_KINDS:
            raise _refuse(vector, what)
        source = vector
    elif isinstance(vector, np.generic | str | bytes | int | float | complex):
        # A numpy or Python scalar (0-d), or a str.
        raise _refuse(vector, what)
    else:
        # Another array-like (a memoryview, a tensor): its own dtype decides.
        try:
            arr = np.asarray(vector)
        except Exception:
            raise _refuse(vector, what) from None
        if arr.dtype.kind not in _REAL_KINDS:
            raise _refuse(vector, what)
        source = arr
    try:
        # A longdouble or a Python int past float64's range becomes inf (refused as
        # non-finite below) or raises OverflowError, never a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            return np.array(source, dtype=np.float64, copy=True)
    except OverflowError:
        raise EmbeddingError(
            f"{what} holds an int too large for float64 (past 1.8e308); expected finite "
            "real numbers"
        ) from None
    except (TypeError, ValueError) as error:  # ragged nested lists, say
        raise EmbeddingError(
            f"{what} is not a vector of numbers ({type(vector).__name__}): {error}"
        ) from None


def as_matrix(vectors: object, count: int, dimensions: int) -> npt.NDArray[np.float64]:
    """Check an embedder's output for a batch of ``count`` texts and return it as a
    float64 ``[count, dimensions]`` array (the caller must not modify it).

    Each vector is held to :func:`as_vector`'s rules (real numbers only, flat, of the
    store's width, finite). The common shapes (a 2-D float or int array, or a list of
    equal-width vectors whose items are real numbers) are checked in one vectorized
    pass; anything else, or a batch that fails, is checked row by row so the error
    names the offending vector.

    Raises:
        EmbeddingError: the wrong number of vectors, a wrong width, something that is not
            real numbers, or a non-finite component.
    """
    if isinstance(vectors, np.ndarray):
        if isinstance(vectors, np.ma.MaskedArray):
            raise _refuse(vectors, "embedder output")
        if vectors.dtype.kind not in _REAL_KINDS:
            raise EmbeddingError(
                f"embedder returned an array of dtype {vectors.dtype}; expected real numbers "
                "(a float or int dtype)"
            )
    elif not isinstance(vectors, Sequence):
        raise EmbeddingError(
            f"embedder returned a {type(vectors).__name__}; expected a list of vectors "
            "or a 2-D float array"
        )
    fast: npt.NDArray[np.float64] | None = None
    if isinstance(vectors, np.ndarray) or _real_rows(vectors):
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                fast = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            fast = None
    if fast is not None and fast.shape == (count, dimensions) and bool(np.isfinite(fast).all()):
        return fast
    rows: list[object] = list(vectors)
    if len(rows) != count:
        raise EmbeddingError(f"embedder returned {len(rows)} vectors for {count} texts")
    out = np.empty((count, dimensions), dtype=np.float64)
    for i, row in enumerate(rows):
        out[i] = as_vector(row, dimensions, what=f"embedding {i} of the batch")
    return out


def _real_rows(rows: Sequence[object]) -> bool:
    """Whether every row is a plain float or int array, or a list of real numbers: then
    converting the batch in one call cannot coerce a bool, a str or a complex."""
    for row in rows:
        if type(row) is np.ndarray:
            if row.dtype.kind not in _REAL_KINDS:
                return False
        elif not isinstance(row, list | tuple) or not _real_items(row):
            return False
    return True


def as_vector(
    vector: object, dimensions: int, *, what: str = "embedding"
) -> npt.NDArray[np.float64]:
    """One vector as a float64 copy: the one check every vector passes, wherever it
    comes from (a query vector, a ``SearchRequest.vector``, an embedder's output).

    A vector is a 1-D numpy array of a float or int dtype (float16 to float64 and
    beyond, int8 to uint64), or a list or tuple of Python or numpy ints and floats, of
    the store's width, with every component finite in float64.

    Raises:
        EmbeddingError: bool, complex, str or object items or dtypes, a masked array, a
            scalar (0-d) or a nested (2-D) value, a wrong width, an int past float64, or
            a non-finite component; the message names the dtype, shape or item seen.
    """
    arr = _float64(vector, what)
    if arr.ndim != 1:
        raise EmbeddingError(f"{what} has shape {arr.shape}; expected a flat vector (1-D)")
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
