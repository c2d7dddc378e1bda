"""A Python client for the REST API, over httpx, with an async twin.

Every error answer raises :class:`~ctxmgmt.ApiError` carrying the status, the
OpenSearch error type, the reason and, for invalid definitions, every problem. An answer
that is not a ctxmgmt answer (not JSON, larger than ``max_answer_bytes``, nested too deep,
or not in time) raises ApiError of type ``invalid_answer``; ``timeout`` is the deadline of
the whole call (connect, send, wait and read).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from .errors import ApiError, Problem
from .loader import MAX_DEPTH, parse_json

__all__ = ["AsyncClient", "Client"]

BASE = "/_plugins/_ml/context_management"
AGENTS = "/_plugins/_ml/agents"
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
    raw = error.get("problems")
    problems = tuple(
        Problem(
            str(p.get("pointer", "")),
            str(p.get("message", "")),
            p.get("line") if isinstance(p.get("line"), int) else None,
            p.get("source") if isinstance(p.get("source"), str) else None,
        )
        for p in (raw if isinstance(raw, list) else [])[:1000]
        if isinstance(p, dict)
    )
    reason = str(error.get("reason"))
    raise ApiError(status, str(error.get("type"))[:100], reason[:2000], problems)


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


class _Calls:
    """The requests of the API, described once for both clients."""

    @staticmethod
    def create(name: str, definition: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return "POST", f"{BASE}/{_seg(name)}", {"json": dict(definition)}

    @staticmethod
    def get(name: str) -> tuple[str, str, dict[str, Any]]:
        return "GET", f"{BASE}/{_seg(name)}", {}

    @staticmethod
    def update(
        name: str, definition: Mapping[str, Any], if_version: int | None
    ) -> tuple[str, str, dict[str, Any]]:
        headers = {"if-match": str(if_version)} if if_version is not None else {}
        return "PUT", f"{BASE}/{_seg(name)}", {"json": dict(definition), "headers": headers}

    @staticmethod
    def delete(name: str, force: bool) -> tuple[str, str, dict[str, Any]]:
        return "DELETE", f"{BASE}/{_seg(name)}", {"params": {"force": "true"} if force else {}}

    @staticmethod
    def list(from_: int, size: int, q: str | None) -> tuple[str, str, dict[str, Any]]:
        params: dict[str, Any] = {"from": from_, "size": size}
        if q:
            params["q"] = q
        return "GET", BASE, {"params": params}

    @staticmethod
    def simulate(
        name: str | None, hook: str, context: Mapping[str, Any], definition: Mapping[str, Any] | None
    ) -> tuple[str, str, dict[str, Any]]:
        body: dict[str, Any] = {"hook": hook, "context": dict(context)}
        if definition is not None:
            body["definition"] = dict(definition)
        path = f"{BASE}/{_seg(name)}/_simulate" if name else f"{BASE}/_simulate"
        return "POST", path, {"json": body}

    @staticmethod
    def register_agent(body: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return "POST", f"{AGENTS}/_register", {"json": dict(body)}

    @staticmethod
    def replace_agent(agent_id: str, body: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return "PUT", f"{AGENTS}/{_seg(agent_id)}", {"json": dict(body)}

    @staticmethod
    def execute(
        agent_id: str, question: str, context_management_name: str | None, memory_id: str | None
    ) -> tuple[str, str, dict[str, Any]]:
        params = {"question": question}
        if context_management_name:
            params["context_management_name"] = context_management_name
        if memory_id:
            params["memory_id"] = memory_id
        return "POST", f"{AGENTS}/{_seg(agent_id)}/_execute", {"json": {"parameters": params}}

    @staticmethod
    def executions(agent_id: str, from_: int, size: int) -> tuple[str, str, dict[str, Any]]:
        return "GET", f"{AGENTS}/{_seg(agent_id)}/executions", {"params": {"from": from_, "size": size}}

    @staticmethod
    def execution(execution_id: str) -> tuple[str, str, dict[str, Any]]:
        return "GET", f"/_plugins/_ml/executions/{_seg(execution_id)}", {}

    @staticmethod
    def memory(memory_id: str) -> tuple[str, str, dict[str, Any]]:
        return "GET", f"/_plugins/_ml/memory/{_seg(memory_id)}", {}

    @staticmethod
    def memory_messages(memory_id: str, from_: int, size: int) -> tuple[str, str, dict[str, Any]]:
        params = {"from": from_, "size": size}
        return "GET", f"/_plugins/_ml/memory/{_seg(memory_id)}/messages", {"params": params}


class Client:
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

    def _call(self, request: tuple[str, str, dict[str, Any]]) -> Any:
        method, path, kwargs = request
        body = _Body(self._limit, time.monotonic() + self._timeout)
        with self._http.stream(method, path, **kwargs) as response:
            for chunk in response.iter_bytes():
                body.add(response.status_code, chunk)
        return _raise_for(response, b"".join(body.chunks))

    def create(self, name: str, definition: Mapping[str, Any]) -> dict[str, Any]:
        return self._call(_Calls.create(name, definition))  # type: ignore[no-any-return]

    def get(self, name: str) -> dict[str, Any]:
        return self._call(_Calls.get(name))  # type: ignore[no-any-return]

    def update(
        self, name: str, definition: Mapping[str, Any], *, if_version: int | None = None
    ) -> dict[str, Any]:
        return self._call(_Calls.update(name, definition, if_version))  # type: ignore[no-any-return]

    def delete(self, name: str, *, force: bool = False) -> dict[str, Any]:
        return self._call(_Calls.delete(name, force))  # type: ignore[no-any-return]

    def list(self, *, from_: int = 0, size: int = 10, q: str | None = None) -> dict[str, Any]:
        return self._call(_Calls.list(from_, size, q))  # type: ignore[no-any-return]

    def simulate(
        self,
        name: str | None,
        context: Mapping[str, Any],
        *,
        hook: str = "pre_llm",
        definition: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Dry-run a stored definition (by name), or an inline one (name None)."""
        return self._call(_Calls.simulate(name, hook, context, definition))  # type: ignore[no-any-return]

    def health(self) -> dict[str, Any]:
        return self._call(("GET", "/_health", {}))  # type: ignore[no-any-return]

    def compact(self, agent_id: str, memory_id: str, *, instruction: str | None = None) -> dict[str, Any]:
        """Summarise an agent's conversation now."""
        body: dict[str, Any] = {"memory_id": memory_id}
        if instruction:
            body["instruction"] = instruction
        return self._call(("POST", f"/_plugins/_ml/agents/{_seg(agent_id)}/_compact", {"json": body}))  # type: ignore[no-any-return]

    def register_agent(self, body: Mapping[str, Any]) -> str:
        """Register an agent (OpenSearch's body); its id."""
        return str(self._call(_Calls.register_agent(body))["agent_id"])

    def replace_agent(self, agent_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call(_Calls.replace_agent(agent_id, body))  # type: ignore[no-any-return]

    def execute(
        self,
        agent_id: str,
        question: str,
        *,
        context_management_name: str | None = None,
        memory_id: str | None = None,
    ) -> dict[str, Any]:
        """Execute an agent: ``{name: result}`` of OpenSearch's output list (memory_id,
        execution_id, response, finished, usage, context_management)."""
        answer = self._call(_Calls.execute(agent_id, question, context_management_name, memory_id))
        return _outputs(answer)

    def executions(self, agent_id: str, *, from_: int = 0, size: int = 10) -> dict[str, Any]:
        """An agent's execution records, newest first: ``{total, executions}``."""
        return self._call(_Calls.executions(agent_id, from_, size))  # type: ignore[no-any-return]

    def execution(self, execution_id: str) -> dict[str, Any]:
        """An execution's whole record."""
        return self._call(_Calls.execution(execution_id))  # type: ignore[no-any-return]

    def memory(self, memory_id: str) -> dict[str, Any]:
        """A conversation's state and the managed messages the model saw last."""
        return self._call(_Calls.memory(memory_id))  # type: ignore[no-any-return]

    def memory_messages(self, memory_id: str, *, from_: int = 0, size: int = 100) -> dict[str, Any]:
        """A conversation's complete stored record: ``{memory_id, total, messages}``."""
        return self._call(_Calls.memory_messages(memory_id, from_, size))  # type: ignore[no-any-return]

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The async twin of :class:`Client`."""

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

    async def _call(self, request: tuple[str, str, dict[str, Any]]) -> Any:
        method, path, kwargs = request
        body = _Body(self._limit, time.monotonic() + self._timeout)
        try:
            async with asyncio.timeout(self._timeout):
                async with self._http.stream(method, path, **kwargs) as response:
                    async for chunk in response.aiter_bytes():
                        body.add(response.status_code, chunk)
        except TimeoutError:
            raise httpx.ReadTimeout("no whole answer within the timeout") from None
        return _raise_for(response, b"".join(body.chunks))

    async def create(self, name: str, definition: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call(_Calls.create(name, definition))  # type: ignore[no-any-return]

    async def get(self, name: str) -> dict[str, Any]:
        return await self._call(_Calls.get(name))  # type: ignore[no-any-return]

    async def update(
        self, name: str, definition: Mapping[str, Any], *, if_version: int | None = None
    ) -> dict[str, Any]:
        return await self._call(_Calls.update(name, definition, if_version))  # type: ignore[no-any-return]

    async def delete(self, name: str, *, force: bool = False) -> dict[str, Any]:
        return await self._call(_Calls.delete(name, force))  # type: ignore[no-any-return]

    async def list(self, *, from_: int = 0, size: int = 10, q: str | None = None) -> dict[str, Any]:
        return await self._call(_Calls.list(from_, size, q))  # type: ignore[no-any-return]

    async def simulate(
        self,
        name: str | None,
        context: Mapping[str, Any],
        *,
        hook: str = "pre_llm",
        definition: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return await self._call(_Calls.simulate(name, hook, context, definition))  # type: ignore[no-any-return]

    async def health(self) -> dict[str, Any]:
        return await self._call(("GET", "/_health", {}))  # type: ignore[no-any-return]

    async def register_agent(self, body: Mapping[str, Any]) -> str:
        """Register an agent (OpenSearch's body); its id."""
        return str((await self._call(_Calls.register_agent(body)))["agent_id"])

    async def replace_agent(self, agent_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call(_Calls.replace_agent(agent_id, body))  # type: ignore[no-any-return]

    async def execute(
        self,
        agent_id: str,
        question: str,
        *,
        context_management_name: str | None = None,
        memory_id: str | None = None,
    ) -> dict[str, Any]:
        """Execute an agent: ``{name: result}`` of OpenSearch's output list (memory_id,
        execution_id, response, finished, usage, context_management)."""
        answer = await self._call(_Calls.execute(agent_id, question, context_management_name, memory_id))
        return _outputs(answer)

    async def executions(self, agent_id: str, *, from_: int = 0, size: int = 10) -> dict[str, Any]:
        """An agent's execution records, newest first: ``{total, executions}``."""
        return await self._call(_Calls.executions(agent_id, from_, size))  # type: ignore[no-any-return]

    async def execution(self, execution_id: str) -> dict[str, Any]:
        """An execution's whole record."""
        return await self._call(_Calls.execution(execution_id))  # type: ignore[no-any-return]

    async def memory(self, memory_id: str) -> dict[str, Any]:
        """A conversation's state and the managed messages the model saw last."""
        return await self._call(_Calls.memory(memory_id))  # type: ignore[no-any-return]

    async def memory_messages(self, memory_id: str, *, from_: int = 0, size: int = 100) -> dict[str, Any]:
        """A conversation's complete stored record: ``{memory_id, total, messages}``."""
        return await self._call(_Calls.memory_messages(memory_id, from_, size))  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
