"""The arena: a float32 matrix and per-slot metadata, allocated once, never reallocated.

Only the store actor writes to an arena, and only between two snapshots. Readers get
read-only views of its arrays (``view_*``) and a :class:`Snapshot` that says which rows
were committed.

The memory bound (design §3). An open in-memory store holds at most

    STORE_CONSTANT + max_entries × (max_entry_bytes + dimensions × 4 + namespace
                                    + ENTRY_CONSTANT)

bytes, where ``namespace`` is the UTF-8 length of the longest namespace in use, once
the BM25 index has indexed the entries (its first hybrid or BM25 search does), plus
``max_entries × (BM25_BYTES_PER_TEXT_BYTE × max_entry_bytes + BM25_BYTES_PER_DOCUMENT)``
(``actors._retrieval.bm25``), and, for each metadata key a filter has named (at most
``MetadataIndex.max_columns``, 64), 13 bytes per slot and one str per distinct string
value of that key.

- ``max_entry_bytes`` bounds what each entry keeps (``protocol.checks.entry_bytes``):
  a message as exact-size msgpack, a plain ASCII turn as its text, a document's or
  index text as an ASCII str or UTF-8 bytes, metadata as its compact JSON bytes.
- :data:`ENTRY_CONSTANT` is the rest of an entry: its slot's bookkeeping (the sequence,
  namespace id, time, conversation code, position, flags and FIFO records in numpy,
  eight list slots, the filter's live flag: about 170 bytes, allocated at open), the
  object headers of what it keeps, its
  ``turn-<n>`` id, the msgpack framing of its message and first block, and, when the
  entry is the only one of its namespace, the namespace's bookkeeping (about 440 bytes
  with an id map and BM25 group statistics), and when it is the only live entry of its
  conversation, the conversation's bookkeeping (its name, which ``max_entry_bytes``
  counts, and a few list slots). Memory over time added, per slot, the version
  columns in numpy (valid_from, valid_to, expires, version, text hash: 36 bytes) and,
  for a current entry, its place in the text-hash index of exact dedupe (a dict entry
  and its int key: about 100 bytes), and, for a memory with closed versions, its list
  of them (about 150 bytes, which a closed version's own slot more than pays for).
  Measured with tracemalloc on hostile shapes (``tests/test_memory_bound.py``): at
  most 580 bytes before memory over time, 125 to 250 bytes more since; the constant
  leaves room.

Time and conversations. Every slot keeps its entry's ``occurred_at`` as int64
microseconds since the epoch (:attr:`Arena.occurred_us`, exact, as PostgreSQL's
``timestamptz`` keeps it), and an entry of a conversation its conversation's code and
its position there (:attr:`Arena.conv_codes`, :attr:`Arena.positions`; the rules are
``actors._inmemory.conversations``'). :meth:`Arena.neighbor_keys` and :meth:`Arena.time_mask`
are what reads use of them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from protocol import Role, projection
from protocol.checks import unpack_message, utf8_bytes

from .._retrieval.bm25 import Bm25Index
from .conversations import Conversations
from .filtering import MetadataIndex

__all__ = [
    "ENTRY_CONSTANT",
    "NEVER",
    "NO_TIME",
    "OPEN",
    "STORE_CONSTANT",
    "Arena",
    "Entries",
    "Snapshot",
    "from_micros",
    "keep_text",
    "kept_text",
    "micros",
]

#: The per-entry constant of the memory bound (see the module docstring), in bytes.
ENTRY_CONSTANT = 1024
#: The per-store constant of the memory bound (see the module docstring), in bytes.
STORE_CONSTANT = 64 * 1024


#: :attr:`Arena.occurred_us` of a free slot (no entry): below every time a datetime holds.
NO_TIME = int(np.iinfo(np.int64).min)
#: :attr:`Arena.valid_to_us` of a current version (and of a free slot): past every time.
OPEN = int(np.iinfo(np.int64).max)
#: :attr:`Arena.expires_us` of an entry that never expires (and of a free slot).
NEVER = OPEN
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def micros(when: dt.datetime) -> int:
    """An aware datetime as microseconds since the epoch (exact integer arithmetic)."""
    return (when - _EPOCH) // _MICROSECOND


def from_micros(us: int) -> dt.datetime:
    """The aware UTC datetime of :func:`micros`."""
    return _EPOCH + dt.timedelta(microseconds=us)


def keep_text(text: str) -> str | bytes:
    """How the arena keeps a text: an ASCII str as itself (its bytes plus a constant),
    any other as UTF-8 bytes (lone surrogates passed through). A non-ASCII str may
    take up to 4 bytes per character, plus a cached UTF-8 copy of itself, which the
    memory bound does not allow for."""
    return text if text.isascii() else utf8_bytes(text)


def kept_text(kept: str | bytes) -> str:
    """The text that :func:`keep_text` kept, exactly."""
    if isinstance(kept, str):
        return kept
    return kept.decode("utf-8", "surrogatepass")


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


@attrs.frozen
class Entries:
    """A validated, embedded batch, ready to commit into an arena.

    Attributes:
        vectors: ``[m, dimensions]`` float32, normalized (zero rows for zero norms), or
            to be normalized by ``scale``.
        zero: which rows had zero norm.
        texts: what BM25 indexes and documents return (a turn's projection).
        payloads: a turn's message as msgpack; None for a document, and for a plain
            turn (one Text block, no ``name`` or ``tool_call_id``), which is kept as
            its role and text.
        metadata: one JSON object per entry (a batch of turns shares one object). The
            arena keeps them by reference: nobody may mutate them afterwards.
        ids: one id per entry, or None for turns, whose id is ``turn-<sequence>``.
        source_ids: a document's source id, or None.
        namespace: every entry's namespace.
        source: every entry's source (``offload``, ``explicit``, ``document``...).
        derived_texts: every text is its turn's projection, so the arena keeps only
            the payload and derives the text from it (a turn stored with its own index
            text keeps both).
        roles: with no payload, the entry's message is one Text block of its text in
            this role: a plain turn's role; None (a document) stands for ``"user"``.
        ascii_texts: every text is known to be ASCII (then none needs converting for
            :func:`keep_text`).
        scale: None when ``vectors`` are normalized; else a ``[m, 1]`` float32 column,
            and the normalized rows are ``vectors * scale``, computed as they are
            written (see ``checked_rows`` in ``actors/_store/prepare.py``).
        occurred: each entry's ``occurred_at`` as :func:`micros`, or one value for
            the whole batch.
        conversations: each entry's conversation (or None), or None when none has one.
        index_texts: what BM25 indexes and the embedder embedded for each entry when
            the store derived it (``_index_text.derived_index_texts``), or None where the
            entry is indexed by its text; None for the whole batch when none is.
    """

    vectors: npt.NDArray[np.float32]
    zero: npt.NDArray[np.bool_]
    texts: list[str]
    payloads: Sequence[bytes | None]
    metadata: list[Mapping[str, object]]
    ids: list[str] | None
    source_ids: list[str | None]
    namespace: str
    source: str
    derived_texts: bool = False
    roles: Sequence[Role] | None = None
    ascii_texts: bool = False
    scale: npt.NDArray[np.float32] | None = None
    occurred: npt.NDArray[np.int64] | int = 0
    conversations: Sequence[str | None] | None = None
    index_texts: Sequence[str | None] | None = None
    expires: npt.NDArray[np.int64] | int = NEVER
    versions: npt.NDArray[np.int32] | int = 1
    valid_from: npt.NDArray[np.int64] | int | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, rows: Sequence[int]) -> Entries:
        """The entries at ``rows``, in that order (a batch without its duplicates)."""
        index = np.asarray(rows, dtype=np.intp)
        picked = list(rows)

        def column(value: npt.NDArray[G2] | int) -> npt.NDArray[G2] | int:
            return value if isinstance(value, int) else value[index]

        def items(values: Sequence[T2] | None) -> list[T2] | None:
            return None if values is None else [values[i] for i in picked]

        return attrs.evolve(
            self,
            vectors=self.vectors[index],
            zero=self.zero[index],
            texts=[self.texts[i] for i in picked],
            payloads=[self.payloads[i] for i in picked],
            metadata=[self.metadata[i] for i in picked],
            ids=items(self.ids),
            source_ids=[self.source_ids[i] for i in picked],
            roles=items(self.roles),
            scale=None if self.scale is None else self.scale[index],
            occurred=column(self.occurred),
            conversations=items(self.conversations),
            index_texts=items(self.index_texts),
            expires=column(self.expires),
            versions=column(self.versions),
            valid_from=None if self.valid_from is None else column(self.valid_from),
        )

    def normalized(self) -> npt.NDArray[np.float32]:
        """The normalized rows, in an array of their own when ``scale`` is set."""
        if self.scale is None:
            return self.vectors
        rows: npt.NDArray[np.float32] = self.vectors * self.scale
        return rows


G2 = TypeVar("G2", bound=np.generic)
T2 = TypeVar("T2")

_TWO_DIGITS = [f"{i:02d}" for i in range(100)]


def turn_ids(first: int, count: int) -> list[str]:
    """``[f"turn-{seq}" for seq in range(first, first + count)]``, a hundred at a time:
    consecutive sequences share all but their last two digits, so each hundred is one
    join and one split (7 us for 64 ids here, against 17 us formatting each one)."""
    if first < 100:
        return [f"turn-{seq}" for seq in range(first, first + count)]
    ids: list[str] = []
    seq, end = first, first + count
    while seq < end:
        hundreds, low = divmod(seq, 100)
        stop = min(end, (hundreds + 1) * 100)
        prefix = f"turn-{hundreds}"
        # One join and one split build the strings in C (a space is in no id).
        ids += (prefix + (" " + prefix).join(_TWO_DIGITS[low : low + stop - seq])).split(" ")
        seq = stop
    return ids


G = TypeVar("G", bound=np.generic)


def _readonly(arr: npt.NDArray[G]) -> npt.NDArray[G]:
    view = arr.view()
    view.flags.writeable = False
    return view


@attrs.define(eq=False)
class Arena:
    """Slots for ``capacity`` entries of ``dimensions`` floats.

    Free slots are reused first; when there is none, the oldest entry is evicted (FIFO
    by sequence number). Sequence numbers are never reused. An id is unique within its
    namespace: the same id in two namespaces is two entries.

    Besides the vectors, each slot keeps its text, the index text the store derived
    for it if any (:attr:`bm25` indexes that, or else the text), its metadata (indexed
    by :attr:`meta` for filters), its message payload for a turn, its source and source
    id, its time, and its conversation and position (see the module docstring). Both
    indexes are updated in the same synchronous step as the slot, so they always agree
    with the last commit.
    """

    capacity: int
    dimensions: int
    vectors: npt.NDArray[np.float32] = attrs.field(init=False)
    seqs: npt.NDArray[np.int64] = attrs.field(init=False)
    ns_ids: npt.NDArray[np.int32] = attrs.field(init=False)
    zero: npt.NDArray[np.bool_] = attrs.field(init=False)
    auto_id: npt.NDArray[np.bool_] = attrs.field(init=False)
    ids: list[str | None] = attrs.field(init=False)
    # A document's text, or a turn's index text when it has its own (see keep_text).
    texts: list[str | bytes | None] = attrs.field(init=False)
    payloads: list[bytes | None] = attrs.field(init=False)
    # The index text the store derived for the entry (see keep_text), or None: it is
    # indexed by its text. Reads never return it.
    index_texts: list[str | bytes | None] = attrs.field(init=False)
    # An entry without a payload is a message of one Text block, its text, in this role
    # (None: "user"); see Entries.
    roles: list[Role | None] = attrs.field(init=False)
    # Per slot: occurred_at as micros() (NO_TIME when free); the conversation's code
    # (0: none, or free) and the entry's position in it (0: none), which are the
    # arrays of ``conversations``.
    occurred_us: npt.NDArray[np.int64] = attrs.field(init=False)
    conv_codes: npt.NDArray[np.int64] = attrs.field(init=False)
    positions: npt.NDArray[np.int64] = attrs.field(init=False)
    conversations: Conversations = attrs.field(init=False)
    sources: list[str | None] = attrs.field(init=False)
    source_ids: list[str | None] = attrs.field(init=False)
    # Per slot, the version bookkeeping (docs/pages/how-to/memory-over-time.md): when the version
    # became valid (NO_TIME when free) and stopped being (OPEN: current, or free), when
    # it expires (NEVER: never, or free), its version number (0: free), and the hash of
    # its text (``hash(text)``, for exact dedupe; 0 when free).
    valid_from_us: npt.NDArray[np.int64] = attrs.field(init=False)
    valid_to_us: npt.NDArray[np.int64] = attrs.field(init=False)
    expires_us: npt.NDArray[np.int64] = attrs.field(init=False)
    versions: npt.NDArray[np.int32] = attrs.field(init=False)
    text_hash: npt.NDArray[np.int64] = attrs.field(init=False)
    # How many held entries are closed versions, and how many expire: with neither
    # (and no as_of) a read builds no visibility mask.
    closed_total: int = 0
    expiring_total: int = 0
    # The earliest expiry held (micros), or None when it must be found again.
    _next_expiry: int | None = NEVER
    # namespace -> id -> the slots of its closed versions, oldest first.
    _closed: dict[str, dict[str, list[int]]] = attrs.field(factory=dict)
    # text hash -> the slot of a current entry with that text (the last written); the
    # hashes some other current entry shares are in _hash_shared, and looked up in
    # text_hash when the one slot does not do.
    _hash_slot: dict[int, int] = attrs.field(factory=dict)
    _hash_shared: set[int] = attrs.field(factory=set)
    _bm25: Bm25Index = attrs.field(init=False)
    meta: MetadataIndex = attrs.field(init=False)
    # slot -> True to (re)index the slot's current entry, False to unindex; see bm25().
    _bm25_pending: dict[int, bool] = attrs.field(factory=dict)
    high: int = 0
    next_seq: int = 0
    evicted_total: int = 0
    zero_count: int = 0
    _free: list[int] = attrs.field(factory=list)
    # The FIFO eviction order: _fifo_slots[_head:_tail] are slots in the order their
    # entries were written (ascending sequence), _fifo_seqs the sequences they got. An
    # entry removed or evicted since is not taken out: it is stale (the slot's sequence
    # is no longer the recorded one) and skipped. A batch appends with two slice writes
    # and evicts with a slice read, where an OrderedDict cost one operation per entry.
    # Twice the capacity, compacted when full, so it is bounded.
    _fifo_slots: npt.NDArray[np.intp] = attrs.field(init=False)
    _fifo_seqs: npt.NDArray[np.int64] = attrs.field(init=False)
    _head: int = 0
    _tail: int = 0
    # How many records in _fifo_*[_head:_tail] are stale: with none, the oldest live
    # entries are simply the next records, read without checking each one.
    _stale: int = 0
    _live: int = 0
    # How many live entries have an explicit id (are in _id_slot): with none, an
    # eviction has no id-map entry to forget.
    _named: int = 0
    # namespace -> id -> slot for every live entry with an explicit id: one dict per
    # namespace, so a batch's ids go in with one bulk update and no key tuples. A turn
    # stored without ids (``turn-<sequence>``, flagged in ``auto_id``) is not in it: its
    # id is found from its sequence (see slot_of), which spares every such batch a map
    # insert and every eviction a map delete per entry.
    _id_slot: dict[str, dict[str, int]] = attrs.field(factory=dict)
    _ns_index: dict[str, int] = attrs.field(factory=dict)
    _ns_names: list[str | None] = attrs.field(factory=list)
    _ns_counts: list[int] = attrs.field(factory=list)
    # Closed versions per namespace id: a read of a namespace without any (and with
    # nothing expired, and no as_of) builds no visibility mask.
    _ns_closed: list[int] = attrs.field(factory=list)
    _ns_free: list[int] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        n, d = self.capacity, self.dimensions
        self.vectors = np.zeros((n, d), dtype=np.float32)
        self.seqs = np.full(n, -1, dtype=np.int64)
        self.ns_ids = np.full(n, -1, dtype=np.int32)
        self.zero = np.zeros(n, dtype=np.bool_)
        self.auto_id = np.zeros(n, dtype=np.bool_)
        self.occurred_us = np.full(n, NO_TIME, dtype=np.int64)
        self.conversations = Conversations(n)
        self.conv_codes = self.conversations.codes
        self.positions = self.conversations.positions
        self._fifo_slots = np.zeros(2 * n, dtype=np.intp)
        self._fifo_seqs = np.zeros(2 * n, dtype=np.int64)
        self.ids = [None] * n
        self.texts = [None] * n
        self.index_texts = [None] * n
        self.payloads = [None] * n
        self.roles = [None] * n
        self.sources = [None] * n
        self.source_ids = [None] * n
        self.valid_from_us = np.full(n, NO_TIME, dtype=np.int64)
        self.valid_to_us = np.full(n, OPEN, dtype=np.int64)
        self.expires_us = np.full(n, NEVER, dtype=np.int64)
        self.versions = np.zeros(n, dtype=np.int32)
        self.text_hash = np.zeros(n, dtype=np.int64)
        self._bm25 = Bm25Index(n)
        self.meta = MetadataIndex(n)

    # --- reads -------------------------------------------------------------------------

    def readonly_views(
        self,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """Read-only views of the vectors, sequences and namespace ids."""
        return _readonly(self.vectors), _readonly(self.seqs), _readonly(self.ns_ids)

    def __len__(self) -> int:
        return self._live

    def namespace_id(self, namespace: str) -> int | None:
        return self._ns_index.get(namespace)

    def namespace_of(self, slot: int) -> str:
        name = self._ns_names[int(self.ns_ids[slot])]
        assert name is not None
        return name

    def namespaces_of(self, slots: npt.NDArray[np.intp]) -> list[str | None]:
        """The namespace of each live entry in ``slots``, read in one go (for hits)."""
        names = self._ns_names
        return [names[ns_id] for ns_id in self.ns_ids[slots].tolist()]

    def slot_of(self, namespace: str, entry_id: str) -> int | None:
        """The slot of the live entry ``entry_id`` in ``namespace``, if any (an
        explicit id first, then a turn's ``turn-<sequence>``)."""
        slots = self._id_slot.get(namespace)
        slot = None if slots is None else slots.get(entry_id)
        if slot is None and entry_id.startswith("turn-"):
            return self._turn_slot(namespace, entry_id[5:])
        return slot

    def _turn_slot(self, namespace: str, digits: str) -> int | None:
        """The slot of the live turn of ``namespace`` stored without an id whose
        sequence ``digits`` spell (as ``str(sequence)`` does), if any."""
        # Sequences are int64: 19 digits at most (and int() of a huge string raises).
        if not (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit()):
            return None
        if digits != str(int(digits)):  # no leading zero: not the id of any turn
            return None
        ns_id = self._ns_index.get(namespace)
        if ns_id is None:
            return None
        seq = int(digits)
        # The FIFO order holds every live entry's sequence, ascending.
        recorded = self._fifo_seqs[self._head : self._tail]
        at = int(np.searchsorted(recorded, seq))
        if at == len(recorded) or recorded[at] != seq:
            return None
        slot = int(self._fifo_slots[self._head + at])
        if self.seqs[slot] != seq or self.ns_ids[slot] != ns_id or not self.auto_id[slot]:
            return None
        return slot

    def bm25(self) -> Bm25Index:
        """The BM25 index, as of the last commit.

        A commit only records which slots changed (O(1) per entry, at most one record per
        slot), so writes do not pay for tokenizing; the changes are applied here, on the
        trio thread, before any BM25 read. Between two commits the result is the same as
        indexing at commit.
        """
        if self._bm25_pending:
            bm25 = self._bm25
            # A slot's record is its last change, and the slot still holds the entry that
            # change wrote, so its text and namespace are read from the slot itself.
            for slot, index in self._bm25_pending.items():
                if index:
                    bm25.add(slot, self.index_text_of(slot), group=int(self.ns_ids[slot]))
                else:
                    bm25.remove(slot)
            self._bm25_pending.clear()
        return self._bm25

    def text_of(self, slot: int) -> str:
        """The live entry's text: a document's own, a turn's index text when it was
        stored with one, or else its projection (derived from its payload, so a turn's
        text is not stored twice)."""
        text = self.texts[slot]
        if text is not None:
            return kept_text(text)
        payload = self.payloads[slot]
        assert payload is not None, f"slot {slot} is free"
        return projection(unpack_message(payload))

    def index_text_of(self, slot: int) -> str:
        """What the live entry is indexed by (BM25) and was embedded by: the index text
        the store derived for it, or else :meth:`text_of`."""
        index = self.index_texts[slot]
        return self.text_of(slot) if index is None else kept_text(index)

    def occurred_at_of(self, slot: int) -> dt.datetime:
        """The live entry's ``occurred_at``, an aware UTC datetime."""
        return from_micros(int(self.occurred_us[slot]))

    def conversation_of(self, slot: int) -> str | None:
        """The live entry's conversation, or None."""
        return self.conversations.name_of(slot)

    def conversations_of(self, slots: Sequence[int]) -> list[str | None]:
        """:meth:`conversation_of` of each slot, read in one go (for hits)."""
        return self.conversations.names_of(slots)

    def neighbor_keys(self, slots: npt.NDArray[np.intp] | Sequence[int]) -> npt.NDArray[np.int64]:
        """One int64 key per live slot of ``slots``, such that two live entries of one
        namespace are neighbours (consecutive in their conversation) exactly when
        their keys differ by 1.

        An entry of a conversation has ``(code << CONVERSATION_SHIFT) | position``
        (``actors._inmemory.conversations``): its conversation's code (>= 1, one per live
        (namespace, conversation)) and its position (1, 2, 3... in commit order, never
        given twice, so an entry deleted from the middle leaves a gap and its two sides
        are no neighbours). An entry without one has its sequence number, below
        ``1 << CONVERSATION_SHIFT`` (so never a conversation entry's neighbour):
        consecutive sequences are entries written one after the other, in any
        namespace, so compare the keys of one namespace's entries only. A new array.
        """
        return self.conversations.neighbor_keys(slots, self.seqs)

    def time_mask(
        self, since: dt.datetime | None, until: dt.datetime | None, high: int | None = None
    ) -> npt.NDArray[np.bool_]:
        """A bool per slot of ``[0, high)`` (``high``: :attr:`high` when None): the slot
        holds a live entry with ``since <= occurred_at < until`` (either bound may be
        None, for no bound there). Free slots are False. A new array (the caller may
        combine it in place)."""
        end = self.high if high is None else high
        occurred = self.occurred_us[:end]
        mask: npt.NDArray[np.bool_] = occurred != NO_TIME
        if since is not None:
            mask &= occurred >= micros(since)
        if until is not None:
            mask &= occurred < micros(until)
        return mask

    def newest_in(
        self, namespace: str, conversation: str, leaving_out: Sequence[int] = ()
    ) -> int | None:
        """The slot of the newest live entry (highest position) of ``conversation`` in
        ``namespace``, slots ``leaving_out`` left out (a batch's replaced entries), or
        None: the predecessor of the conversation's next entry."""
        return self.conversations.newest(
            namespace, conversation, self.seqs, self.high, leaving_out
        )

    def metadata_of(self, slot: int) -> Mapping[str, object]:
        metadata = self.meta.get(slot)
        assert metadata is not None, f"slot {slot} is free"
        return metadata

    def snapshot(self, version: int) -> Snapshot:
        counts = {
            name: count
            for name, count in zip(self._ns_names, self._ns_counts, strict=True)
            if name is not None
        }
        return Snapshot(
            version=version,
            high=self.high,
            live=self._live,
            dense=self._live == self.high,
            namespace_counts=counts,
        )

    # --- writes (store actor only) -----------------------------------------------------

    def take_slots(self, count: int) -> tuple[list[int], int]:
        """Pick ``count`` slots for new entries, evicting the oldest where needed.

        Free slots go first (the most recently freed first), then never-used rows, then
        the oldest live entries. Returns the slots and how many live entries were
        evicted. ``count`` must not exceed the capacity.
        """
        free = self._free
        take = min(count, len(free))
        slots = free[len(free) - take :][::-1]
        del free[len(free) - take :]
        fresh = min(count - take, self.capacity - self.high)
        if fresh > 0:
            slots.extend(range(self.high, self.high + fresh))
            self.high += fresh
        evicted = count - len(slots)
        if evicted:
            victims = self._oldest(evicted)
            self._release_reused(victims)
            slots.extend(victims.tolist())
            self.evicted_total += evicted
        return slots, evicted

    def write(self, slots: list[int], entries: Entries) -> tuple[list[str], list[int]]:
        """Fill ``slots`` with ``entries`` and give each the next sequence number.

        The caller has made sure that no id of ``entries`` is live in its namespace
        (an upsert removes the old entry first).
        """
        count = len(slots)
        first = self.next_seq
        seqs = range(first, first + count)
        ids = turn_ids(first, count) if entries.ids is None else entries.ids
        index_texts: Sequence[str | bytes | None] = (
            [None] * count
            if entries.index_texts is None
            else [None if t is None else keep_text(t) for t in entries.index_texts]
        )
        # A turn's text is usually its payload's projection: then keep it once.
        texts: Sequence[str | bytes | None]
        if entries.derived_texts:
            texts = [None] * count
        elif entries.ascii_texts or all(map(str.isascii, entries.texts)):
            texts = entries.texts
        else:
            texts = [keep_text(text) for text in entries.texts]
        roles: Sequence[Role | None] = [None] * count if entries.roles is None else entries.roles
        if not (
            len(ids) == len(texts) == len(entries.payloads) == len(roles) == count
            and len(entries.source_ids) == len(entries.metadata) == len(entries.vectors) == count
            and len(index_texts) == count
            and (entries.conversations is None or len(entries.conversations) == count)
        ):
            raise ValueError(f"a batch of {len(entries)} entries for {count} slots")
        if not count:
            self.settle()
            return [], []
        self.next_seq = first + count
        start = slots[0]
        # Slots taken from never-used rows or by evicting a full arena's oldest entries
        # come out consecutive: then every per-slot column is written as one slice.
        consecutive = slots[-1] - start == count - 1 and slots == list(range(start, start + count))
        where: slice | npt.NDArray[np.intp] = (
            slice(start, start + count) if consecutive else np.asarray(slots, dtype=np.intp)
        )
        if entries.scale is None:
            self.vectors[where] = entries.vectors
        elif isinstance(where, slice):
            # Normalized straight into the arena: the batch is written once, not twice.
            np.multiply(entries.vectors, entries.scale, out=self.vectors[where])
        else:
            self.vectors[where] = entries.normalized()
        new_seqs = np.arange(first, first + count, dtype=np.int64)
        self.seqs[where] = new_seqs
        namespace = entries.namespace
        ns_id = self._intern(namespace, count)
        self.ns_ids[where] = ns_id
        self.zero[where] = entries.zero
        self.zero_count += int(np.count_nonzero(entries.zero))
        self.auto_id[where] = entries.ids is None
        self.occurred_us[where] = entries.occurred
        self.valid_from_us[where] = (
            entries.occurred if entries.valid_from is None else entries.valid_from
        )
        self.valid_to_us[where] = OPEN
        self.expires_us[where] = entries.expires
        self.versions[where] = entries.versions
        hashes = list(map(hash, entries.texts))
        self.text_hash[where] = hashes
        self._index_hashes(hashes, slots)
        expires = entries.expires
        if isinstance(expires, int):
            if expires != NEVER:
                self.expiring_total += count
                self._lower_next_expiry(expires)
        else:
            expiring = expires != NEVER
            if expiring.any():
                self.expiring_total += int(np.count_nonzero(expiring))
                self._lower_next_expiry(int(expires.min()))
        self.conversations.place(where, namespace, entries.conversations, slots, first)
        self.meta.set_many(slots, entries.metadata, consecutive=consecutive)
        if consecutive:
            end = start + count
            self.ids[start:end] = ids
            self.texts[start:end] = texts
            self.index_texts[start:end] = index_texts
            self.payloads[start:end] = entries.payloads
            self.roles[start:end] = roles
            self.sources[start:end] = [entries.source] * count
            self.source_ids[start:end] = entries.source_ids
        else:
            for slot, entry_id, text, index_text, payload, role, source_id in zip(
                slots,
                ids,
                texts,
                index_texts,
                entries.payloads,
                roles,
                entries.source_ids,
                strict=True,
            ):
                self.ids[slot] = entry_id
                self.texts[slot] = text
                self.index_texts[slot] = index_text
                self.payloads[slot] = payload
                self.roles[slot] = role
                self.sources[slot] = entries.source
                self.source_ids[slot] = source_id
        pending = self._bm25_pending
        for slot in slots:  # measured faster than any bulk dict update here
            pending[slot] = True
        self._append_fifo(where, new_seqs)
        self._live += count
        explicit = self._id_slot.setdefault(namespace, {})
        if entries.ids is not None:
            explicit.update(zip(ids, slots, strict=True))
            self._named += count
        self.settle()
        return ids, list(seqs)

    def settle(self) -> None:
        """End a commit: forget the conversations it left without a live entry
        (``Conversations.settle``). :meth:`write` calls it; a commit that only removes
        entries calls it after its last :meth:`remove`."""
        self.conversations.settle()

    def remove(self, slot: int) -> None:
        """Delete the live entry in ``slot``; the slot is reused by a later write.
        Call :meth:`settle` once the commit's removals are done."""
        self._release(slot)

    def _release(self, slot: int) -> None:
        """Drop the live entry in ``slot`` and free the slot."""
        ns_id = int(self.ns_ids[slot])
        self._unbook(slot, ns_id)
        if self.zero[slot]:
            self.zero_count -= 1
        self._uncount(ns_id, 1)
        self._live -= 1
        self._bm25_pending[slot] = False
        self._stale += 1  # the slot's FIFO record no longer names a live entry
        self.meta.remove(slot)
        self.conversations.release(slice(slot, slot + 1))
        self.occurred_us[slot] = NO_TIME
        self.valid_from_us[slot] = NO_TIME
        self.valid_to_us[slot] = OPEN
        self.expires_us[slot] = NEVER
        self.versions[slot] = 0
        self.text_hash[slot] = 0
        self.zero[slot] = False
        self.auto_id[slot] = False
        self.seqs[slot] = -1
        self.ns_ids[slot] = -1
        self.ids[slot] = None
        self.texts[slot] = None
        self.index_texts[slot] = None
        self.payloads[slot] = None
        self.roles[slot] = None
        self.sources[slot] = None
        self.source_ids[slot] = None
        self._free.append(slot)

    def _release_reused(self, index: npt.NDArray[np.intp]) -> None:
        """Drop the live entries in slots ``index``, which the caller refills in the
        same commit: that overwrites every per-slot field, so only the shared
        bookkeeping (id map, counts) is undone here, for the whole batch at once."""
        self._live -= len(index)
        # Each check below is skipped when the arena's totals say it finds nothing (no
        # zero-norm entry, no explicit id, one namespace): a batch evicting from a full
        # arena then does no per-slot reads at all.
        if self.zero_count:
            self.zero_count -= int(np.count_nonzero(self.zero[index]))
        self.conversations.release(index)
        if self._named:
            explicit = ~self.auto_id[index]
            if explicit.any():
                ns_ids = self.ns_ids[index[explicit]].tolist()
                for ns_id, slot in zip(ns_ids, index[explicit].tolist(), strict=True):
                    self._forget_slot_id(slot, ns_id)
        # The hash index and the version counts, slot by slot (a Python loop over the
        # evicted batch: a few dict operations each).
        hash_slot = self._hash_slot
        closed = self.valid_to_us
        for slot, h in zip(index.tolist(), self.text_hash[index].tolist(), strict=True):
            if closed[slot] == OPEN and hash_slot.get(h) == slot:
                self._unindex_hash(slot, h)
        if self.expiring_total:
            gone = int(np.count_nonzero(self.expires_us[index] != NEVER))
            if gone:
                self.expiring_total -= gone
                self._next_expiry = None
        if len(self._ns_index) == 1:
            (only,) = self._ns_index.values()
            self._uncount(only, len(index))
            return
        ns = self.ns_ids[index]
        first = int(ns[0])
        if bool((ns == first).all()):
            self._uncount(first, len(index))
            return
        for ns_id in ns.tolist():
            self._uncount(ns_id, 1)

    def _unbook(self, slot: int, ns_id: int) -> None:
        """Take the entry in ``slot`` out of the id map (or its closed versions), the
        hash index and the expiry count, before its slot is freed."""
        if not self.auto_id[slot]:
            self._forget_slot_id(slot, ns_id)
        if self.valid_to_us[slot] == OPEN:
            h = int(self.text_hash[slot])
            if self._hash_slot.get(h) == slot:
                self._unindex_hash(slot, h)
        if self.expires_us[slot] != NEVER:
            self.expiring_total -= 1
            self._next_expiry = None

    def _forget_slot_id(self, slot: int, ns_id: int) -> None:
        """Take the explicit-id entry in ``slot`` out of its namespace's id map, or, for
        a closed version, out of its memory's closed versions."""
        if self.valid_to_us[slot] == OPEN:
            self._forget_ids(ns_id, [self.ids[slot]])
            return
        name = self._ns_names[ns_id]
        entry_id = self.ids[slot]
        assert name is not None
        assert entry_id is not None
        held = self._closed[name]
        versions = held[entry_id]
        versions.remove(slot)
        if not versions:
            del held[entry_id]
        self.closed_total -= 1
        self._ns_closed[ns_id] -= 1
        self._named -= 1

    def _index_hashes(self, hashes: list[int], slots: list[int]) -> None:
        """Index the current entries just written in ``slots`` by their texts' hashes."""
        hash_slot, shared = self._hash_slot, self._hash_shared
        for h, slot in zip(hashes, slots, strict=True):
            if h in hash_slot:
                shared.add(h)
            hash_slot[h] = slot

    def _unindex_hash(self, slot: int, h: int) -> None:
        """``slot`` (indexed under ``h``) leaves the hash index; another current entry
        with the same hash, if any, takes its place."""
        if h not in self._hash_shared:
            del self._hash_slot[h]
            return
        others = self.hash_matches(h, leaving_out=slot)
        if not others:
            del self._hash_slot[h]
            self._hash_shared.discard(h)
        else:
            self._hash_slot[h] = others[-1]
            if len(others) == 1:
                self._hash_shared.discard(h)

    def hash_matches(self, h: int, leaving_out: int = -1) -> list[int]:
        """The current entries whose text hashes to ``h`` (but ``leaving_out``)."""
        if h not in self._hash_shared:
            slot = self._hash_slot.get(h)
            return [] if slot is None or slot == leaving_out else [slot]
        end = self.high
        found = np.flatnonzero(
            (self.text_hash[:end] == h) & (self.valid_to_us[:end] == OPEN) & (self.seqs[:end] >= 0)
        ).tolist()
        return [slot for slot in found if slot != leaving_out]

    def _lower_next_expiry(self, expires: int) -> None:
        if self._next_expiry is not None and expires < self._next_expiry:
            self._next_expiry = expires

    def next_expiry(self) -> int:
        """The earliest expiry held, as micros (:data:`NEVER`: none)."""
        if not self.expiring_total:
            self._next_expiry = NEVER
            return NEVER
        if self._next_expiry is None:
            self._next_expiry = int(self.expires_us[: self.high].min())
        return self._next_expiry

    def expired_slots(self, now_us: int, limit: int) -> list[int]:
        """At most ``limit`` held entries expired at ``now_us``, oldest expiry first."""
        if self.next_expiry() > now_us:
            return []
        found = np.flatnonzero(self.expires_us[: self.high] <= now_us)
        if len(found) > limit:
            found = found[np.argsort(self.expires_us[found], kind="stable")[:limit]]
        return list(found.tolist())

    def close(self, slot: int, valid_to: int) -> None:
        """Close the current version in ``slot`` at ``valid_to`` (micros): it stays,
        as history, out of the id map and the hash index."""
        ns_id = int(self.ns_ids[slot])
        name = self._ns_names[ns_id]
        entry_id = self.ids[slot]
        assert name is not None
        assert entry_id is not None
        h = int(self.text_hash[slot])
        if self._hash_slot.get(h) == slot:
            self._unindex_hash(slot, h)
        if self.auto_id[slot]:
            self.auto_id[slot] = False
            self._named += 1
        else:
            del self._id_slot[name][entry_id]
        self.valid_to_us[slot] = valid_to
        self._closed.setdefault(name, {}).setdefault(entry_id, []).append(slot)
        self.closed_total += 1
        self._ns_closed[ns_id] += 1

    def closed_of(self, namespace: str, entry_id: str) -> list[int]:
        """The slots of memory ``entry_id``'s closed versions in ``namespace``, oldest
        first."""
        held = self._closed.get(namespace)
        return [] if held is None else list(held.get(entry_id, ()))

    def versions_of(self, namespace: str, entry_id: str) -> list[int]:
        """Every held version of memory ``entry_id`` in ``namespace``, oldest first."""
        slots = self.closed_of(namespace, entry_id)
        current = self.slot_of(namespace, entry_id)
        if current is not None:
            slots.append(current)
        versions = self.versions
        return sorted(slots, key=lambda slot: int(versions[slot]))

    def held_ids(self, namespace: str) -> list[str]:
        """The ids of every memory of ``namespace`` with a closed version."""
        held = self._closed.get(namespace)
        return [] if held is None else list(held)

    def visible(
        self,
        high: int,
        now_us: int,
        as_of_us: int | None = None,
        namespace: str | None = None,
    ) -> npt.NDArray[np.bool_] | None:
        """A bool per slot of ``[0, high)``: the slot holds an entry a read sees at
        ``now_us`` (current, or with ``as_of_us`` the version valid then, unexpired),
        or None when every held entry of ``namespace`` (None: of every namespace) is
        (no closed version there, none expired, no as_of): then a read needs no mask."""
        if as_of_us is None and self.next_expiry() > now_us:
            if namespace is None:
                closed = self.closed_total
            else:
                ns_id = self._ns_index.get(namespace)
                closed = 0 if ns_id is None else self._ns_closed[ns_id]
            if not closed:
                return None
        if as_of_us is None:
            mask: npt.NDArray[np.bool_] = self.valid_to_us[:high] == OPEN
        else:
            mask = (self.valid_from_us[:high] <= as_of_us) & (self.valid_to_us[:high] > as_of_us)
        mask &= self.seqs[:high] >= 0
        if self.expiring_total:
            mask &= self.expires_us[:high] > now_us
        return mask

    def reindex(self, slot: int, index_text: str | None) -> None:
        """Give the entry in ``slot`` a new index text (None: its own text), in the
        BM25 index at once where it is already indexed (a forget rewrites what quoted
        a forgotten predecessor)."""
        self.index_texts[slot] = None if index_text is None else keep_text(index_text)
        if slot in self._bm25:
            self._bm25.add(slot, self.index_text_of(slot), group=int(self.ns_ids[slot]))
            self._bm25_pending.pop(slot, None)

    def conversation_members(self, code: int) -> list[int]:
        """The held slots of the conversation with ``code``, by position."""
        end = self.high
        found = np.flatnonzero(self.conv_codes[:end] == code)
        order = np.argsort(self.positions[found], kind="stable")
        return list(found[order].tolist())

    def flush_removals(self) -> None:
        """Apply the BM25 index's pending removals now (a forget leaves no posting or
        statistic of what it removed); pending additions wait for the next read."""
        pending = self._bm25_pending
        removed = [slot for slot, index in pending.items() if not index]
        for slot in removed:
            if slot in self._bm25:
                self._bm25.remove(slot)
            del pending[slot]

    def _forget_ids(self, ns_id: int, entry_ids: list[str | None]) -> None:
        name = self._ns_names[ns_id]
        assert name is not None
        live = self._id_slot[name]
        for entry_id in entry_ids:
            assert entry_id is not None
            del live[entry_id]
        self._named -= len(entry_ids)

    def _uncount(self, ns_id: int, count: int) -> None:
        """``count`` entries of namespace ``ns_id`` are gone; forget a namespace that
        has none left, so that a stream of namespaces does not grow the bookkeeping."""
        self._ns_counts[ns_id] -= count
        if self._ns_counts[ns_id] == 0:
            name = self._ns_names[ns_id]
            assert name is not None
            del self._ns_index[name]
            del self._id_slot[name]
            self._closed.pop(name, None)
            self._ns_names[ns_id] = None
            self._ns_free.append(ns_id)

    def _intern(self, namespace: str, count: int) -> int:
        ns_id = self._ns_index.get(namespace)
        if ns_id is None:
            if self._ns_free:
                ns_id = self._ns_free.pop()
                self._ns_names[ns_id] = namespace
                self._ns_counts[ns_id] = 0
                self._ns_closed[ns_id] = 0
            else:
                ns_id = len(self._ns_names)
                self._ns_names.append(namespace)
                self._ns_counts.append(0)
                self._ns_closed.append(0)
            self._ns_index[namespace] = ns_id
        self._ns_counts[ns_id] += count
        return ns_id

    def live_slots(self, namespace: str | None = None) -> list[int]:
        """Live slots, oldest first, optionally of one namespace."""
        slots = self._fifo_slots[self._head : self._tail]
        live = self.seqs[slots] == self._fifo_seqs[self._head : self._tail]
        if namespace is not None:
            ns_id = self._ns_index.get(namespace)
            if ns_id is None:
                return []
            live &= self.ns_ids[slots] == ns_id
        return list(slots[live].tolist())

    def _append_fifo(
        self, where: slice | npt.NDArray[np.intp], new_seqs: npt.NDArray[np.int64]
    ) -> None:
        """Record that ``where`` got sequences ``new_seqs`` (after ``seqs`` is set)."""
        count = len(new_seqs)
        if self._tail + count > len(self._fifo_slots):
            # At most capacity - count of the recorded entries are still live, so this
            # leaves room for the batch.
            head, tail = self._head, self._tail
            slots, seqs = self._fifo_slots[head:tail], self._fifo_seqs[head:tail]
            live = self.seqs[slots] == seqs
            kept = int(np.count_nonzero(live))
            self._fifo_slots[:kept] = slots[live]
            self._fifo_seqs[:kept] = seqs[live]
            self._head, self._tail, self._stale = 0, kept, 0
        tail = self._tail
        if isinstance(where, slice):
            self._fifo_slots[tail : tail + count] = np.arange(where.start, where.stop)
        else:
            self._fifo_slots[tail : tail + count] = where
        self._fifo_seqs[tail : tail + count] = new_seqs
        self._tail = tail + count

    def _oldest(self, count: int) -> npt.NDArray[np.intp]:
        """Take the ``count`` oldest live entries' slots out of the FIFO order (there
        must be that many)."""
        fifo_slots, fifo_seqs, seqs = self._fifo_slots, self._fifo_seqs, self.seqs
        head, tail = self._head, self._tail
        if not self._stale:
            # The common case: no stale record, so the next ``count`` are live.
            assert head + count <= tail, "fewer live entries than asked for"
            self._head = head + count
            return fifo_slots[head : head + count].copy()
        taken: list[npt.NDArray[np.intp]] = []
        need, at, window = count, head, max(count, 64)
        while need:
            assert at < tail, "fewer live entries than asked for"
            end = min(at + window, tail)
            slots = fifo_slots[at:end]
            live = np.flatnonzero(seqs[slots] == fifo_seqs[at:end])
            if len(live) >= need:
                taken.append(slots[live[:need]])
                at += int(live[need - 1]) + 1
                need = 0
            else:
                taken.append(slots[live])
                need -= len(live)
                at += len(slots)
                window *= 2
        self._stale -= (at - head) - count  # the stale records skipped
        self._head = at
        return np.concatenate(taken)
