"""SlidingWindowManager: keep the newest messages, whole tool-call groups only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from ..context import Context
from ..history import items
from ..manager import ContextManager, Runtime
from ..messages import (
    SYSTEM_ROLES,
    call_ids,
    gaps,
    is_summary,
    pinned_positions,
    units_from_end,
)
from ..summaries import Draft, fit_room, fold, folded_size
from ..tokens import MESSAGE_OVERHEAD, REPLY_PRIMING
from .base import builtin_schema, target_tokens


class SlidingWindowManager(ContextManager):
    """Keeps at most ``max_messages`` non-system messages (and, with ``max_tokens``,
    a context within that many tokens), newest first; when the model called tools last,
    its call with the results and what came after them is kept whole whatever its size,
    with the summary beside it under ``summarize_removed`` (the model must see the results
    it asked for).

    System and developer messages are always kept. With ``pin: task`` the current
    task (the most recent user message) is kept and counts towards the cap, and a
    ctxmgmt summary is kept likewise unless ``keep_summary`` is false. A tool call
    and its results are kept or dropped together: when the newest N messages would
    start inside a group, the window starts after it and keeps fewer; for a provider that
    wants a user message first (Anthropic), it likewise starts at a user message (and, when
    that would leave none, keeps from the newest user message on). With an
    offload store, what it removes is archived first (``context_search`` finds it). With
    ``summarize_removed`` what it removes is merged into ctxmgmt's running summary (offline,
    without a model call, as the fit step does): the paths, commands, errors and ids of the
    removed messages stay in the request, in at most a fifth of the room (and at least 64
    tokens); the summary takes a place under ``max_messages`` (beside a newest call that takes
    them all, one more). It never grows the request:
    when the summary would cost more than what it replaces, older kept units go too (never the
    newest); when it would hold no item, the window removes as a plain one does.
    ``target_tokens`` / ``target_ratio`` cut the request further when it fires, so that
    it stays quiet for many calls (and the prompt cache is rewritten seldom). Under a token
    budget the newest unit is always kept.
    """

    type_name = "SlidingWindowManager"
    config_schema = builtin_schema(type_name)
    archives = True
    trusted = True

    def apply(self, context: Context, runtime: Runtime) -> Context:
        plan = self._plan(context, runtime, self._held(context, runtime))
        out = self._once(context, plan, runtime)
        if out is context or (runtime.constraints.turn_head is None and not runtime.constraints.user_first):
            return out  # chat's rules keep the same with fewer messages before
        # What the provider's rules keep can change with what went: a thinking loop's head is
        # kept only while an assistant message that opens without thinking follows it, and
        # text beside tool results opens a turn once they are gone. The window is drawn again
        # on what it keeps while that changes, so that a second apply changes nothing (with
        # the same messages kept, a second pass removes nothing; each pass removes, so it ends).
        details = dict(runtime.details)
        while plan.held.of(plan.msgs) != (held := self._held(out, runtime)).of(items(out.messages)):
            plan = self._plan(out, runtime, held)
            runtime.details.clear()
            more = self._once(out, plan, runtime)
            if more is out:
                break
            _merge(details, runtime.details)
            out = more
        runtime.details.clear()
        runtime.details.update(details)
        return out

    def _once(self, context: Context, plan: _Plan, runtime: Runtime) -> Context:
        """The window drawn on ``context`` applied (``context`` itself when it removes nothing)."""
        if self.config["summarize_removed"] and gaps(plan.boundary, sorted(plan.pinned)):
            out = self._fold(context, plan, runtime)
            if out is not None:
                return out
        gone = self._gone(plan, runtime)
        removed = sum(end - start for start, end in gone)
        if not removed:
            runtime.details["removed"] = 0
            return context
        msgs = plan.msgs
        if runtime.offloader is not None:
            # Archive first: nothing is removed unless it is safely stored.
            archived = [dict(msgs[i]) for start, end in gone for i in range(start, end)]
            runtime.details["offloaded"] = runtime.offloader.store_messages(runtime.session, archived)
        runtime.details["removed"] = removed
        runtime.details["kept"] = len(msgs) - removed
        return context.splice((start, end, ()) for start, end in gone)

    def _held(self, context: Context, runtime: Runtime) -> _Held:
        """What the provider's rules keep (a thinking loop's head), and the task when pinned."""
        head = runtime.constraints.head(context.messages)[0]
        pinned = self.config["pin"] == "task"
        return _Held(head, runtime.constraints.task_indices(context.messages) if pinned else frozenset())

    def _plan(self, context: Context, runtime: Runtime, held: _Held) -> _Plan:
        """The window drawn on ``context``: what is pinned, the places and tokens left beside
        it, and where the newest whole units that fit start."""
        msgs = items(context.messages)
        max_messages: int = self.config["max_messages"]
        max_tokens: int | None = self.config.get("max_tokens")
        target = target_tokens(self.config, context, runtime)
        if target is not None:
            max_tokens = target if max_tokens is None else min(max_tokens, target)
        head = held.head
        pinned = self._pinned(context.messages, msgs) | held.indices
        count = runtime.counter.message

        # The head of a thinking loop (see Constraints.head) is kept besides max_messages, as
        # the system messages are: counted against it, it could leave no place for the newest
        # round, and the agent would see its first round only.
        places = max_messages - sum(1 for i in pinned - head if msgs[i].get("role") not in SYSTEM_ROLES)
        budget = None
        if max_tokens is not None:
            budget = max_tokens - (
                runtime.counter.system_prompt(context.system_prompt)
                + runtime.counter.tools(context.tools)
                + REPLY_PRIMING
                + sum(count(msgs[i], i) for i in pinned)
            )
            if budget < 0:
                runtime.details["note"] = "the pinned messages alone exceed max_tokens"
        fresh = _fresh(msgs)
        boundary = _boundary(msgs, pinned, count, places, budget, fresh)
        kept = sum(1 for i in range(boundary, len(msgs)) if i not in pinned)
        if kept > places:  # only the newest call with its results is kept past the cap
            runtime.details["note"] = (
                f"kept more than max_messages ({max_messages}): the model's newest call with its "
                f"results and what came after them ({kept} message{'' if kept == 1 else 's'}) are kept "
                "whole; raise max_messages to keep a window beside them"
            )
        return _Plan(msgs, held, pinned, places, budget, max_tokens, fresh, boundary)

    def _gone(self, plan: _Plan, runtime: Runtime) -> list[tuple[int, int]]:
        """The runs the plain window removes: everything before the oldest kept unit, except
        what is pinned (for a provider that wants a user message first, from one)."""
        boundary = plan.boundary
        if runtime.constraints.user_first:
            boundary = _user_first(plan.msgs, plan.boundary, plan.pinned, plan.fresh)
            if boundary < plan.boundary:
                runtime.details["note"] = (
                    "kept more than max_messages: the provider wants a user message first, "
                    "and the newest one is further back"
                )
        return gaps(boundary, sorted(plan.pinned))

    def _fold(self, context: Context, plan: _Plan, runtime: Runtime) -> Context | None:
        """The window drawn again with a place and room for the running summary, and what it
        removes merged into that summary (older kept units too while the summary would cost
        more than what it replaces: a window never grows the request); None when there is no
        place for one, or the summary would show no item: the plain
        window applies then."""
        msgs, pinned, budget, fresh = plan.msgs, plan.pinned, plan.budget, plan.fresh
        count = runtime.counter.message
        held = sum(count(msgs[i], i) for i in pinned if is_summary(msgs[i]))
        room = full = _summary_room(runtime.room, plan.max_tokens)
        # The summary may grow to its room, and it takes a place when there is none yet.
        reserved = None if budget is None else budget - max(0, room + MESSAGE_OVERHEAD - held)
        boundary = _boundary(msgs, pinned, count, plan.places - (0 if held else 1), reserved, fresh)
        if boundary == len(msgs):
            return None  # no place for the summary beside what is kept
        dropped = [i for start, end in gaps(boundary, sorted(pinned)) for i in range(start, end)]
        freed = sum(count(msgs[i], i) for i in dropped)
        # The summary replaces the old one and the removed messages, and costs no more than
        # they did: when it would, older kept units go too (never the newest), so that it is
        # shown whole and the window stays quiet a while rather than show a stub.
        sized = folded_size(context, dropped, room, runtime)
        if sized is None:
            return None  # a summary with nothing to say: the plain window
        want, drawn = sized
        draft: Draft | None = drawn
        if held + freed < want:
            older = list(takewhile(lambda u: u[0] >= boundary, units_from_end(msgs)))[1:]  # not the newest
            for start, end in reversed([u for u in older if u[1] <= fresh]):  # the oldest first
                if held + freed >= want:
                    break
                more = [i for i in range(start, end) if i not in pinned]
                dropped += more
                freed += sum(count(msgs[i], i) for i in more)
                boundary = end
                draft = None  # drawn again by fold, with the older units
        # At most what it replaces (the old summary and the removed messages), and within
        # what max_tokens leaves beside the messages kept.
        room = min(room, held + freed)
        if budget is not None:
            kept = sum(count(msgs[i], i) for i in range(boundary, len(msgs)) if i not in pinned)
            room = min(room, budget + held - kept)
        out, ref = fold(
            context, dropped, boundary, room, runtime, seen=False, strict=True, keep=full, draft=draft
        )
        if out is None:
            return None
        if ref is not None:
            runtime.details["offloaded"] = ref
        runtime.details["removed"] = len(dropped)
        runtime.details["summarized"] = len(dropped)
        runtime.details["kept"] = len(out.messages) - 1
        return out

    def _pinned(self, history: Sequence[Mapping[str, Any]], msgs: Sequence[Mapping[str, Any]]) -> set[int]:
        """The system messages, and the summary unless the config lets it go."""
        return {
            i
            for i in pinned_positions(history)
            if self.config["keep_summary"] or self.config["summarize_removed"] or not is_summary(msgs[i])
        }


@dataclass(frozen=True, slots=True)
class _Held:
    """What a window keeps whatever its size: a thinking loop's head (see Constraints.head),
    kept besides max_messages, and the task (``pin: task``), counted against it."""

    head: frozenset[int]
    task: frozenset[int]
    """The task's messages (with a provider that merges a run of user messages, all of them)."""

    @property
    def indices(self) -> frozenset[int]:
        return self.head | self.task

    def of(self, msgs: Sequence[Mapping[str, Any]]) -> set[int]:
        """The identities of those messages in ``msgs`` (the same objects in a window's output)."""
        return {id(msgs[i]) for i in self.indices}


@dataclass(frozen=True, slots=True)
class _Plan:
    """The window drawn on one list (:meth:`SlidingWindowManager._plan`)."""

    msgs: Sequence[Mapping[str, Any]]
    held: _Held
    pinned: set[int]
    places: int
    """The messages the window may keep beside what is pinned."""
    budget: int | None
    """The tokens it may keep beside what is pinned, with ``max_tokens``."""
    max_tokens: int | None
    fresh: int
    """Where the stretch starts that it never removes (:func:`_fresh`)."""
    boundary: int
    """Where the newest whole units that fit start (:func:`_boundary`)."""


DEFAULT_SUMMARY_ROOM = 16_000
"""The room a summary is sized for when neither the window nor ``max_tokens`` is known."""


def _boundary(
    msgs: Sequence[Mapping[str, Any]],
    pinned: set[int],
    count: Any,
    places: int,
    budget: int | None,
    fresh: int,
) -> int:
    """Where the window starts: the newest whole units that take at most ``places`` messages
    and, with a ``budget``, that many tokens. The model's newest call with what came after it
    stays whatever its size or the budget (the results the model has not read yet), and so
    does the newest unit whatever the budget (its newest turn); the fit step cuts them if need be.
    Only what is kept (and one unit more) is looked at."""
    boundary = len(msgs)
    used = 0
    for start, end in units_from_end(msgs):
        if all(i in pinned for i in range(start, end)):  # pinned alone, or a loop's pinned head
            continue
        size = end - start
        fresh_unit = start >= fresh  # kept whatever its size or the budget
        if used + size > places and not fresh_unit:
            break
        if budget is not None:
            cost = sum(count(msgs[i], i) for i in range(start, end))
            if cost > budget and not fresh_unit and boundary < len(msgs):
                break
            budget -= cost
        used += size
        boundary = start
    return boundary


def _merge(details: dict[str, Any], more: Mapping[str, Any]) -> None:
    """A later pass's trace details added to the first's: counts summed, archives listed."""
    for key, value in more.items():
        if key in ("removed", "summarized"):
            details[key] = details.get(key, 0) + value
        elif key == "offloaded":
            details[key] = [*_refs(details.get(key)), *_refs(value)]
        else:
            details[key] = value


def _refs(offloaded: Any) -> list[Any]:
    return [] if offloaded is None else [offloaded] if isinstance(offloaded, str) else list(offloaded)


def _fresh(msgs: Sequence[Mapping[str, Any]]) -> int:
    """Where the stretch starts that the window never removes (``len(msgs)``: none): the
    model's newest call, when it called tools last, with its results and what came after them
    (the user's text beside them: in Anthropic's one turn, a message of its own here). A model
    that no longer sees the results of the calls it just made makes them again."""
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "assistant":
            return i if call_ids(msgs[i]) else len(msgs)
    return len(msgs)


def _summary_room(room: int | None, max_tokens: int | None) -> int:
    """The tokens the running summary may take: what the fit step gives its own summary in
    the request's room (or within ``max_tokens``, when smaller)."""
    known = [r for r in (room, max_tokens) if r is not None]
    return fit_room(min(known) if known else DEFAULT_SUMMARY_ROOM)


def _user_first(msgs: Sequence[Mapping[str, Any]], boundary: int, pinned: set[int], fresh: int) -> int:
    """The boundary moved past whole units until the first kept message is a user message,
    for a provider that wants one first: the window keeps fewer rather than start otherwise.
    When that would keep nothing, or move past ``fresh`` (see :func:`_fresh`), it keeps from
    the user message before instead."""
    head = min((i for i in pinned if msgs[i].get("role") not in SYSTEM_ROLES), default=None)
    n = len(msgs)
    stop = min(n, fresh)
    start = boundary
    while boundary < stop and (head is None or head > boundary):
        if msgs[boundary].get("role") == "user":
            return boundary
        end = boundary + 1  # past the unit: a message, or a call with its results
        if call_ids(msgs[boundary]):
            while end < n and msgs[end].get("role") == "tool":
                end += 1
        boundary = end
        while boundary < n and msgs[boundary].get("role") in SYSTEM_ROLES:
            boundary += 1
    if boundary >= stop and (head is None or head > boundary):
        return next((i for i in range(start - 1, -1, -1) if msgs[i].get("role") == "user"), start)
    return boundary
