"""The models configuration and a chat client over httpx: OpenAI-compatible chat
completions, or Anthropic's Messages API.

The configuration is a YAML file with a ``models:`` mapping::

    models:
      summarizer:
        base_url: http://127.0.0.1:8080/v1
        model: gpt-4o-mini
        api_key_env: OPENAI_API_KEY   # the key is read from this variable
        context_window: 128000
        timeout: 30                   # seconds for the whole call: connect, headers, body, retries
        max_retries: 2
        max_response_bytes: 8388608   # a longer reply is refused (502), never read whole
      claude:
        provider: anthropic           # POST {base_url}/messages, x-api-key, anthropic-version
        base_url: https://api.anthropic.com/v1
        model: claude-sonnet-4-5
        api_key_env: ANTHROPIC_API_KEY
        context_window: 200000
        max_tokens: 8192              # the reply's limit (Anthropic requires one; default 4096)
        pricing: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}  # per million tokens

With ``provider: anthropic`` the client places ``cache_control`` breakpoints at the end of
the stable prefix (the tools, the system prompt, the summary) and at the last message.

``api_key_env`` is optional: without it no key is sent (a local endpoint).

Every call has one deadline, ``timeout`` (600 s by default, as the providers' SDKs):
connecting, the headers, every byte of the body, and the retries with their waits all count
inside it; past it the call ends with :class:`~ctxmgmt.errors.LLMTimeoutError` (the API
answers 504). A retry that would not fit in what is left is not started. A reply is read as
a stream and refused past ``max_response_bytes`` (8 MiB by default; a 502 naming the key),
and nothing of a reply enters a conversation before the one reply validator
(:mod:`ctxmgmt._reply`) passed it.

The CLI finds it through ``--config`` or ``CTXMGMT_CONFIG``. An API key never
appears in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import http.cookiejar
import os
import random
import ssl
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .. import _reply
from ..errors import LLMError, LLMTimeoutError
from ..formats import anthropic as _anthropic
from ..messages import is_summary
from .config import (
    ModelConfig,
    ModelsConfig,
    load_models,
)
from .decoding import Decoder, TooLarge

__all__ = ["ChatClient", "ChatResponse", "HTTPPool", "ModelConfig", "ModelsConfig", "load_models"]

_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_PARSE_INLINE = 64 * 1024
"""Replies up to this size are checked on the event loop; longer ones in a worker thread."""


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """The assistant message of a completion, and the token usage reported."""

    message: dict[str, Any]
    usage: dict[str, Any]

    @property
    def content(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for the process: loading the CA bundle costs ~20 ms, so every client
    shares it (httpx's own default context)."""
    return httpx.create_ssl_context()


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that stores nothing (every domain refused)."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


class HTTPPool:
    """httpx clients kept open and reused: one per endpoint, settings and transport, so that
    a call pays neither a client's construction (its CA bundle) nor, on a kept-alive
    connection, a TLS handshake. A client belongs to the event loop that made them; close
    them with :meth:`aclose` on that loop (the server does it on shutdown), and those of sync
    calls (made on the driver's loop) with :meth:`close` or :meth:`aclose`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._async: dict[tuple[Any, ...], httpx.AsyncClient] = {}

    @staticmethod
    def _key(config: ModelConfig, transport: Any) -> tuple[Any, ...]:
        return (
            config.base_url,
            config.timeout,
            config.max_connections,
            config.keep_alive_seconds,
            id(transport),
        )

    @staticmethod
    def _options(config: ModelConfig) -> dict[str, Any]:
        limits = httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_connections,
            keepalive_expiry=config.keep_alive_seconds,
        )
        # No cookie is kept: a pooled client serves every execution and every proxied client,
        # and an endpoint's cookie from one answer would go out with everyone's next request.
        return {"timeout": config.timeout, "limits": limits, "verify": _tls(), "cookies": _no_cookies()}

    def aclient(
        self, config: ModelConfig, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        key = (*self._key(config, transport), id(asyncio.get_running_loop()))
        with self._lock:
            found = self._async.get(key)
            if found is None or found.is_closed:
                found = self._async[key] = httpx.AsyncClient(transport=transport, **self._options(config))
            return found

    def _take(self, loop: asyncio.AbstractEventLoop | None) -> list[httpx.AsyncClient]:
        """Forget the clients of ``loop`` (every client for None), returning them."""
        with self._lock:
            mine = [c for k, c in self._async.items() if loop is None or k[-1] == id(loop)]
            self._async = {k: c for k, c in self._async.items() if loop is not None and k[-1] != id(loop)}
        return mine

    def close(self) -> None:
        """Close the clients of sync calls."""
        driver = _DRIVER.running()
        clients = self._take(driver) if driver is not None else []
        if clients and driver is not None:
            asyncio.run_coroutine_threadsafe(_aclose_all(clients), driver).result(timeout=10)

    async def aclose(self) -> None:
        """Close the clients of the running loop and of sync calls (and forget any other's)."""
        mine = self._take(asyncio.get_running_loop())
        driver = _DRIVER.running()
        synced = self._take(driver) if driver is not None else []
        self._take(None)
        await _aclose_all(mine)
        if synced and driver is not None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_aclose_all(synced), driver))


async def _aclose_all(clients: list[httpx.AsyncClient]) -> None:
    for client in clients:
        await client.aclose()


SHARED_POOL = HTTPPool()
"""The pool of sync calls given none (closed at exit). Async calls pool only where a pool
is passed in, whose owner closes it on its loop: the runner per execution, the server on
shutdown."""
atexit.register(SHARED_POOL.close)


class ChatClient:
    """Calls one chat endpoint, with a deadline for the whole call and retries with backoff
    on 429 and 5xx inside it, over pooled keep-alive connections. The reply is read as a
    stream, refused past ``max_response_bytes``, and checked by the one reply validator
    (:mod:`ctxmgmt._reply`) before anything of it is returned. Pass an httpx transport to
    route requests elsewhere (tests).

    The async core does the work; :meth:`complete` drives it on a private event loop (one
    daemon thread for the process), so a sync call has the same deadline, to the moment."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        pool: HTTPPool | None = None,
    ) -> None:
        self.config = config
        if async_transport is None and transport is not None:
            async_transport = (
                transport if isinstance(transport, httpx.AsyncBaseTransport) else _Threaded(transport)
            )
        self._async_transport = async_transport
        self._pool = pool

    def _request(
        self, messages: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        config = self.config
        # Only encodings whose decoding the reply's size limit bounds as it goes.
        headers = {"content-type": "application/json", "accept-encoding": "gzip, deflate"}
        key = config.api_key()
        if config.provider == "anthropic":
            if key:
                headers["x-api-key"] = key
            headers["anthropic-version"] = config.anthropic_version
            stable = next((i for i, m in enumerate(messages) if is_summary(m)), None)
            body = {
                "model": config.model,
                "max_tokens": config.reply_limit,
                **_anthropic.request(
                    messages, params.get("tools") or (), breakpoints=config.cache_breakpoints, stable=stable
                ),
                **{k: v for k, v in params.items() if k != "tools"},
            }
            return config.base_url.rstrip("/") + "/messages", headers, body
        if key:
            headers["authorization"] = f"Bearer {key}"
        body = {"model": config.model, "messages": messages, **params}
        if config.max_tokens is not None:
            body.setdefault("max_tokens", config.max_tokens)
        return config.base_url.rstrip("/") + "/chat/completions", headers, body

    def _parse(self, status: int, raw: bytes) -> ChatResponse:
        if not 200 <= status < 300:  # a redirect is not followed: the base_url is to be fixed
            raise LLMError(
                f"the endpoint answered {status}: {_reason(raw)}", model_id=self.config.id, status=status
            )
        try:
            message, usage = _reply.read(raw, self.config.provider)
        except _reply.ReplyError as exc:
            kind = "a Messages API answer" if self.config.provider == "anthropic" else "a chat completion"
            raise LLMError(
                f"the endpoint's answer is not {kind}: {exc}", model_id=self.config.id, status=status
            ) from None
        return ChatResponse(message, usage)

    def _should_retry(self, attempt: int, status: int | None, headers: httpx.Headers | None) -> float | None:
        """Seconds to wait before another attempt, or None to stop."""
        if attempt >= self.config.max_retries:
            return None
        if status is not None and status not in _RETRY_STATUS:
            return None
        retry_after = headers.get("retry-after") if headers is not None else None
        if retry_after and retry_after.isascii() and retry_after.isdigit():  # '²' is a digit too
            return min(float(retry_after), 30.0)
        return float(min(0.25 * 2**attempt, 8.0) * (0.5 + random.random()))

    def complete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResponse:
        """The model's reply (see :meth:`acomplete`), from sync code."""
        return _DRIVER.run(self._acomplete(messages, params, self._pool or SHARED_POOL))

    async def acomplete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResponse:
        """The model's reply, checked; LLMError (a 502) or LLMTimeoutError (504) otherwise."""
        return await self._acomplete(messages, params, self._pool)

    async def _acomplete(
        self, messages: list[dict[str, Any]], params: Mapping[str, Any], pool: HTTPPool | None
    ) -> ChatResponse:
        url, headers, body = self._request(messages, params)
        if pool is None:  # no owner to close a pooled client on this loop: one per call
            options = HTTPPool._options(self.config)
            async with httpx.AsyncClient(transport=self._async_transport, **options) as http:
                return await self._call(http, url, headers, body)
        return await self._call(pool.aclient(self.config, self._async_transport), url, headers, body)

    async def _call(
        self, http: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any]
    ) -> ChatResponse:
        """Every attempt, and the waits between them, inside the call's one deadline."""
        deadline = time.monotonic() + self.config.timeout
        try:
            async with asyncio.timeout(self.config.timeout):
                for attempt in range(self.config.max_retries + 1):
                    try:
                        status, answered, raw = await self._send(http, url, headers, body, deadline)
                    except TooLarge as exc:  # the same again would be refused again
                        raise LLMError(str(exc), model_id=self.config.id) from None
                    except httpx.HTTPError as exc:
                        wait = self._should_retry(attempt, None, None)
                        if wait is None or time.monotonic() + wait >= deadline:
                            raise self._transport_error(exc) from None
                    else:
                        wait = self._should_retry(attempt, status, answered)
                        if wait is None or time.monotonic() + wait >= deadline:
                            if len(raw) <= _PARSE_INLINE:
                                return self._parse(status, raw)
                            # Checking megabytes takes a while: off the event loop.
                            return await asyncio.to_thread(self._parse, status, raw)
                    await asyncio.sleep(wait)
        except TimeoutError:
            raise self._timeout() from None
        raise AssertionError("unreachable")

    async def _send(
        self,
        http: httpx.AsyncClient,
        url: str,
        headers: dict[str, str],
        body: dict[str, Any],
        deadline: float,
    ) -> tuple[int, httpx.Headers, bytes]:
        """(status, headers, the body's decoded bytes) of one attempt, read as it arrives."""
        timeout = max(deadline - time.monotonic(), 0.001)
        async with http.stream("POST", url, headers=headers, json=body, timeout=timeout) as response:
            reply = Decoder(self.config.max_response_bytes, response.headers)
            return response.status_code, response.headers, await reply.read(response.aiter_raw())

    def _timeout(self) -> LLMTimeoutError:
        return LLMTimeoutError(
            f"timed out: no complete answer from {self.config.base_url} within {self.config.timeout:g} s "
            "(timeout: the whole call's deadline, retries included); raise timeout in the model's "
            "configuration if its answers take longer",
            model_id=self.config.id,
        )

    def _transport_error(self, exc: httpx.HTTPError) -> LLMError:
        if isinstance(exc, httpx.TimeoutException):  # its timeout is what was left of the deadline
            return self._timeout()
        detail = f": {exc}" if isinstance(exc, httpx.DecodingError) else ""
        return LLMError(
            f"the request to {self.config.base_url} failed ({type(exc).__name__}{detail})",
            model_id=self.config.id,
        )


class _Threaded(httpx.AsyncBaseTransport):
    """A sync transport (a caller's stand-in for the network) driven from the async core:
    its calls run in a worker thread, its answer read there."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        sync = httpx.Request(request.method, request.url, headers=request.headers, content=content)

        def send() -> httpx.Response:
            response = self._transport.handle_request(sync)
            try:
                return httpx.Response(response.status_code, headers=response.headers, content=response.read())
            finally:
                response.close()

        return await asyncio.to_thread(send)


class _Driver:
    """The event loop on which sync calls run the async core: one daemon thread for the
    process, started on first use (and again in a forked child)."""

    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="ctxmgmt-llm", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def running(self) -> asyncio.AbstractEventLoop | None:
        """The loop, if it was started."""
        return self._loop

    def run(self, call: Coroutine[Any, Any, ChatResponse]) -> ChatResponse:
        loop = self.loop()
        if threading.current_thread() is self._thread:  # it would wait on itself forever
            call.close()
            raise RuntimeError("a sync model call from the driver's own loop; await acomplete instead")
        future = asyncio.run_coroutine_threadsafe(call, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise


_DRIVER = _Driver()


def _reason(raw: bytes) -> str:
    """The error message of an error answer (bounded, valid Unicode)."""
    try:
        data = _reply.parse(raw, "")
    except _reply.ReplyError:
        return raw[:300].decode("utf-8", "replace") or "no reason given"
    return _reply.error_message(data) or raw[:300].decode("utf-8", "replace")


def parse_json_object(text: str) -> Any:
    """The JSON in a model's answer, tolerating a Markdown code fence, within the reply's
    bounds (depth, no NaN, no lone surrogate); a ValueError saying what is wrong otherwise."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return _reply.parse(stripped, "")
