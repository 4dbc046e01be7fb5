"""quantize_int8: the int8 graph (actors._embedding.quantize)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from actors._embedding.quantize import quantize_int8

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _tiny_graph(path: Path) -> None:
    """ids -> Gather(table) -> MatMul(weight): the two kinds of node the encoder has."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "table")
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "weight")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"]),
            helper.make_node("MatMul", ["rows", "weight"], ["out"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 8])],
        [table, weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_the_int8_graph_has_int8_weights_and_integer_products(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, target = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    _tiny_graph(source)
    with caplog.at_level(logging.WARNING):
        quantize_int8(source, target)
    model = onnx.load(str(target))
    kinds = {node.op_type for node in model.graph.node}
    assert "MatMulInteger" in kinds or "DynamicQuantizeMatMul" in kinds
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    quantized = {t.name for t in model.graph.initializer if t.data_type in eight_bit}
    assert {"table_quantized", "weight_quantized"} <= quantized
    # The weights are signed int8 (per output channel), as quantize_int8 asks.
    signed = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8}
    assert "weight_quantized" in signed
    assert not any("pre-processing" in r.getMessage() for r in caplog.records)
    # It still computes the same function, to int8 precision.
    ids = np.array([3, 7, 49], dtype=np.int64)
    exact = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    approx = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    want = exact.run(["out"], {"ids": ids})[0]
    got = approx.run(["out"], {"ids": ids})[0]
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_a_missing_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nothing\.onnx is not a file; expected the fp32"):
        quantize_int8(tmp_path / "nothing.onnx", tmp_path / "int8.onnx")
    assert not (tmp_path / "int8.onnx").exists()
