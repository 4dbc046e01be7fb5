"""Entity links between turns (``actors/_retrieval/links.py``, ``RecallSettings.link_weight``): the
pure functions, the stores' document frequencies on both backends, and the boost
through ``open_memory`` on both backends."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from pg_support import pg_store_opener
from test_recall_quality import ranked

from actors import HashingEmbedder, open_memory, open_store
from actors._inmemory.view import _MemoryView
from actors._retrieval.bm25 import Bm25Index, tokenize
from actors._retrieval.focus import speaker_of
from actors._retrieval.links import bodies_terms, body_terms, link_terms, linked, rare
from protocol import (
    ConfigError,
    Document,
    MemoryConfig,
    RecallSettings,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.compaction import (
    Offload,
    Offloaded,
)

DIM = 64
STORE = VectorStoreConfig(max_entries=64, dimensions=DIM, max_entry_bytes=4096)


def test_body_terms_leave_out_the_speaker_and_numbers() -> None:
    assert body_terms("John: I read 2 books by Paulo") == set(tokenize("I read books by Paulo"))
    assert body_terms("no speaker here") == set(tokenize("no speaker here"))


@given(
    st.lists(
        st.lists(
            st.sampled_from(["John:", "Ann", "Running", "runs", "ran", "2023", "3rd", "dying"])
            | st.text(max_size=8),
        ).map(" ".join),
        max_size=6,
    )
)
def test_bodies_terms_stem_a_batch_as_each_text_alone(texts: list[str]) -> None:
    """One stemmer call for a batch gives each text the terms it had alone."""

    def alone(text: str) -> set[str]:
        speaker = speaker_of(text)
        body = text[len(speaker) + 2 :] if speaker is not None else text
        return {t for t in tokenize(body) if not t.isdigit()}

    assert bodies_terms(texts) == [alone(text) for text in texts]


def test_link_terms_are_the_anchors_words_the_query_does_not_hold() -> None:
    anchors = {"a": "John: I finished The Alchemist", "b": "Tim: John, the Alchemist is great"}
    terms = link_terms("What books has John read?", anchors, ["John", "Tim"])
    assert terms[tokenize("Alchemist")[0]] == {"a", "b"}
    assert tokenize("finished")[0] in terms
    # The query's words and every speaker's name are left out.
    assert not {*tokenize("What books has John read"), "tim"} & set(terms)


def test_rare_is_at_least_two_entries_and_at_most_two_percent() -> None:
    counts = {"once": 1, "twice": 2, "five": 5, "six": 6}
    assert rare(10, counts) == {"twice"}  # max(2, 0.2) = 2
    assert rare(250, counts) == {"twice", "five"}  # 2% of 250 = 5
    assert rare(300, counts) == {"twice", "five", "six"}


def test_linked_needs_a_term_of_an_anchor_it_is_not_next_to() -> None:
    terms = {"alchemist": {"a"}}
    candidates = {
        "next": "Tim: The Alchemist!",  # sequence 11: the anchor's neighbour
        "far": "Tim: I saw The Alchemist on your shelf",
        "other": "Tim: I saw Dune on your shelf",
        "unknown": "Tim: Alchemist",  # no sequence: next to none
    }
    sequences = {"a": 10, "next": 11, "far": 40, "other": 41}
    assert linked(candidates, terms, sequences) == {"far", "unknown"}
    assert linked({"a": "John: The Alchemist"}, terms, sequences) == set()


def test_term_counts_are_scoped_to_a_group() -> None:
    index = Bm25Index(8)
    index.add(0, "the Alchemist by Paulo", group=1)
    index.add(1, "reading the Alchemist again", group=1)
    index.add(2, "Alchemist", group=2)
    alchemist = tokenize("Alchemist")[0]
    assert index.term_counts([alchemist, "paulo", "zebra"], 1) == (
        2,
        {alchemist: 2, "paulo": 1, "zebra": 0},
    )
    assert index.term_counts([alchemist], 2) == (1, {alchemist: 1})
    assert index.term_counts([alchemist], 9) == (0, {alchemist: 0})
    index.remove(1)
    assert index.term_counts([alchemist], 1) == (1, {alchemist: 1})
    index.remove(0)  # group 2 alone: its counts are the index's
    assert index.term_counts([alchemist, "paulo"], 2) == (1, {alchemist: 1, "paulo": 0})


@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), True, "1"])
def test_link_weight_is_checked(value: object) -> None:
    with pytest.raises(ConfigError, match=r"RecallSettings\.link_weight"):
        RecallSettings(link_weight=value)  # type: ignore[arg-type]


async def term_counts(store: Any, namespace: str, terms: list[str]) -> tuple[int, dict[str, int]]:
    """The namespace's BM25 statistics as recall's view of either backend reads them."""
    actor = store._actor
    if store.backend == "pg":
        from actors._pg.filters import Visibility

        reads, vis = actor.reads, Visibility(dt.datetime.now(dt.UTC))
        return await actor.read(  # type: ignore[no-any-return]
            lambda conn: reads.term_counts(conn, terms, namespace, vis), "search"
        )
    await trio.lowlevel.checkpoint()
    return _MemoryView(actor, namespace, None, None).term_counts(terms)


async def check_term_counts(store: Any) -> None:
    await store.add_documents(
        [
            Document(text="the Alchemist by Paulo", id="1"),
            Document(text="reading the Alchemist again", id="2"),
            Document(text="Dune", id="3"),
        ],
        namespace="books",
    )
    await store.add_documents([Document(text="Alchemist", id="4")], namespace="other")
    alchemist = tokenize("Alchemist")[0]
    assert await term_counts(store, "books", [alchemist, "paulo", "zebra"]) == (
        3,
        {alchemist: 2, "paulo": 1, "zebra": 0},
    )
    assert await term_counts(store, "other", [alchemist]) == (1, {alchemist: 1})
    assert await term_counts(store, "empty", [alchemist]) == (0, {alchemist: 0})
    await store.delete(["2"], namespace="books")
    assert await term_counts(store, "books", [alchemist]) == (2, {alchemist: 1})


Check = Callable[[Any], Awaitable[None]]


async def in_memory(check: Check) -> None:
    with trio.fail_after(20):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            await check(store)


async def on_pg(check: Check, dsn: str, table: str) -> None:
    open_pg_store = pg_store_opener()
    with trio.fail_after(60):
        async with open_pg_store(dsn, STORE, HashingEmbedder(DIM), table=table) as store:
            await check(store)


async def test_term_counts_in_memory() -> None:
    await in_memory(check_term_counts)


async def test_term_counts_on_pg(pg_dsn: str, pg_table: str) -> None:
    await on_pg(check_term_counts, pg_dsn, pg_table)


# A chat whose best hits for the question are John's turns about books; the turn that
# names the second book's title again, far from where it was first named, says nothing
# of books, so only the title links it to an anchor.
CHAT = [
    "John: I love reading books about mindset",
    "Tim: Nice, what are you reading now?",
    "John: I'm reading the book Dune by Frank Herbert",
    "Tim: I've heard great things about it",
    "John: books help me think, reading every night",
    "Tim: I read a lot of books too",
    "John: my favourite books are about history",
    "Tim: we went hiking near the lake",
    "John: the lake was cold but sunny",
    "Tim: my dog loves the lake",
    "John: we baked bread at the market",
    "Tim: the market was busy on Saturday",
    "John: Herbert's desert planet still amazes me",
    "Tim: the bread was great",
    "John: I read the news with coffee",
    "Tim: coffee sounds good",
    "John: has anyone seen my keys?",
    "Tim: no idea, sorry",
    "John: what a week it has been",
]
QUESTION = "What books has John read?"


async def offload_chat(store: Any) -> dict[str, str]:
    """CHAT offloaded through compaction (the user's path), each turn its own entry;
    entry id → its line."""
    ids: dict[str, str] = {}
    # Each entry alone (no "Before:" line), so a title is held by the two turns that
    # name it, not also by the turns just after them.
    config = MemoryConfig(strategies=[Offload(turns=len(CHAT) + 1, context=0)])
    async with open_memory(store=store, memory=config) as memory:
        messages = [UnifiedMessage.user(line) for line in CHAT]
        compressed = await memory.compress([*messages, UnifiedMessage.user("(next)")])
        for action in compressed.report.actions:
            assert isinstance(action, Offloaded)
            for i, entry_id in zip(action.indices, action.ids, strict=True):
                ids[entry_id] = CHAT[i]
    return ids


async def check_links(store: Any) -> None:
    ids = await offload_chat(store)
    # The links stage as the hand-tuned ranking applies it (ranker "none"); the learned
    # ranker's use of it is checked last.
    plain = await ranked(store, QUESTION, ids, link_weight=0.0, ranker="none")
    linked_ = await ranked(store, QUESTION, ids, ranker="none")
    herbert = "John: Herbert's desert planet still amazes me"
    dune = "John: I'm reading the book Dune by Frank Herbert"
    # "Herbert" (in two of the 19 entries) links the far turn to the anchor that
    # names the book, and lifts it; the anchors keep their order and stay first.
    assert dune in plain[:5]
    assert linked_.index(herbert) < plain.index(herbert)
    anchors = [line for line in linked_ if line in plain[:5]]
    assert anchors == plain[:5]
    assert linked_[0] == plain[0]
    # A small k ranks the same head: focus keeps the top 50 for the links to read.
    config = MemoryConfig(min_similarity=None, recall=RecallSettings(ranker="none"))
    async with open_memory(store=store, memory=config) as memory:
        report = await memory.retrieve(QUESTION, k=6)
    assert [ids[t.id] for t in report.turns] == linked_[:6]
    assert herbert in linked_[:6] and herbert not in plain[:6]
    # Weight 0 is recall without links: what the same query ranks with no link term.
    assert await ranked(store, QUESTION, ids, link_weight=0.0, ranker="none") == plain
    # The learned ranker reads the link as a feature: the linked turn ranks higher with
    # links than without.
    learned = await ranked(store, QUESTION, ids)
    unlinked = await ranked(store, QUESTION, ids, link_weight=0.0)
    assert learned.index(herbert) < unlinked.index(herbert)


async def test_entity_links_through_memory() -> None:
    await in_memory(check_links)


async def test_entity_links_on_pg(pg_dsn: str, pg_table: str) -> None:
    await on_pg(check_links, pg_dsn, pg_table)
