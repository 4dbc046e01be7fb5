"""A trio-aware base for Hypothesis rule-based state machines.

Hypothesis drives a state machine synchronously, one step at a time. This base keeps
one trio loop alive for a whole example, in a worker thread, and runs each async rule,
initializer and invariant on it through ``trio.from_thread.run``, under a per-step
deadline. Only Hypothesis's public API is used: Hypothesis calls a step and expects its
result, so an ``async def`` step is first made a plain sync method by :func:`trio_step`,
and Hypothesis's own ``rule``, ``initialize``, ``invariant`` and ``precondition`` decorate
that::

    from hypothesis.stateful import initialize, rule

    class MyMachine(TrioRuleBasedStateMachine):
        @initialize()
        @trio_step
        async def open(self) -> None: ...

Anything an example opens with :meth:`TrioRuleBasedStateMachine.enter_async_context`
(a store, a nursery of background tasks) is entered and exited by one long-lived task
on the loop, as trio requires of context managers that hold a nursery.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import ClassVar, Concatenate, ParamSpec, TypeVar, TypeVarTuple

import attrs
import trio
import trio.testing
from hypothesis.stateful import RuleBasedStateMachine

__all__ = ["LoopStopTimeout", "TrioRuleBasedStateMachine", "trio_step"]

T = TypeVar("T")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")
M = TypeVar("M", bound="TrioRuleBasedStateMachine")

_ASYNC_STEP = "__trio_recall_async_step__"


class LoopStopTimeout(RuntimeError):
    """The example's trio loop did not stop in time at teardown: something hangs."""


def trio_step(f: Callable[Concatenate[M, P], Awaitable[T]]) -> Callable[Concatenate[M, P], T]:
    """Make an ``async def`` method of a :class:`TrioRuleBasedStateMachine` a sync step
    that runs on the example's trio loop, under the machine's ``step_timeout``.

    Put it directly above the ``async def``, under Hypothesis's own decorators
    (``hypothesis.stateful.rule``, ``initialize``, ``invariant``, ``precondition``),
    whose arguments (``target``, ``targets``, strategies) then work unchanged::

        @precondition(lambda self: self.store is not None)
        @rule(n=st.integers(0, 5))
        @trio_step
        async def write(self, n: int) -> None: ...

    Raises:
        TypeError: ``f`` is not an ``async def`` (a sync step needs no wrapper), or it is
            already wrapped by a sync decorator (put ``@trio_step`` innermost).
    """
    if not inspect.iscoroutinefunction(f):
        if inspect.iscoroutinefunction(inspect.unwrap(f)):
            raise TypeError(
                f"trio_step got {f.__qualname__}, an async def already wrapped by a sync "
                "decorator; put @trio_step directly above the async def, under "
                "hypothesis's @rule/@initialize/@invariant/@precondition"
            )
        raise TypeError(
            f"trio_step takes an async def method; got {f!r}, which is not one "
            "(a sync step needs no wrapper)"
        )

    @functools.wraps(f)
    def step(self: M, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run_on_loop(functools.partial(f, self, *args, **kwargs))

    # The wrapper must look sync to anything that unwraps it (Hypothesis's proxies and
    # our own check for un-wrapped async steps), but keep the signature for reports.
    del step.__wrapped__
    step.__signature__ = inspect.signature(f)  # type: ignore[attr-defined]
    setattr(step, _ASYNC_STEP, f)
    return step


@attrs.define(eq=False)
class _EnterRequest:
    cm: AbstractAsyncContextManager[object]
    done: trio.Event = attrs.field(factory=trio.Event)
    value: object = None
    error: BaseException | None = None


@asynccontextmanager
async def _task_nursery() -> AsyncIterator[trio.Nursery]:
    # Background tasks are cancelled, not awaited, when their layer closes: a pending
    # operation that the example left blocked must not hang teardown.
    async with trio.open_nursery() as nursery:
        try:
            yield nursery
        finally:
            nursery.cancel_scope.cancel()


def _unwrap_group(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class _Loop:
    """One trio run in a daemon thread, plus the task that owns its contexts."""

    def __init__(self, name: str, clock: trio.abc.Clock | None = None) -> None:
        self.clock = clock
        self.token: trio.lowlevel.TrioToken | None = None
        self.error: BaseException | None = None
        self.nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._send: trio.MemorySendChannel[_EnterRequest] | None = None
        self.thread = threading.Thread(target=self._thread_main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()
        if self.token is None:
            self.thread.join()
            raise RuntimeError("the example's trio loop failed to start") from self.error

    def _thread_main(self) -> None:
        try:
            trio.run(self._main, clock=self.clock)
        except BaseException as error:  # reported to the test thread, never dropped
            self.error = _unwrap_group(error)
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        async with AsyncExitStack() as stack:
            self.nursery = await stack.enter_async_context(_task_nursery())
            send, receive = trio.open_memory_channel[_EnterRequest](0)
            self._send = send
            self._ready.set()
            async with receive:
                async for request in receive:
                    try:
                        request.value = await stack.enter_async_context(request.cm)
                    except Exception as error:
                        request.error = error
                    finally:
                        request.done.set()
                    if request.error is None:
                        # A fresh layer of tasks, so that tasks started after this context
                        # are cancelled before it closes.
                        self.nursery = await stack.enter_async_context(_task_nursery())

    async def enter(self, cm: AbstractAsyncContextManager[T]) -> T:
        assert self._send is not None
        request = _EnterRequest(cm)
        await self._send.send(request)
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.value  # type: ignore[return-value]

    def stop(self, timeout: float) -> None:
        if self.thread.is_alive() and self._send is not None and self.token is not None:
            # The loop may finish on its own meanwhile; then there is nothing to close.
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._send.close, trio_token=self.token)
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise LoopStopTimeout(
                f"the example's trio loop did not stop within {timeout} s of teardown; "
                "something it opened hangs while closing"
            )


class TrioRuleBasedStateMachine(RuleBasedStateMachine):
    """A ``RuleBasedStateMachine`` whose rules may be ``async def``.

    Decorate steps with Hypothesis's own ``rule``, ``initialize``, ``invariant`` and
    ``precondition`` (and use its ``Bundle``, ``consumes``, ``multiple``), with
    :func:`trio_step` directly above each ``async def``. One trio loop runs
    for the whole example, in a worker thread; it starts at the first step and stops at
    :meth:`teardown`. Every async step runs under ``step_timeout`` seconds, so a hang
    fails the example with ``trio.TooSlowError`` instead of stalling the run.

    Inside an async step:

    - :meth:`start_soon` starts a background task that outlives the step (a pending
      write, a reader...). Tasks run until they block; :meth:`settle` waits until every
      task is blocked. A background task that raises ends the example: its error is
      raised by the next step, or by teardown.
    - :meth:`enter_async_context` opens a context manager (a store) for the rest of the
      example; it is closed at teardown, after the background tasks are cancelled.

    Override :meth:`async_teardown` to clean up on the loop before it stops. Teardown
    then stops the loop, joins its thread (within ``stop_timeout`` seconds) and re-raises
    any error that escaped from a background task or a context.

    Attributes:
        step_timeout: the deadline of one step, in seconds of the loop's clock.
        hang_replay_timeout: once a step of this class has timed out, the deadline of
            every later step of the class, if shorter than ``step_timeout``: shrinking
            a hang replays it many times, and each replay would otherwise wait the
            whole ``step_timeout`` (one mutant test took 34 s that way, and a composed
            path's hang over five minutes at 10 s).
        stop_timeout: how long teardown waits for the loop to stop, in seconds.
        clock: makes the clock of each example's loop; None is trio's real clock.
            ``lambda: trio.testing.MockClock(autojump_threshold=0.05)`` turns a
            deadlock into a ``TooSlowError`` about 0.05 s after every task blocks,
            whatever ``step_timeout`` says, so a hang costs almost nothing each time
            Hypothesis replays it while shrinking. Only for machines whose store does
            all its work on the loop: a worker thread that computes for longer than
            the threshold lets virtual time jump past the deadline.
    """

    step_timeout: ClassVar[float] = 10.0
    stop_timeout: ClassVar[float] = 10.0
    clock: ClassVar[Callable[[], trio.abc.Clock] | None] = None
    hang_replay_timeout: ClassVar[float] = 1.0
    _hang_seen: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if not callable(value) or inspect.iscoroutinefunction(value):
                continue
            if getattr(value, _ASYNC_STEP, None) is not None:
                continue
            if inspect.iscoroutinefunction(inspect.unwrap(value)) and hasattr(
                value, "__wrapped__"
            ):
                raise TypeError(
                    f"{cls.__name__}.{name} is an async def wrapped by a sync decorator "
                    "(probably hypothesis.stateful.rule/initialize/invariant) without "
                    "actors.testing.trio_step, so hypothesis would get a coroutine; put "
                    "@trio_step directly above the async def, under hypothesis's decorators"
                )

    def __init__(self) -> None:
        super().__init__()
        self.__loop: _Loop | None = None

    # --- running steps -----------------------------------------------------------------

    def run_on_loop(self, afn: Callable[[], Awaitable[T]]) -> T:
        """Run ``afn()`` on the example's loop, under ``step_timeout``; return its result.

        This is what an async rule becomes. Call it from sync code only (a sync rule, a
        sync invariant); inside an async step, just ``await``.

        Once ``afn`` returns, the loop settles (every task runs until it blocks), so the
        tasks a step started have run, deterministically, before the next step.

        Raises:
            trio.TooSlowError: the step did not finish within ``step_timeout``.
            BaseException: whatever the step raised, or an error that escaped from a
                background task or a context while the step ran.
        """
        loop = self._loop()
        self._raise_escaped()
        cls = type(self)
        timeout = self.step_timeout
        if cls._hang_seen:
            timeout = min(timeout, self.hang_replay_timeout)

        async def step() -> T:
            with trio.fail_after(timeout):
                result = await afn()
                # Tasks the step started run until they block before the next step, so
                # an error they raise shows up at the same step on every replay.
                await trio.testing.wait_all_tasks_blocked()
                return result

        try:
            return trio.from_thread.run(step, trio_token=loop.token)
        except trio.TooSlowError:
            # Every later example of this class is a replay while Hypothesis shrinks
            # the hang (or a new search after it failed): give it the shorter deadline.
            cls._hang_seen = True
            raise
        except (trio.Cancelled, trio.RunFinishedError):
            # The loop ended under the step: report why it ended.
            loop.thread.join(self.stop_timeout)
            self._raise_escaped()
            raise

    def _loop(self) -> _Loop:
        if self.__loop is None:
            clock = type(self).clock
            self.__loop = _Loop(
                f"trio-loop:{type(self).__name__}", None if clock is None else clock()
            )
        return self.__loop

    def _raise_escaped(self) -> None:
        loop = self.__loop
        if loop is not None and loop.error is not None:
            raise loop.error

    # --- inside steps ------------------------------------------------------------------

    @property
    def nursery(self) -> trio.Nursery:
        """The nursery for background tasks of this example (use it on the loop only)."""
        nursery = self._loop().nursery
        assert nursery is not None
        return nursery

    def start_soon(self, afn: Callable[[*Ts], Awaitable[object]], *args: *Ts) -> None:
        """Start ``afn(*args)`` as a background task; call it from an async step."""
        self.nursery.start_soon(afn, *args)

    async def enter_async_context(self, cm: AbstractAsyncContextManager[T]) -> T:
        """Enter ``cm`` for the rest of the example and return what it yields.

        It is entered and, at teardown, exited by the loop's main task, so a context that
        holds a nursery (like :func:`actors.open_store`) is legal here. Contexts close in
        reverse order; the background tasks started after a context close before it.
        """
        return await self._loop().enter(cm)

    async def settle(self) -> None:
        """Wait until every task on the loop is blocked (no sleeps involved)."""
        await trio.testing.wait_all_tasks_blocked()

    # --- teardown ----------------------------------------------------------------------

    async def async_teardown(self) -> None:
        """Clean up on the loop, before it stops. Does nothing by default."""

    def teardown(self) -> None:
        """Run :meth:`async_teardown`, stop the loop, join it, re-raise escaped errors."""
        loop = self.__loop
        if loop is None:
            return
        try:
            if loop.thread.is_alive() and loop.error is None:
                self.run_on_loop(self.async_teardown)
        finally:
            loop.stop(self.stop_timeout)
            self._raise_escaped()
