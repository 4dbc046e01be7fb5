"""How to add a missing extra, said the way this copy of trio-recall was installed.

From a clone (the folder above ``actors/`` holds a ``pyproject.toml`` whose project is
``trio-recall``), the user runs the project with uv: ``uv run --extra X ...``. From an
installed package: ``pip install 'trio-recall[X]'``. Every missing-extra hint of the
command line comes from :func:`install_hint`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

__all__ = ["install_hint", "is_clone"]

#: The folder above ``actors/``: a clone's root, or an environment's site-packages.
_ROOT = Path(__file__).resolve().parents[2]


def is_clone(root: Path = _ROOT) -> bool:
    """Whether ``root`` is a clone of trio-recall: its ``pyproject.toml`` names the
    project ``trio-recall`` (site-packages has no ``pyproject.toml``)."""
    try:
        with (root / "pyproject.toml").open("rb") as file:
            project = tomllib.load(file).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == "trio-recall"


def install_hint(extra: str, *, root: Path = _ROOT) -> str:
    """The command that adds ``extra``: ``uv run --extra EXTRA ...`` in a clone (with
    the clone's other extras named too: ``uv`` installs what one run names, no more),
    else ``pip install 'trio-recall[EXTRA]'``."""
    if is_clone(root):
        return f"from this clone: uv run --extra {extra} ..., naming each extra you use"
    return f"pip install 'trio-recall[{extra}]'"
