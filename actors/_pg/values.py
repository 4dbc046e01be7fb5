"""The forms values take in the pg store's SQL: PostgreSQL ``text`` (which holds no NUL
and no lone surrogate), the jsonb that filters read, and pgvector's text and binary
inputs. ``schema.py`` re-exports them; its docstring says which column holds which.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from decimal import Decimal

import msgspec
import numpy as np
import numpy.typing as npt

from protocol import ConfigError
from protocol.checks import replace_surrogates

__all__ = [
    "check_pg_text",
    "exact_text",
    "filter_json",
    "jsonb_binary",
    "jsonb_string",
    "search_text",
    "vector_binary",
    "vector_literal",
]

_FILTER_ENCODER = msgspec.json.Encoder(decimal_format="number")


def check_pg_text(what: str, value: str) -> str:
    """Refuse a name that PostgreSQL's ``text`` cannot hold: a NUL or a lone surrogate."""
    if "\x00" in value:
        raise ConfigError(f"{what} {value!r:.60} holds a NUL character; PostgreSQL text cannot")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(
            f"{what} {value!r:.60} is not valid UTF-8 ({error.reason}); PostgreSQL text "
            "takes UTF-8 only"
        ) from None
    return value


def search_text(text: str) -> str:
    """The ``text`` column's copy of a text: each NUL and lone surrogate becomes U+FFFD.

    The column is for search (phase 2: BM25, documents); the exact text is kept beside
    it (:func:`exact_text`), the exact message as msgpack in ``message``.
    """
    return replace_surrogates(text.replace("\x00", "\ufffd"))


# What jsonb_string escapes: NUL and \x01 (with \x01 as the escape), lone surrogates
# and U+D7FF (with U+D7FF as the escape).
_JSONB_ESCAPED = re.compile("[\x00\x01\ud7ff-\udfff]")


def _jsonb_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 1:
        return "\x01" + chr(code + 1)
    return "\ud7ff" + chr(0x1000 + code - 0xD7FF)


def jsonb_string(value: str) -> str:
    r"""A str as the jsonb metadata holds it (keys and values): jsonb holds no NUL and
    no lone surrogate, so those are written as two characters, and so are the two
    characters that serve as escapes. The form keeps equality (one str, one form) and
    code point order (``a < b`` exactly when their forms are), so a filter compares
    the form of its operand with the stored forms and answers as Python does.

    ``"\x00"`` is ``"\x01\x01"`` and ``"\x01"`` is ``"\x01\x02"``: every other
    character is above both. U+D7FF is ``"\ud7ff\u1000"`` and a surrogate ``c`` is
    ``"\ud7ff"`` and ``chr(0x1000 + c - 0xD7FF)``: between U+D7FE and U+E000, in
    order. Any other str is itself. (``"\x01"`` and U+D7FF are rare: a control
    character and an unassigned code point.)
    """
    if _JSONB_ESCAPED.search(value) is None:
        return value
    return _JSONB_ESCAPED.sub(_jsonb_escape, value)


def _jsonb_safe(value: object) -> object:
    """A JSON value with :func:`jsonb_string` applied to every str, keys included."""
    if isinstance(value, str):
        return jsonb_string(value)
    if isinstance(value, list):
        return [_jsonb_safe(item) for item in value]
    if isinstance(value, dict):
        return {jsonb_string(key): _jsonb_safe(item) for key, item in value.items()}
    return value


def exact_text(text: str, searchable: str) -> bytes | None:
    """The exact text as UTF-8 (lone surrogates kept), or None when the searchable copy
    is already exact."""
    if text == searchable:
        return None
    return text.encode("utf-8", "surrogatepass")


def filter_json(metadata: Mapping[str, object]) -> str:
    """The jsonb text that filters read: the metadata, with every top-level float as its
    exact binary value in decimal.

    PostgreSQL's ``numeric`` then compares ints and floats by exact value, as Python
    does. The shortest repr would not: the float ``1e23`` is 99999999999999991611392,
    which is less than the int ``10**23 - 1``, but its repr ``1e+23`` is not. Nested
    values are never compared by a filter (keys are top-level), so they are left alone.

    Every str, keys and nested values included, is in :func:`jsonb_string`'s form,
    which jsonb can hold (a NUL or a lone surrogate is escaped) and which filters bind
    their keys and operands in. Reads return the exact metadata from ``meta_raw``.
    """
    exact = {
        key: Decimal(value) if isinstance(value, float) else value
        for key, value in metadata.items()
    }
    try:
        text: str | None = _FILTER_ENCODER.encode(exact).decode("utf-8")
    except UnicodeEncodeError:
        text = None
    if text is None or _escapes(text):
        text = _FILTER_ENCODER.encode(_jsonb_safe(exact)).decode("utf-8")
    return text


def _escapes(text: str) -> bool:
    """Whether JSON text (valid UTF-8) may hold a str that :func:`jsonb_string`
    changes: JSON writes NUL and \\x01 as these escapes (an escaped backslash before
    "u0000" is a false alarm, which only costs a copy), and U+D7FF as itself."""
    return "\\u0000" in text or "\\u0001" in text or "\ud7ff" in text


def jsonb_binary(metadata: Mapping[str, object], compact: bytes) -> bytes:
    """jsonb's binary input form (a version byte, 1, then the text) of
    :func:`filter_json`'s text of ``metadata``.

    ``compact`` is the metadata as compact JSON (``protocol.checks.metadata_json``, which
    the size check made): it is that very text, and is reused, when the metadata has no
    top-level float, holds no str that :func:`jsonb_string` changes and is valid UTF-8
    (no lone surrogate).
    """
    if not compact:
        return b"\x01{}"
    if (
        b"\\u0000" not in compact
        and b"\\u0001" not in compact
        and (compact.isascii() or (b"\xed\x9f\xbf" not in compact and _utf8(compact)))
    ):
        for value in metadata.values():
            if isinstance(value, float):
                break
        else:
            return b"\x01" + compact
    return b"\x01" + filter_json(metadata).encode("utf-8")


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def vector_literal(row: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a float32 row, exactly.

    ``repr`` of each float32 (as a float64) is the shortest string that reads back as
    that float64, which is the float32 value itself, so pgvector's ``strtof`` stores the
    very same bits.
    """
    return "[" + ",".join(map(repr, row.tolist())) + "]"


def vector_binary(rows: npt.NDArray[np.float32]) -> list[bytes]:
    """pgvector's binary input of each float32 row: the width and a zero (int16 each),
    then the floats, big-endian. The very same bits as the row, unlike any text form."""
    count, width = rows.shape
    size = 4 + 4 * width
    # Every row's bytes in one buffer (its header, then its floats), cut into rows.
    out = np.empty((count, size), dtype=np.uint8)
    out[:, :4] = np.frombuffer(struct.pack(">hh", width, 0), dtype=np.uint8)
    out[:, 4:] = np.ascontiguousarray(rows, dtype=">f4").view(np.uint8).reshape(count, 4 * width)
    buffer = out.tobytes()
    return [buffer[i : i + size] for i in range(0, count * size, size)]
