"""Each door names its store reads (``actors.doors.named_run``): the ``vector_store.searched``
event of a read made through the MCP server's ``recall`` tool says ``"mcp"``, through the
command line's ``search`` ``"cli"``, each with a run id of its own per call.

Both doors run in a process of their own when a user runs them, where no test sees the
store's events, so each is driven here in the test's process down its real read path
over a store whose ``on_event`` the test holds:

- MCP: ``actors.cli._mcp.call_tool``, the dispatch every ``tools/call`` of the server
  goes through, over the ``MemoryService`` the server serves;
- the command line: the ``search`` command's own coroutine, with the arguments the real
  parser makes, and ``open_location`` giving it a ``MemoryService`` over that store.

The LangChain and LangGraph adapters are checked in the asyncio suite
(``tests/integrations/test_door_runs_adapters.py``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from extras import needs_extra

from actors import HashingEmbedder, open_store
from actors.cli._service import MemoryService
from protocol import Document, Event, VectorStoreConfig
from protocol.events import StoreSearched

DIM = 32
STORE = VectorStoreConfig(max_entries=32, dimensions=DIM, max_entry_bytes=4096)
TIMEOUT = 10
RUN_ID = re.compile("[0-9a-f]{32}")


@asynccontextmanager
async def observed_service(got: list[Event]) -> AsyncIterator[MemoryService]:
    """A MemoryService over a new in-memory store holding two memories, whose events go
    to ``got`` (the writes' too; :func:`reads` keeps the reads)."""
    async with open_store(STORE, HashingEmbedder(DIM), on_event=got.append) as store:
        await store.add_documents([Document(text="cats purr"), Document(text="dogs bark")])
        yield MemoryService(store, "hashing", "memory")


def reads(got: list[Event]) -> list[StoreSearched]:
    return [e for e in got if isinstance(e, StoreSearched)]


async def test_the_mcp_recall_tool_names_its_reads_mcp() -> None:
    pytest.importorskip("mcp", reason=needs_extra("mcp", "mcp is not installed"))
    from actors.cli._mcp import MCP_RETRIEVER, call_tool

    got: list[Event] = []
    with trio.fail_after(TIMEOUT):
        async with observed_service(got) as service:
            for mode in ("recall", "similarity", "bm25"):
                result = await call_tool(service, "recall", {"query": "cats", "mode": mode})
                assert result["hits"], mode
            # The other tools read nothing that a search event reports.
            await call_tool(service, "memory_stats", {})
            # A read of the same store outside the tool is still the store's own.
            await service.recall("dogs")
    first, second, third, direct = reads(got)
    assert MCP_RETRIEVER == "mcp"
    assert [e.kind for e in (first, second, third)] == ["recall", "similarity", "bm25"]
    assert {e.retriever for e in (first, second, third)} == {"mcp"}
    # One run per tool call.
    ids = {e.run_id for e in (first, second, third)}
    assert len(ids) == 3 and all(i is not None and RUN_ID.fullmatch(i) for i in ids)
    assert direct.retriever == "store"


async def test_the_cli_search_command_names_its_reads_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from actors.cli import _commands, _location
    from actors.cli._parser import build_parser

    got: list[Event] = []

    @asynccontextmanager
    async def open_location(
        where: _location.Where,
        *,
        embedder: str | None = None,
        watch: bool = False,
        warm: bool = False,
    ) -> AsyncIterator[MemoryService]:
        assert where.in_memory  # the place the command line asked for
        async with observed_service(got) as service:
            yield service

    monkeypatch.setattr(_location, "open_location", open_location)
    args = build_parser().parse_args(["search", "cats", "--in-memory", "--json"])
    with trio.fail_after(TIMEOUT):
        assert await _commands._search(args) == 0
        assert await _commands._search(args) == 0
    assert '"cats purr"' in capsys.readouterr().out
    first, second = reads(got)
    assert _commands.CLI_RETRIEVER == "cli"
    assert first.retriever == second.retriever == "cli"
    assert first.run_id is not None and RUN_ID.fullmatch(first.run_id)
    assert first.run_id != second.run_id
