"""VectorStoreMachine against every way a user reaches a store (issue 14).

``open_store`` (both scan paths) runs in ``test_harness_store.py`` and ``open_pg_store``
in ``test_pg_store.py``; this file adds the composed paths:

- ``open_memory``'s own store (``open_memory(store=config, embedder=...)`` then
  ``memory.store``), both scan paths;
- a borrowed store (``open_store(...)`` then ``open_memory(store=handle)``), both paths;
- a memory over pg (``open_pg_store(...)`` then ``open_memory(store=pg_handle)``).

``open_memory``'s store is how the scan-runner hang of issue 14 shipped: it built its
own store actor and never started the scan runner. With every scan sent to the runner
(``thread_scan_threshold=0``) the machine's first read on such a store blocks, and the
step deadline reports it as ``trio.TooSlowError``; see
``test_mutations.py::test_machine_catches_a_scan_runner_that_never_started``.

The default profile (``ci``) bounds each machine (``conftest.py``);
``HYPOTHESIS_PROFILE=stress`` runs 2,000 examples of 50 steps on each.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

import numpy as np
import pytest
import trio
from hypothesis.stateful import run_state_machine_as_test
from pg_support import pg_dsn  # noqa: F401

from actors import open_memory, open_store
from actors.testing import VectorStoreMachine
from protocol import VectorStoreConfig

_MEMORY_PARAMS = inspect.signature(open_memory).parameters
#: The lead's "open_memory over any open store" API (issue 14): a handle as ``store``.
BORROWS = "StoreHandle" in str(_MEMORY_PARAMS["store"].annotation)
MEMORY_THREADS = "thread_scan_threshold" in _MEMORY_PARAMS
needs_borrowing = pytest.mark.skipif(
    not BORROWS, reason="open_memory(store=handle) is not on this branch yet (issue 14)"
)


class OwnedMemoryStoreMachine(VectorStoreMachine):
    """The store a memory opens and owns: ``open_memory(store=config, embedder=e)``,
    then ``memory.store``."""

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
    open_handle: Callable[[VectorStoreConfig, object], AbstractAsyncContextManager[Any]],
) -> Callable[[VectorStoreConfig, object], AbstractAsyncContextManager[Any]]:
    """A factory that opens a store with ``open_handle``, lends it to a memory and
    yields ``memory.store``; the handle must outlive the memory, still usable."""

    @asynccontextmanager
    async def opened(config: VectorStoreConfig, embedder: object) -> AsyncIterator[Any]:
        async with open_handle(config, embedder) as handle:
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
        kwargs = self.store_kwargs
        return borrowed(lambda c, e: open_store(c, e, **kwargs))(config, embedder)


def pg_opener(dsn: str) -> Callable[[VectorStoreConfig, object], AbstractAsyncContextManager[Any]]:
    """``open_pg_store`` on a fresh table, dropped afterwards."""
    from pg_support import drop_table, new_table_name

    from actors._pg_store import open_pg_store

    @asynccontextmanager
    async def opened(config: VectorStoreConfig, embedder: object) -> AsyncIterator[Any]:
        table = new_table_name()
        try:
            async with open_pg_store(dsn, config, embedder, table=table) as store:
                yield store
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(drop_table, dsn, table)

    return opened


THREADS = {"thread_scan_threshold": 0}


def test_owned_memory_store() -> None:
    run_state_machine_as_test(OwnedMemoryStoreMachine)


def test_owned_memory_store_every_scan_in_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    class Machine(OwnedMemoryStoreMachine):
        memory_kwargs = THREADS if MEMORY_THREADS else {}

    if not MEMORY_THREADS:
        # Before open_memory took the keyword, its store actor was built in
        # actors._memory: force the same threshold there, so that this test still shows
        # the hang on a branch without the fix (its first big read never returns).
        import actors._memory

        monkeypatch.setattr(
            actors._memory,
            "_StoreActor",
            functools.partial(actors._memory._StoreActor, thread_scan_threshold=0),
        )
    run_state_machine_as_test(Machine)


@needs_borrowing
def test_borrowed_store() -> None:
    run_state_machine_as_test(BorrowedStoreMachine)


@needs_borrowing
def test_borrowed_store_every_scan_in_a_thread() -> None:
    class Machine(BorrowedStoreMachine):
        store_kwargs = THREADS

    run_state_machine_as_test(Machine)


@needs_borrowing
def test_memory_over_pg(pg_dsn: str) -> None:  # noqa: F811
    opener = borrowed(pg_opener(pg_dsn))

    class Machine(VectorStoreMachine):
        def open_store_under_test(
            self, config: VectorStoreConfig, embedder: object
        ) -> AbstractAsyncContextManager[Any]:
            return opener(config, embedder)

    run_state_machine_as_test(Machine)
