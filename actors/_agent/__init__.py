"""The agent pipeline: ``Memory`` and ``open_memory``, the compaction, recall and injection
actors, the dispatchers and the local model server."""
