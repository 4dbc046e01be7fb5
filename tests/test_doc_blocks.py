"""Every Python block of the README and the docs runs as written (``tests/doc_blocks.py``
says how); the LangChain and LangGraph ones run in the asyncio suite, which has those
extras, and the one that needs a model server in the ``-m llm`` job."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import (
    KNOWN,
    PYTHON_ALIASES,
    README,
    Block,
    blocks,
    documents,
    fences,
    missing_extras,
    run,
)

BLOCKS = blocks()


def test_the_readme_and_the_docs_have_blocks_and_every_marker_is_known() -> None:
    assert any(b.path == "README.md" for b in BLOCKS)
    assert len({b.path for b in BLOCKS}) >= 10
    for block in BLOCKS:
        assert block.needs <= KNOWN, (block.name, block.needs - KNOWN)


def test_no_python_block_hides_under_another_name() -> None:
    """A ``py`` or ``pycon`` fence would be shown as Python and never run."""
    hidden = [
        f"{path.name}:{line}: {info}"
        for path in documents()
        for line, info, _ in fences(path)
        if info.split()[0:1] and (info.split()[0] in PYTHON_ALIASES or info.startswith("python "))
    ]
    assert hidden == []


def test_the_collector_finds_an_indented_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("- a step:\n\n    ```python\n    print(1)\n    ```\n", encoding="utf-8")
    assert fences(page) == [(3, "python", "print(1)\n")]


def test_the_readme_is_short_and_leads_with_every_door() -> None:
    """At most 250 lines, and its first screen names the CLI, MCP and the adapters."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    first_screen = "\n".join(lines[:40])
    for door in ("trio-recall", "MCP", "LangChain", "LangGraph"):
        assert door in first_screen, door


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.name, marks=[pytest.mark.llm] if "llm" in b.needs else [])
        for b in BLOCKS
    ],
)
def test_a_doc_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if block.needs & {"langchain", "langgraph"}:
        pytest.skip("runs in the asyncio suite: tests/integrations/test_doc_blocks.py")
    lacking = missing_extras(block)
    if lacking:
        pytest.skip(f"needs the {', '.join(lacking)} extra")
    env: dict[str, str] = {}
    if "pg" in block.needs:
        from pg_support import session_dsn

        env["TRIO_RECALL_PG_DSN"] = session_dsn()
    if "llm" in block.needs:
        from llm_support import llm_extra_missing

        why = llm_extra_missing()
        if why is not None:
            pytest.skip(why)
        env["TRIO_RECALL_BASE_URL"] = request.getfixturevalue("llama_url")
        env["TRIO_RECALL_MODEL"] = "smollm2"
    run(block, tmp_path, env)
