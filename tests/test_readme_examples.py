"""Every Python block of the README runs as written (``tests/readme_blocks.py`` says
how); the LangChain and LangGraph ones run in the asyncio suite, which has those extras,
and the one that needs a model server in the ``-m llm`` job."""

from __future__ import annotations

from pathlib import Path

import pytest
from readme_blocks import KNOWN, Block, blocks, missing_extras, run

BLOCKS = blocks()


def test_the_readme_has_blocks_and_every_marker_is_known() -> None:
    assert len(BLOCKS) >= 10
    for block in BLOCKS:
        assert block.needs <= KNOWN, (block.name, block.needs - KNOWN)


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.name, marks=[pytest.mark.llm] if "llm" in b.needs else [])
        for b in BLOCKS
    ],
)
def test_a_readme_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if block.needs & {"langchain", "langgraph"}:
        pytest.skip("runs in the asyncio suite: tests/integrations/test_readme_examples.py")
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
