"""The ASGI application: the definition and agent routes over one store."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import CtxmgmtError
from ..llm import ModelsConfig
from ..offload import Offloader
from ..runner import Runner
from ..store import DefinitionStore
from ..tools import ToolRegistry
from . import agents, definitions, errors, offload
from .config import ServerConfig
from .requests import State


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = {404: "resource_not_found_exception", 405: "method_not_allowed_exception"}.get(
        exc.status_code, "status_exception"
    )
    reason = (
        f"no route for {request.method} {request.url.path}"
        if exc.status_code in (404, 405)
        else str(exc.detail)
    )
    return JSONResponse(
        errors.error_body(exc.status_code, kind, reason), exc.status_code, headers=exc.headers
    )


def create_app(
    store: DefinitionStore,
    *,
    models: ModelsConfig | None = None,
    config: ServerConfig | None = None,
    tools: ToolRegistry | None = None,
    offloader: Offloader | None = None,
) -> Starlette:
    """The ASGI application over a store."""
    models = models or ModelsConfig()
    app = Starlette(
        routes=[*definitions.routes, *agents.routes, *offload.routes],
        exception_handlers={
            HTTPException: _http_exception,
            CtxmgmtError: errors.handle,
            Exception: errors.handle,
        },
    )
    app.state.ctxmgmt = State(
        store, models, config or ServerConfig(), Runner(store, models, tools, offloader=offloader)
    )
    return app


__all__ = ["create_app"]
