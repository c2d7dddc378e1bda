"""What a proxy request is checked against before any work, and the proxy's own refusals.

The project's key (when keys are configured), the definition's name (and that it is stored),
the request's model (configured, of the route's provider); every refusal answered in the
provider's own error shape, with JSON pointers into the client's body.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ...errors import NotFound
from ...llm import ModelConfig
from ..errors import Classified, classify
from ..params import NAME, NAME_LENGTH
from ..requests import presented_key, state
from .apis import Api

__all__ = [
    "DEFINITION_HEADER",
    "KEY_HEADER",
    "Refused",
    "answer",
    "authorize",
    "definition_name",
    "model_of",
    "no_definition",
    "one_header",
    "stored_version",
]

DEFINITION_HEADER = "x-ctxmgmt-definition"
KEY_HEADER = "x-ctxmgmt-key"
log = logging.getLogger("ctxmgmt.proxy")


class Refused(Exception):
    """An error the proxy answers in the provider's shape."""

    def __init__(
        self, status: int, kind: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.details = details
        """Anthropic's ``error.details`` (an ``error_code`` its SDKs act on), when any."""


def _pointer(api: Api, pointer: str) -> str:
    """A problem's pointer into the request's body: its conversation is ``api.field``."""
    if pointer == "/messages" or pointer.startswith("/messages/"):
        return f"/{api.field}{pointer[len('/messages') :]}"
    return pointer


def answer(api: Api, exc: BaseException) -> JSONResponse:
    """Any error, classified as the REST API's are (:func:`ctxmgmt.api.errors.classify`), in
    the provider's shape; problems' pointers into the request's body."""
    if isinstance(exc, Refused):
        found = Classified(exc.status, exc.kind, exc.message)
    else:
        found = classify(exc)
        if not found.expected:
            log.exception("unexpected error in the proxy", exc_info=exc)
        elif found.status in (503, 507):
            log.warning("proxy: %s: %s", found.type, found.reason)
    listed = "; ".join(f"{_pointer(api, p.pointer)}: {p.message}" for p in found.problems)
    body = api.error(found.status, found.type, listed or found.reason)
    if isinstance(exc, Refused) and exc.details and api.provider == "anthropic":
        body["error"]["details"] = dict(exc.details)
    return JSONResponse(body, found.status, headers=found.headers)


def authorize(request: Request, *, reading: bool = False, keeper: str | None = None) -> bool:
    """Check the project's key, when keys are configured; True when the client's
    ``Authorization`` / ``x-api-key`` held it (so they are not the upstream's). ``reading``:
    a request that calls no model (the models list), which a read key may make too.
    ``keeper``: a list of what the upstream keeps (stored chat completions) with the
    server's own upstream key for that model, which lists every agent's: a write key only."""
    config = state(request).config
    if not config.auth_enabled:
        return False
    own = request.headers.get(KEY_HEADER)
    presented = own or presented_key(request)
    key = config.find(presented) if presented else None
    if key is None:
        raise Refused(
            401,
            "security_exception",
            f"a valid ctxmgmt API key is required: send it as {KEY_HEADER}, or as the client's API key "
            "when the model's upstream key is configured (api_key_env)",
        )
    if key.scope not in ("write", "proxy") and not reading:
        raise Refused(
            403,
            "security_exception",
            f"the key {key.name!r} may only read; the proxy calls the model's upstream",
        )
    if keeper is not None and key.scope != "write":
        raise Refused(
            403,
            "security_exception",
            f"the key {key.name!r} may not list what OpenAI keeps with the server's own key for "
            f"{keeper!r} (the list holds every agent's): use a write key, or a model without "
            "api_key_env, whose requests go with the client's own key",
        )
    return not own


def definition_name(request: Request) -> str:
    """The request's definition: ``X-Ctxmgmt-Definition``'s, else the path's (a name's shape)."""
    given = one_header(request, DEFINITION_HEADER)
    name: str = given if given is not None else request.path_params["definition"]
    if not NAME.fullmatch(name):
        raise Refused(
            400,
            "illegal_argument_exception",
            f"{name[:60]!r}: a definition name is 1-{NAME_LENGTH} of a-z 0-9 _ -",
        )
    return name


def one_header(request: Request, header: str) -> str | None:
    """A header of ctxmgmt's own, given at most once (two values are a 400: which one was meant
    cannot be told)."""
    given = request.headers.getlist(header)
    if len(given) > 1:
        raise Refused(
            400, "illegal_argument_exception", f"{header} is given {len(given)} times: give it once"
        )
    return given[0] if given else None


async def stored_version(st: Any, name: str, resolving: Awaitable[Any] | None = None) -> Any:
    """The stored definition and its version (``resolving``: that read, begun earlier), or the
    404 of one that is not stored."""
    if resolving is None:
        resolving = asyncio.to_thread(st.store.resolve_version, name)
    try:
        return await resolving
    except NotFound:
        raise await no_definition(st, name) from None


async def no_definition(st: Any, name: str) -> Refused:
    """The 404 of a definition that is not stored, with the nearest name that is."""
    hint = await asyncio.to_thread(st.store.suggest, name)
    return Refused(
        404,
        "resource_not_found_exception",
        f"context management {name!r} not found{hint}: /proxy/NAME/ (or X-Ctxmgmt-Definition: NAME) "
        "names a stored definition, not a model; `ctxmgmt definitions list` shows them",
    )


def model_of(request: Request, body: Mapping[str, Any], api: Api, *, window: bool = True) -> ModelConfig:
    """The request's model in the models configuration, of ``api``'s provider, with a
    ``context_window`` when the request is managed to it (``window``)."""
    model_id = body.get("model")
    models = state(request).models
    known = ", ".join(sorted(models)[:20]) or "none"
    if not isinstance(model_id, str) or not model_id:
        raise Refused(
            400,
            "illegal_argument_exception",
            f"/model: must be the name of a configured model (configured: {known})",
        )
    config: ModelConfig | None = models.get(model_id)
    if config is None:
        raise Refused(
            404,
            "model_not_found",
            f"/model: {model_id[:100]!r} is not in the proxy's models configuration (configured: {known}); "
            "add it under models: in the --config file",
        )
    if config.provider != api.provider:
        other = "/v1/messages" if config.provider == "anthropic" else "/v1/chat/completions or /v1/responses"
        raise Refused(
            400,
            "illegal_argument_exception",
            f"/model: {model_id!r} is an {config.provider} endpoint; send its requests to {other}",
        )
    if window and not config.context_window:
        raise Refused(
            400,
            "illegal_argument_exception",
            f"/model: {model_id!r} has no context_window in the models configuration; the proxy manages "
            "a request to its window: add context_window",
        )
    return config
