"""A registry of named embedding models, one of them the default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import final

from protocol import ConfigError, EmbeddingProfile

from .protocols import EmbeddingModel

__all__ = ["EmbeddingRegistry"]


# ---------------------------------------------------------------------------------------
@final
class EmbeddingRegistry:
    """Named embedding models, one of them the default.

    The first model registered becomes the default unless another is registered with
    ``default=True``.
    """

    def __init__(self) -> None:
        self._models: dict[str, EmbeddingModel] = {}
        self._default: str | None = None

    def register(self, name: str, model: EmbeddingModel, *, default: bool = False) -> None:
        """Add ``model`` under ``name``.

        Raises:
            ConfigError: an empty or taken name, or a model without a ``profile`` and
                async ``embed_documents``/``embed_query``.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"model name is {name!r}; expected a non-empty str")
        if name in self._models:
            raise ConfigError(f"an embedding model is already registered as {name!r}")
        if not isinstance(model, EmbeddingModel) or not isinstance(
            getattr(model, "profile", None), EmbeddingProfile
        ):
            raise ConfigError(
                f"{type(model).__name__} is not an EmbeddingModel; expected a profile "
                "(EmbeddingProfile) and async embed_documents/embed_query"
            )
        self._models[name] = model
        if default or self._default is None:
            self._default = name

    def get(self, name: str | None = None) -> EmbeddingModel:
        """The model named ``name``, or the default when ``name`` is None.

        Raises:
            ConfigError: no such name, or an empty registry.
        """
        if name is None:
            if self._default is None:
                raise ConfigError("the embedding registry is empty; register a model first")
            name = self._default
        try:
            return self._models[name]
        except KeyError:
            raise ConfigError(
                f"no embedding model named {name!r}; registered: {sorted(self._models)}"
            ) from None

    @property
    def default_name(self) -> str | None:
        """The default model's name, or None when the registry is empty."""
        return self._default

    def set_default(self, name: str) -> None:
        """Make ``name`` the default.

        Raises:
            ConfigError: no such name.
        """
        self.get(name)
        self._default = name

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._models)

    def profiles(self) -> dict[str, EmbeddingProfile]:
        """Each name's profile."""
        return {name: model.profile for name, model in self._models.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __len__(self) -> int:
        return len(self._models)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._models))
