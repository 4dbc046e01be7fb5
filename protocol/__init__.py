"""trio-recall's data: messages, configuration, reports, errors and pure functions.

This package never imports trio, numpy or ``actors``.
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
from ._errors import to_plugin_error as to_plugin_error
from ._events import DocumentsAdded as DocumentsAdded
from ._events import DocumentsDeleted as DocumentsDeleted
from ._events import EmbeddingEmbedded as EmbeddingEmbedded
from ._events import EmbeddingFailed as EmbeddingFailed
from ._events import Event as Event
from ._events import EventSink as EventSink
from ._events import Evicted as Evicted
from ._events import IndexingBatchCompleted as IndexingBatchCompleted
from ._events import IndexingCompleted as IndexingCompleted
from ._events import IndexingFailed as IndexingFailed
from ._events import IndexingStarted as IndexingStarted
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
from ._filters import And as And
from ._filters import Eq as Eq
from ._filters import Exists as Exists
from ._filters import Filter as Filter
from ._filters import FilterNode as FilterNode
from ._filters import Gt as Gt
from ._filters import Gte as Gte
from ._filters import In as In
from ._filters import Lt as Lt
from ._filters import Lte as Lte
from ._filters import Ne as Ne
from ._filters import Nin as Nin
from ._filters import Not as Not
from ._filters import Or as Or
from ._filters import matches as filter_matches
from ._filters import parse_filter as parse_filter
from ._memory import Clamped as Clamped
from ._memory import ClampOversizedMessages as ClampOversizedMessages
from ._memory import CompactionAction as CompactionAction
from ._memory import CompactionMsg as CompactionMsg
from ._memory import CompactionRequest as CompactionRequest
from ._memory import Compress as Compress
from ._memory import Compressed as Compressed
from ._memory import CompressionReport as CompressionReport
from ._memory import DropObservations as DropObservations
from ._memory import Dropped as Dropped
from ._memory import Inject as Inject
from ._memory import InjectionMsg as InjectionMsg
from ._memory import InjectionRequest as InjectionRequest
from ._memory import MemoryConfig as MemoryConfig
from ._memory import Offload as Offload
from ._memory import Offloaded as Offloaded
from ._memory import Recall as Recall
from ._memory import RecallMsg as RecallMsg
from ._memory import RecallRequest as RecallRequest
from ._memory import RecallSettings as RecallSettings
from ._memory import Rejected as Rejected
from ._memory import Skipped as Skipped
from ._memory import SlidingWindow as SlidingWindow
from ._memory import Strategy as Strategy
from ._memory import Summarize as Summarize
from ._memory import Summarized as Summarized
from ._memory import TurnReport as TurnReport
from ._memory import contextual_entry as contextual_entry
from ._render import RECALL_MARKER as RECALL_MARKER
from ._render import XML_RECALL_MARKER as XML_RECALL_MARKER
from ._render import Injected as Injected
from ._render import RecallInjection as RecallInjection
from ._render import digest_request as digest_request
from ._render import inject as inject
from ._render import render as render
from ._store import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from ._store import Clear as Clear
from ._store import Cleared as Cleared
from ._store import Delete as Delete
from ._store import Deleted as Deleted
from ._store import DocumentsUpserted as DocumentsUpserted
from ._store import RetrievalReport as RetrievalReport
from ._store import RetrievedTurn as RetrievedTurn
from ._store import StoreMsg as StoreMsg
from ._store import StoreReply as StoreReply
from ._store import StoreRequest as StoreRequest
from ._store import StoreTurns as StoreTurns
from ._store import TurnsStored as TurnsStored
from ._store import UpsertDocuments as UpsertDocuments
from ._store import VectorStoreUsage as VectorStoreUsage

__all__ = [
    "And",
    "ClampOversizedMessages",
    "Clamped",
    "Clear",
    "Cleared",
    "CompactionAction",
    "CompactionMsg",
    "CompactionRequest",
    "Compress",
    "Compressed",
    "CompressionReport",
    "ConfigError",
    "ContentBlock",
    "DEFAULT_NAMESPACE",
    "Delete",
    "DeleteResult",
    "Deleted",
    "DispatchError",
    "DispatchTimeout",
    "Document",
    "DocumentsAdded",
    "DocumentsDeleted",
    "DocumentsUpserted",
    "DropObservations",
    "Dropped",
    "EmbedderError",
    "EmbeddingCall",
    "EmbeddingEmbedded",
    "EmbeddingError",
    "EmbeddingFailed",
    "EmbeddingPrice",
    "EmbeddingProfile",
    "EmbeddingProviderError",
    "EmbeddingTimeout",
    "EmbeddingUsageTotals",
    "EntryTooLarge",
    "Eq",
    "Event",
    "EventSink",
    "Evicted",
    "Exists",
    "Filter",
    "FilterError",
    "FilterNode",
    "Gt",
    "Gte",
    "ImageBase64",
    "In",
    "IndexResult",
    "IndexingBatchCompleted",
    "IndexingCompleted",
    "IndexingFailed",
    "IndexingStarted",
    "Inject",
    "Injected",
    "InjectionMsg",
    "InjectionRequest",
    "InputType",
    "JsonError",
    "Lt",
    "Lte",
    "MemoryConfig",
    "MemoryEvent",
    "Ne",
    "Nin",
    "Not",
    "Offload",
    "Offloaded",
    "Or",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Poisoned",
    "RECALL_MARKER",
    "ROLES",
    "Recall",
    "RecallFailed",
    "RecallInjected",
    "RecallInjection",
    "RecallMsg",
    "RecallRequest",
    "RecallSettings",
    "Recalled",
    "Rejected",
    "RetrievalReport",
    "RetrievedTurn",
    "RetrieverCompleted",
    "RetrieverFailed",
    "RetrieverStarted",
    "Role",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "Skipped",
    "SlidingWindow",
    "StoreMsg",
    "StoreNearCap",
    "StoreReply",
    "StoreRequest",
    "StoreSearched",
    "StoreTurns",
    "StoreUnavailable",
    "Strategy",
    "Summarize",
    "Summarized",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnReport",
    "TurnsOffloaded",
    "TurnsStored",
    "TurnsSummarized",
    "UnifiedMessage",
    "UnifiedRequest",
    "UpsertDocuments",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "XML_RECALL_MARKER",
    "contextual_entry",
    "digest_request",
    "document_id",
    "filter_matches",
    "fingerprint",
    "inject",
    "parse_filter",
    "payload_bytes",
    "projection",
    "render",
    "to_plugin_error",
]
