"""Provider message formats: OpenAI chat, Anthropic Messages, OpenAI Responses.

Managers work on one internal form, OpenAI chat messages. A context in another format is
converted to it before a hook runs and back after it: the output comes back in the input's
format, and the messages no manager touched come back as the very objects that came in.
The format is declared (``Context(format=...)``) or detected from the messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import takewhile
from types import ModuleType
from typing import Any, cast

from .._memo import shared
from ..context import ApplyResult, Context, checks_formats
from ..errors import ContextError, Problem
from ..history import IS_CHAT, History, Recent, items
from ..messages import foreign_kind, is_summary, last_task_index
from ..tokens import counts_formats
from ..types import FORMAT_NAMES
from . import anthropic, openai_chat, openai_responses
from ._common import Grown, Known
from ._turns import task_index, thinking_tokens, turn_head

__all__ = [
    "CHAT",
    "FORMAT_NAMES",
    "USER_FIRST",
    "Constraints",
    "Internal",
    "check",
    "detect",
    "internal",
    "is_tool_result",
]

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (openai_chat, anthropic, openai_responses)}


@dataclass(frozen=True, slots=True)
class Constraints:
    """What a provider asks of a managed list beyond the chat rules; built-in managers
    follow it, and the hook runner refuses any output that breaks it."""

    user_first: bool = False
    """The first message must be a user message (Anthropic): a window keeps fewer rather
    than start with another role, and a summary that goes first is a user message."""
    rule: Callable[[Sequence[Mapping[str, Any]]], str | None] | None = None
    """What the provider rejects in a list the chat rules allow, or None when it takes it."""
    turn_head: Callable[[Sequence[Mapping[str, Any]]], tuple[int, int, int] | None] | None = None
    """The head of the final turn that must stay as it is (Anthropic with thinking:
    :func:`~ctxmgmt.formats._turns.turn_head`): ``(user message, first assistant message, end of its tool
    results)``. Built-ins keep it, and a summary goes before its assistant message."""

    thinking: Callable[[Sequence[Mapping[str, Any]]], int] | None = None
    """About how many tokens of thinking the provider counts that no manager sees (the turn in
    progress's: :func:`~ctxmgmt.formats._turns.thinking_tokens`); the gates and the fit step
    count them with the messages."""

    task: Callable[[Sequence[Mapping[str, Any]]], int | None] | None = None
    """Where the current task is, when the format says more than the chat rule (the last user
    message that is not a summary): Anthropic's text beside tool results is no task."""

    def task_index(self, messages: Sequence[Mapping[str, Any]]) -> int | None:
        """Index of the current task, which managers with ``pin: task`` and the fit step keep."""
        return self.task(messages) if self.task is not None else last_task_index(messages)

    def task_indices(self, messages: Sequence[Mapping[str, Any]]) -> frozenset[int]:
        """The current task's messages: :meth:`task_index`, and when the provider wants a user
        message first (it merges consecutive user messages into one), the user messages that
        follow it before another role (a reminder left beside results a step removed, a second
        message the client sent), which the provider reads as part of it."""
        task = self.task_index(messages)
        if task is None:
            return frozenset()
        if not self.user_first:
            return frozenset((task,))
        msgs = items(messages)
        run = takewhile(lambda i: msgs[i].get("role") in _USER_RUN, range(task, len(msgs)))
        return frozenset(i for i in run if msgs[i].get("role") == "user" and not is_summary(msgs[i]))

    def hidden_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens the provider counts beyond the messages' own (:attr:`thinking`), or 0."""
        return self.thinking(messages) if self.thinking is not None and messages else 0

    def held(self, messages: Sequence[Mapping[str, Any]]) -> frozenset[int]:
        """What the fit step keeps besides the system messages and the summary: the task (all
        its messages, :meth:`task_indices`) and the final turn's head (:meth:`head`)."""
        return self.head(messages)[0] | self.task_indices(messages)

    def head(self, messages: Sequence[Mapping[str, Any]]) -> tuple[frozenset[int], int | None]:
        """The indices of the final turn's head that must stay (its user message, its first
        assistant message and that message's results), and where a summary goes so as not to
        split the turn (before that assistant message); ``(frozenset(), None)`` when none."""
        found = self.turn_head(messages) if self.turn_head is not None and messages else None
        if found is None:
            return frozenset(), None
        user, first, end = found
        return frozenset((user, *range(first, end))), first


def user_first_rule(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The first message after the system messages must be a user message."""
    for m in messages:
        role = m.get("role")
        if role not in ("system", "developer"):
            return (
                None
                if role == "user"
                else "the first message is not a user message, as the provider requires"
            )
    return None


_USER_RUN = ("user", "system", "developer")
"""The roles of a run of user messages a provider merges (its system messages go apart)."""

CHAT = Constraints()
USER_FIRST = Constraints(user_first=True, rule=user_first_rule, turn_head=turn_head, thinking=thinking_tokens)
"""For a caller whose provider wants a user message first in chat form (LangChain or
pydantic-ai in front of Claude, Gemini or Bedrock): ``Environment(user_first=True)``. A tool
loop whose first message its adapter marked as opening with thinking keeps that head (read as
Anthropic reads turns); the task is chat's (the last user message), as the provider may be
another."""
_CONSTRAINTS = {
    anthropic.NAME: Constraints(
        user_first=True, rule=anthropic.rule, turn_head=turn_head, thinking=thinking_tokens, task=task_index
    )
}
_KNOWN_CHAT = shared(Recent())  # emptied by ctxmgmt.tokens.clear_caches
"""The lists detected as chat last (as the token counter keeps the sequences it counted)."""
_KNOWN = {name: shared(Known()) for name in (anthropic.NAME, openai_responses.NAME)}
"""The histories converted last, by format: a new list that starts with one costs its new part."""


def detect(messages: Sequence[Any], system_prompt: Any = None) -> str:
    """The format of a message list: the first message in a provider's own format tells it;
    a list with none (plain role and text messages) is taken as OpenAI chat. Declare
    ``format: anthropic`` for such a list meant for Anthropic, whose rules differ (a user
    message first)."""
    if isinstance(system_prompt, list):
        return anthropic.NAME
    # A History remembers how far it is known to be chat: a grown one costs its new part; so
    # does a list handed again with messages added (its start is a list known to be chat).
    start = messages.known(IS_CHAT) if isinstance(messages, History) else 0
    if start and start == len(messages):
        return openai_chat.NAME  # known to be chat to its end (the same context applied again)
    if start == 0 and isinstance(messages, History):
        found_before = messages.memo.get(_FOUND)
        if found_before is not None and found_before[0] <= len(messages):
            return str(found_before[1])  # its first message in a provider's format is in its start
        known = _KNOWN_CHAT.prefix_of(messages)
        start = len(known) if known is not None else 0
    msgs = items(messages)  # a History's own list: indexing it is a Python call
    for i in range(start, len(messages)):
        found = foreign_kind(msgs[i])
        if found is not None and found[0] != "gemini":
            if isinstance(messages, History):
                messages.memo[_FOUND] = (i + 1, found[0])
            return found[0]
        if found is not None:
            return openai_chat.NAME  # not a format ctxmgmt converts: the chat check says so
    if isinstance(messages, History):
        messages.mark(IS_CHAT)  # every message is known to be chat now
        if start == 0 and len(messages):  # a grown one carries the fact on its log
            _KNOWN_CHAT.add(messages)
    return openai_chat.NAME


def is_tool_result(m: Any, format: str) -> bool:
    """Whether a message of this format carries tool results (after which post_tool runs)."""
    if not isinstance(m, Mapping):
        return False
    if format == anthropic.NAME:
        content = m.get("content")
        return (
            m.get("role") == "user"
            and isinstance(content, list)
            and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
        )
    if format == openai_responses.NAME:
        return openai_responses.is_output(m)
    return m.get("role") == "tool"


def name_of(context: Context) -> str:
    return context.format or detect(context.messages, context.system_prompt)


def check(context: Context, *, partial_tail: bool = True) -> list[Problem]:
    """Everything the context's provider would reject in its messages and system prompt. A
    History in a provider's format remembers how far it passed (and its conversion), so that
    checking it again, or a history grown from it, costs what is new."""
    name = name_of(context)
    module = _MODULES[name]
    messages = context.messages
    if partial_tail and isinstance(messages, History) and name in _KNOWN and grown(messages, name):
        problems: list[Problem] = module.check_system(context.system_prompt)
        return problems  # the messages passed (they are immutable): the system prompt only
    return list(module.check(messages, context.system_prompt, partial_tail=partial_tail))


def grown(messages: History, name: str) -> Grown | None:
    """What is known of a history in a provider's format: its messages pass the format's check
    (an open turn at its end allowed) and convert to the internal form. What it grew from
    (this history's start, or a history converted last that it starts with, message for
    message) is not checked or converted again. None when its messages break a rule."""
    marks = messages.memo
    key = (_GROWN, name)
    before: Grown | None = marks.get(key)
    n = len(messages)
    if before is not None and before.k == n:
        return before
    if before is None or before.k > n:  # nothing known of this log, or of an older view only
        before = _KNOWN[name].prefix_of(messages)
    now: Grown | None = _MODULES[name].advance(messages, before)
    if now is None:
        return None
    if marks.get(key) is None or marks[key].k < n:
        marks[key] = now
    _KNOWN[name].add(messages, now, before)
    return now


_GROWN = object()
"""The key of what a History knows of its own conversion and check (see :func:`grown`)."""
_FOUND = object()
"""The key of a History's mark of the format its first provider message told, and where."""


checks_formats(check)  # Context.from_dict checks through it


@dataclass(frozen=True, slots=True)
class Internal:
    """A context in the internal form, and the way back to its own format."""

    context: Context
    source: Context
    module: ModuleType

    @property
    def constraints(self) -> Constraints:
        """What the format asks of the managed list beyond the chat rules."""
        return _CONSTRAINTS.get(self.module.NAME, CHAT)

    def __call__(self, result: ApplyResult) -> ApplyResult:
        """The result in the source's format (the source itself when nothing changed)."""
        out = result.context
        if out is self.context:
            return ApplyResult(self.source, result.trace)
        # A list made here, never handed in: History.own, so it takes no place among the
        # lists History.of keeps to find one handed again.
        messages = History.own(self.module.back(out.messages))
        return ApplyResult(replace(self.source, messages=messages, state=out.state), result.trace)


@counts_formats
def _chat_form(context: Context) -> Context | None:
    """A context's chat form, as the token counter counts it (None: it is chat)."""
    converted = internal(context)
    return None if converted is None else converted.context


def internal(context: Context) -> Internal | None:
    """The context in the internal form, or None when it is OpenAI chat already. Raises
    ContextError naming every problem when the provider would reject the messages."""
    name = name_of(context)
    if name == openai_chat.NAME:
        return None
    module = _MODULES[name]
    messages = cast(History, context.messages)  # a Context holds a History
    known = grown(messages, name)  # None only when the messages break a rule
    problems = (
        module.check(messages, context.system_prompt, partial_tail=True)
        if known is None
        else module.check_system(context.system_prompt)
    )
    if problems:
        raise ContextError(problems)
    # The step check refused what the full one accepts (it should not): converted whole.
    converted = known.inner if known is not None else History.own(module.to_internal(messages))
    inner = context._derive(
        system_prompt=module.system_text(context.system_prompt), messages=converted, format=openai_chat.NAME
    )
    return Internal(inner, context, module)
