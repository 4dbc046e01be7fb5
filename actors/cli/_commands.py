"""The commands of ``trio-recall``: each opens the place memory lives, runs one
operation of the shared ``MemoryService`` (or import/export), and prints the result.

Output: plain text for people by default, one JSON document on stdout with ``--json``:
the result object of ``MemoryService``, the same the MCP tool of that kind answers.
Errors: one line on stderr, ``trio-recall: error: ...``, and exit status 1 (2 for bad
input: a usage error, a bad argument, a text argument that is not UTF-8, a bad or
unreadable import file, an export file that cannot be written, ``forget --all`` without
``--yes`` when stdin is not a terminal, the embedded server asked for on Windows);
``--debug`` adds the traceback. Under
``--json`` the line is a JSON object, ``{"error": {"kind": ..., "message": ...}}``
(``_parser.report_error``).
A reader of stdout that leaves (``| head``) ends the command quietly with 141 (128 +
SIGPIPE). SIGTERM and SIGHUP cancel the command, so the embedded server is still
stopped on the way out (exit status 128 + the signal's number).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import AsyncIterable, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import trio

from ._parser import USAGE_ERROR, UsageError, report_error

if TYPE_CHECKING:  # imported when a command runs: the command line starts fast
    from protocol.checks import JsonValue

    from ._location import Where
    from ._service import MemoryService

__all__ = ["BROKEN_PIPE", "FAILED", "INTERRUPTED", "run"]

#: The exit status of a command that failed.
FAILED = 1
#: The exit status after Ctrl-C.
INTERRUPTED = 130
#: The exit status when the reader of stdout went away (``export - | head``): 128 +
#: SIGPIPE, what a shell reports for a tool that SIGPIPE ended.
BROKEN_PIPE = 141
#: The retriever name of ``search``'s reads in their ``vector_store.searched`` events
#: (``actors.doors.named_run``).
CLI_RETRIEVER = "cli"
#: The commands that only read: on a ``--data`` directory that is not there they refuse
#: (unless ``--create``) rather than make a new, empty memory.
_READ_ONLY = frozenset({"search", "stats", "history", "export", "forget"})
#: The arguments that are text (paths are not: a file name may hold any bytes).
_TEXT_ARGUMENTS = {
    "text": "TEXT",
    "query": "QUERY",
    "ids": "ID",
    "metadata": "--metadata",
    "filter": "--filter",
    "namespace": "--namespace",
    "source": "--source",
    "at": "--at",
    "conversation": "--conversation",
    "since": "--since",
    "until": "--until",
    "as_of": "--as-of",
    "before": "--before",
    "expires_at": "--expires-at",
    "valid_from": "--valid-from",
    "id": "ID",
    "table": "--table",
    "dsn": "--dsn",
}


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; return the exit status (never raises but SystemExit)."""
    _quiet_logs(args.debug)
    status: list[int] = []
    try:
        _check_utf8(args)
        trio.run(_main, args, status)
    except KeyboardInterrupt:
        report_error("interrupted", "interrupted", as_json=args.json)
        return INTERRUPTED
    except BaseException as error:  # every error becomes one line
        leaf = _leaf(error)
        if isinstance(leaf, KeyboardInterrupt):
            report_error("interrupted", "interrupted", as_json=args.json)
            return INTERRUPTED
        if isinstance(leaf, SystemExit):
            raise leaf from None
        return _report(leaf, debug=args.debug, error=error, as_json=args.json)
    return status[0] if status else 0


def _check_utf8(args: argparse.Namespace) -> None:
    """Refuse a text argument that is not UTF-8, as ``import`` refuses such a line
    (Python hands argv's undecodable bytes on as lone surrogates, which the store would
    keep)."""
    for name, flag in _TEXT_ARGUMENTS.items():
        value = getattr(args, name, None)
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue
            escaped = [c for c in item if "\udc80" <= c <= "\udcff"]
            if escaped:
                raise UsageError(
                    f"{flag} is not UTF-8 (it holds the byte 0x{ord(escaped[0]) - 0xDC00:02x} "
                    f"at character {item.index(escaped[0])}); expected UTF-8 text"
                )


def _leaf(error: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (else the group itself)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _usage_error(error: BaseException) -> bool:
    from protocol import FilterError, JsonError

    from ._location import EmbeddedUnsupported
    from ._service import MissingMemory, ToolInputError

    if isinstance(error, MissingMemory):
        return False  # not bad input: the memory is not there (exit status 1)
    # The embedded server on Windows: another place for memory must be given.
    kinds = UsageError | ToolInputError | FilterError | JsonError | EmbeddedUnsupported
    return isinstance(error, kinds)


def _report(leaf: BaseException, *, debug: bool, error: BaseException, as_json: bool) -> int:
    if debug:
        traceback.print_exception(error)
    from protocol import VectorStoreError

    if isinstance(leaf, BrokenPipeError):
        # The reader left (`| head`): not an error to report, and stdout can take no
        # more (not even the interpreter's last flush).
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    message = " ".join(str(leaf).split()) or type(leaf).__name__
    if _usage_error(leaf):
        report_error("usage", message, as_json=as_json)
        return USAGE_ERROR
    from ._service import MissingMemory

    if isinstance(leaf, VectorStoreError | OSError | MissingMemory):
        report_error("failed", message, as_json=as_json)
    else:
        report_error(
            "bug",
            f"{type(leaf).__name__}: {message} (a bug? --debug prints the traceback)",
            as_json=as_json,
        )
    return FAILED


def _quiet_logs(debug: bool) -> None:
    """Library logs go to stderr with --debug, and nowhere otherwise: an error is the
    one line this module prints."""
    if debug:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    else:
        logging.getLogger().addHandler(logging.NullHandler())
        logging.getLogger().setLevel(logging.CRITICAL + 1)


async def _main(args: argparse.Namespace, status: list[int]) -> None:
    command = _COMMANDS[args.command]
    # SIGHUP: a closed terminal. Windows has no SIGHUP.
    stops = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    with trio.open_signal_receiver(*stops) as signals:
        async with trio.open_nursery() as nursery:
            caught: list[int] = []
            nursery.start_soon(_watch_signals, signals, nursery.cancel_scope, caught)
            try:
                status.append(await command(args))
            finally:
                nursery.cancel_scope.cancel()
    if caught:
        status[:] = [128 + caught[0]]


async def _watch_signals(
    signals: AsyncIterable[int], scope: trio.CancelScope, caught: list[int]
) -> None:
    async for signum in signals:
        caught.append(int(signum))
        scope.cancel()
        return


# --- output ----------------------------------------------------------------------------


def _print_json(value: object, out: TextIO | None = None) -> None:
    stream = sys.stdout if out is None else out
    stream.write(json.dumps(value, ensure_ascii=False) + "\n")


def _one_line(text: str) -> str:
    """A memory's text on one line: newlines and tabs shown as \\n and \\t."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def _hit_line(hit: dict[str, JsonValue]) -> str:
    """One search hit for people: ``score  id  text``; a recall hit starts with its rank
    and has the channels that lifted it before the text (``-`` for none)."""
    text = _one_line(str(hit["text"]))
    if "rank" not in hit:
        return f"{hit['score']:.4f}  {hit['id']}  {text}"
    lifted = hit["channels"]
    assert isinstance(lifted, list)  # service.hit makes it a list of str
    channels = ",".join(map(str, lifted)) or "-"
    return f"{hit['rank']:>2}  {hit['score']:.4f}  {hit['id']}  {channels}  {text}"


def _json_arg(flag: str, value: str | None) -> JsonValue:
    if value is None:
        return None
    from protocol.checks import loads_json

    try:
        return loads_json(value, what=flag)
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{flag} is {value[:60]!r}, which is not JSON ({error.msg} at character "
            f'{error.pos}); expected a JSON object such as \'{{"kind": "pet"}}\''
        ) from None


# --- the commands ----------------------------------------------------------------------


def _where(args: argparse.Namespace) -> Where:
    from protocol import ConfigError

    from ._location import Where

    where = Where(data=args.data, dsn=args.dsn, in_memory=args.in_memory, table=args.table)
    try:
        where.check()
    except ConfigError as error:  # two places: one before the command, one after it
        raise UsageError(str(error)) from None
    return where


def _new_data_dir(args: argparse.Namespace) -> Path | None:
    """``--data DIR`` when DIR does not exist yet, else None (an existing DIR, the
    default data directory, which is made silently, or no data directory at all).

    Raises:
        UsageError: DIR is not there and the command only reads (``--create`` not
            given): a typo in ``--data`` must not read an empty new memory.
    """
    data: Path | None = args.data
    if data is None:
        return None
    data = data.expanduser().absolute()
    if data.exists() or data.is_symlink():
        return None
    if args.command in _READ_ONLY and not args.create:
        raise UsageError(
            f"--data {data}: no memory is there (the directory does not exist); expected "
            "the data directory of an existing memory (a typo?), or pass --create to make "
            "a new memory there"
        )
    return data


async def _with_service(
    args: argparse.Namespace,
    body: Callable[[MemoryService], Awaitable[int]],
    *,
    watch: bool = False,
    warm: bool = False,
) -> int:
    """Run ``body`` on the memory the arguments name; ``warm``: the command embeds text,
    so on a terminal the model loads first, behind a notice (:func:`open_location`)."""
    from ._location import open_location

    where = _where(args)
    new = _new_data_dir(args)
    async with open_location(where, embedder=args.embedder, watch=watch, warm=warm) as service:
        if new is not None:
            sys.stderr.write(f"trio-recall: created a new memory in {new}\n")
        return await body(service)


async def _add(args: argparse.Namespace) -> int:
    text = args.text
    if text == "-":
        from ._jsonl import decode_utf8

        # Bytes, decoded strictly, as import reads a file (not stdin's surrogateescape).
        # `echo text | trio-recall add -` remembers the text, not its final newline.
        text = decode_utf8(sys.stdin.buffer.read(), "stdin", "text in UTF-8").rstrip("\n")
    metadata = _json_arg("--metadata", args.metadata)

    async def body(service: MemoryService) -> int:
        result = await service.remember(
            text,
            namespace=args.namespace,
            source=args.source,
            metadata=metadata,
            occurred_at=args.at,
            conversation=args.conversation,
            dedupe=args.dedupe,
            expires_at=args.expires_at,
            ttl_seconds=args.ttl,
        )
        if args.json:
            _print_json(result)
        else:
            print(result["id"])
            if result["duplicate"]:
                sys.stderr.write(
                    f"already remembered (--dedupe {args.dedupe}): nothing was stored\n"
                )
        return 0

    return await _with_service(args, body, warm=True)


async def _search(args: argparse.Namespace) -> int:
    from ..doors import named_run

    filter_ = _json_arg("--filter", args.filter)

    async def body(service: MemoryService) -> int:
        with named_run(CLI_RETRIEVER):
            result = await service.recall(
                args.query,
                k=args.k,
                namespace=args.namespace,
                min_similarity=args.min_similarity,
                filter=filter_,
                mode=args.mode,
                since=args.since,
                until=args.until,
                as_of=args.as_of,
            )
        if args.json:
            _print_json(result)
            return 0
        hits = result["hits"]
        assert isinstance(hits, list)  # MemoryService.recall: a list of hits
        if not hits:
            sys.stderr.write("no memories found\n")
        for found in hits:
            assert isinstance(found, dict)
            print(_hit_line(found))
        return 0

    return await _with_service(args, body, warm=True)


async def _forget(args: argparse.Namespace) -> int:
    if args.all:
        return await _forget_all(args)
    if args.yes:
        raise UsageError(
            "--yes is given without --all; expected it with --all (forget by ids, --filter "
            "or --before asks nothing: --yes would confirm nothing)"
        )
    filter_ = _json_arg("--filter", args.filter)

    async def body(service: MemoryService) -> int:
        result = await service.forget(
            args.ids or None, namespace=args.namespace, filter=filter_, before=args.before
        )
        if args.json:
            _print_json(result)
        else:
            for memory_id in result["ids"]:
                print(f"deleted {memory_id}")
            for memory_id in result["missing"]:
                print(f"not found {memory_id}")
            if not result["ids"] and not result["missing"]:
                sys.stderr.write("no memories matched: nothing was forgotten\n")
        return FAILED if result["missing"] else 0

    return await _with_service(args, body)


async def _forget_all(args: argparse.Namespace) -> int:
    """``forget --namespace NS --all``: every memory of NS, after a confirmation on a
    terminal (``--yes`` skips it; without a terminal it is required). Never another
    namespace, never every namespace: NS must be named."""
    given = [
        flag
        for flag, on in (("ID", args.ids), ("--filter", args.filter), ("--before", args.before))
        if on
    ]
    if given:
        raise UsageError(
            f"--all is given with {' and '.join(given)}; expected --all alone (it forgets "
            "every memory of --namespace) or a selection without it"
        )
    namespace: str | None = args.namespace
    if namespace is None:
        raise UsageError(
            "--all is given without --namespace; expected the namespace to empty, named "
            "(--namespace alice; the default one is memory-default): forget --all empties "
            "one namespace and never every one"
        )
    if not args.yes and not _stdin_is_terminal():
        raise UsageError(
            f"forget --all would forget every memory of namespace {namespace!r}, and stdin "
            "is not a terminal to confirm it on; expected --yes to confirm it without asking"
        )

    async def body(service: MemoryService) -> int:
        if not args.yes and not await _confirmed(service, namespace):
            sys.stderr.write("not confirmed: nothing was forgotten\n")
            return FAILED
        result = await service.forget_namespace(namespace)
        count = len(result["ids"])
        if args.json:
            _print_json(result)
        elif count:
            print(f"deleted {_memories(count)} of namespace {namespace}")
        else:
            sys.stderr.write(f"namespace {namespace} holds no memories: nothing was forgotten\n")
        return 0

    return await _with_service(args, body)


def _memories(count: int) -> str:
    """``1 memory``, ``2 memories``."""
    return f"{count} memory" if count == 1 else f"{count} memories"


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # stdin closed
        return False


async def _confirmed(service: MemoryService, namespace: str) -> bool:
    """Ask on the terminal (stderr, read from stdin) before ``forget --all``; whether
    the answer was yes. A namespace with nothing in it asks nothing."""
    entries = (await service.memory_stats(namespace))["entries"]
    assert isinstance(entries, int)  # MemoryService.memory_stats counts them
    if entries == 0:
        return True
    sys.stderr.write(
        f"forget all {_memories(entries)} of namespace {namespace}, every version, for good? "
        "This cannot be undone. [y/N] "
    )
    sys.stderr.flush()
    answer = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    return answer.strip().lower() in ("y", "yes")


async def _update(args: argparse.Namespace) -> int:
    metadata = _json_arg("--metadata", args.metadata)

    async def body(service: MemoryService) -> int:
        result = await service.update(
            args.id,
            text=args.text,
            metadata=metadata,
            valid_from=args.valid_from,
            namespace=args.namespace,
        )
        if args.json:
            _print_json(result)
        else:
            print(
                f"{result['id']}  version {result['version']}  valid from {result['valid_from']}"
            )
        return 0

    return await _with_service(args, body, warm=args.text is not None)


async def _history(args: argparse.Namespace) -> int:
    async def body(service: MemoryService) -> int:
        result = await service.history(args.id, namespace=args.namespace)
        versions = result["versions"]
        assert isinstance(versions, list)  # MemoryService.history: a list of versions
        if args.json:
            _print_json(result)
        elif not versions:
            sys.stderr.write(f"no memory {args.id} in this namespace\n")
        for version in [] if args.json else versions:
            assert isinstance(version, dict)
            until = version["valid_to"] or "-"
            text = _one_line(str(version["text"]))
            print(f"{version['version']:>3}  {version['valid_from']}  {until}  {text}")
        return 0 if versions else FAILED

    return await _with_service(args, body)


async def _stats(args: argparse.Namespace) -> int:
    async def body(service: MemoryService) -> int:
        stats = await service.memory_stats(args.namespace)
        if args.json:
            _print_json(stats)
        else:
            for key, value in stats.items():
                if key == "fill" and isinstance(value, int | float):
                    value = f"{value * 100:.3g}%"
                print(f"{key:<10} {value}")
        return 0

    return await _with_service(args, body)


async def _import(args: argparse.Namespace) -> int:
    from ._jsonl import import_jsonl, read_jsonl
    from ._location import MAX_ENTRY_BYTES

    # Every line is checked before the store opens: a bad file starts no server.
    memories = read_jsonl(args.file, namespace=args.namespace, cap=MAX_ENTRY_BYTES)

    async def body(service: MemoryService) -> int:
        result = await import_jsonl(service, memories)
        if args.json:
            _print_json(result)
        else:
            print(
                f"imported {args.file}: {result['added']} added, {result['updated']} "
                f"updated, {result['skipped']} skipped (unchanged)"
            )
        return 0

    return await _with_service(args, body, warm=True)


async def _export(args: argparse.Namespace) -> int:
    from ._jsonl import check_export_target, export_jsonl
    from ._output import writes_stdout

    # A target that cannot be written is refused before the store opens (exit status
    # 2), as a bad import file is; the opening refuses the rest the same way.
    check_export_target(args.file)

    async def body(service: MemoryService) -> int:
        count = await export_jsonl(service, args.file, namespace=args.namespace)
        if writes_stdout(args.file):
            pass  # stdout carries the memories, and nothing else
        elif args.json:
            _print_json({"exported": count, "file": args.file})
        else:
            print(f"exported {_memories(count)} to {args.file}")
        return 0

    return await _with_service(args, body)


async def _mcp(args: argparse.Namespace) -> int:
    if args.print_config is not None:
        return _print_config(args)
    try:
        from ._mcp import serve
    except ImportError as error:
        from protocol import ConfigError

        from ._install import install_hint

        raise ConfigError(
            f"trio-recall mcp needs the mcp extra ({install_hint('mcp')}): {error}"
        ) from error

    token = _http_token(args)

    async def body(service: MemoryService) -> int:
        await serve(service, http=args.http, namespace=args.namespace, token=token)
        return 0

    # A server runs for hours: it keeps its embedded PostgreSQL up.
    return await _with_service(args, body, watch=True)


def _print_config(args: argparse.Namespace) -> int:
    """``mcp --print-config HOST``: print HOST's configuration; nothing starts."""
    from ._host_config import host_config, launch_command

    if args.http is not None or args.token_file is not None:
        raise UsageError(
            "--print-config is given with --http or --token-file; expected it alone (a "
            "host launches the server over stdio: run an HTTP server yourself)"
        )
    print(host_config(args.print_config, launch_command(args)))
    return 0


def _http_token(args: argparse.Namespace) -> str | None:
    """``mcp``'s bearer token, checked before the store opens: a bad token setting, or
    none on an address that is not loopback, is bad usage (exit status 2)."""
    import os

    from protocol import ConfigError

    from ._http_auth import check_http, read_token

    if args.http is None:
        if args.token_file is not None:
            raise UsageError(
                "--token-file is given without --http; expected it with --http (over "
                "stdio the host that launches the server is its one client)"
            )
        return None
    try:
        token = read_token(args.token_file, os.environ)
        check_http(args.http[0], token)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    return token


_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "add": _add,
    "search": _search,
    "update": _update,
    "history": _history,
    "forget": _forget,
    "stats": _stats,
    "import": _import,
    "export": _export,
    "mcp": _mcp,
}
