"""Read latency with and without a time window (issue #31), on both backends.

    uv run --extra bench --extra pg python benches/time_window.py [--sizes 10000,100000]
        [--backends memory,pg] [--kinds similarity,recall,bm25] [--queries 60]

Every entry gets an ``occurred_at`` drawn uniformly over one year, so a window of 1%,
10% or 50% of the year keeps about that share of the entries. Each read kind runs
without a window and with each window (``SearchRequest(since=..., until=...)``, a
window at a random place in the year for each query), one call of each per round, so
that load from other processes hits them all alike; the table gives the p50 and p90
of each window's latency as a ratio to the same kind's p50 and p90 without one.

Vectors are precomputed (``Document(embedding=...)``, 384 floats, ``pg_scale.py``'s
topic-shaped unit vectors), so the bench times the store's read and not an embedder:
``similarity`` takes a query ``vector``; ``recall`` and ``bm25`` take a query text
(``recall`` embeds it with :class:`HashingEmbedder`, a hash of its words). The pg
backend runs on an embedded PostgreSQL 18 + pgvector that ``pg_scale.py`` starts
(``--dsn`` for an existing server); its table is exact (no HNSW), as the store makes it.

Memory over time (issue #31): ``--history S`` gives a share ``S`` of the entries a
second version after the load (``update(id, metadata=..., valid_from=...)``, at a
random instant after the first version's), so that every read skips closed versions;
``--as-of`` adds a fifth variant per round, ``SearchRequest(as_of=T)`` at a random
instant of the year (the versions current at ``T``), reported as a ratio to no window
like the windows. ``--analyze``: on pg, ``VACUUM ANALYZE`` after the load, as
autovacuum would run some time later (without it the reads run on the statistics of
an empty table, as right after a bulk load).

Writes ``benches/results/time_window.json`` and ``benches/results/time_window.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import trio
from pg_scale import DIMS, embedded_server, make_texts, make_vectors
from vector_store import machine  # this script's folder, as turn.py does

from actors import HashingEmbedder, open_pg_store, open_store
from protocol import Document, SearchRequest, VectorStoreConfig

RESULTS = Path(__file__).resolve().parent / "results"
K = 10
BATCH = 1000
YEAR_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
YEAR = dt.timedelta(days=365)
#: the windows, by the share of the year (and so of the entries) each keeps
WINDOWS: dict[str, float | None] = {"none": None, "1%": 0.01, "10%": 0.10, "50%": 0.50}
KINDS = ("similarity", "recall", "bm25")


def occurred(n: int, seed: int) -> list[dt.datetime]:
    """``n`` instants drawn uniformly over the year (to the second)."""
    rng = np.random.default_rng(seed)
    seconds = rng.integers(0, int(YEAR.total_seconds()), n)
    return [YEAR_START + dt.timedelta(seconds=int(s)) for s in seconds]


def window(share: float | None, rng: random.Random) -> tuple[dt.datetime | None, ...]:
    """``(since, until)`` covering ``share`` of the year at a random place in it."""
    if share is None:
        return (None, None)
    width = YEAR * share
    since = YEAR_START + (YEAR - width) * rng.random()
    return (since, since + width)


def vacuum_analyze(dsn: str) -> float:
    """``VACUUM ANALYZE`` of the whole database (the store's tables and their postings),
    as autovacuum would do some time after a bulk load; returns the seconds it took."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return round(time.perf_counter() - started, 2)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@asynccontextmanager
async def memory_store(n: int, _dsn: str | None, capacity: int) -> AsyncIterator[Any]:
    config = VectorStoreConfig(
        dimensions=DIMS, max_entries=capacity, max_entry_bytes=16384, max_arena_bytes=1 << 40
    )
    async with open_store(config, HashingEmbedder(DIMS)) as store:
        yield store


@asynccontextmanager
async def pg_store(n: int, dsn: str | None, capacity: int) -> AsyncIterator[Any]:
    assert dsn is not None
    config = VectorStoreConfig(
        dimensions=DIMS, max_entries=capacity, max_entry_bytes=16384, max_arena_bytes=1 << 40
    )
    table = f"bench_window_{n}"
    async with open_pg_store(dsn, config, HashingEmbedder(DIMS), table=table) as store:
        yield store


OPENERS: dict[str, Callable[[int, str | None, int], AbstractAsyncContextManager[Any]]] = {
    "memory": memory_store,
    "pg": pg_store,
}


async def run_one(
    backend: str, n: int, dsn: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    texts = make_texts(n, seed=n)
    vectors = make_vectors(n, seed=n)
    times = occurred(n, seed=n + 1)
    out: dict[str, Any] = {"load_before": load_average()}
    history = getattr(args, "history", 0.0)
    # room for the second versions, which take slots of their own (no eviction)
    capacity = max(n + int(n * history) + 1, 1000)
    async with OPENERS[backend](n, dsn, capacity) as store:
        started = time.perf_counter()
        for s in range(0, n, BATCH):
            e = min(s + BATCH, n)
            await store.add_documents(
                [
                    Document(
                        text=texts[i],
                        id=f"d{i}",
                        embedding=vectors[i].tolist(),
                        occurred_at=times[i],
                    )
                    for i in range(s, e)
                ]
            )
        out["ingest_s"] = round(time.perf_counter() - started, 2)
        print(f"  {backend} {n}: ingested in {out['ingest_s']} s", flush=True)
        if history:
            out["history_s"] = await add_history(store, times, history, seed=n + 2)
            print(
                f"  {backend} {n}: {int(n * history)} second versions in {out['history_s']} s",
                flush=True,
            )

        if backend == "pg" and getattr(args, "analyze", False):
            assert dsn is not None
            out["analyze_s"] = await trio.to_thread.run_sync(vacuum_analyze, dsn)
        rng = random.Random(7)
        qvectors = make_vectors(args.queries, seed=10_000_000 + n)
        words = [t.split() for t in rng.sample(texts, args.queries)]
        qtexts = [" ".join(rng.sample(w, min(4, len(w)))) for w in words]
        kinds: dict[str, Any] = {}
        for kind in args.kinds:
            try:
                kinds[kind] = await measure(store, kind, qvectors, qtexts, rng, args)
            except Exception as error:  # a read past the server's statement_timeout
                kinds[kind] = {"error": f"{type(error).__name__}: {error}"}
                print(f"  {backend} {n} {kind}: {kinds[kind]['error']}", flush=True)
                continue
            print(
                f"  {backend} {n} {kind}: "
                + ", ".join(
                    f"{name} {v['ratio_p50']:.2f}x/{v['ratio_p90']:.2f}x"
                    for name, v in kinds[kind].items()
                    if name != "none"
                ),
                flush=True,
            )
        out["kinds"] = kinds
    out["load_after"] = load_average()
    return out


async def add_history(store: Any, times: list[dt.datetime], share: float, seed: int) -> float:
    """A second version for ``share`` of the entries, each at a random instant between
    its first version's and the year's end; returns the seconds it took."""
    rng = random.Random(seed)
    end = YEAR_START + YEAR
    started = time.perf_counter()
    for i in rng.sample(range(len(times)), int(len(times) * share)):
        later = times[i] + (end - times[i]) * rng.random() + dt.timedelta(microseconds=1)
        await store.update(f"d{i}", metadata={"version": 2}, valid_from=later)
    return round(time.perf_counter() - started, 2)


async def measure(
    store: Any,
    kind: str,
    qvectors: np.ndarray,
    qtexts: list[str],
    rng: random.Random,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One kind's rounds: each window once per round, in a shuffled order."""
    variants = list(WINDOWS) + (["as_of"] if getattr(args, "as_of", False) else [])
    lat: dict[str, list[float]] = {name: [] for name in variants}
    hits: dict[str, list[int]] = {name: [] for name in variants}
    for q in range(args.warmup + args.queries):
        qi = q % args.queries
        names = list(variants)
        rng.shuffle(names)  # no window always first or last in a round
        for name in names:
            if name == "as_of":
                since, until = None, None
                as_of = YEAR_START + YEAR * rng.random()
            else:
                since, until = window(WINDOWS[name], rng)
                as_of = None
            if kind == "similarity":
                request = SearchRequest(
                    vector=qvectors[qi].tolist(), k=K, since=since, until=until, as_of=as_of
                )
            else:
                request = SearchRequest(
                    query=qtexts[qi], kind=kind, k=K, since=since, until=until, as_of=as_of
                )
            t0 = time.perf_counter()
            found = await store.search(request)
            elapsed = time.perf_counter() - t0
            if q >= args.warmup:
                lat[name].append(elapsed)
                hits[name].append(len(found))
    base50, base90 = pct(lat["none"], 50), pct(lat["none"], 90)
    return {
        name: {
            "p50_ms": pct(values, 50) * 1e3,
            "p90_ms": pct(values, 90) * 1e3,
            "ratio_p50": pct(values, 50) / base50,
            "ratio_p90": pct(values, 90) / base90,
            "mean_hits": float(np.mean(hits[name])),
        }
        for name, values in lat.items()
    }


def table(results: dict[str, Any]) -> str:
    as_of = any(
        "as_of" in cells
        for sizes in results.values()
        for run in sizes.values()
        for cells in run["kinds"].values()
    )
    rows = [
        "| backend | size | kind | no window p50 | 1% p50 (p90) | 10% p50 (p90) | 50% p50 (p90) |"
        + (" as_of p50 (p90) |" if as_of else ""),
        "|---|---:|---|---:|---:|---:|---:|" + ("---:|" if as_of else ""),
    ]
    for backend, sizes in results.items():
        for n, run in sizes.items():
            for kind, cells in run["kinds"].items():
                if "error" in cells:
                    rows.append(f"| {backend} | {int(n):,} | {kind} | {cells['error']:.60} |")
                    continue
                ratios = [
                    f"{cells[w]['ratio_p50']:.2f}× ({cells[w]['ratio_p90']:.2f}×)"
                    for w in ("1%", "10%", "50%", "as_of")
                    if w in cells
                ]
                rows.append(
                    f"| {backend} | {int(n):,} | {kind} | 1× ({cells['none']['p50_ms']:.2g} ms) | "
                    + " | ".join(ratios)
                    + " |"
                )
    return "\n".join(rows)


def targets(results: dict[str, Any]) -> list[str]:
    """Issue #31: a windowed read <= 1.2x one without; on pg, a 1% window faster."""
    lines = []
    for backend, sizes in results.items():
        for n, run in sizes.items():
            for kind, cells in run["kinds"].items():
                if "error" in cells:
                    lines.append(
                        f"{backend} {int(n):,} {kind}: not measured ({cells['error']:.60})"
                    )
                    continue
                worst = max(("1%", "10%", "50%"), key=lambda w: cells[w]["ratio_p50"])
                r = cells[worst]["ratio_p50"]
                ok = "met" if r <= 1.2 else "MISSED"
                line = f"{backend} {int(n):,} {kind}: worst {worst} {r:.2f}x p50 <= 1.2x {ok}"
                if backend == "pg":
                    one = cells["1%"]["ratio_p50"]
                    line += f"; 1% window {one:.2f}x < 1x {'met' if one < 1 else 'MISSED'}"
                lines.append(line)
    return lines


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(b, n, run) for b, sizes in results.items() for n, run in sizes.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (backend, n, run) in zip(axes[0], panels, strict=True):
        window_panel(ax, run, f"{backend}, {int(n):,} entries")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def window_panel(ax: Any, run: dict[str, Any], title: str) -> None:
    """One panel of windowed read ratios (1%, 10%, 50% over no window), per kind, with
    the 1.2x target line (``over_time.py`` draws the same panels)."""
    kinds = [k for k, cells in run["kinds"].items() if "error" not in cells]
    width = 0.8 / 3
    for j, w in enumerate(("1%", "10%", "50%")):
        ax.bar(
            [i + j * width for i in range(len(kinds))],
            [run["kinds"][k][w]["ratio_p50"] for k in kinds],
            width,
            label=f"{w} window",
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.2, color="red", linewidth=0.8, linestyle="--")
    ax.set_xticks([i + width for i in range(len(kinds))], kinds)
    ax.set_title(title)
    ax.set_ylabel("p50 / p50 without a window")


async def bench(args: argparse.Namespace, dsn: str | None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in args.backends:
        for n in args.sizes:
            if backend == "pg" and n > args.pg_max:
                print(f"  pg {n}: skipped (--pg-max {args.pg_max})", flush=True)
                continue
            results.setdefault(backend, {})[str(n)] = await run_one(backend, n, dsn, args)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000]
    )
    parser.add_argument(
        "--backends", type=lambda s: s.split(","), default=["memory", "pg"], help="memory,pg"
    )
    parser.add_argument(
        "--kinds", type=lambda s: s.split(","), default=list(KINDS), help=",".join(KINDS)
    )
    parser.add_argument("--queries", type=int, default=60, help="measured rounds per kind")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pg-max", type=int, default=100_000, help="largest pg size run")
    parser.add_argument(
        "--history", type=float, default=0.0, help="share of entries given a second version"
    )
    parser.add_argument("--as-of", action="store_true", help="also time as_of reads")
    parser.add_argument(
        "--analyze", action="store_true", help="pg: VACUUM ANALYZE after the load (steady state)"
    )
    parser.add_argument("--dsn", help="an existing server (default: start an embedded one)")
    parser.add_argument("--out", type=Path, default=RESULTS / "time_window.json")
    parser.add_argument("--no-chart", action="store_true")
    args = parser.parse_args()
    if not 0.0 <= args.history <= 1.0:
        parser.error(f"--history is {args.history}; expected a share from 0 to 1")
    for backend in args.backends:
        if backend not in OPENERS:
            parser.error(f"backend is {backend!r}; expected one of {sorted(OPENERS)}")
    for kind in args.kinds:
        if kind not in KINDS:
            parser.error(f"kind is {kind!r}; expected one of {list(KINDS)}")

    with ExitStack() as stack:
        dsn = args.dsn
        if "pg" in args.backends and dsn is None:
            dsn = stack.enter_context(embedded_server())
        results = trio.run(bench, args, dsn)

    report = {
        "machine": machine(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "k": K,
        "results": results,
        "targets": targets(results),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print()
    print(table(results))
    print()
    for line in report["targets"]:
        print(line)
    print(f"\nwrote {args.out}")
    if not args.no_chart:
        png = args.out.with_suffix(".png")
        chart(results, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
