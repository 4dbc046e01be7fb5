"""The filter language: parsing, the reference semantics, and the compiled numpy masks
against the reference on random metadata and random filters."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._inmemory.filtering import MetadataIndex, compile_filter
from protocol import FilterError
from protocol._filters import (
    And,
    Eq,
    Exists,
    Filter,
    Gt,
    Gte,
    In,
    Lt,
    Lte,
    Ne,
    Nin,
    Not,
    Or,
    filter_option,
    matches,
    parse_filter,
)

# --- parsing -------------------------------------------------------------------------


def test_plain_equality_and_implicit_and() -> None:
    assert parse_filter({"a": 1}) == Eq(key="a", value=1)
    assert parse_filter({"a": 1, "b": "x"}) == And(
        filters=[Eq(key="a", value=1), Eq(key="b", value="x")]
    )
    assert parse_filter({}) == And(filters=[])


def test_every_operator_parses_to_its_node() -> None:
    spec = {
        "a": {"$eq": 1, "$ne": 2, "$gt": 0, "$gte": 1, "$lt": 5, "$lte": 4},
        "b": {"$in": ["x", None], "$nin": [True], "$exists": True},
        "c": {"$not": {"$gt": 3}},
        "$or": [{"d": None}, {"$not": {"e": 1.5}}],
        "$and": [{"f": "y"}],
    }
    assert parse_filter(spec) == And(
        filters=[
            And(
                filters=[
                    Eq(key="a", value=1),
                    Ne(key="a", value=2),
                    Gt(key="a", value=0),
                    Gte(key="a", value=1),
                    Lt(key="a", value=5),
                    Lte(key="a", value=4),
                ]
            ),
            And(
                filters=[
                    In(key="b", values=["x", None]),
                    Nin(key="b", values=[True]),
                    Exists(key="b", value=True),
                ]
            ),
            Not(filter=Gt(key="c", value=3)),
            Or(filters=[Eq(key="d", value=None), Not(filter=Eq(key="e", value=1.5))]),
            And(filters=[Eq(key="f", value="y")]),
        ]
    )


def test_a_tree_passes_through() -> None:
    tree = Exists(key="a")
    assert parse_filter(tree) is tree


def test_a_search_filter_option_is_none_a_dict_or_a_tree() -> None:
    tree = Exists(key="a")
    assert filter_option(None) is None
    assert filter_option(tree) is tree
    assert filter_option({"a": 1}) == Eq(key="a", value=1)
    # A tree inside a dict is taken as it is.
    assert filter_option({"$or": [tree, {"b": 2}]}) == Or(filters=[tree, Eq(key="b", value=2)])
    with pytest.raises(FilterError, match="filter is a list; expected a dict or a Filter tree"):
        filter_option([{"a": 1}])


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"a": {"$regex": "x"}}, "unknown filter operator '$regex' for key 'a'"),
        ({"$nor": [{"a": 1}]}, "unknown filter operator '$nor'"),
        ({"$gt": 1}, "$gt needs a key"),
        ({"a": {"$gt": True}}, "$gt operand is True (bool)"),
        ({"a": {"$lt": None}}, "$lt operand is None"),
        ({"a": {"$gte": [1]}}, "$gte operand is [1] (list)"),
        ({"a": {"$in": 3}}, "$in operand is 3 (int); expected a list"),
        ({"a": {"$nin": "ab"}}, "$nin operand is 'ab' (str); expected a list"),
        ({"a": {"$in": [[1]]}}, "$in operand is [1] (list); expected a JSON scalar"),
        ({"a": {"$exists": 1}}, "$exists operand is 1 (int); expected a bool"),
        ({"a": {"$eq": {"b": 1}}}, "$eq operand is {'b': 1} (dict)"),
        ({"a": {"$eq": float("inf")}}, "expected a finite number"),
        ({"a": [1, 2]}, 'use {"$in": [...]}'),
        ({"a": {"b": 1}}, "nested keys are not supported"),
        ({"a": {}}, "empty dict"),
        ({"$and": {"a": 1}}, "$and operand is {'a': 1} (dict); expected a list"),
        ({"$or": [1]}, "filter is 1 (int); expected a dict"),
        ({1: 2}, "filter key 1 is a int"),
        ("a", "filter is 'a' (str); expected a dict"),
        ({"a": {"$eq": {1, 2}}}, "(set)"),
    ],
)
def test_malformed_filters_raise_a_clear_error(spec: Any, needle: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(spec)
    assert needle in str(info.value)


def test_nodes_validate_when_built_directly() -> None:
    with pytest.raises(FilterError, match="expected a number"):
        Gt(key="a", value=False)
    with pytest.raises(FilterError, match="starts with '\\$'"):
        Eq(key="$a", value=1)
    with pytest.raises(FilterError, match="expected a filter node"):
        And(filters=[{"a": 1}])  # type: ignore[list-item]
    with pytest.raises(FilterError, match="expected a filter node"):
        Not(filter="a")  # type: ignore[arg-type]


def test_deep_nesting_is_refused() -> None:
    spec: dict[str, Any] = {"a": 1}
    for _ in range(40):
        spec = {"$not": spec}
    with pytest.raises(FilterError, match="nested deeper"):
        parse_filter(spec)


def test_tree_round_trips_through_msgpack_and_json() -> None:
    tree = parse_filter(
        {"a": {"$in": [1, "x", None, 2.5, True]}, "$or": [{"b": {"$exists": False}}]}
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(tree), type=Filter) == tree
    assert msgspec.json.decode(msgspec.json.encode(tree), type=Filter) == tree


def test_decoding_a_bad_tree_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"op":"gt","key":"a","value":true}', type=Filter)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"op":"regex","key":"a","value":"x"}', type=Filter)


# --- reference semantics -------------------------------------------------------------


def ok(spec: dict[str, Any], metadata: dict[str, Any]) -> bool:
    return matches(parse_filter(spec), metadata)


def test_missing_key_fails_comparisons_and_passes_negations() -> None:
    md: dict[str, Any] = {"b": 1}
    for op in ("$eq", "$gt", "$gte", "$lt", "$lte"):
        assert not ok({"a": {op: 1}}, md)
    assert not ok({"a": {"$in": [1, None]}}, md)
    assert ok({"a": {"$ne": 1}}, md)
    assert ok({"a": {"$nin": [1]}}, md)
    assert ok({"a": {"$exists": False}}, md)
    assert not ok({"a": None}, md)


def test_null_is_a_value() -> None:
    assert ok({"a": None}, {"a": None})
    assert ok({"a": {"$exists": True}}, {"a": None})
    assert not ok({"a": {"$gt": 0}}, {"a": None})


def test_types_never_mix() -> None:
    assert not ok({"a": 1}, {"a": "1"})
    assert not ok({"a": "1"}, {"a": 1})
    assert not ok({"a": {"$gt": "0"}}, {"a": 5})
    assert not ok({"a": {"$lt": 10}}, {"a": "5"})
    assert ok({"a": {"$ne": 1}}, {"a": "1"})


def test_bool_is_not_a_number() -> None:
    assert not ok({"a": 1}, {"a": True})
    assert not ok({"a": True}, {"a": 1})
    assert not ok({"a": 0}, {"a": False})
    assert not ok({"a": {"$gte": 0}}, {"a": True})
    assert not ok({"a": {"$in": [1]}}, {"a": True})
    assert ok({"a": True}, {"a": True})


def test_numbers_compare_exactly_across_int_and_float() -> None:
    assert ok({"a": 1}, {"a": 1.0})
    assert ok({"a": {"$gt": 2**53}}, {"a": 2**53 + 1})
    assert not ok({"a": float(2**53)}, {"a": 2**53 + 1})
    assert ok({"a": {"$lt": 2**53 + 1}}, {"a": float(2**53)})


def test_strings_order_by_code_point() -> None:
    assert ok({"a": {"$gt": "Z"}}, {"a": "a"})
    assert ok({"a": {"$gt": "a"}}, {"a": "a\x00"})
    assert ok({"a": {"$lt": "é"}}, {"a": "z"})


def test_keys_are_literal_and_dots_mean_nothing() -> None:
    assert ok({"a.b": 1}, {"a.b": 1})
    assert not ok({"a.b": 1}, {"a": {"b": 1}})


def test_lists_and_objects_match_no_scalar() -> None:
    md: dict[str, Any] = {"tags": ["x", "y"], "obj": {"k": 1}}
    assert not ok({"tags": "x"}, md)
    assert not ok({"tags": {"$in": ["x"]}}, md)
    assert not ok({"obj": {"$gt": 0}}, md)
    assert ok({"tags": {"$ne": "x"}}, md)
    assert ok({"obj": {"$exists": True}}, md)


def test_empty_and_or() -> None:
    assert matches(And(filters=[]), {})
    assert not matches(Or(filters=[]), {"a": 1})
    assert not ok({"a": {"$in": []}}, {"a": 1})
    assert ok({"a": {"$nin": []}}, {"a": 1})


# --- the compiled mask against the reference -----------------------------------------

KEY = st.sampled_from(["a", "b", "a.b"])
# Few distinct strings and numbers, so that operands often hit stored values exactly.
_STRINGS = st.sampled_from(["", "x", "xy", "x\x00", "é"]) | st.text(max_size=1)
_NUMBERS = (
    st.integers(-3, 3)
    | st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**60, 2**60 + 1])
    | st.sampled_from([0.5, -0.0, 1.0, 2.5, float(2**53), 2.0**60])
    | st.floats(-4, 4, allow_nan=False, allow_infinity=False, width=16)
)
SCALARS = st.none() | st.booleans() | _NUMBERS | _STRINGS
VALUES = st.one_of(
    SCALARS, SCALARS, SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(KEY, SCALARS)
)
METADATA = st.dictionaries(KEY, VALUES, max_size=4)
ORDERABLE = _NUMBERS | _STRINGS

LEAVES: st.SearchStrategy[Filter] = st.one_of(
    st.builds(Eq, key=KEY, value=SCALARS),
    st.builds(Ne, key=KEY, value=SCALARS),
    st.builds(Gt, key=KEY, value=ORDERABLE),
    st.builds(Gte, key=KEY, value=ORDERABLE),
    st.builds(Lt, key=KEY, value=ORDERABLE),
    st.builds(Lte, key=KEY, value=ORDERABLE),
    st.builds(In, key=KEY, values=st.lists(SCALARS, max_size=3)),
    st.builds(Nin, key=KEY, values=st.lists(SCALARS, max_size=3)),
    st.builds(Exists, key=KEY, value=st.booleans()),
)
FILTERS: st.SearchStrategy[Filter] = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.builds(And, filters=st.lists(children, max_size=3)),
        st.builds(Or, filters=st.lists(children, max_size=3)),
        st.builds(Not, filter=children),
    ),
    max_leaves=6,
)
CAPACITY = 8
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, CAPACITY - 1), METADATA),
        st.tuples(st.just("remove"), st.integers(0, CAPACITY - 1)),
        st.tuples(st.just("query"), FILTERS),
    ),
    max_size=25,
)


@given(tree=FILTERS)
def test_random_trees_round_trip(tree: Filter) -> None:
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(tree), type=Filter) == tree
    assert msgspec.json.decode(msgspec.json.encode(tree), type=Filter) == tree


def expected_mask(model: dict[int, dict[str, Any]], filter: Filter, high: int) -> list[bool]:
    return [slot in model and matches(filter, model[slot]) for slot in range(high)]


@given(ops=OPS, final=st.lists(FILTERS, min_size=1, max_size=4))
def test_compiled_mask_agrees_with_the_reference(
    ops: list[tuple[Any, ...]], final: list[Filter]
) -> None:
    # Two columns at most, so columns are built, updated at each write, dropped and
    # rebuilt as the filters move between keys.
    index = MetadataIndex(CAPACITY, max_columns=2)
    model: dict[int, dict[str, Any]] = {}
    for op in ops:
        if op[0] == "set":
            _, slot, metadata = op
            index.set(slot, metadata)
            model[slot] = metadata
        elif op[0] == "remove":
            index.remove(op[1])
            model.pop(op[1], None)
        else:
            mask = index.mask(op[1])
            assert mask.tolist() == expected_mask(model, op[1], index.high)
    for filter in final:
        mask = index.mask(compile_filter(filter), CAPACITY)
        assert mask.dtype == np.bool_
        assert mask.tolist() == expected_mask(model, filter, CAPACITY)


@given(
    rows=st.lists(st.dictionaries(KEY, SCALARS, max_size=3), min_size=CAPACITY, max_size=CAPACITY),
    leaves=st.lists(LEAVES, min_size=10, max_size=10),
)
def test_every_leaf_agrees_with_the_reference_on_scalars(
    rows: list[dict[str, Any]], leaves: list[Filter]
) -> None:
    # Many comparisons per example, against scalar values only: this is where the
    # type and exactness rules live.
    index = MetadataIndex(CAPACITY)
    for slot, metadata in enumerate(rows):
        index.set(slot, metadata)
    model = dict(enumerate(rows))
    for leaf in leaves:
        assert index.mask(leaf).tolist() == expected_mask(model, leaf, CAPACITY)


def test_strings_freed_from_a_column_are_forgotten() -> None:
    index = MetadataIndex(4)
    for i in range(100):
        index.set(i % 4, {"a": f"value-{i}"})
        assert index.mask(parse_filter({"a": {"$gte": "value-"}})).sum() == min(i + 1, 4)
    column = index.column("a")
    assert len(column.codes) == 4
    assert len(column.names) <= 8


def test_mask_over_many_slots() -> None:
    n = 20_000
    index = MetadataIndex(n)
    for slot in range(n):
        index.set(slot, {"n": slot, "tag": f"t{slot % 7}", "flag": slot % 2 == 0})
    tree = parse_filter({"n": {"$gte": 100, "$lt": 1100}, "tag": {"$in": ["t1", "t2"]}})
    mask = index.mask(tree)
    expected = [100 <= s < 1100 and s % 7 in (1, 2) for s in range(n)]
    assert mask.tolist() == expected
    index.remove(101)
    index.set(102, {"n": 5})
    expected[101] = expected[102] = False
    assert index.mask(tree).tolist() == expected


def test_index_validates_its_input() -> None:
    with pytest.raises(Exception, match="capacity is 0"):
        MetadataIndex(0)
    index = MetadataIndex(2)
    with pytest.raises(Exception, match="slot is 2; expected 0 <= slot < 2"):
        index.set(2, {})
    with pytest.raises(Exception, match="high is 3"):
        index.mask(Exists(key="a"), 3)
