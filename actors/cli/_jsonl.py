"""``trio-recall import`` and ``export``: memories as JSON Lines.

One memory per line, as ``export`` writes it and ``import`` reads it::

    {"id": "3f2a...", "namespace": "memory-default", "text": "...", "source": null,
     "metadata": {}, "occurred_at": "2023-05-25T13:14:00+00:00", "conversation": null}

Only ``text`` is required on import; ``id`` defaults to the content hash of the text and
metadata, and of the time and conversation when the line has them (what ``add``
gives), ``namespace`` to the default one (``--namespace`` overrides every line's),
``source`` to none, ``metadata`` to ``{}``, ``occurred_at`` (ISO 8601, as ``add --at``
reads it) to the time of the write and ``conversation`` to none. Other keys are
refused, so a misspelt one is not silently dropped. The lines of one conversation are
written in file order, which is the order the store keeps them in (neighbours for
recall); export writes them back in that order, oldest first.

**Import** checks every line first, with the rules of ``add`` (the service's checks), and
writes nothing when one is bad. It then writes through :func:`actors.index`, the
incremental indexer, with a record manager whose records are the store's own documents
(:class:`_StoreRecords`): a memory already there with the same text, metadata and source
is skipped without being embedded, so importing a file again writes nothing. "The
same" compares the time and the conversation too, when the line gives them
(:func:`content_hash`): a line without ``occurred_at`` leaves a stored memory's time as
it is.

Both read and write bytes: a file and stdin (``-``) are decoded alike, strictly as
UTF-8, line by line, so an invalid byte is reported on its own line (a text stream
decodes ahead of the line it returns) and is never stored as a lone surrogate (what
``surrogateescape``, stdin's error handler in the C locale, would make of it). JSON
nested too deep to parse is refused as too deep (:func:`protocol.checks.loads_json`).

**Export** lists every entry (of one namespace, or all) oldest first, and writes it
where :func:`~actors.cli._output.open_output` says: stdout, through a FIFO or device,
or by atomic replace of a regular file (a ``.partial`` file beside it, renamed over
it), so an error never leaves half a file under the name asked for. A target that
cannot be written because of its path (:func:`check_export_target`) is bad input, as an
unreadable import file is. It holds the list of entries in memory while it writes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Collection, Iterator, Sequence
from typing import BinaryIO

import attrs
import msgspec
import trio

from protocol import Document, JsonError
from protocol.checks import canonical_json, document_bytes, loads_json

from .. import DocumentStore, Record, Store, index
from ._output import check_target, open_output, target_error
from ._progress import Progress
from ._service import (
    MemoryService,
    ToolInputError,
    _conversation,
    _metadata,
    _name,
    _namespace,
    _text,
    _time,
    iso_time,
)

__all__ = [
    "check_export_target",
    "content_hash",
    "decode_utf8",
    "export_jsonl",
    "import_jsonl",
    "read_jsonl",
]

#: Memories per store write (import) and per read (export).
BATCH = 256
_KEYS = frozenset({"id", "namespace", "text", "source", "metadata", "occurred_at", "conversation"})


@attrs.frozen
class Line:
    """One memory read from a file: its line number, namespace and document."""

    number: int
    namespace: str
    document: Document


def decode_utf8(raw: bytes, where: str, expected: str) -> str:
    """``raw`` decoded strictly as UTF-8.

    Raises:
        ToolInputError: ``where`` is not UTF-8 (the message says at which byte, counted
            from 1, and ``expected``).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ToolInputError(
            f"{where} is not UTF-8 ({error.reason} at byte {error.start + 1}); expected {expected}"
        ) from None


def _parse(where: str, number: int, raw: str, namespace: str | None, cap: int) -> Line:
    """The memory on line ``number`` of ``where`` (a file name, or ``stdin``)."""
    at = f"{where} line {number}"
    try:
        value = loads_json(raw, what=at)
    except json.JSONDecodeError as error:
        raise ToolInputError(
            f"{at} is not JSON ({error.msg} at column {error.colno}); expected a JSON object"
        ) from None
    except JsonError as error:
        raise ToolInputError(str(error)) from None
    if not isinstance(value, dict):
        raise ToolInputError(f"{at} is a JSON {type(value).__name__}; expected an object")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise ToolInputError(
            f"{at} has the key {unknown[0]!r}; expected only {', '.join(sorted(_KEYS))}"
        )
    if "text" not in value:
        raise ToolInputError(f"{at} has no 'text'; every memory needs one")
    try:
        text = _text("text", value["text"])
        metadata = _metadata(value.get("metadata"))
        source = value.get("source")
        memory_id = value.get("id")
        space = _namespace(namespace if namespace is not None else value.get("namespace"))
        document = Document(
            text=text,
            id=None if memory_id is None else _name("id", memory_id),
            metadata=metadata,
            source_id=None if source is None else _name("source", source),
            occurred_at=_time("occurred_at", value.get("occurred_at")),
            conversation=_conversation(value.get("conversation")),
        ).with_id()
    except ToolInputError as error:
        raise ToolInputError(f"{at} {error}") from None
    size = document_bytes(document)
    if size > cap:
        raise ToolInputError(
            f"{at} counts {size} bytes (text, id, source and metadata); a memory takes at "
            f"most {cap} (max_entry_bytes)"
        )
    return Line(number, space, document)


def read_jsonl(path: str, *, namespace: str | None, cap: int) -> list[Line]:
    """Every memory of the file (``-``: stdin, read the same way), checked; blank lines
    are skipped.

    Raises:
        ToolInputError: a line that is not a memory (its number says which): not UTF-8,
            not JSON, nested too deep, or refused by the rules of ``add``; or the same
            id twice in one namespace with other content.
            A file that cannot be opened or read (missing, a directory, no
            permission) is bad input too: one line naming the file and why.
    """
    if namespace is not None:
        _name("--namespace", namespace)
    try:
        return _read_jsonl(path, namespace=namespace, cap=cap)
    except OSError as error:
        what = "stdin" if path == "-" else f"the import file {path}"
        why = (error.strerror or str(error)).lower()
        raise ToolInputError(
            f"cannot read {what}: {why}; expected a readable JSON Lines file (- reads stdin)"
        ) from error


def _read_jsonl(path: str, *, namespace: str | None, cap: int) -> list[Line]:
    where = "stdin" if path == "-" else path
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    lines: list[Line] = []
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    try:
        # A binary stream splits on b"\n" only, so a line is decoded once it is whole.
        for number, raw in enumerate(stream, start=1):
            text = decode_utf8(raw, f"{where} line {number}", "JSON Lines in UTF-8")
            if not text.strip():
                continue
            line = _parse(where, number, text, namespace, cap)
            doc = line.document
            assert doc.id is not None
            digest = content_hash(doc, doc.source_id)
            first = seen.setdefault((line.namespace, doc.id), (digest, number))
            if first[0] != digest:
                raise ToolInputError(
                    f"{where} line {number} has the id {doc.id!r}, which line {first[1]} "
                    f"gives to other content in namespace {line.namespace!r}; expected one "
                    "content per id"
                )
            if first[1] == number:
                lines.append(line)
    finally:
        if path != "-":
            stream.close()
    return lines


def content_hash(doc: Document, source_id: str | None) -> str:
    """What tells an import whether a memory changed (its ``index`` key encoder): the
    sha256 of its text, metadata and source, and of its ``occurred_at`` and
    ``conversation`` (each None when the line gives none), as canonical JSON.

    Both sides of the comparison (a line, and the stored memory as the line sees it:
    :class:`_StoreRecords`) are hashed here, so no hash outlives one import.
    """
    content = {
        "text": doc.text,
        "metadata": doc.metadata,
        "source_id": source_id,
        "occurred_at": iso_time(doc.occurred_at),
        "conversation": doc.conversation,
    }
    return hashlib.sha256(canonical_json(content)).hexdigest()


@attrs.define(eq=False)
class _StoreRecords:
    """The record manager of an import, for one namespace: the store's documents are
    the records (a record's hash is :func:`content_hash` of the stored document).

    So the records can never disagree with the store, whoever wrote it (``add``, the
    MCP server, another import) and whatever ``forget`` removed. ``update`` has nothing
    to keep, and an import runs no cleanup, so there are no keys to list.

    A stored memory always has a time (the store stamps one), and a line may give none:
    the stored memory is then hashed without its time (and without its conversation,
    for a line without one), so such a line matches it whatever time it was stamped
    with.
    """

    store: DocumentStore
    namespace: str
    lines: dict[str, Document]
    _run: int = 0

    async def begin_run(self) -> int:
        self._run += 1
        return self._run

    def _as_line_says(self, stored: Document) -> Document:
        line = self.lines.get(stored.id or "")
        if line is None:
            return stored
        return msgspec.structs.replace(
            stored,
            occurred_at=None if line.occurred_at is None else stored.occurred_at,
            conversation=None if line.conversation is None else stored.conversation,
        )

    async def get(self, keys: Sequence[str]) -> dict[str, Record]:
        documents = await self.store.get_by_ids(list(keys), namespace=self.namespace)
        return {
            doc.id: Record(
                key=doc.id,
                hash=content_hash(self._as_line_says(doc), doc.source_id),
                source_id=doc.source_id,
                run=0,
                updated_at=0.0,
            )
            for doc in documents
            if doc.id is not None
        }

    async def update(self, records: Sequence[Record]) -> None:
        return None

    async def list_keys(
        self, *, before_run: int, source_ids: Collection[str] | None = None
    ) -> list[str]:
        return []

    async def delete_keys(self, keys: Sequence[str]) -> None:
        return None


def _batches(namespaces: Sequence[str]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each batch: consecutive items of one namespace, at most
    ``BATCH`` of them (a store call takes one namespace)."""
    start = 0
    while start < len(namespaces):
        end = start + 1
        while (
            end < len(namespaces) and end - start < BATCH and namespaces[end] == namespaces[start]
        ):
            end += 1
        yield start, end
        start = end


async def import_jsonl(service: MemoryService, lines: list[Line]) -> dict[str, int]:
    """Write the memories through :func:`actors.index`, a batch at a time; the counts.

    A store error stops the import with the batches before it written; importing the
    file again then writes only what is missing.
    """
    store = service.store
    assert isinstance(store, DocumentStore)  # both backends' handles upsert
    totals = {"added": 0, "updated": 0, "skipped": 0}
    progress = Progress("import", len(lines))
    try:
        for start, end in _batches([line.namespace for line in lines]):
            space = lines[start].namespace
            docs = [line.document for line in lines[start:end]]
            records = _StoreRecords(store, space, {d.id: d for d in docs if d.id is not None})
            result = await index(
                docs, store, records, batch_size=BATCH, progress=False, key_encoder=content_hash
            )
            totals["added"] += result.num_added
            totals["updated"] += result.num_updated
            totals["skipped"] += result.num_skipped
            progress.advance(end - start)
    finally:
        progress.close()
    return totals


def _line(doc: Document, namespace: str) -> bytes:
    value = {
        "id": doc.id,
        "namespace": namespace,
        "text": doc.text,
        "source": doc.source_id,
        "metadata": doc.metadata,
        "occurred_at": iso_time(doc.occurred_at),
        "conversation": doc.conversation,
    }
    line = json.dumps(value, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (kept exactly by the store) is written as its JSON escape.
        return (json.dumps(value) + "\n").encode("ascii")


def check_export_target(path: str) -> None:
    """Refuse, before the store opens, an export target that cannot be written because
    of the path (a directory, a missing folder, no permission: ``_output.check_target``).

    Raises:
        ToolInputError: one line naming the path and what is wrong with it.
    """
    try:
        check_target(path)
    except OSError as error:
        message = target_error(path, error)
        if message is None:
            raise
        raise ToolInputError(message) from error


async def export_jsonl(service: MemoryService, path: str, *, namespace: str | None) -> int:
    """Write every memory (of ``namespace``, or all) to ``path`` (``-``: stdout; see
    :func:`~actors.cli._output.open_output` for FIFOs, devices and links), oldest
    first; the number written.

    The target is opened first (a FIFO waits there for its reader; cancelling the wait
    leaves the opening thread behind until the process exits), then the store is read.

    Raises:
        ToolInputError: a bad namespace; a target that cannot be written because of
            the path (:func:`check_export_target`: nothing is written).
        OSError: writing failed (a full disk: a regular file keeps its old content,
            and no partial file is left).
    """
    store = service.store
    space = None if namespace is None else _name("--namespace", namespace)
    try:
        out = await trio.to_thread.run_sync(open_output, path, abandon_on_cancel=True)
    except OSError as error:
        message = target_error(path, error)
        if message is None:
            raise
        raise ToolInputError(message) from error
    try:
        written = await _write(store, space, out.stream)
        out.commit()
    except BaseException:
        out.abort()
        raise
    return written


async def _write(store: Store, namespace: str | None, stream: BinaryIO) -> int:
    import numpy as np

    # A zero vector scores 0.0 against every entry, so this lists them all (newest
    # first, the ties' order); no profile is needed for it.
    zero = np.zeros(store.config.dimensions, dtype=np.float32)
    report = await store.retrieve_embedding(zero, max(store.capacity, 1), namespace)
    entries = sorted(report.turns, key=lambda turn: turn.sequence)
    progress = Progress("export", len(entries))
    written = 0
    try:
        for start, end in _batches([turn.namespace for turn in entries]):
            here = entries[start].namespace
            ids = [turn.id for turn in entries[start:end]]
            found = {doc.id: doc for doc in await store.get_by_ids(ids, namespace=here)}
            for memory_id in ids:
                doc = found.get(memory_id)
                if doc is not None:  # forgotten since the listing
                    stream.write(_line(doc, here))
                    written += 1
            progress.advance(end - start)
    finally:
        progress.close()
    return written
