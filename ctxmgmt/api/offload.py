"""Reading offloaded context back: by reference, and by search within one session."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import OffloadError
from ..offload.base import bounded, check_ref
from .errors import HTTPProblem
from .requests import authorize, int_param, resource, state

BASE = "/_plugins/_ml/offload"
READ_LIMIT = 200_000
"""The most characters (or lines) one read answers: the page shows an archive this far."""


def _session(request: Request) -> str:
    session = request.query_params.get("session")
    if not session:
        raise HTTPProblem(400, "session is required: the memory id the content belongs to")
    return session


def _offloader(request: Request):  # type: ignore[no-untyped-def]
    offloader = state(request).runner.offloader
    if offloader is None:
        raise HTTPProblem(404, "offload is not configured on this server", "resource_not_found_exception")
    return offloader


async def read(request: Request) -> JSONResponse:
    authorize(request, "read")
    try:
        ref = check_ref(request.path_params["ref"])
    except OffloadError as exc:
        raise HTTPProblem(400, str(exc)) from None
    session = _session(request)
    unit = request.query_params.get("unit", "chars")
    if unit not in ("chars", "lines"):
        raise HTTPProblem(400, "unit must be chars or lines")
    offset = int_param(request, "offset", 0, 0, 10**12)
    # A larger limit is taken and clamped: one answer holds at most READ_LIMIT characters (or
    # lines), and next_offset says where the rest starts.
    limit = min(int_param(request, "limit", 20000, 1, 10**7), READ_LIMIT)
    try:
        got = await run_in_threadpool(
            _offloader(request).read, session, ref, offset=offset, limit=limit, unit=unit
        )
    except OffloadError as exc:
        raise HTTPProblem(404, str(exc), "resource_not_found_exception") from None
    got = bounded(got, READ_LIMIT)  # lines are bounded in characters too
    return JSONResponse(
        {
            "ref": got.ref,
            "text": got.text,
            "offset": got.offset,
            "total": got.total,
            "unit": got.unit,
            "next_offset": got.next_offset,
            **({"clipped": True} if got.clipped else {}),
        }
    )


async def search(request: Request) -> JSONResponse:
    authorize(request, "read")
    session = _session(request)
    pattern = request.query_params.get("pattern", "")
    size = int_param(request, "size", 20, 1, 200)
    try:
        hits = await run_in_threadpool(_offloader(request).search, session, pattern, max_results=size)
    except OffloadError as exc:
        raise HTTPProblem(400, str(exc)) from None
    return JSONResponse({"hits": hits, "truncated": hits.truncated, "damaged": getattr(hits, "damaged", 0)})


async def listing(request: Request) -> JSONResponse:
    authorize(request, "read")
    session = _session(request)
    try:
        archives = await run_in_threadpool(_offloader(request).list, session)
    except OffloadError as exc:
        raise HTTPProblem(400, str(exc)) from None
    return JSONResponse({"archives": archives, "damaged": getattr(archives, "damaged", 0)})


routes = [
    resource(BASE, get=listing),
    resource(f"{BASE}/_search", get=search),
    resource(BASE + "/{ref}", get=read),
]
