"""trio-recall's data: what users build and read. Chat messages, configuration,
documents, filters, reports, events, errors, and the pure functions over them
(projection, payload size, render, inject, digest).

The actors' own messages are in :mod:`protocol.messages`, the filter nodes in
:mod:`protocol.filters` and the concrete event types in :mod:`protocol.events`; the
checks and encodings every door and backend shares (for those who write one) are in
:mod:`protocol.checks`. This package never imports trio, numpy or ``actors`` (design
§1).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._chat import ROLES as ROLES
from ._chat import ContentBlock as ContentBlock
from ._chat import ImageBase64 as ImageBase64
from ._chat import Role as Role
from ._chat import Text as Text
from ._chat import Thinking as Thinking
from ._chat import ToolCall as ToolCall
from ._chat import ToolResult as ToolResult
from ._chat import UnifiedMessage as UnifiedMessage
from ._chat import UnifiedRequest as UnifiedRequest
from ._chat import payload_bytes as payload_bytes
from ._chat import projection as projection
from ._config import VectorStoreConfig as VectorStoreConfig
from ._documents import DeleteResult as DeleteResult
from ._documents import Document as Document
from ._documents import IndexResult as IndexResult
from ._documents import ScoredDocument as ScoredDocument
from ._documents import SearchKind as SearchKind
from ._documents import SearchRequest as SearchRequest
from ._documents import document_id as document_id
from ._embedding import EmbeddingCall as EmbeddingCall
from ._embedding import EmbeddingPrice as EmbeddingPrice
from ._embedding import EmbeddingProfile as EmbeddingProfile
from ._embedding import EmbeddingUsageTotals as EmbeddingUsageTotals
from ._embedding import InputType as InputType
from ._embedding import SparseVector as SparseVector
from ._errors import ConfigError as ConfigError
from ._errors import DispatchError as DispatchError
from ._errors import DispatchTimeout as DispatchTimeout
from ._errors import EmbedderError as EmbedderError
from ._errors import EmbeddingError as EmbeddingError
from ._errors import EmbeddingProviderError as EmbeddingProviderError
from ._errors import EmbeddingTimeout as EmbeddingTimeout
from ._errors import EntryTooLarge as EntryTooLarge
from ._errors import FilterError as FilterError
from ._errors import JsonError as JsonError
from ._errors import Poisoned as Poisoned
from ._errors import StoreUnavailable as StoreUnavailable
from ._errors import VectorStoreError as VectorStoreError
from ._events import Event as Event
from ._events import EventSink as EventSink
from ._filters import Filter as Filter
from ._filters import FilterNode as FilterNode
from ._filters import parse_filter as parse_filter
from ._memory import MemoryConfig as MemoryConfig
from ._memory import RecallSettings as RecallSettings
from ._memory import TurnReport as TurnReport
from ._public import fixup_module_metadata as _fixup_module_metadata
from ._render import RECALL_MARKER as RECALL_MARKER
from ._render import XML_RECALL_MARKER as XML_RECALL_MARKER
from ._render import Injected as Injected
from ._render import RecallInjection as RecallInjection
from ._render import digest_request as digest_request
from ._render import inject as inject
from ._render import render as render
from ._store import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from ._store import RetrievalReport as RetrievalReport
from ._store import RetrievedTurn as RetrievedTurn
from ._store import VectorStoreUsage as VectorStoreUsage
from ._time import entry_text as entry_text
from ._time import parse_time as parse_time
from .compaction import __all__ as _compaction_names

__all__ = [
    "ConfigError",
    "ContentBlock",
    "DEFAULT_NAMESPACE",
    "DeleteResult",
    "DispatchError",
    "DispatchTimeout",
    "Document",
    "EmbedderError",
    "EmbeddingCall",
    "EmbeddingError",
    "EmbeddingPrice",
    "EmbeddingProfile",
    "EmbeddingProviderError",
    "EmbeddingTimeout",
    "EmbeddingUsageTotals",
    "EntryTooLarge",
    "Event",
    "EventSink",
    "Filter",
    "FilterError",
    "FilterNode",
    "ImageBase64",
    "IndexResult",
    "Injected",
    "InputType",
    "JsonError",
    "MemoryConfig",
    "Poisoned",
    "RECALL_MARKER",
    "ROLES",
    "RecallInjection",
    "RecallSettings",
    "RetrievalReport",
    "RetrievedTurn",
    "Role",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "SparseVector",
    "StoreUnavailable",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnReport",
    "UnifiedMessage",
    "UnifiedRequest",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "XML_RECALL_MARKER",
    "digest_request",
    "document_id",
    "entry_text",
    "inject",
    "parse_filter",
    "parse_time",
    "payload_bytes",
    "projection",
    "render",
]

_fixup_module_metadata(__name__, globals(), __all__)

# Names that left the top level after 0.1.0 for a submodule: importable from here, with a
# DeprecationWarning, for one release.
_MOVED = {
    **dict.fromkeys(_compaction_names, "protocol.compaction"),
    **dict.fromkeys(["Cleared", "Compressed", "TurnsStored"], "protocol.messages"),
}


# Hidden from type checkers, so that mypy and pyright flag an old path (and a typo) rather
# than typing every unknown name as ``object``.
if not _TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        home = _MOVED.get(name)
        if home is None:
            raise AttributeError(f"module 'protocol' has no attribute {name!r}")
        import importlib
        import warnings

        warnings.warn(
            f"protocol.{name} moved to {home}.{name}; import it from {home} "
            "(the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
