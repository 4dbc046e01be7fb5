"""README "LangGraph" shows examples/integrations/langgraph_agent.py (test_examples.py
runs it), and the adapter is imported only when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "integrations" / "langgraph_agent.py"


def test_the_readme_shows_the_example_in_under_15_lines() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## LangGraph\n", 1)[1].split("\n## ", 1)[0]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    code = EXAMPLE.read_text().split('"""\n\n', 1)[1]
    assert [line for line in shown.splitlines() if line] == [
        line for line in code.splitlines() if line
    ]
    assert len([line for line in shown.splitlines() if line]) < 15


def test_langgraph_is_imported_only_when_asked_for() -> None:
    import subprocess
    import sys

    import actors.integrations.langgraph as adapter

    assert adapter.__all__ == ["TrioRecallStore"]
    check = "import actors, actors.integrations, sys; print('langgraph' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"
