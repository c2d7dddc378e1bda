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
from collections.abc import Container, Mapping, Sequence
from typing import Any

from ...agents.tools import Tool
from ...messages import RECALL_TOOLS

__all__ = [
    "MAX_CALLS",
    "MAX_ROUNDS",
    "RECALL_CHARS",
    "calls_of",
    "continued",
    "last_round",
    "reply_of",
    "schemas",
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


def _list(value: Any) -> list[Any]:
    """A list an upstream's answer holds, or none (it may hold anything there)."""
    return value if isinstance(value, list) else []


def calls_of(api: str, answer: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """The recall calls of an answer: ``(call id, tool name, arguments)``."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    if not isinstance(answer, Mapping):
        return out
    if api == "chat":
        choices = answer.get("choices")
        message = (
            choices[0].get("message")
            if isinstance(choices, list) and choices and isinstance(choices[0], Mapping)
            else None
        )
        for call in _list(message.get("tool_calls") if isinstance(message, Mapping) else None):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and fn.get("name") in RECALL_TOOLS:
                out.append((str(call.get("id")), fn["name"], _arguments(fn.get("arguments"))))
    elif api == "responses":
        for item in _list(answer.get("output")):
            if (
                isinstance(item, Mapping)
                and item.get("type") == "function_call"
                and item.get("name") in RECALL_TOOLS
            ):
                out.append((str(item.get("call_id")), item["name"], _arguments(item.get("arguments"))))
    else:
        for block in _list(answer.get("content")):
            if (
                isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and block.get("name") in RECALL_TOOLS
            ):
                args = block.get("input")
                out.append(
                    (str(block.get("id")), block["name"], dict(args) if isinstance(args, Mapping) else {})
                )
    return out


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        return {}
    return dict(value) if isinstance(value, Mapping) else {}


_SAID_ITEMS = frozenset({"message", "reasoning"})
"""Responses output items that call nothing: every other item is a call of some kind."""


def reply_of(api: str, answer: Mapping[str, Any], ids: Container[str]) -> list[dict[str, Any]]:
    """The answer as the next recall round sends it back: with its recall calls (those of
    ``ids``) and none of the client's own, which the proxy cannot answer (a call without its
    result is a request the provider refuses)."""
    if api == "chat":
        message = dict(answer["choices"][0]["message"])
        message["tool_calls"] = [
            c for c in message.get("tool_calls") or () if isinstance(c, Mapping) and c.get("id") in ids
        ]
        return [
            {k: v for k, v in message.items() if v is not None and k in ("role", "content", "tool_calls")}
        ]
    if api == "responses":
        items = [item for item in _list(answer.get("output")) if isinstance(item, Mapping)]
        kept: list[dict[str, Any]] = []
        for k, item in enumerate(items):
            kind = item.get("type")
            if kind == "reasoning":  # it goes where the item after it goes (OpenAI refuses it alone)
                after = items[k + 1] if k + 1 < len(items) else None
                if (
                    after is not None
                    and after.get("type") not in _SAID_ITEMS
                    and after.get("call_id") not in ids
                ):
                    continue
            elif kind not in _SAID_ITEMS and (kind != "function_call" or item.get("call_id") not in ids):
                continue  # a call of the client's (function, custom, shell, MCP approval, ...)
            kept.append(dict(item))
        return kept
    content = [
        b
        for b in answer.get("content") or ()
        if isinstance(b, Mapping) and (b.get("type") != "tool_use" or b.get("id") in ids)
    ]
    return [{"role": "assistant", "content": content}]


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


def without_recall_calls(api: str, answer: Any) -> dict[str, Any] | None:
    """The last round's answer without the recall calls it made though it was let call none
    (a server that ignores ``tool_choice``), ended as an answer that calls nothing when it
    calls nothing else, so the client never gets a call of a tool it does not know; None
    when it made none."""
    if not calls_of(api, answer):
        return None
    if api == "chat":
        choice = dict(answer["choices"][0])
        message = dict(choice["message"])
        calls = [c for c in _list(message.get("tool_calls")) if not _recall_call(api, c)]
        message["tool_calls"] = calls or None
        if not calls:
            choice["finish_reason"] = "stop"
        return {**answer, "choices": [{**choice, "message": message}, *answer["choices"][1:]]}
    if api == "responses":
        items = _list(answer.get("output"))
        output = [
            item
            for k, item in enumerate(items)
            if not _recall_call(api, item)
            # a reasoning item goes where the item after it goes
            and not (
                isinstance(item, Mapping)
                and item.get("type") == "reasoning"
                and k + 1 < len(items)
                and _recall_call(api, items[k + 1])
            )
        ]
        return {**answer, "output": output}
    content = [b for b in _list(answer.get("content")) if not _recall_call(api, b)]
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


_THINKING = frozenset({"thinking", "redacted_thinking"})


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
