"""The checks and encodings that every door and every backend applies alike.

This module is for trio-recall's own doors (the MCP server, the command line, the
LangChain and LangGraph adapters) and backends (the in-memory arena, PostgreSQL), and
for anyone writing a door or a backend of their own: what it holds is the one place each
rule lives, so a new door or backend refuses, counts and encodes exactly as the others
do. An application that only uses a store or a ``Memory`` does not need it.

Like all of ``protocol`` it is pure: it never imports trio, numpy or ``actors``.

- **Arguments.** :func:`check_int` (an int bound; numpy integers pass, ``bool`` does
  not) and :func:`shown` (a value in an error message, cut short and safe for any
  value).
- **JSON.** :func:`check_json` and :func:`check_json_object` (what metadata and
  tool-call arguments may hold, at most :data:`MAX_JSON_DEPTH` deep),
  :func:`compact_json` (the bytes that are counted), :func:`canonical_json` (stable
  bytes to hash), :func:`loads_json` (parse, refusing JSON too deep as a
  ``JsonError``).
- **Lone surrogates.** Kept exactly inside, replaced where text leaves the process:
  :func:`pack` and :func:`unpack` (with :func:`unpack_message` and
  :func:`unpack_metadata`) store any value, :func:`replace_surrogates` and
  :func:`replace_surrogates_json` make text fit for a tokenizer, a model or an HTTP
  body, :func:`utf8_bytes` measures and encodes such text.
- **Time and conversation.** :func:`check_time` (an aware datetime, in UTC),
  :func:`format_date` (the ``Date:`` line an entry's index text carries) and
  :func:`check_conversation` (a name of at most :data:`MAX_CONVERSATION_BYTES`).
- **Filters.** :func:`check_filter` (the depth and size limits,
  :data:`MAX_FILTER_DEPTH` and :data:`MAX_FILTER_NODES`), :func:`matches` (the
  reference evaluator every backend is tested against) and the comparisons it is made
  of, :func:`scalar_equal` and :func:`scalar_order`, over :data:`Scalar` operands.
- **Sizes.** What one entry counts against ``max_entry_bytes``: :func:`entry_bytes`,
  with :func:`turn_bytes`, :func:`document_bytes`, :func:`metadata_json`,
  :func:`name_bytes`, :func:`arguments_surplus` and :data:`BLOCK_OVERHEAD`; the longest
  id (:data:`MAX_ID_BYTES`) and namespace (:data:`MAX_NAMESPACE_BYTES`) any store
  takes.
- **Relevance.** :data:`DEFAULT_MIN_SIMILARITY`: the cosine floor a recall applies
  when the caller gives none (``MemoryConfig.min_similarity``'s default, and every
  door's: ``actors.doors.relevance_floor``).
- **Messages and precomputed vectors.** :func:`check_messages` (a list of
  ``UnifiedMessage``), :data:`FLOAT64_MARKER` and :func:`msgpack_array_header` (how a
  precomputed embedding travels as msgpack).
"""

from ._checks import check_int as check_int
from ._checks import shown as shown
from ._documents import FLOAT64_MARKER as FLOAT64_MARKER
from ._documents import msgpack_array_header as msgpack_array_header
from ._filters import MAX_FILTER_DEPTH as MAX_FILTER_DEPTH
from ._filters import MAX_FILTER_NODES as MAX_FILTER_NODES
from ._filters import Scalar as Scalar
from ._filters import check_filter as check_filter
from ._filters import filter_option as filter_option
from ._filters import matches as matches
from ._filters import scalar_equal as scalar_equal
from ._filters import scalar_order as scalar_order
from ._json import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._json import JsonValue as JsonValue
from ._json import canonical_json as canonical_json
from ._json import check_json as check_json
from ._json import check_json_object as check_json_object
from ._json import compact_json as compact_json
from ._json import loads_json as loads_json
from ._memory import DEFAULT_MIN_SIMILARITY as DEFAULT_MIN_SIMILARITY
from ._memory import check_messages as check_messages
from ._public import fixup_module_metadata as _fixup_module_metadata
from ._sizes import BLOCK_OVERHEAD as BLOCK_OVERHEAD
from ._sizes import MAX_ID_BYTES as MAX_ID_BYTES
from ._sizes import MAX_NAMESPACE_BYTES as MAX_NAMESPACE_BYTES
from ._sizes import arguments_surplus as arguments_surplus
from ._sizes import document_bytes as document_bytes
from ._sizes import entry_bytes as entry_bytes
from ._sizes import metadata_json as metadata_json
from ._sizes import name_bytes as name_bytes
from ._sizes import turn_bytes as turn_bytes
from ._surrogates import pack as pack
from ._surrogates import replace_surrogates as replace_surrogates
from ._surrogates import replace_surrogates_json as replace_surrogates_json
from ._surrogates import unpack as unpack
from ._surrogates import unpack_message as unpack_message
from ._surrogates import unpack_metadata as unpack_metadata
from ._surrogates import utf8_bytes as utf8_bytes
from ._time import MAX_CONVERSATION_BYTES as MAX_CONVERSATION_BYTES
from ._time import check_conversation as check_conversation
from ._time import check_time as check_time
from ._time import format_date as format_date

__all__ = [
    "BLOCK_OVERHEAD",
    "DEFAULT_MIN_SIMILARITY",
    "FLOAT64_MARKER",
    "MAX_CONVERSATION_BYTES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_NODES",
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "JsonValue",
    "MAX_NAMESPACE_BYTES",
    "Scalar",
    "arguments_surplus",
    "canonical_json",
    "check_conversation",
    "check_filter",
    "check_int",
    "check_json",
    "check_json_object",
    "check_messages",
    "check_time",
    "filter_option",
    "compact_json",
    "document_bytes",
    "entry_bytes",
    "format_date",
    "loads_json",
    "matches",
    "metadata_json",
    "msgpack_array_header",
    "name_bytes",
    "pack",
    "replace_surrogates",
    "replace_surrogates_json",
    "scalar_equal",
    "scalar_order",
    "shown",
    "turn_bytes",
    "unpack",
    "unpack_message",
    "unpack_metadata",
    "utf8_bytes",
]

_fixup_module_metadata(__name__, globals(), __all__)
