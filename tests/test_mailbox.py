"""The actor loop every pipeline actor runs: answers in order, and never leaves a caller
waiting when the actor stops."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors._store.mailbox import Mailbox


async def test_stopping_an_actor_fails_in_flight_and_queued_requests() -> None:
    mailbox: Mailbox[int, int] = Mailbox.open("test", 4)
    started = trio.Event()

    async def handle(request: int) -> int:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    outcomes: dict[int, str] = {}

    async def ask(i: int) -> None:
        try:
            await mailbox.ask(i)
        except trio.ClosedResourceError as error:
            outcomes[i] = str(error)

    with trio.fail_after(10):
        async with trio.open_nursery() as callers, trio.open_nursery() as actor:
            await actor.start(mailbox.serve, handle)
            callers.start_soon(ask, 1)
            await started.wait()
            callers.start_soon(ask, 2)  # queued behind the one in flight
            callers.start_soon(ask, 3)
            await trio.testing.wait_all_tasks_blocked()
            assert mailbox.used() == 2
            actor.cancel_scope.cancel()
    assert set(outcomes) == {1, 2, 3}
    assert "closed" in outcomes[1] and "closed" in outcomes[2]


async def test_serve_answers_in_order_and_errors_are_replies() -> None:
    mailbox: Mailbox[int, int] = Mailbox.open("test", 2)

    async def handle(request: int) -> int:
        if request < 0:
            raise ValueError(f"negative: {request}")
        return request * 10

    with trio.fail_after(10):
        async with trio.open_nursery() as actor:
            await actor.start(mailbox.serve, handle)
            assert await mailbox.ask(4) == 40
            with pytest.raises(ValueError, match="negative: -1"):
                await mailbox.ask(-1)
            assert await mailbox.ask(5) == 50  # an error is a reply, not a crash
            mailbox.send.close()
