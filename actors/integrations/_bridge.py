"""A trio store called from asyncio coroutines and from plain threads
(docs/pages/tutorials/langchain.md).

The store lives in a trio loop on a thread of its own (:meth:`TrioBridge.start`), or in
the caller's trio run (:meth:`TrioBridge.borrow`). Each call is ``fn(handle, *args)``, an
async function run as its own task in that loop:

- :meth:`TrioBridge.call` blocks the calling thread until the task ends;
- :meth:`TrioBridge.acall` awaits it without blocking the asyncio loop, so any number of
  coroutines may call at once (each is one trio task; the store's own bounds apply:
  its bounded inbox makes writers wait, reads never queue);
- cancelling an asyncio caller cancels its trio task, and the caller's cancellation
  ends once that task has ended, so a cancelled caller leaves nothing running;
- :meth:`TrioBridge.close` refuses new calls, cancels the ones in flight (they raise
  ``trio.ClosedResourceError``), closes the store inside its trio loop and joins the
  thread;
- a blocking call from the loop's own thread is refused with a ``RuntimeError`` that
  says why: it would wait for itself forever.

Only plain data should cross: ``args`` and results are msgspec Structs, str, lists and
dicts; the handle and every trio object stay in the trio thread.

Why a thread running ``trio.run`` and not ``trio.lowlevel.start_guest_run``: a guest run
shares the asyncio loop's thread, so a sync call from that thread (LangChain's sync API
called from an async node) would deadlock, and the store would be tied to one asyncio
loop; a thread serves every caller, sync or async, from any loop. Why not anyio's
``start_blocking_portal(backend="trio")``: it does the same with one more layer, cannot
borrow a store that is already open in the caller's trio run, and its ``call`` from a
portal task cannot tell a caller-side cancellation from the store closing. The round
trip of each is in docs/pages/benchmarks/adapters.md ("The LangChain vector store
through the bridge").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar, TypeVarTuple

import outcome
import trio

__all__ = ["TrioBridge"]

H = TypeVar("H")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _Job(Generic[H, T]):
    """One call: made in the caller's thread, run and settled in the trio thread."""

    __slots__ = ("caller_cancelled", "deliver", "fn", "scope")

    def __init__(
        self,
        fn: Callable[[H], Awaitable[T]],
        deliver: Callable[[outcome.Outcome[T]], None],
    ):
        self.fn = fn
        self.deliver = deliver
        self.scope = trio.CancelScope()
        self.caller_cancelled = False  # trio thread only


class TrioBridge(Generic[H]):
    """A trio store's handle, reachable from other threads and from asyncio.

    Make one with :meth:`start` (the bridge opens the store in a new thread and owns it)
    or :meth:`borrow` (a store already open in the current trio run). ``what`` names the
    user-facing object in error messages.
    """

    def __init__(self, what: str) -> None:
        self._what = what
        self._handle: H | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread_id: int | None = None
        self._thread: threading.Thread | None = None
        self._owned = False
        self._lock = threading.Lock()
        self._closed = False  # under _lock: no new calls
        self._crash: BaseException | None = None  # why the owned trio run ended early
        # trio thread only:
        self._accepting = True
        self._jobs: set[trio.CancelScope] = set()  # the scopes of the calls in flight
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._drained = threading.Event()

    # --- making one ------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        opener: Callable[[], AbstractAsyncContextManager[H]],
        *,
        what: str = "the trio-recall store",
        thread_name: str = "trio-recall",
    ) -> TrioBridge[H]:
        """Start a thread running a trio loop, enter ``opener()`` in it, and return once
        the store is open. The bridge owns the store: :meth:`close` leaves the block.

        The thread is a daemon, so a bridge never closed does not keep the process
        alive at exit (its store is then not closed cleanly: close it, or use the
        adapter as a context manager).

        Raises:
            Whatever opening the store raised (``ConfigError``, ``StoreUnavailable``...),
            as itself; the thread has ended then.
        """
        bridge = cls(what)
        bridge._owned = True
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        def main() -> None:
            try:
                trio.run(bridge._main, opener, ready)
            except BaseException as error:
                bridge._crash = error
                if not ready.done():
                    ready.set_exception(error)
            finally:
                if not ready.done():  # pragma: no cover - _main always settles it
                    ready.set_exception(RuntimeError(f"{what}: the trio loop ended"))
                bridge._drained.set()

        thread = threading.Thread(target=main, name=thread_name, daemon=True)
        bridge._thread = thread
        thread.start()
        try:
            ready.result()
        except BaseException:
            thread.join()
            bridge._crash = None  # raised here; close() has nothing more to report
            bridge._closed = True
            raise
        return bridge

    @classmethod
    def borrow(cls, handle: H, *, what: str = "the trio-recall store") -> TrioBridge[H]:
        """A bridge to a store open in the current trio run (call this in that run).

        The store stays the caller's: :meth:`close` ends the bridge's calls but leaves
        the store open. Calls run as trio system tasks of that run.

        Raises:
            RuntimeError: not called inside a trio run.
        """
        bridge = cls(what)
        try:
            bridge._token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            raise RuntimeError(
                f"{what} over an open store must be made inside the trio run that opened "
                "the store (no trio run is active in this thread)"
            ) from None
        bridge._handle = handle
        bridge._thread_id = threading.get_ident()
        return bridge

    async def _main(
        self,
        opener: Callable[[], AbstractAsyncContextManager[H]],
        ready: concurrent.futures.Future[None],
    ) -> None:
        # The store is entered outside the nursery, so that an error opening it leaves
        # as itself, not inside an ExceptionGroup.
        async with opener() as handle, trio.open_nursery() as nursery:
            self._handle = handle
            self._nursery = nursery
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._thread_id = threading.get_ident()
            ready.set_result(None)
            await self._stop.wait()
            # Every call has ended; leaving the block closes the store here, in trio.

    # --- calling ---------------------------------------------------------------------

    def call(self, fn: Callable[[H, *Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await fn(handle, *args)`` in the store's trio loop; block until done.

        Safe from any thread but the loop's own. A ``KeyboardInterrupt`` while waiting
        cancels the trio call and propagates.

        Raises:
            RuntimeError: called from the loop's own thread (it would deadlock).
            trio.ClosedResourceError: the bridge is closed, or closed during the call.
            Whatever ``fn`` raised, as itself.
        """
        self._check_thread(f"a blocking call to {self._what}")
        future: concurrent.futures.Future[outcome.Outcome[T]] = concurrent.futures.Future()
        job: _Job[H, T] = _Job(lambda handle: fn(handle, *args), future.set_result)
        self._submit(job)
        try:
            result = future.result()
        except BaseException:
            self._cancel(job)
            raise
        return result.unwrap()

    async def acall(self, fn: Callable[[H, *Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await fn(handle, *args)`` in the store's trio loop; await it in asyncio.

        Cancellation: cancelling the awaiting task cancels the trio call, then waits
        for it to end (a second cancel stops that wait) and raises
        ``asyncio.CancelledError``. A write the store had already queued is still
        applied, all or nothing (the store's own rule, design §3).

        Raises:
            RuntimeError: no asyncio loop runs here, or called from the trio loop's own
                thread.
            trio.ClosedResourceError: the bridge is closed, or closed during the call.
            Whatever ``fn`` raised, as itself.
        """
        self._check_thread(f"an async call to {self._what}")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[outcome.Outcome[T]] = loop.create_future()

        def deliver(result: outcome.Outcome[T]) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop has closed
                loop.call_soon_threadsafe(_settle, done, result)

        job: _Job[H, T] = _Job(lambda handle: fn(handle, *args), deliver)
        self._submit(job)
        try:
            result = await asyncio.shield(done)
        except asyncio.CancelledError:
            self._cancel(job)
            # The trio task ends at its next checkpoint; wait for that, so that a
            # cancelled caller leaves no call running behind it.
            await asyncio.shield(done)
            raise
        return result.unwrap()

    def _check_thread(self, what: str) -> None:
        if threading.get_ident() == self._thread_id:
            raise RuntimeError(
                f"{what} was made from the thread that runs its trio loop; it would wait "
                "for itself forever. Call it from another thread or from asyncio, or "
                "await the trio store's own methods in this thread."
            )

    def _submit(self, job: _Job[H, T]) -> None:
        with self._lock:
            if self._closed:
                raise trio.ClosedResourceError(f"{self._what} is closed")
            token = self._token
        assert token is not None
        try:
            token.run_sync_soon(self._spawn, job)
        except trio.RunFinishedError:
            raise trio.ClosedResourceError(
                f"{self._what}'s trio loop has stopped"
            ) from self._crash

    def _cancel(self, job: _Job[H, T]) -> None:
        token = self._token
        assert token is not None
        with contextlib.suppress(trio.RunFinishedError):  # it ended, and the call with it
            token.run_sync_soon(self._cancel_in_trio, job)

    # --- in the trio thread ----------------------------------------------------------

    def _spawn(self, job: _Job[H, T]) -> None:
        if not self._accepting:
            job.deliver(outcome.Error(trio.ClosedResourceError(f"{self._what} is closed")))
            return
        try:
            if self._nursery is not None:
                self._nursery.start_soon(self._run, job)
            else:
                trio.lowlevel.spawn_system_task(self._run, job)
        except RuntimeError as error:  # the run is ending (a crash): answer, never hang
            job.deliver(outcome.Error(trio.ClosedResourceError(f"{self._what}: {error}")))
            return
        self._jobs.add(job.scope)

    def _cancel_in_trio(self, job: _Job[H, T]) -> None:
        job.caller_cancelled = True
        job.scope.cancel()

    async def _run(self, job: _Job[H, T]) -> None:
        result: outcome.Outcome[T] | None = None
        try:
            with job.scope:
                try:
                    handle = self._handle
                    assert handle is not None  # set before a call can be submitted
                    value = await job.fn(handle)
                except Exception as error:
                    result = outcome.Error(error)
                else:
                    result = outcome.Value(value)
        except trio.Cancelled:
            raise  # the whole loop is going down; the finally below still answers
        except BaseException as error:
            result = outcome.Error(RuntimeError(f"{self._what}'s trio loop crashed: {error!r}"))
            raise
        finally:
            self._jobs.discard(job.scope)
            if result is None:
                # Cancelled: by the caller (who no longer waits for a value) or by close().
                what = "the call was cancelled" if job.caller_cancelled else "it closed"
                result = outcome.Error(
                    trio.ClosedResourceError(f"{self._what} did not answer: {what}")
                )
            job.deliver(result)
            if not self._accepting and not self._jobs:
                self._drained.set()

    def _begin_stop(self) -> None:
        self._accepting = False
        for scope in list(self._jobs):
            scope.cancel()
        if self._stop is not None:
            self._stop.set()
        elif not self._jobs:
            self._drained.set()

    # --- closing ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse new calls, cancel the calls in flight (each raises
        ``trio.ClosedResourceError``), and wait for them to end. An owned store is then
        closed inside its trio loop and the thread joined; a borrowed store stays open.
        Calling it again does nothing.

        Called in the trio thread of a borrowed store, it cancels and returns at once
        (it cannot wait there); in the thread of an owned one, it is a RuntimeError.

        Raises:
            Whatever closing an owned store raised (``Poisoned`` when its actor had
            crashed), once.
        """
        in_trio = threading.get_ident() == self._thread_id
        if self._owned and in_trio:
            raise RuntimeError(
                f"{self._what} was closed from its own trio thread; it would wait for "
                "itself forever. Close it from the thread or coroutine that made it."
            )
        with self._lock:
            already, self._closed = self._closed, True
        token = self._token
        if not already and token is not None:
            if in_trio:
                self._begin_stop()
                return
            try:
                token.run_sync_soon(self._begin_stop)
            except trio.RunFinishedError:
                self._drained.set()
        if self._thread is not None:
            self._thread.join()
            crash, self._crash = self._crash, None
            if crash is not None:
                raise crash
        elif not in_trio:
            self._drained.wait()

    async def aclose(self) -> None:
        """:meth:`close`, awaited from asyncio: the waiting runs in a worker thread, so
        the asyncio loop is not blocked while the store closes."""
        await asyncio.to_thread(self.close)


def _settle(done: asyncio.Future[outcome.Outcome[T]], result: outcome.Outcome[T]) -> None:
    if not done.done():
        done.set_result(result)
