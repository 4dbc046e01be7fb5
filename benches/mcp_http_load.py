"""The MCP server under load over streamable HTTP, with a bearer token.

    uv run --extra mcp --extra embed --extra pg --extra bench python benches/mcp_http_load.py \
        [--clients 16] [--seconds 300] [--data ../shared/data/locomo] [--in-memory]

It starts ``trio-recall mcp --http 127.0.0.1:0 --token-file FILE`` as a subprocess on a
fresh temporary ``--data`` directory (an embedded PostgreSQL; ``--in-memory`` for none),
with the default embedder (MiniLM) unless ``--embedder`` says otherwise. ``--clients``
concurrent clients, each with its own session through the official SDK's streamable
HTTP client (the token in an ``Authorization`` header), then loop for ``--seconds``:
one ``remember`` of a conversation turn for every ``--recalls`` ``recall`` of a
question (k = 5). With ``--data`` (the LoCoMo directory) the turns and questions are
LoCoMo's; without it, sentences made up in LoCoMo's style. Each remember carries the
client and call number as metadata, so every one is a new memory and the store grows.

It reports calls/s, p50 and p99 latency per tool, the errors (tool errors and
exceptions; 0 expected), the server's RSS (``VmRSS`` of the ``trio-recall`` process,
not PostgreSQL's) when it starts serving, after a warm-up call of each tool and at the
end, the CPU time of the server and of this client process, and the load average. The
clients run in this one process on the same machine, so their CPU is part of the
figure. All traffic goes to 127.0.0.1; every loop ends at the deadline.

Writes ``benches/results/mcp_http_load.json`` and, with matplotlib (the ``bench``
extra), ``benches/results/mcp_http_load.png``: latency per tool, and calls/s and RSS
over time.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import trio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from vector_store import machine  # this script's folder, as turn.py does

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("trio-recall")
RESULTS = ROOT / "benches" / "results"
DATA_ENV = "TRIO_RECALL_DATA"
# How often the server's RSS is sampled, and the width of a throughput bin (seconds).
SAMPLE_EVERY = 5.0


# --- what the clients say ----------------------------------------------------------------

_PEOPLE = ["Caroline", "Melanie", "Jon", "Gina", "John", "Maria", "Joanna", "Nate", "Tim"]
_DID = [
    "went to a pottery class",
    "adopted a puppy named Oscar",
    "started training for a half marathon",
    "painted a sunrise over the lake",
    "visited her grandmother in Sweden",
    "opened a small dance studio",
    "read a book about climate change",
    "joined a support group on Tuesday evenings",
    "camped with the kids near the mountains",
    "got a new job at a design agency",
    "baked bread for the neighbours",
    "signed up for a photography workshop",
]
_WHEN = ["last weekend", "yesterday", "in May", "two weeks ago", "this morning", "last summer"]
_FEEL = ["and loved it", "and it was hard", "with a friend", "for the first time", "again"]


def made_up(count: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """Turns ("Speaker: sentence") and questions in LoCoMo's style."""
    rng = random.Random(seed)
    turns, questions = [], []
    for _ in range(count):
        who, did, when = rng.choice(_PEOPLE), rng.choice(_DID), rng.choice(_WHEN)
        turns.append(f"{who}: I {did} {when} {rng.choice(_FEEL)}.")
        asked, other = rng.choice(_PEOPLE), rng.choice(_DID)
        questions.append(rng.choice([f"Who {other}?", f"What did {asked} do {when}?"]))
    return turns, questions


def locomo(folder: Path) -> tuple[list[str], list[str]]:
    """Every turn ("Speaker: text") and every question of the LoCoMo files in ``folder``."""
    turns, questions = [], []
    for path in sorted(folder.glob("*.json")):
        conversation = json.loads(path.read_text())
        for key, value in conversation.items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(f"{turn['speaker']}: {turn['text']}" for turn in value)
        questions.extend(qa["question"] for qa in conversation.get("qa", []))
    if not turns or not questions:
        raise SystemExit(f"--data {folder}: no LoCoMo turns or questions there")
    return turns, questions


# --- the server ----------------------------------------------------------------------------


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process, from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _stop(process: trio.Process) -> None:
    """SIGTERM: the server closes the store and stops PostgreSQL (the temporary
    directory goes next); a kill only if that takes a minute."""
    process.terminate()
    with trio.move_on_after(60):
        await process.wait()
    process.kill()


@asynccontextmanager
async def server(args: list[str], token_file: Path) -> AsyncIterator[tuple[str, trio.Process]]:
    """``trio-recall mcp --http 127.0.0.1:0 --token-file FILE ARGS``: its URL, and the
    process; stopped on leaving."""
    command = [str(SCRIPT), "mcp", "--http", "127.0.0.1:0", "--token-file", str(token_file)]
    # Neither the caller's token nor its data directory.
    env = {k: v for k, v in os.environ.items() if k not in ("TRIO_RECALL_TOKEN", DATA_ENV)}
    launch = functools.partial(
        trio.run_process,
        [*command, *args],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        check=False,
        deliver_cancel=_stop,
    )
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(launch)
        assert process.stderr is not None
        said = b""
        with trio.fail_after(300):
            while (found := re.search(rb"serving on (http://\S+/mcp)", said)) is None:
                chunk = await process.stderr.receive_some()
                if not chunk:
                    raise RuntimeError(f"the server exited before serving: {said.decode()}")
                said += chunk
        nursery.start_soon(_drain, process.stderr)  # so a warning never blocks it
        yield found.group(1).decode(), process
        nursery.cancel_scope.cancel()


async def _drain(stream: Any) -> None:
    while await stream.receive_some():
        pass


@asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=300)) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as opened,
    ):
        await opened.initialize()
        yield opened


# --- the load ------------------------------------------------------------------------------


class Tally:
    """The run's clock and what the clients saw. The clock starts when every client
    has its session open, so the handshakes are not part of the figures."""

    def __init__(self, clients: int, seconds: float) -> None:
        self.clients, self.seconds = clients, seconds
        self.ready = 0
        self.go = trio.Event()
        self.start = self.deadline = 0.0
        self.calls: list[tuple[float, str, float]] = []  # (finished at, tool, seconds)
        self.errors: list[str] = []
        self.clients_lost = 0

    async def wait_ready(self) -> None:
        self.ready += 1
        if self.ready == self.clients:
            self.start = time.perf_counter()
            self.deadline = self.start + self.seconds
            self.go.set()
        await self.go.wait()


async def client(
    number: int,
    url: str,
    token: str,
    work: tuple[list[str], list[str]],
    recalls: int,
    tally: Tally,
) -> None:
    turns, questions = work
    rng = random.Random(number)
    try:
        async with session(url, token) as opened:
            await tally.wait_ready()
            for i in itertools.count():
                if time.perf_counter() >= tally.deadline:
                    return
                if i % (recalls + 1) == 0:
                    tool = "remember"
                    arguments: dict[str, Any] = {
                        "text": rng.choice(turns),
                        "metadata": {"client": number, "n": i},
                    }
                else:
                    tool = "recall"
                    arguments = {"query": rng.choice(questions), "k": 5}
                began = time.perf_counter()
                result = await opened.call_tool(tool, arguments)
                ended = time.perf_counter()
                tally.calls.append((ended - tally.start, tool, ended - began))
                if result.is_error:
                    tally.errors.append(f"{tool}: {result.content[0]}")
    except Exception as error:  # counted, and this client stops
        tally.errors.append(f"client {number}: {type(error).__name__}: {error}")
        tally.clients_lost += 1
        if not tally.go.is_set():
            await tally.wait_ready()  # the others do not wait for it


async def sample_rss(pid: int, tally: Tally, samples: list[tuple[float, float]]) -> None:
    while (now := time.perf_counter()) < tally.deadline:
        value = rss_mib(pid)
        if value is not None:
            samples.append((now - tally.start, value))
        await trio.sleep(min(SAMPLE_EVERY, max(0.0, tally.deadline - now)))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(options: argparse.Namespace) -> dict[str, Any]:
    work = locomo(options.data) if options.data else made_up(2000)
    root = Path(tempfile.mkdtemp(prefix="trio-recall-load-"))
    try:
        token = os.urandom(24).hex()
        token_file = root / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        where = ["--in-memory"] if options.in_memory else ["--data", str(root / "data")]
        if options.embedder:
            where += ["--embedder", options.embedder]
        async with server(where, token_file) as (url, process):
            pid = process.pid
            rss_serving = rss_mib(pid)
            async with session(url, token) as opened:  # warm-up: the model, the pool
                await opened.call_tool("remember", {"text": work[0][0]})
                await opened.call_tool("recall", {"query": work[1][0]})
            rss_warm = rss_mib(pid)
            cpu_server_start = cpu_seconds(pid)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu_client_start = usage.ru_utime + usage.ru_stime
            load_before = os.getloadavg()
            tally = Tally(options.clients, options.seconds)
            rss_samples: list[tuple[float, float]] = []
            with trio.fail_after(options.seconds + 300):
                async with trio.open_nursery() as nursery:
                    for number in range(options.clients):
                        nursery.start_soon(
                            client, number, url, token, work, options.recalls, tally
                        )
                    await tally.go.wait()
                    nursery.start_soon(sample_rss, pid, tally, rss_samples)
            elapsed = time.perf_counter() - tally.start
            load_after = os.getloadavg()
            rss_end = rss_mib(pid)
            cpu_server = cpu_seconds(pid)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            async with session(url, token) as opened:
                stats = (await opened.call_tool("memory_stats", {})).structured_content
    finally:
        shutil.rmtree(root, ignore_errors=True)

    tools: dict[str, Any] = {}
    for tool in ("remember", "recall"):
        latencies = [seconds for _, name, seconds in tally.calls if name == tool]
        tools[tool] = {
            "calls": len(latencies),
            "calls_per_second": len(latencies) / elapsed,
            "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
            "p99_ms": 1000 * quantile(latencies, 0.99) if latencies else None,
        }
    return {
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "options": {
            "clients": options.clients,
            "seconds": options.seconds,
            "recalls_per_remember": options.recalls,
            "backend": "in-memory" if options.in_memory else "embedded-postgres",
            "embedder": (stats or {}).get("embedder"),
            "data": "LoCoMo" if options.data else "made up",
        },
        "elapsed_s": elapsed,
        "calls": len(tally.calls),
        "calls_per_second": len(tally.calls) / elapsed,
        "tools": tools,
        "errors": len(tally.errors),
        "error_samples": tally.errors[:10],
        "clients_lost": tally.clients_lost,
        "entries_at_end": (stats or {}).get("entries"),
        "server_rss_mib": {
            "serving": rss_serving,
            "after_warm_up": rss_warm,
            "end": rss_end,
            "max_sampled": max((v for _, v in rss_samples), default=None),
        },
        "cpu_s": {
            "server": None
            if cpu_server is None or cpu_server_start is None
            else cpu_server - cpu_server_start,
            "client_process": usage.ru_utime + usage.ru_stime - cpu_client_start,
        },
        "rss_samples": rss_samples,
        "finished_at": [round(t, 3) for t, _, _ in tally.calls],
    }


def chart(record: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = list(record["tools"])
    p50 = [record["tools"][n]["p50_ms"] or 0 for n in names]
    p99 = [record["tools"][n]["p99_ms"] or 0 for n in names]
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50")
    left.bar([x + 0.2 for x in xs], p99, width=0.4, label="p99")
    left.set_xticks(list(xs), names)
    left.set_ylabel("latency (ms)")
    left.legend(fontsize=8)
    finished = record["finished_at"]
    bins = max(1, int(record["elapsed_s"] // SAMPLE_EVERY))
    counts = [0] * (bins + 1)
    for t in finished:
        counts[min(bins, int(t // SAMPLE_EVERY))] += 1
    right.plot(
        [(i + 0.5) * SAMPLE_EVERY for i in range(bins)],
        [c / SAMPLE_EVERY for c in counts[:bins]],
        "C0.-",
    )
    right.set_xlabel("seconds")
    right.set_ylabel("calls/s", color="C0")
    twin = right.twinx()
    samples = record["rss_samples"]
    twin.plot([t for t, _ in samples], [v for _, v in samples], "C3.-")
    twin.set_ylabel("server RSS (MiB)", color="C3")
    opts, load = record["options"], record["load_average_before"][0]
    fig.suptitle(
        f"trio-recall mcp --http, {opts['clients']} clients, {opts['backend']}, "
        f"{opts['embedder']}, {record['machine']['cores']} cores, load {load:.1f}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--recalls", type=int, default=3, help="recalls per remember")
    parser.add_argument("--data", type=Path, help="the LoCoMo directory (default: made up)")
    parser.add_argument("--in-memory", action="store_true", help="no embedded PostgreSQL")
    parser.add_argument("--embedder", choices=("minilm", "hashing"))
    parser.add_argument("--out", type=Path, default=RESULTS / "mcp_http_load.json")
    options = parser.parse_args()
    if options.clients < 1 or options.seconds <= 0 or options.recalls < 0:
        parser.error("--clients, --seconds must be > 0 and --recalls >= 0")

    record = trio.run(run, options)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(record, indent=2) + "\n")
    rss, cpu = record["server_rss_mib"], record["cpu_s"]
    print(
        f"{record['options']['clients']} clients, {record['elapsed_s']:.0f} s, "
        f"{record['options']['backend']}, {record['options']['embedder']}; load average "
        f"{record['load_average_before']} -> {record['load_average_after']}; "
        f"{record['machine']['cpu']}, {record['machine']['cores']} cores"
    )
    print(f"{'tool':<10} {'calls':>7} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in record["tools"].items():
        p50 = "-" if row["p50_ms"] is None else f"{row['p50_ms']:.0f}"
        p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
        print(f"{name:<10} {row['calls']:>7} {row['calls_per_second']:>8.1f} {p50:>8} {p99:>8}")
    print(
        f"all: {record['calls_per_second']:.1f} calls/s; errors {record['errors']} "
        f"(clients lost {record['clients_lost']}); entries at end {record['entries_at_end']}"
    )

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    print(
        f"server RSS MiB: serving {shown(rss['serving'])}, after warm-up "
        f"{shown(rss['after_warm_up'])}, end {shown(rss['end'])}, max sampled "
        f"{shown(rss['max_sampled'])}; CPU s: server {shown(cpu['server'])}, clients "
        f"{shown(cpu['client_process'])}"
    )
    for sample in record["error_samples"]:
        print(f"  error: {sample}")
    png = options.out.with_suffix(".png")
    print(f"wrote {options.out}" + (f" and {png}" if chart(record, png) else " (no matplotlib)"))
    return 1 if record["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
