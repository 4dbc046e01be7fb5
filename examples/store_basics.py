"""The store on its own: store a few turns, recall by text and by vector, read usage.

Run: uv run python examples/store_basics.py
"""

from __future__ import annotations

import trio

from actors import HashingEmbedder, open_store
from protocol import UnifiedMessage, VectorStoreConfig


async def main() -> None:
    config = VectorStoreConfig(
        max_entries=6, dimensions=256, max_entry_bytes=4096, warn_fraction=0.8
    )
    turns = [
        UnifiedMessage.user("My cat is called Miso and she hates the vacuum cleaner."),
        UnifiedMessage.assistant("Noted: Miso, the cat, dislikes the vacuum."),
        UnifiedMessage.user("The deploy key for staging lives in the ops vault."),
        UnifiedMessage.assistant("Understood, staging deploy key is in the ops vault."),
        UnifiedMessage.user("Book the dentist for Tuesday at 9."),
        UnifiedMessage.assistant("Dentist booked for Tuesday 9:00."),
        UnifiedMessage.user("Remind me what the cat is called?"),
    ]
    with trio.fail_after(10):
        async with open_store(config, HashingEmbedder(256)) as store:
            stored = await store.store_turns(turns, namespace="alice")
            print(
                f"stored {len(stored.ids)} turns, evicted {stored.evicted} "
                f"(capacity {store.capacity})"
            )
            report = await store.retrieve_in("alice", "what is my cat called", k=3)
            print(f"scanned {report.scanned} entries; best 3:")
            for hit in report.turns:
                text = hit.message.text()
                print(f"  [{hit.score:.4f}] seq={hit.sequence} {hit.message.role}: {text}")
            print("other namespace sees:", (await store.retrieve_in("bob", "cat", k=3)).turns)
            print(store.usage())


if __name__ == "__main__":
    trio.run(main)
