"""The write path's fast paths give what the general checks give, value for value and
error for error (docs/pages/reference/store.md, "On PostgreSQL"; benches/README.md, "pg at scale").

Each fast path is compared with the code it skips, on inputs built to fool it: ints,
bools and numpy scalars among floats, float subclasses, strings whose msgpack form is as
long as a float's, NaN and inf, list subclasses; and through the stores, with bad input
still refused with the error the slow path names.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
import trio
from extras import require_extra
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import HashingEmbedder, open_store
from actors._retrieval.bm25 import token_count, token_counts
from actors._store.precomputed import _float_matrix
from protocol import Document, EmbeddingError, JsonError, VectorStoreConfig
from protocol._documents import SearchRequest, _component
from protocol._json import check_json

DIM = 8


class _Float(float):
    """A float subclass whose value is not what ``float()`` of it says."""

    def __float__(self) -> float:
        return 2.5


class _List(list[Any]):
    """A list subclass that iterates otherwise than its storage."""

    def __iter__(self) -> Any:
        return iter([0.0] * len(self))


def _slow(items: list[Any]) -> list[float]:
    """The per-component path of ``SearchRequest._vector_list``."""
    out = [_component(i, x, "vector") for i, x in enumerate(items)]
    if not out:
        raise EmbeddingError("vector is empty; expected at least one number")
    return out


_ITEMS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.just(_Float(1.0)),
    st.builds(np.float64, st.floats(allow_nan=False, width=32)),
    st.builds(np.float32, st.floats(allow_nan=False, width=32)),
    st.text(min_size=8, max_size=8),  # 9 bytes in msgpack, as a float is
    st.just(None),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ITEMS, max_size=40), st.booleans())
def test_vector_list_fast_path_matches_the_component_checks(items: list[Any], tup: bool) -> None:
    given_items: Any = tuple(items) if tup else items
    try:
        expected: list[float] | str = _slow(items)
    except EmbeddingError as error:
        expected = str(error)
    try:
        got: list[float] | str = SearchRequest._vector_list(given_items)
    except EmbeddingError as error:
        got = str(error)
    assert got == expected
    if isinstance(got, list):
        assert got is not items and all(type(x) is float for x in got)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=64), min_size=1, max_size=20), st.integers(0, 19))
def test_a_float_list_is_copied_and_checked(values: list[float], where: int) -> None:
    doc_values = list(values)
    try:
        doc = Document(text="x", embedding=doc_values)
    except EmbeddingError:
        assert not all(math.isfinite(v) for v in values)
        return
    assert doc.embedding == values and doc.embedding is not doc_values


def _rows(rng: np.random.Generator, count: int, dim: int) -> list[list[float]]:
    return rng.standard_normal((count, dim)).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("count", "dim"), [(1, 1), (15, 15), (16, 16), (3, 70_000), (70_000, 2)])
def test_float_matrix_reads_every_float(count: int, dim: int) -> None:
    rows = _rows(np.random.default_rng(count), count, dim)
    matrix = _float_matrix(rows, dim)
    assert matrix is not None and matrix.dtype == np.float64
    assert np.array_equal(matrix, np.array(rows, dtype=np.float64))


@pytest.mark.parametrize(
    "bad",
    [1, True, float("nan"), float("inf"), "abcdefgh", None, np.float64(0.5), _Float(0.5), [0.5]],
)
@pytest.mark.parametrize("where", [(0, 0), (3, 5), (9, 7)])
def test_float_matrix_leaves_anything_else_to_the_general_path(
    bad: Any, where: tuple[int, int]
) -> None:
    rows = _rows(np.random.default_rng(1), 10, DIM)
    rows[where[0]][where[1]] = bad
    assert _float_matrix(rows, DIM) is None


def test_float_matrix_refuses_a_list_subclass_row() -> None:
    rows = _rows(np.random.default_rng(2), 4, DIM)
    rows[2] = _List(rows[2])
    assert _float_matrix(rows, DIM) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x2FF)), max_size=6))
def test_token_counts_match_token_count(texts: list[str]) -> None:
    assert token_counts(texts) == [token_count(t) for t in texts]


def test_token_counts_on_every_ascii_character() -> None:
    text = "".join(map(chr, range(128))) * 3
    assert token_counts([text, text.upper(), "a_b c-d e1 2f"]) == [
        token_count(text),
        token_count(text.upper()),
        token_count("a_b c-d e1 2f"),
    ]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"a": float("nan")}, "holds the float nan"),
        ({"a": 2**64}, "outside"),
        ({1: "x"}, "has the key 1"),
        ({"a": {1, 2}}, "holds a set"),
        ({"a": (1,)}, "holds a tuple"),
        ({"a": b"x"}, "holds a bytes"),
    ],
)
def test_flat_metadata_errors_are_the_general_walks(value: Any, needle: str) -> None:
    with pytest.raises(JsonError, match=needle):
        check_json(value, what="metadata")


def test_a_flat_dict_at_the_depth_limit_is_still_too_deep() -> None:
    """The fast path for flat dicts keeps the walk's depth limit: a flat dict's items
    sit one level below it, so at the limit the dict is refused, just under it not."""

    def chain(depth: int) -> dict[str, Any]:
        value: dict[str, Any] = {"leaf": 1}
        for _ in range(depth):
            value = {"down": value}
        return value

    check_json(chain(63))  # the leaf dict at depth 63, its item at 64
    with pytest.raises(JsonError, match="nested deeper than 64"):
        check_json(chain(64))


async def test_bad_batches_are_refused_as_before_through_the_store() -> None:
    config = VectorStoreConfig(dimensions=DIM, max_entries=100, max_entry_bytes=4096)
    good = [0.5] * DIM
    async with open_store(config, HashingEmbedder(DIM)) as store:
        with trio.fail_after(20):
            # A bad width is named, among documents whose vectors take the fast path.
            narrow = Document(text="narrow", id="n", embedding=[0.5] * (DIM - 1))
            batch = [Document(text=f"t{i}", id=f"i{i}", embedding=good) for i in range(5)]
            with pytest.raises(EmbeddingError, match=f"has {DIM - 1} floats"):
                await store.add_documents([*batch, narrow])
            # A list mutated after the Document checked it is checked again.
            mutated = Document(text="m", id="m", embedding=list(good))
            assert mutated.embedding is not None
            mutated.embedding[3] = float("nan")
            with pytest.raises(EmbeddingError, match="non-finite"):
                await store.add_documents([*batch, mutated])
            assert store.is_empty()
            await store.add_documents(batch)
            assert len(store) == 5


def _pg_modules() -> None:
    """The pg extra's modules (no server needed): skipped without the extra, unless the
    pg tests are required."""
    require_extra("pg")


def test_vector_binary_is_the_row_form() -> None:
    _pg_modules()
    from actors._pg.schema import vector_binary

    rows = np.random.default_rng(3).standard_normal((7, 5)).astype(np.float32)
    big = np.ascontiguousarray(rows, dtype=">f4")
    assert vector_binary(rows) == [struct.pack(">hh", 5, 0) + row.tobytes() for row in big]
    assert vector_binary(np.zeros((0, 5), dtype=np.float32)) == []


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"tenant": 3, "kind": "note"},
        {"f": 0.1, "i": 3},
        {"n": [0.1, {"x": 1e23}]},
        {"nul": "a\x00b"},
        {"lone": "a\ud83d"},
        {"\ud83d": 1},
        {"unicode": "héllo wörld", "emoji": "\U0001f600"},
        {"esc": "back\\u0000slash"},
        {"soh": "a\x01"},  # the escapes of jsonb_string: the filter text differs
        {"\x01": 1},
        {"hangul": "\ud7ff"},
        {"esc": "back\\u0001slash"},
    ],
)
def test_jsonb_reuses_the_compact_json_only_where_it_is_the_filter_text(
    metadata: dict[str, Any],
) -> None:
    _pg_modules()
    from actors._pg.schema import filter_json, jsonb_binary
    from protocol.checks import metadata_json

    compact = metadata_json(metadata)
    assert jsonb_binary(metadata, compact) == b"\x01" + filter_json(metadata).encode("utf-8")
