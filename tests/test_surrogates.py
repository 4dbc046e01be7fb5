"""Lone UTF-16 surrogates (design §3): stored and returned exactly, on both
backends and through ``open_memory``; replaced by U+FFFD only where text leaves the
process. ``json.loads('"\\ud83d"')`` (a cut-off emoji) is how a tool result gets one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import numpy as np
import pytest
import trio
from extras import require_extra

from actors import EchoDispatcher, HashingEmbedder, OpenAIEmbeddings, open_memory, open_store
from actors._agent.dispatch import to_openai
from actors._retrieval.bm25 import Bm25Index, tokenize
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    SearchRequest,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
    digest_request,
    document_id,
    render,
)
from protocol._filters import Eq
from protocol._surrogates import pack, replace_surrogates, unpack_message, unpack_metadata
from protocol.compaction import (
    Offload,
    Summarize,
)

LONE = json.loads('"\\ud83d"')  # what a cut-off emoji decodes to
assert LONE == "\ud83d"
DIM = 32
TIMEOUT = 20

Opener = Callable[..., AbstractAsyncContextManager[Any]]


def cfg() -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=16, dimensions=DIM, max_entry_bytes=4096)


@pytest.fixture(params=["memory", "pg"])
def opener(request: pytest.FixtureRequest) -> Opener:
    """``opener(config, embedder)``: ``open_store``, or ``open_pg_store`` on a fresh table."""
    if request.param == "memory":
        return open_store
    pg_open: Opener = request.getfixturevalue("pg_open")
    return pg_open


def hostile_turns() -> list[UnifiedMessage]:
    """One turn per string field, each holding a lone surrogate."""
    s = LONE
    return [
        UnifiedMessage.user(f"plain {s} turn"),  # the store's plain-turn fast path
        UnifiedMessage(
            role="assistant",
            content=[
                Text(text=f"text {s}"),
                Thinking(text=f"thinking {s}\udc00"),
                ToolCall(
                    id=f"call-{s}",
                    name=f"tool{s}",
                    arguments={f"key{s}": [s, {s: f"v{s}"}, 1, 2.5, None, True]},
                ),
            ],
            name=f"bot{s}",
        ),
        UnifiedMessage(
            role="tool",
            content=[ToolResult(tool_call_id=f"call-{s}", output=f"result {s} end")],
            tool_call_id=f"call-{s}",
        ),
    ]


async def _everything(store: Any) -> list[Any]:
    report = await store.retrieve_embedding(np.ones(store.config.dimensions), k=100)
    return sorted(report.turns, key=lambda t: t.sequence)


async def test_turns_round_trip_exactly_in_every_field(opener: Opener) -> None:
    turns = hostile_turns()
    metadata = {f"k{LONE}": f"v{LONE}", "nested": {LONE: [LONE]}, "n": 1}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(turns, metadata=metadata)
            indexed = await store.store_turns(
                [UnifiedMessage.user("indexed")], texts=[f"index text {LONE}"]
            )
            hits = await _everything(store)
            assert [h.message for h in hits] == [*turns, UnifiedMessage.user("indexed")]
            assert [h.metadata for h in hits[:3]] == [metadata] * 3
            got = await store.get_by_ids(stored.ids + indexed.ids)
            texts = {d.id: d.text for d in got}
            assert texts[indexed.ids[0]] == f"index text {LONE}"
            assert texts[stored.ids[2]] == f"result {LONE} end"
            assert {d.id: d.metadata for d in got}[stored.ids[1]] == metadata
            # BM25 over such text, and a query holding one, answer without raising.
            hybrid = await store.search(SearchRequest(query=f"result {LONE}", k=2, kind="hybrid"))
            assert hybrid[0].document.text == f"result {LONE} end"
            # The store is not poisoned: it goes on taking and answering writes.
            await store.store_turns([UnifiedMessage.user("after")])
            assert len(store) == 5
            assert (await store.retrieve("after", 1)).turns[0].message.text() == "after"


async def test_documents_round_trip_exactly(opener: Opener) -> None:
    text = f"a cut-off emoji {LONE} in a document"
    metadata = {LONE: LONE, "topic": "emoji"}
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            # No id: the store derives one by hashing the content, surrogate and all.
            (doc_id,) = await store.add_documents([Document(text=text, metadata=metadata)])
            assert doc_id == document_id(text, metadata)
            (got,) = await store.get_by_ids([doc_id])
            # occurred_at: the time of the write, which the store stamped; version 1 is
            # valid from then.
            assert got == Document(
                text=text,
                id=doc_id,
                metadata=metadata,
                occurred_at=got.occurred_at,
                valid_from=got.occurred_at,
                version=1,
            )
            # A filter on a plain key of such metadata still matches.
            (hit,) = await store.search(
                SearchRequest(query="emoji", k=3, filter=Eq(key="topic", value="emoji"))
            )
            assert hit.document == got
            await store.add_documents([Document(text="next")])
            assert len(store) == 2


async def test_memory_store_keeps_ids_namespaces_and_sources_exactly() -> None:
    odd = f"id{LONE}"
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            stored = await store.store_turns(
                [UnifiedMessage.user("x")], namespace=odd, source=odd, ids=[odd]
            )
            (hit,) = (await store.retrieve_in(odd, "x", 1)).turns
            assert (hit.id, hit.namespace, hit.source) == (odd, odd, odd) == (stored.ids[0],) * 3


async def test_pg_refuses_surrogate_names_with_config_error(pg_open: Opener) -> None:
    odd = f"id{LONE}"
    with trio.fail_after(TIMEOUT):
        async with pg_open(cfg(), HashingEmbedder(DIM)) as store:
            for kwargs in ({"namespace": odd}, {"source": odd}, {"ids": [odd]}):
                with pytest.raises(ConfigError, match="not valid UTF-8"):
                    await store.store_turns([UnifiedMessage.user("x")], **kwargs)
            assert store.is_empty()
            await store.store_turns([UnifiedMessage.user("x")])
            assert len(store) == 1


# --- through open_memory ------------------------------------------------------------------


def _store() -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=32, dimensions=64, max_entry_bytes=4096)


async def test_memory_remember_round_trips_exactly() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=_store()) as memory:
            entry_id = await memory.remember(f"remember {LONE} this", metadata={LONE: LONE})
            (hit,) = (await memory.retrieve("remember this", k=1)).turns
            assert hit.id == entry_id
            assert hit.message == UnifiedMessage.user(f"remember {LONE} this")
            assert hit.metadata == {LONE: LONE}
            await memory.remember("still works")
            assert memory.usage().entries == 2


async def test_memory_turn_with_a_lone_surrogate_in_a_tool_result() -> None:
    output = json.loads('"weather: sunny \\ud83d"')  # a tool cut its emoji in half
    call = ToolCall(id="c1", name="weather", arguments={"city": "Oslo"})
    messages = [
        UnifiedMessage.system("be brief"),
        UnifiedMessage.user("what is the weather?"),
        UnifiedMessage.assistant(tool_calls=[call]),
        UnifiedMessage.tool_result("c1", output),
        UnifiedMessage.assistant("sunny"),
        UnifiedMessage.user("and tomorrow?"),
    ]
    config = MemoryConfig(strategies=[Offload(turns=4)], auto_store_user_input=True)
    with trio.fail_after(TIMEOUT):
        async with open_memory(
            store=_store(), memory=config, dispatcher=EchoDispatcher()
        ) as memory:
            turned = await memory.turn(UnifiedRequest(model="m", messages=messages))
            assert turned.report.digest == digest_request(turned.request)
            everything = await _everything(memory.store)
            assert UnifiedMessage.tool_result("c1", output) in [h.message for h in everything]
            # The next turn recalls it, rendered and injected without raising.
            again = await memory.turn(
                UnifiedRequest(model="m", messages=[UnifiedMessage.user("weather sunny")])
            )
            assert any(LONE in m.text() for m in again.request.messages if m.role == "system")


async def test_memory_summary_with_a_lone_surrogate_is_stored_exactly() -> None:
    summary = f"summary {LONE} of the start"

    def summarizer(messages: list[UnifiedMessage]) -> str:
        return summary

    messages = [UnifiedMessage.user(f"turn {i}") for i in range(5)]
    config = MemoryConfig(strategies=[Summarize(turns=3)])
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=_store(), memory=config, summarizer=summarizer) as memory:
            compressed = await memory.compress(messages)
            assert compressed.report.last_error is None
            (hit,) = await _everything(memory.store)
            assert hit.source == "compaction"
            assert hit.message.text() == summary
            assert any(summary in m.text() for m in compressed.messages)
            await memory.remember("fine")


async def test_memory_add_documents_round_trip_exactly() -> None:
    text = f"doc {LONE}"
    with trio.fail_after(TIMEOUT):
        async with open_memory(store=_store()) as memory:
            (doc_id,) = await memory.store.add_documents([Document(text=text)])
            (got,) = await memory.store.get_by_ids([doc_id])
            assert got.text == text


# --- the pieces -----------------------------------------------------------------------------


def test_pack_is_plain_msgpack_unless_it_must_not_be() -> None:
    plain = UnifiedMessage.user("héllo")
    assert pack(plain)[:1] != b"\xc1"
    for message in [plain, *hostile_turns()]:
        assert unpack_message(pack(message)) == message
    meta = {LONE: {LONE + "x": [LONE, 2**64 - 1, -0.5]}}
    assert unpack_metadata(pack(meta)) == meta


def test_digest_tells_a_lone_surrogate_from_its_replacement() -> None:
    def request(text: str) -> UnifiedRequest:
        return UnifiedRequest(model="m", messages=[UnifiedMessage.user(text)])

    digests = {digest_request(request(t)) for t in (LONE, "\ufffd", "\\ud83d", "")}
    assert len(digests) == 4
    assert digest_request(request(LONE)) == digest_request(request(LONE))


async def test_renderers_and_bm25_take_lone_surrogates() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), HashingEmbedder(DIM)) as store:
            await store.store_turns([UnifiedMessage.user(f"cut {LONE} emoji")])
            got = await store.retrieve("cut emoji", 1)
    for renderer in ("plain", "xml"):
        text = render(got, renderer)
        assert text is not None and "cut" in text
    assert tokenize(f"cut{LONE}emoji") == ["cut", "emoji"]
    index = Bm25Index(2)
    index.add(0, f"cut {LONE} emoji")
    slots, _ = index.scores(f"emoji {LONE}")
    assert slots.tolist() == [0]


def test_text_leaving_the_process_has_no_lone_surrogate() -> None:
    assert replace_surrogates(f"a{LONE}b\udc00") == "a\ufffdb\ufffd"
    assert replace_surrogates("plain é 😀") == "plain é 😀"
    call = ToolCall(id="c", name="t", arguments={LONE: LONE})
    request = UnifiedRequest(
        model="m",
        messages=[
            UnifiedMessage.user(f"hi {LONE}", name=f"n{LONE}"),
            UnifiedMessage.assistant(tool_calls=[call]),
            UnifiedMessage.tool_result("c", LONE),
        ],
    )
    body = to_openai(request)
    wire = json.dumps(body, ensure_ascii=False).encode("utf-8")  # what httpx sends
    assert b"\xef\xbf\xbd" in wire
    assert json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "\ufffd": "\ufffd"
    }


async def test_openai_embeddings_send_lone_surrogates_as_replacement() -> None:
    seen: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body["input"])
        data = [{"index": i, "embedding": [1.0, 0.0]} for i in range(len(body["input"]))]
        return httpx.Response(200, json={"data": data})

    model = OpenAIEmbeddings(
        "m", dimensions=2, base_url="http://x/v1", transport=httpx.MockTransport(answer)
    )
    with trio.fail_after(TIMEOUT):
        async with model:
            vectors = await model.embed_documents([f"a{LONE}"])
    assert np.asarray(vectors).shape == (1, 2)
    assert seen == [["a\ufffd"]]


def test_minilm_embeds_lone_surrogates_as_replacement() -> None:
    require_extra("embed")
    from actors import MiniLMEmbedder

    model = MiniLMEmbedder(blas_threads=1)
    got = model.embed_batch([f"emoji {LONE}", "emoji \ufffd"])
    np.testing.assert_array_equal(got[0], got[1])
