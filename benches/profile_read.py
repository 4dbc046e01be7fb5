"""Where a read's time goes: a pyinstrument profile of ``retrieve_embedding``.

    uv run --extra bench python benches/profile_read.py --size 8192x768

Each call runs right after the raw kernel on the same arena, as in the bench's
interleaved rounds, so the profile sees the caches the bench sees: a scan of an arena
bigger than the last-level cache leaves the Python code and data that run next cold,
which is a good part of what a read costs beyond the scan. Only the reads are sampled.
The tree is printed; ``--html`` also writes pyinstrument's HTML view.

The sampling interval (``--interval``, 100 µs by default) is short next to a read, so
pyinstrument's own cost inflates the Python parts a little: read the shares, not the
absolute times, and take the times from ``vector_store.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import trio
from pyinstrument import Profiler
from vector_store import K, Precomputed, raw_kernel, unit_rows  # this script's folder

from actors import open_store
from protocol import UnifiedMessage, VectorStoreConfig


async def profile(n: int, d: int, reads: int, interval: float) -> Profiler:
    rng = np.random.default_rng(n + d)
    table = unit_rows(rng, n, d)
    queries = unit_rows(rng, 64, d)
    config = VectorStoreConfig(max_entries=n, dimensions=d, max_entry_bytes=256)
    profiler = Profiler(interval=interval, async_mode="disabled")
    async with open_store(config, Precomputed(table)) as store:
        for start in range(0, n, 8192):
            count = min(8192, n - start)
            await store.store_turns([UnifiedMessage.user(f"r{start + i}") for i in range(count)])
        arena = store._actor.vectors[:n]
        # Warm-up: threadpoolctl's one-time library scan and the BLAS chooser's first
        # probes stay out of the profile.
        for q in queries:
            await store.retrieve_embedding(q, K)
        for r in range(reads):
            q = queries[r % len(queries)]
            raw_kernel(arena, q)
            profiler.start()
            await store.retrieve_embedding(q, K)
            profiler.stop()
    return profiler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="8192x768", help="rows x dimensions")
    parser.add_argument("--reads", type=int, default=0, help="profiled reads (default: ~2 s)")
    parser.add_argument("--interval", type=float, default=1e-4, help="sampling seconds")
    parser.add_argument("--html", type=Path, help="also write pyinstrument's HTML here")
    args = parser.parse_args(argv)
    n, d = (int(x) for x in args.size.lower().split("x"))
    reads = args.reads or max(50, int(2.0 / (n * d * 3e-10 + 2e-4)))
    profiler = trio.run(profile, n, d, reads, args.interval)
    print(f"{reads} reads of k={K} at {n}x{d}, sampled every {args.interval * 1e6:.0f} µs")
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    if args.html:
        args.html.write_text(profiler.output_html())


if __name__ == "__main__":
    main()
