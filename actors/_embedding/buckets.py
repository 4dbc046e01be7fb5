"""Which texts run together in one forward pass: length buckets chosen by a cost model.

A forward pass pads every text to the longest one in it, so a pass of texts with mixed
lengths pays for tokens that do not exist; many tiny passes pay the fixed cost of a pass
(the session call, the thread pool's wake-up, small and badly shaped matrix products)
again and again. :func:`plan_passes` cuts the texts, sorted by token length, into the
contiguous runs whose summed cost is the least, by dynamic programming over that order.

The cost of one pass of ``n`` texts padded to ``L`` tokens is modelled as::

    fixed + per_token * n * L + per_token_length * n * L * L

(the matrix products grow with the padded tokens, the attention scores with the tokens
times the length). The constants were fitted (least squares on relative error, no
negative term) to ONNX Runtime passes over a grid of 1..64 texts x 8..256 tokens on the
machine the library was developed on (2 cores with AVX512-VNNI, loaded by other work):
see :data:`FP32_COST` and :data:`INT8_COST`. Only their ratios matter to the plan, and
those vary much less between machines than the absolute times.
"""

from __future__ import annotations

from typing import Final, final

import attrs
import numpy as np
import numpy.typing as npt

__all__ = ["FP32_COST", "INT8_COST", "PassCost", "plan_passes"]


@final
@attrs.frozen
class PassCost:
    """The cost model of one padded forward pass (seconds on the calibration machine).

    Attributes:
        fixed: per pass, whatever its size.
        per_token: per padded token (``texts x length``).
        per_token_length: per padded token times the padded length.
    """

    fixed: float
    per_token: float
    per_token_length: float

    def __call__(self, texts: int, length: int) -> float:
        """The modelled cost of one pass of ``texts`` texts padded to ``length`` tokens."""
        tokens = texts * length
        return self.fixed + tokens * (self.per_token + self.per_token_length * length)


# ONNX Runtime 1.23, 2 intra-op threads (no spinning), random token ids, a grid of
# {1, 2, 4, ..., 64} texts x {8, 16, 24, 32, 48, 64, 96, 128, 192, 256} tokens up to 4096
# tokens a pass, median of 5 interleaved rounds per cell, load average 1.5-2.7 on 2 cores
# (``benches/embedding.py --calibrate`` repeats it). Median relative error of the fit 6%
# (fp32) and 7% (int8). E.g. fp32: one text of 32 tokens 5.9 ms, 64 of them 3.0 ms each.
# Checked on real turns: 256 LoCoMo turns in groups of 8, raw passes, the plan's modelled
# 4.94 ms per text against chunks of 4's 5.34 (the best fixed chunking); measured 4.97
# against 5.51 ms. With 1 intra-op thread (3 rounds, load 3.5-4.6, noisier: 13% / 15%):
# fp32 PassCost(2.77e-3, 1.88e-4, 1.50e-7), int8 PassCost(8.39e-4, 7.41e-5, 1.39e-7).
FP32_COST: Final = PassCost(fixed=2.98e-3, per_token=8.79e-5, per_token_length=4.94e-8)
INT8_COST: Final = PassCost(fixed=1.85e-3, per_token=4.04e-5, per_token_length=4.74e-8)


def _check(lengths: object, batch_size: object, attention_budget: object) -> None:
    for name, value in (("batch_size", batch_size), ("attention_budget", attention_budget)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} is {value!r}; expected an int >= 1")
    if not isinstance(lengths, np.ndarray):
        raise TypeError(f"lengths is a {type(lengths).__name__}; expected a numpy array")
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(
            f"lengths has shape {lengths.shape} and dtype {lengths.dtype}; "
            "expected a 1-D integer array"
        )
    if lengths.size and int(lengths.min()) < 1:
        raise ValueError(
            f"lengths holds {int(lengths.min())} at index {int(lengths.argmin())}; "
            "expected token counts >= 1"
        )


def plan_passes(
    lengths: npt.NDArray[np.intp],
    *,
    batch_size: int,
    attention_budget: int,
    per_text: bool = False,
    cost: PassCost = FP32_COST,
) -> list[npt.NDArray[np.intp]]:
    """The forward passes for texts of these token lengths, cheapest first found.

    Each pass is an array of indices into ``lengths``, ordered by length (shortest
    first; equal lengths keep their input order), to be padded to its longest text.
    Every index appears in exactly one pass. No pass holds more than ``batch_size``
    texts, nor more than ``attention_budget`` = texts x length^2 (which bounds the
    attention scores' memory), except that a text longer than ``sqrt(attention_budget)``
    still gets a pass of its own. Among the plans that cut the length-sorted order into
    contiguous runs, the one returned has the least total ``cost``.

    Args:
        lengths: each text's token count (special tokens included), >= 1.
        batch_size: the most texts per pass.
        attention_budget: the most texts x length^2 per pass.
        per_text: one pass per text, in input order (a pass's result then never depends
            on the other texts: what int8's per-tensor activation quantization needs).
        cost: the cost model of a pass; :data:`FP32_COST` by default.

    Returns:
        The passes, in length order.

    Raises:
        TypeError: ``lengths`` is not a numpy array.
        ValueError: ``lengths`` is not 1-D integers >= 1, or ``batch_size`` or
            ``attention_budget`` is not an int >= 1.
    """
    _check(lengths, batch_size, attention_budget)
    count = int(lengths.size)
    if per_text:
        return [np.array([i], dtype=np.intp) for i in range(count)]
    if count == 0:
        return []
    order = np.argsort(lengths, kind="stable").astype(np.intp)
    sorted_lengths = lengths[order].astype(np.float64)
    # best[i]: the least cost of the first i sorted texts; start[i]: where its last pass
    # starts. A pass over sorted[j:i] is padded to sorted_lengths[i - 1], its longest.
    best = np.zeros(count + 1, dtype=np.float64)
    start = np.zeros(count + 1, dtype=np.intp)
    for i in range(1, count + 1):
        length = sorted_lengths[i - 1]
        fit = min(batch_size, attention_budget // int(length * length), i)
        fit = max(fit, 1)
        sizes = np.arange(1, fit + 1, dtype=np.float64)
        totals = best[i - 1 :: -1][:fit] + (
            cost.fixed + sizes * length * (cost.per_token + cost.per_token_length * length)
        )
        pick = int(np.argmin(totals))
        best[i] = totals[pick]
        start[i] = i - (pick + 1)
    passes: list[npt.NDArray[np.intp]] = []
    end = count
    while end > 0:
        passes.append(order[start[end] : end])
        end = int(start[end])
    passes.reverse()
    return passes
