"""The in-memory store's documents API where it is the arena's (a freed slot is reused),
and what ``SearchRequest`` itself checks.

The documents contract every store keeps is ``actors.testing.StoreConformance`` (search)
and ``actors.testing.WriteConformance`` (the write path), run on this store in
``tests/test_conformance.py`` and on the pg store in ``tests/pg/test_pg_documents.py`` and
``tests/pg/test_pg_store.py``.
"""

from __future__ import annotations

import math

import pytest
import trio

from actors import HashingEmbedder, open_store
from protocol import (
    ConfigError,
    Document,
    SearchRequest,
    VectorStoreConfig,
)

DIM = 64
TIMEOUT = 10


def cfg(max_entries: int = 32) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=max_entries, dimensions=DIM, max_entry_bytes=512)


def docs(*texts: str, **metadata: object) -> list[Document]:
    return [Document(text=t, metadata=dict(metadata)) for t in texts]


async def test_delete_reports_missing_and_reuses_the_slot() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=4), HashingEmbedder(DIM)) as store:
            ids = await store.add_documents(docs("a", "b", "c"))
            result = await store.delete([ids[1], "nope", ids[1]])
            assert (result.deleted, result.missing) == ([ids[1]], ["nope"])
            high = store._actor.arena.high
            await store.add_documents(docs("d"))
            assert store._actor.arena.high == high  # the freed slot was reused
            assert store.usage().evicted_entries == 0
            assert sorted(d.text for d in await store.get_by_ids([*ids, "zzz"])) == ["a", "c"]


def test_score_threshold_meaning_is_cosine() -> None:
    with pytest.raises(ConfigError, match=r"expected a cosine similarity in \[-1, 1\]"):
        SearchRequest(query="x", score_threshold=1.5)
    assert math.isclose(SearchRequest(query="x", score_threshold=-1).score_threshold or 0, -1.0)
