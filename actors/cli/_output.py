"""Where ``trio-recall export FILE`` writes, as a Unix tool would (docs/pages/reference/cli.md).

- ``-``, or a path naming the file this process's stdout is (``/dev/stdout``,
  ``/proc/self/fd/1``, the file stdout is redirected to): stdout itself, so its offset
  is shared (``{ echo header; trio-recall export /dev/stdout; } > f`` keeps the header).
- A path that is not a regular file once links are followed (a FIFO, a character
  device such as ``/dev/null``, a terminal), or a link through another open file
  descriptor (``/dev/stderr``, ``/dev/fd/N``, ``/proc/PID/fd/N``): written through,
  opened for writing as ``cp`` opens its target. Replacing it would turn ``/dev/null``
  into a regular file (as root) and leave a FIFO's reader waiting for nothing.
- A regular file, a new path, or a symbolic link to either: the resolved target is
  replaced atomically. The memories go to a new ``TARGET.<random>.partial`` file in
  the target's directory (created exclusively, never through a planted link), which
  is flushed to disk and renamed over the target at the end, so the target is either
  the old file or the whole new one, and a link stays a link. The new file keeps the
  old one's permission bits (and, as root, its owner); a new path gets the umask's.
  A failed export removes its partial file, whatever failed (a full disk included).
- A directory is refused before anything is written.

A target that cannot be written (a directory, a folder that does not exist, one this
user may not write in, a read-only file) is bad input, as an unreadable import file is:
:func:`check_target` finds it before the store opens, :func:`target_error` turns what
the opening itself refuses into the same one-line message (exit status 2), and nothing
is written, not even a partial file. A failure while writing (a full disk) is a failure
(exit status 1), and leaves the old file and no partial one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import BinaryIO

import attrs

__all__ = ["Output", "check_target", "open_output", "target_error", "writes_stdout"]

# The directory of a process's open file descriptors, where each entry is a link to
# whatever the descriptor is (a pipe, a terminal, a file), not a path to replace.
_FD_DIR = re.compile(r"/proc/[^/]+(?:/task/[^/]+)?/fd")
# The most links followed, as the kernel's ELOOP limit.
_MAX_LINKS = 40
# What opening a target fails with when the path given is the problem (bad input); any
# other error (no descriptors left, an I/O error) is a failure of the command.
_BAD_TARGET = frozenset(
    {
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ELOOP,
        errno.ENAMETOOLONG,
    }
)


@attrs.define(eq=False)
class Output:
    """An open export target: ``stream`` takes the bytes; :meth:`commit` finishes the
    export, :meth:`abort` abandons it (and removes the partial file)."""

    stream: BinaryIO
    #: The temporary file renamed over ``target`` on commit (atomic replace only).
    partial: Path | None = None
    target: Path | None = None
    #: Whether ``stream`` is stdout, which is flushed and left open.
    is_stdout: bool = False

    def commit(self) -> None:
        """Flush (to disk, for a partial file) and rename over the target.

        Raises:
            OSError: the flush, the sync or the rename failed; :meth:`abort` still
                removes the partial file.
        """
        self.stream.flush()
        if self.partial is None:
            if not self.is_stdout:
                self.stream.close()
            return
        assert self.target is not None
        os.fsync(self.stream.fileno())
        self.stream.close()
        os.replace(self.partial, self.target)
        self.partial = None

    def abort(self) -> None:
        """Close without raising (a full disk fails the flush that closing does again)
        and remove the partial file; stdout is left open."""
        if not self.is_stdout:
            with contextlib.suppress(OSError):
                self.stream.close()
        if self.partial is not None:
            self.partial.unlink(missing_ok=True)
            self.partial = None


def writes_stdout(path: str) -> bool:
    """Whether an export to ``path`` goes to this process's stdout (module docstring)."""
    if path == "-":
        return True
    try:
        named = os.stat(path)
        ours = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such file; stdout closed or replaced
        return False
    return (named.st_dev, named.st_ino) == (ours.st_dev, ours.st_ino)


def check_target(path: str) -> None:
    """Refuse, before anything opens, an export target that cannot be written: a
    directory, a path whose folder is missing or not a folder, a folder this user may
    not write in (for a new file), a regular file this user may not write. The
    permission checks are ``os.access``'s (root passes them; the opening still
    refuses what the kernel refuses: :func:`target_error`).

    Raises:
        OSError: what is wrong, with its errno and ``path``.
    """
    if writes_stdout(path):
        return
    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        raise NotADirectoryError(
            errno.ENOTDIR, f"{_file_in_the_way(path)} is a file, not a folder", path
        ) from None
    except OSError as error:  # ELOOP, EACCES on the way
        raise OSError(error.errno, error.strerror, path) from None
    if mode is not None:
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if stat.S_ISREG(mode) and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, "the file is read-only", path)
        return
    folder = _folder(path)
    try:
        folder_mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT, f"the folder {folder} does not exist", path
        ) from None
    except OSError as error:
        raise OSError(error.errno, error.strerror, path) from None
    if not stat.S_ISDIR(folder_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{folder} is not a folder", path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"this user may not write in {folder}", path)


def _file_in_the_way(path: str) -> str:
    """The first part of ``path``'s folder that is there and is not a folder."""
    folder = Path(_folder(path))
    for part in [*reversed(folder.parents), folder]:
        if part.exists() and not part.is_dir():
            return str(part)
    return str(folder)


def _folder(path: str) -> str:
    """The folder a new file at ``path`` goes in: its link's target's, for a link."""
    if os.path.islink(path):
        path = os.path.realpath(path)
    return os.path.dirname(path) or "."


def target_error(path: str, error: OSError) -> str | None:
    """The one-line message for an export to ``path`` that :func:`check_target` or
    :func:`open_output` refused because of the path (None: another error, a failure
    of the command rather than bad input)."""
    if error.errno not in _BAD_TARGET:
        return None
    why = error.strerror or str(error)
    if isinstance(error, IsADirectoryError):
        why = "it is a directory"
    elif isinstance(error, FileNotFoundError) and why == os.strerror(errno.ENOENT):
        why = f"the folder {_folder(path)} does not exist"
    return (
        f"cannot write the export file {path}: {why[:1].lower()}{why[1:]}; expected a file "
        "path in an existing folder this user can write (- writes stdout)"
    )


def open_output(path: str) -> Output:
    """Open the target of ``export path`` (module docstring). Blocks until a FIFO has
    a reader: call it in a worker thread.

    Raises:
        IsADirectoryError: ``path`` is a directory.
        OSError: it cannot be opened or created.
    """
    if writes_stdout(path):
        sys.stdout.flush()  # whatever the text layer holds goes first
        return Output(sys.stdout.buffer, is_stdout=True)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None  # a new file (or a dangling link's new target)
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    target = _replaceable(Path(path))
    if target is None or (mode is not None and not stat.S_ISREG(mode)):
        return Output(open(path, "wb"))  # closed by commit or abort
    return _open_partial(target)


def _replaceable(path: Path) -> Path | None:
    """``path`` with its symbolic links followed, or None when one of them is an open
    file descriptor's (``/dev/stdout`` -> ``/proc/self/fd/1``): written through."""
    for _ in range(_MAX_LINKS):
        if not path.is_symlink():
            return path
        parent = Path(os.path.realpath(path.parent))
        if _FD_DIR.fullmatch(str(parent)):
            return None
        path = parent / os.readlink(path)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))


def _open_partial(target: Path) -> Output:
    """A new partial file beside ``target``, with the permission bits (and, as root,
    the owner) of the file it will replace."""
    partial = target.with_name(f"{target.name}.{secrets.token_hex(4)}.partial")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(partial, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:  # named for the file asked for, not the partial one
        raise OSError(error.errno, error.strerror, str(target)) from None
    try:
        with contextlib.suppress(FileNotFoundError):
            old = os.stat(target)
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                os.fchown(fd, old.st_uid, old.st_gid)
            if hasattr(os, "fchmod"):
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
        stream = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        partial.unlink(missing_ok=True)
        raise
    return Output(stream, partial=partial, target=target)
