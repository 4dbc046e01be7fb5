"""Where users wait at start-up: the embedder, the command line and the MCP server, each
from a fresh process, with the start-up targets.

    uv run --extra embed --extra pg --extra mcp --extra bench python benches/cold_start.py \
        [--runs 5] [--out benches/results/cold_start.json]

Rows (each a new process per run; the rows of a round run in a shuffled order, so load
from other processes hits them alike):

- ``MiniLMEmbedder()`` with a warm model cache: ``MiniLMEmbedder()`` then ``load()`` (when
  the embedder has it: construction alone loaded everything before it was lazy), timed
  inside the process, and its resident memory (VmRSS) after one ``embed``;
- ``trio-recall stats`` with the server running: the data directory's embedded
  PostgreSQL is held up by a ``trio-recall mcp`` session on the same directory (as an
  agent host keeps one open), and ``stats`` attaches to it;
- ``trio-recall stats`` and ``search`` with the server not running (each starts it and
  stops it again); ``search`` on a hashing data directory and ``--in-memory`` with each
  embedder, which give the database's share (hashing, ``--data`` minus
  ``--in-memory``) and the model's (``--in-memory``, MiniLM minus hashing);
- MCP launch to the first answered ``recall``: ``trio-recall mcp`` launched through the
  SDK's ``stdio_client``, as a host does, on the MiniLM data directory, on the hashing
  one and ``--in-memory`` with hashing; ``initialize`` and the first ``recall`` result,
  from the launch, and the server process's CPU time;
- references: ``python -c pass``, ``import actors`` and the MCP SDK's import.

The data directories hold 1,000 memories, made with MiniLM (the default) and hashing. The
model cache is a directory of the bench's own (``TRIO_RECALL_CACHE_DIR``), filled by a
first ``MiniLMEmbedder`` run before the rounds: "warm" is a user's second start. The
commands run with Python's bytecode caches (``PYTHONDONTWRITEBYTECODE``, which some
sandboxes set, is unset: a user's Python keeps them).

It also writes, for the ``stats``-with-server and ``search`` commands, the top imports
(``python -X importtime``, cumulative) of one run: where a missed target's start goes.

Prints a table (median and p90 of each row, its target and whether it is met) and the
load average before and after; writes JSON (every sample) and a chart beside it (PNG,
with matplotlib, the ``bench`` extra). Public names only: the commands as a user runs
them, and ``actors.MiniLMEmbedder``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("trio-recall")
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "actors.cli"]
T = TypeVar("T")
QUERY = "what happened at the meeting about topic 5"

#: Row -> (target, unit): a row is met when its median is at most the target.
TARGETS: dict[str, tuple[float, str]] = {
    "MiniLMEmbedder() + load(), warm cache": (0.5, "s"),
    "RSS with the model, after one embed": (250.0, "MB"),
    "trio-recall stats, server running": (1.0, "s"),
    "trio-recall search, server not running": (2.5, "s"),
    "MCP launch -> first recall answered": (2.0, "s"),
}

#: Every row, in the order printed (the targets' rows first).
ROWS = (
    "MiniLMEmbedder() + load(), warm cache",
    "RSS with the model, after one embed",
    "peak RSS (VmHWM), same process",
    "trio-recall stats, server running",
    "trio-recall stats, server not running",
    "trio-recall search, server not running",
    "search, hashing, server not running",
    "search --in-memory, MiniLM",
    "search --in-memory, hashing",
    "MCP launch -> first recall answered",
    "MCP launch -> initialize done",
    "MCP server CPU, launch to exit",
    "MCP launch -> first recall answered, hashing",
    "MCP launch -> initialize done, hashing",
    "MCP server CPU, launch to exit, hashing",
    "MCP launch -> first recall answered, --in-memory hashing",
    "MCP launch -> initialize done, --in-memory hashing",
    "MCP server CPU, launch to exit, --in-memory hashing",
    "reference: python -c pass",
    "reference: python -c 'import actors'",
    "reference: import the MCP SDK",
)

_EMBEDDER_CODE = """
import json, time
t0 = time.perf_counter()
import actors
t1 = time.perf_counter()
embedder = actors.MiniLMEmbedder()
load = getattr(embedder, "load", None)
if load is not None:
    load()
t2 = time.perf_counter()
embedder.embed("where is the boat moored")
t3 = time.perf_counter()
status = dict(
    line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line
)
print(json.dumps({
    "import": t1 - t0, "construct_load": t2 - t1, "first_embed": t3 - t2,
    "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
    "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
}))
"""


def _env(cache: Path) -> dict[str, str]:
    """The commands' environment: the bench's model cache, bytecode caches on."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["TRIO_RECALL_CACHE_DIR"] = str(cache)
    return env


def _timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    return time.perf_counter() - start


def _embedder_run(env: dict[str, str]) -> dict[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", _EMBEDDER_CODE],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, float] = json.loads(run.stdout)
    return result


def _import_profile(args: list[str], env: dict[str, str], top: int = 12) -> list[list[Any]]:
    """The ``top`` slowest imports of the command ``args`` (cumulative seconds, module),
    from ``python -X importtime``; nested imports are indented by one space per level."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "actors.cli", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    rows: list[tuple[float, str]] = []
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        rows.append((int(cumulative) / 1e6, name[1:].rstrip()))
    top_level = sum(seconds for seconds, name in rows if not name.startswith(" "))
    ordered = sorted(rows, reverse=True)[:top]
    return [["all top-level imports", round(top_level, 3)]] + [
        [name, round(seconds, 3)] for seconds, name in ordered
    ]


async def _mcp_run(args: list[str], env: dict[str, str], errlog: TextIO) -> dict[str, float]:
    """Launch ``trio-recall mcp ARGS`` as a host does; seconds from the launch to
    ``initialize`` done and to the first ``recall`` result, and the server process's CPU
    seconds (user + system, launch to exit; the embedded PostgreSQL is not its child)."""
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "mcp", *args], env=env, cwd=ROOT
    )
    cpu = _children_cpu()
    with trio.fail_after(300):
        start = time.perf_counter()
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            initialized = time.perf_counter()
            result = await session.call_tool("recall", {"query": QUERY, "k": 3})
            answered = time.perf_counter()
            assert not result.is_error, result
    # The server has exited and been reaped: its whole CPU time is in the children's.
    return {
        "initialize": initialized - start,
        "first_recall": answered - start,
        "cpu": _children_cpu() - cpu,
    }


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child process reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _held(data: Path, env: dict[str, str], errlog: TextIO, body: Callable[[], T]) -> T:
    """Run ``body`` (in a thread) while a ``trio-recall mcp`` session on ``data`` holds
    its embedded server up."""
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "mcp", "--data", str(data)], env=env, cwd=ROOT
    )
    with trio.fail_after(600):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            # The server is up once the session answers a tool that reads the store.
            stats = await session.call_tool("memory_stats", {})
            assert not stats.is_error, stats
            return await trio.to_thread.run_sync(body)


def _summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p90": p90, "samples": values}


def chart(record: dict[str, Any], path: Path) -> bool:
    """Median bars with p90 ticks, one panel for seconds and one for MB, each target a
    red mark; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["rows"]
    seconds = [name for name, row in rows.items() if row["unit"] == "s"]
    megabytes = [name for name, row in rows.items() if row["unit"] == "MB"]
    fig, axes = plt.subplots(
        2, 1, figsize=(9, 0.45 * len(rows) + 2.5), height_ratios=[len(seconds), len(megabytes)]
    )
    for axis, names, unit in ((axes[0], seconds, "s"), (axes[1], megabytes, "MB")):
        medians = [rows[name]["median"] for name in names]
        p90s = [rows[name]["p90"] for name in names]
        colours = [
            "tab:gray"
            if rows[name]["met"] is None
            else "tab:green"
            if rows[name]["met"]
            else "tab:orange"
            for name in names
        ]
        ys = range(len(names))
        axis.barh(ys, medians, color=colours)
        axis.scatter(p90s, ys, marker="|", color="black", s=200, label="p90", zorder=3)
        targets = [(y, rows[name]["target"]) for y, name in zip(ys, names, strict=True)]
        for y, target in targets:
            if target is not None:
                axis.plot([target, target], [y - 0.4, y + 0.4], color="red", linewidth=2)
        axis.set_yticks(list(ys), names, fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel(f"median ({unit}); red: target; green met, orange not met, grey reference")
    load = record["machine"]
    fig.suptitle(
        f"cold start, {record['runs']} runs; load {load['load_average_before'][0]:.1f} -> "
        f"{load['load_average_after'][0]:.1f}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=ROOT / "benches/results/cold_start.json")
    options = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="trio-recall-cold-"))
    # The MCP servers' stderr (their notices): kept for a failed run's post-mortem.
    errlog = (root / "mcp-stderr.log").open("w")
    try:
        env = _env(root / "model-cache")
        data, hashing = root / "data", root / "hashing"
        memories = root / "memories.jsonl"
        memories.write_text(
            "".join(
                json.dumps({"text": f"memory {i}: the meeting about topic {i % 37} went well"})
                + "\n"
                for i in range(options.memories)
            )
        )
        # Set-up: the model cache filled, the data directories made, modules compiled.
        _embedder_run(env)
        for directory, name in ((data, "minilm"), (hashing, "hashing")):
            subprocess.run(
                [*CLI, "import", str(memories), "--data", str(directory), "--embedder", name],
                check=True,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        subprocess.run(
            [*CLI, "stats", "--data", str(data)], check=True, stdout=subprocess.DEVNULL, env=env
        )

        samples: dict[str, list[float]] = {name: [] for name in ROWS}

        def add(name: str, value: float) -> None:
            samples[name].append(value)

        def embedder() -> None:
            run = _embedder_run(env)
            add("MiniLMEmbedder() + load(), warm cache", run["construct_load"])
            add("RSS with the model, after one embed", run["rss_mb"])
            add("peak RSS (VmHWM), same process", run["peak_rss_mb"])

        def stats_held() -> None:
            def body() -> float:
                return _timed([*CLI, "stats", "--data", str(data)], env)

            add("trio-recall stats, server running", trio.run(_held, data, env, errlog, body))

        def command(name: str, *args: str) -> Callable[[], None]:
            return lambda: add(name, _timed([*CLI, *args], env))

        def mcp(name: str, *args: str) -> Callable[[], None]:
            def run() -> None:
                result = trio.run(_mcp_run, list(args), env, errlog)
                add(f"MCP launch -> first recall answered{name}", result["first_recall"])
                add(f"MCP launch -> initialize done{name}", result["initialize"])
                add(f"MCP server CPU, launch to exit{name}", result["cpu"])

            return run

        def reference(name: str, code: str) -> Callable[[], None]:
            return lambda: add(name, _timed([sys.executable, "-c", code], env))

        variants: list[Callable[[], None]] = [
            embedder,
            stats_held,
            command("trio-recall stats, server not running", "stats", "--data", str(data)),
            command(
                "trio-recall search, server not running", "search", QUERY, "--data", str(data)
            ),
            command(
                "search, hashing, server not running", "search", QUERY, "--data", str(hashing)
            ),
            command("search --in-memory, MiniLM", "search", QUERY, "--in-memory"),
            command(
                "search --in-memory, hashing",
                "search",
                QUERY,
                "--in-memory",
                "--embedder",
                "hashing",
            ),
            mcp("", "--data", str(data)),
            mcp(", hashing", "--data", str(hashing)),
            mcp(", --in-memory hashing", "--in-memory", "--embedder", "hashing"),
            reference("reference: python -c pass", "pass"),
            reference("reference: python -c 'import actors'", "import actors"),
            reference("reference: import the MCP SDK", "import mcp.server.lowlevel"),
        ]
        load_before = os.getloadavg()
        for _ in range(options.runs):
            random.shuffle(variants)
            for variant in variants:
                variant()
        load_after = os.getloadavg()
        profiles = {
            "search, server not running": _import_profile(
                ["search", QUERY, "--data", str(data)], env
            ),
            "stats, server running": trio.run(
                _held,
                data,
                env,
                errlog,
                lambda: _import_profile(["stats", "--data", str(data)], env),
            ),
        }
    finally:
        errlog.close()
        shutil.rmtree(root, ignore_errors=True)

    rows: dict[str, Any] = {}
    print(f"{options.runs} runs each; load average {load_before} -> {load_after}")
    print(f"{'row':<56} {'median':>10} {'p90':>10} {'target':>8}  met")
    for name, values in samples.items():
        target, unit = TARGETS.get(name, (None, "MB" if "RSS" in name else "s"))
        row = _summary(values)
        row.update(
            unit=unit, target=target, met=None if target is None else row["median"] <= target
        )
        rows[name] = row
        met = "-" if target is None else "met" if row["met"] else "NOT met"
        target_text = "" if target is None else f"{target:g} {unit}"
        print(
            f"{name:<56} {row['median']:>7.2f} {unit:<3}{row['p90']:>7.2f} {unit:<3}"
            f"{target_text:>8}  {met}"
        )
    derived = {
        "the database's share (search, hashing: data dir minus --in-memory)": rows[
            "search, hashing, server not running"
        ]["median"]
        - rows["search --in-memory, hashing"]["median"],
        "the model's share (search --in-memory: MiniLM minus hashing)": rows[
            "search --in-memory, MiniLM"
        ]["median"]
        - rows["search --in-memory, hashing"]["median"],
    }
    for what, seconds in derived.items():
        print(f"{what}: {seconds:.2f} s (medians)")
    for what, profile in profiles.items():
        print(f"\nimports of {what} (cumulative s, -X importtime, one run):")
        for name, seconds in profile:
            print(f"  {seconds:>6.3f}  {name}")
    record = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": load_after,
        },
        "runs": options.runs,
        "memories": options.memories,
        "rows": rows,
        "derived": derived,
        "import_profiles": profiles,
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(record, indent=2) + "\n")
    png = options.out.with_suffix(".png")
    print(f"\nwrote {options.out}" + (f" and {png}" if chart(record, png) else " (no matplotlib)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
