"""Run every file in examples/ as a subprocess and check what it prints."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_dispatch import FakeOpenAIServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ALL = sorted(p.name for p in EXAMPLES.glob("*.py"))

# What each example must print; a new example without an entry fails the test, so that
# nobody adds one without saying what it shows.
EXPECTED: dict[str, list[str]] = {
    "store_basics.py": ["stored 6 turns", "other namespace sees: []", "VectorStoreUsage("],
    "pipeline.py": [
        "dispatch: EchoDispatcher (offline; no model is called)",
        "== 1. compress (Offload(turns=6))",
        '"action":"offloaded"',
        "10 -> 4 messages",
        "== 2. retrieve for",
        "== 3. inject",
        "  outcome: INSERTED",
        "  Recalled memory: 3 item(s), best first",
        "  1. [0.4763] My cat is called Miso and she hates the vacuum cleaner.",
        "== 4. dispatch",
        "  assistant: [echo] I read 5 message(s).",
        "== usage",
        "VectorStoreUsage(entries=6, capacity=64",
        "== turn 2, with Memory.turn",
        "  inject:   REPLACED",
        "  1. [0.4529] Light rain and 14 C in Lyon tomorrow; take an umbrella.",
        "VectorStoreUsage(entries=10, capacity=64",
    ],
}


@functools.cache
def run_offline(name: str) -> str:
    return run(name)


def run(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_RECALL_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_every_example_is_covered() -> None:
    assert set(ALL) == set(EXPECTED)


@pytest.mark.parametrize("name", ALL)
def test_example_runs_and_prints(name: str) -> None:
    out = run_offline(name)
    lines = out.splitlines()
    for expected in EXPECTED.get(name, ["<no expectations written for this example>"]):
        assert any(expected in line for line in lines), f"{expected!r} not in:\n{out}"


def test_pipeline_prints_the_exact_recall_block_it_injects() -> None:
    out = run_offline("pipeline.py")
    block = out.split("the recall block the model reads:\n  ---\n", 1)[1].split("  ---", 1)[0]
    assert block.splitlines() == [
        "  Recalled memory: 3 item(s), best first",
        "  1. [0.4763] My cat is called Miso and she hates the vacuum cleaner.",
        # Offload indexes each turn with the one before it, and recall lends a hit part
        # of its neighbour's score: the reply about the cat comes back with the fact.
        "  2. [0.3746] Noted: Miso the cat dislikes the vacuum.",
        "  3. [0.2108] What's the weather in Lyon tomorrow?",
    ]


def test_pipeline_dispatches_to_a_real_server_from_the_environment() -> None:
    with FakeOpenAIServer() as server:
        out = run(
            "pipeline.py",
            env={"TRIO_RECALL_BASE_URL": server.base_url, "TRIO_RECALL_MODEL": "tiny"},
        )
        flag = run("pipeline.py", "--base-url", server.base_url, "--model", "flagged")
    assert f"dispatch: {server.base_url}/v1/chat/completions (model tiny)" in out
    assert "assistant: hello from the server" in out
    assert "inject:   REPLACED" in out
    first, second, third, _ = server.received
    assert first["json"]["model"] == "tiny"
    assert third["json"]["model"] == "flagged"
    # The server read the recall block, placed just before the newest user message.
    sent = first["json"]["messages"]
    assert sent[-2]["role"] == "system"
    assert sent[-2]["content"].startswith("Recalled memory: 3 item(s), best first")
    assert sent[-1] == {
        "role": "user",
        "content": "What is my cat called, and what does she hate?",
    }
    assert second["json"]["messages"][-1]["content"] == "Will I need an umbrella in Lyon tomorrow?"
    assert "dispatch: " in flag
