"""The store's event hook and profile binding (design §9), shared by its actor and handle.

Events: a write that commits becomes ``vector_store.added`` or ``vector_store.deleted``;
a read becomes ``vector_store.searched``, whose query appears only as a fingerprint.

Profile binding: a store whose embedder has an :class:`~protocol.EmbeddingProfile` is
bound to it. A query vector from outside must then name its profile, and a vector made
by another provider, model, width or options is refused with
:class:`~protocol.EmbeddingError`: the scores would be meaningless, not wrong-looking.
"""

from __future__ import annotations

import contextvars
import math
import time
import uuid
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    ConfigError,
    DeleteResult,
    EmbeddingError,
    EmbeddingProfile,
    Event,
    RetrievalReport,
    SearchRequest,
    VectorStoreConfig,
)
from protocol._events import SearchOperation
from protocol.events import DocumentsAdded, DocumentsDeleted, StoreSearched, fingerprint
from protocol.messages import (
    Clear,
    Cleared,
    Delete,
    DocumentsUpserted,
    StoreReply,
    StoreTurns,
    TurnsStored,
    UpsertDocuments,
)

from .._embedding.adapter import as_vector, normalize_rows
from .._embedding.protocols import check_profile
from .backend import PutDocuments, PutTurns, Write

__all__ = [
    "STORE_RETRIEVER",
    "bound_profile",
    "check_query_profile",
    "new_run_id",
    "checked_query",
    "normalize_query",
    "read_event",
    "retrieve_event",
    "search_event",
    "write_event",
]


STORE_RETRIEVER = "store"
"""The retriever name of a direct read of a store handle (``search``, ``retrieve``,
``retrieve_in``, ``retrieve_embedding``) in its ``vector_store.searched`` event."""


#: The (retriever name, run id) of the retrieval the current task reads for: the recall
#: actor sets it around its store read, so that the read's ``vector_store.searched``
#: carries the memory's run while the public ``Store`` protocol takes no run argument
#: (a store of the user's own simply never reads it). None: a direct read is a run of
#: its own, named :data:`STORE_RETRIEVER`.
CURRENT_RUN: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "trio_recall_run", default=None
)


def new_run_id() -> str:
    """A fresh run id for one retrieval's events: 32 hex characters (a random UUID4)."""
    return uuid.uuid4().hex


def write_event(request: Write, result: StoreReply) -> Event | None:
    """The event of a committed write, or None for a write that has none."""
    at = trio.current_time()
    match request, result:
        case PutTurns(request=StoreTurns(namespace=namespace, source=source)), TurnsStored():
            return DocumentsAdded(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                source=source,
                replaced=0,
                evicted=result.evicted,
            )
        case PutDocuments(request=UpsertDocuments(namespace=namespace)), DocumentsUpserted():
            return DocumentsAdded(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                source="document",
                replaced=result.replaced,
                evicted=result.evicted,
            )
        case Delete(namespace=namespace), DeleteResult():
            return DocumentsDeleted(
                at=at,
                namespace=namespace,
                count=len(result.deleted),
                ids=list(result.deleted),
                missing=len(result.missing),
            )
        case Clear(namespace=namespace), Cleared():
            return DocumentsDeleted(
                at=at,
                namespace=namespace or "",
                count=result.removed,
                ids=[],
                missing=0,
                cleared=True,
            )
    return None


def search_event(
    backend: str,
    profile: EmbeddingProfile | None,
    request: SearchRequest,
    namespace: str,
    k: int,
    scores: Sequence[float],
    started: float,
    run: tuple[str, str] | None = None,
) -> StoreSearched:
    """``vector_store.searched`` for a ``search`` whose hits scored ``scores``; ``k`` is
    the request's, cut to the store's capacity; ``run`` the (retriever, run id) of the
    retrieval it serves, None for a direct read (see :func:`read_event`)."""
    return read_event(
        "search",
        backend=backend,
        profile=profile,
        namespace=namespace,
        kind=request.kind,
        query=request.query,
        by_vector=request.vector is not None,
        filtered=request.filter is not None,
        k=k,
        scores=list(scores),
        started=started,
        run=run,
    )


def retrieve_event(
    backend: str,
    profile: EmbeddingProfile | None,
    namespace: str | None,
    query: str | None,
    k: int,
    report: RetrievalReport,
    started: float,
) -> StoreSearched:
    """``vector_store.searched`` for ``retrieve`` (``query`` is its text) or, with
    ``query`` None, ``retrieve_embedding`` (see :func:`read_event`)."""
    return read_event(
        "retrieve_embedding" if query is None else "retrieve",
        backend=backend,
        profile=profile,
        namespace=namespace,
        kind="similarity",
        query=query,
        by_vector=query is None,
        filtered=False,
        k=k,
        scores=[t.score for t in report.turns],
        started=started,
    )


def read_event(
    operation: SearchOperation,
    *,
    backend: str,
    profile: EmbeddingProfile | None,
    namespace: str | None,
    kind: str,
    query: str | None,
    by_vector: bool,
    filtered: bool,
    k: int,
    scores: list[float],
    started: float,
    run: tuple[str, str] | None = None,
) -> StoreSearched:
    """``vector_store.searched`` for a read whose hits scored ``scores`` (best first),
    started at ``started`` (``time.perf_counter()``); ``namespace`` None is every one.
    ``backend`` is ``"memory"`` or ``"pg"``; ``profile`` the store's bound profile;
    ``run`` the (retriever name, run id) of the retrieval the read serves, or None for
    a direct read of the store: a run of its own, named :data:`STORE_RETRIEVER`."""
    retriever, run_id = (STORE_RETRIEVER, new_run_id()) if run is None else run
    return StoreSearched(
        at=trio.current_time(),
        namespace=namespace or "",
        operation=operation,
        kind=kind,
        backend=backend,
        profile=None if profile is None else profile.name,
        query_fingerprint=None if query is None else fingerprint(query),
        by_vector=by_vector,
        filtered=filtered,
        k=k,
        hits=len(scores),
        best=scores[0] if scores else None,
        seconds=time.perf_counter() - started,
        retriever=retriever,
        run_id=run_id,
    )


def bound_profile(embedder: object, config: VectorStoreConfig) -> EmbeddingProfile | None:
    """The profile a store over ``embedder`` is bound to: the embedder's ``profile``
    when it is an :class:`EmbeddingProfile`, else None.

    Raises:
        ConfigError: the profile's dimensions differ from the store's.
    """
    profile = getattr(embedder, "profile", None)
    if not isinstance(profile, EmbeddingProfile):
        return None
    if profile.dimensions != config.dimensions:
        raise ConfigError(
            f"embedder profile {profile.name} makes {profile.dimensions}-float vectors; "
            f"this store takes {config.dimensions} (dimensions)"
        )
    return profile


def check_query_profile(
    bound: EmbeddingProfile | None,
    dimensions: int,
    query: npt.NDArray[np.float32] | None,
    profile: EmbeddingProfile | None,
) -> None:
    """Refuse a query vector that another model than the store's may have made.

    Args:
        bound: the store's profile, or None when it is not bound.
        dimensions: the store's width.
        query: the query vector, normalized; None when it is zero.
        profile: the profile the caller says made it, or None.

    Raises:
        EmbeddingError: ``profile`` differs from ``bound`` (provider, model, dimensions
            or options), or is missing for a non-zero vector on a bound store, or
            (on an unbound store) is of another width than the store.
        ConfigError: ``profile`` is not an ``EmbeddingProfile``.
    """
    if profile is not None:
        if not isinstance(profile, EmbeddingProfile):
            raise ConfigError(
                f"profile is a {type(profile).__name__}; expected an EmbeddingProfile"
            )
        if bound is not None:
            check_profile(bound, profile)
        elif profile.dimensions != dimensions:
            raise EmbeddingError(
                f"query embedded with {profile.name} ({profile.dimensions} dimensions); "
                f"this store takes {dimensions}"
            )
        return
    # A zero vector compares with nothing (it scores 0.0 everywhere): no profile needed.
    if bound is None or query is None:
        return
    raise EmbeddingError(
        f"this store is bound to {bound.name} ({bound.dimensions} dimensions); a query "
        "vector must name the profile that made it (profile=...), so that a vector from "
        "another model is never compared with these"
    )


# Below this squared norm a query cannot overflow float32 once normalized.
_FAST_NORM_LIMIT = 1e38


def normalize_query(vector: object, dimensions: int) -> npt.NDArray[np.float32] | None:
    """A normalized float32 copy of a query ``vector``, or None for a zero query.

    Both backends normalize every query vector here. The common case (an exact float32
    or float64 ndarray of the store's width, with a modest norm) takes a fast path that
    skips ``normalize_rows``' per-call overhead; every other value goes through
    :func:`~actors._embedding.adapter.as_vector`, which names what is wrong with it.

    Raises:
        EmbeddingError: the vector is not one (see ``as_vector``), or its squared norm
            overflows float32.
    """
    if (
        # An exact ndarray: a masked array (a subclass) must reach as_vector's refusal.
        type(vector) is np.ndarray
        and vector.shape == (dimensions,)
        and vector.dtype in (np.float32, np.float64)
    ):
        # The common case, checked by its square: a non-finite component makes it
        # non-finite, and then as_vector below names the culprit.
        arr = vector.astype(np.float64)
        # vdot, not dot: the same BLAS ddot, but an overflowing square (components
        # near 1e300) gives inf without a RuntimeWarning, and normalize_rows then
        # refuses it with an EmbeddingError.
        squared = float(np.vdot(arr, arr))
        if not math.isfinite(squared):
            arr = as_vector(vector, dimensions, what="query embedding")
    else:
        arr = as_vector(vector, dimensions, what="query embedding")
        squared = float(np.vdot(arr, arr))
    if squared == 0.0:
        return None
    if squared < _FAST_NORM_LIMIT:
        # The common case, without normalize_rows' per-call overhead (about 50 µs,
        # which is most of a small read): this square cannot overflow float32.
        arr /= math.sqrt(squared)
        normalized: npt.NDArray[np.float32] = arr.astype(np.float32)
        return normalized
    rows, zero = normalize_rows(arr[None, :], what="query embedding")
    return None if zero[0] else rows[0]


def checked_query(
    bound: EmbeddingProfile | None,
    dimensions: int,
    vector: object,
    profile: EmbeddingProfile | None,
) -> npt.NDArray[np.float32] | None:
    """``vector`` normalized (:func:`normalize_query`) once its ``profile`` is checked
    against the store's ``bound`` one (:func:`check_query_profile`); None for zero.

    A given profile is checked first, so that a vector of another model's width says
    so rather than naming its width alone."""
    if profile is not None:
        check_query_profile(bound, dimensions, None, profile)
    query = normalize_query(vector, dimensions)
    if profile is None:
        check_query_profile(bound, dimensions, query, None)
    return query
