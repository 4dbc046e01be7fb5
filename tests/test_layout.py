"""The docs' "Layout" page (docs/pages/design/layout.md) and the tree agree: every
subpackage of ``actors/`` is named there with what it owns, every one named there
exists, and the top level of ``actors/`` keeps ``__init__.py`` and a handful of
modules (design §1)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The modules the top level of actors/ may keep beside __init__.py.
TOP_LEVEL_MODULES = {"__init__.py", "doors.py", "llama.py"}


def _layout_section() -> str:
    return (ROOT / "docs" / "pages" / "design" / "layout.md").read_text(encoding="utf-8")


def test_every_subpackage_is_named_in_the_layout_page() -> None:
    named = set(re.findall(r"^  - `actors/([A-Za-z_]+)/`: \S", _layout_section(), re.M))
    on_disk = {p.parent.name for p in (ROOT / "actors").glob("*/__init__.py")}
    assert named == on_disk, (
        f"docs/pages/design/layout.md names {sorted(named)}; actors/ has {sorted(on_disk)}"
    )


def test_the_top_level_of_actors_keeps_a_handful_of_modules() -> None:
    modules = {p.name for p in (ROOT / "actors").glob("*.py")}
    assert modules <= TOP_LEVEL_MODULES, (
        f"actors/ has top-level modules {sorted(modules - TOP_LEVEL_MODULES)}; "
        f"expected only {sorted(TOP_LEVEL_MODULES)} (the rest belong in a subpackage)"
    )
