"""What every door into the store shares: the MCP server, the command line and the
LangChain and LangGraph adapters (docs/pages/reference/mcp.md, docs/pages/reference/cli.md,
docs/pages/tutorials/langchain.md and langgraph.md), and a door of your own.

A *door* is code that lets someone outside Python reach a store (a tool server, a
command, a framework's retriever). Write yours with these rules and it searches, floors
and reads times exactly as trio-recall's own doors do; the checks and encodings a door
applies to what it is given (ints, JSON, conversations, sizes) are in
:mod:`protocol.checks`.

Each door searches the way ``Memory.retrieve`` does unless told otherwise: the store's
``recall`` search (``SearchRequest(kind="recall")``: hybrid BM25 and dense lists,
speaker focus, the time channel, entity links and the neighbour boost), with the same
relevance floor. The other search kinds stay available by name. One function decides
each rule, so no door can drift from the others:

- :data:`SEARCH_MODES` and :data:`DEFAULT_MODE`: the modes a door offers, and
  :func:`check_mode`, which refuses any other;
- :func:`relevance_floor`: which cosine floor a mode applies by default
  (``protocol.checks.DEFAULT_MIN_SIMILARITY`` for recall), and which modes take none;
  :func:`check_similarity` checks a floor given at a door;
- :func:`candidate_depth`: how deep a door's search of ``k`` hits reads;
- :func:`door_time`: a time given at a door (ISO 8601 text, or an aware datetime where
  the door is Python) as the aware UTC datetime the store keeps;
- :func:`named_run`: the retriever name and run id its reads carry in their
  ``vector_store.searched`` events (``"mcp"``, ``"cli"``, ``"langchain"``,
  ``"langgraph"`` for trio-recall's own doors; a read in no named run is ``"store"``).
"""

from protocol._public import fixup_module_metadata as _fixup_module_metadata

from ._retrieval.doors import DEFAULT_MODE as DEFAULT_MODE
from ._retrieval.doors import FLOORLESS_MODES as FLOORLESS_MODES
from ._retrieval.doors import SEARCH_MODES as SEARCH_MODES
from ._retrieval.doors import candidate_depth as candidate_depth
from ._retrieval.doors import check_mode as check_mode
from ._retrieval.doors import check_similarity as check_similarity
from ._retrieval.doors import door_time as door_time
from ._retrieval.doors import named_run as named_run
from ._retrieval.doors import relevance_floor as relevance_floor

__all__ = [
    "DEFAULT_MODE",
    "FLOORLESS_MODES",
    "SEARCH_MODES",
    "candidate_depth",
    "check_mode",
    "check_similarity",
    "door_time",
    "named_run",
    "relevance_floor",
]

_fixup_module_metadata(__name__, globals(), __all__)
