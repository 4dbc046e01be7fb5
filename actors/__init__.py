"""trio-recall's running system: the actors, the arena, the embedders and the wiring."""

from ._compaction import Summarizer as Summarizer
from ._dispatch import Dispatcher as Dispatcher
from ._dispatch import EchoDispatcher as EchoDispatcher
from ._dispatch import OpenAIChatDispatcher as OpenAIChatDispatcher
from ._embedders import AsyncEmbedder as AsyncEmbedder
from ._embedders import Embedder as Embedder
from ._embedders import HashingEmbedder as HashingEmbedder
from ._events import Subscription as Subscription
from ._indexing import DocumentStore as DocumentStore
from ._indexing import InMemoryRecordManager as InMemoryRecordManager
from ._indexing import Record as Record
from ._indexing import RecordManager as RecordManager
from ._indexing import index as index
from ._memory import Memory as Memory
from ._memory import MemoryStatistics as MemoryStatistics
from ._memory import Turned as Turned
from ._memory import open_memory as open_memory
from ._store import StoreHandle as StoreHandle
from ._store import StoreStatistics as StoreStatistics
from ._store import open_store as open_store

__all__ = [
    "AsyncEmbedder",
    "Dispatcher",
    "DocumentStore",
    "EchoDispatcher",
    "Embedder",
    "HashingEmbedder",
    "InMemoryRecordManager",
    "Memory",
    "MemoryStatistics",
    "OpenAIChatDispatcher",
    "Record",
    "RecordManager",
    "StoreHandle",
    "StoreStatistics",
    "Subscription",
    "Summarizer",
    "Turned",
    "index",
    "open_memory",
    "open_store",
]
