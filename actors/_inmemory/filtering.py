"""Metadata filters compiled into numpy masks over the arena's slots.

:class:`MetadataIndex` keeps, per slot, the decoded metadata of the live entry, and,
per filtered key, a column: the value's kind, its float64 value (numbers and bools) and
an interned code (strings). A column is built on first use from the cached metadata and
from then on updated at every commit, so a filter costs a few numpy passes over the
slots, not a Python loop over them. Columns are kept for the ``max_columns`` most
recently filtered keys, which bounds their memory at ``max_columns × capacity × 13``
bytes.

The semantics are those of :func:`protocol._filters.matches`, which the tests compare
against on random metadata and random filters. Two points need care to agree exactly:

- numbers compare by exact value, so an int that float64 cannot hold exactly (beyond
  2**53), in a slot or in an operand, is compared in Python, not in numpy;
- strings order by code point, through ranks in the sorted list of a column's distinct
  strings (numpy's fixed-width strings would drop trailing NULs).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs
import msgspec
import numpy as np
import numpy.typing as npt

from protocol import ConfigError, Filter, FilterError
from protocol.checks import (
    JsonValue,
    Scalar,
    check_filter,
    check_int,
    scalar_equal,
    scalar_order,
    shown,
)
from protocol.filters import And, Eq, Exists, Gt, Gte, In, Lt, Lte, Ne, Nin, Not, Or

__all__ = ["CompiledFilter", "MetadataIndex", "PackedMetadata", "compile_filter", "plain_metadata"]

Mask = npt.NDArray[np.bool_]

# The kind of a slot's value for one key.
_MISSING, _NULL, _BOOL, _NUM, _BIGNUM, _STR, _OTHER = range(7)
# float64 holds every int up to 2**53 exactly; beyond that, compare in Python.
_EXACT_INT = 2**53
_ABSENT = object()


def _kind_of(value: object) -> int:
    if value is _ABSENT:
        return _MISSING
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _NUM if -_EXACT_INT <= value <= _EXACT_INT else _BIGNUM
    if isinstance(value, float):
        return _NUM
    if isinstance(value, str):
        return _STR
    return _OTHER


def _exact_number(operand: Scalar) -> bool:
    """Whether a numeric operand converts to float64 without rounding."""
    return isinstance(operand, float) or (
        isinstance(operand, int) and -_EXACT_INT <= operand <= _EXACT_INT
    )


class PackedMetadata(Mapping[str, JsonValue]):
    """A JSON object kept as its compact JSON (the bytes ``max_entry_bytes`` counts),
    decoded when it is read.

    Decoded Python objects would hold many times that (an empty list in JSON is 2
    bytes, in Python 56), so the arena keeps metadata this way; each read gets fresh
    objects, which the caller may mutate. JSON with a lone surrogate (written with
    ``"surrogatepass"`` by ``protocol._json.compact_json``) reads back exactly too.
    """

    __slots__ = ("json",)

    def __init__(self, json: bytes) -> None:
        self.json = json

    def decoded(self) -> dict[str, JsonValue]:
        """A new dict of the metadata."""
        try:
            value: dict[str, JsonValue] = msgspec.json.decode(self.json)
        except msgspec.DecodeError:
            value = json.loads(self.json.decode("utf-8", "surrogatepass"))
        return value

    def __getitem__(self, key: str) -> JsonValue:
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __repr__(self) -> str:
        return f"PackedMetadata({self.json!r:.80})"


def plain_metadata(metadata: Mapping[str, object]) -> Mapping[str, object]:
    """``metadata`` decoded once, when it is packed; else itself."""
    if type(metadata) is PackedMetadata:
        return metadata.decoded()
    return metadata


@attrs.define(eq=False)
class _Column:
    """One key's values across every slot."""

    key: str
    kind: npt.NDArray[np.int8]
    num: npt.NDArray[np.float64]
    code: npt.NDArray[np.int32]
    big: dict[int, int] = attrs.field(factory=dict)
    codes: dict[str, int] = attrs.field(factory=dict)
    names: list[str | None] = attrs.field(factory=list)
    refs: list[int] = attrs.field(factory=list)
    free: list[int] = attrs.field(factory=list)
    _sorted: list[str] | None = None
    _ranks: npt.NDArray[np.int64] | None = None

    @classmethod
    def empty(cls, key: str, capacity: int) -> _Column:
        return cls(
            key=key,
            kind=np.zeros(capacity, dtype=np.int8),
            num=np.zeros(capacity, dtype=np.float64),
            code=np.full(capacity, -1, dtype=np.int32),
        )

    def set(self, slot: int, value: object) -> None:
        self.clear(slot)
        kind = _kind_of(value)
        self.kind[slot] = kind
        # Each kind is one of these types (_kind_of), so each test below is its kind's.
        if kind in (_NUM, _BOOL) and isinstance(value, int | float):
            self.num[slot] = float(value)
        elif kind == _BIGNUM and isinstance(value, int):
            self.big[slot] = value
        elif kind == _STR and isinstance(value, str):
            self.code[slot] = self._intern(value)

    def clear(self, slot: int) -> None:
        kind = self.kind[slot]
        if kind == _STR:
            code = int(self.code[slot])
            self.refs[code] -= 1
            if self.refs[code] == 0:
                # Forget strings no slot holds any more, so a stream of unique values
                # does not grow the dictionary without bound.
                name = self.names[code]
                assert name is not None
                del self.codes[name]
                self.names[code] = None
                self.free.append(code)
                self._sorted = None
            self.code[slot] = -1
        elif kind == _BIGNUM:
            del self.big[slot]
        self.kind[slot] = _MISSING

    def _intern(self, text: str) -> int:
        code = self.codes.get(text)
        if code is None:
            if self.free:
                code = self.free.pop()
                self.names[code] = text
                self.refs[code] = 0
            else:
                code = len(self.names)
                self.names.append(text)
                self.refs.append(0)
            self.codes[text] = code
            self._sorted = None
        self.refs[code] += 1
        return code

    def ranks(self) -> tuple[list[str], npt.NDArray[np.int64]]:
        """The sorted distinct strings, and each code's position among them."""
        if self._sorted is None or self._ranks is None:
            ordered = sorted(self.codes)
            ranks = np.full(max(len(self.names), 1), -1, dtype=np.int64)
            for position, text in enumerate(ordered):
                ranks[self.codes[text]] = position
            self._sorted, self._ranks = ordered, ranks
        return self._sorted, self._ranks


@attrs.define(eq=False)
class MetadataIndex:
    """Decoded metadata per slot, and per-key columns for fast filtering.

    Only the store actor writes to it, at commit (:meth:`set`, :meth:`remove`), on the
    same thread as the reads, so a mask always reflects the last commit.

    Args:
        capacity: the number of slots (the arena's ``max_entries``).
        max_columns: how many keys keep a column; the least recently filtered key's
            column is dropped past it and rebuilt if it is filtered on again.
    """

    capacity: int
    max_columns: int = 64
    live: Mask = attrs.field(init=False)
    _docs: list[Mapping[str, object] | None] = attrs.field(init=False)
    _columns: OrderedDict[str, _Column] = attrs.field(init=False, factory=OrderedDict)
    high: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.capacity = check_int("capacity", self.capacity)
        self.max_columns = check_int("max_columns", self.max_columns)
        self.live = np.zeros(self.capacity, dtype=np.bool_)
        self._docs = [None] * self.capacity

    # --- writes (at commit) ------------------------------------------------------------

    def set(self, slot: int, metadata: Mapping[str, object]) -> None:
        """Record the metadata of the entry now in ``slot``, replacing what was there.

        The index keeps ``metadata`` by reference: the caller must not mutate it later.
        """
        self._check_slot(slot)
        self._docs[slot] = metadata
        self.live[slot] = True
        self.high = max(self.high, slot + 1)
        if self._columns:
            plain = plain_metadata(metadata)
            for column in self._columns.values():
                column.set(slot, plain.get(column.key, _ABSENT))

    def set_many(
        self,
        slots: Sequence[int],
        metadata: Sequence[Mapping[str, object]],
        *,
        consecutive: bool | None = None,
    ) -> None:
        """:meth:`set` for a batch of slots the arena picked (so they are not checked
        one by one): the store's commit path. ``consecutive`` says whether ``slots`` is
        ``range(slots[0], slots[0] + len(slots))`` when the caller knows (None: check)."""
        count = len(slots)
        if len(metadata) != count:
            raise ValueError(f"{len(metadata)} metadata objects for {count} slots")
        if not count:
            return
        start = slots[0]
        if consecutive is None:
            consecutive = slots[-1] - start == count - 1 and list(slots) == list(
                range(start, start + count)
            )
        if consecutive:
            self._docs[start : start + count] = metadata
            self.live[start : start + count] = True
            high = start + count
        else:
            docs = self._docs
            for slot, meta in zip(slots, metadata, strict=True):
                docs[slot] = meta
            index = np.asarray(slots, dtype=np.intp)
            self.live[index] = True
            high = int(index.max()) + 1
        self.high = max(self.high, high)
        if not self._columns:
            return
        # A batch of turns shares one metadata object: decode it once.
        decoded: dict[int, Mapping[str, object]] = {}
        plain: list[Mapping[str, object]] = []
        for meta in metadata:
            one = decoded.get(id(meta))
            if one is None:
                one = decoded[id(meta)] = plain_metadata(meta)
            plain.append(one)
        for column in self._columns.values():
            for slot, meta in zip(slots, plain, strict=True):
                column.set(slot, meta.get(column.key, _ABSENT))

    def remove(self, slot: int) -> None:
        """Forget the entry in ``slot`` (deleted or evicted). A free slot is a no-op."""
        self._check_slot(slot)
        if not self.live[slot]:
            return
        self._docs[slot] = None
        self.live[slot] = False
        for column in self._columns.values():
            column.clear(slot)

    def get(self, slot: int) -> Mapping[str, object] | None:
        """The metadata of the live entry in ``slot``, or None for a free slot."""
        return self._docs[slot]

    def _check_slot(self, slot: int) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int | np.integer):
            raise ConfigError(f"slot is {slot!r}; expected an int")
        if not 0 <= slot < self.capacity:
            raise ConfigError(f"slot is {slot}; expected 0 <= slot < {self.capacity}")

    # --- reads -------------------------------------------------------------------------

    def column(self, key: str) -> _Column:
        """The column for ``key``, built from the cached metadata on first use."""
        column = self._columns.get(key)
        if column is not None:
            self._columns.move_to_end(key)
            return column
        column = _Column.empty(key, self.capacity)
        decoded: dict[int, Mapping[str, object]] = {}  # a batch of turns shares one object
        for slot in np.flatnonzero(self.live[: self.high]).tolist():
            doc = self._docs[slot]
            assert doc is not None
            plain = decoded.get(id(doc))
            if plain is None:
                plain = decoded[id(doc)] = plain_metadata(doc)
            column.set(slot, plain.get(key, _ABSENT))
        self._columns[key] = column
        while len(self._columns) > self.max_columns:
            self._columns.popitem(last=False)
        return column

    def mask(self, filter: Filter | CompiledFilter, high: int | None = None) -> Mask:
        """A boolean mask over slots ``[0, high)``: live slots that match ``filter``.

        ``high`` defaults to one past the highest slot ever set (the arena's ``high``).
        """
        compiled = filter if isinstance(filter, CompiledFilter) else compile_filter(filter)
        n = self.high if high is None else high
        if not 0 <= n <= self.capacity:
            raise ConfigError(f"high is {n}; expected 0 <= high <= {self.capacity}")
        return compiled.evaluate(self, n) & self.live[:n]


# --- compilation ---------------------------------------------------------------------

_Eval = Callable[[MetadataIndex, int], Mask]


@attrs.frozen
class CompiledFilter:
    """A filter turned into a tree of numpy evaluators; reusable across snapshots."""

    filter: Filter
    evaluate: _Eval


def compile_filter(filter: Filter) -> CompiledFilter:
    """Compile a parsed filter tree (see :func:`protocol._filters.parse_filter`).

    The tree is checked against the depth and size limits first
    (:func:`protocol._filters.check_filter`): its child lists are mutable, so a tree
    checked when its request was built may have grown since.

    Raises:
        FilterError: ``filter`` is not a filter tree within the limits.
    """
    check_filter(filter)
    return CompiledFilter(filter=filter, evaluate=_compile(filter))


def _compile(node: Filter) -> _Eval:
    match node:
        case Eq(key=key, value=value):
            return lambda index, n: _equal(index.column(key), n, [value])
        case Ne(key=key, value=value):
            return lambda index, n: ~_equal(index.column(key), n, [value])
        case In(key=key, values=values):
            return lambda index, n: _equal(index.column(key), n, values)
        case Nin(key=key, values=values):
            return lambda index, n: ~_equal(index.column(key), n, values)
        case Gt() | Gte() | Lt() | Lte():
            key, operand, op = node.key, node.value, _ORDER_OPS[type(node)]
            return lambda index, n: _order(index.column(key), n, op, operand)
        case Exists(key=key, value=present):
            if present:
                return lambda index, n: index.column(key).kind[:n] != _MISSING
            return lambda index, n: index.column(key).kind[:n] == _MISSING
        case And(filters=children):
            parts = [_compile(child) for child in children]
            return lambda index, n: _fold(parts, index, n, np.logical_and, True)
        case Or(filters=children):
            parts = [_compile(child) for child in children]
            return lambda index, n: _fold(parts, index, n, np.logical_or, False)
        case Not(filter=child):
            inner = _compile(child)
            return lambda index, n: ~inner(index, n)
    raise FilterError(f"not a filter node: {shown(node)}")


_ORDER_OPS: dict[type, str] = {Gt: "gt", Gte: "gte", Lt: "lt", Lte: "lte"}


def _fold(
    parts: list[_Eval],
    index: MetadataIndex,
    n: int,
    combine: Callable[[Mask, Mask], Mask],
    identity: bool,
) -> Mask:
    out = np.full(n, identity, dtype=np.bool_)
    for part in parts:
        out = combine(out, part(index, n))
    return out


def _python_fallback(
    column: _Column, n: int, out: Mask, test: Callable[[object], bool], exact_only: bool
) -> None:
    """Evaluate ``test`` in Python on the slots numpy cannot compare exactly.

    These are the slots holding ints beyond 2**53, and, unless ``exact_only``, every
    numeric slot (used when the operand itself is such an int).
    """
    kinds = column.kind[:n]
    where = kinds == _BIGNUM if exact_only else (kinds == _BIGNUM) | (kinds == _NUM)
    for slot in np.flatnonzero(where).tolist():
        value = column.big[slot] if kinds[slot] == _BIGNUM else float(column.num[slot])
        out[slot] = test(value)


def _equal(column: _Column, n: int, operands: list[Scalar]) -> Mask:
    kinds, nums = column.kind[:n], column.num[:n]
    out = np.zeros(n, dtype=np.bool_)
    strings = [column.codes[v] for v in operands if isinstance(v, str) and v in column.codes]
    if strings:
        out |= (kinds == _STR) & np.isin(column.code[:n], strings)
    if any(v is None for v in operands):
        out |= kinds == _NULL
    for flag in {v for v in operands if isinstance(v, bool)}:
        out |= (kinds == _BOOL) & (nums == float(flag))
    numbers = [v for v in operands if isinstance(v, int | float) and not isinstance(v, bool)]
    exact = [float(v) for v in numbers if _exact_number(v)]
    if exact:
        out |= (kinds == _NUM) & np.isin(nums, exact)
    if numbers:
        inexact = len(exact) != len(numbers)

        def test(value: object) -> bool:
            return any(scalar_equal(value, v) for v in numbers)

        # An exact slot can equal an inexact operand only if that int happens to be a
        # float64 value, so those operands are checked in Python against every number.
        _python_fallback(column, n, out, test, exact_only=not inexact)
    return out


def _order(column: _Column, n: int, op: str, operand: str | int | float) -> Mask:
    kinds = column.kind[:n]
    if isinstance(operand, str):
        ordered, ranks = column.ranks()
        slot_ranks = ranks[np.maximum(column.code[:n], 0)]
        if op in ("gt", "lte"):
            cut = bisect_right(ordered, operand)
        else:
            cut = bisect_left(ordered, operand)
        hit = slot_ranks >= cut if op in ("gt", "gte") else slot_ranks < cut
        result: Mask = (kinds == _STR) & hit
        return result
    out = np.zeros(n, dtype=np.bool_)
    exact = _exact_number(operand)
    if exact:
        nums, value = column.num[:n], float(operand)
        if op == "gt":
            hit = nums > value
        elif op == "gte":
            hit = nums >= value
        elif op == "lt":
            hit = nums < value
        else:
            hit = nums <= value
        out = (kinds == _NUM) & hit
    _python_fallback(
        column, n, out, lambda value: scalar_order(value, op, operand), exact_only=exact
    )
    return out
