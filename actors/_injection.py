"""The injection actor: renders a recall and places it in the request (design §5).

The work is the pure :func:`protocol.inject`; the actor adds the configured renderer and
the ``RecallInjected`` event, and keeps injection on the same message-passing footing as
the other stages, so that a stream of ``Inject`` messages can be logged and replayed.
"""

from __future__ import annotations

import trio

from protocol import Injected, digest_request, inject
from protocol.events import RecallInjected
from protocol.messages import Inject

from ._events import EventHub, now
from ._mailbox import Mailbox

__all__ = ["InjectionActor"]


class InjectionActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    def __init__(self, renderer: str, namespace: str, hub: EventHub, inbox_size: int) -> None:
        self.renderer = renderer
        self.namespace = namespace
        self.hub = hub
        self.mailbox: Mailbox[Inject] = Mailbox.open("injection", inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self._handle, task_status=task_status)

    async def _handle(self, request: Inject) -> Injected:
        return self.inject(request)

    def inject(self, request: Inject) -> Injected:
        injected = inject(request.report, request.request, self.renderer)
        self.hub.publish(
            RecallInjected(
                at=now(),
                namespace=self.namespace,
                outcome=injected.outcome.value,
                items=len(request.report.turns),
                digest=digest_request(injected.request),
            )
        )
        return injected
