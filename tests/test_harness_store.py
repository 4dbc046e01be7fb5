"""VectorStoreMachine against the real in-memory store, in both scan paths.

The default profile (``ci``) runs each machine for ``max_examples`` examples of up to
``stateful_step_count`` steps (see ``conftest.py``). ``HYPOTHESIS_PROFILE=nightly`` with
``TRIO_RECALL_NIGHTLY_SECONDS`` set runs fresh rounds of the machine until that budget is
spent.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from actors import open_store
from actors.testing import VectorStoreMachine
from protocol import VectorStoreConfig


class ThreadScanStoreMachine(VectorStoreMachine):
    """Every scan takes the worker-thread path, and writers wait for pinned scans."""

    def open_store_under_test(
        self, config: VectorStoreConfig, embedder: object
    ) -> AbstractAsyncContextManager[Any]:
        return open_store(config, embedder, thread_scan_threshold=0, clock=self.store_clock)  # type: ignore[arg-type]


TestStore = VectorStoreMachine.TestCase


def test_store_machine_with_every_scan_in_a_thread() -> None:
    run_state_machine_as_test(ThreadScanStoreMachine)


def test_run_state_machine_as_test_works_as_is() -> None:
    # The second entry point users have: the machine class itself, with the profile's
    # settings, and a budget of a few examples since TestStore above does the bulk.
    run_state_machine_as_test(VectorStoreMachine, settings=settings(max_examples=5, database=None))


class ClockedStoreMachine(VectorStoreMachine):
    """The default machine, which must run the rules of memory over time on the store
    (they turn themselves off for a store that does not run on the machine's clock)."""

    @invariant()
    def runs_on_the_machine_clock(self) -> None:
        assert self.store is None or self.timed, "the store is not on store_clock"


def test_the_time_rules_run_on_the_store() -> None:
    run_state_machine_as_test(
        ClockedStoreMachine, settings=settings(max_examples=5, database=None)
    )


def test_nightly_until_budget() -> None:
    budget = float(os.environ.get("TRIO_RECALL_NIGHTLY_SECONDS", "0") or 0)
    if budget <= 0:
        pytest.skip("set TRIO_RECALL_NIGHTLY_SECONDS to run the machines until a budget")
    deadline = time.monotonic() + budget
    rounds = 0
    while time.monotonic() < deadline:
        for machine in (VectorStoreMachine, ThreadScanStoreMachine):
            run_state_machine_as_test(machine, settings=settings(max_examples=100, database=None))
        rounds += 1
    print(f"nightly: {rounds} rounds of 2 × 100 examples in {budget} s")
