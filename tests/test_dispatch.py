"""The dispatchers, against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import trio

from actors import Dispatcher, EchoDispatcher, OpenAIChatDispatcher
from actors._agent.dispatch import to_openai
from protocol import (
    ConfigError,
    DispatchError,
    DispatchTimeout,
    ImageBase64,
    Text,
    Thinking,
    ToolCall,
    UnifiedMessage,
    UnifiedRequest,
)


class FakeOpenAIServer:
    """A tiny ``/v1/chat/completions`` endpoint in a thread.

    ``mode`` picks the reply: ``"ok"``, ``"tools"``, ``"status"`` (HTTP 503),
    ``"not_json"``, ``"no_choices"``, ``"bad_tool_args"`` or ``"hang"`` (waits until the
    test ends, so the client's timeout fires). Every request is recorded.
    """

    def __init__(self) -> None:
        self.mode = "ok"
        self.received: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                server.received.append(
                    {
                        "path": self.path,
                        "json": json.loads(body),
                        "authorization": self.headers.get("Authorization"),
                        "content_type": self.headers.get("Content-Type"),
                    }
                )
                server.reply(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def reply(self, handler: BaseHTTPRequestHandler) -> None:
        mode = self.mode
        if mode == "hang":
            self.release.wait(30)
            return
        status, payload = 200, b""
        message: dict[str, Any] = {"role": "assistant", "content": "hello from the server"}
        if mode == "tools":
            message = {
                "role": "assistant",
                "content": None,
                "reasoning_content": "thinking it over",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'},
                    }
                ],
            }
        if mode == "bad_tool_args":
            message = {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{nope"}}],
            }
        if mode == "status":
            status, payload = 503, b'{"error": "model is loading"}'
        elif mode == "not_json":
            payload = b"<html>surprise</html>"
        elif mode == "no_choices":
            payload = b'{"object": "chat.completion"}'
        else:
            payload = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


REQUEST = UnifiedRequest(
    model="request-model",
    temperature=0.2,
    max_tokens=64,
    seed=7,
    extra={"response_format": {"type": "text"}},
    messages=[
        UnifiedMessage.system("be brief"),
        UnifiedMessage.user("weather in Lyon?", name="sam"),
        UnifiedMessage(
            role="assistant",
            content=[
                Thinking(text="not sent"),
                Text(text="let me check"),
                ToolCall(id="call_1", name="get_weather", arguments={"city": "Lyon", "days": 1}),
            ],
        ),
        UnifiedMessage.tool_result("call_1", "light rain, 14 C"),
        UnifiedMessage(
            role="user",
            content=[Text(text="and this?"), ImageBase64(media_type="image/png", data="QUJD")],
        ),
    ],
)

EXPECTED_BODY = {
    "model": "served-model",
    "temperature": 0.2,
    "max_tokens": 64,
    "seed": 7,
    "response_format": {"type": "text"},
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Lyon?", "name": "sam"},
        {
            "role": "assistant",
            "content": "let me check",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Lyon","days":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "light rain, 14 C"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
            ],
        },
    ],
}


def test_to_openai_maps_every_block() -> None:
    assert to_openai(REQUEST, "served-model") == EXPECTED_BODY
    assert to_openai(REQUEST)["model"] == "request-model"


async def test_the_server_receives_the_exact_body(server: FakeOpenAIServer) -> None:
    dispatcher = OpenAIChatDispatcher(server.base_url, "served-model", api_key="sk-test")
    assert isinstance(dispatcher, Dispatcher)
    with trio.fail_after(10):
        reply = await dispatcher.dispatch(REQUEST)
    assert reply == UnifiedMessage.assistant("hello from the server")
    (got,) = server.received
    assert got["path"] == "/v1/chat/completions"
    assert got["json"] == EXPECTED_BODY
    assert got["authorization"] == "Bearer sk-test"
    assert got["content_type"] == "application/json"


async def test_tool_calls_and_reasoning_come_back(server: FakeOpenAIServer) -> None:
    server.mode = "tools"
    with trio.fail_after(10):
        async with OpenAIChatDispatcher(f"{server.base_url}/v1/") as dispatcher:
            reply = await dispatcher.dispatch(REQUEST)
            again = await dispatcher.dispatch(REQUEST)
    assert reply == again
    assert reply.role == "assistant"
    assert reply.content == [
        Thinking(text="thinking it over"),
        ToolCall(id="call_9", name="get_weather", arguments={"city": "Lyon"}),
    ]
    assert [r["path"] for r in server.received] == ["/v1/chat/completions"] * 2
    assert server.received[0]["json"]["model"] == "request-model"
    assert server.received[0]["authorization"] is None


@pytest.mark.parametrize(
    ("mode", "match"),
    [
        ("status", r"HTTP 503.*model is loading"),
        ("not_json", r"HTTP 200.*malformed reply: not JSON"),
        ("no_choices", r"HTTP 200.*malformed reply: 'choices' is None"),
        ("bad_tool_args", r"HTTP 200.*malformed reply: tool_calls\[0\]"),
    ],
)
async def test_errors_name_the_status_and_endpoint(
    server: FakeOpenAIServer, mode: str, match: str
) -> None:
    server.mode = mode
    dispatcher = OpenAIChatDispatcher(server.base_url)
    with trio.fail_after(10), pytest.raises(DispatchError, match=match) as info:
        await dispatcher.dispatch(REQUEST)
    endpoint = f"{server.base_url}/v1/chat/completions"
    assert info.value.endpoint == endpoint
    assert endpoint in str(info.value)
    assert info.value.status == (503 if mode == "status" else 200)


async def test_a_timeout_is_a_dispatch_timeout(server: FakeOpenAIServer) -> None:
    server.mode = "hang"
    dispatcher = OpenAIChatDispatcher(server.base_url, timeout=0.2)
    with trio.fail_after(10), pytest.raises(DispatchTimeout) as info:
        await dispatcher.dispatch(REQUEST)
    assert isinstance(info.value, DispatchError)
    assert isinstance(info.value, TimeoutError)
    assert info.value.status is None
    assert "timed out after 0.2s" in str(info.value)
    assert server.base_url in str(info.value)


async def test_a_refused_connection_is_a_dispatch_error() -> None:
    with FakeOpenAIServer() as s:
        url = s.base_url  # the port is free again once the server has closed
    dispatcher = OpenAIChatDispatcher(url)
    with trio.fail_after(10), pytest.raises(DispatchError, match="no response") as info:
        await dispatcher.dispatch(REQUEST)
    assert info.value.status is None
    assert "ConnectError" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "localhost:8080"}, "base_url is 'localhost:8080'"),
        ({"base_url": "http://x", "timeout": 0}, "timeout is 0"),
        ({"base_url": "http://x", "model": ""}, "model is ''"),
        ({"base_url": "http://x", "api_key": 3}, "api_key is a int"),
    ],
)
def test_the_dispatcher_validates_its_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        OpenAIChatDispatcher(**kwargs)


async def test_dispatch_refuses_a_non_request() -> None:
    with pytest.raises(ConfigError, match="expected UnifiedRequest"):
        await OpenAIChatDispatcher("http://127.0.0.1:9").dispatch({"model": "x"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected UnifiedRequest"):
        await EchoDispatcher().dispatch(None)  # type: ignore[arg-type]


async def test_echo_answers_from_what_the_model_reads() -> None:
    request = UnifiedRequest(
        model="m",
        messages=[
            UnifiedMessage.system("s"),
            UnifiedMessage.system(
                "Recalled memory: 2 item(s), best first\n1. [0.9000] a\n2. [0.1000] b"
            ),
            UnifiedMessage.user("what now?"),
        ],
    )
    reply = await EchoDispatcher().dispatch(request)
    assert reply.text() == (
        "[echo] I read 3 message(s). Recalled 2 item(s); best: 1. [0.9000] a You asked: what now?"
    )
    bare = await EchoDispatcher().dispatch(UnifiedRequest(model="m", messages=[]))
    assert bare.text() == "[echo] I read 0 message(s). No recalled memory."
