"""Which names and pages the server answers: the guard against DNS rebinding and
cross-site requests, run before any route.

A browser lets any page send requests to any address, the loopback one included: a
form, or ``fetch(url, {mode: "no-cors"})``, reaches the server without asking it first,
and a page whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) even reads the
answers. Both are refused here, once, for every route:

- **Host.** A request whose ``Host`` is not a name of this server is a 403: the address
  the connection arrived on, at the listening port (for a loopback address also
  ``localhost``, ``127.0.0.1`` and ``[::1]``), and the names of ``server.allowed_hosts``.
  A rebound page's requests carry its own name. A request without a ``Host`` (HTTP/1.0
  health checks) is let through: a browser always sends one.
- **Origin.** A request a page sends carries ``Origin``. It is let through when the page
  is this server's own (the request's scheme and ``Host``, such as ``/ui``) or is listed in
  ``server.allowed_origins``; any other page (``Origin: null`` included) gets a 403.

A page of a configured origin gets CORS answers (its preflight is granted, without
credentials), so that it can send JSON and read the answers; no other page does.

A page that sends no ``Origin`` still cannot write: every request with a body must be
``application/json`` (a 415 otherwise, see :func:`ctxmgmt.api.requests.check_media_type`),
a type a browser sends to another origin only after asking (a CORS preflight), which this
server grants to configured origins only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigError, Problem
from .errors import error_body_at

__all__ = ["OriginGuard", "parse_hosts"]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_AUTHORITY = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?")


@dataclass(frozen=True, slots=True)
class _Host:
    """An allowed host: a name (or ``*.suffix``), and a port (None: any)."""

    name: str
    port: int | None

    def matches(self, name: str, port: int | None) -> bool:
        if self.port is not None and port is not None and self.port != port:
            return False
        if self.name.startswith("*."):
            return name.endswith(self.name[1:])
        return name == self.name


def _split(authority: str) -> tuple[str, int | None] | None:
    """(name, port or None) of a ``host[:port]``, lower case; None if it is not one."""
    found = _AUTHORITY.fullmatch(authority.lower())
    if found is None:
        return None
    port = found.group(2)
    if port is not None and not 0 < int(port) < 65536:
        return None
    return found.group(1), None if port is None else int(port)


def _allowed(index: int, entry: str) -> _Host:
    """An entry of ``server.allowed_hosts`` (the configuration's schema checked it already)."""
    wildcard = entry.startswith("*.")
    split = _split(entry[2:] if wildcard else entry)
    if split is None:
        raise ConfigError(
            [
                Problem(
                    f"/server/allowed_hosts/{index}", f"{entry[:100]!r} is not host[:port] or *.domain[:port]"
                )
            ]
        )
    name, port = split
    return _Host(f"*.{name}" if wildcard else name, port)


def parse_hosts(entries: Sequence[str]) -> tuple[_Host, ...]:
    """``server.allowed_hosts``, parsed; a ConfigError naming a bad entry."""
    return tuple(_allowed(i, entry) for i, entry in enumerate(entries) if entry != "*")


def _own(server: tuple[str, int | None] | None) -> list[_Host]:
    """The names of the address a connection arrived on (ASGI's ``server``)."""
    if server is None or not server[0]:
        return []
    address, port = server
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return [_Host(address.lower(), port)]  # a name, such as a test client's
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack socket: the client used the IPv4 address
    if ip.is_loopback:
        return [_Host(name, port) for name in _LOOPBACK_NAMES]
    return [_Host(f"[{ip}]" if ip.version == 6 else str(ip), port)]


_PREFLIGHT = (
    ("access-control-allow-methods", "GET, HEAD, POST, PUT, DELETE"),
    ("access-control-allow-headers", "authorization, content-type, if-match, x-api-key"),
    ("access-control-max-age", "600"),
)


def _adding(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """``send``, adding ``headers`` to the answer's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return sending


class OriginGuard:
    """ASGI middleware: a 403 for a ``Host`` that is not this server's and for a page
    of another origin, with the error body every answer has and what to configure."""

    def __init__(self, app: ASGIApp, *, hosts: Sequence[str] = (), origins: Sequence[str] = ()) -> None:
        self.app = app
        self.any_host = "*" in hosts
        self.hosts = parse_hosts(hosts)
        self.any_origin = "*" in origins
        self.origins = frozenset(origin.lower() for origin in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        reason = self.refusal(scope)
        if reason is not None:
            status, kind, text = reason
            await JSONResponse(error_body_at(scope.get("path", ""), status, kind, text), status)(
                scope, receive, send
            )
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin", "").strip().lower()
        if not origin or not (self.any_origin or origin in self.origins):
            await self.app(scope, receive, send)  # no page, or the server's own
            return
        # A page of a configured origin: CORS, so that its browser lets it send JSON and read
        # the answers. Without credentials: an API key travels in a header, never a cookie.
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
        if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
            await Response(status_code=204, headers=dict(_PREFLIGHT))(scope, receive, _adding(send, cors))
            return
        await self.app(scope, receive, _adding(send, [*cors, (b"access-control-expose-headers", b"ETag")]))

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(status, type, reason) for a request to refuse, or None."""
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is not None and not self.any_host:
            split = _split(host.strip())
            if split is None:
                return 400, "illegal_argument_exception", f"the Host header {host[:100]!r} is not host[:port]"
            name, port = split  # without a port, the name decides (a rebound page sends its own)
            if not any(allowed.matches(name, port) for allowed in (*_own(scope.get("server")), *self.hosts)):
                return (
                    403,
                    "security_exception",
                    f"this server does not answer to the host {host[:100]!r} (a guard against DNS "
                    "rebinding); if clients reach it by that name, add it to server.allowed_hosts "
                    "in the configuration file",
                )
        origin = headers.get("origin")
        if origin is None or self.any_origin:
            return None
        origin = origin.strip().lower()
        if origin in self.origins:
            return None
        own_scheme = {"ws": "http", "wss": "https"}.get(
            scope.get("scheme", "http"), scope.get("scheme", "http")
        )
        if host is not None and origin == f"{own_scheme}://{host.strip().lower()}":
            return None  # the server's own page, such as /ui (behind a TLS proxy: X-Forwarded-Proto)
        return (
            403,
            "security_exception",
            f"a page at {origin[:100]!r} may not call this API (a cross-origin request); "
            "to let that page call it, add its origin to server.allowed_origins in the "
            "configuration file",
        )
