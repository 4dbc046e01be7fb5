"""The fault harness of the command line: ``trio-recall`` commands killed with SIGKILL at
random points (database creation included), the embedded server killed, and its
``postmaster.pid`` damaged, on one data directory. After every fault the next command
works, and at the end every acknowledged write is there.

Each round is one fault, then one ordinary ``add`` that must succeed (and is
acknowledged). The first three rounds are, in this order, a kill during the database's
creation (on a new data directory), a damaged ``postmaster.pid`` and a killed server; the
rest are drawn at random, from a seed printed with the failure. Profiles
(``HYPOTHESIS_PROFILE``, as for the state machines): ``ci`` (the default) runs 6 rounds;
``pytest -m stress`` with ``HYPOTHESIS_PROFILE=stress`` runs 60 more in the long test.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from cli_support import TIMEOUT, _script, ok
from test_embedded_server import _damage

from actors.cli._embedded import postmaster_pid, running

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
ROUNDS = {"ci": 6, "stress": 60, "nightly": 300}
DAMAGE = ("empty", "truncated", "garbage", "binary", "reused")
FAULTS = ("kill-create", "damage-pid", "kill-server", "kill-add", "kill-search")


def _start(args: list[str], **kw: object) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if key != "TRIO_RECALL_DATA"}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [*_script(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        **kw,
    )  # fmt: skip


def _wait_for(condition: object, process: subprocess.Popen[str]) -> None:
    """Poll ``condition()`` until it holds or the process has ended (at most 60 s)."""
    deadline = time.monotonic() + 60
    while not condition() and process.poll() is None:  # type: ignore[operator]
        assert time.monotonic() < deadline, "the command never got there"
        time.sleep(0.01)


def _killed(
    args: list[str], delay: float, *, after: object = None
) -> subprocess.CompletedProcess[str] | None:
    """Run a command and SIGKILL it ``delay`` seconds after it starts (or after
    ``after()`` first holds); its result if it finished first (then its write is
    acknowledged), else None."""
    process = _start(args)
    if after is not None:
        _wait_for(after, process)
    try:
        out, err = process.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate(timeout=TIMEOUT)
        return None
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class Harness:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.data = root / "data"
        self.rng = random.Random(seed)
        self.acked: dict[Path, set[str]] = {self.data: set()}
        self.counts: Counter[str] = Counter()
        self.written = 0

    def where(self, data: Path) -> list[str]:
        return ["--data", str(data), "--embedder", "hashing"]

    def text(self) -> str:
        self.written += 1
        return f"memory number {self.written} of the fault harness"

    def add(self, data: Path) -> None:
        """An ordinary add: it must work, and nothing may run after it."""
        memory_id = ok("add", self.text(), *self.where(data)).stdout.strip()
        self.acked.setdefault(data, set()).add(memory_id)
        assert not running(data), "a server outlived the last command using it"

    def killed_add(self, data: Path, delay: float, after: object = None) -> None:
        done = _killed(["add", self.text(), *self.where(data)], delay, after=after)
        if done is None:
            self.counts["killed"] += 1
        elif done.returncode == 0:
            self.acked.setdefault(data, set()).add(done.stdout.strip())
            self.counts["finished before the kill"] += 1
        else:
            raise AssertionError(f"add failed before it was killed: {done.stderr}")

    def fault(self, kind: str) -> None:
        self.counts[kind] += 1
        if kind == "kill-create":
            # A new data directory: Python starts in ~0.5-1 s, then initdb runs ~1 s.
            # A new data directory, killed at a random point once its creation begins.
            fresh = self.root / f"fresh-{self.counts[kind]}"
            building = lambda: bool(list(fresh.glob("pg.new-*")))  # noqa: E731
            # initdb takes about half a second here.
            self.killed_add(fresh, self.rng.uniform(0.0, 0.6), after=building)
            if building():
                self.counts["killed during creation"] += 1
            self.add(fresh)
        elif kind == "damage-pid":
            how = self.rng.choice(DAMAGE)
            self.counts[f"pid file {how}"] += 1
            _damage(self.data / "pg", how)
        elif kind == "kill-server":
            # A server in use by a command that is then killed (an MCP server waiting on
            # its stdin holds it for as long as needed), then the server itself.
            holder = _start(["mcp", *self.where(self.data)], stdin=subprocess.PIPE)
            _wait_for(lambda: running(self.data), holder)
            holder.kill()
            holder.communicate(timeout=TIMEOUT)
            pid = postmaster_pid(self.data)
            assert pid is not None, "the killed command's server stopped by itself"
            os.kill(pid, signal.SIGKILL)
            self.counts["server killed"] += 1
        elif kind == "kill-add":
            self.killed_add(self.data, self.rng.uniform(0.2, 3.0))
        else:
            _killed(["search", "memory", *self.where(self.data)], self.rng.uniform(0.2, 3.0))

    def check(self) -> None:
        """Every acknowledged write of every data directory is there."""
        for data, acked in self.acked.items():
            out = data.parent / f"{data.name}.jsonl"
            ok("export", str(out), *self.where(data))
            ids = {json.loads(line)["id"] for line in out.read_text().splitlines()}
            assert acked <= ids, f"lost acknowledged writes in {data}: {sorted(acked - ids)}"

    def run(self, rounds: int) -> None:
        self.add(self.data)
        for number in range(rounds):
            kind = FAULTS[number] if number < 3 else self.rng.choice(FAULTS)
            self.fault(kind)
            self.add(self.data)
        self.check()


def _run(root: Path, rounds: int) -> Counter[str]:
    seed = int(os.environ.get("TRIO_RECALL_FAULT_SEED", time.time_ns() % 2**32))
    harness = Harness(root, seed)
    try:
        harness.run(rounds)
    except BaseException:
        print(f"fault harness seed {seed} (TRIO_RECALL_FAULT_SEED={seed} replays it)")
        raise
    acked = sum(len(ids) for ids in harness.acked.values())
    print(f"fault harness, {rounds} rounds, seed {seed}: {dict(harness.counts)}; {acked} acked")
    return harness.counts


def test_commands_survive_faults(root: Path) -> None:
    counts = _run(root, ROUNDS["ci"])
    assert counts["kill-create"] and counts["damage-pid"] and counts["kill-server"]


@pytest.mark.stress
def test_commands_survive_many_faults(root: Path) -> None:
    if PROFILE == "ci":
        pytest.skip("the long fault profile: HYPOTHESIS_PROFILE=stress pytest -m stress")
    _run(root, ROUNDS[PROFILE])
