"""Who may use ``trio-recall mcp --http``: the bearer token and the loopback rule
(docs/pages/reference/mcp.md).

- **The token** comes from ``--token-file FILE`` when it is given, else from
  ``$TRIO_RECALL_TOKEN`` (the flag is the explicit choice, so it wins over the
  environment). It is the file's content or the variable's value without surrounding
  whitespace (so the newline ``echo`` leaves is not part of it): one word of printable
  ASCII, at most :data:`MAX_TOKEN_BYTES`, because an HTTP header carries it. An empty
  token is refused (an empty ``$TRIO_RECALL_TOKEN`` too: set, it asks for a token). So
  is a token file that any other account can read or change (mode ``& 0o077``, as
  OpenSSH refuses a private key): the token guards everything the memory holds.
- **With a token**, every request must carry ``Authorization: Bearer TOKEN``; any other
  gets 401 with a ``WWW-Authenticate: Bearer`` challenge from :class:`BearerAuth`, in
  front of the SDK's app, so it reaches neither the MCP session nor the store. The
  token is compared with :func:`hmac.compare_digest`.
- **Without a token** the server serves only on a loopback address
  (:func:`is_loopback`), where any account on the machine can still use it: read,
  change and wipe the memory. Anywhere else :func:`check_http` refuses to start.

Nothing here imports the MCP SDK, so the command line checks all this before it opens
the store.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import attrs

from protocol import ConfigError

__all__ = ["MAX_TOKEN_BYTES", "TOKEN_ENV", "BearerAuth", "check_http", "is_loopback", "read_token"]

#: The environment variable holding the HTTP server's bearer token.
TOKEN_ENV = "TRIO_RECALL_TOKEN"
#: The longest token accepted (a request header has to carry it).
MAX_TOKEN_BYTES = 4096
_MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
_HOW = f"pass --token-file FILE or set {TOKEN_ENV}"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: An ASGI application.
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address: ``localhost``, or an IP address in
    127.0.0.0/8 or ``::1`` (IPv4-mapped ones included). Other names are not resolved,
    and count as not loopback: what DNS says cannot turn the token requirement off."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _checked(where: str, value: str) -> str:
    token = value.strip()
    if not token:
        raise ConfigError(f"{where} is empty; expected a token, such as one from {_MAKE_ONE}")
    if len(token) > MAX_TOKEN_BYTES:
        raise ConfigError(
            f"{where} holds {len(token)} characters; expected a token of at most {MAX_TOKEN_BYTES}"
        )
    if not all("!" <= c <= "~" for c in token):
        raise ConfigError(
            f"{where} holds a space, a control character or non-ASCII text; expected one "
            "word of printable ASCII (an HTTP header carries it)"
        )
    return token


def read_token(token_file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The HTTP server's bearer token: ``token_file``'s, else ``environ``'s
    :data:`TOKEN_ENV`, else None (module docstring).

    Raises:
        ConfigError: the file cannot be read, others can read or change it, or the
            token is empty, too long, or not one word of printable ASCII.
    """
    if token_file is None:
        value = environ.get(TOKEN_ENV)
        return None if value is None else _checked(TOKEN_ENV, value)
    where = f"--token-file {token_file}"
    try:
        with open(token_file, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            raw = handle.read(MAX_TOKEN_BYTES + 2)  # a token, and a newline
    except OSError as error:
        raise ConfigError(
            f"{where}: cannot read it ({error.strerror or error}); expected a file "
            "holding the token"
        ) from None
    if os.name == "posix" and mode & 0o077:
        raise ConfigError(
            f"{where} has mode {oct(stat.S_IMODE(mode))}, so other accounts can read or "
            f"change it; expected it readable by its owner only (chmod 600 {token_file})"
        )
    return _checked(where, raw.decode("utf-8", "replace"))


def check_http(host: str, token: str | None) -> None:
    """Refuse to serve HTTP without a token on an address that is not loopback.

    Raises:
        ConfigError: ``token`` is None and ``host`` is not loopback.
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"--http on {host}, which is not loopback, needs a token: whoever reaches "
            f"the port could read, change and wipe the memory; {_HOW} (or serve on "
            "127.0.0.1)"
        )


@attrs.frozen
class BearerAuth:
    """ASGI middleware: an HTTP request reaches ``app`` only with the header
    ``Authorization: Bearer TOKEN`` (the scheme in any case, one such header); any
    other is answered 401 with a ``WWW-Authenticate`` challenge (RFC 6750, with
    ``error="invalid_token"`` when credentials were sent). A WebSocket without it is
    closed. Lifespan events pass through."""

    app: App
    token: str

    def authorized(self, scope: Scope) -> bool | None:
        """True for the right token; None when no credentials were sent; else False."""
        sent = [value for name, value in scope.get("headers", ()) if name == b"authorization"]
        if not sent:
            return None
        scheme, _, credentials = bytes(sent[0]).partition(b" ")
        right = hmac.compare_digest(credentials.strip(b" "), self.token.encode("ascii"))
        return len(sent) == 1 and scheme.lower() == b"bearer" and right

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        verdict = self.authorized(scope) if kind in ("http", "websocket") else True
        if verdict:
            await self.app(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            challenge = 'Bearer realm="trio-recall"'
            if verdict is False:
                challenge += ', error="invalid_token"'
            body = b"401: this server needs the header Authorization: Bearer TOKEN\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"www-authenticate", challenge.encode("ascii")),
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode("ascii")),
                        # The request's body is never read (an unauthenticated client
                        # may send any amount), so this connection cannot carry another
                        # request: the server closes it. Said here, a client opens a new
                        # one instead of racing that close with its next request.
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
