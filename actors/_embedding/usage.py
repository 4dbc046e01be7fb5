"""Usage records of embedding calls: every call's :class:`~protocol.EmbeddingCall`, their
totals, and the billing that reprices them when a price changes."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping

import attrs
import msgspec

from protocol import (
    ConfigError,
    EmbeddingCall,
    EmbeddingPrice,
    EmbeddingProfile,
    EmbeddingUsageTotals,
)
from protocol._checks import check_int

__all__ = ["EmbeddingUsageLog"]


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
