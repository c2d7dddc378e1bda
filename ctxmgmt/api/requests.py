"""Request checks shared by the routes: auth, names, JSON bodies, parameters."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

import httpx
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..llm.decoding import ENCODINGS, Decoder, TooLarge
from ..loader import json_depth
from .config import ApiKey, ServerConfig
from .errors import HTTPProblem
from .params import MAX_VERSION, NAME, NAME_LENGTH, VERSION_DIGITS

if TYPE_CHECKING:
    from ..agents.runner import Runner
    from ..llm import ModelsConfig
    from ..store import DefinitionStore

_JSON_TYPES = ("application/json",)


class State:
    def __init__(
        self, store: DefinitionStore, models: ModelsConfig, config: ServerConfig, runner: Runner
    ) -> None:
        self.store = store
        self.models = models
        self.config = config
        self.runner = runner


def state(request: Request) -> State:
    value: State = request.app.state.ctxmgmt
    return value


# -- request checks ---------------------------------------------------------------------
def key_in(name: str, value: str) -> str:
    """The API key a key header holds: ``Authorization: Bearer KEY``'s KEY (empty for another
    scheme), ``x-api-key``'s value."""
    if name == "authorization":
        return value[7:].strip() if value[:7].lower() == "bearer " else ""
    return value.strip()


def presented_key(request: Request) -> str:
    """The API key a request presents: ``Authorization: Bearer KEY``, else ``x-api-key``
    (empty without one). Never logged or echoed."""
    headers = request.headers
    return key_in("authorization", headers.get("authorization", "")) or key_in(
        "x-api-key", headers.get("x-api-key", "")
    )


def authorize(request: Request, scope: str) -> ApiKey | None:
    """Check the API key, when keys are configured: 401 without a valid one, 403 for a
    read key on a write, and for a proxy key on anything but reading definitions (``scope``
    ``"definitions"``): an agent given a proxy key reads no other conversation's records,
    memory or archives. The key (None without keys). Keys are never logged or echoed."""
    config = state(request).config
    if not config.auth_enabled:
        return None
    presented = presented_key(request)
    key = config.find(presented) if presented else None
    if key is None:
        raise HTTPProblem(
            401,
            "a valid API key is required (Authorization: Bearer KEY)",
            "security_exception",
            headers={"www-authenticate": "Bearer"},
        )
    if key.scope == "proxy" and scope != "definitions":
        raise HTTPProblem(
            403,
            f"the key {key.name!r} is a proxy key: it calls the proxy (/proxy/...) and reads "
            "definitions; records, memory, archives and agents need a read or write key",
            "security_exception",
        )
    if scope == "write" and key.scope != "write":
        raise HTTPProblem(
            403,
            f"the key {key.name!r} may only read; this request writes or calls a model, which "
            "needs a write key",
            "security_exception",
        )
    return key


def may_spend(key: ApiKey | None) -> bool:
    """Whether a request may call a model (spend the configured models' keys): a write
    key's, or any request on a server without keys. A read key never does."""
    return key is None or key.scope == "write"


def name_param(request: Request) -> str:
    name: str = request.path_params["name"]
    if name.startswith("_"):
        raise HTTPProblem(
            400, f"{name!r}: names starting with '_' are reserved for API verbs such as _simulate"
        )
    if not NAME.fullmatch(name):
        raise HTTPProblem(400, f"{name!r}: a name is 1-{NAME_LENGTH} characters of a-z, 0-9, _ and -")
    return name


MAX_DEPTH = 64
"""JSON bodies nest at most this deep."""
DRAIN_BYTES = 8 * 1024 * 1024
"""An oversized body up to this size is read to its end (and discarded) before the 413,
so that the client, still sending, gets the answer rather than a reset."""


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


def _finite(value: str) -> float:
    number = float(value)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{value[:40]} is too large for a JSON number")
    return number


_MAX_DIGITS = sys.get_int_max_str_digits() or 4300
"""Python's bound on an integer's digits, which the parser keeps (``sys.set_int_max_str_digits``)."""
_LONG_NUMBER = re.compile(rf"(?<![\w.\"-])(-?[0-9]{{{_MAX_DIGITS + 1},}})[ \t\n\r]*[,\]}}]")
"""Where a number too long to read is: a value (before a comma or a closing bracket), not
digits in a string, nor the end of a longer word."""


DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite)
"""Every JSON body's decoder: standard JSON only (no NaN or Infinity, no infinite number)."""


def json_problem(exc: Exception, text: str | None = None, start: int = 0) -> HTTPProblem:
    """The 400 for what :data:`DECODER` raised: the nesting, or the line and column and why
    (for a whole number longer than Python reads, found in ``text`` from ``start``, where the
    parse began)."""
    if isinstance(exc, RecursionError):
        return HTTPProblem(400, f"JSON nested deeper than {MAX_DEPTH} levels")
    if type(exc) is ValueError and "digits" in str(exc):  # int()'s bound (sys.set_int_max_str_digits)
        found = _LONG_NUMBER.search(text, start) if text is not None else None
        digits = len(found.group(1).lstrip("-")) if found else None
        said = f"a number of {digits:,} digits" if digits else "a number of too many digits"
        said += f" (at most {_MAX_DIGITS:,}); send a longer one as a string"
        if text is None or found is None:
            return HTTPProblem(400, f"invalid JSON: {said}")
        exc = json.JSONDecodeError(said, text, found.start(1))
    if isinstance(exc, json.JSONDecodeError):
        return HTTPProblem(400, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    return HTTPProblem(400, f"invalid JSON: {exc}")


def _parse(text: str) -> Any:
    return DECODER.decode(text)


# What only an escape can put in a parsed JSON string (UTF-8 text holds no surrogate, and a
# raw control character is refused by the parser): a surrogate, or NUL.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_NUL_ESCAPE = re.compile(r"\\u0000")


def check_values(data: Any, *, nul: bool = True, text: str | None = None) -> None:
    """Refuse what no answer or database can hold, naming where it is: nesting deeper than
    MAX_DEPTH, lone surrogates, and (with ``nul``) NUL characters. Iterative, linear. With
    ``text`` (the JSON it was parsed from) holding no escape that could make such a string and
    nesting within MAX_DEPTH, nothing is walked (a large body costs a few passes in C, not a
    walk of every value)."""
    risky = text is None or _SURROGATE_ESCAPE.search(text) or (nul and _NUL_ESCAPE.search(text))
    if not risky and json_depth(text or "") <= MAX_DEPTH:
        return
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, pointer, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise HTTPProblem(400, f"{pointer}: JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_text(value, pointer, nul)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, pointer or "/", nul)
                stack.append((item, f"{pointer}/{_escape(key)}", depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{pointer}/{i}", depth + 1) for i, item in enumerate(value))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")[:100]


def _check_text(text: str, pointer: str, nul: bool) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise HTTPProblem(
            400,
            f"{pointer or '/'}: a string holds a lone surrogate (\\ud800-\\udfff); send valid UTF-16 pairs",
        ) from None
    if nul and "\x00" in text:
        raise HTTPProblem(
            400, f"{pointer or '/'}: a string holds a NUL character (\\u0000), which cannot be stored"
        )


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def check_media_type(request: Request) -> None:
    """A request that writes with a body must say the body is JSON (a 415 otherwise): a
    POST or PUT always, a DELETE when it carries a body. A page on another origin can
    send text/plain, a form or no type at all without asking the server first, but
    never application/json; so this refuses every write a foreign page could forge."""
    headers = request.headers
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    has_body = headers.get("content-length", "0").strip() not in ("", "0") or "transfer-encoding" in headers
    if request.method not in _BODY_METHODS and not has_body:
        return  # a DELETE without a body: a page can send one only after a preflight
    ctype = headers.get("content-type")
    if ctype is None or ctype.split(";")[0].strip().lower() not in _JSON_TYPES:
        given = "none" if ctype is None else repr(ctype[:60])
        raise HTTPProblem(
            415,
            f"the body must be JSON: send Content-Type: application/json (given: {given})",
            "media_type_exception",
        )
    charset = re.search(r";\s*charset\s*=\s*\"?([^\";\s]*)", ctype, re.IGNORECASE)
    if charset is not None and charset.group(1).lower() not in ("utf-8", "utf8"):
        raise HTTPProblem(400, f"a JSON body is UTF-8; charset={charset.group(1)[:20]!r} is not supported")


async def json_body(request: Request, *, nul: bool = True) -> dict[str, Any]:
    """The request's JSON object, checked (see :func:`check_values`); a 400 naming the
    problem for anything else. ``nul=False`` allows NUL in strings that are not stored."""
    text = await body_text(request)
    if len(text) > 65536:  # parsed and checked off the event loop, in one worker thread
        return await run_in_threadpool(_checked_object, text, nul)
    return _checked_object(text, nul)


def _checked_object(text: str, nul: bool) -> dict[str, Any]:
    try:
        data = _parse(text)
    except (RecursionError, ValueError) as exc:
        raise json_problem(exc, text) from None
    if not isinstance(data, dict):
        raise HTTPProblem(400, "the body must be a JSON object")
    check_values(data, nul=nul, text=text)
    return data


BodyLimit = Literal["max_body_bytes", "proxy_max_body_bytes"]
"""The server setting that bounds a route's bodies."""


class BodyBudget:
    """The bytes of request bodies the server holds at once (``server.bodies_in_flight_bytes``),
    over all requests in progress: a request's are taken as its body is read and given back when
    its answer is done, so many large bodies at once are refused (a 429, which clients retry)
    rather than held. The event loop's own: every call is made on it."""

    SCOPE_KEY = "ctxmgmt.body_budget"
    _HELD = "ctxmgmt.body_bytes"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def hold(self, scope: MutableMapping[str, Any], size: int) -> None:
        """Hold ``size`` bytes in all for this request (what it holds already counts); a 429
        past the limit, nothing more taken."""
        more = size - scope.get(self._HELD, 0)
        if more <= 0:
            return
        if self.held + more > self.limit:
            raise HTTPProblem(
                429,
                f"the server holds {self.limit} bytes of request bodies at once "
                "(server.bodies_in_flight_bytes), and those of the requests in progress "
                "leave no room for this one: retry it shortly",
                "too_many_requests",
                # The server is busy, not the client wrong; the body may not have been sent.
                headers={"retry-after": "1", **_CLOSE},
            )
        self.held += more
        scope[self._HELD] = size

    def give_back(self, scope: MutableMapping[str, Any]) -> None:
        self.held -= scope.pop(self._HELD, 0)


def _waits_to_send(request: Request) -> bool:
    """Whether the client waits for a 100 Continue before it sends its body (which reading
    the body would send): a body refused by its length alone is refused before."""
    expected = (e for v in request.headers.getlist("expect") for e in v.split(","))  # a list, as h11 reads it
    return any(e.strip().lower() == "100-continue" for e in expected)


_CLOSE = {"connection": "close"}
"""An answer given before the body was read whole closes the connection."""


async def body_text(request: Request, *, setting: BodyLimit = "max_body_bytes") -> str:
    """The request's body as text: JSON by its media type, within the bytes of
    ``server.<setting>`` (a 413 naming it; a compressed body by its decompressed bytes, which
    are never held past it) and ``server.body_timeout_seconds`` (a 408), UTF-8, not blank."""
    config = state(request).config
    check_media_type(request)  # resource() did for every route; a handler built otherwise does here
    try:
        async with asyncio.timeout(config.body_timeout_seconds):  # a client that trickles is cut off
            body = await _body(request, getattr(config, setting), setting)
    except TimeoutError:
        raise HTTPProblem(
            408,
            f"the body did not arrive within {config.body_timeout_seconds:g} s (server.body_timeout_seconds)",
            headers=_CLOSE,  # the rest of the body may still come: it must not be read as a request
        ) from None
    except ClientDisconnect:  # no one reads the answer: nothing to log as a fault
        raise HTTPProblem(400, "the client went away before its body was whole") from None
    except httpx.DecodingError as exc:
        raise HTTPProblem(400, f"{exc}{_FIX}") from None
    if not body or body.isspace():  # no copy of a large body
        raise HTTPProblem(400, "a JSON object body is required")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        if body.startswith(b"\x1f\x8b") and _encoding(request) in ("", "identity"):
            raise HTTPProblem(400, "the body is gzip data: send it with Content-Encoding: gzip") from None
        raise HTTPProblem(400, "the body is not UTF-8") from None


async def _body(request: Request, limit: int, setting: str) -> bytearray:
    """The body's bytes, decoded, within ``limit`` and the server's budget of bodies held at
    once (:class:`BodyBudget`); raises a decoder's ``httpx.DecodingError``."""
    too_large = HTTPProblem(
        413, f"the body is larger than the limit of {limit} bytes (server.{setting})", headers=_CLOSE
    )
    length = request.headers.get("content-length")
    if length is not None and not length.isdigit():
        raise HTTPProblem(400, "Content-Length must be a whole number")
    if length is not None and int(length) > max(limit, DRAIN_BYTES):
        raise too_large  # at once: not worth reading
    if length is not None and int(length) > limit and _waits_to_send(request):
        raise too_large  # at once: the client sends nothing until told to (no 100 Continue)
    decoder = _decoder(request, limit, setting)
    budget: BodyBudget | None = request.scope.get(BodyBudget.SCOPE_KEY)
    if budget is not None and decoder is None and length is not None:
        budget.hold(request.scope, min(int(length), limit))  # a 429 before the body is sent
    body = bytearray()
    received = 0
    over = False  # past the limit: the rest is read (up to DRAIN_BYTES) and dropped
    async for chunk in request.stream():
        received += len(chunk)
        if received > max(limit, DRAIN_BYTES) or (over and received > DRAIN_BYTES):
            raise too_large  # on the wire too: a compressed body's own bytes, however little they unpack to
        if over:
            continue
        try:
            chunk = decoder.feed(chunk) if decoder is not None else chunk
        except TooLarge:
            over = True
            continue
        if len(body) + len(chunk) > limit:
            over = True
            continue
        if budget is not None:
            budget.hold(request.scope, len(body) + len(chunk))
        body += chunk
    if over:  # the client has finished sending, so it reads this answer instead of a reset
        if decoder is None or received > limit:
            raise too_large
        raise HTTPProblem(413, f"the body unpacks to more than the limit of {limit} bytes (server.{setting})")
    if decoder is not None:
        decoder.finish()
    return body


_FIX = ": check the data and its Content-Encoding header, or send the body uncompressed"


def _encoding(request: Request) -> str:
    """The body's Content-Encoding, lowercase; several headers are one list (RFC 9110), each a layer."""
    return ", ".join(v.strip() for v in request.headers.getlist("content-encoding") if v.strip()).lower()


def _decoder(request: Request, limit: int, setting: str) -> Decoder | None:
    """The reader of a compressed body (None: as it comes); a 415 for an encoding it cannot
    read, which names the ones it can."""
    encoding = _encoding(request)
    if encoding in ("", "identity"):
        return None
    if encoding not in ENCODINGS:
        raise HTTPProblem(
            415,
            f"Content-Encoding {encoding[:60]!r} is not one ctxmgmt reads: send the body "
            "uncompressed, or as gzip or deflate",
        )
    return Decoder(limit, httpx.Headers({"content-encoding": encoding}), f"server.{setting}", "the body")


def if_version(request: Request) -> int | None:
    header = request.headers.get("if-match")
    query = request.query_params.get("if_version")
    from_header = None if header is None else _version(header, _ETAG)
    from_query = None if query is None else _version(query, _DIGITS)
    if from_header is not None and from_query is not None and from_header != from_query:
        raise HTTPProblem(400, f"If-Match ({from_header}) and if_version ({from_query}) disagree")
    return from_header if from_header is not None else from_query


_ETAG = re.compile(f'(?:W/)?("?)({VERSION_DIGITS})\\1')
_DIGITS = re.compile(f"()({VERSION_DIGITS})")


def _version(raw: str, form: re.Pattern[str]) -> int:
    found = form.fullmatch(raw.strip())
    if found is None or int(found.group(2)) > MAX_VERSION:
        raise HTTPProblem(
            400,
            f"If-Match (or if_version) must be a version number from 1 to {MAX_VERSION}, not {raw[:40]!r}",
        )
    return int(found.group(2))


def caller(request: Request) -> str | None:
    if not state(request).config.auth_enabled:
        return None
    key = state(request).config.find(presented_key(request))
    return key.name if key else None


_LITERAL_PATHS: dict[str, str] = {}
"""The ``Allow`` of each path without parameters (``/_simulate``, ``/_register``)."""


def resource(path: str, **handlers: Callable[[Request], Awaitable[Response]]) -> Route:
    """One route for all the methods of a path, so that a 405 and OPTIONS name every method
    it takes (``Allow``), not only those of the first route that matched. A path with a
    parameter never answers for a literal path beside it: ``PUT …/_simulate`` is a 405, not
    a definition named ``_simulate``."""
    table = {method.upper(): handler for method, handler in handlers.items()}
    allow = ", ".join(sorted({*table, "OPTIONS", *(("HEAD",) if "GET" in table else ())}))
    if "{" not in path:
        _LITERAL_PATHS[path] = allow

    async def dispatch(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers={"allow": allow})
        if "{" in path and request.url.path in _LITERAL_PATHS:
            raise HTTPException(405, headers={"allow": _LITERAL_PATHS[request.url.path]})
        check_media_type(request)
        return await table["GET" if request.method == "HEAD" else request.method](request)

    return Route(path, dispatch, methods=[*table, "OPTIONS"])
