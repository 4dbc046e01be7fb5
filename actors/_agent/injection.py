"""The injection actor: renders a recall and places it in the request (design §5).

The work is the pure :func:`protocol.inject`; the actor adds the configured renderer,
placement (and section position) and block budget (``RecallSettings.max_block_bytes``), and the
``RecallInjected`` event, which names every item that entered the prompt. It keeps
injection on the same message-passing footing as the other stages, so that a stream of
``Inject`` messages can be logged and replayed.
"""

from __future__ import annotations

import attrs
import trio

from protocol import Injected, RetrievalReport, digest_request, inject, render
from protocol.events import InjectedItem, RecallInjected
from protocol.messages import Inject

from .._store.events import EventHub, now
from .._store.mailbox import Mailbox

__all__ = ["InjectionActor", "fit_block"]


def fit_block(report: RetrievalReport, renderer: str, max_bytes: int | None) -> RetrievalReport:
    """``report`` cut to its best items whose rendered block is at most ``max_bytes``
    UTF-8 bytes: the lowest-ranked go first, and no item is ever split. None: no budget.
    """
    if max_bytes is None:
        return report
    turns = list(report.turns)
    while turns:
        text = render(RetrievalReport(turns=turns, scanned=report.scanned), renderer)
        assert text is not None
        if len(text.encode("utf-8", "surrogatepass")) <= max_bytes:
            break
        turns.pop()
    if len(turns) == len(report.turns):
        return report
    return RetrievalReport(turns=turns, scanned=report.scanned, exact=report.exact)


@attrs.define(eq=False)
class InjectionActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    renderer: str
    namespace: str
    hub: EventHub
    inbox_size: int
    placement: str = attrs.field(default="before_user", kw_only=True)
    section_priority: int | None = attrs.field(default=None, kw_only=True)
    max_block_bytes: int | None = attrs.field(default=None, kw_only=True)
    mailbox: Mailbox[Inject, Injected] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.mailbox = Mailbox.open("injection", self.inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self._handle, task_status=task_status)

    async def _handle(self, request: Inject) -> Injected:
        return self.inject(request)

    def inject(self, request: Inject) -> Injected:
        report = fit_block(request.report, self.renderer, self.max_block_bytes)
        injected = inject(
            report, request.request, self.renderer, self.placement, self.section_priority
        )
        self.hub.publish(
            RecallInjected(
                at=now(),
                namespace=self.namespace,
                outcome=injected.outcome.value,
                items=len(report.turns),
                digest=digest_request(injected.request),
                injected=[
                    InjectedItem(id=t.id, source=t.source, score=t.score) for t in report.turns
                ],
                dropped=len(request.report.turns) - len(report.turns),
            )
        )
        return injected
