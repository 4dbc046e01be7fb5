"""The hostile-input layer's calls and its invariant (see :mod:`._hostile` for the
strategies of single values).

:func:`hostile_store_calls` and :func:`hostile_memory_calls` draw whole calls on a store
handle or a memory, their arguments still to be built (building a ``Document``, a
``ToolCall`` or a ``SearchRequest`` validates, so it happens inside the checked call).
:func:`check_hostile_call` runs one and checks the invariant; :func:`run_hostile_calls`
runs a list; :func:`tolerate_expected_poison` wraps the ``open_*`` block.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Literal, final

import attrs
import msgspec
import numpy as np
import trio
from hypothesis import strategies as st

from protocol import (
    ContentBlock,
    Document,
    Poisoned,
    RetrievedTurn,
    SearchRequest,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    VectorStoreError,
)

from .. import Store
from ._hostile import (
    CALL_TIMEOUT,
    EmbedFault,
    FilterSpec,
    HostileEmbedder,
    HostileInputViolation,
    VectorSpec,
    _rarely,
    embed_faults,
    hostile_counts,
    hostile_filters,
    hostile_metadata,
    hostile_numbers,
    hostile_text,
    hostile_vectors,
)

__all__ = [
    "HostileCall",
    "MessageSpec",
    "check_hostile_call",
    "entry_bytes",
    "hostile_memory_calls",
    "hostile_store_calls",
    "run_hostile_calls",
    "tolerate_expected_poison",
]


# --- calls ------------------------------------------------------------------------------

Maker = Callable[[], tuple[tuple[object, ...], dict[str, object]]]


@final
@attrs.frozen(repr=False)
class HostileCall:
    """One call on a store or a memory, with its arguments still to be built.

    Attributes:
        method: the method name (``store_turns``, ``search``, ``turn``...).
        make: builds ``(args, kwargs)``; it runs inside the checked call, since building
            a ``Document``, a ``SearchRequest`` or a filter node validates.
        fault: the embedder fault armed during the call.
        label: what the call is, for reports (values truncated).
        writes: after a success, gives the caller-supplied entries it stored, as
            ``(bytes, label)`` lower bounds of their size (see :func:`entry_bytes`).
        expect_refusal: the contract says this call must raise (a vector of a kind
            the store must refuse), so success is a violation.
        decoded: ``make`` decodes wire data, so a ``msgspec.ValidationError`` or
            ``DecodeError`` from it is a refusal before any store call, not a violation
            (msgspec's JSON decoder refuses an escaped lone surrogate, for one).
    """

    method: str
    make: Maker
    fault: EmbedFault = attrs.field(factory=EmbedFault)
    label: str = ""
    writes: Callable[[], Sequence[tuple[int, str]]] | None = None
    expect_refusal: str | None = None
    decoded: bool = False
    #: after a success, given the result and a full read: what is wrong, or None.
    check_stored: Callable[[object, list[RetrievedTurn]], str | None] | None = None
    #: ``"store"`` (a handle's method; on a memory, ``memory.store``'s) or ``"memory"``.
    target: Literal["store", "memory"] = "store"

    def __repr__(self) -> str:
        fault = "" if self.fault.kind == "pass" else f", fault={self.fault}"
        return f"<{self.method}({self.label[:400]}){fault}>"


def _utf8(value: object) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return 0


def _json_bytes(value: object) -> int:
    """A lower bound of ``value``'s compact JSON length (0 if it is not JSON)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return 0
    return _utf8(text)


def entry_bytes(
    message: UnifiedMessage | None = None,
    *,
    text: object = None,
    metadata: object = None,
    source: object = None,
    entry_id: object = None,
    index_text: object = None,
) -> int:
    """A lower bound of what an entry must count against ``max_entry_bytes`` (design §3):
    the message's payload (every string of every block, tool arguments as compact
    JSON, the name and tool call id), a document's text, the metadata as compact JSON,
    the source, the id and the index text. The per-block overhead the store adds is not
    included, so an entry over the cap by this count must be refused."""
    size = _utf8(text) + _json_bytes(metadata) + _utf8(source) + _utf8(entry_id)
    size += _utf8(index_text)
    if message is not None:
        size += _utf8(message.name) + _utf8(message.tool_call_id)
        for block in message.content if isinstance(message.content, list) else ():
            if isinstance(block, Text | Thinking):
                size += _utf8(block.text)
            elif isinstance(block, ToolCall):
                size += _utf8(block.id) + _utf8(block.name) + _json_bytes(block.arguments)
            elif isinstance(block, ToolResult):
                size += _utf8(block.tool_call_id) + _utf8(block.output)
            else:
                for name in ("media_type", "data"):
                    size += _utf8(getattr(block, name, None))
    return size


@attrs.frozen(repr=False)
class MessageSpec:
    """A message described, not built (a ``ToolCall`` validates its arguments when
    built, so building happens inside the checked call)."""

    role: str
    blocks: tuple[tuple[str, tuple[object, ...]], ...]
    name: object = None

    def build(self) -> UnifiedMessage:
        content: list[ContentBlock] = []
        for kind, fields in self.blocks:
            if kind == "text":
                content.append(Text(text=fields[0]))  # type: ignore[arg-type]
            elif kind == "thinking":
                content.append(Thinking(text=fields[0]))  # type: ignore[arg-type]
            elif kind == "tool_call":
                call_id, name, arguments = fields
                content.append(ToolCall(id=call_id, name=name, arguments=arguments))  # type: ignore[arg-type]
            elif kind == "tool_result":
                content.append(ToolResult(tool_call_id="c1", output=fields[0]))  # type: ignore[arg-type]
            else:  # "empty": n empty Text blocks
                content.extend([Text(text="")] * int(fields[0]))  # type: ignore[call-overload]
        return UnifiedMessage(role=self.role, content=content, name=self.name)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        parts = []
        for kind, fields in self.blocks:
            parts.append(f"{kind}({', '.join(_short(f) for f in fields)})")
        return f"{self.role}[{'; '.join(parts)}]" + (
            f" name={_short(self.name)}" if self.name else ""
        )


def _message_specs(max_size: int = 3) -> st.SearchStrategy[list[MessageSpec]]:
    text = hostile_text()
    small = hostile_text(max_size=8, huge=False)
    block = st.one_of(
        st.tuples(st.just("text"), st.tuples(text)),
        st.tuples(st.just("text"), st.tuples(text)),
        st.tuples(st.just("thinking"), st.tuples(text)),
        st.tuples(
            st.just("tool_call"),
            st.tuples(small, small, st.one_of(hostile_metadata(), small)),
        ),
        st.tuples(st.just("tool_result"), st.tuples(text)),
        st.just(("text", ("",))),
    )
    blocks = st.one_of(
        st.lists(block, min_size=1, max_size=3).map(tuple),
        _rarely(
            st.lists(block, min_size=1, max_size=2).map(tuple),
            st.sampled_from([100, 10_000, 100_000]).map(lambda n: (("empty", (n,)),)),
        ),
    )
    message = st.builds(
        MessageSpec,
        role=st.sampled_from(["user", "assistant", "tool"]),
        blocks=blocks,
        name=st.one_of(st.none(), st.none(), small),
    )
    return st.lists(message, min_size=1, max_size=max_size)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:100]}...<{len(text)} chars>"


def _names() -> st.SearchStrategy[object]:
    return st.one_of(
        st.sampled_from(["memory-default", "alice"]),
        st.sampled_from(["", None, 3, b"ns", "\x00", "\ud83d"]),
        hostile_text(max_size=12, huge=False),
    )


def _ids() -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(hostile_text(max_size=12), max_size=3),
        st.sampled_from([["turn-0"], [], "turn-0", [None], [3], [""], ("turn-0",), None]),
    )


# One builder per store method; hostile_store_calls draws their arguments.


def _store_turns_call(
    specs: list[MessageSpec], ns: object, source: object, meta: object, ids: object,
    texts: object, fault: EmbedFault,
) -> HostileCall:  # fmt: skip
    kwargs: dict[str, object] = {"namespace": ns, "source": source, "metadata": meta}
    if ids is not None:
        kwargs["ids"] = ids
    if texts is not None:
        kwargs["texts"] = texts
    built: list[list[UnifiedMessage]] = []

    def make() -> tuple[tuple[object, ...], dict[str, object]]:
        built.append([spec.build() for spec in specs])
        return (built[-1],), kwargs

    def writes() -> list[tuple[int, str]]:
        out = []
        for i, turn in enumerate(built[-1]):
            entry_id = ids[i] if isinstance(ids, list) and i < len(ids) else None
            index = texts[i] if isinstance(texts, list) and i < len(texts) else None
            size = entry_bytes(
                turn, metadata=meta, source=source, entry_id=entry_id, index_text=index
            )
            out.append((size, f"turn {i}"))
        return out

    label = (
        f"{len(specs)} turns {_short(specs)}, namespace={_short(ns)}, "
        f"source={_short(source)}, metadata={_short(meta)}, ids={_short(ids)}, "
        f"texts={_short(texts)}"
    )
    return HostileCall(
        "store_turns",
        make,
        fault,
        label,
        writes,
        check_stored=lambda result, listing: _turns_round_trip(built[-1], ns, result, listing),
    )


def _add_documents_call(
    docs: list[tuple[object, object, object, object]], ns: object, fault: EmbedFault
) -> HostileCall:
    def make() -> tuple[tuple[object, ...], dict[str, object]]:
        built = [
            Document(text=t, id=i, metadata=m, source_id=s)  # type: ignore[arg-type]
            for t, i, m, s in docs
        ]
        return (built,), {"namespace": ns}

    def writes() -> list[tuple[int, str]]:
        return [
            (entry_bytes(text=t, metadata=m, source=s, entry_id=i), f"document {n}")
            for n, (t, i, m, s) in enumerate(docs)
        ]

    return HostileCall(
        "add_documents", make, fault, f"{_short(docs)}, namespace={_short(ns)}", writes
    )


def _retrieve_call(query: object, k: object, fault: EmbedFault) -> HostileCall:
    return HostileCall("retrieve", lambda: ((query, k), {}), fault, f"{_short(query)}, k={k!r}")


def _retrieve_in_call(ns: object, query: object, k: object, fault: EmbedFault) -> HostileCall:
    return HostileCall(
        "retrieve_in", lambda: ((ns, query, k), {}), fault,
        f"{_short(ns)}, {_short(query)}, k={k!r}",
    )  # fmt: skip


def _retrieve_embedding_call(vector: VectorSpec, k: object, ns: object) -> HostileCall:
    return HostileCall(
        "retrieve_embedding",
        lambda: ((vector.build(), k), {"namespace": ns}),
        EmbedFault(),
        f"{vector.kind} vector, k={k!r}, namespace={_short(ns)}",
        expect_refusal=f"a {vector.kind} vector" if vector.must_refuse else None,
    )


def _search_call(
    kind: str, query: object, vector: VectorSpec | None, k: object, fetch_k: object,
    threshold: object, filter_: FilterSpec | None, ns: object, wire: bool,
    fault: EmbedFault,
) -> HostileCall:  # fmt: skip
    def make() -> tuple[tuple[object, ...], dict[str, object]]:
        if wire and filter_ is not None:
            body = (
                b'{"query":' + json.dumps(query if isinstance(query, str) else "q").encode()
                + b',"kind":' + msgspec.json.encode(kind)
                + b',"k":' + (str(k).encode() if type(k) is int else b"3")
                + b',"filter":' + filter_.json_node() + b"}"
            )  # fmt: skip
            return (msgspec.json.decode(body, type=SearchRequest),), {}
        request = SearchRequest(
            query=query,  # type: ignore[arg-type]
            vector=None if vector is None else vector.build(),  # type: ignore[arg-type]
            k=k,  # type: ignore[arg-type]
            kind=kind,  # type: ignore[arg-type]
            fetch_k=fetch_k,  # type: ignore[arg-type]
            score_threshold=threshold,  # type: ignore[arg-type]
            filter=None if filter_ is None else filter_.build(),  # type: ignore[arg-type]
            namespace=ns,  # type: ignore[arg-type]
        )
        return (request,), {}

    refusal = None
    if vector is not None and vector.must_refuse and not wire:
        refusal = f"a {vector.kind} vector"
    label = (
        f"{kind}, query={_short(query)}, vector={vector and vector.kind}, k={k!r}, "
        f"fetch_k={fetch_k!r}, threshold={threshold!r}, filter={filter_!r}, "
        f"namespace={_short(ns)}, wire={wire}"
    )
    return HostileCall("search", make, fault, label, expect_refusal=refusal, decoded=wire)


def _get_by_ids_call(ids: object, ns: object) -> HostileCall:
    return HostileCall(
        "get_by_ids", lambda: ((ids,), {"namespace": ns}), EmbedFault(),
        f"{_short(ids)}, namespace={_short(ns)}",
    )  # fmt: skip


def _delete_call(ids: object, ns: object) -> HostileCall:
    return HostileCall(
        "delete", lambda: ((ids,), {"namespace": ns}), EmbedFault(),
        f"{_short(ids)}, namespace={_short(ns)}",
    )  # fmt: skip


def hostile_store_calls(dimensions: int) -> st.SearchStrategy[HostileCall]:
    """Calls on a store handle (either backend) with hostile arguments: ``store_turns``,
    ``add_documents``, ``retrieve``, ``retrieve_in``, ``retrieve_embedding``,
    ``search``, ``get_by_ids`` and ``delete``, each with an embedder fault armed."""
    faults = embed_faults()
    metadata = st.one_of(st.none(), hostile_metadata())

    text = hostile_text()
    queries = st.one_of(text, st.sampled_from([None, 3, b"q", ["q"]]))
    counts = hostile_counts()
    optional_names = st.one_of(st.none(), _names())
    return st.one_of(
        st.builds(
            _store_turns_call,
            _message_specs(),
            st.one_of(st.just("memory-default"), _names()),
            st.one_of(st.just("offload"), _names()),
            metadata,
            st.one_of(st.none(), _ids()),
            st.one_of(st.none(), st.lists(text, min_size=1, max_size=3), st.just("t")),
            faults,
        ),
        st.builds(
            _add_documents_call,
            st.lists(
                st.tuples(
                    st.one_of(text, st.sampled_from([None, 3, b"doc"])),
                    st.one_of(st.none(), hostile_text(max_size=12)),
                    st.one_of(st.none(), hostile_metadata()),
                    st.one_of(st.none(), hostile_text(max_size=12)),
                ),
                min_size=1,
                max_size=3,
            ),
            optional_names,
            faults,
        ),
        st.builds(_retrieve_call, queries, counts, faults),
        st.builds(_retrieve_in_call, _names(), queries, counts, faults),
        st.builds(_retrieve_embedding_call, hostile_vectors(dimensions), counts, optional_names),
        st.builds(
            _search_call,
            st.sampled_from(["similarity", "mmr", "hybrid", "other"]),
            queries,
            st.one_of(st.none(), hostile_vectors(dimensions)),
            counts,
            st.one_of(st.just(20), counts),
            st.one_of(st.none(), st.none(), hostile_numbers()),
            st.one_of(st.none(), hostile_filters()),
            optional_names,
            st.booleans(),
            faults,
        ),
        st.builds(_get_by_ids_call, _ids(), optional_names),
        st.builds(_delete_call, _ids(), optional_names),
    )


def hostile_memory_calls(*, interrupts: bool = False) -> st.SearchStrategy[HostileCall]:
    """Calls on a :class:`~actors.Memory`: ``remember``, ``retrieve``, ``compress`` and
    ``turn`` with hostile text, metadata, numbers and embedder faults."""
    faults = embed_faults(interrupts=interrupts)

    def remember(content: object, source: object, meta: object, fault: EmbedFault) -> HostileCall:
        def writes() -> list[tuple[int, str]]:
            message = UnifiedMessage.user(content) if isinstance(content, str) else None
            # The 16-hex id counts too.
            return [(entry_bytes(message, metadata=meta, source=source) + 16, "the memory")]

        return HostileCall(
            "remember",
            lambda: ((content,), {"source": source, "metadata": meta}),
            fault,
            f"{_short(content)}, source={_short(source)}, metadata={_short(meta)}",
            writes,
            target="memory",
        )

    def retrieve(
        query: object, k: object, ns: object, low: object, fault: EmbedFault
    ) -> HostileCall:
        return HostileCall(
            "retrieve",
            lambda: ((query,), {"k": k, "namespace": ns, "min_similarity": low}),
            fault,
            f"{_short(query)}, k={k!r}, namespace={_short(ns)}, min_similarity={low!r}",
            target="memory",
        )

    def conversation(specs: list[MessageSpec], text: object) -> list[UnifiedMessage]:
        messages = [spec.build() for spec in specs]
        return [UnifiedMessage.system("sys"), *messages, UnifiedMessage.user(text)]  # type: ignore[arg-type]

    def compress(specs: list[MessageSpec], text: object, fault: EmbedFault) -> HostileCall:
        return HostileCall(
            "compress",
            lambda: ((conversation(specs, text),), {}),
            fault,
            f"{_short(specs)} then user {_short(text)}",
            target="memory",
        )

    def turn(specs: list[MessageSpec], text: object, fault: EmbedFault) -> HostileCall:
        def make() -> tuple[tuple[object, ...], dict[str, object]]:
            return (UnifiedRequest(model="m", messages=conversation(specs, text)),), {}

        label = f"{_short(specs)} then user {_short(text)}"
        return HostileCall("turn", make, fault, label, target="memory")

    specs = _message_specs(max_size=5)
    return st.one_of(
        st.builds(
            remember,
            st.one_of(hostile_text(), st.sampled_from([None, 3, b"x"])),
            st.one_of(st.just("explicit"), _names()),
            st.one_of(st.none(), hostile_metadata()),
            faults,
        ),
        st.builds(
            retrieve,
            st.one_of(hostile_text(), st.sampled_from([None, 3])),
            st.one_of(st.none(), hostile_counts()),
            st.one_of(st.none(), _names()),
            st.one_of(st.none(), hostile_numbers()),
            faults,
        ),
        st.builds(compress, specs, hostile_text(), faults),
        st.builds(turn, specs, hostile_text(), faults),
    )


# --- the invariant ----------------------------------------------------------------------


def _turns_round_trip(
    turns: list[UnifiedMessage], ns: object, result: object, listing: list[RetrievedTurn]
) -> str | None:
    """What went wrong returning the stored turns, or None."""
    ids = getattr(result, "ids", None)
    if ids is None:
        return f"returned {result!r:.200}; expected TurnsStored"
    # ns is the namespace as the hostile call gave it, of any type.
    by_id: dict[tuple[object, object], UnifiedMessage] = {
        (h.namespace, h.id): h.message for h in listing
    }
    survivors = turns[len(turns) - len(ids) :]
    for turn, entry_id in zip(survivors, ids, strict=True):
        got = by_id.get((ns, entry_id))
        if got is None:
            continue  # evicted by a later turn of the same batch (capacity)
        if got != turn:
            return f"stored {turn!r:.200} but a read returned {got!r:.200}"
    return None


def _store_of(subject: object) -> Store:
    inner = getattr(subject, "store", None)
    store = subject if inner is None or not hasattr(subject, "turn") else inner
    if not isinstance(store, Store):
        raise TypeError(
            f"the subject is a {type(subject).__name__}; expected a store handle or a memory"
        )
    return store


async def _snapshot(store: Store) -> tuple[str, list[RetrievedTurn]]:
    """``usage()`` and every entry, as a comparable text, and the entries."""
    refresh = getattr(store, "refresh", None)
    usage = await refresh() if refresh is not None else store.usage()
    listing = await store.retrieve_embedding(
        np.zeros(store.config.dimensions, dtype=np.float32), store.capacity
    )
    turns = list(listing.turns)
    rows = [(h.sequence, h.namespace, h.id, h.source, h.message, h.metadata) for h in turns]
    return repr((usage, sorted(rows, key=lambda r: r[0]))), turns


def _chain(error: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


async def check_hostile_call(
    subject: object,
    call: HostileCall,
    embedder: HostileEmbedder,
    *,
    max_entry_bytes: int,
    call_timeout: float = CALL_TIMEOUT,
) -> str:
    """Run ``call`` on ``subject`` (a store handle or a memory) and check the invariant.

    Returns:
        ``"ok"`` (it succeeded), ``"refused"`` (a ``VectorStoreError`` and nothing
        changed), ``"poisoned"`` (by a ``BaseException`` the embedder raised, as the
        contract says; the store is unusable from here on) or ``"interrupted"`` (the
        embedder's ``KeyboardInterrupt``/``SystemExit`` propagated as itself).

    Raises:
        HostileInputViolation: the call broke the invariant; the message says how.
    """
    store = _store_of(subject)
    before, _ = await _snapshot(store)
    embedder.raised = None
    owner = subject if call.target == "memory" else store
    refused, result, error, timed_out = await _invoke(
        getattr(owner, call.method), call, embedder, call_timeout
    )
    if refused:
        return "refused"
    what = f"{type(owner).__name__}.{call.method} {call!r}"
    if timed_out:
        raise HostileInputViolation(f"{what} did not finish within {call_timeout} s (a hang)")
    injected = embedder.raised
    verdict = _judge_raised(what, call, error, injected)
    if verdict is not None:
        return verdict
    try:
        after, listing = await _snapshot(store)
    except Poisoned as poisoned:
        if call.fault.kind == "base_exception" and injected in _chain(poisoned):
            # The crash the contract asks for, reported by a call that does not raise
            # it (compress keeps a failed offload in report.last_error).
            return "poisoned"
        raise HostileInputViolation(f"{what} left the store poisoned") from poisoned
    if error is not None:
        if after != before:
            raise HostileInputViolation(
                f"{what} raised {error!r:.200} but changed the store:\n  before "
                f"{before[:600]}\n  after  {after[:600]}"
            ) from error
        return "refused"
    _judge_accepted(what, call, injected, result, listing, max_entry_bytes)
    return "ok"


async def _invoke(
    method: Callable[..., Awaitable[object]],
    call: HostileCall,
    embedder: HostileEmbedder,
    call_timeout: float,
) -> tuple[bool, object, BaseException | None, bool]:
    """Run ``call`` with its embedder fault armed, and catch whatever it raises but
    ``Cancelled``: ``(refused_when_decoded, result, error, timed_out)``."""
    error: BaseException | None = None
    result: object = None
    timed_out = False
    embedder.arm(call.fault)
    try:
        with trio.move_on_after(call_timeout) as scope:
            try:
                args, kwargs = call.make()
            except (msgspec.ValidationError, msgspec.DecodeError):
                if not call.decoded:
                    raise
                return True, None, None, False
            result = await method(*args, **kwargs)
        timed_out = scope.cancelled_caught
    except (KeyboardInterrupt, SystemExit) as caught:
        error = caught
    except Exception as caught:  # judged by the caller
        error = caught
    except BaseException as caught:
        if isinstance(caught, trio.Cancelled):
            raise
        error = caught
    finally:
        embedder.disarm()
    return False, result, error, timed_out


def _judge_raised(
    what: str, call: HostileCall, error: BaseException | None, injected: BaseException | None
) -> str | None:
    """The verdict on what the call raised: ``"interrupted"`` or ``"poisoned"`` when
    that is the contract's answer, None to go on and compare the store."""
    if isinstance(error, KeyboardInterrupt | SystemExit):
        if injected is error:
            return "interrupted"
        raise HostileInputViolation(f"{what} raised {error!r} the embedder did not raise")
    if isinstance(error, BaseExceptionGroup):
        raise HostileInputViolation(f"{what} raised a group: {error!r:.300}") from error
    if isinstance(error, Poisoned):
        if injected is not None and call.fault.kind == "base_exception":
            if injected in _chain(error):
                return "poisoned"
            raise HostileInputViolation(
                f"{what} poisoned the store, but not with the embedder's {injected!r} "
                f"as its cause: {error!r}"
            ) from error
        raise HostileInputViolation(f"{what} poisoned the store (input must never)") from error
    if error is not None and not isinstance(error, VectorStoreError):
        if call.fault.kind == "base_exception" and error is injected:
            raise HostileInputViolation(
                f"{what} let the embedder's {error!r} escape; expected Poisoned with it "
                "as the cause"
            ) from error
        raise HostileInputViolation(
            f"{what} raised {type(error).__name__}: {error!s:.300}; expected success or "
            "a VectorStoreError"
        ) from error
    return None


def _judge_accepted(
    what: str,
    call: HostileCall,
    injected: BaseException | None,
    result: object,
    listing: list[RetrievedTurn],
    max_entry_bytes: int,
) -> None:
    """Check a call that succeeded: it must not have hidden an embedder crash, accepted
    what must be refused, stored more than the cap, or stored other than it was given."""
    if call.fault.kind == "base_exception" and injected is not None:
        raise HostileInputViolation(
            f"{what} succeeded though the embedder raised {injected!r}; expected Poisoned"
        )
    if call.expect_refusal is not None:
        raise HostileInputViolation(
            f"{what} accepted {call.expect_refusal}; the contract says refuse it "
            "(real floating or integer dtypes only, 1-D, of the store's width, finite)"
        )
    for size, which in call.writes() if call.writes is not None else ():
        if size > max_entry_bytes:
            raise HostileInputViolation(
                f"{what} stored {which} of at least {size} caller-supplied bytes; "
                f"max_entry_bytes is {max_entry_bytes}, so EntryTooLarge was expected"
            )
    if call.check_stored is not None:
        problem = call.check_stored(result, listing)
        if problem is not None:
            raise HostileInputViolation(f"{what}: {problem}")


async def run_hostile_calls(
    subject: object,
    calls: Sequence[HostileCall],
    embedder: HostileEmbedder,
    *,
    call_timeout: float = CALL_TIMEOUT,
) -> list[str]:
    """Check each call in turn (see :func:`check_hostile_call`); stop after a call that
    poisoned the store or was interrupted as the contract says. Returns the outcomes."""
    max_entry_bytes = _store_of(subject).config.max_entry_bytes
    outcomes = []
    for call in calls:
        outcome = await check_hostile_call(
            subject, call, embedder, max_entry_bytes=max_entry_bytes, call_timeout=call_timeout
        )
        outcomes.append(outcome)
        if outcome in ("poisoned", "interrupted"):
            break
    return outcomes


@asynccontextmanager
async def tolerate_expected_poison(embedder: HostileEmbedder) -> AsyncIterator[None]:
    """Wrap an ``open_*`` block: a ``Poisoned`` it raises on exit is tolerated when the
    embedder raised a ``BaseException`` (the contract's crash), and so is the
    embedder's own ``KeyboardInterrupt``/``SystemExit``. A ``BaseExceptionGroup`` is
    never tolerated."""
    try:
        yield
    except Poisoned as error:
        injected = embedder.raised
        if injected is None or isinstance(injected, Exception) or injected not in _chain(error):
            raise
    except (KeyboardInterrupt, SystemExit) as error:
        if error is not embedder.raised:
            raise
