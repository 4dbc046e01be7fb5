"""VectorStoreMachine against every way a user reaches a store (one lifecycle, design §1).

``open_store`` (both scan paths) runs in ``test_harness_store.py`` and ``open_pg_store``
in ``tests/pg/test_pg_store.py``; this file adds the composed paths:

- ``open_memory``'s own store (``open_memory(store=config, embedder=...)`` then
  ``memory.store``), both scan paths;
- a borrowed store (``open_store(...)`` then ``open_memory(store=handle)``), both paths;
- a memory over pg (``open_pg_store(...)`` then ``open_memory(store=pg_handle)``).

``open_memory``'s store is how the scan-runner hang shipped: it built its
own store actor and never started the scan runner. With every scan sent to the runner
(``thread_scan_threshold=0``) the machine's first read on such a store blocks, and the
step deadline reports it as ``trio.TooSlowError``: on e07348a, with that threshold
forced on ``open_memory``'s store actor, this file's owned-store machine failed at
``state.read(...)``, its second step. The mutant in
``test_mutations.py::test_machine_catches_a_scan_runner_that_never_started`` keeps that
class of bug caught.

The default profile (``ci``) bounds each machine (``conftest.py``);
``HYPOTHESIS_PROFILE=stress`` runs 2,000 examples of 50 steps on each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

import numpy as np
from hypothesis.stateful import run_state_machine_as_test
from pg_support import fresh_pg_store

from actors import open_memory, open_store
from actors.testing import VectorStoreMachine
from protocol import VectorStoreConfig


class OwnedMemoryStoreMachine(VectorStoreMachine):
    """The store a memory opens and owns: ``open_memory(store=config, embedder=e)``,
    then ``memory.store``. A memory opens its store on the real clock, so the rules of
    memory over time that need the store clock do not run (the machine sees that its
    clock is not the store's)."""

    memory_kwargs: ClassVar[dict[str, Any]] = {}

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object
    ) -> AbstractAsyncContextManager[Any]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Any]:
            async with open_memory(store=config, embedder=embedder, **self.memory_kwargs) as m:
                yield m.store

        return opened()


def borrowed(
    open_handle: Callable[..., AbstractAsyncContextManager[Any]],
) -> Callable[..., AbstractAsyncContextManager[Any]]:
    """A factory that opens a store with ``open_handle``, lends it to a memory and
    yields ``memory.store``; the handle must outlive the memory, still usable."""

    @asynccontextmanager
    async def opened(config: VectorStoreConfig, embedder: object, **kw: Any) -> AsyncIterator[Any]:
        async with open_handle(config, embedder, **kw) as handle:
            async with open_memory(store=handle) as memory:  # type: ignore[arg-type]
                yield memory.store
            # Closing the memory must leave the borrowed handle open and usable.
            handle.usage()
            await handle.retrieve_embedding(np.zeros(config.dimensions), 1)

    return opened


class BorrowedStoreMachine(VectorStoreMachine):
    """``open_store(...)`` lent to ``open_memory(store=handle)``."""

    store_kwargs: ClassVar[dict[str, Any]] = {}

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object
    ) -> AbstractAsyncContextManager[Any]:
        kwargs = {**self.store_kwargs, "clock": self.store_clock}
        return borrowed(lambda c, e: open_store(c, e, **kwargs))(config, embedder)


def pg_opener(dsn: str) -> Callable[..., AbstractAsyncContextManager[Any]]:
    """``open_pg_store`` on a fresh table, dropped afterwards."""
    return lambda config, embedder, **kw: fresh_pg_store(dsn, config, embedder, **kw)


THREADS = {"thread_scan_threshold": 0}


def test_owned_memory_store() -> None:
    run_state_machine_as_test(OwnedMemoryStoreMachine)


def test_owned_memory_store_every_scan_in_a_thread() -> None:
    class Machine(OwnedMemoryStoreMachine):
        memory_kwargs = THREADS

    run_state_machine_as_test(Machine)


def test_borrowed_store() -> None:
    run_state_machine_as_test(BorrowedStoreMachine)


def test_borrowed_store_every_scan_in_a_thread() -> None:
    class Machine(BorrowedStoreMachine):
        store_kwargs = THREADS

    run_state_machine_as_test(Machine)


def test_memory_over_pg(pg_dsn: str) -> None:
    opener = borrowed(pg_opener(pg_dsn))

    class Machine(VectorStoreMachine):
        def open_store_under_test(
            self, config: VectorStoreConfig, embedder: object
        ) -> AbstractAsyncContextManager[Any]:
            return opener(config, embedder, clock=self.store_clock)

    run_state_machine_as_test(Machine)
