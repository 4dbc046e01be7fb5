"""The argument checks every layer shares: an int bound, and a value shown in an error.

``protocol`` never imports numpy, so a numpy integer is recognised by ``__index__``
(``bool`` is refused, and ``numpy.bool`` has no ``__index__``: a flag is not a count).
Both names are public in :mod:`protocol.checks`.
"""

from __future__ import annotations

import operator
import reprlib

from ._errors import ConfigError

__all__ = ["check_int", "check_retriever_name", "shown"]

# Python refuses to print an int of more than 4,300 digits (``sys.int_max_str_digits``).
_MAX_SHOWN_BITS = 4_000


class _ShortRepr(reprlib.Repr):
    """``reprlib``'s bounded repr (a few levels, a few items each), with an int too long
    to print described by its size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = self.maxother = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _MAX_SHOWN_BITS:
            return f"<an int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()


def shown(value: object, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, safe for any value.

    Containers are shown a few levels and items deep (``reprlib``): a list nested a
    million deep would raise ``RecursionError`` in ``repr``, and a huge one would cost
    its whole size to print only to be cut. An int too long to print (past
    ``sys.int_max_str_digits``) is described by its size in bits.
    """
    if isinstance(value, int) and value.bit_length() > _MAX_SHOWN_BITS:
        return f"an int of {value.bit_length()} bits"
    try:
        text = _SHORT.repr(value)
    except Exception as error:  # a hostile __repr__, or a deep object inside one
        return f"a {type(value).__name__} (unprintable: {type(error).__name__})"
    return text if len(text) <= width else text[: width - 3] + "..."


def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    python: bool = False,
) -> int:
    """``value`` as a plain int, refused unless it is an int ``>= minimum``.

    Accepts a Python int or a numpy integer (anything with ``__index__``: an integer
    type, not a float that happens to be whole); refuses ``bool`` (and
    ``numpy.bool_``), which is a flag, not a count. No upper bound: a caller's ``k`` of
    any size means "at most that many", and each backend clamps it to what it holds)
    unless ``maximum`` is given.

    Raises:
        ConfigError: ``value`` is not an int, or is below ``minimum``; the message names
            ``name``, the value seen and what was expected.
    """
    if maximum is not None:
        expected = f"an int in [{minimum}, {maximum}]"
    else:
        expected = "an int > 0" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or (python and not isinstance(value, int)):
        # ``python``: a field of a Struct that is encoded later must hold a Python int
        # (msgspec cannot encode a numpy integer).
        number = None
    else:  # numpy.bool has no __index__, so it is refused here
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            number = None
    if number is None:
        kind = type(value).__name__
        raise ConfigError(f"{name} is {shown(value)} ({kind}); expected {expected}")
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(f"{name} is {shown(number)}; expected {expected}")
    return number


def check_retriever_name(what: str, name: object) -> str:
    """``name`` if it is a retriever name: a str of 1 to 128 printable characters (what
    a ``vector_store.searched`` and the ``retriever.*`` events carry as ``retriever``).
    The one rule for ``MemoryConfig.retriever_name`` and ``actors.doors.named_run``.

    Raises:
        ConfigError: anything else, naming ``what`` and the value seen.
    """
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or not name.isprintable():
        raise ConfigError(
            f"{what} is {shown(name, 80)}; expected a str of 1 to 128 printable characters"
        )
    return name
