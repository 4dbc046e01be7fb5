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
(:func:`protocol.compaction.contextual_entry`), and ``Memory.retrieve`` ranks with the default
:class:`protocol.RecallSettings`.

Every text is embedded once per run: a caching embedder embeds all of them up front,
in length-sorted batches, before any store opens. ``--cache FILE`` keeps them between
runs (an ``.npz``); it is keyed on the exact text, so it never changes a result. A
cold run embeds about 6,300 texts: 8 minutes on 2 busy cores (load 5), most of it
MiniLM; ``--blas-threads`` (1 by default, the fastest on a loaded machine) sets its
BLAS threads.

``--doors all`` (or some of ``mcp,cli,langchain,langgraph,pg``) also measures every
other way in, each driven as its users drive it (each turn ``"Speaker: text"`` with
its session's date as ``occurred_at``, its conversation and ``{"dia_id": ...}`` as
metadata; a namespace per conversation), beside ``Memory.retrieve`` (the ``default``
configuration, default floor) on the same questions: the real ``trio-recall mcp``
server over stdio through the ``mcp`` SDK's client, ``trio-recall import`` then one
``trio-recall search`` process per question for a seeded sample (``--cli-sample``),
the LangChain retriever, the LangGraph store, and ``Memory.retrieve`` on pg (an
embedded PostgreSQL, or ``--dsn``). A door whose code does not yet take what the
contract says (``occurred_at``, ``conversation``, recall) is measured as it is, and its
row says what it lacked. The MCP and CLI doors embed with their own MiniLM (the cache
cannot reach them).

``--latency 10000,100000`` times ``StoreHandle.search`` with ``kind="recall"`` against
``kind="similarity"`` on the in-memory store, the query embedded by MiniLM in each
call, and ``Memory.retrieve`` per default configuration with cached queries (``--only``
keeps some), interleaved (see :func:`latency`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from actors import AnyEmbedder, HashingEmbedder, open_memory, open_store
from protocol import (
    Document,
    MemoryConfig,
    RecallSettings,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)
from protocol.checks import format_date
from protocol.compaction import (
    Offload,
    Offloaded,
    contextual_entry,
)

KS = (1, 5, 10, 25)
# Relevance floors measured for the default configurations (``--floors``): a hit is
# kept when its cosine score is >= the floor; None keeps every hit. 0.0 is measured as
# "strictly above 0.0", the least floor that never injects a zero-scoring hit.
FLOORS: tuple[float | None, ...] = (None, 0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4)
INJECTED = MemoryConfig().top_k  # how many hits a turn injects by default
DEFAULT_FLOOR = MemoryConfig().min_similarity or -1.0  # Memory.retrieve's, as shipped
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIMENSIONS = 384
Vector = npt.NDArray[np.float32]
# A question, by its conversation and its place there -> the dia_ids ranked for it.
Rankings = dict[tuple[str, int], list[str]]


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
# The same text as PLAIN, written as documents (add_documents) rather than offloaded.
MEMORY = EntryStyle("memory")


# --- the embedder: every text once per run ------------------------------------------------


class CachedEmbedder:
    """MiniLM behind a text → vector cache; :meth:`warm` embeds the misses in batches."""

    def __init__(self, cache: Path | None, blas_threads: int, precision: str = "fp32") -> None:
        self.dimensions = DIMENSIONS
        self.path = cache
        self.blas_threads = blas_threads
        self.precision = precision
        self.vectors: dict[str, Vector] = {}
        self.embedded = 0
        self.seconds = 0.0
        self._model: Any = None
        self._saved = time.perf_counter()
        self._dirty = False
        if cache is not None and cache.exists():
            z = np.load(cache)
            held = str(z["precision"]) if "precision" in z else "fp32"
            if held != precision:
                raise SystemExit(
                    f"--cache {cache} holds {held} vectors; --precision is {precision}: "
                    "use another cache file per precision"
                )
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

            self._model = MiniLMEmbedder(blas_threads=self.blas_threads, precision=self.precision)
        return self._model

    def save(self) -> None:
        self._saved = time.perf_counter()
        if self.path is not None and self._dirty:
            self._dirty = False
            keys = list(self.vectors)
            tmp = self.path.with_name(self.path.name + ".tmp.npz")
            np.savez(
                tmp,
                texts=np.array(keys),
                vectors=np.stack([self.vectors[k] for k in keys]),
                precision=np.array(self.precision),
            )
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
    # For kind "default": the session date as compress(date=) gets it: LoCoMo's own text
    # ("1:56 pm on 8 May, 2023"), ISO 8601 ("iso": Offload then also sets occurred_at) or
    # the store's own Date-line form ("utc": "08 May 2023, 13:56 UTC", as a door's entry
    # is indexed).
    date_as: str = "locomo"

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
            "Memory.retrieve, RRF + neighbour boost only (speaker, date and link weights 0, "
            'ranker "none")',
            kind="default",
            recall=RecallSettings(
                speaker_weight=0.0, date_weight=0.0, link_weight=0.0, ranker="none"
            ),
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
            "default-no-ranker",
            'the default but ranker "none" (the hand-tuned ranking, no learned ranker)',
            kind="default",
            recall=RecallSettings(ranker="none"),
        ),
        Config(
            "default",
            "Memory.retrieve, default MemoryConfig: RRF k 10, neighbour boost 0.5, speaker "
            "focus 1.0, time channel 1.0, entity links 0.5, learned ranker; Offload entries",
            kind="default",
        ),
        Config(
            "memories",
            "each turn as a standalone memory, as remember() writes one: its text alone "
            '("Name: text"), no date line, no conversation; the default recall',
            style=MEMORY,
            kind="default",
        ),
        Config(
            "memories-no-ranker",
            'the same memories, ranker "none"',
            style=MEMORY,
            kind="default",
            recall=RecallSettings(ranker="none"),
        ),
        Config(
            "default-hashing",
            "the same with HashingEmbedder (384 buckets)",
            embedder="hashing",
            kind="default",
        ),
        Config(
            "default-iso-date",
            "the default, compress(date=ISO 8601): Offload dates the entries (occurred_at)",
            kind="default",
            date_as="iso",
        ),
        Config(
            "default-utc-date",
            'the default, compress(date="08 May 2023, 13:56 UTC"): the doors\' Date line',
            kind="default",
            date_as="utc",
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


def session_date(date: str, date_as: str) -> str:
    """A session's date as ``compress(date=)`` gets it (see ``Config.date_as``)."""
    if date_as == "iso":
        return locomo_time(date).isoformat()
    if date_as == "utc":
        return format_date(locomo_time(date))
    return date


async def offload(memory: Any, conv: Conversation, date_as: str = "locomo") -> dict[str, str]:
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
            [*messages, UnifiedMessage.user("(next)")],
            date=session_date(session[0].date, date_as),
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
    rankings: dict[str, Rankings] | None = None,
) -> None:
    """Every configuration of ``configs`` on ``conv``, tallied in ``tallies`` (and the
    default ones' floors in ``floors``). ``rankings``, when given, gets each default
    configuration's ranking of each question as ``Memory.retrieve`` returns it with the
    default relevance floor (what the doors are compared with)."""
    groups: dict[tuple[EntryStyle, str, RecallSettings | None, str], list[Config]] = {}
    for c in configs:
        recall = c.recall if c.kind == "default" else None
        groups.setdefault((c.style, c.embedder, recall, c.date_as), []).append(c)
    size = len(conv.turns) + 8
    for (style, embedder_name, recall, date_as), group in groups.items():
        embedder: AnyEmbedder = (
            HashingEmbedder(DIMENSIONS) if embedder_name == "hashing" else minilm
        )
        # The default runs compaction as shipped: Offload writes context entries. The
        # plain configurations offload the turn alone, as the reference figures did.
        offload_as = Offload(turns=size) if recall else Offload(turns=size, context=0, dated=False)
        memory_config = MemoryConfig(strategies=[offload_as], recall=recall or RecallSettings())
        async with open_memory(
            store=store_config(size), memory=memory_config, embedder=embedder
        ) as memory:
            ns = memory_config.namespace
            if style == PLAIN:
                by_id = await offload(memory, conv, date_as)
            else:
                docs = [
                    Document(text=text, id=turn.dia_id, metadata={"session": turn.session})
                    for turn, text in style.texts(conv)
                ]
                await memory.store.add_documents(docs, namespace=ns)
                by_id = {d.id: d.id for d in docs if d.id is not None}
            for number, question in enumerate(conv.questions):
                for c in group:
                    if c.kind == "default":
                        # No floor here: the floors are applied to this one ranking.
                        report = await memory.retrieve(
                            question.text, k=max(KS), min_similarity=-1.0
                        )
                        ranked = [by_id[t.id] for t in report.turns]
                        scored = [(by_id[t.id], t.score) for t in report.turns]
                        floors.setdefault(c.name, FloorTally()).add(scored, question.evidence)
                        if rankings is not None:
                            rankings.setdefault(c.name, {})[conv.name, number] = [
                                key for key, score in scored if score >= DEFAULT_FLOOR
                            ]
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


# --- the doors: each driven as its users drive it ---------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("trio-recall")
DOORS = ("mcp", "cli", "langchain", "langgraph", "pg", "store")


def locomo_time(date: str) -> dt.datetime:
    """A LoCoMo session's date, ``"1:56 pm on 8 May, 2023"``, as an aware datetime (the
    data names no time zone: UTC)."""
    return dt.datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def conversation_name(conv: Conversation) -> str:
    """The conversation's name at every door, and the namespace it is kept in there."""
    return f"locomo-{conv.name}"


@attrs.frozen
class DoorTurn:
    """One turn as a door's user writes it: ``Speaker: text``, when it was said (the
    session's date and time, ISO 8601), the conversation, and ``{"dia_id": ...}`` as
    metadata, by which a hit is mapped back to its turn."""

    dia_id: str
    text: str
    occurred_at: str
    conversation: str

    @property
    def metadata(self) -> dict[str, Any]:
        return {"dia_id": self.dia_id}


def door_turns(conv: Conversation) -> list[DoorTurn]:
    name = conversation_name(conv)
    return [
        DoorTurn(t.dia_id, plain_text(t), locomo_time(t.date).isoformat(), name)
        for t in conv.turns
    ]


@attrs.define
class DoorRun:
    """What one door ranked for each question it was asked, and how it was driven."""

    name: str
    how: str
    ranked: Rankings = attrs.field(factory=dict)
    # What this code's door does not take or do that the contract says it should; a
    # door measured with any of these is not measuring what the row claims.
    caveats: list[str] = attrs.field(factory=list)
    unmapped: int = 0  # hits that named no stored turn
    seconds: float = 0.0


class HitMapper:
    """A door's hit -> its turn's dia_id: the ``dia_id`` the turn's metadata carries
    back, else the id the door returned when it stored the turn, else the text (a text
    said twice maps to the first turn that said it). A hit none of these name counts
    as unmapped, and ranks as no turn."""

    def __init__(self, turns: list[DoorTurn]) -> None:
        self.by_text: dict[str, str] = {}
        for t in turns:
            self.by_text.setdefault(t.text, t.dia_id)
        self.by_id: dict[str, str] = {}
        self.unmapped = 0

    def __call__(self, metadata: Any, hit_id: Any, text: Any) -> str:
        if isinstance(metadata, dict) and isinstance(metadata.get("dia_id"), str):
            return str(metadata["dia_id"])
        found = self.by_id.get(hit_id) or self.by_text.get(text)
        if found is None:
            self.unmapped += 1
            return f"?{hit_id}"
        return found


def _door_env() -> dict[str, str]:
    # A data directory of the user's is never found through the environment.
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TRIO_RECALL_DATA": os.devnull}


async def mcp_door(convs: list[Conversation], work: Path, server_args: list[str]) -> DoorRun:
    """The real ``trio-recall mcp`` over stdio, through the official SDK's client: every
    turn a ``remember`` (with ``occurred_at`` and ``conversation`` when the server's
    schema has them), in order, in a namespace per conversation; every question a
    ``recall`` with k = 25 and the tool's default mode."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    shown = " ".join("DIR" if a.startswith(str(work)) else a for a in server_args)
    run = DoorRun("mcp", f"trio-recall mcp {shown}: remember, then recall k=25")
    params = StdioServerParameters(
        command=str(SCRIPT), args=["mcp", *server_args], env=_door_env(), cwd=ROOT
    )

    async def call(session: Any, tool: str, arguments: dict[str, Any]) -> Any:
        with trio.fail_after(300):
            result = await session.call_tool(tool, arguments)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content[0].text}")
        return result.structured_content

    started = time.perf_counter()
    with (work / "mcp-server.log").open("w") as errlog:
        try:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                with trio.fail_after(300):
                    await session.initialize()
                    tools = {t.name: t for t in (await session.list_tools()).tools}
                takes = tools["remember"].input_schema["properties"]
                for field in ("occurred_at", "conversation"):
                    if field not in takes:
                        run.caveats.append(f"remember takes no {field}")
                if "mode" not in tools["recall"].input_schema["properties"]:
                    run.caveats.append("recall has no mode (cosine only)")
                for conv in convs:
                    turns = door_turns(conv)
                    mapper = HitMapper(turns)
                    for i, t in enumerate(turns):
                        arguments: dict[str, Any] = {
                            "text": t.text,
                            "metadata": t.metadata,
                            "namespace": t.conversation,
                        }
                        for field in ("occurred_at", "conversation"):
                            if field in takes:
                                arguments[field] = getattr(t, field)
                        if "dedupe" in takes:
                            # Every turn is stored, as the other doors store it: the
                            # server's default (exact) would fold repeated turns into one.
                            arguments["dedupe"] = "none"
                        stored = await call(session, "remember", arguments)
                        mapper.by_id[stored["id"]] = t.dia_id
                        if (i + 1) % 250 == 0:
                            _say(f"  mcp: {conv.name}: {i + 1}/{len(turns)} remembered")
                    for number, q in enumerate(conv.questions):
                        answer = await call(
                            session,
                            "recall",
                            {"query": q.text, "k": max(KS), "namespace": conversation_name(conv)},
                        )
                        run.ranked[conv.name, number] = [
                            mapper(h.get("metadata"), h.get("id"), h.get("text"))
                            for h in answer["hits"]
                        ]
                    run.unmapped += mapper.unmapped
        except BaseException:
            errlog.flush()
            _say(f"mcp server's stderr:\n{(work / 'mcp-server.log').read_text()[-4000:]}")
            raise
    run.seconds = time.perf_counter() - started
    return run


def _cli(args: list[str], *, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=_door_env(),
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def cli_door(convs: list[Conversation], work: Path, sample: int, seed: int) -> DoorRun:
    """``trio-recall import`` of one JSONL file of every turn (``occurred_at``,
    ``conversation``, metadata and a namespace per conversation), then one ``trio-recall
    search -k 25 --json`` process per question for a seeded sample of the questions
    (each command starts the interpreter, the embedded PostgreSQL and MiniLM anew)."""
    data = work / "cli-data"
    where = ["--data", str(data), "--embedder", "minilm"]
    how = f"trio-recall import, then search -k 25 ({sample} questions, seed {seed})"
    run = DoorRun("cli", how)
    started = time.perf_counter()
    mappers: dict[str, HitMapper] = {}
    lines: list[dict[str, Any]] = []
    for conv in convs:
        turns = door_turns(conv)
        mappers[conv.name] = HitMapper(turns)
        lines.extend(
            {
                "text": t.text,
                "namespace": t.conversation,
                "metadata": t.metadata,
                "occurred_at": t.occurred_at,
                "conversation": t.conversation,
            }
            for t in turns
        )
    path = work / "turns.jsonl"
    refused: list[str] = []
    while True:
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        done = _cli(["import", str(path), *where, "--json"])
        # The import checks every line first; a key this code does not take is refused
        # before anything is written: leave it out and say so.
        key = re.search(r"has the key '(\w+)'", done.stderr)
        if done.returncode == 2 and key and key.group(1) in ("occurred_at", "conversation"):
            refused.append(key.group(1))
            for line in lines:
                line.pop(key.group(1), None)
            continue
        if done.returncode != 0:
            raise RuntimeError(f"trio-recall import failed ({done.returncode}): {done.stderr}")
        break
    run.caveats.extend(f"import takes no {field}" for field in refused)
    helped = _cli(["search", "--help"]).stdout
    if "--mode" not in helped:
        run.caveats.append("search has no --mode (cosine only)")
    _say(f"  cli: imported {len(lines)} turns in {time.perf_counter() - started:.0f} s")
    keys = [(conv.name, i) for conv in convs for i in range(len(conv.questions))]
    asked = sorted(random.Random(seed).sample(keys, min(sample, len(keys))))
    by_name = {conv.name: conv for conv in convs}
    for n, (name, number) in enumerate(asked):
        conv = by_name[name]
        question = conv.questions[number].text
        namespace = ["--namespace", conversation_name(conv)]
        done = _cli(["search", *where, *namespace, "-k", str(max(KS)), "--json", "--", question])
        if done.returncode != 0:
            raise RuntimeError(f"trio-recall search failed ({done.returncode}): {done.stderr}")
        mapper = mappers[name]
        run.ranked[name, number] = [
            mapper(h.get("metadata"), h.get("id"), h.get("text"))
            for h in json.loads(done.stdout)["hits"]  # search --json: {"hits": [...]}
        ]
        if (n + 1) % 10 == 0:
            _say(f"  cli: {n + 1}/{len(asked)} searched")
    run.unmapped = sum(m.unmapped for m in mappers.values())
    run.seconds = time.perf_counter() - started
    return run


def langchain_door(convs: list[Conversation], minilm: CachedEmbedder) -> DoorRun:
    """The LangChain vector store (in memory), a store per conversation: ``add_texts``
    of the conversation's turns with ``occurred_at``/``conversation``/``dia_id`` as
    metadata, then ``as_retriever(search_type="recall", search_kwargs={"k": 25})``."""
    from actors.integrations.langchain import TrioRecallEmbeddings, TrioRecallVectorStore

    run = DoorRun("langchain", 'add_texts, then as_retriever(search_type="recall", k=25)')
    started = time.perf_counter()
    embeddings = TrioRecallEmbeddings(minilm)
    for conv in convs:
        turns = door_turns(conv)
        mapper = HitMapper(turns)
        store = TrioRecallVectorStore(
            embeddings,
            max_entries=len(turns) + 8,
            namespace=conversation_name(conv),
            dimensions=DIMENSIONS,
        )
        with contextlib.closing(store):
            metadatas = [
                {**t.metadata, "occurred_at": t.occurred_at, "conversation": t.conversation}
                for t in turns
            ]
            for dia_id, stored in zip(
                [t.dia_id for t in turns],
                store.add_texts([t.text for t in turns], metadatas),
                strict=True,
            ):
                mapper.by_id[stored] = dia_id
            search_type = "recall"
            try:
                retriever = store.as_retriever(search_type="recall", search_kwargs={"k": max(KS)})
            except ValueError:
                caveat = "as_retriever has no recall: similarity measured"
                if caveat not in run.caveats:
                    run.caveats.append(caveat)
                search_type = "similarity"
                retriever = store.as_retriever(search_kwargs={"k": max(KS)})
            run.how = f'add_texts, then as_retriever(search_type="{search_type}", k=25)'
            for number, q in enumerate(conv.questions):
                run.ranked[conv.name, number] = [
                    mapper(d.metadata, d.id, d.page_content) for d in retriever.invoke(q.text)
                ]
        run.unmapped += mapper.unmapped
    run.seconds = time.perf_counter() - started
    return run


def langgraph_door(convs: list[Conversation], minilm: CachedEmbedder) -> DoorRun:
    """The LangGraph store (in memory, ``fields=["text"]``, its default ranking), a store
    per conversation: one ``put`` per turn (key = dia_id; the value's ``occurred_at`` and
    ``conversation`` keys date and thread the item), then ``search(namespace,
    query=..., limit=25)``."""
    import inspect

    from actors.integrations.langchain import TrioRecallEmbeddings
    from actors.integrations.langgraph import TrioRecallStore

    run = DoorRun("langgraph", "put (occurred_at, conversation in the value), then search k=25")
    started = time.perf_counter()
    if "ranking" not in inspect.signature(TrioRecallStore).parameters:
        run.caveats.append("the store has no ranking= (cosine only)")
    index: Any = {"embed": TrioRecallEmbeddings(minilm), "dims": DIMENSIONS, "fields": ["text"]}
    space = ("locomo",)
    for conv in convs:
        turns = door_turns(conv)
        mapper = HitMapper(turns)
        store = TrioRecallStore(
            index=index, max_entries=len(turns) + 8, namespace=conversation_name(conv)
        )
        with store:
            for t in turns:
                value = {
                    "text": t.text,
                    **t.metadata,
                    "occurred_at": t.occurred_at,
                    "conversation": t.conversation,
                }
                store.put(space, t.dia_id, value)
            for number, q in enumerate(conv.questions):
                items = store.search(space, query=q.text, limit=max(KS))
                run.ranked[conv.name, number] = [
                    mapper(item.value, item.key, item.value.get("text")) for item in items
                ]
        run.unmapped += mapper.unmapped
    run.seconds = time.perf_counter() - started
    return run


async def store_door(convs: list[Conversation], minilm: CachedEmbedder) -> DoorRun:
    """What every door calls, without a door: ``StoreHandle.add_documents`` of each
    conversation's turns (``occurred_at``, ``conversation``, metadata), then
    ``StoreHandle.search(SearchRequest(kind="recall", k=25))`` with ``Memory``'s floor as
    ``score_threshold``. A door that differs from this row differs by its own plumbing; this
    row differs from ``Memory.retrieve`` by what the store writes (index texts) or ranks."""
    run = DoorRun("store", 'add_documents, then search(kind="recall", k=25, floor 0.02)')
    started = time.perf_counter()
    for conv in convs:
        turns = door_turns(conv)
        mapper = HitMapper(turns)
        size = len(turns) + 8
        async with open_store(store_config(size), minilm) as store:
            docs = [
                Document(
                    text=t.text,
                    metadata=t.metadata,
                    occurred_at=dt.datetime.fromisoformat(t.occurred_at),
                    conversation=t.conversation,
                )
                for t in turns
            ]
            await store.add_documents(docs, namespace=conversation_name(conv))
            for number, q in enumerate(conv.questions):
                request = SearchRequest(
                    query=q.text,
                    k=max(KS),
                    kind="recall",
                    score_threshold=DEFAULT_FLOOR,
                    namespace=conversation_name(conv),
                )
                hits = await store.search(request)
                if hits and hits[0].rank is None:
                    raise SystemExit("store door: kind='recall' is not the engine on this code")
                run.ranked[conv.name, number] = [
                    mapper(h.document.metadata, h.document.id, h.document.text) for h in hits
                ]
        run.unmapped += mapper.unmapped
    run.seconds = time.perf_counter() - started
    return run


def embedded_pg() -> contextlib.AbstractContextManager[str]:
    """A fresh embedded PostgreSQL (the ``pg`` extra's wheel) in a temporary directory,
    for the duration; its DSN (``benches/pg_scale.py``'s, imported only when asked)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pg_scale import embedded_server

    return embedded_server()


async def pg_door(convs: list[Conversation], minilm: CachedEmbedder, dsn: str) -> DoorRun:
    """The ``default`` configuration on the pg backend: ``open_memory`` over
    ``open_pg_store`` (a table per conversation), the turns offloaded through compaction
    as for the in-memory row, then ``Memory.retrieve(question, k=25)`` as shipped."""
    from actors import open_pg_store

    run = DoorRun("pg", "open_memory over open_pg_store, Offload, Memory.retrieve k=25")
    started = time.perf_counter()
    for conv in convs:
        size = len(conv.turns) + 8
        table = f"locomo_{re.sub(r'[^a-z0-9_]', '_', conv.name.lower())}"
        config = MemoryConfig(strategies=[Offload(turns=size)])
        async with (
            open_pg_store(dsn, store_config(size), minilm, table=table) as store,
            open_memory(store=store, memory=config) as memory,
        ):
            await store.clear(config.namespace)  # a table left by an earlier run (--dsn)
            by_id = await offload(memory, conv)
            for number, q in enumerate(conv.questions):
                report = await memory.retrieve(q.text, k=max(KS))
                run.ranked[conv.name, number] = [by_id[t.id] for t in report.turns]
    run.seconds = time.perf_counter() - started
    return run


def door_rows(
    doors: list[DoorRun], convs: list[Conversation], reference: Rankings
) -> dict[str, Any]:
    """Each door's R@k and per-category R@10 over the questions it was asked, beside
    ``Memory.retrieve``'s (the ``default`` configuration, default floor) on the same
    questions."""
    questions = {(c.name, i): q for c in convs for i, q in enumerate(c.questions)}
    out: dict[str, Any] = {}
    for door in doors:
        mine: dict[int, Tally] = {}
        theirs: dict[int, Tally] = {}
        for key, ranked in door.ranked.items():
            q = questions[key]
            for group in (0, q.category):
                mine.setdefault(group, Tally()).add(ranked, q.evidence)
                theirs.setdefault(group, Tally()).add(reference[key], q.evidence)
        row = mine[0].row()
        base = theirs[0].row()
        out[door.name] = {
            **row,
            "R@10 by category": {
                CATEGORIES[k]: round(t.hits[10] / t.questions, 4)
                for k, t in sorted(mine.items())
                if k
            },
            "Memory.retrieve R@10": base["R@10"],
            "delta R@10": round(row["R@10"] - base["R@10"], 4),
            "Memory.retrieve R@10 by category": {
                CATEGORIES[k]: round(t.hits[10] / t.questions, 4)
                for k, t in sorted(theirs.items())
                if k
            },
            "how": door.how,
            "caveats": door.caveats,
            "unmapped hits": door.unmapped,
            "seconds": round(door.seconds, 1),
        }
    return out


def _cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.3f}"


def print_doors(rows: dict[str, Any]) -> None:
    cats = [CATEGORIES[k] for k in sorted(CATEGORIES)]
    print("\nEvery door (R@10 by category; Δ = R@10 - Memory.retrieve's on the same questions)")
    head = (
        f"{'door':<10} "
        + " ".join(f"{'R@' + str(k):>6}" for k in KS)
        + " "
        + " ".join(f"{c[:11]:>11}" for c in cats)
        + f" {'n':>4} {'retrieve':>8} {'Δ R@10':>7}"
    )
    print(head)
    print("-" * len(head))
    for name, row in rows.items():
        cells = " ".join(f"{row[f'R@{k}']:>6.3f}" for k in KS)
        by = " ".join(_cell(row["R@10 by category"].get(c), 11) for c in cats)
        print(
            f"{name:<10} {cells} {by} {row['questions']:>4} "
            f"{row['Memory.retrieve R@10']:>8.3f} {row['delta R@10']:>+7.3f}"
        )
    for name, row in rows.items():
        notes = "; ".join(row["caveats"]) or "as the contract says"
        print(f"  {name:<10} {row['how']} ({row['seconds']:.0f} s). {notes}")
        if row["unmapped hits"]:
            print(f"  {'':<10} {row['unmapped hits']} hits named no stored turn")


async def run_doors(
    args: argparse.Namespace, convs: list[Conversation], minilm: CachedEmbedder
) -> list[DoorRun]:
    """The doors asked for (``--doors``), one after the other, in a fresh work
    directory (data directories, the import file, the server's log)."""
    import shutil
    import tempfile

    wanted = DOORS if args.doors == "all" else tuple(args.doors.split(","))
    unknown = set(wanted) - set(DOORS)
    if unknown:
        raise SystemExit(f"--doors: unknown {sorted(unknown)}; expected some of {DOORS}")
    work = Path(tempfile.mkdtemp(prefix="trio-recall-doors-"))
    runs: list[DoorRun] = []
    try:
        for door in wanted:
            _say(f"door {door} ...")
            if door == "mcp":
                backend = ["--in-memory"] if args.mcp_in_memory else ["--data", str(work / "mcp")]
                runs.append(await mcp_door(convs, work, [*backend, "--embedder", "minilm"]))
            elif door == "cli":
                sample, seed = args.cli_sample, args.seed
                runs.append(await trio.to_thread.run_sync(cli_door, convs, work, sample, seed))
            elif door == "langchain":
                runs.append(await trio.to_thread.run_sync(langchain_door, convs, minilm))
            elif door == "langgraph":
                runs.append(await trio.to_thread.run_sync(langgraph_door, convs, minilm))
            elif door == "store":
                runs.append(await store_door(convs, minilm))
            elif args.dsn:
                runs.append(await pg_door(convs, minilm, args.dsn))
            else:
                with embedded_pg() as dsn:
                    runs.append(await pg_door(convs, minilm, dsn))
            _say(f"door {door}: {runs[-1].seconds:.0f} s")
    finally:
        if args.keep_work:
            _say(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return runs


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- latency at scale ------------------------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {
        "p50": round(float(np.percentile(ms, 50)), 3),
        "p90": round(float(np.percentile(ms, 90)), 3),
    }


class QueryEmbedder:
    """The latency run's embedder: the entries come with their cached vectors; a query is
    embedded by MiniLM itself while ``live`` (what every real query pays: the
    ``similarity`` and ``recall`` searches), else from the cache (the ``Memory.retrieve``
    rows, which time recall alone)."""

    def __init__(self, minilm: CachedEmbedder) -> None:
        self.minilm = minilm
        self.dimensions = DIMENSIONS
        self.live = False

    def embed(self, text: str) -> Vector:
        if self.live:
            return np.asarray(self.minilm.model().embed(text), dtype=np.float32)
        return self.minilm.embed(text)

    def embed_batch(self, texts: Sequence[str]) -> Vector:
        if self.live:
            return np.asarray(self.minilm.model().embed_batch(list(texts)), dtype=np.float32)
        return self.minilm.embed_batch(texts)


async def latency(
    convs: list[Conversation],
    minilm: CachedEmbedder,
    entries: int,
    rounds: int,
    only: set[str] | None = None,
) -> dict[str, Any]:
    """Search latency (k = 25) over ``entries`` entries on the in-memory store, every
    contender interleaved: one call each per question, in an order shuffled per
    question, so the machine's load hits them alike. The entries are the conversations'
    turns as the doors write them (``occurred_at``, ``conversation``: the store derives
    each index text), repeated (each copy its own conversation, its text marked, so no two
    are the same content), with cached MiniLM vectors. The contenders:

    - ``similarity`` and ``recall``: ``StoreHandle.search(SearchRequest(kind=...))``,
      each query embedded by MiniLM in the call (what a real query pays);
    - each default configuration (``only`` keeps some): ``Memory.retrieve`` with the
      query's embeddings cached (each is asked once, untimed, first), so that this
      times recall itself;
    - ``embed``: MiniLM embedding one question, alone.

    A store whose ``kind="recall"`` is not the engine yet (its hits carry no ``rank``)
    has ``recall`` timed through ``Memory.retrieve`` with the query embedded live, and
    the result says so (``recall_via``)."""
    style = EntryStyle("context", date=True, previous=1)
    texts = [t for conv in convs for _, t in style.texts(conv)]
    minilm.warm(texts)
    # Each turn as the doors write it; its vector is its context entry's (cached), which
    # is close to the index text the store derives (a vector's words never change a
    # search's cost).
    turns = [t for conv in convs for t in door_turns(conv)]
    rng = random.Random(20)
    questions = rng.sample([q.text for conv in convs for q in conv.questions], 100)
    minilm.warm(questions)
    settings = {
        c.name: c.recall
        for c in configurations()
        if c.kind == "default" and c.embedder == "minilm" and (only is None or c.name in only)
    }
    config = store_config(entries)
    embedder = QueryEmbedder(minilm)
    searches = ("similarity", "recall")
    times: dict[str, list[float]] = {name: [] for name in [*searches, *settings, "embed"]}
    async with open_store(config, embedder) as store:
        step = 2048
        for start in range(0, entries, step):
            rows = range(start, min(entries, start + step))
            docs = [
                Document(
                    id=f"e{i}",
                    text=turn.text if i < len(turns) else f"{turn.text} [{i // len(turns)}]",
                    occurred_at=dt.datetime.fromisoformat(turn.occurred_at),
                    conversation=f"{turn.conversation}#{i // len(turns)}",
                )
                for i, turn in ((i, turns[i % len(turns)]) for i in rows)
            ]
            vectors = np.stack([minilm.vectors[texts[i % len(texts)]] for i in rows])
            await store.add_documents(docs, namespace="bench", embeddings=vectors)
        async with contextlib.AsyncExitStack() as stack:

            async def open_for(recall: RecallSettings) -> Any:
                config = MemoryConfig(namespace="bench", recall=recall, min_similarity=None)
                return await stack.enter_async_context(open_memory(store=store, memory=config))

            memories = {name: await open_for(recall) for name, recall in settings.items()}
            probe = await store.search(
                SearchRequest(query=questions[0], k=max(KS), kind="recall", namespace="bench")
            )
            engine = bool(probe) and probe[0].rank is not None
            fallback = None if engine else await open_for(RecallSettings())

            async def search(name: str, question: str) -> None:
                embedder.live = True
                try:
                    if name == "recall" and fallback is not None:
                        await fallback.retrieve(question, k=max(KS))
                    else:
                        request = SearchRequest(
                            query=question, k=max(KS), kind=name, namespace="bench"
                        )
                        await store.search(request)
                finally:
                    embedder.live = False

            model = minilm.model()
            for question in questions:  # warm: the stripped queries get embedded here
                for memory in memories.values():
                    await memory.retrieve(question, k=max(KS))
                if fallback is not None:
                    await fallback.retrieve(question, k=max(KS))
            for question in questions[:10]:
                for name in searches:
                    await search(name, question)
            for _ in range(rounds):
                for question in questions:
                    order = list(times)
                    rng.shuffle(order)
                    for name in order:
                        started = time.perf_counter()
                        if name == "embed":
                            model.embed(question)
                        elif name in searches:
                            await search(name, question)
                        else:
                            await memories[name].retrieve(question, k=max(KS))
                        times[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {name: percentiles(samples) for name, samples in times.items()}
    for name, row in out.items():
        base = out["similarity"] if name in searches else out.get("previous-default")
        if name != "embed" and base is not None:
            row["ratio_p50"] = round(row["p50"] / base["p50"], 2)
            row["ratio_p90"] = round(row["p90"] / base["p90"], 2)
    return {
        "entries": entries,
        "queries": len(times["embed"]),
        "recall_via": "StoreHandle.search" if engine else "Memory.retrieve (no engine yet)",
        **out,
    }


def print_latency(result: dict[str, Any]) -> None:
    print(
        f"\nk = 25 over {result['entries']} entries, {result['queries']} calls each; recall "
        f"through {result['recall_via']}; ratios: similarity and recall against similarity "
        "(query embedded in the call), Memory.retrieve (query cached) against previous-default"
    )
    print(f"{'contender':<20} {'p50 ms':>8} {'p90 ms':>8} {'p50 ratio':>10} {'p90 ratio':>10}")
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
        minilm = CachedEmbedder(
            Path(args.cache) if args.cache else None, args.blas_threads, args.precision
        )
        only = set(args.only.split(",")) if args.only else None
        loads = [os.getloadavg()[0]]
        results = []
        for entries in args.latency:
            results.append(await latency(convs, minilm, entries, args.rounds, only))
            minilm.save()
            print_latency(results[-1])
            loads.append(os.getloadavg()[0])
        print(f"load {' -> '.join(f'{x:.1f}' for x in loads)} on {os.cpu_count()} cores")
        return {"latency": results, "load": loads}
    configs = configurations()
    if args.only:
        # The doors are compared with the default configuration: it always runs with them.
        wanted = set(args.only.split(",")) | ({"default"} if args.doors else set())
        configs = [c for c in configs if c.name in wanted]
    minilm = CachedEmbedder(
        Path(args.cache) if args.cache else None, args.blas_threads, args.precision
    )
    started = time.perf_counter()
    minilm.warm(all_texts(convs, configs))
    tallies: dict[str, Any] = {c.name: {} for c in configs}
    floors: dict[str, FloorTally] = {}
    rankings: dict[str, Rankings] = {}
    for conv in convs:
        await run_conversation(conv, configs, minilm, tallies, floors, rankings)
    doors = await run_doors(args, convs, minilm) if args.doors else []
    elapsed = time.perf_counter() - started
    minilm.save()
    print_table(configs, tallies)
    print_floors(floors)
    rows = door_rows(doors, convs, rankings["default"]) if doors else {}
    if rows:
        print_doors(rows)
    print(
        f"\n{sum(len(c.questions) for c in convs)} questions, {len(convs)} conversations; "
        f"{minilm.embedded} texts embedded in {minilm.seconds:.0f} s; {elapsed:.0f} s in all "
        f"on {platform.machine()} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})"
    )
    out: dict[str, Any] = {
        c.name: {
            **tallies[c.name][0].row(),
            "by_category": {CATEGORIES[k]: t.row() for k, t in tallies[c.name].items() if k},
            **({"floors": floors[c.name].rows()} if c.name in floors else {}),
        }
        for c in configs
    }
    if rows:
        out["doors"] = rows
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a LoCoMo .json file or a folder of them")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--cache", help="an .npz that keeps the embeddings between runs")
    parser.add_argument("--only", help="comma-separated configuration names")
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument(
        "--precision",
        choices=("fp32", "int8"),
        default="fp32",
        help="MiniLMEmbedder(precision=): the model's weights in float32 or int8",
    )
    parser.add_argument(
        "--latency",
        type=lambda text: [int(n) for n in text.split(",")],
        metavar="ENTRIES[,ENTRIES...]",
        help="instead, time similarity and recall search, and Memory.retrieve per default "
        "configuration (--only keeps some), over this many entries (each size in turn)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="latency rounds over 100 questions")
    parser.add_argument(
        "--doors",
        metavar="DOORS",
        help=f"also measure these doors (comma-separated among {','.join(DOORS)}, or all), "
        "each beside the default configuration on the same questions",
    )
    parser.add_argument(
        "--cli-sample", type=int, default=40, help="questions the cli door asks (one process each)"
    )
    parser.add_argument("--seed", type=int, default=20, help="the cli door's question sample")
    parser.add_argument(
        "--mcp-in-memory",
        action="store_true",
        help="run the mcp door's server with --in-memory (default: --data, embedded PostgreSQL)",
    )
    parser.add_argument("--dsn", help="the pg door's server (default: an embedded one)")
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the doors' work directory (logs, data)"
    )
    args = parser.parse_args(argv)
    out = trio.run(main_async, args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
