"""The on-disk cache of built ONNX graphs.

Building MiniLM's graph from ``model.safetensors`` costs about a second and a second copy
of the weights; ONNX Runtime opens a graph *file* in a tenth of that, reading the weights
once into the session. So the first process builds the graph and writes it here, and
every later one opens the file.

A graph file is named by its key: the SHA-256 of the weights file, the ``onnx`` and
ONNX Runtime versions, the precision and :data:`actors._embedding.onnx.GRAPH_VERSION`
(:func:`graph_key`). Beside it a small JSON record holds the file's SHA-256 and its
``os.stat`` identity (size, inode, device, mtime and ctime in ns) as written.

- **Written atomically.** The graph is written to a temporary file in the same folder,
  flushed and ``fsync``-ed, then ``os.replace``-d onto its name; the record follows the
  same way. A crash leaves at worst a temporary file, which is never read (its name is
  not a graph's name) and is removed once it is an hour old.
- **Verified before use.** A file whose stat identity equals the record's is the file
  that was written and hashed (ctime cannot be set back, as git's index relies on). Any
  other file (truncated, rewritten, copied in, a record missing or unreadable) is
  hashed in full and used only if it matches the record's SHA-256; otherwise it is
  rebuilt and rewritten. Hashing costs about 60 ms for the 90 MB fp32 graph on the
  machine this was written on; the identity check costs one ``stat``.
- **Weights digest memoized.** Hashing the 90 MB ``model.safetensors`` costs the same
  60 ms, more than the whole check above, so its digest is remembered in the cache
  folder by the same stat identity (``weights-*.json``) and recomputed when it changes.
- **Unwritable folder.** If the folder cannot be created or written, the graph is built
  in memory, one warning is logged, and everything still works (only slower to start).

Concurrent processes may build the same graph at once: each writes its own temporary
file and the last ``os.replace`` wins; both files are complete, so either is fine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["cache_dir", "cached_file", "file_sha256", "graph_key", "memoized_sha256"]

logger = logging.getLogger("trio_recall.model_cache")

_SUBDIR = ("trio-recall", "onnx")
_TEMP_SUFFIX = ".tmp"
_STALE_TEMP_SECONDS = 3600.0


def cache_dir() -> Path:
    """The folder of cached graphs.

    ``$TRIO_RECALL_CACHE_DIR`` when set (used as is); otherwise the user's cache folder
    (``$XDG_CACHE_HOME`` when it is an absolute path, else ``~/.cache`` on POSIX;
    ``~/Library/Caches`` on macOS; ``%LOCALAPPDATA%`` on Windows) joined with
    ``trio-recall/onnx``. Nothing is created here.
    """
    explicit = os.environ.get("TRIO_RECALL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        base = Path(local) if local else Path.home() / "AppData" / "Local"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        # The XDG spec: a relative path is invalid and must be ignored.
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base.joinpath(*_SUBDIR)


def graph_key(
    weights_sha256: str, *, onnx: str, onnxruntime: str, precision: str, graph: int | str
) -> str:
    """The hex SHA-256 that names a graph built from these weights by these versions."""
    text = json.dumps(
        {
            "weights": weights_sha256,
            "onnx": onnx,
            "onnxruntime": onnxruntime,
            "precision": precision,
            "graph": graph,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_ino, stat.st_dev, stat.st_mtime_ns, stat.st_ctime_ns]


def _read_record(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_atomically(target: Path, fill: Callable[[Path], None]) -> None:
    """Have ``fill`` write a temporary file beside ``target``, fsync it, replace ``target``.

    The temporary file is removed if anything fails before the replace.
    """
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=_TEMP_SUFFIX)
    os.close(fd)
    temp = Path(name)
    try:
        fill(temp)
        with temp.open("rb+") as file:
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_dir(target.parent)


def _fsync_dir(folder: Path) -> None:
    # So that the rename itself survives a power loss (POSIX; Windows cannot open a folder).
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_record(path: Path, record: dict[str, object]) -> None:
    text = json.dumps(record, sort_keys=True)

    def fill(temp: Path) -> None:
        temp.write_text(text)

    _write_atomically(path, fill)


def memoized_sha256(path: Path, folder: Path | None) -> str:
    """The SHA-256 of ``path``, remembered in ``folder`` by the file's stat identity.

    Recomputed whenever the file's size, inode, device, mtime or ctime differ from the
    remembered ones; with ``folder`` None or unwritable it is computed every time.
    """
    stat = path.stat()
    if folder is None:
        return file_sha256(path)
    where = str(path.resolve())
    memo = folder / f"weights-{hashlib.sha256(where.encode()).hexdigest()[:24]}.json"
    record = _read_record(memo)
    digest = record.get("sha256") if record is not None else None
    if (
        record is not None
        and record.get("path") == where
        and record.get("stat") == _identity(stat)
        and isinstance(digest, str)
    ):
        return digest
    digest = file_sha256(path)
    # Remember it only if the file did not change while it was read.
    if _identity(path.stat()) == _identity(stat):
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            _write_record(memo, {"path": where, "stat": _identity(stat), "sha256": digest})
    return digest


def _verified(target: Path, record_path: Path) -> bool:
    """Whether ``target`` is the complete file its record describes (see the module)."""
    try:
        stat = target.stat()
    except OSError:
        return False
    record = _read_record(record_path)
    if record is None:
        return False
    digest = record.get("sha256")
    if not isinstance(digest, str):
        return False
    if record.get("stat") == _identity(stat):
        return True
    try:
        if file_sha256(target) != digest:
            return False
    except OSError:
        return False
    # The same bytes under another identity (copied, touched): remember the new one.
    with contextlib.suppress(OSError):
        _write_record(record_path, {**record, "stat": _identity(stat)})
    return True


def _remove_stale_temps(folder: Path, name: str) -> None:
    now = time.time()
    for temp in folder.glob(f"{name}.*{_TEMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            if now - temp.stat().st_mtime > _STALE_TEMP_SECONDS:
                temp.unlink()


def cached_file(folder: Path, name: str, build: Callable[[Path], None]) -> Path | bytes:
    """The verified cached file ``folder / name``, built by ``build(path)`` when needed.

    ``build`` writes the whole file at the path it is given (a temporary file). When the
    folder cannot be written, the file is built in a temporary folder and its bytes are
    returned instead of a path (one warning is logged).

    Raises:
        whatever ``build`` raises (the temporary file is removed).
    """
    target = folder / name
    record_path = folder / (name + ".json")
    if _verified(target, record_path):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(folder, name)
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=name + ".", suffix=_TEMP_SUFFIX)
        os.close(fd)
    except OSError as error:
        logger.warning(
            "the model cache folder %s is not writable (%s); building %s in memory",
            folder,
            error,
            name,
        )
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / name
            build(path)
            return path.read_bytes()
    temp = Path(temp_name)
    try:
        build(temp)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    try:
        with temp.open("rb+") as file:
            os.fsync(file.fileno())
        digest = file_sha256(temp)
        os.replace(temp, target)
    except OSError as error:
        # Built, but not stored (disk full, replace refused): use it from memory.
        logger.warning("could not store %s in %s (%s); using it from memory", name, folder, error)
        data = temp.read_bytes()
        with contextlib.suppress(OSError):
            temp.unlink()
        return data
    _fsync_dir(folder)
    try:
        _write_record(record_path, {"sha256": digest, "stat": _identity(target.stat())})
    except OSError as error:
        logger.warning(
            "could not record %s in %s (%s); it is rebuilt next time", name, folder, error
        )
    return target
