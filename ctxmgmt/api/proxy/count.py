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

from starlette.requests import Request
from starlette.responses import Response

from ..requests import body_text, state
from . import upstream
from .apis import APIS
from .body import parse, upstream_text
from .checks import answer, authorize, definition_name, model_of, stored_version

__all__ = ["count_tokens"]

_API = APIS["messages"]
_ON_THE_LOOP = 65536
"""Characters of a body read on the event loop; a larger one is read in a worker thread."""


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
    # Read and checked as the Messages route's body (no NaN, no lone surrogate, no key twice,
    # bounded nesting); its text goes upstream as the client wrote it, the model's name
    # written in.
    parsed = (
        await asyncio.to_thread(parse, text, _API.field)
        if len(text) > _ON_THE_LOOP
        else parse(text, _API.field)
    )
    await stored_version(st, name)
    config = model_of(request, parsed.data, _API, window=False)  # a count manages nothing
    sent = upstream.headers(request, config, own_key)
    target = upstream.url(config, "/messages/count_tokens", request)
    # The conversation as the client wrote it (none, or not a list: the upstream says so).
    outgoing = upstream_text(parsed, None, {"model": config.model})
    deadline = asyncio.get_running_loop().time() + config.timeout
    response = await upstream.call(request, config, target, outgoing.encode("utf-8"), sent, deadline)
    try:
        data = await upstream.read(response, deadline, config)
    finally:
        await response.aclose()
    upstream.answer_of(data, response)  # a success that is no JSON object is the upstream's fault
    return Response(data, response.status_code, headers=upstream.returned(response))
