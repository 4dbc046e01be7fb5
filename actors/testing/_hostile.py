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

The invariant (:func:`check_hostile_call`, with the call strategies in
``_hostile_calls.py``): each call either succeeds or raises a
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
:func:`hostile_memory_calls` for a :class:`~actors.Memory`); the public module,
:mod:`actors.testing.hostile`, shows how.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar, final

import attrs
import numpy as np
import numpy.typing as npt
import trio
from hypothesis import strategies as st

from actors import Embedder
from protocol import VectorStoreError
from protocol.filters import And, Eq, Not, Or

__all__ = [
    "CALL_TIMEOUT",
    "MAX_STALL",
    "EmbedFault",
    "FilterSpec",
    "HostileBaseException",
    "HostileEmbedder",
    "HostileInputViolation",
    "VectorSpec",
    "embed_faults",
    "hostile_counts",
    "hostile_filters",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_text",
    "hostile_vectors",
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


T = TypeVar("T")
G = TypeVar("G", bound=np.generic)


def _unchecked(build: Callable[..., T], **fields: object) -> T:
    """``build(**fields)`` with fields its signature refuses, on purpose."""
    return build(**fields)


def _rarely(common: st.SearchStrategy[T], rare: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
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
    return _rarely(small, big)


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
            if self.form == "node":
                return Or(filters=[Eq(key=self.key, value=i) for i in range(self.size)])
            leaves: list[object] = [
                {self.key: i} if self.form == "dict" else Eq(key=self.key, value=i)
                for i in range(self.size)
            ]
            return {"$or": leaves}
        if self.shape == "raw":
            return self.operand
        if self.form == "node":
            return Eq(key=self.key, value=self.operand)  # type: ignore[arg-type]
        return {self.key: self.operand}

    def _deep(self) -> object:
        node: object = Eq(key=self.key, value=1) if self.form != "dict" else {self.key: 1}
        for level in range(self.size):
            if self.form == "node" or (self.form == "mixed" and level % 2):
                # A node over a dict (the "mixed" form) on purpose: a Struct does not
                # check its fields when built, so the store's own check must.
                node = (
                    _unchecked(Not, filter=node) if level % 3 else _unchecked(And, filters=[node])
                )
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


def _readonly(array: npt.NDArray[G]) -> npt.NDArray[G]:
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


@final
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


@final
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

    def __init__(self, inner: Embedder, *, sync: bool = False) -> None:
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

    def _rows(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        batch = getattr(self.inner, "embed_batch", None)
        if callable(batch):
            return np.asarray(batch(list(texts)), dtype=np.float32)
        return np.asarray([self.inner.embed(t) for t in texts], dtype=np.float32)

    def _answer(self, fault: EmbedFault, rows: npt.NDArray[np.float32], *, query: bool) -> object:
        # ``fault`` is the one armed when the call began: a stalled sync call the store
        # abandoned (embed_timeout) must not pick up a later call's fault.
        if fault.raises:
            self.raised = fault.exception()
            raise self.raised
        kind = fault.kind
        if kind in ("pass", "stall"):
            return rows[0] if query else rows
        bad: dict[str, Callable[[], object]] = {
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
        if query and kind not in ("zero_d", "not_an_array", "wrong_rows"):
            assert isinstance(out, np.ndarray | list)  # rows, changed or as lists
            return out[0]
        return out

    # async interface
    async def _embed_documents(self, texts: Sequence[str]) -> object:
        fault = self.fault
        self.calls += 1
        if fault.kind == "stall":
            await trio.sleep(fault.seconds)
        return self._answer(fault, self._rows(texts), query=False)

    async def _embed_query(self, text: str) -> object:
        fault = self.fault
        self.calls += 1
        if fault.kind == "stall":
            await trio.sleep(fault.seconds)
        return self._answer(fault, self._rows([text]), query=True)

    # sync interface
    def _embed_sync(self, text: str) -> object:
        fault = self.fault
        self.calls += 1
        if fault.kind == "stall":
            time.sleep(fault.seconds)
        return self._answer(fault, self._rows([text]), query=True)

    def _embed_batch_sync(self, texts: Sequence[str]) -> object:
        fault = self.fault
        self.calls += 1
        if fault.kind == "stall":
            time.sleep(fault.seconds)
        return self._answer(fault, self._rows(texts), query=False)

    def __repr__(self) -> str:
        return f"HostileEmbedder({self.inner!r}, fault={self.fault})"
