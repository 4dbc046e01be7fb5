"""The typed events (design §9): every event the memory, the store and the indexer send,
each a msgspec Struct tagged by its dotted name. ``Event`` (their base) and
``EventSink`` are also at the top of ``protocol``.

``EmbeddingEmbedded`` is the deprecated name of :class:`EmbeddingCompleted` (until 0.3):
importing it warns with a ``DeprecationWarning``, and it is not in ``__all__``.
"""

import warnings

from . import _events
from ._events import DocumentsAdded as DocumentsAdded
from ._events import DocumentsDeleted as DocumentsDeleted
from ._events import EmbeddingCompleted as EmbeddingCompleted
from ._events import EmbeddingFailed as EmbeddingFailed
from ._events import EmbeddingStarted as EmbeddingStarted
from ._events import Event as Event
from ._events import EventSink as EventSink
from ._events import Evicted as Evicted
from ._events import IndexingBatchCompleted as IndexingBatchCompleted
from ._events import IndexingCompleted as IndexingCompleted
from ._events import IndexingFailed as IndexingFailed
from ._events import IndexingStarted as IndexingStarted
from ._events import InjectedItem as InjectedItem
from ._events import MemoryEvent as MemoryEvent
from ._events import Recalled as Recalled
from ._events import RecallFailed as RecallFailed
from ._events import RecallInjected as RecallInjected
from ._events import RetrieverCompleted as RetrieverCompleted
from ._events import RetrieverFailed as RetrieverFailed
from ._events import RetrieverStarted as RetrieverStarted
from ._events import StoreNearCap as StoreNearCap
from ._events import StoreSearched as StoreSearched
from ._events import TurnsOffloaded as TurnsOffloaded
from ._events import TurnsSummarized as TurnsSummarized
from ._events import fingerprint as fingerprint

__all__ = [
    "DocumentsAdded",
    "DocumentsDeleted",
    "EmbeddingCompleted",
    "EmbeddingFailed",
    "EmbeddingStarted",
    "Event",
    "EventSink",
    "Evicted",
    "IndexingBatchCompleted",
    "IndexingCompleted",
    "IndexingFailed",
    "IndexingStarted",
    "InjectedItem",
    "MemoryEvent",
    "RecallFailed",
    "RecallInjected",
    "Recalled",
    "RetrieverCompleted",
    "RetrieverFailed",
    "RetrieverStarted",
    "StoreNearCap",
    "StoreSearched",
    "TurnsOffloaded",
    "TurnsSummarized",
    "fingerprint",
]

from ._public import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals(), __all__)


_DEPRECATED = {"EmbeddingEmbedded": "EmbeddingCompleted"}


def __getattr__(name: str) -> object:
    """The deprecated names, each with a ``DeprecationWarning`` that names its successor."""
    if name in _DEPRECATED:
        warnings.warn(
            f"protocol.events.{name} is deprecated since 0.2 and goes in 0.3; use "
            f"{_DEPRECATED[name]} (its event tag is embedding.completed, no longer "
            "embedding.embedded)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_events, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
