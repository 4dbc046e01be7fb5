"""The pg store's documents API, filters and search kinds (the pg backend, design §9).

The in-memory store is the reference. Three properties tie the pg store to it:

- the SQL translation of a random filter selects exactly the metadata that the reference
  evaluator (``protocol._filters.matches``) accepts, on random metadata;
- random operations applied to both stores leave the same documents, and every search
  kind (with and without a filter) returns the same ids in the same order, the same
  ranks, and scores within ``SCORE_TOLERANCE`` (exactly equal for hybrid's fused score,
  which depends on ranks only);
- SQL BM25 scores match ``actors._retrieval.bm25`` on random texts.

Plus hostile keys and values, the profile binding, the HNSW option, what PostgreSQL
text cannot hold, and ``actors.testing.StoreConformance`` (the documents and search
contract every store keeps; the write path is ``WriteConformance``, in
``test_pg_store.py``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import msgspec
import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_support import fresh_pg_store, namespace_counts, session_dsn
from psycopg import sql

from actors import HashingEmbedder, open_store
from actors._pg.filters import translate
from actors._pg.schema import filter_json
from actors._pg.store import StoreUnavailable, open_pg_store
from actors._retrieval.bm25 import Bm25Index
from actors.testing import (
    SCORE_TOLERANCE,
    DeterministicFakeEmbedding,
    StoreConformance,
)
from protocol import (
    ConfigError,
    Document,
    EmbedderError,
    EmbeddingError,
    EmbeddingProfile,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
    document_id,
)
from protocol._filters import (
    And,
    Eq,
    Exists,
    Filter,
    Gt,
    Gte,
    In,
    Lt,
    Lte,
    Ne,
    Nin,
    Not,
    Or,
    matches,
)

DIM = 64
TIMEOUT = 30


def cfg(max_entries: int = 32, dimensions: int = DIM) -> VectorStoreConfig:
    return VectorStoreConfig(max_entries=max_entries, dimensions=dimensions, max_entry_bytes=512)


def docs(*texts: str, **metadata: object) -> list[Document]:
    return [Document(text=t, metadata=dict(metadata)) for t in texts]


# --- the documents API: what only PostgreSQL has -------------------------------------------


async def test_what_postgresql_cannot_hold_changes_nothing(opener: Any) -> None:
    # Bad documents in general: WriteConformance.test_bad_documents_change_nothing.
    class Broken:
        def embed(self, text: str) -> list[float]:
            raise RuntimeError("provider down")

    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            await store.add_documents(docs("keep"))
            # What PostgreSQL cannot hold is refused before anything is written.
            with pytest.raises(ConfigError, match="NUL"):
                await store.upsert([Document(id="a\x00b", text="t")])
            assert [d.text for d in await store.get_by_ids([document_id("keep", {})])] == ["keep"]
            assert len(store) == 1 and (await store.refresh()).entries == 1
        async with opener(cfg(), Broken()) as store:
            with pytest.raises(EmbedderError):
                await store.add_documents(docs("a"))
            assert len(store) == 1  # the same table: still only "keep"


async def test_a_batch_is_one_transaction(opener: Any, pg_dsn: str, pg_table: str) -> None:
    # The batch inserts its row, then must evict the oldest row, which another session
    # holds locked, until the statement times out: the insert must be rolled back too.
    with trio.fail_after(TIMEOUT):
        async with opener(
            cfg(max_entries=2), HashingEmbedder(DIM), statement_timeout=1, retries=0
        ) as store:
            await store.upsert([Document(id="held", text="held")])
            await store.upsert([Document(id="other", text="other")])
            locked, release = trio.Event(), trio.Event()
            token = trio.lowlevel.current_trio_token()

            def hold() -> None:
                with psycopg.connect(pg_dsn) as conn:
                    conn.execute(
                        sql.SQL("SELECT 1 FROM {} WHERE id = 'held' FOR UPDATE").format(
                            sql.Identifier(pg_table)
                        )
                    )
                    trio.from_thread.run_sync(locked.set, trio_token=token)
                    trio.from_thread.run(release.wait, trio_token=token)
                    conn.rollback()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, hold)
                await locked.wait()
                with pytest.raises(StoreUnavailable, match="statement timeout"):
                    await store.upsert([Document(id="new", text="new")])
                release.set()
            assert await store.get_by_ids(["new"]) == []
            assert sorted(d.id or "" for d in await store.get_by_ids(["held", "other"])) == [
                "held",
                "other",
            ]
            usage = await store.refresh()
            assert (usage.entries, usage.evicted_entries) == (2, 0)


# --- filters: the SQL translation against the reference evaluator -------------------------

_KEYS = ["a", "b", "a.b", "it's", "$x", "k; DROP TABLE t; --"]
# Stored metadata holds what PostgreSQL text cannot (NUL, lone surrogates) too, beside
# their neighbours in code point order and U+FFFD, which a lossy encoding would confuse.
_META_CHARS = st.sampled_from(
    ["a", "b", "é", "\U0001f600", "\uffff", "\ue000", "'", " ", "\x00", "\x01", "\x02"]
)
_META_CHARS |= st.sampled_from(["\ud800", "\udfff", "\ud7ff", "\ufffd"])
_OPERAND_CHARS = _META_CHARS
_NUMBERS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -1, 0.5, 1.0, -0.0, 1e23, 2**53, 2**53 + 1, 2.0**53, 0.1]),
)
_META_SCALARS = st.one_of(st.none(), st.booleans(), _NUMBERS, st.text(_META_CHARS, max_size=3))
_META_VALUES = st.one_of(
    _META_SCALARS,
    st.lists(_META_SCALARS, max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), _META_SCALARS, max_size=2),
)
_META_KEYS = [*_KEYS, "nul\x00key", "nul\ufffdkey", "nul\x01key", "\ud800", "\ud7ff"]
_METADATA = st.dictionaries(st.sampled_from(_META_KEYS), _META_VALUES, max_size=4)
_OPERAND_NUMBERS = st.one_of(
    _NUMBERS, st.sampled_from([10**23 - 1, 10**23, 10**500, -(10**500), 2**64])
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), _OPERAND_NUMBERS, st.text(_OPERAND_CHARS, max_size=3)
)
_ORDERABLE = st.one_of(_OPERAND_NUMBERS, st.text(_OPERAND_CHARS, max_size=3))
_FILTER_KEYS = st.sampled_from(_META_KEYS)


def _leaves(key: str) -> st.SearchStrategy[Filter]:
    return st.one_of(
        st.builds(Eq, key=st.just(key), value=_SCALARS),
        st.builds(Ne, key=st.just(key), value=_SCALARS),
        st.builds(Gt, key=st.just(key), value=_ORDERABLE),
        st.builds(Gte, key=st.just(key), value=_ORDERABLE),
        st.builds(Lt, key=st.just(key), value=_ORDERABLE),
        st.builds(Lte, key=st.just(key), value=_ORDERABLE),
        st.builds(In, key=st.just(key), values=st.lists(_SCALARS, max_size=3)),
        st.builds(Nin, key=st.just(key), values=st.lists(_SCALARS, max_size=3)),
        st.builds(Exists, key=st.just(key), value=st.booleans()),
    )


_LEAF = _FILTER_KEYS.filter(lambda k: not k.startswith("$")).flatmap(_leaves)
_FILTERS: st.SearchStrategy[Filter] = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        st.builds(And, filters=st.lists(children, max_size=3)),
        st.builds(Or, filters=st.lists(children, max_size=3)),
        st.builds(Not, filter=children),
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def scratch() -> Iterator[psycopg.Connection[Any]]:
    """A connection with a temporary jsonb table, for the translation property."""
    with psycopg.connect(session_dsn(), autocommit=True) as conn:
        conn.execute("CREATE TEMPORARY TABLE scratch (i integer, metadata jsonb)")
        yield conn


def _matching_rows(
    conn: psycopg.Connection[Any], rows: list[dict[str, Any]], f: Filter
) -> set[int]:
    conn.execute("TRUNCATE scratch")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO scratch VALUES (%s, %s::jsonb)",
            [(i, filter_json(m)) for i, m in enumerate(rows)],
        )
    where = translate(f, sql.Identifier("metadata"))
    statement = sql.SQL("SELECT i FROM scratch WHERE {}").format(where.where)
    return {int(r[0]) for r in conn.execute(statement, where.params).fetchall()}


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_METADATA, min_size=1, max_size=8), f=_FILTERS)
def test_sql_filters_agree_with_the_reference_evaluator(
    scratch: psycopg.Connection[Any], rows: list[dict[str, Any]], f: Filter
) -> None:
    expected = {i for i, m in enumerate(rows) if matches(f, m)}
    assert _matching_rows(scratch, rows, f) == expected


@pytest.mark.parametrize(
    ("metadata", "f", "hit"),
    [
        ({"n": 1e23}, Lt(key="n", value=10**23 - 1), True),  # exact value, not repr
        ({"n": 2**53 + 1}, Eq(key="n", value=2.0**53), False),
        ({"n": 1}, Eq(key="n", value=1.0), True),
        ({"n": 0}, Eq(key="n", value=-0.0), True),
        ({"n": 0.1}, Eq(key="n", value=0.1), True),  # the exact binary value, both sides
        ({"n": 0.1}, In(key="n", values=[1, "0.1", True, None]), False),
        ({"n": 10**30}, Eq(key="n", value=1e30), False),  # 1e30 is not 10**30 exactly
        ({"n": 2**80}, In(key="n", values=[0, 2**80]), True),
        ({"s": 'a"b'}, Eq(key="s", value='a"b'), True),  # the probe is JSON, escaped
        ({'k"': 1}, Eq(key='k"', value=1), True),
        ({"s": "e\u0301"}, Eq(key="s", value="\u00e9"), False),  # code points, no folding
        ({"n": True}, Eq(key="n", value=1), False),  # bool is not a number
        ({"n": True}, Gt(key="n", value=0), False),
        ({"n": "1"}, Eq(key="n", value=1), False),  # types never mix
        ({"n": None}, Eq(key="n", value=None), True),
        ({}, Eq(key="n", value=None), False),  # missing is not null
        ({}, Ne(key="n", value=1), True),  # ...and passes the negations
        ({}, Nin(key="n", values=[1]), True),
        ({"s": "Z"}, Lt(key="s", value="a"), True),  # code point order, not a locale's
        ({"s": "é"}, Gt(key="s", value="z"), True),
        ({"s": "a"}, Gt(key="s", value="a\x00"), False),
        ({"s": "a\x01"}, Gt(key="s", value="a\x00"), True),
        ({"s": "a\ue000"}, Gt(key="s", value="a\ud800"), True),
        ({"s": "a\ud7ff"}, Lt(key="s", value="a\ud800"), True),
        # NUL and lone surrogates are stored exactly: every filter form reads them so.
        ({"s": "a\x00"}, Eq(key="s", value="a\x00"), True),
        ({"s": "a\ufffd"}, Eq(key="s", value="a\x00"), False),
        ({"s": "a\x00"}, Eq(key="s", value="a\ufffd"), False),
        ({"s": "a\x00"}, In(key="s", values=["a\x01", "a\x00"]), True),
        ({"s": "a\x00"}, Nin(key="s", values=["a\x00"]), False),
        ({"s": "a\x00"}, Ne(key="s", value="a\x01"), True),
        ({"s": "a\x00"}, Gt(key="s", value="a"), True),
        ({"s": "a\x00"}, Lt(key="s", value="a\x01"), True),
        ({"s": "a\x00b"}, Lt(key="s", value="a\x01"), True),
        ({"s": "a\x01"}, Lte(key="s", value="a\x00\uffff"), False),
        ({"s": "a\ud800"}, Eq(key="s", value="a\ud800"), True),
        ({"s": "a\ud800"}, Gt(key="s", value="a\ud7ff"), True),
        ({"s": "a\ud7ff"}, Lt(key="s", value="a\ud7ff\x00"), True),
        ({"s": "a\udfff"}, Lt(key="s", value="a\ue000"), True),
        ({"k\x00": 1}, Exists(key="k\x00"), True),
        ({"k\ufffd": 1}, Exists(key="k\x00"), False),
        ({"k\x00": 1}, Eq(key="k\x00", value=1), True),
        ({"k\x00": 1}, Eq(key="k\ufffd", value=1), False),
        ({"k\x00": "b"}, Gte(key="k\x00", value="b"), True),
        ({"k\ud800": 2}, Gt(key="k\ud800", value=1), True),
        ({"k\ud800": 2}, Gt(key="k\ufffd", value=1), False),
        ({"l": [1]}, Eq(key="l", value=1), False),  # lists and objects
        ({"l": [1]}, In(key="l", values=[1, None]), False),
        ({"l": {"a": 1}}, Ne(key="l", value=1), True),
        ({"l": [1]}, Exists(key="l"), True),
        ({"n": 5}, Gt(key="n", value=-(10**500)), True),
        ({"n": 5}, In(key="n", values=[]), False),
        ({"n": 5}, Or(filters=[]), False),
        ({"n": 5}, And(filters=[]), True),
    ],
)
def test_filter_edge_cases(
    scratch: psycopg.Connection[Any], metadata: dict[str, Any], f: Filter, hit: bool
) -> None:
    assert matches(f, metadata) is hit  # the reference says so...
    assert _matching_rows(scratch, [metadata], f) == ({0} if hit else set())  # ...and SQL


_HOSTILE = [
    "'",
    "''; DROP TABLE scratch; --",
    "$1",
    "%s",
    "%(f0)s",
    "{}",
    '"',
    "\\",
    "a\x00b",
    "x" * 20_000,
    ") OR true --",
    "metadata",
]


@pytest.mark.parametrize("hostile", _HOSTILE)
def test_hostile_filter_keys_and_values_are_bound(
    scratch: psycopg.Connection[Any], hostile: str
) -> None:
    safe = hostile.replace("\x00", "")
    rows: list[dict[str, Any]] = [{safe: safe}, {safe: 1}, {"k": safe}, {}]
    # A key that starts with "$" reads as an operator, so it cannot be filtered on.
    key = "k" + hostile if hostile.startswith("$") else hostile
    safe_key = key.replace("\x00", "")
    rows += [{safe_key: safe}]
    for f in (
        Eq(key=key, value=hostile),
        Eq(key="k", value=hostile),
        In(key=key, values=[hostile, 1]),
        Gte(key="k", value=hostile),
        Exists(key=key),
        Not(filter=Eq(key=safe_key, value=safe)),
    ):
        expected = {i for i, m in enumerate(rows) if matches(f, m)}
        assert _matching_rows(scratch, rows, f) == expected
    assert scratch.execute("SELECT count(*) FROM scratch").fetchone() == (5,)


async def test_hostile_documents_and_filters_through_the_store(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=64), HashingEmbedder(DIM)) as store:
            hostile = [h.replace("\x00", "") for h in _HOSTILE if len(h) < 100]
            documents = [
                Document(id=h, text=f"text {h}", metadata={h: h, "i": i}, source_id=h)
                for i, h in enumerate(hostile)
            ]
            await store.upsert(documents, namespace="'; --")
            got = await store.get_by_ids(hostile, namespace="'; --")
            # Each comes back with the time of the write, which the store stamped, as
            # version 1, valid from then.
            untimed = [
                msgspec.structs.replace(d, occurred_at=None, valid_from=None, version=None)
                for d in got
            ]
            assert sorted(untimed, key=lambda d: d.metadata["i"]) == documents
            for i, h in enumerate(hostile):
                if h.startswith("$"):
                    continue  # a "$" key reads as an operator: it cannot be filtered on
                hits = await store.search(
                    SearchRequest(query="text", k=64, namespace="'; --", filter={h: h})
                )
                assert [d.document.metadata["i"] for d in hits] == [i]
            result = await store.delete(hostile, namespace="'; --")
            assert result.deleted == hostile and store.is_empty()


# --- the pg store against the in-memory store ---------------------------------------------

_SPACES = st.sampled_from(["a", "b"])
_WORDS = st.lists(st.sampled_from(["cat", "dog", "fish", "owl", "tree", "rock"]), max_size=4)
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            _SPACES,
            st.lists(
                st.tuples(
                    st.integers(0, 6),
                    _WORDS,
                    st.dictionaries(st.sampled_from(["n", "t"]), _META_SCALARS, max_size=2),
                ),
                min_size=1,
                max_size=4,
            ),
        ),
        st.tuples(st.just("turns"), _SPACES, st.lists(_WORDS, min_size=1, max_size=3)),
        st.tuples(st.just("delete"), _SPACES, st.lists(st.integers(0, 6), max_size=3)),
        st.tuples(st.just("clear"), _SPACES, st.just(0)),
    ),
    min_size=1,
    max_size=8,
)
_SEARCHES = st.lists(
    st.tuples(
        st.sampled_from(["similarity", "mmr", "hybrid"]),
        _WORDS.map(" ".join),
        _SPACES,
        st.one_of(st.none(), _LEAF.filter(lambda f: True)),
        st.integers(1, 5),
    ),
    min_size=1,
    max_size=4,
)


_BASE_TIME = dt.datetime(2023, 5, 25, 13, 14, tzinfo=dt.UTC)


async def _apply(store: Any, op: tuple[Any, ...], step: int) -> object:
    # Every text is unique within a namespace: the in-memory store's BLAS scan may score
    # two identical vectors a few ulps apart, which would make their tie-break differ.
    # Every write gives its time (a stamped write time would differ between the two
    # stores), and some a conversation: both stores then derive the same index texts
    # (the date line, and the predecessor each finds in its own entries).
    kind, space, arg = op
    when = _BASE_TIME + dt.timedelta(hours=step)
    if kind == "upsert":
        unique = {i: (words, meta) for i, words, meta in arg}
        batch = [
            Document(
                id=f"d{i}",
                text=" ".join(w) + f" {i}",
                metadata=m,
                occurred_at=when,
                conversation="odd" if i % 2 else None,
            )
            for i, (w, m) in unique.items()
        ]
        return await store.upsert(batch, namespace=space)
    if kind == "turns":
        turns = [UnifiedMessage.user(" ".join(w) + f" t{step}x{j}") for j, w in enumerate(arg)]
        stored = await store.store_turns(
            turns,
            namespace=space,
            metadata={"n": len(arg)},
            occurred_at=when,
            conversation="odd" if step % 2 else None,
        )
        return (stored.ids, stored.evicted, stored.zero_norm)
    if kind == "delete":
        return await store.delete([f"d{i}" for i in arg], namespace=space)
    return (await store.clear(space)).removed


@settings(max_examples=40)
@given(ops=_OPS, searches=_SEARCHES)
async def test_pg_store_matches_the_in_memory_store(
    ops: list[tuple[Any, ...]], searches: list[tuple[Any, ...]]
) -> None:
    embedder = DeterministicFakeEmbedding(16, seed=3)
    config = cfg(max_entries=6, dimensions=16)
    with trio.fail_after(TIMEOUT):
        async with (
            open_store(config, embedder) as mem,
            fresh_pg_store(session_dsn(), config, embedder) as pg,
        ):
            table = pg._actor.names.table_name
            for step, op in enumerate(ops):
                assert await _apply(pg, op, step) == await _apply(mem, op, step)
                assert pg.usage() == mem.usage()
                # BM25's N and lengths, and scoped counts, as the entries say.
                await trio.to_thread.run_sync(namespace_counts, session_dsn(), table)
            for space in ("a", "b"):
                ids = [f"d{i}" for i in range(7)] + [f"turn-{s}" for s in range(60)]
                want = sorted(await mem.get_by_ids(ids, namespace=space), key=lambda d: d.id)
                got = sorted(await pg.get_by_ids(ids, namespace=space), key=lambda d: d.id)
                assert got == want
            for kind, query, space, f, k in searches:
                request = SearchRequest(
                    query=query or "owl", k=k, kind=kind, fetch_k=k + 2, namespace=space, filter=f
                )
                want_hits = await mem.search(request)
                got_hits = await pg.search(request)
                assert [h.document for h in got_hits] == [h.document for h in want_hits]
                assert [h.ranks for h in got_hits] == [h.ranks for h in want_hits]
                for g, w in zip(got_hits, want_hits, strict=True):
                    if kind == "hybrid":
                        assert g.score == w.score
                    else:
                        assert abs(g.score - w.score) <= SCORE_TOLERANCE


@given(
    texts=st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "ab", "Ünï"]), max_size=8).map(
            " ".join
        ),
        min_size=1,
        max_size=12,
    ),
    query=st.lists(st.sampled_from(["a", "b", "c", "zz", "ünï"]), min_size=1, max_size=4).map(
        " ".join
    ),
)
@settings(max_examples=40)
async def test_sql_bm25_scores_match_the_in_memory_index(texts: list[str], query: str) -> None:
    index = Bm25Index(len(texts))
    for slot, text in enumerate(texts):
        index.add(slot, text)
    slots, scores = index.scores(query)
    expected = dict(zip(slots.tolist(), scores.tolist(), strict=True))
    with trio.fail_after(TIMEOUT):
        async with fresh_pg_store(
            session_dsn(), cfg(max_entries=16), HashingEmbedder(DIM)
        ) as store:
            await store.upsert([Document(id=str(i), text=t) for i, t in enumerate(texts)])
            reads = store._actor.reads
            from actors._pg.filters import Visibility as _Visibility
            from actors._pg.filters import translate as _translate

            where = _translate(None, sql.Identifier("metadata"))
            vis = _Visibility(dt.datetime.now(dt.UTC))
            found = await store._actor.read(
                lambda conn: reads.bm25(conn, query, 100, "memory-default", where, vis), "bm25"
            )
    # Sequences are 0..n-1 in upsert order, which is the slot order above.
    got = dict(found)
    assert set(got) == set(expected)
    for slot, score in expected.items():
        assert got[slot] == pytest.approx(score, rel=1e-12, abs=0.0)


# --- profile binding and the HNSW option ----------------------------------------------------


class ProfiledEmbedder(HashingEmbedder):
    def __init__(self, dimensions: int, model: str, **options: str) -> None:
        super().__init__(dimensions)
        self.profile = EmbeddingProfile(
            provider="local", model=model, dimensions=dimensions, options=dict(options)
        )


async def test_a_table_is_bound_to_its_embedding_profile(opener: Any) -> None:
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(), ProfiledEmbedder(DIM, "m1")) as store:
            await store.add_documents(docs("x"))
        # The same profile (a batch size may differ) and a profile-less embedder reopen.
        same = ProfiledEmbedder(DIM, "m1")
        same.profile = EmbeddingProfile(
            provider="local", model="m1", dimensions=DIM, max_batch_size=8
        )
        async with opener(cfg(), same) as store:
            assert len(store) == 1
        async with opener(cfg(), HashingEmbedder(DIM)) as store:
            assert len(store) == 1
            # The binding is the table's: this embedder has no profile, and queries by
            # vector must still name the bound one.
            bound = store.profile
            assert bound is not None and (bound.provider, bound.model) == ("local", "m1")
            vector = HashingEmbedder(DIM).embed("x").tolist()
            with pytest.raises(EmbeddingError, match="must name the profile"):
                await store.search(SearchRequest(vector=vector, k=1))
            with pytest.raises(EmbeddingError, match="model is 'm2'"):
                await store.search(
                    SearchRequest(vector=vector, k=1, profile=ProfiledEmbedder(DIM, "m2").profile)
                )
            with pytest.raises(EmbeddingError, match="must name the profile"):
                await store.retrieve_embedding(vector, 1)
            (hit,) = await store.search(SearchRequest(vector=vector, k=1, profile=bound))
            assert hit.document.text == "x"
            assert (await store.retrieve_embedding([0.0] * DIM, 1)).turns[0].score == 0.0
        for other in (ProfiledEmbedder(DIM, "m2"), ProfiledEmbedder(DIM, "m1", prefix="q: ")):
            with pytest.raises(ConfigError, match="is bound to the embedding profile"):
                async with opener(cfg(), other):
                    pass  # pragma: no cover
        with pytest.raises(ConfigError, match="holds 64-float vectors"):
            async with opener(cfg(dimensions=32), ProfiledEmbedder(32, "m1")):
                pass  # pragma: no cover


async def test_a_profile_of_other_dimensions_is_refused_before_connecting() -> None:
    embedder = HashingEmbedder(DIM)
    embedder.profile = EmbeddingProfile(provider="local", model="m", dimensions=32)  # type: ignore[attr-defined]
    with trio.fail_after(TIMEOUT), pytest.raises(ConfigError, match="makes 32-float vectors"):
        async with open_pg_store("host=/nonexistent", cfg(), embedder):
            pass  # pragma: no cover


async def test_hnsw_is_opt_in_and_reported_as_not_exact(
    opener: Any,
    pg_dsn: str,
    pg_table: str,
) -> None:
    embedder = DeterministicFakeEmbedding(DIM, seed=1)
    texts = [f"entry {i}" for i in range(200)]
    with trio.fail_after(TIMEOUT):
        async with opener(cfg(max_entries=256), embedder) as store:
            await store.add_documents(
                [Document(text=t, metadata={"even": i % 2 == 0}) for i, t in enumerate(texts)]
            )
            exact = await store.retrieve("entry 7", 5)
            assert exact.exact
        with pytest.raises(ConfigError, match="index is 'ivf'"):
            async with opener(cfg(max_entries=256), embedder, index="ivf"):
                pass  # pragma: no cover
        async with opener(cfg(max_entries=256), embedder, index="hnsw") as store:
            report = await store.retrieve("entry 7", 5)
            assert not report.exact and report.scanned == 200
            assert report.turns[0].message.text() == "entry 7"
            hits = await store.search(SearchRequest(query="entry 7", k=50, filter={"even": True}))
            assert len(hits) == 50 and all(h.document.metadata["even"] for h in hits)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"{pg_table}_hnsw_idx",)
            ).fetchone()
        assert row is not None and "hnsw" in row[0]
        # Reopened without the option, the store is exact again on the same table.
        async with opener(cfg(max_entries=256), embedder) as store:
            again = await store.retrieve("entry 7", 5)
            assert again.exact and again.turns == exact.turns


def test_numbers_in_the_filter_column_are_exact() -> None:
    assert filter_json({"f": 0.1, "i": 3, "l": [0.1]}) == (
        '{"f":0.1000000000000000055511151231257827021181583404541015625,"i":3,"l":[0.1]}'
    )


# --- the conformance suite ------------------------------------------------------------------


class TestPgConformance(StoreConformance):
    """``StoreConformance`` against the pg store: a fresh table per test, dropped after.

    The one difference from the in-memory store is the score tolerance: pgvector scores
    in float32 with its own summation order, not BLAS's, so scores are within 1e-5 of
    the float64 cosine (measured: under 1e-7), not bit-identical. ``score_tolerance`` is
    set to that documented bound, ``actors.testing.SCORE_TOLERANCE``, explicitly.
    """

    score_tolerance = SCORE_TOLERANCE
    timeout = 60.0

    def open_store_under_test(self, config: VectorStoreConfig, embedder: object) -> Any:
        return fresh_pg_store(session_dsn(), config, embedder)
