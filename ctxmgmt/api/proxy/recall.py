"""Recall through the proxy: when the managed request names archived content, the model is
offered ``context_read`` / ``context_search``; the proxy answers those calls itself and asks
the upstream again, so the client never sees a tool it does not know.

A reply that calls a recall tool beside the client's own tools goes on with the recall calls
only (the model decides again once it has read); after :data:`MAX_ROUNDS` rounds the last
request lets the model call no recall tool (:func:`last_round`), so the answer the client
gets never calls one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from typing import Any

from ...agents.tools import Tool
from ...formats.openai_responses import is_call
from ...messages import RECALL_TOOLS

__all__ = [
    "MAX_CALLS",
    "MAX_ROUNDS",
    "MAX_TOOLS",
    "NOTHING_SAID",
    "RECALL_CHARS",
    "calls_of",
    "continued",
    "last_round",
    "only_recall",
    "reply_of",
    "schemas",
    "unechoed",
    "with_recall",
    "without_recall",
    "without_recall_calls",
]

MAX_ROUNDS = 4
"""Recall rounds in one proxied request at most (each an upstream call; all of them within the
request's one deadline, the model's ``timeout``)."""
MAX_CALLS = 16
"""Recall calls of one answer that are run; each further one is answered with an error that
says to call again (an answer of 50,000 calls would cost minutes and gigabytes)."""
RECALL_CHARS = 1 << 20
"""Characters of recall results one proxied request gets over all its rounds; once spent,
each further call is answered with an error that says to answer with what was read."""


def schemas(api: str, tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The recall tools as the API declares tools."""
    out = []
    for tool in tools:
        if api == "messages":
            out.append(
                {"name": tool.name, "description": tool.description, "input_schema": dict(tool.input_schema)}
            )
        elif api == "responses":
            out.append(
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": dict(tool.input_schema),
                }
            )
        else:
            out.append(tool.schema())
    return out


def without_recall(api: str, tools: Sequence[Any]) -> list[Any]:
    """The request's tools but the recall ones."""
    return [t for t in tools if _tool_name(api, t) not in RECALL_TOOLS]


def only_recall(api: str, tools: Sequence[Any]) -> list[Any]:
    """The recall tools among ``tools``."""
    return [t for t in tools if _tool_name(api, t) in RECALL_TOOLS]


def unechoed(api: str, value: Any) -> dict[str, Any] | None:
    """A Responses answer, or a stream event that holds one (``response.created``,
    ``response.completed``, ...), with the recall tools left out of its echo of the request's
    tools, so the client never sees a tool it does not know; None when it echoes none."""
    if api != "responses" or not isinstance(value, Mapping):
        return None
    inner = value.get("response")
    answer = inner if isinstance(inner, Mapping) else value
    tools = answer.get("tools")
    if not isinstance(tools, list) or not any(_tool_name(api, t) in RECALL_TOOLS for t in tools):
        return None
    plain = {**answer, "tools": without_recall(api, tools)}
    return {**value, "response": plain} if answer is inner else plain


MAX_TOOLS = {"chat": 128, "responses": 128}
"""The most tools a request of the API may declare (OpenAI's bound on functions)."""


def with_recall(api: str, tools: Sequence[Any], declared: Sequence[Mapping[str, Any]]) -> list[Any] | None:
    """The client's tools and the recall tools ``declared``, or None when recall cannot be
    offered: a tool of the client's own bears a recall tool's name (it and its calls are the
    client's, which the proxy never answers), or the API's bound on tools leaves no room for
    both. A recall tool the client sends back (a Responses answer echoes the request's tools,
    with ``strict`` added) is the proxy's own, declared once: the same but for ``strict``."""
    own = list(tools)
    if any(_tool_name(api, t) in RECALL_TOOLS for t in own):  # else no echo to tell (each request)
        ours = [_unstrict(api, t) for t in declared]
        own = [t for t in own if _unstrict(api, t) not in ours]
        if any(_tool_name(api, t) in RECALL_TOOLS for t in own):
            return None
    limit = MAX_TOOLS.get(api)
    if limit is not None and len(own) + len(declared) > limit:
        return None
    return [*own, *declared]


_NO_CALL = {"chat": "none", "responses": "none", "messages": {"type": "none"}}
"""Each API's ``tool_choice`` that lets the model call no tool."""


def last_round(api: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The last recall round's request, whose answer calls no recall tool: the recall tools
    are not offered, and when the client offered none of its own they stay defined with a
    ``tool_choice`` that calls none (the history holds the recall calls, and a request with
    tool calls but no tools is one Anthropic and Bedrock refuse)."""
    tools = without_recall(api, body.get("tools") or [])
    if tools:
        return {**body, "tools": tools}
    return {**body, "tool_choice": _NO_CALL[api]}


def _tool_name(api: str, tool: Any) -> str | None:
    """A tool definition's name, when it is a string (a client may send anything there)."""
    if not isinstance(tool, Mapping):
        return None
    if api == "chat":
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
    else:
        name = tool.get("name")
    return name if isinstance(name, str) else None


def _unstrict(api: str, tool: Any) -> Any:
    """A tool definition without ``strict`` (which an answer's echo of the tools may add)."""
    if not isinstance(tool, Mapping):
        return tool
    if api == "chat":
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            return tool
        return {**tool, "function": {k: v for k, v in fn.items() if k != "strict"}}
    return {k: v for k, v in tool.items() if k != "strict"}


def _list(value: Any) -> list[Any]:
    """A list an upstream's answer holds, or none (it may hold anything there)."""
    return value if isinstance(value, list) else []


_THINKING = frozenset({"thinking", "redacted_thinking"})


def _recall_call(api: str, item: Any) -> bool:
    """Whether an answer's call (a chat tool call, a Responses item, an Anthropic block) is a
    recall call."""
    if not isinstance(item, Mapping):
        return False
    if api == "chat":
        fn = item.get("function")
        return isinstance(fn, Mapping) and fn.get("name") in RECALL_TOOLS
    kind = "function_call" if api == "responses" else "tool_use"
    return item.get("type") == kind and item.get("name") in RECALL_TOOLS


def _said(api: str, answer: Mapping[str, Any]) -> list[Any]:
    """Where an answer's calls are: a chat answer's first choice's tool calls, a response's
    output items, an Anthropic message's content blocks."""
    if api == "chat":
        choices = answer.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, Mapping) else None
        return _list(message.get("tool_calls")) if isinstance(message, Mapping) else []
    return _list(answer.get("output" if api == "responses" else "content"))


def calls_of(
    api: str, answer: Any, unreadable: Collection[str] = ()
) -> list[tuple[str, str, dict[str, Any] | None]]:
    """The recall calls of an answer: ``(call id, tool name, arguments)``, the arguments None
    when they are no JSON object (or, streamed, were none: ``unreadable``, the ids of calls
    given ``{}`` in their place)."""
    if not isinstance(answer, Mapping):
        return []
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    for item in _said(api, answer):
        if not _recall_call(api, item):
            continue
        if api == "chat":
            out.append(
                (str(item.get("id")), item["function"]["name"], _arguments(item["function"].get("arguments")))
            )
        elif api == "responses":
            out.append((str(item.get("call_id")), item["name"], _arguments(item.get("arguments"))))
        else:
            args = item.get("input")
            readable = isinstance(args, Mapping) and str(item.get("id")) not in unreadable
            out.append((str(item.get("id")), item["name"], dict(args) if readable else None))
    return out


def _arguments(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        return None
    return dict(value) if isinstance(value, Mapping) else None


NOTHING_SAID = "(no answer: the model was still reading archived context when its reading rounds ran out)"
"""What an answer says that said nothing but recall calls, once they are taken out (an empty
assistant turn is one the client could not send back)."""

_REASONING_KEPT = ("reasoning_content", "reasoning", "reasoning_details")
"""A chat answer's reasoning, which some servers want back in a tool loop (DeepSeek's)."""


def _with_reasoning(items: Sequence[Any], dropped: Callable[[Any], bool]) -> list[dict[str, Any]]:
    """Responses output items without the ``dropped`` ones; a reasoning item goes with the
    items it reasoned about (those after it, to the next reasoning item): kept when any of
    them is (OpenAI refuses a reasoning item without its item, and an item without its
    reasoning)."""
    out: list[dict[str, Any]] = []
    reasoning: dict[str, Any] | None = None
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "reasoning":
            reasoning = dict(item)
        elif not dropped(item):
            if reasoning is not None:
                out.append(reasoning)
                reasoning = None
            out.append(dict(item))
    return out


def _needs_the_client(item: Any) -> bool:
    """A Responses item only the client can answer: a call with a ``call_id`` or an MCP
    approval request (a hosted call, such as a web search, holds its own result)."""
    return is_call(item) or (isinstance(item, Mapping) and item.get("type") == "mcp_approval_request")


def reply_of(api: str, answer: Mapping[str, Any], ids: Container[str]) -> list[dict[str, Any]]:
    """The answer as the next recall round sends it back: with its recall calls (those of
    ``ids``) and none of the client's own, which the proxy cannot answer (a call without its
    result is a request the provider refuses)."""
    if api == "chat":
        message = dict(answer["choices"][0]["message"])
        message["tool_calls"] = [
            c for c in message.get("tool_calls") or () if isinstance(c, Mapping) and c.get("id") in ids
        ]
        kept = ("role", "content", "tool_calls", *_REASONING_KEPT)
        return [{k: v for k, v in message.items() if v is not None and k in kept}]
    if api == "responses":
        return _with_reasoning(
            _list(answer.get("output")),
            lambda item: (
                _needs_the_client(item) and not (_recall_call(api, item) and item.get("call_id") in ids)
            ),
        )
    content = [
        b
        for b in answer.get("content") or ()
        if isinstance(b, Mapping) and (b.get("type") != "tool_use" or b.get("id") in ids)
    ]
    return [{"role": "assistant", "content": content}]


def without_recall_calls(api: str, answer: Any) -> dict[str, Any] | None:
    """The last round's answer without the recall calls it made though it was let call none
    (a server that ignores ``tool_choice``), ended as an answer that calls nothing when it
    calls nothing else (saying :data:`NOTHING_SAID` when it said nothing else), so the client
    never gets a call of a tool it does not know; None when it made none."""
    if not calls_of(api, answer):
        return None
    if api == "chat":
        choice = dict(answer["choices"][0])
        message = dict(choice["message"])
        calls = [c for c in _list(message.get("tool_calls")) if not _recall_call(api, c)]
        message["tool_calls"] = calls or None
        if not calls:
            choice["finish_reason"] = "stop"
            if not message.get("content"):
                message["content"] = NOTHING_SAID
        return {**answer, "choices": [{**choice, "message": message}, *answer["choices"][1:]]}
    if api == "responses":
        output = _with_reasoning(_list(answer.get("output")), lambda item: _recall_call(api, item))
        if not output:
            text = {"type": "output_text", "text": NOTHING_SAID, "annotations": []}
            output = [
                {
                    "type": "message",
                    "id": "msg_ctxmgmt",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            ]
        return {**answer, "output": output}
    content = [b for b in _list(answer.get("content")) if not _recall_call(api, b)]
    if all(isinstance(b, Mapping) and b.get("type") in _THINKING for b in content):
        content.append({"type": "text", "text": NOTHING_SAID})  # a turn may not end with thinking
    out = {**answer, "content": content}
    if not any(isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content):
        out["stop_reason"] = "end_turn"
    return out


def continued(
    api: str,
    field: str,
    body: Mapping[str, Any],
    reply: Sequence[Mapping[str, Any]],
    results: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    """The next upstream request: the answer as :func:`reply_of` sends it back, then the
    results of its recall calls."""
    history = [*body[field], *reply]
    if api == "chat":
        history += [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in results]
    elif api == "responses":
        history += [
            {"type": "function_call_output", "call_id": call_id, "output": text} for call_id, text in results
        ]
    else:
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": text}
                    for call_id, text in results
                ],
            }
        )
    return {**body, field: history}


def opened(api: str, first: Any, final: Any) -> dict[str, Any] | None:
    """The final answer of recall rounds opening with the thinking that opened the first
    round's answer, when it opens with none (Anthropic, thinking not interleaved: the model
    thinks in the first round only); None when it needs nothing. The client sends the turn
    back, and Anthropic refuses a final turn that does not open with its thinking block; a
    streamed answer passes that block on as it comes."""
    if api != "messages" or not isinstance(first, Mapping) or not isinstance(final, Mapping):
        return None
    content = final.get("content")
    if not isinstance(content, list) or not content:
        return None  # nothing to open: a thinking block may not be an answer's last
    if isinstance(content[0], Mapping) and content[0].get("type") in _THINKING:
        return None
    lead = []
    for block in _list(first.get("content")):
        if not (isinstance(block, Mapping) and block.get("type") in _THINKING):
            break
        lead.append(block)
    return {**final, "content": [*lead, *content]} if lead else None
