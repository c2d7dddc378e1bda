"""pydantic-ai: context management as a history processor (``pip install 'ctxmgmt[pydantic-ai]'``).

>>> from pydantic_ai import Agent
>>> from pydantic_ai.capabilities import ProcessHistory
>>> from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor
>>> agent = Agent(model, capabilities=[ProcessHistory(ContextManagementProcessor("default"))])

pydantic-ai 2.x takes a history processor as the ``ProcessHistory`` capability; 1.x also
as ``Agent(history_processors=[...])``. Before every model request, ``post_tool`` runs on
the newest tool returns and then ``pre_llm``. pydantic-ai keeps what the processor returns
as the run's history, so the managed messages are the history from then on: the running
summary lives in its summary message, and what was removed is archived when an offload
store is given. Messages no manager touched come back as the same objects; an edited tool
return keeps its tool name and timestamp. The trace goes to the ``ctxmgmt.adapters``
logger and, with ``ctxmgmt[otel]``, into OpenTelemetry spans under pydantic-ai's own (logfire,
or ``Agent.instrument_all()``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..agents.conversation import Conversation, DefinitionSource, Turn, reply_limit, token_settings
from ..cache import Pricing
from ..formats._common import ORIGIN, Origin, origin_of
from ..formats._turns import thinking_mark
from ..messages import tool_names

__all__ = ["ContextManagementProcessor"]


class ContextManagementProcessor:
    """A pydantic-ai history processor that runs a ctxmgmt definition before every request.

    Args:
        definition: a :class:`~ctxmgmt.Definition`, a path, a shipped name, a dict, or
            ``(client, name)`` for a registry server.
        models: the models configuration a summariser's ``summarization_model_id`` names.
        offloader: where removed content is archived first.
        session: the offload session of this conversation.
        context_window: the model's window, for the fit step.
        pricing: the model's prices, for the cost model of ``settings: {cache: aware}``
            (default: Anthropic's ratios for the Anthropic format, OpenAI's otherwise).
    """

    def __init__(
        self,
        definition: DefinitionSource,
        *,
        models: Any = None,
        offloader: Any = None,
        session: str = "default",
        context_window: int | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        token_settings(context_window=context_window)
        # pydantic-ai talks to any provider, and Claude, Gemini and Bedrock want a user message first.
        self.conversation = Conversation(
            definition,
            models=models,
            offloader=offloader,
            session=session,
            keep_view=False,
            user_first=True,
            pricing=pricing,
        )
        self.context_window = context_window
        self.last: Turn | None = None
        """The last request's managed messages (OpenAI chat form) and trace."""
        self.usage: list[dict[str, Any]] = []
        """Per model call: ``{counted, calibrated, reported}`` input tokens."""
        self._sent: tuple[int, Any] | None = None  # (length, last message) of the last list returned

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        self._observe(messages)
        model = getattr(ctx, "model", None)
        turn = await self.conversation.aprepare(
            messages,
            translate=_chat_of,
            system_prompt=_instructions(messages),
            model=getattr(model, "model_name", None),
            context_window=self.context_window,
            max_output_tokens=reply_limit((getattr(ctx, "model_settings", None) or {}).get("max_tokens")),
        )
        self.last = turn
        out = self.conversation.framework_messages(turn, messages, lambda t: from_chat(t.messages, messages))
        self._sent = (len(out), out[-1]) if out else None
        return out

    def _observe(self, messages: list[ModelMessage]) -> None:
        """The usage of the response to the last request calibrates the counts of the next:
        only when this history continues the very list returned last (one processor may serve
        many conversations, and another's response says nothing of this request)."""
        sent, self._sent = self._sent, None
        if sent is None:
            return
        n, last = sent
        if len(messages) <= n or messages[n - 1] is not last or not isinstance(messages[n], ModelResponse):
            return
        usage = getattr(messages[n], "usage", None)
        if getattr(usage, "unmeasured_requests", 0):
            return  # pydantic-ai's own estimate, not the provider's report
        record = self.conversation.observe(
            getattr(usage, "input_tokens", None),
            cached=getattr(usage, "cache_read_tokens", None),
            written=getattr(usage, "cache_write_tokens", None),
        )
        if record is not None:
            self.usage.append(record)


def to_chat(messages: Sequence[ModelMessage]) -> tuple[list[dict[str, Any]], str | None]:
    """OpenAI chat messages for pydantic-ai's, each knowing the message and part it stands
    for; and the newest request's instructions, the system prompt the model reads."""
    return [d for m in messages for d in _chat_of(m)], _instructions(messages)


def _chat_of(m: ModelMessage) -> list[dict[str, Any]]:
    """The OpenAI chat messages one pydantic-ai message stands for."""
    if isinstance(m, ModelResponse):
        return [_response(m)]
    out = []
    for part in m.parts:
        d = _request_part(part)
        if d is not None:
            d[ORIGIN] = Origin(m, block=part)
            out.append(d)
    return out


def _instructions(messages: Sequence[ModelMessage]) -> str | None:
    """The newest request's instructions: the system prompt the model reads (pydantic-ai
    sets them on the request it is about to send)."""
    for m in reversed(messages):
        if not isinstance(m, ModelResponse):
            return cast("str | None", getattr(m, "instructions", None) or None)
    return None


def _request_part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        content = part.content
        if isinstance(content, str):
            return {"role": "user", "content": content}
        return {"role": "user", "content": [_user_item(x) for x in content]}
    if isinstance(part, ToolReturnPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}
    if isinstance(part, RetryPromptPart):
        if part.tool_name is None:
            return {"role": "user", "content": part.model_response()}
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
    return None  # a framework part that the model does not read as a message


def _user_item(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if getattr(item, "kind", "") in ("image-url", "binary") or "Image" in type(item).__name__:
        return {"type": "image_url", "image_url": {"url": "pydantic-ai:image"}}
    return {"type": "file", "file": {"filename": f"pydantic-ai:{type(item).__name__}"}}


def _response(m: ModelResponse) -> dict[str, Any]:
    texts = [p.content for p in m.parts if isinstance(p, TextPart)]
    calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
    d: dict[str, Any] = {
        "role": "assistant",
        "content": "\n\n".join(texts) if texts else (None if calls else ""),
    }
    if calls:
        d["tool_calls"] = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {"name": c.tool_name, "arguments": c.args_as_json_str()},
            }
            for c in calls
        ]
    # Thinking parts stay in the response, never read as text; a response with one says so
    # (its tool inputs stay as they were), and whether it opens with one, for a tool loop's
    # head to stay (Claude refuses a final turn that opens without).
    thought = [p.content for p in m.parts if isinstance(p, ThinkingPart)]
    first = bool(thought) and isinstance(m.parts[0], ThinkingPart)
    mark = thinking_mark(first=first, chars=sum(map(len, thought))) if thought else None
    d[ORIGIN] = Origin(m, plain=mark)
    return d


def from_chat(managed: Sequence[Mapping[str, Any]], originals: Sequence[ModelMessage]) -> list[ModelMessage]:
    """pydantic-ai messages for the managed chat messages: unchanged ones are the very
    objects that came in, edited tool returns keep their part's other fields."""
    names: dict[str, str] = {}  # the view's calls so far: the nearest earlier one wins
    recorded: dict[str, str] | None = None  # the record's, mapped once if the view lacks one

    def name_of(call_id: str) -> str:
        """The tool a result made anew answers: its call before it in the view (pairs stay
        together), else the record's (mapped the first time one is needed), else none."""
        nonlocal recorded
        found = names.get(call_id)
        if found is None:
            if recorded is None:
                recorded = {
                    c.tool_call_id: c.tool_name
                    for m in originals
                    if isinstance(m, ModelResponse)
                    for c in m.parts
                    if isinstance(c, ToolCallPart)
                }
            found = recorded.get(call_id, "")
        return found

    out: list[ModelMessage] = []
    parts: list[Any] = []
    source: Any = None

    def flush() -> None:
        nonlocal parts, source
        if parts:
            if source is not None and _rendered(source) == [id(p) for p in parts]:
                out.append(source)  # every part as it was: the request itself
            elif source is not None:
                out.append(replace(source, parts=[*_unrendered(source), *parts]))
            else:
                out.append(ModelRequest(parts=parts))
        parts, source = [], None

    for d in managed:
        origin = origin_of(d)
        if d.get("role") == "assistant":
            flush()
            out.append(_response_back(d, origin))
            names.update(tool_names([d]))
            continue
        part, owner = _part_back(d, origin, name_of)
        if parts and owner is not source:
            flush()
        source = owner
        parts.append(part)
    flush()
    return out


def _rendered(m: ModelRequest) -> list[int]:
    return [id(p) for p in m.parts if _request_part(p) is not None]


def _unrendered(m: ModelRequest) -> list[Any]:
    return [p for p in m.parts if _request_part(p) is None]


def _part_back(d: Mapping[str, Any], origin: Origin | None, name_of: Callable[[str], str]) -> tuple[Any, Any]:
    """(the request part, the request it came from or None)."""
    if origin is not None and origin.block is not None:
        part = origin.block
        if _request_part(part) == {k: v for k, v in d.items() if k != ORIGIN}:
            return part, origin.message
        if isinstance(part, ToolReturnPart):
            return replace(part, content=d.get("content")), origin.message
    role = d.get("role")
    content = d.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if role in ("system", "developer"):
        return SystemPromptPart(text), None
    if role == "tool":
        call_id = str(d.get("tool_call_id"))
        return ToolReturnPart(name_of(call_id), content, tool_call_id=call_id), None
    return UserPromptPart(text if isinstance(content, str) else _texts(content)), None


def _texts(content: Any) -> str:
    return "\n".join(
        p.get("text", "") for p in content or () if isinstance(p, Mapping) and p.get("type") == "text"
    )


def _response_back(d: Mapping[str, Any], origin: Origin | None) -> ModelResponse:
    original = origin.message if origin is not None else None
    if isinstance(original, ModelResponse) and _response(original) == {**d, ORIGIN: d.get(ORIGIN)}:
        return original
    calls = {c["id"]: c for c in d.get("tool_calls") or ()}
    parts: list[Any] = []
    text = d.get("content")
    kept = original.parts if isinstance(original, ModelResponse) else ()
    for p in kept:
        if isinstance(p, ToolCallPart):
            call = calls.pop(p.tool_call_id, None)
            if call is not None:
                parts.append(
                    p
                    if call["function"]["arguments"] == p.args_as_json_str()
                    else replace(p, args=call["function"]["arguments"])
                )
        elif not isinstance(p, TextPart):
            parts.append(p)  # thinking and the like: never edited
    if text:
        parts.insert(
            next((i for i, p in enumerate(parts) if isinstance(p, ToolCallPart)), len(parts)), TextPart(text)
        )
    parts += [
        ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"])
        for c in calls.values()
    ]
    return (
        replace(original, parts=parts) if isinstance(original, ModelResponse) else ModelResponse(parts=parts)
    )
