"""trio-recall's running system: the actors, the arena, the embedders and the wiring."""

from ._compaction import Summarizer as Summarizer
from ._dispatch import Dispatcher as Dispatcher
from ._dispatch import EchoDispatcher as EchoDispatcher
from ._dispatch import OpenAIChatDispatcher as OpenAIChatDispatcher
from ._embedders import AsyncEmbedder as AsyncEmbedder
from ._embedders import Embedder as Embedder
from ._embedders import HashingEmbedder as HashingEmbedder
from ._embedding_cache import CachedEmbedder as CachedEmbedder
from ._embedding_cache import CacheStatistics as CacheStatistics
from ._embedding_cache import EmbeddingCache as EmbeddingCache
from ._embedding_cache import EmbeddingModel as EmbeddingModel
from ._embedding_cache import EmbeddingRegistry as EmbeddingRegistry
from ._embedding_cache import EmbeddingResult as EmbeddingResult
from ._embedding_cache import EmbeddingUsageLog as EmbeddingUsageLog
from ._embedding_cache import check_profile as check_profile
from ._events import Subscription as Subscription
from ._handle import Store as Store
from ._indexing import DocumentStore as DocumentStore
from ._indexing import InMemoryRecordManager as InMemoryRecordManager
from ._indexing import Record as Record
from ._indexing import RecordManager as RecordManager
from ._indexing import index as index
from ._memory import Memory as Memory
from ._memory import MemoryStatistics as MemoryStatistics
from ._memory import Turned as Turned
from ._memory import open_memory as open_memory
from ._minilm import MiniLMEmbedder as MiniLMEmbedder
from ._minilm import MiniLMStatistics as MiniLMStatistics
from ._openai_embeddings import OpenAIEmbeddings as OpenAIEmbeddings
from ._sparse import SparseEmbeddingModel as SparseEmbeddingModel
from ._st_adapter import SentenceTransformerEmbedder as SentenceTransformerEmbedder
from ._store import StoreHandle as StoreHandle
from ._store import StoreStatistics as StoreStatistics
from ._store import open_store as open_store

__all__ = [
    "AsyncEmbedder",
    "CacheStatistics",
    "CachedEmbedder",
    "Dispatcher",
    "DocumentStore",
    "EchoDispatcher",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModel",
    "EmbeddingRegistry",
    "EmbeddingResult",
    "EmbeddingUsageLog",
    "HashingEmbedder",
    "InMemoryRecordManager",
    "Memory",
    "MemoryStatistics",
    "MiniLMEmbedder",
    "MiniLMStatistics",
    "OpenAIChatDispatcher",
    "OpenAIEmbeddings",
    "Record",
    "RecordManager",
    "SentenceTransformerEmbedder",
    "SparseEmbeddingModel",
    "Store",
    "StoreHandle",
    "StoreStatistics",
    "Subscription",
    "Summarizer",
    "Turned",
    "check_profile",
    "index",
    "open_memory",
    "open_store",
]

# The PostgreSQL backend needs the `pg` extra (psycopg): import it only when asked for,
# so `import actors` works without it.
_LAZY = {"open_pg_store": "._pg.store", "PgStoreHandle": "._pg.store"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'actors' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
