"""An adapter for users who have sentence-transformers (and so torch) and any of its
models. trio-recall never imports sentence-transformers unless this adapter is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, final

import numpy as np
import trio

from protocol import ConfigError, EmbeddingProfile
from protocol.checks import check_int, replace_surrogates

from .protocols import EmbeddingResult, ReportingModel, check_texts

__all__ = ["SentenceTransformerEmbedder"]


class _SentenceModel(Protocol):
    """What this adapter calls on a ``SentenceTransformer`` (its width is read by name at
    run time: sentence-transformers 6 renamed the method)."""

    def encode(
        self,
        sentences: list[str],
        *,
        batch_size: int,
        normalize_embeddings: bool,
        convert_to_numpy: bool,
        show_progress_bar: bool,
    ) -> object: ...


@final
class SentenceTransformerEmbedder(ReportingModel):
    """A ``sentence_transformers.SentenceTransformer`` as an ``EmbeddingModel``.

    ``encode`` runs in a worker thread, one call at a time per embedder. If the caller is
    cancelled, the call in flight finishes and its result is dropped.

    Args:
        model: a model name or folder (loaded with ``SentenceTransformer(model,
            device=device)``), or a ``SentenceTransformer`` already built.
        device: where to load a named model (``"cpu"`` by default).
        batch_size: texts per ``encode`` batch.
        normalize: return unit vectors.
        query_prompt: a prefix for queries (e.g. ``"query: "`` for E5 models).
        document_prompt: a prefix for documents (e.g. ``"passage: "``).
        provider: the profile's provider name.
        model_name: the profile's model name for a model passed already built (by
            default its class name; a named model uses its name).

    Raises:
        ImportError: sentence-transformers is not installed.
        ConfigError: a bad ``batch_size``, or a model that does not report its width.
    """

    def __init__(
        self,
        model: str | _SentenceModel,
        *,
        device: str | None = "cpu",
        batch_size: int = 32,
        normalize: bool = True,
        query_prompt: str = "",
        document_prompt: str = "",
        provider: str = "sentence-transformers",
        model_name: str | None = None,
    ) -> None:
        check_int("batch_size", batch_size)
        for name, prompt in (("query_prompt", query_prompt), ("document_prompt", document_prompt)):
            if not isinstance(prompt, str):
                raise ConfigError(f"{name} is {prompt!r}; expected a str")
        if isinstance(model, str):
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as error:
                raise ImportError(
                    "SentenceTransformerEmbedder needs sentence-transformers (and torch): "
                    "`pip install sentence-transformers`; for all-MiniLM-L6-v2 without torch, "
                    "use MiniLMEmbedder"
                ) from error
            name = model
            built: _SentenceModel = SentenceTransformer(model, device=device)
        else:
            name = model_name or type(model).__name__
            built = model
        # sentence-transformers 6 renamed the method (the old name warns).
        get_dims = getattr(built, "get_embedding_dimension", None) or getattr(
            model, "get_sentence_embedding_dimension", None
        )
        dims = get_dims() if callable(get_dims) else None
        if not isinstance(dims, int) or dims <= 0:
            raise ConfigError(f"model reports {dims!r} dimensions; expected an int > 0")
        self._model = built
        self.batch_size = batch_size
        self.normalize = normalize
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self._profile = EmbeddingProfile(
            provider=provider,
            model=name,
            dimensions=dims,
            max_batch_size=batch_size,
            max_input_tokens=int(getattr(built, "max_seq_length", 512) or 512),
            normalized=normalize,
            options={
                "normalize": normalize,
                "query_prompt": query_prompt,
                "document_prompt": document_prompt,
            },
        )
        self._limiter: trio.CapacityLimiter | None = None

    @property
    def profile(self) -> EmbeddingProfile:
        """The model's profile (its name, width, and max sequence length)."""
        return self._profile

    def encode(self, texts: Sequence[str], input_type: str = "document") -> EmbeddingResult:
        """Embed ``texts`` (blocking), with the prompt for ``input_type``."""
        items = check_texts(texts)
        prompt = self.query_prompt if input_type == "query" else self.document_prompt
        if not items:
            return EmbeddingResult(
                vectors=np.zeros((0, self._profile.dimensions), dtype=np.float32), batches=0
            )
        vectors = self._model.encode(
            # Its tokenizer takes UTF-8 only: a lone surrogate is embedded as U+FFFD.
            [prompt + replace_surrogates(t) for t in items],
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        batches = -(-len(items) // self.batch_size)
        return EmbeddingResult(vectors=np.asarray(vectors, dtype=np.float32), batches=batches)

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        """Embed in a worker thread, one call at a time.

        Cancelled while it waits for its turn, it leaves at once; once its thread runs,
        the call finishes first, then ``Cancelled`` is raised and the vectors are dropped.
        """
        items = check_texts(texts)
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        return await trio.to_thread.run_sync(self.encode, items, input_type, limiter=self._limiter)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self._profile.model!r})"
