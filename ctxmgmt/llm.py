"""The models configuration and a chat client over httpx: OpenAI-compatible chat
completions, or Anthropic's Messages API.

The configuration is a YAML file with a ``models:`` mapping::

    models:
      summarizer:
        base_url: http://127.0.0.1:8080/v1
        model: gpt-4o-mini
        api_key_env: OPENAI_API_KEY   # the key is read from this variable
        context_window: 128000
        timeout: 30
        max_retries: 2
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

The CLI finds it through ``--config`` or ``CTXMGMT_CONFIG``. An API key never
appears in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import random
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from . import _resources
from .cache import Pricing
from .errors import ConfigError, LLMError, Problem
from .formats import anthropic as _anthropic
from .loader import load_document
from .messages import is_summary

__all__ = ["ChatClient", "ChatResponse", "HTTPPool", "ModelConfig", "ModelsConfig", "load_models"]

CONFIG_ENV = "CTXMGMT_CONFIG"
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""The reply's limit sent to Anthropic when the model's configuration gives no max_tokens."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One chat endpoint: OpenAI-compatible, or Anthropic's Messages API."""

    id: str
    base_url: str
    model: str
    provider: str = "openai"
    """openai: ``{base_url}/chat/completions``; anthropic: ``{base_url}/messages``."""
    api_key_env: str | None = None
    context_window: int | None = None
    timeout: float = 60.0
    max_retries: int = 2
    max_connections: int = 10
    """Connections kept open to this endpoint at most (keep-alive, reused across calls)."""
    keep_alive_seconds: float = 30.0
    """An idle kept-alive connection is closed after this long."""
    max_tokens: int | None = None
    """The reply's limit (Anthropic: ``max_tokens``, DEFAULT_MAX_TOKENS when not given)."""
    anthropic_version: str = ANTHROPIC_VERSION
    cache_breakpoints: bool = True
    """Anthropic: mark the stable prefix with ``cache_control`` breakpoints."""
    pricing: Pricing | None = None
    """Prices per million tokens: an execution's estimated cost."""

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMError(
                f"the environment variable {self.api_key_env} (api_key_env) is not set",
                model_id=self.id,
            )
        return key


class ModelsConfig(Mapping[str, ModelConfig]):
    """Model id -> endpoint, from the ``models:`` mapping of the configuration."""

    def __init__(self, models: Mapping[str, ModelConfig] | None = None) -> None:
        self._models = dict(models or {})

    def __getitem__(self, model_id: str) -> ModelConfig:
        try:
            return self._models[model_id]
        except KeyError:
            known = ", ".join(sorted(self._models)) or "none"
            raise LLMError(
                f"not in the models configuration (configured: {known})", model_id=model_id
            ) from None

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._models

    def get(self, model_id: str, default: Any = None) -> Any:
        return self._models.get(model_id, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> ModelsConfig:
        validator = Draft202012Validator(_resources.schema("config.schema.json"))
        problems = [
            Problem("".join(f"/{p}" for p in e.absolute_path), e.message, None, source)
            for e in validator.iter_errors(data if data is not None else {})
        ]
        if problems:
            raise ConfigError(problems)
        models = {
            model_id: ModelConfig(
                id=model_id,
                **{k: v for k, v in spec.items() if k != "pricing"},
                pricing=Pricing.from_dict(spec["pricing"]) if "pricing" in spec else None,
            )
            for model_id, spec in (data or {}).get("models", {}).items()
        }
        return cls(models)


def load_models(path: str | Path | None = None) -> ModelsConfig:
    """The models configuration from ``path``, or ``$CTXMGMT_CONFIG``, or none."""
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        return ModelsConfig()
    doc = load_document(path)
    if doc.problems:
        raise ConfigError(doc.problems)
    return ModelsConfig.from_dict(doc.data, str(path))


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


class HTTPPool:
    """httpx clients kept open and reused: one per endpoint, settings and transport, so that
    a call pays neither a client's construction (its CA bundle) nor, on a kept-alive
    connection, a TLS handshake. Async clients belong to the event loop that made them;
    close them with :meth:`aclose` on that loop (the server does it on shutdown)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync: dict[tuple[Any, ...], httpx.Client] = {}
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
        return {"timeout": config.timeout, "limits": limits, "verify": _tls()}

    def client(self, config: ModelConfig, transport: httpx.BaseTransport | None = None) -> httpx.Client:
        key = self._key(config, transport)
        with self._lock:
            found = self._sync.get(key)
            if found is None or found.is_closed:
                found = self._sync[key] = httpx.Client(transport=transport, **self._options(config))
            return found

    def aclient(
        self, config: ModelConfig, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        key = (*self._key(config, transport), id(asyncio.get_running_loop()))
        with self._lock:
            found = self._async.get(key)
            if found is None or found.is_closed:
                found = self._async[key] = httpx.AsyncClient(transport=transport, **self._options(config))
            return found

    def close(self) -> None:
        """Close the sync clients."""
        with self._lock:
            clients, self._sync = list(self._sync.values()), {}
        for client in clients:
            client.close()

    async def aclose(self) -> None:
        """Close the async clients of the running loop (and forget those of any other)."""
        loop = id(asyncio.get_running_loop())
        with self._lock:
            mine = [c for k, c in self._async.items() if k[-1] == loop]
            self._async = {}
        for client in mine:
            await client.aclose()


SHARED_POOL = HTTPPool()
"""The process's sync clients (closed at exit). Async calls pool only where a pool is
passed in, whose owner closes it on its loop: the runner per execution, the server on
shutdown."""
atexit.register(SHARED_POOL.close)


class ChatClient:
    """Calls one chat-completions endpoint, with timeouts and retries with backoff on
    429 and 5xx, over pooled keep-alive connections. Pass an httpx transport to route
    requests elsewhere (tests)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        pool: HTTPPool | None = None,
    ) -> None:
        self.config = config
        self._transport = transport
        self._async_transport = async_transport
        self._pool = pool

    def _request(
        self, messages: list[dict[str, Any]], params: Mapping[str, Any]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        config = self.config
        headers = {"content-type": "application/json"}
        key = config.api_key()
        if config.provider == "anthropic":
            if key:
                headers["x-api-key"] = key
            headers["anthropic-version"] = config.anthropic_version
            stable = next((i for i, m in enumerate(messages) if is_summary(m)), None)
            body = {
                "model": config.model,
                "max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS,
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

    def _parse(self, response: httpx.Response) -> ChatResponse:
        if response.status_code >= 400:
            raise LLMError(
                f"the endpoint answered {response.status_code}: {_reason(response)}",
                model_id=self.config.id,
                status=response.status_code,
            )
        anthropic = self.config.provider == "anthropic"
        try:
            data = response.json()
            message = _anthropic.response_message(data) if anthropic else data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            kind = "a Messages API answer" if anthropic else "a chat completion"
            raise LLMError(
                f"the endpoint's answer is not {kind} ({exc})",
                model_id=self.config.id,
                status=response.status_code,
            ) from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return ChatResponse(message, usage)

    def _should_retry(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before another attempt, or None to stop."""
        if attempt >= self.config.max_retries:
            return None
        if response is not None and response.status_code not in _RETRY_STATUS:
            return None
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after and retry_after.isdigit():
            return min(float(retry_after), 30.0)
        return float(min(0.25 * 2**attempt, 8.0) * (0.5 + random.random()))

    def complete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResponse:
        url, headers, body = self._request(messages, params)
        http = (self._pool or SHARED_POOL).client(self.config, self._transport)
        for attempt in range(self.config.max_retries + 1):
            try:
                response = http.post(url, headers=headers, json=body)
            except httpx.HTTPError as exc:
                wait = self._should_retry(attempt, None)
                if wait is None:
                    raise self._transport_error(exc) from None
                time.sleep(wait)
                continue
            wait = self._should_retry(attempt, response)
            if wait is None:
                return self._parse(response)
            time.sleep(wait)
        raise AssertionError("unreachable")

    async def acomplete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResponse:
        url, headers, body = self._request(messages, params)
        if self._pool is None:  # no owner to close a pooled client on this loop: one per call
            options = HTTPPool._options(self.config)
            async with httpx.AsyncClient(transport=self._async_transport, **options) as http:
                return await self._apost(http, url, headers, body)
        return await self._apost(self._pool.aclient(self.config, self._async_transport), url, headers, body)

    async def _apost(
        self, http: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any]
    ) -> ChatResponse:
        for attempt in range(self.config.max_retries + 1):
            try:
                response = await http.post(url, headers=headers, json=body)
            except httpx.HTTPError as exc:
                wait = self._should_retry(attempt, None)
                if wait is None:
                    raise self._transport_error(exc) from None
                await asyncio.sleep(wait)
                continue
            wait = self._should_retry(attempt, response)
            if wait is None:
                return self._parse(response)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    def _transport_error(self, exc: httpx.HTTPError) -> LLMError:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        return LLMError(
            f"the request to {self.config.base_url} {kind} ({type(exc).__name__})",
            model_id=self.config.id,
        )


def _reason(response: httpx.Response) -> str:
    try:
        data = response.json()
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
    except ValueError:
        pass
    return (response.text or response.reason_phrase)[:300]


def parse_json_object(text: str) -> Any:
    """The JSON object in a model's answer, tolerating a Markdown code fence."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return json.loads(stripped)
