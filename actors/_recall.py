"""The recall actor: answers ``Recall`` requests from the store's snapshots (design §5).

It serves one request at a time, so recall load never piles up concurrent embedder
calls; the store's reads do not use the store's inbox, so recall never waits behind a
slow write.

Hybrid recall (the default, :class:`~protocol.RecallSettings`) fuses two ranked lists
by reciprocal rank fusion: the dense list (what ``retrieve_in`` ranks, with the
cosine scores) and the BM25 list (what a ``bm25``, keyword-only, search ranks), so the
query is embedded once. Both are read as ids, sequences and scores (the store's
internal reads, ``actors/_ranked.py``), and only the fused top ``k`` is built as turns.
Every hit keeps its cosine similarity as ``score``, which is what ``min_similarity``
filters and what the renderers print; the order is the fused one.
Speaker focus and the time channel (``actors._focus``) then boost the hits said by a
speaker the query names, and those dated near a date it names; a focused query is
embedded without the speaker's name.

Context assembly: hits with the same content (the same projection, by sha256) are
kept once, at the best rank, so a memory stored twice is injected once; the block
budget and the provenance of every injected item are the injection actor's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from protocol import RetrievalReport, RetrievedTurn, projection
from protocol._events import fingerprint
from protocol._memory import describe_error
from protocol.events import Recalled, RecallFailed
from protocol.messages import Recall

from ._events import EventHub, now
from ._focus import (
    DateMention,
    entry_date,
    named_speakers,
    near,
    query_dates,
    speaker_of,
    without_names,
)
from ._fusion import fuse_hybrid
from ._handle import Store, StoreHandleBase
from ._links import ANCHORS, DEPTH, link_terms, linked, rare
from ._mailbox import Mailbox

__all__ = ["RecallActor"]


@attrs.frozen(slots=True)
class Hit:
    """One fused hit of hybrid recall: its id and its score so far."""

    key: str
    score: float


def unique_by_content(turns: list[RetrievedTurn]) -> list[RetrievedTurn]:
    """``turns`` with each content (sha256 of its projection) kept once, at its best
    rank."""
    seen: set[bytes] = set()
    kept = []
    for turn in turns:
        key = hashlib.sha256(projection(turn.message).encode("utf-8", "surrogatepass")).digest()
        if key not in seen:
            seen.add(key)
            kept.append(turn)
    return kept


def boost(fused: list[Hit], factor: dict[str, float]) -> list[Hit]:
    """``fused`` with each hit's score multiplied by its ``factor`` (1.0 for a hit not
    in it), best first; ties keep their order."""
    if all(f == 1.0 for f in factor.values()):
        return fused
    scored = sorted(
        enumerate(fused),
        key=lambda item: (-item[1].score * factor.get(item[1].key, 1.0), item[0]),
    )
    return [Hit(h.key, h.score * factor.get(h.key, 1.0)) for _, h in scored]


class RecallActor:
    """Owns the receive side of its inbox; every failure is a reply to its caller."""

    def __init__(self, store: Store, hub: EventHub, inbox_size: int) -> None:
        # Every Store a memory runs over is a handle with recall's internal reads.
        assert isinstance(store, StoreHandleBase)
        self.store: StoreHandleBase[Any] = store
        self.hub = hub
        self.mailbox: Mailbox[Recall] = Mailbox.open("recall", inbox_size)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.mailbox.serve(self.recall, task_status=task_status)

    async def recall(self, request: Recall) -> RetrievalReport:
        """Rank, then filter by ``min_similarity``; publish ``Recalled`` or ``RecallFailed``."""
        query_print = fingerprint(request.query)
        try:
            if request.settings.search == "hybrid":
                report = await self.hybrid(request)
            else:
                report = await self.store.retrieve_in(request.namespace, request.query, request.k)
        except Exception as error:
            self.hub.publish(
                RecallFailed(
                    at=now(),
                    namespace=request.namespace,
                    query_fingerprint=query_print,
                    error=describe_error(error),
                )
            )
            raise
        floor = request.min_similarity
        # After ranking, as the contract says: ``scanned`` still counts every entry.
        report = RetrievalReport(
            turns=[
                t for t in unique_by_content(report.turns) if floor is None or t.score >= floor
            ],
            scanned=report.scanned,
            exact=report.exact,
        )
        self.hub.publish(
            Recalled(
                at=now(),
                namespace=request.namespace,
                query_fingerprint=query_print,
                hits=len(report.turns),
                scanned=report.scanned,
                best=report.turns[0].score if report.turns else None,
            )
        )
        return report

    async def hybrid(self, request: Recall) -> RetrievalReport:
        """The ``k`` best entries by RRF of the dense and the BM25 lists, each boosted
        by its neighbours' fused scores (``RecallSettings.neighbor_weight``), by the
        speakers and by the date the query names (``speaker_weight``,
        ``date_weight``).

        Four steps: rank (both lists as ids, sequences and scores: nothing is built
        yet), fuse, boost, then materialize the top ``k`` alone as turns.

        The BM25 list comes first (it embeds nothing): its hits' texts tell which
        speakers the query may name, and a named speaker's name is left out of the
        query that is embedded. The two lists are read from two snapshots, and the
        top ``k`` from a third; an entry deleted (or replaced) in between is left out.
        The dense read also scores every BM25 hit (``also``), so a keyword hit that
        makes the top ``k`` without being in the dense list carries its true cosine;
        only an entry replaced between the two reads sends recall deeper.
        """
        settings = request.settings
        store, namespace, query = self.store, request.namespace, request.query
        depth = max(request.k, settings.fetch_k)
        # Rank. A keyword-only search: the query is not embedded for it.
        keyword = await store._bm25_ranked(namespace, query, depth)
        texts = {h.id: h.text or "" for h in keyword}
        named: frozenset[str] = frozenset()
        if settings.speaker_weight > 0:
            named = named_speakers(query, map(speaker_of, texts.values()))
        embedded = without_names(query, named)
        # The BM25 hits' cosines come with the dense list (``also``), so a keyword hit
        # that makes the top k never needs the dense list deepened to reach it.
        dense = await store._dense_ranked(namespace, embedded, depth, also=list(texts))
        # Fuse and lend each hit its neighbours' scores, over arrays.
        sequences = {h.id: h.sequence for h in dense.hits}
        sequences.update((h.id, h.sequence) for h in keyword)
        keys, scores = fuse_hybrid(
            [h.id for h in dense.hits],
            [h.id for h in keyword],
            sequences,
            k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            bm25_weight=settings.bm25_weight,
            neighbor_weight=settings.neighbor_weight,
        )
        # Boost. Entity links read the top DEPTH after focus, and only lift hits among them.
        keep = max(request.k, DEPTH) if settings.link_weight > 0 else request.k
        fused = await self.focus(request, keys, scores, texts, named, keep)
        if settings.link_weight > 0:
            fused = (await self.links(request, fused, sequences))[: request.k]
        # Materialize the top k, each with its cosine.
        cosine = {h.id: h for h in dense.also}
        cosine.update((h.id, h) for h in dense.hits)
        # Only an entry deleted or replaced between the two lists is still missing.
        while any(h.key not in cosine for h in fused) and depth < dense.scanned:
            depth = min(depth * 4, dense.scanned)
            deeper = await store._dense_ranked(namespace, embedded, depth)
            cosine.update((h.id, h) for h in deeper.hits)
        turns = await store._turns(namespace, [cosine[h.key] for h in fused if h.key in cosine])
        return RetrievalReport(turns=turns, scanned=dense.scanned, exact=dense.exact)

    async def links(
        self, request: Recall, fused: list[Hit], sequences: dict[str, int]
    ) -> list[Hit]:
        """``fused`` with its best ``ANCHORS`` hits (each content once), and the hits of
        its top ``DEPTH`` linked to one (``actors/_links.py``), boosted by
        ``link_weight``; ties keep their order. Two reads: the top hits' projections,
        and the namespace's document frequencies of the anchors' terms."""
        head = fused[:DEPTH]
        texts = await self.store._texts(request.namespace, [h.key for h in head], projections=True)
        anchors: dict[str, str] = {}
        for hit in head:
            text = texts.get(hit.key)
            if text is not None and text not in anchors.values():
                anchors[hit.key] = text
                if len(anchors) == ANCHORS:
                    break
        speakers = {s for text in texts.values() if (s := speaker_of(text)) is not None}
        terms = link_terms(request.query, anchors, speakers)
        if not terms:
            return fused
        entries, counts = await self.store._term_counts(request.namespace, sorted(terms))
        kept = rare(entries, counts)
        terms = {t: keys for t, keys in terms.items() if t in kept}
        candidates = {k: t for k, t in texts.items() if k not in anchors}
        boosted = set(anchors) | linked(candidates, terms, sequences) if terms else set()
        if not boosted - set(anchors):
            return fused
        return boost(fused, dict.fromkeys(boosted, 1.0 + request.settings.link_weight))

    async def focus(
        self,
        request: Recall,
        keys: list[str],
        scores: npt.NDArray[np.float64],
        texts: dict[str, str],
        named: frozenset[str],
        keep: int,
    ) -> list[Hit]:
        """The best ``keep`` of the fused hits (``keys`` with their ``scores``, best
        first) once the hits said by a ``named`` speaker, and those dated near a date
        the query names, are boosted (``speaker_weight``, ``date_weight``), best first;
        ties keep their order.

        ``texts`` holds each BM25 hit's text; a dense-only hit's text is its
        projection (which starts with the speaker), read only when a speaker is named
        or a date is; the dates are in the entries' own texts, read for the dense-only
        hits when the query names a date.

        The hits are best first and a boost only multiplies, so a hit whose score times
        the largest factor stays below the ``keep``-th best score cannot make the top
        ``keep``: only the hits before it (the *reach*) are read and boosted. Whether a
        date tells hits apart (some dated hit is near it and some is not) depends on
        every hit; it is decided on the reach when the reach holds both kinds, and
        only otherwise are the other hits' texts read too.
        """
        settings = request.settings
        mentions = query_dates(request.query) if settings.date_weight > 0 else []
        if not (named or mentions):
            return _hits(keys, scores, range(min(keep, len(keys))))
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
            texts.update(await self.store._texts(request.namespace, unread, projections=True))
        if named:
            lift = 1.0 + settings.speaker_weight
            for i, key in enumerate(reach):
                if speaker_of(texts.get(key, "")) in named:
                    factor[i] *= lift
        if mentions:
            close = await self.dated(request, reach, texts, mentions)
            if close is None:
                # Not decided within the reach: every hit decides.
                close = await self.dated(request, keys, texts, mentions) or set()
            if close:
                lift = 1.0 + settings.date_weight
                for i, key in enumerate(reach):
                    if key in close:
                        factor[i] *= lift
        if not np.any(factor != 1.0):
            return _hits(keys, scores, range(min(keep, end)))
        boosted = scores[:end] * factor
        order = np.argsort(-boosted, kind="stable")[:keep]
        return [Hit(keys[i], float(boosted[i])) for i in order.tolist()]

    async def dated(
        self, request: Recall, keys: list[str], texts: dict[str, str], mentions: list[DateMention]
    ) -> set[str] | None:
        """The ``keys`` dated near a date of ``mentions`` when that tells them apart
        (some dated key is near and some is not), else None: then no key is dated near,
        or every dated key is, and for ``keys`` short of every hit the others decide."""
        # A dense hit's text so far is its projection: its date line is in the entry.
        unread = [key for key in keys if key not in texts]
        if unread:
            texts.update(await self.store._texts(request.namespace, unread, projections=True))
        unread = [key for key in keys if "\nDate: " not in texts.get(key, "")]
        if unread:
            texts.update(await self.store._texts(request.namespace, unread, projections=False))
        close, far = set(), False
        for key in keys:
            day = entry_date(texts.get(key, ""))
            if day:
                if any(near(m, day) for m in mentions):
                    close.add(key)
                else:
                    far = True
        return close if close and far else None


def _hits(keys: list[str], scores: npt.NDArray[np.float64], at: range) -> list[Hit]:
    return [Hit(keys[i], float(scores[i])) for i in at]
