"""The in-memory store's sparse index: one sparse vector per slot, ranked by dot product.

With ``open_store(..., sparse=model)`` every entry also keeps the
:class:`~protocol.SparseVector` that ``model`` gave its text, and the keyword list of a
``hybrid`` search is this index's ranking instead of BM25's (design §9). A vector is
kept as int64 indices and float32 values: 12 bytes per non-zero, which is what the
store checks against ``max_entry_bytes`` (:func:`checked_sparse`).

Ranking scans every slot that has a vector in the namespace (and the filter), so it
costs O(entries × non-zeros) on the trio thread; it is meant for the sizes the
in-memory store holds, not for millions of entries.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from protocol import EmbeddingError, EntryTooLarge, SparseVector

__all__ = ["SPARSE_BYTES_PER_NONZERO", "SparseIndex", "SparsePair", "checked_sparse"]

#: What one non-zero of a sparse vector counts against ``max_entry_bytes``.
SPARSE_BYTES_PER_NONZERO = 12

SparsePair = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]


def checked_sparse(raw: object, count: int, max_entry_bytes: int) -> list[SparsePair]:
    """The sparse model's answer for a batch of ``count`` texts, as stored pairs.

    Raises:
        EmbeddingError: not a list of ``count`` SparseVectors.
        EntryTooLarge: a vector costs more than ``max_entry_bytes`` (12 bytes per
            non-zero), named by its index in the batch.
    """
    if not isinstance(raw, list | tuple):
        raise EmbeddingError(
            f"the sparse model returned a {type(raw).__name__}; expected a list of "
            f"{count} SparseVector"
        )
    if len(raw) != count:
        raise EmbeddingError(
            f"the sparse model returned {len(raw)} vectors for {count} texts; expected one "
            "per text"
        )
    pairs: list[SparsePair] = []
    for i, vector in enumerate(raw):
        if not isinstance(vector, SparseVector):
            raise EmbeddingError(
                f"sparse vector {i} is a {type(vector).__name__}; expected a SparseVector"
            )
        size = len(vector.indices) * SPARSE_BYTES_PER_NONZERO
        if size > max_entry_bytes:
            raise EntryTooLarge(size, max_entry_bytes, i)
        pairs.append(as_pair(vector))
    return pairs


def as_pair(vector: SparseVector) -> SparsePair:
    """``vector`` as sorted int64 indices and float32 values."""
    return (
        np.asarray(vector.indices, dtype=np.int64),
        np.asarray(vector.values, dtype=np.float32),
    )


class SparseIndex:
    """Slot → sparse vector. Only the store actor writes it, inside a commit."""

    def __init__(self) -> None:
        self._vectors: dict[int, SparsePair] = {}

    def __len__(self) -> int:
        return len(self._vectors)

    def __contains__(self, slot: object) -> bool:
        return slot in self._vectors

    def put(self, slot: int, pair: SparsePair) -> None:
        """Keep ``pair`` for ``slot`` (replacing what the slot had)."""
        self._vectors[slot] = pair

    def drop(self, slot: int) -> None:
        """Forget ``slot``'s vector, if it has one."""
        self._vectors.pop(slot, None)

    def top(
        self,
        query: SparseVector,
        depth: int,
        *,
        ns_ids: npt.NDArray[np.int32] | npt.NDArray[np.int64],
        group: int,
        seqs: npt.NDArray[np.int64],
        mask: npt.NDArray[np.bool_] | None,
    ) -> list[tuple[int, float]]:
        """The best ``depth`` slots of namespace ``group`` (and ``mask``) by the dot
        product with ``query``, best first, ties to the newest; a slot sharing no
        non-zero index with the query is not a candidate."""
        if not query.indices:
            return []
        q_idx, q_val = as_pair(query)
        q_val64 = q_val.astype(np.float64)
        found: list[tuple[float, int, int]] = []
        for slot, (idx, val) in self._vectors.items():
            if int(ns_ids[slot]) != group:
                continue
            if mask is not None and (slot >= len(mask) or not mask[slot]):
                continue
            pos = np.searchsorted(q_idx, idx)
            pos[pos >= len(q_idx)] = 0
            hit = q_idx[pos] == idx
            if not hit.any():
                continue
            score = float(np.dot(val[hit].astype(np.float64), q_val64[pos[hit]]))
            found.append((score, int(seqs[slot]), slot))
        found.sort(key=lambda t: (-t[0], -t[1]))
        return [(slot, score) for score, _, slot in found[:depth]]
