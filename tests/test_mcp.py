"""``trio-recall mcp`` through a real MCP client (docs/pages/reference/mcp.md).

The official SDK's ``stdio_client`` + ``ClientSession`` launch the console script's
``mcp`` command as a subprocess (``python -m actors.cli``, the module the script runs)
and call every tool; streamable HTTP gets the same round trip on a loopback port the
server picks (``--http 127.0.0.1:0``; it says which on stderr). The client runs under
trio (the SDK is written against anyio). Bad arguments must come back as tool errors
(``isError``) whose one line names what was wrong, and the server must go on serving
after each. Durability runs the server twice on one ``--data`` directory: a real
embedded PostgreSQL from the ``pg`` extra's wheel.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cli_support import TIMEOUT, cli, ok
from extras import needs_extra, require_extra

pytest.importorskip("mcp", reason=needs_extra("mcp", "mcp is not installed"))

import httpx2  # the MCP SDK's HTTP client, from the mcp extra
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from actors.cli._location import MAX_ENTRY_BYTES

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {
    "remember",
    "recall",
    "update_memory",
    "forget",
    "get_memories",
    "memory_history",
    "memory_stats",
}
CHANNELS = {"dense", "bm25", "speaker", "date", "neighbor", "link"}
# Hashing keeps these tests fast and exact; MiniLM is the default and is what the cold
# start on docs/pages/benchmarks/start-up.md is measured with.
IN_MEMORY = ["--in-memory", "--embedder", "hashing"]


def trio_recall(*args: str) -> list[str]:
    """``trio-recall ARGS``: the console script installed beside this Python (uv
    installs the project into the environment that runs the tests)."""
    script = Path(sys.executable).with_name("trio-recall")
    assert script.exists(), f"{script} is missing: is the project installed in this env?"
    return [str(script), *args]


def server_command(*args: str) -> list[str]:
    """``trio-recall mcp ARGS``."""
    return trio_recall("mcp", *args)


def _env() -> dict[str, str]:
    # The server must not find a data directory of the user's through the environment.
    return {"PYTHONDONTWRITEBYTECODE": "1", "TRIO_RECALL_DATA": os.devnull}


@asynccontextmanager
async def stdio_session(*args: str, errlog: Any = None) -> AsyncIterator[ClientSession]:
    """An initialized client session with ``trio-recall mcp ARGS`` over stdio (the
    server's stderr goes to ``errlog``, a file, when given)."""
    command = server_command(*args)
    params = StdioServerParameters(command=command[0], args=command[1:], env=_env(), cwd=ROOT)
    # The server's stderr goes to a file, shown when the test fails.
    with contextlib.nullcontext(errlog) if errlog else tempfile.TemporaryFile("w+") as errlog:
        try:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                yield session
        except BaseException:
            errlog.seek(0)
            print("server stderr:\n" + errlog.read(), file=sys.stderr)
            raise


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's structured result; fails the test on a tool error."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, f"{tool}({arguments}) failed: {text}"
    # The text block is the same JSON, for clients that read only text.
    assert json.loads(text) == result.structured_content
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """A tool call that must be a tool error; returns its one-line text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool}({arguments}) was accepted: {result.structured_content}"
    assert result.structured_content is None
    text = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text and "Traceback" not in text, text
    return text


async def round_trip(session: ClientSession) -> None:
    """Every tool once, with the answers a user relies on."""
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.description and "\n" not in tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema is not None
    assert listed["recall"].input_schema["required"] == ["query"]
    assert listed["recall"].input_schema["properties"]["k"]["minimum"] == 1
    # Only forget destroys; update_memory keeps history but is no idempotent call.
    hints = {name: tool.annotations for name, tool in listed.items()}
    assert {n for n, h in hints.items() if h and h.destructive_hint} == {"forget"}
    assert {n for n, h in hints.items() if h and h.read_only_hint} == {
        "recall", "get_memories", "memory_history", "memory_stats"
    }  # fmt: skip
    assert hints["update_memory"] and hints["update_memory"].idempotent_hint is False
    assert listed["remember"].input_schema["properties"]["dedupe"]["default"] == "exact"
    assert listed["forget"].input_schema["required"] == []

    cat = await call(
        session, "remember", text="my cat is called Miso", source="chat", metadata={"kind": "pet"}
    )
    sky = await call(session, "remember", text="the sky over Lisbon is blue")
    assert set(cat) == {"id", "duplicate"} and cat["id"] != sky["id"]
    assert cat["duplicate"] is False
    # The same memory again is a duplicate (dedupe "exact", the default): its id, and
    # nothing is stored.
    again = await call(
        session, "remember", text="my cat is called Miso", source="chat", metadata={"kind": "pet"}
    )
    assert again == {"id": cat["id"], "duplicate": True}

    # recall (the default mode) ranks; each hit keeps its cosine, and says its rank and
    # what lifted it.
    hits = (await call(session, "recall", query="what is my cat called", k=5))["hits"]
    first = hits[0]
    assert first == {
        "id": cat["id"],
        "text": "my cat is called Miso",
        "score": pytest.approx(first["score"]),
        "source": "chat",
        "metadata": {"kind": "pet"},
        "occurred_at": first["occurred_at"],
        "conversation": None,
        "version": 1,
        "valid_from": first["occurred_at"],
        "valid_to": None,
        "expires_at": None,
        "rank": 1,
        "channels": first["channels"],
    }
    assert 0 < first["score"] <= 1
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    assert first["channels"] and set(first["channels"]) <= CHANNELS
    # The store stamps the time of the write: ISO 8601, in UTC.
    assert first["occurred_at"].endswith("+00:00"), first["occurred_at"]
    # A similarity search gives the k nearest by cosine, with no rank.
    nearest = (
        await call(session, "recall", query="what is my cat called", k=5, mode="similarity")
    )["hits"]
    assert [h["score"] for h in nearest] == sorted((h["score"] for h in nearest), reverse=True)
    assert all("rank" not in h and "channels" not in h for h in nearest)
    keywords = await call(session, "recall", query="Miso", mode="bm25")
    assert [h["id"] for h in keywords["hits"]] == [cat["id"]]
    only = (await call(session, "recall", query="cat", k=1))["hits"]
    assert len(only) == 1
    # The filter applies before top-k: the one pet is found for any query (similarity
    # keeps a hit that shares nothing with it; recall's floor would drop it).
    pets = await call(
        session, "recall", query="blue sky", filter={"kind": "pet"}, mode="similarity"
    )
    pets = pets["hits"]
    assert [h["id"] for h in pets] == [cat["id"]]
    none = await call(session, "recall", query="cat", filter={"kind": {"$in": ["car"]}})
    assert none == {"hits": []}
    close = await call(session, "recall", query="my cat is called Miso", min_similarity=0.99)
    assert [h["id"] for h in close["hits"]] == [cat["id"]]

    got = await call(session, "get_memories", ids=[sky["id"], "nope", cat["id"], sky["id"]])
    assert [m["id"] for m in got["memories"]] == [sky["id"], cat["id"]]
    assert got["memories"][0] == {
        "id": sky["id"],
        "text": "the sky over Lisbon is blue",
        "source": None,
        "metadata": {},
        "occurred_at": got["memories"][0]["occurred_at"],
        "conversation": None,
        "version": 1,
        "valid_from": got["memories"][0]["occurred_at"],
        "valid_to": None,
        "expires_at": None,
    }
    assert got["missing"] == ["nope"]

    stats = await call(session, "memory_stats")
    assert stats["entries"] == 2 and stats["evictions"] == 0
    assert stats["fill"] == pytest.approx(2 / stats["capacity"])
    assert stats["embedder"] == "hashing" and stats["backend"]
    assert "namespace" not in stats
    # Where memory lives, as `trio-recall stats` says it.
    assert stats["location"] == "this process (--in-memory)"
    # With a namespace, entries counts that namespace's memories only.
    assert (await call(session, "memory_stats", namespace="memory-default"))["entries"] == 2
    other = await call(session, "memory_stats", namespace="elsewhere")
    assert (other["entries"], other["namespace"]) == (0, "elsewhere")
    assert other["capacity"] == stats["capacity"]

    gone = await call(session, "forget", ids=[cat["id"], "nope", cat["id"]])
    assert gone == {"ids": [cat["id"]], "missing": ["nope"]}
    assert (await call(session, "forget", ids=[cat["id"]])) == {
        "ids": [],
        "missing": [cat["id"]],
    }
    assert (await call(session, "memory_stats"))["entries"] == 1
    # recall's floor drops a memory that shares nothing with the query; similarity
    # keeps the k nearest whatever they score.
    assert (await call(session, "recall", query="cat", k=10))["hits"] == []
    left = (await call(session, "recall", query="cat", k=10, mode="similarity"))["hits"]
    assert [h["id"] for h in left] == [sky["id"]]


async def test_every_tool_over_stdio() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            await round_trip(session)


def _imported(report: str) -> set[str]:
    """The modules that Python's ``-X importtime`` report (``PYTHONPROFILEIMPORTTIME``)
    names: every import of the process so far, from any thread."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in report.splitlines()
        if line.startswith("import time:") and "cumulative" not in line
    }


async def test_the_handshake_and_the_tools_that_embed_nothing_load_no_model() -> None:
    """With MiniLM (the default), the handshake, ``memory_stats``, ``get_memories``,
    ``memory_history`` and ``forget`` import neither its tokenizer nor a runtime; the
    first ``recall`` does, seen through the same report of the same process."""
    require_extra("embed")
    model = {"tokenizers", "onnxruntime", "onnx", "safetensors"}
    command = server_command("--in-memory", "--embedder", "minilm")
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={**_env(), "PYTHONPROFILEIMPORTTIME": "1"},
        cwd=ROOT,
    )
    with trio.fail_after(120), tempfile.TemporaryFile("w+") as errlog:

        def report() -> set[str]:
            errlog.seek(0)
            return _imported(errlog.read())

        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            assert len((await session.list_tools()).tools) == len(TOOLS)
            assert (await call(session, "memory_stats"))["embedder"] == "minilm"
            assert (await call(session, "get_memories", ids=["nope"]))["missing"] == ["nope"]
            assert (await call(session, "memory_history", id="nope"))["versions"] == []
            assert (await call(session, "forget", ids=["nope"]))["missing"] == ["nope"]
            before = report()
            assert "actors.cli._mcp" in before  # the report is there at all
            assert not before & model, sorted(before & model)
            assert (await call(session, "recall", query="where is the boat"))["hits"] == []
            after = report()
    assert "tokenizers" in after and after & {"onnxruntime", "safetensors"}


async def test_memories_keep_their_time_and_conversation() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            may = await call(
                session,
                "remember",
                text="Ana: the kiln is fixed",
                occurred_at="2023-05-08T20:30:00+02:00",
                conversation="pottery",
            )
            june = await call(
                session, "remember", text="Ben: the kiln broke again", occurred_at="2023-06-01"
            )
            # The time and the conversation are part of what makes a memory: the same
            # words said again later are a second memory (when duplicates are kept:
            # dedupe "exact", the default, would answer the first one's id).
            later = await call(
                session,
                "remember",
                text="Ana: the kiln is fixed",
                occurred_at="2023-07-01",
                dedupe="none",
            )
            assert len({may["id"], june["id"], later["id"]}) == 3
            got = await call(session, "get_memories", ids=[may["id"], june["id"]])
            assert [(m["occurred_at"], m["conversation"]) for m in got["memories"]] == [
                ("2023-05-08T18:30:00+00:00", "pottery"),
                ("2023-06-01T00:00:00+00:00", None),
            ]

            async def found(**arguments: Any) -> list[str]:
                result = await call(session, "recall", query="kiln", k=5, **arguments)
                return sorted(h["id"] for h in result["hits"])

            for mode in ("similarity", "recall"):
                assert await found(mode=mode, since="2023-06-01") == sorted(
                    [june["id"], later["id"]]
                )
                # until is exclusive; a date is midnight UTC.
                assert await found(mode=mode, until="2023-06-01") == [may["id"]]
                window = await found(mode=mode, since="2023-05-09", until="2023-06-02")
                assert window == [june["id"]]
            hit = (await call(session, "recall", query="kiln", k=1, until="2023-06-01"))["hits"]
            assert (hit[0]["occurred_at"], hit[0]["conversation"]) == (
                "2023-05-08T18:30:00+00:00",
                "pottery",
            )


# (tool, arguments, what the one-line error must say)
BAD_CALLS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("recall", {"query": "cat", "k": 0}, ["k is 0", "expected an int > 0"]),
    ("recall", {"query": "cat", "k": -3}, ["k is -3", "> 0"]),
    ("recall", {"query": "cat", "k": "5"}, ["k is '5' (str)", "expected an int"]),
    ("recall", {"query": "cat", "k": 2.5}, ["k is 2.5 (float)", "expected an int"]),
    ("recall", {"query": "cat", "k": True}, ["k is True (bool)", "expected an int"]),
    ("recall", {"query": "cat", "filter": {"kind": {"$regex": "c.*"}}}, ["filter", "'$regex'"]),
    ("recall", {"query": "cat", "filter": {"$nand": []}}, ["filter", "'$nand'"]),
    ("recall", {"query": "cat", "filter": {"n": {"$in": "x"}}}, ["filter", "$in"]),
    ("recall", {"query": "cat", "filter": "kind=pet"}, ["filter is 'kind=pet' (str)"]),
    ("recall", {"query": "cat", "min_similarity": 1.5}, ["min_similarity is 1.5", "[-1, 1]"]),
    ("recall", {"query": "cat", "min_similarity": "high"}, ["min_similarity is 'high'"]),
    ("recall", {"query": ""}, ["query is ''", "expected some non-blank text"]),
    ("recall", {"query": 7}, ["query is 7 (int)", "expected a str"]),
    ("recall", {"k": 3}, ["recall needs the argument 'query'"]),
    ("recall", {"query": "cat", "limit": 3}, ["recall takes no argument 'limit'", "k"]),
    ("recall", {"query": "cat", "namespace": ""}, ["namespace is ''", "non-blank"]),
    ("recall", {"query": "cat", "namespace": 12}, ["namespace is 12 (int)", "str"]),
    ("recall", {"query": "cat", "namespace": "a\x00b"}, ["namespace is", "control"]),
    ("recall", {"query": "cat", "namespace": "n" * 300}, ["namespace is 300 bytes", "256"]),
    ("remember", {"text": "x" * 2_000_000}, ["text is 2000000 bytes", "max_entry_bytes"]),
    # Under the cap alone, over it with its metadata: the store's own count says so.
    (
        "remember",
        {"text": "x" * (MAX_ENTRY_BYTES - 10), "metadata": {"note": "y" * 100}},
        ["text, metadata and source count", f"at most {MAX_ENTRY_BYTES} bytes"],
    ),
    ("remember", {"text": "   "}, ["text is '   '", "non-blank"]),
    ("remember", {"text": ["a", "b"]}, ["text is ['a', 'b'] (list)", "expected a str"]),
    ("remember", {"text": "hi", "metadata": "pet"}, ["metadata is 'pet' (str)", "JSON object"]),
    ("remember", {"text": "hi", "metadata": [1]}, ["metadata is [1] (list)", "JSON object"]),
    ("remember", {"text": "hi", "source": ""}, ["source is ''", "non-blank"]),
    ("remember", {"metadata": {}}, ["remember needs the argument 'text'"]),
    (
        "remember",
        {"text": "hi", "occurred_at": "yesterday"},
        ["occurred_at is 'yesterday'", "ISO"],
    ),
    ("remember", {"text": "hi", "occurred_at": 1700000000}, ["occurred_at is 1700000000 (int)"]),
    ("remember", {"text": "hi", "conversation": ""}, ["conversation is ''", "non-blank"]),
    ("remember", {"text": "hi", "conversation": 3}, ["conversation is 3 (int)", "str"]),
    ("remember", {"text": "hi", "conversation": "a\nb"}, ["conversation is", "control"]),
    ("recall", {"query": "cat", "mode": "fuzzy"}, ["mode is 'fuzzy'", "recall, similarity"]),
    ("recall", {"query": "cat", "mode": None}, ["mode is None", "expected one of"]),
    ("recall", {"query": "cat", "since": "soon"}, ["since is 'soon'", "ISO 8601"]),
    ("recall", {"query": "cat", "until": 2023}, ["until is 2023 (int)", "ISO 8601"]),
    (
        "recall",
        {"query": "cat", "since": "2024-01-02", "until": "2024-01-01"},
        ["since is 2024-01-02T00:00:00+00:00", "since <= until"],
    ),
    (
        "recall",
        {"query": "cat", "mode": "bm25", "min_similarity": 0.5},
        ["min_similarity is 0.5 and mode is 'bm25'", "takes no floor"],
    ),
    ("forget", {"ids": "abc"}, ["ids is 'abc' (str)", "expected a list"]),
    ("forget", {"ids": [1]}, ["ids[0] is 1 (int)", "non-empty str"]),
    ("forget", {"ids": ["ok", ""]}, ["ids[1] is ''", "non-empty str"]),
    ("forget", {"ids": ["a"] * 10_001}, ["ids has 10001 items", "at most 10000"]),
    ("get_memories", {"ids": None}, ["ids is None", "expected a list"]),
    ("get_memories", {"ids": ["a"], "namespace": ["x"]}, ["namespace is ['x'] (list)"]),
    ("memory_stats", {"verbose": True}, ["memory_stats takes no argument 'verbose'"]),
    ("memory_stats", {"namespace": ""}, ["namespace is ''"]),
    ("remember", {"text": "hi", "dedupe": "fuzzy"}, ["dedupe is 'fuzzy'", "exact, near, none"]),
    ("remember", {"text": "hi", "dedupe": None}, ["dedupe is None", "exact, near, none"]),
    ("remember", {"text": "hi", "expires_at": "later"}, ["expires_at is 'later'", "ISO 8601"]),
    ("remember", {"text": "hi", "ttl_seconds": 0}, ["ttl_seconds is 0", "> 0"]),
    ("remember", {"text": "hi", "ttl_seconds": -5}, ["ttl_seconds is -5", "> 0"]),
    ("remember", {"text": "hi", "ttl_seconds": "60"}, ["ttl_seconds is '60' (str)", "number"]),
    ("remember", {"text": "hi", "ttl_seconds": True}, ["ttl_seconds is True (bool)", "number"]),
    ("remember", {"text": "hi", "ttl_seconds": 1e12}, ["ttl_seconds is 1000000000000.0", "years"]),
    (
        "remember",
        {"text": "hi", "ttl_seconds": 60, "expires_at": "2030-01-01"},
        ["expires_at is '2030-01-01' and ttl_seconds is 60", "not both"],
    ),
    ("recall", {"query": "cat", "as_of": "then"}, ["as_of is 'then'", "ISO 8601"]),
    ("get_memories", {"ids": ["a"], "as_of": 5}, ["as_of is 5 (int)", "ISO 8601"]),
    ("update_memory", {"text": "x"}, ["update_memory needs the argument 'id'"]),
    ("update_memory", {"id": "x"}, ["neither text nor metadata"]),
    ("update_memory", {"id": 3, "text": "x"}, ["id is 3 (int)", "non-empty str"]),
    ("update_memory", {"id": "nope", "text": "x"}, ["id is 'nope'", "no current memory"]),
    ("update_memory", {"id": "x", "text": ""}, ["text is ''", "non-blank"]),
    ("update_memory", {"id": "x", "metadata": [1]}, ["metadata is [1] (list)", "JSON object"]),
    ("update_memory", {"id": "x", "text": "y", "valid_from": "now"}, ["valid_from is 'now'"]),
    ("forget", {}, ["forget was given no ids, no filter and no before"]),
    ("forget", {"filter": {}}, ["forget was given no ids, no filter and no before"]),
    ("forget", {"ids": ["a"], "filter": {"k": 1}}, ["ids and a filter or before", "either"]),
    ("forget", {"ids": ["a"], "before": "2024-01-01"}, ["ids and a filter or before"]),
    ("forget", {"filter": {"k": {"$regex": "x"}}}, ["filter", "'$regex'"]),
    ("forget", {"before": "yesterday"}, ["before is 'yesterday'", "ISO 8601"]),
    ("forget", {"filter": "all"}, ["filter is 'all' (str)", "JSON object"]),
    ("memory_history", {}, ["memory_history needs the argument 'id'"]),
    ("memory_history", {"id": ""}, ["id is ''", "non-blank"]),
    ("remember_everything", {}, ["there is no tool 'remember_everything'", "recall"]),
]


async def test_bad_arguments_are_tool_errors_and_the_server_goes_on() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            kept = await call(session, "remember", text="the server keeps serving")
            for tool, arguments, says in BAD_CALLS:
                text = await refused(session, tool, **arguments)
                for part in says:
                    assert part in text, f"{tool}({arguments}): {text!r} lacks {part!r}"
                # Nothing half applied, and the next call is served.
                stats = await call(session, "memory_stats")
                assert stats["entries"] == 1, (tool, arguments)
            hits = (await call(session, "recall", query="keeps serving", k=1))["hits"]
            assert [h["id"] for h in hits] == [kept["id"]]


async def test_namespaces_are_isolated() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            alice = await call(session, "remember", text="hint: tea", namespace="alice")
            bob = await call(session, "remember", text="hint: coffee", namespace="bob")
            plain = await call(session, "remember", text="hint: water")
            # The same content in two namespaces is two memories with one id.
            twin = await call(session, "remember", text="hint: tea", namespace="bob")
            assert twin["id"] == alice["id"]

            def ids(result: dict[str, Any]) -> set[str]:
                return {h["id"] for h in result["hits"]}

            seen = await call(session, "recall", query="hint", k=100, namespace="alice")
            assert [h["text"] for h in seen["hits"]] == ["hint: tea"]
            seen_bob = await call(session, "recall", query="hint", k=100, namespace="bob")
            assert {h["text"] for h in seen_bob["hits"]} == {
                "hint: coffee",
                "hint: tea",
            }
            assert ids(await call(session, "recall", query="hint", k=100)) == {plain["id"]}
            # Reads and deletes never cross namespaces, even with the other one's ids.
            got = await call(session, "get_memories", ids=[bob["id"]], namespace="alice")
            assert got == {"memories": [], "missing": [bob["id"]]}
            assert (
                await call(session, "forget", ids=[bob["id"], plain["id"]], namespace="alice")
            ) == {
                "ids": [],
                "missing": [bob["id"], plain["id"]],
            }
            assert (await call(session, "forget", ids=[alice["id"]], namespace="bob")) == {
                "ids": [alice["id"]],
                "missing": [],
            }
            # Forgetting bob's twin left alice's memory alone.
            got = await call(session, "get_memories", ids=[alice["id"]], namespace="alice")
            assert [m["text"] for m in got["memories"]] == ["hint: tea"]
            assert (await call(session, "memory_stats"))["entries"] == 3


async def test_memory_over_time_over_stdio() -> None:
    """Duplicates, updates with history, as_of reads and expiry, through the tools."""
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            flat = await call(
                session, "remember", text="Ana lives in Lisbon", metadata={"topic": "home"}
            )
            # Another metadata, the same text: still a duplicate of the memory there.
            same = await call(session, "remember", text="Ana lives in Lisbon", source="chat")
            assert same == {"id": flat["id"], "duplicate": True}
            kept = await call(session, "remember", text="Ana lives in Lisbon", dedupe="none",
                              metadata={"n": 2})  # fmt: skip
            assert kept["duplicate"] is False and kept["id"] != flat["id"]
            await call(session, "forget", ids=[kept["id"]])
            # near: a text nearly the same in meaning (the hashing embedder: the same
            # words in another case and order).
            near = await call(session, "remember", text="lisbon: Ana lives in", dedupe="near")
            assert near == {"id": flat["id"], "duplicate": True}
            assert (await call(session, "memory_stats"))["entries"] == 1
            first = (await call(session, "get_memories", ids=[flat["id"]]))["memories"][0]

            moved = await call(session, "update_memory", id=flat["id"], text="Ana moved to Porto")
            assert set(moved) == {"id", "version", "valid_from"}
            assert (moved["id"], moved["version"]) == (flat["id"], 2)
            assert moved["valid_from"] > first["valid_from"]
            # Reads see the current version only; as_of sees the one valid then.
            hits = (await call(session, "recall", query="where does Ana live", k=5))["hits"]
            assert [(h["id"], h["text"], h["version"]) for h in hits] == [
                (flat["id"], "Ana moved to Porto", 2)
            ]
            assert hits[0]["metadata"] == {"topic": "home"}  # kept: update gave none
            assert not (await call(session, "recall", query="Lisbon", mode="bm25"))["hits"]
            then = first["valid_from"]
            old = await call(session, "recall", query="Lisbon", mode="bm25", as_of=then)
            assert [(h["text"], h["version"], h["valid_to"]) for h in old["hits"]] == [
                ("Ana lives in Lisbon", 1, moved["valid_from"])
            ]
            got = await call(session, "get_memories", ids=[flat["id"]], as_of=then)
            assert [m["text"] for m in got["memories"]] == ["Ana lives in Lisbon"]
            before = await call(session, "get_memories", ids=[flat["id"]], as_of="2000-01-01")
            assert before == {"memories": [], "missing": [flat["id"]]}
            # An explicit valid_from must come after the current version's.
            late = await refused(
                session, "update_memory", id=flat["id"], text="x", valid_from="2000-01-01"
            )
            assert "valid_from" in late and "later" in late
            third = await call(
                session, "update_memory", id=flat["id"], metadata={"topic": "work"},
                valid_from="2999-01-01",
            )  # fmt: skip
            assert (third["version"], third["valid_from"]) == (3, "2999-01-01T00:00:00+00:00")
            history = (await call(session, "memory_history", id=flat["id"]))["versions"]
            assert [(v["version"], v["text"], v["metadata"]) for v in history] == [
                (1, "Ana lives in Lisbon", {"topic": "home"}),
                (2, "Ana moved to Porto", {"topic": "home"}),
                (3, "Ana moved to Porto", {"topic": "work"}),
            ]
            assert [v["valid_to"] for v in history] == [
                moved["valid_from"], "2999-01-01T00:00:00+00:00", None
            ]  # fmt: skip
            assert (await call(session, "memory_history", id="nope")) == {"versions": []}

            # Expiry: a memory past its expires_at is gone from every read at once.
            soon = await call(session, "remember", text="the gate code is 4471",
                              ttl_seconds=3600)  # fmt: skip
            (held,) = (await call(session, "get_memories", ids=[soon["id"]]))["memories"]
            assert held["expires_at"] > held["occurred_at"]
            past = await call(session, "remember", text="the old gate code was 1234",
                              expires_at="2001-01-01")  # fmt: skip
            for mode in ("recall", "similarity", "bm25"):
                found = (await call(session, "recall", query="gate code", mode=mode))["hits"]
                seen = [h["id"] for h in found]
                assert soon["id"] in seen and past["id"] not in seen, mode
            assert (await call(session, "get_memories", ids=[past["id"]]))["memories"] == []
            assert (await call(session, "memory_history", id=past["id"]))["versions"] == []


async def test_remembering_a_memorys_old_content_is_its_next_version() -> None:
    """The id is the content's hash, and an update keeps the id: remembering the first
    content again writes a version (the history keeps all three), never a silent
    replacement of the current one."""
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            first = await call(session, "remember", text="the office is on floor 3")
            await call(session, "update_memory", id=first["id"], text="the office is on floor 5")
            back = await call(session, "remember", text="the office is on floor 3")
            assert back == {"id": first["id"], "duplicate": False}
            versions = (await call(session, "memory_history", id=first["id"]))["versions"]
            assert [(v["version"], v["text"]) for v in versions] == [
                (1, "the office is on floor 3"),
                (2, "the office is on floor 5"),
                (3, "the office is on floor 3"),
            ]
            again = await call(session, "remember", text="the office is on floor 3")
            assert again == {"id": first["id"], "duplicate": True}
            hits = (await call(session, "recall", query="office floor", mode="bm25"))["hits"]
            assert [(h["text"], h["version"]) for h in hits] == [("the office is on floor 3", 3)]


async def forgotten_nowhere(
    session: ClientSession, texts: list[str], ids: list[str], then: str
) -> None:
    """No read tool returns any of ``texts`` (or ``ids``), in any mode, now or as of
    ``then`` (when an older version was valid) and a later time."""
    for query in texts:
        for mode in ("recall", "similarity", "bm25", "hybrid", "mmr"):
            for as_of in ({}, {"as_of": then}, {"as_of": "2999-01-01"}):
                hits = await call(session, "recall", query=query, k=50, mode=mode, **as_of)
                found = {(h["id"], h["text"]) for h in hits["hits"]}
                assert not {h for h in found if h[0] in ids or h[1] in texts}, (mode, found)
    got = await call(session, "get_memories", ids=ids)
    assert got == {"memories": [], "missing": ids}
    for memory_id in ids:
        assert (await call(session, "memory_history", id=memory_id)) == {"versions": []}


async def test_forget_by_filter_and_before_leaves_no_trace_over_mcp() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY) as session:
            ana = [
                await call(session, "remember", text=text, metadata={"user": "ana"})
                for text in ("Ana's pin is 9981", "Ana likes zebrafish")
            ]
            (v1,) = (await call(session, "get_memories", ids=[ana[0]["id"]]))["memories"]
            await call(session, "update_memory", id=ana[0]["id"], text="Ana's pin is 9982")
            old = await call(session, "remember", text="the quokka note from 2019",
                             occurred_at="2019-05-01")  # fmt: skip
            bob = await call(session, "remember", text="Bob likes zebrafish too",
                             metadata={"user": "bob"})  # fmt: skip
            gone = await call(session, "forget", filter={"user": "ana"})
            assert sorted(gone["ids"]) == sorted(m["id"] for m in ana) and gone["missing"] == []
            early = await call(session, "forget", before="2020-01-01")
            assert early == {"ids": [old["id"]], "missing": []}
            # Nothing matches now: an empty answer, not an error.
            assert await call(session, "forget", filter={"user": "ana"}) == {
                "ids": [], "missing": []
            }  # fmt: skip
            texts = ["Ana's pin is 9981", "Ana's pin is 9982", "Ana likes zebrafish",
                     "the quokka note from 2019"]  # fmt: skip
            ids = [*(m["id"] for m in ana), old["id"]]
            await forgotten_nowhere(session, texts, ids, v1["valid_from"])
            # The rest is untouched: the one zebrafish left is Bob's.
            hits = (await call(session, "recall", query="zebrafish", mode="bm25"))["hits"]
            assert [h["id"] for h in hits] == [bob["id"]]
            assert (await call(session, "memory_stats"))["entries"] == 1


async def test_namespace_flag_sets_the_servers_default_namespace() -> None:
    with trio.fail_after(120):
        async with stdio_session(*IN_MEMORY, "--namespace", "work") as session:
            note = await call(session, "remember", text="standup is at nine")
            assert (await call(session, "get_memories", ids=[note["id"]], namespace="work"))[
                "memories"
            ]
            assert (await call(session, "recall", query="standup", namespace="memory-default"))[
                "hits"
            ] == []
            assert [h["id"] for h in (await call(session, "recall", query="standup"))["hits"]] == [
                note["id"]
            ]
        # A bad --namespace stops the server at launch with one line (exit status 2).
        done = await trio.run_process(
            server_command(*IN_MEMORY, "--namespace", "a\tb"),
            env={**os.environ, **_env()},
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.decode().count("\n") == 1 and "namespace is" in done.stderr.decode()


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh ``--data`` directory under its own ``mktemp -d`` (as root, the server's
    user is given search permission on the data directory's parents: ``_embedded``)."""
    # A skip, or a failure where TRIO_RECALL_PG_REQUIRED=1 (CI must run this).
    require_extra("pg")
    root = Path(tempfile.mkdtemp(prefix="trio-recall-mcp-"))
    try:
        yield root / "data"
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_memories_survive_a_server_restart_on_one_data_dir(data_dir: Path) -> None:
    args = ["--data", str(data_dir), "--embedder", "hashing"]
    with trio.fail_after(300):
        async with stdio_session(*args) as session:
            kept = await call(
                session, "remember", text="the boat is moored at pier 9", metadata={"n": 9}
            )
            gone = await call(session, "remember", text="the spare key is under the mat")
            await call(session, "remember", text="a note for carol", namespace="carol")
            assert (await call(session, "forget", ids=[gone["id"]]))["ids"] == [gone["id"]]
            stats = await call(session, "memory_stats")
            assert stats["backend"] and stats["entries"] == 2
        # The first server has exited (stdin closed); a second one opens the same directory.
        async with stdio_session(*args) as session:
            hits = (await call(session, "recall", query="where is the boat", k=5))["hits"]
            assert [(h["id"], h["text"], h["metadata"]) for h in hits] == [
                (kept["id"], "the boat is moored at pier 9", {"n": 9})
            ]
            got = await call(session, "get_memories", ids=[kept["id"], gone["id"]])
            assert got["missing"] == [gone["id"]]
            carol = await call(session, "recall", query="note", namespace="carol")
            assert [h["text"] for h in carol["hits"]] == ["a note for carol"]
            assert (await call(session, "memory_stats"))["entries"] == 2


async def test_a_running_server_starts_its_killed_postgres_again(data_dir: Path) -> None:
    """kill -9 of the embedded PostgreSQL under a running ``trio-recall mcp``: the server
    starts it again (as the next command would), says so on stderr, and serves on."""
    from actors.cli._embedded import postmaster_pid, running

    args = ["--data", str(data_dir), "--embedder", "hashing"]
    with trio.fail_after(300), tempfile.TemporaryFile("w+") as errlog:
        async with stdio_session(*args, errlog=errlog) as session:
            kept = await call(session, "remember", text="the boat is moored at pier 9")
            first = postmaster_pid(data_dir)
            assert first is not None
            os.kill(first, signal.SIGKILL)
            # Another process's state: polled.
            while postmaster_pid(data_dir) in (None, first):  # noqa: ASYNC110
                await trio.sleep(0.1)
            # The acknowledged memory survived the crash, and writes work again.
            hits = (await call(session, "recall", query="where is the boat"))["hits"]
            assert [hit["id"] for hit in hits] == [kept["id"]]
            await call(session, "remember", text="the oars are in the shed")
            assert (await call(session, "memory_stats"))["entries"] == 2
        errlog.seek(0)
        said = errlog.read()
    assert "had stopped; starting it again" in said and "runs again" in said, said
    # --data named a directory that was not there: mcp made it, and said so once.
    assert said.count(f"trio-recall: created a new memory in {data_dir}\n") == 1, said
    assert not running(data_dir)


async def test_a_stored_lone_surrogate_reaches_the_client_as_u_fffd(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    # JSON lines may hold a lone surrogate ("\\ud83d", half an emoji) and the store keeps
    # it exactly; MCP's UTF-8 JSON cannot carry one, so the server answers with U+FFFD
    # in its place instead of failing to encode the answer (and dropping the session).
    where = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    lines = tmp_path / "memories.jsonl"
    lines.write_text('{"text": "half an emoji \\ud83d", "metadata": {"k\\ud83d": "v"}}\n')
    with trio.fail_after(120):
        imported = await trio.run_process(
            trio_recall("import", str(lines), *where),
            env={**os.environ, **_env()},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert imported.returncode == 0, imported.stderr.decode()
        async with stdio_session(*where) as session:
            (hit,) = (await call(session, "recall", query="half an emoji"))["hits"]
            assert hit["text"] == "half an emoji \ufffd"
            assert hit["metadata"] == {"k\ufffd": "v"}
            got = await call(session, "get_memories", ids=[hit["id"]])
            assert got["memories"][0]["text"] == "half an emoji \ufffd"


async def test_forgotten_over_mcp_is_not_exported_on_pg(
    tmp_path: Path, pg_dsn: str, pg_table: str
) -> None:
    """A forget over MCP, on PostgreSQL, then ``trio-recall export`` of the same table:
    the forgotten memory (both versions) is in no line, and the server's reads agree."""
    where = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    with trio.fail_after(240):
        async with stdio_session(*where) as session:
            pin = await call(session, "remember", text="the safe's pin is 5150",
                             metadata={"user": "ana"})  # fmt: skip
            (v1,) = (await call(session, "get_memories", ids=[pin["id"]]))["memories"]
            await call(session, "update_memory", id=pin["id"], text="the safe's pin is 5151")
            keep = await call(session, "remember", text="the safe is in the attic")
            versions = (await call(session, "memory_history", id=pin["id"]))["versions"]
            assert [v["version"] for v in versions] == [1, 2]
            assert (await call(session, "forget", filter={"user": "ana"}))["ids"] == [pin["id"]]
            texts = ["the safe's pin is 5150", "the safe's pin is 5151"]
            await forgotten_nowhere(session, texts, [pin["id"]], v1["valid_from"])
        exported = await trio.run_process(
            trio_recall("export", "-", *where),
            env={**os.environ, **_env()},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert exported.returncode == 0, exported.stderr.decode()
    lines = [json.loads(line) for line in exported.stdout.decode().splitlines()]
    assert [(m["id"], m["text"]) for m in lines] == [(keep["id"], "the safe is in the attic")]
    assert "5150" not in exported.stdout.decode() and "5151" not in exported.stdout.decode()


async def test_each_command_json_is_the_mcp_tools_structured_result(
    pg_dsn: str, pg_table: str
) -> None:
    """For the same data, each command's ``--json`` output (the console script) equals
    the structured result of the MCP tool of the same kind (the SDK's stdio client):
    search and recall (``{"hits"}``, every mode), history and memory_history
    (``{"versions"}``), stats and memory_stats, add and remember, update and
    update_memory, forget and forget (``{"ids", "missing"}``). The writes are compared
    in two namespaces, one written by each door, with the same arguments."""
    where = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]

    async def cli_json(*args: str, status: int = 0) -> Any:
        done = await trio.run_process(
            trio_recall(*args, *where, "--json"),
            env={**os.environ, **_env()},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == status, (args, done.returncode, done.stderr.decode())
        return json.loads(done.stdout)

    with trio.fail_after(300):
        shared = ["--namespace", "shared"]
        kiln = await cli_json(
            "add", "Ana: the kiln is fixed", "--at", "2023-05-08T20:30+02:00",
            "--conversation", "pottery", "--metadata", '{"topic": "craft"}', *shared,
        )  # fmt: skip
        await cli_json("add", "Ben: the kiln broke again", "--at", "2023-06-01",
                       "--conversation", "pottery", *shared)  # fmt: skip
        cat = await cli_json("add", "my cat is called Miso", "--source", "chat",
                             "--metadata", '{"kind": "pet"}', *shared)  # fmt: skip
        await cli_json("update", cat["id"], "--text", "my cat Miso likes the kiln", *shared)
        async with stdio_session(*where) as session:
            # Reads of the same data.
            for mode in ("recall", "similarity", "bm25", "hybrid", "mmr"):
                by_cli = await cli_json("search", "kiln", "--mode", mode, "-k", "5", *shared)
                by_mcp = await call(session, "recall", query="kiln", mode=mode, k=5,
                                    namespace="shared")  # fmt: skip
                assert by_cli == by_mcp, mode
                assert set(by_cli) == {"hits"} and by_cli["hits"], mode
            narrowed = ["--filter", '{"topic": "craft"}', "--since", "2023-05-01"]
            assert await cli_json("search", "kiln", *narrowed, *shared) == await call(
                session, "recall", query="kiln", filter={"topic": "craft"},
                since="2023-05-01", namespace="shared",
            )  # fmt: skip
            assert kiln["id"] in {h["id"] for h in by_cli["hits"]}
            then = await call(session, "memory_history", id=cat["id"], namespace="shared")
            assert [v["version"] for v in then["versions"]] == [1, 2]
            assert await cli_json("history", cat["id"], *shared) == then
            old = ["--as-of", then["versions"][0]["valid_from"], "--mode", "similarity"]
            assert await cli_json("search", "cat", *old, *shared) == await call(
                session, "recall", query="cat", mode="similarity", namespace="shared",
                as_of=then["versions"][0]["valid_from"],
            )  # fmt: skip
            # A memory that is not there: exit status 1, and the same empty object.
            assert await cli_json("history", "nope", *shared, status=1) == await call(
                session, "memory_history", id="nope", namespace="shared"
            )
            stats = await call(session, "memory_stats", namespace="shared")
            assert await cli_json("stats", *shared) == stats
            assert stats["entries"] == 3 and stats["location"]
            assert await cli_json("stats") == await call(session, "memory_stats")
            # Writes: the same call through each door, in a namespace of its own.
            note = ("a fact to keep", "--at", "2024-02-02")
            added = await cli_json("add", *note, "--namespace", "by-cli")
            remembered = await call(session, "remember", text="a fact to keep",
                                    occurred_at="2024-02-02", namespace="by-mcp")  # fmt: skip
            assert added == remembered and added["duplicate"] is False
            assert await cli_json("add", *note, "--namespace", "by-cli") == await call(
                session, "remember", text="a fact to keep", occurred_at="2024-02-02",
                namespace="by-mcp",
            )  # fmt: skip
            changed = ("--text", "a fact, changed", "--valid-from", "2024-03-03")
            assert await cli_json("update", added["id"], *changed, "--namespace", "by-cli") == (
                await call(session, "update_memory", id=added["id"], text="a fact, changed",
                           valid_from="2024-03-03", namespace="by-mcp")
            )  # fmt: skip
            gone = await cli_json("forget", added["id"], "nope", "--namespace", "by-cli",
                                  status=1)  # fmt: skip
            forgotten = await call(session, "forget", ids=[added["id"], "nope"],
                                   namespace="by-mcp")  # fmt: skip
            assert gone == forgotten == {"ids": [added["id"]], "missing": ["nope"]}


@asynccontextmanager
async def http_server(
    *args: str, bind: str = "127.0.0.1:0", env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, trio.Process]]:
    """``trio-recall mcp --http BIND ARGS`` (with ``env`` added to its environment), and
    the URL it says it serves on."""
    command = server_command("--http", bind, *args)
    environ = {**os.environ, **_env(), **(env or {})}
    process = await trio.lowlevel.open_process(
        command, env=environ, cwd=ROOT, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    said = b""
    try:
        while (found := re.search(rb"serving on (http://\S+/mcp)", said)) is None:
            chunk = await process.stderr.receive_some()
            assert chunk, f"the server exited before serving: {said.decode()}"
            said += chunk
        yield found.group(1).decode(), process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


@asynccontextmanager
async def http_session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized client session with the server at ``url`` (streamable HTTP),
    sending ``Authorization: Bearer TOKEN`` when a token is given."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    # The SDK's own timeouts (create_mcp_http_client): a response stream may stay open.
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


# The SDK's HTTP client iterates httpx2/httpcore2 response streams through async
# generators that it leaves to trio's finalizer, which warns (a client-side leak, not the
# server's: pydantic/httpx2#1036, encode/httpx#3686). Only those warnings are ignored.
http_client_leaks = pytest.mark.filterwarnings(
    "ignore:Async generator 'httpx2\\.:ResourceWarning",
    "ignore:Async generator 'httpcore2\\.:ResourceWarning",
)
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def assert_rebinding_refused(url: str) -> None:
    """DNS rebinding: a page elsewhere cannot reach a loopback server (a foreign
    ``Host`` or ``Origin`` header is refused)."""
    async with httpx.AsyncClient() as http:
        foreign_host = await http.post(url, json=PING, headers={**ACCEPT, "Host": "evil.example"})
        foreign_origin = await http.post(
            url, json=PING, headers={**ACCEPT, "Origin": "http://evil.example"}
        )
    assert foreign_host.status_code == 421
    assert foreign_origin.status_code == 403


@http_client_leaks
async def test_streamable_http_round_trip() -> None:
    with trio.fail_after(120):
        async with http_server(*IN_MEMORY) as (url, process):
            assert url.startswith("http://127.0.0.1:")
            async with http_session(url) as session:
                await round_trip(session)
                text = await refused(session, "recall", query="cat", k=0)
                assert "k is 0" in text
                await call(session, "memory_stats")
            await assert_rebinding_refused(url)
            # A second client sees the first one's memories: one store behind the port.
            async with http_session(url) as session:
                assert (await call(session, "memory_stats"))["entries"] == 1
            # SIGTERM ends the server cleanly (the command's status after a signal).
            process.send_signal(signal.SIGTERM)
            await process.wait()
            assert process.returncode == 128 + signal.SIGTERM


def write_token(path: Path, token: str, mode: int = 0o600) -> Path:
    path.write_text(token + "\n")  # a final newline, as `echo` leaves it, is not the token's
    path.chmod(mode)
    return path


TOKEN = "1f0e6d4c-the-right-token-9a8b"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
REMEMBER = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "remember", "arguments": {"text": "planted without the token"}},
}


@http_client_leaks
async def test_http_with_a_token_answers_401_without_it(tmp_path: Path) -> None:
    token_file = write_token(tmp_path / "token", TOKEN)
    # --token-file wins over the environment's token.
    env = {"TRIO_RECALL_TOKEN": "the-environments-token"}
    with trio.fail_after(120):
        async with (
            http_server(*IN_MEMORY, "--token-file", str(token_file), env=env) as (url, _),
            httpx.AsyncClient() as http,
        ):
            bearer = {**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
            opened = await http.post(url, json=INITIALIZE, headers=bearer)
            assert opened.status_code == 200, opened.text
            session_id = opened.headers["mcp-session-id"]
            wrong_tokens = [
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": f"Bearer {TOKEN[:-1]}"},
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": "Bearer the-environments-token"},
                {"Authorization": "Bearer"},
            ]
            for headers in wrong_tokens:
                for body in (INITIALIZE, REMEMBER):
                    # A session id opened with the token does not stand in for it.
                    sent = {**ACCEPT, "mcp-session-id": session_id, **headers}
                    answer = await http.post(url, json=body, headers=sent)
                    assert answer.status_code == 401, (headers, answer.text)
                    # Its body unread, the connection closes: the answer says so, or
                    # the next request on it races the close (a RemoteProtocolError).
                    assert answer.headers["connection"] == "close"
                    challenge = answer.headers["www-authenticate"]
                    assert challenge.startswith('Bearer realm="trio-recall"'), challenge
                    assert ('error="invalid_token"' in challenge) == bool(headers), challenge
                for method in (http.get, http.delete):
                    refused = await method(url, headers={**ACCEPT, **headers})
                    assert refused.status_code == 401
            # Nothing reached the store, and the server serves the right token.
            async with http_session(url, token=TOKEN) as session:
                assert (await call(session, "memory_stats"))["entries"] == 0
                await call(session, "remember", text="stored with the token")
                assert (await call(session, "memory_stats"))["entries"] == 1


@http_client_leaks
async def test_http_token_from_the_environment() -> None:
    with trio.fail_after(120):
        async with http_server(*IN_MEMORY, env={"TRIO_RECALL_TOKEN": TOKEN}) as (url, _):
            async with httpx.AsyncClient() as http:
                refused = await http.post(url, json=INITIALIZE, headers=ACCEPT)
            assert refused.status_code == 401
            async with http_session(url, token=TOKEN) as session:
                await call(session, "remember", text="via the environment's token")
                assert (await call(session, "memory_stats"))["entries"] == 1


async def test_http_refuses_to_start_without_a_usable_token(tmp_path: Path) -> None:
    """Each refusal is one line and exit status 2, before the store opens or a port is
    bound; a server that starts instead is stopped after a while and fails the case."""
    loose = write_token(tmp_path / "loose", TOKEN, mode=0o644)
    empty = write_token(tmp_path / "empty", "   ")
    good = write_token(tmp_path / "good", TOKEN)
    here = ["--http", "127.0.0.1:0"]
    cases: list[tuple[list[str], dict[str, str], list[str]]] = [
        (["--http", "0.0.0.0:0"], {}, ["0.0.0.0", "not loopback", "--token-file",
                                       "TRIO_RECALL_TOKEN"]),
        (["--http", "[::]:0"], {}, ["on ::", "not loopback"]),
        ([*here, "--token-file", str(loose)], {}, [str(loose), "0o644", "chmod 600"]),
        ([*here, "--token-file", str(empty)], {}, [str(empty), "empty"]),
        ([*here, "--token-file", str(tmp_path / "nope")], {}, ["No such file"]),
        (here, {"TRIO_RECALL_TOKEN": ""}, ["TRIO_RECALL_TOKEN is empty"]),
        (here, {"TRIO_RECALL_TOKEN": "two words"}, ["TRIO_RECALL_TOKEN", "space"]),
        (["--token-file", str(good)], {}, ["--token-file", "--http"]),
    ]  # fmt: skip
    for args, env, says in cases:
        with trio.move_on_after(60) as waited:
            done = await trio.run_process(
                server_command(*args, *IN_MEMORY),
                env={**os.environ, **_env(), **env},
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert not waited.cancelled_caught, f"{args} {env}: served instead of refusing"
        stderr = done.stderr.decode()
        assert done.returncode == 2, (args, env, done.returncode, stderr)
        assert stderr.count("\n") == 1 and not done.stdout, (args, env, stderr)
        for part in says:
            assert part in stderr, (args, env, part, stderr)


@http_client_leaks
async def test_every_loopback_address_gets_the_rebinding_protection() -> None:
    with trio.fail_after(120):
        async with http_server(*IN_MEMORY, bind="127.0.0.2:0") as (url, _):
            assert url.startswith("http://127.0.0.2:")
            await assert_rebinding_refused(url)
            async with http_session(url) as session:
                assert (await call(session, "memory_stats"))["entries"] == 0


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("::ffff:10.0.0.1", False),
        ("localhost.example.com", False),  # a name is not resolved: not loopback
        ("my-laptop", False),
    ],
)
def test_which_hosts_are_loopback(host: str, loopback: bool) -> None:
    from actors.cli._http_auth import is_loopback

    assert is_loopback(host) is loopback


# --- mcp --print-config: a host's configuration for this machine ----------------------


def _printed_command(host: str, printed: str) -> list[str]:
    """The command line a host would run, read out of ``--print-config HOST``'s output
    as the host reads it."""
    if host == "claude-code":
        words = shlex.split(printed)
        cut = words.index("--")
        assert words[:cut] == [
            "claude", "mcp", "add", "--transport", "stdio", "--scope", "user", "trio-recall",
        ]  # fmt: skip
        return words[cut + 1 :]
    config = json.loads(printed)
    assert list(config) == ["mcpServers"] and list(config["mcpServers"]) == ["trio-recall"]
    server = config["mcpServers"]["trio-recall"]
    assert set(server) == {"command", "args"} and isinstance(server["args"], list)
    return [server["command"], *server["args"]]


@pytest.mark.parametrize("host", ["claude-desktop", "claude-code", "cursor"])
def test_print_config_gives_an_absolute_command_that_runs(host: str, tmp_path: Path) -> None:
    data = tmp_path / "memory"
    relative = os.path.relpath(data)  # the host has another working directory
    printed = ok(
        "mcp", "--print-config", host, "--data", relative, "--namespace", "alice",
        "--embedder", "hashing", "--table", "notes",
    ).stdout  # fmt: skip
    command = _printed_command(host, printed)
    program = Path(command[0])
    assert program.is_absolute() and program.is_file() and os.access(program, os.X_OK)
    assert command[command.index("mcp") + 1 :] == [
        "--data", str(data), "--table", "notes", "--embedder", "hashing",
        "--namespace", "alice",
    ]  # fmt: skip
    assert not data.exists()  # it printed; nothing started, nothing was made
    # The very command line the host runs (its PATH aside) answers.
    shown = subprocess.run(
        [*command, "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"PATH": "/nonexistent", "HOME": str(tmp_path)},
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "--print-config" in shown.stdout


def test_print_config_without_a_place_names_none_and_refuses_http() -> None:
    command = _printed_command("cursor", ok("mcp", "--print-config", "cursor").stdout)
    assert command[-1] == "mcp" and Path(command[0]).is_absolute()
    refused = cli("mcp", "--print-config", "cursor", "--http", "8000")
    assert refused.returncode == 2 and "--print-config" in refused.stderr, refused.stderr
    unknown = cli("mcp", "--print-config", "vscode")
    assert unknown.returncode == 2 and "claude-desktop" in unknown.stderr, unknown.stderr


def test_print_config_turns_the_data_variable_into_an_absolute_data_flag() -> None:
    from actors.cli._host_config import launch_command
    from actors.cli._parser import build_parser

    args = build_parser().parse_args(["mcp", "--print-config", "cursor"])
    line = launch_command(args, {"TRIO_RECALL_DATA": "rel/mem"})
    assert line[line.index("mcp") + 1 :] == ["--data", os.path.abspath("rel/mem")]
    dsn = build_parser().parse_args(
        ["mcp", "--dsn", "postgresql:///x", "--print-config", "cursor"]
    )
    line = launch_command(dsn, {"TRIO_RECALL_DATA": "ignored"})
    assert line[line.index("mcp") + 1 :] == ["--dsn", "postgresql:///x"]
