"""The input-shape tests of :class:`~actors.testing.StoreConformance`: any text, id or
metadata one backend takes, every backend takes, and answers for alike.

- a text holding one very long token (a hex blob, a key) is stored, and found by
  similarity, by keyword search for that token and by an ordinary word beside it;
- the longest id and namespace the contract allows (``protocol.checks.MAX_ID_BYTES``,
  ``MAX_NAMESPACE_BYTES``) are taken, and one byte more is refused alike;
- metadata keys and values holding a NUL, a lone surrogate or their neighbours match
  every filter form as the reference evaluator (:func:`protocol.filters.matches`) says.
"""

from __future__ import annotations

import hashlib

import pytest
import trio

from protocol import ConfigError, Document, Filter, VectorStoreConfig
from protocol.checks import MAX_ID_BYTES, MAX_NAMESPACE_BYTES, matches
from protocol.filters import Eq, Exists, Gt, Gte, In, Lt, Lte, Ne, Nin

from ._conformance_base import ConformanceBase, _ids

__all__ = ["InputShapeTests", "long_token"]


def long_token(size: int, last: str = "7") -> str:
    """An alphanumeric run of ``size`` bytes (hex digits, then ``last``): one BM25 token,
    one HashingEmbedder word."""
    blob = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(size // 64 + 1))
    return blob[: size - 1] + last


# Characters around the ones PostgreSQL text cannot hold (NUL, lone surrogates), and
# U+FFFD, which a lossy encoding would put in their place.
_KEYS = ["k", "k\x00", "k\ufffd", "k\x01", "k\ud800"]
_VALUES = ["a", "a\x00", "a\x00b", "a\x01", "a\ufffd", "a\ufffdb", "a\ud800", "a\ud7ff", "\x00"]


class InputShapeTests(ConformanceBase):
    """Long tokens, the longest ids, NUL and surrogates in metadata; part of
    StoreConformance."""

    def roomy_config(self) -> VectorStoreConfig:
        """:meth:`make_config` with room for a 10,000-byte text and the longest ids."""
        return VectorStoreConfig(
            max_entries=self.max_entries,
            dimensions=self.dimensions,
            max_entry_bytes=max(self.max_entry_bytes, 32_768),
        )

    async def test_a_text_of_one_long_token_is_stored_and_found(self) -> None:
        token = long_token(10_000)
        text = f"marmot notes {token} end"
        near = f"marmot notes {long_token(10_000, last='8')} end"  # one byte apart
        with trio.fail_after(self.timeout):
            async with self.open_store_under_test(
                self.roomy_config(), self.make_embedder()
            ) as store:
                await store.add_documents(
                    [
                        Document(id="long", text=text, metadata={"t": token}),
                        Document(id="near", text=near),
                        Document(id="plain", text="plain marmot words"),
                    ]
                )
                [back] = await store.get_by_ids(["long"])
                assert (back.text, back.metadata) == (text, {"t": token})
                assert _ids(await self.search(store, query=text, k=1)) == ["long"]
                # The token alone, in any case, finds the one entry holding it.
                for query in (token, token.upper(), f"{token} unrelated"):
                    hits = await self.search(store, query=query, kind="bm25", k=5)
                    assert _ids(hits) == ["long"], query[-20:]
                hybrid = await self.search(store, query=token, kind="hybrid", k=3, fetch_k=3)
                assert hybrid[0].document.id == "long"
                assert hybrid[0].ranks["bm25"] == 1
                assert all("bm25" not in h.ranks for h in hybrid[1:])
                # An ordinary word beside it still counts.
                hits = await self.search(store, query="marmot", kind="bm25", k=5)
                assert set(_ids(hits)) == {"long", "near", "plain"}
                hits = await self.search(store, query="notes", kind="bm25", k=5)
                assert set(_ids(hits)) == {"long", "near"}
                hits = await self.search(store, query="x", k=5, filter={"t": token})
                assert _ids(hits) == ["long"]

    async def test_the_longest_id_and_namespace_are_taken_one_byte_more_is_not(self) -> None:
        longest = "d" * MAX_ID_BYTES
        wide = "\u00e9" * (MAX_ID_BYTES // 2)  # two bytes each in UTF-8
        space = "n" * MAX_NAMESPACE_BYTES
        with trio.fail_after(self.timeout):
            async with self.open_store_under_test(
                self.roomy_config(), self.make_embedder()
            ) as store:
                docs = [Document(id=longest, text="first long id"), Document(id=wide, text="wide")]
                assert await store.add_documents(docs, namespace=space) == [longest, wide]
                got = await store.get_by_ids([longest, wide], namespace=space)
                assert sorted(d.id or "" for d in got) == sorted([longest, wide])
                hits = await self.search(store, query="first long id", k=1, namespace=space)
                assert _ids(hits) == [longest]
                await store.upsert([Document(id=longest, text="replaced")], namespace=space)
                assert len(store) == 2
                over_id, over_space = MAX_ID_BYTES + 1, MAX_NAMESPACE_BYTES + 1
                refused: list[tuple[Document, str | None, str]] = [
                    (
                        Document(id=longest + "x", text="t"),
                        None,
                        f"{over_id} bytes.*at most {MAX_ID_BYTES}",
                    ),
                    (Document(id=wide + "x", text="t"), None, f"{over_id} bytes"),
                    (
                        Document(text="t"),
                        space + "n",
                        f"{over_space} bytes.*at most {MAX_NAMESPACE_BYTES}",
                    ),
                ]
                for document, namespace, says in refused:
                    with pytest.raises(ConfigError, match=says):
                        await store.add_documents([Document(text="fine"), document], namespace)
                assert len(store) == 2
                # What cannot be stored is never found.
                assert await store.get_by_ids([longest + "x"]) == []
                assert (await store.delete([longest + "x"])).missing == [longest + "x"]
                assert (await store.delete([longest], namespace=space)).deleted == [longest]
                assert len(store) == 1

    async def test_nul_and_surrogates_in_metadata_match_every_filter_form(self) -> None:
        rows: list[dict[str, object]] = [{key: value} for key in _KEYS[:3] for value in _VALUES]
        rows += [{"k\x01": "a\x01"}, {"k\ud800": 1}, {"k\x00": ["a\x00"]}, {"k\x00": None}, {}]
        filters: list[Filter] = []
        for key in _KEYS:
            filters += [Exists(key=key, value=True), Exists(key=key, value=False)]
            filters += [In(key=key, values=["a\x00b", "a\ufffd"]), Nin(key=key, values=["a\x00"])]
            for value in _VALUES:
                filters += [Eq(key=key, value=value), Ne(key=key, value=value)]
                filters += [Gt(key=key, value=value), Gte(key=key, value=value)]
                filters += [Lt(key=key, value=value), Lte(key=key, value=value)]
        with trio.fail_after(self.timeout * 2):
            async with self.fresh_store() as store:
                await store.add_documents(
                    [Document(id=f"r{i}", text=f"row {i}", metadata=m) for i, m in enumerate(rows)]
                )
                for i, m in enumerate(rows):
                    [back] = await store.get_by_ids([f"r{i}"])
                    assert back.metadata == m  # kept exactly
                for f in filters:
                    expected = {f"r{i}" for i, m in enumerate(rows) if matches(f, m)}
                    hits = await self.search(store, query="row", k=len(rows), filter=f)
                    assert set(_ids(hits)) == expected, f
