"""The store's batched write path agrees with the plain per-entry rules it replaces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actors._embedders import as_matrix, normalize_rows
from actors._prepare import check_turns, exact_msgpack, exact_msgpack_many, unit_rows
from protocol import (
    ConfigError,
    EmbeddingError,
    EntryTooLarge,
    StoreTurns,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    payload_bytes,
    projection,
)

DIM = 8

_floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
_batches = hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.just(DIM)), elements=_floats32)


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


_text = st.text(max_size=12)
_int64 = st.integers(-(2**63), 2**63 - 1)
_blocks = st.one_of(
    st.builds(Text, text=_text),
    st.builds(Thinking, text=_text),
    st.builds(ToolCall, id=_text, name=_text, arguments=st.none() | _int64),
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


def _check_turns_reference(
    turns: list[UnifiedMessage], texts: list[str] | None, cap: int, keep_at_most: int
) -> object:
    """SPEC §3 steps 1 and 2, one turn at a time."""
    for i, turn in enumerate(turns):
        size = payload_bytes(turn)
        if texts is not None:
            size += len(texts[i].encode("utf-8", "surrogatepass"))
        if size > cap:
            return ("too large", size, i)
    head = len(turns) - min(len(turns), keep_at_most)
    kept = [projection(t) for t in turns[head:]] if texts is None else texts[head:]
    return (turns[head:], kept, head)


@settings(max_examples=300, deadline=None)
@given(_turns, st.data(), st.integers(0, 40), st.integers(1, 8))
def test_check_turns_matches_the_per_turn_rules(
    turns: list[UnifiedMessage], data: st.DataObject, cap: int, max_entries: int
) -> None:
    texts = data.draw(st.none() | st.lists(_text, min_size=len(turns), max_size=len(turns)))
    request = StoreTurns(turns=turns, namespace="n", source="s", metadata={}, texts=texts)
    expected = _check_turns_reference(turns, texts, cap, max_entries)
    if isinstance(expected, tuple) and expected[0] == "too large":
        with pytest.raises(EntryTooLarge) as raised:
            check_turns(request, max_entry_bytes=cap, max_entries=max_entries)
        assert expected == ("too large", raised.value.bytes, raised.value.index)
        return
    batch = check_turns(request, max_entry_bytes=cap, max_entries=max_entries)
    assert expected == (batch.survivors, batch.texts, batch.dropped)
    assert batch.given == (texts is not None)


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
