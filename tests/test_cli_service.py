"""``MemoryService``, the one implementation of the command line's and the MCP server's
operations, in process on the in-memory backend: forgetting a whole namespace (``forget
--all``), and that no MCP tool can do it in one call. (The console script and the MCP
client run the same on PostgreSQL: ``tests/pg/test_cli.py``, ``tests/test_mcp.py``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from extras import needs_extra

from actors import HashingEmbedder, open_store
from actors.cli._service import MemoryService, ToolInputError
from protocol import VectorStoreConfig

DIM = 32
STORE = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)
TIMEOUT = 10


@asynccontextmanager
async def service() -> AsyncIterator[MemoryService]:
    async with open_store(STORE, HashingEmbedder(DIM)) as store:
        yield MemoryService(store, "hashing", "memory", location="this process (--in-memory)")


async def test_forget_namespace_empties_one_named_namespace() -> None:
    with trio.fail_after(TIMEOUT):
        async with service() as memory:
            alice = [(await memory.remember(f"alice {i}", namespace="alice"))["id"] for i in "ab"]
            await memory.update(alice[0], text="alice a, changed", namespace="alice")
            bob = await memory.remember("bob a", namespace="bob")
            mine = await memory.remember("a note of the default namespace")
            # No namespace is no "every namespace": refused, nothing forgotten.
            with pytest.raises(ToolInputError, match="given no namespace"):
                await memory.forget_namespace(None)
            with pytest.raises(ToolInputError, match="namespace is ''"):
                await memory.forget_namespace("")
            assert (await memory.memory_stats())["entries"] == 5  # the update's 2 versions
            gone = await memory.forget_namespace("alice")
            assert sorted(gone["ids"]) == sorted(alice) and gone["missing"] == []
            assert (await memory.memory_stats("alice"))["entries"] == 0
            assert (await memory.history(alice[0], namespace="alice")) == {"versions": []}
            kept = await memory.get_memories([bob["id"]], namespace="bob")
            texts = [found["text"] for found in kept["memories"]]
            assert kept["missing"] == [] and texts == ["bob a"]
            assert (await memory.get_memories([mine["id"]]))["missing"] == []
            assert await memory.forget_namespace("alice") == {"ids": [], "missing": []}


async def test_no_mcp_tool_forgets_a_namespace_in_one_call() -> None:
    """The decision (``actors/cli/_mcp.py``): emptying a namespace is the command
    line's, behind a confirmation; the forget tool refuses a call that selects nothing."""
    pytest.importorskip("mcp", reason=needs_extra("mcp", "mcp is not installed"))
    from actors.cli._mcp import TOOLS, call_tool

    with trio.fail_after(TIMEOUT):
        async with service() as memory:
            await memory.remember("alice a", namespace="alice")
            for arguments in ({"namespace": "alice"}, {"namespace": "alice", "filter": {}}):
                with pytest.raises(ToolInputError, match="no ids, no filter and no before"):
                    await call_tool(memory, "forget", arguments)
            assert (await memory.memory_stats("alice"))["entries"] == 1
    forget = next(tool for tool in TOOLS if tool.name == "forget")
    assert set(forget.arguments[0]) == {"ids", "filter", "before", "namespace"}
    assert not any("namespace" in tool.name or "clear" in tool.name for tool in TOOLS)
