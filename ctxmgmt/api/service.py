"""The service's own routes: its health, and its contract (``/openapi.json``)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from .errors import log
from .openapi import openapi_document
from .requests import state


async def health(request: Request) -> JSONResponse:
    try:
        await run_in_threadpool(state(request).store.exists, "_health")
    except Exception:
        log.exception("health check: the database does not answer")
        return JSONResponse({"status": "red", "database": "unreachable"}, status_code=503)
    return JSONResponse({"status": "green", "database": "ok"})


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(openapi_document())
