"""Errors as HTTP answers in OpenSearch's shape: one table from exception to status."""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import (
    AgentError,
    ConfigError,
    Conflict,
    ContextError,
    CtxmgmtError,
    DefinitionError,
    ExecutionTimeoutError,
    LLMError,
    LLMTimeoutError,
    ManagerError,
    NotFound,
    OffloadError,
    Problem,
)

log = logging.getLogger("ctxmgmt.api")


class HTTPProblem(CtxmgmtError):
    """A request the API refuses: bad JSON, a bad parameter, a missing key..."""

    def __init__(
        self,
        status: int,
        reason: str,
        type: str = "illegal_argument_exception",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.type = type
        self.reason = reason
        self.headers = headers
        """The answer's own headers (a 401's challenge; a 429's ``retry-after``)."""
        super().__init__(reason)


# exception class -> (status, OpenSearch error type); the first match wins.
STATUS_TABLE: tuple[tuple[type[BaseException], int, str], ...] = (
    (DefinitionError, 400, "illegal_argument_exception"),
    (ContextError, 400, "illegal_argument_exception"),
    (ConfigError, 400, "illegal_argument_exception"),
    (AgentError, 400, "illegal_argument_exception"),
    (LLMTimeoutError, 504, "llm_timeout"),
    (ExecutionTimeoutError, 504, "execution_timeout"),
    (LLMError, 502, "llm_exception"),
    (NotFound, 404, "resource_not_found_exception"),
    (Conflict, 409, "version_conflict_engine_exception"),
    (ManagerError, 422, "context_manager_exception"),
)


def error_body(
    status: int, type: str, reason: str, problems: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type, "reason": reason}
    if problems:
        error["problems"] = problems
    return {"error": error, "status": status}


def provider_error_body(provider: str, status: int, type: str, message: str) -> dict[str, Any]:
    """An error in a provider's own shape (``anthropic`` or ``openai``), with the provider's
    type for the status, so that its SDK raises its own error class with the message; OpenAI's
    ``param`` is the JSON pointer the message begins with, if any."""
    if provider == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    named = _LEADING_POINTER.match(message)
    kind = _OPENAI_TYPES.get(status) or ("invalid_request_error" if status < 500 else "server_error")
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": named.group(1) if named else None,
            "code": type,
        }
    }


_LEADING_POINTER = re.compile(r"(/[^\s:;]{0,1000}): ")
"""A message's first JSON pointer (``/messages/2/role: role must be …``)."""


_PROVIDER_PATH = re.compile(
    r"(?:/.*)?/(?:v1/)?(?:chat/completions|responses(?:/input_tokens|/compact)?|messages(?:/count_tokens)?"
    r"|models(?:/[^/]+)?)"
)
_STORED = re.compile(r"/proxy/[^/]+/v1/(?:responses/[^/]+(?:/.*)?|conversations(?:/.*)?)")
"""What OpenAI keeps (a response by its id, a conversation): forwarded by GET, POST and DELETE."""


def stored_path(path: str) -> bool:
    """Whether ``path`` asks the proxy for what OpenAI keeps (a stored response, a conversation)."""
    return _STORED.fullmatch(path) is not None


def provider_path(path: str) -> bool:
    """Whether ``path`` is a provider API's (outside the REST API's own ``/_plugins/``): a
    client that asks it there was given the wrong base URL."""
    return not path.startswith("/_plugins/") and _PROVIDER_PATH.fullmatch(path) is not None


def error_body_at(
    path: str,
    status: int,
    type: str,
    reason: str,
    problems: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The error body a client of ``path`` reads: under ``/proxy/``, or on a provider's own
    path elsewhere (a client given the wrong base URL: :func:`provider_path`), its
    provider's shape (Anthropic's for ``.../messages`` and its ``count_tokens``, and for any
    other path but OpenAI's own when ``headers`` hold ``anthropic-version``, as every
    Anthropic SDK sends; else OpenAI's), elsewhere the REST API's."""
    if path.startswith("/proxy/") or provider_path(path):
        listed = "; ".join(f"{p.get('pointer', '')}: {p.get('message', '')}" for p in problems or ())
        anthropic = path.endswith(("/messages", "/messages/count_tokens")) or (
            headers is not None
            and "anthropic-version" in headers
            and not path.endswith(("/chat/completions", "/responses"))
        )
        provider = "anthropic" if anthropic else "openai"
        return provider_error_body(provider, status, type, listed or reason)
    return error_body(status, type, reason, problems)


# The providers' own error types by status, so that a client's error classes match.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    507: "api_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "timeout_error",
    507: "server_error",
}


# What databases and file systems say when they are out of space.
_FULL = re.compile(r"disk is full|no space left|could not extend file|diskfull|\b53100\b", re.IGNORECASE)


def _storage_fault(exc: BaseException) -> tuple[int, str, str] | None:
    """(status, type, reason) for a full disk (507) or an unreachable database (503)."""
    text = f"{type(exc).__name__}: {exc} {getattr(exc, 'orig', '')}"
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)  # PostgreSQL's own code
    if isinstance(exc, (SQLAlchemyError, OSError, OffloadError)) and (
        sqlstate == "53100" or _FULL.search(text) or getattr(exc, "errno", None) == errno.ENOSPC
    ):
        return (
            507,
            "storage_full",
            "the server's storage is full; nothing was written; retry once space is freed",
        )
    if isinstance(exc, (OperationalError, InterfaceError)):
        return 503, "storage_unavailable", "the database does not answer; nothing was written; retry later"
    return None


@dataclass(frozen=True, slots=True)
class Classified:
    """What an exception is answered with: its status, error type, reason and problems."""

    status: int
    type: str
    reason: str
    problems: tuple[Problem, ...] = ()
    headers: Mapping[str, str] | None = None
    expected: bool = True
    """False for a fault no entry names (a 500): it is logged with its traceback."""


def classify(exc: BaseException) -> Classified:
    """The one mapping from an exception to its answer, for every route and the proxy:
    a refusal as it says, a storage fault (503/507, retry later), a manager whose model
    failed as the model's fault (502/504), then STATUS_TABLE, else a 500."""
    if isinstance(exc, HTTPProblem):
        return Classified(exc.status, exc.type, exc.reason, headers=exc.headers)
    storage = _storage_fault(exc)
    if storage is not None:
        status, kind, reason = storage
        return Classified(status, kind, reason, headers={"retry-after": "30"})
    # A manager that failed because its model did (on_error: fail) is the model's fault: 502/504.
    cause = exc.__cause__
    matched = cause if isinstance(exc, ManagerError) and isinstance(cause, LLMError) else exc
    for cls, status, kind in STATUS_TABLE:
        if isinstance(matched, cls):
            problems = getattr(exc, "problems", None) or ()
            errors = tuple(p for p in problems if isinstance(p, Problem) and p.severity == "error")
            return Classified(status, kind, str(exc).splitlines()[0], errors)
    return Classified(
        500, "internal_server_error", "an unexpected error happened; see the server log", expected=False
    )


async def handle(request: Request, exc: Exception) -> JSONResponse:
    """The one exception handler: every error is a JSON answer, never a traceback."""
    found = classify(exc)
    if not found.expected:
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    elif found.status in (503, 507):
        log.warning("%s on %s %s: %s", found.type, request.method, request.url.path, found.reason)
    listed = [p.to_dict() for p in found.problems] or None
    body = error_body_at(request.url.path, found.status, found.type, found.reason, listed, request.headers)
    return JSONResponse(body, found.status, headers=found.headers)
