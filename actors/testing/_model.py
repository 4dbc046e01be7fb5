"""The reference model of a store: plain Python and float64 brute force (design §3)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from protocol import RetrievalReport, UnifiedMessage

__all__ = ["SCORE_TOLERANCE", "ModelEntry", "ModelState", "check_report", "normalize64"]

#: How far a store's float32 score may be from the model's float64 score.
SCORE_TOLERANCE = 1e-5

Vector64 = npt.NDArray[np.float64]


def normalize64(vector: object) -> Vector64 | None:
    """``vector`` as a float64 unit vector, or None when its norm is zero."""
    arr = np.array(vector, dtype=np.float64, copy=True)
    norm = float(np.sqrt(arr @ arr))
    if norm == 0.0:
        return None
    out: Vector64 = arr / norm
    return out


@attrs.frozen
class ModelEntry:
    """One live entry of the model.

    ``tie_key`` is equal for two entries exactly when their stored vectors are
    bit-identical (or both zero), so a store must give them bit-identical scores and
    rank the newer one first.
    """

    seq: int
    namespace: str
    message: UnifiedMessage
    source: str
    metadata: dict[str, object]
    vector: Vector64 | None = attrs.field(eq=False)
    tie_key: bytes
    #: The memory's id (a turn written without ids: ``turn-<seq>``), or None if unknown.
    entry_id: str | None = None
    #: Its version (1, 2, 3...), when it became valid and, once closed, when it stopped
    #: (micros since the epoch), and when it expires (None: never).
    version: int = 1
    valid_from: int = 0
    valid_to: int | None = None
    expires: int | None = None
    #: The text BM25 indexes (None: the message's projection).
    index_text: str | None = None

    @classmethod
    def build(
        cls,
        seq: int,
        namespace: str,
        message: UnifiedMessage,
        source: str,
        metadata: dict[str, object],
        raw: object,
        *,
        entry_id: str | None = None,
        version: int = 1,
        valid_from: int = 0,
        expires: int | None = None,
        index_text: str | None = None,
    ) -> ModelEntry:
        vector = normalize64(raw)
        key = b"zero" if vector is None else vector.tobytes()
        return cls(
            seq,
            namespace,
            message,
            source,
            metadata,
            vector,
            key,
            entry_id=entry_id,
            version=version,
            valid_from=valid_from,
            expires=expires,
            index_text=index_text,
        )

    def expired(self, now: int) -> bool:
        return self.expires is not None and now >= self.expires

    def sees(self, now: int, as_of: int | None) -> bool:
        """Whether a read at ``now`` (as of ``as_of``, None: current versions) sees it."""
        if self.expired(now):
            return False
        if as_of is None:
            return self.valid_to is None
        return self.valid_from <= as_of and (self.valid_to is None or as_of < self.valid_to)

    def score(self, query: Vector64 | None) -> float:
        if query is None or self.vector is None:
            return 0.0
        return float(self.vector @ query)


@attrs.frozen
class ModelState:
    """The store's contents after some prefix of its writes, oldest entry first."""

    capacity: int
    entries: tuple[ModelEntry, ...] = ()
    next_seq: int = 0
    evicted: int = 0

    @property
    def zero_norm(self) -> int:
        return sum(1 for e in self.entries if e.vector is None)

    def add(self, new: Sequence[ModelEntry], dropped: int) -> tuple[ModelState, int]:
        """Append ``new`` (FIFO eviction past capacity); return the state and evictions."""
        entries = list(self.entries) + list(new)
        evicted = max(0, len(entries) - self.capacity)
        entries = entries[evicted:]
        state = attrs.evolve(
            self,
            entries=tuple(entries),
            next_seq=self.next_seq + len(new),
            evicted=self.evicted + evicted + dropped,
        )
        return state, evicted + dropped

    def without(self, seqs: set[int]) -> ModelState:
        return attrs.evolve(self, entries=tuple(e for e in self.entries if e.seq not in seqs))

    def in_scope(self, namespace: str | None) -> list[ModelEntry]:
        return [e for e in self.entries if namespace is None or e.namespace == namespace]

    def visible(
        self, namespace: str | None, now: int | None, as_of: int | None = None
    ) -> list[ModelEntry]:
        """The entries in scope a read at ``now`` sees (None: every entry in scope,
        for a store without time)."""
        scope = self.in_scope(namespace)
        if now is None:
            return scope
        return [e for e in scope if e.sees(now, as_of)]

    def reclaimed(self, now: int) -> ModelState:
        """This state once the store has reclaimed every entry expired at ``now`` (a
        reclaim is not an eviction)."""
        return attrs.evolve(self, entries=tuple(e for e in self.entries if not e.expired(now)))

    def current(self, namespace: str, entry_id: str, now: int) -> ModelEntry | None:
        """Memory ``entry_id``'s current, unexpired version in ``namespace``."""
        for e in self.entries:
            if e.namespace == namespace and e.entry_id == entry_id and e.sees(now, None):
                return e
        return None


def check_report(
    report: RetrievalReport,
    state: ModelState,
    query: Vector64 | None,
    k: int,
    namespace: str | None,
    *,
    now: int | None = None,
    as_of: int | None = None,
) -> str | None:
    """Check a store's answer against the model's; return why it is wrong, or None.

    ``now`` and ``as_of`` (micros) say which entries the read sees (see
    :meth:`ModelState.visible`): by default every entry in scope.

    The model scores every entry in scope in float64. The store's answer must have the
    right size and ``scanned`` count, hold only live entries in scope with the right
    contents and scores within :data:`SCORE_TOLERANCE`, be sorted by its own score
    descending with exact ties newest first, and miss no entry that scores better than
    its last hit, nor a newer entry that ties with it exactly.
    """
    scope = state.visible(namespace, now, as_of)
    by_seq = {e.seq: e for e in scope}
    if report.scanned != len(scope):
        return f"scanned {report.scanned}; the model has {len(scope)} entries in scope"
    want = min(k, len(scope))
    if len(report.turns) != want:
        return f"{len(report.turns)} hits for k={k}; the model expects {want}"
    seen: set[int] = set()
    for i, hit in enumerate(report.turns):
        entry = by_seq.get(hit.sequence)
        if entry is None:
            return (
                f"hit {i} has sequence {hit.sequence} ({hit.namespace!r}), which is not a "
                f"live entry in scope {namespace!r}"
            )
        if hit.sequence in seen:
            return f"hit {i} repeats sequence {hit.sequence}"
        seen.add(hit.sequence)
        if (hit.message, hit.namespace, hit.source, hit.metadata) != (
            entry.message,
            entry.namespace,
            entry.source,
            entry.metadata,
        ):
            return f"hit {i} (sequence {hit.sequence}) has other contents than the model's"
        expected = entry.score(query)
        if abs(hit.score - expected) > SCORE_TOLERANCE:
            return f"hit {i} (sequence {hit.sequence}) scores {hit.score}; model {expected}"
        if (query is None or entry.vector is None) and hit.score != 0.0:
            return f"hit {i} (sequence {hit.sequence}) scores {hit.score}; expected 0.0 exactly"
    hits = report.turns
    for a, b in itertools.pairwise(hits):
        if a.score < b.score:
            return f"sequence {a.sequence} ({a.score}) is ranked above {b.sequence} ({b.score})"
        if a.score == b.score and a.sequence < b.sequence:
            return f"tie at {a.score}: older sequence {a.sequence} ranked above {b.sequence}"
    for i, a in enumerate(hits):
        for b in hits[i + 1 :]:
            if _ties(by_seq[a.sequence], by_seq[b.sequence], query) and a.score != b.score:
                return (
                    f"sequences {a.sequence} and {b.sequence} hold the same vector but "
                    f"score {a.score} and {b.score}"
                )
    if not hits:
        return None
    last = by_seq[hits[-1].sequence]
    floor = last.score(query)
    for entry in scope:
        if entry.seq in seen:
            continue
        if entry.score(query) > floor + SCORE_TOLERANCE:
            return (
                f"sequence {entry.seq} (model score {entry.score(query)}) is missing; the "
                f"last hit scores {floor}"
            )
        if _ties(entry, last, query) and entry.seq > last.seq:
            return (
                f"sequence {entry.seq} ties exactly with the last hit {last.seq} and is "
                "newer, so it should have been returned instead"
            )
    return None


def _ties(a: ModelEntry, b: ModelEntry, query: Vector64 | None) -> bool:
    if query is None:
        return True
    return a.tie_key == b.tie_key
