"""The call to a model's upstream: its URL (with the client's query), the headers that go and
come back, one request within the model's deadline, its answer read within bounds, and its
faults as the proxy answers them (504 past the deadline, else 502).

Keys: the model's configured key (``api_key_env``), else the client's ``Authorization`` /
``x-api-key`` passed on (never a key that is the project's). No key is stored, logged or
recorded.
"""

from __future__ import annotations

import asyncio

import httpx
from starlette.requests import Request

from ...llm import ModelConfig
from ..requests import state
from .checks import KEY_HEADER, Refused

__all__ = ["MAX_QUERY_BYTES", "call", "fault", "headers", "query", "read", "returned", "url"]

MAX_QUERY_BYTES = 8192
"""A client's query string goes upstream up to this long (a longer one is refused: httpx
builds no URL over 64 KB, and no provider API takes one)."""
# What a client sends that stays here (every other header goes upstream as it came, as it
# would have gone to the provider: API versions and betas, the client's name, session and
# feature headers such as Codex's originator / session_id / x-codex-*): this hop's own (the
# connection, the body's framing and encoding, which the proxy sets), the keys (the upstream's
# go by the key rules), cookies, the project's X-Ctxmgmt-*, and what a browser or a proxy in
# front says of this hop.
_STAYS = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "content-type",
        "content-encoding", "accept-encoding", "expect", "authorization", "x-api-key", "api-key",
        "cookie", "forwarded", "via", "origin", "referer", "x-real-ip",
    }
)  # fmt: skip
_STAYS_PREFIXES = ("x-ctxmgmt-", "x-forwarded-", "sec-")
# What an upstream answers that does not come back: this hop's own, cookies, and what governs
# the upstream's own site (CORS, HSTS, alternative services); its body's type, request ids,
# rate limits, model and feature headers come back.
_DROPPED = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-connection", "te", "trailer",
        "transfer-encoding", "upgrade", "content-length", "content-encoding", "set-cookie",
        "server", "date", "via", "alt-svc", "strict-transport-security",
    }
)  # fmt: skip
_MAX_HEADERS = 100
"""Headers forwarded each way at most (a client's or an upstream's flood stays here)."""


def query(request: Request) -> str:
    """The client's query string, as it sent it (``?beta=true``), or a 414 when too long."""
    found = request.url.query
    if len(found) > MAX_QUERY_BYTES:
        raise Refused(414, "illegal_argument_exception", f"the query string is over {MAX_QUERY_BYTES} bytes")
    return found


def url(config: ModelConfig, path: str, request: Request) -> str:
    """The upstream's URL for ``path`` (after the model's ``base_url``, which holds no query),
    with the client's query string."""
    base = config.base_url.rstrip("/") + path
    found = query(request)
    return f"{base}?{found}" if found else base


def headers(request: Request, config: ModelConfig, own_key: bool) -> dict[str, str]:
    """The headers of the upstream request: the client's that go as they came, and the
    upstream's key (``own_key``: the client's key headers held the project's key)."""
    out = {"content-type": "application/json", "accept-encoding": "identity"}
    named = {v.strip().lower() for v in request.headers.get("connection", "").split(",")}
    for name, value in request.headers.items()[:_MAX_HEADERS]:  # Starlette's: a list
        if name not in _STAYS and name not in named and not name.startswith(_STAYS_PREFIXES):
            out.setdefault(name, value)
    configured = config.api_key()
    if configured:
        if config.provider == "anthropic":
            out["x-api-key"] = configured
        else:
            out["authorization"] = f"Bearer {configured}"
    elif not own_key:  # the client's own upstream key
        for name in ("authorization", "x-api-key"):
            if name in request.headers:
                out[name] = request.headers[name]
    elif request.headers.get("authorization") or request.headers.get("x-api-key"):
        raise Refused(
            400,
            "illegal_argument_exception",
            "the client's API key is the ctxmgmt key and the model has no upstream key configured: "
            f"configure api_key_env for the model, or send the ctxmgmt key as {KEY_HEADER}",
        )
    if config.provider == "anthropic":
        out.setdefault("anthropic-version", config.anthropic_version)
    return out


def returned(response: httpx.Response) -> dict[str, str]:
    """The upstream's headers that go back to the client (see ``_DROPPED``)."""
    out: dict[str, str] = {}
    for name, value in response.headers.multi_items()[:_MAX_HEADERS]:
        name = name.lower()
        if name not in _DROPPED and not name.startswith(("access-control-", "proxy-")):
            out.setdefault(name, value)
    return out


async def call(
    request: Request, config: ModelConfig, target: str, content: bytes, sent: dict[str, str], deadline: float
) -> httpx.Response:
    """POST ``content`` to ``target`` through the server's kept-alive pool, by ``deadline``
    (the event loop's clock): the answer's head (its body is read as a stream)."""
    pool = state(request).runner.pool
    assert pool is not None  # create_app gives the runner the server's pool
    client = pool.aclient(config)
    outgoing = client.build_request("POST", target, content=content, headers=sent)
    try:
        async with asyncio.timeout_at(deadline):
            return await client.send(outgoing, stream=True)
    except (TimeoutError, httpx.HTTPError) as exc:
        raise fault(config, exc, "could not reach") from None


async def read(response: httpx.Response, deadline: float, config: ModelConfig) -> bytes:
    """The answer's body, by ``deadline`` and within the model's ``max_response_bytes``."""
    data = bytearray()
    try:
        async with asyncio.timeout_at(deadline):
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > config.max_response_bytes:
                    raise Refused(
                        502,
                        "llm_exception",
                        f"the upstream's answer is over {config.max_response_bytes} bytes "
                        "(max_response_bytes)",
                    )
    except (TimeoutError, httpx.HTTPError) as exc:
        raise fault(config, exc, "broke off") from None
    return bytes(data)


def fault(config: ModelConfig, exc: BaseException, failed: str) -> Refused:
    """The upstream's fault as the proxy answers it: a 504 past the model's deadline, else a
    502 saying what it did (``could not reach``, ``broke off``)."""
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return Refused(
            504, "llm_timeout", f"the upstream {config.id!r} did not answer within {config.timeout:g} s"
        )
    return Refused(502, "llm_exception", f"the upstream {config.id!r} {failed}: {type(exc).__name__}")
