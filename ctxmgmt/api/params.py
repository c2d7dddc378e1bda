"""The API's parameters and bounds, each stated once: a handler reads a parameter through
its :class:`Param` (a 400 naming the bound), and ``/openapi.json`` states the same bound
from the same object. Body fields' bounds are constants here, for the same reason."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..archive import MAX_SESSION
from ..offload.base import MAX_PATTERN, REF
from .errors import HTTPProblem

if TYPE_CHECKING:
    from starlette.requests import Request

Where = Literal["path", "query", "header"]

_NAME_CHARS = "a-z0-9_-"
NAME_LENGTH = 49
NAME = re.compile(f"[{_NAME_CHARS}]{{1,{NAME_LENGTH}}}")
"""A definition's name in a path: also never starting with ``_`` (reserved for verbs)."""
MAX_VERSION = 2**31 - 1
VERSION_DIGITS = "[1-9][0-9]{0,9}"
"""A version as written: checked against MAX_VERSION after."""
HEX_ID = re.compile(r"[0-9a-f]{32}")
"""An agent, execution, memory or eval report id, as the server made it."""
MAX_INSTRUCTION = 2000
"""The longest instruction a compaction takes."""
MAX_TEXT = 50_000
"""The longest definition text ``_validate`` checks."""
MAX_NESTING = 32
"""The deepest a definition text ``_validate`` checks may nest."""
MAX_Q = 100
"""The longest name filter of the definition list."""
SIMULATION_FIELDS = ("hook", "context", "definition", "context_management")
"""The fields of a simulation's body: any other is a 400."""
NO_NUL = "^[^\\x00]*$"


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an operation: where it is, what it means, and its schema."""

    name: str
    where: ClassVar[Where] = "query"
    description: str | None = None

    @property
    def key(self) -> str:
        """The name of its entry in the document's ``components/parameters``."""
        return self.name

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def openapi(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "in": self.where}
        if self.required:
            out["required"] = True
        if self.description:
            out["description"] = self.description
        out["schema"] = self.schema()
        return out

    @property
    def required(self) -> bool:
        return self.where == "path"


@dataclass(frozen=True, slots=True)
class Int(Param):
    """A whole number in a range, with a default."""

    default: int | None = 0
    low: int = 0
    high: int = 10**9
    alias: str | None = None
    """The component key when two operations bound the same name differently."""

    @property
    def key(self) -> str:
        return self.alias or self.name

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer", "minimum": self.low, "maximum": self.high}
        if self.default is not None:
            out["default"] = self.default
        return out

    def read(self, request: Request) -> int:
        raw = request.query_params.get(self.name)
        if raw is None:
            assert self.default is not None, f"{self.name} has no default"
            return self.default
        return self._parse(raw)

    def _parse(self, raw: str) -> int:
        if not re.fullmatch(r"[0-9]{1,19}", raw) or not self.low <= int(raw) <= self.high:
            raise HTTPProblem(
                400, f"{self.name} must be a whole number from {self.low} to {self.high}, not {raw[:40]!r}"
            )
        return int(raw)


@dataclass(frozen=True, slots=True)
class Text(Param):
    """A query string: required or not, of bounded length, never holding NUL."""

    min_length: int = 0
    max_length: int = 1000
    needed: bool = False

    @property
    def required(self) -> bool:
        return self.needed

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.min_length:
            out["minLength"] = self.min_length
        out["maxLength"] = self.max_length
        out["pattern"] = NO_NUL if not self.min_length else "^[^\\x00]+$"
        return out

    def read(self, request: Request) -> str | None:
        raw = request.query_params.get(self.name)
        if raw is None or len(raw) < self.min_length:
            if self.needed:
                raise HTTPProblem(400, f"{self.name} is required: {self.description or 'a string'}")
            return raw
        if len(raw) > self.max_length:
            raise HTTPProblem(400, f"{self.name} must be at most {self.max_length} characters")
        if "\x00" in raw:
            raise HTTPProblem(400, f"{self.name} holds a NUL character (\\u0000); leave it out")
        return raw


@dataclass(frozen=True, slots=True)
class Choice(Param):
    """One of a few words."""

    choices: tuple[str, ...] = ()
    default: str = ""

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.choices), "default": self.default}

    def read(self, request: Request) -> str:
        raw = request.query_params.get(self.name, self.default)
        if raw not in self.choices:
            raise HTTPProblem(400, f"{self.name} must be {' or '.join(self.choices)}, not {raw[:20]!r}")
        return raw


@dataclass(frozen=True, slots=True)
class Flag(Param):
    """true or false (bare ``?force`` is true)."""

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean", "default": False}

    def read(self, request: Request) -> bool:
        raw = request.query_params.get(self.name, "false").lower()
        if raw not in ("true", "false", ""):
            raise HTTPProblem(400, f"{self.name} must be true or false, not {raw[:20]!r}")
        return raw in ("true", "")


@dataclass(frozen=True, slots=True)
class PathId(Param):
    """A path segment: an id the server made (a 404 for anything else), or a pattern."""

    where: ClassVar[Where] = "path"
    what: str = ""
    """What the id names, for the 404's reason."""
    form: re.Pattern[str] | None = None
    """The ids there can be (a 404 for anything else); not stated in the document, so that
    a client learns of a malformed id as of any unknown one."""
    pattern: str | None = None
    """The pattern the document states, when a malformed segment is a 400."""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", **({"pattern": self.pattern} if self.pattern else {})}

    def read(self, request: Request) -> str:
        value: str = request.path_params[self.name]
        if self.form is not None and not self.form.fullmatch(value):
            raise HTTPProblem(404, f"no {self.what} with id {value[:64]!r}", "resource_not_found_exception")
        return value


@dataclass(frozen=True, slots=True)
class Header(Param):
    """A header, stated by a pattern."""

    where: ClassVar[Where] = "header"
    pattern: str = ""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": self.pattern}


FROM = Int("from", default=0, low=0, high=10**9)
SIZE = Int("size", default=10, low=1, high=1000)
MESSAGE_SIZE = Int("size", default=100, low=1, high=1000, alias="message_size")
SEARCH_SIZE = Int("size", default=20, low=1, high=200, alias="search_size")
OFFSET = Int("offset", default=0, low=0, high=10**12)
LIMIT = Int("limit", default=20000, low=1, high=10**7)
"""A larger limit than READ_LIMIT (see offload) is taken and clamped."""
IF_VERSION = Int("if_version", default=None, low=1, high=MAX_VERSION)
"""Read with If-Match by :func:`ctxmgmt.api.requests.if_version`."""
Q = Text("q", "Keep names containing this text", max_length=MAX_Q)
SESSION = Text(
    "session",
    "The conversation (memory id) the content belongs to",
    min_length=1,
    max_length=MAX_SESSION,
    needed=True,
)
PATTERN = Text(
    "pattern",
    "A regular expression in RE2 syntax (no backreferences or lookaround)",
    min_length=1,
    max_length=MAX_PATTERN,
    needed=True,
)
UNIT = Choice("unit", choices=("chars", "lines"), default="chars")
FORCE = Flag("force")
IF_MATCH = Header(
    "If-Match",
    f"The expected version (1 to {MAX_VERSION}), bare or as an ETag",
    pattern=f'^(W/)?("{VERSION_DIGITS}"|{VERSION_DIGITS})$',
)
DEFINITION_NAME = PathId(
    "name",
    "Names starting with _ are reserved for verbs such as _simulate",
    pattern=f"^[{_NAME_CHARS.replace('_', '')}][{_NAME_CHARS}]{{0,{NAME_LENGTH - 1}}}$",
)
AGENT_ID = PathId("agent_id", what="agent", form=HEX_ID)
RECORDS_AGENT_ID = PathId(
    "agent_id", what="agent", form=re.compile(rf"{HEX_ID.pattern}|proxy-[a-z0-9_-]{{1,49}}")
)
"""An agent whose records are listed: a registered agent's id, or ``proxy-`` and a definition's
name (the proxy's records, which have no registered agent)."""
EXECUTION_ID = PathId("execution_id", what="execution", form=HEX_ID)
MEMORY_ID = PathId("memory_id", what="memory", form=HEX_ID)
REPORT_ID = PathId("report_id", what="eval report", form=HEX_ID)
ARCHIVE_REF = PathId("ref", pattern="^" + re.sub(r"\(\?P<\w+>", "(", REF.pattern) + "$")
UI_FILE = PathId("file")
