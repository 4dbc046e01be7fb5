"""The hashing embedder: a deterministic bag of words over FNV-1a buckets, for tests and
the offline default."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

from protocol._checks import check_int

__all__ = ["HashingEmbedder", "fnv1a_64"]

_TOKEN = re.compile(rb"[A-Za-z0-9]+")
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


@final
class HashingEmbedder:
    """A deterministic bag of words, for tests and the offline default.

    Tokens are maximal runs of ASCII letters and digits, ASCII-lowercased. Each token
    adds 1.0 to bucket ``fnv1a_64(token) % dimensions``. Vectors are not normalized; the
    store normalizes at insert.
    """

    def __init__(self, dimensions: int) -> None:
        self.dimensions = check_int("dimensions", dimensions)
        self._buckets: dict[bytes, int] = {}

    def _bucket(self, token: bytes) -> int:
        bucket = self._buckets.get(token)
        if bucket is None:
            bucket = fnv1a_64(token) % self.dimensions
            if len(self._buckets) < 65536:  # a bounded memo, not a leak
                self._buckets[token] = bucket
        return bucket

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for token in _TOKEN.findall(text.encode("utf-8", "surrogatepass")):
            vector[self._bucket(token.lower())] += 1.0
        return vector

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.encode("utf-8", "surrogatepass")):
                out[row, self._bucket(token.lower())] += 1.0
        return out

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self.dimensions})"
