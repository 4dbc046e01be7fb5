"""plan_passes: which texts share a forward pass (actors._embedding.buckets)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._embedding.buckets import FP32_COST, INT8_COST, PassCost, plan_passes

lengths_st = st.lists(st.integers(1, 300), max_size=200).map(
    lambda xs: np.array(xs, dtype=np.intp)
)
batch_st = st.integers(1, 80)
budget_st = st.integers(1, 1 << 21)


def _flat(passes: list[npt.NDArray[np.intp]]) -> list[int]:
    return [int(i) for p in passes for i in p]


@given(lengths_st, batch_st, budget_st, st.booleans())
def test_every_index_appears_exactly_once(
    lengths: npt.NDArray[np.intp], batch_size: int, budget: int, per_text: bool
) -> None:
    passes = plan_passes(
        lengths, batch_size=batch_size, attention_budget=budget, per_text=per_text
    )
    assert sorted(_flat(passes)) == list(range(len(lengths)))
    assert all(p.dtype == np.intp and p.ndim == 1 and p.size >= 1 for p in passes)


@given(lengths_st, batch_st, budget_st)
def test_no_pass_exceeds_the_batch_size_or_the_attention_budget(
    lengths: npt.NDArray[np.intp], batch_size: int, budget: int
) -> None:
    for p in plan_passes(lengths, batch_size=batch_size, attention_budget=budget):
        longest = int(lengths[p].max())
        assert len(p) <= batch_size
        # A text too long for the budget on its own still gets a pass, alone.
        assert len(p) * longest * longest <= budget or len(p) == 1


@given(lengths_st, batch_st, budget_st)
def test_passes_are_runs_of_the_stable_length_order(
    lengths: npt.NDArray[np.intp], batch_size: int, budget: int
) -> None:
    passes = plan_passes(lengths, batch_size=batch_size, attention_budget=budget)
    assert _flat(passes) == [int(i) for i in np.argsort(lengths, kind="stable")]
    for before, after in itertools.pairwise(passes):
        assert lengths[before].max() <= lengths[after].min()


def _brute_force(lengths: list[int], batch_size: int, budget: int, cost: PassCost) -> float:
    ordered = sorted(lengths)
    n = len(ordered)
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=max(n - 1, 0)):
        bounds = [0, *(i + 1 for i, c in enumerate(cuts) if c), n]
        total = 0.0
        for a, b in itertools.pairwise(bounds):
            size, longest = b - a, ordered[b - 1]
            if size > batch_size or (size > 1 and size * longest * longest > budget):
                total = float("inf")
                break
            total += cost(size, longest)
        best = min(best, total)
    return best


@pytest.mark.parametrize("cost", [FP32_COST, INT8_COST, PassCost(0.5, 1e-3, 0.0)])
@given(
    lengths=st.lists(st.integers(1, 200), min_size=1, max_size=9),
    batch_size=st.integers(1, 10),
    budget=st.integers(1, 1 << 17),
)
def test_the_plan_costs_no_more_than_any_cut_of_the_sorted_order(
    cost: PassCost, lengths: list[int], batch_size: int, budget: int
) -> None:
    array = np.array(lengths, dtype=np.intp)
    passes = plan_passes(array, batch_size=batch_size, attention_budget=budget, cost=cost)
    planned = sum(cost(len(p), int(array[p].max())) for p in passes)
    assert planned == pytest.approx(_brute_force(lengths, batch_size, budget, cost), rel=1e-9)


def test_one_outlier_does_not_pad_the_short_texts() -> None:
    lengths = np.array([12] * 63 + [256], dtype=np.intp)
    passes = plan_passes(lengths, batch_size=64, attention_budget=1 << 20)
    assert [len(p) for p in passes] == [63, 1]
    assert passes[-1].tolist() == [63]


def test_equal_short_texts_share_one_pass() -> None:
    lengths = np.full(64, 20, dtype=np.intp)
    assert [len(p) for p in plan_passes(lengths, batch_size=64, attention_budget=1 << 20)] == [64]


def test_per_text_gives_one_pass_per_text_in_input_order() -> None:
    lengths = np.array([30, 5, 5, 100], dtype=np.intp)
    passes = plan_passes(lengths, batch_size=64, attention_budget=1 << 20, per_text=True)
    assert [p.tolist() for p in passes] == [[0], [1], [2], [3]]


def test_no_texts_give_no_passes() -> None:
    empty = np.zeros(0, dtype=np.intp)
    assert plan_passes(empty, batch_size=8, attention_budget=1 << 20) == []
    assert plan_passes(empty, batch_size=8, attention_budget=1 << 20, per_text=True) == []


@pytest.mark.parametrize(
    ("lengths", "kwargs", "error", "match"),
    [
        ([3, 4], {"batch_size": 0}, ValueError, "batch_size is 0; expected an int >= 1"),
        ([3, 4], {"batch_size": True}, ValueError, "batch_size is True"),
        ([3, 4], {"attention_budget": 0}, ValueError, "attention_budget is 0"),
        ([3, 0], {}, ValueError, "lengths holds 0 at index 1; expected token counts >= 1"),
        ([[3, 4]], {}, ValueError, r"lengths has shape \(1, 2\)"),
        ([1.5], {}, ValueError, "dtype float64; expected a 1-D integer array"),
    ],
)
def test_bad_arguments_are_refused(
    lengths: list[object], kwargs: dict[str, int], error: type[Exception], match: str
) -> None:
    arguments = {"batch_size": 8, "attention_budget": 1 << 20, **kwargs}
    with pytest.raises(error, match=match):
        plan_passes(np.array(lengths), **arguments)


def test_a_list_is_refused() -> None:
    with pytest.raises(TypeError, match="lengths is a list; expected a numpy array"):
        untyped: Callable[..., object] = plan_passes
        untyped([3, 4], batch_size=8, attention_budget=1 << 20)
