"""The pg store survives a server crash, and several processes share one table.

The durability test starts its own embedded server (it must stop and restart it), from
the ``pg`` extra, even when ``TRIO_RECALL_PG_DSN`` is set. The multi-process test
uses the session's server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from pg_support import EmbeddedServer

from actors import HashingEmbedder
from actors._pg.store import StoreUnavailable, open_pg_store
from protocol import Document, SearchRequest, UnifiedMessage, VectorStoreConfig

DIM = 16
TIMEOUT = 60
CONFIG = VectorStoreConfig(max_entries=8, dimensions=DIM, max_entry_bytes=512)
DOCS = [
    Document(id="doc-1", text="walrus on the ice", metadata={"n": 1.5}, source_id="a.md"),
    Document(id="doc-2", text="a walrus \x00 swims", metadata={"n": 2, "s": "é"}),
]


async def test_everything_survives_a_server_crash_and_restart() -> None:
    server = EmbeddedServer()
    try:
        with trio.fail_after(TIMEOUT):
            dsn = await trio.to_thread.run_sync(server.start)
            embedder = HashingEmbedder(DIM)
            async with open_pg_store(dsn, CONFIG, embedder, table="durable") as store:
                first = await store.store_turns(
                    [UnifiedMessage.user(f"first {i}") for i in range(4)],
                    namespace="alpha",
                    source="explicit",
                    metadata={"batch": 1, "tags": ["a", "ü"]},
                )
                second = await store.store_turns(
                    [UnifiedMessage.user(f"second {i}") for i in range(4)],
                    namespace="beta",
                    metadata={"batch": 2},
                )
                await store.delete([second.ids[0]], namespace="beta")
                await store.upsert(DOCS, namespace="docs")
                hybrid = SearchRequest(
                    query="walrus", k=2, kind="hybrid", namespace="docs", filter={"n": {"$gt": 1}}
                )
                searched = await store.search(hybrid)
                before = await store.retrieve_embedding([1.0] * DIM, k=100)
                usage_before = store.usage()
                version_before = store.statistics().version
            assert (usage_before.entries, usage_before.evicted_entries) == (8, 1)
            # Each document comes back with the time of the write, which the store stamped.
            untimed = [
                msgspec.structs.replace(
                    h.document, occurred_at=None, valid_from=None, version=None
                )
                for h in searched
            ]
            assert untimed == [DOCS[1], DOCS[0]]

            # An immediate stop skips the shutdown checkpoint: the restart must replay
            # the write-ahead log to find the commits.
            await trio.to_thread.run_sync(lambda: server.stop(immediate=True))
            with pytest.raises(StoreUnavailable):
                async with open_pg_store(
                    dsn, CONFIG, embedder, table="durable", connect_timeout=1
                ):
                    pass  # pragma: no cover
            dsn = await trio.to_thread.run_sync(server.start)

            async with open_pg_store(dsn, CONFIG, embedder, table="durable") as store:
                after = await store.retrieve_embedding([1.0] * DIM, k=100)
                assert after == before
                assert store.usage() == usage_before
                assert store.statistics().version == version_before
                hits = {h.id: h for h in after.turns}
                assert set(hits) == set(first.ids[1:] + second.ids[1:] + ["doc-1", "doc-2"])
                assert hits[first.ids[3]].metadata == {"batch": 1, "tags": ["a", "ü"]}
                assert hits[first.ids[3]].source == "explicit"
                assert hits[first.ids[3]].namespace == "alpha"
                assert hits[first.ids[3]].sequence == first.sequences[3]
                assert hits[first.ids[3]].message == UnifiedMessage.user("first 3")
                # Documents, their BM25 postings and their metadata are durable too.
                assert await store.search(hybrid) == searched
                got = await store.get_by_ids(["doc-1", "doc-2"], namespace="docs")
                back = [
                    msgspec.structs.replace(d, occurred_at=None, valid_from=None, version=None)
                    for d in got
                ]
                assert sorted(back, key=lambda d: d.id or "") == DOCS
                # The sequence carries on after the restart: never reused.
                third = await store.store_turns([UnifiedMessage.user("third")])
                # (PostgreSQL may skip ahead: a sequence logs 32 values at a time.)
                assert third.sequences[0] > second.sequences[-1]
    finally:
        await trio.to_thread.run_sync(server.remove)


async def test_two_processes_share_one_table(
    pg_dsn: str,
    pg_table: str,
    tmp_path: Path,
) -> None:
    batches, size = 15, 4
    script = Path(__file__).parent.parent / "pg_support.py"

    async def worker(name: str, peer: str) -> dict[str, Any]:
        result = await trio.run_process(
            [
                sys.executable,
                str(script),
                "worker",
                pg_dsn,
                pg_table,
                name,
                str(batches),
                str(size),
                peer,
                str(tmp_path),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()
        out: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
        return out

    outputs: dict[str, dict[str, Any]] = {}

    async def run(name: str, peer: str) -> None:
        outputs[name] = await worker(name, peer)

    with trio.fail_after(TIMEOUT):
        # Create the table first, so the two workers only race on writes.
        async with open_pg_store(pg_dsn, _WORKER_CONFIG, HashingEmbedder(16), table=pg_table):
            pass
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "left", "right")
            nursery.start_soon(run, "right", "left")

    every_seq: list[int] = []
    for name, peer in (("left", "right"), ("right", "left")):
        out = outputs[name]
        for batch in out["batches"]:
            seqs = batch["sequences"]
            # A batch's sequences are drawn under the table's lock: consecutive.
            assert seqs == list(range(seqs[0], seqs[0] + size))
            assert batch["ids"] == [f"turn-{s}" for s in seqs]
            every_seq.extend(seqs)
        # Each process read every batch of the other, whole and with its sequences.
        peer_batches = outputs[peer]["batches"]
        expected = sorted(
            (b, f"{peer} batch {b} turn {t}", peer_batches[b]["sequences"][t])
            for b in range(batches)
            for t in range(size)
        )
        assert [tuple(x) for x in out["peer_seen"]] == expected
        assert out["usage"] == 2 * batches * size
    assert len(every_seq) == len(set(every_seq)) == 2 * batches * size
    # The two writers really interleaved: neither one's batches were all first.
    left = [b["sequences"][0] for b in outputs["left"]["batches"]]
    right = [b["sequences"][0] for b in outputs["right"]["batches"]]
    assert max(left) > min(right) and max(right) > min(left)


_WORKER_CONFIG = VectorStoreConfig(max_entries=10_000, dimensions=16, max_entry_bytes=256)
