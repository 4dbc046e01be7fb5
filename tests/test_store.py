"""The in-memory store's own rules: the arena, its memory bound, the scan's ties and
scratch, and ``open_store``'s argument checks.

The rules every store keeps (design §3: batches, eviction, reads, the inbox,
cancellation, errors, a crash) are ``actors.testing.WriteConformance``, run on this
store in ``tests/test_conformance.py`` and on the pg store in ``tests/pg/test_pg_store.py``.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Sequence

import msgspec
import numpy as np
import pytest
import trio
import trio.lowlevel
import trio.testing

from actors import HashingEmbedder, open_store
from protocol import (
    ConfigError,
    RetrievalReport,
    UnifiedMessage,
    VectorStoreConfig,
)

DIM = 8
TIMEOUT = 10


def cfg(max_entries: int = 8, dimensions: int = DIM, **kw: object) -> VectorStoreConfig:
    return VectorStoreConfig(
        max_entries=max_entries,
        dimensions=dimensions,
        max_entry_bytes=256,
        **kw,  # type: ignore[arg-type]
    )


def msg(text: str) -> UnifiedMessage:
    return UnifiedMessage.user(text)


class TableEmbedder:
    """Sync embedder: each text is a key into a table of vectors. Records its calls."""

    def __init__(self, table: dict[str, Sequence[float] | np.ndarray]) -> None:
        self.table = table
        self.batches: list[list[str]] = []
        self.single: list[str] = []

    def embed(self, text: str) -> Sequence[float] | np.ndarray:
        self.single.append(text)
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> list[Sequence[float] | np.ndarray]:
        self.batches.append(list(texts))
        return [self.table[t] for t in texts]


# --- arena --------------------------------------------------------------------------------


async def test_arena_is_allocated_once_and_never_moves() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(max_entries=16), HashingEmbedder(DIM)) as store:
            arena = store._actor.arena
            address = arena.vectors.__array_interface__["data"][0]
            for round_ in range(250):
                await store.store_turns([msg(f"turn {round_} {j}") for j in range(12)])
            assert arena.vectors.__array_interface__["data"][0] == address
            assert arena.vectors.shape == (16, DIM)
            assert len(store) == 16
            assert store.usage().evicted_entries == 250 * 12 - 16


# --- normalization ------------------------------------------------------------------------


async def test_vectors_are_normalized_once_at_insert() -> None:
    table = {"long": [3.0, 4.0] + [0.0] * (DIM - 2)}
    with trio.fail_after(TIMEOUT):
        async with open_store(cfg(), TableEmbedder(table)) as store:  # type: ignore[arg-type]
            await store.store_turns([msg("long")])
            row = store._actor.arena.vectors[0]
            np.testing.assert_allclose(row[:2], [0.6, 0.8], rtol=1e-6)
            report = await store.retrieve_embedding([3.0, 4.0] + [0.0] * (DIM - 2), k=1)
            assert report.turns[0].score == pytest.approx(1.0, abs=1e-6)


# --- the memory bound -----------------------------------------------------------------------


async def test_memory_stays_within_the_bound() -> None:
    config = VectorStoreConfig(max_entries=200, dimensions=64, max_entry_bytes=2000)
    namespace = "memory-default"
    constant = 1024  # per-entry bookkeeping: slot lists, the FIFO map, the id map, ids
    bound = config.max_entries * (
        config.max_entry_bytes + config.dimensions * 4 + len(namespace) + constant
    )
    gc.collect()
    tracemalloc.start()
    try:
        with trio.fail_after(TIMEOUT):
            async with open_store(config, HashingEmbedder(64)) as store:
                baseline, _ = tracemalloc.get_traced_memory()
                for round_ in range(6):
                    batch = [msg(f"{round_}-{i} " + "y" * 1900) for i in range(100)]
                    await store.store_turns(batch, namespace=namespace)
                del batch  # only what the store holds counts
                gc.collect()
                current, _ = tracemalloc.get_traced_memory()
                assert len(store) == 200
                held = current
                assert held <= bound, f"store holds {held} bytes; the bound is {bound}"
                assert baseline > config.max_entries * config.dimensions * 4  # arena counted
    finally:
        tracemalloc.stop()


# --- errors from the table --------------------------------------------------------------


async def test_open_store_revalidates_config_and_embedder() -> None:
    config = cfg()
    msgspec.structs.force_setattr(config, "max_entries", 0)  # bypass the frozen struct
    with pytest.raises(ConfigError, match="max_entries is 0"):
        async with open_store(config, HashingEmbedder(DIM)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="makes 4-float vectors; this store takes 8"):
        async with open_store(cfg(), HashingEmbedder(4)):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="has neither embed"):
        async with open_store(cfg(), object()):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="inbox_size is 0"):
        async with open_store(cfg(), HashingEmbedder(DIM), inbox_size=0):
            pass  # pragma: no cover


class ArrayEmbedder:
    """Sync embedder returning one float32 array per batch (the fast normalize path)."""

    def __init__(self, table: dict[str, np.ndarray], dimensions: int) -> None:
        self.table = table
        self.dimensions = dimensions

    def embed(self, text: str) -> np.ndarray:
        return self.table[text]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


async def test_a_vector_is_stored_the_same_whatever_its_batch_holds() -> None:
    # A zero vector in the batch once sent the whole batch down the float64 path, so
    # the same vector stored twice came out a few ulp apart and did not tie.
    rng = np.random.default_rng(11)
    table = {f"t{i}": (rng.standard_normal(64) * 3).astype(np.float32) for i in range(40)}
    table["zero"] = np.zeros(64, dtype=np.float32)
    with trio.fail_after(TIMEOUT):
        async with open_store(
            cfg(max_entries=128, dimensions=64), ArrayEmbedder(table, 64)
        ) as store:
            for i in range(40):
                older = await store.store_turns([msg(f"t{i}"), msg("zero")])
                newer = await store.store_turns([msg(f"t{i}")])
                report = await store.retrieve_embedding(table[f"t{i}"], k=2)
                assert [h.id for h in report.turns] == [newer.ids[0], older.ids[0]]
                assert report.turns[0].score == report.turns[1].score


@pytest.mark.parametrize("threshold", [None, 0])
async def test_scores_that_round_to_a_tie_still_rank_newest_first(threshold: int | None) -> None:
    # Two vectors one ulp apart: in float64 the older scores a hair higher, but callers
    # see float32 scores, where the two are equal, so the newer must come first.
    rng = np.random.default_rng(5)
    q = rng.standard_normal(64).astype(np.float32)
    q /= np.linalg.norm(q)
    ties = 0
    kwargs = {} if threshold is None else {"thread_scan_threshold": threshold}
    table: dict[str, np.ndarray] = {}
    config = cfg(max_entries=16, dimensions=64)
    with trio.fail_after(TIMEOUT * 3):
        async with open_store(config, ArrayEmbedder(table, 64), **kwargs) as store:
            for _ in range(100):
                a = rng.standard_normal(64).astype(np.float32)
                b = a.copy()
                i = int(rng.integers(64))
                b[i] = np.nextafter(b[i], np.float32(np.inf) * np.sign(q[i]))
                table.update(old=b, new=a)
                await store.store_turns([msg("old")])
                await store.store_turns([msg("new")])
                first, second = (await store.retrieve_embedding(q, k=2)).turns
                if first.score == second.score:
                    ties += 1
                    assert first.sequence > second.sequence
                else:
                    assert first.score > second.score
                await store.clear()
    assert ties > 10  # the case this test is about did occur


async def _read_into(results: list[RetrievalReport], store: object, vector: np.ndarray) -> None:
    results.append(await store.retrieve_embedding(vector, k=5))  # type: ignore[attr-defined]


async def test_many_ties_and_zero_queries_need_bounded_scratch() -> None:
    # Zero-norm entries all score 0, so at the k-th boundary every one of them is a
    # candidate; a zero query makes every entry one. Re-scoring them once gathered
    # them all as float64: twice the arena.
    n, d = 8192, 256
    arena = n * d * 4

    class Zeros:
        dimensions = d

        def embed(self, text: str) -> np.ndarray:
            return self.embed_batch([text])[0]

        def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
            out = np.zeros((len(texts), d), dtype=np.float32)
            for i, t in enumerate(texts):
                if t.startswith("v"):
                    out[i] = np.random.default_rng(i).standard_normal(d)
            return out

    q = np.random.default_rng(9).standard_normal(d)
    with trio.fail_after(TIMEOUT * 3):
        for threshold in (None, 0):
            kwargs = {} if threshold is None else {"thread_scan_threshold": threshold}
            config = cfg(max_entries=n, dimensions=d)
            async with open_store(config, Zeros(), **kwargs) as store:
                turns = [msg(("v" if i < 3 else "z") + str(i)) for i in range(n)]
                await store.store_turns(turns)
                await store.retrieve_embedding(q, k=1)  # scratch allocated once
                tracemalloc.start()
                try:
                    lone = await store.retrieve_embedding(q, k=5)
                    results: list[RetrievalReport] = []
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_read_into, results, store, np.zeros(d))
                        nursery.start_soon(_read_into, results, store, q)
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                assert len(lone.turns) == 5 and all(len(r.turns) == 5 for r in results)
                assert peak < arena // 2, f"peak {peak} bytes against an arena of {arena}"
