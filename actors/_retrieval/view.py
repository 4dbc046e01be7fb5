"""What the retrieval engine reads: one snapshot :class:`View` of a backend, the
:class:`Candidate` entries of its ranked lists, and the :class:`Pick` hits it builds
(``actors/_retrieval/engine.py`` runs the kinds over it; ``actors/_retrieval/recall.py`` is
the recall kind; the in-memory view is in ``actors/_inmemory/view.py``, the pg one in
``actors/_pg/search.py``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from protocol import RetrievedTurn, ScoredDocument

__all__ = ["Candidate", "Pick", "View"]


class Candidate(NamedTuple):
    """One entry of a ranked list (a named tuple: a recall reads a few hundred).

    Attributes:
        key: how the view finds the entry again in its snapshot (a slot in memory, the
            sequence number on pg).
        score: cosine similarity (dense) or the BM25 score (bm25).
        raw: the backend's own number for the ranking: the cosine in memory,
            pgvector's distance on pg, the BM25 score for BM25.
    """

    key: int
    score: float
    raw: float


class Pick(NamedTuple):
    """One hit to build: its key, its ``score`` (what ``ScoredDocument.score`` says),
    the backend's ``raw`` score, its rank in each list, and, for recall, its place in
    the answer and the channels that lifted it."""

    key: int
    score: float
    raw: float
    ranks: dict[str, int]
    rank: int | None = None
    channels: tuple[str, ...] = ()


class View(Protocol):
    """What a backend answers for one search, from one snapshot (query vector,
    namespace, filter and time window bound)."""

    @property
    def scanned(self) -> int:
        """How many live entries the dense list scored (the namespace's, in scope)."""
        ...

    @property
    def exact(self) -> bool:
        """False for a backend whose dense ranking is approximate."""
        ...

    def version(self) -> object:
        """A token that changes whenever the store commits (recall reads its keyword
        list again when the view it shaped the query on is older)."""
        ...

    def dense(self, depth: int, *, vectors: bool = False) -> list[Candidate]:
        """The dense top ``depth``, best first, ties to the newest entry. ``vectors``:
        :meth:`vectors` will be asked about these candidates."""
        ...

    def cosines(self, keys: Sequence[int]) -> dict[int, float]:
        """The query's cosine with each of ``keys``, scored as the dense list scores."""
        ...

    def bm25(self, text: str, depth: int) -> list[Candidate]:
        """BM25's top ``depth`` for ``text``, best first, ties to the newest entry."""
        ...

    def texts(self, keys: Sequence[int], *, projections: bool) -> dict[int, str]:
        """Each entry's index text (what BM25 and the embedder read), or with
        ``projections`` its own text (a turn's message projection)."""
        ...

    def days(self, keys: Sequence[int]) -> dict[int, dt.date]:
        """The day each entry occurred (``occurred_at``), where the store knows it."""
        ...

    def neighbors(self, keys: Sequence[int]) -> dict[int, int]:
        """Each entry's neighbour key: two entries are neighbours when their keys
        differ by one (consecutive entries of one conversation)."""
        ...

    def term_counts(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """The namespace's live entries, and how many of them hold each BM25 term."""
        ...

    def vectors(self, keys: Sequence[int]) -> npt.NDArray[np.float32]:
        """The stored (normalized) vectors of dense candidates, one row per key."""
        ...

    def hits(self, picks: Sequence[Pick]) -> list[ScoredDocument]:
        """The documents of ``picks``, in their order."""
        ...

    def turns(self, picks: Sequence[Pick]) -> list[RetrievedTurn]:
        """The turns of ``picks``, in their order, scored ``pick.score``."""
        ...
