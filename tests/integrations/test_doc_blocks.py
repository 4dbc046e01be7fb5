"""The LangChain and LangGraph blocks of the README and the docs run as written, here
where those extras are installed (``tests/doc_blocks.py``; the trio suite runs the
others)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import Block, blocks, missing_extras, run

ADAPTERS = [b for b in blocks() if b.needs & {"langchain", "langgraph"}]


def test_the_docs_show_both_adapters() -> None:
    assert {"langchain", "langgraph"} <= {n for b in ADAPTERS for n in b.needs}


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in ADAPTERS])
def test_an_adapter_block_runs(block: Block, tmp_path: Path) -> None:
    assert not missing_extras(block), "the integrations-test extra installs every one"
    run(block, tmp_path)
