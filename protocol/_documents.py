"""Documents, search requests and their results (the retrieval toolkit, design §9).

Every Struct here validates itself when built, so a bad request fails in the caller's
task with an error that names the field, the value seen and what was expected, and
never reaches the store actor.

**Scores.** A dense score (``similarity`` and ``mmr`` search) is the cosine similarity
between the query and the document, in [-1, 1]; a zero vector scores exactly 0.0.
``score_threshold`` always means that cosine similarity, for every backend: a hit is
kept when ``score >= score_threshold``. A ``hybrid`` hit's score is its reciprocal rank
fusion score, which is not a similarity, so ``score_threshold`` is refused for hybrid
search rather than given a second meaning.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import math
import sys
import warnings
from typing import Any, Literal, SupportsFloat, SupportsInt, TypeGuard

import msgspec

from ._checks import check_int, shown
from ._embedding import EmbeddingProfile
from ._errors import ConfigError, EmbeddingError
from ._filters import Filter, filter_option
from ._json import canonical_json, check_json_object
from ._memory import RecallSettings
from ._time import check_conversation, check_time

__all__ = [
    "HYBRID_LISTS",
    "DeleteResult",
    "Document",
    "IndexResult",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "document_id",
]

SearchKind = Literal["recall", "similarity", "mmr", "hybrid", "bm25"]
# The ranked lists a hybrid search fuses, by the names ScoredDocument.ranks uses.
HYBRID_LISTS = ("dense", "bm25")
_KINDS = ("recall", "similarity", "mmr", "hybrid", "bm25")


def document_id(text: str, metadata: dict[str, Any] | None = None) -> str:
    """A deterministic id for a document's content: 32 hex characters of sha256.

    The hash covers the text and the metadata, as JSON with sorted keys, so equal
    content gives the same id in every process and on every run. ``1`` and ``1.0`` are
    different JSON and so give different ids.

    Raises:
        ConfigError: ``text`` is not a str.
        JsonError: ``metadata`` is not a JSON object.
    """
    if not isinstance(text, str):
        raise ConfigError(f"text is a {type(text).__name__}; expected a str")
    meta = check_json_object({} if metadata is None else metadata)
    blob = canonical_json({"text": text, "metadata": meta})
    return hashlib.sha256(blob).hexdigest()[:32]


def _check_optional_str(what: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{what} is {value!r:.60}; expected None or a non-empty str")


class Document(msgspec.Struct, frozen=True, kw_only=True):
    """A text with an id, JSON metadata and an optional source id.

    Args:
        text: what is embedded, indexed for BM25 and returned.
        id: the document's id; ``None`` lets the store derive one with
            :func:`document_id`. The same id upserts.
        metadata: a JSON object (str keys, JSON values, finite numbers).
        source_id: where the document came from (a file, a URL); the record manager's
            scoped cleanup groups by it.
        embedding: a precomputed embedding of ``text``: the store keeps it (normalized,
            like an embedder's vector) and does not call its embedder for this
            document. The rules are every vector's (see ``SearchRequest.vector``); the
            store also checks its width. Stored documents come back without it (the
            store keeps the normalized vector, not the caller's list).
        occurred_at: when what the document says happened or was said: an aware
            datetime (kept in UTC). None: the store stamps the time of the write, so a
            stored document always comes back with one. Reads filter on it
            (``SearchRequest.since``/``until``) and recall's time channel dates the
            document by it.
        conversation: the name of the conversation the document belongs to, or None.
            Consecutive documents of one conversation are neighbours: recall lends each
            hit a share of its neighbours' scores, and the store indexes a document
            with its date and the one before it (:func:`protocol.entry_text`), while
            ``text`` comes back as given.
        expires_at: when the document stops being visible (an aware datetime, kept in
            UTC), or None: it never expires. Opt-in per document: from that instant no
            read returns it, and the store reclaims its slot by its own bounded work
            (docs/pages/how-to/memory-over-time.md).
        valid_from, valid_to, version, supersedes: the document's version, which the
            store sets and reads return (a write leaves them unset: the store refuses a
            document that sets them). ``version`` counts from 1; an ``update`` closes
            the current version at the new one's ``valid_from`` (its ``valid_to``) and
            writes version n + 1 with ``supersedes=n``. A version is valid over
            ``[valid_from, valid_to)``; ``valid_to`` is None for the current version.
            Version 1's ``valid_from`` is its ``occurred_at``. :meth:`as_new` drops
            them, so a document read back can be written again.

    Raises:
        ConfigError: ``text`` is not a str, or ``id``/``source_id`` is not ``None`` or a
            non-empty str.
        JsonError: ``metadata`` is not a JSON object.
        EmbeddingError: ``embedding`` is not a flat vector of finite real numbers.
    """

    text: str
    id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    source_id: str | None = None
    embedding: list[float] | None = None
    occurred_at: dt.datetime | None = None
    conversation: str | None = None
    expires_at: dt.datetime | None = None
    valid_from: dt.datetime | None = None
    valid_to: dt.datetime | None = None
    version: int | None = None
    supersedes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ConfigError(f"document text is a {type(self.text).__name__}; expected a str")
        _check_optional_str("document id", self.id)
        _check_optional_str("document source_id", self.source_id)
        for name in ("occurred_at", "expires_at", "valid_from", "valid_to"):
            value = check_time(f"document {name}", getattr(self, name))
            msgspec.structs.force_setattr(self, name, value)
        for name in ("version", "supersedes"):
            number = getattr(self, name)
            if number is not None:
                msgspec.structs.force_setattr(self, name, check_int(f"document {name}", number))
        check_conversation(self.conversation)
        check_json_object(self.metadata, what="document metadata")
        if self.embedding is not None:
            vector = SearchRequest._vector_list(self.embedding, what="document embedding")
            msgspec.structs.force_setattr(self, "embedding", vector)

    def with_id(self) -> Document:
        """This document with its id filled in when missing: :func:`document_id`, or,
        for a document with an ``occurred_at`` or a ``conversation``, the same hash over
        those too."""
        if self.id is not None:
            return self
        if self.occurred_at is None and self.conversation is None:
            return self._named(document_id(self.text, self.metadata))
        # The same words said twice in a conversation are two memories, not one.
        blob = canonical_json(
            {
                "text": self.text,
                "metadata": self.metadata,
                "occurred_at": None if self.occurred_at is None else self.occurred_at.isoformat(),
                "conversation": self.conversation,
            }
        )
        return self._named(hashlib.sha256(blob).hexdigest()[:32])

    def as_new(self) -> Document:
        """This document as a write gives it: the same text, id, metadata, source,
        ``occurred_at``, ``conversation``, ``expires_at`` and ``embedding``, without
        the version the store set on it (``valid_from``, ``valid_to``, ``version``,
        ``supersedes``), which a write refuses. A document read back from one store
        (``documents``, ``get_by_ids``, a hit's ``document``) is copied into another
        store this way; its older versions stay behind (``history``)."""
        # A shallow copy, as _named makes: it shares metadata and embedding with this
        # document, which a write copies into the store, never changes.
        new = copy.copy(self)
        for name in ("valid_from", "valid_to", "version", "supersedes"):
            msgspec.structs.force_setattr(new, name, None)
        return new

    def _named(self, entry_id: str) -> Document:
        # A copy with its id set, not a new Document: this one was checked as it was
        # made, and the store checks a batch once more as it is written (a replace would
        # run every field check a third time).
        named = copy.copy(self)
        msgspec.structs.force_setattr(named, "id", entry_id)
        return named


def _check_real(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} is {shown(value)} ({type(value).__name__}); expected a number")
    try:
        number = float(value)
    except OverflowError:  # an int past float64's range (1.8e308)
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"{what} is {shown(value)}; expected a finite number")
    return number


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One search, validated when built.

    Args:
        query: the query text. ``similarity`` and ``mmr`` take exactly one of ``query``
            and ``vector``; ``hybrid`` needs ``query`` (BM25 reads it) and may also take
            ``vector``, which then replaces the query's embedding for the dense list;
            ``bm25`` (keyword-only) needs ``query`` and takes no ``vector``: the query
            is never embedded.
        vector: a query embedding: a 1-D float or int array, or a sequence of finite
            real numbers (not bools); it is stored as a list of floats. These are the
            store's rules for every vector (``actors._embedding.adapter.as_vector``). The store
            checks its width and normalizes a copy.
        k: how many hits to return, > 0 (an int or a numpy integer, of any size). When
            fewer entries match, all are returned.
        kind: ``"recall"`` (the engine's tuned recall, which ``Memory.retrieve`` runs:
            hybrid BM25 and dense lists, speaker focus, the time channel, entity links
            and the neighbour boost, as ``settings`` says; it needs ``query`` and takes
            no ``vector``, since it embeds the query without the speakers it names),
            ``"similarity"``, ``"mmr"``, ``"hybrid"`` or ``"bm25"``.
        score_threshold: keep hits whose cosine similarity is ``>=`` this, in [-1, 1].
            For ``mmr`` it filters the candidates before selection; for ``recall`` it
            is the relevance floor, applied after ranking. Refused for ``hybrid`` and
            ``bm25``.
        fetch_k: for ``mmr``, how many exact nearest candidates MMR chooses from; for
            ``hybrid``, how deep each list (dense and BM25) is before fusion. Must be
            ``>= k`` for those kinds; ignored by ``similarity`` and ``bm25``.
        lambda_mult: MMR's trade-off in [0, 1]: 1 is pure relevance, 0 pure diversity.
        filter: a metadata filter, as a dict (parsed here) or a :data:`Filter` tree.
            It is applied inside the scan, before top-k.
        namespace: the namespace to search; ``None`` means the store's default.
        rrf_k: the reciprocal rank fusion constant for ``hybrid``, > 0 (60 by default).
        weights: ``hybrid`` list weights by list name (``"dense"``, ``"bm25"``), each a
            finite number >= 0; a list left out weighs 1.0.
        since, until: keep entries whose ``occurred_at`` is ``>= since`` and
            ``< until`` (aware datetimes; either may be None), applied before top-k
            like a filter.
        as_of: read the store as it was at this instant (an aware datetime): each
            memory's version valid then (``valid_from <= as_of < valid_to``) instead of
            its current one. None (the default) reads current versions only. Expired
            documents are invisible either way.
        settings: for ``recall``, its :class:`RecallSettings` (None: the defaults, as
            ``Memory`` uses them); ``fetch_k``, ``rrf_k`` and ``weights`` of this request
            are then not used. Refused for other kinds.
        profile: the :class:`EmbeddingProfile` of the model that made ``vector``. A
            store bound to a profile (its embedder has one) refuses a non-zero
            ``vector`` without it, and any ``profile`` of another provider, model,
            width or options, with :class:`EmbeddingError`: vectors of two models do
            not compare. A zero vector scores 0.0 against everything, so it needs none.

    Raises:
        ConfigError: a bad ``k``, ``fetch_k``, ``lambda_mult``, ``score_threshold``,
            ``kind``, ``namespace``, ``rrf_k``, ``weights``, or a bad combination of
            ``query`` and ``vector``.
        FilterError: the filter is malformed, or past the depth or size limits of
            ``protocol._filters`` (in any form: dict, tree, or decoded).
        EmbeddingError: ``vector`` is not a flat vector of finite real numbers (bool,
            complex, str or object items or dtypes, a masked array, a scalar or a 2-D
            array), or is not as wide as ``profile.dimensions``.
    """

    query: str | None = None
    vector: list[float] | None = None
    k: int = 4
    kind: SearchKind = "similarity"
    score_threshold: float | None = None
    fetch_k: int = 20
    lambda_mult: float = 0.5
    filter: Filter | None = None
    namespace: str | None = None
    rrf_k: float = 60
    weights: dict[str, float] | None = None
    profile: EmbeddingProfile | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    settings: RecallSettings | None = None
    as_of: dt.datetime | None = None

    def __post_init__(self) -> None:
        self._check_query()
        self._check_scores()
        self._check_scope()
        self._check_fusion()
        self._check_recall()

    def _check_recall(self) -> None:
        """The time window and recall's settings."""
        since = check_time("since", self.since)
        until = check_time("until", self.until)
        if since is not None and until is not None and since > until:
            raise ConfigError(
                f"since is {since.isoformat()} and until is {until.isoformat()}; expected "
                "since <= until"
            )
        msgspec.structs.force_setattr(self, "since", since)
        msgspec.structs.force_setattr(self, "until", until)
        msgspec.structs.force_setattr(self, "as_of", check_time("as_of", self.as_of))
        if self.settings is not None:
            if self.kind != "recall":
                raise ConfigError(
                    f"settings is for recall search; this is a {self.kind} search "
                    "(expected settings=None, or kind='recall')"
                )
            if not isinstance(self.settings, RecallSettings):
                raise ConfigError(
                    f"settings is a {type(self.settings).__name__}; expected RecallSettings"
                )
        if self.kind == "recall" and self.weights is not None:
            raise ConfigError(
                "weights is for hybrid search; recall weighs its lists by "
                "RecallSettings.dense_weight and bm25_weight (settings=)"
            )

    @property
    def recall_settings(self) -> RecallSettings:
        """``settings``, or the defaults."""
        return RecallSettings() if self.settings is None else self.settings

    def _check_query(self) -> None:
        """The kind, what it searches with (text, vector or both), and k/fetch_k."""
        if self.kind not in _KINDS:
            raise ConfigError(f"kind is {self.kind!r}; expected one of {', '.join(_KINDS)}")
        if self.query is not None and not isinstance(self.query, str):
            raise ConfigError(f"query is a {type(self.query).__name__}; expected a str or None")
        if self.vector is not None:
            msgspec.structs.force_setattr(self, "vector", self._vector_list(self.vector))
        has_query, has_vector = self.query is not None, self.vector is not None
        if self.kind in ("hybrid", "bm25", "recall"):
            if not has_query:
                raise ConfigError(
                    f"{self.kind} search needs query text (BM25 reads it); got query=None"
                )
            if self.kind == "bm25" and has_vector:
                raise ConfigError(
                    "bm25 search ranks by keywords alone and takes no vector; use hybrid "
                    "search to combine the two"
                )
            if self.kind == "recall" and has_vector:
                raise ConfigError(
                    "recall search embeds its query itself (without the speakers it "
                    "names) and takes no vector; use hybrid search with a vector"
                )
        elif has_query == has_vector:
            raise ConfigError(
                f"{self.kind} search takes exactly one of query and vector; got "
                f"{'both' if has_query else 'neither'}"
            )
        # Any size: a k past what a store holds means "every match" (each backend clamps).
        msgspec.structs.force_setattr(self, "k", check_int("k", self.k))
        msgspec.structs.force_setattr(self, "fetch_k", check_int("fetch_k", self.fetch_k))
        if self.kind in ("mmr", "hybrid") and self.fetch_k < self.k:
            raise ConfigError(
                f"fetch_k is {self.fetch_k} and k is {self.k}; {self.kind} search needs "
                "fetch_k >= k"
            )

    def _check_scores(self) -> None:
        """MMR's lambda and the cosine threshold (which only dense kinds have)."""
        lam = _check_real("lambda_mult", self.lambda_mult)
        if not 0.0 <= lam <= 1.0:
            raise ConfigError(f"lambda_mult is {lam}; expected a number in [0, 1]")
        msgspec.structs.force_setattr(self, "lambda_mult", lam)
        if self.score_threshold is not None:
            if self.kind == "hybrid":
                raise ConfigError(
                    "score_threshold is cosine similarity, but hybrid scores are fused "
                    "ranks; filter hybrid hits by rank or use similarity search"
                )
            if self.kind == "bm25":
                raise ConfigError(
                    "score_threshold is cosine similarity, but bm25 search computes no "
                    "cosine; filter bm25 hits by score or use similarity search"
                )
            t = _check_real("score_threshold", self.score_threshold)
            if not -1.0 <= t <= 1.0:
                raise ConfigError(
                    f"score_threshold is {t}; expected a cosine similarity in [-1, 1]"
                )
            msgspec.structs.force_setattr(self, "score_threshold", t)

    def _check_scope(self) -> None:
        """The filter (checked against the depth and size limits) and the namespace."""
        if self.filter is not None:
            # A tree (built by hand, or decoded with this request) is checked against the
            # depth and size limits like a dict, so no backend ever recurses past them.
            msgspec.structs.force_setattr(self, "filter", filter_option(self.filter))
        _check_optional_str("namespace", self.namespace)

    def _check_fusion(self) -> None:
        """RRF's k, the hybrid lists' weights, and the profile a vector names."""
        rrf_k = _check_real("rrf_k", self.rrf_k)
        if rrf_k <= 0:
            raise ConfigError(f"rrf_k is {self.rrf_k!r}; expected a number > 0")
        msgspec.structs.force_setattr(self, "rrf_k", rrf_k)
        if self.weights is not None:
            if not isinstance(self.weights, dict):
                raise ConfigError(
                    f"weights is a {type(self.weights).__name__}; expected a dict of list "
                    f"name to weight, with names among {', '.join(HYBRID_LISTS)}"
                )
            clean: dict[str, float] = {}
            for name, weight in self.weights.items():
                if name not in HYBRID_LISTS:
                    raise ConfigError(
                        f"weights names the list {name!r}; expected one of "
                        f"{', '.join(HYBRID_LISTS)}"
                    )
                w = _check_real(f"weights[{name!r}]", weight)
                if w < 0:
                    raise ConfigError(f"weights[{name!r}] is {weight!r}; expected a number >= 0")
                clean[name] = w
            msgspec.structs.force_setattr(self, "weights", clean)
        if self.profile is not None:
            if not isinstance(self.profile, EmbeddingProfile):
                raise ConfigError(
                    f"profile is a {type(self.profile).__name__}; expected an EmbeddingProfile"
                )
            if self.vector is not None and len(self.vector) != self.profile.dimensions:
                raise EmbeddingError(
                    f"vector has {len(self.vector)} floats; its profile "
                    f"{self.profile.name} makes {self.profile.dimensions}"
                )

    @staticmethod
    def _vector_list(vector: object, *, what: str = "vector") -> list[float]:
        # numpy arrays (and anything array-like) become plain floats here, so the
        # request never carries a mutable array another task may still hold. The rules
        # are the store's (``actors._embedding.adapter.as_vector``): real numbers, flat, finite;
        # protocol does not import numpy, so arrays are recognised by their dtype.
        if _masked(type(vector)):
            raise EmbeddingError(
                f"{what} is a masked array; expected a plain array: fill the masked "
                "components first (.filled())"
            )
        dtype = getattr(vector, "dtype", None)
        shape = getattr(vector, "shape", None)
        if dtype is not None and getattr(dtype, "kind", None) not in _REAL_KINDS:
            raise EmbeddingError(f"{what} has dtype {dtype} and shape {shape}; {_REAL_VECTOR}")
        if shape is not None and len(shape) != 1:
            raise EmbeddingError(f"{what} has shape {shape}; expected a flat vector (1-D)")
        tolist = getattr(vector, "tolist", None)
        items = tolist() if callable(tolist) else vector
        if (
            shape is not None
            and getattr(dtype, "kind", None) == "f"
            and getattr(dtype, "itemsize", 16) <= 8
            and isinstance(items, list)
            and items
            and math.isfinite(sum(items))
        ):
            # A float32/float64 array's tolist() is Python floats, and a finite sum
            # means every component is finite (an inf or a NaN would reach the sum):
            # the per-component checks below cannot fail, so a bulk of precomputed
            # embeddings skips them. Any doubt (an overflowing sum) takes the slow path.
            return items
        if (type(items) is list or type(items) is tuple) and _finite_floats(items):
            # Python floats only, all finite: the per-component checks below cannot
            # fail and would make the same floats (a fresh list: the caller's stays its).
            return list(items)
        if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
            raise EmbeddingError(f"{what} is a {type(vector).__name__}; {_REAL_VECTOR}")
        out = [_component(i, x, what) for i, x in enumerate(items)]
        if not out:
            raise EmbeddingError(f"{what} is empty; expected at least one number")
        return out


_REAL_KINDS = ("f", "i", "u")


def _masked(kind: type) -> bool:
    """Whether ``kind`` is a numpy masked array, recognised by name (protocol does not
    import numpy); a list, a tuple and numpy's own ndarray are not, without a look at
    their MRO."""
    if kind is list or kind is tuple or kind is getattr(sys.modules.get("numpy"), "ndarray", 0):
        return False
    return any(c.__name__ == "MaskedArray" for c in kind.__mro__)


_MSGPACK = msgspec.msgpack.Encoder()
# msgpack's float64 marker: msgspec writes every float as it (9 bytes), and nothing else
# starts with it.
FLOAT64_MARKER = 0xCB


def msgpack_array_header(count: int) -> int:
    """The size of msgpack's header of an array of ``count`` items."""
    return 1 if count < 16 else 3 if count < 1 << 16 else 5


def _finite_floats(items: list[object] | tuple[object, ...]) -> bool:
    """Whether ``items`` (a plain list or tuple) holds at least one item, each a Python
    float (not a subclass, a bool or an int), all finite, checked at C speed (a finite
    sum proves each finite; an overflowing one only means the caller takes the slow
    path)."""
    return _exact_floats(items) and math.isfinite(sum(items))


def _exact_floats(
    items: list[object] | tuple[object, ...],
) -> TypeGuard[list[float] | tuple[float, ...]]:
    """Whether ``items`` holds at least one item, each a Python float.

    msgspec encodes an exact float as 9 bytes that start with :data:`FLOAT64_MARKER`
    and refuses a float subclass (numpy's float64 included), so an encoding exactly the
    header plus 9 bytes per item, with the marker at each item's place, can only be
    floats (each item starts where the one before it, 9 bytes long, ended).
    """
    count = len(items)
    if not count:
        return False
    try:
        encoded = _MSGPACK.encode(items)
    except Exception:  # TypeError for another type; any doubt is the slow path's
        return False
    head = msgpack_array_header(count)
    return len(encoded) == head + 9 * count and encoded[head::9].count(FLOAT64_MARKER) == count


_REAL_VECTOR = "expected a flat vector of real numbers (a float or int dtype, or a list of them)"


def _component(i: int, x: object, what: str = "vector") -> float:
    """One component of a ``SearchRequest.vector``, as a finite float."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and callable(getattr(x, "item", None)):
        # A numpy scalar: its dtype decides. (A longdouble's item() is a longdouble, so
        # it is converted here; one past float64's range becomes inf, refused below.)
        kind = getattr(dtype, "kind", None)
        if kind not in _REAL_KINDS:
            raise EmbeddingError(
                f"{what}[{i}] is {shown(x)} (dtype {dtype}); expected a real number"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow warning
            if kind == "f" and isinstance(x, SupportsFloat):
                x = float(x)
            elif kind != "f" and isinstance(x, SupportsInt):
                x = int(x)
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise EmbeddingError(
            f"{what}[{i}] is {shown(x)} ({type(x).__name__}); expected a real number "
            "(int or float, not bool)"
        )
    try:
        value = float(x)
    except OverflowError:
        raise EmbeddingError(
            f"{what}[{i}] is {shown(x)}, an int too large for float64; expected a finite number"
        ) from None
    if not math.isfinite(value):
        raise EmbeddingError(f"{what}[{i}] is {value!r}; expected a finite number")
    return value


class ScoredDocument(msgspec.Struct, frozen=True, kw_only=True):
    """One search hit.

    Attributes:
        document: the stored document, id and metadata included.
        score: cosine similarity for ``similarity``/``mmr``; the fused reciprocal rank
            score for ``hybrid``; for ``bm25``, the BM25 score over the best hit's, in
            (0, 1] (the first hit scores 1.0).
        ranks: the hit's 1-based rank in each list it appeared in, by list name
            (``"dense"``, ``"bm25"``); a list the hit was not in is absent.
        sequence: the entry's sequence number in its store (the order entries were
            written in: a conversation's turns are neighbours); None for a hit that no
            store made.
        raw_score: the backend's own score for the ranking, kept for auditing:
            the cosine similarity for ``similarity``/``mmr`` on the in-memory store and
            pgvector's distance (``<#>``, the negative inner product: lower is nearer)
            on PostgreSQL; the fused score for ``hybrid``; the BM25 score for ``bm25``;
            recall's final score for ``recall`` (the learned ranker's score, or with
            ``RecallSettings(ranker="none")`` the fused and boosted one). None for a hit
            that no store made.
        rank: for ``recall``, the hit's 1-based place in the answer; else None.
        channels: for ``recall``, what lifted the hit, in this order: ``"dense"`` and
            ``"bm25"`` (the lists it was found in), ``"speaker"`` (said by a speaker the
            query names), ``"date"`` (dated near a date the query names),
            ``"neighbor"`` (beside a strong hit in its conversation), ``"link"`` (an
            anchor, or linked to one by a rare shared word). Empty for other kinds.
    """

    document: Document
    score: float
    ranks: dict[str, int] = msgspec.field(default_factory=dict)
    sequence: int | None = None
    raw_score: float | None = None
    rank: int | None = None
    channels: list[str] = msgspec.field(default_factory=list)


class DeleteResult(msgspec.Struct, frozen=True, kw_only=True, tag="deleted", tag_field="kind"):
    """Which ids were deleted and which were not there (in input order, deduplicated).

    It is also the store actor's reply to ``Delete``, so it carries the same ``kind`` tag
    as the other replies and the reply union decodes.
    """

    deleted: list[str]
    missing: list[str]


class IndexResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``index()`` run did.

    Attributes:
        num_added: documents the record manager had not seen (or that were missing from
            the store), written.
        num_updated: documents whose id was known with another hash, rewritten.
        num_skipped: unchanged documents and duplicates in the input; nothing embedded.
        num_deleted: stale documents removed by cleanup.
    """

    num_added: int = 0
    num_updated: int = 0
    num_skipped: int = 0
    num_deleted: int = 0
