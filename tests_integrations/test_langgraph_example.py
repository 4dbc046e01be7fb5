"""examples/integrations/langgraph_agent.py runs offline, and README "LangGraph" shows it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "integrations" / "langgraph_agent.py"


def test_the_agent_example_runs_offline_and_recalls() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_RECALL_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "I recall: []",
        "I recall: ['My cat is called Miso']",
        "I recall: ['My cat is called Miso']",
    ]


def test_the_readme_shows_the_example_in_under_15_lines() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## LangGraph\n", 1)[1].split("\n## ", 1)[0]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    code = EXAMPLE.read_text().split('"""\n\n', 1)[1]
    assert [line for line in shown.splitlines() if line] == [
        line for line in code.splitlines() if line
    ]
    assert len([line for line in shown.splitlines() if line]) < 15
