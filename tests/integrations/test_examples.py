"""Run every file in examples/integrations/ as a subprocess and check what it prints
(tests/test_examples.py does the same for examples/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"
ALL = sorted(p.name for p in EXAMPLES.glob("*.py"))

# What each example must print; a new example without an entry fails.
EXPECTED: dict[str, list[str]] = {
    "langchain_retriever.py": [
        # Unfiltered, the shopping note ("Buy an umbrella...") ranks first.
        "weather | Light rain in Lyon tomorrow, 14 C.",
    ],
    "langgraph_agent.py": [
        "I recall: []",
        "I recall: ['My cat is called Miso']",
        "I recall: ['My cat is called Miso']",
    ],
}


@pytest.mark.parametrize("name", ALL)
def test_example_prints_what_it_shows(name: str) -> None:
    assert name in EXPECTED, f"examples/integrations/{name} has no EXPECTED entry"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_RECALL_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == EXPECTED[name]


# Each tutorial page shows its example file's code (after the docstring), in < 15 lines:
# the page's first Python block.
TUTORIALS = EXAMPLES.parent.parent / "docs" / "pages" / "tutorials"
TUTORIAL_EXAMPLES = {
    "langchain.md": "langchain_retriever.py",
    "langgraph.md": "langgraph_agent.py",
}


@pytest.mark.parametrize(("page", "name"), sorted(TUTORIAL_EXAMPLES.items()))
def test_the_tutorial_shows_the_example_in_under_15_lines(page: str, name: str) -> None:
    body = (TUTORIALS / page).read_text()
    shown = body.split("```python\n", 1)[1].split("```", 1)[0].splitlines()
    # The block's first line says which extras it needs (tests/doc_blocks.py); the
    # rest is the example, line for line.
    if shown and shown[0].startswith("# needs: "):
        shown = shown[1:]
    code = (EXAMPLES / name).read_text().split('"""\n\n', 1)[1].splitlines()
    assert [line for line in shown if line] == [line for line in code if line]
    assert len([line for line in shown if line]) < 15
