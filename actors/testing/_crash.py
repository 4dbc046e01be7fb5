"""Crash injection: the store's one test hook."""

from __future__ import annotations

from .._store.handle import StoreHandle


class InjectedCrash(RuntimeError):
    """The default crash that :func:`inject_crash` arms."""


def inject_crash(handle: StoreHandle, exc: BaseException | None = None) -> None:
    """Arm a crash inside the store actor at its next write.

    The next write raises ``exc`` (by default an :class:`InjectedCrash`) inside the actor
    after it has validated and embedded the batch and before it commits, as an
    unexpected bug would. The store is then poisoned.
    """
    handle._actor.armed_crash = InjectedCrash("injected crash") if exc is None else exc
