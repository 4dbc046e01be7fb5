"""Incremental indexing: write only what changed, and clean up what went stale.

:func:`index` reads documents in batches. For each document it computes a key (its id,
or :func:`~protocol.document_id` when it has none) and a hash over its text, metadata
and source id (sha256 unless ``key_encoder`` says otherwise), and asks the record
manager what it knew:

- a key it does not know is **added**; a key it knows with another hash is **updated**;
  both are written to the store in one ``upsert`` per batch;
- a key it knows with the same hash is **skipped**: nothing is embedded. Skipped
  documents are still checked with one ``get_by_ids`` per batch, and any the store no
  longer has (a write that failed after the records were updated, an eviction, a
  store that lost data) is written again and counted as added. This is the repair;
- a document repeated in the input (same key and hash) is skipped after its first
  occurrence, so the order is kept; the same key with other content is an error.

The store is written before the records, so a failed write leaves the records as they
were and the next run writes the batch again. Every run takes a new run number from the
record manager, and every document the run sees (written or skipped) is stamped with it.
Cleanup deletes only records stamped by an earlier run, so it can never delete a
document written in the same run, however the run is batched:

- ``None``: no cleanup;
- ``"full"``: after the last batch, delete every document of the namespace that this
  run did not see;
- ``"scoped_full"``: after the last batch, delete the documents this run did not see,
  among the source ids it did see;
- ``"incremental"``: like ``scoped_full``, but each source id is cleaned as soon as a
  batch no longer holds it, so stale versions go away while the run goes on. Input
  grouped by source (as loaders emit it) is cleaned with no extra work; a source that
  comes back after it was cleaned has its unchanged documents written again, never lost.

A run that raises stops before any cleanup that has not run yet.

Events: with ``on_event``, a run sends ``indexing.started``, one
``indexing.batch_completed`` per batch (with the run's totals so far), then
``indexing.completed`` or, when it raises, ``indexing.failed``. A cancelled run sends
nothing more.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal, Protocol, TextIO, final, get_args, runtime_checkable

import attrs
import trio

from protocol import ConfigError, DeleteResult, Document, Event, IndexResult
from protocol.checks import canonical_json, check_int
from protocol.events import (
    IndexingBatchCompleted,
    IndexingCompleted,
    IndexingFailed,
    IndexingStarted,
)

__all__ = [
    "Cleanup",
    "DocumentStore",
    "InMemoryRecordManager",
    "KeyEncoder",
    "Record",
    "RecordManager",
    "hash_document",
    "index",
]

Cleanup = Literal["incremental", "full", "scoped_full"]
_CLEANUPS: tuple[str, ...] = get_args(Cleanup)


@runtime_checkable
class DocumentStore(Protocol):
    """What :func:`index` needs from a store. ``StoreHandle`` and the pg store have it."""

    async def upsert(self, docs: Sequence[Document], namespace: str | None = None) -> list[str]:
        """Write ``docs``, all or nothing; the same id replaces. Returns the ids."""
        ...

    async def delete(self, ids: Sequence[str], namespace: str | None = None) -> DeleteResult:
        """Delete by id; report what was deleted and what was missing."""
        ...

    async def get_by_ids(self, ids: Sequence[str], namespace: str | None = None) -> list[Document]:
        """The documents that exist among ``ids``, in no promised order."""
        ...


@final
@attrs.frozen
class Record:
    """What the record manager knows of one document.

    Attributes:
        key: the document id.
        hash: the document's hash (:func:`hash_document`, sha256 hex by default).
        source_id: the document's source id, or None.
        run: the run that last saw the document.
        updated_at: wall-clock time of that run's update, for people; cleanup uses
            ``run``, which no clock step can reorder.
    """

    key: str
    hash: str
    source_id: str | None
    run: int
    updated_at: float


@runtime_checkable
class RecordManager(Protocol):
    """The bookkeeping :func:`index` keeps beside a store, for one namespace."""

    @property
    def namespace(self) -> str:
        """The store namespace that :func:`index` reads and writes."""
        ...

    async def begin_run(self) -> int:
        """A run number greater than every earlier one."""
        ...

    async def get(self, keys: Sequence[str]) -> dict[str, Record]:
        """The records of the known keys among ``keys``."""
        ...

    async def update(self, records: Sequence[Record]) -> None:
        """Insert or replace ``records``."""
        ...

    async def list_keys(
        self, *, before_run: int, source_ids: Collection[str] | None = None
    ) -> list[str]:
        """Keys last seen by a run before ``before_run``, optionally of some sources."""
        ...

    async def delete_keys(self, keys: Sequence[str]) -> None:
        """Forget ``keys``; unknown keys are ignored."""
        ...


@final
@attrs.define(eq=False)
class InMemoryRecordManager:
    """A :class:`RecordManager` in a dict, for one namespace. Not persistent.

    Args:
        namespace: the store namespace that :func:`index` writes to.

    Raises:
        ConfigError: ``namespace`` is not a non-empty str.
    """

    namespace: str
    _records: dict[str, Record] = attrs.field(init=False, factory=dict)
    _run: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ConfigError(f"namespace is {self.namespace!r}; expected a non-empty str")

    async def begin_run(self) -> int:
        self._run += 1
        return self._run

    async def get(self, keys: Sequence[str]) -> dict[str, Record]:
        return {key: self._records[key] for key in keys if key in self._records}

    async def update(self, records: Sequence[Record]) -> None:
        for record in records:
            self._records[record.key] = record

    async def list_keys(
        self, *, before_run: int, source_ids: Collection[str] | None = None
    ) -> list[str]:
        wanted = None if source_ids is None else set(source_ids)
        return [
            record.key
            for record in self._records.values()
            if record.run < before_run and (wanted is None or record.source_id in wanted)
        ]

    async def delete_keys(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._records.pop(key, None)

    def records(self) -> dict[str, Record]:
        """A copy of every record, by key."""
        return dict(self._records)

    def __len__(self) -> int:
        return len(self._records)


KeyEncoder = Literal["sha256", "sha512", "blake2b"] | Callable[[Document, str | None], str]
"""How :func:`index` hashes a document: a named hash over :func:`hash_document`'s JSON,
or the caller's callable ``(document, source_id) -> str``."""


class _Digest(Protocol):
    """What :func:`hash_document` uses of a ``hashlib`` hash."""

    def hexdigest(self) -> str: ...


_ENCODERS: dict[str, Callable[[bytes], _Digest]] = {
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
    "blake2b": hashlib.blake2b,
}


def hash_document(doc: Document, source_id: str | None, key_encoder: KeyEncoder = "sha256") -> str:
    """The hex hash of the document's text, metadata, source id and (when it has them)
    its precomputed embedding, ``occurred_at`` and conversation, as sorted JSON; or
    ``key_encoder(doc, source_id)``.

    sha256 is the default; ``"sha512"`` and ``"blake2b"`` give longer digests.

    Raises:
        ConfigError: an unknown encoder name, or a callable that did not return a
            non-empty str.
    """
    if callable(key_encoder):
        digest = key_encoder(doc, source_id)
        if not isinstance(digest, str) or not digest:
            raise ConfigError(
                f"key_encoder returned {digest!r:.60} for document {doc.id!r}; expected a "
                "non-empty str"
            )
        return digest
    encoder = _ENCODERS.get(key_encoder) if isinstance(key_encoder, str) else None
    if encoder is None:
        raise ConfigError(
            f"key_encoder is {key_encoder!r:.60}; expected one of {', '.join(_ENCODERS)} "
            "or a callable (document, source_id) -> str"
        )
    content: dict[str, object] = {
        "text": doc.text,
        "metadata": doc.metadata,
        "source_id": source_id,
    }
    if doc.embedding is not None:
        # Only when present, so the hash of a document without one is what it was.
        content["embedding"] = doc.embedding
    # The same for its time and conversation: a document said at another time, or in
    # another conversation, is indexed again (its index text and neighbours change).
    if doc.occurred_at is not None:
        content["occurred_at"] = doc.occurred_at.isoformat()
    if doc.conversation is not None:
        content["conversation"] = doc.conversation
    return str(encoder(canonical_json(content)).hexdigest())


@attrs.define(eq=False)
class _Progress:
    """One status line on a terminal, rewritten in place; nothing otherwise.

    Neither rich nor tqdm is a dependency of trio-recall, and one line of text does not
    justify adding one.
    """

    stream: TextIO | None
    namespace: str
    shown: bool = False

    def update(self, seen: int, result: IndexResult) -> None:
        if self.stream is None:
            return
        self.stream.write(
            f"\rindexing {self.namespace}: {seen} docs, {result.num_added} added, "
            f"{result.num_updated} updated, {result.num_skipped} skipped, "
            f"{result.num_deleted} deleted"
        )
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.stream is not None and self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _progress_stream(progress: bool | TextIO | None) -> TextIO | None:
    if progress is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return sys.stderr if callable(isatty) and isatty() else None
    if isinstance(progress, bool):
        return sys.stderr if progress else None
    return progress


def _source_of(doc: Document, source_id_key: str | None, i: int) -> str | None:
    if source_id_key is None:
        return doc.source_id
    value = doc.metadata.get(source_id_key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            f"document {i} has metadata[{source_id_key!r}] = {value!r:.60} "
            f"({type(value).__name__}); a source id must be a str"
        )
    return value


@attrs.define(eq=False)
class _Run:
    store: DocumentStore
    manager: RecordManager
    cleanup: Cleanup | None
    source_id_key: str | None
    run: int
    namespace: str
    progress: _Progress
    batch_size: int
    added: int = 0
    updated: int = 0
    skipped: int = 0
    deleted: int = 0
    seen: int = 0
    hashes: dict[str, str] = attrs.field(factory=dict)
    sources: set[str] = attrs.field(factory=set)
    pending: set[str] = attrs.field(factory=set)
    on_event: Callable[[Event], None] | None = None
    force_update: bool = False
    key_encoder: KeyEncoder = "sha256"
    started: float = attrs.field(factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def emit(self, kind: type[Event], *, totals: bool = True, **fields: Any) -> None:
        """Send one ``indexing.*`` event, with the run's counts so far unless told not."""
        if self.on_event is None:
            return
        if totals:
            fields.update(
                seen=self.seen,
                num_added=self.added,
                num_updated=self.updated,
                num_skipped=self.skipped,
                num_deleted=self.deleted,
            )
        fields.update(at=trio.current_time(), namespace=self.namespace, run=self.run)
        self.on_event(kind(**fields))

    def result(self) -> IndexResult:
        return IndexResult(
            num_added=self.added,
            num_updated=self.updated,
            num_skipped=self.skipped,
            num_deleted=self.deleted,
        )

    async def batch(self, batch: Sequence[object]) -> None:
        fresh: list[tuple[Document, str, str | None]] = []
        batch_sources: set[str] = set()
        for raw in batch:
            i = self.seen
            self.seen += 1
            if not isinstance(raw, Document):
                raise ConfigError(f"document {i} is a {type(raw).__name__}; expected Document")
            doc = raw.with_id()
            assert doc.id is not None
            source = _source_of(doc, self.source_id_key, i)
            if source is None and self.cleanup in ("incremental", "scoped_full"):
                where = (
                    "source_id"
                    if self.source_id_key is None
                    else f"metadata[{self.source_id_key!r}]"
                )
                raise ConfigError(
                    f"document {i} (id {doc.id!r}) has no source id in {where}; "
                    f"cleanup={self.cleanup!r} needs one on every document"
                )
            if source is not None:
                batch_sources.add(source)
            digest = hash_document(doc, source, self.key_encoder)
            known = self.hashes.get(doc.id)
            if known is not None:
                if known != digest:
                    raise ConfigError(
                        f"document {i} has the id {doc.id!r}, which an earlier document of "
                        "this run has with other content; ids must be unique"
                    )
                self.skipped += 1
                continue
            self.hashes[doc.id] = digest
            fresh.append((doc, digest, source))
        self.sources |= batch_sources
        if self.cleanup == "incremental":
            # A source absent from this batch is taken as complete: every document of
            # it this run will see has been written, so clean it before going on.
            done = self.pending - batch_sources
            self.pending = batch_sources
            if done:
                await self.clean(done)
        await self._write(fresh)
        self.progress.update(self.seen, self.result())

    async def _write(self, fresh: list[tuple[Document, str, str | None]]) -> None:
        if not fresh:
            return
        keys = [doc.id for doc, _, _ in fresh if doc.id is not None]
        records = await self.manager.get(keys)
        writes: list[Document] = []
        unchanged: list[str] = []
        added = updated = 0
        for doc, digest, _ in fresh:
            assert doc.id is not None
            record = records.get(doc.id)
            if record is None:
                writes.append(doc)
                added += 1
            elif record.hash != digest or self.force_update:
                writes.append(doc)
                updated += 1
            else:
                unchanged.append(doc.id)
        skipped = len(unchanged)
        if unchanged:
            present = {
                d.id for d in await self.store.get_by_ids(unchanged, namespace=self.namespace)
            }
            lost = set(unchanged) - present
            if lost:
                writes.extend(doc for doc, _, _ in fresh if doc.id in lost)
                added += len(lost)
                skipped -= len(lost)
        if writes:
            await self.store.upsert(writes, namespace=self.namespace)
        now = time.time()
        await self.manager.update(
            [
                Record(key=key, hash=digest, source_id=source, run=self.run, updated_at=now)
                for (doc, digest, source), key in zip(fresh, keys, strict=True)
            ]
        )
        self.added += added
        self.updated += updated
        self.skipped += skipped

    async def clean(self, source_ids: Collection[str] | None) -> None:
        stale = await self.manager.list_keys(before_run=self.run, source_ids=source_ids)
        for start in range(0, len(stale), self.batch_size):
            chunk = stale[start : start + self.batch_size]
            # The store first: if this fails, the records still name the stale
            # documents and the next run deletes them.
            result = await self.store.delete(chunk, namespace=self.namespace)
            await self.manager.delete_keys(chunk)
            self.deleted += len(result.deleted)


async def index(
    docs: Iterable[Document],
    store: DocumentStore,
    record_manager: RecordManager,
    cleanup: Cleanup | None = None,
    source_id_key: str | None = None,
    batch_size: int = 100,
    *,
    progress: bool | TextIO | None = None,
    on_event: Callable[[Event], None] | None = None,
    force_update: bool = False,
    key_encoder: KeyEncoder = "sha256",
) -> IndexResult:
    """Index ``docs`` into ``store``, writing only what changed (see the module docs).

    Args:
        docs: the documents, in order; any iterable, read one batch at a time.
        store: where documents go (:class:`DocumentStore`), in the namespace
            ``record_manager.namespace``.
        record_manager: what was indexed before (:class:`InMemoryRecordManager`).
        cleanup: ``None``, ``"incremental"``, ``"full"`` or ``"scoped_full"``.
        source_id_key: the metadata key that holds each document's source id; ``None``
            uses :attr:`Document.source_id`.
        batch_size: documents per store write, > 0.
        progress: a status line on stderr when stderr is a terminal (``None``);
            ``True``/``False`` force it on or off; a text stream receives it instead.
        on_event: an event sink for the ``indexing.*`` events (see the module docs),
            called synchronously: it must not block (``Memory.publish`` does not). An
            exception from it propagates and stops the run.
        force_update: rewrite (and re-embed) documents the record manager holds
            unchanged, counting them as updated: for a new embedding model, say.
            Duplicates within the run are still skipped.
        key_encoder: the document hash (:data:`KeyEncoder`): ``"sha256"`` (the
            default), ``"sha512"``, ``"blake2b"``, or a callable ``(document,
            source_id) -> str``. Switching encoders between runs makes every known
            document look changed, so the next run rewrites them all once.

    Returns:
        The counts of added, updated, skipped and deleted documents.

    Raises:
        ConfigError: a bad argument, a document that is not a :class:`Document`, the
            same id twice with different content, or a missing source id when the
            cleanup needs one. Batches before the bad document stay written.
        Whatever the store or record manager raised: the run stops there, with no
            further cleanup; the next run repairs what is missing.

    Each batch is one store write, so a full store inbox makes the run wait (as
    ``upsert`` does). If the caller is cancelled, the batch in flight is written or
    not, as the store decides, and the next run brings the records and the store back
    in step.
    """
    _check_index_args(docs, store, record_manager, cleanup, source_id_key, batch_size)
    if on_event is not None and not callable(on_event):
        raise ConfigError(f"on_event is {on_event!r:.60}; expected None or a callable")
    if not isinstance(force_update, bool):
        raise ConfigError(f"force_update is {force_update!r:.60}; expected a bool")
    if not callable(key_encoder) and key_encoder not in _ENCODERS:
        raise ConfigError(
            f"key_encoder is {key_encoder!r:.60}; expected one of {', '.join(_ENCODERS)} "
            "or a callable (document, source_id) -> str"
        )
    namespace = record_manager.namespace
    run = _Run(
        store=store,
        manager=record_manager,
        cleanup=cleanup,
        source_id_key=source_id_key,
        run=await record_manager.begin_run(),
        namespace=namespace,
        progress=_Progress(_progress_stream(progress), namespace),
        batch_size=batch_size,
        on_event=on_event,
        force_update=force_update,
        key_encoder=key_encoder,
    )
    run.emit(IndexingStarted, cleanup=cleanup, batch_size=batch_size, totals=False)
    try:
        items = iter(docs)
        number = 0
        while batch := list(itertools.islice(items, batch_size)):
            await run.batch(batch)
            run.emit(IndexingBatchCompleted, batch=number, documents=len(batch))
            number += 1
        if cleanup == "full":
            await run.clean(None)
        elif cleanup == "scoped_full" and run.sources:
            await run.clean(run.sources)
        elif cleanup == "incremental" and run.pending:
            await run.clean(run.pending)
        run.progress.update(run.seen, run.result())
    except Exception as error:
        run.emit(IndexingFailed, error=f"{type(error).__name__}: {error}", seconds=run.elapsed())
        raise
    finally:
        run.progress.close()
    run.emit(IndexingCompleted, seconds=run.elapsed())
    return run.result()


def _check_index_args(
    docs: object,
    store: object,
    record_manager: object,
    cleanup: object,
    source_id_key: object,
    batch_size: object,
) -> None:
    if cleanup is not None and cleanup not in _CLEANUPS:
        raise ConfigError(
            f"cleanup is {cleanup!r}; expected None or one of {', '.join(_CLEANUPS)}"
        )
    if source_id_key is not None and (not isinstance(source_id_key, str) or not source_id_key):
        raise ConfigError(f"source_id_key is {source_id_key!r}; expected None or a non-empty str")
    check_int("batch_size", batch_size)
    if isinstance(docs, str | bytes | Document) or not isinstance(docs, Iterable):
        raise ConfigError(f"docs is a {type(docs).__name__}; expected an iterable of Document")
    if not isinstance(store, DocumentStore):
        raise ConfigError(
            f"store is a {type(store).__name__}; expected an object with async upsert, "
            "delete and get_by_ids"
        )
    if not isinstance(record_manager, RecordManager):
        raise ConfigError(
            f"record_manager is a {type(record_manager).__name__}; expected a RecordManager"
        )
