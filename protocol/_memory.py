"""Memory configuration, compaction strategies and their reports.

The five strategies form one tagged union (``Strategy``) so that a ``MemoryConfig`` can be
written to and read from JSON or msgpack. The actors' messages are in ``protocol.messages``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Literal

import msgspec

from ._chat import UnifiedMessage
from ._checks import check_int, check_retriever_name
from ._errors import ConfigError
from ._render import PLACEMENTS, RENDERERS, RecallInjection
from ._store import DEFAULT_NAMESPACE, RetrievalReport

# --- strategies ---------------------------------------------------------------------------


class StrategyBase(msgspec.Struct, frozen=True, tag_field="strategy"):
    """Base of the compaction strategies."""


class Offload(StrategyBase, frozen=True, kw_only=True, tag="offload"):
    """Move up to ``turns`` of the oldest unprotected messages into the store.

    Each message is stored as it was (recall returns it unchanged), but it is indexed
    and embedded by a context-enriched text (:func:`contextual_entry`): the turn, then
    the date, then the ``context`` messages just before it in the prompt (system
    messages aside), so that a turn like "Yes, last Saturday!" can be found by what it
    answers. On LoCoMo, hybrid recall's R@25 rose from 0.737 with the turn alone to
    0.810 with these entries (``benches/recall_quality.py``).

    Args:
        turns: how many messages at most, >= 1.
        context: how many preceding messages each entry's text includes, >= 0 (0
            indexes the turn alone).
        dated: whether the text carries a date: the one given to ``compress``, or else
            the current UTC date and time.
    """

    turns: int
    context: int = 1
    dated: bool = True

    def __post_init__(self) -> None:
        check_int("Offload.turns", self.turns, minimum=1, python=True)
        check_int("Offload.context", self.context, minimum=0, python=True)
        if not isinstance(self.dated, bool):
            raise ConfigError(f"Offload.dated is {self.dated!r}; expected a bool")


class Summarize(StrategyBase, frozen=True, kw_only=True, tag="summarize"):
    """Replace up to ``turns`` of the oldest unprotected messages with one system summary."""

    turns: int

    def __post_init__(self) -> None:
        check_int("Summarize.turns", self.turns, minimum=1, python=True)


class DropObservations(StrategyBase, frozen=True, kw_only=True, tag="drop_observations"):
    """Replace the output of every tool result but the last ``keep_last`` with a
    placeholder."""

    keep_last: int

    def __post_init__(self) -> None:
        check_int("DropObservations.keep_last", self.keep_last, minimum=0, python=True)


class SlidingWindow(StrategyBase, frozen=True, kw_only=True, tag="sliding_window"):
    """Drop the oldest unprotected messages until at most ``max_messages`` remain."""

    max_messages: int

    def __post_init__(self) -> None:
        check_int("SlidingWindow.max_messages", self.max_messages, minimum=1, python=True)


class ClampOversizedMessages(StrategyBase, frozen=True, kw_only=True, tag="clamp"):
    """Truncate text so that each message fits a store whose ``max_entry_bytes`` is
    ``max_bytes`` when ``Offload`` stores it: its payload, plus the fixed overhead of
    each block after the first and the source ``"offload"``, is at most ``max_bytes``."""

    max_bytes: int

    def __post_init__(self) -> None:
        check_int("ClampOversizedMessages.max_bytes", self.max_bytes, minimum=1, python=True)


Strategy = Offload | Summarize | DropObservations | SlidingWindow | ClampOversizedMessages
_STRATEGY_TYPES = (Offload, Summarize, DropObservations, SlidingWindow, ClampOversizedMessages)


class RecallSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How recall ranks the store's entries for a query.

    The default is hybrid recall: the ``fetch_k`` best entries by embedding similarity
    and the ``fetch_k`` best by BM25 keyword score, fused by reciprocal rank fusion
    (each hit earns ``weight / (rrf_k + rank)`` per list). Keywords find the rare
    names, places and objects a question repeats verbatim; the embedding finds
    paraphrases. It works with any embedder, the bag-of-words ``HashingEmbedder``
    included. ``rrf_k = 10`` (not the classic 60) lets a list's top few ranks count for
    more than agreement far down both lists: with only two lists, one of them sure is
    better evidence than both lukewarm. On LoCoMo (``benches/recall_quality.py``) R@10
    rose monotonically as ``rrf_k`` fell from 120 to 10.

    Args:
        search: ``"hybrid"`` (the default) or ``"dense"`` (embedding similarity only).
        fetch_k: how deep each list is before fusion; at least the ``k`` asked for is
            used. Deeper costs one decoded entry per rank and recall barely changes
            past 100.
        rrf_k: the fusion constant, > 0.
        dense_weight, bm25_weight: each list's weight in the fusion, finite and >= 0.
        neighbor_weight: after fusion, each hit also earns this share of the better
            fused score of its two neighbours in write order (for offloaded turns, the
            turns said just before and after it), finite and >= 0; 0 turns it off. The
            evidence for a question often sits beside the turn that matches it best:
            on LoCoMo 0.5 raised R@10 from 0.713 to 0.746 and R@25 from 0.806 to 0.823.
        speaker_weight: speaker focus, finite and >= 0; 0 turns it off. An entry's
            speaker is the ``"Name: "`` its text starts with (the form
            :func:`contextual_entry` asks for). When the query names a speaker of the
            entries found (a word of the name, as written, possessive included) and
            some entry found is someone else's, the name is left out of the query that
            is embedded (the speaker is this channel's business, and a name pulls the
            embedding towards the turns that address that person rather than those
            said by them), and each hit said by a named speaker has its fused score
            multiplied by ``1 + speaker_weight``. The hits' ``score`` is then the
            cosine of that query. On LoCoMo, turning it off lowers R@10 from 0.800 to
            0.757 on the tuning conversations and from 0.774 to 0.692 on five held-out
            ones.
        date_weight: a time channel, finite and >= 0; 0 turns it off. When the query
            names a date (``"on 8 May, 2023"``, ``"in July 2023"``, ``"in June"``,
            ``"2022"``, ``"2023-05-08"``), each hit dated near it (the ``"Date: "``
            line of its text, which ``Offload`` writes) has its fused score multiplied
            by ``1 + date_weight``: within 7 days of a day, from 7 days before a month
            to the end of the month after it (what was said "last month"), in a named
            month of any year or the month after, or in a named year. Relative dates
            ("last week") are not read: a query carries no date to count from. On
            LoCoMo, turning it off lowers R@10 from 0.800 to 0.788 (held out: 0.774 to
            0.767).
        link_weight: entity links between turns, finite and >= 0; 0 turns them off.
            After the boosts above, the best 5 hits are anchors; the words of their
            turns that the query does not hold and that few of the namespace's entries
            hold (BM25 stems, in at least 2 and at most 2% of them) are link terms.
            The anchors, and each hit of the top 50 that holds a link term of an anchor
            it is not next to (sequence ± 1), have their scores multiplied by
            ``1 + link_weight``, so a link never displaces the hits it was drawn from.
            A question whose answer is spread over several turns finds the best of
            them; the others often share a rare word with it (a title, a place, an
            object) rather than with the question. On LoCoMo it raises multi-hop R@10
            from 0.494 to 0.509 on the tuning conversations and from 0.501 to 0.526 on
            five held-out ones (``docs/pages/benchmarks/recall-quality.md``).
        ranker: ``"learned"`` (the default) or ``"none"``. After the stages above, the
            learned ranker (``actors/_retrieval/ranker.py``) reorders the best 25 hits (at
            least ``k``) by a linear model over 26 generic features of each: its fused and
            boosted scores and rank, cosine (and its gap to the best), BM25 score and rank,
            whether both lists found it, its neighbours' fused scores, whether a named
            speaker said it (or another asked them something), whether it is dated near or
            far from a date the query names, the rare link terms it shares with the
            anchors, its length, the share of the query's terms it holds, whether it asks a
            question, how many other candidates were said on its day (the ``Date:`` line
            ``Offload`` writes; part of the neighbour channel) and the best of them, and,
            for a query that asks "when", whether it names a time; a query that asks
            "when" has a second set of weights.
            The hits below those 25 keep their order, so it changes which of them come
            first, never which make the top 25; a hit's ``raw_score`` is then the model's
            score. A channel whose weight above is 0 gives the model nothing. The weights
            are learned on LoCoMo's dev conversations by ``benches/train_ranker.py``, with
            MiniLM's int8 and fp32 candidates pooled; with leave-one-conversation-out
            cross-validation it raises R@1 from 0.429 to 0.500 (int8; fp32 0.437 to 0.501)
            and R@10 from 0.805 to 0.824 (fp32 0.805 to 0.818), R@25 unchanged; no int8
            category is lower at any k, and the one cell lower than the hand-tuned ranking
            is fp32's open-domain R@1 (0.144 to 0.121, 44 questions).
            ``"none"`` is the hand-tuned ranking alone.
        max_block_bytes: a budget for the rendered recall block, in UTF-8 bytes; the
            lowest-ranked items are dropped until the block fits, and an item is never
            split (a block whose best item alone is over it is left out). None (the
            default) sets no budget.

    Raises:
        ConfigError: any field out of range or of the wrong type.
    """

    search: Literal["dense", "hybrid"] = "hybrid"
    fetch_k: int = 200
    rrf_k: float = 10.0
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    neighbor_weight: float = 0.5
    speaker_weight: float = 1.0
    date_weight: float = 1.0
    link_weight: float = 0.5
    max_block_bytes: int | None = None
    ranker: Literal["learned", "none"] = "learned"

    def __post_init__(self) -> None:
        if self.search not in ("dense", "hybrid"):
            raise ConfigError(
                f"RecallSettings.search is {self.search!r}; expected 'dense' or 'hybrid'"
            )
        if self.ranker not in ("learned", "none"):
            raise ConfigError(
                f"RecallSettings.ranker is {self.ranker!r:.60}; expected 'learned' or 'none'"
            )
        check_int("RecallSettings.fetch_k", self.fetch_k, minimum=1, python=True)
        if self.max_block_bytes is not None:
            check_int(
                "RecallSettings.max_block_bytes", self.max_block_bytes, minimum=1, python=True
            )
        for name in (
            "rrf_k",
            "dense_weight",
            "bm25_weight",
            "neighbor_weight",
            "speaker_weight",
            "date_weight",
            "link_weight",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
                or (name == "rrf_k" and value == 0)
            ):
                low = "> 0" if name == "rrf_k" else ">= 0"
                raise ConfigError(
                    f"RecallSettings.{name} is {value!r}; expected a finite number {low}"
                )
        if self.dense_weight == 0 and self.bm25_weight == 0:
            raise ConfigError(
                "RecallSettings.dense_weight and bm25_weight are both 0; expected at least "
                "one list to count"
            )


DEFAULT_MIN_SIMILARITY = 0.02
"""``MemoryConfig.min_similarity``'s default (docs/pages/benchmarks/recall-quality.md:
the LoCoMo figures)."""
_INSTANCE_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


class MemoryConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How :func:`actors.open_memory` compacts, recalls and injects.

    Args:
        strategies: the compaction strategies, applied in order by ``compress``.
        instance_id: the agent instance this memory belongs to: 1 to 128 characters,
            letters, digits and ``. _ - : @``. With one, the default namespace is
            ``memory-{instance_id}``, so agents sharing a store are isolated with no
            other configuration; without one it is ``memory-default``.
        namespace: where offloaded turns, summaries and explicit memories go, and where
            recall looks. Left at its default, it is derived from ``instance_id`` (see
            there); any other value is used as given.
        top_k: how many hits ``retrieve`` asks for when ``k`` is not given.
        min_similarity: the relevance floor: hits scoring below it are dropped after
            ranking (a hit scoring exactly the floor is kept); None keeps all. The
            default, 0.02, is never reached by a hit with no similarity at all (score
            0.0 or less), which would otherwise be injected on every turn. It is the
            highest floor measured at which R@5 and the injected no-evidence count on
            LoCoMo are no worse than with no floor, for MiniLM and for the
            ``HashingEmbedder``; docs/pages/benchmarks/recall-quality.md has the figures.
        renderer: ``"plain"`` or ``"xml"``; how ``inject`` renders the recall block.
        placement: where ``inject`` puts the block: ``"before_user"`` (the default: a
            system message just before the newest user message, which keeps the prompt
            prefix cacheable) or ``"system_section"`` (a section of the first system
            message, as the Nexus recall layer does; see :func:`protocol.inject`).
        section_priority: with ``placement="system_section"``, the block's position
            among the first system message's sections (its content blocks): an int
            ``>= 0``, 0 before every section, N after the first N, and last when N is
            at least their number; None (the default) appends it last. The other
            sections carry no priority of their own, so this is a position, not a
            weight (Nexus's ``section_priority: 45`` puts the block last in any prompt
            of at most 45 sections). Refused with ``placement="before_user"``.
        retriever_name: the retriever name the ``retriever.*`` and
            ``vector_store.searched`` events of ``retrieve`` carry (``"memory"`` by
            default): 1 to 128 characters, none of them a control character.
        recall: how recall ranks entries (hybrid BM25 + embedding by default); see
            :class:`RecallSettings`.
        auto_store_compaction: also store every summary, with source ``"compaction"``.
        auto_store_user_input: store the input itself, the newest user message of every
            ``turn``, once (a repeated request stores nothing new), after recall (so
            that a turn never recalls itself), best-effort, with source ``"user"``.
            Summaries and inputs get :func:`memory_id` ids, like ``remember``.
        max_prompt_bytes: a budget of summed payload bytes. When set, each strategy runs
            only while the prompt is over it; None runs every strategy every time.
        recall_errors: ``"warn"`` (the default) logs a recall failure during ``turn`` and
            goes on without a recall block; ``"raise"`` raises it.
        dedupe: how ``remember`` treats a memory already there when it is not told:
            None (the default) keeps every memory (they accumulate); ``"exact"`` writes
            nothing for a text equal to a current memory's of the namespace and returns
            that memory's id; ``"near"`` does the same for a current memory whose
            cosine similarity is at least the store's near-duplicate threshold.

    Raises:
        ConfigError: any field out of range or of the wrong type.
    """

    strategies: list[Strategy] = msgspec.field(default_factory=list)
    instance_id: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    top_k: int = 5
    min_similarity: float | None = DEFAULT_MIN_SIMILARITY
    renderer: Literal["plain", "xml"] = "plain"
    placement: Literal["before_user", "system_section"] = "before_user"
    section_priority: int | None = None
    retriever_name: str = "memory"
    recall: RecallSettings = msgspec.field(default_factory=RecallSettings)
    auto_store_compaction: bool = True
    auto_store_user_input: bool = False
    max_prompt_bytes: int | None = None
    recall_errors: Literal["warn", "raise"] = "warn"
    dedupe: Literal["exact", "near"] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.strategies, list):
            raise ConfigError(
                f"MemoryConfig.strategies is a {type(self.strategies).__name__}; "
                "expected a list of strategies"
            )
        for i, strategy in enumerate(self.strategies):
            if not isinstance(strategy, _STRATEGY_TYPES):
                raise ConfigError(
                    f"MemoryConfig.strategies[{i}] is {strategy!r:.60}; expected Offload, "
                    "Summarize, DropObservations, SlidingWindow or ClampOversizedMessages"
                )
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ConfigError(
                f"MemoryConfig.namespace is {self.namespace!r}; expected a non-empty str"
            )
        if self.instance_id is not None:
            if not isinstance(self.instance_id, str) or not _INSTANCE_ID.fullmatch(
                self.instance_id
            ):
                raise ConfigError(
                    f"MemoryConfig.instance_id is {self.instance_id!r:.80}; expected None or "
                    "1 to 128 letters, digits and . _ - : @"
                )
            if self.namespace == DEFAULT_NAMESPACE:
                msgspec.structs.force_setattr(self, "namespace", f"memory-{self.instance_id}")
        check_int("MemoryConfig.top_k", self.top_k, minimum=1, python=True)
        ms = self.min_similarity
        if ms is not None and (
            isinstance(ms, bool) or not isinstance(ms, int | float) or not -1.0 <= ms <= 1.0
        ):
            raise ConfigError(
                f"MemoryConfig.min_similarity is {ms!r}; expected a float in [-1, 1] or None"
            )
        if not isinstance(self.recall, RecallSettings):
            raise ConfigError(
                f"MemoryConfig.recall is {self.recall!r:.60}; expected RecallSettings"
            )
        if self.renderer not in RENDERERS:
            raise ConfigError(
                f"MemoryConfig.renderer is {self.renderer!r}; expected one of {list(RENDERERS)}"
            )
        for name in ("auto_store_compaction", "auto_store_user_input"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"MemoryConfig.{name} is {getattr(self, name)!r}; expected a bool"
                )
        if self.max_prompt_bytes is not None:
            check_int(
                "MemoryConfig.max_prompt_bytes", self.max_prompt_bytes, minimum=1, python=True
            )
        if self.placement not in PLACEMENTS:
            raise ConfigError(
                f"MemoryConfig.placement is {self.placement!r}; expected one of {list(PLACEMENTS)}"
            )
        if self.section_priority is not None:
            check_int(
                "MemoryConfig.section_priority", self.section_priority, minimum=0, python=True
            )
            if self.placement != "system_section":
                raise ConfigError(
                    f"MemoryConfig.section_priority is {self.section_priority!r} with "
                    f"placement={self.placement!r}; a section position needs "
                    "placement='system_section' (or leave section_priority at None)"
                )
        check_retriever_name("MemoryConfig.retriever_name", self.retriever_name)
        if self.dedupe is not None and self.dedupe not in ("exact", "near"):
            raise ConfigError(
                f"MemoryConfig.dedupe is {self.dedupe!r:.60}; expected None, 'exact' or 'near'"
            )
        if self.recall_errors not in ("warn", "raise"):
            raise ConfigError(
                f"MemoryConfig.recall_errors is {self.recall_errors!r}; expected 'warn' or 'raise'"
            )


# --- what compaction did --------------------------------------------------------------------


class ActionBase(msgspec.Struct, frozen=True, tag_field="action"):
    """Base of the compaction actions; ``strategy`` is the tag of the strategy that ran."""


class Offloaded(ActionBase, frozen=True, kw_only=True, tag="offloaded"):
    """``indices`` (in the prompt the strategy saw) moved to the store as ``ids``."""

    strategy: str
    indices: list[int]
    ids: list[str]


class Summarized(ActionBase, frozen=True, kw_only=True, tag="summarized"):
    """``indices`` became one system summary; ``stored_id`` is set when it was stored."""

    strategy: str
    indices: list[int]
    stored_id: str | None = None


class Dropped(ActionBase, frozen=True, kw_only=True, tag="dropped"):
    """``count`` messages (sliding window) or tool outputs (drop observations) went."""

    strategy: str
    count: int


class Clamped(ActionBase, frozen=True, kw_only=True, tag="clamped"):
    """``count`` messages were truncated by ``bytes_removed`` in all; ``unclampable``
    messages stayed over the cap because their fixed parts (ids, names, tool
    arguments) alone are over it."""

    strategy: str
    count: int
    bytes_removed: int
    unclampable: int = 0


class Skipped(ActionBase, frozen=True, kw_only=True, tag="skipped"):
    """The strategy had nothing to do; ``reason`` says why."""

    strategy: str
    reason: str


class Rejected(ActionBase, frozen=True, kw_only=True, tag="rejected"):
    """The strategy failed and changed nothing; the error is ``CompressionReport.last_error``.

    ``error`` is ``"TypeName: message"``, so the action list stays plain data.
    """

    strategy: str
    error: str


CompactionAction = Offloaded | Summarized | Dropped | Clamped | Skipped | Rejected


class CompressionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``compress`` did.

    Attributes:
        actions: one action per strategy, in order (a failed summary store adds a
            ``Rejected`` after its ``Summarized``).
        before, after: message counts.
        before_bytes, after_bytes: summed payload bytes.
        last_error: the last error a strategy met, converted to the ``PluginError``
            seam (:mod:`protocol.compaction`) when it came from the store. It is a live
            exception, so a report that holds one cannot be msgpack-encoded; the
            ``Rejected`` action carries its text.
    """

    actions: list[CompactionAction]
    before: int
    after: int
    before_bytes: int = 0
    after_bytes: int = 0
    last_error: BaseException | None = None


class TurnReport(msgspec.Struct, frozen=True, kw_only=True):
    """What each stage of ``Memory.turn`` did, and how long it took.

    Attributes:
        namespace: the memory's namespace.
        compression: the compaction report.
        recall: the recall report, or None when recall failed or there was no user
            message to recall for.
        recall_error: ``"TypeName: message"`` when recall failed (best-effort mode).
        injection: the injection outcome.
        digest: :func:`protocol.digest_request` of the request as dispatched.
        timings: seconds per stage, keyed ``compress``, ``retrieve``, ``inject``,
            ``dispatch`` (wall time, from ``time.perf_counter``).
        dispatch_error: ``"TypeName: message"`` when the dispatch failed; ``turn`` then
            raises the ``DispatchError`` with this report as its ``report``.
    """

    namespace: str
    compression: CompressionReport
    recall: RetrievalReport | None
    recall_error: str | None
    injection: RecallInjection
    digest: str
    timings: dict[str, float]
    dispatch_error: str | None = None


def contextual_entry(text: str, *, context: Sequence[str] = (), date: str | None = None) -> str:
    """The text to store for one turn, enriched with what makes it findable on its own.

    A turn read alone often does not say what it is about ("Yes, last Saturday!"): the
    turn before it does, and the date it was said dates it. The entry is the turn first
    (an embedder that truncates long inputs cuts the context, never the turn), then the
    date, then the turns just before it, oldest first::

        Melanie: Yes, last Saturday!
        Date: 1:14 pm on 25 May, 2023
        Before: Caroline: Did you run the charity race?

    Args:
        text: the turn's projection, ideally ``"Speaker: text"``.
        context: the preceding turns' texts, oldest first (none at a session's start).
        date: when the turn was said, in any human-readable form; None leaves it out.
    """
    lines = [text]
    if date:
        lines.append(f"Date: {date}")
    lines.extend(f"Before: {c}" for c in context)
    return "\n".join(lines)


def memory_id(content: str, source: str, timestamp_ns: int) -> str:
    """The id of every document a memory stores on its own (explicit memories,
    summaries, auto-stored inputs): 16 hex characters of sha256(content ‖ source ‖
    time).

    The parts are joined with a NUL, which neither a source nor a decimal timestamp can
    hold, so two different (content, source) pairs never hash the same bytes.
    """
    blob = "\0".join((content, source, str(timestamp_ns))).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:16]


def describe_error(error: BaseException) -> str:
    """``"TypeName: message"``, the plain-data form of an error in reports and events."""
    return f"{type(error).__name__}: {error}"


def check_messages(messages: object, *, what: str = "messages") -> list[UnifiedMessage]:
    """Return ``messages`` as a new list after checking that it is a list of messages."""
    if isinstance(messages, str | bytes) or not isinstance(messages, list | tuple):
        raise ConfigError(
            f"{what} is a {type(messages).__name__}; expected a list of UnifiedMessage"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, UnifiedMessage):
            raise ConfigError(
                f"{what}[{i}] is a {type(message).__name__}; expected UnifiedMessage"
            )
    return list(messages)
