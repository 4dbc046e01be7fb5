"""Where the evidence that recall's top 25 misses sits, on LoCoMo dev.

Run from the repository root::

    uv run --extra embed --extra bench python benches/recall_misses.py \
        --data ../shared/data/locomo --cache /tmp/int8.npz --precision int8

The learned ranker reorders the hand-tuned top 25 (``actors/_retrieval/ranker.py``), so
an evidence turn outside them cannot be reached by a better order. This script asks
where those turns are. Every conversation is offloaded as ``recall_quality.py``'s
``default`` configuration does; each question (category 5 excluded) is recalled twice
through the public API on the same store:

- with the default settings and ``k=25``: what the ranker sees;
- with ``RecallSettings(fetch_k=n, ranker="none")`` and ``k=n`` (``n``: every entry):
  each hit's ``ranks`` give its place in the whole dense list (the query as recall
  embeds it, without the speakers' names) and in the whole BM25 list (absent when no
  query term matches it).

For each evidence turn missing from the top 25 the table gives, per category, how many
sit within ranks 26–50, 51–100, 101–200 and beyond of the dense list, of the BM25 list,
of the better of the two, and of the dense list restricted to the turns of the speakers
the query names (``named``). The docs' recall-quality page reads it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

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

from actors import open_memory
from protocol import MemoryConfig, RecallSettings, SearchRequest
from protocol.compaction import Offload

DEPTH = 25
BUCKETS = (50, 100, 200)
LISTS = ("dense", "bm25", "either", "named")


def named_speakers(question: str, speakers: set[str]) -> set[str]:
    """The speakers ``question`` names by a word of their name, none when it names them
    all: recall's speaker-focus rule (``RecallSettings.speaker_weight``), simplified
    (every speaker of the conversation, not only those of the BM25 hits, and
    one-letter name words too), which gives the same speakers on LoCoMo. A bench may
    not import the engine's private copy (``benches/README.md``, "Public names
    only")."""
    words = set(re.findall(r"\w+", question))
    named = {s for s in speakers if words & set(s.split())}
    return named if named != speakers else set()


def bucket(rank: int | None) -> str:
    """The label of ``rank``'s bucket beyond the top :data:`DEPTH`."""
    if rank is None:
        return "absent"
    for end in BUCKETS:
        if rank <= end:
            return f"<={end}"
    return f">{BUCKETS[-1]}"


async def misses(convs: list[Conversation], minilm: CachedEmbedder) -> list[dict[str, Any]]:
    """One row per evidence turn missing from the default top 25: its question's
    category and its rank in each list."""
    rows: list[dict[str, Any]] = []
    for conv in convs:
        size = len(conv.turns) + 8
        config = MemoryConfig(strategies=[Offload(turns=size)])
        speaker = {t.dia_id: t.speaker for t in conv.turns}

        def request(
            text: str, k: int, settings: RecallSettings, ns: str = config.namespace
        ) -> SearchRequest:
            return SearchRequest(query=text, k=k, kind="recall", namespace=ns, settings=settings)

        async with open_memory(store=store_config(size), memory=config, embedder=minilm) as memory:
            by_id = await offload(memory, conv)
            n = len(by_id)
            for q in conv.questions:
                top = await memory.store.search(request(q.text, DEPTH, RecallSettings()))
                shown = {by_id[h.document.id or ""] for h in top}
                every = await memory.store.search(
                    request(q.text, n, RecallSettings(fetch_k=n, ranker="none"))
                )
                ranks = {by_id[h.document.id or ""]: h.ranks for h in every}
                named = named_speakers(q.text, set(speaker.values()))
                by_dense = sorted(ranks, key=lambda i: ranks[i].get("dense", n + 1))
                mine = [i for i in by_dense if speaker[i] in named]
                named_rank = {i: place for place, i in enumerate(mine, 1)}
                for turn in sorted(q.evidence - shown):
                    r = ranks.get(turn, {})
                    dense, bm25 = r.get("dense"), r.get("bm25")
                    rows.append(
                        {
                            "category": q.category,
                            "dense": dense,
                            "bm25": bm25,
                            "either": min(x for x in (dense, bm25, n + 1) if x is not None),
                            "named": named_rank.get(turn),
                        }
                    )
    return rows


def table(rows: list[dict[str, Any]], evidence: dict[int, int]) -> dict[str, Any]:
    """Print and return the buckets per category (0: all) and list."""
    labels = [f"<={end}" for end in BUCKETS] + [f">{BUCKETS[-1]}", "absent"]
    out: dict[str, Any] = {}
    print(f"{'category':<12} {'list':<7} " + " ".join(f"{b:>7}" for b in labels) + "  missed")
    for cat in (0, *sorted(CATEGORIES)):
        mine = [r for r in rows if cat in (0, r["category"])]
        name = "all" if cat == 0 else CATEGORIES[cat]
        out[name] = {"evidence": evidence[cat], "missed": len(mine)}
        for i, kind in enumerate(LISTS):
            counts = {b: 0 for b in labels}
            for r in mine:
                counts[bucket(r[kind])] += 1
            out[name][kind] = counts
            head = name if i == 0 else ""
            tail = f"  {len(mine)}/{evidence[cat]}" if i == 0 else ""
            print(f"{head:<12} {kind:<7} " + " ".join(f"{counts[b]:>7}" for b in labels) + tail)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--cache", help="recall_quality.py's embedding cache (.npz)")
    parser.add_argument("--precision", default="int8", choices=("int8", "fp32"))
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()
    convs = load(Path(args.data))
    minilm = CachedEmbedder(
        Path(args.cache) if args.cache else None, args.blas_threads, args.precision
    )
    minilm.warm(all_texts(convs, [Config("default", "", kind="default")]))
    rows = trio.run(misses, convs, minilm)
    minilm.save()
    evidence = {0: sum(len(q.evidence) for c in convs for q in c.questions)}
    for cat in CATEGORIES:
        evidence[cat] = sum(
            len(q.evidence) for c in convs for q in c.questions if q.category == cat
        )
    result = table(rows, evidence)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
