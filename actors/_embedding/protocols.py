"""The embedder protocols: a sync :class:`Embedder`, an :class:`AsyncEmbedder`, an
:class:`EmbeddingModel` (an async embedder with a profile) and what one model call
returns, :class:`EmbeddingResult`; the two embedding paths of a model that reports
(:class:`ReportingModel`); plus the checks every implementation shares on the
texts it is given and the profile a vector was made under."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias, final, runtime_checkable

import attrs
import numpy as np
import numpy.typing as npt

from protocol import EmbeddingError, EmbeddingProfile

__all__ = [
    "AnyEmbedder",
    "AsyncEmbedder",
    "Embedder",
    "EmbeddingModel",
    "EmbeddingResult",
    "ReportingModel",
    "VectorLike",
    "check_profile",
    "check_texts",
]

#: One vector as an embedder returns it: a list of floats, or an array of any dtype (its
#: dtype, shape and values are checked at run time: ``actors._embedding.adapter.as_vector``).
VectorLike = Sequence[float] | npt.NDArray[np.generic]
Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """A sync embedder. It runs in a worker thread, so it never blocks the trio loop.

    It may also define ``embed_batch(texts) -> list of vectors`` (or a 2-D array); the
    store then embeds a whole batch in one call.
    """

    def embed(self, text: str) -> VectorLike: ...


@runtime_checkable
class AsyncEmbedder(Protocol):
    """An async embedder, with separate document and query paths.

    The store awaits these in the task that asked (a read's caller, or the store actor
    for a write), so a cancel reaches them directly; ``embed_timeout`` bounds them.
    """

    async def embed_documents(
        self, texts: Sequence[str]
    ) -> Sequence[VectorLike] | npt.NDArray[np.generic]: ...

    async def embed_query(self, text: str) -> VectorLike: ...


@final
@attrs.frozen
class EmbeddingResult:
    """What one model call returned.

    Attributes:
        vectors: float32 ``[len(texts), dimensions]``.
        tokens: tokens the model reports, or ``None``.
        truncated: texts the model truncated, where it says (else 0).
        batches: provider requests or forward passes it took.
    """

    vectors: Matrix
    tokens: int | None = None
    truncated: int = 0
    batches: int = 1


class ReportingModel(abc.ABC):
    """``embed_documents`` and ``embed_query`` of a model whose one path is
    ``embed_with_report`` (MiniLM, OpenAI, sentence-transformers): they differ only in
    the input type and, for a query, in taking one text."""

    @abc.abstractmethod
    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        """Embed ``texts`` as ``input_type`` (``"document"`` or ``"query"``) and say what
        the call took."""

    async def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Embed documents: a float32 ``[len(texts), dimensions]`` array; cancellation as
        :meth:`embed_with_report`."""
        return (await self.embed_with_report(texts, "document")).vectors

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query; cancellation as :meth:`embed_with_report`."""
        if not isinstance(text, str):
            raise TypeError(f"query is a {type(text).__name__}; expected a str")
        row: npt.NDArray[np.float32] = (await self.embed_with_report([text], "query")).vectors[0]
        return row


@runtime_checkable
class EmbeddingModel(Protocol):
    """An embedding model: documents and queries are embedded separately.

    Its async methods are awaited in the task that asked, so a cancel reaches them
    directly.

    A model may also define ``async embed_with_report(texts, input_type) ->
    EmbeddingResult``; :class:`CachedEmbedder` then records the tokens, truncations and
    batches the model reports.
    """

    @property
    def profile(self) -> EmbeddingProfile: ...

    async def embed_documents(
        self, texts: Sequence[str]
    ) -> Sequence[VectorLike] | npt.NDArray[np.generic]: ...

    async def embed_query(self, text: str) -> VectorLike: ...


#: What every ``embedder=`` parameter takes (``open_store``, ``open_pg_store``,
#: ``open_memory``...): a sync :class:`Embedder`, run in a worker thread; an
#: :class:`AsyncEmbedder`, awaited; or an :class:`~actors.EmbeddingModel` (an async
#: embedder with a ``profile``, metered through a :class:`~actors.CachedEmbedder`, which
#: is itself one). The check at run time stays: anything else is refused with a
#: :class:`~protocol.ConfigError` that names what it lacks.
AnyEmbedder: TypeAlias = Embedder | AsyncEmbedder | EmbeddingModel


def check_texts(texts: object) -> list[str]:
    """``texts`` as a list of str.

    Raises:
        TypeError: ``texts`` is a single str (a common slip: it would embed each
            character), not a sequence, or holds something that is not a str.
    """
    if isinstance(texts, str | bytes):
        raise TypeError(
            f"texts is a {type(texts).__name__}; expected a sequence of str (wrap one text "
            "in a list, or use embed_query)"
        )
    if not isinstance(texts, Sequence):
        raise TypeError(f"texts is a {type(texts).__name__}; expected a sequence of str")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}; expected a str")
    return out


def check_profile(bound: EmbeddingProfile, used: EmbeddingProfile) -> None:
    """Raise unless vectors from ``used`` compare with those of a store bound to ``bound``.

    Raises:
        EmbeddingError: the provider, model, dimensions or options differ.
    """
    for name in ("provider", "model", "dimensions"):
        if getattr(bound, name) != getattr(used, name):
            raise EmbeddingError(
                f"query embedded with {used.name} ({used.dimensions} dimensions); this store "
                f"is bound to {bound.name} ({bound.dimensions} dimensions): {name} is "
                f"{getattr(used, name)!r}, expected {getattr(bound, name)!r}"
            )
    if bound.options_key() != used.options_key():
        raise EmbeddingError(
            f"query embedded with options {used.options_key()}; this store is bound to "
            f"{bound.options_key()}{precision_hint(bound.options, used.options)}"
        )


def precision_hint(bound: Mapping[str, object], used: Mapping[str, object]) -> str:
    """A sentence for a profile mismatch that is only MiniLM's precision (fp32 when the
    option is absent), else an empty string."""
    rest = {key: value for key, value in bound.items() if key != "precision"}
    if rest != {key: value for key, value in used.items() if key != "precision"}:
        return ""
    held = bound.get("precision", "fp32")
    return (
        f": the same model in another precision; pass MiniLMEmbedder(precision={held!r}) "
        "to use this store, or re-embed it into a new one (see MiniLMEmbedder, "
        "'Migrating')"
    )
