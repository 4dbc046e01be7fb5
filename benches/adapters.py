"""What the LangChain adapter costs (docs/pages/tutorials/langchain.md,
docs/pages/benchmarks/adapters.md).

Run from the repository root::

    uv run --extra bench --extra langchain python benches/adapters.py          # ~4 min
    uv run --extra bench --extra langchain python benches/adapters.py --quick  # ~20 s

At 1,000 and 10,000 documents (384 floats, k = 4), in one run, one call of each
contender per round in an order shuffled every round:

- ``direct``: ``StoreHandle.search`` awaited inside a trio loop (timed there, so no
  crossing is counted), on an ``open_store`` of the same vectors that runs in a trio
  thread of the bench's own (an anyio portal): what a trio program pays;
- ``bridge sync``: ``TrioRecallVectorStore.similarity_search`` from the main thread;
- ``bridge sync, by vector``: the caller embeds the query (``embed_query``) and calls
  ``similarity_search_by_vector``: one thread round trip, where ``similarity_search``
  has two more (the store embeds the query in a worker thread of its trio loop);
- ``bridge async``: ``await TrioRecallVectorStore.asimilarity_search`` in asyncio;
- ``InMemoryVectorStore``: LangChain's own in-memory store, ``similarity_search``;
- ``bridge sync, warm`` and ``bridge async, warm``: the same two bridge calls, each right
  after an untimed ``get_by_ids([])`` through the bridge (steady use keeps the store's
  threads awake; otherwise each call here follows another contender's work).

All four embed the query with the same LangChain ``Embeddings``, a table of precomputed
vectors (so the model's cost, identical for all, does not hide the store's). It also
times the round trip of an empty call through the bridge (``get_by_ids([])``, the
adapter's cheapest public call, from a thread and from asyncio) and through the
alternatives it was chosen over (anyio's blocking portal, trio's guest mode), and writes
``benches/results/adapters.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import trio
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from actors import open_store
from actors.integrations.langchain import TrioRecallVectorStore
from protocol import SearchRequest, VectorStoreConfig

DIM = 384
K = 4
RESULTS = Path(__file__).resolve().parent / "results"


class Table(Embeddings):
    """Precomputed unit vectors by text: documents and queries alike."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text]


def unit_rows(rng: np.random.Generator, n: int) -> list[list[float]]:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float64).tolist()


def percentiles(samples: list[float]) -> dict[str, float]:
    p50, p90 = np.percentile(np.asarray(samples) * 1e6, [50, 90])
    return {"p50_us": float(p50), "p90_us": float(p90), "n": len(samples)}


class TableEmbedder:
    """The same table as a trio-recall ``Embedder``, for the direct store."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors
        self.dimensions = DIM

    def embed(self, text: str) -> list[float]:
        return self.vectors[text]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


async def _direct(store: Any, request: SearchRequest) -> float:
    started = time.perf_counter()
    await store.search(request)
    return time.perf_counter() - started


def measure_search(n: int, rounds: int, seed: int) -> dict[str, Any]:
    from anyio.from_thread import start_blocking_portal

    rng = np.random.default_rng(seed)
    texts = [f"document {i}" for i in range(n)]
    queries = [f"query {i}" for i in range(200)]
    vectors = dict(zip(texts + queries, unit_rows(rng, n + len(queries)), strict=True))
    embedding = Table(vectors)
    reference = InMemoryVectorStore(embedding)
    reference.add_texts(texts)
    vs = TrioRecallVectorStore(embedding, max_entries=n, dimensions=DIM)
    loop = asyncio.new_event_loop()
    config = VectorStoreConfig(max_entries=n, dimensions=DIM, max_entry_bytes=4096)
    try:
        # The direct contender's store: the same vectors, in a trio loop of the bench's
        # own, where each search is timed (so the crossing into it is not counted).
        with (
            start_blocking_portal(backend="trio") as portal,
            portal.wrap_async_context_manager(open_store(config, TableEmbedder(vectors))) as store,
        ):
            for start in range(0, n, 1000):
                batch = texts[start : start + 1000]
                vs.add_texts(batch, ids=batch)
                portal.call(partial(store.add_texts, batch, ids=batch))

            def direct(q: str) -> float:
                return portal.call(_direct, store, SearchRequest(query=q, k=K))

            def sync(q: str) -> float:
                started = time.perf_counter()
                vs.similarity_search(q, k=K)
                return time.perf_counter() - started

            def by_vector(q: str) -> float:
                started = time.perf_counter()
                vs.similarity_search_by_vector(embedding.embed_query(q), k=K)
                return time.perf_counter() - started

            async def timed_async(q: str) -> float:
                started = time.perf_counter()
                await vs.asimilarity_search(q, k=K)
                return time.perf_counter() - started

            def in_asyncio(q: str) -> float:
                return loop.run_until_complete(timed_async(q))

            # "warm": an untimed empty call first wakes the trio thread (and its
            # worker), as steady use keeps them awake; without it each bridge call here
            # follows another contender's work and pays the wake-up of idle threads.
            def sync_warm(q: str) -> float:
                vs.get_by_ids([])
                return sync(q)

            async def timed_async_warm(q: str) -> float:
                await vs.aget_by_ids([])
                return await timed_async(q)

            def in_asyncio_warm(q: str) -> float:
                return loop.run_until_complete(timed_async_warm(q))

            def langchain(q: str) -> float:
                started = time.perf_counter()
                reference.similarity_search(q, k=K)
                return time.perf_counter() - started

            # Same answers first: the contenders rank the same documents.
            for q in queries[:5]:
                ours = [d.page_content for d in vs.similarity_search(q, k=K)]
                theirs = [d.page_content for d in reference.similarity_search(q, k=K)]
                mine = portal.call(store.search, SearchRequest(query=q, k=K))
                assert ours == theirs == [h.document.text for h in mine], (q, ours, theirs)
            contenders: dict[str, Callable[[str], float]] = {
                "direct": direct,
                "bridge sync": sync,
                "bridge sync, by vector": by_vector,
                "bridge async": in_asyncio,
                "bridge sync, warm": sync_warm,
                "bridge async, warm": in_asyncio_warm,
                "InMemoryVectorStore": langchain,
            }
            # The fixtures (10,000 vectors as Python lists, twice) would make every
            # cyclic GC pass walk millions of objects, in whichever contender triggers it.
            gc.collect()
            gc.freeze()
            samples: dict[str, list[float]] = {name: [] for name in contenders}
            order = list(contenders)
            shuffle = random.Random(seed)
            for r in range(rounds):
                q = queries[r % len(queries)]
                shuffle.shuffle(order)
                for name in order:
                    samples[name].append(contenders[name](q))
    finally:
        gc.unfreeze()
        vs.close()
        loop.close()
    stats = {name: percentiles(s) for name, s in samples.items()}
    ratios = {
        f"{a} / {b}": {p: stats[a][f"{p}_us"] / stats[b][f"{p}_us"] for p in ("p50", "p90")}
        for a in (
            "bridge sync",
            "bridge sync, by vector",
            "bridge async",
            "bridge sync, warm",
            "bridge async, warm",
        )
        for b in ("direct", "InMemoryVectorStore")
    }
    return {"documents": n, "stats": stats, "ratios": ratios}


# --- the round trip of an empty call ------------------------------------------------


async def _noop_plain() -> None:
    return None


def measure_round_trip(calls: int) -> dict[str, Any]:
    from anyio.from_thread import start_blocking_portal

    samples: dict[str, list[float]] = {}

    def record(name: str, fn: Callable[[], object]) -> None:
        started = time.perf_counter()
        fn()
        samples.setdefault(name, []).append(time.perf_counter() - started)

    # An empty store: get_by_ids([]) is the adapter's cheapest call, a round trip
    # through its bridge and an empty read.
    vs = TrioRecallVectorStore(Table({}), max_entries=1, dimensions=DIM)
    loop = asyncio.new_event_loop()
    guest = _GuestRun(loop)
    try:
        with start_blocking_portal(backend="trio") as portal:

            async def bridge_async() -> None:
                await vs.aget_by_ids([])

            async def portal_async() -> None:
                await asyncio.wrap_future(portal.start_task_soon(_noop_plain))

            contenders: dict[str, Callable[[], object]] = {
                "get_by_ids([]) through the bridge (thread)": lambda: vs.get_by_ids([]),
                "aget_by_ids([]) through the bridge (asyncio)": lambda: loop.run_until_complete(
                    bridge_async()
                ),
                "anyio portal.call (thread)": lambda: portal.call(_noop_plain),
                "anyio portal, wrap_future (asyncio)": lambda: loop.run_until_complete(
                    portal_async()
                ),
                "trio guest run in asyncio": lambda: loop.run_until_complete(guest.call()),
            }
            order = list(contenders)
            shuffle = random.Random(1)
            for _ in range(calls):
                shuffle.shuffle(order)
                for name in order:
                    record(name, contenders[name])
    finally:
        guest.stop()
        vs.close()
        loop.close()
    return {name: percentiles(s) for name, s in samples.items()}


class _GuestRun:
    """trio as a guest of an asyncio loop (``trio.lowlevel.start_guest_run``): the
    alternative to a thread; a call is a task started from asyncio."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready = loop.create_future()
        self.done = loop.create_future()
        self.cancel: trio.CancelScope | None = None

        async def main() -> None:
            with trio.CancelScope() as self.cancel:
                async with trio.open_nursery() as nursery:
                    self.ready.set_result((trio.lowlevel.current_trio_token(), nursery))
                    await trio.sleep_forever()

        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=lambda result: self.done.set_result(result),
            host_uses_signal_set_wakeup_fd=False,
        )
        self.token, self.nursery = loop.run_until_complete(self.ready)

    async def call(self) -> None:
        answer = self.loop.create_future()

        async def task() -> None:
            await _noop_plain()
            answer.set_result(None)

        self.token.run_sync_soon(self.nursery.start_soon, task)
        await answer

    def stop(self) -> None:
        assert self.cancel is not None
        self.token.run_sync_soon(self.cancel.cancel)
        self.loop.run_until_complete(self.done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    rounds, calls = (60, 300) if args.quick else (300, 2000)
    load_start = os.getloadavg()
    print(f"{platform.machine()}, {os.cpu_count()} cores, load average {load_start}")
    results: dict[str, Any] = {
        "machine": {
            "host": platform.node(),
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "k": K,
        "dimensions": DIM,
        "rounds": rounds,
        "load_average_start": load_start,
        "search": [measure_search(n, rounds, seed=n) for n in (1000, 10000)],
        "round_trip": measure_round_trip(calls),
    }
    results["load_average_end"] = os.getloadavg()
    for entry in results["search"]:
        print(f"\n{entry['documents']} documents, k={K}")
        for name, s in entry["stats"].items():
            print(f"  {name:24} p50 {s['p50_us']:8.1f} us   p90 {s['p90_us']:8.1f} us")
        for name, r in entry["ratios"].items():
            print(f"  {name:46} p50 x{r['p50']:.2f}   p90 x{r['p90']:.2f}")
    print("\nround trip of an empty call")
    for name, s in results["round_trip"].items():
        print(f"  {name:38} p50 {s['p50_us']:7.1f} us   p90 {s['p90_us']:7.1f} us")
    print(f"load average at the end {results['load_average_end']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adapters.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
