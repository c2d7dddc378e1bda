"""LangChain v1: context management as an ``AgentMiddleware`` (``pip install 'ctxmgmt[langchain]'``).

>>> from langchain.agents import create_agent
>>> from ctxmgmt.adapters.langchain import ContextManagementMiddleware
>>> agent = create_agent(model, tools, middleware=[ContextManagementMiddleware("default")])

Before every model call, the messages the model would see get ``post_tool`` after each
new tool result and then ``pre_llm``; the model sees the managed list. The agent's
``messages`` stay the complete record, and the managed view with the managers' state
(the running summary) is kept in the agent's state under ``ctxmgmt``, so a checkpointer
persists it and the next call continues from it. The trace goes to the callbacks as a
custom event named ``ctxmgmt`` and to the ``ctxmgmt.adapters`` logger.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware, ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.types import Command

from ..agents.conversation import Conversation, DefinitionSource, Source, Turn, reply_limit, token_settings
from ..cache import Pricing
from ..formats._common import ORIGIN, Origin
from ..formats._turns import THINKING_BLOCKS, thinking_mark
from ..messages import CHAT_PARTS, text_of

__all__ = ["ContextManagementMiddleware", "ContextManagementState"]

STATE_KEY = "ctxmgmt"


def _latest(left: Any, right: Any) -> Any:
    return right


class ContextManagementState(AgentState):
    """The agent state with ctxmgmt's view and managers' state under ``ctxmgmt``."""

    ctxmgmt: NotRequired[Annotated[dict[str, Any], _latest]]


class ContextManagementMiddleware(AgentMiddleware):
    """Runs a ctxmgmt definition's ``post_tool`` and ``pre_llm`` hooks around every model call.

    Args:
        definition: a :class:`~ctxmgmt.Definition`, a path, a shipped name, a dict, or
            ``(client, name)`` for a registry server (fetched per call, rebuilt only when its
            version changed).
        models: the models configuration a summariser's ``summarization_model_id`` names.
        offloader: where removed content is archived first (the thread id is the session).
        context_window: the model's window, for the fit step; by default the chat model's
            profile (``max_input_tokens``) when it has one.
        pricing: the model's prices, for the cost model of ``settings: {cache: aware}``
            (default: Anthropic's ratios for the Anthropic format, OpenAI's otherwise).
    """

    state_schema = ContextManagementState

    def __init__(
        self,
        definition: DefinitionSource,
        *,
        models: Any = None,
        offloader: Any = None,
        context_window: int | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        token_settings(context_window=context_window)
        super().__init__()
        self.source = Source(definition)
        self.models = models
        self.offloader = offloader
        self.context_window = context_window
        self.pricing = pricing
        self._threads: OrderedDict[str, tuple[Conversation, _Translation]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "ContextManagementMiddleware"

    def _conversation(self, request: ModelRequest) -> tuple[Conversation, _Translation, dict[str, Any]]:
        """This thread's conversation, live in this process when the agent's state holds what
        it saved last or nothing of ctxmgmt's (no checkpointer: the caller hands the record
        again; the conversation continues its view only if the record continues it), so a
        call costs what is new; else restored from the state. And the translation of its
        messages."""
        thread = _thread_id()
        saved = request.state.get(STATE_KEY)
        saved = saved if isinstance(saved, Mapping) and saved else None  # LangGraph gives {} for none
        with self._lock:
            live = self._threads.get(thread)
            if live is not None and (saved is None or _same_state(live[0].saved, saved)):
                self._threads.move_to_end(thread)
            else:
                conversation = Conversation(
                    self.source,
                    models=self.models,
                    offloader=self.offloader,
                    session=thread,
                    user_first=True,
                    pricing=self.pricing,
                )
                conversation.load(saved)
                live = self._threads[thread] = (conversation, _Translation())
                while len(self._threads) > LIVE_THREADS:
                    self._threads.popitem(last=False)
        system = request.system_message
        model = request.model
        profile = getattr(model, "profile", None) or {}
        window = self.context_window or (
            profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
        )
        options = {
            "system_prompt": text_of(system.content) if system is not None else None,
            "tools": [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in request.tools],
            "model": getattr(model, "model_name", None) or getattr(model, "model", None),
            "context_window": window if isinstance(window, int) else None,
            # The reply's limit the call asks: Anthropic refuses input + max_tokens past the window.
            "max_output_tokens": reply_limit(
                (request.model_settings or {}).get("max_tokens"), getattr(model, "max_tokens", None)
            ),
        }
        live[1].begin()
        return live[0], live[1], options

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        conversation, translation, options = self._conversation(request)
        turn = conversation.prepare(request.messages, translate=translation, **options)
        dispatch_custom_event(STATE_KEY, _event(self.source, turn))
        managed = translation.framework_messages(conversation, turn, request.messages)
        response = handler(request.override(messages=managed))
        return _extended(response, conversation, turn)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ExtendedModelResponse:
        conversation, translation, options = self._conversation(request)
        turn = await conversation.aprepare(request.messages, translate=translation, **options)
        await adispatch_custom_event(STATE_KEY, _event(self.source, turn))
        managed = translation.framework_messages(conversation, turn, request.messages)
        response = await handler(request.override(messages=managed))
        return _extended(response, conversation, turn)


LIVE_THREADS = 256
"""Threads whose conversation a middleware keeps live in memory (the newest used)."""


def _same_state(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether the agent's state holds what this conversation saved last (as the checkpointer
    gave it back): the same record length, fingerprint chain and view (or the record as the view)."""
    view, other = mine.get("view"), theirs.get("view")
    same_view = (
        len(view) == len(other)
        if isinstance(view, list) and isinstance(other, list)
        else view is other is None and mine.get("whole") is theirs.get("whole") is True
    )
    return same_view and mine.get("upto") == theirs.get("upto") and mine.get("chain") == theirs.get("chain")


def _group(m: BaseMessage) -> list[dict[str, Any]]:
    """The chat messages of one LangChain message: a HumanMessage with tool_result blocks is
    several, the results first, as after their call."""
    plain = _plain(m)
    if plain is not None:
        return [plain]
    return sorted((_chat(d) for d in convert_to_openai_messages([m], include_id=True)), key=_not_tool)


_ARGUMENTS = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(args, ensure_ascii=False)``, as LangChain writes a call's arguments, without
building an encoder each call."""
_ROLES = {HumanMessage: "user", AIMessage: "assistant", ToolMessage: "tool", SystemMessage: "system"}


def _plain(m: BaseMessage) -> dict[str, Any] | None:
    """The chat message of a message of one of the four core classes with text content, as
    ``convert_to_openai_messages(include_id=True)`` makes it (a test holds the two equal), at a
    fraction of its cost (it is a tokenizer pass over again on a first call); None for any
    other message (content blocks, a subclass, a system message with another role)."""
    role = _ROLES.get(type(m))
    content = m.content
    extra = m.additional_kwargs
    if role is None or not isinstance(content, str) or (extra and "__openai_role__" in extra):
        return None
    out: dict[str, Any] = {"role": role}
    if m.name:
        out["name"] = m.name
    if role == "assistant" and m.tool_calls:  # type: ignore[attr-defined]
        out["tool_calls"] = [
            {
                "type": "function",
                "id": c["id"],
                "function": {"name": c["name"], "arguments": _ARGUMENTS(c["args"])},
            }
            for c in m.tool_calls  # type: ignore[attr-defined]
        ]
    if extra and extra.get("refusal"):
        out["refusal"] = extra["refusal"]
    if role == "tool":
        out["tool_call_id"] = m.tool_call_id  # type: ignore[attr-defined]
    if m.id:
        out["id"] = m.id
    out["content"] = content
    return out


_Original = tuple[list[dict[str, Any]], int]
"""The chat messages of a record message (the very objects the view holds), and its place
in the record."""


class _Translation:
    """A thread's LangChain messages as chat messages (:func:`_group`) and back.

    Each record message is translated when it is new to the view (once per call). Where the
    view's chat messages came from is kept (by the identity of each message's first chat
    message, and by LangChain id for a view restored from the agent's state): a place in the
    record, which holds the same message at every later call (a turn continues the view only
    when the record starts with the messages it covers; else the view is made anew). So a
    managed view is translated back at the cost of the view: an unchanged message is the
    framework's own object, from the record at hand; only what a manager made (a summary, a
    cut result) is converted."""

    def __init__(self) -> None:
        self._call: dict[int, tuple[BaseMessage, list[dict[str, Any]]]] = {}
        self._by_object: dict[int, _Original] = {}
        self._by_id: dict[str, _Original] = {}

    def begin(self) -> None:
        """A new model call: the translations of the last one are not kept past it."""
        self._call = {}

    def __call__(self, m: BaseMessage) -> list[dict[str, Any]]:
        done = self._call.get(id(m))
        if done is None or done[0] is not m:
            done = self._call[id(m)] = (m, _group(m))
        return done[1]

    def framework_messages(
        self, conversation: Conversation, turn: Turn, record: Sequence[BaseMessage]
    ) -> list[Any]:
        """The LangChain messages for a prepared turn: the record's messages new to the view
        are noted first (all of them for a new view), then the view is translated back."""
        if turn.fresh:
            self._by_object, self._by_id = {}, {}
        for at in range(0 if turn.fresh else turn.start, len(record)):
            self._note((self(record[at]), at))
        return conversation.framework_messages(turn, record, lambda t: self._back(t.messages, record))

    def _note(self, original: _Original) -> None:
        group = original[0]
        if group:
            self._by_object[id(group[0])] = original
            if group[0].get("id"):
                self._by_id[group[0]["id"]] = original

    def _original(self, managed: Sequence[Any], i: int, record: Sequence[BaseMessage]) -> _Original | None:
        """Where the record message is whose chat messages are ``managed[i:...]``, all there,
        unchanged and together: by identity (a live view), else by LangChain id and equality
        (a restored one)."""
        d = managed[i]
        found = self._by_object.get(id(d))
        if found is not None and found[0][0] is d:
            same = all(a is b for a, b in zip(managed[i : i + len(found[0])], found[0], strict=False))
        else:
            found = self._by_id.get(d.get("id")) if isinstance(d.get("id"), str) else None
            same = found is not None and managed[i : i + len(found[0])] == found[0]
        if found is None or not same or len(managed) - i < len(found[0]) or found[1] >= len(record):
            return None
        return found

    def _back(self, managed: Sequence[Any], record: Sequence[BaseMessage]) -> list[Any]:
        """LangChain messages for the managed view; the places kept are those it holds."""
        out: list[Any] = []
        kept: list[_Original] = []
        i = 0
        while i < len(managed):
            original = self._original(managed, i, record)
            if original is not None:
                out.append(record[original[1]])
                kept.append(original)
                i += len(original[0])
                continue
            out.extend(convert_to_messages([{k: v for k, v in managed[i].items() if k not in _NOT_SENT}]))
            i += 1
        self._by_object, self._by_id = {}, {}
        for original in kept:
            self._note(original)
        return out


def _extended(response: Any, conversation: Conversation, turn: Turn) -> ExtendedModelResponse:
    """The model's response, with the view, state and calibration to persist in the agent's state
    (LangChain hands a middleware its inner handlers' results as a ModelResponse)."""
    usage = next((m.usage_metadata for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    found: Mapping[str, Any] = usage or {}  # LangChain's UsageMetadata, a TypedDict
    details: Mapping[str, Any] = found.get("input_token_details") or {}
    turn.usage = conversation.observe(
        usage.get("input_tokens") if usage else None,
        cached=details.get("cache_read"),
        written=details.get("cache_creation"),
    )
    return ExtendedModelResponse(
        model_response=response, command=Command(update={STATE_KEY: conversation.saved})
    )


_NOT_SENT = frozenset({"id", ORIGIN})
"""Keys of a managed chat message that its LangChain message does not take: the id (the
original's, which a made message must not claim) and ctxmgmt's own mark."""


def _not_tool(d: Mapping[str, Any]) -> bool:
    return d.get("role") != "tool"


def _chat(d: dict[str, Any]) -> dict[str, Any]:
    """A converted message with only OpenAI chat content parts: the blocks that LangChain keeps
    from other providers (Claude's thinking, reasoning) are not text a manager may read or
    edit. An untouched message goes to the model as the original LangChain message, with them."""
    content = d.get("content")
    if not isinstance(content, list) or all(
        isinstance(p, dict) and p.get("type") in CHAT_PARTS for p in content
    ):
        return d
    parts = [p for p in content if isinstance(p, dict) and p.get("type") in CHAT_PARTS]
    out = {**d, "content": parts or ""}
    if d.get("role") == "assistant":
        if all(p.get("type") == "text" for p in parts):
            out["content"] = "\n".join(p["text"] for p in parts) or (None if d.get("tool_calls") else "")
        thought = [p for p in content if isinstance(p, dict) and p.get("type") in _THINKING]
        if thought:
            # Its tool inputs stay as they were, a message that opens with thinking keeps a
            # tool loop's head (Claude refuses a final turn that opens without), and its
            # thinking is counted while its turn goes on.
            chars = sum(len(_thought_text(p)) for p in thought)
            out[ORIGIN] = Origin(plain=thinking_mark(first=content[0] is thought[0], chars=chars))
    return out


def _thought_text(block: Mapping[str, Any]) -> str:
    """The text (or, redacted, the data) of a thinking block in any of LangChain's forms."""
    found = block.get(block.get("type", ""))
    if isinstance(found, Mapping):  # Bedrock's {"reasoning_content": {"text": ...}}
        found = found.get("text")
    if not isinstance(found, str):
        found = block.get("data")
    return found if isinstance(found, str) else ""


_THINKING = frozenset({*THINKING_BLOCKS, "reasoning", "reasoning_content"})
"""The blocks of thinking a LangChain message may hold: Anthropic's, LangChain's standard
``reasoning`` (``output_version="v1"``), Bedrock's ``reasoning_content``."""


def _event(source: Source, turn: Turn) -> dict[str, Any]:
    return {
        "definition": source.name,
        "trace": list(turn.trace),
        "reusable_prefix_tokens": turn.reusable_prefix_tokens,
    }


def _thread_id() -> str:
    """The LangGraph thread id: the offload session of this conversation."""
    try:
        from langgraph.config import get_config

        thread = get_config().get("configurable", {}).get("thread_id")
    except Exception:  # outside a graph run
        thread = None
    return str(thread) if thread else "default"
