"""``trio-recall mcp --print-config HOST``: the configuration an agent host needs to
launch this machine's ``trio-recall mcp``, with an absolute command.

A GUI host (Claude Desktop, Cursor) starts its servers with its own PATH, which often
has neither ``uv`` nor a virtual environment's scripts: a bare ``trio-recall`` or ``uv``
fails to launch there. So the command printed is the absolute path of the running
``trio-recall`` script (else this Python with ``-m actors.cli``), and every path among
the arguments is absolute too.

The formats (docs/pages/reference/mcp.md): Claude Desktop (``claude_desktop_config.json``) and
Cursor (``~/.cursor/mcp.json`` or a project's ``.cursor/mcp.json``) read ``{"mcpServers":
{NAME: {"command": ..., "args": [...]}}}``; Claude Code takes a command line, ``claude
mcp add --transport stdio --scope user NAME -- COMMAND ARGS...`` (its options before the
name, the server's command after ``--``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

__all__ = ["HOSTS", "SERVER_NAME", "host_config", "launch_command"]

#: The hosts ``--print-config`` writes for.
HOSTS = ("claude-desktop", "claude-code", "cursor")

#: The server's name in the host's configuration.
SERVER_NAME = "trio-recall"

_DATA_ENV = "TRIO_RECALL_DATA"  # _location.DATA_ENV, not imported: it loads the store


def _program() -> list[str]:
    """The absolute command that runs ``trio-recall``: the console script this process
    was started as, else this interpreter with ``-m actors.cli``."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is not None and started.name in {"trio-recall", "trio-recall.exe"}:
        found = started if started.is_file() else None
        if found is None and started.name == started.as_posix():  # a bare name, on PATH
            import shutil

            which = shutil.which(started.name)
            found = Path(which) if which else None
        if found is not None:
            return [str(found.absolute())]  # a symlink stays one (uv tool's bin)
    return [str(Path(sys.executable).absolute()), "-m", "actors.cli"]


def launch_command(args: argparse.Namespace, environ: dict[str, str] | None = None) -> list[str]:
    """The command line a host runs: the program, ``mcp``, and the user's own choice of
    where memory lives (``--data`` absolute; ``$TRIO_RECALL_DATA`` becomes ``--data``, as
    the host's environment will not have it), ``--table``, ``--embedder`` and
    ``--namespace``, when given."""
    env = os.environ if environ is None else environ
    line = [*_program(), "mcp"]
    data: Path | None = getattr(args, "data", None)
    dsn: str | None = getattr(args, "dsn", None)
    if getattr(args, "in_memory", False):
        line.append("--in-memory")
    elif dsn is not None:
        line += ["--dsn", dsn]
    else:
        if data is None and env.get(_DATA_ENV):
            data = Path(env[_DATA_ENV]).expanduser()
        if data is not None:
            line += ["--data", os.path.abspath(data.expanduser())]
    table = getattr(args, "table", "trio_recall")
    if table != "trio_recall":
        line += ["--table", table]
    for flag, name in (("--embedder", "embedder"), ("--namespace", "namespace")):
        value = getattr(args, name, None)
        if value is not None:
            line += [flag, value]
    return line


def host_config(host: str, command: list[str]) -> str:
    """``host``'s configuration (one of :data:`HOSTS`) for the server ``command``: JSON
    for Claude Desktop and Cursor, a ``claude mcp add`` line for Claude Code.

    Raises:
        ValueError: ``host`` is not one of :data:`HOSTS`.
    """
    if host == "claude-code":
        add = ["claude", "mcp", "add", "--transport", "stdio", "--scope", "user"]
        return shlex.join([*add, SERVER_NAME, "--", *command])
    if host in {"claude-desktop", "cursor"}:
        server = {"command": command[0], "args": command[1:]}
        return json.dumps({"mcpServers": {SERVER_NAME: server}}, indent=2)
    raise ValueError(f"--print-config host is {host!r}; expected one of {', '.join(HOSTS)}")
