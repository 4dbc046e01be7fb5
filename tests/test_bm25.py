"""The incremental BM25 index against a from-scratch BM25, after adds and removes."""

from __future__ import annotations

import hashlib
import math
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._retrieval.bm25 import (
    MAX_TERM_BYTES,
    Bm25Index,
    index_term,
    stem_words,
    term_counts,
    tokenize,
)
from protocol import ConfigError


def reference_bm25(docs: dict[int, str], query: str) -> dict[int, float]:
    """Okapi BM25 (k1=1.2, b=0.75, Lucene idf) from scratch, in plain Python.

    Every document that holds a query term, with its score: the sum over the query's
    distinct terms, in the order they first appear, of qtf · idf · tf(k1+1)/(tf+norm).
    """
    k1, b = 1.2, 0.75
    bags = {slot: Counter(tokenize(text)) for slot, text in docs.items()}
    n_docs = len(bags)
    if n_docs == 0:
        return {}
    avgdl = sum(sum(bag.values()) for bag in bags.values()) / n_docs
    out: dict[int, float] = {}
    query_terms = Counter(tokenize(query))
    df = {term: sum(1 for bag in bags.values() if term in bag) for term in query_terms}
    for slot, bag in bags.items():
        dl = float(sum(bag.values()))
        score, hit = 0.0, False
        for term, qtf in query_terms.items():
            tf = bag[term]
            if tf == 0:
                continue
            hit = True
            idf = math.log(1.0 + (n_docs - df[term] + 0.5) / (df[term] + 0.5))
            norm = k1 * (1.0 - b + b * dl / avgdl)
            score += qtf * idf * (float(tf) * (k1 + 1.0)) / (float(tf) + norm)
        if hit:
            out[slot] = score
    return out


def test_tokenize_lowercases_and_splits_on_non_alphanumerics() -> None:
    assert tokenize("Hello, World! x_y  42nd café") == ["hello", "world", "x", "y", "42nd", "café"]
    assert tokenize("") == []
    assert tokenize("...") == []


def test_a_term_past_the_limit_is_its_digest() -> None:
    at_limit = "a" * (MAX_TERM_BYTES - 1) + "7"
    wide = "\u00e9" * (MAX_TERM_BYTES // 2)  # at the limit in UTF-8 bytes
    assert tokenize(f"{at_limit} {wide}") == [at_limit, wide]
    over = at_limit + "8"
    [term] = tokenize(f"x {over.upper()} y")[1:2]
    digest = hashlib.sha256(over.encode("utf-8")).hexdigest()[:32]
    assert term == "#" + digest == index_term(over)
    assert tokenize("\u00e9" + wide) == [index_term("\u00e9" + wide)]
    # One byte apart, two terms; the stem is what is hashed ("...runs" is "...run").
    assert len({index_term(over), index_term(over[:-1] + "9")}) == 2
    assert tokenize(("x" * 200) + "runs") == tokenize(("x" * 200) + "run")
    # Every path to terms maps them alike.
    text = f"{over} running {over}"
    lengths, [counts] = term_counts([text])
    assert (lengths, counts) == ([3], {index_term(over): 2, "run": 1})
    assert stem_words([over, "running"]) == {over: index_term(over), "running": "run"}


def test_a_long_token_is_found_and_costs_a_short_term() -> None:
    token = "f" * 9_999 + "7"
    index = Bm25Index(4)
    index.add(0, f"the key {token} end")
    index.add(1, "the key " + token[:-1] + "8 end")
    index.add(2, "nothing here")
    assert index.scores(token)[0].tolist() == [0]
    assert index.scores(token.upper())[0].tolist() == [0]
    assert sorted(index.scores("key")[0].tolist()) == [0, 1]
    assert max(len(t) for t in index._vocab) == 1 + 32


def test_one_document_scores_its_idf() -> None:
    index = Bm25Index(4)
    index.add(2, "Apple")
    slots, scores = index.scores("apple pie")
    # N=1, df=1, tf=1, |D|=avgdl=1: the tf factor is 1, so the score is the idf.
    assert slots.tolist() == [2]
    assert scores.tolist() == [math.log(1.0 + 0.5 / 1.5)]


def test_only_documents_with_a_query_term_are_hits() -> None:
    index = Bm25Index(4)
    index.add(0, "red fox")
    index.add(1, "blue whale")
    index.add(3, "red whale")
    slots, scores = index.top("whale", 10)
    assert sorted(slots.tolist()) == [1, 3]
    assert np.all(scores > 0)
    assert index.top("zebra", 10)[0].size == 0
    assert index.top("!!!", 10)[0].size == 0


TEXTS = st.lists(st.sampled_from(["a", "b", "c", "d", "A", "bb", "é", "x1"]), max_size=8).map(
    lambda words: " ".join(words)
)
CAPACITY = 6
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, CAPACITY - 1), TEXTS, st.integers(0, 1)),
        st.tuples(st.just("remove"), st.integers(0, CAPACITY - 1)),
    ),
    max_size=30,
)
QUERIES = st.lists(TEXTS, min_size=1, max_size=3)


@given(ops=OPS, queries=QUERIES, mask_bits=st.lists(st.booleans(), min_size=6, max_size=6))
def test_incremental_index_agrees_exactly_with_a_from_scratch_bm25(
    ops: list[tuple[Any, ...]], queries: list[str], mask_bits: list[bool]
) -> None:
    index = Bm25Index(CAPACITY)
    model: dict[int, tuple[str, int]] = {}
    for op in ops:
        if op[0] == "add":
            index.add(op[1], op[2], group=op[3])
            model[op[1]] = (op[2], op[3])
        else:
            index.remove(op[1])
            model.pop(op[1], None)
    assert len(index) == len(model)
    mask = np.array(mask_bits)
    for query in queries:
        # Unscoped: statistics over every document. Scoped: over the group's only, as if
        # the other group did not exist.
        for group in (None, 0, 1):
            docs = {s: t for s, (t, g) in model.items() if group is None or g == group}
            expected = reference_bm25(docs, query)
            slots, scores = index.scores(query, group=group)
            # Bit-identical, not approximately equal.
            assert dict(zip(slots.tolist(), scores.tolist(), strict=True)) == expected
            masked = {s: v for s, v in expected.items() if mask_bits[s]}
            slots, scores = index.scores(query, mask, group)
            assert dict(zip(slots.tolist(), scores.tolist(), strict=True)) == masked
            top_slots, top_scores = index.top(query, 3, mask, group=group)
            ranked = sorted(masked.items(), key=lambda item: (-item[1], item[0]))[:3]
            assert list(zip(top_slots.tolist(), top_scores.tolist(), strict=True)) == ranked


def test_a_group_scores_the_same_whatever_other_groups_hold() -> None:
    index = Bm25Index(8)
    index.add(0, "secret plan", group=0)
    index.add(1, "public plan notes", group=0)
    before = index.scores("plan secret", group=0)
    for slot in range(2, 8):
        index.add(slot, "secret secret plan", group=1)
    after = index.scores("plan secret", group=0)
    assert before[0].tolist() == after[0].tolist() == [0, 1]
    assert before[1].tolist() == after[1].tolist()
    assert index.scores("plan", group=7)[0].size == 0


def test_vocabulary_forgets_terms_no_document_holds() -> None:
    index = Bm25Index(2)
    for i in range(200):
        index.add(i % 2, f"common unique{i}")
    assert index.document_frequency("common") == 2
    assert index.document_frequency("unique0") == 0
    assert len(index._vocab) == 3
    index.remove(0)
    index.remove(1)
    assert len(index._vocab) == 0
    assert index.scores("common")[0].size == 0


def test_postings_shrink_and_stay_exact() -> None:
    index = Bm25Index(300)
    model = {slot: f"common w{slot % 3}" for slot in range(300)}
    for slot, text in model.items():
        index.add(slot, text)
    for slot in range(290):
        index.remove(slot)
        del model[slot]
    # The overflow array gave back its peak allocation (299 slot, tf pairs: 2.4 KB).
    rest = index._rest[index._vocab["common"]]
    assert len(rest) == 2 * 9 and sys.getsizeof(rest) < 600
    for slot in range(5):
        index.add(slot, "common again")
        model[slot] = "common again"
    slots, scores = index.scores("common w1")
    assert dict(zip(slots.tolist(), scores.tolist(), strict=True)) == reference_bm25(
        model, "common w1"
    )


def test_ties_go_to_the_newest_sequence() -> None:
    index = Bm25Index(4)
    for slot in range(4):
        index.add(slot, "same text")
    seqs = np.array([10, 40, 20, 30], dtype=np.int64)
    slots, _ = index.top("text", 4, seqs=seqs)
    assert slots.tolist() == [1, 3, 2, 0]
    slots, _ = index.top("text", 2)
    assert slots.tolist() == [0, 1]


def test_many_documents_stay_exact() -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(300)]
    index = Bm25Index(2000)
    model: dict[int, str] = {}
    for step in range(4000):
        slot = int(rng.integers(0, 2000))
        if step % 5 == 4:
            index.remove(slot)
            model.pop(slot, None)
        else:
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 20))).tolist())
            index.add(slot, text)
            model[slot] = text
    seqs = rng.integers(0, 50, size=2000).astype(np.int64)
    for query in ("w1 w2 w2", "w299", "w5 nothing w7", " ".join(words[:40])):
        slots, scores = index.scores(query)
        assert dict(zip(slots.tolist(), scores.tolist(), strict=True)) == reference_bm25(
            model, query
        )
        # The top n (found from a sample's bound at these sizes) is the exhaustive one.
        for n in (1, 7, 60, 5000):
            order = np.lexsort((-seqs[slots], -scores))[:n]
            top_slots, top_scores = index.top(query, n, seqs=seqs)
            assert top_slots.tolist() == slots[order].tolist()
            assert top_scores.tolist() == scores[order].tolist()


def test_bad_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="capacity is 0"):
        Bm25Index(0)
    index = Bm25Index(2)
    with pytest.raises(ConfigError, match="slot is 2; expected 0 <= slot < 2"):
        index.add(2, "x")
    with pytest.raises(ConfigError, match="text is a bytes"):
        index.add(0, b"x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="group is -1"):
        index.add(0, "x", group=-1)
    with pytest.raises(ConfigError, match="n is 0"):
        index.top("x", 0)
    with pytest.raises(ConfigError, match="expected a 1-d bool array"):
        index.add(0, "x")
        index.scores("x", np.zeros(2, dtype=np.int64))


# Skewed corpora: a few words in most documents (their postings cover most of the index),
# rarer ones in a few, and repeats (tf > 1, ties).
SKEWED = st.lists(
    st.sampled_from(["the", "the", "the", "a", "a", "is", "b1", "b2", "c1", "c2", "c3", "z"]),
    min_size=1,
    max_size=12,
).map(" ".join)


@given(
    texts=st.lists(st.tuples(SKEWED, st.integers(0, 2)), min_size=1, max_size=40),
    removed=st.sets(st.integers(0, 39), max_size=8),
    query=st.lists(
        st.sampled_from(["the", "a", "is", "b1", "b2", "c1", "c3", "z", "nothing"]),
        min_size=1,
        max_size=6,
    ).map(" ".join),
    n=st.integers(1, 12),
    masked=st.booleans(),
    group=st.sampled_from([None, 0, 1]),
    seed=st.integers(0, 2**16),
)
def test_pruned_top_n_is_the_exhaustive_top_n(
    texts: list[tuple[str, int]],
    removed: set[int],
    query: str,
    n: int,
    masked: bool,
    group: int | None,
    seed: int,
) -> None:
    """The top n: the same slots, the same floats, the same order (ties to the newest
    sequence, or the lower slot) as sorting every hit that scores() gives."""
    rng = np.random.default_rng(seed)
    index = Bm25Index(len(texts) + 2)
    for slot, (text, in_group) in enumerate(texts):
        index.add(slot, text, group=in_group)
    for slot in removed & set(range(len(texts))):
        index.remove(slot)
    mask = rng.random(len(texts) + 2) < 0.7 if masked else None
    # Sequences with repeats, so ties on score and on sequence both occur.
    seqs = rng.integers(0, 4, size=len(texts) + 2).astype(np.int64)
    for tie in (seqs, None):
        slots, scores = index.scores(query, mask, group)
        key = -tie[slots] if tie is not None else slots
        order = np.lexsort((key, -scores))[:n]
        top_slots, top_scores = index.top(query, n, mask, tie, group)
        assert top_slots.tolist() == slots[order].tolist()
        assert top_scores.tolist() == scores[order].tolist()
