"""The LangGraph adapter's pure parts: namespace encoding, items as documents, filters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("langgraph.store.base")

from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import InvalidNamespaceError, MatchCondition

from actors.integrations._langgraph_ops import (
    INDEXED_KEY,
    NS_KEY,
    check_namespace,
    decode_key,
    decode_namespace,
    encode_namespace,
    escape_part,
    index_text,
    item_document,
    item_from_document,
    item_id,
    namespace_matches,
    prefix_filter,
    search_item,
    tokenized_fields,
    translate_filter,
    unescape_part,
)
from protocol import FilterError, parse_filter
from protocol._filters import matches

# Every code point, lone surrogates included, with the escaped characters made likely.
parts = st.text(
    alphabet=st.one_of(st.sampled_from("/%\x00.a*\ud83d0"), st.characters(codec=None)),
    max_size=6,
)
namespaces = st.lists(parts, max_size=4).map(tuple)


@given(parts)
def test_escape_round_trips_and_never_holds_the_separator(part: str) -> None:
    escaped = escape_part(part)
    assert "/" not in escaped
    assert "\x00" not in escaped
    assert not any("\ud800" <= c <= "\udfff" for c in escaped)
    assert unescape_part(escaped) == part


@given(namespaces, namespaces)
def test_the_namespace_encoding_is_injective(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    assert decode_namespace(encode_namespace(a)) == a
    assert (encode_namespace(a) == encode_namespace(b)) == (a == b)


@given(namespaces, parts, namespaces, parts)
def test_item_ids_are_injective(
    ns_a: tuple[str, ...], key_a: str, ns_b: tuple[str, ...], key_b: str
) -> None:
    ns_a, ns_b = ("x", *ns_a), ("x", *ns_b)  # a put's namespace is never empty
    assert decode_key(item_id(ns_a, key_a)) == key_a
    assert (item_id(ns_a, key_a) == item_id(ns_b, key_b)) == ((ns_a, key_a) == (ns_b, key_b))


@given(namespaces, namespaces)
def test_the_prefix_range_selects_exactly_the_tuple_prefixes(
    ns: tuple[str, ...], prefix: tuple[str, ...]
) -> None:
    expected = ns[: len(prefix)] == prefix
    assert encode_namespace(ns).startswith(encode_namespace(prefix)) == expected
    scope = prefix_filter(prefix)
    selected = matches(parse_filter(scope), {NS_KEY: encode_namespace(ns)}) if scope else True
    assert selected == expected


def test_a_separator_inside_a_part_does_not_alias_two_parts() -> None:
    assert encode_namespace(("a/b",)) != encode_namespace(("a", "b"))
    assert item_id(("a",), "b/c") != item_id(("a", "b"), "c")
    assert encode_namespace(("a%002Fb",)) != encode_namespace(("a/b",))
    assert encode_namespace(("a/b",)) == "a%002Fb/"


def test_a_bad_namespace_or_key_is_refused() -> None:
    with pytest.raises(InvalidNamespaceError, match="non-empty tuple"):
        check_namespace(())
    with pytest.raises(InvalidNamespaceError, match="non-empty tuple"):
        check_namespace(["a"])
    with pytest.raises(InvalidNamespaceError, match="is a int"):
        check_namespace(("a", 1))
    with pytest.raises(InvalidNamespaceError, match="key 3 is a int"):
        item_id(("a",), 3)  # type: ignore[arg-type]


def test_match_conditions_follow_langgraph() -> None:
    ns = ("a", "b", "c")
    assert namespace_matches(MatchCondition("prefix", ("a", "*")), ns)
    assert not namespace_matches(MatchCondition("prefix", ("b",)), ns)
    assert namespace_matches(MatchCondition("suffix", ("*", "c")), ns)
    assert not namespace_matches(MatchCondition("suffix", ("a", "b", "c", "d")), ns)
    with pytest.raises(ValueError, match="match_type"):
        namespace_matches(MatchCondition("middle", ("a",)), ns)  # type: ignore[arg-type]


def test_index_text_follows_the_fields() -> None:
    value = {"text": "hello", "tags": ["a", "b"], "n": 3}
    fields = tokenized_fields(["text"])
    assert index_text(value, None, fields) == "hello"
    assert index_text(value, False, fields) is None
    assert index_text(value, ["tags[*]"], fields) == "a\n\nb"
    assert index_text(value, None, None) is None  # the store has no index
    assert index_text(value, ["missing"], fields) is None
    assert index_text({"b": 1, "a": "x"}, None, tokenized_fields(None)) == '{"a": "x", "b": 1}'


def test_an_item_round_trips_through_its_document() -> None:
    t0, t1 = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 3, 4, 5, tzinfo=UTC)
    value = {"lg:ns": "mine", "v:x": 1, "$odd": [1, {"a": None}]}
    doc = item_document(
        ("a/b", "c"), "k/1", value, text=None, created_at=t0, updated_at=t1, dimensions=3
    )
    assert doc.embedding == [0.0, 0.0, 0.0]
    assert doc.text == ""
    assert doc.metadata[INDEXED_KEY] is False
    item = item_from_document(doc)
    assert (item.namespace, item.key, item.value) == (("a/b", "c"), "k/1", value)
    assert (item.created_at, item.updated_at) == (t0, t1)
    hit = search_item(doc, 0.5)
    assert hit.score == 0.5
    assert hit.value == value
    indexed = item_document(
        ("a",), "k", {"t": "x"}, text="x", created_at=t0, updated_at=t0, dimensions=3
    )
    assert indexed.embedding is None
    assert indexed.text == "x"
    assert indexed.metadata[INDEXED_KEY] is True


def test_a_value_that_is_not_a_json_object_is_refused() -> None:
    now = datetime.now(UTC)
    with pytest.raises(ValueError, match="expected a dict"):
        item_document(("a",), "k", [1], text=None, created_at=now, updated_at=now, dimensions=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected str keys"):
        item_document(("a",), "k", {1: 2}, text=None, created_at=now, updated_at=now, dimensions=1)


def test_scalar_and_operator_filters_go_to_the_scan() -> None:
    scan, post = translate_filter({"color": "red", "score": {"$gte": 3, "$lt": 5}, "$k": None})
    assert post is None
    assert scan == {
        "v:color": {"$eq": "red"},
        "v:score": {"$gte": 3, "$lt": 5},
        "v:$k": {"$eq": None},
    }
    assert translate_filter(None) == ({}, None)


def test_nested_and_list_filters_run_after_the_scan() -> None:
    scan, post = translate_filter({"a": {"b": 1, "c": {"$gt": 2}}, "tags": ["x", "y"], "k": 1})
    assert scan == {"v:k": {"$eq": 1}}
    assert post is not None
    assert post({"a": {"b": 1, "c": 3, "d": 0}, "tags": ["x", "y"]})
    assert not post({"a": {"b": 1, "c": 2}, "tags": ["x", "y"]})
    assert not post({"a": {"b": 1, "c": 3}, "tags": ["x"]})
    assert not post({"a": {"b": True, "c": 3}, "tags": ["x", "y"]})  # types never mix
    assert not post({"tags": ["x", "y"]})  # a missing key fails
    assert not post({"a": [1], "tags": ["x", "y"]})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"a": {"$regex": "x"}}, "regex"),
        ({"a": {"$gt": None}}, r"\$gt operand"),
        ({"a": {"b": {"$bogus": 1}}}, "bogus"),
        ({1: 2}, "filter key 1"),
        ({"a": datetime(2026, 1, 1)}, "JSON scalar"),
    ],
)
def test_a_bad_filter_is_refused_before_any_search(spec: dict, expected: str) -> None:
    with pytest.raises(FilterError, match=expected):
        translate_filter(spec)
