"""Every msgspec Struct in ``protocol`` round-trips through msgpack and JSON (design §7).

The types are discovered by walking the ``protocol`` package, so a message type added
anywhere in it is covered without touching this file. Each type's strategy is built from
its fields: ``st.from_type`` is the fallback, and the resolver below handles what
``from_type`` cannot round-trip as is (``Any`` is a JSON value, floats are finite, ints
fit in 64 bits). Abstract bases (no fields, only there to be subclassed) are skipped.
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import enum
import importlib
import math
import pkgutil
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import protocol
import protocol.messages

INT64 = (-(2**63), 2**63 - 1)


def discover_structs() -> list[type[msgspec.Struct]]:
    """Every Struct class defined in a module of the ``protocol`` package."""
    found: dict[str, type[msgspec.Struct]] = {}
    modules = [protocol.__name__] + [
        m.name for m in pkgutil.walk_packages(protocol.__path__, protocol.__name__ + ".")
    ]
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, msgspec.Struct)
                and value.__module__ == name
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


def is_abstract_base(cls: type[msgspec.Struct]) -> bool:
    return not msgspec.structs.fields(cls) and bool(cls.__subclasses__())


STRUCTS = [cls for cls in discover_structs() if not is_abstract_base(cls)]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(*INT64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


_CACHE: dict[Any, st.SearchStrategy[Any]] = {}

#: Fields that hold a live exception, which no codec can carry. They are generated as
#: None here; the list is pinned by a test so that a new one is noticed.
EXCEPTION_FIELDS = {("CompressionReport", "last_error")}


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of type ``tp`` that survive a msgpack and a JSON trip."""
    try:
        cached = _CACHE.get(tp)
    except TypeError:  # an unhashable annotation
        return _resolve(tp)
    if cached is None:
        cached = _CACHE[tp] = _resolve(tp)
    return cached


def _is_exception_type(tp: Any) -> bool:
    parts = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    return any(isinstance(p, type) and issubclass(p, BaseException) for p in parts)


def _resolve(tp: Any) -> st.SearchStrategy[Any]:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return json_values
    if tp is type(None) or tp is None:
        return st.none()
    if tp is bool:
        return st.booleans()
    # Small positive numbers and non-empty strings first: most types validate bounds and
    # names when built, and a value they refuse is a wasted example.
    if tp is int:
        return st.integers(1, 64) | st.integers(*INT64)
    if tp is float:
        return st.floats(0, 1) | st.floats(allow_nan=False, allow_infinity=False)
    if tp is str:
        return st.text(min_size=1, max_size=16) | st.just("")
    if tp is bytes:
        return st.binary(max_size=16)
    if origin is typing.Annotated:
        return strategy_for(args[0])
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in args])
    if origin in (list, collections.abc.Sequence, collections.abc.MutableSequence):
        return st.lists(strategy_for(args[0] if args else Any), max_size=3)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*[strategy_for(a) for a in args])
    if origin in (set, frozenset, collections.abc.Set):
        maker = st.frozensets if origin is frozenset else st.sets
        return maker(strategy_for(args[0]), max_size=3)
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        key, value = args if args else (str, Any)
        return st.dictionaries(strategy_for(key), strategy_for(value), max_size=3)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        # Deferred, so a Struct that (indirectly) holds itself does not recurse here.
        return st.deferred(lambda: struct_strategy(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    return st.from_type(tp)


def _refused(value: Any) -> bool:
    return value is _REFUSED


_REFUSED = object()


def _search_request() -> st.SearchStrategy[Any]:
    # Its validation ties fields together (exactly one of query and vector, fetch_k >= k
    # per kind), so random fields are almost always refused: build valid ones directly.
    cls = protocol.SearchRequest  # type: ignore[attr-defined]
    k = st.integers(1, 8)
    return st.one_of(
        st.builds(cls, query=st.text(min_size=1, max_size=8), k=k),
        st.builds(cls, vector=st.lists(st.floats(-1, 1), min_size=1, max_size=4), k=k),
    )


def _memory_config() -> st.SearchStrategy[Any]:
    # Its validation ties fields together (section_priority only with a system_section
    # placement, instance_id against namespace) and bounds most of them, so random
    # fields are almost always refused: build valid ones directly.
    from protocol.compaction import Offload, SlidingWindow, Summarize

    cls = protocol.MemoryConfig
    strategies = [Offload(turns=2), Summarize(turns=3), SlidingWindow(max_messages=8)]

    def build(placement: str) -> st.SearchStrategy[Any]:
        priority = st.none()
        if placement == "system_section":
            priority = st.none() | st.integers(0, 64)
        return st.builds(
            cls,
            strategies=st.lists(st.sampled_from(strategies), max_size=3),
            instance_id=st.none() | st.text(alphabet="abcdef0123456789", min_size=1, max_size=8),
            top_k=st.integers(1, 64),
            min_similarity=st.none() | st.floats(-1, 1),
            renderer=st.sampled_from(["plain", "xml"]),
            placement=st.just(placement),
            section_priority=priority,
            retriever_name=st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=16),
            recall=struct_strategy(protocol.RecallSettings),
        )

    return st.sampled_from(["before_user", "system_section"]).flatmap(build)


def _document() -> st.SearchStrategy[Any]:
    # Its four times must be aware and its ids None or non-empty, so random fields (naive
    # datetimes, empty strings) were refused for most examples, and the test spent 15 s
    # on rejections: draw valid-leaning fields, and still skip what it refuses.
    cls = protocol.Document
    when = st.none() | st.datetimes(timezones=st.just(dt.UTC))
    name = st.none() | st.text(min_size=1, max_size=8)
    number = st.none() | st.integers(1, 64)

    def build(kwargs: dict[str, Any]) -> Any:
        try:
            return cls(**kwargs)
        except (ValueError, TypeError):
            return _REFUSED

    fields = {
        "text": strategy_for(str),
        "id": name,
        "metadata": strategy_for(dict[str, Any]),
        "source_id": name,
        "embedding": st.none() | st.lists(st.floats(-1, 1), min_size=1, max_size=4),
        "occurred_at": when,
        "conversation": name,
        "expires_at": when,
        "valid_from": when,
        "valid_to": when,
        "version": number,
        "supersedes": number,
    }
    assert set(fields) == {f.name for f in msgspec.structs.fields(cls)}, "a new field"
    return st.fixed_dictionaries(fields).map(build).filter(lambda v: not _refused(v))


#: Hand-written strategies, by class name, for types whose validation random fields
#: rarely pass.
OVERRIDES: dict[str, Any] = {
    "SearchRequest": _search_request,
    "MemoryConfig": _memory_config,
    "Document": _document,
}


def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Build ``cls`` from its fields; values its own validation refuses are skipped."""
    key = ("struct", cls)
    if key not in _CACHE and cls.__name__ in OVERRIDES and hasattr(protocol, cls.__name__):
        _CACHE[key] = OVERRIDES[cls.__name__]()
    if key not in _CACHE:
        fields = {}
        for f in msgspec.structs.fields(cls):
            if _is_exception_type(f.type):
                fields[f.name] = st.none()
            else:
                fields[f.name] = strategy_for(f.type)

        def build(kwargs: dict[str, Any]) -> Any:
            try:
                return cls(**kwargs)
            except (ValueError, TypeError):
                # The type's own validation (a bound, a JSON check) refused these values.
                return _REFUSED

        _CACHE[key] = st.fixed_dictionaries(fields).map(build).filter(lambda v: not _refused(v))
    return _CACHE[key]


def test_exception_fields_are_known() -> None:
    """A field that holds a live exception cannot round-trip; each one is a deliberate,
    documented choice (design §7 asks every message to round-trip), listed here."""
    found = {
        (cls.__name__, f.name)
        for cls in STRUCTS
        for f in msgspec.structs.fields(cls)
        if _is_exception_type(f.type)
    }
    assert found == EXCEPTION_FIELDS


def test_discovery_finds_the_known_messages() -> None:
    names = {cls.__name__ for cls in STRUCTS}
    for expected in ("UnifiedMessage", "StoreTurns", "TurnsStored", "RetrievalReport", "ToolCall"):
        assert expected in names, f"{expected} was not discovered among {sorted(names)}"
    assert "Msg" not in names, "the abstract base Msg should be skipped"


def _equal(a: Any, b: Any) -> bool:
    # -0.0 == 0.0 is fine; a float that came back as the same value is what matters.
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda c: c.__qualname__)
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_struct_round_trips(cls: type[msgspec.Struct], data: st.DataObject) -> None:
    value = data.draw(struct_strategy(cls), label=cls.__name__)
    packed = msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=cls)
    assert _equal(packed, value), f"msgpack: {packed!r} != {value!r}"
    via_json = msgspec.json.decode(msgspec.json.encode(value), type=cls)
    assert _equal(via_json, value), f"json: {via_json!r} != {value!r}"


@given(arguments=json_values)
def test_tool_call_arguments_round_trip_any_json(arguments: Any) -> None:
    call = protocol.ToolCall(id="c1", name="search", arguments=arguments)
    message = protocol.UnifiedMessage(role="assistant", content=[call])
    for codec in (msgspec.msgpack, msgspec.json):
        back = codec.decode(codec.encode(message), type=protocol.UnifiedMessage)
        assert back == message


@pytest.mark.parametrize(
    "union",
    [
        protocol.messages.StoreRequest,
        protocol.messages.StoreReply,
        protocol.ContentBlock,
    ],
    ids=["StoreRequest", "StoreReply", "ContentBlock"],
)
@given(data=st.data())
def test_tagged_unions_decode_to_the_right_variant(union: Any, data: st.DataObject) -> None:
    value = data.draw(strategy_for(union))
    for codec in (msgspec.msgpack, msgspec.json):
        back = codec.decode(codec.encode(value), type=union)
        assert type(back) is type(value)
        assert back == value
