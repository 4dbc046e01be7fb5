"""The cosine threshold of ``dedupe="near"`` (issue #31), measured with MiniLM.

    uv run --extra bench --extra embed python benches/near_duplicates.py
        [--locomo ../shared/data/locomo] [--no-chart]

Two sources:

- ``benches/data/near_duplicates.tsv``: hand-written pairs, each of one kind:
  ``paraphrase`` (the same fact in other words: should dedupe), ``changed`` (the same
  sentence with a different value, a negation or another person: a changed fact, must
  never dedupe), ``related`` (same topic, another fact) and ``unrelated``. Each pair is
  embedded as the store embeds a document without a conversation or ``occurred_at``
  (its own text), and again with a ``Date:`` line as :func:`protocol.entry_text` adds
  (both dated, on two days a week apart), which is what a dated entry's vector holds.
- LoCoMo (``--locomo``, the dev split's five conversations, read from the folder and
  not part of the project): every turn, as ``"Speaker: text"``, against every earlier
  turn of its conversation. A conversation written turn by turn with ``dedupe="near"``
  drops a turn whose best cosine with an earlier one is at or above the threshold; the
  share dropped, and the pairs at the top, show what a threshold costs on real talk
  (where a turn is almost never a restatement of a stored fact).

The threshold chosen is the smallest on a 0.005 grid above every ``changed`` and
``related`` pair of the hand-written set (plain texts), so that no changed fact is
dropped as a duplicate; the table gives each threshold's share of paraphrases caught.
Embeds with :class:`actors.MiniLMEmbedder` (the ``embed`` extra). Writes
``benches/results/near_duplicates.json`` and ``benches/results/near_duplicates.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from vector_store import machine  # this script's folder, as turn.py does

from actors import MiniLMEmbedder
from protocol import entry_text

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "near_duplicates.tsv"
RESULTS = HERE / "results"
KINDS = ("verbatim", "paraphrase", "changed", "related", "unrelated")
GRID = [round(0.80 + 0.005 * i, 3) for i in range(41)]  # 0.80 .. 1.00
DAY_A = dt.datetime(2025, 3, 4, 9, 30, tzinfo=dt.UTC)
DAY_B = DAY_A + dt.timedelta(days=7, hours=5)


def read_pairs(path: Path) -> list[tuple[str, str, str]]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or parts[0] not in KINDS:
            raise ValueError(
                f"{path}:{number} is {line!r}; expected kind<TAB>a<TAB>b, kind one of {KINDS}"
            )
        pairs.append((parts[0], parts[1], parts[2]))
    return pairs


def embed(model: MiniLMEmbedder, texts: list[str]) -> np.ndarray:
    vectors = np.asarray(model.embed_batch(texts), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def pair_cosines(model: MiniLMEmbedder, a: list[str], b: list[str]) -> list[float]:
    va, vb = embed(model, a), embed(model, b)
    return [float(x) for x in np.einsum("ij,ij->i", va, vb)]


def summary(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    return {
        "n": len(values),
        "min": float(arr.min()),
        "p10": float(np.percentile(arr, 10)),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "max": float(arr.max()),
    }


def hand_set(model: MiniLMEmbedder) -> dict[str, Any]:
    pairs = read_pairs(DATA)
    a = [p[1] for p in pairs]
    b = [p[2] for p in pairs]
    plain = pair_cosines(model, a, b)
    dated = pair_cosines(
        model,
        [entry_text(t, occurred_at=DAY_A) for t in a],
        [entry_text(t, occurred_at=DAY_B) for t in b],
    )
    rows = [
        {"kind": k, "a": x, "b": y, "cosine": c, "cosine_dated": d}
        for (k, x, y), c, d in zip(pairs, plain, dated, strict=True)
    ]
    out: dict[str, Any] = {"pairs": rows}
    for field in ("cosine", "cosine_dated"):
        out[field] = {
            kind: summary([r[field] for r in rows if r["kind"] == kind])
            for kind in KINDS
            if any(r["kind"] == kind for r in rows)
        }
    return out


def locomo(model: MiniLMEmbedder, folder: Path) -> dict[str, Any]:
    """Each turn's best cosine with an earlier turn of its conversation."""
    best: list[float] = []
    top: list[tuple[float, str, str]] = []
    turns_total = 0
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        texts = []
        for s in range(1, 100):
            session = data.get(f"session_{s}")
            if session is None:
                continue
            texts.extend(f"{t['speaker']}: {t['text']}" for t in session)
        turns_total += len(texts)
        vectors = embed(model, texts)
        sims = vectors @ vectors.T
        for i in range(1, len(texts)):
            j = int(np.argmax(sims[i, :i]))
            best.append(float(sims[i, j]))
            top.append((float(sims[i, j]), texts[j], texts[i]))
    top.sort(key=lambda x: -x[0])
    return {
        "files": sorted(p.name for p in folder.glob("*.json")),
        "turns": turns_total,
        "best_earlier": summary(best),
        "dropped_share": {str(t): float(np.mean(np.asarray(best) >= t)) for t in GRID},
        "top_pairs": [{"cosine": c, "earlier": a, "turn": b} for c, a, b in top[:15]],
    }


def choose(hand: dict[str, Any], field: str) -> dict[str, Any]:
    rows = hand["pairs"]
    must_not = max(r[field] for r in rows if r["kind"] in ("changed", "related"))
    para = np.asarray([r[field] for r in rows if r["kind"] == "paraphrase"])
    verb = np.asarray([r[field] for r in rows if r["kind"] == "verbatim"])
    threshold = math.ceil((must_not + 1e-9) / 0.005) * 0.005
    grid = {
        str(t): {
            "verbatim_caught": float(np.mean(verb >= t)),
            "paraphrases_caught": float(np.mean(para >= t)),
            "changed_dropped": int(sum(r[field] >= t for r in rows if r["kind"] == "changed")),
            "related_dropped": int(sum(r[field] >= t for r in rows if r["kind"] == "related")),
        }
        for t in GRID
    }
    return {
        "highest_changed_or_related": must_not,
        "threshold": round(threshold, 3),
        "paraphrases_caught": float(np.mean(para >= threshold)),
        "verbatim_caught": float(np.mean(verb >= threshold)),
        "grid": grid,
    }


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["hand"]["pairs"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    bins = np.linspace(0.0, 1.0, 51)
    for ax, field, title in (
        (axes[0], "cosine", "own text"),
        (axes[1], "cosine_dated", "with a Date: line (a week apart)"),
    ):
        for kind in KINDS:
            ax.hist(
                [r[field] for r in rows if r["kind"] == kind], bins=bins, alpha=0.6, label=kind
            )
        ax.axvline(
            report["choice"]["cosine"]["threshold"],
            color="black",
            linestyle="--",
            label="threshold chosen",
        )
        ax.set_title(f"MiniLM cosine of a pair, {title}")
        ax.set_xlabel("cosine")
    if report.get("locomo"):
        best = report["locomo"]["best_earlier"]
        axes[0].axvline(
            best["p90"], color="grey", linewidth=0.8, label="LoCoMo: p90 of a turn's best"
        )
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--out", type=Path, default=RESULTS / "near_duplicates.json")
    parser.add_argument("--no-chart", action="store_true")
    args = parser.parse_args()

    model = MiniLMEmbedder()
    hand = hand_set(model)
    report: dict[str, Any] = {
        "machine": machine(),
        "model": "all-MiniLM-L6-v2",
        "data": str(DATA.relative_to(HERE.parent)),
        "hand": hand,
        "choice": {field: choose(hand, field) for field in ("cosine", "cosine_dated")},
    }
    if args.locomo.is_dir():
        report["locomo"] = locomo(model, args.locomo)

    print("cosine of a pair (MiniLM), by kind: min / p10 / p50 / p90 / max")
    for field in ("cosine", "cosine_dated"):
        print(f"  {field}:")
        for kind, s in hand[field].items():
            print(
                f"    {kind:10} n={s['n']:3}  {s['min']:.3f} / {s['p10']:.3f} / "
                f"{s['p50']:.3f} / {s['p90']:.3f} / {s['max']:.3f}"
            )
    print("\nhighest changed/related pairs (own text):")
    worst = sorted(
        (r for r in hand["pairs"] if r["kind"] in ("changed", "related")),
        key=lambda r: -r["cosine"],
    )
    for r in worst[:8]:
        print(f"  {r['cosine']:.3f} {r['kind']:8} {r['a']!r} / {r['b']!r}")
    print("\nlowest verbatim pairs (own text):")
    for r in sorted(
        (r for r in hand["pairs"] if r["kind"] == "verbatim"), key=lambda r: r["cosine"]
    )[:8]:
        print(f"  {r['cosine']:.3f} {r['a']!r} / {r['b']!r}")
    print("\nlowest paraphrases (own text):")
    for r in sorted(
        (r for r in hand["pairs"] if r["kind"] == "paraphrase"), key=lambda r: r["cosine"]
    )[:8]:
        print(f"  {r['cosine']:.3f} {r['a']!r} / {r['b']!r}")

    print(
        "\nthreshold | verbatim caught | paraphrases caught | changed dropped | related dropped"
        " | LoCoMo turns dropped"
    )
    for t in GRID:
        if t < 0.85:
            continue
        g = report["choice"]["cosine"]["grid"][str(t)]
        lo = report.get("locomo", {}).get("dropped_share", {}).get(str(t))
        print(
            f"  {t:.3f}   | {g['verbatim_caught']:.2f} | {g['paraphrases_caught']:.2f} | "
            f"{g['changed_dropped']} | "
            f"{g['related_dropped']} | {'' if lo is None else f'{lo:.4f}'}"
        )
    for field, c in report["choice"].items():
        print(
            f"\n{field}: highest changed/related {c['highest_changed_or_related']:.3f} -> "
            f"threshold {c['threshold']:.3f}, verbatim caught {c['verbatim_caught']:.2f}, "
            f"paraphrases caught {c['paraphrases_caught']:.2f}"
        )
    if "locomo" in report:
        lo = report["locomo"]
        s = lo["best_earlier"]
        print(
            f"\nLoCoMo: {lo['turns']} turns; best cosine with an earlier turn "
            f"p50 {s['p50']:.3f} p90 {s['p90']:.3f} max {s['max']:.3f}"
        )
        for p in lo["top_pairs"][:8]:
            print(f"  {p['cosine']:.3f} {p['earlier'][:60]!r} / {p['turn'][:60]!r}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")
    if not args.no_chart:
        png = args.out.with_suffix(".png")
        chart(report, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
