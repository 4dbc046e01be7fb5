"""``trio-recall mcp``: the memory as a Model Context Protocol server
(docs/pages/reference/mcp.md).

Seven tools, each a thin call of one :class:`~actors.cli._service.MemoryService`
method, so the command line and the server share one implementation of every
operation: ``remember``, ``recall``, ``update_memory``, ``forget``, ``get_memories``,
``memory_history`` and ``memory_stats``. Each answers the method's result as it is,
which is also what the matching command prints under ``--json``: one shape per kind.

No tool forgets a whole namespace (the command line's ``forget --all``): a host runs
tools on a model's word, and a model can be talked into a call by what it reads (a
prompt injection in a recalled memory or a web page); emptying a user's memory in one
call is left to the person at the command line, who is asked to confirm it. The
``forget`` tool takes ids or an explicit selection (filter, before); a selection can
still match every memory of a namespace, so this keeps a one-call wipe out of the tool
list without making ``forget`` harmless (its ``destructiveHint`` says so to the host).
The server
is the official ``mcp`` SDK's low-level ``Server`` (v2, written against anyio, so it runs
on trio as it is): its tools are declared here with their JSON schemas (input and
output), and every argument is checked by the service, so a bad one gives a one-line
tool error (``isError``) naming the argument, the value seen and what was expected, and
the server goes on serving. Anything else that fails in a call (the store unavailable,
an embedder error) is a tool error too, and is logged (on stderr with ``--debug``).

This module imports the SDK at once (the command line imports the module only for
``trio-recall mcp`` and says which extra is missing); Hypercorn only for ``--http``.

Transports: stdio (the default; the SDK diverts the process's stdout to stderr while it
serves, so nothing else can corrupt the protocol stream) ends when the client closes
stdin; streamable HTTP (``--http HOST:PORT``, at ``/mcp``) is served by Hypercorn's trio
worker until the process is interrupted, and says where it listens on stderr (port 0
picks a free port). Over HTTP, a bearer token (``_http_auth.py``) is required of every
request when one is given, and required to serve at all on an address that is not
loopback. On every loopback address (127.0.0.0/8, ``::1``, ``localhost``) the SDK checks
the ``Host`` and ``Origin`` headers (DNS rebinding protection); a browser page cannot
send the token, so elsewhere the token is the protection.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping

import attrs
import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from protocol import ConfigError, VectorStoreError
from protocol.checks import (
    DEFAULT_MIN_SIMILARITY,
    MAX_CONVERSATION_BYTES,
    JsonValue,
    replace_surrogates,
    replace_surrogates_json,
)

from ..doors import DEFAULT_MODE, SEARCH_MODES, named_run
from ._http_auth import App, BearerAuth, check_http, is_loopback
from ._service import (
    DEDUPE_MODES,
    DEFAULT_DEDUPE,
    MAX_IDS,
    MAX_NAME_BYTES,
    MAX_TTL_SECONDS,
    MemoryService,
    ToolInputError,
    _namespace,
)

__all__ = ["TOOLS", "ToolSpec", "serve"]

log = logging.getLogger("trio_recall.mcp")

#: The server's name in the MCP handshake.
SERVER_NAME = "trio-recall"
#: The path of the streamable HTTP endpoint.
HTTP_PATH = "/mcp"
#: The retriever name of the ``recall`` tool's reads in their ``vector_store.searched``
#: events (``actors.doors.named_run``).
MCP_RETRIEVER = "mcp"
# The names a loopback server answers to, besides the address it is bound to.
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@attrs.frozen
class ToolSpec:
    """One tool: its name, one-line description, JSON schemas and hints (MCP's tool
    annotations: it reads only; it destroys what it touches; calling it again with the
    same arguments changes nothing more)."""

    name: str
    description: str
    input_schema: dict[str, JsonValue]
    output_schema: dict[str, JsonValue]
    read_only: bool
    destructive: bool = False
    idempotent: bool = True

    @property
    def arguments(self) -> tuple[dict[str, JsonValue], list[JsonValue]]:
        """The arguments it takes and those it needs (``input_schema``, made by
        :func:`_object`)."""
        known, required = self.input_schema["properties"], self.input_schema["required"]
        assert isinstance(known, dict)
        assert isinstance(required, list)
        return known, required


_NAMESPACE: JsonValue = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_NAME_BYTES,
    "description": (
        "Which memory to use (isolated from every other namespace); omit for the default one."
    ),
}
_IDS: JsonValue = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "maxItems": MAX_IDS,
    "description": "Memory ids, as remember or recall returned them.",
}
_METADATA: JsonValue = {
    "type": "object",
    "description": 'JSON object of attributes (e.g. {"topic": "travel"}); recall filters on it.',
}
_ISO_TIME = (
    "ISO 8601: 2023-05-25, 2023-05-25T13:14:00+02:00 or ...Z; a date, or a time without "
    "an offset, is UTC"
)
_MEMORY_FIELDS: dict[str, JsonValue] = {
    "id": {"type": "string"},
    "text": {"type": "string"},
    "source": {"type": ["string", "null"]},
    "metadata": {"type": "object"},
    "occurred_at": {
        "type": ["string", "null"],
        "description": "When it happened, ISO 8601 in UTC (the time it was stored, unless "
        "remember said).",
    },
    "conversation": {"type": ["string", "null"]},
    "version": {
        "type": ["integer", "null"],
        "description": "Which version of the memory this is: 1, then one more per update_memory.",
    },
    "valid_from": {
        "type": ["string", "null"],
        "description": "Since when this version holds, ISO 8601 in UTC.",
    },
    "valid_to": {
        "type": ["string", "null"],
        "description": "When a later version replaced it; null for the current version.",
    },
    "expires_at": {
        "type": ["string", "null"],
        "description": "When it stops being remembered, ISO 8601 in UTC; null: never.",
    },
}
_MEMORY: JsonValue = {
    "type": "object",
    "properties": _MEMORY_FIELDS,
    "required": [*_MEMORY_FIELDS],
}
_HIT: JsonValue = {
    "type": "object",
    "properties": {
        **_MEMORY_FIELDS,
        "score": {
            "type": "number",
            "description": "Cosine similarity in [-1, 1] (bm25: the keyword score over the "
            "best hit's; hybrid: the fused rank score).",
        },
        "rank": {"type": "integer", "description": "recall mode: the hit's place, 1 the best."},
        "channels": {
            "type": "array",
            "items": {"type": "string"},
            "description": "recall mode: what lifted the hit: dense, bm25, speaker (said by "
            "someone the query names), date (near a date it names), neighbor (next to a "
            "strong hit: in its conversation, else in the order stored), link (shares a "
            "rare word with one).",
        },
    },
    "required": [*_MEMORY_FIELDS, "score"],
}


def _object(properties: dict[str, JsonValue], required: list[JsonValue]) -> dict[str, JsonValue]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_STRINGS: JsonValue = {"type": "array", "items": {"type": "string"}}
_AS_OF: JsonValue = {
    "type": "string",
    "description": f"Read the memory as it was at this time ({_ISO_TIME}): each memory's "
    "version valid then; default now (the current versions).",
}
_FILTER_LANGUAGE = (
    'Metadata filter: {"topic": "travel"}, or operators $eq $ne $gt $gte $lt $lte $in $nin '
    '$exists $and $or $not, e.g. {"year": {"$gte": 2020}}.'
)
_FILTER: JsonValue = {"type": "object", "description": _FILTER_LANGUAGE}
_MEMORY_ID: JsonValue = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_NAME_BYTES,
    "description": "A memory id, as remember or recall returned it.",
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "remember",
        "Store a fact, preference, note or conversation turn as a long-term memory and "
        "return its id; a text already remembered in the namespace is not stored again "
        "(duplicate: true, with the existing memory's id). To change a fact, call "
        "update_memory instead.",
        _object(
            {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "description": "What to remember, as a self-contained sentence.",
                },
                "namespace": _NAMESPACE,
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NAME_BYTES,
                    "description": 'Where it came from (e.g. "chat", a file name or URL).',
                },
                "metadata": _METADATA,
                "occurred_at": {
                    "type": "string",
                    "description": f"When it happened or was said ({_ISO_TIME}); default "
                    "now. recall's date channel and since/until read it.",
                },
                "conversation": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_CONVERSATION_BYTES,
                    "description": "The conversation it belongs to: turns of one "
                    'conversation, remembered in order (e.g. "Ana: ..." then "Ben: ..."), '
                    "are neighbours, so recall finds the turn beside the one that matches.",
                },
                "dedupe": {
                    "type": "string",
                    "enum": list(DEDUPE_MODES),
                    "default": DEFAULT_DEDUPE,
                    "description": "exact (the default): the same text as a current "
                    "memory of the namespace stores nothing and answers its id; near: the "
                    "same for a memory whose meaning is nearly the same (the store's "
                    "near-duplicate cosine); none: always store.",
                },
                "expires_at": {
                    "type": "string",
                    "description": f"When to forget it by itself ({_ISO_TIME}); default "
                    "never. Not with ttl_seconds.",
                },
                "ttl_seconds": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_TTL_SECONDS,
                    "description": "Forget it by itself this many seconds from now; "
                    "default never. Not with expires_at.",
                },
            },
            ["text"],
        ),
        _object(
            {
                "id": {"type": "string"},
                "duplicate": {
                    "type": "boolean",
                    "description": "True: the memory was already there (id is its id) and "
                    "nothing was stored.",
                },
            },
            ["id", "duplicate"],
        ),
        read_only=False,
        idempotent=True,
    ),
    ToolSpec(
        "recall",
        "Search the memories that best answer a query, best first: by meaning and "
        "keywords, favouring what a person the query names said, what happened near a "
        "date it names, and the turns beside a strong hit; call it before answering from "
        "memory.",
        _object(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "What to look for, in natural language.",
                },
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 5,
                    "description": "At most this many hits.",
                },
                "namespace": _NAMESPACE,
                "min_similarity": {
                    "type": "number",
                    "minimum": -1,
                    "maximum": 1,
                    "description": "Drop hits below this cosine similarity. Default: "
                    f"{DEFAULT_MIN_SIMILARITY} in recall mode, none in similarity and mmr; "
                    "not taken by bm25 and hybrid.",
                },
                "mode": {
                    "type": "string",
                    "enum": list(SEARCH_MODES),
                    "default": DEFAULT_MODE,
                    "description": "recall (the default: the tuned ranking above); "
                    "similarity (cosine only), bm25 (keywords only), hybrid (the two "
                    "fused), mmr (cosine, diversified).",
                },
                "since": {
                    "type": "string",
                    "description": f"Only memories that happened at or after this ({_ISO_TIME}).",
                },
                "until": {
                    "type": "string",
                    "description": f"Only memories that happened before this ({_ISO_TIME}).",
                },
                "as_of": _AS_OF,
                "filter": _FILTER,
            },
            ["query"],
        ),
        _object({"hits": {"type": "array", "items": _HIT}}, ["hits"]),
        read_only=True,
    ),
    ToolSpec(
        "update_memory",
        "Change a remembered fact: store a new version of the memory (same id) and keep "
        "the old one as history; recall then finds the new version, and as_of the old.",
        _object(
            {
                "id": _MEMORY_ID,
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The new text; omit to keep the current one.",
                },
                "metadata": {
                    "type": "object",
                    "description": "The new metadata (replaces the current); omit to keep it.",
                },
                "valid_from": {
                    "type": "string",
                    "description": f"Since when the new version holds ({_ISO_TIME}); "
                    "default now. Must be after the current version's valid_from.",
                },
                "namespace": _NAMESPACE,
            },
            ["id"],
        ),
        _object(
            {
                "id": {"type": "string"},
                "version": {"type": "integer"},
                "valid_from": {"type": "string"},
            },
            ["id", "version", "valid_from"],
        ),
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        "forget",
        "Forget memories for good, every version and every trace: by ids, or every "
        "memory matching a metadata filter and/or that happened before a time; answers "
        "the ids forgotten and the ids given that were not there.",
        _object(
            {
                "ids": _IDS,
                "filter": {
                    "type": "object",
                    "description": "Forget every memory matching this filter (not with "
                    f"ids). {_FILTER_LANGUAGE}",
                },
                "before": {
                    "type": "string",
                    "description": "Forget every memory that happened before this "
                    f"({_ISO_TIME}); with filter, those matching both. Not with ids.",
                },
                "namespace": _NAMESPACE,
            },
            [],
        ),
        _object({"ids": _STRINGS, "missing": _STRINGS}, ["ids", "missing"]),
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "get_memories",
        "Read memories by id, with their text, source, metadata, time, conversation and "
        "version; ids not there are listed as missing.",
        _object({"ids": _IDS, "namespace": _NAMESPACE, "as_of": _AS_OF}, ["ids"]),
        _object(
            {"memories": {"type": "array", "items": _MEMORY}, "missing": _STRINGS},
            ["memories", "missing"],
        ),
        read_only=True,
    ),
    ToolSpec(
        "memory_history",
        "Every version of one memory still held, oldest first, each with the time it "
        "held from (valid_from) and until (valid_to, null for the current one); empty "
        "for an id that is not there.",
        _object({"id": _MEMORY_ID, "namespace": _NAMESPACE}, ["id"]),
        _object({"versions": {"type": "array", "items": _MEMORY}}, ["versions"]),
        read_only=True,
    ),
    ToolSpec(
        "memory_stats",
        "How full the memory is: entries, capacity, fill fraction, evictions so far, the "
        "embedder, the backend and where memory lives. With a namespace, entries counts "
        "only that namespace's memories (capacity, fill and evictions are the whole "
        "store's).",
        _object(
            {
                "namespace": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NAME_BYTES,
                    "description": "Count only this namespace's memories; omit for every "
                    "namespace (or the server's --namespace, when it was given one).",
                }
            },
            [],
        ),
        _object(
            {
                "entries": {"type": "integer"},
                "capacity": {"type": "integer"},
                "fill": {"type": "number"},
                "evictions": {"type": "integer"},
                "embedder": {"type": "string"},
                "backend": {"type": "string"},
                "location": {
                    "type": ["string", "null"],
                    "description": "Where memory lives: the data directory, the "
                    "database's host and table, or this process.",
                },
                "namespace": {"type": "string"},
            },
            ["entries", "capacity", "fill", "evictions", "embedder", "backend", "location"],
        ),
        read_only=True,
    ),
)

_BY_NAME = {tool.name: tool for tool in TOOLS}


def _check_arguments(tool: ToolSpec, arguments: Mapping[str, object]) -> None:
    """Refuse an argument the tool does not take, or a missing required one."""
    known, required = tool.arguments
    for name in arguments:
        if name not in known:
            takes = ", ".join(known) or "no arguments"
            raise ToolInputError(f"{tool.name} takes no argument {name!r}; it takes {takes}")
    for needed in required:
        if needed not in arguments:
            raise ToolInputError(f"{tool.name} needs the argument {needed!r}; it was not given")


async def call_tool(
    service: MemoryService,
    name: str,
    arguments: Mapping[str, object],
    *,
    namespace: str | None = None,
) -> Mapping[str, object]:
    """Run tool ``name`` with ``arguments`` (the JSON object of an MCP tool call) and
    return its structured result. ``namespace`` is the server's default namespace, used
    by a call that names none (``None``: the library's default).

    Raises:
        ToolInputError: an unknown tool, an unknown or missing argument, or anything
            the service refuses.
    """
    tool = _BY_NAME.get(name)
    if tool is None:
        raise ToolInputError(f"there is no tool {name!r}; expected one of {', '.join(_BY_NAME)}")
    _check_arguments(tool, arguments)
    args = dict(arguments)
    if namespace is not None and "namespace" in tool.arguments[0]:
        args.setdefault("namespace", namespace)
    match name:
        case "remember":
            return await service.remember(args.pop("text"), **args)
        case "recall":
            with named_run(MCP_RETRIEVER):
                return await service.recall(args.pop("query"), **args)
        case "forget":
            return await service.forget(**args)
        case "update_memory":
            return await service.update(args.pop("id"), **args)
        case "memory_history":
            return await service.history(args.pop("id"), **args)
        case "get_memories":
            return await service.get_memories(args.pop("ids"), **args)
        case "memory_stats":
            return await service.memory_stats(**args)
        case _:  # a tool declared above and not dispatched here
            raise AssertionError(f"tool {name!r} has no implementation")


def _build_server(service: MemoryService, namespace: str | None) -> Server[object]:
    tools = [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            output_schema=tool.output_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=tool.destructive,
                idempotent_hint=tool.idempotent,
                open_world_hint=False,
            ),
        )
        for tool in TOOLS
    ]

    async def list_tools(
        ctx: ServerRequestContext[object], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call(
        ctx: ServerRequestContext[object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        def error(text: str) -> types.CallToolResult:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=replace_surrogates(text))],
                is_error=True,
            )

        try:
            result = await call_tool(
                service, params.name, params.arguments or {}, namespace=namespace
            )
        except ToolInputError as refused:
            return error(str(refused))
        except VectorStoreError as failed:
            # Not the caller's arguments: the store or the embedder failed (pg down, an
            # embedder timeout...). The call fails; the server goes on serving.
            log.warning("tool %s failed: %r", params.name, failed)
            return error(f"{params.name} failed: {type(failed).__name__}: {failed}")
        except Exception as bug:
            log.exception("tool %s raised an unexpected exception", params.name)
            return error(f"{params.name} failed unexpectedly: {type(bug).__name__}: {bug}")
        # What is stored keeps a lone surrogate exactly; the wire (UTF-8 JSON) cannot
        # carry one, so the answer has U+FFFD in its place (docs/pages/reference/store.md).
        result = replace_surrogates_json(result)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))],
            structured_content=dict(result),
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=(
            "Long-term memory. Call recall before answering anything that may depend on "
            "what you were told earlier; call remember for facts, preferences and "
            "decisions worth keeping (with occurred_at, when it happened, and for the "
            "turns of a conversation its name, in order); when a fact changes, call "
            "update_memory on its id (the old version stays in memory_history); forget "
            "deletes for good, by id or by filter."
        ),
        on_list_tools=list_tools,
        on_call_tool=on_call,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trio-recall")
    except PackageNotFoundError:
        return "0"


async def serve(
    service: MemoryService,
    *,
    http: tuple[str, int] | None = None,
    namespace: str | None = None,
    token: str | None = None,
) -> None:
    """Serve ``service`` as an MCP server until the client goes or the task is cancelled.

    Args:
        service: the memory operations (the caller opens and closes the store).
        http: ``None`` for stdio; ``(host, port)`` for streamable HTTP at
            ``http://host:port/mcp`` (port 0: any free port).
        namespace: the namespace of a tool call that names none (``trio-recall mcp
            --namespace NS``: one server per agent or project); ``None`` is the
            library's default namespace. A call may still name any namespace.
        token: over HTTP, the bearer token every request must carry
            (``_http_auth.read_token``); ``None``: no authentication, which only a
            loopback ``host`` allows.

    With stdio it returns when the client closes stdin; with HTTP it runs until
    cancelled (the command line cancels it on SIGTERM and SIGHUP, then closes the store
    and stops an embedded PostgreSQL). On cancellation Hypercorn closes its connections
    first, within a second.

    Raises:
        ConfigError: HTTP on an address that is not loopback without a token (before
            anything is bound).
        OSError: the HTTP port cannot be bound.
    """
    if http is not None:
        check_http(http[0], token)
    if namespace is not None:
        _namespace(namespace)  # a bad --namespace fails at launch, not at every call
    server = _build_server(service, namespace)
    if http is None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    else:
        await _serve_http(server, *http, token=token)


def _rebinding_protection(host: str) -> TransportSecuritySettings | None:
    """The SDK's Host/Origin check for a loopback ``host``: the loopback names and the
    address itself, on any port. None elsewhere, where the host's names are not known
    here."""
    if not is_loopback(host):
        return None
    names = dict.fromkeys([*_LOOPBACK_NAMES, f"[{host}]" if ":" in host else host])
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


async def _serve_http(server: Server[object], host: str, port: int, *, token: str | None) -> None:
    # Imported here: stdio (what agent hosts launch) does not pay for Hypercorn.
    try:
        import hypercorn.config
        import hypercorn.trio
    except ImportError as error:
        raise ConfigError(
            f"trio-recall mcp --http needs Hypercorn, from the mcp extra (pip install "
            f"'trio-recall[mcp]'): {error}"
        ) from error
    app: App = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        host=host,
        transport_security=_rebinding_protection(host),
    )
    if token is not None:
        app = BearerAuth(app, token)
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None  # our own line says where it listens
    config.graceful_timeout = 1.0
    if not is_loopback(host):
        print(
            f"trio-recall mcp: warning: serving on {host}, which is not loopback, over plain "
            "HTTP: the token and the memories cross the network unencrypted (put a TLS "
            "proxy in front)",
            file=sys.stderr,
            flush=True,
        )
    access = "bearer token required" if token is not None else "no token: loopback only"
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        for bind in binds:
            print(
                f"trio-recall mcp: serving on {bind}{HTTP_PATH} ({access})",
                file=sys.stderr,
                flush=True,
            )
