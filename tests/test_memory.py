"""open_memory and Memory: the four stages, turn, remember, best-effort recall, lifecycle."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import msgspec
import numpy as np
import pytest
import trio
from memory_support import conversation

from actors import EchoDispatcher, HashingEmbedder, Memory, open_memory
from actors.testing import inject_crash
from protocol import (
    RECALL_MARKER,
    ConfigError,
    EmbedderError,
    JsonError,
    MemoryConfig,
    Poisoned,
    RecallInjection,
    RetrievalReport,
    ToolCall,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
    digest_request,
)
from protocol.compaction import Offload, Offloaded

DIM = 64
STORE = VectorStoreConfig(max_entries=16, dimensions=DIM, max_entry_bytes=2048)


class QueryFails:
    """Embeds documents, fails on the one query text it is told to fail on."""

    dimensions = DIM

    def __init__(self) -> None:
        self.inner = HashingEmbedder(DIM)
        self.fail_on: str | None = None

    def embed(self, text: str) -> object:
        if text == self.fail_on:
            raise OSError("embedding service unreachable")
        return self.inner.embed(text)

    def embed_batch(self, texts: Sequence[str]) -> object:
        return self.inner.embed_batch(texts)


async def test_turn_runs_all_four_stages() -> None:
    config = MemoryConfig(strategies=[Offload(turns=4)], top_k=2)
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            turned = await memory.turn(conversation("what is my cat called"))
            report = turned.report
            assert report.compression.before == 6
            assert report.compression.after == 2
            assert report.recall is not None
            assert report.recall.scanned == 4
            assert len(report.recall.turns) == 2
            assert report.recall.turns[0].message.text() == "my cat is called Miso"
            assert report.recall_error is None
            assert report.injection is RecallInjection.INSERTED
            assert report.digest == digest_request(turned.request)
            assert set(report.timings) == {"compress", "retrieve", "inject", "dispatch"}
            assert all(t >= 0 for t in report.timings.values())
            roles = [m.role for m in turned.request.messages]
            assert roles == ["system", "system", "user"]
            assert turned.request.messages[1].text().startswith(RECALL_MARKER)
            assert turned.reply.text().startswith("[echo] I read 3 message(s). Recalled 2 item(s)")

            # The second turn reuses the dispatched request: the old block is replaced.
            follow = msgspec.structs.replace(
                turned.request,
                messages=[
                    *turned.request.messages,
                    turned.reply,
                    UnifiedMessage.user("where is the key"),
                ],
            )
            second = await memory.turn(follow)
            assert second.report.injection is RecallInjection.REPLACED
            blocks = [m for m in second.request.messages if m.text().startswith(RECALL_MARKER)]
            assert len(blocks) == 1
            assert second.request.messages[-1] == UnifiedMessage.user("where is the key")


def cosine(a: str, b: str) -> float:
    """The cosine of two texts' embeddings, by hand."""
    embedder = HashingEmbedder(DIM)
    u, v = (np.asarray(embedder.embed(t), dtype=np.float64) for t in (a, b))
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


async def test_seed_000_worked_example() -> None:
    """The design's worked example, as the docs/pages/tutorials/trio-agent.md section names it: a
    six-message prompt; Offload moves the four oldest unprotected messages into the
    store, each stored and indexed exactly as it was said; the next question recalls
    them by the cosine of their own text; the block goes just before that question."""
    example = MemoryConfig(strategies=[Offload(turns=4, context=0, dated=False)], top_k=2)
    question = "what is my cat called"
    request = conversation(question)
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=example) as memory:
            turned = await memory.turn(request)
            compression = turned.report.compression
            (offloaded,) = compression.actions
            assert isinstance(offloaded, Offloaded)
            namespace = memory.config.namespace
            stored = await memory.store.get_by_ids(offloaded.ids, namespace=namespace)
        # The default Offload indexes each turn with a date line and the turn before it,
        # so the same prompt recalls with other scores than the example's.
        async with open_memory(
            store=STORE, memory=MemoryConfig(strategies=[Offload(turns=4)])
        ) as default:
            default_report = (await default.turn(request)).report.recall
    # Compress: the system prompt and the question stay; messages 1-4 are in the store.
    assert (compression.before, compression.after) == (6, 2)
    assert offloaded.indices == [1, 2, 3, 4]
    assert [d.text for d in stored] == [
        "my cat is called Miso",
        "noted, Miso",
        "the key is under the blue pot",
        "noted, the blue pot",
    ]
    # Retrieve: the two best, each scored by the cosine of the question and its own text.
    recall = turned.report.recall
    assert recall is not None
    assert recall.scanned == 4
    best = ["my cat is called Miso", "the key is under the blue pot"]
    assert [t.message.text() for t in recall.turns] == best
    scores = [t.score for t in recall.turns]
    assert scores == pytest.approx([cosine(question, text) for text in best], abs=1e-6)
    assert scores[0] == pytest.approx(0.8, abs=1e-6)
    # Inject: one plain block just before the question; the prefix is unchanged.
    assert turned.report.injection is RecallInjection.INSERTED
    assert turned.request.messages == [
        UnifiedMessage.system("be brief"),
        UnifiedMessage.system(
            "Recalled memory: 2 item(s), best first\n"
            f"1. [{scores[0]:.4f}] my cat is called Miso\n"
            f"2. [{scores[1]:.4f}] the key is under the blue pot"
        ),
        UnifiedMessage.user(question),
    ]
    assert default_report is not None
    assert default_report.turns[0].message.text() == best[0]
    assert default_report.turns[0].score != pytest.approx(scores[0], abs=1e-3)


async def test_stage_by_stage_equals_turn() -> None:
    config = MemoryConfig(strategies=[Offload(turns=4)], top_k=2, renderer="xml")
    request = conversation("what is my cat called")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as a:
            turned = await a.turn(request)
        async with open_memory(store=STORE, memory=config) as b:
            compressed = await b.compress(request.messages)
            recalled = await b.retrieve("what is my cat called")
            injected = await b.inject(
                recalled, msgspec.structs.replace(request, messages=compressed.messages)
            )
            reply = await b.dispatch(injected.request)
        assert injected.request == turned.request
        assert reply == turned.reply
        assert injected.request.messages[1].text().startswith("<recalled_memory>")


async def test_retrieve_defaults_and_min_similarity_after_ranking() -> None:
    config = MemoryConfig(top_k=2, min_similarity=0.4, namespace="alice")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            for text in ("red apple pie", "red car", "blue sky", "green grass"):
                await memory.remember(text)
            report = await memory.retrieve("red apple")
            assert report.scanned == 4
            assert [t.message.text() for t in report.turns] == ["red apple pie", "red car"]
            assert all(t.score >= 0.4 for t in report.turns)
            low = await memory.retrieve("red apple", k=4, min_similarity=-1.0)
            assert len(low.turns) == 4
            strict = await memory.retrieve("red apple", k=4, min_similarity=0.99)
            assert strict.turns == []
            assert strict.scanned == 4
            # Namespaces are isolated.
            other = await memory.retrieve("red apple", namespace="bob")
            assert other == RetrievalReport(turns=[], scanned=0)


async def test_remember_returns_the_id_and_keeps_source_and_metadata() -> None:
    with trio.fail_after(10):
        async with open_memory(store=STORE) as memory:
            entry_id = await memory.remember("Sam prefers tea", metadata={"topic": "drinks"})
            other = await memory.remember(
                UnifiedMessage.system("rules"), source="profile", metadata=None
            )
            assert entry_id != other
            report = await memory.retrieve("tea", k=1)
            (hit,) = report.turns
            assert hit.id == entry_id
            assert hit.source == "explicit"
            assert hit.metadata == {"topic": "drinks"}
            assert hit.namespace == "memory-default"
            assert memory.usage().entries == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"content": "  "}, ConfigError, "content is empty"),
        ({"content": 3}, ConfigError, "content is a int"),
        ({"content": "x", "source": ""}, ConfigError, "source is ''"),
        ({"content": "x", "metadata": {"s": {1, 2}}}, JsonError, "holds a set"),
    ],
)
async def test_remember_validates(kwargs: dict[str, object], error: type, match: str) -> None:
    with trio.fail_after(10):
        async with open_memory(store=STORE) as memory:
            with pytest.raises(error, match=match):
                await memory.remember(**kwargs)  # type: ignore[arg-type]
            assert memory.usage().entries == 0


async def test_recall_is_best_effort_when_the_embedder_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = QueryFails()
    config = MemoryConfig(strategies=[Offload(turns=4)])
    request = conversation("what is my cat called")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config, embedder=embedder) as memory:
            embedder.fail_on = "what is my cat called"
            with caplog.at_level(logging.WARNING, logger="trio_recall.memory"):
                turned = await memory.turn(request)
            report = turned.report
            assert report.recall is None
            assert report.recall_error is not None
            assert report.recall_error.startswith("EmbedderError: embedder failed: OSError")
            assert report.injection is RecallInjection.ABSENT
            assert not any(m.text().startswith(RECALL_MARKER) for m in turned.request.messages)
            assert turned.reply.text().startswith("[echo]")
            assert "recall failed" in caplog.text
            # Stores still work: the offload went through.
            assert memory.usage().entries == 4


async def test_a_failed_recall_removes_a_stale_block() -> None:
    embedder = QueryFails()
    with trio.fail_after(10):
        async with open_memory(
            store=STORE, memory=MemoryConfig(strategies=[Offload(turns=4)]), embedder=embedder
        ) as memory:
            first = await memory.turn(conversation("what is my cat called"))
            assert first.report.injection is RecallInjection.INSERTED
            embedder.fail_on = "again"
            follow = msgspec.structs.replace(
                first.request, messages=[*first.request.messages, UnifiedMessage.user("again")]
            )
            second = await memory.turn(follow)
            assert second.report.injection is RecallInjection.REMOVED


async def test_recall_errors_raise_when_asked() -> None:
    embedder = QueryFails()
    embedder.fail_on = "what is my cat called"
    config = MemoryConfig(recall_errors="raise")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config, embedder=embedder) as memory:
            with pytest.raises(EmbedderError) as info:
                await memory.turn(conversation("what is my cat called"))
            assert isinstance(info.value.error, OSError)


async def test_a_poisoned_store_is_a_recorded_recall_error() -> None:
    with trio.fail_after(10), pytest.raises(Poisoned):
        async with open_memory(store=STORE) as memory:
            await memory.remember("something")
            inject_crash(memory.store)
            with pytest.raises(Poisoned):
                await memory.remember("crash now")
            turned = await memory.turn(conversation("anything"))
            assert turned.report.recall_error is not None
            assert turned.report.recall_error.startswith("Poisoned")


async def test_auto_store_user_input_stores_after_recall() -> None:
    config = MemoryConfig(auto_store_user_input=True)
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            turned = await memory.turn(conversation("a brand new fact"))
            # Recall ran before the store, so the turn did not recall itself.
            assert turned.report.recall is not None
            assert turned.report.recall.turns == []
            hits = (await memory.retrieve("brand new fact")).turns
            assert hits[0].message.text() == "a brand new fact"
            assert {h.source for h in hits} == {"user"}


async def test_auto_store_user_input_stores_only_the_newest_user_message_once() -> None:
    config = MemoryConfig(auto_store_user_input=True)
    first = UnifiedMessage.user("the wifi password is hunter2")
    second = UnifiedMessage.user("and the router is in the attic")
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            # Two user messages in one turn: only the input itself (the newest) is
            # stored; the older one is history, Offload's to store.
            await memory.turn(UnifiedRequest(model="m", messages=[first, second]))
            assert memory.usage().entries == 1
            # A tool-loop turn repeats the same request: nothing new is stored.
            loop = [
                first,
                second,
                UnifiedMessage.assistant(
                    tool_calls=[ToolCall(id="c1", name="look", arguments={})]
                ),
                UnifiedMessage.tool_result("c1", "nothing found"),
            ]
            await memory.turn(UnifiedRequest(model="m", messages=loop))
            assert memory.usage().entries == 1
            third = UnifiedMessage.user("thanks")
            await memory.turn(UnifiedRequest(model="m", messages=[*loop, third]))
            assert memory.usage().entries == 2
            report = await memory.retrieve(
                "wifi password router attic thanks", k=10, min_similarity=-1.0
            )
            assert sorted(t.message.text() for t in report.turns) == sorted(
                [second.text(), third.text()]
            )
            assert all(re.fullmatch("[0-9a-f]{16}", t.id) for t in report.turns)
            assert {t.source for t in report.turns} == {"user"}


async def test_auto_store_user_input_runs_after_recall() -> None:
    config = MemoryConfig(auto_store_user_input=True, min_similarity=-1.0)
    with trio.fail_after(10):
        async with open_memory(store=STORE, memory=config) as memory:
            turned = await memory.turn(
                UnifiedRequest(model="m", messages=[UnifiedMessage.user("my cat is Miso")])
            )
            # The turn never recalls its own input: it was stored after recall.
            assert turned.report.recall is not None
            assert turned.report.recall.turns == []
            assert memory.usage().entries == 1


async def test_a_body_error_is_not_wrapped_in_a_group() -> None:
    with trio.fail_after(10), pytest.raises(KeyError, match="boom"):
        async with open_memory(store=STORE):
            raise KeyError("boom")


async def test_after_close_every_method_refuses() -> None:
    with trio.fail_after(10):
        async with open_memory(store=STORE) as memory:
            events = memory.events()
        with pytest.raises(trio.ClosedResourceError):
            await memory.compress([])
        with pytest.raises(trio.ClosedResourceError):
            await memory.retrieve("x")
        with pytest.raises(trio.ClosedResourceError):
            await memory.inject(RetrievalReport(turns=[], scanned=0), conversation("x"))
        with pytest.raises(trio.ClosedResourceError):
            await memory.remember("x")
        with pytest.raises(trio.ClosedResourceError):
            await memory.dispatch(conversation("x"))
        with pytest.raises(trio.ClosedResourceError):
            memory.events()
        assert [e async for e in events] == []


async def test_open_memory_validates_its_arguments() -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"store": "big"}, "store is a str"),
        ({"store": STORE, "memory": {}}, "memory is a dict"),
        ({"store": STORE, "inbox_size": 0}, "inbox_size is 0"),
        ({"store": STORE, "store_inbox_size": -1}, "store_inbox_size is -1"),
        ({"store": STORE, "embedder": HashingEmbedder(8)}, "makes 8-float vectors"),
        ({"store": STORE, "dispatcher": object()}, "expected a Dispatcher"),
        ({"store": STORE, "summarizer": 3}, "summarizer is 3"),
    ]
    for kwargs, match in cases:
        with trio.fail_after(10), pytest.raises(ConfigError, match=match):
            async with open_memory(**kwargs):  # type: ignore[arg-type]
                pass


async def test_the_stage_methods_validate() -> None:
    with trio.fail_after(10):
        async with open_memory(store=STORE) as memory:
            with pytest.raises(ConfigError, match="query is a int"):
                await memory.retrieve(3)  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="k is 0"):
                await memory.retrieve("x", k=0)
            with pytest.raises(ConfigError, match="namespace is ''"):
                await memory.retrieve("x", namespace="")
            with pytest.raises(ConfigError, match=r"min_similarity is 1\.5"):
                await memory.retrieve("x", min_similarity=1.5)
            with pytest.raises(ConfigError, match="report is a list"):
                await memory.inject([], conversation("x"))  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="request is a str"):
                await memory.turn("hello")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="request is a NoneType"):
                await memory.dispatch(None)  # type: ignore[arg-type]
            stats = memory.statistics()
            assert stats.inbox_size == 16
            assert (stats.compaction_used, stats.recall_used, stats.injection_used) == (0, 0, 0)


async def test_memory_with_a_custom_dispatcher() -> None:
    seen: list[UnifiedRequest] = []

    class Recording:
        async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage:
            seen.append(request)
            return UnifiedMessage.assistant("ok")

    with trio.fail_after(10):
        async with open_memory(store=STORE, dispatcher=Recording()) as memory:
            assert isinstance(memory, Memory)
            turned = await memory.turn(conversation("hi"))
    assert seen == [turned.request]
    assert turned.reply == UnifiedMessage.assistant("ok")
    assert repr(EchoDispatcher()) == "EchoDispatcher()"


async def test_remember_ids_are_content_source_time_hashes_so_repeats_keep_two() -> None:
    import hashlib
    import re

    from actors._agent.memory import memory_id

    with trio.fail_after(10):
        async with open_memory(store=STORE) as memory:
            first = await memory.remember("the door code is 4312", metadata={"k": 1})
            second = await memory.remember("the door code is 4312", metadata={"k": 1})
            assert first != second
            assert re.fullmatch(r"[0-9a-f]{16}", first)
            assert memory.usage().entries == 2
            # Both are stored, but recall keeps one content once (context assembly).
            report = await memory.retrieve("door code", k=5)
            assert len(report.turns) == 1
            assert report.turns[0].id in {first, second}
            assert report.turns[0].source == "explicit"
    blob = b"\x00".join([b"the door code is 4312", b"explicit", b"123"])
    assert (
        memory_id("the door code is 4312", "explicit", 123)
        == hashlib.sha256(blob).hexdigest()[:16]
    )


async def test_memory_config_recall_settings_reach_the_recall_actor() -> None:
    from protocol import RecallSettings

    # "apple" is common (low BM25 idf) and the short apple entries are closest by cosine;
    # "kiwi" is rare, in a long entry: BM25 ranks it first, dense ranks it last.
    texts = [f"apple pie {i}" for i in range(5)] + ["kiwi a b c d e f g h"]

    async def order(config: MemoryConfig) -> tuple[list[str], list[str]]:
        async with open_memory(store=STORE, memory=config) as memory:
            for text in texts:
                await memory.remember(text)
            got = await memory.retrieve("apple kiwi", k=6)
            direct = await memory.store.retrieve_in(config.namespace, "apple kiwi", 6)
            return [t.message.text() for t in got.turns], [t.message.text() for t in direct.turns]

    with trio.fail_after(10):
        # No floor: this compares rankings, and the kiwi entry scores low by cosine.
        dense_got, dense_direct = await order(
            MemoryConfig(recall=RecallSettings(search="dense"), min_similarity=None)
        )
        hybrid_got, _ = await order(MemoryConfig(min_similarity=None))
    # Dense-only recall is exactly the store's dense ranking; the default is not.
    assert dense_got == dense_direct
    assert dense_got[-1] == "kiwi a b c d e f g h"
    assert hybrid_got != dense_got
