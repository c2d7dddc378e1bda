"""Reading offloaded context back: by reference, and by search within one session."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import OffloadError
from ..offload.base import bounded, check_ref
from .errors import HTTPProblem
from .params import ARCHIVE_REF, LIMIT, OFFSET, PATTERN, SEARCH_SIZE, SESSION, UNIT
from .requests import authorize, state

READ_LIMIT = 200_000
"""The most characters (or lines) one read answers: the page shows an archive this far."""


def _session(request: Request) -> str:
    session = SESSION.read(request)
    assert session is not None  # a required parameter
    return session


def _offloader(request: Request):  # type: ignore[no-untyped-def]
    offloader = state(request).runner.offloader
    if offloader is None:
        raise HTTPProblem(404, "offload is not configured on this server", "resource_not_found_exception")
    return offloader


async def read(request: Request) -> JSONResponse:
    authorize(request, "read")
    try:
        ref = check_ref(ARCHIVE_REF.read(request))
    except OffloadError as exc:
        raise HTTPProblem(400, str(exc)) from None
    session = _session(request)
    unit = UNIT.read(request)
    offset = OFFSET.read(request)
    # A larger limit is taken and clamped: one answer holds at most READ_LIMIT characters (or
    # lines), and next_offset says where the rest starts.
    limit = min(LIMIT.read(request), READ_LIMIT)
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
    pattern = PATTERN.read(request) or ""
    size = SEARCH_SIZE.read(request)
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
