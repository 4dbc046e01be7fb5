"""Consolidators: what a new memory does to the memories already held.

Before ``Memory.remember`` writes a memory, a :class:`Consolidator` given to
``open_memory(consolidator=...)`` sees the new text and its nearest current neighbours
in the namespace, and answers one :data:`Decision`:

- :class:`Add`: write it as a new memory (what ``remember`` does without one);
- :class:`Duplicate`: a held memory already says it; write nothing, return its id;
- :class:`Update`: it changes a held memory; write it as that memory's next version
  (``store.update``), so the old one is kept as history.

:class:`RuleConsolidator` is the deterministic default: the store's own duplicate
rule (:func:`is_duplicate`), never an update. :class:`LlmConsolidator` asks a chat
model (any OpenAI-compatible endpoint, as :class:`~actors.OpenAIChatDispatcher`) and
falls back to the rules when the model's answer is unusable.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, cast, final, runtime_checkable

import attrs
import msgspec
import trio

from protocol import (
    ConfigError,
    DispatchError,
    ScoredDocument,
    SearchRequest,
    UnifiedMessage,
    UnifiedRequest,
)
from protocol.messages import Dedupe

from .._store.contract import Store
from .._store.handle import StoreHandle
from .._store.prepare import NEAR_DUPLICATE_COSINE, check_dedupe, check_expiry
from .dispatch import OpenAIChatDispatcher

__all__ = [
    "JSON_OBJECT",
    "NEIGHBOURS",
    "SYSTEM_PROMPT",
    "Add",
    "Consolidator",
    "Decision",
    "Duplicate",
    "LlmConsolidator",
    "RuleConsolidator",
    "Update",
    "check_consolidator",
    "consolidate_memory",
    "duplicate_of",
    "is_duplicate",
    "parse_answer",
]

logger = logging.getLogger("trio_recall.consolidation")

NEIGHBOURS = 5
"""How many nearest current memories ``Memory.remember`` shows a consolidator."""


# --- the decisions --------------------------------------------------------------------


class Add(msgspec.Struct, frozen=True, tag="add"):
    """Write the new memory as a memory of its own."""


class Duplicate(msgspec.Struct, frozen=True, tag="duplicate"):
    """A held memory already says what the new one says: write nothing.

    Attributes:
        id: the held memory's id, which ``remember`` returns.
    """

    id: str

    def __post_init__(self) -> None:
        _check_id("Duplicate", self.id)


class Update(msgspec.Struct, frozen=True, tag="update"):
    """The new memory changes a held one: it becomes that memory's next version
    (``store.update(id, text=...)``); the old version is kept as history.

    Attributes:
        id: the held memory's id, which ``remember`` returns.
    """

    id: str

    def __post_init__(self) -> None:
        _check_id("Update", self.id)


Decision = Add | Duplicate | Update
"""What a :class:`Consolidator` answers: :class:`Add`, :class:`Duplicate` or
:class:`Update`."""


def _check_id(kind: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{kind}.id is {value!r:.60}; expected the non-empty id of a memory")


@runtime_checkable
class Consolidator(Protocol):
    """Decides what a new memory does to the memories already held.

    Any object with this method is one (a plain class will do).
    """

    async def consolidate(
        self,
        text: str,
        neighbours: Sequence[ScoredDocument],
        metadata: Mapping[str, object] | None = None,
    ) -> Decision:
        """The decision for a new memory.

        Args:
            text: the new memory's text (a message's projection).
            neighbours: its nearest current memories in the namespace, nearest first
                (a similarity search: each ``score`` is a cosine similarity). A
                :class:`Duplicate` or :class:`Update` must name one of them.
            metadata: the new memory's metadata, or None.

        Cancellation: the caller's cancel reaches it directly (there is no inbox).
        """
        ...


# --- the store's duplicate rule -------------------------------------------------------


def is_duplicate(
    dedupe: Dedupe,
    *,
    new_text: str,
    held_text: str,
    cosine: float,
    near_threshold: float = NEAR_DUPLICATE_COSINE,
) -> bool:
    """The store's duplicate predicate for one held memory (``dedupe=`` on a write).

    ``"exact"``: the texts are equal, character for character (no normalization).
    ``"near"``: their cosine similarity is at least ``near_threshold``.
    """
    if dedupe == "exact":
        return new_text == held_text
    return cosine >= near_threshold


def duplicate_of(
    text: str,
    neighbours: Sequence[ScoredDocument],
    dedupe: Dedupe,
    near_threshold: float = NEAR_DUPLICATE_COSINE,
) -> str | None:
    """The id of the first of ``neighbours`` (nearest first) that ``text`` duplicates
    by :func:`is_duplicate`, or None."""
    for hit in neighbours:
        held = hit.document
        if held.id is not None and is_duplicate(
            dedupe,
            new_text=text,
            held_text=held.text,
            cosine=hit.score,
            near_threshold=near_threshold,
        ):
            return held.id
    return None


def _check_threshold(value: object) -> float:
    # The store's own check of a write's near_threshold.
    threshold = check_dedupe("near", value)[1]
    return NEAR_DUPLICATE_COSINE if threshold is None else threshold


def _check_dedupe(value: object) -> Dedupe:
    if value == "exact" and isinstance(value, str):
        return "exact"
    if value == "near" and isinstance(value, str):
        return "near"
    raise ConfigError(f"dedupe is {value!r:.60}; expected 'exact' or 'near'")


@final
@attrs.frozen
class RuleConsolidator:
    """The deterministic consolidator: the store's own duplicate rule, never an update.

    A memory that duplicates a neighbour (:func:`is_duplicate`) is a
    :class:`Duplicate` of the nearest such one; anything else is :class:`Add`. It never
    answers :class:`Update`: telling a changed fact from a new one needs a judge (see
    :class:`LlmConsolidator`).

    Unlike the store's ``dedupe=`` (checked and committed in one step by the store
    actor), a consolidator sees a search made before the write: two concurrent
    ``remember`` calls of one text may both add it. ``"near"`` reads each neighbour's
    ``score``, the cosine of the query's embedding with the stored vector: with an
    embedder that embeds queries and documents alike (hashing, MiniLM) it is the
    store's own cosine.

    Args:
        dedupe: ``"exact"`` (the same text) or ``"near"`` (a neighbour's cosine
            similarity is at least ``near_threshold``).
        near_threshold: a cosine in (0, 1], for ``"near"``.

    Raises:
        ConfigError: a bad ``dedupe`` or ``near_threshold``.
    """

    dedupe: Dedupe = attrs.field(default="exact", converter=_check_dedupe)
    near_threshold: float = attrs.field(default=NEAR_DUPLICATE_COSINE, converter=_check_threshold)

    def decide(self, text: str, neighbours: Sequence[ScoredDocument]) -> Decision:
        """:meth:`consolidate`, without awaiting (it does no I/O)."""
        held = duplicate_of(text, neighbours, self.dedupe, self.near_threshold)
        return Add() if held is None else Duplicate(held)

    async def consolidate(
        self,
        text: str,
        neighbours: Sequence[ScoredDocument],
        metadata: Mapping[str, object] | None = None,
    ) -> Decision:
        """:class:`Duplicate` of the nearest neighbour ``text`` duplicates, else
        :class:`Add`. ``metadata`` is not read. It never blocks."""
        return self.decide(text, neighbours)


# --- the LLM judge --------------------------------------------------------------------

#: What the model is told. A list of rules, a question or worked examples did no better
#: with SmolLM2-135M (docs/pages/how-to/consolidation.md, "What to expect from a model
#: that small").
SYSTEM_PROMPT = (
    "You keep a memory store tidy. A new memory arrives with the stored memories most "
    "like it, each with its id. Answer with one JSON object and nothing else:\n"
    '{"action": "duplicate", "id": N} if memory N already says the same thing;\n'
    '{"action": "update", "id": N} if the new memory changes a fact that memory N '
    "states (it replaces it);\n"
    '{"action": "add"} if it is new information.'
)


class _Answer(msgspec.Struct, frozen=True):
    action: Literal["add", "duplicate", "update"]
    id: int | str | None = None


_DECODER = msgspec.json.Decoder(_Answer)


def _prompt(text: str, neighbours: Sequence[ScoredDocument]) -> str:
    lines = ["Stored memories:"]
    lines.extend(f"[{i}] {hit.document.text}" for i, hit in enumerate(neighbours, 1))
    lines.append(f"New memory: {text}")
    return "\n".join(lines)


def _held_id(answer: _Answer, neighbours: Sequence[ScoredDocument]) -> str:
    """The stored id the answer names: a listed number (1-based) or a neighbour's own
    id. Raises ValueError, saying what was wrong."""
    named = answer.id
    if isinstance(named, str) and named.strip().isdigit():
        named = int(named)
    if isinstance(named, int):
        if not 1 <= named <= len(neighbours):
            raise ValueError(f"id {named} is not one of the {len(neighbours)} listed")
        held = neighbours[named - 1].document.id
        if held is None:  # pragma: no cover - neighbours come from a store, with ids
            raise ValueError(f"memory {named} has no id")
        return held
    if isinstance(named, str):
        for hit in neighbours:
            if hit.document.id == named:
                return named
        raise ValueError(f"id {named!r:.40} is not one of the listed memories")
    raise ValueError(f"action {answer.action!r} names no id")


def parse_answer(reply: str, neighbours: Sequence[ScoredDocument]) -> Decision:
    """The decision in a model's reply: one JSON object (surrounding white space
    allowed, nothing else) ``{"action": "add"|"duplicate"|"update", "id": N}``, where
    ``N`` is a memory's listed number or its id (``"add"`` needs none).

    Raises:
        ValueError: the reply is not such an object, or names no listed memory.
    """
    try:
        answer = _DECODER.decode(reply.strip())
    except msgspec.DecodeError as error:
        raise ValueError(f"not the JSON answer asked for ({error}): {reply!r:.200}") from None
    if answer.action == "add":
        return Add()
    held = _held_id(answer, neighbours)
    return Duplicate(held) if answer.action == "duplicate" else Update(held)


#: The ``response_format`` sent by default: JSON mode, which OpenAI, vLLM, Ollama and
#: llama.cpp's servers honour (llama.cpp by a grammar, so even a tiny model answers JSON).
JSON_OBJECT: Mapping[str, object] = {"type": "json_object"}


@final
class LlmConsolidator(trio.abc.AsyncResource):
    """A consolidator that asks a chat model, over an OpenAI-compatible
    ``/v1/chat/completions`` endpoint (llama.cpp's server, Ollama, vLLM, OpenAI).

    The model is shown the new memory and its neighbours, numbered 1..n (a small model
    copies a short number far better than a 16-character id), and must answer one
    JSON object (:func:`parse_answer`). With no neighbours it is not asked (the answer
    is :class:`Add`), nor, with ``exact_first``, when a neighbour has the very same
    text (:class:`Duplicate`).

    Anything else the model answers (no JSON, an unknown action, a number not listed)
    and any transport error (refused connection, HTTP error, timeout) is logged as a
    warning and the ``fallback``'s decision is returned instead, unless ``strict``:
    then it is raised as a ``DispatchError``.

    Use it as an async context manager to keep one connection pool for many calls;
    used without one, each call opens and closes its own client.

    Args:
        base_url: the server root, with or without ``/v1``.
        model: the model name sent on every request.
        api_key: sent as ``Authorization: Bearer <key>`` when set.
        timeout: seconds for each of connect, read, write and pool.
        fallback: what decides when the model cannot; ``RuleConsolidator()`` if None.
        strict: raise instead of falling back.
        exact_first: answer :class:`Duplicate` without asking when a neighbour's text
            is the new text exactly (the rule is certain there; a model is not).
        response_format: sent as the request's ``response_format``; None sends none
            (for a server without JSON mode).
        max_tokens: the cap on the answer's length.

    Raises:
        ConfigError: a bad argument (as ``OpenAIChatDispatcher``'s, and a fallback that
            is not a Consolidator, ``strict`` or ``exact_first`` not a bool, or
            ``max_tokens`` not an int > 0).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        fallback: Consolidator | None = None,
        strict: bool = False,
        exact_first: bool = True,
        response_format: Mapping[str, object] | None = JSON_OBJECT,
        max_tokens: int = 32,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model is {model!r:.60}; expected a non-empty str")
        self._dispatcher = OpenAIChatDispatcher(base_url, model, api_key, timeout)
        the_fallback: Consolidator = RuleConsolidator() if fallback is None else fallback
        if not callable(getattr(the_fallback, "consolidate", None)):
            raise ConfigError(
                f"fallback is a {type(the_fallback).__name__}; expected a Consolidator "
                "(an object with async consolidate(text, neighbours, metadata))"
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"max_tokens is {max_tokens!r:.60}; expected an int > 0")
        if response_format is not None and not isinstance(response_format, Mapping):
            raise ConfigError(
                f"response_format is a {type(response_format).__name__}; expected a "
                "JSON object (a dict) or None"
            )
        for name, flag in (("strict", strict), ("exact_first", exact_first)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} is {flag!r:.60}; expected True or False")
        self.fallback = the_fallback
        self.strict = strict
        self.exact_first = exact_first
        self.max_tokens = max_tokens
        self._extra: dict[str, object] = (
            {} if response_format is None else {"response_format": dict(response_format)}
        )

    @property
    def endpoint(self) -> str:
        """The chat completions URL it posts to."""
        return self._dispatcher.endpoint

    async def __aenter__(self) -> LlmConsolidator:
        await self._dispatcher.__aenter__()
        return self

    async def aclose(self) -> None:
        """Close the connection pool, if one is open."""
        await self._dispatcher.aclose()

    def request(self, text: str, neighbours: Sequence[ScoredDocument]) -> UnifiedRequest:
        """The chat request it sends for this memory (greedy decoding)."""
        return UnifiedRequest(
            model=self._dispatcher.model or "",
            messages=[
                UnifiedMessage.system(SYSTEM_PROMPT),
                UnifiedMessage.user(_prompt(text, neighbours)),
            ],
            temperature=0.0,
            max_tokens=self.max_tokens,
            extra=dict(self._extra),
        )

    async def ask(self, text: str, neighbours: Sequence[ScoredDocument]) -> Decision:
        """The model's own decision, with no shortcut and no fallback.

        Cancellation propagates at once; the connection is dropped.

        Raises:
            DispatchError: the request failed (``DispatchTimeout`` for a timeout), or
                the answer was not :func:`parse_answer`'s.
        """
        reply = await self._dispatcher.dispatch(self.request(text, neighbours))
        try:
            return parse_answer(reply.text(), neighbours)
        except ValueError as error:
            raise DispatchError(
                f"malformed consolidation answer: {error}", endpoint=self.endpoint, status=200
            ) from None

    async def consolidate(
        self,
        text: str,
        neighbours: Sequence[ScoredDocument],
        metadata: Mapping[str, object] | None = None,
    ) -> Decision:
        """The model's decision, or the fallback's when the model cannot give one.

        Cancellation propagates at once; the connection is dropped.

        Raises:
            DispatchError: only with ``strict``, as :meth:`ask`.
        """
        if not neighbours:
            return Add()
        if self.exact_first:
            held = duplicate_of(text, neighbours, "exact")
            if held is not None:
                return Duplicate(held)
        try:
            return await self.ask(text, neighbours)
        except DispatchError as error:
            if self.strict:
                raise
            decision = await self.fallback.consolidate(text, neighbours, metadata)
            logger.warning("consolidation judge failed (%s); fell back to %r", error, decision)
            return decision

    def __repr__(self) -> str:
        return f"LlmConsolidator(endpoint={self.endpoint!r}, model={self._dispatcher.model!r})"


# --- the wiring into Memory.remember --------------------------------------------------


async def consolidate_memory(
    store: Store,
    consolidator: Consolidator,
    text: str,
    *,
    namespace: str,
    metadata: Mapping[str, object] | None,
    occurred_at: dt.datetime | None,
    expires_at: dt.datetime | None = None,
    ttl: float | dt.timedelta | None = None,
) -> str | None:
    """What ``Memory.remember`` runs first when it has a consolidator: the
    :data:`NEIGHBOURS` nearest current memories of ``namespace`` (a similarity search
    for ``text``), the consolidator's decision on them, and its effect.

    Returns:
        The id ``remember`` returns, when the decision was :class:`Duplicate` (nothing
        written) or :class:`Update` (``store.update(id, text=text, metadata=...)``,
        with ``valid_from=occurred_at`` when given, and the expiry ``expires_at`` or
        ``ttl`` gives when one is given, else the held memory's); None for
        :class:`Add`: the caller writes the memory as it would without a
        consolidator.

    Raises:
        ConfigError: the consolidator answered something that is not a
            :data:`Decision`, or named an id that is not one of the neighbours.
        Whatever the search, the consolidator or the update raised.
    """
    neighbours = await store.search(
        SearchRequest(query=text, k=NEIGHBOURS, kind="similarity", namespace=namespace)
    )
    decision: object = await consolidator.consolidate(text, neighbours, metadata)
    if isinstance(decision, Add):
        return None
    if not isinstance(decision, Duplicate | Update):
        raise ConfigError(
            f"the consolidator answered a {type(decision).__name__} ({decision!r:.80}); "
            "expected Add(), Duplicate(id) or Update(id)"
        )
    if not any(hit.document.id == decision.id for hit in neighbours):
        raise ConfigError(
            f"the consolidator answered {decision!r:.80}; expected the id of one of the "
            f"{len(neighbours)} neighbours it was shown"
        )
    if isinstance(decision, Duplicate):
        return decision.id
    expiry: dt.datetime | Literal["keep"] | None = "keep"
    if expires_at is not None or ttl is not None:
        # A ttl counts from the store's clock, as it does on a write.
        clock = store.clock if isinstance(store, StoreHandle) else _utc_now
        expiry = check_expiry(expires_at, ttl, clock)
    updated = await store.update(
        decision.id,
        text=text,
        metadata=None if metadata is None else dict(metadata),
        namespace=namespace,
        valid_from=occurred_at,
        expires_at=expiry,
    )
    return decision.id if updated.id is None else updated.id


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def check_consolidator(value: object) -> Consolidator | None:
    """``open_memory``'s ``consolidator``: None or a :class:`Consolidator`.

    Raises:
        ConfigError: anything without an async ``consolidate`` method.
    """
    if value is None or callable(getattr(value, "consolidate", None)):
        return cast("Consolidator | None", value)
    raise ConfigError(
        f"consolidator is a {type(value).__name__}; expected a Consolidator (an object "
        "with async consolidate(text, neighbours, metadata)) or None"
    )
