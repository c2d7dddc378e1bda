"""The ASGI application: the routes of the route table over one store."""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..agents.runner import Runner
from ..agents.tools import ToolRegistry
from ..errors import CtxmgmtError
from ..llm import HTTPPool, ModelsConfig
from ..offload import Offloader
from ..store import DefinitionStore
from . import errors
from .config import ServerConfig
from .origins import OriginGuard, parse_hosts
from .proxy.body import Bodies
from .proxy.state import Live
from .requests import BodyBudget, State, resource
from .routes import TABLE, Operation
from .upgrades import NoWebSockets

Handler = Callable[[Request], Awaitable[Response]]


def handler(operation: Operation) -> Handler:
    """The function the table names for an operation, checked: a misnamed handler fails when
    the app is assembled, not at its first request."""
    module_name, _, name = operation.handler.rpartition(".")
    found = getattr(importlib.import_module(f"{__package__}.{module_name}"), name, None)
    if not inspect.iscoroutinefunction(found):
        raise TypeError(f"{operation.method} {operation.path}: {operation.handler} is not an async handler")
    return found


def routes(table: Sequence[Operation] = TABLE) -> list[Route]:
    """The app's routes, from the route table: one route per path with all its methods,
    wherever the table lists them (in the order of each path's first operation, so literal
    paths match before the parameter beside them). A method listed twice for one path is
    refused when the app is assembled."""
    by_path: dict[str, list[Operation]] = {}
    for op in table:
        ops = by_path.setdefault(op.path, [])
        if any(other.method == op.method for other in ops):
            raise TypeError(f"{op.method} {op.path} is in the route table twice: keep one")
        ops.append(op)
    out = []
    for path, ops in by_path.items():
        if all(op.raw for op in ops):
            out += [Route(path, handler(op), methods=[op.method]) for op in ops]
        else:
            out.append(resource(path, **{op.method.lower(): handler(op) for op in ops}))
    return out


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
    if exc.status_code in (404, 405) and errors.stored_path(request.url.path):
        reason += (
            "; what OpenAI keeps (a stored response, a conversation) is forwarded by GET, POST and DELETE"
        )
    elif exc.status_code == 404 and errors.provider_path(request.url.path):
        reason += (
            "; the proxy's base URLs are /proxy/{definition}/v1 (OpenAI's SDKs) and "
            "/proxy/{definition} (Anthropic's), e.g. /proxy/default/v1"
        )
    body = errors.error_body_at(request.url.path, exc.status_code, kind, reason, headers=request.headers)
    return JSONResponse(body, exc.status_code, headers=exc.headers)


class _Faults:
    """Every other exception becomes a JSON answer here, once: a full disk (507), an
    unreachable database (503), or a real fault (500, logged once). Unlike Starlette's
    outermost handler, this one does not re-raise, so the connection stays usable."""

    def __init__(self, app: ASGIApp, budget: BodyBudget) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[BodyBudget.SCOPE_KEY] = self.budget
        try:
            await self._answer(scope, receive, send)
        finally:  # the request has its answer (a stream's, whole): its body is given back
            self.budget.give_back(scope)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started:  # too late for an answer of our own
                raise
            response = await errors.handle(Request(scope), exc)
            await response(scope, receive, send)


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
    config = config or ServerConfig()
    parse_hosts(config.allowed_hosts)  # a bad entry is refused now, not at the first request
    pool = HTTPPool()  # kept-alive LLM connections, shared by executions

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await pool.aclose()

    app = Starlette(
        routes=routes(),
        exception_handlers={HTTPException: _http_exception, CtxmgmtError: errors.handle},
        middleware=[
            Middleware(_Faults, budget=BodyBudget(config.bodies_in_flight_bytes)),
            Middleware(NoWebSockets),
            Middleware(OriginGuard, hosts=config.allowed_hosts, origins=config.allowed_origins),
        ],
        lifespan=lifespan,
    )
    # A trailing slash is a 404 like any unknown path, not a redirect built from the Host
    # header that a client would follow with its DELETE.
    app.router.redirect_slashes = False
    runner = Runner(store, models, tools, offloader=offloader, pool=pool)
    app.state.ctxmgmt = State(store, models, config, runner)
    app.state.proxy_live = Live()  # the proxy's conversations this process served last
    app.state.proxy_bodies = Bodies()  # and their last bodies, to read the next ones from
    return app


__all__ = ["create_app"]
