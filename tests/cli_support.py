"""Running the ``trio-recall`` command as a user runs it: the console script in a
subprocess (``tests/pg/test_cli.py``, its fault harness and the embedded server's tests,
and the recall doors' test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# A command starts Python and, on a data directory, a PostgreSQL server: seconds each on
# two busy cores. The limit is for a hang, not for speed.
TIMEOUT = 180


def _script() -> list[str]:
    script = Path(sys.executable).with_name("trio-recall")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "actors.cli"]  # not installed as a script (pip -e)


def cli(
    *args: str,
    input: str | bytes | None = None,
    stderr: Any = subprocess.PIPE,
    cwd: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[Any]:
    """``trio-recall ARGS`` (in ``cwd``); bytes ``input`` makes stdout and stderr bytes
    too."""
    environ = {**os.environ, **env}
    environ.pop("TRIO_RECALL_DATA", None)
    return subprocess.run(
        [*_script(), *args],
        input=input,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=not isinstance(input, bytes),
        timeout=TIMEOUT,
        cwd=cwd,
        env=environ,
        check=False,
    )


def ok(*args: str, **kw: Any) -> subprocess.CompletedProcess[Any]:
    result = cli(*args, **kw)
    assert result.returncode == 0, (args, result.returncode, result.stderr)
    return result


def js(*args: str, **kw: Any) -> Any:
    return json.loads(ok(*args, "--json", **kw).stdout)


def search_hits(*args: str, **kw: Any) -> list[Any]:
    """``trio-recall search ARGS --json``: its hits (the object is ``{"hits": [...]}``,
    the MCP ``recall`` tool's result)."""
    result = js("search", *args, **kw)
    assert isinstance(result, dict) and set(result) == {"hits"}, result
    return list(result["hits"])


def history_versions(*args: str, **kw: Any) -> list[Any]:
    """``trio-recall history ARGS --json``: its versions (the object is ``{"versions":
    [...]}``, the MCP ``memory_history`` tool's result)."""
    result = js("history", *args, **kw)
    assert isinstance(result, dict) and set(result) == {"versions"}, result
    return list(result["versions"])
