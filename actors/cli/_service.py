"""The memory operations of the command line and the MCP server, as plain data.

:class:`MemoryService` is the one implementation of remember, recall, update, history,
forget, get_memories and memory_stats over an open store of either backend (the
in-memory ``StoreHandle`` or the PostgreSQL ``PgStoreHandle``). Its arguments come from
JSON (an MCP tool call) or from a command line, so every one is checked here, before the
store sees it, and a bad one raises :class:`ToolInputError` with a one-line message
naming the argument, the value seen and what was expected. The MCP server turns that
error into a tool error result; the command line prints it.

Its results are JSON objects, each the one shape of its kind: the MCP tool's structured
result and the command's ``--json`` output are the same object, made here and nowhere
else (``remember``/``add``: ``{"id", "duplicate"}``; ``recall``/``search``:
``{"hits"}``; ``update``: ``{"id", "version", "valid_from"}``; ``history``:
``{"versions"}``; ``forget`` and ``forget --all``: ``{"ids", "missing"}``;
``get_memories``: ``{"memories", "missing"}``; ``memory_stats``/``stats``: the counts).

A memory is a document of the store (design §9): its id is its content hash
(``Document.with_id``: the text and metadata, and its ``occurred_at`` and
``conversation`` when given); its ``source`` is the document's ``source_id``. It
happened at its ``occurred_at`` (given as ISO 8601 text; left out, the store stamps the
time of the write) and may belong to a ``conversation``, whose memories are neighbours
in the order they were remembered.

Memory over time (docs/pages/how-to/memory-over-time.md): ``remember`` skips a duplicate by
default (``dedupe="exact"``: hosts re-send the same fact) and may expire; ``update``
writes a new version under the same id and keeps the old one, which ``history`` lists
and ``as_of`` reads; ``forget`` forgets every version, by ids or by a selection, and is
always explicit (no call selects a whole namespace by default); ``forget_namespace``
forgets a whole namespace, named (the command line's ``forget --all``, not a tool of
the MCP server). Every memory comes back
with its ``version``, ``valid_from``, ``valid_to`` and ``expires_at``.

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
    Filter,
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
from protocol.messages import Dedupe

from .. import Store, StoreHandle
from ..doors import (
    DEFAULT_MODE,
    candidate_depth,
    check_mode,
    check_similarity,
    door_time,
    relevance_floor,
)

__all__ = [
    "DEDUPE_MODES",
    "DEFAULT_DEDUPE",
    "MAX_IDS",
    "MAX_NAME_BYTES",
    "MemoryService",
    "MissingMemory",
    "ToolInputError",
    "hit",
    "iso_time",
]

#: The longest namespace or source accepted, in UTF-8 bytes: the in-memory store keeps
#: a namespace per slot (its memory bound counts the longest one in use).
MAX_NAME_BYTES = 256
#: The most ids one forget or get_memories call takes.
MAX_IDS = 10_000
#: What ``remember``/``add`` take as ``dedupe`` (``"none"``: the store's None), and
#: their default: hosts re-send the same fact (docs/pages/how-to/memory-over-time.md).
DEDUPE_MODES = ("exact", "near", "none")
DEFAULT_DEDUPE = "exact"
#: The longest ``ttl_seconds`` taken: 100 years (a longer one is surely a mistake, and
#: a timedelta has its own bounds).
MAX_TTL_SECONDS = 100 * 365 * 86_400


class ToolInputError(ValueError):
    """A bad argument to one of the operations: the message is one line naming the
    argument, the value seen and what was expected. Nothing was changed."""


class MissingMemory(ToolInputError):
    """An update of a memory that is not there (never was, forgotten or expired): the
    command line exits 1 for it, as for ``forget`` of a missing id, not 2."""


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
    #: Where memory lives, for ``memory_stats`` (``Where.describe()``: the data
    #: directory, the database's host and table, or this process); None: not said.
    location: str | None = None

    async def remember(
        self,
        text: object,
        *,
        namespace: object = None,
        source: object = None,
        metadata: object = None,
        occurred_at: object = None,
        conversation: object = None,
        dedupe: object = DEFAULT_DEDUPE,
        expires_at: object = None,
        ttl_seconds: object = None,
    ) -> dict[str, JsonValue]:
        """Store one memory and return ``{"id": ..., "duplicate": ...}``: its content
        hash and False, or, when ``dedupe`` found the same memory already there, that
        memory's id and True (nothing was written).

        Args:
            text: what to remember.
            namespace: where (``None``: the default namespace).
            source: where it came from, or None.
            metadata: a JSON object, or None.
            occurred_at: when it happened or was said, ISO 8601 text (a date, or a time
                without an offset, is UTC); None: the time of the write.
            conversation: the conversation it belongs to, or None: memories of one
                conversation are neighbours in the order they are remembered.
            dedupe: ``"exact"`` (the default of the doors, because hosts re-send the
                same fact): a text equal to a current memory's in the namespace writes
                nothing and answers that memory's id; ``"near"``: the same for a
                current memory whose cosine with this one is at least the store's
                near-duplicate threshold; ``"none"``: always write (the same content
                hash still keeps one memory).
            expires_at: when the memory stops being visible, ISO 8601 text; None:
                never (unless ``ttl_seconds``).
            ttl_seconds: seconds from now (the store's clock) until it expires, a
                number > 0; not with ``expires_at``.

        Raises:
            ToolInputError: empty or non-str text, text (with its metadata and source)
                over the store's ``max_entry_bytes``, metadata that is not a JSON object,
                a bad namespace, source, time, conversation, dedupe or expiry. Nothing
                is stored.
        """
        body = _text("text", text)
        space = _namespace(namespace)
        origin = None if source is None else _name("source", source)
        meta = _metadata(metadata)
        when = _time("occurred_at", occurred_at)
        thread = _conversation(conversation)
        mode = _dedupe(dedupe)
        expiry = _expiry(expires_at, ttl_seconds)
        cap = self.store.config.max_entry_bytes
        size = len(body.encode("utf-8", "surrogatepass"))
        if size > cap:
            raise ToolInputError(
                f"text is {size} bytes of UTF-8 ({shown(body, 40)}); this memory takes at "
                f"most {cap} bytes per entry (max_entry_bytes)"
            )
        document = Document(
            text=body,
            metadata=meta,
            source_id=origin,
            occurred_at=when,
            conversation=thread,
            expires_at=expiry if isinstance(expiry, dt.datetime) else None,
        ).with_id()
        ttl = expiry if isinstance(expiry, dt.timedelta) else None
        assert document.id is not None  # with_id
        found = await self.store.get_by_ids([document.id], namespace=space)
        try:
            if found and (found[0].text, found[0].metadata) != (body, meta):
                # The memory of this content hash was updated since it was remembered:
                # remembering its first content again is a new version of it, not a
                # replacement of its current version (which would lose it from history).
                return await self._again(document, found[0], space, expiry)
            (memory_id,) = await self.store.add_documents(
                [document], namespace=space, dedupe=mode, ttl=ttl
            )
        except EntryTooLarge as error:
            raise ToolInputError(
                f"text, metadata and source count {error.bytes} bytes; this memory takes "
                f"at most {error.max_entry_bytes} bytes per entry (max_entry_bytes)"
            ) from None
        # A duplicate answers the existing memory's id, which is this one's when that
        # memory has the same content hash: whether it was there tells them apart.
        there = mode is not None and bool(found)
        return {"id": memory_id, "duplicate": there or memory_id != document.id}

    async def _again(
        self,
        document: Document,
        current: Document,
        namespace: str,
        expiry: dt.datetime | dt.timedelta | None,
    ) -> dict[str, JsonValue]:
        """``remember`` of the content a memory had before an update: its next version,
        from ``document``'s ``occurred_at`` when that is later than the current
        version's start (else from now), expiring as ``remember`` was told."""
        assert document.id is not None
        start = current.valid_from or current.occurred_at
        since = document.occurred_at
        if since is not None and start is not None and since <= start:
            since = None
        if isinstance(expiry, dt.timedelta):
            now = self.store.clock() if isinstance(self.store, StoreHandle) else None
            expires: dt.datetime | None = (now or dt.datetime.now(dt.UTC)) + expiry
        else:
            expires = expiry
        try:
            await self.store.update(
                document.id,
                document.text,
                document.metadata,
                namespace=namespace,
                valid_from=since,
                expires_at=expires,
            )
        except ConfigError as error:  # forgotten meanwhile; a current version from later
            raise ToolInputError(str(error)) from None
        return {"id": document.id, "duplicate": False}

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
        as_of: object = None,
    ) -> dict[str, JsonValue]:
        """``{"hits": [...]}``: the ``k`` memories that best answer ``query``, best
        first, each ``{"id", "text", "score", "source", "metadata", "occurred_at",
        "conversation"}`` and its version fields (``score`` is the hit's cosine
        similarity in every mode but ``bm25`` and ``hybrid``; see :func:`hit`), plus
        ``"rank"`` and ``"channels"`` for ``recall``.

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
            as_of: read the memory as it was at this time (ISO 8601): each memory's
                version valid then, instead of its current one
                (docs/pages/how-to/memory-over-time.md); None reads the current versions.

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
        tree = _filter(filter)
        start, end = _time("since", since), _time("until", until)
        then = _time("as_of", as_of)
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
                as_of=then,
            )
        except ConfigError as error:  # since after until
            raise ToolInputError(str(error)) from None
        hits: list[JsonValue] = [hit(found) for found in await self.store.search(request)]
        return {"hits": hits}

    async def forget(
        self,
        ids: object = None,
        *,
        namespace: object = None,
        filter: object = None,
        before: object = None,
    ) -> dict[str, list[str]]:
        """Forget memories in one namespace, every version of each and every trace of
        their text, all or nothing: by ``ids``, or every memory matching ``filter``
        and/or that happened before ``before``. Returns ``{"ids": [...], "missing":
        [...]}``: the ids forgotten (for ``ids``: deduplicated, in input order) and the
        ids given that were not there (an id of another namespace is missing, whatever
        that namespace holds).

        Args:
            ids: a list of memory ids, or None to select by ``filter``/``before``.
            namespace: the namespace (``None``: the default one).
            filter: a metadata filter (the language of ``recall``'s); not with ``ids``.
            before: ISO 8601: the memories whose ``occurred_at`` is before it; not
                with ``ids``.

        Raises:
            ToolInputError: none of ``ids``, ``filter`` and ``before`` (a forget is
                explicit: nothing selects a whole namespace by default), ``ids`` with a
                selection, ``ids`` that is not a list of non-empty str, a bad filter,
                time or namespace. Nothing is forgotten.
        """
        # An empty filter matches everything: not a selection a forget takes.
        tree = None if isinstance(filter, Mapping) and not filter else _filter(filter)
        cutoff = _time("before", before)
        space = _namespace(namespace)
        if ids is None:
            if tree is None and cutoff is None:
                raise ToolInputError(
                    "forget was given no ids, no filter and no before; expected the ids to "
                    "forget, or a filter and/or before selecting the memories (an empty "
                    "filter is not a selection)"
                )
            forgotten = await self.store.forget(namespace=space, filter=tree, before=cutoff)
            return {"ids": list(forgotten), "missing": []}
        wanted = _ids(ids)
        if filter is not None or before is not None:
            raise ToolInputError(
                "forget was given ids and a filter or before; expected either ids, or a "
                "selection by filter and/or before"
            )
        forgotten = list(await self.store.forget(wanted, namespace=space))
        gone = set(forgotten)
        return {"ids": forgotten, "missing": [i for i in dict.fromkeys(wanted) if i not in gone]}

    async def forget_namespace(self, namespace: object) -> dict[str, list[str]]:
        """Forget every memory of one namespace, named, every version and every trace,
        all or nothing (the store's ``forget`` with no selection); the answer of
        :meth:`forget`: ``{"ids": [...], "missing": []}``, the ids forgotten. No other
        namespace is touched, and there is no default: ``namespace`` must be given.

        This is ``clear(namespace)`` with the ids it took: on PostgreSQL the same
        ``DELETE ... WHERE namespace = ...``; unlike ``clear(None)``, which empties
        every namespace, no value of ``namespace`` reaches beyond one.

        Raises:
            ToolInputError: ``namespace`` is None or not a valid namespace. Nothing is
                forgotten.
        """
        if namespace is None:
            raise ToolInputError(
                "forget of a whole namespace was given no namespace; expected the namespace "
                f"to empty, named (the default one is {DEFAULT_NAMESPACE})"
            )
        space = _name("namespace", namespace)
        return {"ids": list(await self.store.forget(namespace=space)), "missing": []}

    async def update(
        self,
        memory_id: object,
        *,
        text: object = None,
        metadata: object = None,
        valid_from: object = None,
        namespace: object = None,
    ) -> dict[str, JsonValue]:
        """Write a new version of a memory and answer ``{"id", "version",
        "valid_from"}`` of it: the current version is closed at ``valid_from`` and kept
        (``history``), and reads see the new one (docs/pages/how-to/memory-over-time.md).

        Args:
            memory_id: the memory's id, as ``remember`` or ``recall`` gave it.
            text: the new text, or None to keep the current version's.
            metadata: the new metadata (a JSON object, replacing the current one), or
                None to keep it.
            valid_from: ISO 8601: since when the new version holds; None: now (the
                store's clock). It must be later than the current version's.
            namespace: the namespace (``None``: the default one).

        Raises:
            MissingMemory: no current memory has that id in the namespace.
            ToolInputError: neither ``text`` nor ``metadata``, a bad id, text, metadata,
                time or namespace, or a ``valid_from`` not after the current version's.
                Nothing is written.
        """
        target = _name("id", memory_id)
        body = None if text is None else _text("text", text)
        meta = None if metadata is None else _metadata(metadata)
        since = _time("valid_from", valid_from)
        space = _namespace(namespace)
        if body is None and meta is None:
            raise ToolInputError(
                "update was given neither text nor metadata; expected the new text, the "
                "new metadata, or both"
            )
        if not await self.store.get_by_ids([target], namespace=space):
            raise MissingMemory(
                f"id is {shown(target)}, and namespace {space!r} holds no current memory "
                "with that id; expected the id of a memory there (remember writes a new one)"
            )
        try:
            document = await self.store.update(
                target, body, meta, namespace=space, valid_from=since
            )
        except EntryTooLarge as error:
            raise ToolInputError(
                f"text, metadata and source count {error.bytes} bytes; this memory takes "
                f"at most {error.max_entry_bytes} bytes per entry (max_entry_bytes)"
            ) from None
        except ConfigError as error:  # no such memory; valid_from not after the current
            raise ToolInputError(str(error)) from None
        return {
            "id": document.id,
            "version": document.version,
            "valid_from": iso_time(document.valid_from),
        }

    async def history(
        self, memory_id: object, *, namespace: object = None
    ) -> dict[str, JsonValue]:
        """``{"versions": [...]}``: every version of a memory still held, oldest first
        (version 1 first), each as :func:`_memory` gives it (with its ``version``,
        ``valid_from`` and ``valid_to``); ``[]`` for an id that is not there (never
        was, or forgotten).

        Raises:
            ToolInputError: a bad id or namespace.
        """
        target = _name("id", memory_id)
        versions = await self.store.history(target, namespace=_namespace(namespace))
        shaped: list[JsonValue] = [_memory(version) for version in versions]
        return {"versions": shaped}

    async def get_memories(
        self, ids: object, *, namespace: object = None, as_of: object = None
    ) -> dict[str, JsonValue]:
        """``{"memories": [...], "missing": [...]}``: the memories with these ids in
        one namespace, in input order (deduplicated), each as :func:`_memory` gives it
        (times as ISO 8601 in UTC), and the ids not there. ``as_of`` (ISO 8601) reads
        each memory's version valid at that time instead of its current one; an id
        with no version valid then is missing.

        Raises:
            ToolInputError: ``ids`` is not a list of non-empty str, a bad namespace or
                time.
        """
        wanted = _ids(ids)
        then = _time("as_of", as_of)
        space = _namespace(namespace)
        found = {d.id: d for d in await self.store.get_by_ids(wanted, namespace=space, as_of=then)}
        asked = list(dict.fromkeys(wanted))
        memories: list[JsonValue] = [_memory(found[i]) for i in asked if i in found]
        missing: list[JsonValue] = [i for i in asked if i not in found]
        return {"memories": memories, "missing": missing}

    async def memory_stats(self, namespace: object = None) -> dict[str, JsonValue]:
        """``{"entries", "capacity", "fill", "evictions", "embedder", "backend",
        "location"}`` (and ``"namespace"`` when one is given), fresh from the database
        on pg.

        Args:
            namespace: count only this namespace's current memories in ``entries`` (and
                say which in ``"namespace"``); ``None``: every namespace. ``capacity``,
                ``fill`` and ``evictions`` are the whole store's either way (the
                namespaces share it).

        Raises:
            ToolInputError: a namespace that is not a non-empty str of at most
                :data:`MAX_NAME_BYTES` UTF-8 bytes.
        """
        space = None if namespace is None else _name("namespace", namespace)
        usage = await self.store.refresh()
        stats: dict[str, JsonValue] = {
            "entries": usage.entries,
            "capacity": usage.capacity,
            "fill": usage.fraction,
            "evictions": usage.evicted_entries,
            "embedder": self.embedder_name,
            "backend": self.backend,
            "location": self.location,
        }
        if space is not None:
            stats["entries"] = await self._count(space)
            stats["namespace"] = space
        return stats

    async def _count(self, namespace: str) -> int:
        """The memories of one namespace (a scan with a zero vector, which scores 0.0
        against each, as export lists them)."""
        import numpy as np

        zero = np.zeros(self.store.config.dimensions, dtype=np.float32)
        report = await self.store.retrieve_embedding(zero, max(self.store.capacity, 1), namespace)
        return len(report.turns)


def _memory(document: Document) -> dict[str, JsonValue]:
    """A stored memory as the doors give it: its fields, and its version (``version``,
    from 1; ``valid_from``; ``valid_to``, null for the current version) and
    ``expires_at`` (null: never), times as ISO 8601 in UTC."""
    return {
        "id": document.id,
        "text": document.text,
        "source": document.source_id,
        "metadata": document.metadata,
        "occurred_at": iso_time(document.occurred_at),
        "conversation": document.conversation,
        "version": document.version,
        "valid_from": iso_time(document.valid_from),
        "valid_to": iso_time(document.valid_to),
        "expires_at": iso_time(document.expires_at),
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


def _filter(value: object) -> Filter | None:
    """A metadata filter argument (a JSON object in the store's language), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ToolInputError(
            f"filter is {shown(value)} ({type(value).__name__}); expected a JSON "
            'object such as {"kind": "pet"} or {"year": {"$gte": 2020}}'
        )
    try:
        return parse_filter(value)
    except FilterError as error:
        raise ToolInputError(f"filter: {error}") from None


def _dedupe(value: object) -> Dedupe | None:
    """``dedupe``: ``"exact"``, ``"near"`` or ``"none"`` (None for the store)."""
    if value == "none":
        return None
    if value == "exact" or value == "near":
        return value
    raise ToolInputError(
        f"dedupe is {shown(value)} ({type(value).__name__}); expected one of "
        f"{', '.join(DEDUPE_MODES)}"
    )


def _expiry(expires_at: object, ttl_seconds: object) -> dt.datetime | dt.timedelta | None:
    """When a memory expires: an ``expires_at`` time, a ``ttl_seconds`` span (the store
    adds it to its clock's now), or None: never."""
    when = _time("expires_at", expires_at)
    if ttl_seconds is None:
        return when
    if when is not None:
        raise ToolInputError(
            f"expires_at is {shown(expires_at)} and ttl_seconds is {shown(ttl_seconds)}; expected "
            "one of them, not both"
        )
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float):
        raise ToolInputError(
            f"ttl_seconds is {shown(ttl_seconds)} ({type(ttl_seconds).__name__}); expected "
            "a number of seconds > 0"
        )
    if not 0 < ttl_seconds <= MAX_TTL_SECONDS:  # NaN fails this too
        raise ToolInputError(
            f"ttl_seconds is {shown(ttl_seconds)}; expected a number of seconds > 0 and at "
            f"most {MAX_TTL_SECONDS} (100 years)"
        )
    return dt.timedelta(seconds=ttl_seconds)


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
