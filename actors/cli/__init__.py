"""The ``trio-recall`` command line and MCP server (docs/pages/reference/cli.md).

``main()`` is the console script: it parses the command line, runs the command under
``trio.run`` and turns every error into one line on stderr and a non-zero exit status
(``--debug`` prints the traceback too; under ``--json`` the line is a JSON object). The
commands are in ``_commands.py``, where
memory lives in ``_location.py``, and the five memory operations, shared with the MCP
server, in ``_service.py``.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``trio-recall`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    Imports stay inside so that ``--help`` and usage errors answer without loading
    numpy and the store.
    """
    import sys

    from ._parser import build_parser, json_errors_asked

    asked = json_errors_asked(sys.argv[1:] if argv is None else argv)
    args = build_parser(json_errors=asked).parse_args(argv)
    from ._commands import run

    return run(args)
