"""The proxy's routes in the table: each provider API handed to :mod:`ctxmgmt.api.proxy`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .apis import APIS
from .handler import proxy_request


async def chat(request: Request) -> Response:
    return await proxy_request(request, APIS["chat"])


async def responses(request: Request) -> Response:
    return await proxy_request(request, APIS["responses"])


async def messages(request: Request) -> Response:
    return await proxy_request(request, APIS["messages"])
