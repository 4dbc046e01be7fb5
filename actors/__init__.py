"""trio-recall's running system: the actors, the arena, the embedders and the wiring."""

from ._embedders import AsyncEmbedder as AsyncEmbedder
from ._embedders import Embedder as Embedder
from ._embedders import HashingEmbedder as HashingEmbedder
from ._store import StoreHandle as StoreHandle
from ._store import StoreStatistics as StoreStatistics
from ._store import open_store as open_store

__all__ = [
    "AsyncEmbedder",
    "Embedder",
    "HashingEmbedder",
    "StoreHandle",
    "StoreStatistics",
    "open_store",
]
