"""Anthropic's token count through the proxy: ``POST /proxy/{definition}/v1/messages/count_tokens``.

Claude Code, pointed at a base URL, calls it often (``/v1/messages/count_tokens?beta=true``)
to weigh the parts of its context: its system prompt, its tools, its memory files. It goes
to the model's upstream as the client sent it (the model named as upstream, the client's
query kept), and the upstream's answer comes back unchanged: the provider's own count of what
it was given. Nothing is managed or recorded (no model is called); the keys, the body limit and
the model's deadline hold as on the Messages route.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from ...errors import NotFound
from ..params import NAME
from ..requests import body_text, state
from .apis import APIS
from .handler import (
    _RETURNED,
    DEFINITION_HEADER,
    _answer,
    _authorize,
    _fault,
    _headers,
    _model,
    _no_definition,
    _query,
    _read,
    _Refused,
    upstream_url,
)

__all__ = ["count_tokens"]

_API = APIS["messages"]
_ON_THE_LOOP = 65536
"""Characters of a body read and written on the event loop; a larger one, in a worker thread."""


def _encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


async def count_tokens(request: Request) -> Response:
    """The upstream's count of a Messages request (see the module docstring)."""
    try:
        return await _count(request)
    except Exception as exc:  # in Anthropic's shape, as the Messages route's answers
        return _answer(_API, exc)


async def _count(request: Request) -> Response:
    own_key = _authorize(request)
    _query(request)  # before any work: a query too long to go upstream
    st = state(request)
    name = request.headers.get(DEFINITION_HEADER, request.path_params["definition"])
    if not NAME.fullmatch(name):
        raise _Refused(400, "illegal_argument_exception", f"{name[:60]!r}: not a definition name")
    text = await body_text(request, setting="proxy_max_body_bytes")
    large = len(text) > _ON_THE_LOOP  # a large body is read and written off the event loop
    try:
        body = await asyncio.to_thread(json.loads, text) if large else json.loads(text)
    except ValueError as exc:
        raise _Refused(400, "illegal_argument_exception", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _Refused(
            400, "illegal_argument_exception", "the body must be a JSON object (a Messages request)"
        )
    try:
        await asyncio.to_thread(st.store.resolve_version, name)
    except NotFound:
        raise await _no_definition(st, name) from None
    config = _model(request, body, _API, window=False)  # a count manages nothing
    headers = _headers(request, config, own_key)
    pool = st.runner.pool
    assert pool is not None  # create_app gives the runner the server's pool
    client = pool.aclient(config)
    url = upstream_url(config, "/messages/count_tokens", request)
    outgoing = {**body, "model": config.model}
    content = await asyncio.to_thread(_encoded, outgoing) if large else _encoded(outgoing)
    deadline = asyncio.get_running_loop().time() + config.timeout
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.send(
                client.build_request("POST", url, content=content, headers=headers), stream=True
            )
    except (TimeoutError, httpx.HTTPError) as exc:
        raise _fault(config, exc, "could not reach") from None
    try:
        data = await _read(response, deadline, config)
    finally:
        await response.aclose()
    returned = {k: v for k, v in response.headers.items() if _RETURNED.fullmatch(k.lower())}
    return Response(data, response.status_code, headers=returned)
