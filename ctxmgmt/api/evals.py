"""Saved eval reports: read-only, as ``ctxmgmt eval --save`` makes them."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..store import EvalStore
from .params import REPORT_ID
from .requests import authorize, state


async def get(request: Request) -> JSONResponse:
    """A report that ``ctxmgmt eval --save`` stored (read-only: reports are made by the CLI)."""
    authorize(request, "read")
    report_id = REPORT_ID.read(request)
    return JSONResponse(await run_in_threadpool(EvalStore(state(request).store.engine).get, report_id))
