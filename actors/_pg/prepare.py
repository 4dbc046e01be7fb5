"""The pg store's write preparation: validate, size-check and embed a batch, changing
nothing, so that the commit is one transaction that cannot fail on the batch's content.

The shared checks ran once, at the handle (``actors._store.prepare``); this module
adds only what PostgreSQL cannot hold: a NUL or a lone surrogate in an id, a
source id, a namespace or a source is a :class:`~protocol.ConfigError`. A text or
metadata may hold them: the exact copy is kept as bytes (see ``schema``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from protocol import VectorStoreConfig
from protocol.checks import pack

from .._embedding.adapter import EmbedderAdapter, as_matrix, normalize_rows
from .._retrieval.bm25 import term_counts, token_counts
from .._store.backend import PutDocuments, PutTurns
from .._store.index_text import document_times, indexed_texts, turn_index_texts, write_time
from .._store.precomputed import document_vectors
from .._store.prepare import Clock, clock_now, default_clock, metadata_from_json
from .schema import (
    check_pg_text,
    exact_text,
    jsonb_binary,
    search_text,
    vector_binary,
)
from .sql import PreparedEntries

__all__ = ["Before", "embedded_rows", "prepare_documents", "prepare_turns"]

#: How a write's preparation reads the predecessors of its first entries in their
#: conversations: ``before(namespace, conversations, ids)`` is the own text of the
#: newest live entry of each conversation in the table, the entries ``ids`` left out
#: (``Reads.newest_texts``). It is read before the write's transaction (the batch is
#: embedded in between), so a writer in another process that writes to the same
#: conversation meanwhile may give an entry the predecessor before its own.
Before = Callable[[str, Sequence[str | None], Sequence[str]], Awaitable[dict[str, str]]]


async def _no_before(
    namespace: str, conversations: Sequence[str | None], ids: Sequence[str]
) -> dict[str, str]:
    return {}


def _metadata(
    metadata: Sequence[Mapping[str, object]], compact: list[bytes]
) -> tuple[list[bytes], list[bytes | None]]:
    """Each entry's jsonb copy that filters read (in jsonb's binary input form) and its
    exact metadata as msgpack (the surrogate form when it holds a lone surrogate), or
    None for ``{}``. ``compact`` is each metadata as compact JSON (``metadata_json``),
    reused where it is the filter text already."""
    jsonb = [jsonb_binary(m, c) for m, c in zip(metadata, compact, strict=True)]
    return jsonb, [pack(m) if m else None for m in metadata]


def _plain(strings: list[str]) -> bool:
    """Whether every string is ASCII without a NUL: then PostgreSQL text holds each as
    it is (one look at all of them, for the usual batch)."""
    joined = "".join(strings)
    return joined.isascii() and "\x00" not in joined


async def _embed(
    embedder: EmbedderAdapter, texts: list[str], dimensions: int
) -> tuple[list[bytes], list[bool], npt.NDArray[np.float32]]:
    return embedded_rows(await embedder.documents(texts), len(texts), dimensions)


def embedded_rows(
    raw: object, count: int, dimensions: int
) -> tuple[list[bytes], list[bool], npt.NDArray[np.float32]]:
    """Each row in pgvector's binary form, which had zero norm, and the normalized rows
    (what ``dedupe="near"`` compares)."""
    vectors, zero = normalize_rows(as_matrix(raw, count, dimensions))
    rows = np.asarray(vectors, dtype=np.float32)
    return vector_binary(rows), [bool(z) for z in zero], rows


def _texts(
    texts: list[str], keyword_index: bool, index_texts: list[str | None] | None = None
) -> tuple[list[str], list[bytes | None], list[int], list[dict[str, int]] | None]:
    """The searchable and exact texts, the BM25 lengths (kept even without a keyword
    index, so that turning one on later needs no rewrite of the rows) and, with a
    keyword index, the BM25 terms; lengths and terms are of each entry's index text
    where ``index_texts`` gives one."""
    exact: list[bytes | None]
    if _plain(texts):
        # Nothing to replace: each searchable text is the exact one.
        searchable, exact = texts, [None] * len(texts)
    else:
        searchable = [search_text(t) for t in texts]
        exact = [exact_text(t, s) for t, s in zip(texts, searchable, strict=True)]
    indexed = indexed_texts(texts, index_texts)
    if not keyword_index:
        return searchable, exact, token_counts(indexed), None
    lengths, terms = term_counts(indexed)
    return searchable, exact, lengths, terms


def _searchable(index_texts: list[str | None] | None) -> list[str | None] | None:
    """The ``index_text`` column's copies (``search_text``) of the derived index texts."""
    if index_texts is None:
        return None
    return [None if t is None else search_text(t) for t in index_texts]


async def prepare_turns(
    write: PutTurns,
    config: VectorStoreConfig,
    embedder: EmbedderAdapter,
    *,
    keyword_index: bool = True,
    before: Before = _no_before,
    clock: Clock = default_clock,
) -> PreparedEntries:
    # The handle has checked the batch (``check_turns``): only what PostgreSQL text
    # cannot hold is checked here, and the metadata is read from the checked JSON.
    batch = write.batch
    namespace = check_pg_text("namespace", write.request.namespace)
    source = check_pg_text("source", write.request.source)
    metadata = metadata_from_json(batch.metadata_json)
    conversation = batch.conversation
    if conversation is not None:
        check_pg_text("conversation", conversation)
    [filter_text], [raw] = _metadata([metadata], [batch.metadata_json])
    if batch.ids is not None and not _plain(batch.ids):
        for entry_id in batch.ids:
            check_pg_text("id", entry_id)
    texts, keep = batch.texts, len(batch.survivors)
    when = batch.occurred_at or (write_time() if clock is default_clock else clock_now(clock))
    # Only a conversation's predecessor is read (a round trip), and not for given texts.
    previous = {} if batch.given else await before(namespace, [conversation], batch.ids or [])
    index_texts = turn_index_texts(batch, when, previous, config.max_entry_bytes)
    indexed = indexed_texts(texts, index_texts)
    vectors, zero, matrix = await _embed(embedder, indexed, config.dimensions)
    searchable, exact, lengths, terms = _texts(texts, keyword_index, index_texts)
    payloads: list[bytes | None] = [*batch.messages_msgpack()]  # encoded by the check
    return PreparedEntries(
        vectors=vectors,
        zero=zero,
        payloads=payloads,
        texts=searchable,
        exact=exact,
        metadata=[filter_text] * keep,
        meta_raw=[raw] * keep,
        ids=batch.ids,
        source_ids=[None] * keep,
        doc_lens=lengths,
        terms=terms,
        namespace=namespace,
        source=source,
        dropped=batch.dropped,
        occurred=[when] * keep,
        conversations=None if conversation is None else [conversation] * keep,
        index_texts=_searchable(index_texts),
        expires=[] if batch.expires_at is None else [batch.expires_at] * keep,
        matrix=matrix,
        dedupe=batch.dedupe,
        near_threshold=batch.near_threshold,
    )


async def prepare_documents(
    write: PutDocuments,
    config: VectorStoreConfig,
    embedder: EmbedderAdapter,
    *,
    keyword_index: bool = True,
    before: Before = _no_before,
    clock: Clock = default_clock,
) -> PreparedEntries:
    # The handle has checked the batch (``check_documents``); see prepare_turns.
    batch = write.batch
    namespace = check_pg_text("namespace", write.request.namespace)
    names = [d.id for d in batch.unique if d.id is not None]
    names += [d.source_id for d in batch.unique if d.source_id is not None]
    names += [d.conversation for d in batch.unique if d.conversation is not None]
    if not _plain(names):
        for document in batch.unique:
            assert document.id is not None
            check_pg_text("document id", document.id)
            if document.source_id is not None:
                check_pg_text("document source_id", document.source_id)
            if document.conversation is not None:
                check_pg_text("document conversation", document.conversation)
    survivors = batch.survivors
    keep = len(survivors)
    jsonb, meta_raw = _metadata(
        [metadata_from_json(m) for m in batch.metadata_json], batch.metadata_json
    )
    texts = [d.text for d in survivors]

    async def read_before(conversations: list[str | None], ids: list[str]) -> dict[str, str]:
        return await before(namespace, conversations, ids)

    # The write time of a document without one is the store clock's now.
    now = None if clock is default_clock else clock_now(clock)
    times = await document_times(survivors, batch.sizes, config.max_entry_bytes, read_before, now)
    index_texts = times.index_texts
    raw = await document_vectors(
        embedder,
        survivors,
        config.dimensions,
        embeddings=batch.embeddings,
        texts=indexed_texts(texts, index_texts),
    )
    vectors, zero, matrix = embedded_rows(raw, keep, config.dimensions)
    expires = [d.expires_at for d in survivors]
    searchable, exact, lengths, terms = _texts(texts, keyword_index, index_texts)
    return PreparedEntries(
        vectors=vectors,
        zero=zero,
        payloads=[None] * keep,
        texts=searchable,
        exact=exact,
        metadata=jsonb,
        meta_raw=meta_raw,
        ids=[d.id for d in survivors if d.id is not None],
        source_ids=[d.source_id for d in survivors],
        doc_lens=lengths,
        terms=terms,
        namespace=namespace,
        source="document",
        dropped=batch.dropped,
        occurred=times.occurred,
        conversations=times.stored_conversations,
        index_texts=_searchable(index_texts),
        expires=expires if any(e is not None for e in expires) else [],
        matrix=matrix,
        dedupe=batch.dedupe,
        near_threshold=batch.near_threshold,
        supersede=write.request.supersede,
    )
