"""The memory bound (design §3; docs/pages/reference/store.md, "The memory bound,
exactly"), by tracemalloc.

A store of 50 entries at a small cap is filled, for many rounds (so that eviction runs),
with entries of hostile shapes, each as large as the cap allows: max-size metadata
(a long string, or thousands of empty lists), source, id, index text, many empty
blocks, tool arguments of floats, many tiny distinct tokens, one huge token, non-ASCII
text. The memory the store holds at the end must stay under the documented bound:

    STORE_CONSTANT + max_entries × (max_entry_bytes + dimensions × 4 + namespace
                                    + ENTRY_CONSTANT)

plus, once BM25 has indexed the entries, the index's own bound per entry
(``BM25_BYTES_PER_TEXT_BYTE`` × max_entry_bytes + ``BM25_BYTES_PER_DOCUMENT``).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
import trio

from actors import open_store
from actors._inmemory.arena import ENTRY_CONSTANT, STORE_CONSTANT
from actors._retrieval.bm25 import BM25_BYTES_PER_DOCUMENT, BM25_BYTES_PER_TEXT_BYTE, Bm25Index
from protocol import (
    Document,
    EntryTooLarge,
    ImageBase64,
    SearchRequest,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.checks import BLOCK_OVERHEAD, document_bytes, turn_bytes
from protocol.filters import Eq

ENTRIES = 50
DIM = 8
CAP = 512
ROUNDS = 2 * ENTRIES  # so that every entry of the first fill is evicted

Write = dict[str, Any]


class Ones:
    """An embedder that holds nothing (HashingEmbedder keeps a bounded memo of tokens,
    which is the embedder's memory, not the store's)."""

    dimensions = DIM

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), DIM), dtype=np.float32)

    def embed(self, text: str) -> np.ndarray:
        return np.ones(DIM, dtype=np.float32)


def _fit(make: Callable[[int], Write], source: str = "offload") -> Callable[[int], Write]:
    """``make(n)`` grown to the largest ``n`` whose turn still fits the cap."""

    def size(write: Write) -> int:
        (turn,) = write["turns"]
        meta = write.get("metadata") or {}
        return turn_bytes(
            turn,
            source=write.get("source", source),
            metadata=len(_json(meta)) if meta else 0,
            index_text=(write.get("texts") or [None])[0],
            entry_id=(write.get("ids") or [None])[0],
            conversation=write.get("conversation"),
        )

    fits: list[int] = []

    def fitted(r: int) -> Write:
        if not fits:
            low, high = 0, CAP
            while low < high:  # the largest n that fits
                mid = (low + high + 1) // 2
                if size(make(mid)) <= CAP:
                    low = mid
                else:
                    high = mid - 1
            fits.append(low)
        write = make(fits[0])
        assert CAP - 80 <= size(write) <= CAP, size(write)
        return write

    return fitted


def _json(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _turn(text: str) -> list[UnifiedMessage]:
    return [UnifiedMessage.user(text)]


def _tokens(r: int, n: int) -> str:
    """``n`` distinct short tokens, new in every round: the worst BM25 shape."""
    return " ".join(f"{r:x}q{j:x}" for j in range(n))


def _shapes() -> Iterator[tuple[str, Callable[[int], Write]]]:
    yield "metadata string", _fit(lambda n: {"turns": _turn("m"), "metadata": {"k": "v" * n}})
    yield "metadata lists", _fit(lambda n: {"turns": _turn("m"), "metadata": {"k": [[]] * n}})
    yield "source", _fit(lambda n: {"turns": _turn("s"), "source": "s" * max(n, 1)})
    yield "id", _fit(lambda n: {"turns": _turn("i"), "ids": ["i" * (n + 1)]})
    yield "index text", _fit(lambda n: {"turns": _turn("t"), "texts": ["t" * n]})
    yield (
        "empty blocks",
        _fit(
            lambda n: {"turns": [UnifiedMessage(role="user", content=[Text(text="")] * (n + 1))]}
        ),
    )
    yield (
        "float arguments",
        _fit(
            lambda n: {
                "turns": [
                    UnifiedMessage.assistant(
                        tool_calls=[ToolCall(id="c", name="f", arguments=[0.0] * n)]
                    )
                ]
            }
        ),
    )
    yield "non-ASCII text", _fit(lambda n: {"turns": _turn("a" * n + "\U0001f600")})
    # A namespace of its own per entry (the bound counts each entry's namespace).
    yield "namespaces", _fit(lambda n: {"turns": _turn("n" * n), "namespace": "n" * 100})
    # A conversation of its own per entry (its bookkeeping goes with its last entry),
    # each entry then indexed by a text the store derives (its date line, cut to fit).
    yield "conversations", _fit(lambda n: {"turns": _turn("c"), "conversation": "c" * (n + 4)})
    # One conversation: each entry indexed with its date and its predecessor's text,
    # which the store cuts to fit the cap (the own text is half of it).
    yield (
        "conversation context",
        lambda r: {"turns": _turn(f"{r:04x}" + "x" * (CAP // 2 - 40)), "conversation": "one"},
    )


def _per_round(shape: Callable[[int], Write]) -> Callable[[int], Write]:
    """Make every round's entry distinct (a new id, text, source or metadata)."""

    def write(r: int) -> Write:
        w = dict(shape(r))
        tag = f"{r:04x}"
        if "ids" in w:
            w["ids"] = [tag + w["ids"][0][4:]]
        elif "source" in w:
            w["source"] = tag + w["source"][4:]
        elif "texts" in w:
            w["texts"] = [tag + w["texts"][0][4:]]
        elif "namespace" in w:
            w["namespace"] = tag + w["namespace"][4:]
        elif w.get("conversation", "one") != "one":
            w["conversation"] = tag + w["conversation"][4:]
        elif isinstance(w.get("metadata", {}).get("k"), str):
            w["metadata"] = {"k": tag + w["metadata"]["k"][4:]}
        return w

    return write


def arena_bound(namespace: int = 100) -> int:
    """The bound, for namespaces of at most ``namespace`` bytes."""
    return STORE_CONSTANT + ENTRIES * (CAP + DIM * 4 + namespace + ENTRY_CONSTANT)


def bm25_bound() -> int:
    return ENTRIES * (BM25_BYTES_PER_TEXT_BYTE * CAP + BM25_BYTES_PER_DOCUMENT)


async def _fill(write: Callable[[int], Write], *, index: bool) -> int:
    """The memory a store holds after ``ROUNDS`` writes of ``write``'s shape (every
    ``ENTRIES`` rounds, a hybrid and a filtered search, when ``index``)."""
    config = VectorStoreConfig(max_entries=ENTRIES, dimensions=DIM, max_entry_bytes=CAP)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    async with open_store(config, Ones()) as store:
        for r in range(ROUNDS):
            await store.store_turns(**write(r))
            if index and r % ENTRIES == ENTRIES - 1:
                await store.search(SearchRequest(query="q v", k=1, kind="hybrid"))
                await store.search(SearchRequest(query="q", k=1, filter=Eq(key="k", value="v")))
        assert store.usage().evicted_entries == ROUNDS - ENTRIES
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    return held


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("name", "shape"), list(_shapes()), ids=[n for n, _ in _shapes()])
async def test_hostile_turns_stay_under_the_bound(
    name: str, shape: Callable[[int], Write], traced: None
) -> None:
    with trio.fail_after(60):
        held = await _fill(_per_round(shape), index=False)
    assert held <= arena_bound(), f"{name}: {held:,} bytes held; bound {arena_bound():,}"


_HUGE = 20 * CAP
_OVERSIZED: list[tuple[str, Callable[[int], Write]]] = [
    ("metadata", lambda r: {"turns": _turn("m"), "metadata": {"k": f"{r}" + "v" * _HUGE}}),
    ("source", lambda r: {"turns": _turn("s"), "source": f"{r}" + "s" * _HUGE}),
    ("id", lambda r: {"turns": _turn("i"), "ids": [f"{r}" + "i" * _HUGE]}),
    (
        "empty blocks",
        lambda r: {"turns": [UnifiedMessage(role="user", content=[Text(text="")] * CAP)]},
    ),
    (
        # 4 bytes a float in JSON (within the cap), 9 in the msgpack the store keeps.
        "float arguments",
        lambda r: {
            "turns": [
                UnifiedMessage.assistant(
                    tool_calls=[ToolCall(id="c", name="f", arguments=[0.0] * (CAP // 5))]
                )
            ]
        },
    ),
]


@pytest.mark.parametrize(("name", "write"), _OVERSIZED, ids=[n for n, _ in _OVERSIZED])
async def test_fields_over_the_cap_are_refused(
    name: str, write: Callable[[int], Write], traced: None
) -> None:
    """Each of these used to be stored whole: only the payload was counted."""
    config = VectorStoreConfig(max_entries=ENTRIES, dimensions=DIM, max_entry_bytes=CAP)
    with trio.fail_after(60):
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        async with open_store(config, Ones()) as store:
            for r in range(ROUNDS):
                with pytest.raises(EntryTooLarge) as info:
                    await store.store_turns(**write(r))
                assert info.value.bytes > CAP and info.value.index == 0
            assert store.is_empty()
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
    assert held <= arena_bound(), f"{name}: {held:,} bytes held; bound {arena_bound():,}"


async def test_many_tiny_tokens_stay_under_the_bound_with_bm25(traced: None) -> None:
    def write(r: int) -> Write:
        text = _tokens(r, CAP // 8)
        assert len(text) <= CAP - 16
        return {"turns": _turn(text)}

    with trio.fail_after(60):
        held = await _fill(write, index=True)
    bound = arena_bound() + bm25_bound()
    assert held <= bound, f"{held:,} bytes held; bound {bound:,}"


async def test_hostile_documents_stay_under_the_bound(traced: None) -> None:
    def document(r: int) -> Document:
        meta = {"k": "v" * 100, "l": [[]] * 30}
        text = "d" * 100 + "\u4e00"
        doc = Document(id=f"{r:04x}" + "i" * 60, source_id="s" * 80, text=text, metadata=meta)
        assert CAP - 80 <= document_bytes(doc) <= CAP, document_bytes(doc)
        return doc

    config = VectorStoreConfig(max_entries=ENTRIES, dimensions=DIM, max_entry_bytes=CAP)
    with trio.fail_after(60):
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        async with open_store(config, Ones()) as store:
            for r in range(ROUNDS):
                await store.upsert([document(r)])
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
    assert held <= arena_bound(), f"{held:,} bytes held; bound {arena_bound():,}"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(lambda r: _tokens(r, CAP // 7), id="distinct tokens"),
        pytest.param(lambda r: " ".join(f"{r:x}{j:02x}" for j in range(CAP // 5)), id="short"),
        pytest.param(
            lambda r: " ".join(chr(0x4E00 + (r * 300 + j) % 20000) for j in range(CAP // 4)),
            id="CJK characters",
        ),
        pytest.param(lambda r: f"{r}" + "z" * (CAP - 8), id="one huge token"),
        pytest.param(lambda r: " ".join(["same"] * (CAP // 5)), id="one repeated word"),
    ],
)
def test_bm25_memory_per_entry_is_bounded(text: Callable[[int], str], traced: None) -> None:
    index = Bm25Index(ENTRIES)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for r in range(ROUNDS):
        t = text(r)
        assert len(t.encode()) <= CAP
        index.add(r % ENTRIES, t)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    assert held <= bm25_bound(), f"{held:,} bytes held; bound {bm25_bound():,}"


def test_block_overhead_covers_an_empty_block() -> None:
    for block in (
        Text(text=""),
        Thinking(text=""),
        ImageBase64(media_type="", data=""),
        ToolCall(id="", name=""),
        ToolResult(tool_call_id="", output=""),
    ):
        assert len(msgspec.msgpack.encode(block)) <= BLOCK_OVERHEAD
