"""Test tools for trio-recall users: the state machines, the conformance suites, the
fakes and crash injection; the hostile-input layer is :mod:`actors.testing.hostile`.

- :class:`TrioRuleBasedStateMachine`: a Hypothesis state machine whose example runs on
  one trio loop. Decorate its steps with Hypothesis's own ``rule``, ``initialize``,
  ``invariant`` and ``precondition`` (from ``hypothesis.stateful``), with
  :func:`trio_step` directly above each ``async def``. :class:`LoopStopTimeout` is what
  teardown raises when the loop does not stop.
- :class:`VectorStoreMachine`: the store contract (design §3) as a state machine; subclass
  it and override ``open_store_under_test`` to check your own store. Scores must be
  within :data:`SCORE_TOLERANCE` of the float64 model's.
- :class:`StoreConformance`: the documents and search contract (design §9) as pytest
  tests; subclass it (as ``Test...``) and override ``open_store_under_test``.
- :class:`WriteConformance`: its companion for the turns API and the write path
  (design §3): batches, eviction, the inbox, cancellation, errors, document writes.
- :class:`EmbedderConformance` (define ``make_embedder()``) and
  :class:`RecordManagerConformance` (define ``make_record_manager(namespace)``): the
  embedding-provider and record-manager contracts (design §9) as pytest tests.
- The fakes: :class:`DeterministicFakeEmbedding`, :class:`RandomFakeEmbedding` (fresh
  random vectors, for shape tests) and :class:`FaultyEmbedder` (scripted with
  :class:`Fault`, recording each :class:`EmbedCall`, raising :class:`EmbedderFailure`),
  plus :func:`inject_crash` (which raises :class:`InjectedCrash` in the store's actor).
  The hashing embedder is :class:`actors.HashingEmbedder`.
- :mod:`actors.testing.hostile`: strategies for hostile input and the invariant every
  call must keep (``run_hostile_calls``).
"""

from protocol._public import fixup_module_metadata as _fixup_module_metadata

from . import hostile as hostile
from ._conformance import StoreConformance as StoreConformance
from ._crash import InjectedCrash as InjectedCrash
from ._crash import inject_crash as inject_crash
from ._embedder_conformance import EmbedderConformance as EmbedderConformance
from ._fakes import DeterministicFakeEmbedding as DeterministicFakeEmbedding
from ._fakes import EmbedCall as EmbedCall
from ._fakes import EmbedderFailure as EmbedderFailure
from ._fakes import Fault as Fault
from ._fakes import FaultyEmbedder as FaultyEmbedder
from ._fakes import RandomFakeEmbedding as RandomFakeEmbedding
from ._machine import LoopStopTimeout as LoopStopTimeout
from ._machine import TrioRuleBasedStateMachine as TrioRuleBasedStateMachine
from ._machine import trio_step as trio_step
from ._model import SCORE_TOLERANCE as SCORE_TOLERANCE
from ._record_manager_conformance import RecordManagerConformance as RecordManagerConformance
from ._store_machine import VectorStoreMachine as VectorStoreMachine
from ._write_conformance import WriteConformance as WriteConformance

__all__ = [
    "SCORE_TOLERANCE",
    "DeterministicFakeEmbedding",
    "EmbedCall",
    "EmbedderConformance",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
    "InjectedCrash",
    "LoopStopTimeout",
    "RandomFakeEmbedding",
    "RecordManagerConformance",
    "StoreConformance",
    "TrioRuleBasedStateMachine",
    "VectorStoreMachine",
    "WriteConformance",
    "inject_crash",
    "trio_step",
]

_fixup_module_metadata(__name__, globals(), __all__)
