"""The five memory operations of the command line and the MCP server, as plain data.

:class:`MemoryService` is the one implementation of remember, recall, forget,
get_memories and memory_stats over an open store of either backend (the in-memory
``StoreHandle`` or the PostgreSQL ``PgStoreHandle``). Its arguments come from JSON (an
MCP tool call) or from a command line, so every one is checked here, before the store
sees it, and a bad one raises :class:`ToolInputError` with a one-line message naming the
argument, the value seen and what was expected. The MCP server turns that error into a
tool error result; the command line prints it. Its results are JSON-ready dicts and
lists.

A memory is a document of the store (design §9): its id is its content hash
(``Document.with_id``: the text and metadata, and its ``occurred_at`` and
``conversation`` when given), so remembering the same text with the same metadata
again keeps one memory (and updates its source); its ``source`` is the document's
``source_id``. It happened at its ``occurred_at`` (given as ISO 8601 text; left out, the
store stamps the time of the write) and may belong to a ``conversation``, whose
memories are neighbours in the order they were remembered.

``recall`` searches as ``Memory.retrieve`` does unless ``mode`` says otherwise: the
store's tuned recall (``SearchRequest(kind="recall")``) with ``Memory``'s relevance floor
(``actors.doors``, which the LangChain and LangGraph adapters follow too).

Namespaces are the store's: an id is unique within its namespace and no operation ever
reads or deletes across namespaces. ``None`` is the library's default
namespace (``protocol.DEFAULT_NAMESPACE``), so a program using ``open_memory`` over the
same PostgreSQL table sees the same memories.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import attrs

from protocol import (
    DEFAULT_NAMESPACE,
    ConfigError,
    Document,
    EntryTooLarge,
    FilterError,
    JsonError,
    ScoredDocument,
    SearchRequest,
    parse_filter,
)
from protocol.checks import (
    MAX_CONVERSATION_BYTES,
    JsonValue,
    check_int,
    check_json_object,
    shown,
)

from .. import Store
from ..doors import (
    DEFAULT_MODE,
    candidate_depth,
    check_mode,
    check_similarity,
    door_time,
    relevance_floor,
)

__all__ = ["MAX_IDS", "MAX_NAME_BYTES", "MemoryService", "ToolInputError", "hit", "iso_time"]

#: The longest namespace or source accepted, in UTF-8 bytes: the in-memory store keeps
#: a namespace per slot (its memory bound counts the longest one in use).
MAX_NAME_BYTES = 256
#: The most ids one forget or get_memories call takes.
MAX_IDS = 10_000


class ToolInputError(ValueError):
    """A bad argument to one of the operations: the message is one line naming the
    argument, the value seen and what was expected. Nothing was changed."""


@attrs.define(eq=False)
class MemoryService:
    """The memory operations over an open ``store`` (borrowed: never closed here).

    Args:
        store: an open store of either backend.
        embedder_name: what ``memory_stats`` reports as the embedder (``"minilm"``,
            ``"hashing"``...).
        backend: what ``memory_stats`` reports as where memory lives (``"pg"``,
            ``"memory"``, or a longer description such as the data directory).

    Each method awaits the store: it blocks while the store's inbox is full, and a
    cancelled call leaves the store as the store's own methods do (a write is applied
    fully or not at all).
    """

    store: Store
    embedder_name: str
    backend: str

    async def remember(
        self,
        text: object,
        *,
        namespace: object = None,
        source: object = None,
        metadata: object = None,
        occurred_at: object = None,
        conversation: object = None,
    ) -> dict[str, JsonValue]:
        """Store one memory and return ``{"id": ...}`` (its content hash).

        Args:
            text: what to remember.
            namespace: where (``None``: the default namespace).
            source: where it came from, or None.
            metadata: a JSON object, or None.
            occurred_at: when it happened or was said, ISO 8601 text (a date, or a time
                without an offset, is UTC); None: the time of the write.
            conversation: the conversation it belongs to, or None: memories of one
                conversation are neighbours in the order they are remembered.

        Raises:
            ToolInputError: empty or non-str text, text (with its metadata and source)
                over the store's ``max_entry_bytes``, metadata that is not a JSON object,
                a bad namespace, source, time or conversation. Nothing is stored.
        """
        body = _text("text", text)
        space = _namespace(namespace)
        origin = None if source is None else _name("source", source)
        meta = _metadata(metadata)
        when = _time("occurred_at", occurred_at)
        thread = _conversation(conversation)
        cap = self.store.config.max_entry_bytes
        size = len(body.encode("utf-8", "surrogatepass"))
        if size > cap:
            raise ToolInputError(
                f"text is {size} bytes of UTF-8 ({shown(body, 40)}); this memory takes at "
                f"most {cap} bytes per entry (max_entry_bytes)"
            )
        document = Document(
            text=body, metadata=meta, source_id=origin, occurred_at=when, conversation=thread
        ).with_id()
        try:
            (memory_id,) = await self.store.add_documents([document], namespace=space)
        except EntryTooLarge as error:
            raise ToolInputError(
                f"text, metadata and source count {error.bytes} bytes; this memory takes "
                f"at most {error.max_entry_bytes} bytes per entry (max_entry_bytes)"
            ) from None
        return {"id": memory_id}

    async def recall(
        self,
        query: object,
        *,
        k: object = 5,
        namespace: object = None,
        min_similarity: object = None,
        filter: object = None,
        mode: object = DEFAULT_MODE,
        since: object = None,
        until: object = None,
    ) -> list[dict[str, JsonValue]]:
        """The ``k`` memories that best answer ``query``, best first, each
        ``{"id", "text", "score", "source", "metadata", "occurred_at", "conversation"}``
        (``score`` is the hit's cosine similarity in every mode but ``bm25`` and
        ``hybrid``; see :func:`hit`), plus ``"rank"`` and ``"channels"`` for ``recall``.

        Args:
            query: the text to search for.
            k: at most this many hits, an int > 0.
            namespace: the namespace to search (``None``: the default one).
            min_similarity: keep hits whose cosine similarity is at least this, in
                [-1, 1]. None: ``Memory``'s floor (0.02) for ``recall``, none for
                ``similarity`` and ``mmr``; ``bm25`` and ``hybrid`` refuse one
                (:func:`actors.doors.relevance_floor`).
            filter: a metadata filter in the store's language (``{"kind": "pet"}``,
                ``{"year": {"$gte": 2020}}``, ``$and``/``$or``/``$not``...).
            mode: ``"recall"`` (the default: what ``Memory.retrieve`` runs), or
                ``"similarity"`` (cosine), ``"bm25"`` (keywords), ``"hybrid"`` (the two
                fused), ``"mmr"`` (cosine, diversified).
            since, until: keep memories whose ``occurred_at`` is at or after ``since``
                and before ``until``: ISO 8601 text (a date, or a time without an
                offset, is UTC), applied before top-k like a filter.

        Raises:
            ToolInputError: any bad argument. Nothing is searched.
        """
        text = _text("query", query)
        try:
            count = check_int("k", k)
            kind = check_mode(mode)
            given = None if min_similarity is None else check_similarity(min_similarity)
            floor = relevance_floor(kind, given)
        except ConfigError as error:
            raise ToolInputError(str(error)) from None
        tree = None
        if filter is not None:
            if not isinstance(filter, Mapping):
                raise ToolInputError(
                    f"filter is {shown(filter)} ({type(filter).__name__}); expected a JSON "
                    'object such as {"kind": "pet"} or {"year": {"$gte": 2020}}'
                )
            try:
                tree = parse_filter(filter)
            except FilterError as error:
                raise ToolInputError(f"filter: {error}") from None
        start, end = _time("since", since), _time("until", until)
        space = _namespace(namespace)
        try:
            request = SearchRequest(
                query=text,
                k=count,
                kind=kind,
                fetch_k=candidate_depth(count),
                score_threshold=floor,
                filter=tree,
                namespace=space,
                since=start,
                until=end,
            )
        except ConfigError as error:  # since after until
            raise ToolInputError(str(error)) from None
        return [hit(found) for found in await self.store.search(request)]

    async def forget(self, ids: object, *, namespace: object = None) -> dict[str, list[str]]:
        """Delete memories by id in one namespace, all or nothing: returns
        ``{"deleted": [...], "missing": [...]}`` (deduplicated, in input order; an id
        that is not in this namespace is missing, whatever other namespaces hold).

        Raises:
            ToolInputError: ``ids`` is not a list of non-empty str, or a bad namespace.
        """
        wanted = _ids(ids)
        result = await self.store.delete(wanted, namespace=_namespace(namespace))
        return {"deleted": list(result.deleted), "missing": list(result.missing)}

    async def get_memories(
        self, ids: object, *, namespace: object = None
    ) -> list[dict[str, JsonValue]]:
        """The memories with these ids in one namespace, in input order (deduplicated),
        each ``{"id", "text", "source", "metadata", "occurred_at", "conversation"}``
        (``occurred_at`` as ISO 8601 in UTC); an id not there is left out.

        Raises:
            ToolInputError: ``ids`` is not a list of non-empty str, or a bad namespace.
        """
        wanted = _ids(ids)
        found = {
            d.id: d for d in await self.store.get_by_ids(wanted, namespace=_namespace(namespace))
        }
        return [_memory(found[i]) for i in dict.fromkeys(wanted) if i in found]

    async def memory_stats(self) -> dict[str, JsonValue]:
        """``{"entries", "capacity", "fill", "evictions", "embedder", "backend"}``: the
        whole store's counts (every namespace), fresh from the database on pg."""
        usage = await self.store.refresh()
        return {
            "entries": usage.entries,
            "capacity": usage.capacity,
            "fill": usage.fraction,
            "evictions": usage.evicted_entries,
            "embedder": self.embedder_name,
            "backend": self.backend,
        }


def _memory(document: Document) -> dict[str, JsonValue]:
    return {
        "id": document.id,
        "text": document.text,
        "source": document.source_id,
        "metadata": document.metadata,
        "occurred_at": iso_time(document.occurred_at),
        "conversation": document.conversation,
    }


def hit(found: ScoredDocument) -> dict[str, JsonValue]:
    """One search hit as the MCP server and ``search --json`` give it: the memory's
    fields (:func:`_memory`) and its ``score``; a recall hit also has its ``rank`` (1 is
    the best) and its ``channels`` (what lifted it: ``"dense"``, ``"bm25"``,
    ``"speaker"``, ``"date"``, ``"neighbor"``, ``"link"``)."""
    memory = _memory(found.document)
    shaped = {"id": memory.pop("id"), "text": memory.pop("text"), "score": found.score}
    shaped.update(memory)
    if found.rank is not None:
        shaped["rank"] = found.rank
        shaped["channels"] = list(found.channels)
    return shaped


def iso_time(when: dt.datetime | None) -> str | None:
    """A stored time as the doors give it: ISO 8601 in UTC (``+00:00``)."""
    return None if when is None else when.isoformat()


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ToolInputError(f"{name} is {shown(value)} ({type(value).__name__}); expected a str")
    if not value.strip():
        raise ToolInputError(f"{name} is {shown(value)}; expected some non-blank text")
    return value


def _name(name: str, value: object, limit: int = MAX_NAME_BYTES) -> str:
    """A namespace, a source or a conversation: a non-empty str of at most ``limit``
    bytes, without NUL, other control characters or lone surrogates (PostgreSQL refuses
    NUL and surrogates, so both backends refuse them alike)."""
    if not isinstance(value, str):
        raise ToolInputError(
            f"{name} is {shown(value)} ({type(value).__name__}); expected a non-empty str"
        )
    if not value.strip():
        raise ToolInputError(f"{name} is {shown(value)}; expected a non-blank str")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ToolInputError(
            f"{name} is {shown(value)}, which holds a lone surrogate; expected valid Unicode"
        ) from None
    if size > limit:
        raise ToolInputError(
            f"{name} is {size} bytes of UTF-8 ({shown(value, 40)}); expected at most {limit}"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ToolInputError(
            f"{name} is {shown(value)}; expected no control characters (NUL, newline, tab...)"
        )
    return value


def _namespace(value: object) -> str:
    return DEFAULT_NAMESPACE if value is None else _name("namespace", value)


def _metadata(value: object) -> dict[str, JsonValue]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolInputError(
            f"metadata is {shown(value)} ({type(value).__name__}); expected a JSON object "
            "(str keys, JSON values)"
        )
    try:
        return check_json_object(value)
    except JsonError as error:
        raise ToolInputError(str(error)) from None


def _time(name: str, value: object) -> dt.datetime | None:
    """A time argument: None, or ISO 8601 text (JSON and a command line carry no
    datetime)."""
    try:
        return door_time(name, value, datetimes=False)
    except ConfigError as error:
        raise ToolInputError(str(error)) from None


def _conversation(value: object) -> str | None:
    """A conversation's name: a namespace's rules, up to the store's longer limit."""
    return None if value is None else _name("conversation", value, MAX_CONVERSATION_BYTES)


def _ids(value: object) -> list[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ToolInputError(
            f"ids is {shown(value)} ({type(value).__name__}); expected a list of memory ids "
            '(["3f2a..."])'
        )
    if len(value) > MAX_IDS:
        raise ToolInputError(f"ids has {len(value)} items; expected at most {MAX_IDS} per call")
    for i, entry in enumerate(value):
        if not isinstance(entry, str) or not entry:
            raise ToolInputError(
                f"ids[{i}] is {shown(entry)} ({type(entry).__name__}); expected a non-empty "
                "str (a memory id)"
            )
        _name(f"ids[{i}]", entry)
    return list(value)
