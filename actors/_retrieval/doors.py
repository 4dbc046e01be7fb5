"""The rules every door shares: the code of the public :mod:`actors.doors`, whose
docstring says what each rule is for.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from collections.abc import Iterator
from typing import cast

from protocol import ConfigError, SearchKind, parse_time
from protocol._checks import check_retriever_name
from protocol.checks import DEFAULT_MIN_SIMILARITY, check_time, shown

from .._store.events import CURRENT_RUN, new_run_id

#: The search modes a door offers, the default first (``SearchRequest.kind``'s values).
SEARCH_MODES = ("recall", "similarity", "bm25", "hybrid", "mmr")
#: What a door searches with when the caller names no mode: what ``Memory`` recalls with.
DEFAULT_MODE = "recall"
#: The modes whose scores are no cosine to hold a floor against (``SearchRequest``
#: refuses ``score_threshold`` for them).
FLOORLESS_MODES = ("bm25", "hybrid")


def check_mode(mode: object, *, what: str = "mode") -> SearchKind:
    """``mode`` if it is one of :data:`SEARCH_MODES`.

    Raises:
        ConfigError: anything else.
    """
    if not isinstance(mode, str) or mode not in SEARCH_MODES:
        raise ConfigError(f"{what} is {shown(mode)}; expected one of {', '.join(SEARCH_MODES)}")
    return cast(SearchKind, mode)


def candidate_depth(k: int) -> int:
    """``SearchRequest.fetch_k`` for a door's search of ``k`` hits: the request's default
    pool (20), at least ``k`` deep (``mmr`` chooses among that many, ``hybrid`` fuses
    lists that deep; ``recall`` reads its own depth from its settings)."""
    return max(k, 20)


def relevance_floor(mode: str, min_similarity: float | None) -> float | None:
    """The cosine floor a search in ``mode`` applies: ``min_similarity`` when given;
    else, for ``recall``, ``Memory``'s default (``MemoryConfig.min_similarity``, 0.02:
    a hit with no similarity at all is dropped), and for ``similarity`` and ``mmr``
    none (the k nearest, as LangChain's contract has it). ``bm25`` and ``hybrid`` take
    none: their scores are no cosine.

    Raises:
        ConfigError: ``min_similarity`` given for ``bm25`` or ``hybrid``.
    """
    if mode in FLOORLESS_MODES:
        if min_similarity is not None:
            ranks = "by keywords" if mode == "bm25" else "by fused keyword and dense ranks"
            raise ConfigError(
                f"min_similarity is {min_similarity!r} and mode is {mode!r}; a {mode} search "
                f"ranks {ranks}, not by cosine, and takes no floor: leave min_similarity "
                "out, or use mode 'recall', 'similarity' or 'mmr'"
            )
        return None
    if min_similarity is not None:
        return min_similarity
    return DEFAULT_MIN_SIMILARITY if mode == "recall" else None


def door_time(what: str, value: object, *, datetimes: bool = True) -> dt.datetime | None:
    """``value`` as an aware UTC datetime: None stays None; ISO 8601 text is read by
    :func:`protocol.parse_time` (a date, or a time without an offset, is UTC); an aware
    ``datetime`` is taken as it is when ``datetimes`` (a door whose callers are Python),
    and a naive one is refused (its zone would be a guess).

    Raises:
        ConfigError: anything else, naming ``what``.
    """
    if value is None:
        return None
    if isinstance(value, dt.datetime) and datetimes:
        return check_time(what, value)
    if not isinstance(value, str):
        expected = "ISO 8601 text or an aware datetime" if datetimes else "ISO 8601 text"
        raise ConfigError(
            f"{what} is {shown(value)} ({type(value).__name__}); expected {expected}, such "
            "as 2023-05-25 or 2023-05-25T13:14:00+00:00"
        )
    return parse_time(what, value)


def check_similarity(value: object, *, what: str = "min_similarity") -> float:
    """``value`` as a cosine similarity in [-1, 1].

    Raises:
        ConfigError: not a number (a bool is not one), or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{what} is {shown(value)} ({type(value).__name__}); expected a number in [-1, 1]"
        )
    number = float(value) if isinstance(value, float) or abs(value) < 2**53 else math.inf
    if not -1.0 <= number <= 1.0:
        raise ConfigError(f"{what} is {shown(value)}; expected a cosine similarity in [-1, 1]")
    return number


@contextlib.contextmanager
def named_run(name: str) -> Iterator[str]:
    """Name the store reads made inside the block: each one's ``vector_store.searched``
    event carries ``retriever=name`` and one fresh ``run_id``, which the block is given
    (``with named_run("mcp") as run_id: ...``), as ``Memory.retrieve`` names its reads
    by ``MemoryConfig.retriever_name``. A read outside any named run is a run of its
    own, named ``"store"``.

    The name holds in the current task and in the tasks it starts inside the block (a
    context variable: each trio task starts with a copy of its parent's); a door
    reached through another thread or loop names its run on the side that reads the
    store. Nested runs: the innermost names the reads.

    Raises:
        ConfigError: ``name`` is not a str of 1 to 128 printable characters.
    """
    check_retriever_name("name", name)
    run_id = new_run_id()
    token = CURRENT_RUN.set((name, run_id))
    try:
        yield run_id
    finally:
        CURRENT_RUN.reset(token)
