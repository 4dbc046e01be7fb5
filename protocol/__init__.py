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
from ._errors import ConfigError as ConfigError
from ._errors import EmbedderError as EmbedderError
from ._errors import EmbeddingError as EmbeddingError
from ._errors import EntryTooLarge as EntryTooLarge
from ._errors import FilterError as FilterError
from ._errors import JsonError as JsonError
from ._errors import PluginError as PluginError
from ._errors import PluginInternalError as PluginInternalError
from ._errors import PluginValidationError as PluginValidationError
from ._errors import Poisoned as Poisoned
from ._errors import VectorStoreError as VectorStoreError
from ._errors import to_plugin_error as to_plugin_error
from ._store import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from ._store import Clear as Clear
from ._store import Cleared as Cleared
from ._store import Delete as Delete
from ._store import Deleted as Deleted
from ._store import RetrievalReport as RetrievalReport
from ._store import RetrievedTurn as RetrievedTurn
from ._store import StoreMsg as StoreMsg
from ._store import StoreReply as StoreReply
from ._store import StoreRequest as StoreRequest
from ._store import StoreTurns as StoreTurns
from ._store import TurnsStored as TurnsStored
from ._store import VectorStoreUsage as VectorStoreUsage

__all__ = [
    "DEFAULT_NAMESPACE",
    "ROLES",
    "Clear",
    "Cleared",
    "ConfigError",
    "ContentBlock",
    "Delete",
    "Deleted",
    "EmbedderError",
    "EmbeddingError",
    "EntryTooLarge",
    "FilterError",
    "ImageBase64",
    "JsonError",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Poisoned",
    "RetrievalReport",
    "RetrievedTurn",
    "Role",
    "StoreMsg",
    "StoreReply",
    "StoreRequest",
    "StoreTurns",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnsStored",
    "UnifiedMessage",
    "UnifiedRequest",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "payload_bytes",
    "projection",
    "to_plugin_error",
]
