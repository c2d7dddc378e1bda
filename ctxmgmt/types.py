"""Wire types: OpenAI chat messages, tool calls, hooks and trace entries.

Messages are plain dicts in the OpenAI chat format. They are treated as immutable
values: once a message is handed to ctxmgmt, the caller must not edit it in place.
That contract is what lets token counts be memoised per message.
"""

from __future__ import annotations

import enum
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class Message(TypedDict, total=False):
    """One chat message. Unknown keys are allowed and pass through untouched."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str


JSON: TypeAlias = Any
"""A JSON-able value: dict, list, str, int, float, bool or None."""


class Hook(enum.StrEnum):
    """The points of an agent loop where a definition's managers run."""

    PRE_LLM = "pre_llm"
    POST_TOOL = "post_tool"
    POST_MEMORY = "post_memory"


HOOK_NAMES: tuple[str, ...] = tuple(h.value for h in Hook)

FORMAT_NAMES: tuple[str, ...] = ("openai_chat", "anthropic", "openai_responses")
"""The message formats a context may declare (each one module of :mod:`ctxmgmt.formats`)."""

MARK_MEMBER = "_ctxmgmt"
"""The member by which a message ctxmgmt converted says where it came from and what of it the
provider counts (:mod:`ctxmgmt.formats`). ctxmgmt's own: a message read from JSON (a file, a
request body) may not hold it."""
MARK_MEMBER_REFUSED = (
    "a member ctxmgmt keeps for its own marks (its adapters write it), which a message read from "
    "JSON may not carry; remove it (a thinking mark's message is then counted by its text)"
)
"""What a refusal of :data:`MARK_MEMBER` says, after its pointer."""


class TraceEntry(TypedDict):
    """What one manager entry did in one hook run. JSON-able; field names are stable."""

    hook: str
    index: int
    type: str
    activated: bool
    reason: dict[str, Any]
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    duration_ms: float
    error: str | None
    tokenizer: str
    details: dict[str, Any]
    calibration: NotRequired[dict[str, Any]]
    """When the provider's reports calibrate the counts: the ratio, and the tokens before and
    after as the provider would count them."""
