"""OpenAIEmbeddings against a local OpenAI-compatible server (stdlib, 127.0.0.1, port 0)."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np
import pytest
import trio

from actors import CachedEmbedder, EmbeddingCache, EmbeddingUsageLog, OpenAIEmbeddings
from actors._embedding.openai import parse_retry_after
from protocol import (
    ConfigError,
    EmbeddingError,
    EmbeddingPrice,
    EmbeddingProviderError,
    EmbeddingTimeout,
)

DIMS = 4


def vector_for(text: str) -> list[float]:
    """What the fake server returns for ``text``: easy to check, different per text."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0, -1.0]


class Reply:
    """One scripted answer; ``None`` fields mean "the normal answer"."""

    def __init__(
        self,
        status: int = 200,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        count_delta: int = 0,
        dims: int = DIMS,
        shuffle: bool = False,
        usage: bool = True,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.delay = delay
        self.count_delta = count_delta
        self.dims = dims
        self.shuffle = shuffle
        self.usage = usage


class FakeServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # keep pytest output clean

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length))
                with server.lock:
                    server.requests.append({"path": self.path, **payload})
                    server.headers.append(dict(self.headers))
                    reply = server.script.pop(0) if server.script else Reply()
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body
                if body is None and reply.status == 200:
                    inputs = payload["input"]
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": (vector_for(t) + [0.5] * reply.dims)[: reply.dims],
                        }
                        for i, t in enumerate(inputs)
                    ]
                    data = data[: len(data) + reply.count_delta] if reply.count_delta else data
                    if reply.shuffle:
                        data.reverse()
                    doc: dict[str, Any] = {"object": "list", "data": data, "model": "m"}
                    if reply.usage:
                        tokens = sum(len(t.split()) for t in inputs)
                        doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
                    body = json.dumps(doc).encode()
                elif body is None:
                    body = json.dumps({"error": {"message": f"scripted {reply.status}"}}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.close()


def client(server: FakeServer, **kwargs: Any) -> OpenAIEmbeddings:
    settings: dict[str, Any] = {
        "dimensions": DIMS,
        "base_url": server.url,
        "backoff_initial": 0.01,
        "backoff_max": 0.02,
        "timeout": 5.0,
        "seed": 1,
    }
    settings.update(kwargs)
    return OpenAIEmbeddings("test-embed", **settings)


async def test_batches_to_max_batch_size_and_keeps_order(server: FakeServer) -> None:
    texts = [f"text number {i}" for i in range(7)]
    with trio.fail_after(10):
        async with client(server, max_batch_size=3, api_key="sk-test") as emb:
            result = await emb.embed_with_report(texts, "document")
    assert [len(r["input"]) for r in server.requests] == [3, 3, 1]
    assert all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert server.requests[0]["model"] == "test-embed"
    assert server.requests[0]["encoding_format"] == "float"
    assert "dimensions" not in server.requests[0]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    np.testing.assert_array_equal(result.vectors, np.array([vector_for(t) for t in texts]))
    assert result.vectors.dtype == np.float32
    assert (result.batches, result.tokens) == (3, 21)


async def test_items_are_placed_by_index(server: FakeServer) -> None:
    server.script = [Reply(shuffle=True)]
    with trio.fail_after(10):
        async with client(server) as emb:
            vectors = await emb.embed_documents(["a", "bb", "ccc"])
    np.testing.assert_array_equal(vectors[:, 0], [1.0, 2.0, 3.0])


async def test_prefixes_and_dimensions_are_sent(server: FakeServer) -> None:
    with trio.fail_after(10):
        async with client(
            server, query_prefix="q: ", document_prefix="d: ", send_dimensions=True
        ) as emb:
            query = await emb.embed_query("hi")
            await emb.embed_documents(["hi"])
    assert [r["input"] for r in server.requests] == [["q: hi"], ["d: hi"]]
    assert server.requests[0]["dimensions"] == DIMS
    np.testing.assert_array_equal(query, vector_for("q: hi"))


async def test_429_then_success_honours_retry_after(server: FakeServer) -> None:
    server.script = [Reply(429, headers={"Retry-After": "0.3"})]
    with trio.fail_after(10):
        async with client(server) as emb:
            start = trio.current_time()
            vectors = await emb.embed_documents(["x"])
            waited = trio.current_time() - start
    assert len(server.requests) == 2
    assert waited >= 0.3
    np.testing.assert_array_equal(vectors[0], vector_for("x"))


async def test_retry_after_is_capped(server: FakeServer) -> None:
    server.script = [Reply(429, headers={"retry-after-ms": "60000"})]
    with trio.fail_after(10):
        async with client(server, max_retry_after=0.05) as emb:
            await emb.embed_documents(["x"])
    assert len(server.requests) == 2


async def test_5xx_retries_then_fails_with_the_server_message(server: FakeServer) -> None:
    server.script = [Reply(503), Reply(503), Reply(503)]
    with trio.fail_after(10):
        async with client(server, max_retries=2) as emb:
            with pytest.raises(EmbeddingProviderError) as info:
                await emb.embed_documents(["x"])
    assert len(server.requests) == 3
    assert info.value.status == 503 and info.value.attempts == 3
    assert "answered 503" in str(info.value) and "scripted 503" in str(info.value)


async def test_500_then_success(server: FakeServer) -> None:
    server.script = [Reply(500), Reply(502)]
    with trio.fail_after(10):
        async with client(server, max_retries=2) as emb:
            vectors = await emb.embed_documents(["x", "y"])
    assert len(server.requests) == 3 and vectors.shape == (2, DIMS)


async def test_4xx_is_not_retried(server: FakeServer) -> None:
    server.script = [Reply(400, body=b'{"error": {"message": "input too long"}}')]
    with trio.fail_after(10):
        async with client(server, max_retries=5) as emb:
            with pytest.raises(
                EmbeddingProviderError, match=r"answered 400.*input too long"
            ) as info:
                await emb.embed_documents(["x"])
    assert len(server.requests) == 1 and info.value.attempts == 1


async def test_bad_json_is_a_clear_error(server: FakeServer) -> None:
    server.script = [Reply(200, body=b"<html>proxy error</html>")]
    with trio.fail_after(10):
        async with client(server) as emb:
            with pytest.raises(EmbeddingProviderError, match=r"not JSON.*proxy error"):
                await emb.embed_documents(["x"])
    assert len(server.requests) == 1


async def test_json_without_data_is_a_clear_error(server: FakeServer) -> None:
    server.script = [Reply(200, body=b'{"object": "list"}')]
    with trio.fail_after(10):
        async with client(server) as emb:
            with pytest.raises(EmbeddingProviderError, match="without a 'data' list"):
                await emb.embed_documents(["x"])


async def test_a_wrong_count_is_a_clear_error(server: FakeServer) -> None:
    server.script = [Reply(count_delta=-1)]
    with trio.fail_after(10):
        async with client(server) as emb:
            with pytest.raises(EmbeddingProviderError, match="returned 1 embeddings for 2 inputs"):
                await emb.embed_documents(["x", "y"])


async def test_a_wrong_width_is_an_embedding_error(server: FakeServer) -> None:
    server.script = [Reply(dims=DIMS + 1)]
    with trio.fail_after(10):
        async with client(server) as emb:
            with pytest.raises(EmbeddingError, match=r"vectors of 5 floats; .* says 4"):
                await emb.embed_documents(["x"])


async def test_a_timeout_is_its_own_error(server: FakeServer) -> None:
    server.script = [Reply(delay=1.0), Reply(delay=1.0)]
    with trio.fail_after(10):
        async with client(server, timeout=0.2, max_retries=1) as emb:
            with pytest.raises(EmbeddingTimeout, match=r"timed out after 0\.2 s") as info:
                await emb.embed_documents(["x"])
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value.__cause__, httpx.TimeoutException)
    assert info.value.attempts == 2 and len(server.requests) == 2


async def test_a_refused_connection_is_retried_then_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now.
    emb = OpenAIEmbeddings(
        "m", dimensions=DIMS, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1,
        backoff_initial=0.01, timeout=2.0,
    )  # fmt: skip
    with trio.fail_after(10):
        async with emb:
            with pytest.raises(EmbeddingProviderError, match="failed: ConnectError") as info:
                await emb.embed_documents(["x"])
    assert info.value.attempts == 2 and info.value.status is None


async def test_cancellation_during_backoff_propagates(server: FakeServer) -> None:
    server.script = [Reply(429, headers={"Retry-After": "30"})]
    with trio.fail_after(10):
        async with client(server) as emb:
            # The first request is answered at once; then the client backs off for 30 s.
            # 2 s leaves a loaded machine time to send that request before the cancel.
            with trio.move_on_after(2.0) as scope:
                await emb.embed_documents(["x"])
    assert scope.cancelled_caught
    assert len(server.requests) == 1


async def test_usage_is_recorded_through_cached_embedder(server: FakeServer) -> None:
    usage = EmbeddingUsageLog(
        pricing={"openai/test-embed": EmbeddingPrice(per_million_tokens=2.0)}
    )
    with trio.fail_after(10):
        async with client(server, max_batch_size=2) as emb:
            cached = CachedEmbedder(emb, EmbeddingCache(), usage)
            await cached.embed_documents(["one two", "three", "four five six"])
            await cached.embed_documents(["three"])
    totals = usage.totals()
    assert (totals.texts, totals.cache_hits, totals.texts_embedded) == (4, 1, 3)
    assert (totals.tokens, totals.batches) == (6, 2)
    assert totals.cost == pytest.approx(6 * 2.0 / 1e6)
    assert len(server.requests) == 2


async def test_tokens_are_none_when_a_server_reports_none(server: FakeServer) -> None:
    server.script = [Reply(usage=False)]
    with trio.fail_after(10):
        async with client(server) as emb:
            result = await emb.embed_with_report(["x"], "document")
    assert result.tokens is None


async def test_empty_input_makes_no_request(server: FakeServer) -> None:
    with trio.fail_after(10):
        async with client(server) as emb:
            result = await emb.embed_with_report([], "document")
            with pytest.raises(TypeError, match="texts is a str"):
                await emb.embed_documents("abc")
            with pytest.raises(TypeError, match="query is a int"):
                await emb.embed_query(3)  # type: ignore[arg-type]
    assert result.vectors.shape == (0, DIMS) and server.requests == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "ftp://x"}, "base_url is 'ftp://x'"),
        ({"timeout": 0}, "timeout is 0"),
        ({"timeout": float("inf")}, "timeout is inf"),
        ({"max_retries": -1}, "max_retries is -1"),
        ({"backoff_initial": -0.5}, "backoff_initial is -0.5"),
        ({"dimensions": 0}, "dimensions is 0"),
        ({"max_batch_size": 0}, "max_batch_size is 0"),
        ({"api_key": 5}, "api_key is a int"),
        ({"query_prefix": None}, "query_prefix is None"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, Any], match: str) -> None:
    settings: dict[str, Any] = {"dimensions": DIMS, **kwargs}
    with pytest.raises(ConfigError, match=match):
        OpenAIEmbeddings("m", **settings)


def test_parse_retry_after() -> None:
    assert parse_retry_after(httpx.Headers({"Retry-After": "2"})) == 2.0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert parse_retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert parse_retry_after(httpx.Headers({"Retry-After": "-3"})) is None
    assert parse_retry_after(httpx.Headers({})) is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 5, usegmt=True)
    assert parse_retry_after(httpx.Headers({"Retry-After": date}), now=now) == pytest.approx(5)


def test_provider_errors_pickle_with_their_fields() -> None:
    import pickle

    for error in (
        EmbeddingProviderError("boom", status=503, attempts=3),
        EmbeddingTimeout("slow", attempts=2),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert (again.status, again.attempts) == (error.status, error.attempts)
