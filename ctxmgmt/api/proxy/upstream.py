"""The call to a model's upstream: its URL (with the client's query), the headers that go and
come back, one request within the model's deadline, its answer read within bounds, and its
faults as the proxy answers them (504 past the deadline, else 502).

Keys: the model's configured key (``api_key_env``), else the client's ``Authorization`` /
``x-api-key`` passed on (never a key that is the project's). No key is stored, logged or
recorded.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from typing import Any

import httpx
from starlette.requests import Request

from ..._reply import error_message
from ...llm import ModelConfig
from ...llm.decoding import Decoder, TooLarge
from ..requests import key_in, state
from .checks import KEY_HEADER, Refused

__all__ = [
    "MAX_QUERY_BYTES",
    "answer_of",
    "call",
    "decoded",
    "fault",
    "headers",
    "looks_like_events",
    "query",
    "read",
    "returned",
    "url",
]

MAX_QUERY_BYTES = 8192
"""A client's query string goes upstream up to this long (a longer one is refused: httpx
builds no URL over 64 KB, and no provider API takes one)."""
# The client's headers that go upstream as they came (besides its key, when it is not ours):
# the API's version and features, the account's scope, and who calls and in which session
# (SDKs' x-stainless-*, Claude Code's user-agent, x-app and x-claude-code-*, Codex's
# originator, session_id and x-codex-*). Named, not "all but": a holder of a proxy key must
# not steer a gateway or a method override beside the operator's upstream key.
_FORWARDED = re.compile(
    r"anthropic-[\w-]+|openai-[\w-]+|user-agent|accept|x-app|originator|version"
    r"|session[-_]id|conversation[-_]id|thread[-_]id|x-client-request-id"
    r"|x-stainless-[\w-]+|x-claude-code-[\w-]+|x-codex-[\w-]+"
)
# The upstream's headers that come back: the body's type, its request ids, rate limits and
# whether and when to retry (the SDKs read x-should-retry and retry-after-ms), the model and
# features it used (never a redirect's Location: an SDK would follow it with the
# project's key and the whole prompt).
_RETURNED = re.compile(
    r"content-type|x-request-id|request-id|retry-after|retry-after-ms|x-should-retry|openai-[\w-]+"
    r"|x-ratelimit-[\w-]+|anthropic-ratelimit-[\w-]+|anthropic-organization-id"
    r"|x-codex-[\w-]+|x-reasoning-included|x-models-etag"
)
_MAX_HEADERS = 100
"""Headers read each way at most (a client's or an upstream's flood stays here)."""


def _plain(value: str) -> bool:
    """A header value that goes on as it is: printable ASCII (any other would fail its encoding)."""
    return value.isascii() and value.isprintable()


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
    for name, value in request.headers.items()[:_MAX_HEADERS]:  # Starlette's: a list
        if _FORWARDED.fullmatch(name) and _plain(value):
            out.setdefault(name, value)
    configured = config.api_key()
    if configured:
        if config.provider == "anthropic":
            out["x-api-key"] = configured
        else:
            out["authorization"] = f"Bearer {configured}"
    elif not own_key:  # the client's own upstream key, never one of the project's
        server = state(request).config
        for name in ("authorization", "x-api-key"):
            given = request.headers.get(name)
            if given is None:
                continue
            if not _plain(given):  # it would fail its encoding upstream: said, not dropped
                raise Refused(
                    400, "illegal_argument_exception", f"{name}: an API key is printable ASCII characters"
                )
            if server.auth_enabled and server.find(key_in(name, given)) is not None:
                continue
            out[name] = given
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
    """The upstream's headers that go back to the client (see ``_RETURNED``)."""
    out: dict[str, str] = {}
    for name, value in response.headers.multi_items()[:_MAX_HEADERS]:
        name = name.lower()
        if _RETURNED.fullmatch(name) and _plain(value):
            out.setdefault(name, value)
    return out


async def call(
    request: Request,
    config: ModelConfig,
    target: str,
    content: bytes | None,
    sent: dict[str, str],
    deadline: float,
    *,
    method: str = "POST",
) -> httpx.Response:
    """Send ``content`` to ``target`` (a POST, or ``method``) through the server's kept-alive
    pool, by ``deadline`` (the event loop's clock): the answer's head (its body is read as a
    stream)."""
    pool = state(request).runner.pool
    assert pool is not None  # create_app gives the runner the server's pool
    client = pool.aclient(config)
    outgoing = client.build_request(method, target, content=content, headers=sent)
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.send(outgoing, stream=True)
    except (TimeoutError, httpx.HTTPError) as exc:
        raise fault(config, exc, "could not reach") from None
    if not 100 <= response.status_code <= 599:  # three digits, but no HTTP status to pass on
        await response.aclose()
        raise Refused(
            502,
            "llm_exception",
            f"the upstream of {config.id!r} at {_shown(config.base_url)} answered with status "
            f"{response.status_code}, which is no HTTP status (100-599)",
        )
    if 300 <= response.status_code < 400:  # never followed: it would take the key and the prompt along
        await response.aclose()
        to = _location(response.headers.get("location", ""))
        raise Refused(
            502,
            "llm_exception",
            f"the upstream of {config.id!r} at {_shown(config.base_url)} answered {response.status_code}, "
            f"a redirect (to {to}), which the proxy does not follow: set the model's base_url to "
            "the API's own address",
        )
    return response


async def read(response: httpx.Response, deadline: float, config: ModelConfig) -> bytes:
    """The answer's body, by ``deadline``, decoded within the model's ``max_response_bytes``."""
    try:
        async with asyncio.timeout_at(deadline):
            return await decoded(response, config).read(response.aiter_raw())
    except TooLarge as exc:
        raise Refused(502, "llm_exception", f"the upstream's answer: {exc}") from None
    except (TimeoutError, httpx.HTTPError) as exc:
        raise fault(config, exc, "broke off") from None


def decoded(response: httpx.Response, config: ModelConfig, *, stream: bool = False) -> Decoder:
    """The decoder of an answer's body (as it comes on the wire: ``aiter_raw``), bounded by
    ``config.max_response_bytes``, or a stream passed on by ``max_stream_bytes``; httpx's own
    decoding unpacks a chunk whole, unbounded."""
    if stream:
        return Decoder(config.max_stream_bytes, response.headers, "max_stream_bytes")
    return Decoder(config.max_response_bytes, response.headers)


def fault(config: ModelConfig, exc: BaseException, failed: str) -> Refused:
    """The upstream's fault as the proxy answers it: a 504 past the model's deadline, else a
    502 saying what it did (``could not reach``, ``broke off``), where (its ``base_url``,
    without any user or password in it) and what to check."""
    where = _shown(config.base_url)
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return Refused(
            504,
            "llm_timeout",
            f"the upstream of {config.id!r} at {where} did not answer within {config.timeout:g} s "
            "(the model's timeout)",
        )
    if isinstance(exc, httpx.ConnectError):  # no connection made: where it points is the question
        return Refused(
            502,
            "llm_exception",
            f"could not reach the upstream of {config.id!r} at {where} ({type(exc).__name__}): "
            "check its base_url and that it is running",
        )
    return Refused(
        502, "llm_exception", f"the upstream of {config.id!r} at {where} {failed}: {type(exc).__name__}"
    )


def _location(location: str) -> str:
    """Where a redirect points, to show: no user, password, query or fragment (a token may
    ride in any of them), at most 200 characters."""
    if not location or not _plain(location):
        return "nowhere it says plainly"
    try:
        parts = urllib.parse.urlsplit(location[:2048])
    except ValueError:
        return "an address that is no URL"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))[:200]


def _shown(base_url: str) -> str:
    """A base URL to show: without the user and password it may hold."""
    scheme, sep, rest = base_url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


_EVENTS = re.compile(rb"\s*(?:data|event|id|retry)?:")
"""How a server-sent event stream begins (a field, or a comment)."""


def looks_like_events(data: bytes) -> bool:
    """Whether a body begins as a server-sent event stream does."""
    return _EVENTS.match(data[:64]) is not None


_ANSWERS = {"chat": "choices", "messages": "content", "responses": "output"}
"""The member every successful answer of each API holds, a list."""


def _not_events(kind: str) -> Refused:
    return Refused(
        502,
        "llm_exception",
        f"the upstream answered a streamed request (stream: true) with one JSON object ({kind}), "
        "not server-sent events; check that the model's base_url is the provider's API, and that "
        "it streams",
    )


def answer_of(
    data: bytes, response: httpx.Response, stream: bool = False, recall: bool = False, api: str | None = None
) -> Any:
    """An upstream's answer parsed, or None (an error status, an answer nested deeper than the
    parser goes, or events asked for under another content type: it goes to the client as it
    came, unread). A success that is no JSON object (an HTML page, a cut-off body), one that
    is not ``api``'s answer (no ``choices``, ``content`` or ``output`` list), or one whole
    object where events were asked for, is the upstream's fault: a 502 that says what came,
    where a client's SDK would fail to parse it or take it for an empty answer."""
    if not response.is_success or (stream and looks_like_events(data)):
        return None
    kind = response.headers.get("content-type") or "no content type"
    try:
        answer = json.loads(data)
    except RecursionError:
        if recall:  # unread, it may hold a recall call, which the client must never get
            raise Refused(
                502,
                "llm_exception",
                "the upstream's answer is nested deeper than the proxy reads, and recall tools "
                "were offered: it cannot be told whether it calls one",
            ) from None
        if stream:  # no events, whatever it holds: the client's SDK waits for events
            raise _not_events(kind) from None
        return None
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        member = _ANSWERS.get(api or "")
        if member is not None and not isinstance(answer.get(member), list):
            said = error_message(answer)  # an error some routers send with a 200 (OpenRouter, LiteLLM)
            raise Refused(
                502,
                "llm_exception",
                f"the upstream answered {response.status_code} with an error: {said}"
                if said
                else f"the upstream answered {response.status_code} with a JSON object that holds no "
                f"{member!r} list, which every {api} answer has; check that the model's base_url "
                "and provider are the API's the client speaks",
            )
        if stream:
            raise _not_events(kind)
        return answer
    raise Refused(
        502,
        "llm_exception",
        f"the upstream answered {response.status_code} with {len(data):,} bytes ({kind}) that are "
        "not a JSON object; check that the model's base_url is the provider's API",
    )
