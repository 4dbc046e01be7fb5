"""The int8 graph of the encoder: ONNX Runtime's dynamic quantization of the fp32 graph.

:func:`quantize_int8` turns the fp32 graph that :mod:`actors._embedding.onnx` builds into
one whose weights are int8, per output channel, and whose activations are quantized to
uint8 on the fly (``DynamicQuantizeLinear``) in front of every ``MatMul`` (which becomes
``MatMulInteger``) and every fused ``Attention`` (``QAttention``); the word-embedding
table (``Gather``) is stored int8 too and dequantized per looked-up row. Nothing is
downloaded: the same weights, quantized here.

Measured on 512 LoCoMo turns, one text per pass, against fp32: with the table int8, a
22.8 MB file (58.5 MB without), a session's RSS after one pass 84 MB (125 MB without;
fp32 175 MB), cosine mean 0.9925 / min 0.9830 (without: 0.9928 / 0.9810), the same
texts/s. The table's rows are dequantized one by one, so it adds no batch dependence.

Per channel matters: with one scale per weight matrix instead of one per output column,
the vectors' cosine to fp32 on LoCoMo turns drops from mean 0.992 / min 0.982 to mean
0.955 / min 0.895.

Batch invariance: ``DynamicQuantizeLinear`` takes one scale and zero point for its
whole input, ``[texts x length, hidden]``, padding rows included. An int8 text's vector
therefore depends on the other texts of its pass and on how far it is padded. Measured
on 512 LoCoMo turns (cost-model buckets of up to 64): int8 batched vs the same texts one
at a time, max |diff| 0.034 (median per text 0.021), cosine min 0.979, as large as
int8's own distance from fp32 (cosine to fp32 mean 0.993, min 0.981); fp32 batched vs
one at a time: 0 (bit-identical). So int8 runs one text per pass
(``plan_passes(..., per_text=True)``), which makes a batch's vectors equal the texts
embedded one at a time (bit-identical, also across thread counts).

What that costs, same run, 2 cores at load average 3 (texts/s, p50; two runs): int8 one
text per pass 268 / 301 on a 2-thread session; int8 batched 390 / 466; fp32 batched
96 / 258 (bimodal: p90 76 / 117). One text per pass
wastes the intra-op pool (tiny passes, a sync per operator); the same int8 per-text
passes on a session with ``intra_op_num_threads=1`` called from 2 threads at once give
510 / 581 texts/s (2.2x fp32 batched in the second run), bit-identical to the
sequential ones, faster than batched int8. So: run
int8 passes one text each, spread over ``threads`` concurrent callers of a 1-thread
session. (One text alone: int8 3.0 ms on 1 thread, 3.2 ms on 2; fp32 9.2 / 9.0 ms.)

Needs ``onnx`` and ``onnxruntime`` (the ``embed`` extra); imported on call.
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["QUANTIZE_VERSION", "quantize_int8"]

# Part of the int8 graph cache's key: bump it whenever quantize_int8's settings change,
# so that a graph quantized the old way is never reused.
QUANTIZE_VERSION = 2

_NOT_PREPROCESSED = "Please consider to run pre-processing before quantization"


class _DropPreprocessingHint(logging.Filter):
    """Drops ONNX Runtime's advice to run its shape pre-processing on the root logger.

    The graph is built here with every shape known already; the advice is noise in the
    user's log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return _NOT_PREPROCESSED not in record.getMessage()


def quantize_int8(source: Path, target: Path) -> None:
    """Write the int8 (dynamically quantized) graph of the fp32 graph ``source`` to ``target``.

    ``target`` is written in place; to publish it atomically, pass a temporary path and
    rename it afterwards. Takes several seconds (ONNX Runtime runs shape inference and
    quantizes every weight), so callers cache the result.

    Raises:
        FileNotFoundError: ``source`` is not a file.
        ImportError: ``onnx`` or ``onnxruntime`` is not installed.
    """
    source, target = Path(source), Path(target)
    if not source.is_file():
        raise FileNotFoundError(f"{source} is not a file; expected the fp32 ONNX graph")
    try:
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as error:
        raise ImportError(
            "int8 needs onnx and onnxruntime: `uv sync --extra embed`, or "
            "`pip install onnx onnxruntime`"
        ) from error
    hint = _DropPreprocessingHint()
    root = logging.getLogger()
    root.addFilter(hint)
    try:
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Attention", "Gather"],
            # Tensors whose type shape inference cannot tell (the com.microsoft ops'
            # outputs) are float.
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
    finally:
        root.removeFilter(hint)
