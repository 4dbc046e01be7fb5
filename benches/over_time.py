"""What memory over time's bookkeeping costs (issue #31), on both backends.

    uv run --extra bench --extra embed --extra pg python benches/over_time.py
        [--sizes 10000] [--backends memory,pg] [--rounds 60] [--no-minilm]
        [--reads] [--read-sizes 10000,100000] [--queries 60]

**Writes.** Per backend and size, three stores are opened side by side and filled with
the same ``n`` entries (``add_documents`` with precomputed vectors, as
``time_window.py``'s): one written to with ``dedupe=None``, one with ``"exact"``, one
with ``"near"`` (its default threshold). Then each round writes the same new texts to
each of them, in a shuffled order, and times each call; the table gives each variant's
p50 (p90) over ``dedupe=None``'s in the same run. The rows:

- ``documents x1`` and ``documents x100``: ``add_documents`` of 1 and 100 new documents
  with precomputed vectors (``Document(embedding=...)``), so that the row times the
  store's write and its check, not an embedder;
- ``turns x1 (MiniLM)``: ``store_turns`` of one new user turn, embedded by the store's
  :class:`MiniLMEmbedder` (the ``embed`` extra; ``--no-minilm`` uses
  :class:`HashingEmbedder`): what a chat turn costs end to end, where the model's pass
  is most of the time;
- ``exact, all duplicates``: the ``"exact"`` store given texts it already holds (under
  new ids): the check finds each one and nothing is written (for scale, no target).

On pg, ``VACUUM ANALYZE`` runs after the fill (and after the history's updates), as
autovacuum would some time after a bulk load (``--no-analyze``: without it, the plans
are those of an empty table's statistics, as right after the load). Every new text is
unique (``pg_scale.py``'s texts end in their row number), so the
``exact`` and ``near`` rows pay the check in full and still write everything: the
target's worst case. The stores grow by what the rounds write (``n`` + a few thousand).

**Reads** (``--reads``): ``time_window.py``'s bench, run from here on the same server,
at ``--read-sizes``: each read kind with and without a ``since``/``until`` window
(1%, 10%, 50% of the year), as ratios in the same run; ``--history S`` and
``--as-of`` as there (closed versions in the store, and ``as_of`` reads).

**History** (``--history-share S``, at ``--read-sizes``): two stores with the same
entries, one where a share ``S`` of them got a second version (``update``), so it holds
``S * n`` closed versions besides its ``n`` current ones; each read kind, no window,
sent to both in a shuffled order. The ratio is what the versions' bookkeeping costs a
read of current versions (no target in the issue).

Targets (issue #31): ``exact`` dedupe <= 1.1x the write time without it; a read with a
window <= 1.2x one without; on pg, a 1%-selective window faster than none.

Writes ``benches/results/over_time.json`` and ``benches/results/over_time.png``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import time_window
import trio
from pg_scale import DIMS, embedded_server, make_texts, make_vectors
from time_window import load_average, pct
from vector_store import machine  # this script's folder, as turn.py does

from actors import HashingEmbedder, MiniLMEmbedder, open_pg_store, open_store
from protocol import Document, SearchRequest, UnifiedMessage, VectorStoreConfig

RESULTS = Path(__file__).resolve().parent / "results"
FILL_BATCH = 1000
VARIANTS = ("none", "exact", "near")
#: (row name, what is written, batch size, rounds as a share of --rounds)
ROWS = (
    ("documents x1", "documents", 1, 1.0),
    ("documents x100", "documents", 100, 0.5),
    ("turns x1", "turns", 1, 1.0),
)
DUPLICATES = "exact, all duplicates"


@asynccontextmanager
async def opened(
    backend: str, n: int, dsn: str | None, variant: str, embedder: Any, extra: int
) -> AsyncIterator[Any]:
    config = VectorStoreConfig(
        dimensions=DIMS,
        max_entries=n + extra,
        max_entry_bytes=16384,
        max_arena_bytes=1 << 40,
    )
    if backend == "memory":
        async with open_store(config, embedder) as store:
            yield store
    else:
        assert dsn is not None
        table = f"bench_over_time_{n}_{variant}"
        async with open_pg_store(dsn, config, embedder, table=table) as store:
            await store.clear()  # a rerun on --dsn starts from an empty table
            yield store


async def write(
    store: Any, what: str, texts: list[str], vectors: np.ndarray, ids: list[str], variant: str
) -> int:
    """One timed write; returns how many of its entries were duplicates."""
    # No dedupe= at all for "none": the script also times a checkout from before it.
    dedupe = {} if variant == "none" else {"dedupe": variant}
    if what == "documents":
        docs = [
            Document(text=t, id=i, embedding=v.tolist())
            for t, i, v in zip(texts, ids, vectors, strict=True)
        ]
        got = await store.add_documents(docs, **dedupe)
        return sum(g != i for g, i in zip(got, ids, strict=True))
    turns = [UnifiedMessage.user(t) for t in texts]
    stored = await store.store_turns(turns, **dedupe)
    return len(stored.duplicates)


async def run_writes(
    backend: str, n: int, dsn: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    rounds = {name: max(5, int(args.rounds * share)) for name, _, _, share in ROWS}
    fresh_needed = sum(rounds[name] * b for name, _, b, _ in ROWS) + args.warmup * 101 + 100
    texts = make_texts(n + fresh_needed, seed=n)
    vectors = make_vectors(n + fresh_needed, seed=n)
    embedder: Any = MiniLMEmbedder() if args.minilm else HashingEmbedder(DIMS)
    out: dict[str, Any] = {
        "load_before": load_average(),
        "embedder_for_turns": type(embedder).__name__,
        "rows": {},
    }
    async with AsyncExitStack() as stack:
        stores = {
            v: await stack.enter_async_context(
                opened(backend, n, dsn, v, embedder, fresh_needed + 1000)
            )
            for v in args.variants
        }
        started = time.perf_counter()
        for s in range(0, n, FILL_BATCH):
            e = min(s + FILL_BATCH, n)
            docs = [
                Document(text=texts[i], id=f"d{i}", embedding=vectors[i].tolist())
                for i in range(s, e)
            ]
            for store in stores.values():
                await store.add_documents(docs)
        out["fill_s"] = round(time.perf_counter() - started, 2)
        print(f"  {backend} {n}: filled {len(stores)} stores in {out['fill_s']} s", flush=True)
        if backend == "pg" and args.analyze:
            assert dsn is not None
            out["analyze_s"] = await trio.to_thread.run_sync(time_window.vacuum_analyze, dsn)

        rng = random.Random(11)
        cursor = n  # the next unused text
        for name, what, batch, _ in ROWS:
            label = f"{name} ({type(embedder).__name__})" if what == "turns" else name
            try:
                variants = [
                    v for v in args.variants if v != "near" or batch <= args.near_batch_max
                ]
                lat: dict[str, list[float]] = {v: [] for v in variants}
                dups: dict[str, int] = {v: 0 for v in variants}
                if what == "documents" and batch == 1 and "exact" in variants:
                    lat[DUPLICATES] = []
                    dups[DUPLICATES] = 0
                for r in range(args.warmup + rounds[name]):
                    chunk = range(cursor, cursor + batch)
                    cursor += batch
                    t = [texts[i] for i in chunk]
                    v = vectors[cursor - batch : cursor]
                    ids = [f"w{i}" for i in chunk]
                    order = list(lat)
                    rng.shuffle(order)
                    for variant in order:
                        if variant == DUPLICATES:
                            old = rng.sample(range(n), batch)
                            args_ = (
                                [texts[i] for i in old],
                                vectors[old],
                                [f"x{cursor}-{i}" for i in old],
                            )
                            store, dedupe_variant = stores["exact"], "exact"
                        else:
                            args_ = (t, v, ids)
                            store, dedupe_variant = stores[variant], variant
                        t0 = time.perf_counter()
                        found = await write(store, what, *args_, dedupe_variant)
                        elapsed = time.perf_counter() - t0
                        if r >= args.warmup:
                            lat[variant].append(elapsed)
                            dups[variant] += found
                base50, base90 = pct(lat["none"], 50), pct(lat["none"], 90)
                row = {
                    variant: {
                        "p50_ms": pct(values, 50) * 1e3,
                        "p90_ms": pct(values, 90) * 1e3,
                        "ratio_p50": pct(values, 50) / base50,
                        "ratio_p90": pct(values, 90) / base90,
                        "duplicates": dups[variant],
                        "calls": len(values),
                    }
                    for variant, values in lat.items()
                }
                out["rows"][label] = row
                print(
                    f"  {backend} {n} {label}: none {row['none']['p50_ms']:.3g} ms; "
                    + ", ".join(
                        f"{k} {c['ratio_p50']:.2f}x/{c['ratio_p90']:.2f}x ({c['duplicates']} dup)"
                        for k, c in row.items()
                        if k != "none"
                    ),
                    flush=True,
                )
            except Exception as error:  # a backend that does not serve a write yet
                out["rows"][label] = {"error": f"{type(error).__name__}: {error}"}
                print(f"  {backend} {n} {label}: {out['rows'][label]['error']}", flush=True)
        out["entries_after"] = {v: s.usage().entries for v, s in stores.items()}
    out["load_after"] = load_average()
    return out


async def run_history(
    backend: str, n: int, dsn: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Reads on a store where a share of the memories has a closed version against the
    same store without history, side by side, each query sent to both in a shuffled
    order: what the versions' bookkeeping costs a read that sees current versions."""
    texts = make_texts(n, seed=n)
    vectors = make_vectors(n, seed=n)
    times = time_window.occurred(n, seed=n + 1)
    capacity = max(n + int(n * args.history_share) + 1, 1000)
    out: dict[str, Any] = {"load_before": load_average(), "share": args.history_share}
    async with AsyncExitStack() as stack:
        stores = {}
        for variant in ("plain", "history"):
            opener = time_window.OPENERS[backend]
            if backend == "pg":
                opener = _pg_table(f"bench_history_{n}_{variant}")
            stores[variant] = await stack.enter_async_context(opener(n, dsn, capacity))
        for s in range(0, n, FILL_BATCH):
            e = min(s + FILL_BATCH, n)
            docs = [
                Document(
                    text=texts[i], id=f"d{i}", embedding=vectors[i].tolist(), occurred_at=times[i]
                )
                for i in range(s, e)
            ]
            for store in stores.values():
                await store.add_documents(docs)
        out["history_s"] = await time_window.add_history(
            stores["history"], times, args.history_share, seed=n + 2
        )
        print(
            f"  {backend} {n}: {int(n * args.history_share)} closed versions in "
            f"{out['history_s']} s",
            flush=True,
        )
        if backend == "pg" and args.analyze:
            assert dsn is not None
            out["analyze_s"] = await trio.to_thread.run_sync(time_window.vacuum_analyze, dsn)
        rng = random.Random(5)
        qvectors = make_vectors(args.queries, seed=10_000_000 + n)
        words = [t.split() for t in rng.sample(texts, args.queries)]
        qtexts = [" ".join(rng.sample(w, min(4, len(w)))) for w in words]
        kinds: dict[str, Any] = {}
        for kind in time_window.KINDS:
            lat: dict[str, list[float]] = {"plain": [], "history": []}
            for q in range(5 + args.queries):
                qi = q % args.queries
                if kind == "similarity":
                    request = SearchRequest(vector=qvectors[qi].tolist(), k=time_window.K)
                else:
                    request = SearchRequest(query=qtexts[qi], kind=kind, k=time_window.K)
                order = list(lat)
                rng.shuffle(order)
                for variant in order:
                    t0 = time.perf_counter()
                    await stores[variant].search(request)
                    if q >= 5:
                        lat[variant].append(time.perf_counter() - t0)
            kinds[kind] = {
                "plain_p50_ms": pct(lat["plain"], 50) * 1e3,
                "plain_p90_ms": pct(lat["plain"], 90) * 1e3,
                "history_p50_ms": pct(lat["history"], 50) * 1e3,
                "history_p90_ms": pct(lat["history"], 90) * 1e3,
                "ratio_p50": pct(lat["history"], 50) / pct(lat["plain"], 50),
                "ratio_p90": pct(lat["history"], 90) / pct(lat["plain"], 90),
            }
            c = kinds[kind]
            print(
                f"  {backend} {n} {kind}: plain {c['plain_p50_ms']:.3g} ms, with history "
                f"{c['ratio_p50']:.2f}x/{c['ratio_p90']:.2f}x",
                flush=True,
            )
        out["kinds"] = kinds
    out["load_after"] = load_average()
    return out


def _pg_table(table: str) -> Any:
    @asynccontextmanager
    async def opener(n: int, dsn: str | None, capacity: int) -> AsyncIterator[Any]:
        assert dsn is not None
        config = VectorStoreConfig(
            dimensions=DIMS,
            max_entries=capacity,
            max_entry_bytes=16384,
            max_arena_bytes=1 << 40,
        )
        async with open_pg_store(dsn, config, HashingEmbedder(DIMS), table=table) as store:
            await store.clear()
            yield store

    return opener


def history_table(results: dict[str, Any]) -> str:
    rows = [
        "| backend | size | kind | no history p50 (p90) | with history p50 (p90) |",
        "|---|---:|---|---:|---:|",
    ]
    for backend, sizes in results.items():
        for n, run in sizes.items():
            for kind, c in run["kinds"].items():
                rows.append(
                    f"| {backend} | {int(n):,} | {kind} | {c['plain_p50_ms']:.3g} ms "
                    f"({c['plain_p90_ms']:.3g} ms) | {c['ratio_p50']:.2f}× "
                    f"({c['ratio_p90']:.2f}×) |"
                )
    return "\n".join(rows)


def write_table(results: dict[str, Any]) -> str:
    rows = [
        "| backend | size | write | none p50 (p90) | exact p50 (p90) | near p50 (p90) "
        "| exact, all duplicates |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for backend, sizes in results.items():
        for n, run in sizes.items():
            for name, cells in run["rows"].items():
                if "error" in cells:
                    rows.append(f"| {backend} | {int(n):,} | {name} | {cells['error']:.60} |")
                    continue
                none = cells["none"]
                ratio = [
                    f"{cells[v]['ratio_p50']:.2f}× ({cells[v]['ratio_p90']:.2f}×)"
                    if v in cells
                    else "not run"
                    for v in ("exact", "near")
                ]
                dup = cells.get(DUPLICATES)
                rows.append(
                    f"| {backend} | {int(n):,} | {name} | {none['p50_ms']:.3g} ms "
                    f"({none['p90_ms']:.3g} ms) | "
                    + " | ".join(ratio)
                    + f" | {'' if dup is None else format(dup['ratio_p50'], '.2f') + '×'} |"
                )
    return "\n".join(rows)


def write_targets(results: dict[str, Any]) -> list[str]:
    """Issue #31: dedupe="exact" <= 1.1x the write time without it. A store that found
    none of the re-sent texts does not dedupe yet: its rows are no measurement."""
    lines = []
    for backend, sizes in results.items():
        for n, run in sizes.items():
            active = True
            for cells in run["rows"].values():
                dup = cells.get(DUPLICATES)
                if dup is not None and dup["duplicates"] != dup["calls"]:
                    active = False
                    lines.append(
                        f"{backend} {int(n):,}: dedupe='exact' found {dup['duplicates']} of "
                        f"{dup['calls']} re-sent texts: the store does not dedupe yet"
                    )
            for name, cells in run["rows"].items():
                if "error" in cells:
                    lines.append(
                        f"{backend} {int(n):,} {name}: not measured ({cells['error']:.60})"
                    )
                    continue
                if "exact" not in cells:
                    continue
                r50, r90 = cells["exact"]["ratio_p50"], cells["exact"]["ratio_p90"]
                ok = ("met" if r50 <= 1.1 else "MISSED") if active else "NOT MEASURED"
                lines.append(
                    f"{backend} {int(n):,} {name}: exact {r50:.2f}x p50 ({r90:.2f}x p90) "
                    f"<= 1.1x {ok}"
                )
    return lines


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    writes = report["writes"]
    panels = [(b, n, run) for b, sizes in writes.items() for n, run in sizes.items()]
    reads = report.get("reads") or {}
    read_panels = [(b, n, run) for b, sizes in reads.items() for n, run in sizes.items()]
    cols = max(len(panels), len(read_panels), 1)
    nrows = 2 if read_panels else 1
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 3.6 * nrows), squeeze=False)
    for ax, (backend, n, run) in zip(axes[0], panels, strict=False):
        names = [k for k, cells in run["rows"].items() if "error" not in cells]
        width = 0.8 / 2
        for j, v in enumerate(("exact", "near")):
            ax.bar(
                [i + j * width for i in range(len(names))],
                [run["rows"][k].get(v, {}).get("ratio_p50", 0.0) for k in names],
                width,
                label=f"dedupe={v!r}",
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.1, color="red", linewidth=0.8, linestyle="--")
        ax.set_xticks([i + width / 2 for i in range(len(names))], names, fontsize=7)
        ax.set_title(f"writes: {backend}, {int(n):,} entries")
        ax.set_ylabel("p50 / p50 with dedupe=None")
        ax.legend(fontsize=7)
    if read_panels:
        for ax, (backend, n, run) in zip(axes[1], read_panels, strict=False):
            time_window.window_panel(ax, run, f"reads: {backend}, {int(n):,} entries")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def bench(args: argparse.Namespace, dsn: str | None) -> dict[str, Any]:
    writes: dict[str, Any] = {}
    reads: dict[str, Any] = {}
    history: dict[str, Any] = {}
    if not args.no_writes:
        for backend in args.backends:
            for n in args.sizes:
                writes.setdefault(backend, {})[str(n)] = await run_writes(backend, n, dsn, args)
    if args.reads:
        read_args = argparse.Namespace(
            sizes=args.read_sizes,
            backends=args.backends,
            kinds=list(time_window.KINDS),
            queries=args.queries,
            warmup=5,
            pg_max=args.pg_max,
            history=args.history,
            as_of=args.as_of,
            analyze=args.analyze,
        )
        reads = await time_window.bench(read_args, dsn)
    if args.history_share:
        for backend in args.backends:
            for n in args.read_sizes:
                history.setdefault(backend, {})[str(n)] = await run_history(backend, n, dsn, args)
    return {"writes": writes, "reads": reads, "history": history}


def main() -> int:
    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",")]

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=ints, default=[10_000], help="write bench sizes")
    parser.add_argument(
        "--backends", type=lambda s: s.split(","), default=["memory", "pg"], help="memory,pg"
    )
    parser.add_argument("--rounds", type=int, default=60, help="measured rounds of x1 rows")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--no-minilm", dest="minilm", action="store_false", help="turns: HashingEmbedder"
    )
    parser.add_argument(
        "--near-batch-max",
        type=int,
        default=100,
        help="time dedupe='near' only on rows of at most this batch size",
    )
    parser.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        default=list(VARIANTS),
        help="none,exact,near (none alone runs on a checkout from before dedupe)",
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="pg: no VACUUM ANALYZE after the load (the statistics of an empty table)",
    )
    parser.add_argument("--no-writes", action="store_true", help="only --reads")
    parser.add_argument("--reads", action="store_true", help="also run time_window.py's bench")
    parser.add_argument("--read-sizes", type=ints, default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=60, help="read rounds per kind")
    parser.add_argument("--pg-max", type=int, default=100_000, help="largest pg read size")
    parser.add_argument(
        "--history", type=float, default=0.0, help="reads: share of entries with 2 versions"
    )
    parser.add_argument("--as-of", action="store_true", help="reads: also time as_of reads")
    parser.add_argument(
        "--history-share",
        type=float,
        default=0.0,
        help="also time reads on a store with this share of closed versions against none",
    )
    parser.add_argument("--dsn", help="an existing server (default: start an embedded one)")
    parser.add_argument("--out", type=Path, default=RESULTS / "over_time.json")
    parser.add_argument("--no-chart", action="store_true")
    args = parser.parse_args()
    for backend in args.backends:
        if backend not in ("memory", "pg"):
            parser.error(f"backend is {backend!r}; expected memory or pg")
    if "none" not in args.variants or not set(args.variants) <= set(VARIANTS):
        parser.error(f"--variants is {args.variants}; expected none and any of exact, near")

    with ExitStack() as stack:
        dsn = args.dsn
        if "pg" in args.backends and dsn is None:
            dsn = stack.enter_context(embedded_server())
        results = trio.run(bench, args, dsn)

    report = {
        "machine": machine(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        **results,
        "targets": write_targets(results["writes"])
        + (time_window.targets(results["reads"]) if results["reads"] else []),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print()
    if results["writes"]:
        print(write_table(results["writes"]))
        print()
    if results["reads"]:
        print(time_window.table(results["reads"]))
        print()
    if results["history"]:
        print(history_table(results["history"]))
        print()
    for line in report["targets"]:
        print(line)
    print(f"\nwrote {args.out}")
    if not args.no_chart:
        png = args.out.with_suffix(".png")
        chart(report, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
