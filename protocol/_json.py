"""Strict JSON values: what tool-call arguments and metadata may hold."""

from __future__ import annotations

import json
import math

import msgspec

from ._checks import shown
from ._errors import JsonError

__all__ = [
    "MAX_JSON_DEPTH",
    "JsonValue",
    "canonical_json",
    "check_json",
    "check_json_object",
    "compact_json",
    "loads_json",
]

#: A JSON value as :func:`check_json` accepts it (and ``json.loads`` returns it).
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]

#: The deepest a JSON value (metadata, tool-call arguments) may nest.
MAX_JSON_DEPTH = 64
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_SORTED = msgspec.json.Encoder(order="sorted")


def check_json(value: object, *, what: str = "value", _depth: int = 0) -> None:
    """Raise :class:`JsonError` unless ``value`` is a plain JSON value.

    Plain JSON means ``None``, ``bool``, ``int`` (within msgpack's 64-bit range), finite
    ``float``, ``str``, ``list`` of JSON values, or ``dict`` with ``str`` keys and JSON
    values. Sets, tuples, bytes,
    NaN/inf and arbitrary objects are refused, even where an encoder would coerce them,
    because a value that would not survive a round trip through a JSON file is a bug
    waiting in someone's replay log.
    """
    if _depth < MAX_JSON_DEPTH and type(value) is dict and _flat_json(value):
        return  # its items are at most MAX_JSON_DEPTH deep: the walk would accept them
    if _depth > MAX_JSON_DEPTH:
        raise _too_deep(what)
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        # Actor messages are logged and replayed through msgpack, which stops at 64 bits.
        if not _INT_MIN <= value <= _INT_MAX:
            raise JsonError(
                f"{what} holds the int {shown(value)}, outside [-2**63, 2**64 - 1]; larger ints "
                "cannot be logged as msgpack"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonError(f"{what} holds the float {value!r}; JSON takes only finite numbers")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, what=f"{what}[{i}]", _depth=_depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise JsonError(
                    f"{what} has the key {shown(key)} of type {type(key).__name__}; "
                    "JSON object keys must be str"
                )
            check_json(item, what=f"{what}[{key!r}]", _depth=_depth + 1)
        return
    raise JsonError(
        f"{what} holds a {type(value).__name__} ({shown(value)}); expected a JSON value "
        "(None, bool, int, float, str, list or dict with str keys)"
    )


def _too_deep(what: str) -> JsonError:
    return JsonError(
        f"{what} is nested deeper than {MAX_JSON_DEPTH} levels; expected JSON at most "
        f"{MAX_JSON_DEPTH} levels deep"
    )


def loads_json(text: str, *, what: str = "value") -> JsonValue:
    """``json.loads(text)``, with JSON nested too deep to parse refused as
    :class:`JsonError` (the message of :func:`check_json`'s depth limit) rather than a
    ``RecursionError``.

    The parser recurses once per level and stops at the interpreter's recursion limit
    (about a thousand levels); a value it does parse is still held to
    :data:`MAX_JSON_DEPTH` where :func:`check_json` checks it (metadata, arguments).

    Raises:
        json.JSONDecodeError: ``text`` is not JSON.
        JsonError: ``text`` nests deeper than the parser can go.
    """
    try:
        value: JsonValue = json.loads(text)
    except RecursionError:
        raise _too_deep(what) from None
    return value


def _flat_json(value: dict[object, object]) -> bool:
    """Whether ``value`` is a dict of str keys and valid JSON scalars (the usual
    metadata), checked in one loop; False sends it through :func:`check_json`'s
    general walk, which then accepts nested values or raises its error."""
    for key, item in value.items():
        if type(key) is not str:
            return False
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if type(item) is int:
            if not _INT_MIN <= item <= _INT_MAX:
                return False
        elif type(item) is not float or not math.isfinite(item):
            return False
    return True


def check_json_object(value: object, *, what: str = "metadata") -> dict[str, JsonValue]:
    """Check that ``value`` is a JSON object (a ``dict``) and return it."""
    if not isinstance(value, dict):
        raise JsonError(f"{what} is a {type(value).__name__}; expected a JSON object (dict)")
    check_json(value, what=what)
    return value


def compact_json(value: object, *, what: str = "value") -> bytes:
    """Serialize ``value`` as compact UTF-8 JSON, after :func:`check_json`.

    A str holding a lone surrogate (which has no UTF-8 form) is written with the
    surrogate as its 3-byte form (``"surrogatepass"``), so the size of such a value
    counts every character, as :func:`protocol.payload_bytes` counts text.
    """
    check_json(value, what=what)
    try:
        return msgspec.json.encode(value)
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")


def canonical_json(value: object) -> bytes:
    """Stable bytes for hashing ``value`` (msgspec Structs included): JSON with sorted
    keys and fields.

    A value holding a lone surrogate cannot be UTF-8 JSON; it is hashed as ASCII JSON
    with ``\\uXXXX`` escapes instead. That form never equals the UTF-8 form of a value
    without one (which never writes a non-control character as an escape), so two
    different values never share these bytes.
    """
    try:
        return _SORTED.encode(value)
    except UnicodeEncodeError:
        builtins = msgspec.to_builtins(value, order="sorted")
        text = json.dumps(builtins, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
        return text.encode("ascii")
