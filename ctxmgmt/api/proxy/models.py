"""The models a proxy route serves, as the providers list them: ``GET /proxy/{definition}/v1/models``
and ``GET /proxy/{definition}/v1/models/{model}``.

Clients that let the user pick a model (IDE assistants, coding CLIs, OpenAI-compatible chat
front ends) ask the base URL for its models before anything else. The list is the models
configuration's, those of one provider: Anthropic's shape (``{"data": [{"type": "model",
"id", "display_name", "created_at"}], "has_more", "first_id", "last_id"}``) for a request
that sends ``anthropic-version`` (every Anthropic SDK does), else OpenAI's (``{"object":
"list", "data": [{"id", "object": "model", "created", "owned_by"}]}``). Each entry also says
its ``context_window``, the window the proxy manages a request to (Anthropic's entries also as
``max_input_tokens``, with ``max_tokens``). The route's definition (or ``X-Ctxmgmt-Definition``'s)
must be stored; with keys configured, any project key may list (it calls no model).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...llm.config import ModelConfig
from ..requests import state
from .apis import APIS, Api
from .checks import Refused, answer, authorize, definition_name, stored_version

__all__ = ["base", "model", "models"]

_EPOCH = "1970-01-01T00:00:00Z"
"""Anthropic's ``created_at`` when the release date is unknown (its documented choice)."""


def _api(request: Request) -> Api:
    """The provider whose shape the client expects."""
    return APIS["messages"] if "anthropic-version" in request.headers else APIS["chat"]


async def _served(request: Request, api: Api) -> list[ModelConfig]:
    """The configured models of ``api``'s provider, once the request may see them."""
    authorize(request, reading=True)
    st = state(request)
    await stored_version(st, definition_name(request))
    configured = (st.models.get(model_id) for model_id in st.models)
    return [config for config in configured if config is not None and config.provider == api.provider]


def _entry(api: Api, config: ModelConfig) -> dict[str, Any]:
    if api.provider == "anthropic":
        entry: dict[str, Any] = {
            "type": "model",
            "id": config.id,
            "display_name": config.id,
            "created_at": _EPOCH,
            "max_input_tokens": config.context_window,
            "max_tokens": config.max_tokens,
        }
    else:
        entry = {"id": config.id, "object": "model", "created": 0, "owned_by": "ctxmgmt"}
    entry["context_window"] = config.context_window
    return entry


async def models(request: Request) -> Response:
    """The models of the client's provider (see the module docstring)."""
    api = _api(request)
    try:
        served = [_entry(api, config) for config in await _served(request, api)]
    except Exception as exc:  # in the provider's shape, as the proxy's other answers
        return answer(api, exc)
    if api.provider == "anthropic":
        ids = [entry["id"] for entry in served]
        return JSONResponse(
            {
                "data": served,
                "has_more": False,
                "first_id": ids[0] if ids else None,
                "last_id": ids[-1] if ids else None,
            }
        )
    return JSONResponse({"object": "list", "data": served})


async def model(request: Request) -> Response:
    """One model of the client's provider, or a 404 in its shape."""
    api = _api(request)
    wanted = request.path_params["model"]
    try:
        served = await _served(request, api)
        found = [config for config in served if config.id == wanted]
        if not found:
            known = ", ".join(sorted(config.id for config in served)[:20]) or "none"
            raise Refused(
                404,
                "model_not_found",
                f"{wanted[:100]!r} is not among the proxy's {api.provider} models (configured: {known})",
            )
    except Exception as exc:
        return answer(api, exc)
    return JSONResponse(_entry(api, found[0]))


async def base(request: Request) -> Response:
    """``GET`` (and ``HEAD``) of a base URL itself, ``/proxy/{definition}`` or ``.../v1``: what a
    client asks to see that the server is there (Claude Code sends ``HEAD`` to its base URL
    first) is told that it is, and which APIs it serves; 404 for a definition not stored."""
    api = _api(request)
    try:
        authorize(request, reading=True)
        name = definition_name(request)
        await stored_version(state(request), name)
    except Exception as exc:
        return answer(api, exc)
    prefix = f"/proxy/{name}/v1"
    return JSONResponse(
        {
            "definition": name,
            "apis": {
                "openai": f"{prefix}/chat/completions, {prefix}/responses",
                "anthropic": f"{prefix}/messages",
            },
        }
    )
