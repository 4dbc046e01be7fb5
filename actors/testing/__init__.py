"""Test tools for trio-recall users: fakes, crash injection and the state machines."""

from .._embedders import HashingEmbedder as HashingEmbedder
from ._crash import inject_crash as inject_crash

__all__ = ["HashingEmbedder", "inject_crash"]
