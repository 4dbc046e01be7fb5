"""Adapters that let asyncio frameworks use a trio-recall store (docs/pages/tutorials/langchain.md,
"LangGraph").

Each adapter is its own module, imported only when asked for, so that ``import actors``
never imports LangChain: ``actors.integrations.langchain`` needs the ``langchain`` extra,
``actors.integrations.langgraph`` the ``langgraph`` extra.
Every adapter reaches its store through :class:`actors.integrations._bridge.TrioBridge`:
the store runs in a trio loop on a thread of its own, and sync callers block on it while
asyncio callers await it.
"""

__all__: list[str] = []
