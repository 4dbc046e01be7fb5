"""Fake embedders for tests: a deterministic one and a fault-injecting wrapper."""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import inspect
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Literal, final

import attrs
import numpy as np
import numpy.typing as npt
import trio

from actors import AnyEmbedder, AsyncEmbedder, Embedder
from protocol import ConfigError
from protocol.checks import check_int

from .. import VectorLike

__all__ = [
    "DeterministicFakeEmbedding",
    "RandomFakeEmbedding",
    "EmbedCall",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
]


def _check_dimensions(dimensions: object) -> int:
    return check_int("dimensions", dimensions)


@final
class DeterministicFakeEmbedding:
    """A sync embedder whose vectors depend only on ``(text, seed)``.

    Each text is hashed (BLAKE2b, keyed by ``seed``) into a seed for a standard normal
    vector, so the same text always gives the same vector, in any process, and
    different texts give well-spread, nearly orthogonal vectors. The empty string gives
    the zero vector, so tests can reach the store's zero-norm path on purpose.

    Args:
        dimensions: the width of every vector, an int > 0.
        seed: any int; different seeds give unrelated embeddings.

    Raises:
        ConfigError: ``dimensions`` is not an int > 0, or ``seed`` is not an int.
    """

    def __init__(self, dimensions: int, seed: int = 0) -> None:
        self.dimensions = _check_dimensions(dimensions)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seed is {seed!r} ({type(seed).__name__}); expected an int")
        self.seed = seed
        self._key = seed.to_bytes(16, "little", signed=True)

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        if not isinstance(text, str):
            raise TypeError(f"text is a {type(text).__name__}; expected str")
        if not text:
            return np.zeros(self.dimensions, dtype=np.float32)
        digest = hashlib.blake2b(
            text.encode("utf-8", "surrogatepass"), key=self._key, digest_size=16
        ).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        return rng.standard_normal(self.dimensions).astype(np.float32)

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self.embed(text)
        return out

    def __repr__(self) -> str:
        return f"DeterministicFakeEmbedding(dimensions={self.dimensions}, seed={self.seed})"


@final
class RandomFakeEmbedding:
    """A sync embedder that returns a fresh random vector on every call, for tests of
    shapes and plumbing only: the same text gives a different vector each time, so
    nothing about similarity can be tested with it.

    Vectors are standard normal float32 draws from one ``numpy`` generator. With a
    ``seed`` the sequence of draws is reproducible (one embedder, the same calls in the
    same order); without one it comes from fresh OS entropy. Calls from several threads
    draw under a lock.

    Args:
        dimensions: the width of every vector, an int > 0.
        seed: None, or an int >= 0 that fixes the sequence of draws.

    Raises:
        ConfigError: ``dimensions`` is not an int > 0, or ``seed`` is not None or an
            int >= 0.
    """

    def __init__(self, dimensions: int, seed: int | None = None) -> None:
        self.dimensions = _check_dimensions(dimensions)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ConfigError(f"seed is {seed!r:.60}; expected None or an int >= 0")
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        if not isinstance(text, str):
            raise TypeError(f"text is a {type(text).__name__}; expected str")
        row: npt.NDArray[np.float32] = self.embed_batch([text])[0]
        return row

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is a {type(text).__name__}; expected str")
        with self._lock:
            rows = self._rng.standard_normal((len(texts), self.dimensions))
        out: npt.NDArray[np.float32] = rows.astype(np.float32)
        return out

    def __repr__(self) -> str:
        return f"RandomFakeEmbedding(dimensions={self.dimensions}, seed={self.seed})"


class EmbedderFailure(RuntimeError):
    """What :class:`FaultyEmbedder` raises by default."""


FaultAction = Literal["pass", "raise", "wrong_width", "nan", "huge"]
_ACTIONS: frozenset[str] = frozenset({"pass", "raise", "wrong_width", "nan", "huge"})


def _check_action(_instance: object, _attribute: object, value: object) -> None:
    if value not in _ACTIONS:
        raise ConfigError(f"fault action is {value!r}; expected one of {sorted(_ACTIONS)}")


def _check_gate(_instance: object, _attribute: object, value: object) -> None:
    if value is not None and not isinstance(value, trio.Event):
        raise ConfigError(f"gate is a {type(value).__name__}; expected trio.Event or None")


@final
@attrs.frozen
class Fault:
    """What one embedder call does.

    Attributes:
        action: ``"pass"`` returns the inner embedder's vectors; ``"raise"`` raises
            ``error`` (an :class:`EmbedderFailure` by default); ``"wrong_width"`` drops
            the last component of every vector; ``"nan"`` puts a NaN in every vector;
            ``"huge"`` returns vectors whose squared norm overflows float32.
        gate: when set, the call first waits for this event, so a test decides when
            the call (and so the write or read that made it) may go on.
        error: the exception for ``"raise"``.
    """

    action: FaultAction = attrs.field(default="pass", validator=_check_action)
    gate: trio.Event | None = attrs.field(default=None, validator=_check_gate)  # type: ignore[assignment]
    error: BaseException | None = None


@final
@attrs.frozen
class EmbedCall:
    """One call to a :class:`FaultyEmbedder`, as ``fail_on`` sees it.

    Attributes:
        index: 0-based count of calls so far, both kinds together.
        kind: ``"documents"`` (a store's write) or ``"query"`` (a read).
        texts: the texts of the call (one for a query).
    """

    index: int
    kind: Literal["documents", "query"]
    texts: tuple[str, ...]


FailOn = Callable[[EmbedCall], "Fault | bool | None"] | Collection[int] | None


@attrs.define(eq=False)
class _Scripted:
    fault: Fault
    texts: tuple[str, ...] | None


@final
class FaultyEmbedder:
    """An async embedder that wraps another one and misbehaves on request.

    It always presents the :class:`~actors.AsyncEmbedder` interface and calls a sync
    ``inner`` embedder inline, on the trio loop, so every step of a test stays on one
    thread and ``trio.testing.wait_all_tasks_blocked`` can tell when the store is idle.

    Which calls misbehave is decided, in this order, by:

    1. the scripts (:meth:`script_documents`, :meth:`script_query`): a queue of faults
       per kind, taken one per call in order. A script given ``texts`` waits for the
       call with exactly those texts; other calls pass it by untouched;
    2. ``fail_on``: a collection of call indices (those calls raise), or a callable that
       takes an :class:`EmbedCall` and returns a :class:`Fault`, ``True`` (raise) or a
       false value (behave).

    Args:
        inner: an :class:`~actors.Embedder` or :class:`~actors.AsyncEmbedder`.
        fail_on: see above; ``None`` means never.
        max_scripted: the bound on each script queue.

    Raises:
        ConfigError: ``inner`` is not an embedder, or ``fail_on`` is neither a callable
            nor a collection of ints.
    """

    def __init__(
        self, inner: AnyEmbedder, fail_on: FailOn = None, *, max_scripted: int = 64
    ) -> None:
        has_async = inspect.iscoroutinefunction(getattr(inner, "embed_documents", None))
        if not has_async and not callable(getattr(inner, "embed", None)):
            raise ConfigError(
                f"inner is a {type(inner).__name__}; expected an Embedder (embed) or an "
                "AsyncEmbedder (async embed_documents and embed_query)"
            )
        if fail_on is not None and not callable(fail_on):
            if isinstance(fail_on, str | bytes) or not isinstance(fail_on, Collection):
                raise ConfigError(
                    f"fail_on is a {type(fail_on).__name__}; expected a callable, a "
                    "collection of call indices, or None"
                )
            bad = [i for i in fail_on if isinstance(i, bool) or not isinstance(i, int)]
            if bad:
                raise ConfigError(f"fail_on holds {bad[0]!r}; expected call indices (int)")
        if isinstance(max_scripted, bool) or not isinstance(max_scripted, int):
            raise ConfigError(f"max_scripted is {max_scripted!r}; expected an int > 0")
        if max_scripted <= 0:
            raise ConfigError(f"max_scripted is {max_scripted}; expected an int > 0")
        self.inner = inner
        self.fail_on = fail_on
        self.dimensions: int | None = getattr(inner, "dimensions", None)
        self.calls: list[EmbedCall] = []
        self._max_scripted = max_scripted
        self._scripts: dict[str, collections.deque[_Scripted]] = {
            "documents": collections.deque(),
            "query": collections.deque(),
        }

    # --- scripting ---------------------------------------------------------------------

    def script_documents(self, fault: Fault, texts: Sequence[str] | None = None) -> None:
        """Queue ``fault`` for a future ``embed_documents`` call.

        Args:
            fault: what that call does.
            texts: when given, the fault waits for the call with exactly these texts.

        Raises:
            ConfigError: the queue already holds ``max_scripted`` faults, or an argument
                has the wrong type.
        """
        self._script("documents", fault, texts)

    def script_query(self, fault: Fault, text: str | None = None) -> None:
        """Queue ``fault`` for a future ``embed_query`` call (see :meth:`script_documents`)."""
        self._script("query", fault, None if text is None else [text])

    def pending_scripts(self, kind: Literal["documents", "query"]) -> int:
        """How many scripted faults of ``kind`` have not been used yet."""
        return len(self._scripts[kind])

    def _script(self, kind: str, fault: Fault, texts: Sequence[str] | None) -> None:
        if not isinstance(fault, Fault):
            raise ConfigError(f"fault is a {type(fault).__name__}; expected Fault")
        if texts is not None and (
            isinstance(texts, str) or not all(isinstance(t, str) for t in texts)
        ):
            raise ConfigError(f"texts is {texts!r:.80}; expected a list of str or None")
        queue = self._scripts[kind]
        if len(queue) >= self._max_scripted:
            raise ConfigError(
                f"{kind} script already holds {len(queue)} faults; the bound is "
                f"{self._max_scripted} (max_scripted)"
            )
        queue.append(_Scripted(fault, None if texts is None else tuple(texts)))

    def _fault_for(self, call: EmbedCall) -> Fault:
        queue = self._scripts[call.kind]
        for item in queue:
            if item.texts is None or item.texts == call.texts:
                queue.remove(item)
                return item.fault
        fail_on = self.fail_on
        if fail_on is None:
            return Fault()
        if callable(fail_on):
            decided = fail_on(call)
            if isinstance(decided, Fault):
                return decided
            return Fault("raise") if decided else Fault()
        return Fault("raise") if call.index in fail_on else Fault()

    # --- the AsyncEmbedder interface -------------------------------------------------

    async def embed_documents(self, texts: Sequence[str]) -> list[npt.NDArray[np.float64]]:
        fault = await self._enter("documents", tuple(texts))
        inner = self.inner
        batch = getattr(inner, "embed_batch", None)
        raw: Sequence[VectorLike] | npt.NDArray[np.generic]
        if isinstance(inner, AsyncEmbedder) and inspect.iscoroutinefunction(inner.embed_documents):
            raw = await inner.embed_documents(list(texts))
        elif callable(batch):
            raw = batch(list(texts))
        else:
            assert isinstance(inner, Embedder)  # an AnyEmbedder that is not async
            raw = [inner.embed(t) for t in texts]
        return [self._corrupt(fault, np.array(v, dtype=np.float64)) for v in raw]

    async def embed_query(self, text: str) -> npt.NDArray[np.float64]:
        fault = await self._enter("query", (text,))
        inner = self.inner
        if isinstance(inner, AsyncEmbedder) and inspect.iscoroutinefunction(inner.embed_query):
            raw = await inner.embed_query(text)
        else:
            assert isinstance(inner, Embedder)  # an AnyEmbedder that is not async
            raw = inner.embed(text)
        return self._corrupt(fault, np.array(raw, dtype=np.float64))

    async def _enter(self, kind: Literal["documents", "query"], texts: tuple[str, ...]) -> Fault:
        """Record one call and decide its fault: wait at the fault's gate (or checkpoint),
        raise if it says so, else return it for :meth:`_corrupt`."""
        call = EmbedCall(len(self.calls), kind, texts)
        self.calls.append(call)
        fault = self._fault_for(call)
        if fault.gate is not None:
            await fault.gate.wait()
        else:
            await trio.lowlevel.checkpoint()
        if fault.action == "raise":
            raise fault.error or EmbedderFailure(
                f"FaultyEmbedder: {call.kind} call {call.index} was told to fail"
            )
        return fault

    @staticmethod
    def _corrupt(fault: Fault, vector: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if fault.action == "wrong_width":
            return vector[:-1] if vector.shape[0] > 1 else np.zeros(2)
        if fault.action == "nan":
            out = vector.copy()
            out[0] = np.nan
            return out
        if fault.action == "huge":
            return np.full_like(vector, 1e30)
        return vector

    def __repr__(self) -> str:
        return f"FaultyEmbedder({self.inner!r})"


@attrs.define(eq=False)
class ManualClock:
    """A store clock (``open_store(clock=...)``) that moves only when told: a test
    advances it instead of sleeping. Calling it gives its ``now``, an aware datetime."""

    now: dt.datetime = attrs.field(factory=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += dt.timedelta(seconds=seconds)
