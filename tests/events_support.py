"""Reading what a subscription to a store's or a memory's events holds."""

from __future__ import annotations

import trio

from actors import Subscription
from protocol import Event


def drain(subscription: Subscription) -> list[Event]:
    """Every event the subscription holds now, without waiting for more."""
    out: list[Event] = []
    while True:
        try:
            out.append(subscription.receive_nowait())
        except trio.WouldBlock:
            return out
