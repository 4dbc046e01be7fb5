"""trio-recall's read and write benches (design §10).

Run from the repository root::

    uv run --extra bench python benches/vector_store.py            # the full run, < 10 min
    uv run --extra bench python benches/vector_store.py --quick    # a smoke run, < 1 min

It prints a table of ratios (p50 and p90, every figure measured in the same run) and
writes ``benches/results/latest.json`` and ``benches/results/latest.png``. Contenders
are interleaved round-robin, one call each per round, so that load from other processes
on a shared machine hits them all alike.

A watcher counts every BLAS thread-count change (threadpoolctl's ``set_num_threads``,
patched for the run) by the contender that made it: the default store must make none.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import trio

from actors import open_store
from protocol import UnifiedMessage, VectorStoreConfig

K = 8
SIZES = [(1024, 384), (8192, 768), (8192, 1536), (65536, 768)]
RESULTS = Path(__file__).resolve().parent / "results"

Timer = Callable[[], Awaitable[None]]

#: open_store's documented default, read from its signature (the bench records it).
DEFAULT_THREAD_SCAN_THRESHOLD = (
    inspect.signature(open_store).parameters["thread_scan_threshold"].default
)


def blas_libraries() -> list[Any]:
    """The BLAS library controllers numpy loaded (threadpoolctl's, of the same classes
    the store's ``blas_threads="auto"`` holds, so patching a class counts its calls)."""
    from threadpoolctl import ThreadpoolController

    return list(ThreadpoolController().select(user_api="blas").lib_controllers)


class CountWatch:
    """Counts threadpoolctl's ``set_num_threads`` calls, by the contender running then,
    and (``sample``) the distinct counts a thread saw while a measure ran."""

    def __init__(self) -> None:
        self.current = "setup"
        self.calls: dict[str, int] = {}
        self.libs = blas_libraries()
        for cls in {type(lib) for lib in self.libs}:
            original = cls.set_num_threads

            def counted(lib: Any, num_threads: int, _original: Any = original) -> Any:
                self.calls[self.current] = self.calls.get(self.current, 0) + 1
                return _original(lib, num_threads)

            cls.set_num_threads = counted  # type: ignore[method-assign]

    def counts(self) -> tuple[int, ...]:
        return tuple(int(lib.get_num_threads()) for lib in self.libs)


WATCH: CountWatch | None = None


# --- helpers --------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = [
        {
            k: v
            for k, v in info.items()
            if k in ("internal_api", "version", "num_threads", "architecture")
        }
        for info in (lib.info() for lib in blas_libraries())
    ]
    return {
        "host": platform.node(),
        "cpu": model,
        "cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "blas": blas,
        "env": {
            k: os.environ.get(k)
            for k in (
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
                "OPENBLAS_NUM_THREADS",
                "OMP_NUM_THREADS",
            )
        },
        "load_average": os.getloadavg(),
    }


def stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    n = len(ordered)
    return {
        "p50": ordered[n // 2],
        "p90": ordered[min(n - 1, int(n * 0.9))],
        "n": n,
    }


def schedule(reps: dict[str, int]) -> Iterator[tuple[str, int]]:
    """``(contender, repetition)`` in the order to run them: one call each per round,
    in an order shuffled every round (fixed seed), a contender with fewer repetitions
    spread evenly over the rounds."""
    done = dict.fromkeys(reps, 0)
    rounds = max(reps.values())
    order = list(reps)
    shuffle = random.Random(len(order)).shuffle
    for r in range(rounds):
        shuffle(order)
        for name in order:
            if done[name] < reps[name] and r * reps[name] // rounds == done[name]:
                yield name, done[name]
                done[name] += 1


async def interleave(contenders: dict[str, tuple[Timer, int]]) -> dict[str, dict[str, float]]:
    """Run each contender once per round until it has its repetitions.

    The order is shuffled every round (with a fixed seed): a call that leaves threads
    spinning (OpenBLAS's pool, faiss's OpenMP team) slows whatever runs right after it
    when the other core is busy, so no contender may always follow the same one.
    """
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for name, _ in schedule({name: reps for name, (_, reps) in contenders.items()}):
        if WATCH is not None:
            WATCH.current = name
        start = time.perf_counter()
        await contenders[name][0]()
        samples[name].append(time.perf_counter() - start)
        if WATCH is not None:
            WATCH.current = "between"
    out = {name: stats(s) for name, s in samples.items()}
    if WATCH is not None:
        for name in out:
            out[name]["thread_count_changes"] = WATCH.calls.pop(name, 0)
    return out


def unit_rows(rng: np.random.Generator, n: int, d: int) -> npt.NDArray[np.float32]:
    rows = rng.standard_normal((n, d), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


class Precomputed:
    """An async embedder that hands out rows of a fixed table, for the benches."""

    def __init__(self, table: npt.NDArray[np.float32]) -> None:
        self.table = table
        self.next = 0

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        start = self.next % len(self.table)
        self.next += len(texts)
        return self.table[start : start + len(texts)]

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.table[0]


def raw_kernel(a: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
    scores = a @ q
    top = np.argpartition(scores, -K)[-K:]
    result: npt.NDArray[np.intp] = top[np.argsort(-scores[top], kind="stable")]
    return result


def per_row_loop(a: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
    scores = np.empty(a.shape[0], dtype=np.float32)
    for i in range(a.shape[0]):
        scores[i] = np.dot(a[i], q)
    top = np.argpartition(scores, -K)[-K:]
    result: npt.NDArray[np.intp] = top[np.argsort(-scores[top], kind="stable")]
    return result


def sync(fn: Callable[[], object]) -> Timer:
    async def call() -> None:
        fn()

    return call


def with_blas_threads(count: int, fn: Callable[[], object]) -> Callable[[], object]:
    lib = blas_libraries()

    def call() -> object:
        saved = [x.get_num_threads() for x in lib]
        for x in lib:
            x.set_num_threads(count)
        try:
            return fn()
        finally:
            for x, c in zip(lib, saved, strict=True):
                x.set_num_threads(c)

    return call


# --- the measurements ------------------------------------------------------------------


async def bench_size(n: int, d: int, quick: bool, skip_langchain: bool) -> dict[str, Any]:
    import faiss  # type: ignore[import-not-found]

    rng = np.random.default_rng(n + d)
    table = unit_rows(rng, n, d)
    queries = unit_rows(rng, 64, d)
    big = n * d >= 8192 * 768
    huge = n * d > 8192 * 1536
    fast_reps = 15 if quick else (40 if huge else (120 if big else 400))
    loop_reps = 2 if quick else (3 if huge else (8 if big else 30))
    lc_reps = 1 if quick else (2 if huge else (4 if big else 15))
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=256)
    out: dict[str, Any] = {"size": f"{n}x{d}", "rows": n, "dims": d}
    async with (
        open_store(config, Precomputed(table)) as store,
        open_store(config, Precomputed(table), thread_scan_threshold=1 << 62) as inline,
        open_store(config, Precomputed(table), blas_threads="auto") as auto,
    ):
        for start in range(0, n, 8192):
            count = min(8192, n - start)
            for s in (store, inline, auto):
                await s.store_turns([UnifiedMessage.user(f"r{start + i}") for i in range(count)])
        arena = store._actor.vectors[:n]
        index = faiss.IndexFlatIP(d)
        index.add(np.ascontiguousarray(arena))
        turn = {"i": 0}

        def query() -> npt.NDArray[np.float32]:
            turn["i"] = (turn["i"] + 1) % len(queries)
            return queries[turn["i"]]

        async def store_call() -> None:
            await store.retrieve_embedding(query(), K)

        async def inline_call() -> None:
            await inline.retrieve_embedding(query(), K)

        async def auto_call() -> None:
            await auto.retrieve_embedding(query(), K)

        async def thread_round_trip() -> None:
            await trio.to_thread.run_sync(int)

        # The parts of a read that no implementation of the public path can skip, timed
        # alone: one trio schedule point (every trio call has one), checking and
        # normalizing the query, and building k hits (decoding k stored messages).
        actor = store._actor
        hits = actor.scans._inline(actor.checked_query(queries[0], None), K, None, actor.snapshot)

        async def checkpoint() -> None:
            await trio.lowlevel.checkpoint()

        contenders: dict[str, tuple[Timer, int]] = {
            "retrieve_embedding": (store_call, fast_reps),
            "retrieve_embedding, inline": (inline_call, fast_reps),
            'retrieve_embedding, blas_threads="auto"': (auto_call, fast_reps),
            "trio.to_thread no-op": (thread_round_trip, fast_reps),
            "part: trio checkpoint": (checkpoint, fast_reps),
            "part: check+normalize query": (
                sync(lambda: actor.checked_query(query(), None)),
                fast_reps,
            ),
            "part: build k hits": (sync(lambda: actor._report(hits)), fast_reps),
            "raw kernel": (sync(lambda: raw_kernel(arena, query())), fast_reps),
            "raw kernel, 1 BLAS thread": (
                sync(with_blas_threads(1, lambda: raw_kernel(arena, query()))),
                fast_reps,
            ),
            "faiss IndexFlatIP": (sync(lambda: index.search(query()[None, :], K)), fast_reps),
            "per-row loop": (sync(lambda: per_row_loop(arena, query())), loop_reps),
        }
        if not skip_langchain:
            lc = langchain_store(table)
            contenders["langchain InMemoryVectorStore"] = (
                sync(lambda: lc.similarity_search_by_vector(query().tolist(), k=K)),
                lc_reps,
            )
        timings = await interleave(contenders)
        # Bandwidth: the time to read the arena once, on one thread and on two.
        pool = ThreadPoolExecutor(2)
        half = n // 2

        def read_two() -> None:
            list(
                pool.map(
                    lambda s: np.add.reduce(arena[s], axis=None), [slice(0, half), slice(half, n)]
                )
            )

        reads = await interleave(
            {
                "read once, 1 thread": (sync(lambda: np.add.reduce(arena, axis=None)), fast_reps),
                "read once, 2 threads": (sync(read_two), fast_reps),
            }
        )
        pool.shutdown()
        timings.update(reads)
        out["batches"] = store._actor.scans.batches
        out["chooser"] = store._actor.scans.chooser.statistics()
        out["chooser_auto"] = auto._actor.scans.chooser.statistics()
    out["timings"] = timings
    out["bytes"] = n * d * 4
    return out


def langchain_store(table: npt.NDArray[np.float32]) -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=table.shape[1]))
    # Filled directly: this is the layout add_texts produces, without embedding text.
    for i, row in enumerate(table):
        store.store[str(i)] = {
            "id": str(i),
            "vector": row.tolist(),
            "text": f"r{i}",
            "metadata": {},
        }
    return store


async def bench_concurrent(quick: bool) -> dict[str, Any]:
    n, d = 8192, 768
    rng = np.random.default_rng(1)
    table = unit_rows(rng, n, d)
    queries = unit_rows(rng, 64, d)
    reps = 4 if quick else 15
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=256)
    async with (
        open_store(config, Precomputed(table)) as store,
        open_store(config, Precomputed(table), blas_threads="auto") as auto,
    ):
        await store.store_turns([UnifiedMessage.user(f"r{i}") for i in range(n)])
        await auto.store_turns([UnifiedMessage.user(f"r{i}") for i in range(n)])
        arena = store._actor.vectors[:n]

        def reads(on: Any) -> tuple[Timer, Timer]:
            """64 reads of ``on``, one after the other and all at once."""

            async def sequential() -> None:
                for q in queries:
                    await on.retrieve_embedding(q, K)

            async def concurrent() -> None:
                async with trio.open_nursery() as nursery:
                    for q in queries:
                        nursery.start_soon(on.retrieve_embedding, q, K)

            return sequential, concurrent

        sequential, concurrent = reads(store)
        auto_sequential, auto_concurrent = reads(auto)

        def numpy_sequential() -> None:
            for q in queries:
                raw_kernel(arena, q)

        def numpy_gemm() -> None:
            scores = queries @ arena.T
            top = np.argpartition(scores, -K, axis=1)[:, -K:]
            np.take_along_axis(scores, top, axis=1)

        # A thread samples the count throughout, as a host application would see it.
        seen: list[tuple[int, ...]] = []
        stop = threading.Event()

        def sample() -> None:
            assert WATCH is not None
            while not stop.is_set():
                counts = WATCH.counts()
                if not seen or seen[-1] != counts:
                    seen.append(counts)
                stop.wait(0.0002)

        sampler = threading.Thread(target=sample, daemon=True)
        contenders: dict[str, tuple[Timer, int]] = {
            "64 sequential": (sequential, reps),
            "64 concurrent": (concurrent, reps),
            "numpy 64 matvecs": (sync(numpy_sequential), reps),
            "numpy one GEMM of 64": (sync(numpy_gemm), reps),
        }
        sampler.start()
        try:
            timings = await interleave(contenders)
        finally:
            stop.set()
            sampler.join()
        timings.update(
            await interleave(
                {
                    '64 sequential, blas_threads="auto"': (auto_sequential, reps),
                    '64 concurrent, blas_threads="auto"': (auto_concurrent, reps),
                }
            )
        )
        largest = store._actor.scans.largest_batch
    return {
        "timings": timings,
        "largest_batch": largest,
        "sampled_count_changes": len(seen) - 1,
        "chooser": store._actor.scans.chooser.statistics(),
    }


async def bench_store_turns(quick: bool) -> dict[str, Any]:
    n, d, batch = 8192, 768, 64
    rng = np.random.default_rng(2)
    table = rng.standard_normal((batch * 64, d), dtype=np.float32)
    reps = 30 if quick else 200
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=256)
    turns = [UnifiedMessage.user(f"turn {i}") for i in range(batch)]
    arena = np.zeros((n, d), dtype=np.float32)
    cursor = {"at": 0}

    def raw() -> None:
        # What design §3 asks of a batch, done the plain numpy way: the width, finite
        # components, a squared norm finite in float32, and zero rows kept as zeros
        # (not NaN), normalized once and copied into the arena.
        start = cursor["at"]
        cursor["at"] = (start + batch) % n
        x = table[start % len(table) : start % len(table) + batch]
        if x.shape != (batch, d):
            raise ValueError("wrong width")
        if not np.isfinite(x).all():
            raise ValueError("non-finite")
        squared = np.einsum("ij,ij->i", x, x)
        if not np.isfinite(squared).all():
            raise ValueError("squared norm overflows")
        norms = np.sqrt(squared)
        norms[squared == 0.0] = 1.0
        arena[start : start + batch] = x / norms[:, None]

    async with open_store(config, Precomputed(table)) as store:

        async def write() -> None:
            await store.store_turns(turns)

        timings = await interleave(
            {"store_turns 64x768": (write, reps), "raw validate+normalize+copy": (sync(raw), reps)}
        )
    return {"timings": timings}


def bench_blas(quick: bool) -> dict[str, Any]:
    """What a thread-count change costs, and 1 vs 2 BLAS threads on one matvec."""
    from threadpoolctl import ThreadpoolController, threadpool_limits

    reps = 50 if quick else 300
    controller = ThreadpoolController()
    lib = blas_libraries()[0]

    def fresh() -> None:
        with threadpool_limits(1):
            pass

    def limit() -> None:
        with controller.limit(limits=1, user_api="blas"):
            pass

    def direct() -> None:
        saved = lib.get_num_threads()
        lib.set_num_threads(1)
        lib.set_num_threads(saved)

    rng = np.random.default_rng(3)
    a = unit_rows(rng, 8192, 768)
    q = a[0].copy()
    return trio.run(
        interleave,
        {
            "threadpool_limits(1) enter+exit": (sync(fresh), reps),
            "ThreadpoolController.limit enter+exit": (sync(limit), reps),
            "lib get+set+set (what the store uses)": (sync(direct), reps),
            "matvec 8192x768, 1 BLAS thread": (sync(with_blas_threads(1, lambda: a @ q)), reps),
            "matvec 8192x768, 2 BLAS threads": (sync(with_blas_threads(2, lambda: a @ q)), reps),
        },
    )


# --- report ---------------------------------------------------------------------------


#: The parts of a read that any implementation of the public path pays (bench_size).
FIXED_PARTS = ("part: trio checkpoint", "part: check+normalize query", "part: build k hits")


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.3f}"


def ratio(a: dict[str, float], b: dict[str, float], key: str) -> float:
    return a[key] / b[key]


def store_turns_lines(w: dict[str, dict[str, float]]) -> list[str]:
    lines = ["store_turns, 64 turns of 768 floats"]
    for name, s in w.items():
        lines.append(f"  {name:<40} {ms(s['p50'])} {ms(s['p90'])}")
    store, raw = w["store_turns 64x768"], w["raw validate+normalize+copy"]
    lines.append(
        f"  store_turns / raw {store['p50'] / raw['p50']:.2f}x"
        f" (p90 {store['p90'] / raw['p90']:.2f}x)"
    )
    return lines


def report(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    m = results["machine"]
    lines.append(
        f"machine: {m['host']} | {m['cpu']} | {m['cores']} cores | numpy {m['numpy']}"
        f" | BLAS {m['blas']}"
    )
    lines.append(f"env: {m['env']} | load average at start {m['load_average']}")
    lines.append(f"background: {results.get('background', 'none')} (--background)")
    lines.append("")
    lines.append(
        f"{'size':<11} {'contender':<32} {'p50 ms':>9} {'p90 ms':>9} {'GB/s':>7}"
        "  ratio p50 (p90) vs retrieve_embedding, BLAS count changes"
    )
    targets: list[tuple[str, float, str, bool]] = []
    for size in results["sizes"]:
        t = size["timings"]
        ours = t["retrieve_embedding"]
        for name, s in t.items():
            gbs = size["bytes"] / s["p50"] / 1e9
            r50, r90 = s["p50"] / ours["p50"], s["p90"] / ours["p90"]
            lines.append(
                f"{size['size']:<11} {name:<32} {ms(s['p50'])} {ms(s['p90'])} {gbs:7.1f}"
                f"  {r50:8.2f}x ({r90:.2f}x) {s.get('thread_count_changes', 0):>6}"
            )
        raw = min(t["raw kernel"], t["raw kernel, 1 BLAS thread"], key=lambda s: s["p50"])
        over = ours["p50"] / raw["p50"]
        limit = 1.6 if size["rows"] == 1024 else 1.3
        inl = t["retrieve_embedding, inline"]["p50"] / raw["p50"]
        targets.append(
            (f"  (inline, no thread) / best raw kernel, {size['size']}", inl, "info", True)
        )
        if size["size"] != "65536x768":
            targets.append(
                (
                    f"retrieve_embedding / best raw kernel, {size['size']}",
                    over,
                    f"<= {limit}",
                    over <= limit,
                )
            )
        else:
            targets.append(
                (
                    f"retrieve_embedding / best raw kernel, {size['size']} (no target)",
                    over,
                    "-",
                    True,
                )
            )
        parts = sum(t[name]["p50"] for name in FIXED_PARTS if name in t)
        if parts:
            targets.append(
                (
                    f"  (best raw + fixed parts) / best raw, {size['size']}",
                    (raw["p50"] + parts) / raw["p50"],
                    "info",
                    True,
                )
            )
        vs_faiss = ours["p50"] / t["faiss IndexFlatIP"]["p50"]
        targets.append(
            (f"retrieve_embedding / faiss, {size['size']}", vs_faiss, "<= 1", vs_faiss <= 1.0)
        )
        loop = t["per-row loop"]["p50"] / ours["p50"]
        targets.append(
            (f"per-row loop / retrieve_embedding, {size['size']}", loop, ">= 12", loop >= 12)
        )
        if "langchain InMemoryVectorStore" in t and size["size"] in ("8192x768", "8192x1536"):
            lc = t["langchain InMemoryVectorStore"]["p50"] / ours["p50"]
            targets.append(
                (f"langchain / retrieve_embedding, {size['size']}", lc, ">= 200", lc >= 200)
            )
        if size["size"] == "65536x768":
            bw = size["bytes"] / ours["p50"]
            limit_bw = size["bytes"] / t["read once, 2 threads"]["p50"]
            targets.append(
                (
                    "scan GB/s / two-thread read GB/s, 65536x768",
                    bw / limit_bw,
                    ">= 0.7",
                    bw / limit_bw >= 0.7,
                )
            )
        changes = sum(
            s.get("thread_count_changes", 0)
            for name, s in t.items()
            if name in ("retrieve_embedding", "retrieve_embedding, inline")
        )
        targets.append(
            (
                f"BLAS thread-count changes by default reads, {size['size']}",
                changes,
                "0",
                changes == 0,
            )
        )
        for name, st in size.get("chooser", {}).items():
            lines.append(
                f"{size['size']:<11}   BLAS chooser, {name}: {st['scans_blas_as_configured']}"
                f" scans as configured, {st['scans_one_blas_thread']} on one thread,"
                f" {st['switches']} switches; ns/float {st['ns_per_float']}"
            )
        lines.append("")
    c = results["concurrent"]["timings"]
    lines.append(
        f"64 reads at 8192x768 (largest coalesced batch {results['concurrent']['largest_batch']})"
    )
    for name, s in c.items():
        lines.append(f"  {name:<40} {ms(s['p50'])} {ms(s['p90'])}")
    conc = c["64 sequential"]["p50"] / c["64 concurrent"]["p50"]
    bare = c["numpy 64 matvecs"]["p50"] / c["numpy one GEMM of 64"]["p50"]
    p90 = c["64 sequential"]["p90"] / c["64 concurrent"]["p90"]
    lines.append(f"  sequential / concurrent {conc:.2f}x (p90 {p90:.2f}x); bare numpy {bare:.2f}x")
    auto_seq, auto_conc = (
        c['64 sequential, blas_threads="auto"'],
        c['64 concurrent, blas_threads="auto"'],
    )
    lines.append(
        f'  blas_threads="auto": sequential / concurrent {auto_seq["p50"] / auto_conc["p50"]:.2f}x'
        f" (p90 {auto_seq['p90'] / auto_conc['p90']:.2f}x)"
    )
    for name, st in results["concurrent"].get("chooser", {}).items():
        lines.append(
            f"  BLAS chooser, {name}: {st['scans_blas_as_configured']} as configured,"
            f" {st['scans_one_blas_thread']} on one core, {st['switches']} switches"
        )
    targets.append(("64 sequential / 64 concurrent, 8192x768", conc, ">= 3.5", conc >= 3.5))
    changed = c["64 sequential"].get("thread_count_changes", 0) + c["64 concurrent"].get(
        "thread_count_changes", 0
    )
    sampled = results["concurrent"].get("sampled_count_changes", 0)
    lines.append(
        f"  thread-count changes: {changed} set_num_threads calls by default reads; a sampling"
        f" thread saw the count change {sampled} times"
    )
    targets.append(
        (
            "BLAS thread-count changes by 64+64 default reads",
            changed + sampled,
            "0",
            changed + sampled == 0,
        )
    )
    w = results["store_turns"]["timings"]
    lines.append("")
    lines += store_turns_lines(w)
    wr = w["store_turns 64x768"]["p50"] / w["raw validate+normalize+copy"]["p50"]
    targets.append(("store_turns(64x768) / raw validate+normalize+copy", wr, "<= 2", wr <= 2))
    lines.append("")
    lines.append("BLAS threads")
    for name, s in results["blas"].items():
        lines.append(f"  {name:<40} {ms(s['p50'])} {ms(s['p90'])}")
    lines.append("")
    lines.append(f"{'target':<56} {'measured':>9}  {'wanted':<8} met")
    for name, value, wanted, met in targets:
        verdict = "-" if wanted in ("-", "info") else "yes" if met else "NO"
        lines.append(f"{name:<56} {value:9.3f}  {wanted:<8} {verdict}")
    results["targets"] = [
        {"name": n, "value": v, "wanted": w_, "met": m_} for n, v, w_, m_ in targets
    ]
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [s["size"] for s in results["sizes"]]
    names = [n for n in results["sizes"][0]["timings"] if not n.startswith("read once")]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [s["timings"].get(name, {}).get("p50", np.nan) * 1e3 for s in results["sizes"]]
        ax.bar(np.arange(len(sizes)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, sizes)
    ax.set_yscale("log")
    ax.set_ylabel("p50 latency, ms (log)")
    ax.set_title(
        f"top-{K} exact search on {results['machine']['cpu']}"
        f" ({results['machine']['cores']} cores)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# --- opt-in: the PostgreSQL + pgvector store (--pg) -----------------------------------


async def bench_pg(quick: bool) -> dict[str, Any]:
    """retrieve_embedding at 8192x768, k = 8: the in-memory store next to the pg store,
    exact and through an HNSW index. Needs TRIO_RECALL_PG_DSN (``.ci/pg_server.py``
    starts an embedded server and writes its DSN) and the ``pg`` extra."""
    import psycopg
    from psycopg import sql as pgsql

    from actors import open_pg_store

    dsn = os.environ.get("TRIO_RECALL_PG_DSN")
    if not dsn:
        raise SystemExit(
            "--pg needs TRIO_RECALL_PG_DSN; start a server with "
            "`uv run --extra pg python .ci/pg_server.py --dsn-file FILE`"
        )
    n, d = 8192, 768
    rng = np.random.default_rng(n + d)
    table = unit_rows(rng, n, d)
    queries = unit_rows(rng, 64, d)
    reps = 10 if quick else 60
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=256)
    name = f"bench_pg_{os.getpid()}"
    out: dict[str, Any] = {"size": f"{n}x{d}", "rows": n, "dims": d}
    turn = {"i": 0}

    def query() -> npt.NDArray[np.float32]:
        turn["i"] = (turn["i"] + 1) % len(queries)
        return queries[turn["i"]]

    try:
        async with (
            open_store(config, Precomputed(table)) as mem,
            open_pg_store(dsn, config, Precomputed(table), table=name) as pg,
        ):
            started = time.perf_counter()
            for start in range(0, n, 1024):
                turns = [UnifiedMessage.user(f"r{start + i}") for i in range(1024)]
                await mem.store_turns(turns)
                await pg.store_turns(turns)
            out["pg_load_seconds"] = time.perf_counter() - started
            contenders: dict[str, tuple[Timer, int]] = {
                "in-memory retrieve_embedding": (
                    lambda: mem.retrieve_embedding(query(), K),
                    reps,
                ),
                "pg retrieve_embedding, exact": (
                    lambda: pg.retrieve_embedding(query(), K),
                    reps,
                ),
            }
            timings = await interleave(contenders)
        started = time.perf_counter()
        async with open_pg_store(dsn, config, Precomputed(table), table=name, index="hnsw") as hn:
            out["hnsw_build_seconds"] = time.perf_counter() - started
            timings.update(
                await interleave(
                    {
                        "pg retrieve_embedding, hnsw": (
                            lambda: hn.retrieve_embedding(query(), K),
                            reps,
                        )
                    }
                )
            )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for suffix in ("_terms", "_ns", "", "_meta"):
                conn.execute(
                    pgsql.SQL("DROP TABLE IF EXISTS {}").format(pgsql.Identifier(name + suffix))
                )
            conn.execute(
                pgsql.SQL("DROP SEQUENCE IF EXISTS {}").format(pgsql.Identifier(name + "_seq"))
            )
    out["timings"] = timings
    return out


def report_pg(pg: dict[str, Any]) -> list[str]:
    t = pg["timings"]
    ours = t["in-memory retrieve_embedding"]
    lines = ["", f"pg store, {pg['size']}, k = {K} (--pg)"]
    for name, s in t.items():
        lines.append(
            f"  {name:<32} {ms(s['p50'])} {ms(s['p90'])}  {s['p50'] / ours['p50']:8.2f}x"
            f" ({s['p90'] / ours['p90']:.2f}x) vs in-memory"
        )
    lines.append(
        f"  load {pg['pg_load_seconds']:.1f} s (8 batches of 1024); "
        f"HNSW build {pg['hnsw_build_seconds']:.1f} s"
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run")
    parser.add_argument("--skip-langchain", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--pg", action="store_true", help="add the pg store's row (opt-in)")
    parser.add_argument(
        "--sizes",
        default=",".join(f"{n}x{d}" for n, d in SIZES),
        help="comma-separated ROWSxDIMS to measure (default: all four)",
    )
    parser.add_argument(
        "--background",
        choices=sorted(BACKGROUNDS),
        default="none",
        help="run competing processes for the whole run, so a busy machine is reproducible:"
        " one-core / two-cores (a busy loop each), flicker (three processes that switch"
        " between busy and idle every 20-400 ms, like a test suite running beside)",
    )
    parser.add_argument(
        "--only-store-turns",
        action="store_true",
        help="run only the store_turns measure, print it and write nothing",
    )
    args = parser.parse_args(argv)
    global WATCH
    WATCH = CountWatch()
    if args.only_store_turns:
        w = trio.run(bench_store_turns, args.quick)["timings"]
        print("\n".join(store_turns_lines(w)))
        print(f"load average {os.getloadavg()}")
        return
    with background(args.background):
        run(args)


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    results: dict[str, Any] = {
        "background": args.background,
        "machine": machine(),
        "k": K,
        "thread_scan_threshold": DEFAULT_THREAD_SCAN_THRESHOLD,
    }
    results["sizes"] = []
    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",")]
    for n, d in sizes:
        print(f"... {n}x{d}", file=sys.stderr, flush=True)
        results["sizes"].append(trio.run(bench_size, n, d, args.quick, args.skip_langchain))
    print("... concurrency, store_turns, BLAS", file=sys.stderr, flush=True)
    results["concurrent"] = trio.run(bench_concurrent, args.quick)
    results["store_turns"] = trio.run(bench_store_turns, args.quick)
    results["blas"] = bench_blas(args.quick)
    results["load_average_end"] = os.getloadavg()
    if args.pg:
        print("... pg store", file=sys.stderr, flush=True)
        results["pg"] = trio.run(bench_pg, args.quick)
    lines = report(results)
    if args.pg:
        lines += report_pg(results["pg"])
    results["seconds"] = time.perf_counter() - started
    write_results(results, lines, args.out, "latest", plot)


_BUSY = "while True: pass"
_FLICKER = (
    "import random, time\n"
    "while True:\n"
    "    end = time.perf_counter() + random.uniform(0.02, 0.4)\n"
    "    while time.perf_counter() < end: pass\n"
    "    time.sleep(random.uniform(0.02, 0.4))"
)
#: ``--background``: the Python programs to run beside the bench.
BACKGROUNDS = {
    "none": [],
    "one-core": [_BUSY],
    "two-cores": [_BUSY, _BUSY],
    "flicker": [_FLICKER] * 3,
}


@contextlib.contextmanager
def background(name: str) -> Iterator[None]:
    """Run ``BACKGROUNDS[name]``'s processes while the block runs; kill them after."""
    procs = [subprocess.Popen([sys.executable, "-c", code]) for code in BACKGROUNDS[name]]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def write_results(
    results: dict[str, Any],
    lines: list[str],
    out: Path,
    stem: str,
    draw: Callable[[dict[str, Any], Path], None],
) -> None:
    """Print the table with the closing load average; write ``stem``.json and .png."""
    lines.append(
        f"\nload average at end {results['load_average_end']}; took {results['seconds']:.0f} s"
    )
    print("\n".join(lines))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str))
    draw(results, out / f"{stem}.png")


if __name__ == "__main__":
    main()
