"""The HTTP server: uvicorn's h11 protocol, with a deadline for a request's headers.

uvicorn times out idle keep-alive connections but not a request whose headers trickle
in a byte at a time, so a few hundred such clients would hold connections open for as
long as they like. Here every request's headers must be whole within
``server.header_timeout_seconds`` of the connection or of the previous answer; otherwise
the client gets a 408 with the JSON error and the connection is closed. The body has its
own deadline (``server.body_timeout_seconds``, in :mod:`ctxmgmt.api.requests`).

A request whose body is framed twice (``Content-Length`` and ``Transfer-Encoding`` both) is
a 400 at once, its connection closed: h11 would go by the chunks, a proxy in front of the
server may go by the length, and the bytes one takes for a body the other would take for
the next request (request smuggling, RFC 9112 section 6.3).

A request target in absolute form (``GET http://host:8000/_health``, what a client sends
when told the server is its proxy) is served as its path, its authority taken for the
``Host`` header (RFC 9112 section 3.2.2): uvicorn would route ``http://host:8000/_health``
as a path, a 404.
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
import os
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .config import ServerConfig

__all__ = ["serve_workers", "uvicorn_config", "worker_app"]

_DB_ENV = "CTXMGMT_SERVE_DATABASE_URL"
_CONFIG_ENV = "CTXMGMT_SERVE_CONFIG"


_FRAMINGS = frozenset((b"content-length", b"transfer-encoding"))
_SAID_CHARS = 200


def _said(reason: str) -> str:
    """A reason that may quote the client's bytes (h11's "illegal header line: …"), bounded."""
    return reason if len(reason) <= _SAID_CHARS else reason[: _SAID_CHARS - 1] + "…"


_ABSOLUTE = re.compile(rb"(?i)https?://([^/?#]*)")


def _origin_form(request: h11.Request) -> h11.Request:
    """A request whose target is in absolute form, as the same request in origin form, its
    ``Host`` the target's authority (RFC 9112 section 3.2.2); any other, as it came."""
    found = _ABSOLUTE.match(request.target)
    if found is None:
        return request
    rest = request.target[found.end() :]
    target = rest if rest.startswith(b"/") else b"/" + rest
    headers = [(name, value) for name, value in request.headers if name != b"host"]
    return h11.Request(
        method=request.method,
        target=target,
        headers=[(b"host", found[1]), *headers],
        http_version=request.http_version,
    )


def _refusal(request: h11.Request) -> tuple[int, str] | None:
    """What h11 takes that is refused here (a status and why): a body framed both by length
    and by chunks, a version of HTTP other than 1.0 and 1.1 (h11 reads any ``d.d``)."""
    if _FRAMINGS.issubset(name for name, _ in request.headers):
        return 400, "the request has both Content-Length and Transfer-Encoding; send only one"
    if request.http_version not in (b"1.0", b"1.1"):
        return 505, f"HTTP/{request.http_version.decode('ascii')} is not served here; send HTTP/1.1"
    return None


class _DeadlineProtocol(H11Protocol):
    def __init__(self, *args: Any, header_seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_seconds = header_seconds
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused: tuple[int, str] | None = None  # why the request was refused: status, reason
        self.conn.next_event = functools.partial(self._next_event, self.conn.next_event)  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE and self.conn.our_state is not h11.DONE:
            self._disarm()  # a request's headers are whole, and it is not answered yet

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        # The next request's headers have their own deadline; a request answered before its
        # body was read (a 405, a 413, a route without a body) must finish sending that body
        # by the same deadline, or the connection is closed: a trickle holds nothing open.
        self._arm()

    def _unsupported_upgrade_warning(self) -> None:
        """An upgrade (a WebSocket handshake) reaches the app as HTTP, which answers it with a
        426 (:mod:`ctxmgmt.api.upgrades`): nothing to warn of."""

    def _next_event(self, next_event: Any) -> Any:
        """h11's next event, with why a request was refused kept for the answer (uvicorn
        answers every protocol error with one generic 400): h11's reason, or ours
        (:func:`_refusal`)."""
        try:
            event = next_event()
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint if exc.error_status_hint in (431, 501) else 400
            self._refused = (status, _said(str(exc)))
            raise
        if isinstance(event, h11.Request):
            if (refused := _refusal(event)) is not None:
                self._refused = refused
                raise h11.RemoteProtocolError(refused[1])
            return _origin_form(event)
        return event

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP: the JSON error every other answer has, then close. Once
        its answer has begun (a 404 before a malformed chunk of its body), the connection is
        closed with no second answer, which a client would take for its next request's."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.close()
            return
        status, reason = self._refused or (400, msg)
        phrase = http.HTTPStatus(status).phrase
        kind = phrase.lower().replace(" ", "_")
        self._close_with(status, phrase, kind, f"{reason} (the request is not valid HTTP/1.1)")

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_seconds, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY and self.conn.our_state is h11.DONE:
            self.transport.close()  # answered already; the rest of its body is too slow
            return
        if self.conn.their_state is not h11.IDLE:
            return
        if self.conn.our_state is h11.IDLE and self.conn.trailing_data[0]:
            # Part of a request arrived: answer it, so the client knows why it is closed.
            reason = (
                f"the request headers did not arrive within {self.header_seconds:g} s "
                "(server.header_timeout_seconds)"
            )
            self._close_with(408, "Request Timeout", "request_timeout", reason)
        self.transport.close()

    def _close_with(self, status: int, phrase: str, kind: str, reason: str) -> None:
        """Write a JSON error in OpenSearch's shape, outside h11's state, and close."""
        body = json.dumps({"error": {"type": kind, "reason": reason}, "status": status}).encode()
        head = (
            f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def uvicorn_config(app: Any, server: ServerConfig, **options: Any) -> Any:
    """uvicorn's configuration for ``app``, with the server's timeouts."""
    import uvicorn

    protocol = functools.partial(_DeadlineProtocol, header_seconds=server.header_timeout_seconds)
    options.setdefault("log_level", "warning")
    return uvicorn.Config(
        app,
        http=protocol,  # type: ignore[arg-type]
        ws="none",  # no WebSocket: a handshake is HTTP the app answers with a 426
        timeout_keep_alive=server.keep_alive_seconds,  # type: ignore[arg-type]
        **options,
    )


def worker_app() -> Any:
    """The app of one worker process of ``ctxmgmt serve --workers N`` (uvicorn's app
    factory): the parent has already migrated the database and loaded the definitions."""
    from ..store import DefinitionStore
    from .app import create_app
    from .config import load_config, open_offloader

    models, server = load_config(os.environ.get(_CONFIG_ENV) or None)
    store = DefinitionStore.open(os.environ[_DB_ENV], upgrade=False)
    offloader = open_offloader(server.offload, store.engine)
    return create_app(store, models=models, config=server, offloader=offloader)


def serve_workers(
    sock: Any, server: ServerConfig, workers: int, database_url: str, config: str | None
) -> None:
    """Serve on a bound socket with ``workers`` processes (uvicorn's supervisor), each with
    its own app and database pool. SQLite (WAL, busy timeout) is shared by the processes of
    one host; PostgreSQL by any number of hosts."""
    from uvicorn.supervisors import Multiprocess

    os.environ[_DB_ENV] = database_url
    os.environ[_CONFIG_ENV] = config or ""
    options = uvicorn_config(f"{__name__}:worker_app", server, factory=True, workers=workers)
    Multiprocess(options, sockets=[sock]).run()
