"""Embedding data: model profiles, usage records and prices (the retrieval toolkit, design §9).

These are plain msgspec Structs; the running parts (the cache, the registry, the
wrapper that records usage) live in ``actors._embedding_cache``.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from ._checks import check_int
from ._errors import ConfigError

__all__ = [
    "EmbeddingCall",
    "EmbeddingPrice",
    "EmbeddingProfile",
    "EmbeddingUsageTotals",
    "InputType",
]

InputType = Literal["document", "query"]
"""Documents and queries are embedded separately: some models prefix or encode them
differently, and the cache never mixes the two."""

OptionValue = str | int | float | bool | None


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

    Raises:
        ConfigError: an empty name, or a bound that is not an int > 0.
    """

    provider: str
    model: str
    dimensions: int
    max_batch_size: int = 64
    max_input_tokens: int = 512
    normalized: bool = False
    options: dict[str, OptionValue] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _non_empty_str("provider", self.provider)
        _non_empty_str("model", self.model)
        check_int("dimensions", self.dimensions, python=True)
        check_int("max_batch_size", self.max_batch_size, python=True)
        check_int("max_input_tokens", self.max_input_tokens, python=True)
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ConfigError(f"options is {self.options!r}; expected a dict with str keys")

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
    """

    per_million_tokens: float = 0.0
    per_million_characters: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_million_tokens", "per_million_characters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{name} is {value!r}; expected a number >= 0")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name} is {value!r}; expected a finite number >= 0")

    def cost(self, *, tokens: int | None, characters: int) -> float | None:
        """The cost of one call, or ``None`` when it is priced per token and the
        provider reported no tokens (an estimate would be a guess)."""
        if self.per_million_tokens and tokens is None:
            return None
        total = self.per_million_characters * characters / 1e6
        if tokens is not None:
            total += self.per_million_tokens * tokens / 1e6
        return total


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
        cost: from the caller's pricing table; ``None`` when there is no price or it
            cannot be computed.
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
        cost: summed cost of the priced calls.
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
