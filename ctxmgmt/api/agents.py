"""The agent routes: register, get, replace, list, delete, execute, compact."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..agents.runner import Runner
from .errors import HTTPProblem
from .params import AGENT_ID, FROM, MAX_INSTRUCTION, SIZE
from .requests import authorize, json_body, state


def _runner(request: Request) -> Runner:
    runner: Runner = state(request).runner
    return runner


async def register(request: Request) -> JSONResponse:
    authorize(request, "write")
    body = await json_body(request)
    agent_id = await run_in_threadpool(_runner(request).register, body)
    return JSONResponse({"agent_id": agent_id})


async def get(request: Request) -> JSONResponse:
    authorize(request, "read")
    agent = await run_in_threadpool(_runner(request).agents.get, AGENT_ID.read(request))
    return JSONResponse(agent)


async def replace(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = AGENT_ID.read(request)
    body = await json_body(request)
    await run_in_threadpool(_runner(request).replace, agent_id, body)
    return JSONResponse({"agent_id": agent_id, "result": "updated"})


async def delete(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = AGENT_ID.read(request)
    await run_in_threadpool(_runner(request).agents.delete, agent_id)
    return JSONResponse({"agent_id": agent_id, "result": "deleted"})


async def list_(request: Request) -> JSONResponse:
    authorize(request, "read")
    offset, size = FROM.read(request), SIZE.read(request)
    total, rows = await run_in_threadpool(_runner(request).agents.list, offset=offset, limit=size)
    return JSONResponse({"total": total, "agents": rows})


async def execute(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = AGENT_ID.read(request)
    body = await json_body(request)
    params: Any = body.get("parameters", {})
    if not isinstance(params, dict):
        raise HTTPProblem(
            400, "parameters must be an object with question (and context_management_name, memory_id)"
        )
    question = params.get("question")
    if not isinstance(question, str) or not question.strip():
        raise HTTPProblem(400, "parameters.question is required: the user's question, a non-empty string")
    # The OpenSearch docs show the override both inside parameters and at the top level.
    name = params.get("context_management_name", body.get("context_management_name"))
    memory_id = params.get("memory_id", body.get("memory_id"))
    for key, value in (("context_management_name", name), ("memory_id", memory_id)):
        if value is not None and (not isinstance(value, str) or not value):
            raise HTTPProblem(400, f"{key} must be a non-empty string")
    result = await _runner(request).aexecute(agent_id, question, name, memory_id)
    return JSONResponse(result.to_opensearch())


async def compact(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = AGENT_ID.read(request)
    body = await json_body(request)
    params: Any = body.get("parameters", body)
    memory_id = params.get("memory_id") if isinstance(params, dict) else None
    instruction = params.get("instruction") if isinstance(params, dict) else None
    if not isinstance(memory_id, str) or not memory_id:
        raise HTTPProblem(400, "memory_id is required: the conversation to compact")
    if instruction is not None and (not isinstance(instruction, str) or len(instruction) > MAX_INSTRUCTION):
        raise HTTPProblem(400, f"instruction must be a string of at most {MAX_INSTRUCTION} characters")
    return JSONResponse(await _runner(request).acompact(agent_id, memory_id, instruction))
