"""The missing-extra hint fits how this copy was installed (``actors/cli/_install.py``):
a clone says ``uv run --extra X``, a uv tool says ``uv tool install`` from the same source
with its extras and ``X``, pip from a folder names that folder, and a package from an
index says ``pip install 'trio-recall[X]'``. One test installs the tool for real, from
this clone, and runs the hint it prints."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from actors.cli._install import install_hint

ROOT = Path(__file__).resolve().parent.parent


def _site(env: Path) -> Path:
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "actors").mkdir(parents=True)
    return site


def test_a_uv_tool_is_installed_again_with_its_extras_and_the_missing_one(tmp_path: Path) -> None:
    env = tmp_path / "tools" / "trio-recall"
    site = _site(env)
    (env / "uv-receipt.toml").write_text(
        '[tool]\nrequirements = [{ name = "trio-recall", extras = ["pg", "embed"], '
        'directory = "/src/trio-recall" }]\n',
        encoding="utf-8",
    )
    assert install_hint("mcp", root=site) == (
        "uv tool install --excludes <(echo sentence-transformers) '/src/trio-recall[embed,mcp,pg]'"
    )
    (env / "uv-receipt.toml").write_text(
        '[tool]\nrequirements = [{ name = "trio-recall", git = "https://example.org/r" }]\n',
        encoding="utf-8",
    )
    assert install_hint("pg", root=site) == "uv tool install 'git+https://example.org/r[pg]'"


def test_pip_from_a_folder_names_the_folder(tmp_path: Path) -> None:
    site = _site(tmp_path / "venv")
    info = site / "trio_recall-0.1.0.dist-info"
    info.mkdir()
    (info / "direct_url.json").write_text(
        json.dumps({"url": "file:///home/ana/trio%20recall", "dir_info": {}}), encoding="utf-8"
    )
    assert install_hint("pg", root=site) == "pip install '/home/ana/trio recall[pg]'"
    # A wheel file or an index is not a folder to name again.
    (info / "direct_url.json").write_text(
        json.dumps({"url": "file:///tmp/t.whl", "archive_info": {}}), encoding="utf-8"
    )
    assert install_hint("pg", root=site) == "pip install 'trio-recall[pg]'"
    (info / "direct_url.json").write_text("not json", encoding="utf-8")
    assert install_hint("pg", root=site) == "pip install 'trio-recall[pg]'"


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv on PATH (README Set-up)")
def test_a_real_uv_tool_install_prints_a_hint_that_works(tmp_path: Path) -> None:
    """``uv tool install`` this clone without the mcp extra: ``trio-recall mcp`` names the
    command that adds it, and that command, run as printed, does."""
    env = {
        **os.environ,
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
    }
    env.pop("VIRTUAL_ENV", None)

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False
        )

    installed = run(["uv", "tool", "install", "-q", str(ROOT)])
    assert installed.returncode == 0, installed.stderr
    data = ["--data", str(tmp_path / "memory"), "--create"]
    missing = run([str(tmp_path / "bin" / "trio-recall"), *data, "mcp"])
    assert missing.returncode == 1
    hint = f"uv tool install '{ROOT}[mcp]'"
    assert hint in missing.stderr and "pip install" not in missing.stderr, missing.stderr
    again = run(["bash", "-c", hint + " -q"])
    assert again.returncode == 0, again.stderr
    python = tmp_path / "tools" / "trio-recall" / "bin" / "python"
    assert run([str(python), "-c", "import mcp"]).returncode == 0
