"""``actors.read_pg_table``: what an existing store table was made with, read without
opening a store (the command line picks its config and embedder with it)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors import HashingEmbedder, PgTableInfo, open_pg_store, read_pg_table
from protocol import ConfigError, EmbeddingProfile, StoreUnavailable, VectorStoreConfig

PROFILE = EmbeddingProfile(provider="test", model="hashing-16", dimensions=16)


class _Profiled(HashingEmbedder):
    """A hashing embedder that binds the table to :data:`PROFILE`."""

    def __init__(self) -> None:
        super().__init__(16)
        self.profile = PROFILE


async def test_a_missing_table_is_none_and_an_opened_one_tells_its_bounds(
    pg_dsn: str,
    pg_table: str,
) -> None:
    with trio.fail_after(60):
        assert await read_pg_table(pg_dsn, table=pg_table) is None
        config = VectorStoreConfig(max_entries=50, dimensions=16, max_entry_bytes=4096)
        async with open_pg_store(pg_dsn, config, _Profiled(), table=pg_table) as store:
            await store.add_texts(["one memory"])
        info = await read_pg_table(pg_dsn, table=pg_table)
    assert info == PgTableInfo(table=pg_table, dimensions=16, max_entries=50, profile=PROFILE)


async def test_a_table_made_without_a_profile_has_none(
    pg_dsn: str,
    pg_table: str,
) -> None:
    with trio.fail_after(60):
        config = VectorStoreConfig(max_entries=7, dimensions=16, max_entry_bytes=4096)
        async with open_pg_store(pg_dsn, config, HashingEmbedder(16), table=pg_table):
            pass
        info = await read_pg_table(pg_dsn, table=pg_table)
    assert info is not None
    assert (info.dimensions, info.max_entries, info.profile) == (16, 7, None)


@pytest.mark.parametrize("table", ["Bad-Name", "", "x" * 53, 7])
async def test_a_bad_table_name_is_refused_before_anything_connects(table: Any) -> None:
    # The DSN names no server: the name's check must come first.
    with trio.fail_after(10), pytest.raises(ConfigError, match="table is"):
        await read_pg_table("host=/nonexistent dbname=none", table=table)


async def test_an_unreachable_server_is_store_unavailable(tmp_path: Any) -> None:
    with trio.fail_after(30), pytest.raises(StoreUnavailable, match="could not reach"):
        await read_pg_table(f"host={tmp_path} dbname=none", connect_timeout=2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
async def test_connect_timeout_is_a_whole_number_of_seconds(bad: Any) -> None:
    with trio.fail_after(10), pytest.raises(ConfigError, match="connect_timeout"):
        await read_pg_table("host=/nonexistent dbname=none", connect_timeout=bad)
