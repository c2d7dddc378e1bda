"""Exceptions. Every error ctxmgmt raises derives from one root::

    CtxmgmtError
     ├── DefinitionError      a definition is invalid; .problems lists every one
     ├── ContextError         a context or message list is malformed; .problems
     ├── ConfigError          the models configuration is invalid; .problems
     ├── AgentError           an agent registration or execution request is invalid; .problems
     ├── RegistryError        a manager type could not be registered; .plugin
     ├── ManagerError         a manager with on_error: fail raised; .definition .hook .index
     ├── LLMError             a model call failed or its reply was refused (502); .model_id .status
     │    └── LLMTimeoutError no complete reply within the model's deadline (504)
     ├── ToolError            a tool failed; the model reads the reason as the tool result
     ├── ExecutionTimeoutError an agent execution passed its whole deadline (504)
     ├── OffloadError         the offload store could not write or read; nothing was removed
     ├── StoreError           a stored definition cannot be read or written as asked
     │    ├── NotFound        no definition has that name (HTTP 404)
     │    └── Conflict        it exists already, its version is stale, or it is in use (409)
     └── ApiError             the REST API answered an error; .status .type .reason .problems

The ones about input (definition, context, config) are also ValueErrors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an input, located by a JSON pointer (and a line, for files)."""

    pointer: str
    message: str
    line: int | None = None
    source: str | None = None
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = self.source or ""
        if self.line is not None:
            where += f":{self.line}"
        where = f"{where}: " if where else ""
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}{prefix}{self.pointer or '/'}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {
            "pointer": self.pointer,
            "message": self.message,
            "line": self.line,
            "source": self.source,
            "severity": self.severity,
        }


class CtxmgmtError(Exception):
    """The root of every ctxmgmt exception."""


class _ProblemsError(CtxmgmtError, ValueError):
    what = "input"

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        errors = [p for p in self.problems if p.severity == "error"]
        head = f"invalid {self.what}: {len(errors)} problem{'s' * (len(errors) != 1)}"
        super().__init__("\n  ".join([head, *map(str, errors)]))


class DefinitionError(_ProblemsError):
    """A context-management definition failed validation."""

    what = "definition"


class ContextError(_ProblemsError):
    """A context (system prompt, messages, tools) is malformed."""

    what = "context"


class AgentError(_ProblemsError):
    """An agent registration or execution request is invalid."""

    what = "agent request"


class ConfigError(_ProblemsError):
    """The models configuration file is invalid."""

    what = "configuration"


class RegistryError(CtxmgmtError):
    """A manager type could not be registered or loaded."""

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        self.plugin = plugin
        super().__init__(f"{plugin}: {message}" if plugin else message)


class ManagerError(CtxmgmtError):
    """A manager whose entry says on_error: fail raised, or broke an invariant."""

    def __init__(self, message: str, *, definition: str, hook: str, index: int, type: str) -> None:
        self.definition = definition
        self.hook = hook
        self.index = index
        self.type = type
        super().__init__(f"{definition}/hooks/{hook}/{index} ({type}): {message}")


class LLMError(CtxmgmtError):
    """A call to a model endpoint failed, or its reply was refused."""

    def __init__(self, message: str, *, model_id: str, status: int | None = None) -> None:
        self.model_id = model_id
        self.status = status
        super().__init__(f"model {model_id!r}: {message}")


class LLMTimeoutError(LLMError):
    """A model call found no complete reply within its deadline (the model's ``timeout``)."""


class ExecutionTimeoutError(CtxmgmtError):
    """An agent execution did not finish within its deadline (``llm.parameters.execution_timeout``)."""


class StoreError(CtxmgmtError):
    """A stored definition cannot be read or written as asked."""


class NotFound(StoreError, LookupError):
    """No stored definition (or agent) has that name."""


class Conflict(StoreError):
    """The write conflicts with the stored state: it exists, its version is stale, or it is in use."""

    def __init__(self, message: str, *, current_version: int | None = None) -> None:
        self.current_version = current_version
        super().__init__(message)


class ApiError(CtxmgmtError):
    """An error answer of the ctxmgmt REST API, as the client raises it."""

    def __init__(self, status: int, type: str, reason: str, problems: tuple[Problem, ...] = ()) -> None:
        self.status = status
        self.type = type
        self.reason = reason
        self.problems = problems
        super().__init__(f"{status} {type}: {reason}")


class ToolError(CtxmgmtError):
    """A tool failed. The runner hands the reason to the model as the tool result."""


class OffloadError(CtxmgmtError):
    """The offload store could not write or read. Managers then remove nothing."""
