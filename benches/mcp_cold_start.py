"""The MCP server's cold start: launch -> initialize -> first tool result.

Each run launches ``trio-recall mcp`` afresh through the official SDK's ``stdio_client``
(as an agent host does), completes the MCP handshake and calls ``recall`` once; it times
the launch to the end of ``initialize`` and to the first tool result. The variants, run
round-robin in a shuffled order each round so that load from other processes hits them
alike:

- ``data``: the default set-up, ``--data DIR`` on a directory that already holds
  memories (the embedded PostgreSQL starts on demand, then stops on exit), MiniLM;
- ``data+hashing``: the same directory layout, hashing embedder (no model to load);
- ``in-memory``: ``--in-memory --embedder hashing``: the server and the SDK alone.

References in the same rounds: ``python -c pass`` (the interpreter) and
``python -c "import mcp.server.lowlevel, hypercorn.trio"`` (the SDK's import).

    uv run --extra mcp --extra embed --extra pg python benches/mcp_cold_start.py --runs 7

It also takes each server process's CPU time (user + system, from launch to exit),
which load from other processes disturbs far less than the wall time; the embedded
PostgreSQL server is not the command's child and is not in it.

Prints a table (p50 and p90 per variant, seconds) and writes
``benches/results/mcp_cold_start.json`` with every sample and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("trio-recall")


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def one_server_run(args: list[str], errlog: TextIO) -> dict[str, float]:
    params = StdioServerParameters(command=str(SCRIPT), args=["mcp", *args], cwd=ROOT)
    cpu = children_cpu()
    with trio.fail_after(300):
        start = time.perf_counter()
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            initialized = time.perf_counter()
            result = await session.call_tool("recall", {"query": "where is the boat", "k": 3})
            answered = time.perf_counter()
            assert not result.is_error, result
    # The server has exited and been reaped: its whole CPU time (start to exit).
    return {
        "initialize": initialized - start,
        "first_result": answered - start,
        "cpu": children_cpu() - cpu,
    }


def one_reference_run(code: str) -> dict[str, float]:
    cpu = children_cpu()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return {"first_result": time.perf_counter() - start, "cpu": children_cpu() - cpu}


def seed(directory: Path, embedder: str) -> None:
    """A data directory that already holds a few memories (the embedded server stops
    again when the command exits)."""
    for text in ("the boat is moored at pier 9", "the spare key is under the mat"):
        subprocess.run(
            [str(SCRIPT), "add", text, "--data", str(directory), "--embedder", embedder],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "benches/results/mcp_cold_start.json"))
    options = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="trio-recall-bench-"))
    errlog = open(os.devnull, "w")  # noqa: SIM115 (closed in the finally)
    try:
        minilm, hashing = root / "minilm", root / "hashing"
        seed(minilm, "minilm")
        seed(hashing, "hashing")
        variants: dict[str, Any] = {
            "data": lambda: trio.run(one_server_run, ["--data", str(minilm)], errlog),
            "data+hashing": lambda: trio.run(
                one_server_run, ["--data", str(hashing), "--embedder", "hashing"], errlog
            ),
            "in-memory": lambda: trio.run(
                one_server_run, ["--in-memory", "--embedder", "hashing"], errlog
            ),
            "python -c pass": lambda: one_reference_run("pass"),
            "import the SDK": lambda: one_reference_run(
                "import mcp.server.lowlevel, hypercorn.trio"
            ),
        }
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        load_before = os.getloadavg()
        for _ in range(options.runs):
            order = list(variants)
            random.shuffle(order)
            for name in order:
                samples[name].append(variants[name]())
        load_after = os.getloadavg()
    finally:
        errlog.close()
        shutil.rmtree(root, ignore_errors=True)

    print(f"{options.runs} runs each; load average {load_before} -> {load_after}")
    print(
        f"{'variant':<16} {'initialize p50/p90':>20} {'first result p50/p90':>22} "
        f"{'process CPU p50/p90':>21}"
    )
    summary: dict[str, Any] = {}
    for name, runs in samples.items():
        row: dict[str, Any] = {}
        for key in ("initialize", "first_result", "cpu"):
            values = [run[key] for run in runs if key in run]
            if values:
                row[key] = {
                    "p50": statistics.median(values),
                    "p90": quantile(values, 0.9),
                    "samples": values,
                }
        summary[name] = row
        init = row.get("initialize")
        first, cpu = row["first_result"], row["cpu"]
        init_text = f"{init['p50']:.2f} / {init['p90']:.2f}" if init else "-"
        print(
            f"{name:<16} {init_text:>20} {first['p50']:>13.2f} / {first['p90']:.2f} "
            f"{cpu['p50']:>12.2f} / {cpu['p90']:.2f}"
        )
    record = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": load_after,
        },
        "runs": options.runs,
        "results": summary,
    }
    Path(options.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
