"""The public names of each package, pinned: adding or removing one is a decision.

Every name in ``__all__`` must import, and every public attribute must be in ``__all__``
(the pattern of trio's ``test_exports.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
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
    "EmbeddingCompleted",
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
    "AnyEmbedder",
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
    "DeterministicFakeEmbedding",
    "EmbedCall",
    "EmbedderConformance",
    "EmbedderFailure",
    "Fault",
    "FaultyEmbedder",
    "InjectedCrash",
    "LoopStopTimeout",
    "RandomFakeEmbedding",
    "RecordManagerConformance",
    "SCORE_TOLERANCE",
    "StoreConformance",
    "TrioRuleBasedStateMachine",
    "VectorStoreMachine",
    "WriteConformance",
    "inject_crash",
    "trio_step",
]

ACTORS_TESTING_HOSTILE = [
    "EmbedFault",
    "HostileBaseException",
    "HostileCall",
    "HostileEmbedder",
    "HostileInputViolation",
    "check_hostile_call",
    "embed_faults",
    "entry_bytes",
    "hostile_filters",
    "hostile_memory_calls",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_store_calls",
    "hostile_text",
    "hostile_vectors",
    "run_hostile_calls",
    "tolerate_expected_poison",
]

# Imported lazily, so ``import actors`` does not need the pg extra.
ACTORS_LAZY = ["PgStoreHandle", "open_pg_store"]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("protocol", PROTOCOL),
        ("protocol.messages", PROTOCOL_MESSAGES),
        ("protocol.filters", PROTOCOL_FILTERS),
        ("protocol.events", PROTOCOL_EVENTS),
        ("actors", ACTORS),
        ("actors.testing", ACTORS_TESTING),
        ("actors.testing.hostile", ACTORS_TESTING_HOSTILE),
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


def test_testing_is_small_and_reexports_nothing_of_hypothesis() -> None:
    """``actors.testing`` stays at most 25 names (issue #30), none of them hypothesis's:
    users import ``rule``, ``Bundle``... from ``hypothesis.stateful`` itself."""
    import hypothesis.stateful
    import hypothesis.strategies

    import actors.testing
    import actors.testing.hostile

    assert len(actors.testing.__all__) <= 25
    hypothesis_objects = {
        id(value)
        for module in (hypothesis.stateful, hypothesis.strategies)
        for value in vars(module).values()
    }
    for module in (actors.testing, actors.testing.hostile):
        for name in module.__all__:
            value = getattr(module, name)
            assert id(value) not in hypothesis_objects, f"{module.__name__}.{name}"
            assert not getattr(value, "__module__", "").startswith("hypothesis"), name


# Public classes meant for subclassing, and why; every other public class is final.
SUBCLASSABLE = {
    "actors.testing.TrioRuleBasedStateMachine": "the base of a user's own state machine",
    "actors.testing.VectorStoreMachine": "override open_store_under_test for your store",
    "actors.testing.StoreConformance": "subclass as Test... with your store's factory",
    "actors.testing.WriteConformance": "subclass as Test... with your store's factory",
    "actors.testing.EmbedderConformance": "subclass as Test... with make_embedder()",
    "actors.testing.RecordManagerConformance": "subclass with make_record_manager()",
    "actors.EmbeddingUsageLog": "the store's private _TeeUsageLog extends it",
}

PUBLIC_CLASS_MODULES = [
    "actors",
    "actors.testing",
    "actors.testing.hostile",
    "protocol",
    "protocol.messages",
    "protocol.filters",
    "protocol.events",
]


def _public_classes() -> dict[str, type]:
    classes: dict[str, type] = {}
    for name in PUBLIC_CLASS_MODULES:
        module = importlib.import_module(name)
        names = list(module.__all__)
        if name == "actors":
            names += ACTORS_LAZY if importlib.util.find_spec("psycopg") else []
        for attr in names:
            value = getattr(module, attr)
            if isinstance(value, type):
                classes.setdefault(f"{name}.{attr}", value)
    return classes


def test_classes_are_final() -> None:
    """Every public class is ``typing.final`` unless users subclass it by design (trio's
    ``test_exports.py::test_classes_are_final``). Categories that stay open:

    - errors (``BaseException`` subclasses): users catch them by base class;
    - ``typing.Protocol`` classes: users implement them;
    - enums with members, which Python already refuses to subclass;
    - msgspec Structs: plain data, encoded and compared field by field. This project
      builds its tagged unions by subclassing them (``Msg``, ``Event``, ``FilterNode``),
      and a user's subclass is still encoded field by field (a decoder returns the
      base type), so there is nothing to break; they are not marked.
    """
    import enum

    import msgspec

    checked = []
    for path, cls in _public_classes().items():
        if (
            issubclass(cls, BaseException | msgspec.Struct)
            or getattr(cls, "_is_protocol", False)
            or (issubclass(cls, enum.Enum) and len(cls) > 0)
        ):
            continue
        checked.append(path)
        final = getattr(cls, "__final__", False)
        if path in SUBCLASSABLE:
            assert not final, f"{path} is final, but on the subclassable list"
        else:
            assert final, f"{path} is neither @final nor on the subclassable list"
    assert set(SUBCLASSABLE) <= set(checked), "a stale entry on the subclassable list"
    assert len(checked) > 30
