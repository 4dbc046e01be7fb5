"""Entity links between turns: what the first hits say that the question does not.

Pure functions, a stage of the recall kind (``actors/_retrieval/recall.py``,
``RecallSettings.link_weight``). A question
whose answer is spread over several turns ("What books has John read?") finds the turn
that matches it best; the others often share a rare word with that turn (a title, a
name, a place, an object: "The Alchemist") rather than with the question. So the best
few hits are *anchors*: the terms of their turns that the question does not hold, and
that few entries of the namespace hold, are *link terms*, and a hit further down that
holds a link term of an anchor it is not next to is *linked*. The neighbours of an
anchor are left out: they are the neighbour boost's business, and they share the
anchor's context line, so they would link on it.

Terms are BM25's (``actors._retrieval.bm25.tokenize``: lowercased, stemmed), read from each hit's
projection without its leading ``"Name: "``; rarity is the namespace's own document
frequency, as BM25 counts it.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from .bm25 import stem_words, tokenize, words_of
from .focus import speaker_of

__all__ = [
    "ANCHORS",
    "DEPTH",
    "RARE_SHARE",
    "bodies_terms",
    "body_terms",
    "link_terms",
    "linked",
    "rare",
]

K = TypeVar("K", bound=Hashable)

#: How many texts' terms :func:`body_terms` keeps (a few recalls' top hits).
BODY_CACHE = 4096

#: How many of the best hits are anchors.
ANCHORS = 5
#: How deep in the boosted list a hit may be linked: a ×(1 + weight) boost lifts a hit
#: into the top ``k`` only from about here (on LoCoMo, 50 and the whole list rank alike).
DEPTH = 50
#: A link term is held by at most this share of the namespace's entries (and by at
#: least 2: one is the anchor itself).
RARE_SHARE = 0.02


@functools.lru_cache(maxsize=BODY_CACHE)
def body_terms(text: str) -> frozenset[str]:
    """The BM25 terms of ``text`` without its leading ``"Name: "`` (the speaker is
    speaker focus's business) and without numbers.

    Kept for the last ``BODY_CACHE`` texts: a recall reads the terms of its top 50
    hits, and the hits of one conversation's questions recur, so tokenizing and
    stemming them again was the largest share of a recall's ranking
    (``docs/pages/benchmarks/recall-quality.md``, "Recall against similarity through
    the store")."""
    speaker = speaker_of(text)
    body = text[len(speaker) + 2 :] if speaker is not None else text
    stems = stem_words(set(words_of(body)))
    return frozenset(t for t in stems.values() if not t.isdigit())


def bodies_terms(texts: Sequence[str]) -> list[frozenset[str]]:
    """:func:`body_terms` of each of ``texts``."""
    return [body_terms(text) for text in texts]


def link_terms(
    query: str,
    anchors: Mapping[K, str],
    speakers: Iterable[str],
) -> dict[str, set[K]]:
    """Each candidate link term of the ``anchors`` (key → projection), with the anchors
    that hold it: their body terms that are not the query's nor a word of a speaker's
    name. Rarity is not judged here (see :func:`rare`)."""
    left_out = set(tokenize(query)) | {t for s in speakers for t in tokenize(s)}
    terms: dict[str, set[K]] = {}
    for key, body in zip(anchors, bodies_terms(list(anchors.values())), strict=True):
        for term in body - left_out:
            terms.setdefault(term, set()).add(key)
    return terms


def rare(entries: int, counts: Mapping[str, int]) -> set[str]:
    """The terms of ``counts`` (term → how many of the namespace's ``entries`` hold
    it) held by at least 2 entries and at most ``RARE_SHARE`` of them (at least 2)."""
    most = max(2, int(RARE_SHARE * entries))
    return {term for term, df in counts.items() if 2 <= df <= most}


def linked(
    candidates: Mapping[K, str],
    terms: Mapping[str, set[K]],
    sequences: Mapping[K, int],
) -> set[K]:
    """The ``candidates`` (key → projection) that hold a link term of an anchor they
    are not, and are not next to (sequence ± 1; a key without a sequence is next to
    none)."""

    def apart(key: K, anchor: K) -> bool:
        if key == anchor:
            return False
        mine, theirs = sequences.get(key), sequences.get(anchor)
        return mine is None or theirs is None or abs(mine - theirs) > 1

    out = set()
    for key, body in zip(candidates, bodies_terms(list(candidates.values())), strict=True):
        if any(apart(key, anchor) for t in terms.keys() & body for anchor in terms[t]):
            out.add(key)
    return out
