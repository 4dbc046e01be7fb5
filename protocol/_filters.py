"""The metadata filter language: a msgspec-typed tree, its parser and its reference
evaluator.

A filter is written as a dict, Mongo-style, and parsed once into a tree of frozen
Structs (:data:`Filter`). The tree, not the dict, is what the backends see: the
in-memory store compiles it into a numpy mask (``actors._inmemory.filtering``), and a SQL
backend translates it node by node. Because every node is a typed Struct, the tree
round-trips through msgpack and JSON (the ``op`` tag names the node).

Syntax (:func:`parse_filter`):

- ``{"key": value}`` is ``{"key": {"$eq": value}}``;
- ``{"key": {"$op": operand, ...}}`` with the operators ``$eq $ne $gt $gte $lt $lte
  $in $nin $exists`` and a field-level ``$not`` (``{"key": {"$not": {"$gt": 1}}}``);
  several operators on one key are ANDed;
- ``{"$and": [f, ...]}``, ``{"$or": [f, ...]}``, ``{"$not": f}``;
- several entries in one dict are ANDed; ``{}`` matches everything.

Semantics (the reference is :func:`matches`; every backend must agree with it):

- **Keys are literal top-level metadata keys.** A dot has no meaning: ``"a.b"`` names the
  key ``"a.b"``, never ``metadata["a"]["b"]``. Keys that start with ``$`` cannot be
  filtered on, because they would read as operators.
- **Operands are JSON scalars**: ``None``, ``bool``, ``int``, finite ``float`` or
  ``str``. ``$gt $gte $lt $lte`` take a number or a str (not a bool or None). ``$in`` and
  ``$nin`` take a list of scalars (an empty ``$in`` matches nothing). ``$exists`` takes a
  bool. Anything else raises :class:`~protocol.FilterError`; no operand is ever coerced.
- **A missing key** fails every comparison (``$eq $gt $gte $lt $lte $in``), and so
  passes their negations: ``$ne`` is exactly ``$not $eq`` and ``$nin`` is exactly
  ``$not $in``. ``{"k": None}`` matches a key that is present with the value null, not
  a missing key; use ``{"k": {"$exists": False}}`` for that.
- **Types never mix.** A str never equals or orders against a number (``"1" != 1``),
  and a bool is not a number (``True != 1``, and ``{"$gt": 0}`` does not match ``True``).
  Numbers compare by exact value across int and float (``1 == 1.0``), including ints
  beyond 2**53. Strings order by Unicode code point (Python's ``<``; in PostgreSQL,
  ``COLLATE "C"``). A comparison across types is false, not an error.
- **Lists and objects in metadata** equal no scalar operand and never order, so only
  ``$exists``, ``$ne`` and ``$nin`` match them.
- ``$and []`` matches everything and ``$or []`` matches nothing.

Limits (the same for every backend, so both refuse the same filters, and checked
before any backend sees the filter, :func:`check_filter`):

- **depth**: at most :data:`MAX_FILTER_DEPTH` (32) nodes on any path from the root to a
  leaf, whatever form the filter came in (a dict, a tree built by hand, a tree decoded
  from JSON or msgpack, or a dict holding trees). ``{"a": 1}`` is one level,
  ``{"$not": {"a": 1}}`` two, and a dict of several entries (or a key with several
  operators) adds one level for the ``$and`` it stands for;
- **size**: at most :data:`MAX_FILTER_NODES` (10,000) nodes in all. Each node costs a
  pass over the slots in memory and up to four bound parameters in SQL, where one
  statement takes at most 65,535: the limit keeps every filter inside both.

Past either limit, :class:`~protocol.FilterError` names the size seen and the limit.
Operand lists (``$in``, ``$nin``) are bound as one array each, so their length is not
limited.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

import msgspec

from ._checks import shown
from ._errors import FilterError

Scalar = str | int | float | bool | None
Orderable = str | int | float

MAX_FILTER_DEPTH = 32
"""The most nodes on one root-to-leaf path of a filter (see the module docstring)."""
MAX_FILTER_NODES = 10_000
"""The most nodes in one filter (see the module docstring)."""


def _check_key(key: object) -> None:
    if not isinstance(key, str):
        raise FilterError(f"filter key {shown(key)} is a {type(key).__name__}; expected a str")
    if key.startswith("$"):
        raise FilterError(
            f"filter key {shown(key)} starts with '$' but is not an operator; expected a metadata "
            "key (metadata keys that start with '$' cannot be filtered on)"
        )


def _check_scalar(op: str, value: object) -> Scalar:
    """``value`` if it is a JSON scalar (a filter operand), else a :class:`FilterError`."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"{op} operand is {value!r}; expected a finite number")
        return value
    raise FilterError(
        f"{op} operand is {shown(value)} ({type(value).__name__}); expected a JSON scalar "
        "(None, bool, int, float or str)"
    )


def _check_orderable(op: str, value: object) -> Orderable:
    """``value`` if it is a number (not bool) or a str, else a :class:`FilterError`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FilterError(
            f"{op} operand is {shown(value)} ({type(value).__name__}); expected a number "
            "(int or float, not bool) or a str"
        )
    _check_scalar(op, value)
    return value


def _check_scalars(op: str, values: object) -> list[Scalar]:
    """``values`` if it is a list of JSON scalars (``$in``, ``$nin``), else a
    :class:`FilterError`."""
    if not isinstance(values, list):
        raise FilterError(
            f"{op} operand is {shown(values)} ({type(values).__name__}); "
            "expected a list of JSON scalars"
        )
    return [_check_scalar(op, item) for item in values]


def _check_exists(value: object) -> bool:
    if not isinstance(value, bool):
        raise FilterError(
            f"$exists operand is {shown(value)} ({type(value).__name__}); expected a bool"
        )
    return value


class FilterNode(msgspec.Struct, frozen=True, tag_field="op"):
    """Base of every filter node. Nodes validate themselves when built."""


class Eq(FilterNode, frozen=True, kw_only=True, tag="eq"):
    """``metadata[key] == value``, with the type rules of the module docstring."""

    key: str
    value: Scalar

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_scalar("$eq", self.value)


class Ne(FilterNode, frozen=True, kw_only=True, tag="ne"):
    """Exactly ``Not(Eq(key, value))``: a missing key matches."""

    key: str
    value: Scalar

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_scalar("$ne", self.value)


class Gt(FilterNode, frozen=True, kw_only=True, tag="gt"):
    """``metadata[key] > value``; false for a missing key or another type."""

    key: str
    value: Orderable

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_orderable("$gt", self.value)


class Gte(FilterNode, frozen=True, kw_only=True, tag="gte"):
    """``metadata[key] >= value``; false for a missing key or another type."""

    key: str
    value: Orderable

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_orderable("$gte", self.value)


class Lt(FilterNode, frozen=True, kw_only=True, tag="lt"):
    """``metadata[key] < value``; false for a missing key or another type."""

    key: str
    value: Orderable

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_orderable("$lt", self.value)


class Lte(FilterNode, frozen=True, kw_only=True, tag="lte"):
    """``metadata[key] <= value``; false for a missing key or another type."""

    key: str
    value: Orderable

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_orderable("$lte", self.value)


class In(FilterNode, frozen=True, kw_only=True, tag="in"):
    """``metadata[key]`` equals one of ``values``; an empty list matches nothing."""

    key: str
    values: list[Scalar]

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_scalars("$in", self.values)


class Nin(FilterNode, frozen=True, kw_only=True, tag="nin"):
    """Exactly ``Not(In(key, values))``: a missing key matches."""

    key: str
    values: list[Scalar]

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_scalars("$nin", self.values)


class Exists(FilterNode, frozen=True, kw_only=True, tag="exists"):
    """The key is present (with any value, null included), or absent when ``value`` is
    false."""

    key: str
    value: bool = True

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_exists(self.value)


class And(FilterNode, frozen=True, kw_only=True, tag="and"):
    """Every child matches; an empty list matches everything."""

    filters: list[Filter]

    def __post_init__(self) -> None:
        _check_children("$and", self.filters)


class Or(FilterNode, frozen=True, kw_only=True, tag="or"):
    """Some child matches; an empty list matches nothing."""

    filters: list[Filter]

    def __post_init__(self) -> None:
        _check_children("$or", self.filters)


class Not(FilterNode, frozen=True, kw_only=True, tag="not"):
    """The child does not match."""

    filter: Filter

    def __post_init__(self) -> None:
        if not isinstance(self.filter, FilterNode):
            raise FilterError(
                f"$not operand is a {type(self.filter).__name__}; expected a filter node"
            )


Filter = Eq | Ne | Gt | Gte | Lt | Lte | In | Nin | Exists | And | Or | Not


def _check_children(op: str, filters: object) -> None:
    if not isinstance(filters, list):
        raise FilterError(
            f"{op} operand is a {type(filters).__name__}; expected a list of filter nodes"
        )
    for i, child in enumerate(filters):
        if not isinstance(child, FilterNode):
            raise FilterError(f"{op} item {i} is a {type(child).__name__}; expected a filter node")


# --- parsing -------------------------------------------------------------------------

# Each operand is checked (and typed) as its node's __post_init__ checks it.
_COMPARISONS: dict[str, Callable[[str, object], Filter]] = {
    "$eq": lambda key, v: Eq(key=key, value=_check_scalar("$eq", v)),
    "$ne": lambda key, v: Ne(key=key, value=_check_scalar("$ne", v)),
    "$gt": lambda key, v: Gt(key=key, value=_check_orderable("$gt", v)),
    "$gte": lambda key, v: Gte(key=key, value=_check_orderable("$gte", v)),
    "$lt": lambda key, v: Lt(key=key, value=_check_orderable("$lt", v)),
    "$lte": lambda key, v: Lte(key=key, value=_check_orderable("$lte", v)),
    "$in": lambda key, v: In(key=key, values=_check_scalars("$in", _as_list("$in", v))),
    "$nin": lambda key, v: Nin(key=key, values=_check_scalars("$nin", _as_list("$nin", v))),
    "$exists": lambda key, v: Exists(key=key, value=_check_exists(v)),
}
_LOGICAL = ("$and", "$or", "$not")


def _as_list(op: str, value: object) -> list[object]:
    if isinstance(value, list | tuple):
        return list(value)
    raise FilterError(
        f"{op} operand is {shown(value)} ({type(value).__name__}); expected a list of JSON scalars"
    )


def parse_filter(spec: Mapping[str, object] | Filter) -> Filter:
    """Parse a Mongo-style filter dict into a :data:`Filter` tree.

    A tree passes through unchanged, once checked against the limits; a dict may hold
    trees where it holds a filter (``{"$or": [Eq(key="a", value=1), {"b": 2}]}``). The
    syntax, semantics and limits are in this module's docstring.

    Raises:
        FilterError: an unknown operator, a wrongly typed operand, a key that is not a
            str, or a value that is neither a scalar nor an operator dict; a filter past
            the depth or size limit (:func:`check_filter`), in either form. Nothing is
            ever dropped or ignored.
    """
    if isinstance(spec, FilterNode):
        check_filter(spec)
        return spec
    tree = _parse_dict(spec, 1)
    check_filter(tree)
    return tree


def filter_option(spec: object) -> Filter | None:
    """A search's ``filter=`` as given by a caller: None, a dict (parsed) or a
    :data:`Filter` tree (checked against the limits).

    Raises:
        FilterError: anything else, or what :func:`parse_filter` refuses.
    """
    if spec is None:
        return None
    if isinstance(spec, dict | Filter):
        return parse_filter(spec)
    raise FilterError(f"filter is a {type(spec).__name__}; expected a dict or a Filter tree")


def _too_deep(depth: int) -> FilterError:
    return FilterError(
        f"filter is nested deeper than the limit of {MAX_FILTER_DEPTH} levels "
        f"({depth} levels seen before stopping)"
    )


def check_filter(node: object) -> None:
    """Check a filter tree against the depth and size limits (module docstring), and
    that every node is a filter node, without recursion: a tree of any depth, even one
    whose (mutable) child lists were changed into a cycle after it was built, gives a
    :class:`~protocol.FilterError`, never a ``RecursionError``.

    Raises:
        FilterError: a path longer than :data:`MAX_FILTER_DEPTH` nodes, more than
            :data:`MAX_FILTER_NODES` nodes, or something that is not a filter node.
    """
    stack: list[tuple[object, int]] = [(node, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, FilterNode):
            raise FilterError(
                f"filter holds {shown(item)} ({type(item).__name__}) at depth {depth}; "
                "expected a filter node"
            )
        if depth > MAX_FILTER_DEPTH:
            raise _too_deep(depth)
        count += 1
        if count > MAX_FILTER_NODES:
            raise FilterError(
                f"filter has more than {MAX_FILTER_NODES} nodes (the limit; counted "
                f"{count} before stopping); split it, or use $in for a list of values"
            )
        if isinstance(item, And | Or):
            children = item.filters
            if not isinstance(children, list):
                raise FilterError(
                    f"filter node {type(item).__name__} holds a {type(children).__name__}; "
                    "expected a list of filter nodes"
                )
            if len(children) > MAX_FILTER_NODES:
                raise FilterError(
                    f"filter has a node of {len(children)} children, more than the limit "
                    f"of {MAX_FILTER_NODES} nodes in a filter"
                )
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, Not):
            stack.append((item.filter, depth + 1))


def _parse_dict(spec: object, depth: int) -> Filter:
    # ``depth`` is the tree level the result will sit at; the tree check after parsing
    # is exact, this bound only keeps the recursion short.
    if depth > MAX_FILTER_DEPTH:
        raise _too_deep(depth)
    if isinstance(spec, Filter):
        # A tree inside a dict (``{"$or": [Eq(...), {...}]}``) is taken as it is; the
        # tree check after parsing counts its depth with the rest.
        return spec
    if not isinstance(spec, Mapping):
        raise FilterError(
            f"filter is {shown(spec)} ({type(spec).__name__}); expected a dict such as "
            '{"key": value} or {"$and": [...]}'
        )
    parts: list[Filter] = []
    for key, value in spec.items():
        if isinstance(key, str) and key.startswith("$"):
            parts.append(_parse_logical(key, value, depth))
        else:
            _check_key(key)
            parts.append(_parse_field(key, value, depth))
    return parts[0] if len(parts) == 1 else And(filters=parts)


def _parse_logical(op: str, value: object, depth: int) -> Filter:
    if op == "$not":
        return Not(filter=_parse_dict(value, depth + 1))
    if op in ("$and", "$or"):
        if not isinstance(value, list | tuple):
            raise FilterError(
                f"{op} operand is {shown(value)} ({type(value).__name__}); expected a list "
                "of filters"
            )
        children = [_parse_dict(item, depth + 1) for item in value]
        return And(filters=children) if op == "$and" else Or(filters=children)
    if op in _COMPARISONS:
        raise FilterError(
            f"{op} needs a key: write {{'key': {{{op!r}: ...}}}}, not {{{op!r}: ...}} at "
            "the top of a filter"
        )
    raise FilterError(
        f"unknown filter operator {shown(op)}; expected one of "
        f"{', '.join([*_COMPARISONS, *_LOGICAL])}"
    )


def _parse_field(key: str, value: object, depth: int) -> Filter:
    if depth > MAX_FILTER_DEPTH:  # a field-level $not chain recurses here
        raise _too_deep(depth)
    if not isinstance(value, Mapping):
        if isinstance(value, list | tuple):
            raise FilterError(
                f"filter value for {shown(key)} is a {type(value).__name__}; equality takes a "
                'JSON scalar (use {"$in": [...]} to match any of several values)'
            )
        # Eq checks the operand and names what was wrong.
        return Eq(key=key, value=_check_scalar("$eq", value))
    if not value:
        raise FilterError(f"filter for {shown(key)} is an empty dict; expected operators")
    parts: list[Filter] = []
    for op, operand in value.items():
        if not isinstance(op, str) or not op.startswith("$"):
            raise FilterError(
                f"filter for {shown(key)} holds the key {shown(op)}, which is not an operator; "
                "equality to an object and nested keys are not supported (keys are "
                "literal top-level metadata keys)"
            )
        if op == "$not":
            inner = _parse_field(key, operand, depth + 1)
            parts.append(Not(filter=inner))
        elif op in _COMPARISONS:
            parts.append(_COMPARISONS[op](key, operand))
        else:
            raise FilterError(
                f"unknown filter operator {shown(op)} for key {shown(key)}; expected one of "
                f"{', '.join([*_COMPARISONS, '$not'])}"
            )
    return parts[0] if len(parts) == 1 else And(filters=parts)


# --- the reference evaluator ---------------------------------------------------------

_MISSING = object()


def scalar_equal(value: object, operand: Scalar) -> bool:
    """``value == operand`` under the filter's type rules (no coercion)."""
    if value is _MISSING:
        return False
    if operand is None:
        return value is None
    if isinstance(operand, bool):
        return isinstance(value, bool) and value == operand
    if isinstance(operand, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) and value == operand
    return isinstance(value, str) and value == operand


def scalar_order(value: object, op: str, operand: Orderable) -> bool:
    """``value <op> operand`` for ``op`` in gt/gte/lt/lte; false across types."""
    if isinstance(operand, str):
        return isinstance(value, str) and _ordered(value, op, operand)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return _ordered(value, op, operand)


_Ordered = TypeVar("_Ordered", str, float)


def _ordered(value: _Ordered, op: str, operand: _Ordered) -> bool:
    if op == "gt":
        return bool(value > operand)
    if op == "gte":
        return bool(value >= operand)
    if op == "lt":
        return bool(value < operand)
    return bool(value <= operand)


_ORDER_OPS: dict[type, str] = {Gt: "gt", Gte: "gte", Lt: "lt", Lte: "lte"}


def matches(filter: Filter, metadata: Mapping[str, object]) -> bool:
    """The reference evaluator: does ``metadata`` satisfy ``filter``?

    Plain Python, written for clarity rather than speed; every backend is tested
    against it.

    Raises:
        FilterError: ``filter`` is not a filter tree within the limits
            (:func:`check_filter`).
    """
    check_filter(filter)
    return _matches(filter, metadata)


def _matches(filter: Filter, metadata: Mapping[str, object]) -> bool:
    match filter:
        case Eq(key=key, value=value):
            return scalar_equal(metadata.get(key, _MISSING), value)
        case Ne(key=key, value=value):
            return not scalar_equal(metadata.get(key, _MISSING), value)
        case Gt() | Gte() | Lt() | Lte():
            found = metadata.get(filter.key, _MISSING)
            return scalar_order(found, _ORDER_OPS[type(filter)], filter.value)
        case In(key=key, values=values):
            found = metadata.get(key, _MISSING)
            return any(scalar_equal(found, v) for v in values)
        case Nin(key=key, values=values):
            found = metadata.get(key, _MISSING)
            return not any(scalar_equal(found, v) for v in values)
        case Exists(key=key, value=present):
            return (key in metadata) == present
        case And(filters=filters):
            return all(_matches(f, metadata) for f in filters)
        case Or(filters=filters):
            return any(_matches(f, metadata) for f in filters)
        case Not(filter=inner):
            return not _matches(inner, metadata)
    raise FilterError(f"not a filter node: {shown(filter)}")
