"""The ``trio-recall`` argument parser: every command with its ``--help``.

The flags that say where memory lives (``--data``, ``--dsn``, ``--in-memory``,
``--table``), ``--embedder``, ``--namespace``, ``--json`` and ``--debug`` are accepted
before or after the command's name (``trio-recall --json stats`` and ``trio-recall stats
--json`` are the same). A usage error is one line on stderr and exit status 2: under
``--json``, that line is a JSON object (:func:`report_error`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from protocol.checks import DEFAULT_MIN_SIMILARITY

from ..doors import DEFAULT_MODE, SEARCH_MODES
from ._host_config import HOSTS
from ._service import DEDUPE_MODES, DEFAULT_DEDUPE

__all__ = [
    "USAGE_ERROR",
    "UsageError",
    "build_parser",
    "json_errors_asked",
    "parse_http",
    "report_error",
]

#: The exit status of a command line that is wrong (argparse's own).
USAGE_ERROR = 2

_DESCRIPTION = """\
Durable, namespaced memory for agents: add, search and forget memories from a terminal,
or serve them to an agent host over MCP. Memory lives in an embedded PostgreSQL in a
data directory (--data, $TRIO_RECALL_DATA, else the user data directory), in any
PostgreSQL with pgvector (--dsn), or in this process only (--in-memory)."""

_EPILOG = """\
exit status: 0 done; 1 failed (including forget of an id that is not there, and
update of one that is not there);
2 bad usage or input; 130 interrupted; 141 the reader of stdout left. Errors are one
line on stderr (--debug prints the traceback); with --json, that line is one JSON
object: {"error": {"kind": "usage" | "failed" | "bug" | "interrupted", "message": ...}}."""


class UsageError(Exception):
    """A command line that is wrong: printed as one line, exit status 2."""


def report_error(kind: str, message: str, *, as_json: bool) -> None:
    """Write one error line on stderr: ``trio-recall: error: MESSAGE`` (``trio-recall:
    interrupted`` for an interruption), or, ``as_json``, one JSON object, ``{"error":
    {"kind": KIND, "message": MESSAGE}}`` (ASCII, so any file name in it is valid JSON).

    ``kind`` says which exit status goes with it: ``"usage"`` (2: bad usage or input),
    ``"failed"`` (1: the command failed: a memory or a database not there, a file not
    written), ``"bug"`` (1: an error nobody foresaw; ``--debug`` prints its traceback)
    or ``"interrupted"`` (130).
    """
    if as_json:
        line = json.dumps({"error": {"kind": kind, "message": message}})
    elif kind == "interrupted":
        line = "trio-recall: interrupted"
    else:
        line = f"trio-recall: error: {message}"
    sys.stderr.write(line + "\n")


def json_errors_asked(argv: list[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``), so that even a
    usage error the parser finds is reported as JSON."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (and no usage block) on stderr; a JSON
    object when ``json_errors`` (the command line has ``--json``)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            report_error("usage", f"{message} (see {self.prog} --help)", as_json=True)
        else:
            sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(USAGE_ERROR)


def parse_http(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (an IPv6 host in brackets) as ``(host, port)``; the host is
    127.0.0.1 (loopback) when left out."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--http is {value!r}; expected [HOST:]PORT, such as 127.0.0.1:8765 or 8765"
        ) from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"--http port is {number}; expected 0 to 65535")
    return host, number


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{number} is not > 0")
    return number


def _positive_number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{value} is not > 0")
    return number


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The flags every command takes. On the commands they default to SUPPRESS, so a
    flag given before the command is not overwritten by the command's default."""

    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    def switch(add_argument: Callable[..., object], flag: str, help: str) -> None:
        add_argument(flag, action="store_true", default=default(False), help=help)

    place = parser.add_argument_group("where memory lives (one of)")
    exclusive = place.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--data",
        metavar="DIR",
        type=Path,
        default=default(None),
        help="a data directory with an embedded PostgreSQL, started on demand and "
        "stopped on exit (default: $TRIO_RECALL_DATA, else the user data directory); "
        "one that does not exist is made by the commands that write (they say so), "
        "and refused by the ones that only read unless --create is given",
    )
    exclusive.add_argument(
        "--dsn",
        metavar="DSN",
        default=default(None),
        help="any PostgreSQL with pgvector (a libpq connection string or URI)",
    )
    switch(
        exclusive.add_argument,
        "--in-memory",
        "keep memory in this process only (nothing persists)",
    )
    switch(
        place.add_argument,
        "--create",
        "with --data: make a new memory in DIR when it does not exist (the commands that "
        "only read refuse a DIR that is not there, a typo most likely; the ones that "
        "write make it, and say so on stderr)",
    )
    place.add_argument(
        "--table",
        metavar="NAME",
        default=default("trio_recall"),
        help="the table in the database (default: trio_recall)",
    )
    options = parser.add_argument_group("options")
    options.add_argument(
        "--embedder",
        choices=("minilm", "hashing"),
        default=default(None),
        help="minilm (all-MiniLM-L6-v2, the default with the embed extra) or hashing (a "
        "bag of words); an existing memory keeps the one it was made with",
    )
    options.add_argument(
        "--namespace",
        metavar="NS",
        default=default(None),
        help="the namespace (default: memory-default); import: put every line there; "
        "export and stats: only this namespace (default: every one)",
    )
    switch(options.add_argument, "--json", "machine-readable output: one JSON document on stdout")
    switch(options.add_argument, "--debug", "on an error, print the traceback; show library logs")


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The parser of ``trio-recall`` and its commands; ``json_errors``: a usage error is
    reported as a JSON object (:func:`report_error`)."""
    parser = _Parser(
        prog="trio-recall",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.json_errors = json_errors
    _common(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        assert isinstance(sub, _Parser)
        sub.json_errors = json_errors
        _common(sub, top=False)
        return sub

    mcp = command(
        "mcp",
        "serve memory to an agent host over MCP (stdio, or --http)",
        "Serve the memory tools (remember, recall, update_memory, forget, get_memories, "
        "memory_history, memory_stats) over the Model Context Protocol: on stdin/stdout "
        "by default, or over streamable HTTP with --http.",
    )
    mcp.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        type=parse_http,
        help="serve streamable HTTP on HOST:PORT instead of stdio (HOST defaults to "
        "127.0.0.1, loopback only; any other address needs a token)",
    )
    mcp.add_argument(
        "--print-config",
        metavar="HOST",
        choices=HOSTS,
        help="print the configuration that makes HOST (claude-desktop, claude-code or "
        "cursor) launch this server, with this machine's absolute command and the "
        "--data/--dsn/--table/--embedder/--namespace given here, and exit (no server "
        "starts)",
    )
    mcp.add_argument(
        "--token-file",
        metavar="FILE",
        type=Path,
        help="with --http: every request must send 'Authorization: Bearer TOKEN', TOKEN "
        "being this file's one line (the file readable by its owner only); default "
        "$TRIO_RECALL_TOKEN, else no token (loopback only)",
    )

    add = command(
        "add",
        "remember a text",
        "Remember TEXT; print its id (the content hash of the text and metadata). By "
        "default (--dedupe exact) a TEXT already remembered in the namespace is not "
        "stored again: its id is printed, and stderr says it was a duplicate.",
    )
    add.add_argument("text", metavar="TEXT", help="the text to remember; - reads it from stdin")
    add.add_argument("--source", metavar="SOURCE", help="where the memory came from")
    add.add_argument(
        "--metadata", metavar="JSON", help='a JSON object, such as \'{"kind": "pet"}\''
    )
    add.add_argument(
        "--at",
        metavar="ISO",
        help="when it happened or was said, ISO 8601 (2023-05-25, 2023-05-25T13:14:00+02:00; "
        "a date, or no offset, is UTC); default now",
    )
    add.add_argument(
        "--conversation",
        metavar="NAME",
        help="the conversation it belongs to: memories of one conversation, added in "
        "order, are neighbours for search",
    )
    add.add_argument(
        "--dedupe",
        choices=DEDUPE_MODES,
        default=DEFAULT_DEDUPE,
        help="exact (the default): the same text as a memory already there stores "
        "nothing; near: nor does one nearly the same in meaning; none: always store",
    )
    expiry = add.add_mutually_exclusive_group()
    expiry.add_argument(
        "--expires-at",
        metavar="ISO",
        help="forget the memory by itself at this time (ISO 8601); default never",
    )
    expiry.add_argument(
        "--ttl",
        type=_positive_number,
        metavar="SECONDS",
        help="forget the memory by itself this many seconds from now; default never",
    )

    update = command(
        "update",
        "change a memory, keeping the old version",
        "Write a new version of memory ID with --text and/or --metadata (what is left "
        "out is kept); the current version is closed and kept as history (see "
        "history). Prints the id, the new version and since when it holds.",
    )
    update.add_argument("id", metavar="ID", help="the memory's id (from add or search)")
    update.add_argument("--text", metavar="TEXT", help="the new text")
    update.add_argument(
        "--metadata", metavar="JSON", help="the new metadata, a JSON object (replaces it)"
    )
    update.add_argument(
        "--valid-from",
        metavar="ISO",
        help="since when the new version holds (ISO 8601; default now); after the "
        "current version's",
    )

    history = command(
        "history",
        "list every version of a memory",
        "Print every version of memory ID still held, oldest first: the version, since "
        "when it held, until when (- for the current one) and its text.",
    )
    history.add_argument("id", metavar="ID", help="the memory's id")

    search = command(
        "search",
        "find the memories that best answer a query",
        "Print the K memories that best answer QUERY, best first. The default mode, "
        "recall, is the library's tuned recall (meaning and keywords, the speaker and the "
        "date the query names, the turns beside a strong hit): each line is the rank, "
        "the cosine similarity, the id, the channels that lifted the hit and the text. "
        "The other modes print the score, the id and the text.",
    )
    search.add_argument("query", metavar="QUERY", help="the text to search for")
    search.add_argument(
        "-k", type=_positive, default=5, metavar="K", help="how many hits, at most (default 5)"
    )
    search.add_argument(
        "--mode",
        choices=SEARCH_MODES,
        default=DEFAULT_MODE,
        help="recall (the default), similarity (cosine only), bm25 (keywords only), hybrid "
        "(the two fused) or mmr (cosine, diversified)",
    )
    search.add_argument(
        "--min-similarity",
        type=float,
        metavar="S",
        help=f"keep hits whose cosine similarity is at least S, in [-1, 1] (default "
        f"{DEFAULT_MIN_SIMILARITY} for recall, none for similarity and mmr; bm25 and "
        "hybrid take none)",
    )
    search.add_argument(
        "--since",
        metavar="ISO",
        help="only memories that happened at or after this time (ISO 8601)",
    )
    search.add_argument(
        "--until",
        metavar="ISO",
        help="only memories that happened before this time (ISO 8601)",
    )
    search.add_argument(
        "--as-of",
        metavar="ISO",
        help="search the memory as it was at this time: each memory's version valid "
        "then (ISO 8601; default: the current versions)",
    )
    search.add_argument(
        "--filter",
        metavar="JSON",
        help='a metadata filter, such as \'{"kind": "pet"}\' or \'{"year": {"$gte": 2020}}\'',
    )

    forget = command(
        "forget",
        "forget memories, every version, by id, by filter, or a whole namespace",
        "Forget for good (every version and every trace) the memories with these ids, "
        "or every memory of the namespace matching --filter and/or that happened before "
        "--before; there is no confirmation, and no default selection: give ids, or "
        "--filter and/or --before. Prints each id forgotten, and the ids given that "
        "were not there (exit status 1 if any was not there). "
        "--namespace NS --all forgets every memory of NS (one user's, say) and no other "
        "namespace's: it asks first on a terminal, and needs --yes when stdin is not one; "
        "it prints how many it forgot (--json: the ids). No command empties every "
        "namespace at once.",
    )
    forget.add_argument("ids", metavar="ID", nargs="*", help="a memory id (from add or search)")
    forget.add_argument(
        "--filter",
        metavar="JSON",
        help="forget every memory matching this metadata filter (not with ids)",
    )
    forget.add_argument(
        "--before",
        metavar="ISO",
        help="forget every memory that happened before this time (ISO 8601; not with ids)",
    )
    forget.add_argument(
        "--all",
        action="store_true",
        help="forget every memory of --namespace (which must be given): alone, without "
        "ids, --filter or --before",
    )
    forget.add_argument(
        "--yes",
        action="store_true",
        help="with --all: do not ask for confirmation (needed when stdin is not a terminal)",
    )

    command(
        "stats",
        "how much memory is used, and by what",
        "Print the number of memories, the capacity and fill, the evictions, the "
        "embedder and where memory lives. The entries are every namespace's together, or "
        "--namespace's only; capacity, fill and evictions are the whole store's.",
    )

    imports = command(
        "import",
        "add the memories of a JSONL file (incremental)",
        "Add the memories of FILE, one JSON object per line: "
        '{"text": ..., "id"?: ..., "namespace"?: ..., "source"?: ..., "metadata"?: {...}} '
        "(what export writes). Incremental: a memory already there with the same text, "
        "source and metadata is not written again, so a re-import writes nothing. Every "
        "line is checked before anything is written. A progress bar shows on a terminal.",
    )
    imports.add_argument("file", metavar="FILE.jsonl", help="the file to read; - reads stdin")

    export = command(
        "export",
        "write every memory to a JSONL file",
        "Write every memory (of --namespace only, when given), oldest first, one JSON "
        "object per line with its id, namespace, text, source, metadata, occurred_at and "
        "conversation (ISO 8601, in UTC). A progress bar shows on a terminal.",
    )
    export.add_argument("file", metavar="FILE.jsonl", help="the file to write; - writes stdout")
    return parser
