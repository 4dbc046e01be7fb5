"""The index text a store derives for an entry, the one rule both backends apply.

The rule (:func:`protocol.entry_text` holds its form): an entry with a conversation,
or with an explicit ``occurred_at``, that the writer gave no ``texts`` is indexed and
embedded by its own text (a turn's projection, a document's text), its date line and,
in a conversation, the own text of the entry before it there (its predecessor in the
batch, else the newest live entry of that conversation in the store), cut to
:data:`CONTEXT_CHARS`. The date line is the entry's ``occurred_at``: the write time for
an entry of a conversation written without one; an entry without a conversation gets
it only when ``occurred_at`` was given. A derived text never makes an entry too large:
it is cut to fit, only ever in the date and context that follow the own text, and an
entry whose own text cannot be held a second time is indexed by its own text alone (as
``Offload`` does, ``actors._agent.compaction.entry_texts``). Reads never return it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs

from protocol import Document, entry_text

from .prepare import TurnBatch

__all__ = [
    "CONTEXT_CHARS",
    "DocumentTimes",
    "document_times",
    "cut_utf8",
    "derived_index_texts",
    "document_index_texts",
    "fit_index_text",
    "indexed_texts",
    "turn_index_texts",
    "write_time",
]


#: A predecessor's text is cut to this many characters in an entry's index text (the
#: store's, :func:`derived_index_texts`, and ``Offload``'s): it says what the turn is
#: about in its first lines, and a long tool output would swamp the turn's keywords.
CONTEXT_CHARS = 500


def write_time() -> dt.datetime:
    """The time a write stamps on its entries that were given no ``occurred_at``: now,
    in UTC, to the microsecond (what both backends keep exactly)."""
    return dt.datetime.now(dt.UTC)


def cut_utf8(text: str, keep: int) -> str:
    """``text`` cut to at most ``keep`` UTF-8 bytes (a partial character is dropped)."""
    return text.encode("utf-8", "surrogatepass")[:keep].decode("utf-8", "ignore")


def fit_index_text(own: str, text: str, budget: int) -> str | None:
    """``text`` (an index text that starts with the entry's ``own`` text) within
    ``budget`` UTF-8 bytes: as it is, or cut in what follows ``own``; None when ``own``
    alone is over the budget (the entry is then indexed by its own text, which it
    already counts once)."""
    if _utf8_len(own) > budget:
        return None
    if _utf8_len(text) > budget:
        return cut_utf8(text, budget)  # budget >= the own text's bytes: it stays whole
    return text


def derived_index_texts(
    own: Sequence[str],
    sizes: Sequence[int],
    conversations: Sequence[str | None],
    occurred: Sequence[dt.datetime],
    explicit: Sequence[bool],
    before: Mapping[str, str],
    max_entry_bytes: int,
) -> list[str | None] | None:
    """The index text the store derives for each entry of a batch written without
    ``texts`` (the rule is in the module docstring), or None for an entry indexed by
    its own text; None for the whole batch when no entry gets one.

    Args:
        own: each entry's own text (a turn's projection, a document's text).
        sizes: each entry's :func:`entry_bytes` without an index text.
        conversations: each entry's conversation, or None.
        occurred: each entry's ``occurred_at`` (given, or the write time).
        explicit: whether each entry's ``occurred_at`` was given.
        before: the own text of the newest live entry of each of the batch's
            conversations in the store (the batch's replaced ids left out), where it
            has one.
        max_entry_bytes: the cap the index text is counted against.
    """
    out: list[str | None] = []
    last = dict(before)
    for text, size, conversation, when, given in zip(
        own, sizes, conversations, occurred, explicit, strict=True
    ):
        if conversation is None and not given:
            out.append(None)
            continue
        context: list[str] = []
        if conversation is not None:
            previous = last.get(conversation)
            if previous is not None:
                context.append(previous[:CONTEXT_CHARS])
            last[conversation] = text
        index = entry_text(text, occurred_at=when, context=context)
        out.append(fit_index_text(text, index, max_entry_bytes - size))
    return out if any(t is not None for t in out) else None


def turn_index_texts(
    batch: TurnBatch, when: dt.datetime, before: Mapping[str, str], max_entry_bytes: int
) -> list[str | None] | None:
    """:func:`derived_index_texts` of a checked batch of turns, all of one time
    (``when``: the batch's ``occurred_at``, or the write time) and conversation; None
    when the batch gave ``texts`` or has neither a conversation nor a given time."""
    if batch.given or (batch.conversation is None and batch.occurred_at is None):
        return None
    count = len(batch.texts)
    return derived_index_texts(
        batch.texts,
        batch.sizes,
        [batch.conversation] * count,
        [when] * count,
        [batch.occurred_at is not None] * count,
        before,
        max_entry_bytes,
    )


def document_index_texts(
    documents: Sequence[Document],
    sizes: Sequence[int],
    occurred: Sequence[dt.datetime],
    before: Mapping[str, str],
    max_entry_bytes: int,
) -> list[str | None] | None:
    """:func:`derived_index_texts` of a checked batch's surviving documents (each at
    its ``occurred`` time: its own, or the write time); None when none of them has a
    conversation or a given time."""
    given = [d.occurred_at is not None for d in documents]
    conversations = [d.conversation for d in documents]
    if not any(given) and all(c is None for c in conversations):
        return None
    texts = [d.text for d in documents]
    return derived_index_texts(
        texts, sizes, conversations, occurred, given, before, max_entry_bytes
    )


@attrs.frozen
class DocumentTimes:
    """What a batch of documents stores beside its texts: each one's ``occurred_at``
    (given, or the write time), its conversation, and the derived index texts."""

    occurred: list[dt.datetime]
    conversations: list[str | None]
    index_texts: list[str | None] | None

    @property
    def stored_conversations(self) -> list[str | None] | None:
        """The conversations, or None when no document has one."""
        return None if all(c is None for c in self.conversations) else self.conversations


async def document_times(
    documents: Sequence[Document],
    sizes: Sequence[int],
    max_entry_bytes: int,
    before: Callable[[list[str | None], list[str]], Awaitable[Mapping[str, str]]],
    now: dt.datetime | None = None,
) -> DocumentTimes:
    """The times, conversations and derived index texts of a batch of documents (both
    backends' preparation). ``before(conversations, ids)`` reads the own text of the
    newest live entry of each conversation, the batch's ids left out; it is asked only
    when some document has a conversation. ``now`` (None: :func:`write_time`) is the
    time stamped on a document without an ``occurred_at``: the store clock's."""
    if now is None:
        now = write_time()
    occurred = [now if d.occurred_at is None else d.occurred_at for d in documents]
    conversations = [d.conversation for d in documents]
    previous: Mapping[str, str] = {}
    if any(c is not None for c in conversations):
        previous = await before(conversations, [d.id for d in documents if d.id is not None])
    index_texts = document_index_texts(documents, sizes, occurred, previous, max_entry_bytes)
    return DocumentTimes(occurred, conversations, index_texts)


def indexed_texts(texts: Sequence[str], index_texts: Sequence[str | None] | None) -> list[str]:
    """What each entry is indexed and embedded by: its derived index text, or its text."""
    if index_texts is None:
        return list(texts)
    return [t if i is None else i for t, i in zip(texts, index_texts, strict=True)]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
