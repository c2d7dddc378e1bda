"""A Python client for the REST API, over httpx, with an async twin.

Each request is described once (:class:`_API`), from the route table
(:mod:`ctxmgmt.api.routes`): :class:`Client` sends it and waits, :class:`AsyncClient`
sends it in a coroutine; neither has a method of its own.

Every error answer raises :class:`~ctxmgmt.ApiError` carrying the status, the
OpenSearch error type, the reason and, for invalid definitions, every problem. An answer
that is not a ctxmgmt answer (not JSON, larger than ``max_answer_bytes``, nested too deep,
or not in time) raises ApiError of type ``invalid_answer``; ``timeout`` is the deadline of
the whole call (connect, send, wait and read).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from .api.routes import by_client
from .errors import ApiError, Problem
from .loader import MAX_DEPTH, parse_json

__all__ = ["AsyncClient", "Client"]

MAX_ANSWER_BYTES = 64 << 20
"""An answer is read up to this many bytes (after decompression), then refused."""
INVALID_ANSWER = "invalid_answer"
_ANSWER_DEPTH = 2 * MAX_DEPTH  # an answer wraps what was sent, which nests up to MAX_DEPTH


def _seg(value: str) -> str:
    """A name or id as one path segment: "/", "?", "#" and ".." cannot reach another route."""
    segment = quote(str(value), safe="")
    return segment.replace(".", "%2E") if segment in (".", "..") else segment  # else httpx resolves them


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


class _Body:
    """An answer's body, read in chunks up to a size and a deadline."""

    def __init__(self, limit: int, deadline: float) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.deadline = deadline

    def add(self, status: int, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size > self.limit:
            raise ApiError(status, INVALID_ANSWER, f"the answer is larger than {self.limit:,} bytes")
        if time.monotonic() > self.deadline:
            raise httpx.ReadTimeout("no whole answer within the timeout")


def _raise_for(response: httpx.Response, body: bytes) -> Any:
    """The answer's JSON, or ApiError: the server's own error, or an invalid answer."""
    status = response.status_code
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    text = body.decode("utf-8", errors="replace")
    parsed = parse_json(text, max_depth=_ANSWER_DEPTH) if "json" in kind or status < 400 else None
    if status < 400:
        assert parsed is not None
        if not parsed.problems:
            return parsed.data
        if "json" not in kind:
            reason = f"the answer is {kind}, not JSON: {_gist(text) or 'empty'}"
        else:
            first = parsed.problems[0]
            where = f" (line {first.line})" if first.line else ""
            reason = f"the answer is not valid JSON{where}: {first.pointer or '/'}: {first.message}"
        raise ApiError(status, INVALID_ANSWER, reason)
    data = parsed.data if parsed is not None else None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        raise ApiError(status, "http_error", _gist(text) or response.reason_phrase)
    problems = problems_of(error.get("problems"))
    reason = str(error.get("reason"))
    raise ApiError(status, str(error.get("type"))[:100], reason[:2000], problems)


def problems_of(raw: Any, *, errors_only: bool = False) -> tuple[Problem, ...]:
    """The problems a server's answer lists (at most 1,000), each field checked; with
    ``errors_only``, not its warnings."""
    return tuple(
        Problem(
            str(p.get("pointer", "")),
            str(p.get("message", "")),
            p.get("line") if isinstance(p.get("line"), int) else None,
            p.get("source") if isinstance(p.get("source"), str) else None,
        )
        for p in (raw if isinstance(raw, list) else [])[:1000]
        if isinstance(p, dict) and not (errors_only and p.get("severity", "error") != "error")
    )


_TAG = re.compile(r"<[^<>]{0,2000}>")
_TITLE = re.compile(r"<title[^<>]{0,200}>([^<]{0,300})</title>", re.IGNORECASE)


def _gist(text: str) -> str:
    """An answer that is not JSON, on one line: an HTML page's title, or its text without tags."""
    head = text[:20_000]
    title = _TITLE.search(head)
    gist = title.group(1) if title else _TAG.sub(" ", head)
    return " ".join(gist.split())[:200]


def _outputs(answer: Any) -> dict[str, Any]:
    """OpenSearch's execute answer as ``{name: result}``."""
    try:
        outputs = answer["inference_results"][0]["output"]
        return {str(o["name"]): o["result"] for o in outputs}
    except (KeyError, IndexError, TypeError):
        raise ApiError(
            200, INVALID_ANSWER, "the answer has no inference_results[0].output list of {name, result}"
        ) from None


P = ParamSpec("P")
R = TypeVar("R")
_JSON = dict[str, Any]


def _json_object(answer: Any) -> _JSON:
    return answer  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class _Request(Generic[R]):
    """One request, as both clients send it, and what makes its answer the method's value."""

    method: str
    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    then: Callable[[Any], R] = _json_object  # type: ignore[assignment]


def _request(
    sender: str,
    path: Mapping[str, str] | None = None,
    *,
    then: Callable[[Any], R] = _json_object,  # type: ignore[assignment]
    **kwargs: Any,
) -> _Request[R]:
    """The request a client method sends: its route from the route table (the one whose
    path takes exactly the segments given), each segment quoted; its query and headers
    checked against the operation's parameters."""
    segments = dict(path or {})
    for op in by_client(sender):
        names = {p.name for p in op.params if p.where == "path"}
        if names == set(segments):
            break
    else:
        raise AssertionError(f"{sender}: no route of the table takes the path segments {sorted(segments)}")
    declared = {p.name.lower() for p in op.params if p.where != "path"}
    sent = {*kwargs.get("params", {}), *kwargs.get("headers", {})}
    assert {key.lower() for key in sent} <= declared, f"{sender}: {sorted(sent)} not all in {op.path}"
    url = op.path.format(**{key: _seg(value) for key, value in segments.items()})
    return _Request(op.method, url, kwargs, then)


class _Endpoint(Generic[P, R]):
    """A request of the API as a method of both clients: sent and awaited by
    :class:`AsyncClient`, sent and waited for by :class:`Client`."""

    def __init__(self, build: Callable[P, _Request[R]]) -> None:
        self.build = build
        self.__name__ = build.__name__.lstrip("_")
        self.__doc__ = build.__doc__
        self.__wrapped__ = build
        answer = re.fullmatch(r"_Request\[(.+)\]", str(inspect.signature(build).return_annotation))
        returns = answer.group(1).replace("_JSON", "dict[str, Any]") if answer else inspect.Signature.empty
        self.method_signature = inspect.signature(build).replace(return_annotation=returns)
        """The method's, as help() and inspect show it: the builder's parameters, and what
        the method answers (an AsyncClient's coroutine, when awaited)."""
        self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = [self_, *self.method_signature.parameters.values()]
        self.__signature__ = self.method_signature.replace(parameters=parameters)

    def __call__(self, client: Client | AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """``Client.create(client, ...)``, as with any method taken from its class."""
        return self.__get__(client, type(client))(*args, **kwargs)

    @overload
    def __get__(self, client: None, owner: type[Any]) -> _Endpoint[P, R]: ...
    @overload
    def __get__(self, client: AsyncClient, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, R]: ...
    def __get__(self, client: Client | AsyncClient | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build = self.build
        if isinstance(client, AsyncClient):
            sender = client

            async def send(*args: P.args, **kwargs: P.kwargs) -> R:
                request = build(*args, **kwargs)
                return request.then(await sender._call(request))

            return self._named(send)

        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            request = build(*args, **kwargs)
            return request.then(client._call(request))

        return self._named(call)

    def _named(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """The bound method as help() and inspect show it: its name, docstring and signature."""
        functools.update_wrapper(method, self.build)
        method.__name__ = method.__qualname__ = self.__name__
        method.__signature__ = self.method_signature  # type: ignore[attr-defined]
        return method


# -- the request table: one function per client method, each naming its route's sender --
def _health() -> _Request[_JSON]:
    """The server's health and its database's: ``{status, database}``."""
    return _request("health")


def _create(name: str, definition: Mapping[str, Any]) -> _Request[_JSON]:
    """Store a new definition under a name."""
    return _request("create", {"name": name}, json=dict(definition))


def _get(name: str) -> _Request[_JSON]:
    """A stored definition, with its version."""
    return _request("get", {"name": name})


def _update(name: str, definition: Mapping[str, Any], *, if_version: int | None = None) -> _Request[_JSON]:
    """Replace a definition (only if its version is ``if_version``, when given)."""
    headers = {"if-match": str(if_version)} if if_version is not None else {}
    return _request("update", {"name": name}, json=dict(definition), headers=headers)


def _delete(name: str, *, force: bool = False) -> _Request[_JSON]:
    """Delete a definition (``force``: even when an agent names it)."""
    return _request("delete", {"name": name}, params={"force": "true"} if force else {})


def _list(*, from_: int = 0, size: int = 10, q: str | None = None) -> _Request[_JSON]:
    """Stored definitions, sorted by name: ``{total, context_management}``."""
    params: dict[str, Any] = {"from": from_, "size": size}
    if q:
        params["q"] = q
    return _request("list", params=params)


def _simulate(
    name: str | None,
    context: Mapping[str, Any],
    *,
    hook: str = "pre_llm",
    definition: Mapping[str, Any] | None = None,
) -> _Request[_JSON]:
    """Dry-run a stored definition (by name), or an inline one (name None)."""
    body: dict[str, Any] = {"hook": hook, "context": dict(context)}
    if definition is not None:
        body["definition"] = dict(definition)
    return _request("simulate", {"name": name} if name else {}, json=body)


def _validate(text: str) -> _Request[_JSON]:
    """Check a definition's YAML or JSON text: ``{valid, problems, definition}``."""
    return _request("validate", json={"text": text})


def _eval_report(report_id: str) -> _Request[_JSON]:
    """An eval report that ``ctxmgmt eval --save`` stored."""
    return _request("eval_report", {"report_id": report_id})


def _agent_id(answer: Any) -> str:
    return str(answer["agent_id"])


def _register_agent(body: Mapping[str, Any]) -> _Request[str]:
    """Register an agent (OpenSearch's body); its id."""
    return _request("register_agent", json=dict(body), then=_agent_id)


def _get_agent(agent_id: str) -> _Request[_JSON]:
    """An agent's registration."""
    return _request("get_agent", {"agent_id": agent_id})


def _replace_agent(agent_id: str, body: Mapping[str, Any]) -> _Request[_JSON]:
    """Replace an agent's registration."""
    return _request("replace_agent", {"agent_id": agent_id}, json=dict(body))


def _delete_agent(agent_id: str) -> _Request[_JSON]:
    """Delete an agent."""
    return _request("delete_agent", {"agent_id": agent_id})


def _list_agents(*, from_: int = 0, size: int = 10) -> _Request[_JSON]:
    """Registered agents: ``{total, agents}``."""
    return _request("list_agents", params={"from": from_, "size": size})


def _execute(
    agent_id: str,
    question: str,
    *,
    context_management_name: str | None = None,
    memory_id: str | None = None,
) -> _Request[_JSON]:
    """Execute an agent: ``{name: result}`` of OpenSearch's output list (memory_id,
    execution_id, response, finished, usage, context_management)."""
    params = {"question": question}
    if context_management_name:
        params["context_management_name"] = context_management_name
    if memory_id:
        params["memory_id"] = memory_id
    return _request("execute", {"agent_id": agent_id}, json={"parameters": params}, then=_outputs)


def _compact(agent_id: str, memory_id: str, *, instruction: str | None = None) -> _Request[_JSON]:
    """Summarise an agent's conversation now."""
    body: dict[str, Any] = {"memory_id": memory_id}
    if instruction:
        body["instruction"] = instruction
    return _request("compact", {"agent_id": agent_id}, json=body)


def _executions(agent_id: str, *, from_: int = 0, size: int = 10) -> _Request[_JSON]:
    """An agent's execution records, newest first: ``{total, executions}``."""
    return _request("executions", {"agent_id": agent_id}, params={"from": from_, "size": size})


def _execution(execution_id: str) -> _Request[_JSON]:
    """An execution's whole record."""
    return _request("execution", {"execution_id": execution_id})


def _memory(memory_id: str) -> _Request[_JSON]:
    """A conversation's state and the managed messages the model saw last."""
    return _request("memory", {"memory_id": memory_id})


def _memory_messages(memory_id: str, *, from_: int = 0, size: int = 100) -> _Request[_JSON]:
    """A conversation's complete stored record: ``{memory_id, total, messages}``."""
    params = {"from": from_, "size": size}
    return _request("memory_messages", {"memory_id": memory_id}, params=params)


def _archives(session: str) -> _Request[_JSON]:
    """A session's archives, oldest first: ``{archives, damaged}``."""
    return _request("archives", params={"session": session})


def _search_archives(session: str, pattern: str, *, size: int = 20) -> _Request[_JSON]:
    """Search a session's archives (RE2 syntax): ``{hits, truncated, damaged}``."""
    return _request("search_archives", params={"session": session, "pattern": pattern, "size": size})


def _read_archive(
    ref: str, session: str, *, offset: int = 0, limit: int = 20000, unit: str = "chars"
) -> _Request[_JSON]:
    """Archived content back, a slice at a time: ``{ref, text, offset, total, unit, next_offset}``."""
    params = {"session": session, "offset": offset, "limit": limit, "unit": unit}
    return _request("read_archive", {"ref": ref}, params=params)


class _API:
    """The requests of the API, each once: the methods of both clients."""

    health = _Endpoint(_health)
    create = _Endpoint(_create)
    get = _Endpoint(_get)
    update = _Endpoint(_update)
    delete = _Endpoint(_delete)
    list = _Endpoint(_list)
    simulate = _Endpoint(_simulate)
    validate = _Endpoint(_validate)
    eval_report = _Endpoint(_eval_report)
    register_agent = _Endpoint(_register_agent)
    get_agent = _Endpoint(_get_agent)
    replace_agent = _Endpoint(_replace_agent)
    delete_agent = _Endpoint(_delete_agent)
    list_agents = _Endpoint(_list_agents)
    execute = _Endpoint(_execute)
    compact = _Endpoint(_compact)
    executions = _Endpoint(_executions)
    execution = _Endpoint(_execution)
    memory = _Endpoint(_memory)
    memory_messages = _Endpoint(_memory_messages)
    archives = _Endpoint(_archives)
    search_archives = _Endpoint(_search_archives)
    read_archive = _Endpoint(_read_archive)


class Client(_API):
    """Talks to a ctxmgmt server: ``Client("http://127.0.0.1:8000", api_key=None)``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._timeout = timeout
        self._limit = max_answer_bytes

    def _call(self, request: _Request[Any]) -> Any:
        body = _Body(self._limit, time.monotonic() + self._timeout)
        with self._http.stream(request.method, request.path, **request.kwargs) as response:
            for chunk in response.iter_bytes():
                body.add(response.status_code, chunk)
        return _raise_for(response, b"".join(body.chunks))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_API):
    """The async twin of :class:`Client`: the same methods, as coroutines."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._timeout = timeout
        self._limit = max_answer_bytes

    async def _call(self, request: _Request[Any]) -> Any:
        body = _Body(self._limit, time.monotonic() + self._timeout)
        try:
            async with asyncio.timeout(self._timeout):
                async with self._http.stream(request.method, request.path, **request.kwargs) as response:
                    async for chunk in response.aiter_bytes():
                        body.add(response.status_code, chunk)
        except TimeoutError:
            raise httpx.ReadTimeout("no whole answer within the timeout") from None
        return _raise_for(response, b"".join(body.chunks))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
