"""When a memory happened, and the one rule that turns it into an entry's index text.

Every write path (``Memory.remember``, ``add_documents``, ``store_turns``, the MCP
``remember`` tool, CLI ``add`` and ``import``, the LangChain and LangGraph adapters)
takes an ``occurred_at`` (an aware datetime; ISO 8601 text at the fronts) and an
optional ``conversation``. The store keeps both with the entry; reads filter on
``occurred_at`` (``SearchRequest.since``/``until``), the time channel dates an entry by
it, and the neighbour boost lends only between consecutive entries of one conversation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from ._errors import ConfigError
from ._memory import contextual_entry

__all__ = ["check_conversation", "check_time", "entry_text", "format_date", "parse_time"]

#: A conversation's name is at most this many UTF-8 bytes (like a namespace).
MAX_CONVERSATION_BYTES = 512


def check_time(what: str, value: object) -> dt.datetime | None:
    """``value`` as an aware UTC datetime, or None.

    Raises:
        ConfigError: not None and not an aware ``datetime.datetime`` (a naive one is
            refused: its time zone would be a guess).
    """
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise ConfigError(
            f"{what} is {value!r:.60} ({type(value).__name__}); expected None or an aware "
            "datetime.datetime"
        )
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ConfigError(
            f"{what} is {value.isoformat()}, which has no time zone; expected an aware "
            "datetime (for example datetime.now(timezone.utc))"
        )
    return value.astimezone(dt.UTC)


def parse_time(what: str, text: object) -> dt.datetime:
    """ISO 8601 text (``2023-05-25``, ``2023-05-25T13:14:00+02:00``, ``...Z``) as an aware
    UTC datetime; a date or a time without an offset is read as UTC.

    Raises:
        ConfigError: not a str, or not ISO 8601.
    """
    if not isinstance(text, str):
        raise ConfigError(
            f"{what} is {text!r:.60} ({type(text).__name__}); expected ISO 8601 text"
        )
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{what} is {text!r:.60}; expected ISO 8601, such as 2023-05-25 or "
            "2023-05-25T13:14:00+00:00"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def check_conversation(value: object) -> str | None:
    """``value`` if it is None or a conversation name (a non-empty str of at most
    ``MAX_CONVERSATION_BYTES`` UTF-8 bytes, without NUL).

    Raises:
        ConfigError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(
            f"conversation is {value!r:.60}; expected None or a non-empty str without NUL"
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_CONVERSATION_BYTES:
        raise ConfigError(
            f"conversation is {size} UTF-8 bytes; expected at most {MAX_CONVERSATION_BYTES}"
        )
    return value


def format_date(when: dt.datetime) -> str:
    """The ``Date:`` line's text for ``when``: ``"25 May 2023, 13:14 UTC"`` (what
    ``Offload`` writes by default, and what the time channel reads)."""
    return when.astimezone(dt.UTC).strftime("%d %B %Y, %H:%M UTC")


def entry_text(text: str, *, occurred_at: dt.datetime | None, context: Sequence[str] = ()) -> str:
    """The text a memory is indexed and embedded by: :func:`contextual_entry` of its own
    ``text``, its date and the ``context`` entries just before it in its conversation
    (oldest first). The one rule every write path uses, ``Offload``'s too."""
    date = None if occurred_at is None else format_date(occurred_at)
    return contextual_entry(text, context=context, date=date)
