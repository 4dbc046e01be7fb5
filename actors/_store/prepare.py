"""The checks every store backend runs on a write before it changes anything.

Both stores (the in-memory arena and PostgreSQL) validate a batch the same way, in the
same order, with the same errors; this module is the one place those rules live. A
backend adds only what it alone cannot hold (PostgreSQL text cannot hold a NUL, say).

What ``max_entry_bytes`` counts, and the longest id and namespace, are
:mod:`protocol.checks`' rule (``protocol._sizes``), which this module applies.

The memory an in-memory store holds is then bounded as ``actors._inmemory.arena`` says
(:data:`actors._inmemory.arena.ENTRY_CONSTANT`).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs
import msgspec
import numpy as np
import numpy.typing as npt

from protocol import (
    ROLES,
    ConfigError,
    Document,
    EmbeddingError,
    EntryTooLarge,
    Role,
    Text,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreError,
    payload_bytes,
    projection,
)
from protocol.checks import (
    BLOCK_OVERHEAD,
    MAX_ID_BYTES,
    MAX_NAMESPACE_BYTES,
    arguments_surplus,
    check_conversation,
    check_filter,
    check_int,
    check_json_object,
    check_time,
    document_bytes,
    filter_option,
    metadata_json,
    name_bytes,
    pack,
    shown,
    unpack_metadata,
    utf8_bytes,
)
from protocol.messages import Dedupe, Forget, StoreTurns, UpsertDocuments

from .._embedding.adapter import as_matrix, normalize_rows

__all__ = [
    "NEAR_DUPLICATE_COSINE",
    "Clock",
    "DocumentBatch",
    "TurnBatch",
    "check_clock",
    "check_dedupe",
    "check_documents",
    "check_expiry",
    "check_forget",
    "check_ids",
    "check_k",
    "check_name",
    "check_name_size",
    "check_not_reserved",
    "check_store_config",
    "check_turns",
    "checked_rows",
    "clamp_k",
    "clock_now",
    "default_clock",
    "expiry_of",
    "metadata_from_json",
    "exact_msgpack",
    "exact_msgpack_many",
    "private_json",
    "turns_request",
]

_ENCODER = msgspec.msgpack.Encoder()
_JSON_ENCODER = msgspec.json.Encoder()
_RAW_LIST_DECODER = msgspec.msgpack.Decoder(list[msgspec.Raw])
_METADATA_DECODER = msgspec.msgpack.Decoder(dict[str, Any])
_JSON_DICT_DECODER = msgspec.json.Decoder(dict[str, Any])
_EMPTY_DICT: dict[str, Any] = {}

#: The cosine similarity at or above which ``dedupe="near"`` takes a new memory for a
#: current one (``near_threshold`` overrides it per call). Measured with MiniLM on 133
#: labelled pairs and 2,760 LoCoMo turns (``benches/near_duplicates.py``;
#: docs/pages/benchmarks/memory-over-time.md, "Near duplicates"): a changed fact
#: ("555-0142" / "555-0198") scores up to 0.986 and a paraphrase at most 0.981, so 0.99
#: is the one value that takes no changed fact for a duplicate; it catches trivial edits
#: (case, punctuation, contractions), not paraphrases, which need a judge
#: (``actors.LlmConsolidator``).
NEAR_DUPLICATE_COSINE = 0.99

#: A store's clock: a zero-argument callable returning an aware datetime. Every "now"
#: of a store (a ``ttl``, ``update``'s default ``valid_from``, expiry on reads and the
#: reclaim of expired entries) comes from it, so a test advances a fake clock instead
#: of sleeping.
Clock = Callable[[], dt.datetime]

#: The fields of a :class:`~protocol.Document` that only the store sets (reads return
#: them); a write that sets one is refused.
STORE_SET_FIELDS = ("valid_from", "valid_to", "version", "supersedes")


def default_clock() -> dt.datetime:
    """The default store clock: now, in UTC."""
    return dt.datetime.now(dt.UTC)


def check_clock(clock: object) -> Clock:
    """``clock`` (None: :func:`default_clock`) as a store's clock.

    Raises:
        ConfigError: not None and not callable.
    """
    if clock is None:
        return default_clock
    if not callable(clock):
        raise ConfigError(
            f"clock is {clock!r:.60} ({type(clock).__name__}); expected None or a "
            "zero-argument callable returning an aware datetime"
        )
    return cast(Clock, clock)


def clock_now(clock: Clock) -> dt.datetime:
    """The store clock's now, checked, in UTC.

    Raises:
        ConfigError: the clock returned something other than an aware datetime.
    """
    now = clock()
    if not isinstance(now, dt.datetime) or now.tzinfo is None or now.tzinfo.utcoffset(now) is None:
        raise ConfigError(
            f"the store clock returned {now!r:.60} ({type(now).__name__}); expected an "
            "aware datetime.datetime"
        )
    return now.astimezone(dt.UTC)


def check_expiry(
    expires_at: object, ttl: object, clock: Clock, what: str = "expires_at"
) -> dt.datetime | None:
    """A write's expiry: ``expires_at`` (an aware datetime, in UTC) or the store clock's
    now plus ``ttl`` (seconds > 0, or a positive ``timedelta``), not both; None: never.

    Raises:
        ConfigError: both given; a naive or non-datetime ``expires_at``; a ``ttl`` that
            is not a finite number of seconds > 0 or a positive timedelta.
    """
    if expires_at is not None and ttl is not None:
        raise ConfigError(
            f"{what} is {expires_at!r:.60} and ttl is {ttl!r:.60}; expected at most one of the two"
        )
    if ttl is None:
        return None if expires_at is None else check_time(what, expires_at)
    return clock_now(clock) + check_ttl(ttl)


def check_ttl(ttl: object) -> dt.timedelta:
    """``ttl`` as a positive timedelta.

    Raises:
        ConfigError: not a finite number of seconds > 0 or a positive timedelta.
    """
    if isinstance(ttl, dt.timedelta):
        span = ttl
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool) and math.isfinite(ttl):
        try:
            span = dt.timedelta(seconds=ttl)
        except OverflowError:
            raise ConfigError(
                f"ttl is {ttl!r}; expected a number of seconds a datetime can add"
            ) from None
    else:
        raise ConfigError(
            f"ttl is {ttl!r:.60} ({type(ttl).__name__}); expected a number of seconds > 0 "
            "or a datetime.timedelta"
        )
    if span <= dt.timedelta(0):
        raise ConfigError(f"ttl is {ttl!r}; expected a duration > 0")
    return span


def expiry_of(document: Document, now: dt.datetime, ttl: dt.timedelta | None) -> Document:
    """``document`` with ``expires_at = now + ttl`` when it has none of its own and a
    ``ttl`` was given; else ``document`` itself."""
    if ttl is None or document.expires_at is not None:
        return document
    return msgspec.structs.replace(document, expires_at=now + ttl)


_DEDUPES = ("exact", "near")


def check_dedupe(dedupe: object, near_threshold: object) -> tuple[Dedupe | None, float | None]:
    """A write's ``dedupe`` (None, ``"exact"`` or ``"near"``) and ``near_threshold`` (a
    cosine in (0, 1], only with ``"near"``; None: :data:`NEAR_DUPLICATE_COSINE`).

    Raises:
        ConfigError: another ``dedupe``; a threshold outside (0, 1], or one given without
            ``dedupe="near"``.
    """
    if dedupe is not None and dedupe not in _DEDUPES:
        raise ConfigError(f"dedupe is {dedupe!r:.60}; expected None, 'exact' or 'near'")
    mode = cast("Dedupe | None", dedupe)
    if near_threshold is None:
        return mode, None
    if dedupe != "near":
        raise ConfigError(
            f"near_threshold is {near_threshold!r:.60} with dedupe={dedupe!r}; a threshold "
            "applies to dedupe='near' only"
        )
    if (
        isinstance(near_threshold, bool)
        or not isinstance(near_threshold, int | float)
        or not 0.0 < float(near_threshold) <= 1.0
    ):
        raise ConfigError(
            f"near_threshold is {near_threshold!r:.60}; expected a cosine similarity in (0, 1]"
        )
    return "near", float(near_threshold)


def check_forget(request: Forget) -> Forget:
    """A ``Forget`` as the store runs it: its ids, namespace, filter and ``before``
    checked, ``ids`` deduplicated in order.

    Raises:
        ConfigError: ``ids`` beside a filter or ``before`` (ids name the memories
            themselves); ids that are not non-empty strs; a bad namespace; a naive
            ``before``.
        FilterError: the filter cannot be applied.
    """
    check_name("namespace", request.namespace)
    check_name_size("namespace", request.namespace, MAX_NAMESPACE_BYTES)
    before = check_time("before", request.before)
    selection = filter_option(request.filter)
    if selection is not None:
        check_filter(selection)
    ids = None
    if request.ids is not None:
        if selection is not None or before is not None:
            raise ConfigError(
                "forget got ids and a filter or before; expected either ids (those "
                "memories) or a selection (filter and/or before), not both"
            )
        ids = list(dict.fromkeys(check_ids(request.ids)))
    return Forget(ids=ids, namespace=request.namespace, filter=selection, before=before)


def exact_msgpack(value: object) -> bytes:
    """Encode ``value`` into a bytes object of exactly its size.

    ``Encoder.encode`` may return an over-allocated buffer (seen: 2.9 KB held for a 2 KB
    message). The store keeps these bytes for an entry's whole life, so the copy is what
    keeps the memory bound honest.

    A value holding a str without a UTF-8 form (a lone surrogate) takes the surrogate
    form of :func:`protocol._surrogates.pack`, which reads back exactly.
    """
    buffer = bytearray()
    try:
        _ENCODER.encode_into(value, buffer)
    except UnicodeEncodeError:
        return bytes(memoryview(pack(value)))  # exact size, as below
    return bytes(buffer)


# A float32 batch whose squared norms all lie in this range is normalized in float32:
# nowhere near overflow (float32 max ≈ 3.4e38), and far enough above the subnormals
# (below 1.2e-38) that squares flushed towards zero cannot move the norm.
_FAST_SQUARED = (1e-30, 1e30)


def checked_rows(
    vectors: object, count: int, dimensions: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None, npt.NDArray[np.bool_]]:
    """An embedder's batch checked (design §3, step 3), and how to normalize it (step 4).

    Returns ``(rows, scale, zero)``. When ``scale`` is None, ``rows`` are the normalized
    rows, in an array of their own. Otherwise ``rows`` is the embedder's own array,
    unnormalized, and ``rows * scale`` (``scale`` is a ``[count, 1]`` column) is the
    normalized batch: the store multiplies it straight into the arena at commit, which
    saves writing the batch once more. That array belongs to the caller's embedder, so
    it must be used before anything else may run (before the next await), or copied.

    The normalized result, errors and zero-norm flags are those of
    ``normalize_rows(as_matrix(...))``, which takes norms in float64. In a float32 batch
    of the right shape, each row whose squared norm is comfortably finite and nonzero
    (the common case) skips the float64 round trip: its finite squared norm proves every
    component finite, and it is scaled in float32 (within 3 ulp of the float64 result).
    The choice is made per row, so a vector is stored the same way whatever else its
    batch holds. Anything else (another dtype or shape, a non-finite component, an
    overflowing, tiny or zero norm) takes the float64 path, which names the offending
    vector.

    Raises:
        EmbeddingError: the wrong number of vectors, a wrong width, something that is
            not numbers, a non-finite component, or a squared norm past float32.
    """
    if (
        # An exact ndarray: a subclass (np.matrix) may redefine ``*`` and take the
        # general path, which converts it.
        type(vectors) is np.ndarray
        and vectors.dtype == np.float32
        and vectors.shape == (count, dimensions)
        and count > 0
    ):
        squared = np.einsum("ij,ij->i", vectors, vectors)
        low, high = _FAST_SQUARED
        # min and max propagate NaN, which fails both comparisons, so a batch with a
        # non-finite row falls through as well (two reductions: cheaper than a mask).
        if low < squared.min() and squared.max() < high:
            scale = (1.0 / np.sqrt(squared.astype(np.float64))).astype(np.float32)
            return vectors, scale[:, None], np.zeros(count, dtype=np.bool_)
        # The float64 path checks the batch and names a bad vector; then each row that
        # qualifies for float32 still gets its float32 result, so a vector's stored form
        # never depends on the rest of its batch (equal vectors must tie, design §3).
        rows, zero = normalize_rows(as_matrix(vectors, count, dimensions))
        # NaN fails both comparisons here too: its row is not fast.
        fast = (squared > low) & (squared < high)
        if bool(fast.any()):
            scale = (1.0 / np.sqrt(squared[fast].astype(np.float64))).astype(np.float32)
            rows[fast] = vectors[fast] * scale[:, None]
        return rows, None, zero
    rows, zero = normalize_rows(as_matrix(vectors, count, dimensions))
    return rows, None, zero


def exact_msgpack_many(values: Sequence[object]) -> list[bytes]:
    """``[exact_msgpack(v) for v in values]``, encoded in one call.

    A msgpack array is its header followed by each element's own encoding, so the batch
    is encoded once and split back into one exact-size bytes object per element (each
    a copy: no entry keeps the batch's buffer alive). A batch in which some value holds
    a lone surrogate is encoded one value at a time (see :func:`exact_msgpack`).
    """
    try:
        encoded = _ENCODER.encode(values)
    except UnicodeEncodeError:
        return [exact_msgpack(value) for value in values]
    return list(map(bytes, _RAW_LIST_DECODER.decode(encoded)))


def private_json(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy that the store owns: the caller may mutate its own afterwards."""
    if not value:
        return _EMPTY_DICT
    try:
        encoded = _ENCODER.encode(value)
    except UnicodeEncodeError:
        # A lone surrogate in a key or a value: the surrogate form copies it exactly.
        return unpack_metadata(pack(value))
    copied: dict[str, Any] = _METADATA_DECODER.decode(encoded)
    return copied


def check_ids(ids: object, what: str = "ids") -> list[str]:
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ConfigError(f"{what} is a {type(ids).__name__}; expected a list of str")
    for i, entry_id in enumerate(ids):
        if not isinstance(entry_id, str) or not entry_id:
            raise ConfigError(f"{what}[{i}] is {entry_id!r:.60}; expected a non-empty str")
    return list(ids)


def metadata_from_json(compact: bytes) -> dict[str, Any]:
    """The metadata a :func:`metadata_json` text holds, as a new dict: what a backend
    reads once the handle has checked a write, so that the caller's own dict, which it
    may change while the write waits in the inbox, is never read again."""
    if not compact:
        return {}
    try:
        decoded: dict[str, Any] = _JSON_DICT_DECODER.decode(compact)
    except (msgspec.DecodeError, UnicodeDecodeError):
        # A lone surrogate: compact_json wrote it in its 3-byte form.
        decoded = json.loads(compact.decode("utf-8", "surrogatepass"))
    return decoded


def check_name_size(what: str, value: str, limit: int) -> None:
    """Refuse a name (an id, a namespace) of more than ``limit`` UTF-8 bytes."""
    # At most 4 bytes a character: a short name needs no encoding to be measured.
    if len(value) * 4 <= limit:
        return
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ConfigError(
            f"{what} {shown(value)} is {size} bytes in UTF-8; a store takes at most "
            f"{limit} (every backend alike: PostgreSQL indexes it in a btree)"
        )


_RESERVED_ID = re.compile(r"turn-[0-9]+")


def check_not_reserved(entry_id: str, what: str = "id") -> None:
    """Refuse an id of the form ``turn-<digits>``: the store names the turns stored
    without ids that way (``turn-<sequence>``), so a caller's id of that form could name
    two live entries at once."""
    if entry_id.startswith("turn-") and _RESERVED_ID.fullmatch(entry_id):
        raise ConfigError(
            f"{what} {entry_id!r} has the form turn-<number>, which the store keeps for the "
            "turns it names itself; expected another id"
        )


def check_k(k: object) -> int:
    """A read's ``k`` as a plain int > 0, of any size: ``k`` means "at most that many",
    and a backend clamps it to what it can hold (:func:`clamp_k`)."""
    return check_int("k", k)


def clamp_k(k: int, max_entries: int) -> int:
    """``k`` cut to the store's capacity: no scope holds more, so the answer is the same,
    and a backend's integer types (PostgreSQL's ``bigint`` LIMIT) always hold it."""
    return k if k <= max_entries else max_entries


def check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what} is {value!r}; expected a non-empty str")
    return value


def turns_request(
    turns: Sequence[UnifiedMessage],
    namespace: str,
    source: str,
    metadata: dict[str, Any] | None,
    ids: Sequence[str] | None,
    texts: Sequence[str] | None,
    occurred_at: dt.datetime | None = None,
    conversation: str | None = None,
    expires_at: dt.datetime | None = None,
    dedupe: Dedupe | None = None,
    near_threshold: float | None = None,
) -> StoreTurns:
    """The ``StoreTurns`` message for a handle's ``store_turns`` arguments, with its
    lists copied; :func:`check_turns` then checks everything in it, once.

    Raises:
        ConfigError: ``turns``, ``texts`` or ``ids`` is not a list.
    """
    if isinstance(turns, str | bytes) or not isinstance(turns, Sequence):
        raise ConfigError(f"turns is a {type(turns).__name__}; expected a list of UnifiedMessage")
    for name, values in (("texts", texts), ("ids", ids)):
        if values is not None and (
            isinstance(values, str | bytes) or not isinstance(values, Sequence)
        ):
            raise ConfigError(f"{name} is a {type(values).__name__}; expected a list of str")
    return StoreTurns(
        turns=list(turns),
        namespace=namespace,
        source=source,
        metadata={} if metadata is None else metadata,
        ids=None if ids is None else list(ids),
        texts=None if texts is None else list(texts),
        occurred_at=occurred_at,
        conversation=conversation,
        expires_at=expires_at,
        dedupe=dedupe,
        near_threshold=near_threshold,
    )


@attrs.frozen
class TurnBatch:
    """A ``StoreTurns`` batch that passed the checks every backend shares.

    Attributes:
        survivors: the newest ``max_entries`` turns (a longer batch drops its head).
        metadata_json: the batch's metadata as compact JSON (``b""`` for ``{}``).
        texts: what each survivor is indexed and embedded by: the caller's text, or
            the turn's projection.
        given: whether ``texts`` came from the caller (then the store keeps them beside
            the message; otherwise a turn's text is its projection).
        ids: the survivors' ids, or None (each id is then ``turn-<sequence>``).
        dropped: how many turns the head of an over-long batch lost.
        roles: when every turn of the batch is plain (one Text block, no ``name`` or
            ``tool_call_id``), each survivor's role; else None. A plain turn is its
            role and its text, so a store may keep those instead of the message.
        all_ascii: the batch is plain and every turn's text is ASCII.
        sizes: each survivor's :func:`entry_bytes` (with the caller's text, if any).
        occurred_at: the batch's ``occurred_at`` in UTC, or None (the store stamps the
            write time).
        conversation: the batch's conversation, or None.
        expires_at: when every turn of the batch expires (UTC), or None: never.
        dedupe, near_threshold: how a turn already there is treated (checked by
            :func:`check_dedupe`; the threshold None means
            :data:`NEAR_DUPLICATE_COSINE` for ``"near"``).
    """

    survivors: list[UnifiedMessage]
    texts: list[str]
    given: bool
    ids: list[str] | None
    dropped: int
    roles: list[Role] | None = None
    all_ascii: bool = False
    metadata_json: bytes = b""
    sizes: list[int] = attrs.field(factory=list)
    occurred_at: dt.datetime | None = None
    conversation: str | None = None
    payloads: list[bytes] | None = None
    expires_at: dt.datetime | None = None
    dedupe: Dedupe | None = None
    near_threshold: float | None = None

    @property
    def plain(self) -> bool:
        """Whether every survivor is a plain ASCII turn indexed by its own text: then
        its role and text rebuild it exactly, and :attr:`payloads` is None."""
        return self.roles is not None and self.all_ascii and not self.given

    def messages_msgpack(self) -> list[bytes]:
        """Each survivor as msgpack: :attr:`payloads`, or for a plain batch the messages
        its roles and texts rebuild (never the caller's objects, which it may change
        while the write waits in the inbox)."""
        if self.payloads is not None:
            return self.payloads
        assert self.roles is not None
        return exact_msgpack_many(
            [
                UnifiedMessage(role=role, content=[Text(text=text)])
                for role, text in zip(self.roles, self.texts, strict=True)
            ]
        )


def check_turns(request: StoreTurns, *, max_entry_bytes: int, max_entries: int) -> TurnBatch:
    """Check a batch of turns (design §3, steps 1 and 2), changing nothing.

    Every turn is size-checked, the dropped head included: :func:`entry_bytes` of its
    payload, blocks, index text, id and the batch's source and metadata, against
    ``max_entry_bytes``. (A batch of plain turns takes the same sum in one light pass.)

    This is the one place a turn batch is checked: the store handle calls it once per
    write, in the caller's task, and the backend trusts the batch it returns.

    Raises:
        ConfigError: an empty or non-str namespace or source; a turn that is not a
            ``UnifiedMessage``; ids or texts that are not
            one non-empty str (ids) or one str (texts) per turn; a repeated id; an id
            over :data:`MAX_ID_BYTES` or a namespace over :data:`MAX_NAMESPACE_BYTES`;
            an ``occurred_at`` that is not an aware datetime, or a bad conversation.
        JsonError: the metadata is not a JSON object, or a tool call's arguments are
            not JSON.
        EntryTooLarge: a turn over the cap; ``.index`` names it.
    """
    turns = request.turns
    count = len(turns)
    check_name("namespace", request.namespace)
    check_name("source", request.source)
    check_name_size("namespace", request.namespace, MAX_NAMESPACE_BYTES)
    occurred_at = check_time("occurred_at", request.occurred_at)
    expires_at = (
        None if request.expires_at is None else check_time("expires_at", request.expires_at)
    )
    dedupe, near_threshold = check_dedupe(request.dedupe, request.near_threshold)
    conversation = check_conversation(request.conversation)
    ids = None if request.ids is None else _check_turn_ids(request.ids, count)
    texts = request.texts
    if texts is not None:
        _check_turn_texts(texts, count)
    meta = metadata_json(check_json_object(request.metadata), checked=True)
    # What every turn of the batch counts besides its own fields.
    shared = len(meta) + name_bytes(request.source)
    if conversation is not None:
        shared += name_bytes(conversation)
    plain, roles = _plain_turns(turns)
    all_ascii = False
    if plain is None:
        sizes = _check_turn_sizes(turns, texts, ids, shared, max_entry_bytes)
    else:
        all_ascii, sizes = _check_plain_sizes(plain, texts, ids, shared, max_entry_bytes)
    # After the sizes: an id that also makes its turn too large is EntryTooLarge.
    for entry_id in ids or ():
        check_name_size("id", entry_id, MAX_ID_BYTES)
    keep = min(count, max_entries)
    head = count - keep
    survivors = list(turns[head:])
    if texts is not None:
        kept = list(texts[head:])
    elif plain is not None:
        kept = plain[head:]  # a lone text block is its turn's projection
    else:
        kept = [projection(t) for t in survivors]
    kept_roles = None if roles is None else roles[head:]
    # The messages as the store keeps them, encoded now, in the caller's task: the
    # batch waits in the inbox before a backend reads it, and the caller may change a
    # message's content list meanwhile. A plain ASCII batch is kept as its roles and
    # texts (immutable), so it needs no encoding here.
    plain_batch = kept_roles is not None and all_ascii and texts is None
    return TurnBatch(
        survivors=survivors,
        texts=kept,
        given=texts is not None,
        ids=None if ids is None else ids[head:],
        dropped=head,
        roles=kept_roles,
        all_ascii=all_ascii,
        metadata_json=meta,
        sizes=sizes[head:],
        occurred_at=occurred_at,
        conversation=conversation,
        payloads=None if plain_batch else exact_msgpack_many(survivors),
        expires_at=expires_at,
        dedupe=dedupe,
        near_threshold=near_threshold,
    )


def _check_turn_ids(ids: object, count: int) -> list[str]:
    """``ids``: one non-empty str per turn, none repeated, none of the store's form."""
    checked = check_ids(ids)
    if len(checked) != count:
        raise ConfigError(f"{len(checked)} ids for {count} turns; expected one per turn")
    if len(set(checked)) != count:
        raise ConfigError(f"ids {checked!r:.80} repeat an id; each turn needs its own")
    for entry_id in checked:
        check_not_reserved(entry_id)
    return checked


def _check_turn_texts(texts: object, count: int) -> None:
    """``texts``: one str per turn."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise ConfigError(f"texts is a {type(texts).__name__}; expected a list of str")
    if len(texts) != count:
        raise ConfigError(f"{len(texts)} texts for {count} turns; expected one per turn")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"texts[{i}] is a {type(text).__name__}; expected str")


def _check_turn_sizes(
    turns: Sequence[object],
    texts: Sequence[str] | None,
    ids: list[str] | None,
    shared: int,
    max_entry_bytes: int,
) -> list[int]:
    """Each turn's :func:`entry_bytes` against the cap, for a batch of any turns;
    returns them."""
    sizes: list[int] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, UnifiedMessage):
            raise ConfigError(
                f"turn {i} of the batch is a {type(turn).__name__}; expected UnifiedMessage"
            )
        try:
            # A message checks its blocks as it is made, but its content list is still
            # the caller's: one changed since would be stored, then fail every read of it.
            turn.__post_init__()
        except (TypeError, ValueError) as error:
            raise ConfigError(f"turn {i} of the batch: {error}") from error
        try:
            # turn_bytes, inlined (a call with keywords per turn cost a fifth of
            # a batch's checks) with the shared part added once.
            size = payload_bytes(turn) + arguments_surplus(turn) + shared
            if len(turn.content) > 1:
                size += BLOCK_OVERHEAD * (len(turn.content) - 1)
            if texts is not None:
                size += len(utf8_bytes(texts[i]))
            if ids is not None:
                size += name_bytes(ids[i])
        except VectorStoreError:
            raise  # a JsonError names the bad tool-call arguments itself
        except (AttributeError, TypeError) as error:
            # msgspec does not check field types at construction: a Text whose text
            # is an int, say. That is the caller's bad input, not a store crash.
            raise ConfigError(
                f"turn {i} of the batch has a field of the wrong type ({error}); "
                "expected the str fields of UnifiedMessage and its blocks to hold str"
            ) from error
        if size > max_entry_bytes:
            raise EntryTooLarge(size, max_entry_bytes, i)
        sizes.append(size)
    return sizes


def _check_plain_sizes(
    plain: list[str],
    texts: Sequence[str] | None,
    ids: list[str] | None,
    shared: int,
    max_entry_bytes: int,
) -> tuple[bool, list[int]]:
    """The same sizes for a batch of plain turns (one Text block each, their texts in
    ``plain``), in one light pass. Returns whether every text is ASCII, and the sizes."""
    # entry_bytes for one Text block: its text, the caller's text and id, and the
    # shared part, summed as lists.
    sizes, all_ascii = _utf8_lens(plain)
    if texts is not None:
        sizes = list(map(int.__add__, sizes, _utf8_lens(texts)[0]))
    if ids is not None:
        sizes = list(map(int.__add__, sizes, map(name_bytes, ids)))
    if shared:
        sizes = [size + shared for size in sizes]
    if sizes and max(sizes) > max_entry_bytes:
        i = next(i for i, size in enumerate(sizes) if size > max_entry_bytes)
        raise EntryTooLarge(sizes[i], max_entry_bytes, i)
    return all_ascii, sizes


@attrs.frozen
class DocumentBatch:
    """An ``UpsertDocuments`` batch that passed the checks every backend shares.

    Attributes:
        unique: every document, with its id, once per id, in input order.
        survivors: the newest ``max_entries`` of them (a longer batch drops its head).
        dropped: how many the head lost.
        metadata_json: each survivor's metadata as compact JSON (``b""`` for ``{}``).
        embeddings: the survivors' rows of the request's ``embeddings`` (float64, a
            copy), or None when it has none.
        sizes: each survivor's :func:`document_bytes`.
        dedupe, near_threshold: the request's, checked (:func:`check_dedupe`).
    """

    unique: list[Document]
    survivors: list[Document]
    dropped: int
    metadata_json: list[bytes] = attrs.field(factory=list)
    embeddings: npt.NDArray[np.float64] | None = None
    sizes: list[int] = attrs.field(factory=list)
    dedupe: Dedupe | None = None
    near_threshold: float | None = None


def check_documents(
    request: UpsertDocuments, *, max_entry_bytes: int, max_entries: int
) -> DocumentBatch:
    """Check a batch of documents, changing nothing: each is a ``Document`` within
    ``max_entry_bytes`` (:func:`document_bytes`), the dropped head included; one id
    given twice must carry the same content, and is then stored once.

    Raises:
        ConfigError: not a Document, one id with two different contents, an id over
            :data:`MAX_ID_BYTES` or a namespace over :data:`MAX_NAMESPACE_BYTES`, or a
            text, id or source id set past the document's own check.
        EmbeddingError: an embedding set past the document's own check to a non-list.
        EntryTooLarge: a document over the cap; ``.index`` names it.
    """
    check_name_size("namespace", request.namespace, MAX_NAMESPACE_BYTES)
    dedupe, near_threshold = check_dedupe(request.dedupe, request.near_threshold)
    _check_supersede(request)
    unique: dict[str, Document] = {}
    metas: dict[str, bytes] = {}
    sizes: dict[str, int] = {}
    first: dict[str, int] = {}
    row_of = _embedding_rows(request)
    for i, document in enumerate(request.documents):
        if not isinstance(document, Document):
            raise ConfigError(
                f"document {i} of the batch is a {type(document).__name__}; expected Document"
            )
        _check_document_fields(i, document)
        if document.id is None:
            document = document.with_id()
        if document.embedding is not None:
            # Its list is still the caller's (``document.embedding``), which it may
            # change while the write waits in the inbox: the batch keeps its own copy.
            embedding = list(document.embedding)
            document = copy.copy(document)
            msgspec.structs.force_setattr(document, "embedding", embedding)
        assert document.id is not None
        if request.supersede is None or document.id != request.supersede.id:
            # An update of a turn stored without an id keeps its turn-<n> id.
            check_not_reserved(document.id, what="document id")
        # Document checks both as it is made; again here for one built around that.
        if document.occurred_at is not None:
            check_time("document occurred_at", document.occurred_at)
        if document.expires_at is not None:
            check_time("document expires_at", document.expires_at)
        check_conversation(document.conversation)
        meta = metadata_json(document.metadata, "document metadata")
        size = document_bytes(document, metadata=len(meta))
        if size > max_entry_bytes:
            raise EntryTooLarge(size, max_entry_bytes, i)
        check_name_size("document id", document.id, MAX_ID_BYTES)
        seen = unique.get(document.id)
        if seen is not None and (
            seen != document or (row_of is not None and row_of(first[document.id]) != row_of(i))
        ):
            raise ConfigError(
                f"document id {document.id!r} appears twice in the batch with different "
                "content; expected one version per id"
            )
        unique[document.id] = document
        metas[document.id] = meta
        sizes[document.id] = size
        if row_of is not None:
            first.setdefault(document.id, i)
    documents = list(unique.values())
    head = len(documents) - min(len(documents), max_entries)
    survivors = documents[head:]
    return DocumentBatch(
        unique=documents,
        survivors=survivors,
        dropped=head,
        metadata_json=[metas[d.id] for d in survivors if d.id is not None],
        sizes=[sizes[d.id] for d in survivors if d.id is not None],
        embeddings=None
        if request.embeddings is None or not request.documents
        else np.frombuffer(request.embeddings, dtype=np.float64).reshape(
            len(request.documents), -1
        )[[first[d.id] for d in survivors if d.id is not None]],
        dedupe=dedupe,
        near_threshold=near_threshold,
    )


def _check_supersede(request: UpsertDocuments) -> None:
    """An update's ``supersede``: one document, of its id, and no dedupe.

    Raises:
        ConfigError: a supersede beside more or fewer than one document, another id, a
            negative version, a naive ``valid_from``, or ``dedupe``.
    """
    supersede = request.supersede
    if supersede is None:
        return
    count = len(request.documents)
    if count != 1:
        raise ConfigError(f"an update writes one document; got {count}")
    (document,) = request.documents
    if not isinstance(document, Document) or document.id != supersede.id:
        got = document.id if isinstance(document, Document) else type(document).__name__
        raise ConfigError(
            f"an update of {supersede.id!r} carries a document {got!r:.60}; expected a "
            "Document with that id"
        )
    check_int("supersede version", supersede.version, minimum=0)
    if check_time("valid_from", supersede.valid_from) is None:
        raise ConfigError("an update's valid_from is None; expected an aware datetime")
    if request.dedupe is not None:
        raise ConfigError(
            f"an update takes no dedupe (got {request.dedupe!r}); it writes a new version"
        )


def _check_document_fields(i: int, document: Document) -> None:
    """The field types a ``Document`` checks as it is made, again: one set past that
    check (``force_setattr`` on the frozen struct) is refused with what it holds."""
    if not isinstance(document.text, str):
        raise ConfigError(
            f"document {i} of the batch has text {document.text!r:.60} "
            f"({type(document.text).__name__}); expected a str"
        )
    for field in ("id", "source_id"):
        value = getattr(document, field)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(
                f"document {i} of the batch has {field} {value!r:.60} "
                f"({type(value).__name__}); expected None or a non-empty str"
            )
    for field in STORE_SET_FIELDS:
        value = getattr(document, field)
        if value is not None:
            raise ConfigError(
                f"document {i} of the batch sets {field}={value!r:.60}; the store sets "
                f"{', '.join(STORE_SET_FIELDS)} itself (use update() for a new version, "
                "or Document.as_new() to copy a document read back)"
            )
    if document.embedding is not None and not isinstance(document.embedding, list):
        raise EmbeddingError(
            f"document {i} of the batch has embedding {document.embedding!r:.60} "
            f"({type(document.embedding).__name__}); expected a list of real numbers"
        )


def _embedding_rows(request: UpsertDocuments) -> Callable[[int], bytes] | None:
    """Row i of the request's ``embeddings`` as bytes, or None without them; refuses
    ``embeddings`` that are not whole float64 rows, one per document, or a document
    that carries its own embedding beside them."""
    data = request.embeddings
    if data is None:
        return None
    count = len(request.documents)
    whole = isinstance(data, bytes) and (len(data) % (8 * count) == 0 if count else not data)
    if not whole:
        got = f"{len(data)} bytes" if isinstance(data, bytes) else f"a {type(data).__name__}"
        raise ConfigError(
            f"embeddings are {got} for {count} documents; expected the bytes of a "
            "C-ordered float64 array with one row per document"
        )
    for i, document in enumerate(request.documents):
        if isinstance(document, Document) and document.embedding is not None:
            raise ConfigError(
                f"document {i} of the batch has its own embedding and embeddings were "
                "given for the batch; pass one or the other"
            )
    size = len(data) // count if count else 0
    return lambda i: data[i * size : (i + 1) * size]


def _plain_turns(turns: Sequence[object]) -> tuple[list[str], list[Role]] | tuple[None, None]:
    """Each turn's text and role when every turn is a plain message (one Text block,
    and no ``name`` or ``tool_call_id``), or ``(None, None)``.

    Such a turn's payload size is its text's UTF-8 length and its projection is its
    text, so a batch of them (what an agent offloads, and the bench) needs one light
    pass instead of ``payload_bytes`` and ``projection`` per turn; any other batch takes
    the general loop, with the same results and errors. (One plain loop: ``map`` with
    ``operator`` getters measured slower here, as Struct fields read fastest in
    specialized bytecode.)
    """
    texts: list[str] = []
    roles: list[Role] = []
    append, append_role = texts.append, roles.append
    try:
        for turn in turns:
            if type(turn) is not UnifiedMessage or turn.name is not None:
                return None, None
            if turn.tool_call_id is not None or len(content := turn.content) != 1:
                return None, None
            block = content[0]
            if type(block) is not Text:
                return None, None
            text = block.text
            # msgspec does not check field types at construction; leave oddities to
            # the loop.
            if type(text) is not str:
                return None, None
            append(text)
            append_role(turn.role)
    except (TypeError, LookupError):
        return None, None  # a content set past the message's own check: not a list
    # A role set past the message's own check (the general loop names it).
    if not ROLES.issuperset(roles):
        return None, None
    return texts, roles


def _utf8_lens(texts: Sequence[str]) -> tuple[list[int], bool]:
    """Each text's UTF-8 length (surrogates pass, as in ``payload_bytes``), and whether
    every text is ASCII (then its length is its UTF-8 length)."""
    if "".join(texts).isascii():
        return list(map(len, texts)), True
    return [len(utf8_bytes(text)) for text in texts], False


def check_store_config(config: object, embedder: object) -> VectorStoreConfig:
    """The checks every store runs on open: a valid ``VectorStoreConfig`` whose width the
    embedder (when it says its ``dimensions``) makes."""
    if not isinstance(config, VectorStoreConfig):
        raise ConfigError(f"config is a {type(config).__name__}; expected VectorStoreConfig")
    config.validate()
    width = getattr(embedder, "dimensions", None)
    if isinstance(width, int) and width != config.dimensions:
        raise ConfigError(
            f"embedder {embedder!r:.60} makes {width}-float vectors; this store takes "
            f"{config.dimensions} (dimensions)"
        )
    return config
