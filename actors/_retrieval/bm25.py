"""An incremental Okapi BM25 index over the arena's slots.

Scoring, for a query and a document D among the N live documents:

    score(D) = Σ_t  qtf(t) · idf(t) · tf(t, D) · (k1 + 1) / (tf(t, D) + norm(D))
    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    norm(D)  = k1 · (1 − b + b · |D| / avgdl)

with k1 = 1.2 and b = 0.75. The sum runs over the query's distinct terms in the order
they first appear, and ``qtf`` counts a term's repeats in the query. The idf is Lucene's,
which is never negative, so a document scores above 0 exactly when it holds a query
term, and only those documents are hits.

Tokens are the maximal runs of alphanumeric characters (``str.isalnum``, so Unicode
letters and digits count) of the lowercased text, each reduced to its stem by the
Snowball English stemmer (``snowballstemmer``), so that "running", "runs" and "run" are
one term. Stemming is the classic recall gain of keyword search: on LoCoMo it raised
BM25's R@25 from 0.630 to 0.674, and the default hybrid recall's by about 0.01
(``benches/recall_quality.py``). Words of other languages mostly pass through unchanged.

A term longer than :data:`MAX_TERM_BYTES` in UTF-8 (a hex blob, a key, a long run of
CJK characters, which has no spaces to split it) is replaced by its digest,
:func:`index_term`: ``"#"`` and the first 32 hex digits of the SHA-256 of its UTF-8.
Equal terms have equal digests, so every score and ranking is the one the term itself
would give (two distinct terms share a digest with probability about 2**-128), and no
term of the tokenizer starts with ``"#"``, so a digest never equals a word. It keeps the
index small whatever the text (a 10,000-byte token is a 33-byte term), and it is what
lets PostgreSQL index every term: its btree takes at most 2,704 bytes a row. Both stores
tokenize with this module, so they map alike.

Each document belongs to a group (the store passes its namespace id). A query scoped to
a group takes its statistics (N, avgdl, df) from that group's documents only, so one
namespace's scores never depend on, and so never reveal, another's documents; an
unscoped query uses every live document. One index serves every group, so memory does
not grow with the number of namespaces. A mask narrows which documents may be hits; it
does not change the statistics.

All statistics are kept as exact integers and updated at each :meth:`add` and
:meth:`remove`, so the scores after any sequence of updates are bit-identical to a
from-scratch computation that evaluates the same formula in the same order.
"""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable

import attrs
import numpy as np
import numpy.typing as npt
import snowballstemmer

from protocol import ConfigError
from protocol.checks import check_int

__all__ = [
    "B",
    "BM25_BYTES_PER_DOCUMENT",
    "BM25_BYTES_PER_TEXT_BYTE",
    "K1",
    "MAX_TERM_BYTES",
    "Bm25Index",
    "idf",
    "index_term",
    "stem_words",
    "term_counts",
    "token_count",
    "token_counts",
    "tokenize",
    "words_of",
]

K1 = 1.2
B = 0.75
#: What one indexed document may hold, at most, per byte of its text (UTF-8), on top
#: of :data:`BM25_BYTES_PER_DOCUMENT` (see :class:`Bm25Index`, "Memory").
BM25_BYTES_PER_TEXT_BYTE = 64
#: The fixed part of one indexed document's memory.
BM25_BYTES_PER_DOCUMENT = 256
_TOKEN = re.compile(r"[^\W_]+")
#: The longest term, in UTF-8 bytes, that the index keeps as itself; a longer one is
#: its digest (:func:`index_term`). Above every word of a natural language (English's
#: longest are about 45 letters) and every usual digest (SHA-512's 128 hex digits), so
#: what it changes is only the rare long token; far below PostgreSQL's btree limit with
#: the longest namespace beside it (``protocol.checks.MAX_NAMESPACE_BYTES``).
MAX_TERM_BYTES = 128
# A character the tokenizer never emits (a term is alphanumeric), so a digest cannot
# equal a word's term.
_DIGEST_PREFIX = "#"


# With PyStemmer installed (a dependency), snowballstemmer runs its C build
# of the same algorithms: about 2 us a word, against 85 us in pure Python, which was
# most of a bulk pg write's preparation (benches/README.md, "pg at scale"). Its cache
# of recent words is turned off: the store's memory bound (docs/pages/reference/store.md) counts
# every byte a write leaves behind, and the C stemmer is fast enough without it.
_STEMMER = snowballstemmer.stemmer("english")
if hasattr(_STEMMER, "maxCacheSize"):
    _STEMMER.maxCacheSize = 0


def index_term(stem: str) -> str:
    """The term the index keeps for a stem: the stem itself, or, past
    :data:`MAX_TERM_BYTES` UTF-8 bytes, ``"#"`` and 32 hex digits of its SHA-256 (the
    SQL ``'#' || left(encode(sha256(convert_to(stem, 'UTF8')), 'hex'), 32)``, which is
    how a table written before the limit is migrated)."""
    # At most 4 bytes a character: a stem this short is within the limit however coded.
    if len(stem) * 4 <= MAX_TERM_BYTES:
        return stem
    encoded = stem.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_TERM_BYTES:
        return stem
    return _DIGEST_PREFIX + hashlib.sha256(encoded).hexdigest()[:32]


def _index_terms(stems: list[str]) -> list[str]:
    """:func:`index_term` of each stem (almost always a no-op, so checked at once)."""
    if max(map(len, stems), default=0) * 4 <= MAX_TERM_BYTES:
        return stems
    return [index_term(stem) for stem in stems]


def tokenize(text: str) -> list[str]:
    """The BM25 terms of ``text``: the stems of its lowercased runs of alphanumeric
    characters, each as :func:`index_term` keeps it."""
    return _index_terms(_STEMMER.stemWords(_TOKEN.findall(text.lower())))


def words_of(text: str) -> list[str]:
    """The lowercased runs of alphanumeric characters of ``text``, before stemming."""
    found: list[str] = _TOKEN.findall(text.lower())
    return found


def token_count(text: str) -> int:
    """How many BM25 tokens ``text`` holds (its BM25 length), without stemming them."""
    return len(_TOKEN.findall(text.lower()))


# For ASCII text, the characters ``_TOKEN`` takes are its letters and digits: any other
# byte becomes a space, so the tokens are the bytes' whitespace-separated words.
_ASCII_TOKENS = bytes(b if b < 128 and chr(b).isalnum() else 0x20 for b in range(256))


def token_counts(texts: list[str]) -> list[int]:
    """``[token_count(t) for t in texts]``, an ASCII text counted by one byte
    translation and a split instead of a regex over its lowercased copy."""
    return [
        len(text.encode("ascii").translate(_ASCII_TOKENS).split())
        if text.isascii()
        else token_count(text)
        for text in texts
    ]


def term_counts(texts: list[str]) -> tuple[list[int], list[dict[str, int]]]:
    """Each text's BM25 length and its distinct terms with their frequencies, in order
    of first appearance: :func:`tokenize` of each text, counted, for a whole batch.

    Each distinct word of the batch is stemmed once (one call into the stemmer for the
    batch), which is what makes a bulk write's tokenizing about 30% cheaper than
    :func:`tokenize` and a ``Counter`` per text; the stems are the same.
    """
    found = [_TOKEN.findall(text.lower()) for text in texts]
    stems = stem_words({word for words in found for word in words})
    counts: list[dict[str, int]] = []
    for words in found:
        tf: dict[str, int] = {}
        for word in words:
            stem = stems[word]
            tf[stem] = tf.get(stem, 0) + 1
        counts.append(tf)
    return [len(words) for words in found], counts


def stem_words(words: Iterable[str]) -> dict[str, str]:
    """Each of ``words`` (lowercased tokens) with its term: its stem, as
    :func:`index_term` keeps it, in one call into the stemmer."""
    vocab = list(words)
    return dict(zip(vocab, _index_terms(_STEMMER.stemWords(vocab)), strict=True))


def idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf, ``ln(1 + (N − df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


# A query term's weight (qtf · idf) and its postings in scope: slots and term frequencies.
_QueryTerm = tuple[float, npt.NDArray[np.intp], npt.NDArray[np.float64]]

# Below this many postings a term's overflow array is never copied to shrink it.
_SHRINK_FROM = 64


@attrs.define(eq=False)
class Bm25Index:
    """BM25 over documents kept in slots ``[0, capacity)``.

    Only the store actor calls :meth:`add` and :meth:`remove`, at commit; reads run on
    the same thread, so a read sees exactly the last commit.

    Memory. The index holds no Python object per posting and, beyond its vocabulary
    entry, none per term that one document holds (the commonest case for a rare word):

    - each term has an id (``_vocab``, ``_terms``); its first posting (slot and term
      frequency) sits in two ``array("i")`` columns indexed by term id, and only a term
      found in two documents or more has an array of its other postings (slot, tf
      pairs) in ``_rest``;
    - each document keeps its distinct term ids (sorted) and where each sits in that
      term's postings, in two ``array("i")``.

    Per document that is two arrays plus 16 bytes per distinct term, and a term new to
    the index adds its str, its dict entry, its id and 8 bytes of columns. Measured
    with tracemalloc (``tests/test_memory_bound.py``), a document of one distinct new
    term per 4 bytes of text (the worst shape: ``"a1 a2 a3 ..."``, 1- and 3-letter
    tokens) costs at most :data:`BM25_BYTES_PER_TEXT_BYTE` × its UTF-8 length plus
    :data:`BM25_BYTES_PER_DOCUMENT`; ordinary text costs a fraction of that.

    Args:
        capacity: the number of slots (the arena's ``max_entries``).
    """

    capacity: int
    _lengths: npt.NDArray[np.int64] = attrs.field(init=False)
    # slot -> the document's distinct term ids, ascending, and each one's position in
    # that term's postings (0: the first posting; p >= 1: _rest[term][2p-2 : 2p]).
    _doc_terms: list[array[int] | None] = attrs.field(init=False)
    _doc_positions: list[array[int] | None] = attrs.field(init=False)
    _vocab: dict[str, int] = attrs.field(init=False, factory=dict)
    _terms: list[str | None] = attrs.field(init=False, factory=list)
    _first_slot: array[int] = attrs.field(init=False, factory=lambda: array("i"))
    _first_tf: array[int] = attrs.field(init=False, factory=lambda: array("i"))
    # term id -> its postings after the first, as slot, tf pairs (terms with df >= 2).
    _rest: dict[int, array[int]] = attrs.field(init=False, factory=dict)
    _free_terms: list[int] = attrs.field(init=False, factory=list)
    _groups: npt.NDArray[np.int64] = attrs.field(init=False)
    # group -> [documents, total length]; a group with no documents is dropped.
    _group_stats: dict[int, list[int]] = attrs.field(init=False, factory=dict)
    n_docs: int = attrs.field(init=False, default=0)
    total_length: int = attrs.field(init=False, default=0)
    high: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        if (
            isinstance(self.capacity, bool)
            or not isinstance(self.capacity, int)
            or self.capacity <= 0
        ):
            raise ConfigError(f"capacity is {self.capacity!r}; expected an int > 0")
        self._lengths = np.zeros(self.capacity, dtype=np.int64)
        self._groups = np.full(self.capacity, -1, dtype=np.int64)
        self._doc_terms = [None] * self.capacity
        self._doc_positions = [None] * self.capacity

    # --- writes (at commit) ------------------------------------------------------------

    def add(self, slot: int, text: str, group: int = 0) -> None:
        """Index ``text`` as the document in ``slot`` of ``group`` (>= 0), replacing what
        was there."""
        self._check_slot(slot)
        if not isinstance(text, str):
            raise ConfigError(f"text is a {type(text).__name__}; expected a str")
        if isinstance(group, bool) or not isinstance(group, int | np.integer) or group < 0:
            raise ConfigError(f"group is {group!r}; expected an int >= 0")
        if self._doc_terms[slot] is not None:
            self.remove(slot)
        counts = Counter(tokenize(text))
        pairs = sorted((self._term_id(term), tf) for term, tf in counts.items())
        term_ids, positions = array("i"), array("i")
        first_slot, first_tf, rest = self._first_slot, self._first_tf, self._rest
        for term_id, tf in pairs:
            term_ids.append(term_id)
            if first_slot[term_id] < 0:
                first_slot[term_id] = slot
                first_tf[term_id] = tf
                positions.append(0)
                continue
            more = rest.get(term_id)
            if more is None:
                more = rest[term_id] = array("i")
            more.append(slot)
            more.append(tf)
            positions.append(len(more) // 2)
        self._doc_terms[slot] = term_ids
        self._doc_positions[slot] = positions
        length = sum(counts.values())
        self._lengths[slot] = length
        self._groups[slot] = group
        stats = self._group_stats.setdefault(int(group), [0, 0])
        stats[0] += 1
        stats[1] += length
        self.total_length += length
        self.n_docs += 1
        self.high = max(self.high, slot + 1)

    def remove(self, slot: int) -> None:
        """Drop the document in ``slot`` (deleted or evicted). A free slot is a no-op."""
        self._check_slot(slot)
        term_ids = self._doc_terms[slot]
        if term_ids is None:
            return
        positions = self._doc_positions[slot]
        assert positions is not None
        for term_id, position in zip(term_ids, positions, strict=True):
            self._remove_posting(term_id, position)
        self._doc_terms[slot] = None
        self._doc_positions[slot] = None
        length, group = int(self._lengths[slot]), int(self._groups[slot])
        stats = self._group_stats[group]
        stats[0] -= 1
        stats[1] -= length
        if stats[0] == 0:
            del self._group_stats[group]
        self.total_length -= length
        self._lengths[slot] = 0
        self._groups[slot] = -1
        self.n_docs -= 1

    def _remove_posting(self, term_id: int, position: int) -> None:
        """Swap-remove the posting at ``position`` of ``term_id``: the last posting
        takes its place, and its document is told where it now is."""
        more = self._rest.get(term_id)
        if more is None:  # the term's only posting
            self._release_term(term_id)
            return
        moved_slot, moved_tf = more[-2], more[-1]
        last = len(more) // 2
        del more[-2:]
        if position != last:
            if position == 0:
                self._first_slot[term_id] = moved_slot
                self._first_tf[term_id] = moved_tf
            else:
                more[2 * position - 2] = moved_slot
                more[2 * position - 1] = moved_tf
            # The moved posting belongs to another document: update its position.
            other_terms = self._doc_terms[moved_slot]
            other_positions = self._doc_positions[moved_slot]
            assert other_terms is not None
            assert other_positions is not None
            other_positions[bisect_left(other_terms, term_id)] = position
        if not more:
            del self._rest[term_id]
        elif len(more) >= _SHRINK_FROM and len(more) & (len(more) - 1) == 0:
            # An array never gives back memory as it shrinks: copy it at each power of
            # two on the way down, so a term once common does not keep its peak size.
            self._rest[term_id] = array("i", more)

    def _term_id(self, term: str) -> int:
        term_id = self._vocab.get(term)
        if term_id is None:
            if self._free_terms:
                term_id = self._free_terms.pop()
                self._terms[term_id] = term
            else:
                term_id = len(self._terms)
                self._terms.append(term)
                self._first_slot.append(-1)
                self._first_tf.append(0)
            self._vocab[term] = term_id
        return term_id

    def _release_term(self, term_id: int) -> None:
        # A term no document holds is forgotten, so the vocabulary stays bounded by
        # what the live documents contain.
        term = self._terms[term_id]
        assert term is not None
        del self._vocab[term]
        self._terms[term_id] = None
        self._first_slot[term_id] = -1
        self._first_tf[term_id] = 0
        self._free_terms.append(term_id)

    def _postings(self, term_id: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """A term's slots and term frequencies, as new arrays."""
        first = self._first_slot[term_id]
        more = self._rest.get(term_id)
        if more is None:
            return np.array([first], dtype=np.intp), np.array(
                [self._first_tf[term_id]], dtype=np.float64
            )
        # A copy, not a view: a live view would stop the array from growing, and a
        # traceback that kept one would break every later add of this term.
        pairs = np.frombuffer(more, dtype=np.intc).reshape(-1, 2)
        slots = np.empty(len(pairs) + 1, dtype=np.intp)
        tf = np.empty(len(pairs) + 1, dtype=np.float64)
        slots[0], tf[0] = first, self._first_tf[term_id]
        slots[1:], tf[1:] = pairs[:, 0], pairs[:, 1]
        return slots, tf

    def _check_slot(self, slot: int) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int | np.integer):
            raise ConfigError(f"slot is {slot!r}; expected an int")
        if not 0 <= slot < self.capacity:
            raise ConfigError(f"slot is {slot}; expected 0 <= slot < {self.capacity}")

    # --- reads -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.n_docs

    def __contains__(self, slot: object) -> bool:
        return (
            isinstance(slot, int)
            and 0 <= slot < self.capacity
            and self._doc_terms[slot] is not None
        )

    def document_frequency(self, term: str) -> int:
        term_id = self._vocab.get(term)
        if term_id is None:
            return 0
        return 1 + len(self._rest.get(term_id, ())) // 2

    def term_counts(
        self,
        terms: Iterable[str],
        group: int,
        stats: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[int, dict[str, int]]:
        """How many documents ``group`` holds, and how many of them hold each of
        ``terms`` (stems, as :func:`tokenize` gives them; a term no document holds
        counts 0): the statistics the BM25 idf of a query scoped to ``group`` uses.
        ``stats``: count only the documents of the slots it marks (see :meth:`top`)."""
        if stats is not None:
            scope = self._stats_scope(stats, group)
            counts = {}
            for term in dict.fromkeys(terms):
                term_id = self._vocab.get(term)
                if term_id is None:
                    counts[term] = 0
                else:
                    slots, _ = self._postings(term_id)
                    counts[term] = int(np.count_nonzero(scope[slots]))
            return int(np.count_nonzero(scope)), counts
        n_docs = self._group_stats.get(group, (0, 0))[0]
        # With one group every posting is the group's: no posting list is read.
        alone = n_docs == self.n_docs
        counts = {}
        for term in dict.fromkeys(terms):
            term_id = self._vocab.get(term)
            if term_id is None or n_docs == 0:
                counts[term] = 0
            elif alone:
                counts[term] = self.document_frequency(term)
            else:
                slots, _ = self._postings(term_id)
                counts[term] = int(np.count_nonzero(self._groups[slots] == group))
        return n_docs, counts

    def scores(
        self,
        query: str,
        mask: npt.NDArray[np.bool_] | None = None,
        group: int | None = None,
        stats: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """Every hit of ``query``: the slots that hold a query term (in ``group``, when
        given, and passing ``mask``), ascending, and their scores (``stats`` as in
        :meth:`top`)."""
        total = self._totals(query, mask, group, stats)
        slots_hit = np.flatnonzero(total)
        return slots_hit, total[slots_hit]

    def top(
        self,
        query: str,
        n: int,
        mask: npt.NDArray[np.bool_] | None = None,
        seqs: npt.NDArray[np.int64] | None = None,
        group: int | None = None,
        stats: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """The best ``n`` hits of ``query``, best first, and their scores: exactly the
        first ``n`` of :meth:`scores` in that order, the same floats.

        ``mask`` narrows the hits, not the statistics. ``stats``, when given, narrows
        both: N, the average length and each term's document frequency count only the
        documents of the slots it marks (the store passes what a read sees, so a closed
        version or an expired entry weighs in no score of the present).

        Ties go to the higher sequence in ``seqs`` (newest first, as in the dense scan),
        or, without ``seqs``, to the lower slot.

        Every hit is scored. An exact MaxScore cut (the rarest terms first, the common
        ones only for documents that can still reach the n-th best, since a term adds
        less than ``qtf · idf · (k1 + 1)``) was measured on LoCoMo turns at the depth
        recall reads (200): the n-th best stays below the bound of the common words
        until most terms are scored, so it still scored 80% of the postings, and it ran
        2× slower than scoring them all (``benches/README.md``, "The cost of a turn").

        Raises:
            ConfigError: ``n ≤ 0``, or a bad query or mask.
        """
        check_int("n", n)
        total = self._totals(query, mask, group, stats)
        # Every slot that may score among the n best, first by a cheap lower bound of
        # the n-th best score (0.0: every hit).
        floor = _nth_best_bound(total, n)
        slots = np.flatnonzero(total >= floor) if floor > 0.0 else np.flatnonzero(total)
        scores = total[slots]
        if slots.shape[0] > 4 * n:
            # Only what can make the top n is sorted: every hit scoring at least the n-th
            # best (its ties included, which the sort then orders). A query of common
            # words hits most of the index, and sorting all of it cost more than scoring.
            kth = np.partition(scores, slots.shape[0] - n)[slots.shape[0] - n]
            keep = scores >= kth
            slots, scores = slots[keep], scores[keep]
        tie = -seqs[slots] if seqs is not None else slots
        order = np.lexsort((tie, -scores))[:n]
        return slots[order], scores[order]

    def _totals(
        self,
        query: str,
        mask: npt.NDArray[np.bool_] | None,
        group: int | None,
        stats: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Each slot's score in ``[0, high)``; 0.0 for a slot that is no hit. Every
        addend is > 0 (the idf is), so the hits are exactly the slots scored above 0."""
        norm, terms = self._query(query, mask, group, stats)
        total = np.zeros(self.high, dtype=np.float64)
        for weight, slots, tf in terms:
            _accumulate(total, slots, _contribution(weight, tf, norm[slots]))
        for narrowing in (mask, stats):
            if narrowing is not None:
                total[~_masked(np.ones(self.high, dtype=np.bool_), narrowing)] = 0.0
        return total

    def _stats_scope(
        self, stats: npt.NDArray[np.bool_], group: int | None
    ) -> npt.NDArray[np.bool_]:
        """The indexed documents of ``group`` (every group: None) that ``stats`` marks,
        one bool per slot of ``[0, high)``."""
        scope = _masked(self._groups[: self.high] >= 0, stats)
        if group is not None:
            scope &= self._groups[: self.high] == group
        return scope

    def _query(
        self,
        query: str,
        mask: npt.NDArray[np.bool_] | None,
        group: int | None,
        stats: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[npt.NDArray[np.float64], list[_QueryTerm]]:
        """Each slot's length normalization ``norm(D)`` (for the average length in
        scope) and, for the query's terms that some document in scope holds, in the
        order they first appear, each one's weight ``qtf · idf`` and postings in scope."""
        if not isinstance(query, str):
            raise ConfigError(f"query is a {type(query).__name__}; expected a str")
        if mask is not None and (mask.dtype != np.bool_ or mask.ndim != 1):
            raise ConfigError(f"mask is {mask.dtype}[{mask.shape}]; expected a 1-d bool array")
        counted: npt.NDArray[np.bool_] | None = None
        if stats is not None:
            counted = self._stats_scope(stats, group)
            n_docs = int(np.count_nonzero(counted))
            total_length = int(self._lengths[: self.high][counted].sum())
        elif group is None:
            n_docs, total_length = self.n_docs, self.total_length
        else:
            n_docs, total_length = self._group_stats.get(group, (0, 0))
        if n_docs == 0:
            return np.empty(0, dtype=np.float64), []
        # A group that holds every live document needs no filtering of the postings.
        scope = None if n_docs == self.n_docs or counted is not None else group
        terms: list[_QueryTerm] = []
        for term, qtf in Counter(tokenize(query)).items():
            term_id = self._vocab.get(term)
            if term_id is None:
                continue
            slots, tf = self._postings(term_id)
            if counted is not None:
                mine = counted[slots]
            elif scope is not None:
                mine = self._groups[slots] == scope
            else:
                mine = None
            if mine is not None:
                slots, tf = slots[mine], tf[mine]
                if slots.shape[0] == 0:
                    continue
            terms.append((qtf * idf(n_docs, slots.shape[0]), slots, tf))
        if not terms:
            return np.empty(0, dtype=np.float64), []
        avgdl = total_length / n_docs
        dl = self._lengths[: self.high].astype(np.float64)
        # Written exactly as the reference evaluates it, so the float64 results are
        # bit-identical: each numpy operation here is one correctly rounded IEEE op.
        norm: npt.NDArray[np.float64] = K1 * (1.0 - B + B * dl / avgdl)
        return norm, terms


def _nth_best_bound(total: npt.NDArray[np.float64], n: int) -> float:
    """A lower bound of the ``n``-th largest of ``total``, cheap to find: the ``n``-th
    largest of every 16th value, when that sample holds ``n`` positive values (any
    subset's ``n``-th largest is at most the whole's), else 0.0.
    A partition of a sample is a sixteenth of one over every slot, and the values at
    or above the bound are typically a few times ``n``."""
    sample = total[::16]
    if sample.shape[0] > n:
        bound = float(np.partition(sample, sample.shape[0] - n)[sample.shape[0] - n])
        if bound > 0.0:
            return bound
    return 0.0


def _masked(
    hit: npt.NDArray[np.bool_], mask: npt.NDArray[np.bool_] | None
) -> npt.NDArray[np.bool_]:
    """``hit`` narrowed by ``mask`` in place (slots past the mask's end are out)."""
    if mask is not None:
        width = min(hit.shape[0], mask.shape[0])
        hit[:width] &= mask[:width]
        hit[width:] = False
    return hit


def _contribution(
    weight: float, tf: npt.NDArray[np.float64], norm: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """One term's addend to the score of documents with these term frequencies and
    length normalizations, evaluated as the reference does (one IEEE op at a time)."""
    contribution: npt.NDArray[np.float64] = weight * (tf * (K1 + 1.0)) / (tf + norm)
    return contribution


def _accumulate(
    total: npt.NDArray[np.float64], slots: npt.NDArray[np.intp], values: npt.NDArray[np.float64]
) -> None:
    """``total[slots] += values`` for distinct ``slots``. A long posting list goes
    through ``bincount``, several times faster than a fancy-indexed add and the same
    floats: each slot's bin is ``0.0 + value``, exactly ``value``."""
    if slots.shape[0] * 8 >= total.shape[0]:
        total += np.bincount(slots, weights=values, minlength=total.shape[0])
    else:
        total[slots] += values
