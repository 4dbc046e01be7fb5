"""A LangGraph agent whose long-term memory is trio-recall (docs/pages/tutorials/langgraph.md).

Offline: HashingEmbedder is a deterministic bag of words, so recall is lexical, and the
agent's reply is what it recalled (no model is called). Pass ``dsn=...`` to
``TrioRecallStore`` to keep the memories in PostgreSQL across runs.

    uv run --extra langgraph python examples/integrations/langgraph_agent.py
"""

from langgraph.graph import START, MessagesState, StateGraph
from langgraph.runtime import Runtime

from actors import HashingEmbedder
from actors.integrations.langgraph import TrioRecallStore


def agent(state: MessagesState, runtime: Runtime) -> dict:
    text, ns = state["messages"][-1].content, ("memories", "alice")
    recalled = [m.value["text"] for m in runtime.store.search(ns, query=text, limit=1)]
    runtime.store.put(ns, text, {"text": text})
    return {"messages": [("ai", f"I recall: {recalled}")]}


index = {"embed": HashingEmbedder(256).embed_batch, "dims": 256, "fields": ["text"]}
with TrioRecallStore(index=index) as store:  # dsn="postgresql://..." keeps them
    graph = StateGraph(MessagesState).add_node(agent).add_edge(START, "agent").compile(store=store)
    for text in ["My cat is called Miso", "I live in Lyon", "What is my cat called?"]:
        print(graph.invoke({"messages": [("user", text)]})["messages"][-1].content)
