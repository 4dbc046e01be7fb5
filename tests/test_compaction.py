"""The compaction actor: every strategy, protection, tool pairs, rejection and its errors."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from actors import HashingEmbedder, Memory, open_memory
from actors._agent.compaction import (
    CONTEXT_CHARS,
    DROPPED_OUTPUT_PREFIX,
    clamp_message,
    entry_texts,
    offload_bytes,
    oldest_unprotected,
    protected_indices,
    units,
    utc_date,
)
from actors.testing import inject_crash
from protocol import (
    ConfigError,
    ImageBase64,
    MemoryConfig,
    Poisoned,
    RecallSettings,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    VectorStoreConfig,
    payload_bytes,
    projection,
)
from protocol._memory import contextual_entry
from protocol.compaction import (
    Clamped,
    ClampOversizedMessages,
    DropObservations,
    Dropped,
    Offload,
    Offloaded,
    PluginInternalError,
    PluginValidationError,
    Rejected,
    Skipped,
    SlidingWindow,
    Summarize,
    Summarized,
)

DIM = 64
NS = "memory-default"
REAL_UTC_DATE = utc_date


def call(cid: str, name: str = "lookup") -> UnifiedMessage:
    return UnifiedMessage.assistant(tool_calls=[ToolCall(id=cid, name=name, arguments={"q": cid})])


def history() -> list[UnifiedMessage]:
    return [
        UnifiedMessage.system("system prompt"),  # 0 protected
        UnifiedMessage.user("first question about cats"),  # 1
        UnifiedMessage.assistant("cats are great"),  # 2
        call("c1"),  # 3 \ one unit
        UnifiedMessage.tool_result("c1", "tool output one"),  # 4 /
        UnifiedMessage.assistant("done with the tool"),  # 5
        UnifiedMessage.user("the newest question"),  # 6 protected
    ]


@asynccontextmanager
async def memory_with(
    *strategies: Any,
    embedder: object | None = None,
    max_entry_bytes: int = 4096,
    **config: Any,
) -> AsyncIterator[Memory]:
    store = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=max_entry_bytes)
    summarizer = config.pop("summarizer", None)
    memory = MemoryConfig(strategies=list(strategies), **config)
    async with open_memory(
        store=store,
        memory=memory,
        embedder=embedder or HashingEmbedder(DIM),
        summarizer=summarizer,
    ) as m:
        yield m


async def stored_sources(memory: Memory) -> list[tuple[str, str]]:
    report = await memory.store.retrieve_in(NS, "anything", k=32)
    return sorted((h.source, h.message.text() or h.message.role) for h in report.turns)


# --- offload ----------------------------------------------------------------------------------


async def stored_texts(memory: Memory, ids: Sequence[str]) -> list[str]:
    return [d.text for d in await memory.store.get_by_ids(list(ids), namespace=NS)]


async def test_offload_indexes_each_turn_with_its_date_and_the_turn_before() -> None:
    messages = history()
    with trio.fail_after(10):
        async with memory_with(Offload(turns=5)) as memory:
            out = await memory.compress(messages, date="9 June 2025")
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            texts = await stored_texts(memory, action.ids)
            report = await memory.store.retrieve_in(NS, "cats", k=32)
    # The system prompt is never context; the first turn has none before it.
    before = [None, 1, 2, 3, 4]
    assert texts == [
        contextual_entry(
            projection(messages[i]),
            context=[] if b is None else [projection(messages[b])],
            date="9 June 2025",
        )
        for i, b in zip(action.indices, before, strict=True)
    ]
    assert texts[1] == "cats are great\nDate: 9 June 2025\nBefore: first question about cats"
    # The messages themselves come back unchanged.
    by_id = {t.id: t.message for t in report.turns}
    assert [by_id[i] for i in action.ids] == [messages[i] for i in action.indices]


async def test_offload_without_context_or_date_indexes_the_turn_alone() -> None:
    messages = history()
    with trio.fail_after(10):
        async with memory_with(Offload(turns=2, context=0, dated=False)) as memory:
            out = await memory.compress(messages, date="ignored")
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            texts = await stored_texts(memory, action.ids)
    assert texts == [projection(messages[i]) for i in action.indices]
    # The turn alone is not stored twice, so a turn over half the cap keeps its whole
    # text (a separate index text would count again towards max_entry_bytes).
    long = UnifiedMessage.user("z" * 700)
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=1, context=0, dated=False), max_entry_bytes=1000
        ) as memory:
            out = await memory.compress([long, UnifiedMessage.user("newest")])
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            assert await stored_texts(memory, action.ids) == ["z" * 700]


async def test_offload_dates_with_the_current_utc_time_by_default(
    fixed_offload_date: str,
) -> None:
    # The suite fixes the clock (conftest.py); REAL_UTC_DATE is the real one, bound
    # when this module was imported.
    with trio.fail_after(10):
        async with memory_with(Offload(turns=1, context=0)) as memory:
            out = await memory.compress(history())
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            (text,) = await stored_texts(memory, action.ids)
    assert text == f"first question about cats\nDate: {fixed_offload_date}"
    year = time.gmtime().tm_year
    pattern = rf"\d\d \w+ ({year}|{year + 1}), \d\d:\d\d UTC"
    assert re.fullmatch(pattern, REAL_UTC_DATE()), REAL_UTC_DATE()


async def test_offload_cuts_long_context_and_keeps_each_entry_within_the_cap() -> None:
    long = UnifiedMessage.user("x" * 3000)
    big = UnifiedMessage.assistant("y" * 900)
    messages = [long, big, UnifiedMessage.user("newest")]
    with trio.fail_after(10):
        async with memory_with(Offload(turns=2), max_entry_bytes=1200) as memory:
            out = await memory.compress(messages, date="today")
            # The 3000-byte message itself is over the cap: the store refuses the
            # batch, and nothing moves.
            (action,) = out.report.actions
            assert isinstance(action, Rejected)
            assert out.messages == messages
        async with memory_with(Offload(turns=1), max_entry_bytes=1200) as memory:
            out = await memory.compress(messages[1:], date="today")
            assert isinstance(out.report.actions[0], Offloaded)
        async with memory_with(Offload(turns=1), max_entry_bytes=4096) as memory:
            out = await memory.compress([long, *messages[1:]], date="today")
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
    texts = entry_texts(
        [long, big], [1], context=1, date="today", max_entry_bytes=payload_bytes(big) + 950
    )
    # The context is cut to CONTEXT_CHARS, then the whole text to the entry's budget
    # (950 bytes, less the source "offload" that the entry counts too).
    full = contextual_entry(
        projection(big), context=[projection(long)[:CONTEXT_CHARS]], date="today"
    )
    assert texts == [full[:943]]
    assert len(texts[0].encode()) + payload_bytes(big) <= payload_bytes(big) + 950


async def test_offload_and_compress_validate_their_arguments() -> None:
    with pytest.raises(ConfigError, match=r"Offload\.context is -1"):
        Offload(turns=1, context=-1)
    with pytest.raises(ConfigError, match=r"Offload\.dated is 'yes'"):
        Offload(turns=1, dated="yes")  # type: ignore[arg-type]
    with trio.fail_after(10):
        async with memory_with(Offload(turns=1)) as memory:
            with pytest.raises(ConfigError, match="date is a int"):
                await memory.compress(history(), date=5)  # type: ignore[arg-type]
            assert memory.store.is_empty()


async def test_offload_moves_the_oldest_unprotected_messages() -> None:
    with trio.fail_after(10):
        async with memory_with(Offload(turns=2)) as memory:
            out = await memory.compress(history())
            assert out.messages == [history()[i] for i in (0, 3, 4, 5, 6)]
            (action,) = out.report.actions
            assert isinstance(action, Offloaded)
            assert action.indices == [1, 2]
            assert len(action.ids) == 2
            assert (out.report.before, out.report.after) == (7, 5)
            assert out.report.last_error is None
            assert len(memory.store) == 2
            sources = await stored_sources(memory)
            assert sources == [
                ("offload", "cats are great"),
                ("offload", "first question about cats"),
            ]


async def test_offload_never_splits_a_tool_call_from_its_result() -> None:
    with trio.fail_after(10):
        async with memory_with(Offload(turns=3)) as memory:
            # 1, 2 fit; the pair 3+4 would make 4 > 3, so offload stops there.
            out = await memory.compress(history())
            assert out.report.actions[0] == Offloaded(
                strategy="offload", indices=[1, 2], ids=out.report.actions[0].ids
            )
        async with memory_with(Offload(turns=4)) as memory:
            out = await memory.compress(history())
            assert [m.role for m in out.messages] == ["system", "assistant", "user"]
            action = out.report.actions[0]
            assert isinstance(action, Offloaded)
            assert action.indices == [1, 2, 3, 4]


async def test_offload_skips_when_the_oldest_unit_is_bigger_than_turns() -> None:
    messages = [UnifiedMessage.system("s"), call("a"), UnifiedMessage.tool_result("a", "x")]
    messages.append(UnifiedMessage.user("q"))
    with trio.fail_after(10):
        async with memory_with(Offload(turns=1)) as memory:
            out = await memory.compress(messages)
            assert out.messages == messages
            (action,) = out.report.actions
            assert isinstance(action, Skipped)
            assert "2 messages" in action.reason
            assert memory.store.is_empty()


async def test_protected_messages_stay_with_everything_else_gone() -> None:
    with trio.fail_after(10):
        async with memory_with(Offload(turns=100)) as memory:
            out = await memory.compress(history())
            assert out.messages == [history()[0], history()[6]]
            again = await memory.compress(out.messages)
            assert again.messages == out.messages
            assert isinstance(again.report.actions[0], Skipped)


class Wrong:
    """An embedder whose vectors have the wrong width."""

    dimensions = None

    def embed(self, text: str) -> list[float]:
        return [1.0] * (DIM + 1)


class Boom(Exception):
    pass


class Failing:
    def __init__(self) -> None:
        self.error = Boom("embedder is down")

    def embed(self, text: str) -> list[float]:
        raise self.error


async def check_rejected(memory: Memory) -> BaseException:
    messages = history()
    out = await memory.compress(messages)
    rejected, window = out.report.actions
    assert isinstance(rejected, Rejected)
    assert rejected.strategy == "offload"
    # The next strategy still ran, on all 7 messages: had the offload removed its two,
    # the window would have had only 2 to drop, not 4.
    assert window == Dropped(strategy="sliding_window", count=4)
    assert out.messages == [messages[i] for i in (0, 5, 6)]
    error = out.report.last_error
    assert error is not None
    assert rejected.error.startswith(type(error).__name__)
    return error


async def test_rejected_offload_entry_too_large_is_a_validation_error() -> None:
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=2), SlidingWindow(max_messages=4), max_entry_bytes=8
        ) as memory:
            error = await check_rejected(memory)
            assert isinstance(error, PluginValidationError)
            assert error.schema == "vector-store"
            assert "payload bytes" in error.message
            assert memory.store.is_empty()


async def test_rejected_offload_every_message_back_at_its_index() -> None:
    with trio.fail_after(10):
        async with memory_with(Offload(turns=4), max_entry_bytes=8) as memory:
            messages = history()
            out = await memory.compress(messages)
            assert out.messages == messages
            assert out.report.after == out.report.before == 7


async def test_rejected_offload_embedding_error_is_a_validation_error() -> None:
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=2), SlidingWindow(max_messages=4), embedder=Wrong()
        ) as memory:
            error = await check_rejected(memory)
            assert isinstance(error, PluginValidationError)
            assert error.schema == "vector-store"
            assert f"this store takes {DIM}" in error.message


async def test_rejected_offload_embedder_error_is_the_embedders_own_exception() -> None:
    failing = Failing()
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=2), SlidingWindow(max_messages=4), embedder=failing
        ) as memory:
            error = await check_rejected(memory)
            assert error is failing.error


async def test_rejected_offload_poisoned_is_an_internal_error() -> None:
    with trio.fail_after(10), pytest.raises(Poisoned):
        async with memory_with(Offload(turns=2), SlidingWindow(max_messages=4)) as memory:
            inject_crash(memory.store)
            error = await check_rejected(memory)
            assert isinstance(error, PluginInternalError)
            assert "Poisoned" in error.message


# --- clamp ------------------------------------------------------------------------------------


async def test_clamp_then_offload_succeeds_where_offload_alone_fails() -> None:
    big = UnifiedMessage.user("word " * 400)
    messages = [UnifiedMessage.system("s"), big, UnifiedMessage.user("q")]
    with trio.fail_after(10):
        async with memory_with(Offload(turns=1), max_entry_bytes=256) as memory:
            out = await memory.compress(messages)
            assert isinstance(out.report.actions[0], Rejected)
            assert out.messages == messages
        async with memory_with(
            ClampOversizedMessages(max_bytes=256), Offload(turns=1), max_entry_bytes=256
        ) as memory:
            out = await memory.compress(messages)
            clamped, offloaded = out.report.actions
            assert isinstance(clamped, Clamped)
            assert clamped.count == 1
            assert isinstance(offloaded, Offloaded)
            assert out.report.last_error is None
            assert out.messages == [messages[0], messages[2]]
            (hit,) = (await memory.store.retrieve_in(NS, "word", k=5)).turns
            assert payload_bytes(hit.message) <= 256
            assert clamped.bytes_removed == payload_bytes(big) - payload_bytes(hit.message)
            assert "[...clamped" in hit.message.text()


def test_clamp_message_cuts_multibyte_text_to_the_cap() -> None:
    message = UnifiedMessage.user("é" * 300 + "end")
    for cap in (40, 41, 42, 100, 599):
        out = clamp_message(message, cap)
        assert out is not None
        assert payload_bytes(out) <= cap
        assert out.text().endswith("bytes]")
        assert out.text().startswith("é")


def test_clamp_message_drops_thinking_and_images_first() -> None:
    message = UnifiedMessage(
        role="assistant",
        content=[
            Thinking(text="t" * 500),
            ImageBase64(media_type="image/png", data="A" * 500),
            Text(text="keep me"),
        ],
    )
    # What is left counts 33 text bytes, 64 for its second block and 7 for "offload".
    out = clamp_message(message, 104)
    assert out is not None
    assert out.content == [Text(text="[image omitted: image/png]"), Text(text="keep me")]
    assert offload_bytes(out) == 104


def test_clamp_message_gives_up_on_fixed_parts() -> None:
    message = call("x" * 100)
    assert clamp_message(message, 50) is None
    assert clamp_message(message, 10_000) is message


async def test_clamp_reports_unclampable_and_skips_protected() -> None:
    huge_user = UnifiedMessage.user("u" * 500)
    messages = [UnifiedMessage.system("s" * 500), call("y" * 200), huge_user]
    with trio.fail_after(10):
        async with memory_with(ClampOversizedMessages(max_bytes=50)) as memory:
            out = await memory.compress(messages)
            assert out.messages == messages
            assert out.report.actions == [
                Clamped(strategy="clamp", count=0, bytes_removed=0, unclampable=1)
            ]


# --- summarize --------------------------------------------------------------------------------


async def test_summarize_with_a_sync_summarizer_stores_the_summary() -> None:
    seen: list[list[UnifiedMessage]] = []

    def summarizer(batch: list[UnifiedMessage]) -> str:
        seen.append(batch)
        return f"summary of {len(batch)}"

    with trio.fail_after(10):
        async with memory_with(Summarize(turns=2), summarizer=summarizer) as memory:
            out = await memory.compress(history())
            assert seen == [history()[1:3]]
            assert out.messages[1] == UnifiedMessage.system("summary of 2")
            assert out.messages[0] == history()[0]
            assert out.messages[2:] == history()[3:]
            (action,) = out.report.actions
            assert isinstance(action, Summarized)
            assert action.indices == [1, 2]
            assert action.stored_id is not None
            assert await stored_sources(memory) == [("compaction", "summary of 2")]


async def test_summarize_with_an_async_summarizer_and_no_auto_store() -> None:
    async def summarizer(batch: list[UnifiedMessage]) -> UnifiedMessage:
        await trio.lowlevel.checkpoint()
        return UnifiedMessage.system("async summary")

    with trio.fail_after(10):
        async with memory_with(
            Summarize(turns=4), summarizer=summarizer, auto_store_compaction=False
        ) as memory:
            out = await memory.compress(history())
            assert [m.text() for m in out.messages] == [
                "system prompt",
                "async summary",
                "done with the tool",
                "the newest question",
            ]
            action = out.report.actions[0]
            assert isinstance(action, Summarized)
            assert action.stored_id is None
            assert memory.store.is_empty()


@pytest.mark.parametrize("result", [None, "", "   ", 3, UnifiedMessage.user("not system")])
async def test_a_bad_or_failing_summarizer_changes_nothing(result: object) -> None:
    def summarizer(batch: list[UnifiedMessage]) -> object:
        return result

    with trio.fail_after(10):
        async with memory_with(Summarize(turns=2), summarizer=summarizer) as memory:
            out = await memory.compress(history())
            assert out.messages == history()
            assert isinstance(out.report.actions[0], Rejected)
            assert isinstance(out.report.last_error, TypeError)
            assert "summarizer returned" in str(out.report.last_error)


async def test_the_summarizers_exception_is_kept_unchanged() -> None:
    error = Boom("model down")

    async def summarizer(batch: list[UnifiedMessage]) -> str:
        raise error

    with trio.fail_after(10):
        async with memory_with(Summarize(turns=2), summarizer=summarizer) as memory:
            out = await memory.compress(history())
            assert out.report.last_error is error
            assert out.messages == history()


async def test_the_default_summarizer_is_extractive() -> None:
    with trio.fail_after(10):
        async with memory_with(Summarize(turns=2)) as memory:
            out = await memory.compress(history())
            assert out.messages[1].text() == (
                "Summary of 2 earlier message(s):\n"
                "- user: first question about cats\n"
                "- assistant: cats are great"
            )


async def test_a_summary_that_cannot_be_stored_still_shrinks_the_prompt() -> None:
    with trio.fail_after(10):
        async with memory_with(
            Summarize(turns=2), max_entry_bytes=10, summarizer=lambda b: "a long summary text"
        ) as memory:
            out = await memory.compress(history())
            summarized, rejected = out.report.actions
            assert isinstance(summarized, Summarized)
            assert summarized.stored_id is None
            assert isinstance(rejected, Rejected)
            assert isinstance(out.report.last_error, PluginValidationError)
            assert len(out.messages) == 6


# --- drop observations, sliding window, budget -------------------------------------------------


def tools(n: int) -> list[UnifiedMessage]:
    out = [UnifiedMessage.system("s")]
    for i in range(n):
        out += [call(f"c{i}"), UnifiedMessage.tool_result(f"c{i}", f"output number {i}")]
    return [*out, UnifiedMessage.user("q")]


async def test_drop_observations_keeps_the_last_m_outputs() -> None:
    with trio.fail_after(10):
        async with memory_with(DropObservations(keep_last=1)) as memory:
            out = await memory.compress(tools(3))
            outputs = [
                b.output for m in out.messages for b in m.content if isinstance(b, ToolResult)
            ]
            assert outputs == [
                f"{DROPPED_OUTPUT_PREFIX} 15 bytes]",
                f"{DROPPED_OUTPUT_PREFIX} 15 bytes]",
                "output number 2",
            ]
            assert out.report.actions == [Dropped(strategy="drop_observations", count=2)]
            # Tool calls and ids are untouched, so the pairs still match.
            assert [m.tool_call_id for m in out.messages] == [m.tool_call_id for m in tools(3)]
            again = await memory.compress(out.messages)
            assert again.messages == out.messages
            assert isinstance(again.report.actions[0], Skipped)


async def test_sliding_window_drops_whole_units_and_keeps_protected() -> None:
    with trio.fail_after(10):
        async with memory_with(SlidingWindow(max_messages=4)) as memory:
            out = await memory.compress(tools(3))  # 8 messages
            assert out.messages == [tools(3)[0], *tools(3)[5:]]
            assert out.report.actions == [Dropped(strategy="sliding_window", count=4)]
        async with memory_with(SlidingWindow(max_messages=1)) as memory:
            out = await memory.compress(tools(2))
            assert out.messages == [tools(2)[0], tools(2)[-1]]
            out = await memory.compress(out.messages)
            assert isinstance(out.report.actions[0], Skipped)


async def test_strategies_run_only_while_over_max_prompt_bytes() -> None:
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=2), Offload(turns=2), Offload(turns=2), max_prompt_bytes=80
        ) as memory:
            messages = history()
            out = await memory.compress(messages)
            kinds = [type(a).__name__ for a in out.report.actions]
            assert kinds == ["Offloaded", "Offloaded", "Skipped"]
            assert out.report.after_bytes <= 80 < out.report.before_bytes


async def test_compress_validates_and_never_changes_the_callers_list() -> None:
    from protocol import ConfigError

    with trio.fail_after(10):
        async with memory_with(Offload(turns=2)) as memory:
            with pytest.raises(ConfigError, match="messages is a str"):
                await memory.compress("hello")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match=r"messages\[1\] is a dict"):
                await memory.compress([UnifiedMessage.user("a"), {}])  # type: ignore[list-item]
            messages = history()
            snapshot = msgspec.msgpack.encode(messages)
            await memory.compress(messages)
            assert msgspec.msgpack.encode(messages) == snapshot


async def test_concurrent_compress_calls_through_a_small_inbox() -> None:
    results: list[int] = []

    async def one(memory: Memory) -> None:
        out = await memory.compress(history())
        results.append(len(out.messages))

    with trio.fail_after(20):
        store = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)
        async with open_memory(
            store=store, memory=MemoryConfig(strategies=[Offload(turns=2)]), inbox_size=1
        ) as memory:
            assert memory.statistics().inbox_size == 1
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(one, memory)
            assert results == [5] * 8
            assert len(memory.store) == 16


# --- properties of the pure helpers -------------------------------------------------------------


def _message(kind: int, i: int) -> list[UnifiedMessage]:
    if kind == 0:
        return [UnifiedMessage.user(f"u{i}")]
    if kind == 1:
        return [UnifiedMessage.assistant(f"a{i}")]
    if kind == 2:
        return [UnifiedMessage.system(f"s{i}")]
    return [call(f"c{i}"), UnifiedMessage.tool_result(f"c{i}", f"o{i}")]


def _pairs_intact(messages: Sequence[UnifiedMessage]) -> bool:
    calls = {c.id for m in messages for c in m.tool_calls()}
    results = {m.tool_call_id for m in messages if m.role == "tool"}
    return calls == results


@given(st.lists(st.integers(0, 3), max_size=14), st.integers(1, 10))
def test_oldest_unprotected_takes_whole_units_and_no_protected(kinds: list[int], n: int) -> None:
    messages = [m for i, k in enumerate(kinds) for m in _message(k, i)]
    protected = protected_indices(messages)
    picked, _ = oldest_unprotected(messages, n)
    assert len(picked) <= n
    assert not set(picked) & protected
    rest = [m for i, m in enumerate(messages) if i not in set(picked)]
    assert _pairs_intact(rest)
    assert sorted(i for u in units(messages) for i in u) == list(range(len(messages)))
    first_system = next((i for i, m in enumerate(messages) if m.role == "system"), None)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    assert first_system is None or first_system in protected
    assert last_user is None or last_user in protected


@given(st.text(max_size=300), st.integers(30, 400))
def test_clamp_property(text: str, cap: int) -> None:
    message = UnifiedMessage.user(text)
    out = clamp_message(message, cap)
    assert out is not None
    assert offload_bytes(out) <= cap
    if offload_bytes(message) <= cap:
        assert out is message


async def test_offload_never_cuts_the_turns_own_text() -> None:
    # A 79-byte turn under a 100-byte cap was indexed as its first bytes, and
    # a word at its end could no longer be found.
    turn = UnifiedMessage.assistant(
        "the spare key for the blue shed is taped under the third step now near zanzibar"
    )
    assert payload_bytes(turn) == 79
    prompt = [UnifiedMessage.user("where is the key?"), turn, UnifiedMessage.user("newest")]
    texts = entry_texts(prompt, [1], context=1, date="today", max_entry_bytes=100)
    assert texts is None  # the turn cannot hold its text twice: indexed by itself
    with trio.fail_after(10):
        async with memory_with(
            Offload(turns=2),
            max_entry_bytes=100,
            min_similarity=0.01,
            recall=RecallSettings(search="dense"),
        ) as memory:
            out = await memory.compress(prompt, date="today")
            assert isinstance(out.report.actions[0], Offloaded)
            report = await memory.retrieve("zanzibar")
            assert [t.message for t in report.turns] == [turn]
    # With room for the context, only the context is cut, never the turn.
    short = UnifiedMessage.assistant("a key near zanzibar")
    texts = entry_texts(
        [UnifiedMessage.user("q " * 100), short], [1], context=1, date="today", max_entry_bytes=60
    )
    assert texts is not None
    assert texts[0].startswith(projection(short))
    assert len(texts[0].encode()) + payload_bytes(short) + len(b"offload") <= 60
