"""Reference computations the conformance suites check stores against.

- :func:`mmr_reference`: maximal marginal relevance by brute force in float64;
- :func:`check_namespace_walk`: the namespace-isolation property, a random walk of
  upserts, deletes and clears over namespaces that share ids and texts, checked after
  every step through every read (``get_by_ids``, each search kind, ``retrieve_in``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from protocol import Document, SearchRequest

from ._conformance_base import StoreUnderTest

__all__ = ["check_namespace_walk", "mmr_reference"]

SPACES = ("a", "b", "c")
QUERIES = ("apple", "secret", "doc 3", "zzz", "kiwi lime")
IDS = 6
_IDS = [f"doc-{i}" for i in range(IDS)]
_Kind = Literal["similarity", "mmr", "hybrid"]
KINDS: tuple[_Kind, ...] = ("similarity", "mmr", "hybrid")


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n else v


def mmr_reference(
    vectors: Sequence[npt.ArrayLike],
    query: npt.ArrayLike,
    *,
    k: int,
    fetch_k: int,
    lambda_mult: float,
) -> list[int]:
    """The indices MMR picks from ``vectors`` (oldest first) for ``query``.

    Candidates are the ``fetch_k`` nearest by cosine, ties newest first; each step
    picks the candidate maximizing ``lambda_mult * relevance - (1 - lambda_mult) *
    redundancy`` (redundancy: the highest cosine to an earlier pick), ties going to
    the better-ranked candidate.
    """
    rows = [_unit(np.asarray(v, dtype=np.float64)) for v in vectors]
    q = _unit(np.asarray(query, dtype=np.float64))
    order = sorted(range(len(rows)), key=lambda i: (-float(rows[i] @ q), -i))[:fetch_k]
    chosen: list[int] = []
    while len(chosen) < min(k, len(order)):

        def value(i: int) -> float:
            redundancy = max((float(rows[i] @ rows[j]) for j in chosen), default=0.0)
            return lambda_mult * float(rows[i] @ q) - (1.0 - lambda_mult) * redundancy

        best = max(
            (i for i in order if i not in chosen), key=lambda i: (value(i), -order.index(i))
        )
        chosen.append(best)
    return chosen


async def check_namespace_walk(
    store: StoreUnderTest, rng: random.Random, *, steps: int, evicting: bool
) -> None:
    """Apply ``steps`` random operations to ``store``, which must be empty, and check
    that no read in one namespace ever sees another's documents: a fifth of the steps
    are a search (of a random kind), ``get_by_ids`` runs in every namespace after every
    step, and at the end every read (``get_by_ids``, each search kind, ``retrieve_in``) in every
    namespace.

    Every namespace uses the same ids and the same texts: only the namespace (and the
    ``owner`` metadata) differs. When the store has room for everything (``evicting``
    false), each read must return exactly what the model holds; when it evicts, what a
    read returns must be in the model, with the model's text.
    """
    assert store.is_empty()
    model: dict[str, dict[str, str]] = {s: {} for s in SPACES}
    for _ in range(steps):
        space = rng.choice(SPACES)
        i = rng.randrange(IDS)
        op = rng.random()
        if op < 0.45:
            text = f"doc {i} apple secret {rng.choice(['kiwi', 'lime'])}"
            doc = Document(id=_IDS[i], text=text, metadata={"owner": space})
            await store.upsert([doc], namespace=space)
            model[space][_IDS[i]] = text
        elif op < 0.7:
            result = await store.delete([_IDS[i]], namespace=space)
            if evicting:
                assert not result.deleted or _IDS[i] in model[space]
            else:
                assert (_IDS[i] in result.deleted) == (_IDS[i] in model[space])
            model[space].pop(_IDS[i], None)
        elif op < 0.8:
            await store.clear(space)
            model[space] = {}
        else:
            kind = rng.choice(KINDS)
            seen = await _search(store, space, rng.choice(QUERIES), kind)
            _agree(seen, model[space], evicting, space, kind)
        for s in SPACES:
            _agree(await _get_all(store, s), model[s], evicting, s, "get_by_ids")
    query = rng.choice(QUERIES)
    for s in SPACES:
        _agree(await _get_all(store, s), model[s], evicting, s, "get_by_ids")
        for kind in KINDS:
            _agree(await _search(store, s, query, kind), model[s], evicting, s, kind)
        report = await store.retrieve_in(s, query, IDS)
        for t in report.turns:
            assert t.namespace == s, (s, t)
            assert t.metadata["owner"] == s, (s, t)
        seen = {t.id: t.message.text() for t in report.turns}
        _agree(seen, model[s], evicting, s, "retrieve_in")


async def _get_all(store: StoreUnderTest, space: str) -> dict[str, str]:
    got = await store.get_by_ids(_IDS, namespace=space)
    for d in got:
        assert d.metadata["owner"] == space, (space, d)
    return {d.id or "": d.text for d in got}


async def _search(store: StoreUnderTest, space: str, query: str, kind: _Kind) -> dict[str, str]:
    request = SearchRequest(query=query, k=IDS, kind=kind, fetch_k=IDS, namespace=space)
    hits = await store.search(request)
    for h in hits:
        assert h.document.metadata["owner"] == space, (space, kind, h)
    return {h.document.id or "": h.document.text for h in hits}


def _agree(
    seen: dict[str, str], expected: dict[str, str], evicting: bool, space: str, read: str
) -> None:
    if evicting:
        assert seen.items() <= expected.items(), (space, read, seen, expected)
    else:
        assert seen == expected, (space, read, seen, expected)
