"""trio-recall's running system: the actors, the arena, the embedders and the wiring."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocol._public import fixup_module_metadata as _fixup_module_metadata

from ._agent.compaction import Summarizer as Summarizer
from ._agent.consolidation import Add as Add
from ._agent.consolidation import Consolidator as Consolidator
from ._agent.consolidation import Decision as Decision
from ._agent.consolidation import Duplicate as Duplicate
from ._agent.consolidation import LlmConsolidator as LlmConsolidator
from ._agent.consolidation import RuleConsolidator as RuleConsolidator
from ._agent.consolidation import Update as Update
from ._agent.dispatch import Dispatcher as Dispatcher
from ._agent.dispatch import EchoDispatcher as EchoDispatcher
from ._agent.dispatch import OpenAIChatDispatcher as OpenAIChatDispatcher
from ._agent.memory import Memory as Memory
from ._agent.memory import MemoryStatistics as MemoryStatistics
from ._agent.memory import Turned as Turned
from ._agent.memory import open_memory as open_memory
from ._embedding.cache import CachedEmbedder as CachedEmbedder
from ._embedding.cache import CacheStatistics as CacheStatistics
from ._embedding.cache import EmbeddingCache as EmbeddingCache
from ._embedding.hashing import HashingEmbedder as HashingEmbedder
from ._embedding.minilm import MiniLMEmbedder as MiniLMEmbedder
from ._embedding.minilm import MiniLMStatistics as MiniLMStatistics
from ._embedding.openai import OpenAIEmbeddings as OpenAIEmbeddings
from ._embedding.protocols import AnyEmbedder as AnyEmbedder
from ._embedding.protocols import AsyncEmbedder as AsyncEmbedder
from ._embedding.protocols import Embedder as Embedder
from ._embedding.protocols import EmbeddingModel as EmbeddingModel
from ._embedding.protocols import EmbeddingResult as EmbeddingResult
from ._embedding.protocols import VectorLike as VectorLike
from ._embedding.protocols import check_profile as check_profile
from ._embedding.registry import EmbeddingRegistry as EmbeddingRegistry
from ._embedding.sparse import SparseEmbeddingModel as SparseEmbeddingModel
from ._embedding.st_adapter import SentenceTransformerEmbedder as SentenceTransformerEmbedder
from ._embedding.usage import EmbeddingUsageLog as EmbeddingUsageLog
from ._inmemory.store import open_store as open_store
from ._store.contract import Store as Store
from ._store.events import Subscription as Subscription
from ._store.handle import StoreHandle as StoreHandle
from ._store.handle import StoreStatistics as StoreStatistics
from ._store.indexing import DocumentStore as DocumentStore
from ._store.indexing import InMemoryRecordManager as InMemoryRecordManager
from ._store.indexing import Record as Record
from ._store.indexing import RecordManager as RecordManager
from ._store.indexing import index as index

__all__ = [
    "Add",
    "AnyEmbedder",
    "AsyncEmbedder",
    "CacheStatistics",
    "CachedEmbedder",
    "Consolidator",
    "Decision",
    "Dispatcher",
    "DocumentStore",
    "Duplicate",
    "EchoDispatcher",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModel",
    "EmbeddingRegistry",
    "EmbeddingResult",
    "EmbeddingUsageLog",
    "HashingEmbedder",
    "InMemoryRecordManager",
    "LlmConsolidator",
    "Memory",
    "MemoryStatistics",
    "MiniLMEmbedder",
    "MiniLMStatistics",
    "OpenAIChatDispatcher",
    "OpenAIEmbeddings",
    "Record",
    "RecordManager",
    "RuleConsolidator",
    "SentenceTransformerEmbedder",
    "SparseEmbeddingModel",
    "Store",
    "StoreHandle",
    "StoreStatistics",
    "Subscription",
    "Summarizer",
    "Turned",
    "Update",
    "VectorLike",
    "check_profile",
    "index",
    "open_memory",
    "open_store",
]

_fixup_module_metadata(__name__, globals(), __all__)

# The PostgreSQL backend needs the `pg` extra (psycopg): import it only when asked for,
# so `import actors` works without it.
_LAZY = {
    "open_pg_store": "._pg.store",
    "PgStoreHandle": "._pg.store",
    "read_pg_table": "._pg.tables",
    "PgTableInfo": "._pg.tables",
}

if _TYPE_CHECKING:  # what the lazy names are, for type checkers
    from ._pg.store import PgStoreHandle as PgStoreHandle
    from ._pg.store import open_pg_store as open_pg_store
    from ._pg.tables import PgTableInfo as PgTableInfo
    from ._pg.tables import read_pg_table as read_pg_table


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'actors' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    # Its public path is actors.<name>, as for the names imported above.
    _fixup_module_metadata(__name__, {name: value}, [name])
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
