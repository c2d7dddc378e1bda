"""A client that asks for a WebSocket is told at once that the server speaks HTTP.

The Codex CLI, with OpenAI's own provider pointed at a base URL, first tries the Responses
API's WebSocket mode (``GET /v1/responses`` with ``Upgrade: websocket``) and falls back to
HTTP when told ``426 Upgrade Required``; a refused handshake's bare 403 made it retry five
times (6.7 s and an error line each). Every WebSocket handshake gets that 426 with a JSON
body in the path's shape (the provider's under ``/proxy/``): as a WebSocket denial response
when the server can send one, else a plain refusal; with no WebSocket library installed
(uvicorn then passes the request on as HTTP), the same 426 as an HTTP answer.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body_at

__all__ = ["NoWebSockets"]

_REASON = "this server speaks HTTP, not WebSocket: send the request over HTTP (POST)"


class NoWebSockets:
    """ASGI middleware: a 426 for every WebSocket handshake (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await _deny(scope, receive, send)
            return
        if scope["type"] == "http" and scope.get("method") == "GET" and _asks_websocket(scope):
            body = _body(scope)
            await send({"type": "http.response.start", "status": 426, "headers": _headers(body)})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _asks_websocket(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


def _body(scope: Scope) -> bytes:
    body = error_body_at(scope.get("path", ""), 426, "upgrade_required", _REASON)
    return json.dumps(body).encode()


def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]


async def _deny(scope: Scope, receive: Receive, send: Send) -> None:
    """A handshake a WebSocket-speaking server hands the app (``ctxmgmt serve`` speaks none:
    the app mounted in another server)."""
    message = await receive()  # websocket.connect
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        body = _body(scope)
        await send({"type": "websocket.http.response.start", "status": 426, "headers": _headers(body)})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
