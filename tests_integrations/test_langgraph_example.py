"""README "LangGraph" shows examples/integrations/langgraph_agent.py (test_examples.py
runs it)."""

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
