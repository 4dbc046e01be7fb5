"""The embedding cache (design §9): an LRU cache of vectors, bounded by count and by
bytes, and ``CachedEmbedder``, which puts a model behind it with a usage record
(:class:`~actors.EmbeddingUsageLog`) for every call.

``CachedEmbedder`` has async ``embed_documents`` and ``embed_query``, so it plugs into
``open_store`` (and ``Memory``) like any ``AsyncEmbedder``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Sequence
from typing import final

import attrs
import numpy as np
import numpy.typing as npt

from protocol import (
    ConfigError,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingProfile,
    InputType,
)
from protocol.checks import check_int

from .protocols import EmbeddingModel, EmbeddingResult, Matrix, check_texts
from .usage import EmbeddingUsageLog

__all__ = [
    "CacheStatistics",
    "CachedEmbedder",
    "EmbeddingCache",
]

_INPUT_TYPES = ("document", "query")


CacheKey = tuple[str, str, str, int, str, str]

# Per-entry bookkeeping (the key tuple, the dict slot, the array header), counted so that
# max_bytes bounds real memory and not just the payload.
_ENTRY_OVERHEAD = 256


@final
@attrs.frozen
class CacheStatistics:
    """What the cache holds and has done.

    Attributes:
        entries: vectors held.
        bytes: their accounted size (vector, text and a fixed per-entry overhead).
        max_entries: the count bound.
        max_bytes: the size bound.
        hits: lookups served.
        misses: lookups not served.
        evictions: entries dropped to stay within the bounds.
        enabled: False when the cache stores nothing.
    """

    entries: int
    bytes: int
    max_entries: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int
    enabled: bool


@final
class EmbeddingCache:
    """An LRU cache of vectors, bounded by count and by bytes.

    The key is (provider, model, input type, dimensions, options, text): a document and a
    query with the same text are separate entries, and so are two models or two widths.
    Stored vectors are read-only; lookups return them as they are.

    Args:
        max_entries: the most vectors held; 0 disables the cache.
        max_bytes: the most bytes held (vectors, texts and a fixed overhead each).
        enabled: False disables the cache (every lookup misses, nothing is stored).

    Raises:
        ConfigError: a negative or non-int bound.
    """

    def __init__(
        self, *, max_entries: int = 10_000, max_bytes: int = 64 << 20, enabled: bool = True
    ) -> None:
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            check_int(name, value, minimum=0)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.enabled = bool(enabled) and max_entries > 0 and max_bytes > 0
        self._data: collections.OrderedDict[CacheKey, tuple[Matrix, int]] = (
            collections.OrderedDict()
        )
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        # Models may run in worker threads; the cache may be shared between them.
        self._lock = threading.Lock()

    @classmethod
    def disabled(cls) -> EmbeddingCache:
        """A cache that never stores anything."""
        return cls(enabled=False)

    @staticmethod
    def key(profile: EmbeddingProfile, input_type: InputType, text: str) -> CacheKey:
        """The cache key of ``text`` embedded by ``profile``'s model as ``input_type``."""
        return (
            profile.provider,
            profile.model,
            input_type,
            profile.dimensions,
            profile.options_key(),
            text,
        )

    def get(self, key: CacheKey) -> Matrix | None:
        """The vector for ``key`` (and mark it recently used), or None."""
        with self._lock:
            if not self.enabled:
                self._misses += 1
                return None
            hit = self._data.get(key)
            if hit is None:
                self._misses += 1
                return None
            self._data.move_to_end(key)
            self._hits += 1
            return hit[0]

    def put(self, key: CacheKey, vector: Matrix) -> None:
        """Store a read-only float32 copy of ``vector``, evicting the least recently used
        entries to stay within both bounds. An entry larger than ``max_bytes`` on its
        own is not stored."""
        if not self.enabled:
            return
        stored = np.array(vector, dtype=np.float32, copy=True)
        stored.flags.writeable = False
        size = stored.nbytes + len(key[5].encode("utf-8", "surrogatepass")) + _ENTRY_OVERHEAD
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._data[key] = (stored, size)
            self._bytes += size
            while len(self._data) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._data.popitem(last=False)
                self._bytes -= dropped
                self._evictions += 1

    def discard(self, texts: Iterable[str]) -> int:
        """Drop every vector of these texts (any model, input type or width), so no
        trace of them stays here (a store's forget). Returns how many went."""
        drop = set(texts)
        if not drop:
            return 0
        with self._lock:
            keys = [key for key in self._data if key[-1] in drop]
            for key in keys:
                _, size = self._data.pop(key)
                self._bytes -= size
        return len(keys)

    def clear(self) -> None:
        """Drop every entry (the hit and miss counters stay)."""
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def statistics(self) -> CacheStatistics:
        """Now (see :class:`CacheStatistics`): ``entries``, ``bytes``, ``max_entries``,
        ``max_bytes``, ``hits``, ``misses``, ``evictions`` and ``enabled``."""
        with self._lock:
            return CacheStatistics(
                entries=len(self._data),
                bytes=self._bytes,
                max_entries=self.max_entries,
                max_bytes=self.max_bytes,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                enabled=self.enabled,
            )

    def __len__(self) -> int:
        return len(self._data)


# ---------------------------------------------------------------------------------------
# The wrapper
# ---------------------------------------------------------------------------------------
def _as_rows(vectors: object, count: int, dimensions: int, what: str) -> Matrix:
    """A model's output as a checked float32 ``[count, dimensions]`` array."""
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise EmbeddingError(f"{what} returned something that is not vectors: {error}") from None
    if arr.ndim != 2 or arr.shape[0] != count:
        raise EmbeddingError(
            f"{what} returned shape {arr.shape} for {count} texts; "
            f"expected ({count}, {dimensions})"
        )
    if arr.shape[1] != dimensions:
        raise EmbeddingError(
            f"{what} returned vectors of {arr.shape[1]} floats; its profile says {dimensions}"
        )
    if not np.isfinite(arr).all():
        raise EmbeddingError(f"{what} returned a non-finite component")
    return arr


@final
class CachedEmbedder:
    """A model behind a cache, with a usage record for every call.

    Within one call, repeated texts are embedded once; cached texts are not sent to the
    model. A cache hit counts in ``cache_hits`` and never as provider usage.

    Exceptions from the model propagate unchanged (the store wraps them in
    ``EmbedderError``); a failed call is recorded with its error's type name, and
    nothing from it is cached. ``Cancelled`` propagates and records nothing.

    Args:
        model: an :class:`EmbeddingModel`.
        cache: an :class:`EmbeddingCache` (it may be shared); None means no cache.
        usage: an :class:`EmbeddingUsageLog`; None makes a private one.

    Raises:
        ConfigError: ``model`` is not an ``EmbeddingModel``, or ``cache``/``usage`` have
            the wrong type.
    """

    def __init__(
        self,
        model: EmbeddingModel,
        cache: EmbeddingCache | None = None,
        usage: EmbeddingUsageLog | None = None,
    ) -> None:
        if not isinstance(model, EmbeddingModel) or not isinstance(
            getattr(model, "profile", None), EmbeddingProfile
        ):
            raise ConfigError(
                f"{type(model).__name__} is not an EmbeddingModel; expected a profile "
                "(EmbeddingProfile) and async embed_documents/embed_query"
            )
        if cache is not None and not isinstance(cache, EmbeddingCache):
            raise ConfigError(f"cache is a {type(cache).__name__}; expected an EmbeddingCache")
        if usage is not None and not isinstance(usage, EmbeddingUsageLog):
            raise ConfigError(f"usage is a {type(usage).__name__}; expected an EmbeddingUsageLog")
        self.model = model
        self.cache = cache if cache is not None else EmbeddingCache.disabled()
        self.usage = usage if usage is not None else EmbeddingUsageLog()

    @property
    def profile(self) -> EmbeddingProfile:
        """The wrapped model's profile."""
        return self.model.profile

    async def _call_model(self, texts: list[str], input_type: InputType) -> EmbeddingResult:
        model = self.model
        report = getattr(model, "embed_with_report", None)
        if report is not None:
            result = await report(texts, input_type)
            if not isinstance(result, EmbeddingResult):
                raise EmbeddingError(
                    f"{type(model).__name__}.embed_with_report returned a "
                    f"{type(result).__name__}; expected an EmbeddingResult"
                )
            return result
        what, dimensions = type(model).__name__, model.profile.dimensions
        if input_type == "query":
            query = np.asarray([await model.embed_query(texts[0])])
            return EmbeddingResult(vectors=_as_rows(query, 1, dimensions, what))
        documents = await model.embed_documents(texts)
        return EmbeddingResult(vectors=_as_rows(documents, len(texts), dimensions, what))

    async def embed(self, texts: Sequence[str], input_type: InputType) -> Matrix:
        """Embed ``texts`` as documents or queries, through the cache.

        Returns:
            a new float32 ``[len(texts), dimensions]`` array.

        Cancellation reaches the model's call; a cancelled call caches and records
        nothing. There is no inbox.

        Raises:
            TypeError: ``texts`` is not a sequence of str.
            ConfigError: ``input_type`` is not ``"document"`` or ``"query"``.
            EmbeddingError: the model returned the wrong count, width, or a non-finite
                value.
            Exception: whatever the model raised, unchanged.
        """
        if input_type not in _INPUT_TYPES:
            raise ConfigError(f"input_type is {input_type!r}; expected 'document' or 'query'")
        items = check_texts(texts)
        profile = self.profile
        start = time.perf_counter()
        out = np.empty((len(items), profile.dimensions), dtype=np.float32)
        keys = [EmbeddingCache.key(profile, input_type, t) for t in items]
        pending: dict[str, list[int]] = {}
        hits = 0
        for row, (key, text) in enumerate(zip(keys, items, strict=True)):
            if text in pending:
                pending[text].append(row)
                continue
            cached = self.cache.get(key)
            if cached is None:
                pending[text] = [row]
            else:
                out[row] = cached
                hits += 1
        missing = list(pending)
        result = EmbeddingResult(vectors=out[:0], tokens=None, truncated=0, batches=0)
        try:
            if missing:
                result = await self._call_model(missing, input_type)
                vectors = _as_rows(
                    result.vectors, len(missing), profile.dimensions, type(self.model).__name__
                )
                for i, text in enumerate(missing):
                    out[pending[text]] = vectors[i]
                    self.cache.put(keys[pending[text][0]], vectors[i])
        except Exception as error:
            # Cancelled is not an Exception: a cancelled call records nothing, since it
            # did not finish and there is nothing reliable to count.
            self._record(profile, input_type, items, missing, hits, result, start, error)
            raise
        self._record(profile, input_type, items, missing, hits, result, start, None)
        return out

    def _record(
        self,
        profile: EmbeddingProfile,
        input_type: InputType,
        items: list[str],
        missing: list[str],
        hits: int,
        result: EmbeddingResult,
        start: float,
        error: BaseException | None,
    ) -> None:
        # A failed call has no usage to bill: it records its texts and its error only.
        sent = missing if error is None else []
        characters = sum(len(t) for t in sent)
        tokens = None if error is not None else result.tokens
        price = self.usage.price_for(profile)
        cost = None
        if error is None and price is not None:
            cost = (
                price.cost(
                    tokens=tokens,
                    characters=characters,
                    vectors=len(sent),
                    requests=result.batches,
                )
                if sent
                else 0.0
            )
        self.usage.record(
            EmbeddingCall(
                provider=profile.provider,
                model=profile.model,
                input_type=input_type,
                texts=len(items),
                cache_hits=hits,
                texts_embedded=len(sent),
                characters=characters,
                tokens=tokens,
                truncated=result.truncated if error is None else 0,
                batches=result.batches if error is None else 0,
                dimensions=profile.dimensions,
                seconds=time.perf_counter() - start,
                cost=cost,
                error=None if error is None else type(error).__name__,
            )
        )

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Embed documents through the cache; see :meth:`embed` (cancellation too)."""
        return await self.embed(texts, "document")

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query through the cache; see :meth:`embed` (cancellation too).

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"query is a {type(text).__name__}; expected a str")
        row: npt.NDArray[np.float32] = (await self.embed([text], "query"))[0]
        return row

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.model!r}, {self.profile.name})"
