"""The three provider APIs the proxy answers: where a request keeps its conversation, how the
managed messages go back into it, and the provider's own error shape.

A request body is the provider's, untouched but for its messages (and ``model`` when the
models configuration names another one upstream): every other field the client sent
(``temperature``, ``tool_choice``, ``metadata``, ``cache_control`` blocks...) goes upstream as
it came.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...formats.anthropic import system_text
from ..errors import provider_error_body

__all__ = ["APIS", "Api", "Parts"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What the definition's hooks manage in a request."""

    record: list[Any]
    """The conversation, in the API's own format."""
    system_prompt: str | None
    tools: list[Any]
    stream: bool
    reply_limit: int | None = None
    """The most tokens the reply may take, as the request asks (``max_tokens``...)."""


@dataclass(frozen=True, slots=True)
class Api:
    """One provider API (see the module docstring)."""

    name: str
    path: str
    """The path after ``/proxy/{definition}``, and after the upstream's ``base_url``."""
    format: str
    """The message format of :mod:`ctxmgmt.formats`."""
    provider: str
    """The ``provider`` of the models configuration whose endpoints speak it."""
    field: str
    """The body's field that holds the conversation."""
    limits: tuple[str, ...]
    """The body's fields that limit the reply's tokens, the one the provider prefers first
    (chat's ``max_completion_tokens`` replaces the deprecated ``max_tokens``)."""

    def parts(self, body: Mapping[str, Any], *, unmanaged: bool = False) -> Parts | str:
        """The request's conversation, or what is wrong with it (a JSON pointer and why);
        ``unmanaged``: one that goes upstream as it is may hold none (a Responses request
        without ``input``)."""
        raw = body.get(self.field)
        if self.name == "responses" and isinstance(raw, str):
            raw = [{"role": "user", "content": raw}]  # a plain string is one user message
        if unmanaged and raw is None:
            raw = []
        elif not isinstance(raw, list) or not raw:
            kind = (
                "a non-empty list of input items or a string"
                if self.name == "responses"
                else "a non-empty list of messages"
            )
            return f"/{self.field}: must be {kind}"
        if raw and set(map(type, raw)) != {dict}:  # a JSON body's objects are dicts
            i = next(i for i, item in enumerate(raw) if type(item) is not dict)
            return f"/{self.field}/{i}: must be an object (a message or an input item)"
        tools = body.get("tools")
        tools = [] if tools is None else tools  # null: none
        if not isinstance(tools, list):
            return "/tools: must be a list of tool definitions"
        for i, tool in enumerate(tools):  # a name is compared and hashed (recall's tools)
            chat = self.name == "chat" and isinstance(tool, Mapping)
            named = tool.get("function") if chat else tool
            if isinstance(named, Mapping) and "name" in named and not isinstance(named["name"], str):
                return f"/tools/{i}{'/function' if chat else ''}/name: must be a string"
        stream = body.get("stream")
        stream = False if stream is None else stream  # null: not streamed (the OpenAI API's default)
        if not isinstance(stream, bool):
            return "/stream: must be true or false"
        limit = next((body[k] for k in self.limits if body.get(k) is not None), None)
        if limit is not None and (type(limit) is not int or limit < 1):
            name = next(k for k in self.limits if body.get(k) is not None)
            return f"/{name}: must be a whole number >= 1 (the most tokens the reply may take)"
        if self.name == "messages":
            system = body.get("system")
            if system is not None and not isinstance(system, (str, list)):
                return "/system: must be a string or a list of text blocks"
            prompt = system_text(system) if system is not None else None
        elif self.name == "responses":
            if body.get("background") is True:
                return (
                    "/background: a background response is made upstream after the request, where "
                    "the proxy could not manage what it calls nor what it reports: send the request "
                    "without background (streamed, if it is long), or to the provider directly"
                )
            instructions = body.get("instructions")
            if instructions is not None and not isinstance(instructions, str):
                return "/instructions: must be a string"
            prompt = instructions
        else:
            prompt = None  # chat: system messages are messages
        return Parts(list(raw), prompt, tools, stream, limit)

    def managed(self, body: Mapping[str, Any], messages: Sequence[Any], model: str) -> dict[str, Any]:
        """The body that goes upstream: the managed messages, and the upstream's model name."""
        out = dict(body)
        out[self.field] = list(messages)
        out["model"] = model
        return out

    def error(self, status: int, kind: str, message: str) -> dict[str, Any]:
        """An error the proxy itself raises, in the provider's own shape."""
        return provider_error_body(self.provider, status, kind, message)


APIS: dict[str, Api] = {
    api.name: api
    for api in (
        Api(
            "chat",
            "/v1/chat/completions",
            "openai_chat",
            "openai",
            "messages",
            ("max_completion_tokens", "max_tokens"),
        ),
        Api("responses", "/v1/responses", "openai_responses", "openai", "input", ("max_output_tokens",)),
        Api("messages", "/v1/messages", "anthropic", "anthropic", "messages", ("max_tokens",)),
    )
}
