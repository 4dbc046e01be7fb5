"""trio-recall's data: what users build and read. Chat messages, configuration,
documents, filters, reports, events, errors, and the pure functions over them
(projection, payload size, render, inject, digest).

The actors' own messages are in :mod:`protocol.messages`, the filter nodes in
:mod:`protocol.filters` and the concrete event types in :mod:`protocol.events`; the
checks and encodings every door and backend shares (for those who write one) are in
:mod:`protocol.checks`. This
package never imports trio, numpy or ``actors`` (design §1).
"""

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
from ._errors import PluginError as PluginError
from ._errors import PluginInternalError as PluginInternalError
from ._errors import PluginValidationError as PluginValidationError
from ._errors import Poisoned as Poisoned
from ._errors import StoreUnavailable as StoreUnavailable
from ._errors import VectorStoreError as VectorStoreError
from ._events import Event as Event
from ._events import EventSink as EventSink
from ._filters import Filter as Filter
from ._filters import FilterNode as FilterNode
from ._filters import parse_filter as parse_filter
from ._memory import Clamped as Clamped
from ._memory import ClampOversizedMessages as ClampOversizedMessages
from ._memory import CompactionAction as CompactionAction
from ._memory import CompressionReport as CompressionReport
from ._memory import DropObservations as DropObservations
from ._memory import Dropped as Dropped
from ._memory import MemoryConfig as MemoryConfig
from ._memory import Offload as Offload
from ._memory import Offloaded as Offloaded
from ._memory import RecallSettings as RecallSettings
from ._memory import Rejected as Rejected
from ._memory import Skipped as Skipped
from ._memory import SlidingWindow as SlidingWindow
from ._memory import Strategy as Strategy
from ._memory import Summarize as Summarize
from ._memory import Summarized as Summarized
from ._memory import TurnReport as TurnReport
from ._memory import contextual_entry as contextual_entry
from ._messages import Cleared as Cleared
from ._messages import Compressed as Compressed
from ._messages import TurnsStored as TurnsStored
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

__all__ = [
    "ClampOversizedMessages",
    "Clamped",
    "Cleared",
    "CompactionAction",
    "Compressed",
    "CompressionReport",
    "ConfigError",
    "ContentBlock",
    "DEFAULT_NAMESPACE",
    "DeleteResult",
    "DispatchError",
    "DispatchTimeout",
    "Document",
    "DropObservations",
    "Dropped",
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
    "Offload",
    "Offloaded",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Poisoned",
    "RECALL_MARKER",
    "ROLES",
    "RecallInjection",
    "RecallSettings",
    "Rejected",
    "RetrievalReport",
    "RetrievedTurn",
    "Role",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "Skipped",
    "SlidingWindow",
    "SparseVector",
    "StoreUnavailable",
    "Strategy",
    "Summarize",
    "Summarized",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnReport",
    "TurnsStored",
    "UnifiedMessage",
    "UnifiedRequest",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "XML_RECALL_MARKER",
    "contextual_entry",
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
