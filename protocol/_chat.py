"""Chat messages: content blocks, messages, requests, projection and payload size."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import msgspec

from ._json import check_json, compact_json

__all__ = [
    "ROLES",
    "ContentBlock",
    "ImageBase64",
    "Role",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "UnifiedMessage",
    "UnifiedRequest",
    "payload_bytes",
    "projection",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))


class Text(msgspec.Struct, frozen=True, kw_only=True, tag="text", tag_field="type"):
    """Plain text. It is embedded and rendered."""

    text: str


class Thinking(msgspec.Struct, frozen=True, kw_only=True, tag="thinking", tag_field="type"):
    """Model reasoning. It counts toward the payload but is never embedded."""

    text: str


class ImageBase64(msgspec.Struct, frozen=True, kw_only=True, tag="image", tag_field="type"):
    """A base64-encoded image. It counts toward the payload but is never embedded."""

    media_type: str
    data: str


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, tag="tool_call", tag_field="type"):
    """A tool call. ``arguments`` is any JSON value; a set or an object raises
    :class:`~protocol.JsonError` at construction."""

    id: str
    name: str
    arguments: Any = None

    def __post_init__(self) -> None:
        check_json(self.arguments, what=f"arguments of tool call {self.id!r}")


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, tag="tool_result", tag_field="type"):
    """The output of a tool call."""

    tool_call_id: str
    output: str
    is_error: bool = False


ContentBlock = Text | Thinking | ImageBase64 | ToolCall | ToolResult
_BLOCK_TYPES = (Text, Thinking, ImageBase64, ToolCall, ToolResult)


class UnifiedMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One chat message. ``role`` is a plain string, so ``message.role == "user"`` holds.

    Construction checks the role and the content block types and raises ``ValueError``
    or ``TypeError`` with what was seen, so a bad message never reaches the store.
    """

    role: Role
    content: list[ContentBlock]
    name: str | None = None
    tool_call_id: str | None = None

    def __post_init__(self) -> None:
        # Every decode of a stored message runs this too (a third of a small read's
        # hit building), so the common case (a known role, a list of known blocks, no
        # name or tool call id) is one quick pass; anything else is examined field by
        # field, which raises with what was seen or accepts it.
        content = self.content
        if self.role in ROLES and type(content) is list and self.name is self.tool_call_id is None:
            for block in content:
                if not isinstance(block, _BLOCK_TYPES):
                    break
            else:
                return
        self._refuse()

    def _refuse(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role is {self.role!r}; expected one of {sorted(ROLES)}")
        if not isinstance(self.content, list):
            raise TypeError(
                f"content is a {type(self.content).__name__}; expected a list of content blocks"
            )
        for i, block in enumerate(self.content):
            if not isinstance(block, _BLOCK_TYPES):
                raise TypeError(
                    f"content[{i}] is a {type(block).__name__}; expected one of "
                    "Text, Thinking, ImageBase64, ToolCall, ToolResult"
                )
        for field in ("name", "tool_call_id"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{field} is a {type(value).__name__}; expected str or None")

    @classmethod
    def system(cls, text: str) -> UnifiedMessage:
        return cls(role="system", content=[Text(text=text)])

    @classmethod
    def user(cls, text: str, *, name: str | None = None) -> UnifiedMessage:
        return cls(role="user", content=[Text(text=text)], name=name)

    @classmethod
    def assistant(
        cls, text: str = "", *, tool_calls: list[ToolCall] | None = None
    ) -> UnifiedMessage:
        content: list[ContentBlock] = [Text(text=text)] if text else []
        content.extend(tool_calls or ())
        return cls(role="assistant", content=content)

    @classmethod
    def tool_result(
        cls, tool_call_id: str, output: str, *, is_error: bool = False
    ) -> UnifiedMessage:
        return cls(
            role="tool",
            content=[ToolResult(tool_call_id=tool_call_id, output=output, is_error=is_error)],
            tool_call_id=tool_call_id,
        )

    def tool_calls(self) -> list[ToolCall]:
        """The tool calls in this message, in order."""
        return [b for b in self.content if isinstance(b, ToolCall)]

    def text(self) -> str:
        """The text blocks joined by newlines (for display)."""
        return "\n".join(b.text for b in self.content if isinstance(b, Text))


class UnifiedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A chat request. ``extra`` is passed through to the dispatcher untouched."""

    model: str
    messages: list[UnifiedMessage]
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    _generation_fields: ClassVar[tuple[str, ...]] = (
        "temperature",
        "max_tokens",
        "top_p",
        "stop",
        "seed",
    )


def projection(message: UnifiedMessage) -> str:
    """The text that is embedded and rendered (design §2).

    Text blocks give their text, tool calls their name, tool results their output,
    joined by single spaces. Thinking and images give nothing.
    """
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, ToolCall):
            parts.append(block.name)
        elif isinstance(block, ToolResult):
            parts.append(block.output)
    return " ".join(parts)


def _utf8(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def payload_bytes(message: UnifiedMessage) -> int:
    """The size checked against ``max_entry_bytes`` (design §2).

    The UTF-8 length of every string in every block (text, thinking, image media type
    and data, tool call id and name, arguments as compact JSON, tool result id and
    output), plus the message's ``name`` and ``tool_call_id``. The role does not count.

    Raises:
        JsonError: a tool call's arguments cannot be serialized as JSON.
    """
    total = 0
    for block in message.content:
        if isinstance(block, Text | Thinking):
            total += _utf8(block.text)
        elif isinstance(block, ImageBase64):
            total += _utf8(block.media_type) + _utf8(block.data)
        elif isinstance(block, ToolCall):
            args = compact_json(block.arguments, what=f"arguments of tool call {block.id!r}")
            total += _utf8(block.id) + _utf8(block.name) + len(args)
        elif isinstance(block, ToolResult):
            total += _utf8(block.tool_call_id) + _utf8(block.output)
    if message.name is not None:
        total += _utf8(message.name)
    if message.tool_call_id is not None:
        total += _utf8(message.tool_call_id)
    return total
