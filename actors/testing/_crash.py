"""Crash injection: the store's one test hook."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class InjectedCrash(RuntimeError):
    """The default crash that :func:`inject_crash` arms."""


@runtime_checkable
class _Armable(Protocol):
    """A store actor with the crash hook (both backends' actors have it)."""

    armed_crash: BaseException | None


def inject_crash(handle: object, exc: BaseException | None = None) -> None:
    """Arm a crash inside the store actor at its next write.

    The next write raises ``exc`` (by default an :class:`InjectedCrash`) inside the actor
    after it has validated and embedded the batch and before it commits, as an
    unexpected bug would. The store is then poisoned.

    Raises:
        TypeError: ``handle`` is not a store handle from ``open_store`` or
            ``open_pg_store`` (its actor has no crash hook).
    """
    actor = getattr(handle, "_actor", None)
    if not isinstance(actor, _Armable):
        raise TypeError(
            f"inject_crash got a {type(handle).__name__}, whose actor has no crash hook; "
            "expected a store handle from open_store or open_pg_store"
        )
    actor.armed_crash = InjectedCrash("injected crash") if exc is None else exc
