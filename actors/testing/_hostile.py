"""The hostile-input layer: Hypothesis strategies for inputs no caller should send, and
the invariant a store must keep whatever it is sent.

The strategies draw what a real caller can produce by accident: text from all of Unicode
(lone surrogates, which ``json.loads`` makes from a cut-off emoji; NUL; C0 and C1
controls; now and then a string of about a megabyte), numbers of every kind (huge ints,
numpy scalars, bools, NaN), JSON metadata (deep, wide, odd keys, huge values, values
that are not JSON), filters (deep, wide, dicts and :class:`~protocol.FilterNode` trees
mixed, decoded from JSON, unknown operators, wrong operand types), vectors (every numpy
dtype and shape) and embedder faults (:class:`HostileEmbedder`: exceptions,
``BaseException`` subclasses, wrong shapes and dtypes, NaN, bounded stalls).

The invariant (:func:`check_hostile_call`): each call either succeeds or raises a
:class:`~protocol.VectorStoreError` subclass; an error leaves the store unchanged (its
``usage()`` and a full read compare equal before and after); input never poisons the
store; the call finishes within its deadline; a write whose caller-supplied bytes
(payload, metadata as compact JSON, source, id, index text) are over
``max_entry_bytes`` is refused with :class:`~protocol.EntryTooLarge`; and a text that
was stored is returned exactly. The exceptions are the faults the embedder was told to
raise: a ``BaseException`` that is not ``KeyboardInterrupt`` or ``SystemExit`` must
poison the store with itself as the cause, and those two must propagate as themselves
(draw them only with ``interrupts=True``, in a test that expects them).

To check your own store, open it with a :class:`HostileEmbedder` and run
:func:`run_hostile_calls` on it, drawing the calls from :func:`hostile_store_calls` (or
:func:`hostile_memory_calls` for a :class:`~actors.Memory`)::

    @given(calls=st.lists(hostile_store_calls(dimensions=8), max_size=4))
    async def test_my_store_survives_hostile_input(calls):
        embedder = HostileEmbedder(HashingEmbedder(8))
        config = VectorStoreConfig(max_entries=8, dimensions=8, max_entry_bytes=512)
        with trio.fail_after(60):
            async with tolerate_expected_poison(embedder), my_store(config, embedder) as s:
                await run_hostile_calls(s, calls, embedder)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import msgspec
import numpy as np
import trio
from hypothesis import strategies as st

from protocol import (
    And,
    Document,
    Eq,
    Not,
    Or,
    Poisoned,
    SearchRequest,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreError,
)

__all__ = [
    "EmbedFault",
    "HostileBaseException",
    "HostileCall",
    "HostileEmbedder",
    "HostileInputViolation",
    "check_hostile_call",
    "embed_faults",
    "entry_bytes",
    "hostile_filters",
    "hostile_memory_calls",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_store_calls",
    "hostile_text",
    "hostile_vectors",
    "run_hostile_calls",
    "tolerate_expected_poison",
]

#: How long one hostile call may take before it counts as a hang, in seconds.
CALL_TIMEOUT = 20.0
#: A stall drawn by :func:`embed_faults` sleeps this long at most: well under
#: ``CALL_TIMEOUT``, so a stall is slow, never a hang.
MAX_STALL = 0.2


class HostileInputViolation(AssertionError):
    """A store broke the hostile-input invariant; the message says which call and how."""


class HostileBaseException(BaseException):
    """A ``BaseException`` subclass that is neither ``KeyboardInterrupt`` nor
    ``SystemExit``: what a buggy embedder or a foreign framework may raise."""


def _rarely(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """``rare`` one draw in about fifty, ``common`` otherwise (``one_of`` would give
    each branch the same weight, and megabyte values would dominate the run)."""
    return st.integers(0, 49).flatmap(lambda roll: rare if roll == 37 else common)


# --- text -------------------------------------------------------------------------------

_LONE_SURROGATES = ("\ud83d", "\udfff", "\ud800", "\udc00", "a\ud83db", "\ud83d\ud83d")
_CONTROLS = tuple(chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)))
_ODD = (
    "",
    " ",
    "\x00",
    "\ufeff",
    "\u2028",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
    "😀",
    "e\u0301",
    "<item>&amp;</item>",
    "]]>",
    "'; DROP TABLE x; --",
    "%s %(x)s {0}",
    "\\x00\\u0000",
)


def hostile_text(*, max_size: int = 40, huge: bool = True) -> st.SearchStrategy[str]:
    """Text from all of Unicode: lone surrogates, NUL, C0 and C1 controls, the odd
    characters above, and (one draw in about fifty, with ``huge``) a string of up to
    about 1 MB (1 MiB of ASCII, or one of 3-byte characters, or of lone surrogates)."""
    chars = st.one_of(
        st.characters(),
        st.integers(0, 0x10FFFF).map(chr),  # every code point, surrogates included
        st.sampled_from(_LONE_SURROGATES),
        st.sampled_from(_CONTROLS),
    )
    small = st.one_of(
        st.sampled_from(_ODD),
        st.lists(chars, max_size=max_size).map("".join),
        st.text(max_size=max_size),
    )
    if not huge:
        return small
    big = st.builds(
        lambda unit, n: unit * n,
        st.sampled_from(["x", "\u20ac", "\ud83d", "a\x00", "😀"]),
        st.sampled_from([1 << 16, 1 << 18, 1 << 20]),
    )
    return _rarely(small, big)  # type: ignore[no-any-return]


# --- numbers ----------------------------------------------------------------------------

_NUMBERS: tuple[object, ...] = (
    0,
    -1,
    1,
    3,
    -(2**63),
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    -(10**30),
    True,
    False,
    0.5,
    3.0,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    None,
    "3",
    b"3",
    3 + 0j,
)


def _numpy_numbers() -> list[object]:
    return [
        np.int8(3),
        np.int64(3),
        np.int64(2**63 - 1),
        np.uint64(2**64 - 1),
        np.float16(3),
        np.float32(3.5),
        np.float64("nan"),
        np.bool_(True),
        np.complex64(3),
        np.array(3),
        np.array([3]),
    ]


def hostile_numbers() -> st.SearchStrategy[object]:
    """Numbers a caller may pass for ``k``, ``fetch_k``, a threshold or a filter operand:
    huge ints (2**63, 2**64, 10**30), negatives, bools, NaN and infinities, numpy
    scalars and 0-d arrays, strings and complex numbers."""
    return st.one_of(
        st.sampled_from(_NUMBERS),
        st.sampled_from(_numpy_numbers()),
        st.integers(),
        st.floats(),
    )


def hostile_counts() -> st.SearchStrategy[object]:
    """Mostly well-formed counts (``k``), a third of the time anything numeric."""
    return st.one_of(st.integers(1, 10), st.integers(1, 10), hostile_numbers())


# --- metadata ---------------------------------------------------------------------------


def _nested(depth: int, leaf: object, kind: str) -> object:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if kind == "dict" else [value]
    return value


def _json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[object]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.sampled_from(_NUMBERS),
        hostile_text(max_size=12, huge=False),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=12,
    )


def hostile_metadata() -> st.SearchStrategy[object]:
    """Metadata as a caller may pass it: JSON objects with hostile keys (surrogates,
    NUL, ``$``-prefixed) and values, deep nesting (up to 900 levels), wide objects, huge
    values (drawn rarely), values that are not JSON (sets, bytes, tuples, numpy scalars,
    NaN, 2**64), non-str keys, and things that are not objects at all."""
    keys = st.one_of(st.sampled_from(["k", "$k", "a.b", "", "\x00"]), hostile_text(max_size=8))
    plain = st.dictionaries(keys, _json_values(keys), max_size=5)
    odd: st.SearchStrategy[object] = st.sampled_from(
        [
            None,
            [],
            "meta",
            {1: "int key"},
            {("t",): 1},
            {"k": {1, 2}},
            {"k": b"bytes"},
            {"k": (1, 2)},
            {"k": np.int64(3)},
            {"k": np.float32(0.5)},
            {"k": np.array([1, 2])},
            {"k": float("nan")},
            {"k": 2**64},
            {"k": object()},
            {"\ud83d": "\udfff"},
            {"k": "\x00"},
        ]
    )
    deep = st.builds(
        lambda depth, kind: {"deep": _nested(depth, 1, kind)},
        st.sampled_from([40, 200, 900]),
        st.sampled_from(["dict", "list"]),
    )
    wide = st.builds(lambda n: {f"k{i}": i for i in range(n)}, st.sampled_from([1000, 20_000]))
    huge = st.builds(lambda n: {"blob": "x" * n}, st.sampled_from([100_000, 1 << 20]))
    return st.one_of(plain, plain, odd, deep, _rarely(plain, st.one_of(wide, huge)))


# --- filters ----------------------------------------------------------------------------

FilterForm = Literal["dict", "node", "mixed"]


@attrs.frozen
class FilterSpec:
    """A filter described, not built: :meth:`build` makes it in a chosen form, so that
    building (which validates) happens inside the checked call."""

    shape: str
    size: int
    form: FilterForm
    key: str = "k"
    operand: object = 1

    def build(self) -> object:
        if self.shape == "deep":
            return self._deep()
        if self.shape == "wide":
            leaves: list[Any] = [
                {self.key: i} if self.form == "dict" else Eq(key=self.key, value=i)
                for i in range(self.size)
            ]
            return {"$or": leaves} if self.form != "node" else Or(filters=leaves)
        if self.shape == "raw":
            return self.operand
        if self.form == "node":
            return Eq(key=self.key, value=self.operand)  # type: ignore[arg-type]
        return {self.key: self.operand}

    def _deep(self) -> object:
        node: Any = Eq(key=self.key, value=1) if self.form != "dict" else {self.key: 1}
        for level in range(self.size):
            if self.form == "node" or (self.form == "mixed" and level % 2):
                node = Not(filter=node) if level % 3 else And(filters=[node])
            else:
                node = {"$not": node} if level % 3 else {"$and": [node]}
        return node

    def json_node(self) -> bytes:
        """The filter as a JSON-encoded node tree (how a ``SearchRequest`` arrives
        over the wire); built iteratively, so any depth encodes."""
        if self.shape == "wide":
            leaves = ",".join(
                f'{{"op":"eq","key":{json.dumps(self.key)},"value":{i}}}' for i in range(self.size)
            )
            return f'{{"op":"or","filters":[{leaves}]}}'.encode()
        inner = f'{{"op":"eq","key":{json.dumps(self.key)},"value":1}}'
        depth = self.size if self.shape == "deep" else 0
        return ('{"op":"not","filter":' * depth + inner + "}" * depth).encode()

    def __repr__(self) -> str:
        return (
            f"FilterSpec({self.shape}, size={self.size}, form={self.form}, "
            f"key={self.key!r:.40}, operand={self.operand!r:.60})"
        )


_BAD_FILTERS: tuple[object, ...] = (
    {"k": {"$regex": "a"}},
    {"$nor": [{"k": 1}]},
    {"k": {"$in": 3}},
    {"k": {"$in": [[1]]}},
    {"k": {"$gt": None}},
    {"k": {"$gt": [1]}},
    {"k": {"$gt": True}},
    {"k": {"$eq": float("nan")}},
    {"k": {"$eq": 2**64}},
    {"k": {"$exists": "yes"}},
    {"k": {}},
    {"$and": "x"},
    {"$and": []},
    {"$or": [{"k": 1}, "b"]},
    {"$not": []},
    {1: 2},
    {"$k": 1},
    {"k": np.int64(3)},
    {"k": {"$in": {1, 2}}},
    "k == 1",
    ["k"],
    Eq,
)


def hostile_filters() -> st.SearchStrategy[FilterSpec]:
    """Filters: deep (33 to 900 levels) and wide (1,000 or, rarely, 40,000 ``$or``
    leaves) trees as dicts, as node trees and mixed; hostile keys and operands; unknown
    operators and wrong operand types."""
    forms = st.sampled_from(["dict", "node", "mixed"])
    deep = st.builds(FilterSpec, st.just("deep"), st.sampled_from([33, 100, 900]), forms)
    wide = st.builds(
        FilterSpec,
        st.just("wide"),
        _rarely(st.sampled_from([2, 1000]), st.just(40_000)),
        forms,
    )
    leaf = st.builds(
        FilterSpec,
        st.just("leaf"),
        st.just(1),
        st.sampled_from(["dict", "node"]),
        st.one_of(st.just("k"), hostile_text(max_size=8, huge=False)),
        st.one_of(hostile_numbers(), hostile_text(max_size=8, huge=False)),
    )
    raw = st.builds(FilterSpec, st.just("raw"), st.just(0), st.just("dict"), st.just("k"),
                    st.sampled_from(_BAD_FILTERS))  # fmt: skip
    return st.one_of(deep, wide, leaf, raw)


# --- vectors ----------------------------------------------------------------------------

#: Vector kinds the contract says a store must refuse (real floating or integer dtypes
#: only, 1-D, of the store's width, finite): accepting one is a violation.
_MUST_REFUSE = frozenset(
    {
        "complex64",
        "complex128",
        "bool",
        "str",
        "bytes",
        "object_str",
        "object_none",
        "masked",
        "zero_d",
        "two_d",
        "column",
        "wrong_width_short",
        "wrong_width_long",
        "empty",
        "nan",
        "inf",
        "list_of_str",
        "list_of_none",
        "list_of_lists",
        "scalar",
        "string",
        "none",
    }
)


@attrs.frozen
class VectorSpec:
    """A query vector described by kind; :meth:`build` makes it for a width."""

    kind: str
    dimensions: int

    @property
    def must_refuse(self) -> bool:
        return self.kind in _MUST_REFUSE

    def build(self) -> object:
        d = self.dimensions
        base = np.linspace(1.0, 2.0, d)
        makers: dict[str, Callable[[], object]] = {
            "float16": lambda: base.astype(np.float16),
            "float32": lambda: base.astype(np.float32),
            "float64": lambda: base,
            "longdouble": lambda: base.astype(np.longdouble),
            "int8": lambda: np.arange(1, d + 1, dtype=np.int8),
            "uint64": lambda: np.arange(1, d + 1, dtype=np.uint64),
            "int64_big": lambda: np.full(d, 2**62, dtype=np.int64),
            "huge_finite": lambda: np.full(d, 1e300),
            "tiny": lambda: np.full(d, 1e-320),
            "zero": lambda: np.zeros(d),
            "negative_zero": lambda: np.full(d, -0.0),
            "list": lambda: base.tolist(),
            "tuple": lambda: tuple(base.tolist()),
            "list_of_numpy": lambda: [np.float32(x) for x in base],
            "list_of_ints": lambda: list(range(1, d + 1)),
            "list_of_bools": lambda: [True] * d,
            "noncontiguous": lambda: np.linspace(1.0, 2.0, 2 * d)[::2],
            "readonly": lambda: _readonly(base),
            "complex64": lambda: base.astype(np.complex64),
            "complex128": lambda: base.astype(np.complex128) * 1j,
            "bool": lambda: base > 1.5,
            "str": lambda: base.astype(str),
            "bytes": lambda: base.astype("S8"),
            "object_str": lambda: np.array(["a"] * d, dtype=object),
            "object_none": lambda: np.array([None] * d, dtype=object),
            "masked": lambda: np.ma.masked_array(base, mask=[bool(i % 2) for i in range(d)]),
            "zero_d": lambda: np.array(1.0),
            "two_d": lambda: base[None, :],
            "column": lambda: base[:, None],
            "wrong_width_short": lambda: base[:-1],
            "wrong_width_long": lambda: np.ones(d + 1),
            "empty": lambda: np.zeros(0),
            "nan": lambda: np.where(np.arange(d) == 0, np.nan, base),
            "inf": lambda: np.where(np.arange(d) == 0, np.inf, base),
            "list_of_str": lambda: ["1.0"] * d,
            "list_of_none": lambda: [None] * d,
            "list_of_lists": lambda: [[1.0]] * d,
            "scalar": lambda: 1.0,
            "string": lambda: "1.0 " * d,
            "none": lambda: None,
        }
        return makers[self.kind]()


_VECTOR_KINDS = (
    "float16 float32 float64 longdouble int8 uint64 int64_big huge_finite tiny zero "
    "negative_zero list tuple list_of_numpy list_of_ints noncontiguous readonly "
    "list_of_bools " + " ".join(sorted(_MUST_REFUSE))
).split()


def _readonly(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out = array.copy()
    out.flags.writeable = False
    return out


def hostile_vectors(dimensions: int) -> st.SearchStrategy[VectorSpec]:
    """Query vectors of every numpy dtype (float16, longdouble, ints, bool, complex,
    str, bytes, object), masked arrays, 0-d and 2-D shapes, wrong widths, non-finite
    values, lists of numbers and of non-numbers, for a store of ``dimensions``."""
    return st.builds(VectorSpec, st.sampled_from(_VECTOR_KINDS), st.just(dimensions))


# --- embedder faults --------------------------------------------------------------------

FaultKind = Literal[
    "pass",
    "stall",
    "raise",
    "base_exception",
    "keyboard_interrupt",
    "system_exit",
    "wrong_rows",
    "wrong_width",
    "two_d",
    "zero_d",
    "complex",
    "object",
    "str",
    "bool",
    "nan",
    "inf",
    "huge",
    "list_of_none",
    "not_an_array",
]
_INTERRUPTS = frozenset({"keyboard_interrupt", "system_exit"})
_ERRORS: tuple[Callable[[], Exception], ...] = (
    lambda: RuntimeError("embedder blew up"),
    lambda: ValueError("embedder refused"),
    lambda: OSError(104, "connection reset"),
    lambda: TypeError("embedder type error"),
    lambda: ZeroDivisionError("embedder divided by zero"),
    lambda: RecursionError("embedder recursed"),
    lambda: MemoryError("embedder ran out of memory"),
    lambda: UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed"),
    lambda: trio.TooSlowError(),
    lambda: VectorStoreError("an embedder that raises the store's own root error"),
)
_BASE_EXCEPTIONS: tuple[Callable[[], BaseException], ...] = (
    lambda: HostileBaseException("a custom BaseException"),
    lambda: asyncio.CancelledError("asyncio's cancellation, outside asyncio"),
    lambda: GeneratorExit("a stray GeneratorExit"),
)


@attrs.frozen
class EmbedFault:
    """What every embedder call does while this fault is armed.

    Attributes:
        kind: ``"pass"``; ``"stall"`` (sleep ``seconds``, then answer); ``"raise"`` an
            ordinary exception (``variant`` picks which); ``"base_exception"``
            (a :class:`HostileBaseException`, ``asyncio.CancelledError`` or
            ``GeneratorExit``); ``"keyboard_interrupt"``, ``"system_exit"``; or a bad
            answer: wrong row count, wrong width, 2-D or 0-d, complex, object, str or
            bool dtype, NaN, inf, an overflowing norm, rows of None, not an array.
        variant: which exception of the kind's list (modulo its length).
        seconds: the stall, at most :data:`MAX_STALL` when drawn.
    """

    kind: FaultKind = "pass"
    variant: int = 0
    seconds: float = 0.0

    @property
    def raises(self) -> bool:
        return self.kind in ("raise", "base_exception", *_INTERRUPTS)

    def exception(self) -> BaseException:
        if self.kind == "raise":
            return _ERRORS[self.variant % len(_ERRORS)]()
        if self.kind == "base_exception":
            return _BASE_EXCEPTIONS[self.variant % len(_BASE_EXCEPTIONS)]()
        if self.kind == "keyboard_interrupt":
            return KeyboardInterrupt("a KeyboardInterrupt from the embedder")
        return SystemExit("a SystemExit from the embedder")


def embed_faults(*, interrupts: bool = False) -> st.SearchStrategy[EmbedFault]:
    """Embedder faults, "pass" about half the time. ``KeyboardInterrupt`` and
    ``SystemExit`` are drawn only with ``interrupts`` (they must propagate, so a test
    that draws them must expect them)."""
    kinds = [k for k in FaultKind.__args__ if k not in _INTERRUPTS]  # type: ignore[attr-defined]
    if interrupts:
        kinds += sorted(_INTERRUPTS)
    return st.one_of(
        st.just(EmbedFault()),
        st.builds(
            EmbedFault,
            st.sampled_from(kinds),
            st.integers(0, 9),
            st.sampled_from([0.0, 0.01, MAX_STALL]),
        ),
    )


class HostileEmbedder:
    """An embedder that wraps another and misbehaves while a fault is armed.

    It presents the async interface (``embed_documents``, ``embed_query``) by default,
    or the sync one (``embed``, ``embed_batch``; run in a worker thread by the store)
    with ``sync=True``. :meth:`arm` sets the fault every later call applies until it is
    disarmed; :attr:`raised` keeps the last exception it raised, so a checker can tell
    a poisoning it caused from one the input caused.

    A sync stall sleeps in its thread (``time.sleep``), an async one in trio
    (``trio.sleep``); both are bounded by the fault's ``seconds``.

    Args:
        inner: a sync :class:`~actors.Embedder` (``embed`` and optionally
            ``embed_batch``).
        sync: present the sync interface instead of the async one.
    """

    def __init__(self, inner: Any, *, sync: bool = False) -> None:
        if not callable(getattr(inner, "embed", None)):
            raise TypeError(f"inner is a {type(inner).__name__}; expected a sync Embedder")
        self.inner = inner
        self.dimensions: int | None = getattr(inner, "dimensions", None)
        self.fault = EmbedFault()
        self.raised: BaseException | None = None
        self.calls = 0
        if sync:
            self.embed = self._embed_sync
            self.embed_batch = self._embed_batch_sync
        else:
            self.embed_documents = self._embed_documents
            self.embed_query = self._embed_query

    def arm(self, fault: EmbedFault) -> None:
        self.fault = fault

    def disarm(self) -> None:
        self.fault = EmbedFault()

    def _rows(self, texts: Sequence[str]) -> Any:
        batch = getattr(self.inner, "embed_batch", None)
        if callable(batch):
            return np.asarray(batch(list(texts)), dtype=np.float32)
        return np.asarray([self.inner.embed(t) for t in texts], dtype=np.float32)

    def _answer(self, rows: Any, *, query: bool) -> Any:
        fault = self.fault
        if fault.raises:
            self.raised = fault.exception()
            raise self.raised
        kind = fault.kind
        if kind in ("pass", "stall"):
            return rows[0] if query else rows
        bad: dict[str, Callable[[], Any]] = {
            "wrong_rows": lambda: rows[:-1] if len(rows) > 1 else np.concatenate([rows, rows]),
            "wrong_width": lambda: rows[:, :-1],
            "two_d": lambda: rows[:, :, None],
            "zero_d": lambda: np.float32(1.0),
            "complex": lambda: rows.astype(np.complex64),
            "object": lambda: rows.astype(object),
            "str": lambda: rows.astype(str),
            "bool": lambda: rows > 0,
            "nan": lambda: np.full_like(rows, np.nan),
            "inf": lambda: np.full_like(rows, np.inf),
            "huge": lambda: np.full_like(rows, 3e38),
            "list_of_none": lambda: [[None] * rows.shape[1] for _ in rows],
            "not_an_array": lambda: "not an array",
        }
        out = bad[kind]()
        if query and kind not in ("zero_d", "not_an_array", "list_of_none"):
            return out[0] if kind != "wrong_rows" else out
        if query and kind == "list_of_none":
            return out[0]
        return out

    # async interface
    async def _embed_documents(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.fault.kind == "stall":
            await trio.sleep(self.fault.seconds)
        return self._answer(self._rows(texts), query=False)

    async def _embed_query(self, text: str) -> Any:
        self.calls += 1
        if self.fault.kind == "stall":
            await trio.sleep(self.fault.seconds)
        return self._answer(self._rows([text]), query=True)

    # sync interface
    def _embed_sync(self, text: str) -> Any:
        self.calls += 1
        if self.fault.kind == "stall":
            time.sleep(self.fault.seconds)
        return self._answer(self._rows([text]), query=True)

    def _embed_batch_sync(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.fault.kind == "stall":
            time.sleep(self.fault.seconds)
        return self._answer(self._rows(texts), query=False)

    def __repr__(self) -> str:
        return f"HostileEmbedder({self.inner!r}, fault={self.fault})"


# --- calls ------------------------------------------------------------------------------

Maker = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]


@attrs.frozen(repr=False)
class HostileCall:
    """One call on a store or a memory, with its arguments still to be built.

    Attributes:
        method: the method name (``store_turns``, ``search``, ``turn``...).
        make: builds ``(args, kwargs)``; it runs inside the checked call, since building
            a ``Document``, a ``SearchRequest`` or a filter node validates.
        fault: the embedder fault armed during the call.
        label: what the call is, for reports (values truncated).
        writes: after a success, gives the caller-supplied entries it stored, as
            ``(bytes, label)`` lower bounds of their size (see :func:`entry_bytes`).
        expect_refusal: the contract says this call must raise (a vector of a kind
            the store must refuse), so success is a violation.
        decoded: ``make`` decodes wire data, so a ``msgspec.ValidationError`` or
            ``DecodeError`` from it is a refusal before any store call, not a violation
            (msgspec's JSON decoder refuses an escaped lone surrogate, for one).
    """

    method: str
    make: Maker
    fault: EmbedFault = EmbedFault()
    label: str = ""
    writes: Callable[[], Sequence[tuple[int, str]]] | None = None
    expect_refusal: str | None = None
    decoded: bool = False
    #: after a success, given the result and a full read: what is wrong, or None.
    check_stored: Callable[[Any, Any], str | None] | None = None
    #: ``"store"`` (a handle's method; on a memory, ``memory.store``'s) or ``"memory"``.
    target: Literal["store", "memory"] = "store"

    def __repr__(self) -> str:
        fault = "" if self.fault.kind == "pass" else f", fault={self.fault}"
        return f"<{self.method}({self.label[:400]}){fault}>"


def _utf8(value: object) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return 0


def _json_bytes(value: object) -> int:
    """A lower bound of ``value``'s compact JSON length (0 if it is not JSON)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return 0
    return _utf8(text)


def entry_bytes(
    message: UnifiedMessage | None = None,
    *,
    text: object = None,
    metadata: object = None,
    source: object = None,
    entry_id: object = None,
    index_text: object = None,
) -> int:
    """A lower bound of what an entry must count against ``max_entry_bytes`` (SPEC §11):
    the message's payload (every string of every block, tool arguments as compact
    JSON, the name and tool call id), a document's text, the metadata as compact JSON,
    the source, the id and the index text. The per-block overhead the store adds is not
    included, so an entry over the cap by this count must be refused."""
    size = _utf8(text) + _json_bytes(metadata) + _utf8(source) + _utf8(entry_id)
    size += _utf8(index_text)
    if message is not None:
        size += _utf8(message.name) + _utf8(message.tool_call_id)
        for block in message.content if isinstance(message.content, list) else ():
            if isinstance(block, Text | Thinking):
                size += _utf8(block.text)
            elif isinstance(block, ToolCall):
                size += _utf8(block.id) + _utf8(block.name) + _json_bytes(block.arguments)
            elif isinstance(block, ToolResult):
                size += _utf8(block.tool_call_id) + _utf8(block.output)
            else:
                for name in ("media_type", "data"):
                    size += _utf8(getattr(block, name, None))
    return size


@attrs.frozen(repr=False)
class MessageSpec:
    """A message described, not built (a ``ToolCall`` validates its arguments when
    built, so building happens inside the checked call)."""

    role: str
    blocks: tuple[tuple[str, tuple[object, ...]], ...]
    name: object = None

    def build(self) -> UnifiedMessage:
        content: list[Any] = []
        for kind, fields in self.blocks:
            if kind == "text":
                content.append(Text(text=fields[0]))  # type: ignore[arg-type]
            elif kind == "thinking":
                content.append(Thinking(text=fields[0]))  # type: ignore[arg-type]
            elif kind == "tool_call":
                call_id, name, arguments = fields
                content.append(ToolCall(id=call_id, name=name, arguments=arguments))  # type: ignore[arg-type]
            elif kind == "tool_result":
                content.append(ToolResult(tool_call_id="c1", output=fields[0]))  # type: ignore[arg-type]
            else:  # "empty": n empty Text blocks
                content.extend([Text(text="")] * int(fields[0]))  # type: ignore[call-overload]
        return UnifiedMessage(role=self.role, content=content, name=self.name)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        parts = []
        for kind, fields in self.blocks:
            parts.append(f"{kind}({', '.join(_short(f) for f in fields)})")
        return f"{self.role}[{'; '.join(parts)}]" + (
            f" name={_short(self.name)}" if self.name else ""
        )


def _message_specs(max_size: int = 3) -> st.SearchStrategy[list[MessageSpec]]:
    text = hostile_text()
    small = hostile_text(max_size=8, huge=False)
    block = st.one_of(
        st.tuples(st.just("text"), st.tuples(text)),
        st.tuples(st.just("text"), st.tuples(text)),
        st.tuples(st.just("thinking"), st.tuples(text)),
        st.tuples(
            st.just("tool_call"),
            st.tuples(small, small, st.one_of(hostile_metadata(), small)),
        ),
        st.tuples(st.just("tool_result"), st.tuples(text)),
        st.just(("text", ("",))),
    )
    blocks = st.one_of(
        st.lists(block, min_size=1, max_size=3).map(tuple),
        _rarely(
            st.lists(block, min_size=1, max_size=2).map(tuple),
            st.sampled_from([100, 10_000, 100_000]).map(lambda n: (("empty", (n,)),)),
        ),
    )
    message = st.builds(
        MessageSpec,
        role=st.sampled_from(["user", "assistant", "tool"]),
        blocks=blocks,
        name=st.one_of(st.none(), st.none(), small),
    )
    return st.lists(message, min_size=1, max_size=max_size)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:100]}...<{len(text)} chars>"


def _names() -> st.SearchStrategy[object]:
    return st.one_of(
        st.sampled_from(["memory-default", "alice"]),
        st.sampled_from(["", None, 3, b"ns", "\x00", "\ud83d"]),
        hostile_text(max_size=12, huge=False),
    )


def _ids() -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(hostile_text(max_size=12), max_size=3),
        st.sampled_from([["turn-0"], [], "turn-0", [None], [3], [""], ("turn-0",), None]),
    )


def hostile_store_calls(dimensions: int) -> st.SearchStrategy[HostileCall]:
    """Calls on a store handle (either backend) with hostile arguments: ``store_turns``,
    ``add_documents``, ``retrieve``, ``retrieve_in``, ``retrieve_embedding``,
    ``search``, ``get_by_ids`` and ``delete``, each with an embedder fault armed."""
    faults = embed_faults()
    metadata = st.one_of(st.none(), hostile_metadata())

    def store_turns(
        specs: list[MessageSpec], ns: object, source: object, meta: object, ids: object,
        texts: object, fault: EmbedFault,
    ) -> HostileCall:  # fmt: skip
        kwargs: dict[str, Any] = {"namespace": ns, "source": source, "metadata": meta}
        if ids is not None:
            kwargs["ids"] = ids
        if texts is not None:
            kwargs["texts"] = texts
        built: list[list[UnifiedMessage]] = []

        def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
            built.append([spec.build() for spec in specs])
            return (built[-1],), kwargs

        def writes() -> list[tuple[int, str]]:
            out = []
            for i, turn in enumerate(built[-1]):
                entry_id = ids[i] if isinstance(ids, list) and i < len(ids) else None
                index = texts[i] if isinstance(texts, list) and i < len(texts) else None
                size = entry_bytes(
                    turn, metadata=meta, source=source, entry_id=entry_id, index_text=index
                )
                out.append((size, f"turn {i}"))
            return out

        label = (
            f"{len(specs)} turns {_short(specs)}, namespace={_short(ns)}, "
            f"source={_short(source)}, metadata={_short(meta)}, ids={_short(ids)}, "
            f"texts={_short(texts)}"
        )
        return HostileCall(
            "store_turns",
            make,
            fault,
            label,
            writes,
            check_stored=lambda result, listing: _turns_round_trip(built[-1], ns, result, listing),
        )

    def add_documents(
        docs: list[tuple[object, object, object, object]], ns: object, fault: EmbedFault
    ) -> HostileCall:
        def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
            built = [
                Document(text=t, id=i, metadata=m, source_id=s)  # type: ignore[arg-type]
                for t, i, m, s in docs
            ]
            return (built,), {"namespace": ns}

        def writes() -> list[tuple[int, str]]:
            return [
                (entry_bytes(text=t, metadata=m, source=s, entry_id=i), f"document {n}")
                for n, (t, i, m, s) in enumerate(docs)
            ]

        return HostileCall(
            "add_documents", make, fault, f"{_short(docs)}, namespace={_short(ns)}", writes
        )

    def retrieve(query: object, k: object, fault: EmbedFault) -> HostileCall:
        return HostileCall(
            "retrieve", lambda: ((query, k), {}), fault, f"{_short(query)}, k={k!r}"
        )

    def retrieve_in(ns: object, query: object, k: object, fault: EmbedFault) -> HostileCall:
        return HostileCall(
            "retrieve_in", lambda: ((ns, query, k), {}), fault,
            f"{_short(ns)}, {_short(query)}, k={k!r}",
        )  # fmt: skip

    def retrieve_embedding(vector: VectorSpec, k: object, ns: object) -> HostileCall:
        return HostileCall(
            "retrieve_embedding",
            lambda: ((vector.build(), k), {"namespace": ns}),
            EmbedFault(),
            f"{vector.kind} vector, k={k!r}, namespace={_short(ns)}",
            expect_refusal=f"a {vector.kind} vector" if vector.must_refuse else None,
        )

    def search(
        kind: str, query: object, vector: VectorSpec | None, k: object, fetch_k: object,
        threshold: object, filter_: FilterSpec | None, ns: object, wire: bool,
        fault: EmbedFault,
    ) -> HostileCall:  # fmt: skip
        def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
            if wire and filter_ is not None:
                body = (
                    b'{"query":' + json.dumps(query if isinstance(query, str) else "q").encode()
                    + b',"kind":' + msgspec.json.encode(kind)
                    + b',"k":' + (str(k).encode() if type(k) is int else b"3")
                    + b',"filter":' + filter_.json_node() + b"}"
                )  # fmt: skip
                return (msgspec.json.decode(body, type=SearchRequest),), {}
            request = SearchRequest(
                query=query,  # type: ignore[arg-type]
                vector=None if vector is None else vector.build(),  # type: ignore[arg-type]
                k=k,  # type: ignore[arg-type]
                kind=kind,  # type: ignore[arg-type]
                fetch_k=fetch_k,  # type: ignore[arg-type]
                score_threshold=threshold,  # type: ignore[arg-type]
                filter=None if filter_ is None else filter_.build(),  # type: ignore[arg-type]
                namespace=ns,  # type: ignore[arg-type]
            )
            return (request,), {}

        refusal = None
        if vector is not None and vector.must_refuse and not wire:
            refusal = f"a {vector.kind} vector"
        label = (
            f"{kind}, query={_short(query)}, vector={vector and vector.kind}, k={k!r}, "
            f"fetch_k={fetch_k!r}, threshold={threshold!r}, filter={filter_!r}, "
            f"namespace={_short(ns)}, wire={wire}"
        )
        return HostileCall("search", make, fault, label, expect_refusal=refusal, decoded=wire)

    def get_by_ids(ids: object, ns: object) -> HostileCall:
        return HostileCall(
            "get_by_ids", lambda: ((ids,), {"namespace": ns}), EmbedFault(),
            f"{_short(ids)}, namespace={_short(ns)}",
        )  # fmt: skip

    def delete(ids: object, ns: object) -> HostileCall:
        return HostileCall(
            "delete", lambda: ((ids,), {"namespace": ns}), EmbedFault(),
            f"{_short(ids)}, namespace={_short(ns)}",
        )  # fmt: skip

    text = hostile_text()
    queries = st.one_of(text, st.sampled_from([None, 3, b"q", ["q"]]))
    counts = hostile_counts()
    optional_names = st.one_of(st.none(), _names())
    return st.one_of(
        st.builds(
            store_turns,
            _message_specs(),
            st.one_of(st.just("memory-default"), _names()),
            st.one_of(st.just("offload"), _names()),
            metadata,
            st.one_of(st.none(), _ids()),
            st.one_of(st.none(), st.lists(text, min_size=1, max_size=3), st.just("t")),
            faults,
        ),
        st.builds(
            add_documents,
            st.lists(
                st.tuples(
                    st.one_of(text, st.sampled_from([None, 3, b"doc"])),
                    st.one_of(st.none(), hostile_text(max_size=12)),
                    st.one_of(st.none(), hostile_metadata()),
                    st.one_of(st.none(), hostile_text(max_size=12)),
                ),
                min_size=1,
                max_size=3,
            ),
            optional_names,
            faults,
        ),
        st.builds(retrieve, queries, counts, faults),
        st.builds(retrieve_in, _names(), queries, counts, faults),
        st.builds(retrieve_embedding, hostile_vectors(dimensions), counts, optional_names),
        st.builds(
            search,
            st.sampled_from(["similarity", "mmr", "hybrid", "other"]),
            queries,
            st.one_of(st.none(), hostile_vectors(dimensions)),
            counts,
            st.one_of(st.just(20), counts),
            st.one_of(st.none(), st.none(), hostile_numbers()),
            st.one_of(st.none(), hostile_filters()),
            optional_names,
            st.booleans(),
            faults,
        ),
        st.builds(get_by_ids, _ids(), optional_names),
        st.builds(delete, _ids(), optional_names),
    )


def hostile_memory_calls(*, interrupts: bool = False) -> st.SearchStrategy[HostileCall]:
    """Calls on a :class:`~actors.Memory`: ``remember``, ``retrieve``, ``compress`` and
    ``turn`` with hostile text, metadata, numbers and embedder faults."""
    faults = embed_faults(interrupts=interrupts)

    def remember(content: object, source: object, meta: object, fault: EmbedFault) -> HostileCall:
        def writes() -> list[tuple[int, str]]:
            message = UnifiedMessage.user(content) if isinstance(content, str) else None
            # The 16-hex id counts too.
            return [(entry_bytes(message, metadata=meta, source=source) + 16, "the memory")]

        return HostileCall(
            "remember",
            lambda: ((content,), {"source": source, "metadata": meta}),
            fault,
            f"{_short(content)}, source={_short(source)}, metadata={_short(meta)}",
            writes,
            target="memory",
        )

    def retrieve(
        query: object, k: object, ns: object, low: object, fault: EmbedFault
    ) -> HostileCall:
        return HostileCall(
            "retrieve",
            lambda: ((query,), {"k": k, "namespace": ns, "min_similarity": low}),
            fault,
            f"{_short(query)}, k={k!r}, namespace={_short(ns)}, min_similarity={low!r}",
            target="memory",
        )

    def conversation(specs: list[MessageSpec], text: object) -> list[UnifiedMessage]:
        messages = [spec.build() for spec in specs]
        return [UnifiedMessage.system("sys"), *messages, UnifiedMessage.user(text)]  # type: ignore[arg-type]

    def compress(specs: list[MessageSpec], text: object, fault: EmbedFault) -> HostileCall:
        return HostileCall(
            "compress",
            lambda: ((conversation(specs, text),), {}),
            fault,
            f"{_short(specs)} then user {_short(text)}",
            target="memory",
        )

    def turn(specs: list[MessageSpec], text: object, fault: EmbedFault) -> HostileCall:
        def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
            return (UnifiedRequest(model="m", messages=conversation(specs, text)),), {}

        label = f"{_short(specs)} then user {_short(text)}"
        return HostileCall("turn", make, fault, label, target="memory")

    specs = _message_specs(max_size=5)
    return st.one_of(
        st.builds(
            remember,
            st.one_of(hostile_text(), st.sampled_from([None, 3, b"x"])),
            st.one_of(st.just("explicit"), _names()),
            st.one_of(st.none(), hostile_metadata()),
            faults,
        ),
        st.builds(
            retrieve,
            st.one_of(hostile_text(), st.sampled_from([None, 3])),
            st.one_of(st.none(), hostile_counts()),
            st.one_of(st.none(), _names()),
            st.one_of(st.none(), hostile_numbers()),
            faults,
        ),
        st.builds(compress, specs, hostile_text(), faults),
        st.builds(turn, specs, hostile_text(), faults),
    )


# --- the invariant ----------------------------------------------------------------------


def _turns_round_trip(turns: list[UnifiedMessage], ns: object, result: Any, listing: Any) -> Any:
    """What went wrong returning the stored turns, or None."""
    ids = getattr(result, "ids", None)
    if ids is None:
        return f"returned {result!r:.200}; expected TurnsStored"
    by_id = {(h.namespace, h.id): h.message for h in listing}
    survivors = turns[len(turns) - len(ids) :]
    for turn, entry_id in zip(survivors, ids, strict=True):
        got = by_id.get((ns, entry_id))
        if got is None:
            continue  # evicted by a later turn of the same batch (capacity)
        if got != turn:
            return f"stored {turn!r:.200} but a read returned {got!r:.200}"
    return None


def _store_of(subject: Any) -> Any:
    inner = getattr(subject, "store", None)
    return subject if inner is None or not hasattr(subject, "turn") else inner


async def _snapshot(store: Any) -> tuple[str, list[Any]]:
    """``usage()`` and every entry, as a comparable text, and the entries."""
    refresh = getattr(store, "refresh", None)
    usage = await refresh() if refresh is not None else store.usage()
    listing = await store.retrieve_embedding(
        np.zeros(store.config.dimensions, dtype=np.float32), store.capacity
    )
    turns = list(listing.turns)
    rows = [(h.sequence, h.namespace, h.id, h.source, h.message, h.metadata) for h in turns]
    return repr((usage, sorted(rows, key=lambda r: r[0]))), turns


def _chain(error: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


async def check_hostile_call(
    subject: Any,
    call: HostileCall,
    embedder: HostileEmbedder,
    *,
    max_entry_bytes: int,
    call_timeout: float = CALL_TIMEOUT,
) -> str:
    """Run ``call`` on ``subject`` (a store handle or a memory) and check the invariant.

    Returns:
        ``"ok"`` (it succeeded), ``"refused"`` (a ``VectorStoreError`` and nothing
        changed), ``"poisoned"`` (by a ``BaseException`` the embedder raised, as the
        contract says; the store is unusable from here on) or ``"interrupted"`` (the
        embedder's ``KeyboardInterrupt``/``SystemExit`` propagated as itself).

    Raises:
        HostileInputViolation: the call broke the invariant; the message says how.
    """
    store = _store_of(subject)
    before, _ = await _snapshot(store)
    embedder.raised = None
    method = getattr(subject if call.target == "memory" else store, call.method)
    error: BaseException | None = None
    result: object = None
    timed_out = False
    embedder.arm(call.fault)
    try:
        with trio.move_on_after(call_timeout) as scope:
            try:
                args, kwargs = call.make()
            except (msgspec.ValidationError, msgspec.DecodeError):
                if not call.decoded:
                    raise
                return "refused"
            result = await method(*args, **kwargs)
        timed_out = scope.cancelled_caught
    except (KeyboardInterrupt, SystemExit) as caught:
        error = caught
    except Exception as caught:  # judged below
        error = caught
    except BaseException as caught:
        if isinstance(caught, trio.Cancelled):
            raise
        error = caught
    finally:
        embedder.disarm()
    owner = subject if call.target == "memory" else store
    what = f"{type(owner).__name__}.{call.method} {call!r}"
    if timed_out:
        raise HostileInputViolation(f"{what} did not finish within {call_timeout} s (a hang)")
    injected = embedder.raised
    if isinstance(error, KeyboardInterrupt | SystemExit):
        if injected is error:
            return "interrupted"
        raise HostileInputViolation(f"{what} raised {error!r} the embedder did not raise")
    if isinstance(error, BaseExceptionGroup):
        raise HostileInputViolation(f"{what} raised a group: {error!r:.300}") from error
    if isinstance(error, Poisoned):
        if injected is not None and call.fault.kind == "base_exception":
            if injected in _chain(error):
                return "poisoned"
            raise HostileInputViolation(
                f"{what} poisoned the store, but not with the embedder's {injected!r} "
                f"as its cause: {error!r}"
            ) from error
        raise HostileInputViolation(f"{what} poisoned the store (input must never)") from error
    if error is not None and not isinstance(error, VectorStoreError):
        if call.fault.kind == "base_exception" and error is injected:
            raise HostileInputViolation(
                f"{what} let the embedder's {error!r} escape; expected Poisoned with it "
                "as the cause"
            ) from error
        raise HostileInputViolation(
            f"{what} raised {type(error).__name__}: {error!s:.300}; expected success or "
            "a VectorStoreError"
        ) from error
    try:
        after, listing = await _snapshot(store)
    except Poisoned as poisoned:
        raise HostileInputViolation(f"{what} left the store poisoned") from poisoned
    if error is not None:
        if after != before:
            raise HostileInputViolation(
                f"{what} raised {error!r:.200} but changed the store:\n  before "
                f"{before[:600]}\n  after  {after[:600]}"
            ) from error
        return "refused"
    if call.fault.kind == "base_exception" and injected is not None:
        raise HostileInputViolation(
            f"{what} succeeded though the embedder raised {injected!r}; expected Poisoned"
        )
    if call.expect_refusal is not None:
        raise HostileInputViolation(
            f"{what} accepted {call.expect_refusal}; the contract says refuse it "
            "(real floating or integer dtypes only, 1-D, of the store's width, finite)"
        )
    for size, which in call.writes() if call.writes is not None else ():
        if size > max_entry_bytes:
            raise HostileInputViolation(
                f"{what} stored {which} of at least {size} caller-supplied bytes; "
                f"max_entry_bytes is {max_entry_bytes}, so EntryTooLarge was expected"
            )
    if call.check_stored is not None:
        problem = call.check_stored(result, listing)
        if problem is not None:
            raise HostileInputViolation(f"{what}: {problem}")
    return "ok"


async def run_hostile_calls(
    subject: Any,
    calls: Sequence[HostileCall],
    embedder: HostileEmbedder,
    *,
    call_timeout: float = CALL_TIMEOUT,
) -> list[str]:
    """Check each call in turn (see :func:`check_hostile_call`); stop after a call that
    poisoned the store or was interrupted as the contract says. Returns the outcomes."""
    max_entry_bytes = _store_of(subject).config.max_entry_bytes
    outcomes = []
    for call in calls:
        outcome = await check_hostile_call(
            subject, call, embedder, max_entry_bytes=max_entry_bytes, call_timeout=call_timeout
        )
        outcomes.append(outcome)
        if outcome in ("poisoned", "interrupted"):
            break
    return outcomes


@asynccontextmanager
async def tolerate_expected_poison(embedder: HostileEmbedder) -> AsyncIterator[None]:
    """Wrap an ``open_*`` block: a ``Poisoned`` it raises on exit is tolerated when the
    embedder raised a ``BaseException`` (the contract's crash), and so is the
    embedder's own ``KeyboardInterrupt``/``SystemExit``. A ``BaseExceptionGroup`` is
    never tolerated."""
    try:
        yield
    except Poisoned as error:
        injected = embedder.raised
        if injected is None or isinstance(injected, Exception) or injected not in _chain(error):
            raise
    except (KeyboardInterrupt, SystemExit) as error:
        if error is not embedder.raised:
            raise
