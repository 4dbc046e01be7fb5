"""The trio-aware state machine base and the fake embedders."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

import hypothesis.stateful
import numpy as np
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from actors import HashingEmbedder
from actors.testing import (
    DeterministicFakeEmbedding,
    EmbedderFailure,
    Fault,
    FaultyEmbedder,
    TrioRuleBasedStateMachine,
    trio_step,
)
from protocol import ConfigError

QUICK = settings(
    max_examples=10,
    stateful_step_count=6,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class Boom(Exception):
    pass


# --- the base ------------------------------------------------------------------------


class CounterMachine(TrioRuleBasedStateMachine):
    """Async rules, a bundle, a precondition, a background task and a context."""

    numbers = Bundle("numbers")

    def __init__(self) -> None:
        super().__init__()
        self.tokens: set[object] = set()
        self.threads: set[int] = set()
        self.total = 0
        self.seen_by_task = 0
        self.wakeup: trio.Event | None = None
        self.opened: list[str] = []

    def _where(self) -> None:
        self.tokens.add(trio.lowlevel.current_trio_token())
        self.threads.add(threading.get_ident())

    @asynccontextmanager
    async def resource(self) -> AsyncIterator[str]:
        self.opened.append("open")
        try:
            yield "resource"
        finally:
            self.opened.append("closed")

    @initialize()
    @trio_step
    async def start(self) -> None:
        self._where()
        assert await self.enter_async_context(self.resource()) == "resource"
        self.wakeup = trio.Event()

        async def watcher() -> None:
            assert self.wakeup is not None
            await self.wakeup.wait()
            self.seen_by_task = self.total

        self.start_soon(watcher)

    @rule(target=numbers, n=st.integers(0, 5))
    @trio_step
    async def make(self, n: int) -> int:
        self._where()
        await trio.lowlevel.checkpoint()
        return n

    @rule(n=numbers)
    @trio_step
    async def add(self, n: int) -> None:
        self._where()
        self.total += n

    @precondition(lambda self: self.wakeup is not None and not self.wakeup.is_set())
    @rule()
    @trio_step
    async def wake(self) -> None:
        assert self.wakeup is not None
        self.wakeup.set()
        await self.settle()
        assert self.seen_by_task == self.total

    @invariant()
    @trio_step
    async def on_the_loop(self) -> None:
        self._where()
        assert len(self.tokens) == 1, "every step must run on the example's one loop"
        assert threading.get_ident() != threading.main_thread().ident

    @invariant()
    def total_is_a_sum_of_draws(self) -> None:
        # A sync step takes hypothesis's decorator as it is, with no trio_step.
        assert self.total >= 0
        assert threading.get_ident() == threading.main_thread().ident

    def teardown(self) -> None:
        super().teardown()
        assert self.opened == ["open", "closed"]


def test_async_rules_run_on_one_loop_per_example() -> None:
    run_state_machine_as_test(CounterMachine, settings=QUICK)


TestCounter = CounterMachine.TestCase


def test_hypothesis_rule_on_async_def_is_refused() -> None:
    with pytest.raises(TypeError, match=r"without actors\.testing\.trio_step"):

        class Wrong(TrioRuleBasedStateMachine):
            @hypothesis.stateful.rule()
            async def step(self) -> None:
                pass


def test_trio_step_refuses_a_sync_def_and_the_wrong_order() -> None:
    async def body() -> None:
        pass

    def sync_step(self: TrioRuleBasedStateMachine) -> Awaitable[None]:
        # Returns an awaitable, but is no async def: hypothesis would get a coroutine.
        return body()

    with pytest.raises(TypeError, match="takes an async def method"):
        trio_step(sync_step)

    async def async_step(self: TrioRuleBasedStateMachine) -> None:
        pass

    with pytest.raises(TypeError, match="put @trio_step directly above the async def"):
        trio_step(rule()(async_step))


class HangingMachine(TrioRuleBasedStateMachine):
    step_timeout = 0.05

    @rule()
    @trio_step
    async def hang(self) -> None:
        await trio.sleep_forever()


def test_a_hanging_step_fails_with_too_slow() -> None:
    with pytest.raises(trio.TooSlowError):
        run_state_machine_as_test(
            HangingMachine, settings=settings(QUICK, max_examples=1, phases=["generate"])
        )


class LeakingMachine(TrioRuleBasedStateMachine):
    @rule()
    @trio_step
    async def spawn_failure(self) -> None:
        async def fail() -> None:
            raise Boom("escaped from a background task")

        self.start_soon(fail)

    @rule()
    @trio_step
    async def idle(self) -> None:
        await trio.lowlevel.checkpoint()


def test_an_error_escaping_a_task_is_reraised() -> None:
    with pytest.raises(Boom, match="escaped"):
        run_state_machine_as_test(LeakingMachine, settings=QUICK)


class FailingCloseMachine(TrioRuleBasedStateMachine):
    @asynccontextmanager
    async def bad(self) -> AsyncIterator[None]:
        yield
        raise Boom("failed while closing")

    @initialize()
    @trio_step
    async def open(self) -> None:
        await self.enter_async_context(self.bad())

    @rule()
    @trio_step
    async def idle(self) -> None:
        await trio.lowlevel.checkpoint()


def test_teardown_reraises_an_error_from_closing_a_context() -> None:
    with pytest.raises(Boom, match="closing"):
        run_state_machine_as_test(FailingCloseMachine, settings=QUICK)


class ThreadCheckMachine(TrioRuleBasedStateMachine):
    threads: list[threading.Thread] = []  # noqa: RUF012 - collected across examples

    @rule()
    @trio_step
    async def note_thread(self) -> None:
        type(self).threads.append(threading.current_thread())


def test_teardown_joins_the_loop_thread() -> None:
    ThreadCheckMachine.threads.clear()
    run_state_machine_as_test(ThreadCheckMachine, settings=QUICK)
    assert ThreadCheckMachine.threads
    assert not any(t.is_alive() for t in ThreadCheckMachine.threads)


# --- the fakes -----------------------------------------------------------------------


def test_deterministic_fake_embedding_is_deterministic_and_spread() -> None:
    a, b = DeterministicFakeEmbedding(64, seed=1), DeterministicFakeEmbedding(64, seed=1)
    words = [f"text {i}" for i in range(40)]
    first, second = a.embed_batch(words), b.embed_batch(words)
    assert np.array_equal(first, second)
    assert np.array_equal(a.embed("text 3"), first[3])
    unit = first / np.linalg.norm(first, axis=1, keepdims=True)
    cosines = unit @ unit.T
    off_diagonal = np.abs(cosines[~np.eye(len(words), dtype=bool)])
    assert off_diagonal.max() < 0.7, "different texts should give well-spread vectors"
    assert not np.array_equal(DeterministicFakeEmbedding(64, seed=2).embed("x"), a.embed("x"))
    assert not a.embed("").any(), "the empty text is the zero vector"


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_deterministic_fake_embedding_validates_dimensions(bad: object) -> None:
    with pytest.raises(ConfigError, match="dimensions is"):
        DeterministicFakeEmbedding(bad)  # type: ignore[arg-type]


async def test_faulty_embedder_actions() -> None:
    with trio.fail_after(10):
        faulty = FaultyEmbedder(HashingEmbedder(4))
        for action, check in [
            ("wrong_width", lambda v: v.shape == (3,)),
            ("nan", lambda v: np.isnan(v).any()),
            ("huge", lambda v: np.all(v == 1e30)),
            ("pass", lambda v: np.array_equal(v, HashingEmbedder(4).embed("apple"))),
        ]:
            faulty.script_documents(Fault(action))  # type: ignore[arg-type]
            (vector,) = await faulty.embed_documents(["apple"])
            assert check(vector), action
        faulty.script_query(Fault("raise"))
        with pytest.raises(EmbedderFailure, match="query call"):
            await faulty.embed_query("apple")
        error = KeyError("mine")
        faulty.script_documents(Fault("raise", error=error))
        with pytest.raises(KeyError) as info:
            await faulty.embed_documents(["x"])
        assert info.value is error


async def test_faulty_embedder_gate_parks_the_call() -> None:
    with trio.fail_after(10):
        faulty = FaultyEmbedder(HashingEmbedder(4))
        gate = trio.Event()
        faulty.script_documents(Fault(gate=gate), ["b"])
        results: list[object] = []
        async with trio.open_nursery() as nursery:

            async def call(text: str) -> None:
                results.append((text, await faulty.embed_documents([text])))

            nursery.start_soon(call, "a")  # does not match the script: not parked
            nursery.start_soon(call, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert [r[0] for r in results] == ["a"]  # type: ignore[index]
            gate.set()
        assert [r[0] for r in results] == ["a", "b"]  # type: ignore[index]
        assert faulty.pending_scripts("documents") == 0


async def test_faulty_embedder_fail_on() -> None:
    with trio.fail_after(10):
        by_index = FaultyEmbedder(HashingEmbedder(4), fail_on={1})
        await by_index.embed_query("a")
        with pytest.raises(EmbedderFailure):
            await by_index.embed_documents(["b"])
        by_call = FaultyEmbedder(
            HashingEmbedder(4), fail_on=lambda call: Fault("nan") if "bad" in call.texts else None
        )
        assert np.isnan(await by_call.embed_query("bad")).any()
        assert not np.isnan(await by_call.embed_query("good")).any()
        assert [c.kind for c in by_call.calls] == ["query", "query"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"inner": object()}, "inner is a object"),
        ({"inner": HashingEmbedder(4), "fail_on": 3}, "fail_on is a int"),
        ({"inner": HashingEmbedder(4), "fail_on": ["1"]}, "fail_on holds '1'"),
        ({"inner": HashingEmbedder(4), "max_scripted": 0}, "max_scripted is 0"),
    ],
)
def test_faulty_embedder_validates(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FaultyEmbedder(**kwargs)  # type: ignore[arg-type]


def test_fault_and_scripts_validate() -> None:
    with pytest.raises(ConfigError, match="fault action is 'explode'"):
        Fault("explode")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="gate is a int"):
        Fault(gate=3)  # type: ignore[arg-type]
    faulty = FaultyEmbedder(HashingEmbedder(4), max_scripted=1)
    faulty.script_documents(Fault())
    with pytest.raises(ConfigError, match="the bound is 1"):
        faulty.script_documents(Fault())
    with pytest.raises(ConfigError, match="expected Fault"):
        faulty.script_query("raise")  # type: ignore[arg-type]
    assert faulty.pending_scripts("documents") == 1
