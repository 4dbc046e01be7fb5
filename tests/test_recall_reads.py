"""The recall kind of the engine (``actors/_retrieval/recall.py``) on both backends: it ranks
exactly as hybrid recall written over the public reads (full turns and documents for every
candidate) does, through ``search``, the recall actor and ``Memory.retrieve`` alike, and
every list it reads comes from one snapshot."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
import trio
from pg_support import pg_store_opener

from actors import HashingEmbedder, open_memory, open_store
from actors._agent.recall_actor import RecallActor
from actors._retrieval.focus import (
    entry_date,
    named_speakers,
    near,
    query_dates,
    speaker_of,
    without_names,
)
from actors._retrieval.fusion import FusedHit, neighbor_boost, rrf
from actors._store.events import EventHub
from protocol import (
    Document,
    MemoryConfig,
    RecallSettings,
    RetrievalReport,
    RetrievedTurn,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    projection,
)
from protocol.compaction import Offload
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
    """Hybrid recall as it was first written over the public reads (full documents and
    turns for every candidate): the reference the engine must match. Each content is
    kept once, at its best rank, before the best ``k`` are taken."""
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
    # Every entry, scored against the embedded query: the dense list is its head.
    everything = await store.retrieve_in(namespace, embedded, STORE.max_entries)
    dense = everything.turns[:depth]
    fused: list[FusedHit[str]] = rrf(
        {"dense": [t.id for t in dense], "bm25": [key for key, _ in keyword]},
        k=settings.rrf_k,
        weights={"dense": settings.dense_weight, "bm25": settings.bm25_weight},
    )
    if settings.neighbor_weight > 0:
        sequences = {t.id: t.sequence for t in dense}
        sequences.update((key, seq) for key, seq in keyword if seq is not None)
        fused = neighbor_boost(fused, sequences, settings.neighbor_weight)
    by_id: dict[str, RetrievedTurn] = {t.id: t for t in everything.turns}
    for t in dense:
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
        # An entry without a date line is dated by when it occurred.
        occurred = {t.id: t.occurred_at.date() for t in everything.turns if t.occurred_at}
        days = {key: entry_date(texts.get(key, "")) or occurred.get(key) for key in factor}
        close = {key for key, day in days.items() if day and any(near(m, day) for m in mentions)}
        if close and close != {key for key, day in days.items() if day}:
            for key in close:
                factor[key] *= 1.0 + settings.date_weight
    if any(f != 1.0 for f in factor.values()):
        boosted = sorted(
            enumerate(fused), key=lambda item: (-item[1].score * factor[item[1].key], item[0])
        )
        fused = [FusedHit(h.key, h.score * factor[h.key], h.ranks) for _, h in boosted]
    seen: set[str] = set()
    turns = []
    for hit in fused:
        turn = by_id[hit.key]
        if projection(turn.message) not in seen and len(turns) < request.k:
            seen.add(projection(turn.message))
            turns.append(turn)
    return RetrievalReport(turns=turns, scanned=everything.scanned, exact=everything.exact)


def plain(turns: list[RetrievedTurn]) -> list[RetrievedTurn]:
    """``turns`` without recall's rank and channels, to compare with the reference."""
    return [msgspec.structs.replace(t, rank=None, channels=[]) for t in turns]


async def check_kinds_agree(store: Any) -> None:
    """``search(kind="recall")`` and the recall actor answer alike: the same entries,
    cosines and ranks, built as documents or as turns, and each hit says what lifted
    it."""
    await fill(store)
    actor = RecallActor(store, EventHub(), 4)
    for query in QUERIES:
        request = Recall(query=query, k=8, namespace=NS)
        hits = await store.search(SearchRequest(query=query, k=8, kind="recall", namespace=NS))
        report = await actor.recall(request)
        assert [(h.document.id, h.score, h.rank) for h in hits] == [
            (t.id, t.score, t.rank) for t in report.turns
        ]
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
        for hit in hits:
            assert hit.channels, hit
            assert set(hit.ranks) <= set(hit.channels)
            assert set(hit.channels) <= {"dense", "bm25", "speaker", "date", "neighbor", "link"}
        assert report.scanned == len(store)


async def check_hybrid(store: Any) -> None:
    await fill(store)
    actor = RecallActor(store, EventHub(), 4)
    for query in QUERIES:
        # The reference predates entity links (tests/test_links.py covers them) and the
        # learned ranker (tests/test_ranker.py).
        for settings in [
            RecallSettings(link_weight=0.0, ranker="none"),
            RecallSettings(fetch_k=3, link_weight=0.0, ranker="none"),
            RecallSettings(speaker_weight=0.0, date_weight=0.0, link_weight=0.0, ranker="none"),
            RecallSettings(neighbor_weight=0.0, rrf_k=60.0, link_weight=0.0, ranker="none"),
        ]:
            for k in (1, 5, 40):
                request = Recall(query=query, k=k, namespace=NS, settings=settings)
                got = await actor.recall(request)
                want = await public_hybrid(store, request)
                assert plain(got.turns) == want.turns, (query, settings, k)
                assert got.scanned == want.scanned


async def check_memory(store: Any) -> None:
    """The user's path: ``Memory.retrieve`` ranks as the reference, and every hit
    carries its true cosine (a small ``fetch_k`` makes keyword-only hits of the top k
    common: their cosines come from the same snapshot as the dense list)."""
    await fill(store)
    settings = RecallSettings(fetch_k=3, link_weight=0.0, ranker="none")
    config = MemoryConfig(namespace=NS, recall=settings, min_similarity=None)
    async with open_memory(store=store, memory=config) as memory:
        for query in QUERIES:
            report = await memory.retrieve(query, k=5)
            want = await public_hybrid(
                store, Recall(query=query, k=5, namespace=NS, settings=settings)
            )
            assert [(t.id, t.score) for t in report.turns] == [
                (t.id, t.score) for t in want.turns
            ], query


async def check_time_reach(store: Any) -> None:
    """The time channel decides on the hits that can still reach the top k when they
    tell it (some dated near the query's date, some not), and reads every hit when
    they do not: here every hit within reach is dated near the date (by its date line
    or by when it occurred), so whether they are boosted depends on a hit dated far off
    ranked beyond the reach."""
    rng = random.Random(11)
    near_line = "Ann: the garden"
    config = MemoryConfig(namespace=NS, strategies=[Offload(turns=1)])
    async with open_memory(store=store, memory=config) as memory:
        near_message = UnifiedMessage.user(near_line)
        await memory.compress([near_message, UnifiedMessage.user("(next)")], date="3 June, 2023")
    # Written after it, so that the far entry below is no neighbour of the near one.
    june = dt.datetime(2023, 6, 3, 12, tzinfo=dt.UTC)
    texts = [
        f"garden bread market {' '.join(rng.choice(WORDS) for _ in range(3))}" for _ in range(8)
    ] + [f"filler {i} " + " ".join(rng.choice(WORDS[6:]) for _ in range(4)) for i in range(40)]
    await store.add_documents(
        [Document(text=text, id=f"doc-{i}", occurred_at=june) for i, text in enumerate(texts)],
        namespace=NS,
    )
    actor = RecallActor(store, EventHub(), 4)
    settings = RecallSettings(link_weight=0.0, ranker="none")
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
            got = await actor.recall(request)
            assert plain(got.turns) == (await public_hybrid(store, request)).turns, (far, k)
            if k == 3:
                lifted[far] = any("date" in t.channels for t in got.turns)
    # The far hit is what makes the near ones' dates tell hits apart.
    assert lifted == {False: False, True: True}, lifted


class GatedEmbedder:
    """``HashingEmbedder`` as an async embedder whose query calls wait at a gate, so a
    test can commit while a recall is between its keyword list and its dense list."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(DIM)
        self.gate: trio.Event | None = None
        self.waiting = trio.Event()

    async def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_batch(texts)

    async def embed_query(self, text: str) -> Any:
        gate = self.gate
        if gate is not None:
            self.gate = None
            self.waiting.set()
            await gate.wait()
        return self.inner.embed(text)


async def check_one_snapshot(store: Any) -> None:
    """A commit while a recall embeds its query never mixes two states into one
    answer: in memory the recall reads its keyword list again on the snapshot its dense
    list scans (the new entry is found, the deleted one is not); on pg the whole recall
    is one transaction, so it answers from the state it started in."""
    embedder = store._actor.embedder.embedder
    assert isinstance(embedder, GatedEmbedder)
    await store.add_texts(["zebra quartz one", "zebra quartz two"], ids=["z1", "z2"], namespace=NS)
    request = SearchRequest(query="zebra quartz", k=5, kind="recall", namespace=NS)
    assert {h.document.id for h in await store.search(request)} == {"z1", "z2"}
    gate = trio.Event()
    embedder.gate = gate
    answer: list[set[str | None]] = []

    async def ask() -> None:
        answer.append({h.document.id for h in await store.search(request)})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await embedder.waiting.wait()
        await store.delete(["z1"], NS)
        await store.add_texts(["zebra quartz three"], ids=["z3"], namespace=NS)
        gate.set()
    if store.backend == "pg":
        assert answer == [{"z1", "z2"}]
    else:
        assert answer == [{"z2", "z3"}]
    assert {h.document.id for h in await store.search(request)} == {"z2", "z3"}


async def check_cancel_while_embedding(store: Any) -> None:
    """A recall cancelled while its query is embedded leaves nothing behind: on pg its
    transaction is rolled back and its connection returns to the pool, so more recalls
    than the pool holds run after it."""
    embedder = store._actor.embedder.embedder
    await store.add_texts(["zebra quartz one"], ids=["z1"], namespace=NS)
    request = SearchRequest(query="zebra quartz", k=5, kind="recall", namespace=NS)
    embedder.waiting = trio.Event()
    embedder.gate = trio.Event()  # never set: only the cancel ends the wait
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def ask() -> None:
            with scope:
                await store.search(request)
            assert scope.cancelled_caught

        nursery.start_soon(ask)
        await embedder.waiting.wait()
        scope.cancel()
    for _ in range(6):
        assert [h.document.id for h in await store.search(request)] == ["z1"]


async def check_time_window(store: Any) -> None:
    """``since``/``until`` keep the entries that occurred in ``[since, until)``, for every
    kind, before top-k: ``k`` hits come back whenever ``k`` entries are in the window,
    however many better ones are outside it."""
    day = [dt.datetime(2023, 5, d, 12, tzinfo=dt.UTC) for d in range(1, 11)]
    docs = [
        Document(text=f"garden bread market {i}", id=f"d{i}", occurred_at=day[i])
        for i in range(10)
    ]
    await store.add_documents(docs, namespace=NS)
    since, until = day[3], day[6]  # d3, d4, d5
    for kind in ("recall", "similarity", "mmr", "hybrid", "bm25"):
        extra: dict[str, Any] = {"fetch_k": 10} if kind in ("mmr", "hybrid") else {}
        request = SearchRequest(
            query="garden bread market",
            k=3,
            kind=kind,  # type: ignore[arg-type]
            namespace=NS,
            since=since,
            until=until,
            **extra,
        )
        hits = await store.search(request)
        assert sorted(h.document.id or "" for h in hits) == ["d3", "d4", "d5"], kind
        assert all(since <= h.document.occurred_at < until for h in hits), kind  # type: ignore[operator]
        only_since = await store.search(msgspec.structs.replace(request, until=None, k=10))
        assert sorted(h.document.id or "" for h in only_since) == [f"d{i}" for i in range(3, 10)]
    async with open_memory(store=store, memory=MemoryConfig(namespace=NS)) as memory:
        report = await memory.retrieve("garden bread market", k=5, since=since, until=until)
    assert sorted(t.id for t in report.turns) == ["d3", "d4", "d5"]
    assert all(t.occurred_at == day[int(t.id[1:])] for t in report.turns)


CHECKS = pytest.mark.parametrize(
    "check",
    [
        check_kinds_agree,
        check_hybrid,
        check_memory,
        check_time_reach,
        check_one_snapshot,
        check_cancel_while_embedding,
        check_time_window,
    ],
    ids=["kinds-agree", "hybrid", "memory", "time-reach", "one-snapshot", "cancel", "window"],
)


@CHECKS
async def test_recall_reads_in_memory(check: Callable[[Any], Awaitable[None]]) -> None:
    with trio.fail_after(30):
        async with open_store(STORE, GatedEmbedder()) as store:
            await check(store)


@CHECKS
async def test_recall_reads_on_pg(
    check: Callable[[Any], Awaitable[None]],
    pg_dsn: str,
    pg_table: str,
) -> None:
    open_pg_store = pg_store_opener()
    with trio.fail_after(120):
        async with open_pg_store(pg_dsn, STORE, GatedEmbedder(), table=pg_table) as store:
            await check(store)
