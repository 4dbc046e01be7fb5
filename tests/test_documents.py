"""Documents, search requests and results: validation at construction, ids, round trips."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import ConfigError, EmbeddingError, FilterError, JsonError
from protocol._documents import (
    DeleteResult,
    Document,
    IndexResult,
    ScoredDocument,
    SearchRequest,
    document_id,
)
from protocol._filters import Eq, Gt


def test_document_defaults_and_with_id() -> None:
    doc = Document(text="hello")
    assert (doc.id, doc.metadata, doc.source_id) == (None, {}, None)
    filled = doc.with_id()
    assert filled.id == document_id("hello", {})
    assert filled.with_id() is filled
    assert Document(text="x", id="mine").with_id().id == "mine"


def test_document_id_is_deterministic_and_covers_metadata() -> None:
    a = document_id("t", {"b": 1, "a": [1, "x"]})
    assert a == document_id("t", {"a": [1, "x"], "b": 1})
    assert len(a) == 32 and int(a, 16) >= 0
    assert a != document_id("t", {"b": 2, "a": [1, "x"]})
    assert document_id("t") != document_id("u")
    assert document_id("t", {"n": 1}) != document_id("t", {"n": 1.0})


@given(
    text=st.text(max_size=20),
    meta=st.dictionaries(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1)),
)
def test_document_id_depends_only_on_content(text: str, meta: dict[str, Any]) -> None:
    assert document_id(text, meta) == document_id(text, dict(reversed(list(meta.items()))))


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"text": 3}, ConfigError, "document text is a int"),
        ({"text": "x", "id": ""}, ConfigError, "document id is ''"),
        ({"text": "x", "source_id": 5}, ConfigError, "document source_id is 5"),
        ({"text": "x", "metadata": []}, JsonError, "document metadata is a list"),
        ({"text": "x", "metadata": {"k": {1, 2}}}, JsonError, "holds a set"),
        ({"text": "x", "metadata": {"k": float("nan")}}, JsonError, "nan"),
    ],
)
def test_document_validates(kwargs: dict[str, Any], error: type[Exception], needle: str) -> None:
    with pytest.raises(error) as info:
        Document(**kwargs)
    assert needle in str(info.value)


def test_search_request_defaults() -> None:
    req = SearchRequest(query="q")
    assert (req.k, req.kind, req.fetch_k, req.lambda_mult) == (4, "similarity", 20, 0.5)
    assert req.filter is None and req.namespace is None and req.score_threshold is None
    assert (req.rrf_k, req.weights) == (60.0, None)
    assert SearchRequest(query="q", kind="hybrid", weights={"bm25": 2}).weights == {"bm25": 2.0}


def test_search_request_parses_a_dict_filter_and_copies_a_vector() -> None:
    vec = np.array([1, 2, 3], dtype=np.float32)
    req = SearchRequest(vector=vec, filter={"a": {"$gt": 1}})  # type: ignore[arg-type]
    assert req.filter == Gt(key="a", value=1)
    assert req.vector == [1.0, 2.0, 3.0]
    vec[0] = 9.0
    assert req.vector == [1.0, 2.0, 3.0]
    tree = Eq(key="a", value=1)
    assert SearchRequest(query="q", filter=tree).filter is tree


def test_search_request_round_trips() -> None:
    req = SearchRequest(
        query="q",
        vector=[0.5],
        kind="hybrid",
        k=2,
        fetch_k=5,
        filter={"a": 1},  # type: ignore[arg-type]
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(req), type=SearchRequest) == req


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"query": "q", "kind": "knn"}, "kind is 'knn'"),
        ({}, "takes exactly one of query and vector; got neither"),
        ({"query": "q", "vector": [1.0]}, "got both"),
        ({"vector": [1.0], "kind": "hybrid"}, "hybrid search needs query text"),
        ({"query": 3}, "query is a int"),
        ({"query": "q", "k": 0}, "k is 0; expected an int > 0"),
        ({"query": "q", "k": True}, "k is True"),
        ({"query": "q", "k": 2.0}, "k is 2.0"),
        ({"query": "q", "kind": "mmr", "k": 30}, "fetch_k is 20 and k is 30"),
        ({"query": "q", "fetch_k": 0}, "fetch_k is 0"),
        ({"query": "q", "lambda_mult": 1.5}, "lambda_mult is 1.5"),
        ({"query": "q", "lambda_mult": float("nan")}, "lambda_mult is nan"),
        ({"query": "q", "score_threshold": 1.01}, "score_threshold is 1.01"),
        ({"query": "q", "score_threshold": "0.5"}, "score_threshold is '0.5'"),
        ({"query": "q", "kind": "hybrid", "score_threshold": 0.1}, "hybrid scores are fused"),
        ({"query": "q", "namespace": ""}, "namespace is ''"),
        ({"query": "q", "rrf_k": 0}, "rrf_k is 0; expected a number > 0"),
        ({"query": "q", "weights": [1]}, "weights is a list"),
        ({"query": "q", "weights": {"sparse": 1.0}}, "names the list 'sparse'"),
        ({"query": "q", "weights": {"bm25": -1}}, "weights['bm25'] is -1;"),
        ({"query": "q", "weights": {"bm25": "1"}}, "weights['bm25'] is '1'"),
    ],
)
def test_search_request_validates(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        SearchRequest(**kwargs)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("vector", "needle"),
    [
        ([], "vector is empty"),
        ("abc", "vector is a str"),
        ([1.0, float("inf")], "vector[1] is inf"),
        ([1.0, None], "vector[1] is None"),
    ],
)
def test_search_request_refuses_a_bad_vector(vector: object, needle: str) -> None:
    # A vector is checked as every vector is (actors._embedding.adapter.as_vector): an
    # EmbeddingError, as design §2 names for a bad embedding.
    with pytest.raises(EmbeddingError) as info:
        SearchRequest(vector=vector)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_search_request_refuses_a_bad_filter() -> None:
    with pytest.raises(FilterError, match="unknown filter operator"):
        SearchRequest(query="q", filter={"a": {"$like": "x"}})  # type: ignore[arg-type]
    with pytest.raises(FilterError, match="filter is a list"):
        SearchRequest(query="q", filter=[1])  # type: ignore[arg-type]


def test_result_types_round_trip() -> None:
    hit = ScoredDocument(
        document=Document(id="d", text="t", metadata={"a": 1}), score=0.5, ranks={"dense": 1}
    )
    for value in (hit, DeleteResult(deleted=["a"], missing=["b"]), IndexResult(num_added=2)):
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=type(value)) == value
