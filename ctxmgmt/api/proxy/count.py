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

from starlette.requests import Request
from starlette.responses import Response

from ..requests import body_text, state
from . import upstream
from .apis import APIS
from .checks import Refused, answer, authorize, definition_name, model_of, stored_version

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
        return answer(_API, exc)


async def _count(request: Request) -> Response:
    own_key = authorize(request)
    upstream.query(request)  # before any work: a query too long to go upstream
    st = state(request)
    name = definition_name(request)
    text = await body_text(request, setting="proxy_max_body_bytes")
    large = len(text) > _ON_THE_LOOP  # a large body is read and written off the event loop
    try:
        body = await asyncio.to_thread(json.loads, text) if large else json.loads(text)
    except ValueError as exc:
        raise Refused(400, "illegal_argument_exception", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Refused(
            400, "illegal_argument_exception", "the body must be a JSON object (a Messages request)"
        )
    await stored_version(st, name)
    config = model_of(request, body, _API, window=False)  # a count manages nothing
    sent = upstream.headers(request, config, own_key)
    target = upstream.url(config, "/messages/count_tokens", request)
    outgoing = {**body, "model": config.model}
    content = await asyncio.to_thread(_encoded, outgoing) if large else _encoded(outgoing)
    deadline = asyncio.get_running_loop().time() + config.timeout
    response = await upstream.call(request, config, target, content, sent, deadline)
    try:
        data = await upstream.read(response, deadline, config)
    finally:
        await response.aclose()
    return Response(data, response.status_code, headers=upstream.returned(response))
