"""The recall layer through ``open_memory``: placement, instance ids, the relevance floor, and
retrieval context assembly (dedupe by content, the block budget, provenance), on the
in-memory store and over an ``open_pg_store`` handle."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import msgspec
import pytest
import trio
from pg_support import pg_dsn, pg_table  # noqa: F401

from actors import HashingEmbedder, Memory, open_memory, open_store
from protocol import (
    ConfigError,
    Event,
    MemoryConfig,
    RecallInjection,
    RecallSettings,
    Text,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
    render,
)
from protocol.compaction import Summarize
from protocol.events import RecallInjected, RetrieverCompleted, RetrieverStarted, StoreSearched

DIM = 64
STORE = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=2048)
MemoryFactory = Callable[[MemoryConfig], AbstractAsyncContextManager[Memory]]


@pytest.fixture(params=["memory", "pg"])
def memory_over(request: pytest.FixtureRequest) -> MemoryFactory:
    """A memory over an in-memory store, or over an ``open_pg_store`` handle (its own
    table), both lent to ``open_memory(store=handle)``."""

    if request.param == "memory":

        @asynccontextmanager
        async def in_memory(config: MemoryConfig) -> AsyncIterator[Memory]:
            async with (
                open_store(STORE, HashingEmbedder(DIM)) as handle,
                open_memory(store=handle, memory=config) as memory,
            ):
                yield memory

        return in_memory
    dsn = request.getfixturevalue("pg_dsn")
    table = request.getfixturevalue("pg_table")
    from actors import open_pg_store

    @asynccontextmanager
    async def over_pg(config: MemoryConfig) -> AsyncIterator[Memory]:
        async with (
            open_pg_store(dsn, STORE, HashingEmbedder(DIM), table=table) as handle,
            open_memory(store=handle, memory=config) as memory,  # type: ignore[arg-type]
        ):
            yield memory

    return over_pg


def req(*messages: UnifiedMessage) -> UnifiedRequest:
    return UnifiedRequest(model="m", messages=list(messages))


# --- placement: 2 placements x 4 outcomes, each idempotent ------------------------------------


@pytest.mark.parametrize("with_system", [True, False])
@pytest.mark.parametrize("placement", ["before_user", "system_section"])
async def test_placement_gives_each_of_the_four_outcomes(
    memory_over: MemoryFactory, placement: str, with_system: bool
) -> None:
    config = MemoryConfig(placement=placement, renderer="xml")  # type: ignore[arg-type]
    system = [UnifiedMessage.system("be brief")] if with_system else []
    question = UnifiedMessage.user("what is my cat called?")
    with trio.fail_after(30):
        async with memory_over(config) as memory:
            await memory.remember("my cat is called Miso")
            report = await memory.retrieve("my cat called")
            assert report.turns
            empty = msgspec.structs.replace(report, turns=[])
            # ABSENT: nothing to inject, nothing to remove; the request is unchanged.
            absent = await memory.inject(empty, req(*system, question))
            assert absent.outcome is RecallInjection.ABSENT
            assert absent.request.messages == [*system, question]
            # INSERTED
            inserted = await memory.inject(report, req(*system, question))
            assert inserted.outcome is RecallInjection.INSERTED
            block = render(report, "xml")
            assert block is not None
            got = inserted.request.messages
            if placement == "before_user":
                assert got == [*system, UnifiedMessage.system(block), question]
            elif with_system:
                # A section of the first system message, after what it said.
                assert len(got) == 2
                assert got[0].text() == "be brief\n" + block
                assert got[1] == question
            else:
                assert got == [UnifiedMessage.system(block), question]
            # REPLACED, and idempotent: injecting again gives the same request.
            replaced = await memory.inject(report, inserted.request)
            assert replaced.outcome is RecallInjection.REPLACED
            assert replaced.request == inserted.request
            # REMOVED: the old block goes and the request is as it was.
            removed = await memory.inject(empty, replaced.request)
            assert removed.outcome is RecallInjection.REMOVED
            assert removed.request.messages == [*system, question]


def test_placement_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"MemoryConfig\.placement is 'top'"):
        MemoryConfig(placement="top")  # type: ignore[arg-type]


# --- instance ids ----------------------------------------------------------------------------


def test_instance_id_names_the_default_namespace() -> None:
    assert MemoryConfig().namespace == "memory-default"
    assert MemoryConfig(instance_id="agent-7").namespace == "memory-agent-7"
    # An explicit namespace wins.
    assert MemoryConfig(instance_id="agent-7", namespace="shared").namespace == "shared"
    # The derived namespace survives a round trip through JSON.
    config = MemoryConfig(instance_id="agent-7")
    assert msgspec.json.decode(msgspec.json.encode(config), type=MemoryConfig) == config


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "new\nline", 7, b"id"])
def test_instance_id_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"MemoryConfig\.instance_id is"):
        MemoryConfig(instance_id=bad)  # type: ignore[arg-type]


async def test_two_instances_on_one_store_are_isolated(memory_over: MemoryFactory) -> None:
    with trio.fail_after(30):
        async with memory_over(MemoryConfig(instance_id="alice")) as alice:
            await alice.remember("alice parks on level three")
            others = await alice.store.retrieve_in("memory-bob", "parks level three", 5)
            assert others.turns == []
            mine = await alice.store.retrieve_in("memory-alice", "parks level three", 5)
            assert [t.message.text() for t in mine.turns] == ["alice parks on level three"]


# --- the relevance floor ---------------------------------------------------------------------


async def test_no_hit_scoring_zero_is_injected_by_default(memory_over: MemoryFactory) -> None:
    config = MemoryConfig(renderer="xml")
    with trio.fail_after(30):
        async with memory_over(config) as memory:
            await memory.remember("the boiler manual is in the red folder")
            # No word in common: the HashingEmbedder's cosine is 0.0.
            unfiltered = await memory.retrieve("quantum zebra", min_similarity=-1.0)
            assert [t.score for t in unfiltered.turns] == [0.0]
            turned = await memory.turn(req(UnifiedMessage.user("quantum zebra")))
            assert turned.report.recall is not None
            assert turned.report.recall.turns == []
            assert turned.report.injection is RecallInjection.ABSENT


# --- context assembly ------------------------------------------------------------------------


async def test_the_same_content_is_injected_once_at_its_best_rank(
    memory_over: MemoryFactory,
) -> None:
    with trio.fail_after(30):
        async with memory_over(MemoryConfig(min_similarity=None)) as memory:
            first = await memory.remember("the spare key is under the pot")
            await memory.remember("a key ring is on the hook")
            second = await memory.remember("the spare key is under the pot", source="user")
            assert memory.usage().entries == 3
            report = await memory.retrieve("spare key pot", k=5)
            texts = [t.message.text() for t in report.turns]
            assert texts == ["the spare key is under the pot", "a key ring is on the hook"]
            assert report.turns[0].id in {first, second}


async def test_max_block_bytes_drops_the_lowest_ranked_whole_items(
    memory_over: MemoryFactory,
) -> None:
    facts = [f"the {w} key opens door {w}" for w in ("red", "green", "blue", "white")]
    config = MemoryConfig(renderer="xml", top_k=4, min_similarity=None)
    with trio.fail_after(30):
        async with memory_over(config) as memory:
            for fact in facts:
                await memory.remember(fact)
            report = await memory.retrieve("which key opens the red door")
            assert len(report.turns) == 4
            two = render(msgspec.structs.replace(report, turns=report.turns[:2]), "xml")
            assert two is not None
            budget = len(two.encode())
    # Its own namespace: over pg the table (and the first memory's entries) persists.
    budgeted = MemoryConfig(
        instance_id="budgeted",
        renderer="xml",
        top_k=4,
        min_similarity=None,
        recall=RecallSettings(max_block_bytes=budget),
    )
    with trio.fail_after(30):
        async with memory_over(budgeted) as memory:
            for fact in facts:
                await memory.remember(fact)
            async with memory.events() as events:
                turned = await memory.turn(
                    req(UnifiedMessage.user("which key opens the red door"))
                )
                block = turned.request.messages[0].text()
                # Exactly the two best items, whole: the block is what the budget allows.
                assert block == two
                assert len(block.encode()) <= budget
                event = None
                async for seen in events:
                    if isinstance(seen, RecallInjected):
                        event = seen
                        break
            assert event is not None
            assert turned.report.recall is not None
            best = turned.report.recall.turns[:2]
            assert [(i.id, i.source, i.score) for i in event.injected] == [
                (t.id, t.source, t.score) for t in best
            ]
            assert event.items == 2
            assert event.dropped == 2


async def test_a_budget_below_the_best_item_injects_nothing() -> None:
    config = MemoryConfig(min_similarity=None, recall=RecallSettings(max_block_bytes=10))
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            await memory.remember("the spare key is under the pot")
            turned = await memory.turn(req(UnifiedMessage.user("spare key")))
            assert turned.report.injection is RecallInjection.ABSENT
            assert turned.request.messages == [UnifiedMessage.user("spare key")]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_max_block_bytes_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"RecallSettings\.max_block_bytes is"):
        RecallSettings(max_block_bytes=bad)  # type: ignore[arg-type]


async def test_summaries_and_inputs_get_16_hex_ids(memory_over: MemoryFactory) -> None:
    config = MemoryConfig(
        strategies=[Summarize(turns=2)], auto_store_user_input=True, min_similarity=None
    )
    history = [UnifiedMessage.user("one fact"), UnifiedMessage.assistant("noted")]
    with trio.fail_after(30):
        async with memory_over(config) as memory:
            turned = await memory.turn(req(*history, UnifiedMessage.user("recall it")))
            summarized = turned.report.compression.actions[0]
            stored_id = getattr(summarized, "stored_id", None)
            assert stored_id is not None and re.fullmatch("[0-9a-f]{16}", stored_id)
            report = await memory.retrieve("one fact noted recall it", k=5)
            assert {t.source for t in report.turns} == {"compaction", "user"}
            assert all(re.fullmatch("[0-9a-f]{16}", t.id) for t in report.turns)


async def test_a_turn_with_a_system_section_reaches_the_dispatcher() -> None:
    config = MemoryConfig(placement="system_section", renderer="xml")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            await memory.remember("my cat is called Miso")
            system = UnifiedMessage.system("be brief")
            turned = await memory.turn(req(system, UnifiedMessage.user("my cat is called?")))
            assert turned.report.injection is RecallInjection.INSERTED
            assert turned.request.messages[0].text().startswith("be brief\n<recalled_memory>")
            # The echo dispatcher read the section as the model would.
            assert "Recalled 1 item(s)" in turned.reply.text()
            again = await memory.turn(
                msgspec.structs.replace(
                    turned.request, messages=[*turned.request.messages, turned.reply]
                )
            )
            assert again.report.injection is RecallInjection.REPLACED
            assert again.request.messages[0].text().count("<recalled_memory>") == 1


# --- seed 001: section_priority, the block's position among the system sections ---------------


def system_of(*sections: str) -> UnifiedMessage:
    """A system message of several sections (content blocks), as a prompt builder makes."""
    return UnifiedMessage(role="system", content=[Text(text=t) for t in sections])


@pytest.mark.parametrize(
    ("priority", "position"), [(0, 0), (1, 1), (2, 2), (3, 3), (45, 3), (None, 3)]
)
async def test_section_priority_places_the_block_among_the_system_sections(
    memory_over: MemoryFactory, priority: int | None, position: int
) -> None:
    config = MemoryConfig(placement="system_section", section_priority=priority, renderer="xml")
    sections = ["# Identity\nYou are Ada.", "# Tools\nnone", "# Rules\nbe brief"]
    question = UnifiedMessage.user("what is my cat called?")
    with trio.fail_after(30):
        async with memory_over(config) as memory:
            await memory.remember("my cat is called Miso")
            report = await memory.retrieve("my cat called")
            block = render(report, "xml")
            assert block is not None
            inserted = await memory.inject(report, req(system_of(*sections), question))
            assert inserted.outcome is RecallInjection.INSERTED
            expected = list(sections)
            expected.insert(position, block)
            assert inserted.request.messages == [system_of(*expected), question]
            # Re-injecting a new report (the next turn) replaces the block where it was.
            fewer = msgspec.structs.replace(report, turns=report.turns[:1])
            replaced = await memory.inject(fewer, inserted.request)
            assert replaced.outcome is RecallInjection.REPLACED
            fewer_block = render(fewer, "xml")
            assert fewer_block is not None
            again = list(sections)
            again.insert(position, fewer_block)
            assert replaced.request.messages == [system_of(*again), question]
            # And a whole turn, twice, keeps one block at that position.
            turned = await memory.turn(req(system_of(*sections), question))
            follow = msgspec.structs.replace(
                turned.request, messages=[*turned.request.messages, turned.reply, question]
            )
            second = await memory.turn(follow)
            assert second.report.injection is RecallInjection.REPLACED
            content = second.request.messages[0].content
            texts = [b.text for b in content if isinstance(b, Text)]
            assert len(texts) == 4
            assert texts[position].startswith("<recalled_memory>")
            assert [t for i, t in enumerate(texts) if i != position] == sections


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"placement": "system_section", "section_priority": -1}, "section_priority is -1"),
        ({"placement": "system_section", "section_priority": 1.5}, "section_priority is 1.5"),
        ({"placement": "system_section", "section_priority": True}, "section_priority is True"),
        ({"section_priority": 2}, "needs placement='system_section'"),
    ],
)
def test_section_priority_is_validated(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MemoryConfig(**kwargs)  # type: ignore[arg-type]


async def test_a_retrieve_is_one_named_run_on_either_backend(memory_over: MemoryFactory) -> None:
    config = MemoryConfig(retriever_name="agent-7 recall")
    with trio.fail_after(30):
        async with memory_over(config) as memory, memory.events() as events:
            await memory.remember("my cat is called Miso")
            await memory.retrieve("my cat called")
            await memory.retrieve("my cat called")
            backend = memory.store.backend
            got: list[Event] = []
            while True:
                try:
                    got.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
    started = [e for e in got if isinstance(e, RetrieverStarted)]
    completed = [e for e in got if isinstance(e, RetrieverCompleted)]
    assert [e.retriever for e in started + completed] == ["agent-7 recall"] * 4
    assert [e.run_id for e in started] == [e.run_id for e in completed]
    assert len({e.run_id for e in started}) == 2
    # The store read of each run carries its run id and name. (pg sends its read events
    # to open_pg_store's own on_event sink, not to the memory's stream.)
    searched = [e for e in got if isinstance(e, StoreSearched)]
    if backend == "memory":
        assert [e.run_id for e in searched] == [e.run_id for e in started]
        assert [e.retriever for e in searched] == ["agent-7 recall"] * 2
    else:
        assert searched == []
