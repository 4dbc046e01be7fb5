"""The recall actor: answers ``Recall`` requests from the store's snapshots (SPEC §5).

It serves one request at a time, so recall load never piles up concurrent embedder
calls; the store's reads do not use the store's inbox, so recall never waits behind a
slow write.
"""

from __future__ import annotations

import trio

from protocol import Recall, Recalled, RecallFailed, RetrievalReport
from protocol._events import fingerprint
from protocol._memory import describe_error

from ._events import EventHub, Mailbox, now
from ._store import StoreHandle

__all__ = ["RecallActor"]


class RecallActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    def __init__(self, store: StoreHandle, hub: EventHub, inbox_size: int) -> None:
        self.store = store
        self.hub = hub
        self.mailbox: Mailbox[Recall] = Mailbox.open("recall", inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        in_flight = None
        try:
            async with self.mailbox.receive:
                task_status.started()
                async for envelope in self.mailbox.receive:
                    in_flight = envelope
                    try:
                        result = await self.recall(envelope.request)
                    except Exception as error:
                        envelope.reply.fail(error)
                    else:
                        envelope.reply.succeed(result)
                    in_flight = None
        finally:
            if in_flight is not None:
                in_flight.reply.fail(trio.ClosedResourceError("the memory closed mid-recall"))
            self.mailbox.fail_leftovers()

    async def recall(self, request: Recall) -> RetrievalReport:
        """Rank, then filter by ``min_similarity``; publish ``Recalled`` or ``RecallFailed``."""
        query_print = fingerprint(request.query)
        try:
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
        if floor is not None:
            # After ranking, as the contract says: ``scanned`` still counts every entry.
            report = RetrievalReport(
                turns=[t for t in report.turns if t.score >= floor],
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
