"""LangGraph's store operations in trio-recall's terms (docs/pages/tutorials/langgraph.md).

Pure functions, no I/O: the namespace encoding, an item as a trio-recall document and
back, and a LangGraph filter as a ``protocol.filters`` filter. ``langgraph.py`` runs them
against a store.

**The namespace encoding.** Every item of one :class:`TrioRecallStore` lives in one
trio-recall namespace; its LangGraph namespace (a tuple of str) is written into the
entry as :func:`encode_namespace`: each part escaped by :func:`escape_part`, then
followed by ``"/"``. Escaping replaces ``%``, ``/``, NUL and every lone surrogate by
``%`` and four hex digits of its code point, so no escaped part holds a ``/`` and each
``%`` starts exactly one escape: the encoding is injective (``("a/b",)`` is ``a%002Fb/``
and ``("a", "b")`` is ``a/b/``) and decodes back (:func:`decode_namespace`). It is
also prefix-preserving: ``encode(ns)`` starts with ``encode(prefix)`` exactly when the
tuple ``ns`` starts with the tuple ``prefix`` (each encoded part ends at its own
``/``), so a namespace-prefix scope is the string range ``[P, P[:-1] + "0")`` (``"0"``
follows ``"/"`` in code point order), a ``$gte``/``$lt`` filter the store applies inside
its scan (:func:`prefix_filter`). An item's id is ``encode(namespace) + escape(key)``:
the last ``/`` splits it, so ids never alias either, and never have the store's own
``turn-<n>`` form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal, TypedDict, TypeGuard

from langgraph.store.base import (
    InvalidNamespaceError,
    Item,
    MatchCondition,
    SearchItem,
    get_text_at_path,
    tokenize_path,
)

from protocol import ConfigError, Document, FilterError, ScoredDocument, parse_filter
from protocol.checks import check_conversation, matches, shown

from ..doors import door_time

__all__ = [
    "CONVERSATION_FIELD",
    "CREATED_KEY",
    "INDEXED_KEY",
    "NS_KEY",
    "OCCURRED_AT_FIELD",
    "UPDATED_KEY",
    "VALUE_PREFIX",
    "PostFilter",
    "check_namespace",
    "decode_key",
    "decode_namespace",
    "distinct_namespaces",
    "encode_namespace",
    "escape_part",
    "index_text",
    "item_document",
    "item_from_document",
    "item_id",
    "item_namespace",
    "item_time",
    "literal_head",
    "namespace_matches",
    "prefix_filter",
    "search_item",
    "tokenized_fields",
    "translate_filter",
    "unescape_part",
]

#: Metadata keys of an item's entry. A value's own top-level key ``k`` is kept as
#: ``VALUE_PREFIX + k``, so no key of a value can meet these, and a value key starting
#: with ``$`` stays filterable (the filter language reserves ``$`` at the start).
VALUE_PREFIX = "v:"
NS_KEY = "lg:ns"
CREATED_KEY = "lg:created_at"
UPDATED_KEY = "lg:updated_at"
INDEXED_KEY = "lg:indexed"

#: The value keys that are also the entry's own fields (docs/pages/tutorials/
#: langgraph.md): a value's
#: top-level ``"occurred_at"`` (ISO 8601 text) is when the item happened, its
#: ``"conversation"`` (a str) the conversation it belongs to. Both stay in the value.
OCCURRED_AT_FIELD = "occurred_at"
CONVERSATION_FIELD = "conversation"

_SEPARATOR = "/"
# The character just after the separator in code point order: the end of a prefix range.
_AFTER_SEPARATOR = chr(ord(_SEPARATOR) + 1)
_ESCAPED = frozenset("%/\x00")


def escape_part(part: str) -> str:
    """``part`` with ``%``, ``/``, NUL and lone surrogates as ``%XXXX`` (hex code point).

    NUL and lone surrogates are escaped because PostgreSQL refuses them in ids; ``%``
    so that an escape is never ambiguous, ``/`` because it ends a part.
    """
    if not isinstance(part, str):
        raise InvalidNamespaceError(
            f"namespace label {shown(part)} is a {type(part).__name__}; expected a str"
        )
    if not any(c in _ESCAPED or "\ud800" <= c <= "\udfff" for c in part):
        return part
    return "".join(
        f"%{ord(c):04X}" if c in _ESCAPED or "\ud800" <= c <= "\udfff" else c for c in part
    )


def unescape_part(text: str) -> str:
    """The inverse of :func:`escape_part`."""
    if "%" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%":
            out.append(chr(int(text[i + 1 : i + 5], 16)))
            i += 5
        else:
            out.append(c)
            i += 1
    return "".join(out)


def encode_namespace(namespace: Sequence[str]) -> str:
    """The injective, prefix-preserving string form of a LangGraph namespace."""
    return "".join(escape_part(part) + _SEPARATOR for part in namespace)


def decode_namespace(encoded: str) -> tuple[str, ...]:
    """The inverse of :func:`encode_namespace`."""
    parts = encoded.split(_SEPARATOR)
    return tuple(unescape_part(part) for part in parts[:-1])


def item_id(namespace: Sequence[str], key: str) -> str:
    """The trio-recall document id of the item ``key`` in ``namespace``."""
    if not isinstance(key, str):
        raise InvalidNamespaceError(f"key {shown(key)} is a {type(key).__name__}; expected a str")
    return encode_namespace(namespace) + escape_part(key)


def decode_key(entry_id: str) -> str:
    """The item key of a document id made by :func:`item_id`."""
    return unescape_part(entry_id.rpartition(_SEPARATOR)[2])


def check_namespace(namespace: object, what: str = "namespace") -> tuple[str, ...]:
    """A put's namespace: a non-empty tuple of str (any str: the encoding escapes)."""
    if not isinstance(namespace, tuple) or not namespace:
        raise InvalidNamespaceError(
            f"{what} is {shown(namespace)}; expected a non-empty tuple of str"
        )
    for part in namespace:
        escape_part(part)
    return namespace


def prefix_filter(prefix: Sequence[str]) -> dict[str, object]:
    """The filter selecting the namespaces that start with ``prefix`` ({} for ())."""
    if not prefix:
        return {}
    low = encode_namespace(prefix)
    return {NS_KEY: {"$gte": low, "$lt": low[:-1] + _AFTER_SEPARATOR}}


def literal_head(path: Sequence[str]) -> tuple[str, ...]:
    """The parts of a match-condition path before its first ``"*"`` wildcard."""
    head: list[str] = []
    for part in path:
        if part == "*":
            break
        head.append(part)
    return tuple(head)


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's prefix/suffix match, ``"*"`` matching any one part."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(
            f"match_type is {shown(condition.match_type)}; expected 'prefix' or 'suffix'"
        )
    return all(p == "*" or n == p for n, p in pairs)


# --- items as documents ----------------------------------------------------------------


def tokenized_fields(fields: Sequence[str] | None) -> list[tuple[str, str | list[str]]]:
    """An index config's fields, tokenized once (``"$"``, the default, is the whole value)."""
    return [(f, f if f == "$" else tokenize_path(f)) for f in (fields or ["$"])]


def index_text(
    value: Mapping[str, object],
    index: Literal[False] | list[str] | None,
    fields: list[tuple[str, str | list[str]]] | None,
) -> str | None:
    """The text an item is embedded by, or None when it is not indexed.

    ``fields`` is the store's tokenized index fields (None: the store has no index);
    ``index`` is the put's own choice (False: not indexed; a list: those paths). The
    texts every path finds (``langgraph.store.base.get_text_at_path``) are joined with
    blank lines into one text, embedded once: one vector per item.
    """
    if fields is None or index is False:
        return None
    paths = fields if index is None else tokenized_fields(index)
    texts = [text for _, path in paths for text in get_text_at_path(value, path)]
    return "\n\n".join(texts) if texts else None


def item_time(key: str, value: Mapping[str, object]) -> tuple[datetime | None, str | None]:
    """The ``occurred_at`` and ``conversation`` a value gives (:data:`OCCURRED_AT_FIELD`,
    :data:`CONVERSATION_FIELD`), each None when absent or null.

    Raises:
        ConfigError: ``occurred_at`` is not ISO 8601 text, or ``conversation`` is not a
            non-empty str (a value is JSON, so neither can be anything else).
    """
    when = value.get(OCCURRED_AT_FIELD)
    try:
        occurred = door_time(f"value[{OCCURRED_AT_FIELD!r}] of {key!r}", when, datetimes=False)
    except ConfigError as error:
        raise ConfigError(
            f"{error} (the key {OCCURRED_AT_FIELD!r} of a value dates the item; name the "
            "field otherwise to store something else)"
        ) from None
    thread = value.get(CONVERSATION_FIELD)
    if thread is not None and not isinstance(thread, str):
        raise ConfigError(
            f"value[{CONVERSATION_FIELD!r}] of {key!r} is {shown(thread)} "
            f"({type(thread).__name__}); expected a str, the conversation's name (the key "
            f"{CONVERSATION_FIELD!r} of a value names the item's conversation)"
        )
    return occurred, check_conversation(thread)


def item_document(
    namespace: tuple[str, ...],
    key: str,
    value: Mapping[str, object],
    *,
    text: str | None,
    created_at: datetime,
    updated_at: datetime,
    dimensions: int,
    occurred_at: datetime | None = None,
    conversation: str | None = None,
) -> Document:
    """An item as the document that stores it.

    The value's top-level keys go into the metadata under ``VALUE_PREFIX``, beside the
    encoded namespace, the two timestamps (ISO 8601) and whether it is indexed. An item
    without an index text is stored with a zero vector (it scores 0.0, and a semantic
    search lists it after the scored items) and an empty text. ``occurred_at`` and
    ``conversation`` are the entry's own fields (:func:`item_time`).

    Raises:
        JsonError: ``value`` is not a JSON object (protocol's JSON rules).
    """
    if not isinstance(value, Mapping):
        raise InvalidNamespaceError(  # a ValueError, like LangGraph's own checks
            f"value of {key!r} is a {type(value).__name__}; expected a dict (or None to delete)"
        )
    metadata: dict[str, object] = {}
    for name, field in value.items():
        if not isinstance(name, str):
            raise InvalidNamespaceError(
                f"value of {key!r} has the key {shown(name)} ({type(name).__name__}); "
                "expected str keys (a JSON object)"
            )
        metadata[VALUE_PREFIX + name] = field
    metadata[NS_KEY] = encode_namespace(namespace)
    # Always with microseconds, so the bookkeeping has one size
    # (docs/pages/tutorials/langgraph.md).
    metadata[CREATED_KEY] = created_at.isoformat(timespec="microseconds")
    metadata[UPDATED_KEY] = updated_at.isoformat(timespec="microseconds")
    metadata[INDEXED_KEY] = text is not None
    return Document(
        text="" if text is None else text,
        id=item_id(namespace, key),
        metadata=metadata,
        embedding=None if text is not None else [0.0] * dimensions,
        occurred_at=occurred_at,
        conversation=conversation,
    )


def item_from_document(document: Document) -> Item:
    """The item a stored document holds (made by :func:`item_document`)."""
    return Item(**_item_fields(document))


def search_item(hit: ScoredDocument | Document, score: float | None) -> SearchItem:
    """A search hit as LangGraph's SearchItem, with ``score`` (None: not ranked)."""
    document = hit.document if isinstance(hit, ScoredDocument) else hit
    return SearchItem(**_item_fields(document), score=score)


def item_namespace(document: Document) -> tuple[str, ...]:
    return decode_namespace(document.metadata[NS_KEY])


class _ItemFields(TypedDict):
    """What an ``Item`` and a ``SearchItem`` are made of, as their keyword arguments."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, object]
    created_at: datetime
    updated_at: datetime


def _item_fields(document: Document) -> _ItemFields:
    meta = document.metadata
    cut = len(VALUE_PREFIX)
    value = {k[cut:]: v for k, v in meta.items() if k.startswith(VALUE_PREFIX)}
    assert document.id is not None
    return _ItemFields(
        namespace=decode_namespace(meta[NS_KEY]),
        key=decode_key(document.id),
        value=value,
        created_at=datetime.fromisoformat(meta[CREATED_KEY]),
        updated_at=datetime.fromisoformat(meta[UPDATED_KEY]),
    )


# --- filters ---------------------------------------------------------------------------

#: A check the store cannot make inside its scan, applied to each item's value after it.
PostFilter = Callable[[Mapping[str, object]], bool]

_MISSING = object()


def translate_filter(
    spec: Mapping[str, object] | None,
) -> tuple[dict[str, object], PostFilter | None]:
    """A LangGraph ``SearchOp.filter`` as a trio-recall filter, plus what must run after.

    Top-level entries whose operand is a scalar (plain equality) or an operator dict
    (``$eq $ne $gt $gte $lt $lte``; trio-recall's ``$in $nin $exists`` pass too) become
    a filter on ``VALUE_PREFIX + key``, which the store applies inside its scan, before
    top-k. Entries that compare a nested object (``{"a": {"b": 1}}``: ``value["a"]``
    holds at least ``b == 1``) or a list (equal length, items equal in turn) have no
    form in the filter language; they are returned as one post-filter, evaluated on each
    value with the same scalar rules (``protocol.filters``: types never mix, a missing
    key fails every comparison but ``$ne``).

    Raises:
        FilterError: not a dict, a key that is not a str, an unknown operator, or an
            operand of the wrong type. Nothing is searched.
    """
    if spec is None:
        return {}, None
    if not isinstance(spec, Mapping):
        raise FilterError(f"filter is a {type(spec).__name__}; expected a dict")
    scan: dict[str, object] = {}
    later: list[tuple[str, Callable[[object], bool]]] = []
    for key, wanted in spec.items():
        if not isinstance(key, str):
            raise FilterError(f"filter key {shown(key)} is a {type(key).__name__}; expected a str")
        if _is_operators(wanted):
            scan[VALUE_PREFIX + key] = dict(wanted)
        elif isinstance(wanted, Mapping | list | tuple):
            later.append((key, _compile(wanted)))
        else:
            scan[VALUE_PREFIX + key] = {"$eq": wanted}
    parse_filter(scan)  # refuse a bad operator or operand before anything is searched
    if not later:
        return scan, None

    def post(value: Mapping[str, object]) -> bool:
        return all(check(value.get(key, _MISSING)) for key, check in later)

    return scan, post


def _is_operators(wanted: object) -> TypeGuard[Mapping[object, object]]:
    return isinstance(wanted, Mapping) and any(
        isinstance(k, str) and k.startswith("$") for k in wanted
    )


def _compile(wanted: object) -> Callable[[object], bool]:
    """A check of one value against a LangGraph filter operand, at any depth."""
    if _is_operators(wanted):
        assert isinstance(wanted, Mapping)
        tree = parse_filter({"x": dict(wanted)})
        return lambda actual: matches(tree, {} if actual is _MISSING else {"x": actual})
    if isinstance(wanted, Mapping):
        fields = [(k, _compile(v)) for k, v in wanted.items()]
        return lambda actual: (
            isinstance(actual, Mapping)
            and all(check(actual.get(k, _MISSING)) for k, check in fields)
        )
    if isinstance(wanted, list | tuple):
        items = [_compile(v) for v in wanted]
        return lambda actual: (
            isinstance(actual, list | tuple)
            and len(actual) == len(items)
            and all(check(a) for check, a in zip(items, actual, strict=True))
        )
    tree = parse_filter({"x": {"$eq": wanted}})
    return lambda actual: matches(tree, {} if actual is _MISSING else {"x": actual})


def distinct_namespaces(documents: Iterable[Document]) -> set[tuple[str, ...]]:
    return {item_namespace(d) for d in documents}
