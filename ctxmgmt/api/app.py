"""The REST API, in OpenSearch ml-commons' shape, as a Starlette application."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..context import Context
from ..definitions import Definition, parse_hook
from ..errors import CtxmgmtError
from ..llm import ModelsConfig
from ..store import DefinitionStore
from . import errors
from .config import ServerConfig
from .errors import HTTPProblem
from .openapi import openapi_document

BASE = "/_plugins/_ml/context_management"
_NAME = re.compile(r"[a-z0-9_-]{1,49}")
_JSON_TYPES = ("application/json",)
_MAX_SIZE = 1000


class _State:
    def __init__(self, store: DefinitionStore, models: ModelsConfig, config: ServerConfig) -> None:
        self.store = store
        self.models = models
        self.config = config


def _state(request: Request) -> _State:
    state: _State = request.app.state.ctxmgmt
    return state


# -- request checks ---------------------------------------------------------------------
def _authorize(request: Request, scope: str) -> None:
    """Check the API key, when keys are configured: 401 without a valid one, 403 for a
    read key on a write. Keys are never logged or echoed."""
    config = _state(request).config
    if not config.auth_enabled:
        return
    header = request.headers.get("authorization", "")
    presented = (
        header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    )
    key = config.find(presented) if presented else None
    if key is None:
        raise HTTPProblem(
            401, "a valid API key is required (Authorization: Bearer KEY)", "security_exception"
        )
    if scope == "write" and key.scope != "write":
        raise HTTPProblem(403, f"the key {key.name!r} may only read", "security_exception")


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if name.startswith("_"):
        raise HTTPProblem(
            400, f"{name!r}: names starting with '_' are reserved for API verbs such as _simulate"
        )
    if not _NAME.fullmatch(name):
        raise HTTPProblem(400, f"{name!r}: a name is 1-49 characters of a-z, 0-9, _ and -")
    return name


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


async def _json_body(request: Request) -> dict[str, Any]:
    limit = _state(request).config.max_body_bytes
    ctype = request.headers.get("content-type")
    if ctype is not None and ctype.split(";")[0].strip().lower() not in _JSON_TYPES:
        raise HTTPProblem(400, f"the content type must be application/json, not {ctype[:60]!r}")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise HTTPProblem(400, f"the body is larger than the limit of {limit} bytes (server.max_body_bytes)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPProblem(
                400, f"the body is larger than the limit of {limit} bytes (server.max_body_bytes)"
            )
    if not body.strip():
        raise HTTPProblem(400, "a JSON object body is required")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise HTTPProblem(400, "the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HTTPProblem(400, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:
        raise HTTPProblem(400, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPProblem(400, "the body must be a JSON object")
    return data


def _int_param(request: Request, key: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(key)
    if raw is None:
        return default
    if not re.fullmatch(r"\d{1,10}", raw) or not low <= int(raw) <= high:
        raise HTTPProblem(400, f"{key} must be a whole number from {low} to {high}, not {raw[:40]!r}")
    return int(raw)


def _if_version(request: Request) -> int | None:
    raw = request.headers.get("if-match") or request.query_params.get("if_version")
    if raw is None:
        return None
    value = raw.strip().removeprefix("W/").strip('"')
    if not re.fullmatch(r"\d{1,10}", value):
        raise HTTPProblem(400, f"If-Match (or if_version) must be a version number, not {raw[:40]!r}")
    return int(value)


def _flag(request: Request, key: str) -> bool:
    raw = request.query_params.get(key, "false").lower()
    if raw not in ("true", "false", ""):
        raise HTTPProblem(400, f"{key} must be true or false, not {raw[:20]!r}")
    return raw in ("true", "")


# -- routes -----------------------------------------------------------------------------
async def create(request: Request) -> JSONResponse:
    _authorize(request, "write")
    name = _name(request)
    body = await _json_body(request)
    await run_in_threadpool(_state(request).store.create, name, body, created_by=_caller(request))
    return JSONResponse({"context_management_name": name, "status": "created"})


async def get(request: Request) -> JSONResponse:
    _authorize(request, "read")
    name = _name(request)
    stored = await run_in_threadpool(_state(request).store.get, name)
    return JSONResponse(stored.to_dict(), headers={"etag": f'"{stored.version}"'})


async def replace(request: Request) -> JSONResponse:
    _authorize(request, "write")
    name = _name(request)
    expected = _if_version(request)
    body = await _json_body(request)
    stored = await run_in_threadpool(_state(request).store.replace, name, body, if_version=expected)
    return JSONResponse(
        {"context_management_name": name, "status": "updated", "version": stored.version},
        headers={"etag": f'"{stored.version}"'},
    )


async def delete(request: Request) -> JSONResponse:
    _authorize(request, "write")
    name = _name(request)
    force = _flag(request, "force")
    await run_in_threadpool(_state(request).store.delete, name, force=force)
    return JSONResponse({"context_management_name": name, "status": "deleted"})


async def list_(request: Request) -> JSONResponse:
    _authorize(request, "read")
    offset = _int_param(request, "from", 0, 0, 10**9)
    size = _int_param(request, "size", 10, 1, _MAX_SIZE)
    q = request.query_params.get("q")
    if q is not None and len(q) > 100:
        raise HTTPProblem(400, "q must be at most 100 characters")
    total, rows = await run_in_threadpool(_state(request).store.list, offset=offset, limit=size, q=q)
    return JSONResponse({"total": total, "context_management": [r.to_dict() for r in rows]})


async def simulate(request: Request) -> JSONResponse:
    _authorize(request, "read")
    name = _name(request)
    body = await _json_body(request)
    state = _state(request)
    definition = await run_in_threadpool(state.store.resolve, name)
    return await _simulate(definition, body, state.models)


async def simulate_inline(request: Request) -> JSONResponse:
    _authorize(request, "read")
    body = await _json_body(request)
    document = body.get("definition", body.get("context_management"))
    if not isinstance(document, dict):
        raise HTTPProblem(400, "give the definition to simulate as an object in 'definition'")
    document = {"name": "inline", **document}
    definition = Definition.from_dict(document)
    return await _simulate(definition, body, _state(request).models)


async def _simulate(definition: Definition, body: dict[str, Any], models: ModelsConfig) -> JSONResponse:
    unknown = sorted(set(body) - {"hook", "context", "definition", "context_management"})
    if unknown:
        raise HTTPProblem(400, f"unknown field {unknown[0]!r}; a simulation takes hook and context")
    hook = parse_hook(body.get("hook", "pre_llm")) if isinstance(body.get("hook", "pre_llm"), str) else None
    if hook is None:
        raise HTTPProblem(400, "hook must be a string: pre_llm, post_tool or post_memory")
    context = Context.from_dict(body.get("context", {}))
    result = await run_in_threadpool(definition.apply, hook, context, models=models)
    return JSONResponse(result.to_dict())


async def health(request: Request) -> JSONResponse:
    try:
        await run_in_threadpool(_state(request).store.exists, "_health")
    except Exception:
        errors.log.exception("health check: the database does not answer")
        return JSONResponse({"status": "red", "database": "unreachable"}, status_code=503)
    return JSONResponse({"status": "green", "database": "ok"})


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(openapi_document())


def _caller(request: Request) -> str | None:
    if not _state(request).config.auth_enabled:
        return None
    header = request.headers.get("authorization", "")
    presented = (
        header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    )
    key = _state(request).config.find(presented)
    return key.name if key else None


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
    store: DefinitionStore, *, models: ModelsConfig | None = None, config: ServerConfig | None = None
) -> Starlette:
    """The ASGI application over a store."""
    routes = [
        Route("/_health", health, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route(BASE, list_, methods=["GET"]),
        Route(f"{BASE}/_simulate", simulate_inline, methods=["POST"]),
        Route(BASE + "/{name}/_simulate", simulate, methods=["POST"]),
        Route(BASE + "/{name}", create, methods=["POST"]),
        Route(BASE + "/{name}", get, methods=["GET"]),
        Route(BASE + "/{name}", replace, methods=["PUT"]),
        Route(BASE + "/{name}", delete, methods=["DELETE"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: _http_exception,
            CtxmgmtError: errors.handle,
            Exception: errors.handle,
        },
    )
    app.state.ctxmgmt = _State(store, models or ModelsConfig(), config or ServerConfig())
    return app


__all__ = ["create_app"]
