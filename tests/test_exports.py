"""The public names of each package, pinned: adding or removing one is a decision.

Every name in ``__all__`` must import, and every public attribute must be in ``__all__``
(the pattern of trio's ``test_exports.py``).
"""

from __future__ import annotations

import importlib
import types

import pytest

PROTOCOL = [
    "ClampOversizedMessages",
    "Clamped",
    "Cleared",
    "CompactionAction",
    "Compressed",
    "CompressionReport",
    "ConfigError",
    "ContentBlock",
    "DEFAULT_NAMESPACE",
    "DeleteResult",
    "DispatchError",
    "DispatchTimeout",
    "Document",
    "DropObservations",
    "Dropped",
    "EmbedderError",
    "EmbeddingCall",
    "EmbeddingError",
    "EmbeddingPrice",
    "EmbeddingProfile",
    "EmbeddingProviderError",
    "EmbeddingTimeout",
    "EmbeddingUsageTotals",
    "EntryTooLarge",
    "Event",
    "EventSink",
    "Filter",
    "FilterError",
    "FilterNode",
    "ImageBase64",
    "IndexResult",
    "Injected",
    "InputType",
    "JsonError",
    "MemoryConfig",
    "Offload",
    "Offloaded",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Poisoned",
    "RECALL_MARKER",
    "ROLES",
    "RecallInjection",
    "RecallSettings",
    "Rejected",
    "RetrievalReport",
    "RetrievedTurn",
    "Role",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "Skipped",
    "SlidingWindow",
    "SparseVector",
    "StoreUnavailable",
    "Strategy",
    "Summarize",
    "Summarized",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnReport",
    "TurnsStored",
    "UnifiedMessage",
    "UnifiedRequest",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "XML_RECALL_MARKER",
    "contextual_entry",
    "digest_request",
    "document_id",
    "entry_text",
    "inject",
    "parse_filter",
    "parse_time",
    "payload_bytes",
    "projection",
    "render",
]

PROTOCOL_MESSAGES = [
    "Clear",
    "Cleared",
    "Compress",
    "Compressed",
    "Delete",
    "DocumentsUpserted",
    "Inject",
    "Msg",
    "Recall",
    "StoreReply",
    "StoreRequest",
    "StoreTurns",
    "TurnsStored",
    "UpsertDocuments",
]

PROTOCOL_FILTERS = [
    "And",
    "Eq",
    "Exists",
    "Filter",
    "FilterNode",
    "Gt",
    "Gte",
    "In",
    "Lt",
    "Lte",
    "Ne",
    "Nin",
    "Not",
    "Or",
    "parse_filter",
]

PROTOCOL_EVENTS = [
    "DocumentsAdded",
    "DocumentsDeleted",
    "EmbeddingEmbedded",
    "EmbeddingFailed",
    "EmbeddingStarted",
    "Event",
    "EventSink",
    "Evicted",
    "IndexingBatchCompleted",
    "IndexingCompleted",
    "IndexingFailed",
    "IndexingStarted",
    "InjectedItem",
    "MemoryEvent",
    "RecallFailed",
    "RecallInjected",
    "Recalled",
    "RetrieverCompleted",
    "RetrieverFailed",
    "RetrieverStarted",
    "StoreNearCap",
    "StoreSearched",
    "TurnsOffloaded",
    "TurnsSummarized",
    "fingerprint",
]

ACTORS = [
    "AsyncEmbedder",
    "CacheStatistics",
    "CachedEmbedder",
    "Dispatcher",
    "DocumentStore",
    "EchoDispatcher",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModel",
    "EmbeddingRegistry",
    "EmbeddingResult",
    "EmbeddingUsageLog",
    "HashingEmbedder",
    "InMemoryRecordManager",
    "Memory",
    "MemoryStatistics",
    "MiniLMEmbedder",
    "MiniLMStatistics",
    "OpenAIChatDispatcher",
    "OpenAIEmbeddings",
    "Record",
    "RecordManager",
    "SentenceTransformerEmbedder",
    "SparseEmbeddingModel",
    "Store",
    "StoreHandle",
    "StoreStatistics",
    "Subscription",
    "Summarizer",
    "Turned",
    "check_profile",
    "index",
    "open_memory",
    "open_store",
]

ACTORS_TESTING = [
    "Bundle",
    "DeterministicFakeEmbedding",
    "EmbedCall",
    "EmbedFault",
    "EmbedderConformance",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
    "HashingEmbedder",
    "HostileBaseException",
    "HostileCall",
    "HostileEmbedder",
    "HostileInputViolation",
    "InjectedCrash",
    "LoopStopTimeout",
    "ModelEntry",
    "ModelState",
    "RandomFakeEmbedding",
    "RecordManagerConformance",
    "SCORE_TOLERANCE",
    "StoreConformance",
    "TrioRuleBasedStateMachine",
    "VectorStoreMachine",
    "WriteConformance",
    "check_hostile_call",
    "check_report",
    "consumes",
    "embed_faults",
    "entry_bytes",
    "hostile_filters",
    "hostile_memory_calls",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_store_calls",
    "hostile_text",
    "hostile_vectors",
    "initialize",
    "inject_crash",
    "invariant",
    "multiple",
    "precondition",
    "rule",
    "run_hostile_calls",
    "tolerate_expected_poison",
]

# The checks and encodings every door and backend shares (for those who write one).
PROTOCOL_CHECKS = [
    "BLOCK_OVERHEAD",
    "DEFAULT_MIN_SIMILARITY",
    "FLOAT64_MARKER",
    "MAX_CONVERSATION_BYTES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_NODES",
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
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

# The rules every door shares.
ACTORS_DOORS = [
    "DEFAULT_MODE",
    "FLOORLESS_MODES",
    "SEARCH_MODES",
    "candidate_depth",
    "check_mode",
    "check_similarity",
    "door_time",
    "relevance_floor",
]

# Imported lazily, so ``import actors`` does not need the pg extra.
ACTORS_LAZY = ["PgStoreHandle", "PgTableInfo", "open_pg_store", "read_pg_table"]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("protocol", PROTOCOL),
        ("protocol.messages", PROTOCOL_MESSAGES),
        ("protocol.filters", PROTOCOL_FILTERS),
        ("protocol.events", PROTOCOL_EVENTS),
        ("protocol.checks", PROTOCOL_CHECKS),
        ("actors", ACTORS),
        ("actors.testing", ACTORS_TESTING),
        ("actors.doors", ACTORS_DOORS),
        ("actors.llama", ["open_llama_server", "smollm2_gguf_path"]),
        ("actors.cli", ["main"]),
        ("actors.integrations", []),  # each adapter is a module of its own, imported lazily
    ],
)
def test_public_names_are_pinned(module: str, expected: list[str]) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == expected
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name
    public = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    # Annotations-only helpers (``from __future__``) are not names; everything else
    # public must be listed.
    assert public - set(mod.__all__) - {"annotations"} == set()


def test_protocol_imports_neither_trio_nor_numpy() -> None:
    import subprocess
    import sys

    code = (
        "import sys, protocol; "
        "bad = [m for m in ('trio', 'numpy', 'actors') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_pg_names_are_lazy() -> None:
    import actors as package

    for name in ACTORS_LAZY:
        assert name in dir(package)
        assert name not in package.__all__
