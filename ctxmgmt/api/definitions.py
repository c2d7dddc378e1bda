"""The definition routes: create, get, replace, delete, list, simulate, validate."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..context import Context
from ..definitions import Definition, parse_hook
from ..errors import ContextError, DefinitionError, LLMError
from ..llm import ModelsConfig
from ..loader import parse_document
from ..offload import LocalOffloader
from ..types import HOOK_NAMES
from ..validation import validate_definition
from .config import ApiKey
from .errors import HTTPProblem
from .params import FORCE, FROM, MAX_NESTING, MAX_TEXT, SIMULATION_FIELDS, SIZE, Q
from .requests import authorize, caller, if_version, json_body, may_spend, name_param, state


async def create(request: Request) -> JSONResponse:
    authorize(request, "write")
    name = name_param(request)
    body = await json_body(request)
    await run_in_threadpool(state(request).store.create, name, body, created_by=caller(request))
    return JSONResponse({"context_management_name": name, "status": "created"})


async def get(request: Request) -> JSONResponse:
    authorize(request, "definitions")
    name = name_param(request)
    stored = await run_in_threadpool(state(request).store.get, name)
    return JSONResponse(stored.to_dict(), headers={"etag": f'"{stored.version}"'})


async def replace(request: Request) -> JSONResponse:
    authorize(request, "write")
    name = name_param(request)
    expected = if_version(request)
    body = await json_body(request)
    stored = await run_in_threadpool(state(request).store.replace, name, body, if_version=expected)
    return JSONResponse(
        {"context_management_name": name, "status": "updated", "version": stored.version},
        headers={"etag": f'"{stored.version}"'},
    )


async def delete(request: Request) -> JSONResponse:
    authorize(request, "write")
    name = name_param(request)
    force = FORCE.read(request)
    await run_in_threadpool(state(request).store.delete, name, force=force)
    return JSONResponse({"context_management_name": name, "status": "deleted"})


async def list_(request: Request) -> JSONResponse:
    authorize(request, "definitions")
    offset, size, q = FROM.read(request), SIZE.read(request), Q.read(request)
    total, rows = await run_in_threadpool(state(request).store.list, offset=offset, limit=size, q=q)
    return JSONResponse({"total": total, "context_management": [r.to_dict() for r in rows]})


async def simulate(request: Request) -> JSONResponse:
    key = authorize(request, "definitions")
    name = name_param(request)
    body = await json_body(request, nul=False)  # a dry run stores nothing
    current = state(request)
    definition = await run_in_threadpool(current.store.resolve, name)
    return await _simulate(definition, body, current.models, key)


async def simulate_inline(request: Request) -> JSONResponse:
    key = authorize(request, "definitions")
    body = await json_body(request, nul=False)  # a dry run stores nothing
    document = body.get("definition", body.get("context_management"))
    if not isinstance(document, dict):
        raise HTTPProblem(400, "give the definition to simulate as an object in 'definition'")
    document = {"name": "inline", **document}
    field = "definition" if "definition" in body else "context_management"
    definition = _within(f"/{field}", Definition.from_dict, document)
    return await _simulate(definition, body, state(request).models, key)


T = TypeVar("T")


def _within(pointer: str, read: Callable[[Any], T], value: Any) -> T:
    """``read(value)``, its problems located in the request's body (under ``pointer``)."""
    try:
        return read(value)
    except (ContextError, DefinitionError) as exc:
        raise type(exc)([dataclasses.replace(p, pointer=pointer + p.pointer) for p in exc.problems]) from None


class _Withheld(ModelsConfig):
    """The models, for a request that may not spend them: each model asked for is noted
    and refused before any call (so the summariser's fallback runs, and nothing is paid)."""

    def __init__(self, models: ModelsConfig) -> None:
        super().__init__({model_id: models[model_id] for model_id in models})
        self.wanted: list[str] = []

    def __getitem__(self, model_id: str) -> Any:
        super().__getitem__(model_id)  # a model the server does not have: its own error
        self.wanted.append(model_id)
        raise LLMError("a read key may not call a model", model_id=model_id)

    def get(self, model_id: str, default: Any = None) -> Any:
        return self[model_id]


async def _simulate(
    definition: Definition, body: dict[str, Any], models: ModelsConfig, key: ApiKey | None
) -> JSONResponse:
    unknown = sorted(set(body) - set(SIMULATION_FIELDS))
    if unknown:
        raise HTTPProblem(400, f"unknown field {unknown[0]!r}; a simulation takes hook and context")
    hook = parse_hook(body.get("hook", "pre_llm")) if isinstance(body.get("hook", "pre_llm"), str) else None
    if hook is None:
        raise HTTPProblem(400, f"hook must be a string: {', '.join(HOOK_NAMES[:-1])} or {HOOK_NAMES[-1]}")
    context = _within("/context", Context.from_dict, body.get("context", {}))
    withheld = None if may_spend(key) else _Withheld(models)
    try:
        result = await run_in_threadpool(_dry_run, definition, hook, context, withheld or models)
    finally:
        if withheld is not None and withheld.wanted and key is not None:
            raise HTTPProblem(
                403,
                f"this simulation calls the model {withheld.wanted[0]!r}, and the key {key.name!r} "
                "may only read: a request that calls a model needs a write key (nothing was called)",
                "security_exception",
            )
    return JSONResponse(result.to_dict())


def _dry_run(definition: Definition, hook: Any, context: Context, models: ModelsConfig) -> Any:
    """Apply a definition without touching the server's stores: a definition whose entries
    archive (their class declares ``archives``, or ``offload: true``) archives into a throwaway
    folder, removed right after, so that the simulation shows what a run with a store does."""
    if not definition.archives:
        return definition.apply(hook, context, models=models)
    with tempfile.TemporaryDirectory(prefix="ctxmgmt-simulate-") as folder:
        return definition.apply(
            hook, context, models=models, offloader=LocalOffloader(folder), session="simulate"
        )


def _nesting(text: str) -> int:
    """How deep a YAML text nests: brackets outside quotes, plus indentation levels (each
    deeper indentation one level, however many spaces). A linear scan."""
    deepest = depth = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "\n":
            quote = ""  # a quote does not span lines here (a block scalar's text may hold one)
    levels = [0]
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        while indent < levels[-1]:
            levels.pop()
        if indent > levels[-1]:
            levels.append(indent)
        deepest = max(deepest, len(levels) - 1 + stripped.count("- ", 0, 8))
    return deepest


def _check_text(text: str, registry: Any, models: list[str]) -> tuple[Any, list[Any]]:
    """(the parsed document, its problems): off the event loop, as parsing takes a while."""
    document = parse_document(text, source="definition")
    return document, validate_definition(document, registry=registry, model_ids=models)


async def validate(request: Request) -> JSONResponse:
    """Check a definition's YAML or JSON text as an editor holds it: every problem with its
    pointer and line, and the parsed document when there is none (to save it)."""
    authorize(request, "definitions")
    body = await json_body(request)
    text = body.get("text")
    if not isinstance(text, str):
        raise HTTPProblem(400, "text is required: the definition's YAML or JSON, as a string")
    if len(text) > MAX_TEXT:
        raise HTTPProblem(400, f"text is longer than {MAX_TEXT:,} characters; a definition is far smaller")
    depth = _nesting(text)
    if depth > MAX_NESTING:  # YAML's parser costs length x nesting, and recurses with it
        raise HTTPProblem(400, f"text nests {depth} deep; a definition nests at most {MAX_NESTING}")
    registry, models = state(request).store.registry, list(state(request).models)
    document, problems = await run_in_threadpool(_check_text, text, registry, models)
    errors = [p for p in problems if p.severity == "error"]
    return JSONResponse(
        {
            "valid": not errors,
            "problems": [p.to_dict() for p in problems],
            "definition": document.data if not errors else None,
        }
    )
