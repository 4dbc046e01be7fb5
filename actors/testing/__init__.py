"""Test tools for trio-recall users: fakes, crash injection and the state machines.

- :class:`TrioRuleBasedStateMachine`, with :func:`rule`, :func:`initialize` and
  :func:`invariant` that accept ``async def``: a Hypothesis state machine whose example
  runs on one trio loop.
- :class:`VectorStoreMachine`: the store contract (design §3) as a state machine; subclass
  it and override ``open_store_under_test`` to check your own store.
- :class:`StoreConformance`: the documents and search contract (design §9) as pytest
  tests; subclass it (as ``Test...``) and override ``open_store_under_test``.
- :class:`WriteConformance`: its companion for the turns API and the write path
  (design §3): batches, eviction, the inbox, cancellation, errors, document writes.
- :class:`EmbedderConformance` (define ``make_embedder()``) and
  :class:`RecordManagerConformance` (define ``make_record_manager(namespace)``): the
  embedding-provider and record-manager contracts (design §9) as pytest tests.
- The hostile-input layer: strategies (:func:`hostile_text`, :func:`hostile_numbers`,
  :func:`hostile_metadata`, :func:`hostile_filters`, :func:`hostile_vectors`,
  :func:`embed_faults`, :func:`hostile_store_calls`, :func:`hostile_memory_calls`), the
  fault-injecting :class:`HostileEmbedder`, and the invariant every call must keep
  (:func:`check_hostile_call`, :func:`run_hostile_calls`).
- The fakes: :class:`HashingEmbedder`, :class:`DeterministicFakeEmbedding`,
  :class:`RandomFakeEmbedding` (fresh random vectors, for shape tests) and
  :class:`FaultyEmbedder`, plus :func:`inject_crash`.
"""

from .. import HashingEmbedder as HashingEmbedder
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
from ._hostile import EmbedFault as EmbedFault
from ._hostile import HostileBaseException as HostileBaseException
from ._hostile import HostileEmbedder as HostileEmbedder
from ._hostile import HostileInputViolation as HostileInputViolation
from ._hostile import embed_faults as embed_faults
from ._hostile import hostile_filters as hostile_filters
from ._hostile import hostile_metadata as hostile_metadata
from ._hostile import hostile_numbers as hostile_numbers
from ._hostile import hostile_text as hostile_text
from ._hostile import hostile_vectors as hostile_vectors
from ._hostile_calls import HostileCall as HostileCall
from ._hostile_calls import check_hostile_call as check_hostile_call
from ._hostile_calls import entry_bytes as entry_bytes
from ._hostile_calls import hostile_memory_calls as hostile_memory_calls
from ._hostile_calls import hostile_store_calls as hostile_store_calls
from ._hostile_calls import run_hostile_calls as run_hostile_calls
from ._hostile_calls import tolerate_expected_poison as tolerate_expected_poison
from ._machine import Bundle as Bundle
from ._machine import LoopStopTimeout as LoopStopTimeout
from ._machine import TrioRuleBasedStateMachine as TrioRuleBasedStateMachine
from ._machine import consumes as consumes
from ._machine import initialize as initialize
from ._machine import invariant as invariant
from ._machine import multiple as multiple
from ._machine import precondition as precondition
from ._machine import rule as rule
from ._model import SCORE_TOLERANCE as SCORE_TOLERANCE
from ._model import ModelEntry as ModelEntry
from ._model import ModelState as ModelState
from ._model import check_report as check_report
from ._record_manager_conformance import RecordManagerConformance as RecordManagerConformance
from ._store_machine import VectorStoreMachine as VectorStoreMachine
from ._write_conformance import WriteConformance as WriteConformance

__all__ = [
    "SCORE_TOLERANCE",
    "Bundle",
    "DeterministicFakeEmbedding",
    "EmbedCall",
    "EmbedFault",
    "EmbedderConformance",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
    "HashingEmbedder",
    "HostileBaseException",
    "HostileCall",
    "HostileEmbedder",
    "HostileInputViolation",
    "InjectedCrash",
    "LoopStopTimeout",
    "ModelEntry",
    "ModelState",
    "RandomFakeEmbedding",
    "RecordManagerConformance",
    "StoreConformance",
    "TrioRuleBasedStateMachine",
    "VectorStoreMachine",
    "WriteConformance",
    "check_hostile_call",
    "check_report",
    "consumes",
    "embed_faults",
    "entry_bytes",
    "hostile_filters",
    "hostile_memory_calls",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_store_calls",
    "hostile_text",
    "hostile_vectors",
    "initialize",
    "inject_crash",
    "invariant",
    "multiple",
    "precondition",
    "rule",
    "run_hostile_calls",
    "tolerate_expected_poison",
]
