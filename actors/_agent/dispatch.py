"""Dispatchers: send a ``UnifiedRequest`` to a model and return its reply (design §6).

- :class:`OpenAIChatDispatcher` speaks OpenAI's ``/v1/chat/completions`` over
  ``httpx.AsyncClient`` (which runs under trio through anyio). It works with
  llama-server, Ollama, vLLM and OpenAI.
- :class:`EchoDispatcher` is the offline default: no model, a deterministic reply built
  from what the model would read.
"""

from __future__ import annotations

import json
from typing import Protocol, final, runtime_checkable

import httpx
import trio

from protocol import (
    ConfigError,
    ContentBlock,
    DispatchError,
    DispatchTimeout,
    ImageBase64,
    JsonError,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    projection,
)
from protocol._render import RENDERERS
from protocol.checks import replace_surrogates_json

__all__ = ["Dispatcher", "EchoDispatcher", "OpenAIChatDispatcher", "to_openai"]


@runtime_checkable
class Dispatcher(Protocol):
    """Sends a request to a model and returns the assistant's message.

    ``dispatch`` runs in the caller's task (there is no inbox), so a cancel reaches it
    directly.
    """

    async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage: ...


def _check_request(request: object) -> UnifiedRequest:
    if not isinstance(request, UnifiedRequest):
        raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
    return request


# --- the echo dispatcher ----------------------------------------------------------------------


@final
class EchoDispatcher:
    """The offline default: answers from what the model would read, with no model.

    The reply is one assistant text: how many messages the model would read, how many
    recalled items it would see (with the best one), and the newest user message it
    would answer. It is deterministic, so the example's output is stable.
    """

    async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage:
        """The echo reply. It does no I/O and never blocks; there is no inbox.

        Raises:
            ConfigError: ``request`` is not a ``UnifiedRequest``.
        """
        request = _check_request(request)
        messages = request.messages
        # A recall block is a system message of its own or a section of one.
        recall = next(
            (
                b.text
                for m in messages
                if m.role == "system"
                for b in m.content
                if isinstance(b, Text) and b.text.startswith(tuple(RENDERERS.values()))
            ),
            None,
        )
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        parts = [f"[echo] I read {len(messages)} message(s)."]
        if recall is None:
            parts.append("No recalled memory.")
        else:
            lines = recall.splitlines()
            items = [
                line.strip()
                for line in lines[1:]
                if line[:1].isdigit() or line.startswith("  <item")
            ]
            best = items[0] if items else ""
            parts.append(f"Recalled {len(items)} item(s); best: {best}")
        if last_user is not None:
            parts.append(f"You asked: {projection(last_user)}")
        return UnifiedMessage.assistant(" ".join(parts))

    def __repr__(self) -> str:
        return "EchoDispatcher()"


# --- the OpenAI-compatible dispatcher ---------------------------------------------------------


def _text_content(message: UnifiedMessage) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, Text))


def to_openai(request: UnifiedRequest, model: str | None = None) -> dict[str, object]:
    """The ``/v1/chat/completions`` body for ``request``.

    Text blocks join with newlines; images become ``image_url`` parts with a data URL;
    tool calls become ``tool_calls`` with JSON-string arguments; every tool result
    becomes its own ``role: "tool"`` message; thinking blocks are not sent. Each lone
    surrogate in the messages is sent as U+FFFD (UTF-8 cannot carry one). The
    generation settings that are set are copied, and ``extra`` is merged in last,
    untouched.
    """
    out: list[dict[str, object]] = []
    for m in request.messages:
        results = [b for b in m.content if isinstance(b, ToolResult)]
        calls = [b for b in m.content if isinstance(b, ToolCall)]
        images = [b for b in m.content if isinstance(b, ImageBase64)]
        text = _text_content(m)
        if m.role != "tool" and (text or calls or images or not results):
            entry: dict[str, object] = {"role": m.role}
            if images:
                parts: list[dict[str, object]] = [{"type": "text", "text": text}] if text else []
                parts.extend(
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:{b.media_type};base64,{b.data}"},
                    }
                    for b in images
                )
                entry["content"] = parts
            else:
                entry["content"] = text if (text or not calls) else None
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(
                                replace_surrogates_json(c.arguments), separators=(",", ":")
                            ),
                        },
                    }
                    for c in calls
                ]
            if m.name is not None:
                entry["name"] = m.name
            out.append(entry)
        for r in results:
            out.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": r.output})
        if m.role == "tool" and not results:
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": text})
    # The body is UTF-8 JSON, which cannot hold a lone surrogate: each is U+FFFD.
    body: dict[str, object] = {
        "model": model or request.model,
        "messages": replace_surrogates_json(out),
    }
    for field in UnifiedRequest._generation_fields:
        value = getattr(request, field)
        if value is not None:
            body[field] = value
    body.update(request.extra)
    return body


def _reply_error(endpoint: str, status: int, what: str) -> DispatchError:
    return DispatchError(f"malformed reply: {what}", endpoint=endpoint, status=status)


def from_openai(data: object, endpoint: str, status: int) -> UnifiedMessage:
    """The assistant message in a ``/v1/chat/completions`` reply."""
    if not isinstance(data, dict):
        raise _reply_error(endpoint, status, f"the body is a {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _reply_error(endpoint, status, f"'choices' is {choices!r:.80}; expected a list")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _reply_error(endpoint, status, f"choices[0].message is {message!r:.80}")
    content: list[ContentBlock] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        content.append(Thinking(text=reasoning))
    text = message.get("content")
    if isinstance(text, list):  # content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if text is not None and not isinstance(text, str):
        raise _reply_error(endpoint, status, f"choices[0].message.content is {text!r:.80}")
    if text:
        content.append(Text(text=text))
    for i, call in enumerate(message.get("tool_calls") or []):
        try:
            function = call["function"]
            arguments = function.get("arguments") or "null"
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            content.append(
                ToolCall(id=str(call["id"]), name=str(function["name"]), arguments=parsed)
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, JsonError) as error:
            raise _reply_error(
                endpoint, status, f"tool_calls[{i}] is {call!r:.120}: {error}"
            ) from None
    return UnifiedMessage(role="assistant", content=content)


@final
class OpenAIChatDispatcher(trio.abc.AsyncResource):
    """An OpenAI-compatible ``/v1/chat/completions`` client over ``httpx.AsyncClient``.

    Use it as an async context manager to keep one connection pool for many requests;
    used without one, each ``dispatch`` opens and closes its own client.

    Args:
        base_url: the server root, with or without ``/v1`` (``http://127.0.0.1:8080``
            and ``http://127.0.0.1:8080/v1`` both work).
        model: the model name sent on every request; None sends the request's own
            ``model``.
        api_key: sent as ``Authorization: Bearer <key>`` when set.
        timeout: seconds for each of connect, read, write and pool.

    Raises:
        ConfigError: a bad ``base_url``, ``model``, ``api_key`` or ``timeout``.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url is {base_url!r}; expected an http:// or https:// URL")
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError(f"model is {model!r}; expected a non-empty str or None")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError(f"api_key is a {type(api_key).__name__}; expected str or None")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigError(f"timeout is {timeout!r}; expected a number of seconds > 0")
        root = base_url.rstrip("/")
        if not root.endswith("/v1"):
            root += "/v1"
        self.endpoint = f"{root}/chat/completions"
        self.model = model
        self.timeout = float(timeout)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), headers=self._headers)

    async def __aenter__(self) -> OpenAIChatDispatcher:
        if self._client is None:
            self._client = self._new_client()
        return self

    async def aclose(self) -> None:
        """Close the connection pool, if one is open."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def dispatch(self, request: UnifiedRequest) -> UnifiedMessage:
        """POST the request and return the assistant's message.

        Cancellation propagates at once; the connection is dropped.

        Raises:
            ConfigError: ``request`` is not a ``UnifiedRequest``.
            DispatchTimeout: the server did not answer within ``timeout``.
            DispatchError: the connection failed, the status was not 2xx, or the reply
                was not a well-formed chat completion. It names the endpoint and status.
        """
        body = to_openai(_check_request(request), self.model)
        if self._client is not None:
            return await self._post(self._client, body)
        async with self._new_client() as client:
            return await self._post(client, body)

    async def _post(self, client: httpx.AsyncClient, body: dict[str, object]) -> UnifiedMessage:
        endpoint = self.endpoint
        try:
            response = await client.post(endpoint, json=body)
        except httpx.TimeoutException as error:
            raise DispatchTimeout(
                f"timed out after {self.timeout:g}s ({type(error).__name__})", endpoint=endpoint
            ) from error
        except httpx.HTTPError as error:
            raise DispatchError(f"{type(error).__name__}: {error}", endpoint=endpoint) from error
        status = response.status_code
        if not 200 <= status < 300:
            raise DispatchError(
                f"the server answered {response.reason_phrase!r}: {response.text[:300]!r}",
                endpoint=endpoint,
                status=status,
            )
        try:
            data = response.json()
        except ValueError as error:
            raise _reply_error(
                endpoint, status, f"not JSON ({error}): {response.text[:120]!r}"
            ) from None
        return from_openai(data, endpoint, status)

    def __repr__(self) -> str:
        return f"OpenAIChatDispatcher(endpoint={self.endpoint!r}, model={self.model!r})"
