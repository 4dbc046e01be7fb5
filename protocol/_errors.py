"""The error family of trio-recall (design §2).

Every error the store raises is a :class:`VectorStoreError`. Where it helps, an error
also subclasses a builtin (``ConfigError`` is a ``ValueError``), so callers that only
know the builtin still catch it.

Compaction talks to the store through the ``PluginError`` seam;
:func:`to_plugin_error` is the one place that converts between the two.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DispatchError",
    "DispatchTimeout",
    "EmbedderError",
    "EmbeddingError",
    "EmbeddingProviderError",
    "EmbeddingTimeout",
    "EntryTooLarge",
    "FilterError",
    "JsonError",
    "PluginError",
    "PluginInternalError",
    "PluginValidationError",
    "Poisoned",
    "StoreUnavailable",
    "VectorStoreError",
    "to_plugin_error",
]


class VectorStoreError(Exception):
    """The root of every error trio-recall's store raises."""


class ConfigError(VectorStoreError, ValueError):
    """A bound is out of range: a size ≤ 0, a bad ``warn_fraction``, an arena over the
    memory ceiling, or a query with ``k ≤ 0``."""


class EmbeddingError(VectorStoreError, ValueError):
    """A vector has the wrong width, a non-finite component, or a squared norm that is
    not finite in float32."""


class EmbeddingProviderError(VectorStoreError, RuntimeError):
    """An embedding provider (an HTTP service, a local model) failed or answered with
    something that is not a valid embedding response.

    Attributes:
        status: the HTTP status, when the failure was an HTTP answer; else ``None``.
        attempts: how many requests were made, retries included.
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        self.status = status
        self.attempts = attempts
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_provider_error, (type(self), str(self), self.status, self.attempts))


class EmbeddingTimeout(EmbeddingProviderError, TimeoutError):
    """An embedding request timed out (after its retries)."""


def _rebuild_provider_error(
    cls: type[EmbeddingProviderError], message: str, status: int | None, attempts: int
) -> EmbeddingProviderError:
    return cls(message, status=status, attempts=attempts)


class EntryTooLarge(VectorStoreError, ValueError):
    """An entry counts more than ``max_entry_bytes``.

    What an entry counts is its payload (design §2) plus its metadata, source, id, index
    text and a fixed overhead per content block (design §3, "Memory bound").

    Attributes:
        bytes: what the offending entry counts.
        max_entry_bytes: the store's cap.
        index: the offending turn's index in its batch, when known.
    """

    def __init__(self, bytes: int, max_entry_bytes: int, index: int | None = None) -> None:
        self.bytes = bytes
        self.max_entry_bytes = max_entry_bytes
        self.index = index
        where = "" if index is None else f" (turn {index} of the batch)"
        super().__init__(
            f"entry has {bytes} payload bytes{where}; this store takes at most "
            f"{max_entry_bytes} (max_entry_bytes)"
        )

    def __reduce__(self) -> tuple[type[EntryTooLarge], tuple[int, int, int | None]]:
        return (type(self), (self.bytes, self.max_entry_bytes, self.index))


class EmbedderError(VectorStoreError):
    """The caller's embedder raised. The original exception is ``.error`` and also the
    ``__cause__``, unchanged."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(f"embedder failed: {type(error).__name__}: {error}")
        self.__cause__ = error

    def __reduce__(self) -> tuple[type[EmbedderError], tuple[BaseException]]:
        return (type(self), (self.error,))


class Poisoned(VectorStoreError, RuntimeError):
    """The store actor crashed. The crash is the ``__cause__``; every later call raises
    this error too."""


class StoreUnavailable(VectorStoreError, ConnectionError):
    """A store's database could not be reached, or the connection was lost, after the
    bounded retries. A write that raises this was rolled back, unless the message says
    the connection was lost while committing, when its outcome is unknown."""


class JsonError(VectorStoreError, TypeError):
    """A value that must be JSON (tool-call arguments, metadata) cannot be serialized."""


class FilterError(VectorStoreError, ValueError):
    """A metadata filter has an unknown operator or a wrongly typed operand."""


class DispatchError(VectorStoreError, RuntimeError):
    """A dispatcher could not get a reply: an HTTP error, a malformed reply, a refused
    connection or a timeout.

    Attributes:
        endpoint: the URL that was called.
        status: the HTTP status, or None when no response arrived.
        report: when raised by ``Memory.turn``, the turn's ``TurnReport`` (what the
            earlier stages did, and ``dispatch_error``); otherwise None.
    """

    def __init__(self, message: str, *, endpoint: str, status: int | None = None) -> None:
        self.endpoint = endpoint
        self.status = status
        self.message = message
        self.report: object | None = None
        status_text = "no response" if status is None else f"HTTP {status}"
        super().__init__(f"POST {endpoint} failed ({status_text}): {message}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_dispatch_error, (type(self), self.message, self.endpoint, self.status))


class DispatchTimeout(DispatchError, TimeoutError):
    """The dispatcher's request timed out (connect, read, write or pool)."""


def _rebuild_dispatch_error(
    cls: type[DispatchError], message: str, endpoint: str, status: int | None
) -> DispatchError:
    return cls(message, endpoint=endpoint, status=status)


class PluginError(Exception):
    """The error seam between compaction and the store (design §2)."""


class PluginValidationError(PluginError):
    """The store rejected the input as invalid for ``schema``."""

    def __init__(self, schema: str, message: str) -> None:
        self.schema = schema
        self.message = message
        super().__init__(f"[{schema}] {message}")

    def __reduce__(self) -> tuple[type[PluginValidationError], tuple[str, str]]:
        return (type(self), (self.schema, self.message))


class PluginInternalError(PluginError):
    """The store failed for a reason that is not the input's fault."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def to_plugin_error(error: VectorStoreError) -> BaseException:
    """Convert a store error into what compaction reports (design §2).

    ``EntryTooLarge`` and ``EmbeddingError`` become ``PluginValidationError`` with schema
    ``"vector-store"``; ``EmbedderError(e)`` becomes ``e``, unchanged; anything else
    (``ConfigError``, ``Poisoned``, ``JsonError``, ...) becomes ``PluginInternalError``.
    """
    if isinstance(error, EmbedderError):
        return error.error
    if isinstance(error, EntryTooLarge | EmbeddingError):
        return PluginValidationError("vector-store", str(error))
    return PluginInternalError(f"{type(error).__name__}: {error}")
