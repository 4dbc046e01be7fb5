"""The arena: a float32 matrix and per-slot metadata, allocated once, never reallocated.

Only the store actor writes to an arena, and only between two snapshots. Readers get
read-only views of its arrays (``view_*``) and a :class:`Snapshot` that says which rows
were committed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

__all__ = ["Arena", "Snapshot"]


@attrs.frozen
class Snapshot:
    """The state as of one commit.

    Attributes:
        version: how many commits came before; it only grows.
        high: rows ``[0, high)`` have ever been written; a scan reads only those.
        live: how many entries are live.
        dense: every row below ``high`` is live, so an unscoped scan needs no mask.
        namespace_counts: live entries per namespace.
    """

    version: int
    high: int
    live: int
    dense: bool
    namespace_counts: dict[str, int]


def _readonly(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    view = arr.view()
    view.flags.writeable = False
    return view


@attrs.define(eq=False)
class Arena:
    """Slots for ``capacity`` entries of ``dimensions`` floats.

    Free slots are reused first; when there is none, the oldest entry is evicted (FIFO
    by sequence number). Sequence numbers are never reused.
    """

    capacity: int
    dimensions: int
    vectors: npt.NDArray[np.float32] = attrs.field(init=False)
    seqs: npt.NDArray[np.int64] = attrs.field(init=False)
    ns_ids: npt.NDArray[np.int32] = attrs.field(init=False)
    zero: npt.NDArray[np.bool_] = attrs.field(init=False)
    ids: list[str | None] = attrs.field(init=False)
    payloads: list[bytes | None] = attrs.field(init=False)
    sources: list[str | None] = attrs.field(init=False)
    metadata: list[bytes | None] = attrs.field(init=False)
    high: int = 0
    next_seq: int = 0
    evicted_total: int = 0
    zero_count: int = 0
    _free: list[int] = attrs.field(factory=list)
    # seq -> slot for every live entry, oldest first: the FIFO eviction order.
    _order: OrderedDict[int, int] = attrs.field(factory=OrderedDict)
    _id_slot: dict[str, int] = attrs.field(factory=dict)
    _ns_index: dict[str, int] = attrs.field(factory=dict)
    _ns_names: list[str | None] = attrs.field(factory=list)
    _ns_counts: list[int] = attrs.field(factory=list)
    _ns_free: list[int] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        n, d = self.capacity, self.dimensions
        self.vectors = np.zeros((n, d), dtype=np.float32)
        self.seqs = np.full(n, -1, dtype=np.int64)
        self.ns_ids = np.full(n, -1, dtype=np.int32)
        self.zero = np.zeros(n, dtype=np.bool_)
        self.ids = [None] * n
        self.payloads = [None] * n
        self.sources = [None] * n
        self.metadata = [None] * n

    # --- reads -------------------------------------------------------------------------

    def readonly_views(
        self,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """Read-only views of the vectors, sequences and namespace ids."""
        return _readonly(self.vectors), _readonly(self.seqs), _readonly(self.ns_ids)

    def __len__(self) -> int:
        return len(self._order)

    def namespace_id(self, namespace: str) -> int | None:
        return self._ns_index.get(namespace)

    def namespace_of(self, slot: int) -> str:
        name = self._ns_names[int(self.ns_ids[slot])]
        assert name is not None
        return name

    def slot_of(self, entry_id: str) -> int | None:
        return self._id_slot.get(entry_id)

    def snapshot(self, version: int) -> Snapshot:
        counts = {
            name: count
            for name, count in zip(self._ns_names, self._ns_counts, strict=True)
            if name is not None
        }
        return Snapshot(
            version=version,
            high=self.high,
            live=len(self._order),
            dense=len(self._order) == self.high,
            namespace_counts=counts,
        )

    # --- writes (store actor only) -----------------------------------------------------

    def take_slots(self, count: int) -> tuple[list[int], int]:
        """Pick ``count`` slots for new entries, evicting the oldest where needed.

        Returns the slots and how many live entries were evicted. ``count`` must not
        exceed the capacity.
        """
        slots: list[int] = []
        evicted = 0
        for _ in range(count):
            if self._free:
                slots.append(self._free.pop())
            elif self.high < self.capacity:
                slots.append(self.high)
                self.high += 1
            else:
                _, slot = self._order.popitem(last=False)
                self._release(slot)
                self._free.pop()  # _release pushed it; it is taken right away
                slots.append(slot)
                evicted += 1
        self.evicted_total += evicted
        return slots, evicted

    def write(
        self,
        slots: list[int],
        vectors: npt.NDArray[np.float32],
        zero: npt.NDArray[np.bool_],
        ids: list[str] | None,
        payloads: list[bytes],
        namespace: str,
        source: str,
        metadata: bytes,
    ) -> tuple[list[str], list[int]]:
        """Fill ``slots`` with a batch and give each entry the next sequence number.

        With ``ids=None`` each entry's id is derived from its sequence number.
        """
        first = self.next_seq
        count = len(slots)
        seqs = list(range(first, first + count))
        self.next_seq = first + count
        index = np.asarray(slots, dtype=np.intp)
        self.vectors[index] = vectors
        self.seqs[index] = seqs
        ns_id = self._intern(namespace, count)
        self.ns_ids[index] = ns_id
        self.zero[index] = zero
        self.zero_count += int(np.count_nonzero(zero))
        out_ids = [f"turn-{seq}" for seq in seqs] if ids is None else ids
        for slot, seq, entry_id, payload in zip(slots, seqs, out_ids, payloads, strict=True):
            self.ids[slot] = entry_id
            self.payloads[slot] = payload
            self.sources[slot] = source
            self.metadata[slot] = metadata
            self._order[seq] = slot
            self._id_slot[entry_id] = slot
        return out_ids, seqs

    def remove(self, slot: int) -> None:
        """Delete the live entry in ``slot``; the slot is reused by a later write."""
        del self._order[int(self.seqs[slot])]
        self._release(slot)

    def _release(self, slot: int) -> None:
        entry_id = self.ids[slot]
        if entry_id is not None:
            del self._id_slot[entry_id]
        ns_id = int(self.ns_ids[slot])
        self._ns_counts[ns_id] -= 1
        if self._ns_counts[ns_id] == 0:
            name = self._ns_names[ns_id]
            assert name is not None
            del self._ns_index[name]
            self._ns_names[ns_id] = None
            self._ns_free.append(ns_id)
        if self.zero[slot]:
            self.zero_count -= 1
            self.zero[slot] = False
        self.seqs[slot] = -1
        self.ns_ids[slot] = -1
        self.ids[slot] = None
        self.payloads[slot] = None
        self.sources[slot] = None
        self.metadata[slot] = None
        self._free.append(slot)

    def _intern(self, namespace: str, count: int) -> int:
        ns_id = self._ns_index.get(namespace)
        if ns_id is None:
            if self._ns_free:
                ns_id = self._ns_free.pop()
                self._ns_names[ns_id] = namespace
                self._ns_counts[ns_id] = 0
            else:
                ns_id = len(self._ns_names)
                self._ns_names.append(namespace)
                self._ns_counts.append(0)
            self._ns_index[namespace] = ns_id
        self._ns_counts[ns_id] += count
        return ns_id

    def live_slots(self, namespace: str | None = None) -> list[int]:
        """Live slots, oldest first, optionally of one namespace."""
        if namespace is None:
            return list(self._order.values())
        ns_id = self._ns_index.get(namespace)
        if ns_id is None:
            return []
        return [slot for slot in self._order.values() if self.ns_ids[slot] == ns_id]
