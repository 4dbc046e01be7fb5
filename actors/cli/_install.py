"""How to add a missing extra, said the way this copy of trio-recall was installed.

- From a clone (the folder above ``actors/`` holds a ``pyproject.toml`` whose project is
  ``trio-recall``), the user runs the project with uv: ``uv run --extra X ...``.
- As a uv tool (``uv tool install``: the environment holds ``uv-receipt.toml``), the
  tool is installed again from the same source with the extras it has and ``X``.
- With pip from a folder (PEP 610's ``direct_url.json`` names a local directory), the
  same folder with ``[X]``: trio-recall is not on PyPI, so ``pip install
  'trio-recall[X]'`` would fail there.
- Otherwise: ``pip install 'trio-recall[X]'``.

Every missing-extra hint of the command line comes from :func:`install_hint`.
"""

from __future__ import annotations

import json
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["install_hint", "is_clone"]

#: The folder above ``actors/``: a clone's root, or an environment's site-packages.
_ROOT = Path(__file__).resolve().parents[2]

# uv's tool install writes sentence-transformers' torch unless told not to (the embed
# extra's wheel declares it; pyproject's override only applies inside the project).
_NO_TORCH = "--excludes <(echo sentence-transformers) "


def is_clone(root: Path = _ROOT) -> bool:
    """Whether ``root`` is a clone of trio-recall: its ``pyproject.toml`` names the
    project ``trio-recall`` (site-packages has no ``pyproject.toml``)."""
    project = _toml(root / "pyproject.toml").get("project", {})
    return isinstance(project, dict) and project.get("name") == "trio-recall"


def _toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _local_source(site: Path) -> str | None:
    """The local folder trio-recall in ``site`` was installed from, if PEP 610's
    ``direct_url.json`` names one."""
    for record in sorted(site.glob("trio_recall-*.dist-info/direct_url.json")):
        try:
            found = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        url = found.get("url") if isinstance(found, dict) else None
        if isinstance(url, str) and url.startswith("file:") and "dir_info" in found:
            return urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    return None


def _uv_tool(site: Path) -> tuple[str, list[str]] | None:
    """(source, extras) of the ``uv tool install`` whose environment holds ``site``:
    ``<env>/lib/pythonX.Y/site-packages`` (``<env>/Lib/site-packages`` on Windows)."""
    for env in site.parents[:3]:
        receipt = _toml(env / "uv-receipt.toml")
        tool = receipt.get("tool")
        if not isinstance(tool, dict):
            continue
        for requirement in tool.get("requirements", []):
            if not isinstance(requirement, dict) or requirement.get("name") != "trio-recall":
                continue
            extras = [e for e in requirement.get("extras", []) if isinstance(e, str)]
            source = requirement.get("directory") or requirement.get("path")
            if not isinstance(source, str):
                git = requirement.get("git")
                source = f"git+{git}" if isinstance(git, str) else "trio-recall"
            return source, extras
    return None


def install_hint(extra: str, *, root: Path = _ROOT) -> str:
    """The command that adds ``extra`` to this copy, installed as it was (the module
    docstring lists the cases)."""
    if is_clone(root):
        return f"from this clone: uv run --extra {extra} ..., naming each extra you use"
    tool = _uv_tool(root)
    if tool is not None:
        source, extras = tool
        wanted = sorted({*extras, extra})
        excludes = _NO_TORCH if "embed" in wanted else ""
        return f"uv tool install {excludes}'{source}[{','.join(wanted)}]'"
    folder = _local_source(root)
    if folder is not None:
        return f"pip install '{folder}[{extra}]'"
    return f"pip install 'trio-recall[{extra}]'"
