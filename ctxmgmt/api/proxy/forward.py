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

- What OpenAI keeps by id, asked for by the SDKs' ``responses.retrieve`` / ``delete`` /
  ``cancel`` / ``input_items``, ``conversations`` and stored ``chat.completions``:
  ``/v1/responses/{id}…``, ``/v1/conversations…``, ``/v1/chat/completions/{id}…``, with
  their method, query and body. Such a request names no model: it goes to the one OpenAI
  upstream of the models configuration (one ``base_url`` and key), else to the upstream of
  the model named in ``X-Ctxmgmt-Model`` (several keep different objects: which one keeps
  this one only the client knows). Each segment of the path is an id's or a word's
  characters (never ``..``): the upstream's URL is made of what was checked.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable

from starlette.requests import Request
from starlette.responses import Response

from ...llm import ModelConfig
from ..requests import body_text, state
from . import upstream
from .apis import APIS, Api
from .body import Body, parse, upstream_text
from .checks import Refused, answer, authorize, definition_name, model_of, one_header, stored_version

__all__ = ["MODEL_HEADER", "compact", "count_tokens", "input_tokens", "kept"]

MODEL_HEADER = "X-Ctxmgmt-Model"
"""The model whose upstream keeps a stored object, when several upstreams could."""
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
"""A segment of a stored object's path: an id (``resp_…``, ``conv_…``, ``msg_…``) or a word
(``input_items``, ``cancel``); never ``.`` nor ``..``, nor anything a URL reads otherwise."""
_MAX_SEGMENTS = 5
_KEPT = ("responses", "conversations", "chat/completions")

_ON_THE_LOOP = 65536
"""Characters of a body read on the event loop; a larger one is read in a worker thread."""


async def count_tokens(request: Request) -> Response:
    """The upstream's count of a Messages request (see the module docstring)."""
    api = APIS["messages"]
    return await _answered(api, _forward(request, api, "/messages/count_tokens"))


async def input_tokens(request: Request) -> Response:
    """The upstream's count of a Responses request (see the module docstring)."""
    api = APIS["responses"]
    return await _answered(api, _forward(request, api, "/responses/input_tokens"))


async def compact(request: Request) -> Response:
    """The upstream's compaction of a Responses conversation (see the module docstring)."""
    api = APIS["responses"]
    return await _answered(api, _forward(request, api, "/responses/compact"))


async def kept(request: Request) -> Response:
    """What the upstream keeps by id, as the client asked for it (see the module docstring)."""
    api = APIS["responses"]
    return await _answered(api, _forward_kept(request, api))


async def _answered(api: Api, work: Awaitable[Response]) -> Response:
    """``work``'s answer, or its error in the API's shape, as its own route's answers are."""
    try:
        return await work
    except Exception as exc:
        return answer(api, exc)


async def _checked(text: str, api: Api) -> Body:
    """A body read and checked as the API's own route's is (no NaN, no lone surrogate, no key
    twice, bounded nesting), off the event loop when it is large."""
    return (
        await asyncio.to_thread(parse, text, api.field)
        if len(text) > _ON_THE_LOOP
        else parse(text, api.field)
    )


async def _relayed(
    request: Request,
    config: ModelConfig,
    path: str,
    content: bytes | None,
    sent: dict[str, str],
    *,
    kept: bool,
) -> Response:
    """``content`` to the model's upstream at ``path`` (with the request's method and query),
    by the model's deadline; the answer back as it came. A success that is no JSON object is
    the upstream's fault (a 502), but for what is ``kept``: an empty answer (a deletion's
    204) or events (a stored response's, streamed)."""
    deadline = asyncio.get_running_loop().time() + config.timeout
    target = upstream.url(config, path, request)
    response = await upstream.call(request, config, target, content, sent, deadline, method=request.method)
    try:
        data = await upstream.read(response, deadline, config)
    finally:
        await response.aclose()
    events = "text/event-stream" in response.headers.get("content-type", "").lower()
    if not kept or (data and not events):
        upstream.answer_of(data, response)
    return Response(data, response.status_code, headers=upstream.returned(response))


def _kept_path(request: Request) -> tuple[str, list[str]]:
    """The path after ``/v1`` of a stored object: the route's kind (``responses``, ...), and
    the segments after it, each checked (see :data:`_SEGMENT`); none only for the list of
    stored chat completions and a new conversation."""
    rest: str = request.path_params.get("rest", "")
    path: str = request.scope["path"]
    head = (path[: len(path) - len(rest)] if rest else path).rstrip("/")
    kind = next((k for k in _KEPT if head.endswith(f"/v1/{k}")), None)
    segments = rest.split("/") if rest else []
    if segments and segments[-1] == "":  # a trailing slash is the same object's
        segments.pop()
    whole = (kind, request.method) in (("chat/completions", "GET"), ("conversations", "POST"))
    if kind is None or len(segments) > _MAX_SEGMENTS or not (segments or whole):
        raise Refused(404, "resource_not_found_exception", f"no route for {request.method} {path[:200]}")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise Refused(
                400,
                "illegal_argument_exception",
                f"{segment[:60]!r} in the path: an id is 1-200 of A-Z a-z 0-9 _ - . (not starting with '.')",
            )
    return kind, segments


def _keeper(request: Request, api: Api) -> ModelConfig:
    """The model whose upstream keeps what is asked for: the one named in
    :data:`MODEL_HEADER`, else the only upstream of ``api``'s provider."""
    models = state(request).models
    mine = {name: models[name] for name in models if models[name].provider == api.provider}
    given = one_header(request, MODEL_HEADER)
    if given is not None:
        config = mine.get(given)
        if config is None:
            known = ", ".join(sorted(mine)[:20]) or "none"
            raise Refused(
                404,
                "model_not_found",
                f"{MODEL_HEADER}: {given[:100]!r} is not an {api.provider} model of the proxy's models "
                f"configuration (configured: {known})",
            )
        return config
    upstreams = {(c.base_url.rstrip("/"), c.api_key_env) for c in mine.values()}
    if len(upstreams) == 1:
        return next(iter(mine.values()))
    if not upstreams:
        raise Refused(
            404,
            "model_not_found",
            f"no {api.provider} model in the proxy's models configuration keeps what is asked for: "
            "add one under models: in the --config file",
        )
    raise Refused(
        400,
        "illegal_argument_exception",
        f"the proxy's models configuration has {len(upstreams)} {api.provider} upstreams (base_url and "
        f"key), and only the one that made it keeps what is asked for: name one of its models in "
        f"{MODEL_HEADER}",
    )


async def _forward_kept(request: Request, api: Api) -> Response:
    own_key = authorize(request)
    upstream.query(request)
    kind, segments = _kept_path(request)
    path = "/" + "/".join([kind, *segments])
    st = state(request)
    name = definition_name(request)
    bodiless = request.method != "POST" or (  # a body only for a POST (a create, an update)
        request.headers.get("content-length", "0") == "0" and "transfer-encoding" not in request.headers
    )
    text = "" if bodiless else await body_text(request, setting="proxy_max_body_bytes")
    if text:  # what goes upstream is the client's text, checked
        await _checked(text, api)
    await stored_version(st, name)
    config = _keeper(request, api)
    if config.api_key() and not segments and request.method == "GET":
        # The list of stored chat completions, with the server's own key: every agent's. An
        # object asked by its id is the client's to ask, as a Responses request's
        # previous_response_id is (an id is not guessed).
        authorize(request, keeper=config.id)
    sent = upstream.headers(request, config, own_key)
    if not text:
        sent.pop("content-type", None)
    return await _relayed(request, config, path, text.encode("utf-8") if text else None, sent, kept=True)


async def _forward(request: Request, api: Api, path: str) -> Response:
    own_key = authorize(request)
    upstream.query(request)  # before any work: a query too long to go upstream
    st = state(request)
    name = definition_name(request)
    # Its text goes upstream as the client wrote it, the model's name written in.
    parsed = await _checked(await body_text(request, setting="proxy_max_body_bytes"), api)
    await stored_version(st, name)
    config = model_of(request, parsed.data, api, window=False)  # nothing is managed
    sent = upstream.headers(request, config, own_key)
    # The conversation as the client wrote it (none, or not a list: the upstream says so).
    outgoing = upstream_text(parsed, None, {"model": config.model})
    return await _relayed(request, config, path, outgoing.encode("utf-8"), sent, kept=False)
