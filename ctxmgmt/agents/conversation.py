"""What every framework adapter shares: a definition in any form, and the runner's
bookkeeping of one conversation (the framework's record, the model's managed view).

An adapter translates the framework's messages to a provider format and back, and wires
:class:`Conversation` into the framework's hook; the logic lives here, so every adapter
(and the runner) behaves the same.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache import Pricing, PromptCache, ratios_for
from ..calibration import Calibration
from ..context import ApplyResult, Context
from ..definitions import Definition, load_definition
from ..errors import ContextError, Problem
from ..formats import internal, is_tool_result
from ..managers.base import Environment
from ..messages import call_ids, check_messages
from ..summaries import message_key
from ..tokens import get_counter
from ..types import Hook, TraceEntry

if TYPE_CHECKING:
    from ..llm import ModelsConfig
    from ..offload import Offloader

__all__ = ["Conversation", "DefinitionSource", "Source", "Turn", "refuse_invalid"]

DefinitionSource = Any
"""A :class:`~ctxmgmt.Definition`, a file path, a shipped definition's name, a dict, or
``(client, name)`` for a definition stored on a registry server."""

log = logging.getLogger("ctxmgmt.adapters")


class Source:
    """A definition given in any form. One stored on a registry server is fetched at every
    use and rebuilt only when its version changed, as the server's own resolve does."""

    def __init__(self, definition: DefinitionSource) -> None:
        self._definition: Definition | None = None
        self._remote: tuple[Any, str] | None = None
        self._version: Any = None
        if isinstance(definition, Definition):
            self._definition = definition
        elif isinstance(definition, tuple):
            if len(definition) != 2 or not isinstance(definition[1], str):
                raise TypeError("give a registry definition as (client, name)")
            self._remote = (definition[0], definition[1])
        elif isinstance(definition, (str, Path, Mapping)):
            self._definition = load_definition(definition)
        else:
            raise TypeError(
                "definition must be a Definition, a path, a shipped name, a dict or (client, name); "
                f"got {type(definition).__name__}"
            )

    @property
    def name(self) -> str:
        return (
            self._definition.name if self._definition is not None else str(self._remote and self._remote[1])
        )

    def get(self) -> Definition:
        if self._remote is None:
            assert self._definition is not None
            return self._definition
        client, name = self._remote
        return self._built(client.get(name))

    async def aget(self) -> Definition:
        if self._remote is None:
            assert self._definition is not None
            return self._definition
        client, name = self._remote
        stored = client.get(name)
        if hasattr(stored, "__await__"):
            stored = await stored
        return self._built(stored)

    def _built(self, stored: Mapping[str, Any]) -> Definition:
        version = stored.get("version")
        if self._definition is None or version is None or version != self._version:
            body = {k: v for k, v in stored.items() if k in ("name", "description", "settings", "hooks")}
            self._definition = Definition.from_dict(body)
            self._version = version
        return self._definition


@dataclass(slots=True)
class Turn:
    """What the model sees for one call, and what the managers did to get there."""

    messages: list[Any]
    """The managed messages, in the conversation's format."""
    context: Context
    trace: list[TraceEntry] = field(default_factory=list)
    """The trace entries of every hook run of this turn: post_tool for each new group of tool
    results, then pre_llm."""
    reusable_prefix_tokens: int = 0
    """The tokens of this request's prefix (tools, system prompt, messages) identical to the
    previous request's: what the provider's prompt cache can serve."""
    usage: dict[str, Any] | None = None
    """Once the provider answered: ``{counted, calibrated, reported, reusable_prefix_tokens}``
    input tokens, and ``cached_tokens`` / ``cache_write_tokens`` when it reports them."""


class Conversation:
    """One conversation's managed view, kept as the runner keeps it.

    The framework keeps the complete record; ctxmgmt keeps the view the model saw last,
    with the record length it covers and the managers' state. Before each model call,
    the record's new messages are added to the view (``post_tool`` runs after each new
    group of tool results), then ``pre_llm`` runs. :attr:`saved` is JSON-able: adapters persist it
    where the framework keeps its state, and :meth:`load` restores it. A record that does
    not continue the saved one (another conversation) starts a new view.
    """

    def __init__(
        self,
        definition: DefinitionSource,
        *,
        models: ModelsConfig | None = None,
        offloader: Offloader | None = None,
        session: str = "default",
        format: str = "openai_chat",
        keep_view: bool = True,
        user_first: bool = False,
        pricing: Pricing | None = None,
    ) -> None:
        self.source = definition if isinstance(definition, Source) else Source(definition)
        self.calibration = Calibration()
        self.cache = PromptCache(pricing or ratios_for("anthropic" if format == "anthropic" else None))
        """The requests sent, for the reusable prefix and ``settings: {cache: aware}``; the
        last one is kept with the saved view, so that a conversation restored from it (the
        LangChain middleware's, at every call) measures against it."""
        self.environment = Environment(
            models,
            offloader,
            session,
            user_first=user_first,
            calibration=self.calibration,
            cache=self.cache,
        )
        self.format = format
        self.keep_view = keep_view
        """False when the framework keeps the managed messages itself (pydantic-ai)."""
        self.saved: dict[str, Any] = {}
        self._last: tuple[str | None, int, int] | None = None  # (model, counted, reusable) last sent

    def load(self, saved: Mapping[str, Any] | None) -> None:
        """Continue from a state that :attr:`saved` held (as the framework persisted it)."""
        self.saved = dict(saved) if isinstance(saved, Mapping) else {}
        ratios = self.saved.get("calibration")
        self.calibration = Calibration(ratios if isinstance(ratios, Mapping) else None)
        self.environment = replace(self.environment, calibration=self.calibration)
        view = self.saved.get("view")
        if isinstance(view, list):
            self.cache.restore(self.saved.get("cache"), view)

    def observe(self, reported: Any, *, cached: Any = None, written: Any = None) -> dict[str, Any] | None:
        """The provider's reported input tokens for the last prepared request: they calibrate
        the next ones. ``cached`` and ``written``: its prompt-cache figures, when it reports
        them. Returns ``{counted, calibrated, reported, reusable_prefix_tokens}`` (and
        ``cached_tokens``, ``cache_write_tokens``) for the record, or None when there was no
        request or no report."""
        if self._last is None:
            return None
        model, counted, reusable = self._last
        ratio = self.calibration.ratio(model)
        if self.calibration.observe(model, counted, reported) is None:
            return None
        self.saved["calibration"] = self.calibration.to_dict()
        record = {
            "counted": counted,
            "calibrated": round(counted * ratio),
            "reported": reported,
            "reusable_prefix_tokens": reusable,
        }
        for key, value in (("cached_tokens", cached), ("cache_write_tokens", written)):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                record[key] = value
        return record

    def prepare(self, record: Sequence[Any], **request: Any) -> Turn:
        """The managed messages for the next model call (see the class docstring).

        ``request``: ``system_prompt``, ``tools``, ``model``, ``context_window``."""
        definition = self.source.get()
        steps = self._steps(definition, record, request)
        result: ApplyResult | None = None
        try:
            while True:
                hook, context = steps.send(result)  # type: ignore[arg-type]
                result = definition.apply(hook, context, environment=self.environment)
        except StopIteration as done:
            turn: Turn = done.value
            return turn

    async def aprepare(self, record: Sequence[Any], **request: Any) -> Turn:
        """:meth:`prepare` for async frameworks: model calls do not block the event loop."""
        definition = await self.source.aget()
        steps = self._steps(definition, record, request)
        result: ApplyResult | None = None
        try:
            while True:
                hook, context = steps.send(result)  # type: ignore[arg-type]
                result = await definition.aapply(hook, context, environment=self.environment)
        except StopIteration as done:
            turn: Turn = done.value
            return turn

    def _steps(
        self, definition: Definition, record: Sequence[Any], request: Mapping[str, Any]
    ) -> Generator[tuple[str, Context], ApplyResult, Turn]:
        """The hook runs of one turn, as a step machine that a sync or an async driver runs."""
        view, upto, state = self._continued(record)
        if self.format == "openai_chat":  # the provider formats are checked whole when converted
            refuse_invalid(view, record[upto:], checked=view is self.saved.get("view"))
        context = Context(messages=view, state=state, format=self.format, **request)
        trace: list[TraceEntry] = []
        new = record[upto:]
        post_tool = bool(definition.hooks.get(Hook.POST_TOOL))
        for i, m in enumerate(new):
            context = context.append(m)
            # Once a group of tool results is all in, as the runner does: the newest results
            # are each seen once (a run per result would look at the whole group each time).
            last_of_group = i + 1 == len(new) or not is_tool_result(new[i + 1], self.format)
            if post_tool and last_of_group and is_tool_result(m, self.format):
                result = yield "post_tool", context
                context = result.context
                trace.extend(result.trace)
        result = yield "pre_llm", context
        trace.extend(result.trace)
        out = result.context
        # The request as counted (memoised: the hooks counted it), and what it reuses.
        way = internal(out)
        inner = way.context if way is not None else out
        counter = get_counter(inner.model, definition.tokenizer)
        counted = counter.context(inner)[0]
        reusable = self.cache.measure(inner, counter)
        self._last = (out.model, counted, reusable)
        if self.keep_view:
            self.saved = {
                "view": list(out.messages),
                "upto": len(record),
                "last": message_key(record[-1]) if record else None,
                "state": dict(out.state),
            }
        self.saved["calibration"] = self.calibration.to_dict()
        if self.keep_view and way is None:  # the saved view is the request's messages
            self.saved["cache"] = self.cache.export()
        for entry in trace:  # what changed something (or failed), not every gate that opened
            changed = (entry["tokens_before"], entry["messages_before"]) != (
                entry["tokens_after"],
                entry["messages_after"],
            )
            if entry["activated"] and (changed or entry["error"]):
                log.info(
                    "%s %s[%d] %s: %d -> %d tokens, %d -> %d messages%s",
                    definition.name,
                    entry["hook"],
                    entry["index"],
                    entry["type"],
                    entry["tokens_before"],
                    entry["tokens_after"],
                    entry["messages_before"],
                    entry["messages_after"],
                    f" (error: {entry['error']})" if entry["error"] else "",
                )
        return Turn(list(out.messages), out, trace, reusable)

    def _continued(self, record: Sequence[Any]) -> tuple[list[Any], int, dict[str, Any]]:
        """(view, how many record messages it covers, state): the saved view when the record
        continues the one it was made from, else a new view of the record."""
        saved = self.saved
        upto = saved.get("upto")
        view = saved.get("view")
        if (
            isinstance(upto, int)
            and isinstance(view, list)
            and 0 < upto <= len(record)
            and saved.get("last") == message_key(record[upto - 1])
        ):
            return view, upto, dict(saved.get("state") or {})
        # A new view: the record as it is; its newest tool results are new (post_tool runs).
        start = len(record)
        while start > 0 and is_tool_result(record[start - 1], self.format):
            start -= 1
        return list(record[:start]), start, {}


def refuse_invalid(view: Sequence[Any], new: Sequence[Any], *, checked: bool = False) -> None:
    """Raise :class:`~ctxmgmt.ContextError` when a request of OpenAI chat messages (the view
    the model saw, and the framework's messages since) is one the model's API refuses: a tool
    result that answers no call of the assistant message right before it (an orphan), a call
    with no result before the next message (dangling), a call or a result without an id. Every
    adapter refuses what the runner never makes and the Agents SDK adapter refuses in its
    format, rather than managing it and sending it on. With ``checked`` (a view saved from an
    earlier call, valid then) it costs the new messages: only the view's last tool-call group
    is checked again with them."""
    lo = len(view) if checked else 0
    while lo > 0 and view[lo - 1].get("role") == "tool":
        lo -= 1
    if lo > 0 and call_ids(view[lo - 1]):
        lo -= 1
    part = [*view[lo:], *new]
    problems = check_messages(part, offset=lo)
    if problems:
        fix = (
            "each tool result must follow the assistant message that calls it, with the same id, "
            "and each call needs its result before the next message: restore or remove the message"
        )
        raise ContextError([*problems, Problem("/messages", fix)])
