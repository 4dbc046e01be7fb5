"""The recall actor: answers ``Recall`` requests from the store's snapshots (design §5).

It serves one request at a time, so recall load never piles up concurrent embedder
calls; the store's reads do not use the store's inbox, so recall never waits behind a
slow write.

Hybrid recall (the default, :class:`~protocol.RecallSettings`) fuses two ranked lists
by reciprocal rank fusion: the dense list from ``retrieve_in`` (full turns with their
cosine scores) and the BM25 list from a ``bm25`` (keyword-only) search, so the query
is embedded once. Every hit keeps its cosine similarity as ``score``, which is what
``min_similarity`` filters and what the renderers print; the order is the fused one.

Context assembly: hits with the same content (the same projection, by sha256) are
kept once, at the best rank, so a memory stored twice is injected once; the block
budget and the provenance of every injected item are the injection actor's.
"""

from __future__ import annotations

import hashlib

import trio

from protocol import RetrievalReport, RetrievedTurn, SearchRequest, projection
from protocol._events import fingerprint
from protocol._memory import describe_error
from protocol.events import Recalled, RecallFailed
from protocol.messages import Recall

from ._events import EventHub, now
from ._fusion import FusedHit, neighbor_boost, rrf
from ._handle import Store
from ._mailbox import Mailbox

__all__ = ["RecallActor"]


def unique_by_content(turns: list[RetrievedTurn]) -> list[RetrievedTurn]:
    """``turns`` with each content (sha256 of its projection) kept once, at its best
    rank."""
    seen: set[bytes] = set()
    kept = []
    for turn in turns:
        key = hashlib.sha256(projection(turn.message).encode("utf-8", "surrogatepass")).digest()
        if key not in seen:
            seen.add(key)
            kept.append(turn)
    return kept


class RecallActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    def __init__(self, store: Store, hub: EventHub, inbox_size: int) -> None:
        self.store = store
        self.hub = hub
        self.mailbox: Mailbox[Recall] = Mailbox.open("recall", inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self.recall, task_status=task_status)

    async def recall(self, request: Recall) -> RetrievalReport:
        """Rank, then filter by ``min_similarity``; publish ``Recalled`` or ``RecallFailed``."""
        query_print = fingerprint(request.query)
        try:
            if request.settings.search == "hybrid":
                report = await self.hybrid(request)
            else:
                report = await self.store.retrieve_in(request.namespace, request.query, request.k)
        except Exception as error:
            self.hub.publish(
                RecallFailed(
                    at=now(),
                    namespace=request.namespace,
                    query_fingerprint=query_print,
                    error=describe_error(error),
                )
            )
            raise
        floor = request.min_similarity
        # After ranking, as the contract says: ``scanned`` still counts every entry.
        report = RetrievalReport(
            turns=[
                t for t in unique_by_content(report.turns) if floor is None or t.score >= floor
            ],
            scanned=report.scanned,
            exact=report.exact,
        )
        self.hub.publish(
            Recalled(
                at=now(),
                namespace=request.namespace,
                query_fingerprint=query_print,
                hits=len(report.turns),
                scanned=report.scanned,
                best=report.turns[0].score if report.turns else None,
            )
        )
        return report

    async def hybrid(self, request: Recall) -> RetrievalReport:
        """The ``k`` best entries by RRF of the dense and the BM25 lists, each boosted
        by its neighbours' fused scores (``RecallSettings.neighbor_weight``).

        The two lists are read from two snapshots; an entry deleted in between is left
        out. A BM25 hit that makes the top ``k`` without being in the dense list (its
        cosine is unknown so far) is looked up by deepening the dense list, so every hit
        carries its true cosine score.
        """
        settings = request.settings
        store, namespace, query = self.store, request.namespace, request.query
        depth = max(request.k, settings.fetch_k)
        dense = await store.retrieve_in(namespace, query, depth)
        # A keyword-only search: the query is not embedded a second time.
        sparse = await store.search(
            SearchRequest(query=query, k=depth, kind="bm25", namespace=namespace)
        )
        # Every entry of a store has an id (a turn's is ``turn-<sequence>``).
        keyword = [(h.document.id or "", h.sequence) for h in sparse]
        fused: list[FusedHit[str]] = rrf(
            {"dense": [t.id for t in dense.turns], "bm25": [key for key, _ in keyword]},
            k=settings.rrf_k,
            weights={"dense": settings.dense_weight, "bm25": settings.bm25_weight},
        )
        if settings.neighbor_weight > 0:
            sequences = {t.id: t.sequence for t in dense.turns}
            sequences.update((key, seq) for key, seq in keyword if seq is not None)
            fused = neighbor_boost(fused, sequences, settings.neighbor_weight)
        fused = fused[: request.k]
        by_id: dict[str, RetrievedTurn] = {t.id: t for t in dense.turns}
        while any(h.key not in by_id for h in fused) and depth < dense.scanned:
            depth = min(depth * 4, dense.scanned)
            deeper = await store.retrieve_in(namespace, query, depth)
            by_id.update((t.id, t) for t in deeper.turns)
        turns = [by_id[h.key] for h in fused if h.key in by_id]
        return RetrievalReport(turns=turns, scanned=dense.scanned, exact=dense.exact)
