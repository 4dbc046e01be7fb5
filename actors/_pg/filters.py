"""Metadata filters translated to SQL over the pg store's jsonb ``metadata`` column.

The semantics are exactly those of :func:`protocol._filters.matches` (the tests compare
the two on random metadata and random filters):

- a missing key fails every comparison and passes ``$ne``/``$nin``; every leaf is a
  ``CASE`` or an ``IS TRUE`` test, so it is true or false, never NULL, and ``NOT`` is an
  exact negation;
- types never mix: an order leaf first checks ``jsonb_typeof`` (``'number'`` excludes
  booleans, so a bool is not a number), and an equality leaf (``$eq``, ``$in`` and their
  negations) is jsonb containment, whose equality never mixes types either;
- numbers compare as ``numeric``, by exact value across int and float: the store writes
  top-level floats as their exact binary value in decimal (``schema.filter_json``),
  and float operands are bound the same way;
- strings compare ``COLLATE "C"``, which on UTF-8 is code point order;
- lists and objects have jsonb types of their own, so they only pass ``$exists``,
  ``$ne`` and ``$nin``.

Keys and operands are always bound parameters (named ``%(f<n>)s``); only fixed SQL
text is composed. Every key and str operand is bound in the form the stored metadata
holds its strings in (``schema.jsonb_string``, which escapes a NUL or a lone surrogate
and keeps equality and code point order), so a key or a value holding one is found,
compared and ordered exactly as the in-memory store does.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import msgspec
from psycopg import sql

from protocol import Filter
from protocol.checks import Scalar, check_filter, check_time
from protocol.filters import And, Eq, Exists, Gt, Gte, In, Lt, Lte, Ne, Nin, Not, Or

from .schema import jsonb_string

__all__ = ["FilterSql", "Visibility", "and_time_window", "translate", "visible"]

_TRUE = sql.SQL("true")
_FALSE = sql.SQL("false")
# Every number a store can hold is below 1.8e308 in magnitude (ints: 64 bits), so an
# operand beyond this bound compares like the bound itself, and its str() stays short.
_BIG = 10**400
_SYMBOL = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_ORDER_OPS: dict[type, str] = {Gt: "gt", Gte: "gte", Lt: "lt", Lte: "lte"}
# Decimals as JSON numbers, digit for digit: an equality probe's operand stays exact.
_PROBE_ENCODER = msgspec.json.Encoder(decimal_format="number")


def _number(value: int | float) -> str | None:
    """The operand's exact value as numeric text; None for an int too big to equal any
    stored number (it still orders, through :func:`_clamp`)."""
    if isinstance(value, float):
        return str(Decimal(value))
    if -_BIG <= value <= _BIG:
        return str(value)
    return None


def _clamp(value: int | float) -> str:
    exact = _number(value)
    if exact is not None:
        return exact
    return str(_BIG if value > 0 else -_BIG)


class FilterSql:
    """A filter's SQL condition and its parameters, to merge into a statement's."""

    def __init__(self, column: sql.Composable) -> None:
        self.column = column
        self.params: dict[str, object] = {}
        self.where: sql.Composable = _TRUE

    @property
    def unfiltered(self) -> bool:
        """Whether the condition is the constant true (no filter)."""
        return self.where is _TRUE

    def bind(self, value: object) -> sql.Composable:
        name = f"f{len(self.params)}"
        self.params[name] = value
        return sql.Placeholder(name)

    def condition(self, node: Filter) -> sql.Composable:
        match node:
            case Eq(key=key, value=value):
                return self._in(key, [value])
            case Ne(key=key, value=value):
                return sql.SQL("NOT {}").format(self._in(key, [value]))
            case In(key=key, values=values):
                return self._in(key, values)
            case Nin(key=key, values=values):
                return sql.SQL("NOT {}").format(self._in(key, values))
            case Gt() | Gte() | Lt() | Lte():
                return self._order(node.key, _ORDER_OPS[type(node)], node.value)
            case Exists(key=key, value=present):
                test = sql.SQL("jsonb_exists({}, {})").format(
                    self.column, self.bind(jsonb_string(key))
                )
                return test if present else sql.SQL("NOT {}").format(test)
            case And(filters=children):
                if not children:
                    return _TRUE
                parts = [self.condition(child) for child in children]
                return sql.SQL("({})").format(sql.SQL(" AND ").join(parts))
            case Or(filters=children):
                if not children:
                    return _FALSE
                parts = [self.condition(child) for child in children]
                return sql.SQL("({})").format(sql.SQL(" OR ").join(parts))
            case Not(filter=child):
                return sql.SQL("NOT {}").format(self.condition(child))
        raise TypeError(f"not a filter node: {node!r:.60}")  # pragma: no cover

    def _value(self, key: str) -> tuple[sql.Composable, sql.Composable]:
        """``(metadata -> key, metadata ->> key)`` with the key bound once."""
        placeholder = self.bind(jsonb_string(key))
        return (
            sql.SQL("({} -> {})").format(self.column, placeholder),
            sql.SQL("({} ->> {})").format(self.column, placeholder),
        )

    def _in(self, key: str, operands: list[Scalar]) -> sql.Composable:
        """The key's value equals one of ``operands``, with the type rules: one jsonb
        containment test ``column @> {key: operand}`` per operand.

        Containment of a scalar under a top-level key is jsonb equality, which is the
        type rules': a number equals a number by numeric value (``7`` and ``7.0``;
        operands written exactly, as :func:`_number`), never a bool or a string; strings
        are equal byte for byte (``COLLATE "C"``'s equality); ``null`` only equals
        ``null``; a list or an object holds no scalar at a key (``{"k": [1]}`` does not
        contain ``{"k": 1}``); a missing key fails. It is one operator per row, where
        ``jsonb_typeof`` and a ``numeric`` cast were several (``benches/README.md``, "pg
        at scale": the filtered exact read).
        """
        key = jsonb_string(key)
        probes: list[str] = []
        for value in operands:
            probe: Scalar | Decimal
            if isinstance(value, str):
                probe = jsonb_string(value)
            elif value is None or isinstance(value, bool):
                probe = value
            else:
                exact = _number(value)
                if exact is None:
                    continue  # an int too big to equal any stored number
                probe = Decimal(exact)
            probes.append(_PROBE_ENCODER.encode({key: probe}).decode("utf-8"))
        if not probes:
            return _FALSE
        return sql.SQL("(({} @> ANY({}::jsonb[])) IS TRUE)").format(self.column, self.bind(probes))

    def _order(self, key: str, op: str, operand: str | int | float) -> sql.Composable:
        value, text = self._value(key)
        if isinstance(operand, str):
            operand = jsonb_string(operand)  # the stored form keeps code point order
            return sql.SQL(
                "CASE WHEN jsonb_typeof({v}) = 'string' THEN {t} COLLATE \"C\" {o} {p} "
                "ELSE false END"
            ).format(v=value, t=text, o=sql.SQL(_SYMBOL[op]), p=self.bind(operand))
        return sql.SQL(
            "CASE WHEN jsonb_typeof({v}) = 'number' THEN ({v})::numeric {o} {p}::numeric "
            "ELSE false END"
        ).format(v=value, o=sql.SQL(_SYMBOL[op]), p=self.bind(_clamp(operand)))


def translate(node: Filter | None, column: sql.Composable) -> FilterSql:
    """The SQL condition for ``node`` over the jsonb ``column`` (true when None).

    Use ``result.params`` as (part of) the statement's named parameters, and
    ``result.where`` in its WHERE clause. The tree is checked against the shared depth
    and size limits first (:func:`protocol._filters.check_filter`): within them, the
    statement binds at most four parameters a node, far below PostgreSQL's 65,535.

    Raises:
        FilterError: ``node`` is not a filter tree within the limits.
    """
    out = FilterSql(column)
    if node is not None:
        check_filter(node)
        out.where = out.condition(node)
    return out


_OCCURRED_AT = sql.Identifier("occurred_at")


def and_time_window(
    where: FilterSql,
    since: dt.datetime | None,
    until: dt.datetime | None,
    column: sql.Composable = _OCCURRED_AT,
) -> FilterSql:
    """``where`` with ``since <= occurred_at < until`` ANDed into its condition (either
    bound may be None: no bound there; both None leaves ``where`` as it is), for
    ``SearchRequest.since``/``until``. Returns ``where`` itself, changed in place.

    The bounds are bound parameters of ``where`` (``where.params``, named like its
    filter's, so the two never clash), compared as ``timestamptz``; ``column`` is the
    entries' ``occurred_at`` as the statement names it (qualify it, say
    ``sql.Identifier("t", "occurred_at")``, where another table of the statement has a
    column of that name; the postings have none). A statement that adds this to a
    BM25 read must read the entries for it: ``where.unfiltered`` is then False, which
    is what ``Reads.bm25_statement`` joins them on. The entries' ``(namespace,
    occurred_at)`` index serves a window on its own.

    Raises:
        ConfigError: a bound that is not None or an aware datetime.
    """
    # The same check as SearchRequest's, for a caller that built the bounds itself.
    low = check_time("since", since)
    high = check_time("until", until)
    parts: list[sql.Composable] = []
    if low is not None:
        parts.append(sql.SQL("{} >= {}::timestamptz").format(column, where.bind(low)))
    if high is not None:
        parts.append(sql.SQL("{} < {}::timestamptz").format(column, where.bind(high)))
    if not parts:
        return where
    if not where.unfiltered:
        parts.insert(0, where.where)
    where.where = sql.SQL("({})").format(sql.SQL(" AND ").join(parts))
    return where


class Visibility:
    """Which versions a read sees, as an SQL condition over the entries (schema 7).

    By default (``as_of`` None) the current, unexpired ones: ``valid_to IS NULL AND
    (expires_at IS NULL OR expires_at > now)``; with ``as_of``, the version valid then,
    still unexpired now: ``valid_from <= as_of AND (valid_to IS NULL OR valid_to >
    as_of)`` and the same expiry test (a version migrated from schema 6 has no
    ``valid_from`` of its own: its ``occurred_at`` is it). ``now`` is the store clock's,
    read once per read, and both instants are bound parameters, named ``now`` and
    ``as_of`` (a statement's other parameters never take these names).

    Attributes:
        now: the store clock's now, aware.
        as_of: the instant read, or None (current versions).
    """

    __slots__ = ("as_of", "now")

    def __init__(self, now: dt.datetime, as_of: dt.datetime | None = None) -> None:
        self.now = now
        self.as_of = as_of

    @property
    def current(self) -> bool:
        """Whether the read sees current versions (no ``as_of``)."""
        return self.as_of is None

    @property
    def params(self) -> dict[str, object]:
        """The condition's parameters, to merge into the statement's named ones."""
        return {"now": self.now, "as_of": self.as_of}

    def condition(self, table: str | None = None) -> sql.SQL:
        """The condition over the entries, their columns qualified by ``table`` (an
        alias of the statement) when given."""
        return visible(current=self.as_of is None, table=table)


_ALIAS = re.compile(r"[a-z]")


def visible(*, current: bool, table: str | None = None) -> sql.SQL:
    """:class:`Visibility`'s condition: over current versions, or (``current`` False)
    as of ``%(as_of)s``; columns qualified by ``table``, a one-letter alias."""
    if table is not None and not _ALIAS.fullmatch(table):
        raise ValueError(f"table alias {table!r}; expected one lowercase letter")
    p = "" if table is None else table + "."
    unexpired = f"({p}expires_at IS NULL OR {p}expires_at > %(now)s::timestamptz)"
    if current:
        return sql.SQL(f"({p}valid_to IS NULL AND {unexpired})")
    return sql.SQL(
        f"(coalesce({p}valid_from, {p}occurred_at) <= %(as_of)s::timestamptz AND "
        f"({p}valid_to IS NULL OR {p}valid_to > %(as_of)s::timestamptz) AND {unexpired})"
    )
