"""The caller's side of a store: one handle class over one backend seam.

:class:`StoreHandle` does, for every backend, what the caller's side owes: it checks
every argument (each write's checks run here, once: ``prepare.py``), builds the checked
write message, sends it through the backend's bounded inbox and awaits the reply; it
emits the read events and binds query vectors to the store's embedding profile. What
differs between backends sits below the seam, in a :class:`~.backend.Backend` (the
in-memory actor, the PostgreSQL actor). ``PgStoreHandle`` (``actors/_pg/store.py``) is
a thin subclass that only adds the table's name.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar, cast, final

import attrs
import msgspec
import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    DEFAULT_NAMESPACE,
    ConfigError,
    DeleteResult,
    Document,
    EmbeddingProfile,
    RetrievalReport,
    RetrievedTurn,
    ScoredDocument,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    VectorStoreUsage,
)
from protocol.checks import check_filter, check_time
from protocol.filters import Filter
from protocol.messages import (
    Clear,
    Cleared,
    Dedupe,
    Delete,
    DocumentsUpserted,
    Forget,
    Forgotten,
    Supersede,
    TurnsStored,
    UpsertDocuments,
)

from .backend import Backend, PutDocuments, PutTurns, StaleVersion, Write
from .events import CURRENT_RUN, retrieve_event, search_event
from .mailbox import Envelope, ReplySlot
from .precomputed import embedding_matrix
from .prepare import (
    check_dedupe,
    check_documents,
    check_expiry,
    check_forget,
    check_ids,
    check_k,
    check_name,
    check_ttl,
    check_turns,
    clamp_k,
    clock_now,
    expiry_of,
    turns_request,
)
from .queries import check_query_profile

__all__ = ["KEEP", "Keep", "NoPublicConstructor", "StoreHandle", "StoreStatistics"]

T = TypeVar("T")

#: ``update(expires_at="keep")`` (the default): the new version keeps the current
#: version's expiry.
Keep = Literal["keep"]
KEEP: Keep = "keep"

#: How many times ``update`` reads the current version again after a concurrent update
#: won, before it gives up.
UPDATE_ATTEMPTS = 8


class NoPublicConstructor(type):
    """A metaclass that makes "only ``open_*`` builds this" a ``TypeError`` (trio's
    ``NoPublicConstructor``): a handle or a ``Memory`` is only ever made by the function
    that runs its actors, so it can never outlive or skip them. The ``open_*`` function
    builds one with ``cls._create(...)``."""

    def __call__(cls, *args: object, **kwargs: object) -> None:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; it is made "
            f"by {getattr(cls, '_opened_by', 'its open_* function')}"
        )

    def _create(cls: type[T], *args: object, **kwargs: object) -> T:
        return cast(T, type.__call__(cls, *args, **kwargs))


@final
@attrs.frozen
class StoreStatistics:
    """A point-in-time view of the actor's inbox and state.

    Attributes:
        inbox_size: the inbox's capacity.
        inbox_used: requests waiting in the inbox.
        tasks_waiting_send: callers blocked because the inbox is full.
        version: commits so far.
        poisoned: whether the actor has crashed.
    """

    inbox_size: int
    inbox_used: int
    tasks_waiting_send: int
    version: int
    poisoned: bool


class StoreHandle(metaclass=NoPublicConstructor):
    """The caller's side of a store, on either backend. Get one from
    :func:`~actors.open_store` (in memory) or :func:`~actors.open_pg_store` (whose
    ``PgStoreHandle`` is this class plus the table's name).

    One class for every backend: the argument checks, the checked write messages, the
    read events and the profile binding live here once, over the
    :class:`~actors._store.backend.Backend` seam. Writes go through the actor's bounded
    inbox; reads read one snapshot (in memory, the last commit; on pg, one read-only
    transaction). ``refresh()`` is on every handle (in memory it reads nothing), so a
    caller that wants fresh counters needs no backend test; only the pg ``table``
    stays on the thin ``PgStoreHandle``.

    Each write is checked here, once, in the caller's task (``check_turns``,
    ``check_documents``): a refused write raises before anything is sent, and the
    actor trusts the checked batch it is sent (it only embeds, sizes what needs the
    embedder, and commits).

    Once the actor has crashed every method raises :class:`~protocol.Poisoned`; once the
    store has closed, ``trio.ClosedResourceError``; if the actor stopped while the store
    is open, ``trio.BrokenResourceError``.

    Every write (``store_turns``, ``add_documents``, ``upsert``, ``delete``, ``clear``)
    is one message through the actor's bounded inbox. A full inbox makes the caller wait
    for room (waiting callers go in the order they came). Cancelled while it waits for
    room, the call has sent nothing and nothing changes; cancelled once the request is
    queued, the actor still applies it, all or nothing, and drops the reply.
    """

    #: What the constructor's error names as the way to get one.
    _opened_by: ClassVar[str] = "open_store or open_pg_store"

    def __init__(self, actor: Backend, backend: str) -> None:
        self._actor = actor
        self._backend = backend
        self._send = actor.send.clone()
        self._closed = False

    @property
    def backend(self) -> str:
        """Which backend this is (``"memory"``, ``"pg"``), as events and ``Memory``
        report it."""
        return self._backend

    async def store_turns(
        self,
        turns: Sequence[UnifiedMessage],
        namespace: str = DEFAULT_NAMESPACE,
        source: str = "offload",
        metadata: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
        texts: Sequence[str] | None = None,
        *,
        occurred_at: dt.datetime | None = None,
        conversation: str | None = None,
        expires_at: dt.datetime | None = None,
        ttl: float | dt.timedelta | None = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
    ) -> TurnsStored:
        """Store a batch of turns, all or nothing (design §3).

        Every turn is size-checked (the dropped head too); a batch longer than the
        capacity keeps its newest turns; the survivors are embedded in one call, checked,
        normalized and committed together. ``metadata`` applies to every turn of the
        batch. ``ids`` names each turn (an explicit memory's id): an id already live in
        the namespace is replaced. Without it, each id is ``turn-<sequence>``.
        ``texts`` gives each turn the text it is indexed and embedded by, in place of
        its projection (a turn with its context,
        :func:`protocol.compaction.contextual_entry`); the message is kept and returned
        as is. Each turn's size against
        ``max_entry_bytes`` counts its payload, a fixed overhead per block after the
        first, the metadata as compact JSON (once per turn), the source, its id, the
        conversation and its index text (``protocol.checks.entry_bytes``).

        ``occurred_at`` (an aware datetime, kept in UTC) is when the turns happened;
        None stamps the time of the write. ``conversation`` names the conversation they
        belong to (None: none): the store numbers a conversation's entries 1, 2, 3...
        in commit order, and, unless ``texts`` is given, indexes and embeds each turn
        of a conversation, or each turn given an ``occurred_at``, by
        :func:`protocol.entry_text` of its projection, its date and (in a
        conversation) the projection of the entry before it there, while the message
        is kept and returned as is (``actors._store.prepare`` has the rule).

        ``expires_at`` (an aware datetime) or ``ttl`` (seconds > 0 or a timedelta, from
        the store clock's now), not both, makes every turn of the batch expire: from
        that instant no read returns it, and the store reclaims it by its own bounded
        work. None (the default): never; offloaded history never expires unless its
        writer says so.

        ``dedupe="exact"``: a turn whose text (its projection, or its ``texts`` entry)
        equals that of a current, unexpired entry of the namespace, or of an earlier
        turn of the batch, is not written; its id in the reply is the existing one, and
        it is listed in ``duplicates``. ``dedupe="near"``: the same for a current entry
        whose cosine with the turn's vector is at least ``near_threshold`` (None:
        ``actors._store.prepare.NEAR_DUPLICATE_COSINE``). The check and the commit are
        one step in the actor, so concurrent writers cannot both write one text. None
        (the default): memories accumulate.

        Blocks while the inbox is full, then until the actor has applied the batch.
        Cancelled while it waits for room in the inbox, it has sent nothing and nothing
        changes; cancelled once the batch is queued, the actor still applies it, fully
        or not at all, and drops the reply. If the store closes first, it is not applied.

        Raises:
            EntryTooLarge, JsonError, EmbeddingError, EmbedderError, ConfigError: the
                batch was rejected and the store is unchanged (a naive ``occurred_at``
                or a bad ``conversation`` is a ConfigError that names it).
            Poisoned: the actor has crashed.
        """
        self._check()
        config = self._actor.config
        expiry = check_expiry(expires_at, ttl, self._store_clock)
        mode, threshold = check_dedupe(dedupe, near_threshold)
        request = turns_request(
            turns,
            namespace,
            source,
            metadata,
            ids,
            texts,
            occurred_at,
            conversation,
            expires_at=expiry,
            dedupe=mode,
            near_threshold=threshold,
        )
        # The write's one check (the actor trusts the batch it builds).
        batch = check_turns(
            request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
        )
        result = await self._request(PutTurns(request, batch))
        assert isinstance(result, TurnsStored)
        return result

    async def add_documents(
        self,
        documents: Sequence[Document],
        namespace: str | None = None,
        *,
        embeddings: object = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[str]:
        """Store documents, all or nothing, and return their ids in input order.

        A document without an id gets ``document_id(text, metadata)``, a content hash, so
        adding the same content twice keeps one entry (with an ``occurred_at`` or a
        ``conversation``, the hash covers those too: see ``Document.with_id``). A
        document whose id is already live in the namespace replaces it (see
        :meth:`upsert`). ``namespace=None`` is the default namespace. Blocks and
        behaves on cancellation like :meth:`store_turns`.

        Each document's ``occurred_at`` (None: the time of the write) and
        ``conversation`` are stored with it and come back on every read. A document of
        a conversation, or one given an ``occurred_at``, is indexed and embedded by
        :func:`protocol.entry_text` of its text, its date and (in a conversation) the
        text of the entry before it there, as :meth:`store_turns` says; reads return
        its text as given.

        ``embeddings``: the documents' precomputed embeddings as one 2-D array of real
        numbers, row i for document i (a numpy array, or anything ``numpy.asarray``
        takes), instead of ``Document(embedding=...)`` on each: the same stored vectors,
        without a Python float per component, which is what a bulk load of precomputed
        vectors spends most of its time on (benches/README.md, "pg at scale"). The
        embedder is not called. The array is copied before this returns.

        A document's ``expires_at`` makes it expire (see :meth:`store_turns`);
        ``ttl`` (seconds > 0 or a timedelta) gives every document without its own an
        ``expires_at`` of the store clock's now plus ``ttl``. ``dedupe`` and
        ``near_threshold`` as in :meth:`store_turns`: a duplicate document is not
        written, and its id in the result is the existing memory's. A document may not
        set ``valid_from``, ``valid_to``, ``version`` or ``supersedes`` (the store
        does; :meth:`update` writes a new version).

        Raises:
            EntryTooLarge: a document's text, ids and metadata are over
                ``max_entry_bytes`` (``protocol.checks.document_bytes``).
            ConfigError: not a list of Documents, one id with two different contents
                (or rows), or ``embeddings`` beside a document's own embedding.
            EmbeddingError, EmbedderError: the batch could not be embedded, or
                ``embeddings`` is not a finite real matrix with one row per document of
                the store's width.
            Poisoned: the actor has crashed.
        """
        return await self.upsert(
            documents,
            namespace,
            embeddings=embeddings,
            dedupe=dedupe,
            near_threshold=near_threshold,
            ttl=ttl,
        )

    async def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
        namespace: str | None = None,
        *,
        embeddings: object = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[str]:
        """Store plain texts as documents (:meth:`add_documents`), all or nothing.

        ``metadatas`` and ``ids``, when given, are lists as long as ``texts``: text i
        gets metadata i and id i. Without ids each document's id is its content hash
        (``document_id``). ``embeddings``, when given, is their precomputed embeddings
        (see :meth:`add_documents`), and ``dedupe``, ``near_threshold`` and ``ttl`` are
        :meth:`add_documents`'. Blocks and behaves on cancellation like
        :meth:`store_turns`.

        Raises:
            ConfigError: ``texts``, ``metadatas`` or ``ids`` is not a list (a lone str is
                refused), or their lengths differ; anything :meth:`add_documents`
                raises.
        """
        texts = _as_list("texts", texts)
        columns: dict[str, list[Any]] = {}
        for name, column in (("metadatas", metadatas), ("ids", ids)):
            if column is None:
                continue
            values = _as_list(name, column)
            if len(values) != len(texts):
                raise ConfigError(
                    f"{name} has {len(values)} items and texts has {len(texts)}; expected "
                    "one per text"
                )
            columns[name] = values
        documents = [
            Document(
                text=text,
                metadata={} if "metadatas" not in columns else columns["metadatas"][i],
                id=None if "ids" not in columns else columns["ids"][i],
            )
            for i, text in enumerate(texts)
        ]
        return await self.add_documents(
            documents,
            namespace,
            embeddings=embeddings,
            dedupe=dedupe,
            near_threshold=near_threshold,
            ttl=ttl,
        )

    async def upsert(
        self,
        documents: Sequence[Document],
        namespace: str | None = None,
        *,
        embeddings: object = None,
        dedupe: Dedupe | None = None,
        near_threshold: float | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> list[str]:
        """Store documents; the same id replaces the vector, text and metadata.

        A replaced document gets a new sequence number, so it counts as the newest entry
        for FIFO eviction and for ties. Only the current version is replaced, in place
        (same version number, no history; :meth:`update` keeps history). Returns the
        ids in input order (a duplicate's, with ``dedupe``, is the existing memory's).
        ``embeddings``, ``dedupe``, ``near_threshold`` and ``ttl`` as in
        :meth:`add_documents`. Blocks, and behaves on cancellation, like
        :meth:`store_turns`.
        """
        if isinstance(documents, str | bytes) or not isinstance(documents, Sequence):
            raise ConfigError(
                f"documents is a {type(documents).__name__}; expected a list of Document"
            )
        self._check()
        space = self._namespace(namespace)
        mode, threshold = check_dedupe(dedupe, near_threshold)
        span = None if ttl is None else check_ttl(ttl)
        matrix = embedding_matrix(embeddings, len(documents))
        with_ids = [d.with_id() if isinstance(d, Document) else d for d in documents]
        if span is not None:
            now = clock_now(self._actor.clock)
            with_ids = [
                expiry_of(d, now, span) if isinstance(d, Document) else d for d in with_ids
            ]
        request = UpsertDocuments(
            documents=with_ids,
            namespace=space,
            embeddings=matrix,
            dedupe=mode,
            near_threshold=threshold,
        )
        config = self._actor.config
        # The write's one check (the actor trusts the batch it builds).
        batch = check_documents(
            request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
        )
        result = await self._request(PutDocuments(request, batch))
        assert isinstance(result, DocumentsUpserted)
        ids = [d.id for d in with_ids if isinstance(d, Document) and d.id is not None]
        if not result.duplicates:
            return ids
        # A duplicate's id is the memory it duplicates: the reply's ids are the
        # survivors' in order, each the written or the existing id.
        stored = dict(
            zip((d.id for d in batch.survivors if d.id is not None), result.ids, strict=True)
        )
        return [stored.get(i, i) for i in ids]

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> DeleteResult:
        """Delete entries of one namespace by id (``None``: the default namespace).

        Ids are unique within a namespace, so a delete never reaches another namespace.
        A delete is :meth:`forget` by ids: every version of each memory goes, with
        every trace of its text.
        Returns which ids were deleted and which were missing, deduplicated, in input
        order. Blocks, and behaves on cancellation, like :meth:`store_turns`; a delete
        is all or nothing too.
        """
        wanted = check_ids(ids)
        result = await self._request(Delete(ids=wanted, namespace=self._namespace(namespace)))
        assert isinstance(result, DeleteResult)
        return result

    async def clear(self, namespace: str | None = None) -> Cleared:
        """Remove every entry of ``namespace``, or every entry when it is None.

        Blocks, and behaves on cancellation, like :meth:`store_turns`.
        """
        if namespace is not None:
            check_name("namespace", namespace)
        result = await self._request(Clear(namespace=namespace))
        assert isinstance(result, Cleared)
        return result

    async def update(
        self,
        id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        namespace: str | None = None,
        valid_from: dt.datetime | None = None,
        expires_at: dt.datetime | Keep | None = KEEP,
        create: bool = False,
    ) -> Document:
        """Write a new version of memory ``id`` and keep the old one as history.

        The current version n is closed at ``valid_from`` (its ``valid_to``) and kept;
        version n + 1 becomes current, valid from ``valid_from`` (None: the store
        clock's now), with ``supersedes=n``. ``text`` and ``metadata`` (None: the
        current version's) are the new version's; its ``occurred_at`` is its
        ``valid_from``; its ``conversation`` and ``source_id`` are kept, and its
        ``expires_at`` too unless given (None: never). The new version is a document
        entry (a turn's update becomes a document). ``create=True`` writes version 1
        when there is no current memory ``id`` (``text`` is then needed).

        A concurrent update of the same memory is serialized: the store checks, in the
        commit itself, that version n is still current; if another update won, this
        one reads the new current version and tries again (at most 8 times).

        Returns the new current version, as reads return it. Blocks, and behaves on
        cancellation, like :meth:`store_turns`.

        Raises:
            ConfigError: no current memory ``id`` in the namespace (without
                ``create``); ``text`` None with nothing to keep; a ``valid_from`` not
                strictly later than the current version's; bad arguments; or 8
                concurrent updates in a row won.
            EntryTooLarge, EmbeddingError, EmbedderError: as :meth:`add_documents`.
            Poisoned: the actor has crashed.
        """
        self._check()
        memory_id = check_name("id", id)
        space = self._namespace(namespace)
        if text is not None and not isinstance(text, str):
            raise ConfigError(f"text is a {type(text).__name__}; expected a str or None")
        if not isinstance(create, bool):
            raise ConfigError(f"create is {create!r:.60}; expected a bool")
        given_from = check_time("valid_from", valid_from)
        keep_expiry = isinstance(expires_at, str)
        if keep_expiry and expires_at != KEEP:
            raise ConfigError(
                f"expires_at is {expires_at!r:.60}; expected an aware datetime, None or 'keep'"
            )
        new_expiry = None if keep_expiry else check_time("expires_at", expires_at)
        config = self._actor.config
        for _ in range(UPDATE_ATTEMPTS):
            found = await self._actor.fetch([memory_id], space)
            current = found[0] if found else None
            if current is None and not create:
                raise ConfigError(
                    f"no current memory with id {memory_id!r} in namespace {space!r}; "
                    "expected an existing id (or create=True)"
                )
            when = given_from if given_from is not None else clock_now(self._actor.clock)
            if current is None:
                if text is None:
                    raise ConfigError(
                        f"text is None and there is no memory {memory_id!r} in namespace "
                        f"{space!r} to keep it from; expected the text of version 1"
                    )
                version = 0
                document = Document(
                    text=text,
                    id=memory_id,
                    metadata={} if metadata is None else metadata,
                    occurred_at=given_from,
                    expires_at=new_expiry,
                )
            else:
                version = current.version or 1
                since = current.valid_from or current.occurred_at
                if since is not None and when <= since:
                    raise ConfigError(
                        f"valid_from is {when.isoformat()}, not later than version "
                        f"{version}'s valid_from {since.isoformat()} of memory "
                        f"{memory_id!r}; expected a later time"
                    )
                document = Document(
                    text=current.text if text is None else text,
                    id=memory_id,
                    metadata=current.metadata if metadata is None else metadata,
                    source_id=current.source_id,
                    # Dated in its index text only when its time was given, as any
                    # write (the store stamps ``valid_from`` on it otherwise).
                    occurred_at=given_from,
                    conversation=current.conversation,
                    expires_at=current.expires_at if keep_expiry else new_expiry,
                )
            request = UpsertDocuments(
                documents=[document],
                namespace=space,
                supersede=Supersede(id=memory_id, version=version, valid_from=when),
            )
            batch = check_documents(
                request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
            )
            try:
                result = await self._request(PutDocuments(request, batch))
            except StaleVersion:
                continue
            assert isinstance(result, DocumentsUpserted)
            (written,) = batch.survivors
            return msgspec.structs.replace(
                written,
                metadata=dict(written.metadata),
                occurred_at=when,
                valid_from=when,
                version=version + 1,
                supersedes=version or None,
            )
        raise ConfigError(
            f"memory {memory_id!r} in namespace {space!r} was updated concurrently "
            f"{UPDATE_ATTEMPTS} times while this update tried; nothing was written"
        )

    async def history(self, id: str, namespace: str | None = None) -> list[Document]:
        """Every version of memory ``id`` the store still holds, oldest first (version
        1..n, the last the current one unless it was closed), expired ones left out;
        ``[]`` for an unknown id. A read: it does not use the inbox and changes
        nothing (cancellation as :meth:`get_by_ids`).

        Raises:
            ConfigError: ``id`` is not a non-empty str, or a bad namespace.
            Poisoned: the actor has crashed.
        """
        self._check()
        memory_id = check_name("id", id)
        found = await self._actor.history(memory_id, self._namespace(namespace))
        self._check()
        return found

    async def documents(
        self, namespace: str | None = None, *, filter: Mapping[str, object] | Filter | None = None
    ) -> list[Document]:
        """Every current memory of ``namespace`` (the default one when None), oldest
        first (the order they were written in): what a user's export holds. Expired
        memories and closed versions are left out, as from every read; a memory's older
        versions are :meth:`history`'s. ``filter`` keeps those whose metadata matches
        (see :class:`~protocol.SearchRequest`).

        One read of one snapshot (a search by the zero vector, which scores every entry
        0.0, with ``k`` the store's capacity), so a batch committed meanwhile is listed
        whole or not at all. It does not use the inbox and changes nothing; a cancel
        behaves as in :meth:`search`.

        Raises:
            ConfigError: a bad namespace.
            FilterError: the filter cannot be applied.
            StoreUnavailable: (pg) the database failed after the retries.
            Poisoned: the actor has crashed.
        """
        request = SearchRequest(
            vector=[0.0] * self.config.dimensions,
            k=max(self.capacity, 1),
            namespace=namespace,
            kind="similarity",
            filter=cast(Filter | None, filter),  # SearchRequest parses a dict
        )
        hits = await self.search(request)
        return [hit.document for hit in sorted(hits, key=lambda hit: hit.sequence or 0)]

    async def forget(
        self,
        ids: Sequence[str] | None = None,
        *,
        namespace: str | None = None,
        filter: Mapping[str, object] | Filter | None = None,
        before: dt.datetime | None = None,
    ) -> list[str]:
        """Forget memories, every version of each, all or nothing, and every trace of
        their text: no search kind, recall, ``get_by_ids``, ``history``, export, BM25
        statistic, sparse index, embedding cache entry or later event holds it.

        Either ``ids`` (those memories of ``namespace``; None: the default namespace),
        or a selection of ``namespace``: the memories whose current version matches
        ``filter`` (a metadata filter, as for search) and whose ``occurred_at`` is
        before ``before``. With neither, every memory of the namespace is forgotten.
        Returns the ids forgotten (for ``ids``, in input order, those not there left
        out). Blocks, and behaves on cancellation, like :meth:`store_turns`.

        Raises:
            ConfigError: ``ids`` with a filter or ``before``; bad ids or namespace; a
                naive ``before``.
            FilterError: the filter cannot be applied.
            Poisoned: the actor has crashed.
        """
        self._check()
        space = self._namespace(namespace)
        wanted = None if ids is None else check_ids(ids)
        request = check_forget(
            Forget(
                ids=wanted,
                namespace=space,
                filter=cast(Filter | None, filter),
                before=before,
            )
        )
        result = await self._request(request)
        assert isinstance(result, Forgotten)
        return result.ids

    # --- reads: one engine, each backend's actor answers its views --------------------

    async def search(self, request: SearchRequest) -> list[ScoredDocument]:
        """Run one search (see :class:`~protocol.SearchRequest`): ``recall`` (the
        engine's tuned recall, ``actors/_retrieval/recall.py``), ``similarity``, ``mmr``,
        ``hybrid`` or ``bm25``, with an optional metadata filter, time window and score
        threshold.

        Every kind reads one snapshot: in memory, the scan's pinned rows; on pg, one
        read-only transaction. The filter and the time window apply before top-k, so
        ``k`` hits come back whenever ``k`` entries match. Dense scores are cosine
        similarity in [-1, 1]; a recall hit's ``score`` is its cosine too, with its
        ``rank`` and the ``channels`` that lifted it; a hybrid hit's score is its fused
        RRF score; ``ranks`` gives each hit's 1-based rank in each list.

        A store bound to an embedding profile (see ``profile``) refuses a non-zero
        ``request.vector`` that does not name the same profile in ``request.profile``.

        Does not use the inbox, so a full inbox never delays it, and it changes
        nothing. A cancel reaches the query's embedder call, as :meth:`retrieve` says;
        in memory, a scan waiting for the scan runner drops its answer. On pg, cancelled
        while it waits for a read slot or between retries, it leaves at once; once its
        transaction runs in a worker thread, it finishes its statement first (bounded
        by ``statement_timeout``), then ``Cancelled`` is raised.

        Raises:
            ConfigError: not a SearchRequest, or (pg) a bm25, hybrid or recall search
                on a table opened with ``keyword_index=False``.
            FilterError: the filter cannot be applied.
            EmbeddingError: the query could not be embedded, or its vector was made by
                another model or at another width than the store's profile.
            EmbedderError: the embedder failed.
            StoreUnavailable: (pg) the database failed after the retries.
            Poisoned: the actor has crashed.
        """
        hits, _ = await self._search(request, turns=False)
        return cast(list[ScoredDocument], hits)

    async def search_turns(self, request: SearchRequest) -> RetrievalReport:
        """:meth:`search`, with each hit as the turn it was stored as (its message,
        source and metadata: what a memory's recall injects), and how many entries
        were scored, as a report (``exact`` False through an approximate index).

        Blocks, behaves on cancellation and raises as :meth:`search` does.
        """
        turns, scanned = await self._search(request, turns=True)
        return RetrievalReport(
            turns=cast(list[RetrievedTurn], turns), scanned=scanned, exact=self._actor.exact
        )

    async def _search(
        self, request: SearchRequest, *, turns: bool
    ) -> tuple[list[ScoredDocument] | list[RetrievedTurn], int]:
        self._check()
        started = time.perf_counter()
        if not isinstance(request, SearchRequest):
            raise ConfigError(f"request is a {type(request).__name__}; expected a SearchRequest")
        actor = self._actor
        namespace = self._namespace(request.namespace)
        if request.filter is not None:
            check_filter(request.filter)  # before the query is embedded or any SQL runs
        if request.vector is not None:
            query = actor.checked_query(request.vector, request.profile)
        else:
            assert request.query is not None
            if request.profile is not None:
                check_query_profile(actor.profile, actor.config.dimensions, None, request.profile)
            # A bm25 search reads keywords alone: its query is never embedded; recall
            # embeds its query once it knows which names to leave out.
            query = (
                None
                if request.kind in ("bm25", "recall")
                else actor.query_vector(await actor.embedder.query(request.query))
            )
        hits, scanned = await actor.search(request, namespace, query, turns=turns)
        if actor.on_event is not None:
            k = clamp_k(request.k, actor.config.max_entries)
            scores = [h.score for h in hits]
            actor.on_event(
                search_event(
                    self.backend,
                    actor.profile,
                    request,
                    namespace,
                    k,
                    scores,
                    started,
                    CURRENT_RUN.get(),
                )
            )
        return hits, scanned

    async def retrieve(self, query: str, k: int) -> RetrievalReport:
        """Embed ``query`` and return the ``k`` best entries across every namespace.

        Does not use the inbox, so a full inbox or a slow write never delays it: it sees
        one committed state (the in-memory store's last snapshot; one SQL statement for
        pg). A read changes nothing, so cancellation leaves nothing behind. A cancel
        reaches the query's embedder call (a sync embedder's worker thread is abandoned
        and its result dropped; an async embedder gets the cancel itself). In memory, a
        scan waiting for the scan runner then drops its answer without affecting other
        reads; on pg, once the statement runs in its worker thread it finishes first
        (bounded by ``statement_timeout``), then ``Cancelled`` is raised.

        Raises:
            ConfigError: ``k ≤ 0``.
            EmbedderError, EmbeddingError: the query could not be embedded.
            StoreUnavailable: (pg) the database failed after the retries.
            Poisoned: the actor has crashed.
        """
        return await self._retrieve(query, k, None)

    async def retrieve_in(self, namespace: str, query: str, k: int) -> RetrievalReport:
        """Like :meth:`retrieve` (the inbox and cancellation too), scoped to one
        namespace; never returns another's entries."""
        return await self._retrieve(query, k, check_name("namespace", namespace))

    async def retrieve_embedding(
        self,
        vector: object,
        k: int,
        namespace: str | None = None,
        *,
        profile: EmbeddingProfile | None = None,
    ) -> RetrievalReport:
        """Rank entries against a vector you already have.

        The vector need not be normalized: a normalized copy is scored, and the caller's
        array is never changed. A zero vector scores 0.0 everywhere. A store bound to an
        embedding profile refuses a non-zero vector unless ``profile`` names that same
        profile (see :class:`~protocol.SearchRequest`).

        In memory, a scan over at least ``thread_scan_threshold`` floats, or one of at
        least 2**20 floats that starts together with other reads (or while a batch
        runs), waits for the store's scan runner and shares one matrix product with
        every read that waited with it; a smaller lone read runs inline, at once. On
        pg it is one statement. It does not use the inbox, so a full inbox never delays
        it; if the caller is cancelled while it waits, its answer is dropped and the
        other reads are not affected; a read changes nothing.

        Raises:
            ConfigError: ``k ≤ 0`` or an empty namespace.
            EmbeddingError: a vector of the wrong width or with a non-finite component,
                or from another model than the store's profile.
            Poisoned: the actor has crashed.
            trio.ClosedResourceError: the store closed before the scan ran.
        """
        self._check()
        k = clamp_k(check_k(k), self._actor.config.max_entries)
        if namespace is not None:
            check_name("namespace", namespace)
        started = time.perf_counter()
        query = self._actor.checked_query(vector, profile)
        return await self._scanned(query, k, namespace, None, started)

    async def _retrieve(self, query: str, k: int, namespace: str | None) -> RetrievalReport:
        self._check()
        started = time.perf_counter()
        actor = self._actor
        # Any k means "at most that many": cut to the capacity, so that the scan and
        # the event it reports carry a k that fits anywhere (msgpack stops at 64 bits).
        k = clamp_k(check_k(k), actor.config.max_entries)
        if not isinstance(query, str):
            raise ConfigError(f"query is a {type(query).__name__}; expected str")
        raw = await actor.embedder.query(query)
        return await self._scanned(actor.query_vector(raw), k, namespace, query, started)

    async def _scanned(
        self,
        vector: npt.NDArray[np.float32] | None,
        k: int,
        namespace: str | None,
        query: str | None,
        started: float,
    ) -> RetrievalReport:
        actor = self._actor
        report = await actor.scan(vector, k, namespace)
        if actor.on_event is not None:
            actor.on_event(
                retrieve_event(
                    self.backend,
                    actor.profile,
                    namespace,
                    query,
                    k,
                    report,
                    started,
                    CURRENT_RUN.get(),
                )
            )
        return report

    async def get_by_ids(
        self,
        ids: Sequence[str],
        namespace: str | None = None,
        *,
        as_of: dt.datetime | None = None,
    ) -> list[Document]:
        """The current, unexpired documents with these ids in one namespace (``None``:
        the default), with their versions; with ``as_of``, each id's version valid at
        that instant (``valid_from <= as_of < valid_to``) instead.

        Missing ids are left out; the order is not promised. Reads one snapshot (in
        memory the last commit, on pg one statement) without using the inbox, so a
        full inbox never delays it, and it changes nothing. Cancelled while it waits
        (in memory at its one checkpoint; on pg for a read slot or between retries), it
        leaves at once; on pg, once its statement runs in a worker thread, that
        statement finishes first (bounded by ``statement_timeout``), then
        ``Cancelled`` is raised.

        Raises:
            ConfigError: ``ids`` is not a list of non-empty str, or a bad namespace.
            StoreUnavailable: (pg) the database failed after the retries.
            Poisoned: the actor has crashed.
        """
        self._check()
        wanted = check_ids(ids)
        when = check_time("as_of", as_of)
        space = self._namespace(namespace)
        found = await (
            self._actor.fetch(wanted, space)
            if when is None
            else self._actor.fetch(wanted, space, when)
        )
        self._check()  # closed while it read: as every method once the store closes
        return found

    async def check_keyword_search(self) -> None:
        """Raise ConfigError if this store cannot answer a ``bm25`` or ``hybrid``
        search as it is now: a store in memory always can; a pg table opened with
        ``keyword_index=False`` cannot (``open_memory`` asks before hybrid recall).

        One read on pg (cancellation as :meth:`get_by_ids`), none in memory.
        """
        self._check()
        await self._actor.check_keyword_search()

    # --- state ---------------------------------------------------------------------------

    async def refresh(self) -> VectorStoreUsage:
        """:meth:`usage` after reading the counters afresh: on pg, the table's now, so
        they include every process's commits (one statement, a read: it does not use
        the inbox); in memory they are always fresh, and this only checkpoints.

        Cancellation: in memory, at its checkpoint; on pg, cancelled while it waits for
        a read slot or between retries, it leaves at once; once its statement runs in a
        worker thread, that statement finishes first (bounded by ``statement_timeout``),
        then ``Cancelled`` is raised.
        """
        self._check()
        await self._actor.refresh()
        return self.usage()

    def usage(self) -> VectorStoreUsage:
        """The fill level, in O(1). On pg, the table's counters as of this handle's
        last commit or read: another process's commits count from this handle's next
        read, write or ``refresh``."""
        self._check()
        entries, evicted, zero, _ = self._actor.counters()
        config = self._actor.config
        fraction = entries / config.max_entries
        warn = config.warn_fraction
        return VectorStoreUsage(
            entries=entries,
            capacity=config.max_entries,
            fraction=fraction,
            near_cap=warn is not None and fraction >= warn,
            evicted_entries=evicted,
            zero_norm_entries=zero,
        )

    def statistics(self) -> StoreStatistics:
        """The inbox and the actor now (see :class:`StoreStatistics`): ``inbox_size``
        (its capacity), ``inbox_used`` (writes queued), ``tasks_waiting_send`` (callers
        waiting for room), ``version`` (commits so far; on pg the table's, every
        process's, as last seen) and ``poisoned``."""
        stats = self._send.statistics()
        return StoreStatistics(
            inbox_size=self._actor.inbox_size,
            inbox_used=stats.current_buffer_used,
            tasks_waiting_send=stats.tasks_waiting_send,
            version=self._actor.counters().version,
            poisoned=self._actor.crash is not None,
        )

    @property
    def clock(self) -> Callable[[], dt.datetime]:
        """The store's clock (``open_store(clock=)``): a zero-argument callable giving
        the aware datetime every "now" of the store comes from."""
        return self._actor.clock

    @property
    def profile(self) -> EmbeddingProfile | None:
        """The embedding profile the store is bound to: its embedder's ``profile`` (on
        pg, or the one the table was bound to by an earlier open: provider, model,
        dimensions and options only), or None when there is none (then query vectors
        are checked for width only). Pass it as ``SearchRequest(profile=...)`` with a
        vector you embedded."""
        return self._actor.profile

    def __len__(self) -> int:
        self._check()
        return self._actor.counters().entries

    def is_empty(self) -> bool:
        return len(self) == 0

    @property
    def capacity(self) -> int:
        self._check()
        return self._actor.config.max_entries

    @property
    def config(self) -> VectorStoreConfig:
        return self._actor.config

    def _store_clock(self) -> dt.datetime:
        """The store clock's now, unchecked (``check_expiry`` checks it), read only
        when a write asks for it."""
        return self._actor.clock()

    def _namespace(self, namespace: str | None) -> str:
        return DEFAULT_NAMESPACE if namespace is None else check_name("namespace", namespace)

    async def _request(self, request: Write) -> object:
        self._check()
        reply = ReplySlot[object]()
        envelope = Envelope(request, reply)
        try:
            # When the inbox has room, queue without send()'s extra scheduler round
            # trip: waiting for the reply is this call's checkpoint. A cancelled caller
            # still sends nothing, and a full inbox still makes it wait in send().
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                self._send.send_nowait(envelope)
            except trio.WouldBlock:
                await self._send.send(envelope)
        except trio.ClosedResourceError:
            self._check()
            raise trio.ClosedResourceError("the store is closed") from None
        except trio.BrokenResourceError:
            # trio's distinction, kept: our side is open, the actor's has gone.
            self._check()
            raise trio.BrokenResourceError("the store actor has stopped") from None
        return await reply.wait()

    def _check(self) -> None:
        self._actor.check_usable()
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")

    def _close(self) -> None:
        self._closed = True
        self._send.close()


def _as_list(name: str, values: object) -> list[Any]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ConfigError(f"{name} is a {type(values).__name__}; expected a list")
    return list(values)
