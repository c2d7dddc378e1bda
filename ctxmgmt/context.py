"""The context a definition is applied to, and the result of applying it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ContextError, Problem
from .messages import check_messages
from .types import TraceEntry

__all__ = ["ApplyResult", "Context"]

_FIELDS = ("system_prompt", "messages", "tools", "model", "context_window", "state")


@dataclass(frozen=True, eq=False)
class Context:
    """What an LLM call would see: system prompt, messages, tool schemas, model.

    Every argument is optional. ``messages`` are plain dicts in the OpenAI chat
    format; they are treated as immutable values, so do not edit one in place after
    handing it over. A Context is never changed: managers return a new one
    (``dataclasses.replace`` or :meth:`with_messages`).
    """

    system_prompt: str | None = None
    messages: Sequence[Mapping[str, Any]] = ()
    tools: Sequence[Mapping[str, Any]] = ()
    model: str | None = None
    context_window: int | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    _counts: dict[str, tuple[int, int]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Callers may be untyped (JSON, REST): check every field at the boundary.
        problems: list[Problem] = []
        self._check(problems)
        if problems:
            raise ContextError(problems)
        # Tuples make the context immutable and let token counts reuse prefixes.
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.state, dict):
            object.__setattr__(self, "state", dict(self.state))

    def _check(self, problems: list[Problem]) -> None:
        values: dict[str, Any] = {f: getattr(self, f) for f in _FIELDS}
        if values["system_prompt"] is not None and not isinstance(values["system_prompt"], str):
            problems.append(Problem("/system_prompt", "must be a string"))
        if isinstance(self.messages, (str, bytes, Mapping)) or not isinstance(self.messages, Sequence):
            problems.append(Problem("/messages", "must be a list of message objects"))
        if isinstance(values["tools"], (str, bytes, Mapping)) or not isinstance(values["tools"], Sequence):
            problems.append(Problem("/tools", "must be a list of tool schemas"))
        if values["model"] is not None and (
            not isinstance(values["model"], str) or len(values["model"]) > 256
        ):
            problems.append(Problem("/model", "must be a model name, a string of at most 256 characters"))
        cw = values["context_window"]
        if cw is not None and (isinstance(cw, bool) or not isinstance(cw, int) or cw < 1):
            problems.append(Problem("/context_window", "must be a whole number >= 1"))
        if not isinstance(values["state"], Mapping):
            problems.append(Problem("/state", "must be an object"))

    def with_messages(self, messages: Sequence[Mapping[str, Any]], **changes: Any) -> Context:
        """A copy with other messages (and any other field changed)."""
        return replace(self, messages=tuple(messages), **changes)

    def to_dict(self) -> dict[str, Any]:
        """The context as JSON-able data, with the same fields as the input format."""
        return {
            "system_prompt": self.system_prompt,
            "messages": list(self.messages),
            "tools": list(self.tools),
            "model": self.model,
            "context_window": self.context_window,
            "state": dict(self.state),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Context:
        """Build a context from a JSON list of messages or an object with the context
        fields, checking that the messages are ones an LLM API would accept."""
        if isinstance(data, list):
            data = {"messages": data}
        if not isinstance(data, Mapping):
            raise ContextError([Problem("", "expected a list of messages or an object with 'messages'")])
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ContextError(
                [
                    Problem(f"/{key}", f"unknown field; expected one of {', '.join(_FIELDS)}")
                    for key in unknown
                ]
            )
        ctx = cls(**{k: data[k] for k in _FIELDS if k in data and data[k] is not None})
        problems = check_messages(ctx.messages, partial_tail=True)
        if problems:
            raise ContextError(problems)
        return ctx


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The new context and what each manager did."""

    context: Context
    trace: tuple[TraceEntry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context.to_dict(), "trace": list(self.trace)}
