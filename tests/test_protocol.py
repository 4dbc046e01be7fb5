"""protocol: chat messages, projection, payload bytes, config and the error family."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from protocol import (
    ConfigError,
    ContentBlock,
    EmbedderError,
    EmbeddingError,
    EntryTooLarge,
    ImageBase64,
    JsonError,
    Poisoned,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
    VectorStoreError,
    payload_bytes,
    projection,
)
from protocol._errors import to_plugin_error
from protocol.compaction import (
    PluginInternalError,
    PluginValidationError,
)


def test_role_is_a_plain_string() -> None:
    msg = UnifiedMessage.user("hi")
    assert msg.role == "user"
    assert UnifiedMessage.system("s").role == "system"
    assert UnifiedMessage.assistant("a").role == "assistant"
    assert UnifiedMessage.tool_result("c1", "out").role == "tool"


def test_keyword_construction_and_constructors_agree() -> None:
    by_keywords = UnifiedMessage(role="user", content=[Text(text="hello")])
    assert by_keywords == UnifiedMessage.user("hello")
    result = UnifiedMessage.tool_result("call-1", "42", is_error=True)
    assert result.content == [ToolResult(tool_call_id="call-1", output="42", is_error=True)]
    assert result.tool_call_id == "call-1"


def test_bad_role_and_bad_block_are_refused() -> None:
    with pytest.raises(ValueError, match=r"role is 'robot'; expected one of"):
        UnifiedMessage(role="robot", content=[])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"content\[0\] is a str"):
        UnifiedMessage(role="user", content=["hi"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"content": ()}, TypeError, r"content is a tuple; expected a list"),
        ({"content": [Text(text="a"), 3]}, TypeError, r"content\[1\] is a int"),
        ({"name": 5}, TypeError, r"name is a int; expected str or None"),
        ({"tool_call_id": b"x"}, TypeError, r"tool_call_id is a bytes; expected str or None"),
    ],
)
def test_every_malformed_field_is_named(
    fields: dict[str, object], error: type[Exception], message: str
) -> None:
    kwargs: dict[str, Any] = {"role": "user", "content": [Text(text="a")], **fields}
    with pytest.raises(error, match=message):
        UnifiedMessage(**kwargs)


def test_names_and_list_subclasses_take_the_careful_check_and_pass() -> None:
    class Blocks(list[ContentBlock]):
        pass

    named = UnifiedMessage(role="user", content=[Text(text="a")], name="ann")
    listed = UnifiedMessage(role="tool", content=Blocks([Text(text="a")]), tool_call_id="c")
    assert named.name == "ann"
    assert listed.tool_call_id == "c"


def test_projection_joins_text_tool_names_and_outputs() -> None:
    msg = UnifiedMessage(
        role="assistant",
        content=[
            Text(text="let me check"),
            Thinking(text="secret reasoning"),
            ImageBase64(media_type="image/png", data="AAAA"),
            ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"}),
            ToolResult(tool_call_id="c1", output="rain"),
        ],
    )
    assert projection(msg) == "let me check get_weather rain"


def test_payload_bytes_counts_every_string_but_the_role() -> None:
    msg = UnifiedMessage(
        role="assistant",
        content=[
            Text(text="héllo"),  # 6 bytes in UTF-8
            Thinking(text="abc"),  # 3
            ImageBase64(media_type="image/png", data="QUJD"),  # 9 + 4
            ToolCall(id="c1", name="f", arguments={"a": [1, "é"]}),  # 2 + 1 + len('{"a":[1,"é"]}')
            ToolResult(tool_call_id="c1", output="ok"),  # 2 + 2
        ],
        name="bot",  # 3
        tool_call_id="t9",  # 2
    )
    args = len('{"a":[1,"é"]}'.encode())
    assert payload_bytes(msg) == 6 + 3 + 9 + 4 + 2 + 1 + args + 2 + 2 + 3 + 2


@pytest.mark.parametrize(
    "arguments", [{1, 2}, {"when": object()}, (1, 2), {"x": math.nan}, {1: "int key"}]
)
def test_tool_call_arguments_must_be_json(arguments: object) -> None:
    with pytest.raises(JsonError, match="arguments of tool call 'c1'") as info:
        ToolCall(id="c1", name="f", arguments=arguments)
    assert isinstance(info.value, VectorStoreError)


def test_payload_bytes_rechecks_arguments_mutated_after_construction() -> None:
    args: dict[str, object] = {"ok": 1}
    msg = UnifiedMessage.assistant(tool_calls=[ToolCall(id="c1", name="f", arguments=args)])
    args["bad"] = {3, 4}
    with pytest.raises(JsonError, match=r"holds a set"):
        payload_bytes(msg)


def test_messages_round_trip_through_msgpack_and_json() -> None:
    msg = UnifiedMessage(
        role="assistant",
        content=[Text(text="t"), ToolCall(id="c", name="n", arguments={"k": [1, 2.5, None]})],
    )
    request = UnifiedRequest(model="m", messages=[msg], temperature=0.0, extra={"x": 1})
    for codec in (msgspec.msgpack, msgspec.json):
        assert codec.decode(codec.encode(request), type=UnifiedRequest) == request


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_entries": 0}, r"max_entries is 0; expected an int > 0"),
        ({"dimensions": -3}, r"dimensions is -3; expected an int > 0"),
        ({"max_entry_bytes": 0}, r"max_entry_bytes is 0"),
        ({"max_entries": True}, r"max_entries is True \(bool\)"),
        ({"warn_fraction": 0.0}, r"warn_fraction is 0.0; expected a float in \(0, 1\]"),
        ({"warn_fraction": 1.5}, r"warn_fraction is 1.5"),
        ({"max_arena_bytes": 1000}, r"is 4000 bytes; the ceiling is 1000 bytes"),
    ],
)
def test_config_validates_every_bound(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"max_entries": 10, "dimensions": 100, "max_entry_bytes": 10}
    with pytest.raises(ConfigError, match=message):
        VectorStoreConfig(**{**base, **kwargs})  # type: ignore[arg-type]


def test_default_ceiling_is_physical_memory() -> None:
    with pytest.raises(ConfigError, match="the ceiling is"):
        VectorStoreConfig(max_entries=2**40, dimensions=1024, max_entry_bytes=1)
    assert VectorStoreConfig(max_entries=1, dimensions=1, max_entry_bytes=1, warn_fraction=1.0)


def test_config_is_validated_when_decoded_too() -> None:
    raw = msgspec.json.encode({"max_entries": 0, "dimensions": 4, "max_entry_bytes": 4})
    with pytest.raises(msgspec.ValidationError, match="max_entries is 0"):
        msgspec.json.decode(raw, type=VectorStoreConfig)


def test_error_family_attributes() -> None:
    too_large = EntryTooLarge(120, 100, 3)
    assert (too_large.bytes, too_large.max_entry_bytes, too_large.index) == (120, 100, 3)
    assert "120 payload bytes" in str(too_large) and "at most 100" in str(too_large)
    original = KeyError("model missing")
    wrapped = EmbedderError(original)
    assert wrapped.error is original and wrapped.__cause__ is original
    for cls in (ConfigError, EmbeddingError, EntryTooLarge, EmbedderError, Poisoned, JsonError):
        assert issubclass(cls, VectorStoreError)


def test_to_plugin_error_follows_the_seam() -> None:
    validation = to_plugin_error(EntryTooLarge(5, 4))
    assert isinstance(validation, PluginValidationError)
    assert validation.schema == "vector-store"
    embedding = to_plugin_error(EmbeddingError("bad width"))
    assert isinstance(embedding, PluginValidationError) and embedding.schema == "vector-store"
    original = TimeoutError("provider slow")
    assert to_plugin_error(EmbedderError(original)) is original
    for error in (ConfigError("k"), Poisoned("crash"), JsonError("set")):
        converted = to_plugin_error(error)
        assert isinstance(converted, PluginInternalError)
        assert type(error).__name__ in converted.message


def test_ints_beyond_64_bits_are_refused_so_messages_replay_through_msgpack() -> None:
    ToolCall(id="c1", name="f", arguments={"n": 2**64 - 1, "m": -(2**63)})
    with pytest.raises(JsonError, match=r"holds the int 18446744073709551616, outside"):
        ToolCall(id="c1", name="f", arguments={"n": 2**64})
