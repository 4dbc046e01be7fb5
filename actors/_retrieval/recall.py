"""The recall kind: the engine's tuned recall, over one snapshot of either backend.

``SearchRequest(kind="recall")`` is what ``Memory.retrieve``, the MCP ``recall`` tool,
CLI ``search``, LangChain's recall retriever and LangGraph's ``search`` run. It is a
search kind like the others (``actors/_retrieval/engine.py``): it reads a
:class:`~actors._retrieval.view.View` bound to one snapshot, and builds nothing until the
end. Its stages, each owned by one module:

1. **Keyword list** (``actors/_retrieval/bm25.py``): BM25's top ``fetch_k``. It comes first, since
   it embeds nothing: its hits' speakers tell which names the query holds, and a named
   speaker's name is left out of the query that is embedded (:func:`shape`).
2. **Dense list** (``actors/_inmemory/scan.py`` in memory, pgvector on pg): the top ``fetch_k`` by
   cosine; every keyword hit also gets its cosine, from the same snapshot.
3. **Fusion and neighbours** (``actors/_retrieval/fusion.py``): reciprocal rank fusion of the two
   lists, then each hit borrows a share of its neighbours' fused scores (the entries
   just before and after it in its conversation).
4. **Focus** (``actors/_retrieval/focus.py``): hits said by a speaker the query names, and those
   dated near a date it names, are boosted.
5. **Entity links** (``actors/_retrieval/links.py``): the best hits are anchors; hits further down
   that share a rare word with an anchor are boosted.
6. **Assembly**: hits with the same content (sha256 of the projection) are kept once,
   at the best rank; the best ``k`` are built, each with its cosine as ``score``, its
   ``rank`` and the ``channels`` that lifted it; the relevance floor
   (``score_threshold``) drops hits after ranking.

``shape`` runs before the query is embedded, ``rank_recall`` after, on the view the
dense list was read from. When the store committed in between (the views' versions
differ), the keyword list is read again, so every list, text and score of one recall
comes from one snapshot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from protocol import SearchRequest

from . import ranker
from .focus import (
    DateMention,
    entry_date,
    named_speakers,
    near,
    query_dates,
    speaker_of,
    without_names,
)
from .fusion import fuse, lend
from .links import ANCHORS, DEPTH, link_terms, linked, rare
from .view import Candidate, Pick, View

__all__ = ["Shaped", "rank_recall", "recall_depth", "shape"]

# The channel names a recall hit reports, in their order.
_CHANNELS = ("dense", "bm25", "speaker", "date", "neighbor", "link")


@attrs.frozen(slots=True)
class Shaped:
    """What recall knows before the query is embedded.

    Attributes:
        keyword: BM25's list, best first (empty for ``RecallSettings.search="dense"``).
        texts: the keyword hits' texts (each entry's index text), by key.
        named: the speakers the query names.
        embedded: the text to embed: the query without the named speakers' names.
        version: the view's snapshot version when the list was read.
    """

    keyword: list[Candidate]
    texts: dict[int, str]
    named: frozenset[str]
    embedded: str
    version: object


def recall_depth(request: SearchRequest, k: int) -> int:
    """How deep each list is read: ``fetch_k`` of the settings, and at least ``k``."""
    return max(k, request.recall_settings.fetch_k)


def shape(request: SearchRequest, view: View, depth: int) -> Shaped:
    """The keyword list, the speakers the query names and the text to embed."""
    settings = request.recall_settings
    assert request.query is not None
    query = request.query
    if settings.search == "dense":
        return Shaped([], {}, frozenset(), query, view.version())
    keyword = view.bm25(query, depth)
    texts = view.texts([c.key for c in keyword], projections=False)
    named: frozenset[str] = frozenset()
    if settings.speaker_weight > 0:
        named = named_speakers(query, map(speaker_of, texts.values()))
    return Shaped(keyword, texts, named, without_names(query, named), view.version())


@attrs.define
class _Hits:
    """The fused hits so far: keys best first, their scores, and what lifted each
    (``lent``: the hits that borrowed from a neighbour, kept apart since most do)."""

    keys: list[int]
    scores: npt.NDArray[np.float64]
    lifted: dict[int, set[str]] = attrs.field(factory=dict)
    lent: frozenset[int] = frozenset()

    def lift(self, key: int, channel: str) -> None:
        self.lifted.setdefault(key, set()).add(channel)

    def channels(self, key: int, listed: dict[str, int]) -> tuple[str, ...]:
        """What lifted ``key``, in the order of :data:`_CHANNELS`; ``listed``: its
        rank in each list that holds it."""
        lifted = self.lifted.get(key, set()) | listed.keys()
        if key in self.lent:
            lifted.add("neighbor")
        return tuple(c for c in _CHANNELS if c in lifted)

    def reorder(self, factor: npt.NDArray[np.float64], keep: int) -> None:
        """Multiply the first ``len(factor)`` scores by ``factor``, keep the best
        ``keep``, best first; ties keep their order."""
        end = factor.shape[0]
        boosted = self.scores[:end] * factor
        order = np.argsort(-boosted, kind="stable")[:keep]
        self.keys = [self.keys[i] for i in order.tolist()]
        self.scores = boosted[order]


def rank_recall(
    request: SearchRequest, view: View, shaped: Shaped, k: int, depth: int
) -> list[Pick]:
    """The recall kind's best ``k`` hits from ``view`` (the dense list bound to the
    embedding of ``shaped.embedded``), as picks: key, cosine, final score, ranks per
    list, rank and channels."""
    settings = request.recall_settings
    threshold = request.score_threshold
    if settings.search == "dense":
        # Embedding similarity alone: the dense list, each content once.
        dense = view.dense(depth)
        cosine = {c.key: c.score for c in dense}
        scores = np.array([c.score for c in dense], dtype=np.float64)
        lists = _Places([c.key for c in dense], [])
        return _assemble(view, _Hits([c.key for c in dense], scores), cosine, lists, k, threshold)
    keyword, texts = shaped.keyword, dict(shaped.texts)
    if view.version() != shaped.version:
        # The store committed since the keyword list was read: read it on this snapshot.
        assert request.query is not None
        keyword = view.bm25(request.query, depth)
        texts = view.texts([c.key for c in keyword], projections=False)
    dense = view.dense(depth)
    cosine = {c.key: c.score for c in dense}
    cosine.update(view.cosines([c.key for c in keyword if c.key not in cosine]))
    dense_keys, keyword_keys = [c.key for c in dense], [c.key for c in keyword]
    neighbors = view.neighbors(list(dict.fromkeys(dense_keys + keyword_keys)))
    fused = fuse(
        {"dense": dense_keys, "bm25": keyword_keys},
        k=settings.rrf_k,
        weights={"dense": settings.dense_weight, "bm25": settings.bm25_weight},
    )
    learned = settings.ranker == "learned"
    unlent = dict(zip(fused.keys, fused.scores.tolist(), strict=True)) if learned else {}
    fused = lend(fused.keys, fused.scores, neighbors, settings.neighbor_weight)
    hits = _Hits(fused.keys, fused.scores)
    if settings.neighbor_weight > 0:
        hits.lent = frozenset(
            key for key, lent in zip(fused.keys, fused.lent.tolist(), strict=True) if lent > 0
        )
    lists = _Places(dense_keys, keyword_keys)
    # Entity links read the top DEPTH after focus, and only lift hits among them; the
    # learned ranker reorders the top ranker.DEPTH.
    keep = max(k, DEPTH) if settings.link_weight > 0 else k
    if learned:
        keep = max(keep, ranker.DEPTH)
    assert request.query is not None
    mentions = query_dates(request.query) if settings.date_weight > 0 else []
    _focus(request, view, hits, texts, shaped.named, mentions, keep)
    terms = _links(request, view, hits, neighbors) if settings.link_weight > 0 else None
    if learned:
        end = max(k, ranker.DEPTH)
        found = ranker.features(
            query=request.query,
            view=view,
            keys=hits.keys[:end],
            boosted=hits.scores[:end],
            fused=dict(zip(fused.keys, fused.scores.tolist(), strict=True)),
            unlent=unlent,
            dense=dense,
            keyword=keyword,
            dense_place=lists.dense,
            keyword_place=lists.keyword,
            cosine=cosine,
            texts=texts,
            named=shaped.named,
            mentions=mentions,
            neighbors=neighbors,
            neighbor_on=settings.neighbor_weight > 0,
            links=terms,
        )
        scored = ranker.scores(found.matrix)
        order = np.argsort(-scored, kind="stable")
        # The candidates' scores are the model's; the hits below them keep their order.
        tail = (
            np.minimum(scored.min(initial=0.0), 0.0)
            - 1.0
            - np.arange(len(hits.keys) - len(found.keys))
        )
        hits.keys = [found.keys[i] for i in order.tolist()] + hits.keys[end:]
        hits.scores = np.concatenate([scored[order], tail])
    return _assemble(view, hits, cosine, lists, k, threshold)


class _Places:
    """Each listed key's 1-based place in the dense and the keyword list: a dict per
    list (the ranker reads them for its candidates), and a hit's ``ranks`` built from
    them only for the hits returned."""

    def __init__(self, dense: list[int], keyword: list[int]) -> None:
        self.dense = {key: place for place, key in enumerate(dense, 1)}
        self.keyword = {key: place for place, key in enumerate(keyword, 1)}

    def of(self, key: int) -> dict[str, int]:
        ranks = {}
        if (place := self.dense.get(key)) is not None:
            ranks["dense"] = place
        if (place := self.keyword.get(key)) is not None:
            ranks["bm25"] = place
        return ranks


def _assemble(
    view: View,
    hits: _Hits,
    cosine: dict[int, float],
    lists: _Places,
    k: int,
    threshold: float | None,
) -> list[Pick]:
    """The best ``k`` hits, each content once, as picks with their cosine, rank and
    channels; the floor (``threshold``) drops hits after ranking."""
    picks: list[Pick] = []
    for key, score in _unique(view, hits, k):
        if threshold is not None and cosine[key] < threshold:
            continue
        ranks = lists.of(key)
        channels = hits.channels(key, ranks)
        picks.append(Pick(key, cosine[key], score, ranks, len(picks) + 1, channels))
    return picks


def _unique(view: View, hits: _Hits, k: int) -> list[tuple[int, float]]:
    """The best ``k`` hits with each content (sha256 of the projection) kept once, at
    its best rank, so a memory stored twice is returned once."""
    seen: set[bytes] = set()
    kept: list[tuple[int, float]] = []
    start = 0
    scores = hits.scores.tolist()
    while len(kept) < k and start < len(hits.keys):
        # Usually one read: duplicates are rare, so k more hits almost always suffice.
        chunk = hits.keys[start : start + k + (start > 0) * k]
        texts = view.texts(chunk, projections=True)
        for offset, key in enumerate(chunk):
            digest = hashlib.sha256(texts.get(key, "").encode("utf-8", "surrogatepass")).digest()
            if digest not in seen:
                seen.add(digest)
                kept.append((key, scores[start + offset]))
                if len(kept) == k:
                    break
        start += len(chunk)
    return kept


def _focus(
    request: SearchRequest,
    view: View,
    hits: _Hits,
    texts: dict[int, str],
    named: frozenset[str],
    mentions: list[DateMention],
    keep: int,
) -> None:
    """Keep the best ``keep`` hits once those said by a ``named`` speaker, and those
    dated near a date of ``mentions`` (the dates the query names), are boosted
    (``speaker_weight``, ``date_weight``); ties keep their order.

    ``texts`` holds each keyword hit's text; a dense-only hit's is read only when a
    speaker or a date is named. The hits are best first and a boost only multiplies,
    so a hit whose score times the largest factor stays below the ``keep``-th best
    score cannot make the top ``keep``: only the hits before it (the *reach*) are read
    and boosted. Whether a date tells hits apart (some dated hit is near it and some
    is not) depends on every hit; it is decided on the reach when the reach holds
    both kinds, and only otherwise on every hit.
    """
    settings = request.recall_settings
    keys, scores = hits.keys, hits.scores
    if not (named or mentions):
        hits.keys, hits.scores = keys[:keep], scores[:keep]
        return
    # The same product as the largest boosted factor below, so the comparison is exact.
    largest = 1.0
    if named:
        largest *= 1.0 + settings.speaker_weight
    if mentions:
        largest *= 1.0 + settings.date_weight
    end = len(keys)
    if end > keep:
        below = np.flatnonzero(scores[keep:] * largest < scores[keep - 1])
        if below.shape[0]:
            end = keep + int(below[0])
    reach = keys[:end]
    factor = np.ones(end, dtype=np.float64)
    unread = [key for key in reach if key not in texts]
    if unread:
        texts.update(view.texts(unread, projections=False))
    if named:
        lift = 1.0 + settings.speaker_weight
        for i, key in enumerate(reach):
            if speaker_of(texts.get(key, "")) in named:
                factor[i] *= lift
                hits.lift(key, "speaker")
    if mentions:
        close = _dated(view, reach, texts, mentions)
        if close is None:
            # Not decided within the reach: every hit decides.
            close = _dated(view, keys, texts, mentions) or set()
        if close:
            lift = 1.0 + settings.date_weight
            for i, key in enumerate(reach):
                if key in close:
                    factor[i] *= lift
                    hits.lift(key, "date")
    if not np.any(factor != 1.0):
        hits.keys, hits.scores = keys[: min(keep, end)], scores[: min(keep, end)]
        return
    hits.reorder(factor, keep)


def _dated(
    view: View, keys: Sequence[int], texts: dict[int, str], mentions: list[DateMention]
) -> set[int] | None:
    """The ``keys`` dated near a date of ``mentions`` when that tells them apart (some
    dated key is near and some is not), else None. An entry's day is its text's
    ``"Date: "`` line, else the day it occurred (``occurred_at``)."""
    unread = [key for key in keys if key not in texts]
    if unread:
        texts.update(view.texts(unread, projections=False))
    days = view.days([key for key in keys if "\nDate: " not in texts.get(key, "")])
    close, far = set(), False
    for key in keys:
        day = entry_date(texts.get(key, "")) or days.get(key)
        if day:
            if any(near(m, day) for m in mentions):
                close.add(key)
            else:
                far = True
    return close if close and far else None


def _links(
    request: SearchRequest, view: View, hits: _Hits, neighbors: dict[int, int]
) -> dict[str, set[int]]:
    """Boost the best ``ANCHORS`` hits (each content once), and the hits of the top
    ``DEPTH`` linked to one (``actors/_retrieval/links.py``), by ``link_weight``; ties keep their
    order. Two reads: the top hits' projections, and the namespace's document
    frequencies of the anchors' terms. Returns the link terms (rare ones only), each
    with the anchors that hold it (the learned ranker reads them)."""
    head = hits.keys[:DEPTH]
    texts = view.texts(head, projections=True)
    anchors: dict[int, str] = {}
    for key in head:
        text = texts.get(key)
        if text is not None and text not in anchors.values():
            anchors[key] = text
            if len(anchors) == ANCHORS:
                break
    speakers = {s for text in texts.values() if (s := speaker_of(text)) is not None}
    assert request.query is not None
    terms = link_terms(request.query, anchors, speakers)
    if not terms:
        return {}
    entries, counts = view.term_counts(sorted(terms))
    kept = rare(entries, counts)
    terms = {t: keys for t, keys in terms.items() if t in kept}
    candidates = {k: t for k, t in texts.items() if k not in anchors}
    boosted = set(anchors) | linked(candidates, terms, neighbors) if terms else set()
    if not boosted - set(anchors):
        return terms
    lift = 1.0 + request.recall_settings.link_weight
    factor = np.array([lift if key in boosted else 1.0 for key in hits.keys])
    for key in boosted:
        hits.lift(key, "link")
    hits.reorder(factor, len(hits.keys))
    return terms
