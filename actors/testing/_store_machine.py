"""``VectorStoreMachine``: the store's contract (design §3) as a Hypothesis state machine.

The machine drives a store with concurrent writers and readers and compares it, after
every step, with :class:`~actors.testing.ModelState`, a float64 brute-force model.

How concurrency is checked. Every write and read runs as a background task. A write
can be told to park inside its embedder call (a :class:`Fault` with a gate), and a
text read can park inside its query embedding, so Hypothesis chooses when each one
goes on. Writes apply in one order, the order they entered the store's inbox, so the
model keeps ``history[j]``, the state after the first ``j`` writes. A read that
started when writes ``< lo`` had replied and ended when ``hi`` writes had started must
equal the model's answer at some ``history[j]`` with ``lo <= j <= hi``; anything else
is a torn or premature read.

What the model assumes about a store (override the machine to change it): sequence
numbers start at 0 and grow by one per stored entry; writes apply in the order they
were sent; a write that does not reach the embedder (an oversized turn, an empty batch,
a delete) does not call it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import ClassVar

import attrs
import numpy as np
import numpy.typing as npt
import trio
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from actors import AnyEmbedder, Embedder
from protocol import (
    DEFAULT_NAMESPACE,
    ConfigError,
    ContentBlock,
    Document,
    EmbedderError,
    EmbeddingError,
    EntryTooLarge,
    Poisoned,
    RetrievalReport,
    ScoredDocument,
    SearchRequest,
    Text,
    Thinking,
    UnifiedMessage,
    VectorStoreConfig,
    projection,
)
from protocol.checks import document_bytes, metadata_json, turn_bytes
from protocol.messages import TurnsStored

from .. import HashingEmbedder, open_store
from ._conformance_base import StoreUnderTest
from ._crash import inject_crash
from ._fakes import DeterministicFakeEmbedding, Fault, FaultyEmbedder, ManualClock
from ._machine import TrioRuleBasedStateMachine, trio_step
from ._model import ModelEntry, ModelState, Vector64, check_report, normalize64

__all__ = ["VectorStoreMachine"]

WORDS = ("apple", "berry", "cedar", "delta", "ember", "fjord")
NAMESPACES = (DEFAULT_NAMESPACE, "alice", "bob")
_BARRIER_NAMESPACE = "trio-recall-barrier"

texts = st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join)
#: What a write's ``ttl`` may be (seconds; None: the entry never expires).
ttls = st.sampled_from([None, None, None, 5, 30])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TOKEN = re.compile(r"[^\W_]+")


def micros(when: dt.datetime) -> int:
    """``when`` as micros since the epoch (what both stores keep exactly)."""
    return (when - _EPOCH) // dt.timedelta(microseconds=1)


def from_micros(us: int) -> dt.datetime:
    """Micros since the epoch as an aware datetime in UTC."""
    return _EPOCH + dt.timedelta(microseconds=us)


def message(role: str, text: str, pad: int) -> UnifiedMessage:
    """A turn whose projection is ``text``; ``pad`` bytes of thinking only add payload."""
    content: list[ContentBlock] = [Text(text=text)]
    if pad:
        content.append(Thinking(text="t" * pad))
    return UnifiedMessage(role=role, content=content)  # type: ignore[arg-type]


messages = st.builds(
    message, st.sampled_from(["user", "assistant"]), texts, st.sampled_from([0, 0, 0, 8, 48])
)
# Mostly well-behaved calls, so that most writes commit and most reads return; the
# faults still come up often enough.
faults = st.sampled_from(["pass", "pass", "pass", "raise", "wrong_width", "nan", "huge"])
query_faults = st.sampled_from(["pass", "pass", "pass", "raise", "nan"])
parks = st.sampled_from([False, False, True])
vector_kinds = st.sampled_from(["text", "zero", "scaled", "list", "wrong_width", "nan"])
read_kinds = st.sampled_from(["retrieve", "retrieve_in", "retrieve_embedding"])


@attrs.define(eq=False)
class _Op:
    """One pending store call, run as a background task."""

    number: int
    kind: str  # "write" or "read"
    label: str
    version: int  # write: its history index; read: the lowest history index it may see
    expect_errors: tuple[type[BaseException], ...]
    check: Callable[[_Op], str | None]
    gate: trio.Event | None = None
    reaches_embedder: bool = False
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    finished: trio.Event = attrs.field(factory=trio.Event)
    value: object = None
    error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<op {self.number}: {self.label}>"


@attrs.frozen
class _TurnsWrite:
    """One ``store_turns`` call the machine makes: its arguments and the embedder fault
    it arms."""

    turns: list[UnifiedMessage]
    namespace: str
    source: str
    metadata: dict[str, object]
    fault: str
    ttl: int | None = None


@attrs.frozen
class _ReadPlan:
    """One read the machine is about to start, and what the model needs to judge it."""

    label: str
    call: Callable[[], Awaitable[object]]
    expect: tuple[type[BaseException], ...]
    gate: trio.Event | None
    qvec: Vector64 | None  # the normalized float64 query, or None when the vector must be refused
    k: int
    ns: str | None
    vector: object  # retrieve_embedding's vector, and a copy of it as given
    before: npt.NDArray[np.generic] | None


class VectorStoreMachine(TrioRuleBasedStateMachine):
    """Checks a store against design §3, with concurrent readers and writers.

    By default it tests :func:`actors.open_store`. To check another store, subclass it
    and override :meth:`open_store_under_test` (and :meth:`inject_crash`, or set
    ``supports_crash`` to False). Run it with ``run_state_machine_as_test(Machine)`` or
    ``TestMachine = Machine.TestCase``.

    Memory over time (docs/pages/how-to/memory-over-time.md). The store runs on the machine's
    :attr:`store_clock` (a ``ManualClock`` passed as ``open_store(clock=...)``), which only
    the ``advance_clock`` rule moves. Writes may carry a ``ttl``; ``update`` writes a
    memory's next version and closes the current one; ``forget`` removes memories by
    id, by filter or by time, every version; reads run ``as_of`` an earlier time and
    as BM25 searches, whose scores the model recomputes, so a posting or statistic a
    forget left behind shows. The model reclaims expired entries at each committed
    write, as the store does; between writes the store may reclaim them on its own, so
    the usage check accepts either count.

    Attributes:
        supports_crash: whether the crash rule runs.
        supports_time: whether the rules that need the store clock (``ttl``,
            ``update``, ``advance_clock``, ``as_of`` and ``forget(before=...)``) may run.
            They run only when the store opened on :attr:`store_clock` too (its
            ``clock`` is that object), so a store opened without it, as before memory
            over time, still passes the rest.
        max_pending: how many operations may be pending at once.
        store_clock: the store's clock; pass it as ``clock=`` when you open the store.
    """

    supports_crash: ClassVar[bool] = True
    supports_time: ClassVar[bool] = True
    max_pending: ClassVar[int] = 4

    def __init__(self) -> None:
        super().__init__()
        self.store: StoreUnderTest | None = None
        self.embedder: FaultyEmbedder | None = None
        self.config: VectorStoreConfig | None = None
        self.history: list[ModelState] = []
        self.lo = 0  # writes [0, lo) are known to have applied
        self.pending: list[_Op] = []
        self.ids: dict[int, str] = {}  # sequence -> id, learned from replies and reads
        self.poisoned = False
        self._numbers = 0
        self.store_clock = ManualClock()
        self.timed = False  # the store runs on store_clock (set once it is open)

    # --- overridable -------------------------------------------------------------------

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: AnyEmbedder
    ) -> AbstractAsyncContextManager[StoreUnderTest]:
        """Return an async context manager that yields the store to test (on
        :attr:`store_clock`, when :attr:`supports_time`)."""
        return open_store(config, embedder, clock=self.store_clock)

    def inject_crash(self, store: StoreUnderTest) -> None:
        """Make ``store``'s next write crash inside its actor."""
        inject_crash(store)

    # --- set-up --------------------------------------------------------------------------

    @initialize(
        max_entries=st.integers(1, 5),
        dimensions=st.sampled_from([4, 8, 16]),
        # A padded turn's second block counts BLOCK_OVERHEAD (64) too: these caps fit
        # some padded turns and refuse others.
        max_entry_bytes=st.sampled_from([32, 64, 128, 160]),
        warn_fraction=st.sampled_from([None, 0.5, 1.0]),
        hashing=st.booleans(),
    )
    @trio_step
    async def open(
        self,
        max_entries: int,
        dimensions: int,
        max_entry_bytes: int,
        warn_fraction: float | None,
        hashing: bool,
    ) -> None:
        self.config = VectorStoreConfig(
            max_entries=max_entries,
            dimensions=dimensions,
            max_entry_bytes=max_entry_bytes,
            warn_fraction=warn_fraction,
        )
        inner = HashingEmbedder(dimensions) if hashing else DeterministicFakeEmbedding(dimensions)
        self.embedder = FaultyEmbedder(inner)
        self.history = [ModelState(capacity=max_entries)]
        self.store = await self.enter_async_context(
            self._tolerate_poison(self.open_store_under_test(self.config, self.embedder))
        )
        clock = getattr(self.store, "clock", None)
        self.timed = self.supports_time and clock is self.store_clock
        await self.check_usage()

    @asynccontextmanager
    async def _tolerate_poison(
        self, cm: AbstractAsyncContextManager[StoreUnderTest]
    ) -> AsyncIterator[StoreUnderTest]:
        # A poisoned store raises Poisoned when it closes (design §3); that is expected
        # once this machine crashed it, and a bug otherwise.
        try:
            async with cm as store:
                yield store
        except Poisoned:
            if not self.poisoned:
                raise

    # --- helpers -------------------------------------------------------------------------

    @property
    def state(self) -> ModelState:
        return self.history[-1]

    @property
    def now(self) -> int:
        """The store clock's now, in micros."""
        return micros(self.store_clock.now)

    def _inner_embed(self, text: str) -> object:
        assert self.embedder is not None
        inner = self.embedder.inner
        assert isinstance(inner, Embedder)  # HashingEmbedder or DeterministicFakeEmbedding
        return inner.embed(text)

    def _start(self, op: _Op, call: Callable[[], Awaitable[object]]) -> None:
        async def run() -> None:
            with op.scope:
                try:
                    op.value = await call()
                except Exception as error:
                    op.error = error
            op.finished.set()

        self.pending.append(op)
        self.start_soon(run)

    def _new_op(
        self,
        kind: str,
        label: str,
        version: int,
        expect_errors: tuple[type[BaseException], ...],
        check: Callable[[_Op], str | None],
        *,
        gate: trio.Event | None = None,
        reaches_embedder: bool = False,
    ) -> _Op:
        self._numbers += 1
        return _Op(
            self._numbers,
            kind,
            label,
            version,
            expect_errors,
            check,
            gate=gate,
            reaches_embedder=reaches_embedder,
        )

    def _hi(self) -> int:
        """The newest history index the store may show now.

        A write still parked in its embedder (its gate not yet set) cannot have
        committed, and neither can any write behind it in the inbox."""
        for op in self.pending:
            if op.kind == "write" and op.gate is not None and not op.gate.is_set():
                return op.version - 1
        return len(self.history) - 1

    def _blocked(self, op: _Op) -> bool:
        """Whether ``op`` is expected to be parked on a gate (its own, or a write's
        ahead of it in the inbox)."""
        if op.kind == "read":
            return op.gate is not None and not op.gate.is_set()
        for other in self.pending:
            if other.kind != "write" or other.version > op.version:
                continue
            if other.finished.is_set():
                continue
            if other.gate is not None and not other.gate.is_set():
                return True
        return False

    async def _quiesce(self, *, check_usage: bool = True) -> None:
        """Let every operation that is not parked on a gate finish, then check them."""
        while True:
            await self.settle()
            runnable = [
                op for op in self.pending if not op.finished.is_set() and not self._blocked(op)
            ]
            if not runnable:
                break
            await runnable[0].finished.wait()
        self._check_finished()
        if check_usage:
            await self.check_usage()
        if not self.pending and self.embedder is not None:
            # A script a call never used (the store did not call the embedder when the
            # model said it would) must not leak into later steps.
            self.embedder._scripts["documents"].clear()
            self.embedder._scripts["query"].clear()

    def _check_finished(self) -> None:
        for op in list(self.pending):
            if not op.finished.is_set():
                continue
            self.pending.remove(op)
            if op.scope.cancelled_caught:
                continue
            if op.error is not None:
                if self.poisoned and isinstance(op.error, Poisoned):
                    continue
                if not isinstance(op.error, op.expect_errors):
                    raise AssertionError(
                        f"{op.label} raised {op.error!r}; expected "
                        f"{[t.__name__ for t in op.expect_errors] or 'success'}"
                    ) from op.error
                # A rejected write proves nothing about the writes ahead of it: a store
                # may refuse a batch before it queues it.
                continue
            if op.expect_errors:
                raise AssertionError(
                    f"{op.label} returned {op.value!r:.200}; expected "
                    f"{[t.__name__ for t in op.expect_errors]}"
                )
            problem = op.check(op)
            if problem is not None:
                raise AssertionError(f"{op.label}: {problem}")
            if op.kind == "write":
                self.lo = max(self.lo, op.version)

    def _learn_ids(self, report: RetrievalReport) -> str | None:
        for hit in report.turns:
            known = self.ids.setdefault(hit.sequence, hit.id)
            if known != hit.id:
                return f"sequence {hit.sequence} has id {hit.id!r}; it had {known!r} before"
        return None

    async def _expect_poisoned(self, call: Callable[[], Awaitable[object]], what: str) -> None:
        try:
            result = await call()
        except Poisoned:
            return
        raise AssertionError(f"{what} on a poisoned store returned {result!r:.200}")

    # --- writes ----------------------------------------------------------------------

    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(
        turns=st.lists(messages, max_size=7),
        namespace=st.sampled_from(NAMESPACES),
        source=st.sampled_from(["offload", "compaction"]),
        metadata=st.sampled_from([{}, {"k": 1}]),
        fault=faults,
        park=parks,
        ttl=ttls,
    )
    @trio_step
    async def store_turns(
        self,
        turns: list[UnifiedMessage],
        namespace: str,
        source: str,
        metadata: dict[str, object],
        fault: str,
        park: bool,
        ttl: int | None,
    ) -> None:
        ttl = ttl if self.timed else None
        write = _TurnsWrite(turns, namespace, source, metadata, fault, ttl)
        await self._write_turns(write, park)

    # Hypothesis favours the rule with the fewest arguments (and then the first name)
    # when it simplifies, so this one-argument rule keeps plain, successful writes
    # common instead of letting ``clear`` dominate.
    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(entry=st.tuples(texts, st.sampled_from(NAMESPACES)))
    @trio_step
    async def add(self, entry: tuple[str, str]) -> None:
        """Store one well-behaved turn."""
        text, namespace = entry
        write = _TurnsWrite([message("user", text, 0)], namespace, "offload", {}, "pass")
        await self._write_turns(write, park=False)

    async def _write_turns(self, write: _TurnsWrite, park: bool) -> None:
        assert self.config is not None
        assert self.embedder is not None
        store = self.store
        assert store is not None
        turns, namespace = write.turns, write.namespace
        if self.poisoned:
            await self._expect_poisoned(lambda: store.store_turns(turns, namespace), "store_turns")
            return
        expect, new_state, evicted, seqs, zero, reaches = self._model_write(write)
        gate = trio.Event() if park and reaches else None
        if reaches:
            self.embedder.script_documents(
                Fault(write.fault, gate=gate),  # type: ignore[arg-type]
                [projection(t) for t in turns[-self.config.max_entries :]],
            )
        self.history.append(new_state)
        version = len(self.history) - 1
        op = self._new_op(
            "write",
            f"store_turns#{version}({len(turns)} turns, {namespace!r}, fault={write.fault})",
            version,
            expect_errors=expect,
            check=lambda op: self._check_turns_stored(op, seqs, evicted, zero),
            gate=gate,
            reaches_embedder=reaches,
        )
        self._start(
            op,
            lambda: store.store_turns(
                turns, namespace, write.source, write.metadata, ttl=write.ttl
            ),
        )
        await self._quiesce()

    def _model_write(
        self, write: _TurnsWrite
    ) -> tuple[tuple[type[BaseException], ...], ModelState, int, list[int], int, bool]:
        """What a ``store_turns`` call should do to the model: ``(errors it may raise,
        the state after it, evictions, sequences, zero-norm entries, whether it reaches
        the embedder)``."""
        assert self.config is not None
        turns, source, metadata = write.turns, write.source, write.metadata
        state = self.state
        cap = self.config.max_entries
        # What max_entry_bytes counts: the payload, the blocks, the source, the metadata.
        meta = len(metadata_json(metadata))
        limit = self.config.max_entry_bytes
        too_large = any(turn_bytes(t, source=source, metadata=meta) > limit for t in turns)
        survivors = turns[-cap:]
        reaches = bool(survivors) and not too_large
        if too_large:
            return (EntryTooLarge,), state, 0, [], 0, reaches
        if reaches and write.fault == "raise":
            return (EmbedderError,), state, 0, [], 0, reaches
        if reaches and write.fault != "pass":
            return (EmbeddingError,), state, 0, [], 0, reaches
        now = self.now
        state = state.reclaimed(now)
        entries = [
            ModelEntry.build(
                state.next_seq + i,
                write.namespace,
                t,
                source,
                metadata,
                self._inner_embed(projection(t)),
                entry_id=f"turn-{state.next_seq + i}",
                valid_from=now,
                expires=None if write.ttl is None else now + write.ttl * 1_000_000,
            )
            for i, t in enumerate(survivors)
        ]
        new_state, evicted = state.add(entries, len(turns) - len(survivors))
        zero = sum(1 for e in entries if e.vector is None)
        return (), new_state, evicted, [e.seq for e in entries], zero, reaches

    def _check_turns_stored(self, op: _Op, seqs: list[int], evicted: int, zero: int) -> str | None:
        """Why a ``store_turns`` reply differs from the model's, or None; learns its ids."""
        reply = op.value
        if not isinstance(reply, TurnsStored):
            return f"replied {reply!r}; expected TurnsStored"
        if reply.sequences != seqs:
            return f"sequences {reply.sequences}; the model expects {seqs}"
        if (reply.evicted, reply.zero_norm) != (evicted, zero):
            return (
                f"evicted={reply.evicted} zero_norm={reply.zero_norm}; the model "
                f"expects evicted={evicted} zero_norm={zero}"
            )
        if len(reply.ids) != len(seqs) or len(set(reply.ids)) != len(seqs):
            return f"ids {reply.ids} are not one distinct id per entry"
        for seq, entry_id in zip(seqs, reply.ids, strict=True):
            if entry_id in self.ids.values() and self.ids.get(seq) != entry_id:
                return f"id {entry_id!r} was reused"
            self.ids[seq] = entry_id
        return None

    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(
        picks=st.lists(st.integers(0, 40), max_size=3),
        unknown=st.booleans(),
        namespace=st.sampled_from((None, *NAMESPACES)),
    )
    @trio_step
    async def delete(self, picks: list[int], unknown: bool, namespace: str | None) -> None:
        store = self.store
        assert store is not None
        known = sorted(self.ids.items())
        ids = [known[p % len(known)][1] for p in picks] if known else []
        if unknown:
            ids.append("no-such-id")
        if self.poisoned:
            await self._expect_poisoned(lambda: store.delete(ids, namespace), "delete")
            return
        # Checked before a removal too, which builds the BM25 index a removal must keep.
        await self._check_settled(None, namespace or DEFAULT_NAMESPACE)
        state = self.state.reclaimed(self.now)
        space = namespace or DEFAULT_NAMESPACE  # None means the default namespace
        deleted, missing, gone = [], [], set()
        for entry_id in dict.fromkeys(ids):
            # A delete removes every version the store holds of the memory.
            versions = {e.seq for e in state.in_scope(space) if e.entry_id == entry_id}
            if versions:
                deleted.append(entry_id)
                gone |= versions
            else:
                missing.append(entry_id)
        self.history.append(state.without(gone))
        version = len(self.history) - 1

        def check(op: _Op) -> str | None:
            got = (getattr(op.value, "deleted", None), getattr(op.value, "missing", None))
            if got == (deleted, missing):
                return None
            return f"replied {op.value!r}; expected deleted={deleted} missing={missing}"

        op = self._new_op("write", f"delete#{version}({ids}, {namespace!r})", version, (), check)
        self._start(op, lambda: store.delete(ids, namespace))
        await self._quiesce()
        await self._check_settled(None, space)

    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(namespace=st.sampled_from((None, *NAMESPACES)))
    @trio_step
    async def clear(self, namespace: str | None) -> None:
        store = self.store
        assert store is not None
        if self.poisoned:
            await self._expect_poisoned(lambda: store.clear(namespace), "clear")
            return
        await self._check_settled(None, namespace or DEFAULT_NAMESPACE)
        state = self.state.reclaimed(self.now)
        gone = {e.seq for e in state.in_scope(namespace)}
        self.history.append(state.without(gone))
        version = len(self.history) - 1

        def check(op: _Op) -> str | None:
            removed = getattr(op.value, "removed", None)
            return None if removed == len(gone) else f"removed {removed}; expected {len(gone)}"

        op = self._new_op("write", f"clear#{version}({namespace!r})", version, (), check)
        self._start(op, lambda: store.clear(namespace))
        await self._quiesce()
        for space in NAMESPACES if namespace is None else (namespace,):
            await self._check_settled(None, space)

    # --- reads -----------------------------------------------------------------------

    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(
        kind=read_kinds,
        query=texts,
        k=st.integers(-1, 7),
        namespace=st.sampled_from(NAMESPACES),
        scoped=st.booleans(),
        fault=query_faults,
        vector_kind=vector_kinds,
        park=parks,
    )
    @trio_step
    async def read(
        self,
        kind: str,
        query: str,
        k: int,
        namespace: str,
        scoped: bool,
        fault: str,
        vector_kind: str,
        park: bool,
    ) -> None:
        ns: str | None = (
            namespace
            if kind == "retrieve_in" or (kind == "retrieve_embedding" and scoped)
            else None
        )
        plan = self._plan_read(kind, query, k, namespace, ns, fault, vector_kind, park)
        assert self.embedder is not None
        if self.poisoned:
            if k > 0 and kind != "retrieve_embedding":
                self.embedder._scripts["query"].clear()
            try:
                await plan.call()
            except (Poisoned, *plan.expect):  # type: ignore[misc]
                return
            raise AssertionError(f"{plan.label} on a poisoned store did not raise Poisoned")
        lo = self.lo
        op = self._new_op(
            "read", plan.label, lo, plan.expect, lambda op: self._check_read(op, plan, lo),
            gate=plan.gate,
        )  # fmt: skip
        self._start(op, plan.call)
        await self._quiesce()

    def _plan_read(
        self,
        kind: str,
        query: str,
        k: int,
        namespace: str,
        ns: str | None,
        fault: str,
        vector_kind: str,
        park: bool,
    ) -> _ReadPlan:
        """What the read will call, what it may raise, and the query the model ranks by;
        arms the embedder's query fault."""
        assert self.config is not None
        assert self.embedder is not None
        store = self.store
        assert store is not None
        expect: tuple[type[BaseException], ...] = ()
        gate: trio.Event | None = None
        raw = np.asarray(self._inner_embed(query), dtype=np.float64)
        call: Callable[[], Awaitable[object]]
        vector: object = None
        before: npt.NDArray[np.generic] | None = None
        if kind == "retrieve_embedding":
            vector = {
                "text": raw.astype(np.float32),
                "zero": np.zeros_like(raw),
                "scaled": raw * 1000.0,
                "list": raw.tolist(),
                "wrong_width": raw[:-1],
                "nan": np.full_like(raw, np.nan),
            }[vector_kind]
            before = np.array(vector, copy=True)
            qvec = normalize64(vector) if vector_kind not in ("wrong_width", "nan") else None
            if k <= 0:
                expect = (ConfigError,)
                if vector_kind in ("wrong_width", "nan"):
                    expect = (ConfigError, EmbeddingError)
            elif vector_kind in ("wrong_width", "nan"):
                expect = (EmbeddingError,)
            label = f"retrieve_embedding({vector_kind}, k={k}, namespace={ns!r})"
            call = lambda: store.retrieve_embedding(vector, k, namespace=ns)  # noqa: E731
        else:
            qvec = normalize64(raw)
            if k <= 0:
                expect = (ConfigError,)
            else:
                if fault == "raise":
                    expect = (EmbedderError,)
                elif fault == "nan":
                    expect = (EmbeddingError,)
                gate = trio.Event() if park else None
                self.embedder.script_query(Fault(fault, gate=gate), query)  # type: ignore[arg-type]
            if kind == "retrieve":
                label = f"retrieve({query!r}, k={k}, fault={fault})"
                call = lambda: store.retrieve(query, k)  # noqa: E731
            else:
                label = f"retrieve_in({ns!r}, {query!r}, k={k}, fault={fault})"
                call = lambda: store.retrieve_in(namespace, query, k)  # noqa: E731
        return _ReadPlan(label, call, expect, gate, qvec, k, ns, vector, before)

    def _check_read(self, op: _Op, plan: _ReadPlan, lo: int) -> str | None:
        """Why a read's report matches no state it may have seen, or None."""
        report = op.value
        if not isinstance(report, RetrievalReport):
            return f"returned {report!r}; expected RetrievalReport"
        vector = plan.vector
        if plan.before is not None and not np.array_equal(
            np.array(vector), plan.before, equal_nan=True
        ):
            return "changed the caller's query array"
        problem = self._learn_ids(report)
        if problem is not None:
            return problem
        reasons = []
        hi = self._hi()
        for j in range(lo, hi + 1):
            reason = check_report(
                report, self.history[j], plan.qvec, plan.k, plan.ns, now=self.now
            )
            if reason is None:
                return None
            reasons.append(f"  after write {j}: {reason}")
        hits = [(h.sequence, round(h.score, 6)) for h in report.turns]
        return (
            f"matches no state between write {lo} and write {hi} "
            f"(scanned={report.scanned}, hits={hits}):\n" + "\n".join(reasons)
        )

    # --- memory over time --------------------------------------------------------------

    def _time_ok(self) -> bool:
        return self.timed and not self.pending and not self.poisoned

    @precondition(lambda self: self._time_ok())
    @rule(seconds=st.sampled_from([1, 10, 40]))
    @trio_step
    async def advance_clock(self, seconds: int) -> None:
        """Move the store clock on (nothing pending, so no write straddles it): what
        has expired disappears from every read at once."""
        self.store_clock.advance(seconds)
        await self._quiesce()

    @precondition(lambda self: self._time_ok() and self._current_memories())
    @rule(pick=st.integers(0, 40), text=texts, metadata=st.sampled_from([None, {}, {"k": 1}]))
    @trio_step
    async def update(self, pick: int, text: str, metadata: dict[str, object] | None) -> None:
        """Write a memory's next version: the current one is closed at the new one's
        ``valid_from`` (the clock's now, one second on) and kept as history."""
        assert self.config is not None
        store = self.store
        assert store is not None
        self.store_clock.advance(1)
        now = self.now
        current = self._current_memories()
        if not current:
            return  # the second on expired the last of them
        old = current[pick % len(current)]
        assert old.entry_id is not None
        meta = old.metadata if metadata is None else metadata
        state = self.state.reclaimed(now)
        when = self.store_clock.now
        document = Document(text=text, id=old.entry_id, metadata=meta)
        size = document_bytes(document)
        limit = self.config.max_entry_bytes
        expect: tuple[type[BaseException], ...] = ()
        if size > limit:
            expect = (EntryTooLarge,)
            new_state = self.state
        else:
            # An update given no ``valid_from`` is indexed and embedded by its text,
            # as any write given no time.
            index = text
            closed = tuple(attrs.evolve(e, valid_to=now) if e is old else e for e in state.entries)
            entry = ModelEntry.build(
                state.next_seq,
                old.namespace,
                UnifiedMessage.user(text),
                "document",
                dict(meta),
                self._inner_embed(index),
                entry_id=old.entry_id,
                version=old.version + 1,
                valid_from=now,
                expires=old.expires,
                index_text=index,
            )
            new_state, _ = attrs.evolve(state, entries=closed).add([entry], 0)
        self.history.append(new_state)
        version = len(self.history) - 1
        memory_id, namespace = old.entry_id, old.namespace

        def check(op: _Op) -> str | None:
            got = op.value
            if not isinstance(got, Document):
                return f"replied {got!r:.200}; expected the new version as a Document"
            want = (memory_id, text, old.version + 1, old.version, when, None)
            have = (got.id, got.text, got.version, got.supersedes, got.valid_from, got.valid_to)
            if have != want:
                return f"the new version is {have}; the model expects {want}"
            self.ids[new_state.next_seq - 1] = memory_id
            return None

        op = self._new_op(
            "write",
            f"update#{version}({memory_id!r}, {text!r}, {namespace!r})",
            version,
            expect,
            check,
        )
        self._start(op, lambda: store.update(memory_id, text, metadata, namespace=namespace))
        await self._quiesce()
        await self._check_settled(memory_id, namespace)

    async def _check_settled(self, memory_id: str | None, namespace: str) -> None:
        """Once nothing is pending: every entry a read sees, ``memory_id``'s history
        and the namespace's BM25 scores (whose statistics hold whatever a forget left
        behind) must be the model's."""
        store = self.store
        if self.pending or self.poisoned or store is None or self.config is None:
            return
        state, now = self.state, self.now
        capacity = self.config.max_entries
        listing = await store.retrieve_embedding(np.zeros(self.config.dimensions), capacity)
        problem = check_report(listing, state, None, capacity, None, now=now)
        if problem is None and memory_id is not None:
            got = [(d.version, d.valid_to) for d in await store.history(memory_id, namespace)]
            want = [
                (e.version, None if e.valid_to is None else from_micros(e.valid_to))
                for e in sorted(state.in_scope(namespace), key=lambda e: e.version)
                if e.entry_id == memory_id and not e.expired(now)
            ]
            if got != want:
                problem = f"history({memory_id!r}) is {got}; the model has {want}"
        if problem is None:
            query = " ".join(WORDS)
            request = SearchRequest(query=query, kind="bm25", k=capacity, namespace=namespace)
            hits = await store.search(request)
            problem = _bm25_reason(hits, state, query, capacity, namespace, now)
        if problem is not None:
            raise AssertionError(f"after the store settled: {problem}")

    def _current_memories(self) -> list[ModelEntry]:
        """The current, unexpired versions of the last state, oldest first."""
        now = self.now
        return [e for e in self.state.entries if e.entry_id and e.sees(now, None)]

    @precondition(lambda self: len(self.pending) < self.max_pending)
    @rule(
        mode=st.sampled_from(["ids", "filter", "before", "all"]),
        picks=st.lists(st.integers(0, 40), max_size=3),
        namespace=st.sampled_from(NAMESPACES),
        back=st.sampled_from([0, 5, 30]),
    )
    @trio_step
    async def forget(self, mode: str, picks: list[int], namespace: str, back: int) -> None:
        """Forget memories, every version: by id, by a metadata filter, by time, or the
        whole namespace; the store must then hold no trace of them."""
        store = self.store
        assert store is not None
        if mode == "before" and not self.timed:
            mode = "filter"
        now = self.now
        known = [e for e in self.state.entries if e.entry_id]
        ids = [str(known[p % len(known)].entry_id) for p in picks] if known else []
        if mode == "ids" and ids:
            namespace = known[picks[0] % len(known)].namespace  # where the first one is
        before = self.store_clock.now - dt.timedelta(seconds=back)
        call: Callable[[], Awaitable[object]]
        if mode == "ids":
            call = lambda: store.forget(ids, namespace=namespace)  # noqa: E731
        elif mode == "filter":
            call = lambda: store.forget(namespace=namespace, filter={"k": 1})  # noqa: E731
        elif mode == "before":
            call = lambda: store.forget(namespace=namespace, before=before)  # noqa: E731
        else:
            call = lambda: store.forget(namespace=namespace)  # noqa: E731
        if self.poisoned:
            await self._expect_poisoned(call, "forget")
            return
        await self._check_settled(None, namespace)
        state = self.state.reclaimed(now)
        held = state.in_scope(namespace)
        if mode == "ids":
            chosen = [i for i in dict.fromkeys(ids) if any(e.entry_id == i for e in held)]
        else:
            # A selection picks memories by their current version.
            current = [e for e in held if e.sees(now, None)]
            if mode == "filter":
                current = [e for e in current if e.metadata.get("k") == 1]
            elif mode == "before":
                current = [e for e in current if e.valid_from < micros(before)]
            chosen = sorted({e.entry_id for e in current if e.entry_id is not None})
        gone = {e.seq for e in held if e.entry_id in chosen}
        self.history.append(state.without(gone))
        version = len(self.history) - 1
        ordered = mode == "ids"

        def check(op: _Op) -> str | None:
            got = op.value
            if not isinstance(got, list):
                return f"replied {got!r:.200}; expected the list of ids forgotten"
            if (got if ordered else sorted(got)) != chosen:
                return f"forgot {got}; the model expects {chosen}"
            return None

        op = self._new_op("write", f"forget#{version}({mode}, {namespace!r})", version, (), check)
        self._start(op, call)
        await self._quiesce()
        await self._check_settled(None, namespace)

    @precondition(lambda self: len(self.pending) < self.max_pending and not self.poisoned)
    @rule(
        kind=st.sampled_from(["as_of", "bm25"]),
        query=texts,
        k=st.integers(1, 7),
        namespace=st.sampled_from(NAMESPACES),
        back=st.sampled_from([0, 1, 5, 30]),
    )
    @trio_step
    async def read_over_time(
        self, kind: str, query: str, k: int, namespace: str, back: int
    ) -> None:
        """A similarity search ``as_of`` an earlier time (the versions valid then), or a
        BM25 search whose scores the model recomputes from the entries it holds."""
        store = self.store
        assert store is not None
        if kind == "as_of" and not self.timed:
            kind = "bm25"
        if kind == "bm25" and not query:
            query = WORDS[0]
        raw = np.asarray(self._inner_embed(query), dtype=np.float64)
        as_of = self.store_clock.now - dt.timedelta(seconds=back)
        lo = self.lo
        call: Callable[[], Awaitable[object]]
        if kind == "as_of":
            request = SearchRequest(
                vector=raw.tolist(),
                k=k,
                namespace=namespace,
                as_of=as_of,
                profile=store.profile,
            )
            call = lambda: store.search_turns(request)  # noqa: E731
            qvec = normalize64(raw)

            def check(op: _Op) -> str | None:
                return self._check_as_of(op, qvec, k, namespace, micros(as_of), lo)

        else:
            request = SearchRequest(query=query, kind="bm25", k=k, namespace=namespace)
            call = lambda: store.search(request)  # noqa: E731

            def check(op: _Op) -> str | None:
                return self._check_bm25(op, query, k, namespace, lo)

        label = f"{kind}({query!r}, k={k}, {namespace!r}, back={back})"
        op = self._new_op("read", label, lo, (), check)
        self._start(op, call)
        await self._quiesce()

    def _check_as_of(
        self, op: _Op, qvec: Vector64 | None, k: int, namespace: str, as_of: int, lo: int
    ) -> str | None:
        report = op.value
        if not isinstance(report, RetrievalReport):
            return f"returned {report!r:.200}; expected RetrievalReport"
        reasons = []
        for j in range(lo, self._hi() + 1):
            reason = check_report(
                report, self.history[j], qvec, k, namespace, now=self.now, as_of=as_of
            )
            if reason is None:
                return None
            reasons.append(f"  after write {j}: {reason}")
        return "matches no state:\n" + "\n".join(reasons)

    def _check_bm25(self, op: _Op, query: str, k: int, namespace: str, lo: int) -> str | None:
        hits = op.value
        if not isinstance(hits, list) or not all(isinstance(h, ScoredDocument) for h in hits):
            return f"returned {hits!r:.200}; expected a list of ScoredDocument"
        reasons = []
        for j in range(lo, self._hi() + 1):
            reason = _bm25_reason(hits, self.history[j], query, k, namespace, self.now)
            if reason is None:
                return None
            reasons.append(f"  after write {j}: {reason}")
        got = [(h.sequence, h.raw_score) for h in hits]
        return f"bm25 hits {got} match no state:\n" + "\n".join(reasons)

    # --- interleaving ------------------------------------------------------------------

    @precondition(
        lambda self: any(op.gate is not None and not op.gate.is_set() for op in self.pending)
    )
    @rule(pick=st.integers(0, 10), cascade=st.booleans())
    @trio_step
    async def release(self, pick: int, cascade: bool) -> None:
        """Let one parked operation go on; with ``cascade``, also every write ahead of
        it, so that it can finish."""
        parked = [op for op in self.pending if op.gate is not None and not op.gate.is_set()]
        target = parked[pick % len(parked)]
        for op in self.pending:
            ahead = cascade and "write" == op.kind == target.kind and op.version < target.version
            if (op is target or ahead) and op.gate is not None:
                op.gate.set()
        await self._quiesce()

    @precondition(
        lambda self: (
            any(op.kind == "write" for op in self.pending)
            and all(op.kind == "write" for op in self.pending)
            and not self.poisoned
        )
    )
    @rule()
    @trio_step
    async def cancel_last_write(self) -> None:
        """Cancel the newest pending writer while it waits; its batch must then be either
        fully applied or not at all (design §3)."""
        target = self.pending[-1]
        assert target.kind == "write"
        target.scope.cancel()
        for op in self.pending:
            if op.gate is not None:
                op.gate.set()
        await self._quiesce()
        store = self.store
        assert store is not None
        # A write of nothing, as a barrier: once it replies, the store has dealt with
        # every write sent before it, the cancelled one included.
        await store.clear(_BARRIER_NAMESPACE)
        applied, skipped = self.history[target.version], self.history[target.version - 1]
        assert self.config is not None
        capacity = self.config.max_entries
        listing = await store.retrieve_embedding(np.zeros(self.config.dimensions), capacity)
        seqs = {h.sequence for h in listing.turns}
        now = self.now
        if seqs == {e.seq for e in applied.visible(None, now)}:
            state = applied
        elif seqs == {e.seq for e in skipped.visible(None, now)}:
            state = skipped
        else:
            raise AssertionError(
                f"after cancelling {target.label}, the store holds sequences "
                f"{sorted(seqs)}: neither all of the batch nor none of it"
            )
        problem = check_report(listing, state, None, capacity, None, now=now)
        if problem is not None:
            raise AssertionError(f"listing every entry after a cancel: {problem}")
        problem = self._learn_ids(listing)
        if problem is not None:
            raise AssertionError(problem)
        self.history[-1] = state
        self.history.append(state.reclaimed(now))  # the barrier (a write: it reclaims)
        self.lo = len(self.history) - 1

    # --- crash ---------------------------------------------------------------------------

    @precondition(
        lambda self: (
            self.supports_crash
            and self.store is not None
            and not self.poisoned
            and all(op.kind == "write" for op in self.pending)
        )
    )
    @rule(roll=st.integers(0, 7))
    @trio_step
    async def crash(self, roll: int) -> None:
        """Crash the actor at its next commit: every later call raises Poisoned, queued
        writes included, and nothing hangs.

        It crashes on one roll in eight only, because a poisoned store has little left
        to test and the rest of the example would be spent on it.
        """
        if roll != 7:
            return
        store = self.store
        assert store is not None
        self.inject_crash(store)
        crashed = False
        for op in self.pending:
            if crashed:
                op.expect_errors = (Poisoned,)
            elif not op.expect_errors:
                op.expect_errors = (Poisoned,)
                crashed = True
            if op.gate is not None:
                op.gate.set()
        self.poisoned = True
        await self._quiesce(check_usage=False)
        if not crashed:
            await self._expect_poisoned(
                lambda: store.store_turns([UnifiedMessage.user("crash")]),
                "the crashing write",
            )
        await self.check_usage()
        await self._expect_poisoned(lambda: store.retrieve("apple", 1), "retrieve")

    # --- invariants ----------------------------------------------------------------------

    async def check_usage(self) -> None:
        """Usage, length and capacity must match the model at some possible state.

        Called at the end of every step (it is not an ``@invariant`` only to save a
        round trip to the loop per step)."""
        if self.store is None or self.config is None:
            return
        store = self.store
        if self.poisoned:
            for name, call in (("usage", store.usage), ("len", lambda: len(store))):
                try:
                    result = call()
                except Poisoned:
                    continue
                raise AssertionError(f"{name}() on a poisoned store returned {result!r}")
            return
        usage = store.usage()
        size = len(store)
        empty = store.is_empty()
        if store.capacity != self.config.max_entries or usage.capacity != store.capacity:
            raise AssertionError(f"capacity {store.capacity}; expected {self.config.max_entries}")
        wf = self.config.warn_fraction
        seen = []
        hi = self._hi()
        got = (
            usage.entries,
            usage.fraction,
            usage.near_cap,
            usage.evicted_entries,
            usage.zero_norm_entries,
        )
        for j in range(self.lo, hi + 1):
            # Between writes the store may have reclaimed what has expired, or not yet.
            for state in (self.history[j], self.history[j].reclaimed(self.now)):
                n = len(state.entries)
                fraction = n / self.config.max_entries
                expected = (
                    n,
                    fraction,
                    wf is not None and fraction >= wf,
                    state.evicted,
                    state.zero_norm,
                )
                if got == expected and size == n and empty == (n == 0):
                    return
                seen.append(f"  after write {j}: expected {expected}")
        raise AssertionError(
            f"usage {usage} (len {size}) matches no state between write {self.lo} and "
            f"write {hi}:\n" + "\n".join(seen)
        )

    # --- teardown ------------------------------------------------------------------------

    async def async_teardown(self) -> None:
        # Let every parked call go, so nothing is left blocked inside the store, then
        # give up on whatever has not finished.
        for op in self.pending:
            if op.gate is not None:
                op.gate.set()
            op.scope.cancel()


def _terms(text: str) -> list[str]:
    # The machine's words stem to distinct terms, so the tokens count as the terms do.
    return _TOKEN.findall(text.lower())


def _bm25_reason(
    hits: list[ScoredDocument],
    state: ModelState,
    query: str,
    k: int,
    namespace: str,
    now: int,
) -> str | None:
    """Why ``hits`` are not the BM25 answer over ``state``, or None.

    The statistics (N, the average length, each term's document frequency) count the
    entries the read sees (current and unexpired: a closed version or an expired entry
    weighs in no score of the present, reclaimed or not), and the hits are those
    holding a query term."""
    held = state.visible(namespace, now)
    docs = {e.seq: _terms(e.index_text or projection(e.message)) for e in held}
    n = len(held)
    avgdl = sum(len(d) for d in docs.values()) / n if n else 0.0
    qterms = _terms(query)
    weights: dict[str, float] = {}
    for term in qterms:
        df = sum(1 for d in docs.values() if term in d)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        weights[term] = weights.get(term, 0.0) + idf
    scores: dict[int, float] = {}
    for e in held:
        d = docs[e.seq]
        norm = 1.2 * (1 - 0.75 + 0.75 * len(d) / avgdl) if avgdl else 1.2
        total = 0.0
        for term, weight in weights.items():
            tf = d.count(term)
            if tf:
                total += weight * tf * 2.2 / (tf + norm)
        if total > 0:
            scores[e.seq] = total
    want = min(k, len(scores))
    if len(hits) != want:
        return f"{len(hits)} hits; the model has {len(scores)} matches, so expects {want}"
    last = math.inf
    for i, hit in enumerate(hits):
        if hit.sequence not in scores:
            return f"hit {i} (sequence {hit.sequence}) is not a visible entry with a query term"
        score = hit.raw_score  # the BM25 score (``score`` is it over the best hit's)
        if score is None:
            return f"hit {i} (sequence {hit.sequence}) has no raw_score"
        if score > last + 1e-9:
            return f"hit {i} scores {score}, above the hit before it ({last})"
        last = score
        expected = scores[hit.sequence]
        if abs(score - expected) > 1e-6 * max(1.0, expected):
            return f"hit {i} (sequence {hit.sequence}) scores {score}; model {expected}"
    if hits:
        floor = min(scores[h.sequence] for h in hits if h.sequence is not None)
        seen = {h.sequence for h in hits}
        for seq, score in scores.items():
            if seq not in seen and score > floor + 1e-6 * max(1.0, score):
                return f"sequence {seq} (model score {score}) is missing; the last hit: {floor}"
    return None
