"""``open_memory``: the store, compaction, recall and injection actors in one nursery,
and :class:`Memory`, the caller's side of them (design §7).

Every agent turn runs compress → retrieve → inject → dispatch; :meth:`Memory.turn` runs
all four and reports each stage.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Literal, TypedDict, final

import attrs
import msgspec
import trio

from protocol import (
    ConfigError,
    DispatchError,
    Document,
    EmbeddingCall,
    EmbeddingUsageTotals,
    Event,
    Injected,
    JsonError,
    MemoryConfig,
    Poisoned,
    RetrievalReport,
    TurnReport,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
    VectorStoreError,
    VectorStoreUsage,
    digest_request,
    projection,
)
from protocol._memory import describe_error, memory_id
from protocol.checks import (
    check_int,
    check_messages,
    check_time,
    pack,
    shown,
)
from protocol.events import (
    EmbeddingCompleted,
    EmbeddingFailed,
    EmbeddingStarted,
    RetrieverCompleted,
    RetrieverFailed,
    RetrieverStarted,
    fingerprint,
)
from protocol.filters import Filter
from protocol.messages import Compress, Compressed, Dedupe, Inject, Recall

from .._embedding.hashing import HashingEmbedder
from .._embedding.protocols import AnyEmbedder
from .._embedding.usage import EmbeddingUsageLog
from .._inmemory.scan import DEFAULT_THREAD_SCAN_THRESHOLD
from .._inmemory.store import open_store
from .._store.contract import Store
from .._store.events import EventHub, StoreWatch, Subscription, new_run_id, now
from .._store.handle import NoPublicConstructor, StoreHandle
from .._store.lifecycle import supervise
from .._store.mailbox import Mailbox
from .._store.prepare import check_k, check_name, clamp_k
from .compaction import CompactionActor, Summarizer, default_summarizer
from .consolidation import Consolidator, check_consolidator, consolidate_memory
from .dispatch import Dispatcher, EchoDispatcher
from .injection import InjectionActor
from .recall_actor import RecallActor

__all__ = ["Memory", "MemoryStatistics", "Turned", "memory_id", "open_memory"]

logger = logging.getLogger("trio_recall.memory")


class Turned(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :meth:`Memory.turn`.

    Attributes:
        reply: the assistant's message.
        request: the request exactly as dispatched (compressed, with the recall block).
            Append ``reply`` and the next user message to its ``messages`` for the next
            turn; that turn's ``inject`` then replaces the old recall block.
        report: each stage's outcome and timing.
    """

    reply: UnifiedMessage
    request: UnifiedRequest
    report: TurnReport


_USER_DIGESTS = 4096


class _Run(TypedDict):
    """The fields every ``retriever.*`` event of one ``Memory.retrieve`` shares."""

    namespace: str
    query_fingerprint: str
    k: int
    backend: str
    profile: str | None
    kind: str
    retriever: str
    run_id: str


@final
@attrs.frozen
class MemoryStatistics:
    """Inbox sizes and fill levels, per actor, and the event hub's state.

    Attributes:
        inbox_size: the capacity of each of the three inboxes (``open_memory``'s
            ``inbox_size``).
        compaction_used, recall_used, injection_used: requests queued in each inbox.
        subscribers: open event subscriptions.
        events_published: events published since the memory opened.
    """

    inbox_size: int
    compaction_used: int
    recall_used: int
    injection_used: int
    subscribers: int
    events_published: int


@final
class Memory(metaclass=NoPublicConstructor):
    """The caller's side of ``open_memory``, which makes it (``Memory(...)`` raises
    ``TypeError``). Every method may be called from many tasks.

    Methods that go through an actor (``compress``, ``retrieve``, ``inject``) block while
    that actor's inbox is full, then until it replies. If the caller is cancelled while it
    waits, the actor still finishes the request (a ``compress`` may still offload) and
    the reply is dropped. After the ``open_memory`` block ends, every method raises
    ``trio.ClosedResourceError``.
    """

    _opened_by: ClassVar[str] = "open_memory"

    def __init__(
        self,
        *,
        config: MemoryConfig,
        store: Store,
        hub: EventHub,
        watch: StoreWatch,
        dispatcher: Dispatcher,
        compaction: Mailbox[Compress, Compressed],
        recall: Mailbox[Recall, RetrievalReport],
        injection: Mailbox[Inject, Injected],
        inbox_size: int,
        embedding_usage: EmbeddingUsageLog | None = None,
        consolidator: Consolidator | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._hub = hub
        self._watch = watch
        self._dispatcher = dispatcher
        self._compaction = compaction
        self._recall = recall
        self._injection = injection
        self._inbox_size = inbox_size
        self._consolidator = consolidator
        self._embedding_usage = EmbeddingUsageLog() if embedding_usage is None else embedding_usage
        # Digests of the user messages auto_store_user_input has stored, newest last;
        # bounded, so a long-lived memory does not grow it without end.
        self._stored_user: OrderedDict[bytes, None] = OrderedDict()

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def store(self) -> Store:
        """The store handle, for direct reads and writes."""
        return self._store

    # --- the four stages ----------------------------------------------------------------

    async def compress(
        self, messages: list[UnifiedMessage], *, date: str | None = None
    ) -> Compressed:
        """Apply ``MemoryConfig.strategies`` in order; see design §4.

        Args:
            messages: the prompt.
            date: when these messages were said, in any human-readable form; the
                entries ``Offload`` writes carry it (see :class:`protocol.compaction.Offload`).
                None dates them with the current UTC date and time.

        Returns:
            The new messages (the caller's list is not changed) and the report.

        A store error during a strategy is that strategy's failure, recorded in the
        report (``last_error``, through the ``PluginError`` seam), and the next strategy
        runs; ``Poisoned`` is the exception: a crashed store is a bug, so ``compress``
        raises it rather than report it (design §3, "only bugs poison").

        A full inbox makes the caller wait for room; cancelled then, it has sent nothing.
        Cancellation: if the caller is cancelled while it waits for the reply, the
        compaction actor still finishes the request (an ``Offload`` may still commit)
        and the reply is dropped.

        Raises:
            ConfigError: ``messages`` is not a list of ``UnifiedMessage``, or ``date`` is
                not a str or None.
            Poisoned: the store crashed.
        """
        if date is not None and not isinstance(date, str):
            raise ConfigError(f"date is a {type(date).__name__}; expected a str or None")
        request = Compress(messages=check_messages(messages), date=date)
        result = await self._compaction.ask(request)
        return result

    async def retrieve(
        self,
        query: str,
        k: int | None = None,
        namespace: str | None = None,
        min_similarity: float | None = None,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        as_of: dt.datetime | None = None,
    ) -> RetrievalReport:
        """The best ``k`` entries of ``namespace`` for ``query``, best first.

        The engine's recall (``SearchRequest(kind="recall")``, as the config's
        ``recall`` settings say) ranks them; ``since`` and ``until`` (aware datetimes)
        keep the entries that occurred in ``[since, until)``; ``as_of`` (an aware
        datetime) reads each memory as it was then: its version valid at that instant
        (docs/pages/how-to/memory-over-time.md), instead of the current one. Each hit
        has its cosine as ``score``, its ``rank`` and the ``channels`` that lifted it.

        ``k``, ``namespace`` and ``min_similarity`` default to the config's ``top_k``,
        ``namespace`` and ``min_similarity``. ``min_similarity`` drops hits after ranking.
        Each call is one run: ``retriever.started``, the ``vector_store.searched`` of its
        store read and ``retriever.completed`` (or ``retriever.failed``) carry its fresh
        ``run_id`` and the config's ``retriever_name``.
        Blocks while the recall actor's inbox is full, then until it replies; a cancelled
        caller's request is still answered and the reply dropped (a read changes nothing).

        Raises:
            ConfigError: a bad query, ``k``, namespace or ``min_similarity``.
            EmbedderError, EmbeddingError, Poisoned: the store could not answer.
        """
        if not isinstance(query, str):
            raise ConfigError(f"query is a {type(query).__name__}; expected str")
        # Any k means "at most that many": cut to the capacity, so the Recall message
        # and the events carry a k that msgpack can log (design §7).
        k = clamp_k(self._config.top_k if k is None else check_k(k), self._store.capacity)
        namespace = self._config.namespace if namespace is None else namespace
        check_name("namespace", namespace)
        floor = self._config.min_similarity if min_similarity is None else min_similarity
        if floor is not None and (
            isinstance(floor, bool) or not isinstance(floor, int | float) or not -1 <= floor <= 1
        ):
            raise ConfigError(f"min_similarity is {floor!r}; expected a float in [-1, 1]")
        since, until = check_time("since", since), check_time("until", until)
        as_of = check_time("as_of", as_of)
        if since is not None and until is not None and since > until:
            raise ConfigError(
                f"since is {since.isoformat()} and until is {until.isoformat()}; expected "
                "since <= until"
            )
        run_id = new_run_id()
        request = Recall(
            query=query,
            k=k,
            namespace=namespace,
            min_similarity=floor,
            settings=self._config.recall,
            since=since,
            until=until,
            retriever=self._config.retriever_name,
            run_id=run_id,
            as_of=as_of,
        )
        bound = self._store.profile
        run = _Run(
            namespace=namespace,
            query_fingerprint=fingerprint(query),
            k=k,
            backend=self._store.backend,
            profile=None if bound is None else bound.name,
            kind=self._config.recall.search,
            retriever=self._config.retriever_name,
            run_id=run_id,
        )
        started = time.perf_counter()
        self._hub.publish(RetrieverStarted(at=now(), **run))
        try:
            result = await self._recall.ask(request)
        except Exception as error:
            seconds = time.perf_counter() - started
            self._hub.publish(
                RetrieverFailed(at=now(), error=describe_error(error), seconds=seconds, **run)
            )
            raise
        self._hub.publish(
            RetrieverCompleted(
                at=now(),
                hits=len(result.turns),
                scanned=result.scanned,
                best=result.turns[0].score if result.turns else None,
                seconds=time.perf_counter() - started,
                **run,
            )
        )
        return result

    async def inject(self, report: RetrievalReport, request: UnifiedRequest) -> Injected:
        """Render ``report`` with the config's renderer and place it in ``request`` at
        the config's ``placement``, within ``RecallSettings.max_block_bytes`` (the
        lowest-ranked items dropped first; see :func:`protocol.inject`). The
        ``recall.injected`` event names every item that entered the prompt.

        Blocks while the injection actor's inbox is full, then until it replies; a
        cancelled caller's reply is dropped (injection changes nothing).

        Raises:
            ConfigError: ``report`` or ``request`` has the wrong type.
        """
        if not isinstance(report, RetrievalReport):
            raise ConfigError(f"report is a {type(report).__name__}; expected RetrievalReport")
        if not isinstance(request, UnifiedRequest):
            raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
        result = await self._injection.ask(Inject(report=report, request=request))
        return result

    async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage:
        """Send ``request`` to the dispatcher and return the assistant's message.

        There is no inbox: the dispatcher runs in the caller's task, so a cancel reaches
        it directly (``OpenAIChatDispatcher`` drops its connection).

        Raises:
            ConfigError: ``request`` is not a ``UnifiedRequest``.
            DispatchError: the dispatcher failed.
        """
        if not isinstance(request, UnifiedRequest):
            raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
        self._check_open()
        return await self._dispatcher.dispatch(request)

    async def turn(self, request: UnifiedRequest, *, date: str | None = None) -> Turned:
        """Run compress → retrieve → inject → dispatch for one agent turn.

        ``date`` is passed to :meth:`compress` (None: the current UTC date and time).

        The recall query is the projection of the newest user message; without one,
        recall is skipped (and an old recall block is removed). Recall is best-effort
        unless ``recall_errors="raise"``: a transient store or embedder error is logged
        as a warning and recorded in the report, and the turn goes on without a recall
        block. Storing the user's input (``auto_store_user_input``) is best-effort too:
        a failure is logged as a warning. ``Poisoned`` is never best-effort.

        Each stage blocks as its method does (a full inbox makes it wait). Cancellation:
        a cancelled turn may have offloaded (each batch all or nothing); nothing is
        dispatched after the cancel.

        Raises:
            ConfigError: ``request`` is not a ``UnifiedRequest``.
            Poisoned: the store crashed (before or during this turn).
            VectorStoreError: a recall error, with ``recall_errors="raise"``.
            DispatchError: the dispatcher failed; its ``report`` is the turn's
                ``TurnReport``, with ``dispatch_error`` set.
        """
        if not isinstance(request, UnifiedRequest):
            raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        compressed = await self.compress(request.messages, date=date)
        timings["compress"] = time.perf_counter() - started

        started = time.perf_counter()
        messages = compressed.messages
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        recall: RetrievalReport | None = None
        recall_error: str | None = None
        if last_user is not None:
            try:
                recall = await self.retrieve(projection(last_user))
            except VectorStoreError as error:
                # A poisoned store is a bug, not a transient failure: never best-effort.
                if isinstance(error, Poisoned) or self._config.recall_errors == "raise":
                    raise
                recall_error = describe_error(error)
                logger.warning("recall failed; the turn goes on without it: %s", recall_error)
        timings["retrieve"] = time.perf_counter() - started

        started = time.perf_counter()
        compacted = msgspec.structs.replace(request, messages=messages)
        empty = RetrievalReport(turns=[], scanned=0)
        injected = await self.inject(recall if recall is not None else empty, compacted)
        timings["inject"] = time.perf_counter() - started

        if self._config.auto_store_user_input:
            try:
                await self._store_newest_user_message(request.messages)
            except VectorStoreError as error:
                # Best-effort, like recall: an embedder blip or an input over the cap
                # loses this memory, not the turn. A poisoned store still propagates.
                if isinstance(error, Poisoned):
                    raise
                logger.warning(
                    "storing the user's input failed; the turn goes on: %s",
                    describe_error(error),
                )

        def report(dispatch_error: str | None = None) -> TurnReport:
            return TurnReport(
                namespace=self._config.namespace,
                compression=compressed.report,
                recall=recall,
                recall_error=recall_error,
                injection=injected.outcome,
                digest=digest_request(injected.request),
                timings=timings,
                dispatch_error=dispatch_error,
            )

        started = time.perf_counter()
        try:
            reply = await self.dispatch(injected.request)
        except DispatchError as error:
            # The turn has no reply, but the caller still learns what every stage did.
            timings["dispatch"] = time.perf_counter() - started
            error.report = report(describe_error(error))
            raise
        timings["dispatch"] = time.perf_counter() - started
        return Turned(reply=reply, request=injected.request, report=report())

    async def _store_newest_user_message(self, messages: Sequence[UnifiedMessage]) -> None:
        """Store the request's newest user message (the input itself), once.

        Only the newest counts: the older ones are history, which ``Offload`` stores.
        A message is recognized by content (the last ``_USER_DIGESTS`` stored), so a
        tool-loop turn that repeats the same request stores nothing new, and the same
        text sent again much later is stored again. A failed store is not recorded, so
        the next turn tries again. The id is :func:`memory_id`'s, as for ``remember``.
        """
        message = next((m for m in reversed(messages) if m.role == "user"), None)
        if message is None:
            return
        key = hashlib.sha256(pack(message)).digest()
        if key in self._stored_user:
            self._stored_user.move_to_end(key)
            return
        stored = await self._store.store_turns(
            [message],
            namespace=self._config.namespace,
            source="user",
            ids=[memory_id(projection(message), "user", time.time_ns())],
        )
        self._watch.after_write(stored)
        self._stored_user[key] = None
        while len(self._stored_user) > _USER_DIGESTS:
            self._stored_user.popitem(last=False)

    # --- explicit memory, usage, events ------------------------------------------------

    async def remember(
        self,
        content: str | UnifiedMessage,
        source: str = "explicit",
        metadata: Mapping[str, Any] | None = None,
        *,
        occurred_at: dt.datetime | None = None,
        conversation: str | None = None,
        dedupe: Dedupe | None = None,
        expires_at: dt.datetime | None = None,
        ttl: float | dt.timedelta | None = None,
    ) -> str:
        """Store one explicit memory in the config's namespace and return its id.

        A str becomes a user message. The id is the first 16 hex characters of
        sha256(content ‖ source ‖ timestamp), so remembering the same content twice
        keeps two entries, unless ``dedupe`` (None: the config's ``dedupe``) is
        ``"exact"`` (a current memory of the namespace with the same text) or
        ``"near"`` (one at least the store's near-duplicate cosine away): then nothing
        is written and the existing memory's id is returned. Blocks, and behaves on
        cancellation, like ``StoreHandle.store_turns``.

        ``expires_at`` (an aware datetime) or ``ttl`` (seconds or a timedelta from the
        store clock's now), not both, makes the memory expire: from then on no read
        returns it. None: it never expires.

        ``occurred_at`` is when it happened or was said (an aware datetime, kept in
        UTC); None: now, the time of the write. Reads filter on it
        (``SearchRequest.since``/``until``) and recall dates the memory by it.
        ``conversation`` names the conversation it belongs to (None: none). Memories
        of one conversation are numbered in the order they are remembered; each is
        indexed and embedded with its date and the memory remembered just before it
        in that conversation (:func:`protocol.entry_text`), so "Yes, last Saturday!"
        is found by what it answers, while recall returns it as it was said. A memory
        given an ``occurred_at`` and no conversation is indexed with its date.

        With a ``consolidator`` (``open_memory``), it first searches the memory's 5
        nearest current memories in the namespace and asks the consolidator: a
        ``Duplicate`` writes nothing and returns the held id; an ``Update`` makes the
        text (and ``metadata``, ``expires_at`` or ``ttl``, when given) the held
        memory's next version (``store.update``, ``valid_from=occurred_at`` when
        given) and returns its id;
        an ``Add`` stores it as above (see :class:`~actors.Consolidator`).

        Raises:
            ConfigError: empty content, a bad source, content of the wrong type, a
                naive ``occurred_at`` (no time zone) or a bad conversation (not a
                non-empty str without NUL, or over 512 UTF-8 bytes); nothing is stored.
            JsonError: ``metadata`` is not a JSON object.
            EntryTooLarge, EmbedderError, EmbeddingError, Poisoned: the store refused it.
            Exception: whatever the consolidator raised, as raised; a ConfigError for
                an answer that is not a decision on one of the neighbours it was shown.
        """
        if isinstance(content, str):
            if not content.strip():
                raise ConfigError("content is empty; expected some text to remember")
            message = UnifiedMessage.user(content)
        elif isinstance(content, UnifiedMessage):
            message = content
        else:
            raise ConfigError(
                f"content is a {type(content).__name__}; expected str or UnifiedMessage"
            )
        if metadata is not None and not isinstance(metadata, Mapping):
            raise JsonError(
                f"metadata is a {type(metadata).__name__} ({shown(metadata)}); expected a "
                "JSON object (a dict with str keys)"
            )
        self._check_open()
        if self._consolidator is not None:
            held = await consolidate_memory(
                self._store,
                self._consolidator,
                projection(message),
                namespace=self._config.namespace,
                metadata=metadata,
                occurred_at=occurred_at,
                expires_at=expires_at,
                ttl=ttl,
            )
            if held is not None:
                return held
        # The source, metadata, time and conversation are checked once, by the store
        # (``check_turns``), which refuses a bad one before it changes anything; a
        # source that is not a str gets no id here, since the store refuses it anyway.
        ids = (
            [memory_id(projection(message), source, time.time_ns())]
            if isinstance(source, str)
            else None
        )
        mode = self._config.dedupe if dedupe is None else dedupe
        # Only what is asked for is passed on, so a store of the user's own written
        # before memory over time still takes a plain remember.
        extra: dict[str, Any] = {}
        if mode is not None:
            extra["dedupe"] = mode
        if expires_at is not None:
            extra["expires_at"] = expires_at
        if ttl is not None:
            extra["ttl"] = ttl
        stored = await self._store.store_turns(
            [message],
            namespace=self._config.namespace,
            source=source,
            metadata=None if metadata is None else dict(metadata),
            ids=ids,
            occurred_at=occurred_at,
            conversation=conversation,
            **extra,
        )
        self._watch.after_write(stored)
        return stored.ids[0]

    async def update(
        self,
        id: str,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        valid_from: dt.datetime | None = None,
        expires_at: dt.datetime | Literal["keep"] | None = "keep",
        create: bool = False,
    ) -> Document:
        """Write a new version of memory ``id`` in the config's namespace, keeping the
        old one as history (``StoreHandle.update``): the old version is closed at
        ``valid_from`` (None: the store clock's now), and reads see the new one.
        Returns the new current version. Blocks, and behaves on cancellation, like
        ``StoreHandle.store_turns``.

        Raises:
            ConfigError: no current memory ``id`` (without ``create``), or a
                ``valid_from`` not later than the current version's.
            EntryTooLarge, EmbedderError, EmbeddingError, Poisoned: the store refused it.
        """
        self._check_open()
        return await self._store.update(
            id,
            text,
            None if metadata is None else dict(metadata),
            namespace=self._config.namespace,
            valid_from=valid_from,
            expires_at=expires_at,
            create=create,
        )

    async def history(self, id: str) -> list[Document]:
        """Every version of memory ``id`` in the config's namespace, oldest first
        (``StoreHandle.history``); ``[]`` for an unknown id. A read: a cancelled call
        leaves nothing behind."""
        self._check_open()
        return await self._store.history(id, self._config.namespace)

    async def forget(
        self,
        ids: Sequence[str] | None = None,
        *,
        filter: Mapping[str, object] | Filter | None = None,
        before: dt.datetime | None = None,
    ) -> list[str]:
        """Forget memories of the config's namespace, every version of each and every
        trace of their text (``StoreHandle.forget``): ``ids``, or those matching
        ``filter`` and occurred before ``before`` (neither: the whole namespace).
        Returns the ids forgotten. Blocks, and behaves on cancellation, like
        ``StoreHandle.store_turns``.

        Raises:
            ConfigError: ids with a filter or before; bad arguments.
            FilterError: the filter cannot be applied.
        """
        self._check_open()
        return await self._store.forget(
            ids, namespace=self._config.namespace, filter=filter, before=before
        )

    def usage(self) -> VectorStoreUsage:
        """The store's fill level, in O(1)."""
        return self._store.usage()

    def embedding_usage(self) -> EmbeddingUsageTotals:
        """The totals of every embedder call this memory made (documents and queries):
        calls, texts, cache hits (never counted as provider usage), texts and
        characters sent, tokens where reported, batches, wall time and cost (from the
        pricing of a ``CachedEmbedder``'s log). Each call is also an ``embedding.*``
        event."""
        return self._embedding_usage.totals()

    def publish(self, event: Event) -> None:
        """Offer ``event`` to every subscriber without waiting, as the actors do: the
        sink to give ``index(..., on_event=memory.publish)``.

        Raises:
            ConfigError: ``event`` is not an :class:`~protocol.Event`.
        """
        if not isinstance(event, Event):
            raise ConfigError(f"event is a {type(event).__name__}; expected an Event")
        self._hub.publish(event)

    def events(self, buffer_size: int = 256) -> Subscription:
        """Subscribe to the event stream, from now on.

        The subscription is an async iterator and an async context manager. It holds at
        most ``buffer_size`` events; when it is full, new events are dropped for it alone
        and counted in its ``dropped``. Iteration ends when the memory closes.

        Raises:
            ConfigError: ``buffer_size`` is not an int > 0.
            trio.ClosedResourceError: the memory has closed.
        """
        return self._hub.subscribe(buffer_size)

    def statistics(self) -> MemoryStatistics:
        """The actors' inboxes and the event hub now: ``inbox_size``,
        ``compaction_used``, ``recall_used``, ``injection_used``, ``subscribers`` and
        ``events_published`` (see :class:`MemoryStatistics`)."""
        return MemoryStatistics(
            inbox_size=self._inbox_size,
            compaction_used=self._compaction.used(),
            recall_used=self._recall.used(),
            injection_used=self._injection.used(),
            subscribers=self._hub.subscribers,
            events_published=self._hub.published,
        )

    def _check_open(self) -> None:
        if self._hub._closed:
            raise trio.ClosedResourceError("the memory is closed")


@asynccontextmanager
async def _memory_store(
    store: object,
    embedder: AnyEmbedder | None,
    *,
    inbox_size: int,
    thread_scan_threshold: int,
    blas_threads: str | None,
    embed_timeout: float | None,
) -> AsyncIterator[Store]:
    """The store a memory runs over: one it opens and owns (from a config), or an open
    handle it borrows and never closes."""
    if isinstance(store, VectorStoreConfig):
        if embedder is None:
            embedder = HashingEmbedder(store.dimensions)
        async with open_store(
            store,
            embedder,
            inbox_size=inbox_size,
            thread_scan_threshold=thread_scan_threshold,
            blas_threads=blas_threads,
            embed_timeout=embed_timeout,
        ) as owned:
            yield owned
        return
    if not isinstance(store, Store):
        raise ConfigError(
            f"store is a {type(store).__name__}; expected a VectorStoreConfig or an open "
            "store (a Store: from open_store or open_pg_store, or a class of your own)"
        )
    if embedder is not None:
        raise ConfigError(
            "embedder is given with an open store; the store embeds with its own "
            "embedder, so expected embedder=None"
        )
    if embed_timeout is not None:
        raise ConfigError(
            "embed_timeout is given with an open store; set it where the store is "
            "opened, so expected embed_timeout=None"
        )
    if blas_threads is not None:
        raise ConfigError(
            f"blas_threads is {blas_threads!r:.60} with an open store; set it where "
            "the store is opened, so expected blas_threads=None"
        )
    if isinstance(store, StoreHandle):
        store._check()  # a closed or poisoned handle fails here, before any actor starts
    yield store


@asynccontextmanager
async def open_memory(
    *,
    store: VectorStoreConfig | Store,
    memory: MemoryConfig | None = None,
    embedder: AnyEmbedder | None = None,
    dispatcher: Dispatcher | None = None,
    summarizer: Summarizer | None = None,
    inbox_size: int = 16,
    store_inbox_size: int = 64,
    thread_scan_threshold: int = DEFAULT_THREAD_SCAN_THRESHOLD,
    blas_threads: str | None = None,
    embed_timeout: float | None = None,
    consolidator: Consolidator | None = None,
) -> AsyncIterator[Memory]:
    """Start the compaction, recall and injection actors (and the store, when it is
    given as a config) in one nursery.

    **The store.** ``store`` is either a :class:`~protocol.VectorStoreConfig`, and the
    memory opens an in-memory store with :func:`~actors.open_store` and owns it, or an
    open store (a handle from ``open_store`` or ``open_pg_store``, or any object that
    implements :class:`~actors.Store`), which the memory borrows: it never closes it,
    so the store stays usable after the memory closes, and several memories may share
    it (with the same namespace they see each other's
    memories; give each its own ``MemoryConfig(namespace=...)`` to keep them apart).
    A memory over a pg handle persists what it offloads.

    Leaving the block closes every inbox and stops every actor; a request still queued
    gets ``trio.ClosedResourceError``, and event iterators end. An exception from the
    body propagates unchanged (never wrapped in an ``ExceptionGroup``). If an owned
    store crashed, leaving the block raises :class:`~protocol.Poisoned`, as
    ``open_store`` does; a borrowed store's crash is raised where it is owned.

    The dispatcher is borrowed, not owned: an ``OpenAIChatDispatcher`` is closed by its
    own ``async with``.

    Args:
        store: a ``VectorStoreConfig`` (an owned in-memory store) or an open
            :class:`~actors.Store` (borrowed): a handle of either backend, or a class
            of the caller's own, which the memory uses through the ``Store`` methods
            alone (then it has no taps on the store's embedder or write events).
        memory: compaction, recall and injection settings; ``MemoryConfig()`` if None.
        embedder: for an owned store: an ``Embedder``, ``AsyncEmbedder``,
            ``EmbeddingModel`` or ``CachedEmbedder``; ``HashingEmbedder(dimensions)`` if
            None. When it has a ``profile``, the store is bound to it (see
            ``open_store``). Must be None with a borrowed handle, which has its own.
            Either way ``embedding_usage()`` and the ``embedding.*`` events report every
            call the store's embedder makes while the memory is open (for a shared
            store, other users' calls too).
        dispatcher: what ``dispatch`` calls; ``EchoDispatcher()`` if None.
        summarizer: what ``Summarize`` calls, sync (run in a worker thread) or async,
            returning a str or a system message; an extractive summary if None.
        inbox_size: the inbox size of each of the compaction, recall and injection
            actors.
        store_inbox_size, thread_scan_threshold, blas_threads, embed_timeout: passed
            to ``open_store`` for an owned store (see there); ``blas_threads`` and
            ``embed_timeout`` must be None with a borrowed handle.
        consolidator: what ``remember`` asks before it writes (a
            :class:`~actors.Consolidator`: ``RuleConsolidator``, ``LlmConsolidator`` or
            a class of your own); None: every ``remember`` adds a memory.

    Cancellation: entering only checks arguments and starts tasks; a cancelled open or
    body leaves as above, and its ``Cancelled`` propagates. A full inbox makes callers
    wait (see :class:`Memory`).

    (Long only for this docstring, which documents every argument; the body checks the
    arguments and enters two context managers.)

    Faults: a summarizer's ``KeyboardInterrupt`` or ``SystemExit`` reaches the caller as
    itself; any other ``BaseException`` from it (not ``Cancelled``) is a crash, and the
    store is poisoned with it as the cause.

    Raises:
        ConfigError: any argument of the wrong type or out of range, an embedder,
            embed_timeout or blas_threads given with a borrowed handle; hybrid recall
            (the default) over a pg table without a keyword index
            (``keyword_index=False``).
        trio.ClosedResourceError: a borrowed handle that is closed.
        Poisoned: a borrowed handle that is poisoned; an owned store that crashed.
    """
    memory_config = MemoryConfig() if memory is None else memory
    if not isinstance(memory_config, MemoryConfig):
        raise ConfigError(f"memory is a {type(memory_config).__name__}; expected MemoryConfig")
    check_int("inbox_size", inbox_size)
    check_int("store_inbox_size", store_inbox_size)
    the_dispatcher: Dispatcher = EchoDispatcher() if dispatcher is None else dispatcher
    if not callable(getattr(the_dispatcher, "dispatch", None)):
        raise ConfigError(
            f"dispatcher is a {type(the_dispatcher).__name__}; expected a Dispatcher "
            "(an object with async dispatch(request))"
        )
    the_consolidator = check_consolidator(consolidator)
    the_summarizer: Summarizer = default_summarizer if summarizer is None else summarizer
    if not callable(the_summarizer):
        raise ConfigError(f"summarizer is {the_summarizer!r:.60}; expected a callable")

    async with (
        _memory_store(
            store,
            embedder,
            inbox_size=store_inbox_size,
            thread_scan_threshold=thread_scan_threshold,
            blas_threads=blas_threads,
            embed_timeout=embed_timeout,
        ) as handle,
        _run_memory(
            handle, memory_config, the_dispatcher, the_summarizer, inbox_size, the_consolidator
        ) as running,
    ):
        yield running


@asynccontextmanager
async def _run_memory(
    handle: Store,
    config: MemoryConfig,
    dispatcher: Dispatcher,
    summarizer: Summarizer,
    inbox_size: int,
    consolidator: Consolidator | None = None,
) -> AsyncIterator[Memory]:
    """The memory's own actors over an open ``handle``, and their taps on the store."""
    hub = EventHub()
    namespace = config.namespace
    if config.recall.search == "hybrid":
        # Before any actor starts: otherwise every turn's recall would fail, and a turn
        # only logs a failed recall and goes on without it.
        try:
            await handle.check_keyword_search()
        except ConfigError as error:
            raise ConfigError(
                f"MemoryConfig.recall.search is 'hybrid', which reads a keyword index: "
                f"{error}; or give the memory RecallSettings(search='dense')"
            ) from None
    embedding_log = EmbeddingUsageLog()
    # A store handle of this library is tapped: its embedder's calls and its events
    # reach the memory's hub, and a crash in a memory actor poisons it. A Store of the
    # caller's own is used through the Store protocol alone: no taps, and a crash in a
    # memory actor is a Poisoned of the memory's own, with the crash as its cause.
    crashed: Callable[[BaseException], BaseException]
    if isinstance(handle, StoreHandle):
        crashed = handle._actor.crashed
        taps = _store_taps(handle, hub, namespace, embedding_log)
    else:
        crashed, taps = _memory_crashed, []
    watch = StoreWatch(hub, handle, namespace)
    compaction = CompactionActor(config, handle, hub, watch, summarizer, inbox_size)
    recall = RecallActor(handle, hub, inbox_size)
    injection = InjectionActor(
        config.renderer,
        namespace,
        hub,
        inbox_size,
        placement=config.placement,
        section_priority=config.section_priority,
        max_block_bytes=config.recall.max_block_bytes,
    )
    mailboxes = (compaction.mailbox, recall.mailbox, injection.mailbox)
    for mailbox in mailboxes:
        mailbox.crashed = crashed

    async def start(nursery: trio.Nursery) -> Memory:
        for tap_list, tap in taps:
            tap_list.append(tap)
        await nursery.start(compaction.run)
        await nursery.start(recall.run)
        await nursery.start(injection.run)
        return Memory._create(
            config=config,
            store=handle,
            hub=hub,
            watch=watch,
            dispatcher=dispatcher,
            compaction=compaction.mailbox,
            recall=recall.mailbox,
            injection=injection.mailbox,
            inbox_size=inbox_size,
            embedding_usage=embedding_log,
            consolidator=consolidator,
        )

    def stop() -> None:
        for tap_list, tap in taps:
            if tap in tap_list:
                tap_list.remove(tap)
        hub.close()
        for mailbox in mailboxes:
            mailbox.send.close()

    async with supervise(start, stop, crashed) as running:
        yield running


def _memory_crashed(crash: BaseException) -> BaseException:
    """What a memory over a Store of the caller's own raises for a crash in one of its
    actors (a handle of this library is poisoned instead)."""
    error = Poisoned(
        f"a memory actor crashed ({type(crash).__name__}: {crash}); the memory is poisoned"
    )
    error.__cause__ = crash
    return error


def _store_taps(
    handle: StoreHandle, hub: EventHub, namespace: str, embedding_log: EmbeddingUsageLog
) -> list[tuple[list[Any], Callable[..., None]]]:
    """What a memory hooks onto its store while it is open, as (list, hook) pairs: the
    X
        ``vector_store.*`` events, all into the memory's hub and its own usage log."""

    def on_embedding(call: EmbeddingCall) -> None:
        embedding_log.record(call)
        kind = EmbeddingCompleted if call.error is None else EmbeddingFailed
        hub.publish(kind(at=now(), namespace=namespace, usage=call))

    def on_embedding_started(provider: str, model: str, input_type: str, texts: int) -> None:
        hub.publish(
            EmbeddingStarted(
                at=now(),
                namespace=namespace,
                provider=provider,
                model=model,
                input_type=input_type,  # type: ignore[arg-type]
                texts=texts,
            )
        )

    store_actor = handle._actor
    taps: list[tuple[list[Any], Callable[..., None]]] = [
        (store_actor.embedder.listeners, on_embedding),
        (store_actor.embedder.start_listeners, on_embedding_started),
    ]
    sinks = getattr(store_actor, "event_sinks", None)
    if sinks is not None:
        taps.append((sinks, hub.publish))
    return taps
