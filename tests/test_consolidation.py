"""Consolidators: the rules on constructed neighbours, the decisions'
types, a consolidator of the user's own through ``open_memory``, and the LLM judge's
fallbacks against a fake chat server (a stdlib HTTP server on 127.0.0.1 scripted with
each reply; the real model is ``tests/test_consolidation_llm.py``, under ``-m llm``)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import msgspec
import pytest
import trio

from actors import (
    Add,
    Consolidator,
    Decision,
    Duplicate,
    HashingEmbedder,
    LlmConsolidator,
    RuleConsolidator,
    Update,
    open_memory,
    open_store,
)
from actors._agent.consolidation import (
    NEAR_DUPLICATE_COSINE,
    SYSTEM_PROMPT,
    check_consolidator,
    duplicate_of,
    is_duplicate,
    parse_answer,
)
from protocol import (
    ConfigError,
    DispatchError,
    DispatchTimeout,
    Document,
    MemoryConfig,
    ScoredDocument,
    SearchRequest,
    UnifiedMessage,
    VectorStoreConfig,
)


def hit(id: str, text: str, score: float) -> ScoredDocument:
    return ScoredDocument(document=Document(text=text, id=id), score=score)


NEIGHBOURS = [
    hit("a", "I live in Paris.", 0.995),
    hit("b", "My cat is called Miso.", 0.41),
    hit("c", "I live in Paris", 0.93),
]


# --- the rules ------------------------------------------------------------------------


def test_is_duplicate_is_the_store_predicate() -> None:
    assert is_duplicate("exact", new_text="x y", held_text="x y", cosine=0.0)
    # exact: character for character, no normalization, the cosine not read
    assert not is_duplicate("exact", new_text="x y", held_text="x  y", cosine=1.0)
    assert not is_duplicate("exact", new_text="X y", held_text="x y", cosine=1.0)
    # near: the cosine against the threshold, inclusive; the texts not read
    assert is_duplicate("near", new_text="a", held_text="b", cosine=NEAR_DUPLICATE_COSINE)
    assert not is_duplicate(
        "near", new_text="a", held_text="a", cosine=NEAR_DUPLICATE_COSINE - 1e-9
    )
    assert is_duplicate("near", new_text="a", held_text="b", cosine=0.5, near_threshold=0.5)


async def test_exact_rule_finds_the_same_text_only() -> None:
    rule = RuleConsolidator()
    assert rule.dedupe == "exact"
    assert rule.near_threshold == NEAR_DUPLICATE_COSINE
    assert await rule.consolidate("I live in Paris", NEIGHBOURS) == Duplicate("c")
    assert await rule.consolidate("My cat is called Miso.", NEIGHBOURS) == Duplicate("b")
    assert await rule.consolidate("I live in Berlin.", NEIGHBOURS) == Add()
    assert await rule.consolidate("i live in paris.", NEIGHBOURS) == Add()
    assert await rule.consolidate("anything", []) == Add()


async def test_near_rule_takes_the_nearest_over_the_threshold() -> None:
    near = RuleConsolidator(dedupe="near")
    assert await near.consolidate("I moved to Berlin.", NEIGHBOURS) == Duplicate("a")
    assert await near.consolidate("x", NEIGHBOURS[1:]) == Add()
    strict = RuleConsolidator(dedupe="near", near_threshold=0.999)
    assert await strict.consolidate("I live in Paris.", NEIGHBOURS) == Add()
    loose = RuleConsolidator("near", 0.4)
    assert loose.decide("x", NEIGHBOURS[1:]) == Duplicate("b")
    assert duplicate_of("x", NEIGHBOURS[1:], "near", 0.4) == "b"


async def test_rules_never_update() -> None:
    for rule in (RuleConsolidator(), RuleConsolidator("near", 0.01)):
        for text in ("I moved to Berlin.", "I live in Paris.", "nothing like it"):
            decision = await rule.consolidate(text, NEIGHBOURS, {"k": 1})
            assert not isinstance(decision, Update), (rule, text, decision)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dedupe": "fuzzy"}, "dedupe is 'fuzzy'; expected 'exact' or 'near'"),
        ({"dedupe": None}, "dedupe is None; expected 'exact' or 'near'"),
        ({"near_threshold": 0}, "near_threshold is 0; expected a cosine similarity"),
        ({"near_threshold": 1.5}, "near_threshold is 1.5; expected a cosine similarity"),
        (
            {"near_threshold": True},
            "near_threshold is True; expected a cosine similarity in (0, 1]",
        ),
        ({"near_threshold": float("nan")}, "near_threshold is nan; expected a cosine similarity"),
    ],
)
def test_rule_consolidator_refuses_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        RuleConsolidator(**kwargs)
    assert message in str(info.value)


def test_rule_consolidator_is_a_consolidator() -> None:
    assert isinstance(RuleConsolidator(), Consolidator)
    assert RuleConsolidator("near", 0.9) == RuleConsolidator(dedupe="near", near_threshold=0.9)


# --- the decisions --------------------------------------------------------------------


def test_decisions_are_frozen_values_that_round_trip() -> None:
    decisions: list[Decision] = [Add(), Duplicate("m1"), Update(id="m2")]
    wire = msgspec.json.encode(decisions)
    assert json.loads(wire) == [
        {"type": "add"},
        {"type": "duplicate", "id": "m1"},
        {"type": "update", "id": "m2"},
    ]
    assert msgspec.json.decode(wire, type=list[Decision]) == decisions
    assert Duplicate("m1") != Update("m1")
    assert Add() == Add()
    with pytest.raises(AttributeError):
        Duplicate("m1").id = "m3"  # type: ignore[misc]


@pytest.mark.parametrize("kind", [Duplicate, Update])
@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_decision_names_a_memory(kind: type[Duplicate | Update], bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        kind(bad)  # type: ignore[arg-type]
    assert f"{kind.__name__}.id is {bad!r}" in str(info.value)
    assert "expected the non-empty id of a memory" in str(info.value)


# --- the judge's answer ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "decision"),
    [
        ('{"action": "add"}', Add()),
        (' \n{"action":"duplicate","id":1}\n', Duplicate("a")),
        ('{"action": "update", "id": 3}', Update("c")),
        ('{"action": "update", "id": "2"}', Update("b")),
        ('{"action": "duplicate", "id": "c"}', Duplicate("c")),
        ('{"action": "add", "id": 2}', Add()),
        ('{"action": "update", "id": 1, "reason": "moved"}', Update("a")),
    ],
)
def test_parse_answer_reads_the_strict_json(reply: str, decision: Decision) -> None:
    assert parse_answer(reply, NEIGHBOURS) == decision


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("add", "not the JSON answer asked for"),
        ('Sure! {"action": "add"}', "not the JSON answer asked for"),
        ('```json\n{"action": "add"}\n```', "not the JSON answer asked for"),
        ('{"action": "merge", "id": 1}', "not the JSON answer asked for"),
        ('{"id": 1}', "not the JSON answer asked for"),
        ('{"action": "update", "id": true}', "not the JSON answer asked for"),
        ('{"action": "update", "id": 1.5}', "not the JSON answer asked for"),
        ('[{"action": "add"}]', "not the JSON answer asked for"),
        ('{"action": "update"}', "action 'update' names no id"),
        ('{"action": "update", "id": null}', "action 'update' names no id"),
        ('{"action": "duplicate", "id": 4}', "id 4 is not one of the 3 listed"),
        ('{"action": "duplicate", "id": 0}', "id 0 is not one of the 3 listed"),
        ('{"action": "update", "id": "zz"}', "id 'zz' is not one of the listed memories"),
    ],
)
def test_parse_answer_refuses_anything_else(reply: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_answer(reply, NEIGHBOURS)


# --- the judge against a fake chat server ---------------------------------------------


class FakeChat:
    """A fake OpenAI-compatible chat server (stdlib, 127.0.0.1, port 0): each request
    gets the next scripted (status, content) pair, or ``hang`` holds it until closed."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str] | str] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length))
                with fake.lock:
                    fake.requests.append({"path": self.path, **payload})
                    step = fake.script.pop(0)
                if step == "hang":
                    fake.release.wait(30)
                    return
                status, content = step
                if status == 200:
                    body = json.dumps(
                        {"choices": [{"message": {"role": "assistant", "content": content}}]}
                    ).encode()
                else:
                    body = content.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat() -> Iterator[FakeChat]:
    fake = FakeChat()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.close()


async def test_the_judge_sends_a_short_prompt_and_reads_its_answer(chat: FakeChat) -> None:
    chat.script = [(200, '{"action": "update", "id": 2}'), (200, '{"action": "add"}')]
    with trio.fail_after(30):
        async with LlmConsolidator(chat.url, "small") as judge:
            assert isinstance(judge, Consolidator)
            changed = await judge.consolidate("My cat is called Tofu now.", NEIGHBOURS)
            fresh = await judge.consolidate("I play the oboe.", NEIGHBOURS)
    assert changed == Update("b")
    assert fresh == Add()
    sent = chat.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["model"] == "small"
    assert sent["temperature"] == 0.0
    assert sent["max_tokens"] == 32
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": "Stored memories:\n[1] I live in Paris.\n[2] My cat is called Miso.\n"
            "[3] I live in Paris\nNew memory: My cat is called Tofu now.",
        },
    ]


async def test_the_judge_is_not_asked_what_is_certain(chat: FakeChat) -> None:
    with trio.fail_after(30):
        judge = LlmConsolidator(chat.url, "small", response_format=None)
        assert await judge.consolidate("I live in Paris", NEIGHBOURS) == Duplicate("c")
        assert await judge.consolidate("anything", []) == Add()
        chat.script = [(200, '{"action": "add"}')]
        asked = LlmConsolidator(chat.url, "small", exact_first=False, response_format=None)
        assert await asked.consolidate("I live in Paris", NEIGHBOURS) == Add()
    assert len(chat.requests) == 1
    assert "response_format" not in chat.requests[0]


MALFORMED = [
    (200, "I think you should add it."),
    (200, '{"action": "update", "id": 9}'),
    (200, '{"action": "replace", "id": 1}'),
    (200, ""),
    (500, '{"error": "boom"}'),
    (200, '{"action": "update"}'),
]


@pytest.mark.parametrize("step", MALFORMED)
async def test_a_bad_answer_falls_back_to_the_rules(
    chat: FakeChat, step: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    # "I live in Paris. " is not the exact text of any neighbour, but it is within
    # the near rule's threshold of "a" (0.97): the fallback's decision is visible.
    chat.script = [step, step]
    fallback = RuleConsolidator(dedupe="near")
    with trio.fail_after(30), caplog.at_level(logging.WARNING, "trio_recall.consolidation"):
        judge = LlmConsolidator(chat.url, "small", fallback=fallback)
        assert await judge.consolidate("I live in Paris. ", NEIGHBOURS) == Duplicate("a")
        plain = LlmConsolidator(chat.url, "small")
        assert await plain.consolidate("I live in Paris. ", NEIGHBOURS) == Add()
    assert len(chat.requests) == 2
    assert [r.name for r in caplog.records] == ["trio_recall.consolidation"] * 2
    assert "consolidation judge failed" in caplog.records[0].getMessage()
    assert "fell back to Duplicate(id='a')" in caplog.records[0].getMessage()


@pytest.mark.parametrize("step", MALFORMED)
async def test_strict_raises_what_went_wrong(chat: FakeChat, step: tuple[int, str]) -> None:
    chat.script = [step]
    with trio.fail_after(30):
        judge = LlmConsolidator(chat.url, "small", strict=True)
        with pytest.raises(DispatchError) as info:
            await judge.consolidate("I live in Paris. ", NEIGHBOURS)
    assert info.value.endpoint == f"{chat.url}/v1/chat/completions"
    assert info.value.status == step[0]
    if step[0] == 200:
        assert "malformed" in info.value.message


async def test_a_refused_connection_and_a_timeout_fall_back(chat: FakeChat) -> None:
    port = chat.httpd.server_address[1]
    chat.close()  # nothing listens there now
    with trio.fail_after(30):
        judge = LlmConsolidator(f"http://127.0.0.1:{port}", "small")
        assert await judge.consolidate("I live in Paris", NEIGHBOURS[:2]) == Add()
        with pytest.raises(DispatchError) as info:
            await LlmConsolidator(f"http://127.0.0.1:{port}", "small", strict=True).ask(
                "x", NEIGHBOURS
            )
    assert info.value.status is None


async def test_a_timeout_falls_back() -> None:
    hanging = FakeChat()
    hanging.thread.start()
    try:
        hanging.script = ["hang", "hang"]
        with trio.fail_after(30):
            judge = LlmConsolidator(hanging.url, "small", timeout=0.2)
            assert await judge.consolidate("My cat is Miso.", NEIGHBOURS) == Add()
            strict = LlmConsolidator(hanging.url, "small", timeout=0.2, strict=True)
            with pytest.raises(DispatchTimeout):
                await strict.consolidate("My cat is Miso.", NEIGHBOURS)
    finally:
        hanging.close()


class Stubborn:
    """A fallback of the user's own: always an update of the first neighbour."""

    async def consolidate(
        self,
        text: str,
        neighbours: Sequence[ScoredDocument],
        metadata: Mapping[str, object] | None = None,
    ) -> Decision:
        first = neighbours[0].document.id
        assert first is not None
        return Update(first)


async def test_any_consolidator_is_a_fallback(chat: FakeChat) -> None:
    chat.script = [(200, "no")]
    with trio.fail_after(30):
        judge = LlmConsolidator(chat.url, "small", fallback=Stubborn())
        assert await judge.consolidate("x", NEIGHBOURS) == Update("a")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "localhost:8080"}, "base_url is 'localhost:8080'; expected an http://"),
        ({"model": ""}, "model is ''; expected a non-empty str"),
        ({"fallback": "rules"}, "fallback is a str; expected a Consolidator"),
        ({"max_tokens": 0}, "max_tokens is 0; expected an int > 0"),
        ({"strict": "yes"}, "strict is 'yes'; expected True or False"),
        ({"exact_first": 1}, "exact_first is 1; expected True or False"),
        ({"response_format": "json"}, "response_format is a str; expected a JSON object"),
        ({"timeout": -1}, "timeout is -1; expected a number of seconds > 0"),
    ],
)
def test_the_judge_refuses_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {"base_url": "http://127.0.0.1:9", "model": "m", **kwargs}
    with pytest.raises(ConfigError) as info:
        LlmConsolidator(**settings)
    assert message in str(info.value)


# --- through open_memory --------------------------------------------------------------

STORE = VectorStoreConfig(max_entries=32, dimensions=64, max_entry_bytes=2048)
NOTE = "my cat is called Miso"


class Scripted:
    """A consolidator of the user's own (a plain class): each call takes the next
    scripted step, a decision or a function of the neighbours, and logs what it saw."""

    def __init__(self, *steps: Decision | Callable[[Sequence[ScoredDocument]], object]) -> None:
        self.steps = list(steps)
        self.seen: list[tuple[str, list[str], Mapping[str, object] | None]] = []

    async def consolidate(
        self,
        text: str,
        neighbours: Sequence[ScoredDocument],
        metadata: Mapping[str, object] | None = None,
    ) -> Decision:
        self.seen.append((text, [h.document.text for h in neighbours], metadata))
        step = self.steps.pop(0)
        return step(neighbours) if callable(step) else step  # type: ignore[return-value]


def first(neighbours: Sequence[ScoredDocument]) -> str:
    held = neighbours[0].document.id
    assert held is not None
    return held


async def test_a_consolidator_of_your_own_decides_what_remember_does() -> None:
    judge = Scripted(
        Add(),
        lambda hits: Duplicate(first(hits)),
        lambda hits: Update(first(hits)),
    )
    assert isinstance(judge, Consolidator)
    with trio.fail_after(10):
        async with open_memory(store=STORE, consolidator=judge) as memory:
            added = await memory.remember(NOTE, metadata={"topic": "pets"})
            assert memory.usage().entries == 1
            again = await memory.remember("my cat's name is Miso")
            assert again == added
            assert memory.usage().entries == 1  # a duplicate writes nothing
            changed = await memory.remember("my cat is called Tofu", metadata={"v": 2})
            assert changed == added
            history = await memory.store.history(added, memory.config.namespace)
            current = await memory.store.get_by_ids([added], memory.config.namespace)
            report = await memory.retrieve("cat", k=5)
    assert judge.steps == []
    assert judge.seen == [
        (NOTE, [], {"topic": "pets"}),
        ("my cat's name is Miso", [NOTE], None),
        ("my cat is called Tofu", [NOTE], {"v": 2}),
    ]
    assert [(d.version, d.text, d.metadata) for d in history] == [
        (1, NOTE, {"topic": "pets"}),
        (2, "my cat is called Tofu", {"v": 2}),
    ]
    assert history[0].valid_to == history[1].valid_from
    assert history[1].supersedes == 1
    assert [d.text for d in current] == ["my cat is called Tofu"]
    assert [t.message.text() for t in report.turns] == ["my cat is called Tofu"]


async def test_the_rules_through_open_memory_keep_one_copy() -> None:
    with trio.fail_after(10):
        async with (
            open_store(STORE, HashingEmbedder(64)) as store,
            open_memory(
                store=store,
                memory=MemoryConfig(namespace="alice"),
                consolidator=RuleConsolidator(),
            ) as alice,
            open_memory(store=store, memory=MemoryConfig(namespace="bob")) as bob,
        ):
            first_id = await alice.remember(NOTE)
            assert await alice.remember(NOTE) == first_id
            other = await alice.remember("my cat is called Miso!")
            # Without a consolidator, a repeat is a memory of its own, as before.
            assert await bob.remember(NOTE) != await bob.remember(NOTE)
            # Bob's copies are in another namespace: Alice's consolidator never sees them.
            assert await alice.remember(NOTE) == first_id
            usage = store.usage()
    assert other != first_id
    assert usage.entries == 4


async def test_neighbours_are_the_five_nearest_current_memories_of_the_namespace() -> None:
    judge = Scripted(*[Add()] * 8)
    with trio.fail_after(10):
        async with open_memory(
            store=STORE, memory=MemoryConfig(namespace="n"), consolidator=judge
        ) as memory:
            for i in range(7):
                await memory.remember(f"fact number {i} about cats")
            await memory.store.store_turns([UnifiedMessage.user("fact about cats")], "elsewhere")
            await memory.remember("a fact about cats")
    text, neighbours, _ = judge.seen[-1]
    assert text == "a fact about cats"
    assert len(neighbours) == 5
    assert set(neighbours) <= {f"fact number {i} about cats" for i in range(7)}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda hits: "add", "the consolidator answered a str ('add'); expected Add()"),
        (lambda hits: None, "the consolidator answered a NoneType (None); expected Add()"),
        (
            lambda hits: Update("not-there"),
            "the consolidator answered Update(id='not-there'); expected the id of one of "
            "the 1 neighbours",
        ),
    ],
)
async def test_an_answer_that_is_not_a_decision_is_refused(
    answer: Callable[[Sequence[ScoredDocument]], object], message: str
) -> None:
    with trio.fail_after(10):
        async with open_memory(store=STORE, consolidator=Scripted(Add(), answer)) as memory:
            await memory.remember(NOTE)
            with pytest.raises(ConfigError) as info:
                await memory.remember("my cat is called Tofu")
            assert memory.usage().entries == 1
            (held,) = await memory.store.search(SearchRequest(query="cat", k=5))
    assert message in str(info.value)
    assert held.document.text == NOTE


async def test_a_consolidator_that_fails_stores_nothing() -> None:
    def boom(hits: Sequence[ScoredDocument]) -> object:
        raise RuntimeError("judge down")

    with trio.fail_after(10):
        async with open_memory(store=STORE, consolidator=Scripted(Add(), boom)) as memory:
            await memory.remember(NOTE)
            with pytest.raises(RuntimeError, match="judge down"):
                await memory.remember("something else")
            assert memory.usage().entries == 1


async def test_the_judge_through_open_memory_falls_back(chat: FakeChat) -> None:
    chat.script = [(200, "not json"), (200, '{"action": "update", "id": 1}')]
    with trio.fail_after(30):
        async with (
            LlmConsolidator(chat.url, "small") as judge,
            open_memory(store=STORE, consolidator=judge) as memory,
        ):
            held = await memory.remember(NOTE)  # no neighbours: the model is not asked
            assert await memory.remember(NOTE) == held  # the same text: not asked either
            fresh = await memory.remember("the key is under the blue pot")  # "not json"
            moved = await memory.remember("the key is under the red pot")
            history = await memory.store.history(fresh, memory.config.namespace)
    assert fresh != held
    assert len(chat.requests) == 2
    # The nearest neighbour of "the key is under the red pot" is the blue pot.
    assert "[1] the key is under the blue pot" in chat.requests[1]["messages"][1]["content"]
    assert moved == fresh
    assert [d.text for d in history] == [
        "the key is under the blue pot",
        "the key is under the red pot",
    ]


def test_open_memory_refuses_a_consolidator_that_is_not_one() -> None:
    with pytest.raises(ConfigError) as info:
        check_consolidator(RuleConsolidator.decide)
    assert "consolidator is a function; expected a Consolidator" in str(info.value)
    assert check_consolidator(None) is None


async def test_open_memory_checks_its_consolidator() -> None:
    with trio.fail_after(10), pytest.raises(ConfigError) as info:
        async with open_memory(store=STORE, consolidator="rules"):  # type: ignore[arg-type]
            pass
    assert "consolidator is a str; expected a Consolidator" in str(info.value)


HELD = ["my cat is called Miso", "the key is under the blue pot", "Sam prefers green tea"]
CANDIDATES = [
    "my cat is called Miso",
    "my cat is called  Miso",
    "My cat is called Miso",
    "my cat is called Miso!",
    "the key is under the red pot",
    "Sam prefers tea",
    "the train leaves at noon",
]


@pytest.mark.parametrize(
    ("dedupe", "threshold"), [("exact", None), ("near", None), ("near", 0.8), ("near", 0.6)]
)
async def test_the_rule_agrees_with_the_store_dedupe(
    dedupe: Literal["exact", "near"], threshold: float | None
) -> None:
    rule = (
        RuleConsolidator(dedupe)
        if threshold is None
        else RuleConsolidator(dedupe, near_threshold=threshold)
    )
    said: list[str | None] = []
    stored: list[str | None] = []
    with trio.fail_after(20):
        for text in CANDIDATES:
            async with open_store(STORE, HashingEmbedder(64)) as store:
                held = await store.store_turns(
                    [UnifiedMessage.user(t) for t in HELD], ids=["a", "b", "c"]
                )
                assert held.duplicates == []
                neighbours = await store.search(SearchRequest(query=text, k=5))
                decision = rule.decide(text, neighbours)
                said.append(decision.id if isinstance(decision, Duplicate) else None)
                written = await store.store_turns(
                    [UnifiedMessage.user(text)],
                    ids=["new"],
                    dedupe=dedupe,
                    near_threshold=threshold,
                )
                stored.append(written.duplicates[0] if written.duplicates else None)
    assert said == stored, (said, stored)
    # Neither side is vacuous: some candidates are duplicates, some are not.
    assert said[0] == "a"
    assert None in said


async def test_an_update_takes_the_time_and_expiry_remember_was_given() -> None:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    now = [start]

    def seconds(n: float) -> dt.datetime:
        return start + dt.timedelta(seconds=n)

    def update(hits: Sequence[ScoredDocument]) -> Decision:
        return Update(first(hits))

    judge = Scripted(Add(), update, update, update)
    with trio.fail_after(10):
        async with (
            open_store(STORE, HashingEmbedder(64), clock=lambda: now[0]) as store,
            open_memory(store=store, consolidator=judge) as memory,
        ):
            held = await memory.remember(NOTE, ttl=60)
            now[0] = seconds(10)
            # A ttl counts from the store's clock.
            assert await memory.remember("my cat is called Tofu", ttl=120) == held
            changed = await memory.remember(
                "my cat is called Pixel", occurred_at=seconds(20), expires_at=seconds(86400)
            )
            assert changed == held
            now[0] = seconds(30)
            # Neither given: the held memory's expiry is kept.
            assert await memory.remember("my cat is called Pixel now") == held
            history = await memory.history(held)
    assert [(d.version, d.valid_from, d.valid_to, d.expires_at) for d in history] == [
        (1, start, seconds(10), seconds(60)),
        (2, seconds(10), seconds(20), seconds(130)),
        (3, seconds(20), seconds(30), seconds(86400)),
        (4, seconds(30), None, seconds(86400)),
    ]


async def test_an_update_refuses_both_an_expiry_and_a_ttl() -> None:
    judge = Scripted(Add(), lambda hits: Update(first(hits)))
    with trio.fail_after(10):
        async with open_memory(store=STORE, consolidator=judge) as memory:
            held = await memory.remember(NOTE)
            with pytest.raises(ConfigError) as info:
                await memory.remember(
                    "my cat is called Tofu",
                    expires_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
                    ttl=5,
                )
            assert [d.text for d in await memory.history(held)] == [NOTE]
    assert "expected at most one of the two" in str(info.value)
