"""Strings that hold lone UTF-16 surrogates: kept exactly inside, replaced at the wire.

``json.loads('"\\ud83d"')`` (a cut-off emoji) makes a Python str holding a lone
surrogate, so a tool result, a summary or metadata can carry one. Such a str has no
UTF-8 form: msgspec, PostgreSQL, HF ``tokenizers`` and HTTP clients refuse it.

How trio-recall stores them:

- **Exactly.** Inside the process (the in-memory store) a str is kept as it is. Where a
  value must become bytes to be kept (a stored message, metadata, a pg row), it is
  msgpack as usual; only a value that msgspec cannot encode takes the *surrogate form*
  (:func:`pack`): the byte ``0xC1`` (which msgpack never uses), then msgpack in which
  each str without a UTF-8 form is an extension (code 1) holding its UTF-8 bytes with
  the surrogates passed through (``"surrogatepass"``), and each dict with such a key is
  an extension (code 2) holding its items as one flat list. :func:`unpack` reads both
  forms, so every such str comes back equal to the one stored. Values that msgspec
  encodes (the common case) never take that path and cost nothing more.
- **Replaced where text leaves the process.** A tokenizer, a model or an HTTP body
  gets :func:`replace_surrogates`: each lone surrogate becomes U+FFFD (one for one).
  What is stored is not changed by that.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from ._chat import UnifiedMessage

__all__ = [
    "SURROGATE_FORM",
    "pack",
    "replace_surrogates",
    "replace_surrogates_json",
    "unpack",
    "unpack_message",
    "unpack_metadata",
    "utf8_bytes",
]

T = TypeVar("T")

#: The first byte of the surrogate form; msgpack never uses 0xC1.
SURROGATE_FORM = b"\xc1"
_STR, _DICT = 1, 2
_ENCODER = msgspec.msgpack.Encoder()
_LONE = re.compile("[\ud800-\udfff]")


def utf8_bytes(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate written as its 3-byte form (surrogatepass)."""
    return text.encode("utf-8", "surrogatepass")


def replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: what may leave the process
    (to a tokenizer, a model, an HTTP body). Text without one is returned as is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE.sub("\ufffd", text)
    return text


def replace_surrogates_json(value: T) -> T:
    """A JSON value (dicts, lists, str, numbers) with :func:`replace_surrogates` applied
    to every str in it, keys included; containers are copied only where needed."""
    if isinstance(value, str):
        return replace_surrogates(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [replace_surrogates_json(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {  # type: ignore[return-value]
            replace_surrogates_json(k): replace_surrogates_json(v) for k, v in value.items()
        }
    return value


def _has_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tree(value: object) -> object:
    """Builtins for the surrogate form: a str without UTF-8 form becomes extension 1,
    a dict with such a key extension 2 (msgpack map keys cannot be extensions here)."""
    if isinstance(value, str):
        if _has_utf8(value):
            return value
        return msgspec.msgpack.Ext(_STR, utf8_bytes(value))
    if isinstance(value, list | tuple):
        return [_tree(v) for v in value]
    if isinstance(value, dict):
        if all(not isinstance(k, str) or _has_utf8(k) for k in value):
            return {k: _tree(v) for k, v in value.items()}
        flat: list[object] = []
        for k, v in value.items():
            flat.append(_tree(k))
            flat.append(_tree(v))
        return msgspec.msgpack.Ext(_DICT, _ENCODER.encode(flat))
    return value


def _ext_hook(code: int, data: memoryview) -> object:
    if code == _STR:
        return bytes(data).decode("utf-8", "surrogatepass")
    if code == _DICT:
        flat = _FLAT_DECODER.decode(data)
        return dict(zip(flat[::2], flat[1::2], strict=True))
    raise ValueError(f"msgpack extension {code} is not one of trio-recall's (1, 2)")


_DECODER = msgspec.msgpack.Decoder(object, ext_hook=_ext_hook)
_FLAT_DECODER = msgspec.msgpack.Decoder(list[object], ext_hook=_ext_hook)


def pack(value: object) -> bytes:
    """``value`` as msgpack, or in the surrogate form when one of its strings (keys
    included) has no UTF-8 form. Each str comes back from :func:`unpack` exactly."""
    try:
        return _ENCODER.encode(value)
    except UnicodeEncodeError:
        pass
    return SURROGATE_FORM + _ENCODER.encode(_tree(msgspec.to_builtins(value)))


def unpack(payload: bytes, decoder: msgspec.msgpack.Decoder[T], kind: type[T]) -> T:
    """Read what :func:`pack` wrote: plain msgpack with ``decoder`` (which decodes to
    ``kind``), the surrogate form by converting its builtins to ``kind``.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: not what :func:`pack` wrote.
    """
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError:
        if payload[:1] != SURROGATE_FORM:
            raise
    tree = _DECODER.decode(memoryview(payload)[1:])
    return msgspec.convert(tree, kind)


_MESSAGE_DECODER = msgspec.msgpack.Decoder(UnifiedMessage)
_METADATA_DECODER = msgspec.msgpack.Decoder(dict[str, object])


def unpack_message(payload: bytes) -> UnifiedMessage:
    """A stored message (:func:`pack` of a ``UnifiedMessage``) read back exactly."""
    return unpack(payload, _MESSAGE_DECODER, UnifiedMessage)


def unpack_metadata(payload: bytes) -> dict[str, object]:
    """Stored metadata (:func:`pack` of a JSON object) read back exactly."""
    return unpack(payload, _METADATA_DECODER, dict[str, object])
