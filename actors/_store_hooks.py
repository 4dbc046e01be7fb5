"""The store's event hook and profile binding (design §9), shared by its actor and handle.

Events: a write that commits becomes ``vector_store.added`` or ``vector_store.deleted``;
a read becomes ``vector_store.searched``, whose query appears only as a fingerprint.

Profile binding: a store whose embedder has an :class:`~protocol.EmbeddingProfile` is
bound to it. A query vector from outside must then name its profile, and a vector made
by another provider, model, width or options is refused with
:class:`~protocol.EmbeddingError`: the scores would be meaningless, not wrong-looking.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    Cleared,
    ConfigError,
    DeleteResult,
    EmbeddingError,
    EmbeddingProfile,
    Event,
    TurnsStored,
    VectorStoreConfig,
)
from protocol._events import SearchOperation, fingerprint
from protocol.events import DocumentsAdded, DocumentsDeleted, StoreSearched
from protocol.messages import (
    Clear,
    Delete,
    DocumentsUpserted,
    StoreReply,
    StoreRequest,
    StoreTurns,
    UpsertDocuments,
)

from ._embedding_cache import check_profile

__all__ = ["bound_profile", "check_query_profile", "read_event", "write_event"]


def write_event(request: StoreRequest, result: StoreReply) -> Event | None:
    """The event of a committed write, or None for a write that has none."""
    at = trio.current_time()
    match request, result:
        case StoreTurns(namespace=namespace, source=source), TurnsStored():
            return DocumentsAdded(
                at=at,
                namespace=namespace,
                count=len(result.ids),
                ids=list(result.ids),
                source=source,
                replaced=0,
                evicted=result.evicted,
            )
        case UpsertDocuments(namespace=namespace), DocumentsUpserted():
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


def read_event(
    operation: SearchOperation,
    *,
    namespace: str | None,
    kind: str,
    query: str | None,
    by_vector: bool,
    filtered: bool,
    k: int,
    scores: list[float],
    started: float,
) -> StoreSearched:
    """``vector_store.searched`` for a read whose hits scored ``scores`` (best first),
    started at ``started`` (``time.perf_counter()``); ``namespace`` None is every one."""
    return StoreSearched(
        at=trio.current_time(),
        namespace=namespace or "",
        operation=operation,
        kind=kind,
        query_fingerprint=None if query is None else fingerprint(query),
        by_vector=by_vector,
        filtered=filtered,
        k=k,
        hits=len(scores),
        best=scores[0] if scores else None,
        seconds=time.perf_counter() - started,
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
