"""Tools an agent can call: named types built from an agent's tool specs.

- ``http`` (built in): POSTs (or another method) the model's arguments as JSON to a
  configured URL and returns the response text.
- Python callables, with :func:`register_tool`.
- Third-party types, through the entry-point group ``ctxmgmt.tools`` (a factory
  taking the spec and returning a :class:`Tool`).

A tool that fails raises :class:`~ctxmgmt.ToolError`; the runner hands its reason
to the model as the tool result.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import httpx

from .errors import RegistryError, ToolError

__all__ = ["Tool", "ToolRegistry", "default_tools", "recall_tools", "register_tool"]

log = logging.getLogger("ctxmgmt.tools")
TOOLS_GROUP = "ctxmgmt.tools"
_OPEN_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}


@dataclass(frozen=True)
class Tool:
    """A built tool: what the model sees (name, description, input schema) and how to run it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run: Callable[[dict[str, Any]], Awaitable[str]] = field(repr=False)

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.input_schema),
            },
        }


Factory = Callable[[Mapping[str, Any]], Tool]


def _http_tool(spec: Mapping[str, Any]) -> Tool:
    params = spec.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise ValueError("an http tool's parameters is an object with url (and method, headers, timeout)")
    url = params.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2048:
        raise ValueError("an http tool needs parameters.url, an http:// or https:// URL")
    method = params.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in ("GET", "POST", "PUT"):
        raise ValueError("an http tool's parameters.method is GET, POST or PUT")
    method = method.upper()
    raw_headers = params.get("headers") or {}
    if not isinstance(raw_headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_headers.items()
    ):
        raise ValueError("an http tool's parameters.headers is an object of strings")
    headers = dict(raw_headers)
    timeout = params.get("timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise ValueError("an http tool's parameters.timeout is a number of seconds, above 0 and at most 600")
    timeout = float(timeout)

    async def run(arguments: dict[str, Any]) -> str:
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                if method == "GET":
                    response = await http.get(url, params=arguments, headers=headers)
                else:
                    response = await http.request(method, url, json=arguments, headers=headers)
        except httpx.HTTPError as exc:
            raise ToolError(f"the request to {url} failed ({type(exc).__name__})") from None
        if response.status_code >= 400:
            raise ToolError(f"{url} answered {response.status_code}: {response.text[:500]}")
        return response.text

    name = spec.get("name") or "http"
    return Tool(name, spec.get("description", f"Calls {url}"), spec.get("input_schema") or _OPEN_SCHEMA, run)


class ToolRegistry:
    """Tool types by name."""

    def __init__(self, group: str = TOOLS_GROUP) -> None:
        self.group = group
        self._factories: dict[str, Factory] = {"http": _http_tool}
        self._loaded = False
        self._lock = threading.Lock()

    def register(self, type_name: str, factory: Factory) -> None:
        if type_name == "http" or (
            type_name in self._factories and self._factories[type_name] is not factory
        ):
            raise RegistryError(f"tool type {type_name!r} is registered already")
        self._factories[type_name] = factory

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for ep in entry_points(group=self.group):
                try:
                    self._factories.setdefault(ep.name, ep.load())
                except Exception as exc:
                    log.warning("tool plugin %s failed to load: %s", ep.value, exc)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._factories)

    def build(self, spec: Mapping[str, Any]) -> Tool:
        """A tool from an agent's tool spec. Raises ValueError saying what is wrong."""
        self._load()
        factory = self._factories.get(str(spec.get("type")))
        if factory is None:
            raise ValueError(
                f"unknown tool type {spec.get('type')!r}; known types: {', '.join(self.names())}"
            )
        return factory(spec)


default_tools = ToolRegistry()


def register_tool(
    name: str,
    fn: Callable[..., Any],
    *,
    description: str = "",
    input_schema: Mapping[str, Any] | None = None,
    registry: ToolRegistry | None = None,
) -> None:
    """Register a Python callable as tool type ``name``. The model's arguments are passed
    as keyword arguments; the result (str, or anything JSON-able) becomes the tool result."""

    def factory(spec: Mapping[str, Any]) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            try:
                result = fn(**arguments)
                if inspect.isawaitable(result):
                    result = await result
            except ToolError:
                raise
            except TypeError as exc:
                raise ToolError(f"bad arguments for {name}: {exc}") from None
            except Exception as exc:
                raise ToolError(f"{type(exc).__name__}: {exc}") from None
            return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)

        return Tool(
            spec.get("name") or name,
            spec.get("description") or description or (fn.__doc__ or "").strip(),
            spec.get("input_schema") or input_schema or _OPEN_SCHEMA,
            run,
        )

    (registry or default_tools).register(name, factory)


def _hit(h: dict[str, Any]) -> str:
    where = f"message {h['message']} line {h['line']}" if "message" in h else f"line {h['line']}"
    return f"{h['ref']} {where}: {h['text']}"


def recall_tools(offloader: Any, session: str) -> list[Tool]:
    """context_read and context_search, bound to one session of an offload store.
    They reach only that store, and only that session's content. A read returns at most
    :data:`~ctxmgmt.messages.RECALL_LIMIT` characters (or lines), whatever limit the model
    asks for, and :data:`~ctxmgmt.messages.RECALL_DEFAULT` when it asks for none; its header
    gives the next offset. What it returns is a tool result like any other: the definition's
    truncation and the fit step apply to it."""
    from .errors import OffloadError
    from .messages import RECALL_DEFAULT, RECALL_LIMIT
    from .offload.base import bounded

    async def read(arguments: dict[str, Any]) -> str:
        try:
            limit = arguments.get("limit", RECALL_DEFAULT)
            if isinstance(limit, bool) or not isinstance(limit, (int, float, str)):
                raise TypeError(f"limit must be a whole number from 1 to {RECALL_LIMIT:,}")
            got = offloader.read(
                session,
                arguments.get("ref"),
                offset=int(arguments.get("offset", 0)),
                limit=min(max(1, int(limit)), RECALL_LIMIT),
                unit=arguments.get("unit", "chars")
                if arguments.get("unit") in ("chars", "lines")
                else "chars",
            )
        except (OffloadError, TypeError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        got = bounded(got, RECALL_LIMIT)  # lines are bounded in characters too
        nxt = "end" if got.next_offset is None else f"next offset {got.next_offset}"
        if got.clipped:
            nxt += f"; this line is longer than {RECALL_LIMIT:,} chars and was cut: read it by chars"
        return f"[{got.ref}: {got.unit} from {got.offset} of {got.total}; {nxt}]\n{got.text}"

    async def search(arguments: dict[str, Any]) -> str:
        try:
            hits = offloader.search(session, arguments.get("pattern"), max_results=20)
        except OffloadError as exc:
            raise ToolError(str(exc)) from None
        if not hits:
            return "no match in the archived context"
        more = ["(the search stopped at its scan limit: narrow the pattern)"] if hits.truncated else []
        return "\n".join([*(_hit(h) for h in hits), *more])

    return [
        Tool(
            "context_read",
            "Read archived context (truncated tool outputs, removed messages) by its reference.",
            {
                "type": "object",
                "required": ["ref"],
                "properties": {
                    "ref": {"type": "string", "description": "A reference such as t-... or m-..."},
                    "offset": {"type": "integer", "minimum": 0, "default": 0},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": RECALL_LIMIT,
                        "default": RECALL_DEFAULT,
                    },
                    "unit": {"enum": ["chars", "lines"], "default": "chars"},
                },
            },
            read,
        ),
        Tool(
            "context_search",
            "Search the archived context of this conversation with a regular expression.",
            {"type": "object", "required": ["pattern"], "properties": {"pattern": {"type": "string"}}},
            search,
        ),
    ]
