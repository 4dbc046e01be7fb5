"""The embedding layer (design §9): the ``EmbeddingModel`` protocol, a registry
of named models, an LRU embedding cache, usage records, and ``CachedEmbedder``, which
puts the three together in front of any model.

``CachedEmbedder`` has async ``embed_documents`` and ``embed_query``, so it plugs into
``open_store`` (and ``Memory``) like any ``AsyncEmbedder``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, final, runtime_checkable

import attrs
import msgspec
import numpy as np
import numpy.typing as npt

from protocol import (
    ConfigError,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPrice,
    EmbeddingProfile,
    EmbeddingUsageTotals,
    InputType,
)
from protocol.checks import check_int

__all__ = [
    "CacheStatistics",
    "CachedEmbedder",
    "EmbeddingCache",
    "EmbeddingModel",
    "EmbeddingRegistry",
    "EmbeddingResult",
    "EmbeddingUsageLog",
    "check_profile",
    "check_texts",
]

Matrix = npt.NDArray[np.float32]
_INPUT_TYPES = ("document", "query")


def check_texts(texts: object) -> list[str]:
    """``texts`` as a list of str.

    Raises:
        TypeError: ``texts`` is a single str (a common slip: it would embed each
            character), not a sequence, or holds something that is not a str.
    """
    if isinstance(texts, str | bytes):
        raise TypeError(
            f"texts is a {type(texts).__name__}; expected a sequence of str (wrap one text "
            "in a list, or use embed_query)"
        )
    if not isinstance(texts, Sequence):
        raise TypeError(f"texts is a {type(texts).__name__}; expected a sequence of str")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}; expected a str")
    return out


def check_profile(bound: EmbeddingProfile, used: EmbeddingProfile) -> None:
    """Raise unless vectors from ``used`` compare with those of a store bound to ``bound``.

    Raises:
        EmbeddingError: the provider, model, dimensions or options differ.
    """
    for name in ("provider", "model", "dimensions"):
        if getattr(bound, name) != getattr(used, name):
            raise EmbeddingError(
                f"query embedded with {used.name} ({used.dimensions} dimensions); this store "
                f"is bound to {bound.name} ({bound.dimensions} dimensions): {name} is "
                f"{getattr(used, name)!r}, expected {getattr(bound, name)!r}"
            )
    if bound.options_key() != used.options_key():
        raise EmbeddingError(
            f"query embedded with options {used.options_key()}; this store is bound to "
            f"{bound.options_key()}"
        )


@final
@attrs.frozen
class EmbeddingResult:
    """What one model call returned.

    Attributes:
        vectors: float32 ``[len(texts), dimensions]``.
        tokens: tokens the model reports, or ``None``.
        truncated: texts the model truncated, where it says (else 0).
        batches: provider requests or forward passes it took.
    """

    vectors: Matrix
    tokens: int | None = None
    truncated: int = 0
    batches: int = 1


@runtime_checkable
class EmbeddingModel(Protocol):
    """An embedding model: documents and queries are embedded separately.

    Its async methods are awaited in the task that asked, so a cancel reaches them
    directly.

    A model may also define ``async embed_with_report(texts, input_type) ->
    EmbeddingResult``; :class:`CachedEmbedder` then records the tokens, truncations and
    batches the model reports.
    """

    @property
    def profile(self) -> EmbeddingProfile: ...

    async def embed_documents(self, texts: Sequence[str]) -> Any: ...

    async def embed_query(self, text: str) -> Any: ...


# ---------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------
@final
class EmbeddingRegistry:
    """Named embedding models, one of them the default.

    The first model registered becomes the default unless another is registered with
    ``default=True``.
    """

    def __init__(self) -> None:
        self._models: dict[str, EmbeddingModel] = {}
        self._default: str | None = None

    def register(self, name: str, model: EmbeddingModel, *, default: bool = False) -> None:
        """Add ``model`` under ``name``.

        Raises:
            ConfigError: an empty or taken name, or a model without a ``profile`` and
                async ``embed_documents``/``embed_query``.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"model name is {name!r}; expected a non-empty str")
        if name in self._models:
            raise ConfigError(f"an embedding model is already registered as {name!r}")
        if not isinstance(model, EmbeddingModel) or not isinstance(
            getattr(model, "profile", None), EmbeddingProfile
        ):
            raise ConfigError(
                f"{type(model).__name__} is not an EmbeddingModel; expected a profile "
                "(EmbeddingProfile) and async embed_documents/embed_query"
            )
        self._models[name] = model
        if default or self._default is None:
            self._default = name

    def get(self, name: str | None = None) -> EmbeddingModel:
        """The model named ``name``, or the default when ``name`` is None.

        Raises:
            ConfigError: no such name, or an empty registry.
        """
        if name is None:
            if self._default is None:
                raise ConfigError("the embedding registry is empty; register a model first")
            name = self._default
        try:
            return self._models[name]
        except KeyError:
            raise ConfigError(
                f"no embedding model named {name!r}; registered: {sorted(self._models)}"
            ) from None

    @property
    def default_name(self) -> str | None:
        """The default model's name, or None when the registry is empty."""
        return self._default

    def set_default(self, name: str) -> None:
        """Make ``name`` the default.

        Raises:
            ConfigError: no such name.
        """
        self.get(name)
        self._default = name

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._models)

    def profiles(self) -> dict[str, EmbeddingProfile]:
        """Each name's profile."""
        return {name: model.profile for name, model in self._models.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __len__(self) -> int:
        return len(self._models)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._models))


# ---------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------
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

    def put(self, key: CacheKey, vector: npt.NDArray[Any]) -> None:
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
# Usage
# ---------------------------------------------------------------------------------------
@attrs.define
class _Billable:
    """One model's successful provider usage, split by whether tokens were reported,
    which is what repricing at read time needs (a per-token price cannot bill a call
    that reported none)."""

    tokens: int = 0
    characters: int = 0
    vectors: int = 0
    requests: int = 0
    untokened_calls: int = 0
    untokened_characters: int = 0
    untokened_vectors: int = 0
    untokened_requests: int = 0

    def add(self, call: EmbeddingCall) -> None:
        if call.tokens is None:
            self.untokened_calls += call.texts_embedded > 0
            self.untokened_characters += call.characters
            self.untokened_vectors += call.texts_embedded
            self.untokened_requests += call.batches
        else:
            self.tokens += call.tokens
            self.characters += call.characters
            self.vectors += call.texts_embedded
            self.requests += call.batches

    def cost(self, price: EmbeddingPrice) -> tuple[float, int]:
        """The cost at ``price`` and how many provider calls it cannot price."""
        total = price.cost(
            tokens=self.tokens,
            characters=self.characters,
            vectors=self.vectors,
            requests=self.requests,
        )
        assert total is not None  # tokens were given
        untokened = price.cost(
            tokens=None,
            characters=self.untokened_characters,
            vectors=self.untokened_vectors,
            requests=self.untokened_requests,
        )
        if untokened is None:
            return total, self.untokened_calls
        return total + untokened, 0


class EmbeddingUsageLog:
    """Usage records of embedding calls, and their totals.

    The totals cover every call ever recorded; the individual records are kept in a
    bounded ring (``max_records``), so a long-lived agent does not grow without bound.

    **Prices can change** (:meth:`set_price`) without rebuilding the log: for every
    model this log has a price for, the totals' ``cost`` and ``unpriced_calls`` are
    computed from the current price each time the totals are read, over every call of
    that model ever recorded. A model with no price here keeps the costs its records
    came with (records priced by another log, as a memory's log receives them). Each
    record's own ``cost`` is what the call cost at the prices of its time, and stays so.

    Args:
        pricing: prices keyed by ``"provider/model"`` or by the bare model name (the
            first wins). A call whose model has no price has ``cost=None``.
        max_records: how many recent records :meth:`records` keeps.
        listener: called with each record as it is made (for an event stream). It must
            not block.

    Raises:
        ConfigError: ``max_records`` < 0, or a price that is not an ``EmbeddingPrice``.
    """

    def __init__(
        self,
        *,
        pricing: Mapping[str, EmbeddingPrice] | None = None,
        max_records: int = 1024,
        listener: Callable[[EmbeddingCall], None] | None = None,
    ) -> None:
        check_int("max_records", max_records, minimum=0)
        prices = dict(pricing or {})
        for name, price in prices.items():
            _check_price(name, price)
        self._pricing = prices
        self._records: collections.deque[EmbeddingCall] = collections.deque(maxlen=max_records)
        self._totals = EmbeddingUsageTotals()
        self._by_model: dict[str, EmbeddingUsageTotals] = {}
        # (provider, model) -> successful provider usage, for repricing.
        self._billable: dict[tuple[str, str], _Billable] = {}
        self._listener = listener
        self._lock = threading.Lock()

    def price_for(self, profile: EmbeddingProfile) -> EmbeddingPrice | None:
        """The caller's price for ``profile``'s model, if any."""
        return self.price_named(profile.provider, profile.model)

    def price_named(self, provider: str, model: str) -> EmbeddingPrice | None:
        """The current price of ``provider/model`` (or of the bare model), if any."""
        with self._lock:
            return self._pricing.get(f"{provider}/{model}") or self._pricing.get(model)

    def set_price(self, name: str, price: EmbeddingPrice | None) -> None:
        """Set (or, with ``None``, remove) the price of ``name``: ``"provider/model"``
        or a bare model name. Later calls are priced with it, and so are the totals,
        past calls included, from the next read on.

        Raises:
            ConfigError: ``name`` is not a non-empty str, or ``price`` is not an
                ``EmbeddingPrice`` or None.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"price name is {name!r:.60}; expected a non-empty str")
        with self._lock:
            if price is None:
                self._pricing.pop(name, None)
                return
            _check_price(name, price)
            self._pricing[name] = price

    def record(self, call: EmbeddingCall) -> None:
        """Add one call's record."""
        with self._lock:
            self._records.append(call)
            self._totals = self._totals.add(call)
            name = f"{call.provider}/{call.model}"
            self._by_model[name] = self._by_model.get(name, EmbeddingUsageTotals()).add(call)
            if call.error is None:
                self._billable.setdefault((call.provider, call.model), _Billable()).add(call)
        if self._listener is not None:
            self._listener(call)

    def records(self) -> list[EmbeddingCall]:
        """The most recent records, oldest first."""
        with self._lock:
            return list(self._records)

    def totals(self) -> EmbeddingUsageTotals:
        """The sums over every call recorded, priced at the current prices."""
        with self._lock:
            totals, keys = self._totals, list(self._billable)
        cost, unpriced = 0.0, 0
        for provider, model in keys:
            c, u = self._priced(provider, model)
            cost, unpriced = cost + c, unpriced + u
        return msgspec.structs.replace(totals, cost=cost, unpriced_calls=unpriced)

    def totals_by_model(self) -> dict[str, EmbeddingUsageTotals]:
        """The sums per ``"provider/model"``, priced at the current prices."""
        with self._lock:
            by_model, keys = dict(self._by_model), list(self._billable)
        for provider, model in keys:
            name = f"{provider}/{model}"
            cost, unpriced = self._priced(provider, model)
            by_model[name] = msgspec.structs.replace(
                by_model[name], cost=cost, unpriced_calls=unpriced
            )
        return by_model

    def _priced(self, provider: str, model: str) -> tuple[float, int]:
        price = self.price_named(provider, model)
        with self._lock:
            usage = self._billable[provider, model]
            if price is None:
                # Not priced here: the costs the records came with (a memory's log
                # receives records that the caller's CachedEmbedder log priced).
                recorded = self._by_model[f"{provider}/{model}"]
                return recorded.cost, recorded.unpriced_calls
            return usage.cost(price)


def _check_price(name: str, price: object) -> None:
    if not isinstance(price, EmbeddingPrice):
        raise ConfigError(
            f"pricing[{name!r}] is a {type(price).__name__}; expected an EmbeddingPrice"
        )


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
        model: Any = self.model
        report = getattr(model, "embed_with_report", None)
        if report is not None:
            result = await report(texts, input_type)
            if not isinstance(result, EmbeddingResult):
                raise EmbeddingError(
                    f"{type(model).__name__}.embed_with_report returned a "
                    f"{type(result).__name__}; expected an EmbeddingResult"
                )
            return result
        if input_type == "query":
            return EmbeddingResult(vectors=np.asarray([await model.embed_query(texts[0])]))
        return EmbeddingResult(vectors=await model.embed_documents(texts))

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
