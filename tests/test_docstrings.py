"""The trio conventions the docstrings promise (STYLE: "Every method that can block says
what happens when it is cancelled and when the inbox is full"), and docstring references
that stay inside the repository."""

from __future__ import annotations

import inspect
import pathlib
import re

import attrs
import pytest
from extras import require_extra

import actors
from actors import (
    CachedEmbedder,
    EchoDispatcher,
    EmbeddingCache,
    Memory,
    MiniLMEmbedder,
    OpenAIChatDispatcher,
    OpenAIEmbeddings,
    StoreHandle,
    index,
    open_memory,
    open_store,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pg_handle() -> type:
    require_extra("pg")
    from actors._pg.store import PgStoreHandle

    return PgStoreHandle


def _pg_open() -> object:
    """``actors.open_pg_store`` (the pg extra: importing it imports psycopg)."""
    require_extra("pg")
    return actors.open_pg_store


def _resolve(fn: object) -> object:
    return _pg_open() if fn == "open_pg_store" else fn


def _public_async_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    ]


@pytest.mark.parametrize("cls", [StoreHandle, Memory, "PgStoreHandle"], ids=str)
def test_every_public_async_method_states_cancellation(cls: type | str) -> None:
    handle = _pg_handle() if cls == "PgStoreHandle" else cls
    assert isinstance(handle, type)
    methods = _public_async_methods(handle)
    assert len(methods) >= 6
    silent = [
        m for m in methods if "cancel" not in (inspect.getdoc(getattr(handle, m)) or "").lower()
    ]
    assert silent == [], f"{handle.__name__}: no word on cancellation in {silent}"


@pytest.mark.parametrize(
    "fn",
    [
        open_store,
        open_memory,
        "open_pg_store",
        index,
        CachedEmbedder.embed,
        CachedEmbedder.embed_documents,
        CachedEmbedder.embed_query,
        MiniLMEmbedder.embed_with_report,
        MiniLMEmbedder.embed_documents,
        MiniLMEmbedder.embed_query,
        OpenAIEmbeddings.embed_with_report,
        OpenAIEmbeddings.embed_documents,
        OpenAIEmbeddings.embed_query,
        OpenAIChatDispatcher.dispatch,
    ],
    ids=lambda f: getattr(f, "__qualname__", f),
)
def test_entry_points_and_embedders_state_cancellation(fn: object) -> None:
    assert "cancel" in (inspect.getdoc(_resolve(fn)) or "").lower()


@pytest.mark.parametrize(
    "fn", [open_store, open_memory, "open_pg_store"], ids=lambda f: getattr(f, "__name__", f)
)
def test_open_functions_state_what_a_full_inbox_does(fn: object) -> None:
    assert "full inbox" in " ".join((inspect.getdoc(_resolve(fn)) or "").split())


def test_echo_dispatch_says_it_never_blocks() -> None:
    assert "never blocks" in (inspect.getdoc(EchoDispatcher.dispatch) or "")


@pytest.mark.parametrize(
    "owner",
    [StoreHandle, Memory, EmbeddingCache, MiniLMEmbedder, "PgStoreHandle"],
    ids=str,
)
def test_every_statistics_docstring_names_each_field(owner: type | str) -> None:
    cls = _pg_handle() if owner == "PgStoreHandle" else owner
    assert isinstance(cls, type)
    method = cls.statistics
    returned = inspect.signature(method, eval_str=True).return_annotation
    fields = [f.name for f in attrs.fields(returned)]
    doc = " ".join((inspect.getdoc(method) or "").split())
    missing = [f for f in fields if f"``{f}``" not in doc]
    assert missing == [], f"{cls.__name__}.statistics() does not name {missing}"


def _sources() -> list[pathlib.Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    files += sorted((ROOT / "docs" / "pages").rglob("*.md"))
    for folder in ("actors", "protocol", "tests", "benches", "examples"):
        files += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.md"))
    return files


def test_references_point_inside_the_repository() -> None:
    """``SPEC §N`` and ``issue N`` name documents outside the repo; the docs' design
    contract (docs/pages/design/contract.md) is cited as ``design §N``."""
    outside = re.compile(r"\bSPEC\b|\b[Ii]ssue \d+")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _sources()
        if path.name != "test_docstrings.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []


def test_every_cited_design_section_exists() -> None:
    design = (ROOT / "docs" / "pages" / "design" / "contract.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## §(\d+)", design, re.M)}
    cited = {
        int(n)
        for path in _sources()
        for n in re.findall(r"[Dd]esign §(\d+)", path.read_text(encoding="utf-8"))
    }
    assert cited, "no design references found"
    assert cited <= sections, f"cited but not in docs/pages/design/contract.md: {cited - sections}"


def test_every_cited_docs_page_exists() -> None:
    """Code and docs cite the site's pages by path (``docs/pages/how-to/x.md``)."""
    cited = {
        (path.relative_to(ROOT), page)
        for path in _sources()
        if path.name != "test_docstrings.py"
        for page in re.findall(r"docs/pages/[\w/.-]+?\.md", path.read_text(encoding="utf-8"))
    }
    assert cited, "no docs page is cited"
    missing = sorted(f"{path}: {page}" for path, page in cited if not (ROOT / page).is_file())
    assert missing == []


def test_no_citation_names_a_readme_section_that_moved() -> None:
    """The README keeps its set-up, quick start and links; the rest moved to the docs
    site, cited by page path. A ``README "Section"`` citation must name a README
    section that exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (.+)$", readme, re.M))
    stale = [
        f"{path.relative_to(ROOT)}: README {name!r}"
        for path in _sources()
        if path.name != "test_docstrings.py"
        for name in re.findall(r"README(?:'s)?,? \"([^\"]+)\"", path.read_text(encoding="utf-8"))
        if name not in sections
    ]
    assert stale == []
