"""The recall actor: answers ``Recall`` requests with the engine's recall (design §5).

It serves one request at a time, so recall load never piles up concurrent embedder
calls; the store's reads do not use the store's inbox, so recall never waits behind a
slow write. What it does inside is one call of the engine: a
``SearchRequest(kind="recall")`` (``actors/_retrieval/recall.py``), with ``min_similarity`` as
its floor, built as turns (``Store.search_turns``, so any :class:`~actors.Store`
serves it); the block budget and the provenance of every injected item
are the injection actor's.
"""

from __future__ import annotations

import trio

from protocol import RetrievalReport, SearchRequest
from protocol._memory import describe_error
from protocol.events import Recalled, RecallFailed, fingerprint
from protocol.messages import Recall

from .._store.contract import Store
from .._store.events import CURRENT_RUN, EventHub, new_run_id, now
from .._store.mailbox import Mailbox

__all__ = ["RecallActor"]


class RecallActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    def __init__(self, store: Store, hub: EventHub, inbox_size: int) -> None:
        self.store = store
        self.hub = hub
        self.mailbox: Mailbox[Recall, RetrievalReport] = Mailbox.open("recall", inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self.recall, task_status=task_status)

    async def recall(self, request: Recall) -> RetrievalReport:
        """Rank with the engine, the floor applied after ranking; publish ``Recalled``
        or ``RecallFailed``. ``scanned`` still counts every entry scored."""
        query_print = fingerprint(request.query)
        run = CURRENT_RUN.set((request.retriever or "memory", request.run_id or new_run_id()))
        try:
            report = await self.store.search_turns(
                SearchRequest(
                    query=request.query,
                    k=request.k,
                    kind="recall",
                    namespace=request.namespace,
                    score_threshold=request.min_similarity,
                    settings=request.settings,
                    since=request.since,
                    until=request.until,
                    as_of=request.as_of,
                )
            )
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
        finally:
            CURRENT_RUN.reset(run)
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
