"""The documentation site's navigation (docs/mkdocs.yml): the three tasks a new user
came for are each two clicks from the top (a section, then its page), and every page
the navigation names exists. The strict build in CI (``mkdocs build --strict``) checks
the links, the anchors and that no page is left out of the navigation."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "docs" / "mkdocs.yml"
PAGES = ROOT / "docs" / "pages"

# A new user's three tasks (the first hour's friction: each had to be read out of the source).
TASKS = {
    "delete a user's data": "how-to/delete-a-user.md",
    "see what was injected and why": "how-to/see-what-was-injected.md",
    "move to PostgreSQL": "tutorials/postgresql.md",
}

_ENTRY = re.compile(r"^( *)- (?:(?P<title>[^:\n]+): )?(?P<page>\S+\.md)$")


def nav() -> dict[str, tuple[int, list[str]]]:
    """Each page of the navigation: (clicks from the top, the titles on the way)."""
    text = CONFIG.read_text(encoding="utf-8")
    lines = text[text.index("\nnav:\n") + 6 :].splitlines()
    found: dict[str, tuple[int, list[str]]] = {}
    path: list[str] = []
    for line in lines:
        if line and not line.startswith(" "):
            break  # the next top-level key
        section = re.match(r"^( *)- ([^:\n]+):$", line)
        if section:
            depth = (len(section.group(1)) - 2) // 4
            path[depth:] = [section.group(2)]
            continue
        entry = _ENTRY.match(line)
        if entry:
            depth = (len(entry.group(1)) - 2) // 4
            title = entry.group("title") or entry.group("page")
            found[entry.group("page")] = (depth + 1, [*path[:depth], title])
    return found


def test_each_task_is_two_clicks_from_the_top() -> None:
    pages = nav()
    for task, page in TASKS.items():
        assert page in pages, f"{task}: {page} is not in the navigation"
        clicks, titles = pages[page]
        assert clicks <= 2, f"{task}: {' > '.join(titles)} is {clicks} clicks deep"


def test_every_page_in_the_navigation_exists_and_every_page_is_in_it() -> None:
    pages = nav()
    assert len(pages) >= 25
    on_disk = {p.relative_to(PAGES).as_posix() for p in PAGES.rglob("*.md")}
    assert set(pages) == on_disk, (sorted(set(pages) - on_disk), sorted(on_disk - set(pages)))
