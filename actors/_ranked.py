"""What recall ranks on before it builds anything: ids, sequences and scores.

Hybrid recall (``actors/_recall.py``) fuses two lists of ``fetch_k`` entries each (200 by
default) and injects the best ``k`` (5). Building a full :class:`~protocol.RetrievedTurn`
or :class:`~protocol.Document` for every candidate (decoding its message and metadata)
cost more than the ranking itself, so every store handle answers three internal reads
(:class:`~actors._handle.StoreHandleBase`): the dense and the BM25 lists as
:class:`Ranked` entries, the texts of the few candidates speaker focus and the time
channel must read, and the full turns of the fused top ``k`` only.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

__all__ = ["Ranked", "RankedList"]


class Ranked(NamedTuple):
    """One entry of a ranked list, not yet materialized (a named tuple: a read builds
    a few hundred per recall, at half the cost of a frozen attrs class).

    Attributes:
        id: the entry's id (a turn stored without one has ``turn-<sequence>``).
        sequence: its sequence number, which also tells a replaced entry apart: a
            materializing read leaves out an id whose sequence changed since.
        score: its cosine similarity (dense) or its BM25 score.
        text: the entry's own text (``Document.text``), when the read gives it (BM25's
            list does: its hits' speakers tell which names the query holds).
    """

    id: str
    sequence: int
    score: float
    text: str | None = None


@attrs.frozen(slots=True)
class RankedList:
    """A dense list: its entries best first, and what ``RetrievalReport`` says of it.

    ``also`` holds the cosine of each entry the read was asked about (``also=`` ids)
    that is not among ``hits``, scored exactly as a hit would be: hybrid recall asks
    for its BM25 hits, so a keyword hit that makes the top k has its cosine without the
    dense list being deepened to reach it.
    """

    hits: list[Ranked]
    scanned: int
    exact: bool = True
    also: list[Ranked] = attrs.field(factory=list)
