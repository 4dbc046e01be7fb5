"""Mutation tests: VectorStoreMachine must catch deliberately broken stores.

Each broken store is a thin wrapper around the real ``open_store`` that breaks one
promise of SPEC §3. For each one, Hypothesis must find a failure and shrink it to a few
steps; the steps come back as ``__notes__`` on the exception (``state.<rule>(...)``
lines), which we count. A harness that only ever passes proves nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from actors import open_store
from actors.testing import VectorStoreMachine
from actors.testing._model import normalize64
from protocol import (
    DEFAULT_NAMESPACE,
    EntryTooLarge,
    Poisoned,
    RetrievalReport,
    RetrievedTurn,
    TurnsStored,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreUsage,
    payload_bytes,
    projection,
)

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
        def open_store_under_test(
            self, config: VectorStoreConfig, embedder: object
        ) -> AbstractAsyncContextManager[Any]:
            @asynccontextmanager
            async def cm() -> AsyncIterator[Any]:
                async with open_store(config, embedder) as store:
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


def count_steps(error: BaseException) -> list[str]:
    notes = getattr(error, "__notes__", [])
    return [
        line
        for line in notes
        if line.startswith("state.") and not line.startswith("state.teardown")
    ]


@pytest.mark.parametrize(
    ("wrapper", "step_timeout"),
    [
        (HalfBatch, 10.0),
        (OldestFirstTies, 10.0),
        (EarlyVisibility, 10.0),
        (LeakyNamespace, 10.0),
        # The hang is detected by the step deadline. Shrinking replays the hang several
        # times, so keep it short, but well above an honest step on a loaded 2-core
        # machine: at 0.25 s a slow step was once taken for the hang.
        (HangOnCrash, 1.0),
    ],
)
def test_machine_catches_broken_store(wrapper: type[Wrapper], step_timeout: float) -> None:
    machine = mutant(wrapper)
    machine.step_timeout = step_timeout
    with pytest.raises(Exception) as info:  # noqa: PT011 - any failure will do
        run_state_machine_as_test(machine, settings=MUTANT_SETTINGS)
    steps = count_steps(info.value)
    assert steps, f"no steps were reported in the notes of {info.value!r}"
    assert len(steps) <= MAX_STEPS, "\n".join(steps)


def test_unbroken_wrapper_passes() -> None:
    """The control: the same wrapping with nothing broken must pass, so the mutants
    fail because of their bug and not because of the wrapping."""
    run_state_machine_as_test(mutant(Wrapper), settings=MUTANT_SETTINGS)
