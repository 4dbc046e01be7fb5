"""Embedders: the protocols and the one adapter, hashing, MiniLM (numpy and ONNX), OpenAI-
compatible, sentence-transformers, sparse models, the cache and usage records."""
