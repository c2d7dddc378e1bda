"""The agent routes: register, get, replace, list, delete, execute, compact; and what
executions left: their records, and a conversation's memory."""

from __future__ import annotations

import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..agents.runner import Runner
from .errors import HTTPProblem
from .requests import authorize, int_param, json_body, resource, state

BASE = "/_plugins/_ml/agents"
MEMORY = "/_plugins/_ml/memory"
EXECUTIONS = "/_plugins/_ml/executions"
_AGENT_ID = re.compile(r"[0-9a-f]{32}")
_HEX_ID = _AGENT_ID


def _runner(request: Request) -> Runner:
    runner: Runner = state(request).runner
    return runner


def _agent_id(request: Request) -> str:
    agent_id: str = request.path_params["agent_id"]
    if not _AGENT_ID.fullmatch(agent_id):
        raise HTTPProblem(404, f"no agent with id {agent_id[:64]!r}", "resource_not_found_exception")
    return agent_id


async def register(request: Request) -> JSONResponse:
    authorize(request, "write")
    body = await json_body(request)
    agent_id = await run_in_threadpool(_runner(request).register, body)
    return JSONResponse({"agent_id": agent_id})


async def get(request: Request) -> JSONResponse:
    authorize(request, "read")
    agent = await run_in_threadpool(_runner(request).agents.get, _agent_id(request))
    return JSONResponse(agent)


async def replace(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = _agent_id(request)
    body = await json_body(request)
    await run_in_threadpool(_runner(request).replace, agent_id, body)
    return JSONResponse({"agent_id": agent_id, "result": "updated"})


def _path_id(request: Request, key: str, what: str) -> str:
    value: str = request.path_params[key]
    if not _HEX_ID.fullmatch(value):
        raise HTTPProblem(404, f"no {what} with id {value[:64]!r}", "resource_not_found_exception")
    return value


async def executions(request: Request) -> JSONResponse:
    authorize(request, "read")
    agent_id = _agent_id(request)
    offset = int_param(request, "from", 0, 0, 10**9)
    size = int_param(request, "size", 10, 1, 1000)
    runner = _runner(request)
    await run_in_threadpool(runner.agents.get, agent_id)  # 404 for an unknown agent
    total, rows = await run_in_threadpool(runner.executions.list, agent_id, offset=offset, limit=size)
    return JSONResponse({"total": total, "executions": rows})


async def execution(request: Request) -> JSONResponse:
    authorize(request, "read")
    execution_id = _path_id(request, "execution_id", "execution")
    return JSONResponse(await run_in_threadpool(_runner(request).executions.get, execution_id))


async def memory(request: Request) -> JSONResponse:
    authorize(request, "read")
    memory_id = _path_id(request, "memory_id", "memory")
    return JSONResponse(await run_in_threadpool(_runner(request).view, memory_id))


async def memory_messages(request: Request) -> JSONResponse:
    authorize(request, "read")
    memory_id = _path_id(request, "memory_id", "memory")
    offset = int_param(request, "from", 0, 0, 10**9)
    size = int_param(request, "size", 100, 1, 1000)
    runner = _runner(request)
    agent_id = await run_in_threadpool(runner.memory.owner, memory_id)
    _, length, *_ = await run_in_threadpool(runner.memory.head, memory_id, agent_id)
    messages = await run_in_threadpool(
        runner.memory.messages, memory_id, since=offset, until=min(length, offset + size)
    )
    return JSONResponse({"memory_id": memory_id, "total": length, "messages": messages})


async def delete(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = _agent_id(request)
    await run_in_threadpool(_runner(request).agents.delete, agent_id)
    return JSONResponse({"agent_id": agent_id, "result": "deleted"})


async def list_(request: Request) -> JSONResponse:
    authorize(request, "read")
    offset = int_param(request, "from", 0, 0, 10**9)
    size = int_param(request, "size", 10, 1, 1000)
    total, rows = await run_in_threadpool(_runner(request).agents.list, offset=offset, limit=size)
    return JSONResponse({"total": total, "agents": rows})


async def execute(request: Request) -> JSONResponse:
    authorize(request, "write")
    agent_id = _agent_id(request)
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
    agent_id = _agent_id(request)
    body = await json_body(request)
    params: Any = body.get("parameters", body)
    memory_id = params.get("memory_id") if isinstance(params, dict) else None
    instruction = params.get("instruction") if isinstance(params, dict) else None
    if not isinstance(memory_id, str) or not memory_id:
        raise HTTPProblem(400, "memory_id is required: the conversation to compact")
    if instruction is not None and (not isinstance(instruction, str) or len(instruction) > 2000):
        raise HTTPProblem(400, "instruction must be a string of at most 2000 characters")
    return JSONResponse(await _runner(request).acompact(agent_id, memory_id, instruction))


routes = [
    resource(f"{BASE}/_register", post=register),
    resource(BASE, get=list_),
    resource(BASE + "/{agent_id}/_execute", post=execute),
    resource(BASE + "/{agent_id}/_compact", post=compact),
    resource(BASE + "/{agent_id}/executions", get=executions),
    resource(BASE + "/{agent_id}", get=get, put=replace, delete=delete),
    resource(EXECUTIONS + "/{execution_id}", get=execution),
    resource(MEMORY + "/{memory_id}/messages", get=memory_messages),
    resource(MEMORY + "/{memory_id}", get=memory),
]
