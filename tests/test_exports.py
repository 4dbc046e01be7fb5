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
    "ConfigError",
    "ContentBlock",
    "DEFAULT_NAMESPACE",
    "DeleteResult",
    "DispatchError",
    "DispatchTimeout",
    "Document",
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
    "Poisoned",
    "RECALL_MARKER",
    "ROLES",
    "RecallInjection",
    "RecallSettings",
    "RetrievalReport",
    "RetrievedTurn",
    "Role",
    "ScoredDocument",
    "SearchKind",
    "SearchRequest",
    "SparseVector",
    "StoreUnavailable",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "TurnReport",
    "UnifiedMessage",
    "UnifiedRequest",
    "VectorStoreConfig",
    "VectorStoreError",
    "VectorStoreUsage",
    "XML_RECALL_MARKER",
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

PROTOCOL_COMPACTION = [
    "ClampOversizedMessages",
    "Clamped",
    "CompactionAction",
    "CompressionReport",
    "DropObservations",
    "Dropped",
    "Offload",
    "Offloaded",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Rejected",
    "Skipped",
    "SlidingWindow",
    "Strategy",
    "Summarize",
    "Summarized",
    "contextual_entry",
]

PROTOCOL_MESSAGES = [
    "Clear",
    "Cleared",
    "Compress",
    "Compressed",
    "Dedupe",
    "Delete",
    "DocumentsUpserted",
    "Forget",
    "Forgotten",
    "Inject",
    "Msg",
    "Recall",
    "StoreReply",
    "StoreRequest",
    "StoreTurns",
    "Supersede",
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
    "Add",
    "AnyEmbedder",
    "AsyncEmbedder",
    "CacheStatistics",
    "CachedEmbedder",
    "Consolidator",
    "Decision",
    "Dispatcher",
    "DocumentStore",
    "Duplicate",
    "EchoDispatcher",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModel",
    "EmbeddingRegistry",
    "EmbeddingResult",
    "EmbeddingUsageLog",
    "HashingEmbedder",
    "InMemoryRecordManager",
    "LlmConsolidator",
    "Memory",
    "MemoryStatistics",
    "MiniLMEmbedder",
    "MiniLMStatistics",
    "OpenAIChatDispatcher",
    "OpenAIEmbeddings",
    "Record",
    "RecordManager",
    "RuleConsolidator",
    "SentenceTransformerEmbedder",
    "SparseEmbeddingModel",
    "Store",
    "StoreHandle",
    "StoreStatistics",
    "Subscription",
    "Summarizer",
    "Turned",
    "Update",
    "VectorLike",
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

# The checks and encodings every door and backend shares (for those who write one).
PROTOCOL_CHECKS = [
    "BLOCK_OVERHEAD",
    "DEFAULT_MIN_SIMILARITY",
    "FLOAT64_MARKER",
    "JsonValue",
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
    "filter_option",
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
    "named_run",
    "relevance_floor",
]

# Imported lazily, so ``import actors`` does not need the pg extra.
ACTORS_LAZY = ["PgStoreHandle", "PgTableInfo", "open_pg_store", "read_pg_table"]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("protocol", PROTOCOL),
        ("protocol.compaction", PROTOCOL_COMPACTION),
        ("protocol.messages", PROTOCOL_MESSAGES),
        ("protocol.filters", PROTOCOL_FILTERS),
        ("protocol.events", PROTOCOL_EVENTS),
        ("protocol.checks", PROTOCOL_CHECKS),
        ("actors", ACTORS),
        ("actors.testing", ACTORS_TESTING),
        ("actors.doors", ACTORS_DOORS),
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
        "import sys, protocol, protocol.checks; "
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
    # Not for users either: only open_store and open_pg_store build one
    # (NoPublicConstructor), so a user's subclass could never be made.
    "actors.StoreHandle": "PgStoreHandle extends it with pg's table name",
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


def test_protocol_top_level_fits_in_ones_head() -> None:
    import protocol

    assert len(protocol.__all__) <= 60, len(protocol.__all__)


@pytest.mark.parametrize(
    ("name", "home"),
    [(name, "protocol.compaction") for name in PROTOCOL_COMPACTION]
    + [(name, "protocol.messages") for name in ("Cleared", "Compressed", "TurnsStored")],
)
def test_a_moved_name_still_imports_from_the_top_with_a_warning(name: str, home: str) -> None:
    import protocol

    assert name not in protocol.__all__
    assert name not in vars(protocol)
    with pytest.warns(DeprecationWarning, match=rf"protocol\.{name} moved to {home}\.{name}"):
        value = getattr(protocol, name)
    assert value is getattr(importlib.import_module(home), name)


def test_an_unknown_protocol_name_is_an_attribute_error() -> None:
    import protocol

    with pytest.raises(AttributeError, match="module 'protocol' has no attribute 'Nope'"):
        getattr(protocol, "Nope")  # noqa: B009


# Every public module, parents before their submodules: the order in which a name
# exported twice (``protocol.Event``, ``protocol.events.Event``) takes its home.
PUBLIC_MODULES = [
    "protocol",
    "protocol.compaction",
    "protocol.events",
    "protocol.filters",
    "protocol.messages",
    "actors",
    "actors.testing",
    "actors.llama",
    "actors.cli",
    "actors.integrations",
    "actors.integrations.langchain",
    "actors.integrations.langgraph",
]

# Modules that need an extra to import, and the distribution each needs.
_EXTRA = {
    "actors.integrations.langchain": "langchain_core",
    "actors.integrations.langgraph": "langgraph",
}


def _public_names(module: types.ModuleType) -> list[tuple[str, object]]:
    names = [(name, getattr(module, name)) for name in module.__all__]
    if module.__name__ == "actors" and importlib.util.find_spec("psycopg") is not None:
        names += [(name, getattr(module, name)) for name in ACTORS_LAZY]
    return names


def test_every_public_name_has_its_public_module() -> None:
    """``__module__`` of every class and function a public module exports is the public
    module that exports it (the first, parents first, when two do), never a private one;
    the methods of such a class say the same, and the class is found there by its
    qualified name (as pickle looks it up). The pattern of trio's test_exports."""
    modules = []
    for name in PUBLIC_MODULES:
        extra = _EXTRA.get(name)
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue
        modules.append(importlib.import_module(name))
    home: dict[int, str] = {}
    checked = 0
    for module in modules:
        for name, value in _public_names(module):
            if not isinstance(value, type | types.FunctionType):
                continue  # constants, unions and aliases have no module of their own
            if not value.__module__.startswith(("protocol", "actors")):
                continue  # a third party's class, re-exported
            expected = home.setdefault(id(value), module.__name__)
            assert value.__module__ == expected, (module.__name__, name)
            owner = importlib.import_module(value.__module__)
            assert getattr(owner, value.__qualname__) is value, (module.__name__, name)
            checked += 1
            if isinstance(value, type):
                for member_name, member in vars(value).items():
                    function = getattr(member, "__func__", member)
                    if isinstance(function, types.FunctionType) and function.__module__.split(".")[
                        0
                    ] in ("protocol", "actors"):
                        assert function.__module__ == expected, (name, member_name)
    assert checked > 100, checked


def test_every_public_struct_still_decodes_after_its_move() -> None:
    """msgspec resolves a Struct's string annotations in the module ``__module__`` names
    when it first builds a decoder; a moved Struct must still build one, and decode what
    it encodes (``fixup_module_metadata`` evaluates the annotations before the move)."""
    import msgspec

    structs = {
        id(value): value
        for name in PUBLIC_MODULES
        if name.startswith("protocol")
        for value in vars(importlib.import_module(name)).values()
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    }
    assert len(structs) > 50, len(structs)
    for struct in structs.values():
        msgspec.json.Decoder(struct)
        msgspec.msgpack.Decoder(struct)
    import protocol
    from protocol.compaction import Offload, SlidingWindow

    config = protocol.MemoryConfig(strategies=[SlidingWindow(max_messages=3), Offload(turns=2)])
    assert msgspec.json.decode(msgspec.json.encode(config), type=protocol.MemoryConfig) == config
