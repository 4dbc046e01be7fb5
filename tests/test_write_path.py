"""The store's batched write path agrees with the plain per-entry rules it replaces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actors._embedders import as_matrix, normalize_rows
from actors._prepare import unit_rows
from protocol import EmbeddingError

DIM = 8

_floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
_batches = hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.just(DIM)), elements=_floats32)


def _reference(vectors: object, count: int) -> tuple[object, object] | type[BaseException]:
    try:
        return normalize_rows(as_matrix(vectors, count, DIM))
    except EmbeddingError:
        return EmbeddingError


@settings(max_examples=300, deadline=None)
@given(_batches)
def test_unit_rows_matches_the_float64_path(batch: np.ndarray) -> None:
    expected = _reference(batch, len(batch))
    if expected is EmbeddingError:
        with pytest.raises(EmbeddingError):
            unit_rows(batch, len(batch), DIM)
        return
    assert isinstance(expected, tuple)
    want, want_zero = expected
    rows, zero = unit_rows(batch, len(batch), DIM)
    assert rows.dtype == np.float32
    assert rows.shape == (len(batch), DIM)
    np.testing.assert_array_equal(zero, want_zero)
    np.testing.assert_allclose(rows, want, rtol=1e-6, atol=1e-7)
    assert not np.shares_memory(rows, batch)


def test_unit_rows_fast_path_keeps_every_check() -> None:
    good = np.ones((3, DIM), dtype=np.float32)
    rows, zero = unit_rows(good, 3, DIM)
    np.testing.assert_allclose(rows, 1 / np.sqrt(DIM), rtol=1e-6)
    assert not zero.any()
    for bad in (np.nan, np.inf, -np.inf):
        batch = good.copy()
        batch[1, 2] = bad
        with pytest.raises(EmbeddingError, match="non-finite"):
            unit_rows(batch, 3, DIM)
    big = good.copy()
    big[2] = 3e37  # each square overflows float32
    with pytest.raises(EmbeddingError, match="overflows float32"):
        unit_rows(big, 3, DIM)
    with pytest.raises(EmbeddingError):
        unit_rows(good, 4, DIM)  # the wrong count
    with pytest.raises(EmbeddingError):
        unit_rows(np.ones((3, DIM + 1), dtype=np.float32), 3, DIM)
    # A zero row and a tiny one (its float32 square underflows) take the float64 path.
    mixed = good.copy()
    mixed[0] = 0.0
    mixed[1] = 1e-30
    rows, zero = unit_rows(mixed, 3, DIM)
    assert zero.tolist() == [True, False, False]
    np.testing.assert_array_equal(rows[0], 0.0)
    np.testing.assert_allclose(np.linalg.norm(rows[1]), 1.0, rtol=1e-6)
