"""Nothing imports another package's private names (design §1).

``actors.cli``, ``actors.integrations``, ``actors.testing``, ``benches/`` and
``examples/`` are users of ``actors`` and ``protocol`` like any other: where an import
crosses a package line, no component of the module path and no imported name starts
with ``_``. Inside its own package a module may import its private siblings
(``actors.cli`` imports ``actors.cli._mcp``). ``tests/`` may import private modules.

Every import is read with :mod:`ast` (those inside functions and ``TYPE_CHECKING``
blocks too), with relative imports resolved against the file's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The folder, and the package its files belong to (scripts belong to their folder).
CONSUMERS = {
    "actors/cli": "actors.cli",
    "actors/integrations": "actors.integrations",
    "actors/testing": "actors.testing",
    "benches": "benches",
    "examples": "examples",
}


# White-box stages: the only private modules a bench may reach, each because it times one
# stage inside the library that no public call isolates (benches/README.md, "Public
# names only"). The list may only shrink; a new entry is a decision for benches/README.md too.
WHITE_BOX = {
    "benches/pg_scale.py": {
        # the floor of the write path: the store's own rows, prepared and COPYed by its
        # own code (its statements' COPY), without the rest of the store's commit
        "actors._pg.schema",
        "actors._pg.sql",
        "actors._retrieval.bm25",
        # one add_documents batch split into its validation and its commit
        "actors._embedding.adapter",
        "actors._pg.prepare",
        "actors._store.backend",
        "actors._store.prepare",
        # the read SQL of each search kind, run and EXPLAINed on its own
        "actors._pg.filters",
        "actors._pg.reads",
    },
    "benches/embedding.py": {
        # --spinning and --profile: ONNX Runtime's spin-waiting pool, and its
        # per-operator profile of the MiniLM graph
        "actors._embedding.onnx",
        # the batch rows' reference: fixed chunks of length-sorted texts, each one raw
        # pass of the embedder's own session and its pooling, which embed_batch (it
        # buckets every call) cannot run
        "actors._embedding.minilm",
    },
    "benches/train_ranker.py": {
        # the learned ranker's training data: each candidate's feature row as the engine
        # computes it inside a recall, which no public call returns
        "actors._retrieval.ranker",
        "actors._retrieval.view",
    },
}


# The house's own plumbing, which every public module of both packages calls: trio's
# ``fixup_module_metadata`` pattern (``protocol._public``), giving each public name its
# public ``__module__``. It changes metadata, not behaviour, and no user has a use for it.
PLUMBING = {("protocol._public", "fixup_module_metadata")}


def _module_of(path: Path, root: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(
    source: str,
    module: tuple[str, ...],
    *,
    is_package: bool,
    own: str,
    allowed: frozenset[str] = frozenset(),
) -> list[str]:
    """Each import in ``source`` (the text of ``module``) that reaches a private name
    outside the package ``own``: ``"line N: from a._b import c"``."""
    package = module if is_package else module[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[tuple[tuple[str, ...], list[str]]] = []
        if isinstance(node, ast.Import):
            targets = [(tuple(alias.name.split(".")), []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                path = base + (tuple(node.module.split(".")) if node.module else ())
            else:
                assert node.module is not None
                path = tuple(node.module.split("."))
            targets = [(path, [alias.name for alias in node.names])]
        for path, names in targets:
            for name in names or [None]:
                # ``from a import b`` may name a submodule: judge the full path.
                full = path + ((name,) if name is not None and name != "*" else ())
                dotted = ".".join(full)
                if dotted == own or dotted.startswith(own + "."):
                    continue  # inside its own package
                if (".".join(path), name) in PLUMBING:
                    continue  # the house's plumbing (PLUMBING)
                if ".".join(path) in allowed:
                    continue  # a white-box stage (WHITE_BOX)
                if any(_private(part) for part in full):
                    shown = (
                        f"import {'.'.join(path)}"
                        if name is None
                        else f"from {'.'.join(path)} import {name}"
                    )
                    found.append(f"line {node.lineno}: {shown}")
    return found


def _files() -> list[tuple[Path, str]]:
    return [
        (path, own)
        for folder, own in CONSUMERS.items()
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


@pytest.mark.parametrize(
    ("path", "own"), _files(), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v
)
def test_no_private_import_crosses_a_package_line(path: Path, own: str) -> None:
    module = _module_of(path, ROOT)
    found = private_imports(
        path.read_text(encoding="utf-8"),
        module,
        is_package=path.name == "__init__.py",
        own=own,
        allowed=frozenset(WHITE_BOX.get(str(path.relative_to(ROOT)), ())),
    )
    assert found == [], (
        f"{path.relative_to(ROOT)} imports private names of another package: "
        + "; ".join(found)
        + ". Import the public name (actors, actors.doors, protocol, protocol.checks, ...)"
    )


def test_every_white_box_entry_is_still_needed() -> None:
    # An entry no import uses any more is dropped, so the list only shrinks.
    for name, modules in WHITE_BOX.items():
        path = ROOT / name
        found = private_imports(
            path.read_text(encoding="utf-8"),
            _module_of(path, ROOT),
            is_package=False,
            own="benches",
        )
        used = {line.split(" ")[3] for line in found}
        assert modules <= used, f"{name}: WHITE_BOX lists {sorted(modules - used)}, never imported"


def test_every_consumer_folder_has_files() -> None:
    # A renamed folder must not make the test above pass by walking nothing.
    for folder in CONSUMERS:
        assert list((ROOT / folder).rglob("*.py")), f"{folder} has no Python files"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import actors._pg.store", ["line 1: import actors._pg.store"]),
        ("import protocol._checks as c", ["line 1: import protocol._checks"]),
        ("from protocol import _checks", ["line 1: from protocol import _checks"]),
        ("from protocol.checks import _SHORT", ["line 1: from protocol.checks import _SHORT"]),
        (
            "from .._pg.store import open_pg_store",
            ["line 1: from actors._pg.store import open_pg_store"],
        ),
        ("from .. import _pg", ["line 1: from actors import _pg"]),
        (
            "def f():\n    from actors._store.handle import Store",
            ["line 2: from actors._store.handle import Store"],
        ),
        (
            "from actors.integrations._bridge import TrioBridge",
            ["line 1: from actors.integrations._bridge import TrioBridge"],
        ),
        # public names, and private ones inside the module's own package
        ("from .. import open_store, doors\nfrom ..doors import door_time", []),
        ("from . import _mcp\nfrom ._service import MemoryService", []),
        ("from actors.cli._mcp import serve", []),
        ("import protocol.checks\nfrom protocol import __version__", []),
        ("from actors import *", []),
    ],
)
def test_the_walk_sees_every_form(source: str, expected: list[str]) -> None:
    # As if written in actors/cli/_service.py.
    found = private_imports(
        source, ("actors", "cli", "_service"), is_package=False, own="actors.cli"
    )
    assert found == expected


def test_a_package_init_resolves_relative_imports_from_itself() -> None:
    # In actors/cli/__init__.py, ``from . import x`` is actors.cli.x and ``..`` is actors.
    source = "from . import _commands\nfrom .._agent import memory"
    found = private_imports(source, ("actors", "cli"), is_package=True, own="actors.cli")
    assert found == ["line 2: from actors._agent import memory"]
