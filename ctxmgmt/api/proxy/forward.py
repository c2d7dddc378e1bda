"""The providers' endpoints beside a conversation's, forwarded as they are:

- ``POST /proxy/{definition}/v1/messages/count_tokens``: Anthropic's token count. Claude Code,
  pointed at a base URL, calls it often (``/v1/messages/count_tokens?beta=true``) to weigh
  the parts of its context: its system prompt, its tools, its memory files.
- ``POST /proxy/{definition}/v1/responses/input_tokens``: OpenAI's count of a Responses request.
- ``POST /proxy/{definition}/v1/responses/compact``: OpenAI's own compaction of a Responses
  conversation (Codex calls it to compact), which the client asked for by name.

Each goes to the model's upstream as the client sent it (the model named as upstream, the
client's query kept), and the upstream's answer comes back unchanged. Nothing is managed or
recorded; the keys, the body limit and the model's deadline hold as on the API's own route.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from ..requests import body_text, state
from . import upstream
from .apis import APIS, Api
from .body import parse, upstream_text
from .checks import answer, authorize, definition_name, model_of, stored_version

__all__ = ["compact", "count_tokens", "input_tokens"]

_ON_THE_LOOP = 65536
"""Characters of a body read on the event loop; a larger one is read in a worker thread."""


async def count_tokens(request: Request) -> Response:
    """The upstream's count of a Messages request (see the module docstring)."""
    return await _forwarded(request, APIS["messages"], "/messages/count_tokens")


async def input_tokens(request: Request) -> Response:
    """The upstream's count of a Responses request (see the module docstring)."""
    return await _forwarded(request, APIS["responses"], "/responses/input_tokens")


async def compact(request: Request) -> Response:
    """The upstream's compaction of a Responses conversation (see the module docstring)."""
    return await _forwarded(request, APIS["responses"], "/responses/compact")


async def _forwarded(request: Request, api: Api, path: str) -> Response:
    try:
        return await _forward(request, api, path)
    except Exception as exc:  # in the API's shape, as its own route's answers
        return answer(api, exc)


async def _forward(request: Request, api: Api, path: str) -> Response:
    own_key = authorize(request)
    upstream.query(request)  # before any work: a query too long to go upstream
    st = state(request)
    name = definition_name(request)
    text = await body_text(request, setting="proxy_max_body_bytes")
    # Read and checked as the API's own route's body (no NaN, no lone surrogate, no key twice,
    # bounded nesting); its text goes upstream as the client wrote it, the model's name
    # written in.
    parsed = (
        await asyncio.to_thread(parse, text, api.field)
        if len(text) > _ON_THE_LOOP
        else parse(text, api.field)
    )
    await stored_version(st, name)
    config = model_of(request, parsed.data, api, window=False)  # nothing is managed
    sent = upstream.headers(request, config, own_key)
    target = upstream.url(config, path, request)
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
