"""The pg store's write preparation: validate, size-check and embed a batch, changing
nothing, so that the commit is one transaction that cannot fail on the batch's content.

The checks are the in-memory store's (``actors._store``), in the same order, with the
same errors, plus what PostgreSQL cannot hold: a NUL or a lone surrogate in an id, a
source id, a namespace or a source is a :class:`~protocol.ConfigError`. A text or
metadata may hold them: the exact copy is kept as bytes (see ``schema``).
"""

from __future__ import annotations

from typing import Any

from protocol import VectorStoreConfig
from protocol._json import check_json_object
from protocol._surrogates import pack
from protocol.messages import StoreTurns, UpsertDocuments

from .._bm25 import term_counts, token_counts
from .._embedders import EmbedderAdapter, as_matrix, normalize_rows
from .._precomputed import document_vectors
from .._prepare import check_documents, check_name, check_turns, exact_msgpack_many
from .schema import (
    check_pg_text,
    exact_text,
    jsonb_binary,
    search_text,
    vector_binary,
)
from .sql import PreparedEntries

__all__ = ["prepare_documents", "prepare_turns"]


def _metadata(
    metadata: list[dict[str, Any]], compact: list[bytes]
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
) -> tuple[list[bytes], list[bool]]:
    return _binary(await embedder.documents(texts), len(texts), dimensions)


def _binary(raw: object, count: int, dimensions: int) -> tuple[list[bytes], list[bool]]:
    vectors, zero = normalize_rows(as_matrix(raw, count, dimensions))
    return vector_binary(vectors), [bool(z) for z in zero]


def _texts(
    texts: list[str], keyword_index: bool
) -> tuple[list[str], list[bytes | None], list[int], list[dict[str, int]] | None]:
    """The searchable and exact texts, the BM25 lengths (kept even without a keyword
    index, so that turning one on later needs no rewrite of the rows) and, with a
    keyword index, the BM25 terms."""
    exact: list[bytes | None]
    if _plain(texts):
        # Nothing to replace: each searchable text is the exact one.
        searchable, exact = texts, [None] * len(texts)
    else:
        searchable = [search_text(t) for t in texts]
        exact = [exact_text(t, s) for t, s in zip(texts, searchable, strict=True)]
    if not keyword_index:
        return searchable, exact, token_counts(texts), None
    lengths, terms = term_counts(texts)
    return searchable, exact, lengths, terms


async def prepare_turns(
    request: StoreTurns,
    config: VectorStoreConfig,
    embedder: EmbedderAdapter,
    *,
    keyword_index: bool = True,
) -> PreparedEntries:
    namespace = check_pg_text("namespace", check_name("namespace", request.namespace))
    source = check_pg_text("source", check_name("source", request.source))
    metadata = check_json_object(request.metadata)
    batch = check_turns(
        request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
    )
    [filter_text], [raw] = _metadata([metadata], [batch.metadata_json])
    if batch.ids is not None and not _plain(batch.ids):
        for entry_id in batch.ids:
            check_pg_text("id", entry_id)
    survivors, texts, keep = batch.survivors, batch.texts, len(batch.survivors)
    vectors, zero = await _embed(embedder, texts, config.dimensions)
    searchable, exact, lengths, terms = _texts(texts, keyword_index)
    payloads: list[bytes | None] = [*exact_msgpack_many(survivors)]  # one encode call
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
    )


async def prepare_documents(
    request: UpsertDocuments,
    config: VectorStoreConfig,
    embedder: EmbedderAdapter,
    *,
    keyword_index: bool = True,
) -> PreparedEntries:
    namespace = check_pg_text("namespace", check_name("namespace", request.namespace))
    batch = check_documents(
        request, max_entry_bytes=config.max_entry_bytes, max_entries=config.max_entries
    )
    names = [d.id for d in batch.unique if d.id is not None]
    names += [d.source_id for d in batch.unique if d.source_id is not None]
    if not _plain(names):
        for document in batch.unique:
            assert document.id is not None
            check_pg_text("document id", document.id)
            if document.source_id is not None:
                check_pg_text("document source_id", document.source_id)
    survivors = batch.survivors
    keep = len(survivors)
    jsonb, meta_raw = _metadata([d.metadata for d in survivors], batch.metadata_json)
    texts = [d.text for d in survivors]
    raw = await document_vectors(
        embedder, survivors, config.dimensions, embeddings=batch.embeddings
    )
    vectors, zero = _binary(raw, keep, config.dimensions)
    searchable, exact, lengths, terms = _texts(texts, keyword_index)
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
    )
