"""What a turn costs as the memory grows: ``Memory.turn`` against LangGraph and LangChain.

Run from the repository root::

    uv run --extra bench --extra embed --extra pg python benches/turn.py --data DATA
    uv run --extra bench --extra embed --extra pg python benches/turn.py --data DATA --quick

(``DATA`` is the LoCoMo directory, ``../shared/data/locomo`` here; ``--quick`` is a smoke
run.)

For memories of 1k, 10k and 100k entries it times ``Memory.turn`` (the default
``MemoryConfig`` with one ``Offload(turns=2)`` strategy, since the default has none and
would then store nothing; ``MiniLMEmbedder``; ``EchoDispatcher``) stage by stage
(compress, retrieve, inject, dispatch: ``TurnReport.timings``), with the embedder's own
calls timed apart, and the same work done with LangGraph's ``InMemoryStore`` and
LangChain's ``InMemoryVectorStore`` on the same embedder: store the two offloaded turns
(one embedding call), search the top 5 for the new user message (one embedding call),
render the block and put it before the user message. A raw numpy scan of an arena of
the same size (``a @ q``, ``argpartition``) is timed in the same rounds: the reference
for how fast the rest of the turn may grow.

Each turn's request is ``[system, previous user, previous assistant, new user]``, the
turns taken in order from LoCoMo; the offload stores the previous exchange. Memories
are pre-filled with precomputed vectors (MiniLM makes about 100 texts/s here, so 100k
texts would take a quarter of an hour): the LoCoMo turns are embedded once (``--cache``
keeps them), and entries past their count reuse a turn's text, tagged, with its vector
perturbed (2% Gaussian noise, renormalized). Ours are added as ``Document(embedding=)``
through the memory's store; LangGraph's and LangChain's stores are filled in the layout
their own ``put`` and ``add_texts`` produce, without embedding.

"The embedder" is the wall time of each call to the embedder's own API
(``embed_with_report``, which the store calls for documents and queries, for ours;
the LangChain ``Embeddings`` adapter's
methods for theirs); "the rest" is the turn's wall time minus that. Contenders are
interleaved round-robin, one turn each per round, in an order shuffled every round,
back to back unless ``--pause`` puts a sleep between turns (where a real dispatcher
waits on the model). Both have an effect on this machine
(``docs/pages/benchmarks/turn.md``, "Two effects of this machine"): back
to back, a turn right after a two-thread BLAS call shares a core with OpenBLAS's worker
while it spin-waits (up to about 0.1 s), which slowed our embedder's calls up to 1.6×
at 100k entries; after a pause of 0.2 s every contender's embedder calls ran about 1.8×
slower, at every size.

``--baseline [REV]`` (default ``7c38333``, the code path before the start-up, int8 and
bucketing work) runs another revision's ``Memory.turn`` side by side with this tree's:
``git archive REV`` is unpacked in a temporary folder and a worker subprocess (this
script with ``--worker``, that folder first on ``PYTHONPATH``, so ``actors`` and
``protocol`` are the old tree's) opens a memory of the same size filled with the same
vectors and runs the same turns. The worker is a contender of the schedule like the
others: one turn per round, the parent waiting on its pipe while it runs, so one
process's turn never overlaps the other's. The report gives both p50/p90 and the ratio
current / baseline. For the ratio alone, ``--skip langchain --skip langgraph --skip
raw`` keeps the parent's other contenders (whose two-thread BLAS calls slow whichever
turn comes next, in either process) out of the rounds. ``--baseline HEAD`` is an A/A
check of the harness: 100 turns at 10k entries, load average 3.4 on 2 cores, gave 1.02
(p50) and 0.91 (p90).

Writes ``benches/results/turn.json`` and ``benches/results/turn.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
from vector_store import machine, schedule, write_results  # this script's folder

from actors import EchoDispatcher, MiniLMEmbedder, open_memory
from protocol import (
    Document,
    MemoryConfig,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import Offload

RESULTS = Path(__file__).resolve().parent / "results"
SCRIPT = str(Path(__file__).resolve())
SIZES = (1_000, 10_000, 100_000)
K = 5  # MemoryConfig().top_k
NOISE = 0.02
MARKER = "[recalled memory]"
#: The revision ``--baseline`` compares with by default: main before the start-up, int8
#: and bucketing work.
BASELINE = "7c38333"
OURS = "trio-recall Memory.turn"

Vectors = npt.NDArray[np.float32]


# --- data -------------------------------------------------------------------------------


def locomo_turns(folder: Path) -> list[str]:
    """Every turn of every conversation, as "Speaker: text", in order."""
    texts: list[str] = []
    for path in sorted(folder.glob("*.json")):
        conversation = json.loads(path.read_text())
        sessions = sorted(
            (int(key.split("_")[1]), key)
            for key, value in conversation.items()
            if key.startswith("session_") and isinstance(value, list)
        )
        for _, key in sessions:
            for turn in conversation[key]:
                texts.append(f"{turn['speaker']}: {turn['text']}")
    return texts


def embedded(texts: list[str], cache: Path | None) -> Vectors:
    if cache is not None and cache.exists():
        stored = np.load(cache)
        if stored.shape[0] == len(texts):
            return stored.astype(np.float32)
    print(f"... embedding {len(texts)} LoCoMo turns once", file=sys.stderr, flush=True)
    # One BLAS thread for this set-up step only (a separate instance): on a busy
    # machine it is several times faster than BLAS threads spinning for each other.
    vectors = MiniLMEmbedder(blas_threads=1).embed_batch(texts).astype(np.float32)
    if cache is not None:
        np.save(cache, vectors)
    return vectors


def fill(texts: list[str], vectors: Vectors, n: int, seed: int) -> tuple[list[str], Vectors]:
    """``n`` entries: the LoCoMo turns, then tagged copies with perturbed vectors."""
    rng = np.random.default_rng(seed)
    index = np.arange(n) % len(texts)
    out = vectors[index].copy()
    copies = np.arange(n) >= len(texts)
    noise = rng.standard_normal((int(copies.sum()), out.shape[1])).astype(np.float32)
    out[copies] += NOISE * noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    labels = [
        texts[i] if c == 0 else f"{texts[i]} (#{c})"
        for i, c in zip(index.tolist(), (np.arange(n) // len(texts)).tolist(), strict=True)
    ]
    return labels, out


# --- timing -----------------------------------------------------------------------------


class EmbedClock:
    """The wall time of each embedder call, by kind, since the last ``take``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds

    def take(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken


def clock_model(model: MiniLMEmbedder, clock: EmbedClock) -> None:
    """Time ``model``'s async API in place: ``embed_with_report``, which the store's
    adapter calls (through a ``CachedEmbedder`` with no cache) for documents and
    queries alike."""
    report = model.embed_with_report

    async def embed_with_report(texts: Sequence[str], input_type: str) -> Any:
        start = time.perf_counter()
        try:
            return await report(texts, input_type)
        finally:
            clock.add(input_type, time.perf_counter() - start)

    model.embed_with_report = embed_with_report  # type: ignore[method-assign]


def lc_embeddings(model: MiniLMEmbedder, clock: EmbedClock) -> Any:
    """The same model as a LangChain ``Embeddings``, timed."""
    from langchain_core.embeddings import Embeddings

    class MiniLM(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            start = time.perf_counter()
            try:
                vectors: list[list[float]] = model.embed_batch(texts).tolist()
                return vectors
            finally:
                clock.add("document", time.perf_counter() - start)

        def embed_query(self, text: str) -> list[float]:
            start = time.perf_counter()
            try:
                vector: list[float] = model.embed(text).tolist()
                return vector
            finally:
                clock.add("query", time.perf_counter() - start)

    return MiniLM()


def stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    n = len(ordered)
    return {"p50": ordered[n // 2], "p90": ordered[min(n - 1, int(n * 0.9))], "n": n}


def render_hits(hits: list[tuple[str, float]]) -> str | None:
    """The plain recall block (the same lines ours renders), for the contenders."""
    if not hits:
        return None
    lines = [f"{MARKER} {len(hits)} item(s), best first"]
    lines += [f"{i}. [{score:.4f}] {text}" for i, (text, score) in enumerate(hits, 1)]
    return "\n".join(lines)


def placed(messages: list[dict[str, str]], block: str | None) -> list[dict[str, str]]:
    """``block`` as a system message just before the newest user message."""
    if block is None:
        return messages
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [*messages[:last], {"role": "system", "content": block}, *messages[last:]]


# --- one size -----------------------------------------------------------------------------


Turn = Callable[[int], Awaitable[dict[str, float]]]


def same_work(
    request_at: Callable[[int], tuple[str, str, str]],
    store: Callable[[str, str, int], None],
    search: Callable[[str], list[tuple[str, float]]],
) -> Turn:
    """A contender's turn ``t``: store the previous exchange, search for the new user
    message, render the hits and place the block before it; each part timed."""

    async def turn(t: int) -> dict[str, float]:
        before, answer, now = request_at(t)
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": now},
        ]
        start = time.perf_counter()
        store(before, answer, t)
        stored = time.perf_counter()
        hits = search(now)
        searched = time.perf_counter()
        placed(messages, render_hits(hits))
        done = time.perf_counter()
        return {
            "store": stored - start,
            "search": searched - stored,
            "render": done - searched,
            "turn": done - start,
        }

    return turn


@contextlib.asynccontextmanager
async def our_memory(
    model: MiniLMEmbedder,
    texts: list[str],
    labels: list[str],
    table: Vectors,
    capacity: int,
) -> AsyncIterator[tuple[Turn, float]]:
    """A memory of ``labels`` (vectors ``table``) and its turn function; the fill's seconds.

    The same code runs in this process and in the ``--baseline`` worker (on the other
    tree's ``actors``), so both sides open, fill and turn alike."""
    conversation = texts  # the turns of each request, in order
    system = UnifiedMessage.system("You are a helpful assistant with a long memory.")
    n, dims = table.shape
    config = VectorStoreConfig(max_entries=capacity, dimensions=dims, max_entry_bytes=8192)
    memory_config = MemoryConfig(strategies=[Offload(turns=2)])
    async with open_memory(
        store=config, memory=memory_config, embedder=model, dispatcher=EchoDispatcher()
    ) as memory:
        started = time.perf_counter()
        namespace = memory.config.namespace
        for lo in range(0, n, 4096):
            await memory.store.add_documents(
                [
                    Document(text=labels[i], embedding=table[i].tolist(), id=f"fill-{i}")
                    for i in range(lo, min(n, lo + 4096))
                ],
                namespace=namespace,
            )
        filled = time.perf_counter() - started

        async def ours(t: int) -> dict[str, float]:
            before, answer, now = request_at(conversation, t)
            request = UnifiedRequest(
                model="echo",
                messages=[
                    system,
                    UnifiedMessage.user(before),
                    UnifiedMessage.assistant(answer),
                    UnifiedMessage.user(now),
                ],
            )
            start = time.perf_counter()
            turned = await memory.turn(request)
            total = time.perf_counter() - start
            assert turned.report.compression.after < turned.report.compression.before
            sample = dict(turned.report.timings)
            sample["turn"] = total
            return sample

        yield ours, filled


def request_at(conversation: list[str], t: int) -> tuple[str, str, str]:
    """Turn ``t``'s previous user message, previous answer and new user message."""
    at = (2 * t) % (len(conversation) - 2)
    return conversation[at], conversation[at + 1], conversation[at + 2]


def capacity_for(n: int, turns: int, slow_turns: int, profile: int) -> int:
    """Room for the fill and every turn's writes (warm-up and profile included)."""
    return n + 2 * (turns + slow_turns + 8 + profile) + 64


async def bench_size(
    n: int,
    model: MiniLMEmbedder,
    clock: EmbedClock,
    texts: list[str],
    vectors: Vectors,
    turns: int,
    slow_turns: int,
    args: argparse.Namespace,
    baseline: tuple[Lines, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    from langchain_core.vectorstores import InMemoryVectorStore
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    labels, table = fill(texts, vectors, n, seed=n)
    dims = table.shape[1]
    capacity = capacity_for(n, turns, slow_turns, args.profile)
    out: dict[str, Any] = {"entries": n}
    async with contextlib.AsyncExitStack() as stack:
        ours, out["fill_seconds_ours"] = await stack.enter_async_context(
            our_memory(model, texts, labels, table, capacity)
        )
        clock.take()

        def request_of(t: int) -> tuple[str, str, str]:
            return request_at(texts, t)

        contenders: dict[str, tuple[Turn, int]] = {OURS: (ours, turns)}
        if baseline is not None:
            lines, data = baseline
            base, out["fill_seconds_baseline"] = await baseline_size(lines, n, capacity, data)
            contenders[BASE] = (base, turns)

        lc_emb = lc_embeddings(model, clock)
        if "langchain" not in args.skip:
            started = time.perf_counter()
            lc = InMemoryVectorStore(lc_emb)
            for i in range(n):
                lc.store[f"fill-{i}"] = {
                    "id": f"fill-{i}",
                    "vector": table[i].tolist(),
                    "text": labels[i],
                    "metadata": {},
                }
            out["fill_seconds_langchain"] = time.perf_counter() - started

            def lc_store(before: str, answer: str, t: int) -> None:
                lc.add_texts([before, answer])

            def lc_search(now: str) -> list[tuple[str, float]]:
                hits = lc.similarity_search_with_score(now, k=K)
                return [(d.page_content, s) for d, s in hits]

            langchain = same_work(request_of, lc_store, lc_search)

            contenders["langchain InMemoryVectorStore"] = (langchain, slow_turns)

        if "langgraph" not in args.skip:
            from langgraph.store.base import Item

            started = time.perf_counter()
            lg = InMemoryStore(index={"dims": dims, "embed": lc_emb, "fields": ["text"]})
            ns = ("memory", "default")
            stamp = time.time()
            when = datetime.fromtimestamp(stamp, UTC)
            for i in range(n):
                key = f"fill-{i}"
                lg._data[ns][key] = Item(
                    value={"text": labels[i]},
                    key=key,
                    namespace=ns,
                    created_at=when,
                    updated_at=when,
                )
                lg._vectors[ns][key]["text"] = table[i].tolist()
            out["fill_seconds_langgraph"] = time.perf_counter() - started

            def lg_store(before: str, answer: str, t: int) -> None:
                lg.batch(
                    [
                        PutOp(ns, f"turn-{t}-u", {"text": before}),
                        PutOp(ns, f"turn-{t}-a", {"text": answer}),
                    ]
                )

            def lg_search(now: str) -> list[tuple[str, float]]:
                return [
                    (h.value["text"], h.score or 0.0) for h in lg.search(ns, query=now, limit=K)
                ]

            langgraph = same_work(request_of, lg_store, lg_search)

            contenders["langgraph InMemoryStore"] = (langgraph, slow_turns)

        arena = np.ascontiguousarray(table)
        queries = vectors[: min(64, len(vectors))]

        async def raw_scan(t: int) -> dict[str, float]:
            q = queries[t % len(queries)]
            start = time.perf_counter()
            scores = arena @ q
            top = np.argpartition(scores, -K)[-K:]
            top[np.argsort(-scores[top])]
            return {"turn": time.perf_counter() - start}

        async def raw_scan_one_core(t: int) -> dict[str, float]:
            # The same on one core without touching the thread count: row blocks under
            # OpenBLAS's threading size, as the store's one-core scan does.
            q = queries[t % len(queries)]
            start = time.perf_counter()
            scores = np.empty(arena.shape[0], dtype=np.float32)
            step = 400_000 // arena.shape[1]
            for lo in range(0, arena.shape[0], step):
                np.matmul(arena[lo : lo + step], q, out=scores[lo : lo + step])
            top = np.argpartition(scores, -K)[-K:]
            top[np.argsort(-scores[top])]
            return {"turn": time.perf_counter() - start}

        if "raw" not in args.skip:
            contenders["raw numpy scan"] = (raw_scan, turns)
            contenders["raw numpy scan, one core"] = (raw_scan_one_core, turns)

        # Warm-up: BM25's first index build, LangGraph's first search, caches.
        for call, _ in contenders.values():
            for t in range(3):
                await call(10_000 + t)
        clock.take()
        # The three memories' fills are millions of objects that no contender frees: a
        # full collection walked them all (about 165 ms at 10k entries), landing in
        # whichever contender's turn happened to trigger it. Frozen, a collection sees
        # only what the turns themselves allocate.
        gc.collect()
        gc.freeze()
        try:
            samples = await interleave(contenders, clock, args.pause)
            if args.profile:
                out["profile"] = await profiled(ours, turns, args.profile)
        finally:
            gc.unfreeze()
    out["stages"] = {
        name: {key: stats(values) for key, values in by_key.items()}
        for name, by_key in samples.items()
    }
    return out


async def interleave(
    contenders: dict[str, tuple[Turn, int]], clock: EmbedClock, pause: float
) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in contenders}
    for name, t in schedule({name: reps for name, (_, reps) in contenders.items()}):
        if pause:  # outside the timed turn: the model's latency
            await trio.sleep(pause)
        clock.take()
        sample = await contenders[name][0](t)
        spent = clock.take()
        # The baseline worker times its own embedder: its sample says what it spent.
        spent.update(
            {
                k.removeprefix("embedder: "): sample.pop(k)
                for k in list(sample)
                if k.startswith("embedder: ")
            }
        )
        embedder = sum(spent.values())
        sample["embedder"] = embedder
        for kind, seconds in spent.items():
            sample[f"embedder: {kind}"] = seconds
        sample["rest"] = sample["turn"] - embedder
        sample["rest share"] = sample["rest"] / sample["turn"]
        # Ours: which stage the rest is in (its offload embeds documents, its
        # recall the query).
        if "compress" in sample:
            sample["compress, rest"] = sample["compress"] - spent.get("document", 0.0)
            sample["retrieve, rest"] = sample["retrieve"] - spent.get("query", 0.0)
        for key, value in sample.items():
            samples[name].setdefault(key, []).append(value)
    return samples


# --- the baseline: another revision's turn, in a worker subprocess -------------------------


BASE = "baseline Memory.turn"


class Lines:
    """JSON lines over a pair of byte streams (the worker's pipes)."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        self._send, self._receive, self._buffer = send, receive, b""

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        await self._send.send_all(json.dumps(message).encode() + b"\n")
        while b"\n" not in self._buffer:
            chunk = await self._receive.receive_some()
            if not chunk:
                raise RuntimeError(f"the baseline worker exited; it was asked {message!r}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the baseline worker failed on {message!r}: {answer['error']}")
        return answer


def baseline_tree(rev: str, folder: Path) -> tuple[str, str]:
    """Unpack ``rev``'s tree (``git archive``) into ``folder``; its full commit id and
    the folder's real path."""
    import io
    import tarfile

    root = Path(__file__).resolve().parent.parent
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"--baseline is {rev!r}; expected a commit of the repository at {root}")
    commit = found.stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return commit, os.path.realpath(folder)


def imported_from(module_file: str, folder: str) -> bool:
    """Whether ``module_file`` lies inside ``folder`` (a real path)."""
    return os.path.realpath(module_file).startswith(folder + os.sep)


@contextlib.asynccontextmanager
async def baseline_worker(rev: str, folder: Path) -> AsyncIterator[tuple[Lines, str]]:
    """A worker running this script on ``rev``'s ``actors`` and ``protocol`` (unpacked in
    ``folder``); its commit."""
    tree = folder / "tree"
    commit, inside = baseline_tree(rev, tree)
    script = SCRIPT
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    process = await trio.lowlevel.open_process(
        [sys.executable, script, "--worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    lines = Lines(process.stdin, process.stdout)
    try:
        hello = await lines.ask({"op": "hello"})
        if not imported_from(hello["actors"], inside):
            raise RuntimeError(
                f"the baseline worker imported actors from {hello['actors']}, not {inside}"
            )
        yield lines, commit
        await lines.ask({"op": "exit"})
    finally:
        # EOF on its stdin ends the worker's loop (and closes its memory) if it is
        # still waiting for a request, e.g. after an error here.
        with trio.move_on_after(30):
            await process.stdin.aclose()
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def baseline_size(
    lines: Lines, n: int, capacity: int, texts_args: dict[str, Any]
) -> tuple[Turn, float]:
    """Open the worker's memory of ``n`` entries; its turn function and fill seconds."""
    opened = await lines.ask({"op": "open", "n": n, "capacity": capacity, **texts_args})

    async def turn(t: int) -> dict[str, float]:
        sample: dict[str, float] = await lines.ask({"op": "turn", "t": t})
        return sample

    return turn, float(opened["fill_seconds"])


async def worker() -> None:
    """The ``--worker`` side: JSON lines on stdin, answers on stdout (print goes to stderr)."""
    out, sys.stdout = sys.stdout, sys.stderr
    import actors

    model: MiniLMEmbedder | None = None
    clock = EmbedClock()
    stack = contextlib.AsyncExitStack()
    ours: Turn | None = None
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            break
        message = json.loads(line)
        answer: dict[str, Any] = {}
        try:
            if message["op"] == "hello":
                answer = {"actors": actors.__file__}
            elif message["op"] == "open":
                await stack.aclose()
                gc.unfreeze()
                if model is None:
                    model = MiniLMEmbedder()
                    clock_model(model, clock)
                texts = locomo_turns(Path(message["data"]))[: message["pool"]]
                vectors = np.load(message["vectors"]).astype(np.float32)
                n = message["n"]
                labels, table = fill(texts, vectors, n, seed=n)
                opened, filled = await stack.enter_async_context(
                    our_memory(model, texts, labels, table, message["capacity"])
                )
                for t in range(3):  # the same warm-up as the parent's
                    await opened(10_000 + t)
                ours = opened
                del labels, table
                gc.collect()
                gc.freeze()
                answer = {"fill_seconds": filled}
            elif message["op"] == "turn":
                if ours is None:
                    raise RuntimeError("a turn before open")
                clock.take()
                answer = await ours(message["t"])
                answer.update({f"embedder: {k}": v for k, v in clock.take().items()})
            elif message["op"] == "exit":
                await stack.aclose()
                out.write("{}\n")
                out.flush()
                break
        except Exception as error:  # reported to the parent, which raises it
            answer = {"error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    await stack.aclose()


# Where a turn's time goes on the trio thread: (label, file, function). The embedder's
# calls and the scans that run in worker threads are not on it, so they show only as
# the time their caller waits, which cProfile does not count.
PARTS = (
    ("compaction (the offload)", "actors/_agent/compaction.py", "compress"),
    ("the store's write (the store actor's task)", "actors/_inmemory/actor.py", "_handle"),
    ("recall (the engine)", "actors/_inmemory/actor.py", "search"),
    ("  ranking on the snapshot", "actors/_retrieval/recall.py", "rank_recall"),
    ("  keyword list and speakers", "actors/_retrieval/recall.py", "shape"),
    ("  fusion", "actors/_retrieval/fusion.py", "fuse"),
    ("  neighbours", "actors/_retrieval/fusion.py", "lend"),
    ("  focus", "actors/_retrieval/recall.py", "_focus"),
    ("  entity links", "actors/_retrieval/recall.py", "_links"),
    ("  the top k as turns", "actors/_retrieval/engine.py", "turns"),
    ("injection", "actors/_agent/injection.py", "inject"),
)
ALL = "all on the trio thread"


async def profiled(ours: Turn, start: int, count: int) -> dict[str, float]:
    """Seconds per turn of each of ``PARTS`` over ``count`` more turns of ours, under
    cProfile (which inflates Python's share: read the parts against each other)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for t in range(start, start + count):
            await ours(t)
    finally:
        profiler.disable()
    # Each function's row: (calls, primitive calls, own time, cumulative time, callers).
    table: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats
    # Less trio's waits for I/O and threads (epoll), where the trio thread is idle.
    busy = (row[2] for (_, _, name), row in table.items() if "epoll" not in name)
    spent = {ALL: sum(busy) / count}
    for label, file, function in PARTS:
        spent[label] = (
            sum(
                row[3]
                for (path, _, name), row in table.items()
                if name == function and path.replace(os.sep, "/").endswith(file)
            )
            / count
        )
    return spent


# --- report -----------------------------------------------------------------------------


def best_scan(stages: dict[str, Any]) -> float:
    """The faster (by p50) raw scan: BLAS as configured, or on one core."""
    return float(
        min(
            stages[name]["turn"]["p50"]
            for name in ("raw numpy scan", "raw numpy scan, one core")
            if name in stages
        )
    )


def report(results: dict[str, Any]) -> list[str]:
    lines = [
        f"machine: {results['machine']['cpu']} | {results['machine']['cores']} cores"
        f" | load average at start {results['machine']['load_average']}",
        "",
        f"{'entries':>8} {'contender':<30} {'stage':<20} {'p50 ms':>9} {'p90 ms':>9}",
    ]
    for size in results["sizes"]:
        for name, by_key in size["stages"].items():
            for key, s in by_key.items():
                if name.startswith("raw") and key != "turn":
                    continue
                if key == "rest share":
                    value = f"{s['p50'] * 100:8.2f}% {s['p90'] * 100:8.2f}%"
                else:
                    value = f"{s['p50'] * 1e3:9.3f} {s['p90'] * 1e3:9.3f}"
                lines.append(f"{size['entries']:>8} {name:<30} {key:<20} {value}")
        lines.append("")
    for size in results["sizes"]:
        if "profile" in size:
            lines.append(f"{size['entries']:>8} ours, profiled (cProfile, ms per turn)")
            lines += [f"{'':>8} {k:<44} {v * 1e3:9.3f}" for k, v in size["profile"].items()]
            lines.append("")
    targets: list[tuple[str, float, str, bool]] = []
    by_n = {s["entries"]: s["stages"] for s in results["sizes"]}
    if 10_000 in by_n and OURS in by_n[10_000]:
        share = by_n[10_000][OURS]["rest share"]["p50"]
        targets.append(
            (
                "everything but the embedder / turn, 10k entries (p50)",
                share,
                "<= 0.05",
                share <= 0.05,
            )
        )
    sizes = sorted(n for n in by_n if OURS in by_n[n])
    if len(sizes) >= 2 and all("raw numpy scan" in by_n[n] for n in sizes):
        lo, hi = sizes[0], sizes[-1]
        rest = by_n[hi][OURS]["rest"]["p50"] - by_n[lo][OURS]["rest"]["p50"]
        scan = best_scan(by_n[hi]) - best_scan(by_n[lo])
        growth = rest / scan if scan > 0 else float("inf")
        targets.append(
            (
                f"growth of the rest / growth of one raw scan, {lo} -> {hi} (p50)",
                growth,
                "<= 1.3",
                growth <= 1.3,
            )
        )
    for n in sizes:
        if BASE not in by_n[n]:
            continue
        for q in ("p50", "p90"):
            ratio = by_n[n][OURS]["turn"][q] / by_n[n][BASE]["turn"][q]
            wanted = "<= 0.6" if q == "p50" and n == 10_000 else "info"
            targets.append(
                (
                    f"turn / baseline's ({results['baseline']['rev']}), {n} entries ({q})",
                    ratio,
                    wanted,
                    ratio <= 0.6,
                )
            )
    for n in sizes:
        for other in ("langchain InMemoryVectorStore", "langgraph InMemoryStore"):
            if other in by_n[n]:
                r = by_n[n][other]["rest"]["p50"] / by_n[n][OURS]["rest"]["p50"]
                targets.append((f"{other} rest / ours, {n} entries (p50)", r, "info", True))
    lines.append(f"{'target':<64} {'measured':>9}  {'wanted':<8} met")
    for name, value, wanted, met in targets:
        verdict = "-" if wanted == "info" else "yes" if met else "NO"
        lines.append(f"{name:<64} {value:9.3f}  {wanted:<8} {verdict}")
    results["targets"] = [{"name": n, "value": v, "wanted": w, "met": m} for n, v, w, m in targets]
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [OURS, BASE, "langgraph InMemoryStore", "langchain InMemoryVectorStore"]
    names = [n for n in names if any(n in s["stages"] for s in results["sizes"])]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(names)
    sizes = results["sizes"]
    for i, name in enumerate(names):
        embed = [s["stages"].get(name, {}).get("embedder", {}).get("p50", np.nan) for s in sizes]
        rest = [s["stages"].get(name, {}).get("rest", {}).get("p50", np.nan) for s in sizes]
        x = np.arange(len(sizes)) + i * width
        ax.bar(
            x, np.array(embed) * 1e3, width, label=f"{name}: embedder", alpha=0.45, color=f"C{i}"
        )
        ax.bar(
            x,
            np.array(rest) * 1e3,
            width,
            bottom=np.array(embed) * 1e3,
            label=f"{name}: everything else",
            color=f"C{i}",
        )
    ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [f"{s['entries']:,}" for s in sizes])
    ax.set_yscale("log")
    ax.set_xlabel("entries in memory")
    ax.set_ylabel("p50 per turn, ms (log)")
    ax.set_title(f"one turn: store 2 offloaded turns, recall top {K}, render (MiniLM embedder)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    texts = locomo_turns(args.data)[: args.pool]
    vectors = embedded(texts, args.cache)
    # --precision is this tree's only (the baseline worker builds its tree's default).
    model = (
        MiniLMEmbedder() if args.precision is None else MiniLMEmbedder(precision=args.precision)
    )
    clock = EmbedClock()
    clock_model(model, clock)
    results: dict[str, Any] = {
        "machine": machine(),
        "k": K,
        "pause": args.pause,
        "embedder": repr(model),
        "sizes": [],
    }
    turns = 6 if args.quick else args.turns
    async with contextlib.AsyncExitStack() as stack:
        baseline = None
        if args.baseline is not None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="turn-")))
            np.save(folder / "vectors.npy", vectors)
            print(f"... the baseline worker on {args.baseline}", file=sys.stderr, flush=True)
            lines, commit = await stack.enter_async_context(baseline_worker(args.baseline, folder))
            results["baseline"] = {"rev": args.baseline, "commit": commit}
            data = {
                "data": str(args.data),
                "pool": args.pool,
                "vectors": str(folder / "vectors.npy"),
            }
            baseline = (lines, data)
        for n in args.sizes:
            slow = max(2, turns // 4) if n >= 100_000 else max(3, turns // 2)
            print(f"... {n} entries", file=sys.stderr, flush=True)
            results["sizes"].append(
                await bench_size(n, model, clock, texts, vectors, turns, slow, args, baseline)
            )
    results["load_average_end"] = os.getloadavg()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="the LoCoMo folder")
    parser.add_argument("--cache", type=Path, help="an .npy file for the LoCoMo vectors")
    parser.add_argument("--quick", action="store_true", help="few turns: a smoke run")
    parser.add_argument(
        "--pool", type=int, default=1500, help="LoCoMo turns embedded (the rest are copies)"
    )
    parser.add_argument("--turns", type=int, default=40, help="turns per size (ours)")
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="comma-separated entry counts"
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=["langchain", "langgraph", "raw"]
    )
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds between turns (the model's latency)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TURNS",
        help="after the timed rounds, profile this many more turns of ours (cProfile)",
    )
    parser.add_argument(
        "--baseline",
        nargs="?",
        const=BASELINE,
        metavar="REV",
        help=f"run REV's Memory.turn side by side in a worker (default REV: {BASELINE})",
    )
    parser.add_argument(
        "--precision",
        choices=["fp32", "int8"],
        help="MiniLMEmbedder(precision=...) for this tree's turns (default: its default)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    if argv is None and sys.argv[1:] == ["--worker"]:
        trio.run(worker)
        return
    args = parser.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",")]
    started = time.perf_counter()
    results = trio.run(run, args)
    results["seconds"] = time.perf_counter() - started
    write_results(results, report(results), args.out, "turn", plot)


if __name__ == "__main__":
    main()
