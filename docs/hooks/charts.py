"""Charts drawn from the Markdown table right above them (an MkDocs hook).

A page places a marker on the line right after a table (blank lines, and other charts of
the same table, may come between)::

    | contender | texts/s p50 |
    |---|---:|
    | int8 | 638.7 |
    | fp32 | 269.3 |

    <!-- chart: bar label="contender" value="texts/s p50" title="Embedding throughput" -->

and the hook replaces the marker by an inline SVG of horizontal bars, one per row of
that table, each as long as the row's number in the ``value`` column and labelled with
it. The chart reads the same text the table shows, so the two cannot disagree.

Attributes (``name="text"``; a ``"`` inside is written ``&quot;``):

- ``label``: the column (by its header, as written without Markdown emphasis or code
  marks) that names each bar, the first column by default; several columns joined by
  ``;`` are shown as ``a · b``;
- ``value``: the column of the bars' lengths; several, joined by ``;`` (a header may
  hold a comma), give grouped bars (one colour per column, a legend under the title);
- ``title``: the chart's caption (optional);
- ``unit``: a suffix for the value labels, such as ``" ms"`` (optional);
- ``rows``: 1-based numbers of the table's body rows to draw, such as ``"1,2,5"``
  (optional; every row by default);
- ``mark``: a number drawn as a dashed red vertical line (a target, or 1 on a chart of
  ratios; optional; the title should say what it is).

A cell's number is the first number written in it, Markdown emphasis and thousands
separators aside (``**0.51×**`` is 0.51, ``8,202 against 43,870`` is 8202, ``1.14 /
1.18 s`` is 1.14), and the bar's label is that number as the cell writes it. A cell
without a number draws no bar; a row with no number in any value column is left out.
A marker that names a column the table does not have, that follows no table, that has
no ``value`` or an unknown kind, or that finds no number at all raises
:class:`ChartError` naming the page and the marker's line; the hook turns it into
MkDocs' ``PluginError`` and the build stops (an error, not a warning: it fails with or
without ``--strict``).

Pure Python: the SVG is written by hand, with every text escaped.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

__all__ = ["ChartError", "Table", "render_markers", "on_page_markdown"]

_MARKER = re.compile(r"^\s*<!--\s*chart:\s*(?P<body>.*?)\s*-->\s*$")
_ATTRIBUTE = re.compile(r'(?P<name>[a-z]+)="(?P<value>[^"]*)"')
_KIND = re.compile(r"^(?P<kind>[a-z]+)\b")
_NUMBER = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?(?:[eE][-−]?\d+)?|[-−]?\.\d+")
_FENCE = re.compile(r"^\s*(```|~~~)")
_KNOWN = frozenset({"label", "value", "title", "unit", "rows", "mark"})

#: Colours of the series, in order (Material's indigo, then contrasting ones).
PALETTE = ("#3f51b5", "#ef6c00", "#2e7d32", "#8e24aa", "#00838f", "#c62828")

# Geometry of a chart, in SVG user units (the SVG scales to the page's width).
_WIDTH = 720
_CHAR = 6.6  # the width of a 12px sans-serif character, roughly
_LABEL_MAX = 64  # characters; a longer label is cut with an ellipsis
_VALUE_ROOM = 90
_BAR = 16
_BAR_GAP = 2
_ROW_GAP = 8
_TOP = 28
_LEGEND = 20


class ChartError(Exception):
    """A chart marker that cannot be drawn; the message names the page and the line."""


@dataclass(frozen=True)
class Table:
    """A Markdown table: its header cells and its body rows, Markdown as written."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _cells(line: str) -> tuple[str, ...]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    # A "\|" inside a cell is a literal bar, not a separator.
    parts = re.split(r"(?<!\\)\|", text)
    return tuple(part.strip().replace("\\|", "|") for part in parts)


def _plain(cell: str) -> str:
    """A cell's text without Markdown emphasis or code marks."""
    return re.sub(r"\*\*|__|`", "", cell).strip()


#: A bar's value: the number, and its text as the table writes it (the bar's label).
Value = tuple[float, str]


def _number(cell: str) -> Value | None:
    match = _NUMBER.search(_plain(cell))
    if match is None:
        return None
    return float(match.group().replace(",", "").replace("−", "-")), match.group()


def _table_above(lines: list[str], index: int, drawn: set[int]) -> Table | None:
    """The table whose last row is the last line before ``index`` that is neither blank
    nor a chart already drawn (``drawn``: so several charts can follow one table)."""
    end = index - 1
    while end >= 0 and (not lines[end].strip() or end in drawn):
        end -= 1
    if end < 0 or not lines[end].lstrip().startswith("|"):
        return None
    start = end
    while start > 0 and lines[start - 1].lstrip().startswith("|"):
        start -= 1
    block = lines[start : end + 1]
    if len(block) < 2 or not re.fullmatch(r"[\s|:\-]+", block[1]) or "-" not in block[1]:
        return None
    header = tuple(_plain(cell) for cell in _cells(block[0]))
    return Table(header=header, rows=tuple(_cells(row) for row in block[2:]))


def _column(table: Table, name: str, where: str) -> int:
    wanted = name.strip()
    for position, header in enumerate(table.header):
        if header == wanted:
            return position
    raise ChartError(
        f"{where}: the chart names the column {wanted!r}, which the table above it does "
        f"not have; its columns are {list(table.header)!r}"
    )


def _cut(label: str) -> str:
    return label if len(label) <= _LABEL_MAX else label[: _LABEL_MAX - 1] + "…"


def render_svg(
    title: str,
    series: list[str],
    bars: list[tuple[str, list[Value | None]]],
    unit: str = "",
    mark: float | None = None,
) -> str:
    """An SVG of horizontal bars: one group per ``bars`` item, one bar per series.

    Args:
        title: The caption, drawn at the top.
        series: The names of the value columns (a legend is drawn when there are two or more).
        bars: ``(label, values)`` per group; ``values`` has one ``(number, text)`` per
            series, ``None`` for no bar. A bar is as long as the number's absolute value
            (all bars on one scale) and labelled with the text.
        unit: A suffix for every value label.
        mark: A value to draw as a dashed vertical line across the bars (a target,
            or 1.0 on a chart of ratios), on the bars' scale; ``None`` for none.

    Returns:
        One line of SVG markup with every text escaped.
    """
    bars = [(_cut(label), values) for label, values in bars]
    label_width = (
        round(min(_LABEL_MAX, max((len(label) for label, _ in bars), default=1)) * _CHAR) + 12
    )
    peak = max((abs(v[0]) for _, values in bars for v in values if v is not None), default=0.0)
    if mark is not None:
        peak = max(peak, abs(mark))
    scale = (_WIDTH - label_width - _VALUE_ROOM) / peak if peak > 0 else 0.0
    # The legend (two series or more): one swatch and name per series, left to right,
    # wrapping to a new line at the chart's width.
    legend_parts: list[str] = []
    legend = 0
    if len(series) > 1:
        x, line = 0.0, 0
        for position, name in enumerate(series):
            room = 24 + _CHAR * len(name)
            if x > 0 and x + room > _WIDTH:
                x, line = 0.0, line + 1
            colour = PALETTE[position % len(PALETTE)]
            top = _TOP + line * _LEGEND
            legend_parts.append(
                f'<rect x="{x:g}" y="{top}" width="10" height="10" fill="{colour}"/>'
                f'<text x="{x + 14:g}" y="{top + 9}">{html.escape(name)}</text>'
            )
            x += room
        legend = (line + 1) * _LEGEND
    group = len(series) * _BAR + (len(series) - 1) * _BAR_GAP
    height = _TOP + legend + len(bars) * (group + _ROW_GAP) + _ROW_GAP
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="bench-chart" role="img" '
        f'viewBox="0 0 {_WIDTH} {height}" width="100%" '
        f'style="max-width:{_WIDTH}px;font-family:sans-serif;font-size:12px">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="0" y="16" font-weight="bold" font-size="13">{html.escape(title)}</text>',
        *legend_parts,
    ]
    y = _TOP + legend + _ROW_GAP
    for label, values in bars:
        parts.append(
            f'<text x="{label_width - 8}" y="{y + group / 2 + 4:g}" '
            f'text-anchor="end">{html.escape(label)}</text>'
        )
        for position, value in enumerate(values):
            top = y + position * (_BAR + _BAR_GAP)
            if value is None:
                continue
            number, text = value
            length = abs(number) * scale
            colour = PALETTE[position % len(PALETTE)]
            parts.append(
                f'<rect class="bar" x="{label_width}" y="{top}" width="{length:.3f}" '
                f'height="{_BAR}" fill="{colour}"><title>{html.escape(series[position])}: '
                f"{html.escape(text + unit)}</title></rect>"
                f'<text x="{label_width + length + 4:.2f}" y="{top + _BAR - 4}">'
                f"{html.escape(text + unit)}</text>"
            )
        y += group + _ROW_GAP
    if mark is not None:
        x = label_width + abs(mark) * scale
        top = _TOP + legend
        parts.append(
            f'<line class="mark" x1="{x:.3f}" y1="{top}" x2="{x:.3f}" y2="{height}" '
            f'stroke="#c62828" stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _chart(body: str, table: Table | None, where: str) -> str:
    kind = _KIND.match(body)
    if kind is None or kind.group("kind") != "bar":
        raise ChartError(f"{where}: a chart marker starts with its kind, 'bar'; got {body!r}")
    rest = body[kind.end() :]
    attributes = {
        m.group("name"): html.unescape(m.group("value")) for m in _ATTRIBUTE.finditer(rest)
    }
    if _ATTRIBUTE.sub("", rest).strip():
        raise ChartError(
            f'{where}: the chart marker has text that is no name="value" attribute: '
            f"{_ATTRIBUTE.sub('', rest).strip()!r}"
        )
    unknown = sorted(set(attributes) - _KNOWN)
    if unknown:
        raise ChartError(
            f"{where}: unknown chart attributes {unknown!r}; known: {sorted(_KNOWN)!r}"
        )
    if table is None:
        raise ChartError(
            f"{where}: a chart marker must follow a Markdown table (header, separator, "
            "rows), with only blank lines between; none is above it"
        )
    if not attributes.get("value"):
        raise ChartError(f'{where}: the chart marker needs value="<column>"')
    label_names = [name for name in attributes.get("label", "").split(";") if name.strip()]
    labels = [_column(table, name, where) for name in label_names]
    if not labels:
        labels = [0]
    series = [name.strip() for name in attributes["value"].split(";") if name.strip()]
    columns = [_column(table, name, where) for name in series]
    rows = list(enumerate(table.rows, start=1))
    if "rows" in attributes:
        try:
            chosen = [int(n) for n in attributes["rows"].split(",") if n.strip()]
        except ValueError:
            raise ChartError(
                f"{where}: rows= takes 1-based row numbers joined by commas; "
                f"got {attributes['rows']!r}"
            ) from None
        outside = [n for n in chosen if not 1 <= n <= len(table.rows)]
        if outside:
            raise ChartError(
                f"{where}: rows {outside!r} are not in the table's 1..{len(table.rows)}"
            )
        rows = [(n, table.rows[n - 1]) for n in chosen]
    bars: list[tuple[str, list[Value | None]]] = []
    for _, row in rows:
        values = [_number(row[c]) if c < len(row) else None for c in columns]
        if all(v is None for v in values):
            continue
        label = " · ".join(_plain(row[c]) if c < len(row) else "" for c in labels)
        bars.append((label, values))
    if not bars:
        raise ChartError(f"{where}: no row of the table has a number in {series!r}")
    title = attributes.get("title") or ", ".join(series)
    mark = None
    if "mark" in attributes:
        found = _number(attributes["mark"])
        if found is None:
            raise ChartError(f"{where}: mark= takes a number; got {attributes['mark']!r}")
        mark = found[0]
    svg = render_svg(title, series, bars, unit=attributes.get("unit", ""), mark=mark)
    return f'<figure class="bench-chart">{svg}</figure>'


def render_markers(markdown: str, page: str) -> str:
    """Replace every chart marker of a page's Markdown by its chart.

    Args:
        markdown: The page's Markdown source.
        page: The page's path, for error messages.

    Returns:
        The Markdown with each marker line replaced by a ``<figure>`` holding the SVG.

    Raises:
        ChartError: A marker cannot be drawn; the message says ``page:line`` and why.
    """
    lines = markdown.split("\n")
    fenced = False
    drawn: set[int] = set()
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        match = _MARKER.match(line)
        if match is None:
            if re.search(r"<!--\s*chart:", line):
                raise ChartError(
                    f"{page}:{index + 1}: a chart marker must be alone on its line, "
                    "<!-- chart: bar ... -->"
                )
            continue
        where = f"{page}:{index + 1}"
        lines[index] = _chart(match.group("body"), _table_above(lines, index, drawn), where)
        drawn.add(index)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: object, **_: object) -> str:
    """MkDocs hook: draw the page's charts (see the module's docstring)."""
    file = getattr(page, "file", None)
    name = str(getattr(file, "src_uri", None) or getattr(file, "src_path", "") or page)
    try:
        return render_markers(markdown, name)
    except ChartError as error:
        # MkDocs reports a PluginError as a clean "Aborted with a BuildError" and stops.
        from mkdocs.exceptions import PluginError

        raise PluginError(str(error)) from error
