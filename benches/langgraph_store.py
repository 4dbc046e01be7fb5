"""TrioRecallStore against LangGraph's InMemoryStore: search latency, same run.

    uv run --extra langgraph python benches/langgraph_store.py [--sizes 1000,10000]

Both stores hold the same items (a text of 12 words from a 2,000-word vocabulary, a
color, a number) embedded by the same function (HashingEmbedder, 384 floats), so the
embedding costs the same on both sides and the ratio is the store's. Each round calls
every contender once, in an order shuffled every round; p50 and p90 per contender, and
the ratio of each to InMemoryStore's. Writes benches/results/langgraph_store.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from actors import HashingEmbedder
from actors.integrations.langgraph import TrioRecallStore

DIMS = 384
WORDS = [f"w{i}" for i in range(2000)]


def populate(stores: list[Any], n: int, rng: random.Random) -> None:
    ops = [
        PutOp(
            ("bench", f"u{i % 10}"),
            f"k{i}",
            {
                "text": " ".join(rng.choices(WORDS, k=12)),
                "color": rng.choice(["red", "blue", "green"]),
                "n": rng.randint(0, 100),
            },
        )
        for i in range(n)
    ]
    for start in range(0, n, 500):
        for store in stores:
            store.batch(ops[start : start + 500])


def measure(contenders: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return times


def contenders_for(
    reference: InMemoryStore,
    ours: TrioRecallStore,
    query: str,
    where: dict[str, Any],
    loop: asyncio.AbstractEventLoop,
) -> dict[str, Callable[[], Any]]:
    return {
        "InMemoryStore.search(query)": lambda: reference.search(("bench",), query=query, limit=10),
        "TrioRecallStore.search(query)": lambda: ours.search(("bench",), query=query, limit=10),
        "TrioRecallStore.asearch(query)": lambda: loop.run_until_complete(
            ours.asearch(("bench",), query=query, limit=10)
        ),
        "InMemoryStore.search(filter)": lambda: reference.search(
            ("bench", "u3"), filter=where, limit=10
        ),
        "TrioRecallStore.search(filter)": lambda: ours.search(
            ("bench", "u3"), filter=where, limit=10
        ),
    }


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=10)
    return statistics.median(samples), cuts[8]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--json", default="benches/results/langgraph_store.json")
    args = parser.parse_args()
    embed = HashingEmbedder(DIMS).embed_batch
    index: Any = {"embed": embed, "dims": DIMS, "fields": ["text"]}
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "load_average_before": os.getloadavg(),
        "sizes": {},
    }
    loop = asyncio.new_event_loop()
    for n in [int(s) for s in args.sizes.split(",")]:
        rng = random.Random(n)
        reference = InMemoryStore(index=index)
        with TrioRecallStore(index=index, max_entries=n, max_entry_bytes=4096) as ours:
            populate([reference, ours], n, rng)
            query = " ".join(rng.choices(WORDS, k=4))
            where = {"color": "red", "n": {"$gte": 50}}
            contenders = contenders_for(reference, ours, query, where, loop)
            # Same answers first: the ranked scores agree (equal scores may come in
            # another order; the filtered lists differ in order by design: newest
            # first here, insertion order there).
            mine = ours.search(("bench",), query=query, limit=10)
            theirs = reference.search(("bench",), query=query, limit=10)
            assert [round(h.score or 0, 4) for h in mine] == [
                round(h.score or 0, 4) for h in theirs
            ]
            rounds = args.rounds if n <= 2000 else max(args.rounds // 3, 15)
            times = measure(contenders, rounds)
        rows = {name: quantiles(samples) for name, samples in times.items()}
        size: dict[str, Any] = {"rounds": rounds, "p50_p90_ms": {}}
        print(f"\n{n} items, {rounds} rounds (ms: p50 / p90; ratio to InMemoryStore)")
        for name, (p50, p90) in rows.items():
            base = "InMemoryStore.search(" + ("query)" if "query" in name else "filter)")
            r50, r90 = p50 / rows[base][0], p90 / rows[base][1]
            size["p50_p90_ms"][name] = [p50 * 1e3, p90 * 1e3, r50, r90]
            print(f"  {name:34} {p50 * 1e3:8.2f} / {p90 * 1e3:8.2f}   x{r50:.2f} / x{r90:.2f}")
        report["sizes"][str(n)] = size
    loop.close()
    report["load_average_after"] = os.getloadavg()
    print(f"\nload average before {report['load_average_before']}, after {os.getloadavg()}")
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
