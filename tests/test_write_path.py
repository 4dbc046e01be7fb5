"""The store's batched write path agrees with the plain per-entry rules it replaces."""

from __future__ import annotations

import re
from collections import Counter

import msgspec
import numpy as np
import numpy.typing as npt
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actors import HashingEmbedder, open_store
from actors._embedding.adapter import as_matrix, normalize_rows
from actors._inmemory.arena import Arena, Entries, turn_ids
from actors._inmemory.filtering import MetadataIndex
from actors._store.prepare import (
    check_turns,
    checked_rows,
    exact_msgpack,
    exact_msgpack_many,
)
from protocol import (
    ConfigError,
    EmbeddingError,
    EntryTooLarge,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    VectorStoreConfig,
    payload_bytes,
    projection,
)
from protocol.messages import StoreTurns

DIM = 8

_floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
_batches = hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.just(DIM)), elements=_floats32)


def unit_rows(
    vectors: object, count: int, dimensions: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """``checked_rows``' batch, normalized: what the store commits into its arena."""
    rows, scale, zero = checked_rows(vectors, count, dimensions)
    if scale is not None:
        rows = rows * scale
    return rows, zero


def _reference(vectors: object, count: int) -> tuple[object, object] | type[BaseException]:
    try:
        return normalize_rows(as_matrix(vectors, count, DIM))
    except EmbeddingError:
        return EmbeddingError


@settings(max_examples=300, deadline=None)
@given(_batches)
def test_unit_rows_matches_the_float64_path(batch: np.ndarray) -> None:
    expected = _reference(batch, len(batch))
    if expected is EmbeddingError:
        with pytest.raises(EmbeddingError):
            unit_rows(batch, len(batch), DIM)
        return
    assert isinstance(expected, tuple)
    want, want_zero = expected
    rows, zero = unit_rows(batch, len(batch), DIM)
    assert rows.dtype == np.float32
    assert rows.shape == (len(batch), DIM)
    np.testing.assert_array_equal(zero, want_zero)
    np.testing.assert_allclose(rows, want, rtol=1e-6, atol=1e-7)
    assert not np.shares_memory(rows, batch)


def test_unit_rows_fast_path_keeps_every_check() -> None:
    good = np.ones((3, DIM), dtype=np.float32)
    rows, zero = unit_rows(good, 3, DIM)
    np.testing.assert_allclose(rows, 1 / np.sqrt(DIM), rtol=1e-6)
    assert not zero.any()
    for bad in (np.nan, np.inf, -np.inf):
        batch = good.copy()
        batch[1, 2] = bad
        with pytest.raises(EmbeddingError, match="non-finite"):
            unit_rows(batch, 3, DIM)
    big = good.copy()
    big[2] = 3e37  # each square overflows float32
    with pytest.raises(EmbeddingError, match="overflows float32"):
        unit_rows(big, 3, DIM)
    with pytest.raises(EmbeddingError):
        unit_rows(good, 4, DIM)  # the wrong count
    with pytest.raises(EmbeddingError):
        unit_rows(np.ones((3, DIM + 1), dtype=np.float32), 3, DIM)
    # A zero row and a tiny one (its float32 square underflows) take the float64 path.
    mixed = good.copy()
    mixed[0] = 0.0
    mixed[1] = 1e-30
    rows, zero = unit_rows(mixed, 3, DIM)
    assert zero.tolist() == [True, False, False]
    np.testing.assert_array_equal(rows[0], 0.0)
    np.testing.assert_allclose(np.linalg.norm(rows[1]), 1.0, rtol=1e-6)


def _entries(
    vectors: np.ndarray,
    zero: np.ndarray,
    scale: np.ndarray | None = None,
    *,
    ids: list[str] | None = None,
    namespace: str = "n",
) -> Entries:
    count = len(vectors)
    return Entries(
        vectors=vectors,
        zero=zero,
        texts=["t"] * count,
        payloads=[b"p"] * count,
        metadata=[{}] * count,
        ids=ids,
        source_ids=[None] * count,
        namespace=namespace,
        source="s",
        scale=scale,
    )


@settings(max_examples=200, deadline=None)
@given(_batches, st.data())
def test_checked_rows_committed_into_the_arena_match_unit_rows(
    batch: np.ndarray, data: st.DataObject
) -> None:
    """The store normalizes a fast-path batch as it writes it into the arena (straight
    into consecutive rows, through a copy into scattered ones): the stored rows are
    unit_rows' exactly, and the embedder's array is never changed."""
    count = len(batch)
    try:
        want, want_zero = unit_rows(batch, count, DIM)
    except EmbeddingError:
        with pytest.raises(EmbeddingError):
            checked_rows(batch, count, DIM)
        return
    before = batch.copy()
    rows, scale, zero = checked_rows(batch, count, DIM)
    np.testing.assert_array_equal(zero, want_zero)
    entries = _entries(rows, zero, scale)
    np.testing.assert_array_equal(entries.normalized(), want)
    arena = Arena(2 * count, DIM)
    if data.draw(st.booleans(), label="scattered"):
        # Fill the arena, then free slots in a drawn order: take_slots hands the most
        # recently freed back first, so the batch lands in scattered rows.
        filler = np.ones((2 * count, DIM), dtype=np.float32)
        full, _ = arena.take_slots(2 * count)
        arena.write(full, _entries(filler, np.zeros(2 * count, dtype=np.bool_), None))
        for slot in data.draw(st.permutations(range(2 * count)), label="freed")[:count]:
            arena.remove(slot)
    slots, _ = arena.take_slots(count)
    arena.write(slots, entries)
    np.testing.assert_array_equal(arena.vectors[slots], want)
    np.testing.assert_array_equal(arena.zero[slots], want_zero)
    np.testing.assert_array_equal(batch, before)


_text = st.text(max_size=12)
_int64 = st.integers(-(2**63), 2**63 - 1)
_arguments = st.none() | _int64 | st.lists(st.floats(0, 1) | st.booleans(), max_size=4)
_blocks = st.one_of(
    st.builds(Text, text=_text),
    st.builds(Thinking, text=_text),
    st.builds(ToolCall, id=_text, name=_text, arguments=_arguments),
    st.builds(ToolResult, tool_call_id=_text, output=_text),
)
_plain = st.builds(UnifiedMessage.user, _text)
_any_turn = st.builds(
    UnifiedMessage,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    content=st.lists(_blocks, max_size=3),
    name=st.none() | _text,
    tool_call_id=st.none() | _text,
)
_turns = st.one_of(st.lists(_plain, max_size=6), st.lists(_plain | _any_turn, max_size=6))


def _name_size(name: str) -> int:
    utf8 = len(name.encode("utf-8", "surrogatepass"))
    return utf8 if name.isascii() else utf8 + 4 * len(name)


def _check_turns_reference(
    turns: list[UnifiedMessage],
    texts: list[str] | None,
    cap: int,
    keep_at_most: int,
    source: str = "s",
    metadata: dict[str, object] | None = None,
    ids: list[str] | None = None,
) -> object:
    """Design §3 steps 1 and 2, one turn at a time, with the memory bound's size: the
    payload, 64 bytes per block after the first, arguments at the longer of JSON and
    msgpack, the index text, the source, the id and the metadata."""
    for i, turn in enumerate(turns):
        size = payload_bytes(turn) + 64 * max(len(turn.content) - 1, 0)
        for block in turn.content:
            if isinstance(block, ToolCall) and block.arguments is not None:
                as_json = len(msgspec.json.encode(block.arguments))
                size += max(0, len(msgspec.msgpack.encode(block.arguments)) - as_json)
        if texts is not None:
            size += len(texts[i].encode("utf-8", "surrogatepass"))
        size += _name_size(source) + (0 if ids is None else _name_size(ids[i]))
        if metadata:
            size += len(msgspec.json.encode(metadata))
        if size > cap:
            return ("too large", size, i)
    head = len(turns) - min(len(turns), keep_at_most)
    kept = [projection(t) for t in turns[head:]] if texts is None else texts[head:]
    return (turns[head:], kept, head)


@settings(max_examples=300, deadline=None)
@given(_turns, st.data(), st.integers(0, 80), st.integers(1, 8))
def test_check_turns_matches_the_per_turn_rules(
    turns: list[UnifiedMessage], data: st.DataObject, cap: int, max_entries: int
) -> None:
    n = len(turns)
    texts = data.draw(st.none() | st.lists(_text, min_size=n, max_size=n))
    source = data.draw(st.text(min_size=1, max_size=6), label="source")
    metadata = data.draw(
        st.dictionaries(_text, st.none() | _int64 | _text | st.floats(0, 1), max_size=2)
    )
    name = st.text(min_size=1, max_size=6).filter(lambda i: not re.fullmatch(r"turn-[0-9]+", i))
    ids = data.draw(st.none() | st.lists(name, min_size=n, max_size=n, unique=True))
    request = StoreTurns(
        turns=turns, namespace="n", source=source, metadata=metadata, texts=texts, ids=ids
    )
    expected = _check_turns_reference(turns, texts, cap, max_entries, source, metadata, ids)
    if isinstance(expected, tuple) and expected[0] == "too large":
        with pytest.raises(EntryTooLarge) as raised:
            check_turns(request, max_entry_bytes=cap, max_entries=max_entries)
        assert expected == ("too large", raised.value.bytes, raised.value.index)
        return
    batch = check_turns(request, max_entry_bytes=cap, max_entries=max_entries)
    assert expected == (batch.survivors, batch.texts, batch.dropped)
    assert batch.given == (texts is not None)
    plain = all(map(_is_plain, turns))
    assert batch.roles == ([t.role for t in batch.survivors] if plain else None)
    assert batch.all_ascii == (plain and all(t.content[0].text.isascii() for t in turns))


def _is_plain(turn: UnifiedMessage) -> bool:
    """One Text block and no name or tool-call id: the turn is its role and text."""
    return (
        turn.name is None
        and turn.tool_call_id is None
        and len(turn.content) == 1
        and type(turn.content[0]) is Text
    )


_roles = st.sampled_from(["user", "assistant", "tool", "system"])
_plain_any_role = st.builds(
    UnifiedMessage,
    role=_roles,
    content=st.lists(st.builds(Text, text=_text), min_size=1, max_size=1),
)


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.lists(_plain_any_role, max_size=5), st.lists(_plain_any_role | _any_turn, max_size=5)
    )
)
def test_a_stored_turn_reads_back_as_the_message_it_was(turns: list[UnifiedMessage]) -> None:
    """A batch of plain turns is kept as roles and texts, any other batch as msgpack:
    either way, a read returns each message as its msgpack round trip gives it."""
    config = VectorStoreConfig(max_entries=8, dimensions=DIM, max_entry_bytes=10_000)
    decode = msgspec.msgpack.Decoder(UnifiedMessage).decode

    async def main() -> None:
        with trio.fail_after(10):
            async with open_store(config, HashingEmbedder(DIM)) as store:
                stored = await store.store_turns(turns)
                report = await store.retrieve_embedding(np.ones(DIM), k=8)
        got = {t.id: t.message for t in report.turns}
        assert len(got) == len(turns)
        for entry_id, turn in zip(stored.ids, turns, strict=True):
            assert got[entry_id] == turn == decode(exact_msgpack(turn))

    trio.run(main)


async def test_only_ascii_plain_turns_are_kept_as_role_and_text() -> None:
    """A non-ASCII str may carry a cached UTF-8 copy of itself, which the memory bound
    does not allow for: such a batch keeps its msgpack."""
    config = VectorStoreConfig(max_entries=8, dimensions=DIM, max_entry_bytes=100)
    with trio.fail_after(10):
        async with open_store(config, HashingEmbedder(DIM)) as store:
            await store.store_turns([UnifiedMessage.user("plain"), UnifiedMessage.assistant("ok")])
            await store.store_turns([UnifiedMessage.user("caf\u00e9")])
            await store.store_turns([UnifiedMessage.user("named", name="x")])
            arena = store._actor.arena
            assert arena.roles[:4] == ["user", "assistant", None, None]
            assert [p is None for p in arena.payloads[:4]] == [True, True, False, False]


def test_check_turns_refuses_a_non_message_after_plain_ones() -> None:
    turns: list[object] = [UnifiedMessage.user("a"), "b"]
    request = StoreTurns(turns=turns, namespace="n", source="s", metadata={})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="turn 1 of the batch is a str"):
        check_turns(request, max_entry_bytes=10, max_entries=10)


@settings(max_examples=100, deadline=None)
@given(st.lists(_plain | _any_turn, max_size=5))
def test_exact_msgpack_many_is_one_exact_copy_per_message(turns: list[UnifiedMessage]) -> None:
    many = exact_msgpack_many(turns)
    assert many == [exact_msgpack(t) for t in turns]
    assert all(type(b) is bytes for b in many)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.data())
def test_arena_bookkeeping_matches_a_fifo_model(capacity: int, data: st.DataObject) -> None:
    """Batched eviction, slice writes and the lazy FIFO order keep every map in step
    with a plain model: live entries in sequence order, oldest evicted first."""
    arena = Arena(capacity, 2)
    model: list[tuple[int, str, str, bool]] = []  # (seq, namespace, id, zero), oldest first
    slot_of_seq: dict[int, int] = {}
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        if model and data.draw(st.booleans(), label="remove"):
            seq, namespace, entry_id, _ = model.pop(data.draw(st.integers(0, len(model) - 1)))
            slot = arena.slot_of(namespace, entry_id)
            assert slot == slot_of_seq.pop(seq)
            arena.remove(slot)
        else:
            namespace = data.draw(st.sampled_from(["a", "b"]), label="namespace")
            count = data.draw(st.integers(1, capacity), label="count")
            pool = [f"id{i}" for i in range(8)]
            named = data.draw(st.booleans(), label="named")
            ids = data.draw(st.permutations(pool), label="ids")[:count] if named else None
            zero = np.array(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)))
            if ids is not None:  # as _commit_entries does: an id replaces its live entry
                for entry_id in ids:
                    slot = arena.slot_of(namespace, entry_id)
                    if slot is not None:
                        arena.remove(slot)
                        (gone,) = [e for e in model if e[1:3] == (namespace, entry_id)]
                        model.remove(gone)
                        slot_of_seq.pop(gone[0])
            evicted_before = arena.evicted_total
            slots, evicted = arena.take_slots(count)
            expect_evicted = max(0, len(model) + count - capacity)
            assert evicted == expect_evicted
            assert arena.evicted_total == evicted_before + evicted
            for seq, *_ in model[:evicted]:
                assert slot_of_seq.pop(seq) in slots
            del model[:evicted]
            entries = _entries(
                np.ones((count, 2), dtype=np.float32), zero, ids=ids, namespace=namespace
            )
            got_ids, seqs = arena.write(slots, entries)
            assert got_ids == (ids if ids is not None else [f"turn-{s}" for s in seqs])
            for seq, slot, entry_id, z in zip(seqs, slots, got_ids, zero.tolist(), strict=True):
                model.append((seq, namespace, entry_id, z))
                slot_of_seq[seq] = slot
        # Every view of the arena agrees with the model.
        assert len(arena) == len(model) == arena.snapshot(0).live
        assert arena.live_slots() == [slot_of_seq[seq] for seq, *_ in model]
        for namespace in ("a", "b", "c"):
            want = [slot_of_seq[seq] for seq, ns, *_ in model if ns == namespace]
            assert arena.live_slots(namespace) == want
        assert arena.snapshot(0).namespace_counts == dict(Counter(e[1] for e in model))
        assert arena.zero_count == sum(e[3] for e in model)
        # The totals the eviction fast paths trust: stale FIFO records, and live
        # entries with an explicit id.
        head, tail = arena._head, arena._tail
        recorded = arena.seqs[arena._fifo_slots[head:tail]] == arena._fifo_seqs[head:tail]
        assert arena._stale == int(np.count_nonzero(~recorded))
        assert arena._named == sum(not e[2].startswith("turn-") for e in model)
        for seq, namespace, entry_id, z in model:
            slot = slot_of_seq[seq]
            assert arena.slot_of(namespace, entry_id) == slot
            assert arena.seqs[slot] == seq
            assert arena.ids[slot] == entry_id
            assert arena.namespace_of(slot) == namespace
            assert bool(arena.zero[slot]) == z
        assert len(set(slot_of_seq.values())) == len(model)
        live_ids = {(ns, entry_id) for _, ns, entry_id, _ in model}
        for seq in range(arena.next_seq):
            for namespace in ("a", "b"):
                if (namespace, f"turn-{seq}") not in live_ids:
                    assert arena.slot_of(namespace, f"turn-{seq}") is None
        for odd in ("turn-", "turn-00", "turn-01", "turn-+1", "turn-\uff11", "turn-" + "9" * 5000):
            assert arena.slot_of("a", odd) is None


@pytest.mark.parametrize("first", [0, 1, 99, 100, 7, 950, 10**6 - 37, 10**12 + 55])
@pytest.mark.parametrize("count", [0, 1, 64, 100, 101, 250])
def test_turn_ids_are_the_formatted_sequences(first: int, count: int) -> None:
    assert turn_ids(first, count) == [f"turn-{seq}" for seq in range(first, first + count)]


async def test_a_turn_like_explicit_id_is_refused() -> None:
    """The store names a turn stored without ids ``turn-<sequence>``; an explicit id of
    that form used to share one id-map key with it (two live entries with one id, and a
    KeyError inside the actor on eviction). Such ids are now refused up front."""
    config = VectorStoreConfig(max_entries=4, dimensions=8, max_entry_bytes=100)
    with trio.fail_after(10):
        async with open_store(config, HashingEmbedder(8)) as store:
            for bad in ("turn-1", "turn-0", "turn-007"):
                with pytest.raises(ConfigError, match=f"id '{bad}' has the form turn-<number>"):
                    await store.store_turns([UnifiedMessage.user("a")], ids=[bad])
            assert store.is_empty()
            # Other ids, turn-like or not, are the caller's.
            ok = ["turn-x", "turn-1a", "my-turn-1"]
            stored = await store.store_turns([UnifiedMessage.user(t) for t in "abc"], ids=ok)
            assert stored.ids == ok
            auto = await store.store_turns([UnifiedMessage.user(f"x{i}") for i in range(6)])
            # The dropped head of the over-long batch gets no sequence number.
            assert auto.ids == [f"turn-{n}" for n in range(3, 7)]
            assert len(store) == 4


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True),
    st.lists(st.dictionaries(st.sampled_from("kq"), st.integers(-3, 3) | _text), min_size=6),
    st.booleans(),
)
def test_metadata_set_many_matches_set(
    slots: list[int], docs: list[dict[str, object]], hint: bool
) -> None:
    batch = docs[: len(slots)]
    one_by_one, at_once = MetadataIndex(10), MetadataIndex(10)
    for index in (one_by_one, at_once):
        index.column("k")  # a column that both writes must keep current
        index.set_many([9], [{"k": "old"}])
    for slot, meta in zip(slots, batch, strict=True):
        one_by_one.set(slot, meta)
    consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
    at_once.set_many(slots, batch, consecutive=consecutive if hint else None)
    assert at_once.high == one_by_one.high
    np.testing.assert_array_equal(at_once.live, one_by_one.live)
    for slot in range(10):
        assert at_once.get(slot) == one_by_one.get(slot)
    a, b = at_once.column("k"), one_by_one.column("k")
    np.testing.assert_array_equal(a.kind, b.kind)
    np.testing.assert_array_equal(a.num, b.num)
    assert [a.names[c] if c >= 0 else None for c in a.code.tolist()] == [
        b.names[c] if c >= 0 else None for c in b.code.tolist()
    ]
