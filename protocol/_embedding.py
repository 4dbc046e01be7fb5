"""Embedding data: model profiles, usage records and prices (the retrieval toolkit, design §9).

These are plain msgspec Structs; the running parts (the cache, the registry, the
wrapper that records usage) live in ``actors._embedding``.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from ._checks import check_int
from ._errors import ConfigError

__all__ = [
    "DISTANCE_METRICS",
    "DistanceMetric",
    "EmbeddingCall",
    "EmbeddingPrice",
    "EmbeddingProfile",
    "EmbeddingUsageTotals",
    "InputType",
    "SparseVector",
]

InputType = Literal["document", "query"]
"""Documents and queries are embedded separately: some models prefix or encode them
differently, and the cache never mixes the two."""

OptionValue = str | int | float | bool | None

DistanceMetric = Literal["cosine", "dot", "euclidean"]
DISTANCE_METRICS: tuple[str, ...] = ("cosine", "dot", "euclidean")


def _non_empty_str(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} is {value!r}; expected a non-empty str")


class EmbeddingProfile(msgspec.Struct, frozen=True, kw_only=True):
    """What an embedding model is and what it accepts.

    A store is bound to one profile: vectors from another model, or of another width, do
    not compare with the ones it holds.

    Args:
        provider: who runs the model, e.g. ``"local"``, ``"openai"``, ``"ollama"``.
        model: the model name, e.g. ``"sentence-transformers/all-MiniLM-L6-v2"``.
        dimensions: the width of every vector the model returns.
        max_batch_size: the most texts sent to the model in one call.
        max_input_tokens: the longest input, in tokens; longer inputs are truncated (or
            rejected, depending on the provider).
        normalized: the model returns unit vectors.
        options: anything else that changes the vectors (a prompt prefix, a precision).
            It is part of every cache key.
        allowed_dimensions: the widths the model can be asked for (a Matryoshka model
            truncates); ``None`` means only ``dimensions``. When given, it holds
            ``dimensions``, each width once, each an int > 0.
        supports_documents: the model embeds documents (``embed_documents``).
        supports_queries: the model embeds queries (``embed_query``).
        supports_sparse: the model also makes sparse vectors.
        distance_metrics: the metrics its vectors are meant for, best first, each
            once, among ``"cosine"``, ``"dot"`` and ``"euclidean"``. The stores rank by
            cosine similarity.

    Raises:
        ConfigError: an empty name, a bound that is not an int > 0, a flag that is not
            a bool, both ``supports_*`` input flags false, or a bad
            ``allowed_dimensions`` or ``distance_metrics``.
    """

    provider: str
    model: str
    dimensions: int
    max_batch_size: int = 64
    max_input_tokens: int = 512
    normalized: bool = False
    options: dict[str, OptionValue] = msgspec.field(default_factory=dict)
    allowed_dimensions: list[int] | None = None
    supports_documents: bool = True
    supports_queries: bool = True
    supports_sparse: bool = False
    distance_metrics: list[DistanceMetric] = msgspec.field(default_factory=lambda: ["cosine"])

    def __post_init__(self) -> None:
        _non_empty_str("provider", self.provider)
        _non_empty_str("model", self.model)
        check_int("dimensions", self.dimensions, python=True)
        check_int("max_batch_size", self.max_batch_size, python=True)
        check_int("max_input_tokens", self.max_input_tokens, python=True)
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ConfigError(f"options is {self.options!r}; expected a dict with str keys")
        for flag in ("normalized", "supports_documents", "supports_queries", "supports_sparse"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag} is {getattr(self, flag)!r:.60}; expected a bool")
        if not (self.supports_documents or self.supports_queries):
            raise ConfigError(
                "supports_documents and supports_queries are both False; a model embeds "
                "documents, queries, or both"
            )
        self._check_allowed_dimensions()
        self._check_metrics()

    def _check_allowed_dimensions(self) -> None:
        allowed = self.allowed_dimensions
        if allowed is None:
            return
        if not isinstance(allowed, list | tuple) or not allowed:
            raise ConfigError(
                f"allowed_dimensions is {allowed!r:.60}; expected None or a non-empty list "
                "of ints > 0"
            )
        widths = [
            check_int(f"allowed_dimensions[{i}]", w, python=True) for i, w in enumerate(allowed)
        ]
        if len(set(widths)) != len(widths):
            raise ConfigError(f"allowed_dimensions is {widths!r:.60}; expected each width once")
        if self.dimensions not in widths:
            raise ConfigError(
                f"allowed_dimensions is {widths!r:.60} and dimensions is {self.dimensions}; "
                "expected dimensions among the allowed widths"
            )
        msgspec.structs.force_setattr(self, "allowed_dimensions", widths)

    def _check_metrics(self) -> None:
        metrics = self.distance_metrics
        if not isinstance(metrics, list | tuple) or not metrics:
            raise ConfigError(
                f"distance_metrics is {metrics!r:.60}; expected a non-empty list among "
                f"{', '.join(DISTANCE_METRICS)}"
            )
        for metric in metrics:
            if metric not in DISTANCE_METRICS:
                raise ConfigError(
                    f"distance_metrics holds {metric!r:.60}; expected one of "
                    f"{', '.join(DISTANCE_METRICS)}"
                )
        if len(set(metrics)) != len(metrics):
            raise ConfigError(f"distance_metrics is {metrics!r}; expected each metric once")
        msgspec.structs.force_setattr(self, "distance_metrics", list(metrics))

    def accepts_dimensions(self, width: int) -> bool:
        """Whether the model can make vectors ``width`` wide."""
        return width in (self.allowed_dimensions or [self.dimensions])

    @property
    def name(self) -> str:
        """``provider/model``, the key of a pricing table."""
        return f"{self.provider}/{self.model}"

    def options_key(self) -> str:
        """The options as canonical JSON (sorted keys), for cache keys."""
        return msgspec.json.encode(dict(sorted(self.options.items()))).decode()


class EmbeddingPrice(msgspec.Struct, frozen=True, kw_only=True):
    """The caller's price for one model, in any currency unit.

    Args:
        per_million_tokens: charged on the tokens the provider reports.
        per_million_characters: charged on the characters sent (for providers that bill
            by character, or when tokens are not reported).
        per_vector: charged on each vector the provider returned (each text embedded;
            cache hits are free).
        per_request: charged on each provider request (batch, or forward pass).

    Raises:
        ConfigError: a price that is not a finite number >= 0 (bools refused).
    """

    per_million_tokens: float = 0.0
    per_million_characters: float = 0.0
    per_vector: float = 0.0
    per_request: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_million_tokens", "per_million_characters", "per_vector", "per_request"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{name} is {value!r}; expected a number >= 0")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name} is {value!r}; expected a finite number >= 0")

    def cost(
        self, *, tokens: int | None, characters: int, vectors: int = 0, requests: int = 0
    ) -> float | None:
        """The cost of some usage, or ``None`` when it is priced per token and the
        provider reported no tokens (an estimate would be a guess)."""
        if self.per_million_tokens and tokens is None:
            return None
        total = self.per_million_characters * characters / 1e6
        if tokens is not None:
            total += self.per_million_tokens * tokens / 1e6
        return total + self.per_vector * vectors + self.per_request * requests


class EmbeddingCall(msgspec.Struct, frozen=True, kw_only=True):
    """The usage record of one ``embed_documents`` or ``embed_query`` call.

    Cache hits are counted in ``cache_hits`` only: ``texts_embedded``, ``characters``,
    ``tokens``, ``batches`` and ``cost`` describe what went to the provider.

    Attributes:
        provider: the profile's provider.
        model: the profile's model.
        input_type: ``"document"`` or ``"query"``.
        texts: how many texts the caller asked for.
        cache_hits: how many of them came from the cache.
        texts_embedded: how many distinct texts were sent to the provider.
        characters: the characters sent to the provider.
        tokens: the tokens the provider reported, or ``None`` when it reports none.
        truncated: how many texts the model truncated, where it says.
        batches: how many provider requests (or forward passes) the call took.
        dimensions: the width of the vectors.
        seconds: wall time of the whole call.
        cost: from the caller's pricing table at the time of the call; ``None`` when
            there is no price or it cannot be computed. (The log's totals are priced
            again, at the current prices, whenever they are read.)
        error: the exception type's name when the call failed, else ``None``.
    """

    provider: str
    model: str
    input_type: InputType
    texts: int
    cache_hits: int
    texts_embedded: int
    characters: int
    tokens: int | None
    truncated: int
    batches: int
    dimensions: int
    seconds: float
    cost: float | None = None
    error: str | None = None


class EmbeddingUsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """The sums over every recorded call.

    Attributes:
        calls: calls recorded, failed ones included.
        failed_calls: calls that raised.
        texts: texts asked for.
        cache_hits: texts served from the cache.
        texts_embedded: texts sent to a provider.
        characters: characters sent to a provider.
        tokens: tokens reported by providers (calls that report none add nothing).
        calls_without_tokens: successful provider calls that reported no tokens.
        truncated: texts that a model truncated.
        batches: provider requests or forward passes.
        seconds: wall time, summed.
        cost: summed cost of the priced calls (from ``EmbeddingUsageLog``: at the
            prices current when the totals are read).
        unpriced_calls: successful provider calls that have no cost.
    """

    calls: int = 0
    failed_calls: int = 0
    texts: int = 0
    cache_hits: int = 0
    texts_embedded: int = 0
    characters: int = 0
    tokens: int = 0
    calls_without_tokens: int = 0
    truncated: int = 0
    batches: int = 0
    seconds: float = 0.0
    cost: float = 0.0
    unpriced_calls: int = 0

    def add(self, call: EmbeddingCall) -> EmbeddingUsageTotals:
        """These totals with ``call`` added."""
        provider_call = call.error is None and call.texts_embedded > 0
        return EmbeddingUsageTotals(
            calls=self.calls + 1,
            failed_calls=self.failed_calls + (call.error is not None),
            texts=self.texts + call.texts,
            cache_hits=self.cache_hits + call.cache_hits,
            texts_embedded=self.texts_embedded + call.texts_embedded,
            characters=self.characters + call.characters,
            tokens=self.tokens + (call.tokens or 0),
            calls_without_tokens=self.calls_without_tokens
            + (provider_call and call.tokens is None),
            truncated=self.truncated + call.truncated,
            batches=self.batches + call.batches,
            seconds=self.seconds + call.seconds,
            cost=self.cost + (call.cost or 0.0),
            unpriced_calls=self.unpriced_calls + (provider_call and call.cost is None),
        )


class SparseVector(msgspec.Struct, frozen=True, kw_only=True):
    """A sparse embedding: the non-zero components, by index.

    Args:
        indices: the components' indices, ints >= 0 in strictly increasing order (so
            each once).
        values: the components' values, finite real numbers, one per index.

    Raises:
        ConfigError: the lists differ in length, an index is not an int >= 0 (bools
            refused) or is out of order or repeated, or a value is not a finite number.
    """

    indices: list[int]
    values: list[float]

    def __post_init__(self) -> None:
        indices, values = self.indices, self.values
        if not isinstance(indices, list | tuple) or not isinstance(values, list | tuple):
            raise ConfigError(
                f"a SparseVector takes lists; got indices {type(indices).__name__} and "
                f"values {type(values).__name__}"
            )
        if len(indices) != len(values):
            raise ConfigError(
                f"SparseVector has {len(indices)} indices and {len(values)} values; "
                "expected one value per index"
            )
        clean: list[int] = []
        for i, index in enumerate(indices):
            n = int(check_int(f"indices[{i}]", index, minimum=0))
            if clean and n <= clean[-1]:
                raise ConfigError(
                    f"indices[{i}] is {n} after {clean[-1]}; expected strictly increasing "
                    "indices (sorted, each once)"
                )
            clean.append(n)
        numbers: list[float] = []
        for i, value in enumerate(values):
            kind = getattr(getattr(value, "dtype", None), "kind", None)
            item = getattr(value, "item", None)
            if kind in ("f", "i", "u") and callable(item):
                value = item()  # a numpy scalar of a real dtype
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(
                    f"values[{i}] is {value!r:.60} ({type(value).__name__}); expected a number"
                )
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(f"values[{i}] is {value!r:.60}; expected a finite number")
            numbers.append(number)
        msgspec.structs.force_setattr(self, "indices", clean)
        msgspec.structs.force_setattr(self, "values", numbers)

    def dot(self, other: SparseVector) -> float:
        """The dot product with ``other`` (a merge over the two sorted index lists)."""
        total, i, j = 0.0, 0, 0
        a, b = self.indices, other.indices
        while i < len(a) and j < len(b):
            if a[i] == b[j]:
                total += self.values[i] * other.values[j]
                i, j = i + 1, j + 1
            elif a[i] < b[j]:
                i += 1
            else:
                j += 1
        return total
