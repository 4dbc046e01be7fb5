"""Test tools for trio-recall users: fakes, crash injection and the state machines.

- :class:`TrioRuleBasedStateMachine`, with :func:`rule`, :func:`initialize` and
  :func:`invariant` that accept ``async def``: a Hypothesis state machine whose example
  runs on one trio loop.
- :class:`VectorStoreMachine`: the store contract (SPEC §3) as a state machine; subclass
  it and override ``open_store_under_test`` to check your own store.
- :class:`StoreConformance`: the documents and search contract (issue 6) as pytest
  tests; subclass it (as ``Test...``) and override ``open_store_under_test``.
- The fakes: :class:`HashingEmbedder`, :class:`DeterministicFakeEmbedding` and
  :class:`FaultyEmbedder`, plus :func:`inject_crash`.
"""

from .._embedders import HashingEmbedder as HashingEmbedder
from ._conformance import StoreConformance as StoreConformance
from ._crash import InjectedCrash as InjectedCrash
from ._crash import inject_crash as inject_crash
from ._fakes import DeterministicFakeEmbedding as DeterministicFakeEmbedding
from ._fakes import EmbedCall as EmbedCall
from ._fakes import EmbedderFailure as EmbedderFailure
from ._fakes import Fault as Fault
from ._fakes import FaultyEmbedder as FaultyEmbedder
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
from ._store_machine import VectorStoreMachine as VectorStoreMachine

__all__ = [
    "SCORE_TOLERANCE",
    "Bundle",
    "DeterministicFakeEmbedding",
    "EmbedCall",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
    "HashingEmbedder",
    "InjectedCrash",
    "LoopStopTimeout",
    "ModelEntry",
    "ModelState",
    "StoreConformance",
    "TrioRuleBasedStateMachine",
    "VectorStoreMachine",
    "check_report",
    "consumes",
    "initialize",
    "inject_crash",
    "invariant",
    "multiple",
    "precondition",
    "rule",
]
