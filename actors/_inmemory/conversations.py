"""The in-memory store's conversations: each entry's conversation code and position.

An entry written with a conversation keeps its conversation's code (>= 1, one per live
(namespace, conversation)) and its position there: 1, 2, 3... in commit order, never
given twice while the conversation holds a live entry, so an upsert, or a write after
the newest entry was deleted or evicted, gets the next one. A conversation whose every
entry is gone is forgotten (its code is free again), so a stream of conversations does
not grow the bookkeeping; written again, it starts again at 1. (The pg store keeps its
counters for good, ``actors._pg.schema``: there a returning conversation goes on.)

Only the store actor changes it, inside the arena's commits (``actors._inmemory.arena``).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

__all__ = ["CONVERSATION_SHIFT", "Conversations"]

#: A conversation entry's neighbour key is ``(code << CONVERSATION_SHIFT) | position``
#: (:meth:`Conversations.neighbor_keys`): above every sequence number and every position
#: a store reaches (2**40, a trillion writes).
CONVERSATION_SHIFT = 40


@attrs.define(eq=False)
class Conversations:
    """Per slot, the code of the entry's conversation (:attr:`codes`, 0: none or free)
    and its position (:attr:`positions`, 0: none); and per live conversation, its
    name, counter, live entries and newest entry.
    """

    capacity: int
    codes: npt.NDArray[np.int64] = attrs.field(init=False)
    positions: npt.NDArray[np.int64] = attrs.field(init=False)
    # namespace -> name -> code, and by code (index 0 unused): (namespace, name), the
    # last position given, the live entries, and the slot and sequence of the newest
    # entry written (the predecessor of the next one, while it is live).
    _index: dict[str, dict[str, int]] = attrs.field(factory=dict)
    _names: list[tuple[str, str] | None] = attrs.field(factory=lambda: [None])
    _last_position: list[int] = attrs.field(factory=lambda: [0])
    _live: list[int] = attrs.field(factory=lambda: [0])
    _newest: list[tuple[int, int]] = attrs.field(factory=lambda: [(-1, -1)])
    _free: list[int] = attrs.field(factory=list)
    # Codes whose live count reached 0 since the last settle().
    _unused: list[int] = attrs.field(factory=list)
    #: Live entries that have a conversation: with none, a release skips the codes.
    entries: int = 0

    def __attrs_post_init__(self) -> None:
        self.codes = np.zeros(self.capacity, dtype=np.int64)
        self.positions = np.zeros(self.capacity, dtype=np.int64)

    # --- reads -------------------------------------------------------------------------

    def code(self, namespace: str, conversation: str) -> int | None:
        """The code of a live conversation of ``namespace``, or None."""
        codes = self._index.get(namespace)
        return None if codes is None else codes.get(conversation)

    def name_of(self, slot: int) -> str | None:
        """The conversation of the live entry in ``slot``, or None."""
        code = int(self.codes[slot])
        if not code:
            return None
        pair = self._names[code]
        assert pair is not None
        return pair[1]

    def names_of(self, slots: npt.NDArray[np.intp] | Sequence[int]) -> list[str | None]:
        """:meth:`name_of` of each slot, read in one go (for hits)."""
        if not self.entries:
            return [None] * len(slots)
        names = self._names
        out: list[str | None] = []
        for code in self.codes[np.asarray(slots, dtype=np.intp)].tolist():
            pair = names[code] if code else None
            out.append(None if pair is None else pair[1])
        return out

    def neighbor_keys(
        self, slots: npt.NDArray[np.intp] | Sequence[int], seqs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """See :meth:`actors._inmemory.arena.Arena.neighbor_keys`; ``seqs`` is the arena's."""
        index = np.asarray(slots, dtype=np.intp)
        own = seqs[index]
        if not self.entries:
            return own.copy()
        codes = self.codes[index]
        keys: npt.NDArray[np.int64] = np.where(
            codes > 0, (codes << CONVERSATION_SHIFT) | self.positions[index], own
        )
        return keys

    def newest(
        self,
        namespace: str,
        conversation: str,
        seqs: npt.NDArray[np.int64],
        high: int,
        leaving_out: Sequence[int] = (),
    ) -> int | None:
        """The slot of the newest live entry (highest position) of ``conversation`` in
        ``namespace``, slots ``leaving_out`` left out, or None."""
        code = self.code(namespace, conversation)
        if code is None:
            return None
        slot, seq = self._newest[code]
        if slot >= 0 and int(seqs[slot]) == seq and slot not in leaving_out:
            return slot
        # The newest was deleted, evicted or is being replaced: find the next newest.
        found = np.flatnonzero(self.codes[:high] == code)
        if len(leaving_out):
            found = found[~np.isin(found, np.asarray(leaving_out, dtype=np.intp))]
        if not len(found):
            return None
        return int(found[int(np.argmax(self.positions[found]))])

    # --- writes (inside the arena's commits) -------------------------------------------

    def place(
        self,
        where: slice | npt.NDArray[np.intp],
        namespace: str,
        conversations: Sequence[str | None] | None,
        slots: list[int],
        first: int,
    ) -> None:
        """Fill the slots ``where`` (``slots``, sequences from ``first``) with their
        entries' codes and positions, in batch order (``conversations`` None: none
        has one)."""
        if conversations is None:
            self.codes[where] = 0
            self.positions[where] = 0
            return
        codes: list[int] = []
        positions: list[int] = []
        index = self._index.setdefault(namespace, {})
        for i, conversation in enumerate(conversations):
            if conversation is None:
                codes.append(0)
                positions.append(0)
                continue
            code = index.get(conversation)
            if code is None:
                code = self._new(namespace, conversation)
                index[conversation] = code
            position = self._last_position[code] + 1
            self._last_position[code] = position
            self._live[code] += 1
            self._newest[code] = (slots[i], first + i)
            codes.append(code)
            positions.append(position)
        self.entries += len(codes) - codes.count(0)
        if not index:
            del self._index[namespace]
        self.codes[where] = codes
        self.positions[where] = positions

    def _new(self, namespace: str, conversation: str) -> int:
        if self._free:
            code = self._free.pop()
            self._names[code] = (namespace, conversation)
            self._last_position[code] = 0
            self._live[code] = 0
            self._newest[code] = (-1, -1)
            return code
        self._names.append((namespace, conversation))
        self._last_position.append(0)
        self._live.append(0)
        self._newest.append((-1, -1))
        return len(self._names) - 1

    def release(self, index: npt.NDArray[np.intp] | slice) -> None:
        """The entries in slots ``index`` are gone (their slots are freed, or refilled
        in the same commit)."""
        if not self.entries:
            return
        codes = self.codes[index]
        codes = codes[codes > 0]
        if not len(codes):
            return
        self.entries -= len(codes)
        live = self._live
        if len(codes) == 1:
            pairs = [(int(codes[0]), 1)]
        else:
            found, counts = np.unique(codes, return_counts=True)
            pairs = list(zip(found.tolist(), counts.tolist(), strict=True))
        for code, count in pairs:
            live[code] -= count
            if not live[code]:
                self._unused.append(code)
        self.codes[index] = 0
        self.positions[index] = 0

    def settle(self) -> None:
        """Forget the conversations left without a live entry. Every commit ends with
        it, not each removal: a conversation whose last entry a batch replaces or
        evicts, and that the same batch writes to, goes on counting its positions."""
        unused, self._unused = self._unused, []
        names = self._names
        for code in unused:
            pair = names[code]
            if pair is None or self._live[code]:
                continue  # forgotten already, or written to again
            namespace, conversation = pair
            index = self._index[namespace]
            del index[conversation]
            if not index:
                del self._index[namespace]
            names[code] = None
            self._free.append(code)
