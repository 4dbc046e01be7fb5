"""The exact scan kernel: one BLAS product, then ``argpartition``, then a sort of the
survivors, ranked by score descending and, on ties, newest (highest sequence) first."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["rank_top_k"]

_NEG_INF = np.float32(-np.inf)


def rank_top_k(
    scores: npt.NDArray[np.float32],
    seqs: npt.NDArray[np.int64],
    k: int,
    valid: int,
) -> npt.NDArray[np.intp]:
    """Return the indices of the best ``min(k, valid)`` scores, best first.

    ``scores`` holds ``-inf`` for every slot out of scope; ``valid`` is how many are in
    scope. Ties at the k-th boundary are resolved by sequence, so the answer does not
    depend on how ``argpartition`` happens to split equal scores.
    """
    n = scores.shape[0]
    k = min(k, valid)
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    if k >= n:
        candidates: npt.NDArray[Any] = np.arange(n)
    else:
        candidates = np.argpartition(scores, n - k)[n - k :]
        threshold = scores[candidates].min()
        # Equal scores may straddle the partition point: take them all, the sort decides.
        if np.count_nonzero(scores >= threshold) != k:
            candidates = np.flatnonzero(scores >= threshold)
    if valid < n:
        candidates = candidates[scores[candidates] != _NEG_INF]
    order = np.lexsort((-seqs[candidates], -scores[candidates]))[:k]
    result: npt.NDArray[np.intp] = candidates[order]
    return result
