"""Recall quality on LoCoMo: evidence recall@k per retriever configuration.

Run from the repository root::

    uv run --extra embed python benches/recall_quality.py --data ../shared/data/locomo \
        --json benches/results/recall_quality.json

``--data`` is a LoCoMo conversation file or a folder of them (one conversation per
file, as in ``data/locomo10.json`` split by sample); the data is never part of the
project. For each conversation every turn is stored through the public API, then each
question with evidence (category 5, adversarial, excluded) is retrieved, and the
measure is the fraction of its evidence turns among the top k (k = 1, 5, 10, 25),
averaged over questions. One entry is one turn, so a hit names exactly one turn.

Storage: the plain and the ``default`` configurations offload the
turns through compaction (``Offload``, the way an agent's old turns reach the store),
one ``compress`` per session, dated with the session's date; the ``ctx-*`` steps store
hand-made context entries through the documents API (``StoreHandle.add_documents``),
id = the turn's ``dia_id``. The plain configurations offload each turn alone
(``Offload(context=0, dated=False)``, as the reference figures were measured); the
``default`` configuration is the shipped one end to end: ``Offload`` as configured by
default writes each turn with its date and the turn before it
(:func:`protocol.contextual_entry`), and ``Memory.retrieve`` ranks with the default
:class:`protocol.RecallSettings`.

Every text is embedded once per run: a caching embedder embeds all of them up front,
in length-sorted batches, before any store opens. ``--cache FILE`` keeps them between
runs (an ``.npz``); it is keyed on the exact text, so it never changes a result. A
cold run embeds about 6,300 texts: 8 minutes on 2 busy cores (load 5), most of it
MiniLM; ``--blas-threads`` (1 by default, the fastest on a loaded machine) sets its
BLAS threads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from actors import HashingEmbedder, open_memory, open_store
from protocol import (
    Document,
    MemoryConfig,
    Offload,
    Offloaded,
    RecallSettings,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol._memory import contextual_entry

KS = (1, 5, 10, 25)
# Relevance floors measured for the default configurations (``--floors``): a hit is
# kept when its cosine score is >= the floor; None keeps every hit. 0.0 is measured as
# "strictly above 0.0", the least floor that never injects a zero-scoring hit.
FLOORS: tuple[float | None, ...] = (None, 0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4)
INJECTED = MemoryConfig().top_k  # how many hits a turn injects by default
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIMENSIONS = 384
Vector = npt.NDArray[np.float32]


# --- the data ---------------------------------------------------------------------------


@attrs.frozen
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None
    session: int
    date: str


@attrs.frozen
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@attrs.frozen
class Conversation:
    name: str
    sessions: list[list[Turn]]
    questions: list[Question]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s]


def _session_number(key: str) -> int | None:
    match = re.fullmatch(r"session_(\d+)", key)
    return None if match is None else int(match.group(1))


def load_conversation(path: Path) -> Conversation:
    raw = json.loads(path.read_text())
    conv = raw.get("conversation", raw)
    sessions: list[list[Turn]] = []
    for number in sorted(n for k in conv if (n := _session_number(k)) is not None):
        date = str(conv.get(f"session_{number}_date_time", ""))
        turns = [
            Turn(
                dia_id=t["dia_id"],
                speaker=t["speaker"],
                text=t["text"],
                caption=t.get("blip_caption"),
                session=number,
                date=date,
            )
            for t in conv[f"session_{number}"]
        ]
        if turns:
            sessions.append(turns)
    known = {t.dia_id for s in sessions for t in s}
    questions = []
    for qa in raw.get("qa", []):
        if qa.get("category") == 5:
            continue
        # A few evidence entries hold two ids ("D8:6; D9:17"); ids naming no turn are
        # dropped, and a question left with no evidence cannot be scored.
        ids = {e.strip() for item in qa.get("evidence", []) for e in str(item).split(";")}
        evidence = frozenset(ids & known)
        if evidence:
            questions.append(Question(qa["question"], int(qa["category"]), evidence))
    return Conversation(path.stem, sessions, questions)


def load(data: Path) -> list[Conversation]:
    files = sorted(data.glob("*.json")) if data.is_dir() else [data]
    if not files:
        raise SystemExit(f"no .json conversation files in {data}")
    return [load_conversation(f) for f in files]


# --- entry texts --------------------------------------------------------------------------


def plain_text(turn: Turn) -> str:
    """``Speaker: text``; a shared photo's caption stands in for the photo."""
    if turn.caption:
        return f"{turn.speaker}: {turn.text} {turn.caption}"
    return f"{turn.speaker}: {turn.text}"


@attrs.frozen
class EntryStyle:
    """How a turn's entry text is written: the turn, and optionally its context."""

    name: str
    date: bool = False
    previous: int = 0
    following: int = 0

    def texts(self, conv: Conversation) -> list[tuple[Turn, str]]:
        out = []
        for session in conv.sessions:
            for i, turn in enumerate(session):
                before = [plain_text(t) for t in session[max(0, i - self.previous) : i]]
                after = [plain_text(t) for t in session[i + 1 : i + 1 + self.following]]
                text = contextual_entry(
                    plain_text(turn), context=before, date=turn.date if self.date else None
                )
                text += "".join(f"\nAfter: {t}" for t in after)
                out.append((turn, text))
        return out


PLAIN = EntryStyle("plain")


# --- the embedder: every text once per run ------------------------------------------------


class CachedEmbedder:
    """MiniLM behind a text → vector cache; :meth:`warm` embeds the misses in batches."""

    def __init__(self, cache: Path | None, blas_threads: int) -> None:
        self.dimensions = DIMENSIONS
        self.path = cache
        self.blas_threads = blas_threads
        self.vectors: dict[str, Vector] = {}
        self.embedded = 0
        self.seconds = 0.0
        self._model: Any = None
        self._saved = time.perf_counter()
        self._dirty = False
        if cache is not None and cache.exists():
            z = np.load(cache)
            self.vectors = dict(zip(z["texts"].tolist(), z["vectors"], strict=True))

    def warm(self, texts: Iterable[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if not todo:
            return
        model = self.model()
        started = time.perf_counter()
        step = 512
        for i in range(0, len(todo), step):
            chunk = todo[i : i + step]
            self.vectors.update(zip(chunk, model.embed_batch(chunk), strict=True))
            self._dirty = True
            print(f"  embedded {i + len(chunk)}/{len(todo)}", file=sys.stderr, flush=True)
            # Saving rewrites the whole file: at most once a minute, and at the end.
            if time.perf_counter() - self._saved > 60:
                self.save()
        self.embedded += len(todo)
        self.seconds += time.perf_counter() - started

    def model(self) -> Any:
        """The MiniLM model itself (loaded on first use)."""
        if self._model is None:
            from actors import MiniLMEmbedder

            self._model = MiniLMEmbedder(blas_threads=self.blas_threads)
        return self._model

    def save(self) -> None:
        self._saved = time.perf_counter()
        if self.path is not None and self._dirty:
            self._dirty = False
            keys = list(self.vectors)
            tmp = self.path.with_name(self.path.name + ".tmp.npz")
            np.savez(tmp, texts=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
            os.replace(tmp, self.path)

    def embed(self, text: str) -> Vector:
        if text not in self.vectors:
            self.warm([text])
        return self.vectors[text]

    def embed_batch(self, texts: Sequence[str]) -> Vector:
        self.warm(texts)
        return np.stack([self.vectors[t] for t in texts])


# --- configurations -------------------------------------------------------------------------


@attrs.frozen
class Config:
    """One retriever configuration: how entries are written, and how they are searched."""

    name: str
    note: str
    style: EntryStyle = PLAIN
    embedder: str = "minilm"  # or "hashing"
    kind: str = "hybrid"  # "dense", "bm25", "hybrid", "mmr" or "default" (Memory.retrieve)
    rrf_k: float = 60
    weights: dict[str, float] | None = None
    fetch_k: int = 100
    lambda_mult: float = 0.5
    # For kind "default": the settings Memory.retrieve ranks with.
    recall: RecallSettings = attrs.field(factory=RecallSettings)

    def request(self, question: str, namespace: str, k: int) -> SearchRequest:
        if self.kind == "dense":
            return SearchRequest(query=question, k=k, namespace=namespace)
        if self.kind == "mmr":
            return SearchRequest(
                query=question,
                k=k,
                kind="mmr",
                fetch_k=max(k, self.fetch_k),
                lambda_mult=self.lambda_mult,
                namespace=namespace,
            )
        weights = self.weights
        vector = None
        if self.kind == "bm25":
            # A zero vector skips the query embedding; the dense list weighs nothing.
            weights, vector = {"dense": 0.0}, [0.0] * DIMENSIONS
        return SearchRequest(
            query=question,
            vector=vector,
            k=k,
            kind="hybrid",
            fetch_k=max(k, self.fetch_k),
            rrf_k=self.rrf_k,
            weights=weights,
            namespace=namespace,
        )


def configurations() -> list[Config]:
    """The steps, in order; each note says what changed and why it should transfer."""
    ctx = EntryStyle("context", date=True, previous=1)
    full = 1000  # deeper than any conversation here: fusion of the complete lists
    return [
        Config(
            "hashing", "384-bucket FNV-1a bag of words, cosine", embedder="hashing", kind="dense"
        ),
        Config("bm25", "Okapi BM25 (k1 1.2, b 0.75), Snowball stems", kind="bm25", fetch_k=full),
        Config("dense", "all-MiniLM-L6-v2, cosine", kind="dense"),
        Config("hybrid", "RRF (k = 60) of the complete BM25 and MiniLM lists", fetch_k=full),
        Config(
            "ctx-dense",
            "entry = turn + session date + previous turn; MiniLM",
            style=ctx,
            kind="dense",
        ),
        Config("ctx-bm25", "the same entries; BM25", style=ctx, kind="bm25", fetch_k=full),
        Config("ctx-hybrid", "the same entries; RRF k = 60", style=ctx, fetch_k=full),
        Config("ctx-hybrid-k10", "the same; RRF k = 10", style=ctx, rrf_k=10, fetch_k=full),
        Config(
            "ctx-mmr",
            "MMR (lambda 0.7, fetch_k 50) over MiniLM (not kept)",
            style=ctx,
            kind="mmr",
            fetch_k=50,
            lambda_mult=0.7,
        ),
        Config(
            "previous-default",
            "Memory.retrieve, RRF + neighbour boost only (speaker and date weights 0)",
            kind="default",
            recall=RecallSettings(speaker_weight=0.0, date_weight=0.0, link_weight=0.0),
        ),
        Config(
            "default-no-nb",
            "the default but neighbor_weight 0 (no neighbour boost)",
            kind="default",
            recall=RecallSettings(neighbor_weight=0.0),
        ),
        Config(
            "default-no-speaker",
            "the default but speaker_weight 0 (no speaker focus)",
            kind="default",
            recall=RecallSettings(speaker_weight=0.0),
        ),
        Config(
            "default-no-date",
            "the default but date_weight 0 (no time channel)",
            kind="default",
            recall=RecallSettings(date_weight=0.0),
        ),
        Config(
            "default-no-links",
            "the default but link_weight 0 (no entity links)",
            kind="default",
            recall=RecallSettings(link_weight=0.0),
        ),
        Config(
            "default",
            "Memory.retrieve, default MemoryConfig: RRF k 10, neighbour boost 0.5, speaker "
            "focus 1.0, time channel 1.0, entity links 0.5; Offload entries",
            kind="default",
        ),
        Config(
            "default-hashing",
            "the same with HashingEmbedder (384 buckets)",
            embedder="hashing",
            kind="default",
        ),
    ]


# --- running --------------------------------------------------------------------------------


@attrs.define
class FloorTally:
    """Per relevance floor: R@k of the hits left, and the mean number of the ``INJECTED``
    hits a turn would inject that hold no evidence (noise in the prompt)."""

    recall: dict[float | None, Tally] = attrs.field(factory=dict)
    noise: dict[float | None, float] = attrs.field(factory=dict)
    injected: dict[float | None, float] = attrs.field(factory=dict)

    def add(self, scored: list[tuple[str, float]], evidence: frozenset[str]) -> None:
        for floor in FLOORS:
            kept = [
                key
                for key, score in scored
                if floor is None or (score > 0.0 if floor == 0.0 else score >= floor)
            ]
            self.recall.setdefault(floor, Tally()).add(kept, evidence)
            shown = kept[:INJECTED]
            self.noise[floor] = self.noise.get(floor, 0.0) + sum(k not in evidence for k in shown)
            self.injected[floor] = self.injected.get(floor, 0.0) + len(shown)

    def rows(self) -> dict[str, Any]:
        out = {}
        for floor in FLOORS:
            tally = self.recall[floor]
            n = max(tally.questions, 1)
            out["none" if floor is None else f"{floor:g}"] = {
                **tally.row(),
                "injected": round(self.injected[floor] / n, 3),
                "noise": round(self.noise[floor] / n, 3),
            }
        return out


@attrs.define
class Tally:
    hits: dict[int, float] = attrs.field(factory=lambda: dict.fromkeys(KS, 0.0))
    questions: int = 0

    def add(self, ranked: list[str], evidence: frozenset[str]) -> None:
        self.questions += 1
        for k in KS:
            self.hits[k] += len(evidence & set(ranked[:k])) / len(evidence)

    def row(self) -> dict[str, Any]:
        n = max(self.questions, 1)
        return {**{f"R@{k}": round(self.hits[k] / n, 4) for k in KS}, "questions": self.questions}


def store_config(entries: int) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=entries, dimensions=DIMENSIONS, max_entry_bytes=1 << 16)


async def offload(memory: Any, conv: Conversation) -> dict[str, str]:
    """Offload every turn through compaction, a session at a time, dated with the
    session's date; id → dia_id."""
    a = conv.sessions[0][0].speaker
    by_id: dict[str, str] = {}
    for session in conv.sessions:
        messages = [
            (UnifiedMessage.user if t.speaker == a else UnifiedMessage.assistant)(plain_text(t))
            for t in session
        ]
        # The newest user message is protected; a closing one keeps every turn movable.
        compressed = await memory.compress(
            [*messages, UnifiedMessage.user("(next)")], date=session[0].date
        )
        for action in compressed.report.actions:
            assert isinstance(action, Offloaded), action
            for index, entry_id in zip(action.indices, action.ids, strict=True):
                by_id[entry_id] = session[index].dia_id
    return by_id


async def run_conversation(
    conv: Conversation,
    configs: list[Config],
    minilm: CachedEmbedder,
    tallies: dict[str, Any],
    floors: dict[str, FloorTally],
) -> None:
    groups: dict[tuple[EntryStyle, str, RecallSettings | None], list[Config]] = {}
    for c in configs:
        recall = c.recall if c.kind == "default" else None
        groups.setdefault((c.style, c.embedder, recall), []).append(c)
    size = len(conv.turns) + 8
    for (style, embedder_name, recall), group in groups.items():
        embedder: object = HashingEmbedder(DIMENSIONS) if embedder_name == "hashing" else minilm
        # The default runs compaction as shipped: Offload writes context entries. The
        # plain configurations offload the turn alone, as the reference figures did.
        offload_as = Offload(turns=size) if recall else Offload(turns=size, context=0, dated=False)
        memory_config = MemoryConfig(strategies=[offload_as], recall=recall or RecallSettings())
        async with open_memory(
            store=store_config(size), memory=memory_config, embedder=embedder
        ) as memory:
            ns = memory_config.namespace
            if style == PLAIN:
                by_id = await offload(memory, conv)
            else:
                docs = [
                    Document(text=text, id=turn.dia_id, metadata={"session": turn.session})
                    for turn, text in style.texts(conv)
                ]
                await memory.store.add_documents(docs, namespace=ns)
                by_id = {d.id: d.id for d in docs if d.id is not None}
            for question in conv.questions:
                for c in group:
                    if c.kind == "default":
                        # No floor here: the floors are applied to this one ranking.
                        report = await memory.retrieve(
                            question.text, k=max(KS), min_similarity=-1.0
                        )
                        ranked = [by_id[t.id] for t in report.turns]
                        scored = [(by_id[t.id], t.score) for t in report.turns]
                        floors.setdefault(c.name, FloorTally()).add(scored, question.evidence)
                    else:
                        hits = await memory.store.search(c.request(question.text, ns, max(KS)))
                        ranked = [by_id[h.document.id or ""] for h in hits]
                    for key in (0, question.category):
                        tallies[c.name].setdefault(key, Tally()).add(ranked, question.evidence)


def all_texts(convs: list[Conversation], configs: list[Config]) -> list[str]:
    texts: list[str] = []
    for style in dict.fromkeys(c.style for c in configs if c.embedder == "minilm"):
        for conv in convs:
            texts.extend(t for _, t in style.texts(conv))
    if any(c.embedder == "minilm" for c in configs):
        texts.extend(q.text for conv in convs for q in conv.questions)
    return texts


def print_table(configs: list[Config], tallies: dict[str, Any]) -> None:
    head = f"{'configuration':<16} {'category':<12} " + " ".join(f"{'R@' + str(k):>6}" for k in KS)
    print(head + f" {'n':>5}")
    print("-" * len(head + "      "))
    for c in configs:
        for key in (0, *sorted(CATEGORIES)):
            tally = tallies[c.name].get(key)
            if tally is None:
                continue
            row = tally.row()
            label = "all" if key == 0 else CATEGORIES[key]
            cells = " ".join(f"{row[f'R@{k}']:>6.3f}" for k in KS)
            print(f"{c.name if key == 0 else '':<16} {label:<12} {cells} {row['questions']:>5}")
    print()
    for c in configs:
        print(f"  {c.name:<16} {c.note}")


def print_floors(floors: dict[str, FloorTally]) -> None:
    """R@k and the injected noise per relevance floor, for each default configuration."""
    for name, tally in floors.items():
        print(f"\n{name}: relevance floor (a hit is kept when its cosine >= the floor)")
        print(
            f"{'floor':<6} "
            + " ".join(f"{'R@' + str(k):>6}" for k in KS)
            + f" {'injected':>9} {'no-evidence':>12}"
        )
        for floor, row in tally.rows().items():
            label = "> 0" if floor == "0" else floor
            cells = " ".join(f"{row[f'R@{k}']:>6.3f}" for k in KS)
            print(f"{label:<6} {cells} {row['injected']:>9.2f} {row['noise']:>12.2f}")


# --- latency at scale ------------------------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {
        "p50": round(float(np.percentile(ms, 50)), 3),
        "p90": round(float(np.percentile(ms, 90)), 3),
    }


async def latency(
    convs: list[Conversation], minilm: CachedEmbedder, entries: int, rounds: int
) -> dict[str, Any]:
    """``Memory.retrieve`` (k = 25) over ``entries`` context entries, for each default
    configuration, interleaved: one call each per question, in an order shuffled per
    question, so the machine's load hits them alike. The entries are the conversations'
    turns repeated (each copy's text marked, so no two are the same content) with their
    cached MiniLM vectors; the queries are cached too (each is asked once, untimed,
    first), so this times recall itself; ``embed`` is MiniLM embedding one question,
    which a real query adds to every configuration."""
    style = EntryStyle("context", date=True, previous=1)
    texts = [t for conv in convs for _, t in style.texts(conv)]
    minilm.warm(texts)
    rng = random.Random(20)
    questions = rng.sample([q.text for conv in convs for q in conv.questions], 100)
    minilm.warm(questions)
    docs = [
        Document(
            text=text if i < len(texts) else f"{text} [{i // len(texts)}]",
            id=f"e{i}",
            embedding=minilm.vectors[text].tolist(),
        )
        for i, text in ((i, texts[i % len(texts)]) for i in range(entries))
    ]
    settings = {
        c.name: c.recall
        for c in configurations()
        if c.kind == "default" and c.embedder == "minilm"
    }
    config = store_config(entries)
    times: dict[str, list[float]] = {name: [] for name in [*settings, "embed"]}
    async with open_store(config, minilm) as store:
        for i in range(0, len(docs), 512):
            await store.add_documents(docs[i : i + 512], namespace="bench")
        async with contextlib.AsyncExitStack() as stack:
            memories = {
                name: await stack.enter_async_context(
                    open_memory(
                        store=store,
                        memory=MemoryConfig(namespace="bench", recall=recall, min_similarity=None),
                    )
                )
                for name, recall in settings.items()
            }
            for question in questions:  # warm: the stripped queries get embedded here
                for memory in memories.values():
                    await memory.retrieve(question, k=max(KS))
            model = minilm.model()
            for _ in range(rounds):
                for question in questions:
                    order = [*memories, "embed"]
                    rng.shuffle(order)
                    for name in order:
                        started = time.perf_counter()
                        if name == "embed":
                            model.embed(question)
                        else:
                            await memories[name].retrieve(question, k=max(KS))
                        times[name].append(time.perf_counter() - started)
    out = {name: percentiles(samples) for name, samples in times.items()}
    base = out["previous-default"]
    for name, row in out.items():
        if name != "embed":
            row["ratio_p50"] = round(row["p50"] / base["p50"], 2)
            row["ratio_p90"] = round(row["p90"] / base["p90"], 2)
    return {"entries": entries, "queries": len(times["embed"]), **out}


def print_latency(result: dict[str, Any]) -> None:
    print(
        f"\nMemory.retrieve (k = 25) over {result['entries']} entries, "
        f"{result['queries']} calls each"
    )
    print(f"{'configuration':<20} {'p50 ms':>8} {'p90 ms':>8} {'p50 ratio':>10} {'p90 ratio':>10}")
    for name, row in result.items():
        if isinstance(row, dict):
            ratios = (
                f"{row['ratio_p50']:>10.2f} {row['ratio_p90']:>10.2f}"
                if "ratio_p50" in row
                else ""
            )
            print(f"{name:<20} {row['p50']:>8.2f} {row['p90']:>8.2f} {ratios}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    convs = load(Path(args.data))
    if args.latency:
        minilm = CachedEmbedder(Path(args.cache) if args.cache else None, args.blas_threads)
        result = await latency(convs, minilm, args.latency, args.rounds)
        minilm.save()
        print_latency(result)
        print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        return {"latency": result, "load": os.getloadavg()}
    configs = configurations()
    if args.only:
        wanted = set(args.only.split(","))
        configs = [c for c in configs if c.name in wanted]
    minilm = CachedEmbedder(Path(args.cache) if args.cache else None, args.blas_threads)
    started = time.perf_counter()
    minilm.warm(all_texts(convs, configs))
    tallies: dict[str, Any] = {c.name: {} for c in configs}
    floors: dict[str, FloorTally] = {}
    for conv in convs:
        await run_conversation(conv, configs, minilm, tallies, floors)
    elapsed = time.perf_counter() - started
    minilm.save()
    print_table(configs, tallies)
    print_floors(floors)
    print(
        f"\n{sum(len(c.questions) for c in convs)} questions, {len(convs)} conversations; "
        f"{minilm.embedded} texts embedded in {minilm.seconds:.0f} s; {elapsed:.0f} s in all "
        f"on {platform.machine()} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})"
    )
    return {
        c.name: {
            **tallies[c.name][0].row(),
            "by_category": {CATEGORIES[k]: t.row() for k, t in tallies[c.name].items() if k},
            **({"floors": floors[c.name].rows()} if c.name in floors else {}),
        }
        for c in configs
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a LoCoMo .json file or a folder of them")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--cache", help="an .npz that keeps the embeddings between runs")
    parser.add_argument("--only", help="comma-separated configuration names")
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument(
        "--latency",
        type=int,
        metavar="ENTRIES",
        help="time Memory.retrieve per default configuration over this many entries instead",
    )
    parser.add_argument("--rounds", type=int, default=2, help="latency rounds over 100 questions")
    args = parser.parse_args(argv)
    out = trio.run(main_async, args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
