"""The compaction actor: applies ``MemoryConfig.strategies`` to a prompt (design §4).

Rules every strategy follows:

- The first system message, the most recent user message and any recall block are
  protected: no strategy moves, drops or clamps them.
- A tool call and its results form one unit (matched by tool-call id, adjacent or
  not). A unit moves, drops or is summarized whole, never split; when the oldest
  unprotected unit does not fit in what a strategy may still take, the strategy stops
  there rather than skip ahead to newer messages.
- A strategy that fails changes nothing, records ``Rejected`` and ``last_error``, and the
  next strategy runs.
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs
import msgspec
import trio

from protocol import (
    ConfigError,
    ContentBlock,
    ImageBase64,
    MemoryConfig,
    Poisoned,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    VectorStoreError,
    parse_time,
    payload_bytes,
    projection,
)
from protocol._errors import to_plugin_error
from protocol._memory import describe_error, memory_id
from protocol._render import RENDERERS, is_recall_block
from protocol.checks import format_date, turn_bytes
from protocol.compaction import (
    Clamped,
    ClampOversizedMessages,
    CompactionAction,
    CompressionReport,
    DropObservations,
    Dropped,
    Offload,
    Offloaded,
    Rejected,
    Skipped,
    SlidingWindow,
    Strategy,
    Summarize,
    Summarized,
    contextual_entry,
)
from protocol.events import TurnsOffloaded, TurnsSummarized
from protocol.messages import Compress, Compressed

from .._store.contract import Store
from .._store.events import EventHub, StoreWatch, now
from .._store.index_text import CONTEXT_CHARS, fit_index_text
from .._store.mailbox import Mailbox

__all__ = [
    "DROPPED_OUTPUT_PREFIX",
    "CompactionActor",
    "Summarizer",
    "clamp_message",
    "default_summarizer",
    "prompt_bytes",
]

logger = logging.getLogger("trio_recall.compaction")

Summarizer = Callable[
    [list[UnifiedMessage]], str | UnifiedMessage | Awaitable[str | UnifiedMessage]
]

DROPPED_OUTPUT_PREFIX = "[tool output dropped:"
# The source of what Offload stores (counted against max_entry_bytes).
OFFLOAD_SOURCE = "offload"
_STRATEGY_NAMES: dict[type, str] = {
    Offload: "offload",
    Summarize: "summarize",
    DropObservations: "drop_observations",
    SlidingWindow: "sliding_window",
    ClampOversizedMessages: "clamp",
}


def prompt_bytes(messages: Sequence[UnifiedMessage]) -> int:
    """The summed payload bytes of a prompt, the measure ``max_prompt_bytes`` limits."""
    return sum(payload_bytes(m) for m in messages)


def default_summarizer(messages: list[UnifiedMessage]) -> str:
    """An extractive summary, used when ``open_memory`` gets no summarizer: one line per
    message, its role and the first 120 characters of its projection."""
    lines = [f"Summary of {len(messages)} earlier message(s):"]
    for m in messages:
        text = " ".join(projection(m).split())
        lines.append(f"- {m.role}: {text[:120]}{'...' if len(text) > 120 else ''}")
    return "\n".join(lines)


# --- units and protection ---------------------------------------------------------------------


def _is_any_recall_block(message: UnifiedMessage) -> bool:
    return any(is_recall_block(message, r) for r in RENDERERS)


def protected_indices(messages: Sequence[UnifiedMessage]) -> set[int]:
    """The first system message, the most recent user message and every recall block."""
    out = {i for i, m in enumerate(messages) if _is_any_recall_block(m)}
    first_system = next(
        (i for i, m in enumerate(messages) if m.role == "system" and i not in out), None
    )
    if first_system is not None:
        out.add(first_system)
    last_user = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None
    )
    if last_user is not None:
        out.add(last_user)
    return out


def _answered_ids(message: UnifiedMessage) -> set[str]:
    ids = {b.tool_call_id for b in message.content if isinstance(b, ToolResult)}
    if message.tool_call_id is not None:
        ids.add(message.tool_call_id)
    return ids


def units(messages: Sequence[UnifiedMessage]) -> list[list[int]]:
    """Group indices so that each tool call travels with its results; oldest unit first."""
    owner: dict[str, int] = {}  # tool-call id -> unit number
    groups: list[list[int]] = []
    for i, m in enumerate(messages):
        joined = next((owner[c] for c in sorted(_answered_ids(m)) if c in owner), None)
        if joined is None:
            joined = len(groups)
            groups.append([])
        groups[joined].append(i)
        for block in m.content:
            if isinstance(block, ToolCall):
                owner.setdefault(block.id, joined)
    return groups


def oldest_unprotected(
    messages: Sequence[UnifiedMessage], limit: int
) -> tuple[list[int], str | None]:
    """Up to ``limit`` indices from the oldest unprotected units, whole units only.

    Returns the sorted indices, and when there are none, why.
    """
    protected = protected_indices(messages)
    taken: list[int] = []
    for unit in units(messages):
        if any(i in protected for i in unit):
            continue
        if len(taken) + len(unit) > limit:
            if not taken:
                return [], (
                    f"the oldest unprotected unit is a tool call with its results "
                    f"({len(unit)} messages), more than {limit}"
                )
            break
        taken.extend(unit)
    if not taken:
        return [], "no unprotected messages"
    return sorted(taken), None


# --- clamping ---------------------------------------------------------------------------------


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _cut_utf8(s: str, keep: int) -> str:
    # Dropping a partial character keeps the result at or under ``keep`` bytes.
    return s.encode("utf-8", "surrogatepass")[:keep].decode("utf-8", "ignore")


def utc_date() -> str:
    """The current UTC date and time, as an offloaded entry carries it by default:
    ``"30 November 2026, 00:09 UTC"``."""
    return time.strftime("%d %B %Y, %H:%M UTC", time.gmtime())


def offload_time(date: str | None) -> dt.datetime | None:
    """The ``occurred_at`` of the entries ``Offload`` writes for ``compress(date=...)``:
    the date, when it is ISO 8601 (:func:`protocol.parse_time`); else None, and the
    store stamps the time of the write (a date in another form only dates the text)."""
    if date is None:
        return None
    try:
        return parse_time("date", date)
    except ConfigError:
        return None


def entry_texts(
    messages: Sequence[UnifiedMessage],
    picked: Sequence[int],
    *,
    context: int,
    date: str | None,
    max_entry_bytes: int,
) -> list[str] | None:
    """The text each picked message is indexed and embedded by (``Offload``).

    It is :func:`protocol.compaction.contextual_entry` of the message's projection, its
    ``date`` and the projections of the ``context`` non-system messages just before it,
    each cut to ``CONTEXT_CHARS``. The store counts the text towards the entry's size, so a text
    that would take the entry over ``max_entry_bytes`` is cut to fit, and only ever in
    the date and context that follow the turn: the turn's own text is never cut.

    None when some picked message cannot hold its own text a second time (its payload
    is over about half the cap): the batch is then indexed by each turn's projection
    alone (``texts=None``, which the store does not count twice), so every turn stays
    findable by every word it says. A message already over the cap is left for the
    store to refuse.
    """
    texts = []
    for index in picked:
        message = messages[index]
        own = projection(message)
        budget = max_entry_bytes - offload_bytes(message)
        if _utf8_len(own) > budget:
            return None
        before: list[str] = []
        j = index - 1
        while len(before) < context and j >= 0:
            if messages[j].role != "system":
                before.append(projection(messages[j])[:CONTEXT_CHARS])
            j -= 1
        text = fit_index_text(own, contextual_entry(own, context=before[::-1], date=date), budget)
        assert text is not None  # the own text fits: checked above
        texts.append(text)
    return texts


def _marker(cut: int) -> str:
    return f" [...clamped {cut} bytes]"


def offload_bytes(message: UnifiedMessage) -> int:
    """What ``message`` counts against ``max_entry_bytes`` when ``Offload`` stores it
    without an index text: its payload, its blocks and the source ``"offload"``
    (``protocol.checks.turn_bytes``)."""
    return turn_bytes(message, source=OFFLOAD_SOURCE)


def clamp_message(message: UnifiedMessage, max_bytes: int) -> UnifiedMessage | None:
    """A copy of ``message`` that ``Offload`` can store under a cap of ``max_bytes``
    (:func:`offload_bytes`), or None if its fixed parts (ids, names, tool arguments,
    media types, block overheads) alone are over it.

    Thinking blocks go first and images become a short text, since neither is embedded;
    then the longest text or tool output is cut from the end, and the cut is marked
    ``[...clamped N bytes]``.
    """
    if offload_bytes(message) <= max_bytes:
        return message
    blocks: list[ContentBlock] = []
    for block in message.content:
        if isinstance(block, Thinking):
            continue
        if isinstance(block, ImageBase64):
            blocks.append(Text(text=f"[image omitted: {block.media_type}]"))
        else:
            blocks.append(block)

    def size() -> int:
        return offload_bytes(msgspec.structs.replace(message, content=list(blocks)))

    done: set[int] = set()
    while (excess := size() - max_bytes) > 0:
        fields = [
            (i, b.text if isinstance(b, Text) else b.output)
            for i, b in enumerate(blocks)
            if isinstance(b, Text | ToolResult) and i not in done
        ]
        if not fields:
            return None
        i, text = max(fields, key=lambda f: _utf8_len(f[1]))
        length = _utf8_len(text)
        cut = excess + _utf8_len(_marker(excess))
        while excess + _utf8_len(_marker(cut)) > cut:
            cut = excess + _utf8_len(_marker(cut))
        new_text = "" if cut >= length else _cut_utf8(text, length - cut) + _marker(cut)
        block = blocks[i]
        if isinstance(block, Text):
            blocks[i] = Text(text=new_text)
        else:
            blocks[i] = msgspec.structs.replace(block, output=new_text)
        done.add(i)
    return msgspec.structs.replace(message, content=blocks)


# --- the actor --------------------------------------------------------------------------------


@attrs.define(eq=False)
class CompactionActor:
    """Owns the receive side of its inbox and applies strategies one request at a time.

    A request whose strategies raise an unexpected exception gets that exception as its
    reply; the actor goes on serving the next request.
    """

    config: MemoryConfig
    store: Store
    hub: EventHub
    watch: StoreWatch
    summarizer: Summarizer
    inbox_size: int
    mailbox: Mailbox[Compress, Compressed] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.mailbox = Mailbox.open("compaction", self.inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self._handle, task_status=task_status)

    async def _handle(self, request: Compress) -> Compressed:
        return await self.compress(request.messages, date=request.date)

    async def compress(
        self, messages: list[UnifiedMessage], *, date: str | None = None
    ) -> Compressed:
        """Apply every strategy in order and report what each did; ``date`` dates the
        entries ``Offload`` writes (the current UTC time when None)."""
        current = list(messages)
        before_bytes = prompt_bytes(current)
        actions: list[CompactionAction] = []
        last_error: BaseException | None = None
        budget = self.config.max_prompt_bytes
        for strategy in self.config.strategies:
            name = _STRATEGY_NAMES[type(strategy)]
            if budget is not None and (size := prompt_bytes(current)) <= budget:
                actions.append(
                    Skipped(
                        strategy=name,
                        reason=f"prompt is {size} bytes, within max_prompt_bytes={budget}",
                    )
                )
                continue
            current, new_actions, error = await self._apply(strategy, name, current, date)
            actions.extend(new_actions)
            if error is not None:
                last_error = error
                logger.info("compaction strategy %s failed: %s", name, describe_error(error))
        report = CompressionReport(
            actions=actions,
            before=len(messages),
            after=len(current),
            before_bytes=before_bytes,
            after_bytes=prompt_bytes(current),
            last_error=last_error,
        )
        return Compressed(messages=current, report=report)

    async def _apply(
        self, strategy: Strategy, name: str, messages: list[UnifiedMessage], date: str | None
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        match strategy:
            case Offload():
                return await self._offload(name, messages, strategy, date)
            case Summarize(turns=n):
                return await self._summarize(name, messages, n)
            case DropObservations(keep_last=m):
                return self._drop_observations(name, messages, m)
            case SlidingWindow(max_messages=m):
                return self._sliding_window(name, messages, m)
            case ClampOversizedMessages(max_bytes=b):
                return self._clamp(name, messages, b)
        raise TypeError(f"unknown strategy {strategy!r}")  # pragma: no cover

    async def _offload(
        self, name: str, messages: list[UnifiedMessage], strategy: Offload, date: str | None
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        picked, why = oldest_unprotected(messages, strategy.turns)
        if not picked:
            return messages, [Skipped(strategy=name, reason=why or "")], None
        batch = [messages[i] for i in picked]
        texts: list[str] | None = None  # the turn alone: the store derives its text
        when = offload_time(date)
        if strategy.context or strategy.dated:
            # An ISO date is written as the store writes every date line (format_date),
            # which the time channel reads; a date in another form is written as given.
            line = format_date(when) if when is not None else (date or utc_date())
            texts = entry_texts(
                messages,
                picked,
                context=strategy.context,
                date=line if strategy.dated else None,
                max_entry_bytes=self.store.config.max_entry_bytes,
            )
        # An ISO date is when the turns were said. Without texts, a given time would
        # make the store add its date line to an undated strategy's entries, so then
        # they keep the write time. The batch has no conversation: a prompt's turns
        # reach the store in pieces, across compress calls, with no name that says
        # which conversation they are of.
        occurred_at = when if texts is not None or strategy.dated else None
        try:
            stored = await self.store.store_turns(
                batch,
                namespace=self.config.namespace,
                source=OFFLOAD_SOURCE,
                texts=texts,
                occurred_at=occurred_at,
            )
        except Poisoned:
            raise  # a crashed store is a bug, never a strategy's failure to report
        except VectorStoreError as error:
            # Nothing was removed yet, so every message is still at its original index.
            converted = to_plugin_error(error)
            return messages, [Rejected(strategy=name, error=describe_error(converted))], converted
        self.watch.after_write(stored)
        self.hub.publish(
            TurnsOffloaded(
                at=now(), namespace=self.config.namespace, count=len(batch), ids=stored.ids
            )
        )
        chosen = set(picked)
        kept = [m for i, m in enumerate(messages) if i not in chosen]
        return kept, [Offloaded(strategy=name, indices=picked, ids=stored.ids)], None

    async def _summarize(
        self, name: str, messages: list[UnifiedMessage], n: int
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        picked, why = oldest_unprotected(messages, n)
        if not picked:
            return messages, [Skipped(strategy=name, reason=why or "")], None
        batch = [messages[i] for i in picked]
        try:
            summary = await self._run_summarizer(batch)
        except Exception as error:
            # The summarizer's own exception, unchanged, like an embedder's.
            return messages, [Rejected(strategy=name, error=describe_error(error))], error
        chosen = set(picked)
        kept = [m for i, m in enumerate(messages) if i not in chosen]
        # The summary takes the place of the oldest message it replaces.
        kept.insert(picked[0], summary)
        actions: list[CompactionAction] = []
        stored_id: str | None = None
        error_out: BaseException | None = None
        if self.config.auto_store_compaction:
            try:
                stored = await self.store.store_turns(
                    [summary],
                    namespace=self.config.namespace,
                    source="compaction",
                    metadata={"summarized": len(batch)},
                    ids=[memory_id(projection(summary), "compaction", time.time_ns())],
                )
            except Poisoned:
                raise
            except VectorStoreError as error:
                # The prompt still shrinks; only the stored copy is missing.
                error_out = to_plugin_error(error)
            else:
                self.watch.after_write(stored)
                stored_id = stored.ids[0]
        actions.append(Summarized(strategy=name, indices=picked, stored_id=stored_id))
        if error_out is not None:
            actions.append(Rejected(strategy=name, error=describe_error(error_out)))
        self.hub.publish(
            TurnsSummarized(
                at=now(), namespace=self.config.namespace, count=len(batch), stored_id=stored_id
            )
        )
        return kept, actions, error_out

    async def _run_summarizer(self, batch: list[UnifiedMessage]) -> UnifiedMessage:
        summarizer = self.summarizer
        call = getattr(summarizer, "__call__", summarizer)  # noqa: B004 - callable objects
        result: object
        if inspect.iscoroutinefunction(summarizer) or inspect.iscoroutinefunction(call):
            result = await summarizer(list(batch))  # type: ignore[misc]
        else:
            # A sync summarizer may be a model call: keep it off the trio loop.
            result = await trio.to_thread.run_sync(summarizer, list(batch), abandon_on_cancel=True)
            if inspect.isawaitable(result):
                result = await result
        if isinstance(result, str) and result.strip():
            return UnifiedMessage.system(result)
        if isinstance(result, UnifiedMessage) and result.role == "system":
            return result
        raise TypeError(
            f"summarizer returned {result!r:.80}; expected a non-empty str or a system "
            "UnifiedMessage"
        )

    def _drop_observations(
        self, name: str, messages: list[UnifiedMessage], keep_last: int
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        protected = protected_indices(messages)
        positions = [
            (i, j)
            for i, m in enumerate(messages)
            for j, b in enumerate(m.content)
            if isinstance(b, ToolResult)
        ]
        droppable = positions[: max(len(positions) - keep_last, 0)]
        out = list(messages)
        count = 0
        for i, j in droppable:
            if i in protected:
                continue
            block = out[i].content[j]
            assert isinstance(block, ToolResult)
            if block.output.startswith(DROPPED_OUTPUT_PREFIX):
                continue
            placeholder = f"{DROPPED_OUTPUT_PREFIX} {_utf8_len(block.output)} bytes]"
            content = list(out[i].content)
            content[j] = msgspec.structs.replace(block, output=placeholder)
            out[i] = msgspec.structs.replace(out[i], content=content)
            count += 1
        if not count:
            reason = f"{len(positions)} tool result(s), keep_last={keep_last}; none to drop"
            return messages, [Skipped(strategy=name, reason=reason)], None
        return out, [Dropped(strategy=name, count=count)], None

    def _sliding_window(
        self, name: str, messages: list[UnifiedMessage], max_messages: int
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        if len(messages) <= max_messages:
            reason = f"{len(messages)} message(s), within max_messages={max_messages}"
            return messages, [Skipped(strategy=name, reason=reason)], None
        protected = protected_indices(messages)
        gone: set[int] = set()
        for unit in units(messages):
            if len(messages) - len(gone) <= max_messages:
                break
            if not any(i in protected for i in unit):
                gone.update(unit)
        if not gone:
            return messages, [Skipped(strategy=name, reason="no unprotected messages")], None
        kept = [m for i, m in enumerate(messages) if i not in gone]
        return kept, [Dropped(strategy=name, count=len(gone))], None

    def _clamp(
        self, name: str, messages: list[UnifiedMessage], max_bytes: int
    ) -> tuple[list[UnifiedMessage], list[CompactionAction], BaseException | None]:
        protected = protected_indices(messages)
        out = list(messages)
        count = removed = unclampable = 0
        for i, m in enumerate(messages):
            if i in protected:
                continue
            if offload_bytes(m) <= max_bytes:
                continue
            clamped = clamp_message(m, max_bytes)
            if clamped is None:
                unclampable += 1
                continue
            out[i] = clamped
            count += 1
            removed += payload_bytes(m) - payload_bytes(clamped)
        if not count and not unclampable:
            reason = f"no unprotected message is over max_bytes={max_bytes}"
            return messages, [Skipped(strategy=name, reason=reason)], None
        action = Clamped(
            strategy=name, count=count, bytes_removed=removed, unclampable=unclampable
        )
        return out, [action], None
