"""The hostile-input layer: strategies for inputs no caller should send, and the
invariant a store (or a :class:`~actors.Memory`) must keep whatever it is sent.

- Strategies of single values: :func:`hostile_text`, :func:`hostile_numbers`,
  :func:`hostile_metadata`, :func:`hostile_filters`, :func:`hostile_vectors`, and
  :func:`embed_faults` (what a :class:`HostileEmbedder` does on its next call).
- Strategies of whole calls: :func:`hostile_store_calls` (on a store handle) and
  :func:`hostile_memory_calls` (on a memory), each a :class:`HostileCall`.
- The invariant: :func:`check_hostile_call` runs one call and checks it,
  :func:`run_hostile_calls` runs a list, :func:`tolerate_expected_poison` wraps the
  ``open_*`` block; a breach raises :class:`HostileInputViolation`.
  :func:`entry_bytes` is the lower bound of an entry's size the invariant checks
  ``max_entry_bytes`` against; :class:`HostileBaseException` is the ``BaseException``
  a fault raises.

To check your own store::

    from hypothesis import given, strategies as st
    from actors import HashingEmbedder
    from actors.testing.hostile import (
        HostileEmbedder, hostile_store_calls, run_hostile_calls, tolerate_expected_poison,
    )

    @given(calls=st.lists(hostile_store_calls(dimensions=8), max_size=4))
    async def test_my_store_survives_hostile_input(calls):
        embedder = HostileEmbedder(HashingEmbedder(8))
        config = VectorStoreConfig(max_entries=8, dimensions=8, max_entry_bytes=512)
        with trio.fail_after(60):
            async with tolerate_expected_poison(embedder), my_store(config, embedder) as s:
                await run_hostile_calls(s, calls, embedder)
"""

from ._hostile import EmbedFault as EmbedFault
from ._hostile import HostileBaseException as HostileBaseException
from ._hostile import HostileEmbedder as HostileEmbedder
from ._hostile import HostileInputViolation as HostileInputViolation
from ._hostile import embed_faults as embed_faults
from ._hostile import hostile_filters as hostile_filters
from ._hostile import hostile_metadata as hostile_metadata
from ._hostile import hostile_numbers as hostile_numbers
from ._hostile import hostile_text as hostile_text
from ._hostile import hostile_vectors as hostile_vectors
from ._hostile_calls import HostileCall as HostileCall
from ._hostile_calls import check_hostile_call as check_hostile_call
from ._hostile_calls import entry_bytes as entry_bytes
from ._hostile_calls import hostile_memory_calls as hostile_memory_calls
from ._hostile_calls import hostile_store_calls as hostile_store_calls
from ._hostile_calls import run_hostile_calls as run_hostile_calls
from ._hostile_calls import tolerate_expected_poison as tolerate_expected_poison

__all__ = [
    "EmbedFault",
    "HostileBaseException",
    "HostileCall",
    "HostileEmbedder",
    "HostileInputViolation",
    "check_hostile_call",
    "embed_faults",
    "entry_bytes",
    "hostile_filters",
    "hostile_memory_calls",
    "hostile_metadata",
    "hostile_numbers",
    "hostile_store_calls",
    "hostile_text",
    "hostile_vectors",
    "run_hostile_calls",
    "tolerate_expected_poison",
]
