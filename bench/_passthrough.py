"""The floor of any Python proxy in ctxmgmt's stack: a bare pass-through, no context management.

An ASGI app (Starlette, served by uvicorn as ``ctxmgmt serve`` is) that reads a request's
body, sends it to ``$PASSTHROUGH_UPSTREAM`` with one kept-alive ``httpx.AsyncClient`` and
returns the answer: what a proxy costs before it does anything.

    PASSTHROUGH_UPSTREAM=http://127.0.0.1:PORT/v1 python -m uvicorn _passthrough:app
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_UPSTREAM = os.environ.get("PASSTHROUGH_UPSTREAM", "")
_client: dict[str, httpx.AsyncClient] = {}


async def _chat(request: Request) -> Response:
    client = _client.get("c") or _client.setdefault("c", httpx.AsyncClient(timeout=60))
    body = await request.body()
    answer = await client.post(
        f"{_UPSTREAM}/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    return Response(answer.content, answer.status_code, media_type="application/json")


async def _health(_: Request) -> Any:
    return Response(b"ok")


app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"]), Route("/_health", _health)])
