"""What executions left: an agent's execution records, and a conversation's memory."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import NotFound
from ..store import DefinitionStore
from .params import EXECUTION_ID, FROM, MEMORY_ID, MESSAGE_SIZE, RECORDS_AGENT_ID, SIZE
from .requests import authorize, state


async def executions(request: Request) -> JSONResponse:
    authorize(request, "read")
    given, form = request.path_params["agent_id"], RECORDS_AGENT_ID.form
    if given.startswith("proxy-") and form is not None and not form.fullmatch(given):  # not a name
        await run_in_threadpool(_proxied_through, state(request).store, given.removeprefix("proxy-"))
    agent_id = RECORDS_AGENT_ID.read(request)
    offset, size = FROM.read(request), SIZE.read(request)
    runner = state(request).runner
    total, rows = await run_in_threadpool(runner.executions.list, agent_id, offset=offset, limit=size)
    if not total:  # 404 for an unknown agent; the proxy's records have no registered agent
        if agent_id.startswith("proxy-"):
            await run_in_threadpool(_proxied_through, state(request).store, agent_id.removeprefix("proxy-"))
        else:
            await run_in_threadpool(runner.agents.get, agent_id)
    return JSONResponse({"total": total, "executions": rows})


def _proxied_through(store: DefinitionStore, name: str) -> None:
    """Nothing yet proxied through a definition: none (an empty list) when it is stored, else
    a 404 that says what the id names."""
    if not store.exists(name):
        raise NotFound(
            f"no definition named {name[:100]!r}{store.suggest(name)}: proxy-NAME lists the requests "
            "proxied through the definition NAME (`ctxmgmt definitions list` shows the stored ones)"
        )


async def execution(request: Request) -> JSONResponse:
    authorize(request, "read")
    execution_id = EXECUTION_ID.read(request)
    return JSONResponse(await run_in_threadpool(state(request).runner.executions.get, execution_id))


async def memory(request: Request) -> JSONResponse:
    authorize(request, "read")
    memory_id = MEMORY_ID.read(request)
    return JSONResponse(await run_in_threadpool(state(request).runner.view, memory_id))


async def memory_messages(request: Request) -> JSONResponse:
    authorize(request, "read")
    memory_id = MEMORY_ID.read(request)
    offset, size = FROM.read(request), MESSAGE_SIZE.read(request)
    runner = state(request).runner
    agent_id = await run_in_threadpool(runner.memory.owner, memory_id)
    _, length, *_ = await run_in_threadpool(runner.memory.head, memory_id, agent_id)
    messages = await run_in_threadpool(
        runner.memory.messages, memory_id, since=offset, until=min(length, offset + size)
    )
    return JSONResponse({"memory_id": memory_id, "total": length, "messages": messages})
