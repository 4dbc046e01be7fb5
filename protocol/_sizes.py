"""What an entry counts against ``max_entry_bytes``, and the longest id and namespace.

Every backend holds an entry to the same size rule, and a door that checks a memory
before it opens a store (the CLI's ``import``) or a test model that predicts
``EntryTooLarge`` must count it the same way: this module is that rule.

What ``max_entry_bytes`` counts (:func:`entry_bytes`, for turns and documents alike):
design §2's payload bytes (a document's payload is its text), plus

- :data:`BLOCK_OVERHEAD` for each content block after a turn's first (the framing of
  an empty block in the stored msgpack, which an entry of 100,000 empty blocks would
  otherwise hold for free; the first block's framing is in the per-entry constant);
- the longer of a tool call's arguments as compact JSON (§2) and as msgpack (how the
  store keeps them: a float is 9 bytes there, as few as 4 in JSON);
- the metadata as compact JSON (a batch's metadata counts once per turn);
- the source (a turn's), the id when the caller gives one, a document's source id,
  the entry's conversation, and its index text: the caller's (``store_turns(texts=...)``)
  or the one the store derives.

Strings count their UTF-8 length (a lone surrogate as 3 bytes). A name (source, id,
source id) that is not ASCII counts 4 bytes more per character: CPython may keep such
a str at 4 bytes per character (and beside it a cached UTF-8 copy). Texts are kept as
UTF-8 bytes when they are not ASCII, so they need no such surcharge.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._chat import ToolCall, UnifiedMessage, payload_bytes
from ._documents import Document
from ._json import check_json_object, compact_json
from ._surrogates import pack

__all__ = [
    "BLOCK_OVERHEAD",
    "MAX_ID_BYTES",
    "MAX_NAMESPACE_BYTES",
    "arguments_surplus",
    "document_bytes",
    "entry_bytes",
    "metadata_json",
    "name_bytes",
    "turn_bytes",
]

_ENCODER = msgspec.msgpack.Encoder()
_JSON_ENCODER = msgspec.json.Encoder()
# Values that may take more bytes in msgpack than in JSON: a float (9 bytes against as
# few as 3), a str of 256 bytes or more (a 3- or 5-byte header against 2 quotes; one of
# fewer than 85 characters has fewer than 256 bytes), and containers, which may hold
# either.
_LONGER_IN_MSGPACK = (float, str, list, dict)

#: What each content block after a turn's first counts against ``max_entry_bytes``,
#: besides its strings: the most an empty block's framing takes in the stored msgpack
#: (an empty ``ToolResult``: 50 bytes, 58 with the longest string headers, 60 in the
#: surrogate form), rounded up. The store keeps no Python object per block.
BLOCK_OVERHEAD = 64


def name_bytes(name: str) -> int:
    """What a name (source, id, source id) counts: its UTF-8 length, plus 4 bytes per
    character when it is not ASCII (see the module docstring)."""
    if name.isascii():
        return len(name)
    return _utf8_len(name) + 4 * len(name)


def entry_bytes(
    payload: int,
    *,
    blocks: int = 1,
    metadata: int = 0,
    index_text: str | None = None,
    source: str | None = None,
    entry_id: str | None = None,
    source_id: str | None = None,
    conversation: str | None = None,
) -> int:
    """The size one entry counts against ``max_entry_bytes`` (see the module docstring).

    Args:
        payload: design §2's payload bytes (with tool-call arguments at the longer of
            JSON and msgpack), or a document's text length.
        blocks: the turn's content blocks (a document is one).
        metadata: the length of the entry's metadata as compact JSON (0 for ``{}``).
        index_text: the entry's own index text, when it has one (the caller's, or
            the one the store derives).
        source, entry_id, source_id, conversation: the names the entry keeps, where
            given.
    """
    size = payload + metadata + BLOCK_OVERHEAD * max(blocks - 1, 0)
    if index_text is not None:
        size += _utf8_len(index_text)
    for name in (source, entry_id, source_id, conversation):
        if name is not None:
            size += name_bytes(name)
    return size


def metadata_json(
    metadata: dict[str, Any], what: str = "metadata", *, checked: bool = False
) -> bytes:
    """The metadata as compact JSON, as counted and as the in-memory store keeps it;
    ``b""`` for ``{}``. ``checked`` skips :func:`protocol.checks.check_json` for a value
    that has just passed it.

    Raises:
        JsonError: not a JSON object.
    """
    if not metadata:
        return b""
    if not checked:
        check_json_object(metadata, what=what)
    try:
        encoded = _JSON_ENCODER.encode(metadata)  # checked: encode without checking again
    except UnicodeEncodeError:
        encoded = compact_json(metadata, what=what)
    # An exact-size copy: msgspec may return an over-allocated buffer (1.5 KB held for
    # 1 KB of JSON, measured), and the store keeps these bytes.
    return bytes(memoryview(encoded))


def document_bytes(document: Document, *, metadata: int | None = None) -> int:
    """A document's size, checked against ``max_entry_bytes``: :func:`entry_bytes` of
    its text, id, source id, conversation and metadata (an index text the store derives
    for it is counted when it is derived).

    Args:
        document: the document.
        metadata: the length of its metadata as compact JSON, when the caller has
            measured it already (:func:`metadata_json`); measured here otherwise.

    Raises:
        JsonError: the metadata is not a JSON object (when it is measured here).
    """
    if metadata is None:
        metadata = len(metadata_json(document.metadata, "document metadata"))
    text = document.text
    return entry_bytes(
        len(text) if text.isascii() else _utf8_len(text),
        metadata=metadata,
        entry_id=document.id,
        source_id=document.source_id,
        conversation=document.conversation,
    )


def turn_bytes(
    turn: UnifiedMessage,
    *,
    source: str,
    metadata: int = 0,
    index_text: str | None = None,
    entry_id: str | None = None,
    conversation: str | None = None,
) -> int:
    """:func:`entry_bytes` of one turn stored with this source (and metadata of this
    compact-JSON length, index text, id and conversation): what ``max_entry_bytes`` is
    checked against.

    Raises:
        JsonError: a tool call's arguments are not JSON.
    """
    return entry_bytes(
        payload_bytes(turn) + arguments_surplus(turn),
        blocks=len(turn.content),
        metadata=metadata,
        index_text=index_text,
        source=source,
        entry_id=entry_id,
        conversation=conversation,
    )


def arguments_surplus(message: UnifiedMessage) -> int:
    """How much longer the message's tool-call arguments are as msgpack (how they are
    stored) than as the compact JSON that design §2 counts: what :func:`turn_bytes` adds
    to ``payload_bytes``, for a backend that sums a batch's sizes itself."""
    surplus = 0
    for block in message.content:
        if type(block) is ToolCall and block.arguments is not None:
            if type(block.arguments) is dict and len(block.arguments) < 16:
                # Small flat arguments: no value or key that may be longer in msgpack
                # (see _LONGER_IN_MSGPACK), so the whole is not, header included.
                for key, value in block.arguments.items():
                    if type(value) in _LONGER_IN_MSGPACK and not (
                        type(value) is str and len(value) < 85
                    ):
                        break
                    if len(key) >= 85:
                        break
                else:
                    continue
            arguments = block.arguments
            # payload_bytes has checked them: encode without checking again.
            try:
                as_json = len(_JSON_ENCODER.encode(arguments))
                stored = len(_ENCODER.encode(arguments))
            except UnicodeEncodeError:  # a lone surrogate: the forms that handle one
                what = f"arguments of tool call {block.id!r}"
                as_json = len(compact_json(arguments, what=what))
                stored = len(pack(arguments))
            if stored > as_json:
                surplus += stored - as_json
    return surplus


#: The longest id (a turn's or a document's) any store takes, in UTF-8 bytes, and the
#: longest namespace a write takes. Both backends refuse a longer one alike
#: (:func:`check_name_size`): PostgreSQL indexes ``(namespace, id)`` in a btree, whose
#: rows hold at most 2,704 bytes, and these two (with the row's headers, about 20
#: bytes) stay under it; its other indexes hold a namespace beside a BM25 term of at
#: most ``actors._retrieval.bm25.MAX_TERM_BYTES``. The CLI and MCP doors take at most 256 bytes.
MAX_ID_BYTES = 2048
MAX_NAMESPACE_BYTES = 512


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
