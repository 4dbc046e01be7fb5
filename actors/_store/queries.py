"""Profile binding and query vectors (design §9), shared by both backends' actors and
the store handle.

A store whose embedder has an :class:`~protocol.EmbeddingProfile` is bound to it. A
query vector from outside must then name its profile, and a vector made by another
provider, model, width or options is refused with :class:`~protocol.EmbeddingError`:
the scores would be meaningless, not wrong-looking. A query vector is normalized once,
as a stored one is (a zero vector stays zeros, and scores 0.0).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from protocol import (
    ConfigError,
    EmbeddingError,
    EmbeddingProfile,
    VectorStoreConfig,
)

from .._embedding.adapter import as_vector, normalize_rows
from .._embedding.protocols import check_profile

__all__ = ["bound_profile", "check_query_profile", "checked_query", "normalize_query"]


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
