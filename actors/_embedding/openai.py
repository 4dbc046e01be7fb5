"""A client for ``POST /v1/embeddings`` on any OpenAI-compatible server (OpenAI,
llama-server, Ollama, vLLM, LM Studio, ...), over async httpx.

httpx runs on anyio, so the client works under trio (and asyncio) unchanged.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping, Sequence
from typing import final

import anyio
import httpx
import numpy as np
import numpy.typing as npt
import trio

from protocol import (
    ConfigError,
    EmbeddingError,
    EmbeddingProfile,
    EmbeddingProviderError,
    EmbeddingTimeout,
)
from protocol.checks import check_int, replace_surrogates

from .protocols import EmbeddingResult, ReportingModel, check_texts

__all__ = ["OpenAIEmbeddings"]

Matrix = npt.NDArray[np.float32]

_RETRY_STATUSES = frozenset({408, 409, 429})


def _check_number(name: str, value: object, *, minimum: float, allow_zero: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(v) and (v > minimum or (allow_zero and v == minimum))
    if not ok:
        sign = ">=" if allow_zero else ">"
        raise ConfigError(f"{name} is {value!r}; expected a finite number {sign} {minimum}")


def parse_retry_after(headers: httpx.Headers, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP
    date); None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        value = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, value)
    return value if math.isfinite(value) and value >= 0 else None


def _server_message(response: httpx.Response) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``), or the
    start of the body."""
    try:
        body = response.json()
    except ValueError:
        return repr(response.text[:300])
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return repr(response.text[:300])


@final
class OpenAIEmbeddings(ReportingModel, trio.abc.AsyncResource):
    """An ``EmbeddingModel`` backed by an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Texts are sent in requests of at most ``max_batch_size`` inputs, one request at a
    time. A 408, 409, 429 or 5xx answer, a timeout, or a connection failure is retried up
    to ``max_retries`` times, after a delay that honours ``Retry-After`` (capped at
    ``max_retry_after``) or else backs off exponentially with jitter. Other 4xx answers
    fail at once.

    Use it as an async context manager, or call :meth:`aclose`, to close its connection
    pool. The pool is made on first use and belongs to the event loop that made it.

    Args:
        model: the model name the server knows.
        dimensions: the width of the vectors it returns.
        base_url: the server's ``/v1`` URL.
        api_key: sent as ``Authorization: Bearer``; None sends no header.
        provider: the profile's provider name.
        max_batch_size: the most inputs per request.
        max_input_tokens: the profile's input limit (the server enforces it).
        timeout: seconds for each request (connect, read, write and pool).
        max_retries: retries after the first attempt.
        backoff_initial: the first backoff delay, in seconds; it doubles each retry.
        backoff_max: the longest backoff delay.
        max_retry_after: the longest ``Retry-After`` wait honoured.
        send_dimensions: send ``dimensions`` in the request (models that can shorten
            their vectors, like text-embedding-3-*).
        query_prefix: prepended to queries (e.g. ``"search_query: "`` for nomic).
        document_prefix: prepended to documents.
        headers: extra HTTP headers.
        transport: an httpx transport, for tests or proxies.
        seed: seeds the jitter, for reproducible tests.

    Raises:
        ConfigError: any argument out of range.
    """

    def __init__(
        self,
        model: str,
        *,
        dimensions: int,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        provider: str = "openai",
        max_batch_size: int = 256,
        max_input_tokens: int = 8191,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
        send_dimensions: bool = False,
        query_prefix: str = "",
        document_prefix: str = "",
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url is {base_url!r}; expected an http:// or https:// URL")
        _check_number("timeout", timeout, minimum=0.0, allow_zero=False)
        check_int("max_retries", max_retries, minimum=0)
        _check_number("backoff_initial", backoff_initial, minimum=0.0, allow_zero=True)
        _check_number("backoff_max", backoff_max, minimum=0.0, allow_zero=True)
        _check_number("max_retry_after", max_retry_after, minimum=0.0, allow_zero=True)
        for name, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise ConfigError(f"{name} is {value!r}; expected a str")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError(f"api_key is a {type(api_key).__name__}; expected a str or None")
        # EmbeddingProfile checks provider, model, dimensions and the batch/token bounds.
        self._profile = EmbeddingProfile(
            provider=provider,
            model=model,
            dimensions=dimensions,
            max_batch_size=max_batch_size,
            max_input_tokens=max_input_tokens,
            options={
                "query_prefix": query_prefix,
                "document_prefix": document_prefix,
                "send_dimensions": bool(send_dimensions),
            },
        )
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self.send_dimensions = bool(send_dimensions)
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._headers = dict(headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._rng = random.Random(seed)
        self._client: httpx.AsyncClient | None = None

    @property
    def profile(self) -> EmbeddingProfile:
        """The model's profile; ``max_batch_size`` is the request size."""
        return self._profile

    @property
    def url(self) -> str:
        """The full endpoint URL."""
        return f"{self.base_url}/embeddings"

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                headers=self._headers,
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool (a new one is made if the client is used again)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _backoff(self, attempt: int) -> float:
        # Equal jitter: half the exponential delay, plus a random half, so that clients
        # that failed together do not retry together.
        delay = min(self.backoff_max, self.backoff_initial * (2.0**attempt))
        return delay / 2.0 + self._rng.uniform(0.0, delay / 2.0)

    async def _request(self, inputs: list[str]) -> tuple[Matrix, int | None]:
        payload: dict[str, object] = {
            "model": self._profile.model,
            # UTF-8 JSON cannot carry a lone surrogate: each is sent as U+FFFD.
            "input": [replace_surrogates(t) for t in inputs],
            "encoding_format": "float",
        }
        if self.send_dimensions:
            payload["dimensions"] = self._profile.dimensions
        client = self._get_client()
        attempts = 0
        while True:
            attempts += 1
            wait: float | None = None
            try:
                response = await client.post(self.url, json=payload)
            except httpx.TimeoutException as error:
                failure: EmbeddingProviderError = EmbeddingTimeout(
                    f"POST {self.url} timed out after {self.timeout:g} s "
                    f"({type(error).__name__}, attempt {attempts} of {self.max_retries + 1})",
                    attempts=attempts,
                )
                failure.__cause__ = error
            except httpx.TransportError as error:
                failure = EmbeddingProviderError(
                    f"POST {self.url} failed: {type(error).__name__}: {error} "
                    f"(attempt {attempts} of {self.max_retries + 1})",
                    attempts=attempts,
                )
                failure.__cause__ = error
            else:
                status = response.status_code
                if status < 300:
                    return self._parse(response, len(inputs), attempts)
                failure = EmbeddingProviderError(
                    f"POST {self.url} answered {status} {response.reason_phrase}: "
                    f"{_server_message(response)} (attempt {attempts} of "
                    f"{self.max_retries + 1})",
                    status=status,
                    attempts=attempts,
                )
                if status not in _RETRY_STATUSES and status < 500:
                    raise failure
                wait = parse_retry_after(response.headers)
            if attempts > self.max_retries:
                raise failure
            delay = (
                min(wait, self.max_retry_after) if wait is not None else self._backoff(attempts)
            )
            await anyio.sleep(delay)

    def _parse(
        self, response: httpx.Response, count: int, attempts: int
    ) -> tuple[Matrix, int | None]:
        where = f"POST {self.url} ({response.status_code})"
        try:
            body = response.json()
        except ValueError:
            raise EmbeddingProviderError(
                f"{where} returned a body that is not JSON: {response.text[:200]!r}",
                status=response.status_code,
                attempts=attempts,
            ) from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise EmbeddingProviderError(
                f"{where} returned JSON without a 'data' list: {response.text[:200]!r}",
                status=response.status_code,
                attempts=attempts,
            )
        if len(data) != count:
            raise EmbeddingProviderError(
                f"{where} returned {len(data)} embeddings for {count} inputs",
                status=response.status_code,
                attempts=attempts,
            )
        rows: list[list[object] | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            embedding = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
                raise EmbeddingProviderError(
                    f"{where} returned item {position} with index {index!r}; expected each "
                    f"index in 0..{count - 1} once",
                    status=response.status_code,
                    attempts=attempts,
                )
            if not isinstance(embedding, list):
                raise EmbeddingProviderError(
                    f"{where} returned item {position} without an 'embedding' list",
                    status=response.status_code,
                    attempts=attempts,
                )
            rows[index] = embedding
        try:
            vectors = np.array(rows, dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise EmbeddingError(
                f"{where} returned embeddings that are not numbers: {error}"
            ) from None
        dims = self._profile.dimensions
        if vectors.ndim != 2 or vectors.shape[1] != dims:
            got = vectors.shape[1] if vectors.ndim == 2 else "ragged"
            raise EmbeddingError(
                f"{where} returned vectors of {got} floats; this model's profile says {dims}"
            )
        if not np.isfinite(vectors).all():
            raise EmbeddingError(f"{where} returned a non-finite component")
        usage = body.get("usage")
        tokens = None
        if isinstance(usage, dict):
            raw = usage.get("prompt_tokens", usage.get("total_tokens"))
            if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
                tokens = raw
        return vectors, tokens

    async def embed_with_report(self, texts: Sequence[str], input_type: str) -> EmbeddingResult:
        """Embed ``texts`` in requests of at most ``max_batch_size``.

        Cancellation takes effect at once, in a request or in a retry's back-off: the
        request in flight is dropped, and so are the vectors of earlier requests.

        Raises:
            TypeError: ``texts`` is not a sequence of str.
            EmbeddingTimeout: a request timed out on every attempt.
            EmbeddingProviderError: the server failed, refused, or answered something
                that is not a valid embedding response.
            EmbeddingError: the vectors have the wrong width or a non-finite value.
        """
        items = check_texts(texts)
        prefix = self.query_prefix if input_type == "query" else self.document_prefix
        dims = self._profile.dimensions
        if not items:
            return EmbeddingResult(vectors=np.zeros((0, dims), dtype=np.float32), batches=0)
        size = self._profile.max_batch_size
        parts: list[Matrix] = []
        tokens: int | None = 0
        for start in range(0, len(items), size):
            chunk = [prefix + t for t in items[start : start + size]]
            vectors, used = await self._request(chunk)
            parts.append(vectors)
            # Tokens are reported only if every request reported them.
            tokens = None if used is None or tokens is None else tokens + used
        return EmbeddingResult(vectors=np.concatenate(parts), tokens=tokens, batches=len(parts))

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self._profile.model!r}, base_url={self.base_url!r})"
