"""OpenAI Agents SDK: context management as a ``call_model_input_filter``
(``pip install 'ctxmgmt[openai-agents]'``).

>>> from agents import RunConfig, Runner
>>> from ctxmgmt.adapters.openai_agents import ContextManagementFilter
>>> managed = ContextManagementFilter("default", context_window=128_000)
>>> await Runner.run(agent, "...", run_config=RunConfig(call_model_input_filter=managed), hooks=managed.hooks)

The SDK hands the filter the Responses input items of every model call. ``post_tool``
runs after each new ``function_call_output`` and then ``pre_llm``; the model gets the
managed items, while the SDK's history (``to_input_list()``, a session) stays complete.
The SDK's hooks cannot change a tool result, so ``hooks`` only observe: they log each tool
result as it arrives and read each response's reported usage.

One filter serves one conversation: it keeps the managed view and the managers' state
between calls and runs (:attr:`saved`, to persist; :meth:`load` to restore). The trace
goes into the SDK's tracing as a ``ctxmgmt`` custom span, and to the ``ctxmgmt.adapters``
logger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agents import Agent, RunContextWrapper, RunHooks, Tool
from agents.items import ModelResponse
from agents.run_config import CallModelData, ModelInputData
from agents.tracing import custom_span

from ..agents.conversation import Conversation, DefinitionSource, Turn, reply_limit, token_settings
from ..cache import Pricing
from ..errors import ContextError, Problem

__all__ = ["ContextManagementFilter", "ContextManagementHooks"]

log = logging.getLogger("ctxmgmt.adapters")


class ContextManagementFilter:
    """A ``call_model_input_filter`` that runs a ctxmgmt definition before every model call.

    Args:
        definition: a :class:`~ctxmgmt.Definition`, a path, a shipped name, a dict, or
            ``(client, name)`` for a registry server.
        models: the models configuration a summariser's ``summarization_model_id`` names.
        offloader: where removed content is archived first.
        session: the offload session of this conversation.
        context_window: the model's window, for the fit step.
        max_tokens: the reply limit set in ``RunConfig(model_settings=...)``, which a filter is
            not shown (the agent's own ``model_settings.max_tokens`` is read at each call);
            the fit keeps room for it.
        model: the model's name set in ``RunConfig(model=...)``, which a filter is not shown
            either; it wins over the agent's (whose name, when a string, is read at each
            call): the tokenizer and the calibration are the model's.
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
        max_tokens: int | None = None,
        model: str | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        token_settings(context_window=context_window, max_tokens=max_tokens)
        if model is not None and (not isinstance(model, str) or not model):
            raise ContextError([Problem("/model", f"must be a model's name, or None (got {model!r:.60})")])
        self.conversation = Conversation(
            definition,
            models=models,
            offloader=offloader,
            session=session,
            format="openai_responses",
            pricing=pricing,
        )
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.model = model
        self.hooks = ContextManagementHooks(self)
        """Pass these as ``Runner.run(..., hooks=...)``: they log each tool result and read usage."""
        self.last: Turn | None = None
        """The last call's managed items and trace."""

    @property
    def saved(self) -> dict[str, Any]:
        """The managed view and the managers' state, JSON-able, to persist between processes."""
        return self.conversation.saved

    def load(self, saved: Mapping[str, Any] | None) -> None:
        self.conversation.load(saved)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        agent = data.agent
        request: dict[str, Any] = {
            "system_prompt": data.model_data.instructions,
            "tools": _schemas(agent),
            "model": self.model or (agent.model if isinstance(agent.model, str) else None),
            "context_window": self.context_window,
            "max_output_tokens": reply_limit(
                self.max_tokens, getattr(agent.model_settings, "max_tokens", None)
            ),
        }
        given = data.model_data.input
        turn = await self.conversation.aprepare(given, **request)
        self.last = turn
        fired = [e for e in turn.trace if e["activated"]]
        with custom_span("ctxmgmt", data={"definition": self.conversation.source.name, "trace": fired}):
            pass
        items = self.conversation.framework_messages(turn, given, lambda t: t.messages)
        return ModelInputData(input=items, instructions=data.model_data.instructions)


class ContextManagementHooks(RunHooks[Any]):
    """The SDK's run hooks for a :class:`ContextManagementFilter`: post_tool itself runs in
    the filter, on the new results, before the model reads them."""

    def __init__(self, managed: ContextManagementFilter) -> None:
        self.managed = managed
        self.usage: list[dict[str, Any]] = []
        """Per model call: ``{counted, calibrated, reported}`` input tokens."""

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any
    ) -> None:
        log.debug(
            "tool %s returned %d characters; post_tool runs on it before the next call",
            tool.name,
            len(str(result)),
        )

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        details = getattr(response.usage, "input_tokens_details", None)
        record = self.managed.conversation.observe(
            getattr(response.usage, "input_tokens", None),
            cached=getattr(details, "cached_tokens", None),
            written=getattr(details, "cache_write_tokens", None),
        )
        if record is not None:
            self.usage.append(record)
            if self.managed.last is not None:
                self.managed.last.usage = record


def _schemas(agent: Agent[Any]) -> list[dict[str, Any]]:
    """The agent's function tools as the schemas sent with a request (for counting)."""
    out = []
    for tool in agent.tools:
        schema = getattr(tool, "params_json_schema", None)
        if schema is not None:
            out.append(
                {
                    "type": "function",
                    "name": tool.name,
                    "description": getattr(tool, "description", ""),
                    "parameters": schema,
                }
            )
    return out
