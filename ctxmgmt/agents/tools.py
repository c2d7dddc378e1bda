"""Tools an agent can call: named types built from an agent's tool specs.

- ``http`` (built in): POSTs (or another method) the model's arguments as JSON to a
  configured URL and returns the response text.
- Python callables, with :func:`register_tool`.
- Third-party types, through the entry-point group ``ctxmgmt.tools`` (a factory
  taking the spec and returning a :class:`Tool`).

A tool that fails raises :class:`~ctxmgmt.ToolError`; the runner hands its reason
to the model as the tool result.

Every tool has two bounds, given per agent tool spec as ``parameters.timeout`` (seconds,
the deadline of the whole call: connecting, the headers, the body; default 30) and
``parameters.max_output_bytes`` (default 1 MiB). The runner enforces both for every tool
type: past the deadline the model gets an error result and the execution goes on; an
output is read as a stream and kept up to its limit, with a notice of the cut (and, where
an offload store exists, archived whole while it streams; see :class:`OutputReader`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import Any

import httpx

from ..errors import RegistryError, ToolError
from ..llm.client import _tls
from ..messages import CUT_OUTPUT

__all__ = ["Tool", "ToolRegistry", "call_tool", "default_tools", "recall_tools", "register_tool"]

log = logging.getLogger("ctxmgmt.tools")
TOOLS_GROUP = "ctxmgmt.tools"
_OPEN_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}

DEFAULT_TIMEOUT = 30.0
"""Seconds a tool call may take, whole (``parameters.timeout``)."""
MAX_TIMEOUT = 600.0
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
"""Bytes of a tool's output the model and the memory get (``parameters.max_output_bytes``)."""
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
"""The largest ``parameters.max_output_bytes`` a tool spec may ask for."""
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
"""Bytes of one tool output archived at most; past them the rest is not read."""
CHUNK_BYTES = 1024 * 1024
"""An archive is written in pieces of about this size, each off the event loop."""
MAX_TOOL_THREADS = 64
"""Sync tool callables running at once, at most, those past their deadline included."""
_tool_threads = threading.BoundedSemaphore(MAX_TOOL_THREADS)


class ToolSpecError(ValueError):
    """A tool spec that cannot be built; ``pointer`` is where, inside the spec."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.pointer = pointer


@dataclass(frozen=True)
class Tool:
    """A built tool: what the model sees (name, description, input schema), how to run it,
    and its bounds: ``timeout`` (seconds, the whole call) and ``max_output_bytes``."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run: Callable[[dict[str, Any]], Awaitable[str]] = field(repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    stream: Callable[[dict[str, Any]], AsyncIterator[bytes | str]] | None = field(default=None, repr=False)
    """The output as it arrives (bytes as UTF-8, or text), when the tool can stream it."""

    def __post_init__(self) -> None:
        _bounds({"timeout": self.timeout, "max_output_bytes": self.max_output_bytes})

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

    async def output(self, arguments: dict[str, Any]) -> AsyncGenerator[bytes | str, None]:
        """The output in pieces: the tool's stream, or the result of ``run`` as one piece."""
        if self.stream is not None:
            async for chunk in self.stream(arguments):
                yield chunk
        else:
            yield await self.run(arguments)


Factory = Callable[[Mapping[str, Any]], Tool]


def _bounds(params: Mapping[str, Any]) -> dict[str, Any]:
    """``timeout`` and ``max_output_bytes`` of a tool spec's parameters, checked."""
    out: dict[str, Any] = {}
    timeout = params.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise ToolSpecError(
            "a tool's parameters.timeout is the whole call's deadline: a number of seconds, "
            f"above 0 and at most {MAX_TIMEOUT:g}",
            "/parameters/timeout",
        )
    out["timeout"] = float(timeout)
    size = params.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES)
    if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= MAX_OUTPUT_BYTES:
        raise ToolSpecError(
            f"a tool's parameters.max_output_bytes is an integer from 1024 to {MAX_OUTPUT_BYTES} "
            f"(default {DEFAULT_MAX_OUTPUT_BYTES})",
            "/parameters/max_output_bytes",
        )
    out["max_output_bytes"] = size
    return out


def _params(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    params = spec.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise ToolSpecError("a tool's parameters is an object", "/parameters")
    return params


def _http_tool(spec: Mapping[str, Any]) -> Tool:
    params = _params(spec)
    url = params.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2048:
        raise ToolSpecError(
            "an http tool needs parameters.url, an http:// or https:// URL", "/parameters/url"
        )
    method = params.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in ("GET", "POST", "PUT"):
        raise ToolSpecError("an http tool's parameters.method is GET, POST or PUT", "/parameters/method")
    method = method.upper()
    raw_headers = params.get("headers") or {}
    if not isinstance(raw_headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_headers.items()
    ):
        raise ToolSpecError(
            "an http tool's parameters.headers is an object of strings", "/parameters/headers"
        )
    # Uncompressed unless the spec asks otherwise: a compressed body could expand far past
    # its size on the wire in one piece.
    headers = {"accept-encoding": "identity", **raw_headers}
    lowered = {k.lower() for k in raw_headers}
    bounds = _bounds(params)

    async def stream(arguments: dict[str, Any]) -> AsyncIterator[bytes | str]:
        # The runner bounds the whole call (asyncio.timeout) and stops reading at the output
        # limit; the per-read timeout here only ends a silent connection sooner.
        request: dict[str, Any] = {"params": arguments} if method == "GET" else {"json": arguments}
        try:
            async with (
                # The process's TLS context: building one loads the CA bundle (~30 ms of CPU).
                httpx.AsyncClient(timeout=bounds["timeout"], verify=_tls()) as http,
                http.stream(method, url, headers=headers, **request) as response,
            ):
                if response.status_code >= 400:
                    head = b""
                    async for chunk in response.aiter_bytes():
                        head += chunk
                        if len(head) >= 500:
                            break
                    text = head[:500].decode("utf-8", "replace")
                    raise ToolError(f"{url} answered {response.status_code}: {text}")
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity") and "accept-encoding" not in lowered:
                    # Asked for identity: a compressed body could expand far past its size on
                    # the wire (a 1 MB gzip is 1 GB of text).
                    raise ToolError(
                        f"{url} answered with content-encoding {encoding[:40]!r}, though an "
                        "uncompressed body was asked for (accept-encoding: identity)"
                    )
                decoder = _decoder(response.charset_encoding)
                async for chunk in response.aiter_bytes():
                    yield chunk if decoder is None else decoder.decode(chunk)
                if decoder is not None:
                    yield decoder.decode(b"", final=True)
        except httpx.HTTPError as exc:
            raise ToolError(f"the request to {url} failed ({type(exc).__name__})") from None

    async def run(arguments: dict[str, Any]) -> str:
        reader = OutputReader(bounds["max_output_bytes"])
        async for chunk in stream(arguments):
            if not await reader.feed(chunk):
                break
        return await reader.result()

    name = spec.get("name") or "http"
    return Tool(
        name,
        spec.get("description", f"Calls {url}"),
        spec.get("input_schema") or _OPEN_SCHEMA,
        run,
        stream=stream,
        **bounds,
    )


def _decoder(charset: str | None) -> codecs.IncrementalDecoder | None:
    """An incremental decoder for a body's declared charset; None for UTF-8 (the reader's
    own) or a charset Python does not know."""
    if not charset:
        return None
    try:
        info = codecs.lookup(charset)
    except LookupError:
        return None
    return None if info.name == "utf-8" else info.incrementaldecoder(errors="replace")


class OutputReader:
    """A tool's output read as a stream: kept up to ``limit`` bytes (cut at a character
    boundary, with a notice of the cut), and, given ``open_archive`` (which opens an offload
    store's stream), archived whole once it is cut, in pieces written off the event loop, up
    to :data:`MAX_ARCHIVE_BYTES`. Bytes are UTF-8, decoded incrementally across pieces (an
    invalid sequence becomes U+FFFD); text is taken as it is (a lone surrogate becomes
    U+FFFD too), so the kept text and the archive are always valid Unicode."""

    def __init__(
        self,
        limit: int,
        open_archive: Callable[[], Any] | None = None,
        *,
        name: str = "tool",
        why: str = "parameters.max_output_bytes",
        archive_limit: int = MAX_ARCHIVE_BYTES,
    ) -> None:
        self.limit = limit
        self.archive_limit = min(archive_limit, MAX_ARCHIVE_BYTES)
        """Bytes archived at the most (what is left of the execution's archive budget)."""
        self.name = name
        self.why = why
        """The limit's name, for the notice."""
        self.total = 0
        self.cut = False
        self.archived = 0
        self.whole = True
        """False when the reading stopped at the archive's bound: more followed."""
        self._open = open_archive
        self._archive: Any = None
        self._failed: str | None = None
        self._kept: list[str] = []
        self._kept_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._whole_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._pending_bytes = 0

    @property
    def ref(self) -> str | None:
        """The archive's reference, once it is committed."""
        return self._archive.ref if self._archive is not None and self._failed is None else None

    async def feed(self, chunk: bytes | str) -> bool:
        """Take a piece; False once the rest need not be read."""
        if isinstance(chunk, str) and len(chunk) > CHUNK_BYTES:  # a callable's long result
            for at in range(0, len(chunk), CHUNK_BYTES):
                if not await self.feed(chunk[at : at + CHUNK_BYTES]):
                    return False
            return True
        if isinstance(chunk, str):
            data = _utf8(chunk)
        elif isinstance(chunk, (bytes, bytearray, memoryview)):
            data = bytes(chunk)
        else:  # a plugin's run() that returned something else
            raise ToolError(f"the tool {self.name} returned {type(chunk).__name__}, not text")
        room = self.limit - self.total
        if room > 0:
            self._kept.append(self._kept_decoder.decode(data[:room]))
        self.total += len(data)
        self.cut = self.cut or self.total > self.limit
        if self._open is None:
            return not self.cut
        take = min(len(data), self.archive_limit - self.archived)
        if take > 0:
            self._pending.append(self._whole_decoder.decode(data[:take]))
            self._pending_bytes += take
            self.archived += take
        if self.cut and self._archive is None:
            try:
                self._archive = await asyncio.to_thread(self._open)
            except Exception as exc:  # no archive: the output is cut all the same
                log.warning("the output of %s cannot be archived: %s", self.name, exc)
                self._open, self._failed = None, type(exc).__name__
                return False
        if self._archive is not None and self._pending_bytes >= CHUNK_BYTES and not await self._flush():
            return False
        self.whole = self.archived < self.archive_limit
        return self.whole

    async def _flush(self, final: bool = False) -> bool:
        if final:
            self._pending.append(self._whole_decoder.decode(b"", final=True))
        text = "".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        if text and self._failed is None:
            try:
                await asyncio.to_thread(self._archive.write, text)
            except Exception as exc:
                log.warning("the output of %s could not be archived: %s", self.name, exc)
                self._failed = type(exc).__name__
                self._open = None
                await self.discard()
                return False
        return True

    async def result(self) -> str:
        """The kept text, with a notice first when the output was cut; an archive is
        committed (durable) before the notice names it."""
        kept = "".join(self._kept) + self._kept_decoder.decode(b"", final=not self.cut)
        self._kept = []
        if not self.cut:
            return kept
        where = ""
        if self._archive is not None and self._failed is None and await self._flush(final=True):
            try:
                await asyncio.to_thread(self._archive.commit)
            except Exception as exc:  # the cut stands; the archive is lost
                log.warning("the output of %s could not be archived: %s", self.name, exc)
                self._failed = type(exc).__name__
                await self.discard()
        if self._failed is not None:
            where = f"; it could not be archived ({self._failed})"
        elif self._archive is not None:
            what = "the whole output is" if self.whole else f"its first {self.archived:,} bytes are"
            where = f"; {what} archived as {self._archive.ref}: read it with context_read"
        if self._archive is None:
            size = f"more than {self.limit:,} bytes"
        else:
            size = f"{'' if self.whole else 'more than '}{self.total:,} bytes"
        notice = (
            f"{CUT_OUTPUT}{self.name} was cut: {size}, of which the first "
            f"{self.limit:,} are kept ({self.why}){where}]"
        )
        return f"{notice}\n{kept}"

    def abandon(self) -> None:
        """The call was cancelled: its unfinished archive is removed in the background."""
        archive, self._archive = self._archive, None
        if archive is not None:
            asyncio.get_running_loop().run_in_executor(None, archive.abort)

    async def discard(self) -> None:
        """The call failed (or its archive did): whatever was archived so far goes."""
        archive, self._archive = self._archive, None
        if archive is not None:
            try:
                await asyncio.to_thread(archive.abort)
            except Exception as exc:
                log.warning("an unfinished archive of %s could not be removed: %s", self.name, exc)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> bytes:
    """Text as UTF-8, each lone surrogate (which UTF-8 cannot hold) as U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode("utf-8")


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
        """A tool from an agent's tool spec. Raises ValueError saying what is wrong (a
        :class:`ToolSpecError` with a pointer into the spec, for the bounds every tool type
        takes: ``parameters.timeout`` and ``parameters.max_output_bytes``)."""
        self._load()
        factory = self._factories.get(str(spec.get("type")))
        if factory is None:
            raise ToolSpecError(
                f"unknown tool type {spec.get('type')!r}; known types: {', '.join(self.names())}", "/type"
            )
        given = _bounds(_params(spec))  # checked for every type, the plugins' too
        tool = factory(spec)
        params = _params(spec)
        return replace(tool, **{k: v for k, v in given.items() if k in params})


default_tools = ToolRegistry()


def register_tool(
    name: str,
    fn: Callable[..., Any],
    *,
    description: str = "",
    input_schema: Mapping[str, Any] | None = None,
    registry: ToolRegistry | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> None:
    """Register a Python callable as tool type ``name``. The model's arguments are passed
    as keyword arguments; the result (str, or anything JSON-able) becomes the tool result.
    A coroutine function runs on the event loop; any other callable in a worker thread, so
    that it never blocks the loop (past its deadline its result is dropped: a thread cannot
    be stopped). ``timeout`` and ``max_output_bytes`` are the defaults of the tool's bounds;
    an agent's tool spec may set its own in ``parameters``."""
    bounds = _bounds({"timeout": timeout, "max_output_bytes": max_output_bytes})
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)

    def factory(spec: Mapping[str, Any]) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            try:
                if is_async:
                    result = fn(**arguments)
                else:
                    result = await _in_thread(functools.partial(_text_of, fn, arguments), name)
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
            **bounds,
        )

    (registry or default_tools).register(name, factory)


def _in_thread(work: Callable[[], Any], name: str) -> asyncio.Future[Any]:
    """Run a sync tool in a daemon thread of its own, apart from the threads the runner's I/O
    uses: a tool that never returns (a thread cannot be stopped) starves nothing and does not
    hold up the process's exit. At most :data:`MAX_TOOL_THREADS` run at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    if not _tool_threads.acquire(blocking=False):
        raise ToolError(f"{MAX_TOOL_THREADS} tool calls are still running; try {name} again later")
    context = contextvars.copy_context()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # past its deadline: nobody waits for it
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    def main() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (context.run(work), None)
        except BaseException as exc:
            outcome = (None, exc)
        finally:
            _tool_threads.release()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=main, name=f"ctxmgmt-tool-{name}", daemon=True).start()
    return future


def _text_of(fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """A sync tool's result, as text when it is not awaitable (converted in its thread)."""
    result = fn(**arguments)
    if isinstance(result, str) or inspect.isawaitable(result):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def _hit(h: dict[str, Any]) -> str:
    where = f"message {h['message']} line {h['line']}" if "message" in h else f"line {h['line']}"
    return f"{h['ref']} {where}: {h['text']}"


def _whole(value: Any, wanted: str) -> int:
    """A model's number argument as a whole number (``12``, ``12.0``, ``"12"``: ASCII digits,
    at most 15 of them), else a ValueError that says what is wanted (not Python's own words)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**15:
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    raise ValueError(f"{wanted} (given: {json.dumps(value, default=str)[:40]})")


_DIGITS = re.compile(r"-?[0-9]{1,15}")


def recall_tools(offloader: Any, session: str) -> list[Tool]:
    """context_read and context_search, bound to one session of an offload store.
    They reach only that store, and only that session's content. A read returns at most
    :data:`~ctxmgmt.messages.RECALL_LIMIT` characters (or lines), whatever limit the model
    asks for, and :data:`~ctxmgmt.messages.RECALL_DEFAULT` when it asks for none; its header
    gives the next offset. What it returns is a tool result like any other: the definition's
    truncation and the fit step apply to it."""
    from ..errors import OffloadError
    from ..messages import RECALL_DEFAULT, RECALL_LIMIT
    from ..offload.base import bounded

    async def read(arguments: dict[str, Any]) -> str:
        try:
            offset = _whole(arguments.get("offset", 0), "offset must be a whole number of 0 or more")
            wanted = f"limit must be a whole number from 1 to {RECALL_LIMIT:,}"
            limit = _whole(arguments.get("limit", RECALL_DEFAULT), wanted)
            got = await asyncio.to_thread(  # a store's read touches the disk or the database
                offloader.read,
                session,
                arguments.get("ref"),
                offset=offset,
                limit=min(max(1, limit), RECALL_LIMIT),
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
            hits = await asyncio.to_thread(  # a search scans up to its limit: off the loop
                offloader.search, session, arguments.get("pattern"), max_results=20
            )
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


def tool_archive(offloader: Any, session: str, tool_call_id: str) -> Any:
    """A stream archiving one tool output of a session (the model's call id is metadata)."""
    from ..offload.base import open_stream

    return open_stream(offloader, session, tool_call_id=tool_call_id)


MAX_TOOL_ERROR_CHARS = 2000
"""A tool's error as the model reads it, at most."""


TURN_OUTPUT_BYTES = 64 * 1024 * 1024
"""The tool outputs of one model turn, together, at most (about): once they are used up, each
further call of the turn keeps :data:`MIN_OUTPUT_BYTES`, so that thousands of parallel calls
of a tool with a large limit cannot hold gigabytes."""
EXECUTION_ARCHIVE_BYTES = 1024 * 1024 * 1024
"""Bytes of tool output one execution archives at the most (each output at most
:data:`MAX_ARCHIVE_BYTES`): the disk an execution can fill is bounded."""
MIN_OUTPUT_BYTES = 1024


async def call_tool(
    tools: Mapping[str, Tool],
    call: Mapping[str, Any],
    archive: Callable[[str], Any] | None = None,
    budget: int = TURN_OUTPUT_BYTES,
    archive_left: int = EXECUTION_ARCHIVE_BYTES,
) -> tuple[str, str | None, int]:
    """Run one tool call: (the result the model reads, the reference of the archived whole
    output when it was cut and ``archive`` opens a stream for a call id). Every failure
    becomes a result the model can read; the call has its tool's deadline, whole, and its
    output is read as a stream up to the tool's limit, or what is left of the turn's
    ``budget`` when that is less (see :class:`OutputReader`), and archived up to
    ``archive_left`` bytes; the third value is the bytes archived."""
    fn = call["function"]
    tool = tools.get(fn["name"])
    if tool is None:
        return (
            f"error: there is no tool named {fn['name']!r}; the tools are: {', '.join(tools) or 'none'}",
            None,
            0,
        )
    try:
        arguments = json.loads(fn["arguments"] or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the arguments are not valid JSON ({exc.msg}); send a JSON object", None, 0
    if not isinstance(arguments, dict):
        return "error: the arguments must be a JSON object", None, 0
    opener = (  # nothing archived once the execution's archive budget is spent
        None if archive is None or archive_left <= 0 else functools.partial(archive, str(call.get("id")))
    )
    limit, why = tool.max_output_bytes, "parameters.max_output_bytes"
    if budget < limit:
        limit = max(budget, MIN_OUTPUT_BYTES)
        why = f"the {TURN_OUTPUT_BYTES // 1024 // 1024} MiB of tool output one model turn may have"
    reader = OutputReader(limit, opener, name=tool.name, why=why, archive_limit=archive_left)
    deadline = asyncio.timeout(tool.timeout)
    try:
        async with deadline, contextlib.aclosing(tool.output(arguments)) as chunks:
            async for chunk in chunks:
                if not await reader.feed(chunk):
                    break
    except TimeoutError:
        await reader.discard()
        if deadline.expired():
            return (
                f"error: the tool {tool.name} did not finish within {tool.timeout:g} s (parameters.timeout)",
                None,
                0,
            )
        return f"error: the tool {tool.name} failed (TimeoutError)", None, 0
    except ToolError as exc:
        await reader.discard()
        return f"error: {str(exc)[:MAX_TOOL_ERROR_CHARS]}", None, 0
    except Exception as exc:
        await reader.discard()
        log.exception("tool %s failed", tool.name)
        return f"error: the tool {tool.name} failed ({type(exc).__name__})", None, 0
    except BaseException:  # cancelled: the execution ends, and leaves no unfinished archive
        reader.abandon()
        raise
    return await reader.result(), reader.ref, reader.archived
