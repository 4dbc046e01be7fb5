"""Mutation tests: the harness must catch deliberately broken stores.

Each broken store is a thin wrapper around the real ``open_store`` (or, for the
composed path, the store's own parts) that breaks one promise of design §3.
For each one, Hypothesis must find a failure and shrink it to a few steps; the steps
come back as ``__notes__`` on the exception (``state.<rule>(...)`` lines), which we
count. A harness that only ever passes proves nothing.

The machines run on trio's ``MockClock`` with autojump: these stores do all their work
on the loop, so a deadlock fails its step as soon as every task blocks, and shrinking a
hang does not replay a wall-clock deadline (it took 30 s per hang mutant before).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from actors import HashingEmbedder, open_store
from actors._inmemory.arena import Arena
from actors.testing import VectorStoreMachine, inject_crash
from actors.testing._model import normalize64
from actors.testing.hostile import (
    HostileCall,
    HostileEmbedder,
    HostileInputViolation,
    entry_bytes,
    hostile_numbers,
    hostile_text,
    run_hostile_calls,
)
from protocol import (
    DEFAULT_NAMESPACE,
    EntryTooLarge,
    Poisoned,
    RetrievalReport,
    RetrievedTurn,
    Text,
    Thinking,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreUsage,
    payload_bytes,
    projection,
)
from protocol.messages import TurnsStored

# Derandomized, so the search is the same on every run; generous, since it stops at the
# first failure.
MUTANT_SETTINGS = settings(
    max_examples=300,
    stateful_step_count=10,
    # No explain phase: it replays the failure many more times, and we only count steps.
    phases=[Phase.generate, Phase.shrink],
    derandomize=True,
    database=None,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)
#: A shrunk counterexample must be at most this many rule steps (the open included).
MAX_STEPS = 6


def mock_clock() -> trio.abc.Clock:
    """Virtual time that jumps once every task has been blocked for 50 ms of real time."""
    return trio.testing.MockClock(autojump_threshold=0.05)


class Wrapper:
    """Delegates everything to the real handle; subclasses break one thing."""

    def __init__(self, inner: Any, config: VectorStoreConfig, embedder: Any) -> None:
        self.inner = inner
        self.config = config
        self.embedder = embedder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)


def mutant(wrapper: type[Wrapper]) -> type[VectorStoreMachine]:
    class Mutant(VectorStoreMachine):
        clock = mock_clock

        def open_store_under_test(
            self, config: VectorStoreConfig, embedder: object
        ) -> AbstractAsyncContextManager[Any]:
            @asynccontextmanager
            async def cm() -> AsyncIterator[Any]:
                async with open_store(config, embedder, clock=self.store_clock) as store:
                    yield wrapper(store, config, embedder)

            return cm()

        def inject_crash(self, store: Any) -> None:
            super().inject_crash(store.inner)

    Mutant.__name__ = Mutant.__qualname__ = f"Mutant{wrapper.__name__}"
    return Mutant


class HalfBatch(Wrapper):
    """Applies the turns before an oversized one, then fails."""

    async def store_turns(
        self, turns: Sequence[UnifiedMessage], namespace: str = DEFAULT_NAMESPACE, *a: Any
    ) -> TurnsStored:
        for i, turn in enumerate(turns):
            size = payload_bytes(turn)
            if size > self.config.max_entry_bytes:
                if i:
                    await self.inner.store_turns(list(turns[:i]), namespace, *a)
                raise EntryTooLarge(size, self.config.max_entry_bytes, i)
        result: TurnsStored = await self.inner.store_turns(turns, namespace, *a)
        return result


class OldestFirstTies(Wrapper):
    """Breaks ties oldest first."""

    @staticmethod
    def _reorder(report: RetrievalReport) -> RetrievalReport:
        turns = sorted(report.turns, key=lambda t: (-t.score, t.sequence))
        return RetrievalReport(turns=turns, scanned=report.scanned)

    async def retrieve(self, query: str, k: int) -> RetrievalReport:
        return self._reorder(await self.inner.retrieve(query, k))

    async def retrieve_in(self, namespace: str, query: str, k: int) -> RetrievalReport:
        return self._reorder(await self.inner.retrieve_in(namespace, query, k))

    async def retrieve_embedding(
        self, vector: object, k: int, namespace: str | None = None
    ) -> RetrievalReport:
        return self._reorder(await self.inner.retrieve_embedding(vector, k, namespace))


class EarlyVisibility(Wrapper):
    """Shows a batch to readers as soon as it is sent, before it commits."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.staged: list[tuple[int, str, UnifiedMessage, Any]] = []
        self.next_seq = 0

    async def store_turns(
        self, turns: Sequence[UnifiedMessage], namespace: str = DEFAULT_NAMESPACE, *a: Any
    ) -> TurnsStored:
        inner_embedder = self.embedder.inner
        survivors = list(turns)[-self.config.max_entries :]
        staged = [
            (
                self.next_seq + len(self.staged) + i,
                namespace,
                t,
                inner_embedder.embed(projection(t)),
            )
            for i, t in enumerate(survivors)
        ]
        self.staged.extend(staged)
        try:
            result: TurnsStored = await self.inner.store_turns(turns, namespace, *a)
            self.next_seq += len(result.sequences)
            return result
        finally:
            for item in staged:
                self.staged.remove(item)

    def __len__(self) -> int:
        return len(self.inner) + len(self.staged)

    def usage(self) -> VectorStoreUsage:
        usage: VectorStoreUsage = self.inner.usage()
        entries = min(usage.entries + len(self.staged), usage.capacity)
        return msgspec.structs.replace(usage, entries=entries, fraction=entries / usage.capacity)

    async def retrieve_embedding(
        self, vector: object, k: int, namespace: str | None = None
    ) -> RetrievalReport:
        report: RetrievalReport = await self.inner.retrieve_embedding(vector, k, namespace)
        query = normalize64(vector)
        extra = []
        for seq, ns, message, raw in self.staged:
            if namespace is not None and ns != namespace:
                continue
            v = normalize64(raw)
            score = 0.0 if query is None or v is None else float(v @ query)
            extra.append(
                RetrievedTurn(
                    message=message,
                    score=score,
                    sequence=seq,
                    namespace=ns,
                    source="offload",
                    metadata={},
                    id=f"turn-{seq}",
                )
            )
        turns = sorted([*report.turns, *extra], key=lambda t: (-t.score, -t.sequence))[:k]
        return RetrievalReport(turns=turns, scanned=report.scanned + len(extra))


class LeakyNamespace(Wrapper):
    """Ignores the namespace filter."""

    async def retrieve_in(self, namespace: str, query: str, k: int) -> RetrievalReport:
        result: RetrievalReport = await self.inner.retrieve(query, k)
        return result

    async def retrieve_embedding(
        self, vector: object, k: int, namespace: str | None = None
    ) -> RetrievalReport:
        result: RetrievalReport = await self.inner.retrieve_embedding(vector, k)
        return result


class HangOnCrash(Wrapper):
    """Hangs forever instead of raising Poisoned."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name in ("usage", "is_empty"):
            return attr

        async def hang_instead(*args: Any, **kwargs: Any) -> Any:
            try:
                return await attr(*args, **kwargs)
            except Poisoned:
                await trio.sleep_forever()

        return hang_instead


class ForgetLeavesPostings(Wrapper):
    """Forgets memories but leaves their BM25 postings (and so the namespace's BM25
    statistics) behind: the removals a forget (or delete) queues for the BM25 index are
    dropped instead of applied."""

    def __init__(self, inner: Any, config: VectorStoreConfig, embedder: Any) -> None:
        super().__init__(inner, config, embedder)
        inner._actor.arena.__class__ = _PostingsKeepingArena


class _PostingsKeepingArena(Arena):
    __slots__ = ()

    def flush_removals(self) -> None:
        pending = self._bm25_pending
        for slot in [slot for slot, index in pending.items() if not index]:
            del pending[slot]


class UpdateLeavesOldVisible(Wrapper):
    """An update writes the new version and closes the old one, but reads still see
    the closed version: the visibility mask of a read of current versions ignores
    ``valid_to``."""

    def __init__(self, inner: Any, config: VectorStoreConfig, embedder: Any) -> None:
        super().__init__(inner, config, embedder)
        inner._actor.arena.__class__ = _ClosedStaysVisibleArena


class _ClosedStaysVisibleArena(Arena):
    __slots__ = ()

    def visible(self, high: int, now_us: int, as_of_us: int | None = None) -> Any:
        mask = super().visible(high, now_us, as_of_us)
        if mask is None or as_of_us is not None:
            return mask
        held = self.seqs[:high] >= 0
        if self.expiring_total:
            held &= self.expires_us[:high] > now_us
        return held


def count_steps(error: BaseException) -> list[str]:
    notes = getattr(error, "__notes__", [])
    return [
        line
        for line in notes
        if line.startswith("state.") and not line.startswith("state.teardown")
    ]


@pytest.mark.parametrize(
    ("wrapper", "step_timeout", "step_count", "max_steps"),
    [
        (HalfBatch, 10.0, 10, MAX_STEPS),
        (OldestFirstTies, 10.0, 10, MAX_STEPS),
        (EarlyVisibility, 10.0, 10, MAX_STEPS),
        (LeakyNamespace, 10.0, 10, MAX_STEPS),
        (UpdateLeavesOldVisible, 10.0, 10, MAX_STEPS),
        # Stale postings show once the BM25 index exists (a BM25 read built it), a
        # removal then left some behind, and an entry with a word of the machine's is
        # still there to score: the machine draws empty texts far more often, so this
        # one needs longer runs, and its counterexamples are not shrunk as far.
        (ForgetLeavesPostings, 10.0, 20, 20),
        # The hang is detected by the step deadline, in the MockClock's virtual time:
        # it passes 50 ms after every task blocks, however long the deadline, so a
        # slow honest step on a loaded machine is never taken for the hang.
        (HangOnCrash, 10.0, 10, MAX_STEPS),
    ],
)
def test_machine_catches_broken_store(
    wrapper: type[Wrapper], step_timeout: float, step_count: int, max_steps: int
) -> None:
    machine = mutant(wrapper)
    machine.step_timeout = step_timeout
    with pytest.raises(Exception) as info:  # noqa: PT011 - any failure will do
        run_state_machine_as_test(
            machine, settings=settings(MUTANT_SETTINGS, stateful_step_count=step_count)
        )
    steps = count_steps(info.value)
    assert steps, f"no steps were reported in the notes of {info.value!r}"
    assert len(steps) <= max_steps, "\n".join(steps)


def test_unbroken_wrapper_passes() -> None:
    """The control: the same wrapping with nothing broken must pass, so the mutants
    fail because of their bug and not because of the wrapping."""
    run_state_machine_as_test(mutant(Wrapper), settings=MUTANT_SETTINGS)


# --- one lifecycle: a composed path that never starts a task ---------------------------


@asynccontextmanager
async def store_without_its_scan_runner(config: VectorStoreConfig, embedder: object) -> Any:
    """``open_store`` with one task missing: the actor lists no services, so the store's
    one lifecycle (``actors._store.lifecycle.run_store``) never starts its scan runner, and
    every read is sent to it (``thread_scan_threshold=0``). This is how ``open_memory``
    built its own store before ``actors/_store/lifecycle.py``: its big reads waited forever."""
    from actors._inmemory.actor import _StoreActor
    from actors._store.handle import StoreHandle
    from actors._store.lifecycle import run_store

    class ActorWithoutServices(_StoreActor):
        def services(self) -> list[Any]:
            return []

    actor = ActorWithoutServices(config, embedder, 64, thread_scan_threshold=0)
    async with run_store(actor, StoreHandle._create(actor, "memory")) as handle:
        yield handle


class NoScanRunner(VectorStoreMachine):
    clock = mock_clock

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object
    ) -> AbstractAsyncContextManager[Any]:
        return store_without_its_scan_runner(config, embedder)


def test_machine_catches_a_scan_runner_that_never_started() -> None:
    """The hang is reported as the step's ``TooSlowError``, found and shrunk in about a
    second of real time: it does not stall CI."""
    with pytest.raises(trio.TooSlowError) as info:
        run_state_machine_as_test(NoScanRunner, settings=MUTANT_SETTINGS)
    steps = count_steps(info.value)
    assert steps, f"no steps were reported in the notes of {info.value!r}"
    assert len(steps) <= MAX_STEPS, "\n".join(steps)
    # a step that reads: a read, or the check of what a read sees around a removal or
    # an update (delete, clear, forget, update)
    reads = ("state.read", "state.forget(", "state.update(", "state.delete(", "state.clear(")
    assert any(step.startswith(reads) for step in steps), "\n".join(steps)


# --- only bugs poison: an input that crashes the actor, a field left out of the size count -------


TEXT = hostile_text(max_size=12)


def _turn_call(text: str, thinking: str) -> HostileCall:
    def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
        content: list[Any] = [Text(text=text)]
        if thinking:
            content.append(Thinking(text=thinking))
        return ([UnifiedMessage(role="user", content=content)],), {}

    def writes() -> list[tuple[int, str]]:
        (turns,), _ = make()
        return [(entry_bytes(turns[0]), "the turn")]

    return HostileCall("store_turns", make, label=f"{text!r:.80}, thinking={thinking!r:.40}",
                       writes=writes)  # fmt: skip


def _retrieve_call(query: str, k: object) -> HostileCall:
    return HostileCall("retrieve", lambda: ((query, k), {}), label=f"{query!r:.60}, k={k!r}")


# Hostile text (lone surrogates, NUL, C0 and C1 controls, megabyte strings) and counts,
# no embedder faults: the real store keeps the invariant on all of them, so each mutant
# fails for its own bug and the control passes.
CLEAN_CALLS = st.lists(
    st.one_of(
        st.builds(
            _turn_call,
            TEXT,
            st.one_of(st.just(""), st.text(max_size=8), st.integers(0, 600).map("t".__mul__)),
        ),
        st.builds(_retrieve_call, TEXT, st.one_of(st.integers(1, 10), hostile_numbers())),
    ),
    min_size=1,
    max_size=4,
)
HOSTILE_MUTANT_SETTINGS = settings(
    max_examples=300,
    report_multiple_bugs=False,
    phases=[Phase.generate, Phase.shrink],
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class CrashOnControlCharacter(Wrapper):
    """Its actor crashes on a turn that holds a C0 control character."""

    async def store_turns(self, turns: Sequence[UnifiedMessage], *a: Any, **kw: Any) -> Any:
        if any(chr(c) in t.text() for t in turns for c in range(0x20)):
            inject_crash(self.inner)
        return await self.inner.store_turns(turns, *a, **kw)


class UncountedThinking(Wrapper):
    """Leaves ``Thinking`` blocks out of the size count: it checks only the Text blocks
    against ``max_entry_bytes`` and lets a store with a far larger cap hold the rest."""

    async def store_turns(self, turns: Sequence[UnifiedMessage], *a: Any, **kw: Any) -> Any:
        for i, turn in enumerate(turns):
            size = sum(
                len(b.text.encode("utf-8", "surrogatepass"))
                for b in turn.content
                if isinstance(b, Text)
            )
            if size > self.config.max_entry_bytes:
                raise EntryTooLarge(size, self.config.max_entry_bytes, i)
        return await self.inner.store_turns(turns, *a, **kw)


@asynccontextmanager
async def wrapped_store(
    wrapper: type[Wrapper], config: VectorStoreConfig, embedder: object, clock: Any = None
) -> AsyncIterator[Wrapper]:
    # The uncounted field must reach the arena: the inner store gets a cap that holds it.
    inner_config = config
    if wrapper is UncountedThinking:
        inner_config = msgspec.structs.replace(config, max_entry_bytes=1 << 22)
    async with open_store(inner_config, embedder, clock=clock) as store:
        yield wrapper(store, config, embedder)


async def hostile_run(wrapper: type[Wrapper], calls: list[HostileCall]) -> None:
    embedder = HostileEmbedder(HashingEmbedder(8))
    config = VectorStoreConfig(max_entries=8, dimensions=8, max_entry_bytes=256)
    with trio.fail_after(30):
        async with wrapped_store(wrapper, config, embedder) as store:
            await run_hostile_calls(store, calls, embedder)


@pytest.mark.parametrize(
    ("wrapper", "violation"),
    [
        (CrashOnControlCharacter, "poisoned the store (input must never)"),
        (UncountedThinking, "so EntryTooLarge was expected"),
    ],
)
def test_hostile_layer_catches_broken_store(wrapper: type[Wrapper], violation: str) -> None:
    @HOSTILE_MUTANT_SETTINGS
    @given(calls=CLEAN_CALLS)
    def check(calls: list[HostileCall]) -> None:
        trio.run(hostile_run, wrapper, calls)

    with pytest.raises(HostileInputViolation) as info:
        check()
    assert violation in str(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    calls = notes.count("_turn_call(") + notes.count("_retrieve_call(")
    assert 1 <= calls <= MAX_STEPS, notes


def test_hostile_layer_unbroken_wrapper_passes() -> None:
    """The control: the same calls through the plain wrapper keep the invariant."""

    @HOSTILE_MUTANT_SETTINGS
    @given(calls=CLEAN_CALLS)
    def check(calls: list[HostileCall]) -> None:
        trio.run(hostile_run, Wrapper, calls)

    check()


def test_machine_catches_a_field_left_out_of_the_size_count() -> None:
    """The state machine pads turns with Thinking past the cap, so it catches the
    uncounted field too."""

    class Mutant(VectorStoreMachine):
        clock = mock_clock

        def open_store_under_test(
            self, config: VectorStoreConfig, embedder: object
        ) -> AbstractAsyncContextManager[Any]:
            return wrapped_store(UncountedThinking, config, embedder, self.store_clock)

        def inject_crash(self, store: Any) -> None:
            super().inject_crash(store.inner)

    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(Mutant, settings=MUTANT_SETTINGS)
    # Either a padded turn is let in, or an update's index text is not cut to the cap
    # (the mutant's store holds more than it says): its BM25 scores then differ.
    message = str(info.value)
    assert "expected ['EntryTooLarge']" in message or "after the store settled" in message
    steps = count_steps(info.value)
    assert steps and len(steps) <= MAX_STEPS, "\n".join(steps)
