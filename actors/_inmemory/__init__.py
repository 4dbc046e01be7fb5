"""The in-memory backend: the arena, the scan, BLAS control, metadata filters,
conversations, the sparse index, its engine view, its actor and ``open_store``."""
