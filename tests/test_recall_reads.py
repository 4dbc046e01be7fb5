"""Recall's internal reads (``actors/_ranked.py``) on both backends: each one answers what
the public read it stands for answers, and hybrid recall built on them ranks exactly as
it did when it read full turns and documents through the public API."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from pg_support import pg_dsn, pg_store_opener, pg_table  # noqa: F401

from actors import HashingEmbedder, open_memory, open_store
from actors._events import EventHub
from actors._focus import entry_date, named_speakers, near, query_dates, speaker_of, without_names
from actors._fusion import FusedHit, neighbor_boost, rrf
from actors._ranked import Ranked
from actors._recall import RecallActor, unique_by_content
from protocol import (
    Document,
    MemoryConfig,
    Offload,
    RecallSettings,
    RetrievalReport,
    RetrievedTurn,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    projection,
)
from protocol.messages import Recall

DIM = 64
STORE = VectorStoreConfig(max_entries=256, dimensions=DIM, max_entry_bytes=4096)
NS = "recall-reads"
WORDS = [
    "garden",
    "bread",
    "market",
    "dog",
    "hiking",
    "lake",
    "sunrise",
    "pottery",
    "race",
    "shoes",
    "book",
    "city",
]
DATES = ["3 June, 2023", "9 June, 2023", "2 July, 2023", "20 August, 2023"]
QUERIES = [
    "What did Ann say about the garden?",
    "Where did Bob go in June 2023?",
    "Bob bread market",
    "dog lake sunrise",
    "What did Cleo do on 2 July, 2023?",
    "zebra",
    "the",
]


async def fill(store: Any) -> None:
    """Three speakers' turns offloaded with dates (entries with a ``Date:`` line and a
    payload) and some plain documents, in the memory's default namespace."""
    rng = random.Random(7)
    config = MemoryConfig(namespace=NS, strategies=[Offload(turns=6)])
    async with open_memory(store=store, memory=config) as memory:
        for date in DATES:
            lines = [
                f"{rng.choice(['Ann', 'Bob', 'Cleo'])}: "
                + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7)))
                for _ in range(6)
            ]
            messages = [UnifiedMessage.user(line) for line in lines]
            await memory.compress([*messages, UnifiedMessage.user("(next)")], date=date)
    await store.add_texts(
        [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(8)], namespace=NS
    )


async def public_hybrid(store: Any, request: Recall) -> RetrievalReport:
    """Hybrid recall as it was written over the public reads (full documents and
    turns for every candidate): the reference the internal reads must match."""
    settings = request.settings
    namespace, query = request.namespace, request.query
    depth = max(request.k, settings.fetch_k)
    sparse = await store.search(
        SearchRequest(query=query, k=depth, kind="bm25", namespace=namespace)
    )
    keyword = [(h.document.id or "", h.sequence) for h in sparse]
    texts = {h.document.id or "": h.document.text for h in sparse}
    named: frozenset[str] = frozenset()
    if settings.speaker_weight > 0:
        named = named_speakers(query, map(speaker_of, texts.values()))
    embedded = without_names(query, named)
    dense = await store.retrieve_in(namespace, embedded, depth)
    fused: list[FusedHit[str]] = rrf(
        {"dense": [t.id for t in dense.turns], "bm25": [key for key, _ in keyword]},
        k=settings.rrf_k,
        weights={"dense": settings.dense_weight, "bm25": settings.bm25_weight},
    )
    if settings.neighbor_weight > 0:
        sequences = {t.id: t.sequence for t in dense.turns}
        sequences.update((key, seq) for key, seq in keyword if seq is not None)
        fused = neighbor_boost(fused, sequences, settings.neighbor_weight)
    by_id: dict[str, RetrievedTurn] = {t.id: t for t in dense.turns}
    for t in dense.turns:
        texts.setdefault(t.id, projection(t.message))
    factor = dict.fromkeys((h.key for h in fused), 1.0)
    if named:
        for key in factor:
            if speaker_of(texts.get(key, "")) in named:
                factor[key] *= 1.0 + settings.speaker_weight
    mentions = query_dates(query) if settings.date_weight > 0 else []
    if mentions:
        unread = [key for key in factor if "\nDate: " not in texts.get(key, "")]
        if unread:
            docs = await store.get_by_ids(unread, namespace)
            texts.update((d.id or "", d.text) for d in docs)
        days = {key: entry_date(texts.get(key, "")) for key in factor}
        close = {key for key, day in days.items() if day and any(near(m, day) for m in mentions)}
        if close and close != {key for key, day in days.items() if day}:
            for key in close:
                factor[key] *= 1.0 + settings.date_weight
    if any(f != 1.0 for f in factor.values()):
        boosted = sorted(
            enumerate(fused), key=lambda item: (-item[1].score * factor[item[1].key], item[0])
        )
        fused = [FusedHit(h.key, h.score * factor[h.key], h.ranks) for _, h in boosted]
    fused = fused[: request.k]
    while any(h.key not in by_id for h in fused) and depth < dense.scanned:
        depth = min(depth * 4, dense.scanned)
        deeper = await store.retrieve_in(namespace, embedded, depth)
        by_id.update((t.id, t) for t in deeper.turns)
    turns = [by_id[h.key] for h in fused if h.key in by_id]
    return RetrievalReport(turns=turns, scanned=dense.scanned, exact=dense.exact)


async def check_reads(store: Any) -> None:
    await fill(store)
    everything = await store.retrieve_in(NS, "anything at all", STORE.max_entries)
    for query in QUERIES:
        depth = 12
        dense = await store._dense_ranked(NS, query, depth)
        public = await store.retrieve_in(NS, query, depth)
        assert [(h.id, h.sequence, h.score) for h in dense.hits] == [
            (t.id, t.sequence, t.score) for t in public.turns
        ]
        assert (dense.scanned, dense.exact) == (public.scanned, public.exact)
        keyword = await store._bm25_ranked(NS, query, depth)
        hits = await store.search(SearchRequest(query=query, k=depth, kind="bm25", namespace=NS))
        assert [(h.id, h.sequence, h.score, h.text) for h in keyword] == [
            (h.document.id, h.sequence, h.raw_score, h.document.text) for h in hits
        ]
        # The fused top k materialized: the very turns retrieve_in builds.
        assert await store._turns(NS, dense.hits[:5]) == public.turns[:5]
    ids = [t.id for t in everything.turns] + ["no-such-id"]
    docs = {d.id: d.text for d in await store.get_by_ids(ids, NS)}
    assert await store._texts(NS, ids, projections=False) == docs
    assert await store._texts(NS, ids, projections=True) == {
        t.id: projection(t.message) for t in everything.turns
    }
    assert await store._texts("elsewhere", ids, projections=False) == {}
    # An entry deleted, or replaced, since it was ranked is left out.
    first, second, third = everything.turns[:3]
    await store.delete([first.id], NS)
    await store.upsert([Document(text="replaced", id=second.id)], namespace=NS)
    assert await store._turns(NS, []) == []
    stale = [Ranked(t.id, t.sequence, t.score) for t in (first, second, third)]
    assert [t.id for t in await store._turns(NS, stale)] == [third.id]


def count_dense_reads(store: Any) -> list[int]:
    """Wrap the store's ``_dense_ranked`` so that each call adds one to the returned
    counter's only item."""
    count = [0]
    dense_ranked = store._dense_ranked

    async def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await dense_ranked(*args, **kwargs)

    store._dense_ranked = counted
    return count


async def check_hybrid(store: Any) -> None:
    await fill(store)
    actor = RecallActor(store, EventHub(), 4)
    # Recall reads the dense list once: a BM25 hit that makes the top k brings its
    # cosine with it (``also``), where the dense list used to be deepened to find it.
    dense_reads = count_dense_reads(store)
    for query in QUERIES:
        # The reference predates entity links (tests/test_links.py covers them).
        for settings in [
            RecallSettings(link_weight=0.0),
            RecallSettings(fetch_k=3, link_weight=0.0),
            RecallSettings(speaker_weight=0.0, date_weight=0.0, link_weight=0.0),
            RecallSettings(neighbor_weight=0.0, rrf_k=60.0, link_weight=0.0),
        ]:
            for k in (1, 5, 40):
                request = Recall(query=query, k=k, namespace=NS, settings=settings)
                dense_reads[0] = 0
                got = await actor.hybrid(request)
                assert dense_reads == [1], (query, settings, k, dense_reads)
                assert got == await public_hybrid(store, request), (query, settings, k)


async def check_memory(store: Any) -> None:
    """The user's path: ``Memory.retrieve`` over the store reads the dense list once per
    recall, and every hit it returns carries the cosine the former code found by
    deepening (a small ``fetch_k`` makes keyword-only hits of the top k common)."""
    await fill(store)
    settings = RecallSettings(fetch_k=3, link_weight=0.0)
    config = MemoryConfig(namespace=NS, recall=settings, min_similarity=None)
    dense_reads = count_dense_reads(store)
    async with open_memory(store=store, memory=config) as memory:
        for query in QUERIES:
            dense_reads[0] = 0
            report = await memory.retrieve(query, k=5)
            assert dense_reads == [1], (query, dense_reads)
            want = await public_hybrid(
                store, Recall(query=query, k=5, namespace=NS, settings=settings)
            )
            assert [(t.id, t.score) for t in report.turns] == [
                (t.id, t.score) for t in unique_by_content(want.turns)
            ], query


async def check_time_reach(store: Any) -> None:
    """The time channel decides on the hits that can still reach the top k when they
    tell it (some dated near the query's date, some not), and reads every hit when
    they do not: here the only dated hit within reach is near the date, so whether it
    is boosted depends on a hit dated far off ranked beyond the reach."""
    rng = random.Random(11)
    near_line = "Ann: the garden"
    config = MemoryConfig(namespace=NS, strategies=[Offload(turns=1)])
    async with open_memory(store=store, memory=config) as memory:
        near_message = UnifiedMessage.user(near_line)
        await memory.compress([near_message, UnifiedMessage.user("(next)")], date="3 June, 2023")
    # Written after it, so that the far entry below is no neighbour of the near one.
    await store.add_texts(
        [f"garden bread market {' '.join(rng.choice(WORDS) for _ in range(3))}" for _ in range(8)]
        + [f"filler {i} " + " ".join(rng.choice(WORDS[6:]) for _ in range(4)) for i in range(40)],
        namespace=NS,
    )
    actor = RecallActor(store, EventHub(), 4)
    settings = RecallSettings(link_weight=0.0)
    query = "garden bread market on 3 June, 2023"
    lifted: dict[bool, bool] = {}
    for far in (False, True):
        if far:
            async with open_memory(store=store, memory=config) as memory:
                far_message = UnifiedMessage.user("Bob: zebra quartz")
                await memory.compress(
                    [far_message, UnifiedMessage.user("(next)")], date="20 August, 2023"
                )
        for k in (1, 3, 5):
            request = Recall(query=query, k=k, namespace=NS, settings=settings)
            got = await actor.hybrid(request)
            assert got == await public_hybrid(store, request), (far, k)
            if k == 3:
                lifted[far] = any(projection(t.message) == near_line for t in got.turns)
    # The far hit is what makes the near one's date tell hits apart.
    assert lifted == {False: False, True: True}, lifted


CHECKS = pytest.mark.parametrize(
    "check",
    [check_reads, check_hybrid, check_memory, check_time_reach],
    ids=["reads", "hybrid", "memory", "time-reach"],
)


@CHECKS
async def test_recall_reads_in_memory(check: Callable[[Any], Awaitable[None]]) -> None:
    with trio.fail_after(30):
        async with open_store(STORE, HashingEmbedder(DIM)) as store:
            await check(store)


@CHECKS
async def test_recall_reads_on_pg(
    check: Callable[[Any], Awaitable[None]],
    pg_dsn: str,  # noqa: F811
    pg_table: str,  # noqa: F811
) -> None:
    open_pg_store = pg_store_opener()
    with trio.fail_after(120):
        async with open_pg_store(pg_dsn, STORE, HashingEmbedder(DIM), table=pg_table) as store:
            await check(store)
