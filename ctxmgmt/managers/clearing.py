"""ToolResultClearingManager: old tool results become a placeholder (Anthropic's clear_tool_uses)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..archive import sizing_ref
from ..context import Context
from ..digest import trace_line
from ..formats._common import origin_of
from ..formats._turns import signed
from ..manager import ContextManager, Runtime
from ..marks import PLACEHOLDER, binding, find, sign, stamp
from ..messages import call_ids, is_recalled, text_of, trailing_tool_start
from ..truncation import with_text
from .base import builtin_schema

CLEARED = re.compile(
    r"\n\[cleared: original [\d,]{1,20} chars(?:; [^\]\n]{0,300})? #k=(?P<tag>[0-9a-f]{16})\]\Z"
)
"""The notice that ends a cleared result, signed by ctxmgmt (see :mod:`ctxmgmt.marks`)."""
CLEARED_MAX = 1000
"""A cleared result is the placeholder (at most 500 characters) and the notice: never longer."""
CLEARED_INPUT = "{}"
_SIGNED = frozenset({"thinking", "redacted_thinking", "reasoning"})


def cleared(m: Mapping[str, Any]) -> bool:
    """Whether a tool result is one this manager cleared: short, and ending with its notice
    signed for this very result (an output that writes or quotes a notice is not exempt)."""
    text = text_of(m.get("content"))
    return len(text) <= CLEARED_MAX and find(CLEARED, text, binding(m)) is not None


def _signed(m: Mapping[str, Any]) -> bool:
    """Whether a turn carries thinking or reasoning that must stay as it was (its tool calls'
    inputs included): an Anthropic turn with thinking blocks, a Responses call after reasoning,
    a framework's message its adapter marked so."""
    origin = origin_of(m)
    if origin is None:
        return signed(m)  # restored from a framework's saved state: the mark as a plain dict
    if signed(m):
        return True
    return any(isinstance(b, Mapping) and b.get("type") in _SIGNED for b in (*origin.blocks, *origin.group))


_TRACE_CHARS = 300
"""What the notice of a cleared result may hold besides its size (the CLEARED pattern's room)."""


def _calls(msgs: Any) -> dict[int, Mapping[str, Any]]:
    """Each tool result's call, the nearest before it with its id (as :func:`_names`)."""
    current: dict[str, Mapping[str, Any]] = {}
    out: dict[int, Mapping[str, Any]] = {}
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    current[str(call.get("id"))] = call
        elif m.get("role") == "tool" and str(m.get("tool_call_id")) in current:
            out[i] = current[str(m.get("tool_call_id"))]
    return out


def _names(msgs: Any) -> dict[int, str]:
    """Each tool result's tool name, from the nearest call before it with its id (an id that a
    later call reuses names that call's results, not the earlier ones)."""
    current: dict[str, str] = {}
    out: dict[int, str] = {}
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role == "assistant":
            for call in m.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    current[str(call.get("id"))] = str(call["function"].get("name"))
        elif role == "tool":
            name = current.get(str(m.get("tool_call_id")))
            if name is not None:
                out[i] = name
    return out


def _archived(runtime: Runtime, name: str | None, m: Mapping[str, Any]) -> bool:
    """Whether a cleared result is archived first (a recalled one is in its archive already)."""
    return runtime.offloader is not None and not is_recalled(name, m, runtime.holds)


class ToolResultClearingManager(ContextManager):
    """When the request has more than ``trigger`` tokens, every tool result but the newest
    ``keep`` becomes the placeholder with a notice of its size, as Anthropic's
    ``clear_tool_uses`` edit does, oldest first. Results the model has not answered yet and
    those of ``exclude_tools`` are never cleared; the recall tools' are cleared like any other
    (never archived again: their archive holds them).

    With ``clear_at_least`` it clears only when that frees at least so many tokens, so it
    edits seldom and in large steps (the prompt cache is rewritten seldom). With an offload
    store each result is archived first and its notice gives the reference that
    ``context_read`` recalls. A cleared result carries its notice, so a second run changes
    nothing. ``clear_tool_inputs`` also empties the arguments of those results' calls.
    """

    type_name = "ToolResultClearingManager"
    config_schema = builtin_schema(type_name)
    archives = True
    trusted = True

    def apply(self, context: Context, runtime: Runtime) -> Context:
        counter = runtime.counter
        trigger: int = self.config["trigger"]
        if trigger:
            tokens = counter.context(context)[0] * runtime.environment.ratio(context.model)
            if tokens <= trigger:
                runtime.details["note"] = f"{round(tokens):,} tokens, not over the trigger ({trigger:,})"
                return context
        msgs = context.messages
        names = _names(msgs)
        excluded = set(self.config["exclude_tools"])
        unanswered = trailing_tool_start(msgs)
        results = [i for i, m in enumerate(msgs) if m.get("role") == "tool"]
        keep: int = self.config["keep"]
        older = results[: max(0, len(results) - keep)]
        placeholder: str = self.config["placeholder"]
        calls = _calls(msgs)
        candidates: list[tuple[int, str, int]] = []  # (index, text, tokens freed)
        for i in older:
            m = msgs[i]
            if i >= unanswered or names.get(i) in excluded:
                continue
            if cleared(m):
                continue
            text = text_of(m.get("content"))
            before = counter.message(m, i)
            # Sized with the reference it will name (one that takes as many tokens as any) and
            # the tag unsigned (as many as any): what it frees is at least this.
            ref = sizing_ref("tool_result") if _archived(runtime, names.get(i), m) else None
            notice = self._notice(m, placeholder, text, ref, calls.get(i), signed=False)
            after = counter.message(with_text(m, notice))
            if before > after:
                candidates.append((i, text, before - after))
        freed = sum(f for _, _, f in candidates)
        if not candidates or freed < self.config["clear_at_least"]:
            runtime.details["cleared"] = 0
            if candidates:
                at_least = self.config["clear_at_least"]
                runtime.details["note"] = (
                    f"would free {freed:,} tokens, less than clear_at_least ({at_least:,})"
                )
            return context
        changed: dict[int, Mapping[str, Any]] = {}
        refs: list[str] = []
        for i, text, _ in candidates:
            m = msgs[i]
            ref = None
            if _archived(runtime, names.get(i), m):
                assert runtime.offloader is not None
                ref = runtime.offloader.store_tool_result(
                    runtime.session, text, tool_call_id=m.get("tool_call_id")
                )
                refs.append(ref)
            changed[i] = with_text(m, self._notice(m, placeholder, text, ref, calls.get(i)))
        if self.config["clear_tool_inputs"]:
            self._clear_inputs(msgs, {str(msgs[i].get("tool_call_id")) for i in changed}, changed)
        runtime.details["cleared"] = len(candidates)
        runtime.details["freed"] = freed
        if refs:
            runtime.details["offloaded"] = refs
        return context.splice((i, i + 1, (m,)) for i, m in sorted(changed.items()))

    @staticmethod
    def _notice(
        m: Mapping[str, Any],
        placeholder: str,
        text: str,
        ref: str | None,
        call: Mapping[str, Any] | None,
        *,
        signed: bool = True,
    ) -> str:
        """The placeholder and the notice, signed for the result ``m`` (``signed``; else with
        the placeholder tag, to size it): its size, a one-line trace of what it was (the call,
        its outcome, the specifics it held), and where it is stored when it was archived."""
        earlier = stamp(text, binding(m))  # a cut result: the size before the cut
        n = len(text) if earlier is None else earlier[0]
        stored = (
            "" if ref is None else f'; all of it is stored as {ref}: context_read(ref="{ref}") returns it'
        )
        trace = trace_line(call, text, m, _TRACE_CHARS - len(stored) - 2)
        said = f"; {trace}" if trace else ""
        notice = f"{placeholder}\n[cleared: original {n:,} chars{said}{stored} {PLACEHOLDER}]"
        return sign(notice, binding(m), notice.rindex(PLACEHOLDER)) if signed else notice

    @staticmethod
    def _clear_inputs(msgs: Any, ids: set[str], changed: dict[int, Mapping[str, Any]]) -> None:
        """The calls of the cleared results get empty arguments (a call whose results are
        all kept keeps its arguments)."""
        for i, m in enumerate(msgs):
            if m.get("role") != "assistant" or not ids.intersection(call_ids(m)) or _signed(m):
                continue  # a turn with thinking or reasoning keeps its calls as they were
            calls = [
                {**c, "function": {**c["function"], "arguments": CLEARED_INPUT}}
                if isinstance(c, dict) and str(c.get("id")) in ids and isinstance(c.get("function"), dict)
                else c
                for c in m.get("tool_calls") or ()
            ]
            if calls != m.get("tool_calls"):
                changed[i] = {**m, "tool_calls": calls}
