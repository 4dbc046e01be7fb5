"""The docs' chart hook (docs/hooks/charts.py): a chart is its table's own numbers.

docs/ is not a package, so the hook is imported by its path.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

HOOK = Path(__file__).resolve().parent.parent / "docs" / "hooks" / "charts.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks_charts", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses looks the module up by name while it builds the Table class.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


charts = _load()

TABLE = """\
# Page

| contender | texts/s p50 | p90 |
|---|---:|---:|
| `int8` | **638.7** | 607.4 |
| fp32 | 269.3 | 252.3 |
| roofline (sgemm) | 387.4 | 360.4 |
"""


def _bars(svg: str) -> list[float]:
    return [float(w) for w in re.findall(r'<rect class="bar"[^>]*width="([0-9.]+)"', svg)]


def test_one_bar_per_row_proportional_to_the_values() -> None:
    out = charts.render_markers(
        TABLE + '\n<!-- chart: bar label="contender" value="texts/s p50" title="T" -->\n',
        "p.md",
    )
    assert "<!-- chart:" not in out
    assert out.startswith(TABLE)  # the table itself is left as written
    widths = _bars(out)
    assert len(widths) == 3
    values = [638.7, 269.3, 387.4]
    for width, value in zip(widths, values, strict=True):
        assert width / widths[0] == pytest.approx(value / values[0], rel=1e-3)
    # the value labels are the table's numbers, the bar labels its cells without Markdown
    assert ">638.7<" in out and ">269.3<" in out and ">387.4<" in out
    assert ">int8<" in out and "**" not in out.split("<figure", 1)[1]


def test_grouped_bars_and_chosen_rows() -> None:
    out = charts.render_markers(
        TABLE + '<!-- chart: bar label="contender" value="texts/s p50;p90" rows="2,1" -->',
        "p.md",
    )
    widths = _bars(out)
    assert len(widths) == 4  # two rows, two series each
    assert widths[0] / widths[2] == pytest.approx(269.3 / 638.7, rel=1e-3)
    assert widths[1] / widths[3] == pytest.approx(252.3 / 607.4, rel=1e-3)
    assert out.index(">fp32<") < out.index(">int8<")  # in the order rows= gives


def test_cells_without_a_number_draw_no_bar_and_numbers_are_read_as_written() -> None:
    text = (
        "| tool | calls/s | ratio |\n|---|---|---|\n"
        "| a | 1,884 | **0.51×** |\n| b | | 1.14 / 1.18 s |\n| c | n/a | — |\n\n"
        '<!-- chart: bar label="tool" value="calls/s;ratio" -->'
    )
    out = charts.render_markers(text, "p.md")
    assert len(_bars(out)) == 3  # a: two bars; b: one; c: none, so left out
    assert ">1,884<" in out and ">0.51<" in out and ">1.14<" in out


def test_value_labels_are_the_numbers_as_the_table_writes_them() -> None:
    text = "| a | v |\n|---|---|\n| x | 0.50 |\n| y | 2,000 |\n" + '<!-- chart: bar value="v" -->'
    out = charts.render_markers(text, "p.md")
    assert ">0.50<" in out and ">2,000<" in out
    widths = _bars(out)
    assert widths[0] / widths[1] == pytest.approx(0.5 / 2000, rel=1e-2)
    assert ">c<" not in out


def test_labels_are_escaped_in_the_svg() -> None:
    text = (
        '| name | v |\n|---|---|\n| <script>alert(1)</script> & "x" | 3 |\n\n'
        '<!-- chart: bar label="name" value="v" title="a <b> &amp; c" unit=" <ms>" -->'
    )
    svg = charts.render_markers(text, "p.md").split("<figure", 1)[1]
    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;x&quot;" in svg
    assert "a &lt;b&gt; &amp; c" in svg
    assert "3 &lt;ms&gt;" in svg


def test_several_charts_can_follow_one_table() -> None:
    marker = '<!-- chart: bar label="contender" value="p90" -->'
    out = charts.render_markers(TABLE + f"\n{marker}\n\n{marker}\n", "p.md")
    assert out.count("<figure") == 2
    assert len(_bars(out)) == 6


def test_a_mark_is_drawn_on_the_bars_scale() -> None:
    out = charts.render_markers(TABLE + '<!-- chart: bar value="p90" mark="1,000" -->', "p.md")
    widths = _bars(out)
    x = float(re.search(r'<line class="mark" x1="([0-9.]+)"', out).group(1))
    start = float(re.search(r'<rect class="bar" x="([0-9.]+)"', out).group(1))
    assert (x - start) / widths[0] == pytest.approx(1000 / 607.4, rel=1e-3)
    with pytest.raises(charts.ChartError, match=r"^p\.md:8: mark= takes a number"):
        charts.render_markers(TABLE + '<!-- chart: bar value="p90" mark="high" -->', "p.md")


def test_markers_in_code_blocks_are_left_alone() -> None:
    text = '```text\n<!-- chart: bar value="nothing" -->\n```\n'
    assert charts.render_markers(text, "p.md") == text


def test_a_missing_column_fails_with_the_page_and_line() -> None:
    text = TABLE + '\n<!-- chart: bar label="contender" value="texts/s p99" -->\n'
    with pytest.raises(charts.ChartError, match=r"^benchmarks/x\.md:9: .*'texts/s p99'") as e:
        charts.render_markers(text, "benchmarks/x.md")
    assert "'texts/s p50'" in str(e.value)  # and lists the columns it has


def test_a_missing_label_column_fails_too() -> None:
    text = TABLE + '<!-- chart: bar label="who" value="p90" -->'
    with pytest.raises(charts.ChartError, match=r"^p\.md:8: .*'who'"):
        charts.render_markers(text, "p.md")


def test_a_marker_after_no_table_fails_with_the_page_and_line() -> None:
    text = '# Page\n\nSome text.\n\n<!-- chart: bar label="a" value="b" -->\n'
    with pytest.raises(charts.ChartError, match=r"^y\.md:5: a chart marker must follow a"):
        charts.render_markers(text, "y.md")


@pytest.mark.parametrize(
    ("marker", "why"),
    [
        ('<!-- chart: pie label="contender" value="p90" -->', "kind"),
        ('<!-- chart: bar label="contender" -->', "value="),
        ('<!-- chart: bar value="p90" colour="red" -->', "unknown chart attributes"),
        ('<!-- chart: bar value="p90" rows="4" -->', "rows"),
        ('text <!-- chart: bar value="p90" -->', "alone on its line"),
    ],
)
def test_bad_markers_fail_with_the_page_and_line(marker: str, why: str) -> None:
    with pytest.raises(charts.ChartError, match=rf"^z\.md:8: .*{re.escape(why)}"):
        charts.render_markers(TABLE + marker, "z.md")


def test_a_column_without_numbers_fails() -> None:
    text = "| a | b |\n|---|---|\n| x | yes |\n| z | no |\n" + '<!-- chart: bar value="b" -->'
    with pytest.raises(charts.ChartError, match=r"^q\.md:5: no row of the table has a number"):
        charts.render_markers(text, "q.md")


def test_the_hook_is_registered_in_mkdocs_yml() -> None:
    config = (HOOK.parent.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^hooks:\n  - hooks/charts\.py$", config, re.MULTILINE)
