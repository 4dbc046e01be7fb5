"""The learned ranker: a linear model over recall's channels, for its best hits.

A stage of the recall kind (``actors/_retrieval/recall.py``, ``RecallSettings.ranker``),
after fusion, the neighbour boost, speaker focus, the time channel and entity links:
the best :data:`DEPTH` hits of that ranking (at least ``k``) are the candidates. Each
gets the generic features of :data:`BASE` (none names a word of any conversation),
repeated in a second half for a query that asks "when" (:data:`FEATURES`), and is
scored by ``features @ WEIGHTS`` (``actors/_retrieval/ranker_weights.py``); the
candidates are reordered by that score, and the hits below them keep their order. So
the ranker changes which of the hand-tuned top ``DEPTH`` come first, never which hits
make it. The weights are learned on LoCoMo's dev conversations by
``benches/train_ranker.py`` (pairwise logistic, refined on LambdaRank's gradients),
with leave-one-conversation-out cross-validation; the script writes the weights file.

A channel that the settings turn off (``neighbor_weight``, ``speaker_weight``,
``date_weight`` or ``link_weight`` at 0) contributes no feature: its columns are zero,
so the bench can still measure the ranker with one technique off. The day features
(candidates said on one day) belong to the neighbour channel.

Every feature is a column computed over all candidates at once (numpy); the texts,
dates and term statistics come from the :class:`~actors._retrieval.view.View`, so both
backends rank alike.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from .bm25 import tokenize
from .focus import DateMention, entry_date, near, speaker_of
from .links import bodies_terms
from .ranker_weights import WEIGHTS
from .view import Candidate, View

__all__ = ["BASE", "DEPTH", "FEATURES", "Candidates", "features", "scores"]

#: How many of the best hits (at least ``k``) the ranker reorders.
DEPTH = 25
#: How many of the best fused hits a hit beside which counts as "next to the top".
TOP = 3

#: The features, in the order of a row of :attr:`Candidates.matrix`.
BASE = (
    "fused",  # ln(fused score, neighbours' share included / the best one's)
    "boosted",  # ln(score after focus and links / the best one's)
    "rank",  # ln(1 + place after focus and links), 0 for the first
    "cosine",  # the query's cosine
    "cosine_gap",  # cosine minus the dense list's best cosine
    "dense_rank",  # ln(1 + rank in the dense list); ln(2 + its length) when absent
    "bm25",  # BM25 score / the keyword list's best; 0 when absent
    "bm25_rank",  # ln(1 + rank in the keyword list); ln(2 + its length) when absent
    "agree",  # 1 when in both lists
    "neighbor",  # the better fused score of its two neighbours / the best fused score
    "previous",  # the fused score of the entry just before it / the best fused score
    "following",  # the fused score of the entry just after it / the best fused score
    "next_to_top",  # 1 when beside one of the best TOP hits
    "speaker",  # 1 when said by a speaker the query names
    "other_speaker",  # 1 when the query names a speaker and another said it
    "asks_named",  # 1 when another asks something and says a name of a speaker the query names
    "date_near",  # 1 when dated near a date the query names
    "date_far",  # 1 when dated, the query names a date, and it is not near
    "link",  # 1 when it holds a link term of an anchor it is not beside
    "link_terms",  # ln(1 + how many link terms it holds)
    "length",  # ln(1 + characters of its own text)
    "coverage",  # share of the query's terms its own text holds
    "question",  # 1 when its own text asks something (holds a "?")
    "when_time",  # 1 when the query asks "when" and its own text names a time
    "day_peers",  # ln(1 + how many other candidates share its day)
    "day_best",  # the best boosted score among other candidates of its day / the best
)
#: The model's columns: each feature of :data:`BASE`, then each again for a query that
#: asks "when" (zero otherwise), so a question about time weighs the features its way.
FEATURES = BASE + tuple(f"when*{name}" for name in BASE)

# A time expression in a turn: what answers a "when" question.
_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|(?:week|weekend|month|year)s?|"
    r"since|summer|winter|"
    r"morning|evening|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|may|june|july|august|september|october|november|"
    r"december|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_WHEN = re.compile(r"\bwhen\b", re.IGNORECASE)


@attrs.frozen(slots=True)
class Candidates:
    """The candidates of one recall: their keys (best first before the ranker) and
    their feature rows."""

    keys: list[int]
    matrix: npt.NDArray[np.float64]


def features(
    *,
    query: str,
    view: View,
    keys: Sequence[int],
    boosted: npt.NDArray[np.float64],
    fused: dict[int, float],
    unlent: dict[int, float],
    dense: Sequence[Candidate],
    keyword: Sequence[Candidate],
    dense_place: Mapping[int, int],
    keyword_place: Mapping[int, int],
    cosine: dict[int, float],
    texts: dict[int, str],
    named: frozenset[str],
    mentions: Sequence[DateMention],
    neighbors: dict[int, int],
    neighbor_on: bool,
    links: Mapping[str, set[int]] | None,
) -> Candidates:
    """The feature rows of ``keys`` (the hits to rank, best first after focus and
    links, with their ``boosted`` scores; ``fused``: every fused hit's score after the
    neighbour boost, ``unlent``: before it; ``dense_place`` and ``keyword_place``: each
    listed key's 1-based place in ``dense`` and ``keyword``). ``texts`` holds the index
    texts already read (it is filled in); ``named`` and ``mentions`` are the speakers
    and dates the query names (empty when their channel is off); ``links``: the entity
    links' rare terms with the anchors holding each (None when links are off)."""
    m = len(keys)
    x = np.zeros((m, len(FEATURES)), dtype=np.float64)
    col = {name: i for i, name in enumerate(BASE)}
    if not m:
        return Candidates([], x)
    lent = np.array([fused.get(key, 0.0) for key in keys], dtype=np.float64)
    best = max(fused.values(), default=1.0) or 1.0
    x[:, col["fused"]] = np.log(np.maximum(lent, 1e-12) / best)
    top = float(boosted[0]) if boosted[0] > 0 else 1.0
    x[:, col["boosted"]] = np.log(np.maximum(boosted, 1e-12) / top)
    places = np.arange(m, dtype=np.float64)
    x[:, col["rank"]] = np.log1p(places)
    cos = np.array([cosine.get(key, 0.0) for key in keys], dtype=np.float64)
    x[:, col["cosine"]] = cos
    x[:, col["cosine_gap"]] = cos - (dense[0].score if dense else 0.0)
    top_bm25 = keyword[0].score if keyword and keyword[0].score > 0 else 1.0
    d_rank = np.array([dense_place.get(key, len(dense) + 1) for key in keys], dtype=np.float64)
    b_rank = np.array([keyword_place.get(key, len(keyword) + 1) for key in keys], dtype=np.float64)
    x[:, col["dense_rank"]] = np.log1p(d_rank)
    x[:, col["bm25_rank"]] = np.log1p(b_rank)
    bm25_score = [keyword[p - 1].score if (p := keyword_place.get(key)) else 0.0 for key in keys]
    x[:, col["bm25"]] = np.array(bm25_score) / top_bm25
    x[:, col["agree"]] = (d_rank <= len(dense)) & (b_rank <= len(keyword))
    seqs = [neighbors.get(key) for key in keys]
    if neighbor_on:
        by_seq = {s: unlent.get(key, 0.0) for key, s in neighbors.items() if s is not None}
        top_unlent = max(unlent.values(), default=1.0) or 1.0
        x[:, col["neighbor"]] = [
            0.0 if s is None else max(by_seq.get(s - 1, 0.0), by_seq.get(s + 1, 0.0)) for s in seqs
        ]
        x[:, col["neighbor"]] /= top_unlent
        x[:, col["previous"]] = [0.0 if s is None else by_seq.get(s - 1, 0.0) for s in seqs]
        x[:, col["following"]] = [0.0 if s is None else by_seq.get(s + 1, 0.0) for s in seqs]
        x[:, col["previous"]] /= top_unlent
        x[:, col["following"]] /= top_unlent
        tops = {s for s in seqs[:TOP] if s is not None}
        x[:, col["next_to_top"]] = [
            s is not None and (s - 1 in tops or s + 1 in tops) for s in seqs
        ]
    unread = [key for key in keys if key not in texts]
    if unread:
        texts.update(view.texts(unread, projections=False))
    own = view.texts(keys, projections=True)
    projections = [own.get(key, "") for key in keys]
    if named:
        said = [speaker_of(texts.get(key, "")) for key in keys]
        x[:, col["speaker"]] = [s in named for s in said]
        x[:, col["other_speaker"]] = [s is not None and s not in named for s in said]
    if mentions:
        days = view.days([key for key in keys if "\nDate: " not in texts.get(key, "")])
        for i, key in enumerate(keys):
            day = entry_date(texts.get(key, "")) or days.get(key)
            if day is None:
                continue
            if any(near(mention, day) for mention in mentions):
                x[i, col["date_near"]] = 1.0
            else:
                x[i, col["date_far"]] = 1.0
    lengths = np.array([len(p) for p in projections], dtype=np.float64)
    x[:, col["length"]] = np.log1p(lengths)
    bodies = bodies_terms(projections)
    names = {t for s in named for t in tokenize(s)}
    asked = set(tokenize(query)) - names
    if asked:
        x[:, col["coverage"]] = [len(asked & body) / len(asked) for body in bodies]
    x[:, col["question"]] = ["?" in p for p in projections]
    if names:
        # Another speaker's question that says the name of the one the query asks
        # about is put to them: their answer, not the question, holds what they said.
        says = [bool(names & body) for body in bodies]
        x[:, col["asks_named"]] = x[:, col["other_speaker"]] * x[:, col["question"]] * says
    if _WHEN.search(query):
        x[:, col["when_time"]] = [_TIME.search(p) is not None for p in projections]
    if links:
        _links(links, keys, bodies, neighbors, x)
    if neighbor_on:
        # Said on one day is a wider neighbourhood: the neighbour channel's too.
        _days(keys, texts, x)
    if _WHEN.search(query):
        x[:, len(BASE) :] = x[:, : len(BASE)]
    return Candidates(list(keys), x)


def _links(
    terms: Mapping[str, set[int]],
    keys: Sequence[int],
    bodies: list[frozenset[str]],
    neighbors: Mapping[int, int],
    x: npt.NDArray[np.float64],
) -> None:
    """Fill the link columns from the entity links' ``terms`` (each rare link term
    with the anchors that hold it): a candidate links when it holds a term of an
    anchor it is neither nor beside."""
    link, count = BASE.index("link"), BASE.index("link_terms")
    for i, (key, body) in enumerate(zip(keys, bodies, strict=True)):
        mine = neighbors.get(key)
        shared = 0
        for term in terms.keys() & body:
            for anchor in terms[term]:
                theirs = neighbors.get(anchor)
                if anchor != key and (mine is None or theirs is None or abs(mine - theirs) > 1):
                    shared += 1
                    break
        if shared:
            x[i, link] = 1.0
            x[i, count] = math.log1p(shared)


def _days(keys: Sequence[int], texts: Mapping[int, str], x: npt.NDArray[np.float64]) -> None:
    """Fill the day columns: the candidates said on one day (the day an entry's
    ``"Date: "`` line names, as ``Offload`` and the doors write it: one session when
    each session is dated) back each other. An entry without one has no peers."""
    by_day: dict[dt.date, list[int]] = {}
    for i, key in enumerate(keys):
        day = entry_date(texts.get(key, ""))
        if day is not None:
            by_day.setdefault(day, []).append(i)
    share = np.exp(x[:, BASE.index("boosted")]).tolist()
    # Two columns filled at once: a day's few rows are cheaper in lists than as arrays.
    peers, best = [0.0] * len(keys), [0.0] * len(keys)
    for rows in by_day.values():
        if len(rows) < 2:
            continue
        mine = [share[i] for i in rows]
        # Each row's best peer: the group's best, or its second best for the best row.
        first, second = sorted(mine, reverse=True)[:2]
        others = math.log1p(len(rows) - 1)
        for i, value in zip(rows, mine, strict=True):
            peers[i] = others
            best[i] = second if value == first else first
    x[:, BASE.index("day_peers")] = peers
    x[:, BASE.index("day_best")] = best


def scores(
    matrix: npt.NDArray[np.float64], weights: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.float64]:
    """Each candidate's score, ``matrix @ weights`` (the shipped weights by default)."""
    w = np.asarray(WEIGHTS if weights is None else weights, dtype=np.float64)
    out: npt.NDArray[np.float64] = matrix @ w
    return out
