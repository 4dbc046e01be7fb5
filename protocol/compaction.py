"""Compaction (design §5): the strategies a ``MemoryConfig`` lists, what each did to a
prompt, and the error seam between compaction and the store.

Build a config's ``strategies`` from ``Offload``, ``Summarize``, ``DropObservations``,
``SlidingWindow`` and ``ClampOversizedMessages`` (their union is ``Strategy``). A
``Memory.compress`` or ``Memory.turn`` answers with a ``CompressionReport`` whose
``actions`` are ``Offloaded``, ``Summarized``, ``Dropped``, ``Clamped``, ``Skipped`` or
``Rejected`` (their union is ``CompactionAction``). A store error a strategy meets
reaches the report's ``last_error`` as a ``PluginError``: ``PluginValidationError`` for
input the store refused, ``PluginInternalError`` for anything else (an embedder's own
exception passes through unchanged). ``MemoryConfig``, ``RecallSettings`` and
``TurnReport`` are at the top of ``protocol``.
"""

from ._errors import PluginError as PluginError
from ._errors import PluginInternalError as PluginInternalError
from ._errors import PluginValidationError as PluginValidationError
from ._memory import Clamped as Clamped
from ._memory import ClampOversizedMessages as ClampOversizedMessages
from ._memory import CompactionAction as CompactionAction
from ._memory import CompressionReport as CompressionReport
from ._memory import DropObservations as DropObservations
from ._memory import Dropped as Dropped
from ._memory import Offload as Offload
from ._memory import Offloaded as Offloaded
from ._memory import Rejected as Rejected
from ._memory import Skipped as Skipped
from ._memory import SlidingWindow as SlidingWindow
from ._memory import Strategy as Strategy
from ._memory import Summarize as Summarize
from ._memory import Summarized as Summarized
from ._memory import contextual_entry as contextual_entry
from ._public import fixup_module_metadata as _fixup_module_metadata

__all__ = [
    "ClampOversizedMessages",
    "Clamped",
    "CompactionAction",
    "CompressionReport",
    "DropObservations",
    "Dropped",
    "Offload",
    "Offloaded",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Rejected",
    "Skipped",
    "SlidingWindow",
    "Strategy",
    "Summarize",
    "Summarized",
    "contextual_entry",
]

_fixup_module_metadata(__name__, globals(), __all__)
