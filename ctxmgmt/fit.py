"""The fit step: every ``pre_llm`` run ends with a request that fits its window.

A request fits when its system prompt, tool schemas and messages, plus the tokens
reserved for the reply (``settings.reserve_output_tokens``, by default
``min(8192, context_window // 4)``), are at most ``context_window``. When the
definition's own entries leave more, this step, traced as its own entry of type
``fit``, makes it fit:

1. it removes the oldest whole units (a message, or a tool call with all its
   results), never the system messages or the pinned task, and neither
   the newest unit nor the newest tool-call group yet; what it removes is archived
   first when a store is given, and merged into the running summary, so nothing
   removed is lost;
2. if that is not enough, it cuts the largest tool results that are kept, with the
   usual truncation notice (archived first when a store is given);
3. if even that is not enough, it shortens the summary, when that keeps the newest units;
   then it removes the system and developer messages along the conversation (an agent's
   reminder every turn), oldest first (archived and merged into the summary as units are),
   then those of the system prompt (the ones the hook's input opens with) but the first;
   never the newest;
4. if even that is not enough, it removes those newest units too, then shrinks its own
   summary to what is left (its least important items first, down to the one-line guide),
   or removes it: a summary is ctxmgmt's, not something the request must carry;
5. only if the system prompt, tool schemas, the system messages left, the task and the
   reserve alone exceed the window, it raises :class:`~ctxmgmt.ContextError` naming the
   numbers.

``settings: {fit: false}`` turns the step off. With ``settings: {cache: aware}`` step 1
removes old units down to three quarters of the room, not just under it: a step that cut
only what the next call needs would fire again on every call and rewrite the prompt cache
each time (the hysteresis every reducing built-in has).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import takewhile
from typing import Any

from .context import Context
from .errors import ContextError, CtxmgmtError, Problem
from .formats import Constraints
from .manager import Runtime
from .marks import binding, offloaded, stamp
from .messages import (
    SYSTEM_ROLES,
    is_recalled,
    is_summary,
    text_of,
    tool_names,
    units,
)
from .rules import Facts
from .summaries import fit_room, fitted, fold, previous
from .tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TokenCounter
from .truncation import cut, with_text

__all__ = ["DEFAULT_RESERVE_CAP", "Fit", "input_limit", "must_stay", "reply_reserve", "reserve_tokens"]

DEFAULT_RESERVE_CAP = 8192
CACHE_TARGET = 0.75
"""With cache: aware, step 1 removes old units down to this share of the room."""
_MIN_RESULT_TOKENS = 48
"""A tool result is not cut below this many tokens of content (its notice needs ~30)."""
_NOTICE_TOKENS = 80
"""About the most a truncation notice with a reference costs."""
_RESERVE_ROUNDS = 4
"""The most times the step fits again with the reserve of its own output (it grows toward
a bound, half the window, in one or two rounds)."""


def reserve_tokens(window: int, settings: Mapping[str, Any]) -> int:
    """The tokens the definition keeps free for the reply."""
    value = settings.get("reserve_output_tokens")
    return min(DEFAULT_RESERVE_CAP, window // 4) if value is None else int(value)


def reply_reserve(
    context: Context,
    settings: Mapping[str, Any],
    counter: TokenCounter,
    constraints: Constraints,
    ratio: float,
) -> int:
    """The provider's tokens kept free for a request's reply: the definition's reserve, or the
    reply's limit the request asks (``context.max_output_tokens``, its ``max_tokens``) when
    that is more, since a provider refuses a request whose input and reply limit together pass
    the window (``ratio``: the calibration, provider tokens per counted one).

    A limit is honoured up to half the window, and up to half the room the definition's
    reserve leaves the conversation beside what must stay (:func:`must_stay`): past that it is
    most likely a client's default made for the model's whole window, where the window managed
    to is a threshold chosen below it (Claude Code asks 32,000 whatever window it is given),
    and honouring it would leave the conversation no room."""
    window, asked = context.context_window, context.max_output_tokens
    assert window
    reserve = reserve_tokens(window, settings)
    if asked is None or asked <= reserve:
        return reserve
    must = must_stay(context, counter, constraints, ratio)
    return max(reserve, min(asked, window // 2, reserve + max(0, window - must - reserve) // 2))


def input_limit(context: Context, reserve: int, ratio: float, constraints: Constraints) -> int:
    """The counted tokens a request may have: the window less the reply's ``reserve`` (see
    :func:`reply_reserve`), in counted tokens (``ratio``: provider tokens per counted one),
    less the thinking of the turn in progress, which the provider counts and no step frees."""
    assert context.context_window
    room = int((context.context_window - reserve) / ratio)
    return room - constraints.hidden_tokens(context.messages)


def must_stay(context: Context, counter: TokenCounter, constraints: Constraints, ratio: float) -> int:
    """The provider's tokens of what no step removes: the system prompt (or, without one, the
    system messages the conversation opens with), the tool schemas, the task and the other
    messages held, the reply's priming and the thinking of the turn in progress."""
    messages = context.messages
    held = sum(counter.message(messages[i]) for i in constraints.held(messages))
    opening = _opening_tokens(context, counter)
    fixed = counter.system_prompt(context.system_prompt) + counter.tools(context.tools) + REPLY_PRIMING
    return round((fixed + opening + held + constraints.hidden_tokens(messages)) * ratio)


def _opening_tokens(context: Context, counter: TokenCounter) -> int:
    """The counted tokens of a chat conversation's system prompt: the system messages it opens
    with. Beside a prompt of its own (Anthropic's), system messages are reminders along the
    conversation, whatever their place once a summary took the turns between them (the
    provider's form moves them): none."""
    if context.system_prompt is not None:
        return 0
    opening = takewhile(lambda m: m[1].get("role") in SYSTEM_ROLES, enumerate(context.messages))
    return sum(counter.message(m, i) for i, m in opening)


class _Gate:
    """The fit step's gate: fires when the request plus the reserve exceeds the window."""

    def __init__(self, settings: Mapping[str, Any], reserve: int | None) -> None:
        self.settings = settings
        self.reserve = reserve

    def evaluate(self, facts: Facts) -> tuple[bool, dict[str, Any]]:
        window = facts.context_window
        if not window:
            return False, {"note": "the context window is unknown; set context_window"}
        reserve = reserve_tokens(window, self.settings) if self.reserve is None else self.reserve
        tokens = facts.window_tokens
        fired = tokens + reserve > window
        need = {"limit": window, "value": tokens + reserve, "met": fired}
        return fired, {"tokens_plus_reserve_exceed": need, "reserve_output_tokens": reserve}


class Fit:
    """Makes a context fit its window (see the module docstring)."""

    type_name = "fit"
    archives = True
    trusted = True

    def __init__(
        self,
        settings: Mapping[str, Any],
        reserve: int | None = None,
        reserve_of: Callable[[Context], int] | None = None,
        opening: Context | None = None,
    ) -> None:
        """``reserve``: the tokens kept for the reply (:func:`reply_reserve`) of the context
        the step is given, by default the definition's; ``reserve_of``: that reserve for the
        step's output, when it depends on what the step cuts (a reply's limit sized beside
        what must stay); ``opening``: the context whose first system messages are the system
        prompt (the hook's input: once a window removed what lay between, the system messages
        along the conversation follow them)."""
        self.activation = _Gate(settings, reserve)
        self.settings = settings
        self.reserve = reserve
        self.reserve_of = reserve_of
        self.opening = opening

    def apply(self, context: Context, runtime: Runtime) -> Context:
        window = context.context_window
        assert window is not None  # the gate does not fire without one
        reserve = reserve_tokens(window, self.settings) if self.reserve is None else self.reserve
        runtime.details["removed"] = 0
        given = (self.opening or context).messages
        prompt = {id(m) for m in takewhile(lambda m: m.get("role") in SYSTEM_ROLES, given)}
        out = self._fit(context, runtime, reserve, prompt)
        # Cutting what must stay (a thinking loop's results) leaves the reply more room, so
        # the reserve of the output can be larger: fit again with it until it holds, or a
        # second apply would find the output over its window.
        for _ in range(_RESERVE_ROUNDS):
            if self.reserve_of is None or (again := self.reserve_of(out)) <= reserve:
                break
            reserve = again
            out = self._fit(out, runtime, reserve, prompt)
        return out

    def _fit(self, context: Context, runtime: Runtime, reserve: int, prompt: set[int]) -> Context:
        """Fit ``context`` to its window less ``reserve`` (the steps the module names);
        ``prompt``: the identities of its system prompt's messages."""
        window = context.context_window
        assert window is not None
        # In counted tokens: the provider counts ``ratio`` times as many (calibration).
        ratio = runtime.environment.window_ratio(context.model)
        base = int((window - reserve) / ratio)
        hidden = runtime.constraints.hidden_tokens

        def room(ctx: Context) -> int:
            """The budget for a context's counted tokens: less the thinking of its turn in
            progress, which the provider counts and only removing its message frees."""
            return base - hidden(ctx.messages)

        budget = room(context)
        counter = runtime.counter
        held = runtime.constraints.held
        spans = _removable(context.messages, held(context.messages))
        summary_room = fit_room(budget)
        # 1. The oldest whole units; not yet the newest unit and the newest tool-call group,
        #    whose results step 2 cuts rather than removes.
        newest = {spans[-1]} if spans else set()
        groups = [u for u in spans if u[1] - u[0] > 1 or context.messages[u[0]].get("tool_calls")]
        newest.update(groups[-1:])
        target = int(budget * CACHE_TARGET) if self.settings.get("cache") == "aware" else budget
        # Only the units older than both: removing one past a kept unit would leave the kept
        # one ahead of the summary (an assistant first, which a user_first provider rejects).
        first_kept = min((u[0] for u in newest), default=len(context.messages))
        out = self._drop(context, [u for u in spans if u[1] <= first_kept], target, summary_room, runtime)
        # 2. The largest tool results that are kept.
        if counter.context(out)[0] > (budget := room(out)):
            out = self._cut(out, budget, runtime)
        # 3. A shorter summary, when that is enough to keep the newest units; then the system
        #    messages along the conversation (reminders), then the prompt's but its first.
        if counter.context(out)[0] > (budget := room(out)):
            out = _fit_summary(out, budget, runtime, remove=False)
        if counter.context(out)[0] > (budget := room(out)) and (later := _later_system(out.messages, prompt)):
            removed = runtime.details["removed"]
            out = self._drop(out, later, budget, summary_room, runtime)
            gone = runtime.details["removed"] - removed
            runtime.details["system_removed"] = runtime.details.get("system_removed", 0) + gone
        # 4. The newest unit too, then the summary shrunk to what is left, or removed.
        if counter.context(out)[0] > (budget := room(out)) and (
            last := _removable(out.messages, held(out.messages))
        ):
            out = self._drop(out, last, budget, summary_room, runtime)
        if counter.context(out)[0] > (budget := room(out)):
            out = _fit_summary(out, budget, runtime, remove=True)
        total = counter.context(out)[0]
        if total > room(out):
            looped = runtime.constraints.head(context.messages)[1] is not None
            raise _too_large(out, runtime, window, reserve, looped)
        return out

    def _drop(
        self,
        context: Context,
        spans: Sequence[tuple[int, int]],
        budget: int,
        summary_room: int,
        runtime: Runtime,
    ) -> Context:
        """Remove the oldest of ``spans`` until the context fits, merging them into the
        summary (archived first with a store)."""
        counter = runtime.counter
        msgs = context.messages
        total = counter.context(context)[0]
        old_summary = sum(counter.message(m, i) for i, m in enumerate(msgs) if is_summary(m))
        # The new summary replaces the old one and takes at most summary_room tokens.
        growth = max(0, summary_room + MESSAGE_OVERHEAD - old_summary)
        removed: list[int] = []
        cut = 0
        freed = 0
        for start, end in spans:
            if total - freed + growth <= budget:
                break
            removed.extend(range(start, end))
            freed += sum(counter.message(msgs[i], i) for i in range(start, end))
            cut = max(cut, end)  # spans may come out of order (the system prompt's last)
        if not removed:
            return context
        out, ref = fold(context, sorted(removed), cut, summary_room, runtime)
        assert out is not None  # not strict: always a summary
        if ref is not None:
            runtime.details.setdefault("offloaded", []).append(ref)
        runtime.details["removed"] += len(removed)
        return out

    def _cut(self, context: Context, budget: int, runtime: Runtime) -> Context:
        """Cut the largest kept tool results until the context fits (recalled ones last)."""
        counter = runtime.counter
        msgs = context.messages
        names = tool_names(msgs)
        results = [i for i, m in enumerate(msgs) if m.get("role") == "tool"]
        results.sort(
            key=lambda i: (
                is_recalled(names.get(str(msgs[i].get("tool_call_id"))), msgs[i]),
                -counter.message(msgs[i], i),
            )
        )
        need = counter.context(context)[0] - budget
        # Cut nothing (and archive nothing) when even the shortest cuts cannot fit.
        room = sum(max(0, counter.message(msgs[i], i) - _MIN_RESULT_TOKENS - _NOTICE_TOKENS) for i in results)
        cuts = runtime.details.setdefault("cut", 0)
        if room < need:
            return context
        changed: dict[int, Mapping[str, Any]] = {}
        for i in results:
            if need <= 0:
                break
            m = msgs[i]
            content_tokens = counter.text(text_of(m.get("content")))
            target = max(_MIN_RESULT_TOKENS, content_tokens - need - 8)
            if target >= content_tokens:
                continue
            new = _shrink(m, target, runtime)
            need -= counter.message(m, i) - counter.message(new)
            changed[i] = new
        runtime.details["cut"] = cuts + len(changed)
        if not changed:
            return context
        return context.splice((i, i + 1, (m,)) for i, m in sorted(changed.items()))


def _fit_summary(context: Context, budget: int, runtime: Runtime, *, remove: bool) -> Context:
    """The context with its summary shrunk to the room the rest leaves; with ``remove``, the
    summary goes when not even its first line fits (its running state stays), and without,
    the context is returned unchanged then."""
    counter = runtime.counter
    msgs = context.messages
    at = next((i for i in range(len(msgs) - 1, -1, -1) if is_summary(msgs[i])), None)
    if at is None:
        return context
    total = counter.context(context)[0]
    room = budget - (total - counter.message(msgs[at], at))
    sections, summarized, archives = previous(context)
    message, _ = fitted(sections or {}, summarized, archives, room, str(msgs[at]["role"]), counter)
    if counter.message(message) <= room:
        # The running summary keeps its items: a later summary with more room shows them again.
        runtime.details["summary_shrunk"] = counter.message(message)
        return context.splice([(at, at + 1, (message,))])
    if not remove:
        return context
    runtime.details["summary_removed"] = True
    return context.splice([(at, at + 1, ())])


def _pinned(msgs: Sequence[Mapping[str, Any]], held: frozenset[int]) -> set[int]:
    """What the fit step does not remove as a unit: system and developer messages, the task
    and the head of a turn the provider needs whole (``held``: see Constraints.held), and the
    summary (which it shrinks instead, step 4). The system messages it removes only at step
    3 (:func:`_later_system`)."""
    pinned = {i for i, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES or is_summary(m)}
    pinned |= held
    return pinned


def _removable(msgs: Sequence[Mapping[str, Any]], held: frozenset[int]) -> list[tuple[int, int]]:
    """The units the fit step may remove, oldest first: all but the pinned messages."""
    pinned = _pinned(msgs, held)
    return [u for u in units(msgs) if u[0] not in pinned]


def _later_system(msgs: Sequence[Mapping[str, Any]], prompt: set[int]) -> list[tuple[int, int]]:
    """The system and developer messages the step may remove, in the order it removes them:
    those along the conversation, oldest first, then those of its system prompt (``prompt``,
    by identity) but the first; never the newest. An agent that adds a reminder every turn
    would otherwise pile up more than any window holds."""
    system = [i for i, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES][:-1]
    ours = [i for i in system if id(msgs[i]) in prompt]
    later = [i for i in system if id(msgs[i]) not in prompt]
    return [(i, i + 1) for i in [*later, *ours[1:]]]


def _shrink(m: Mapping[str, Any], tokens: int, runtime: Runtime) -> dict[str, Any]:
    """A tool result cut to ``tokens`` tokens of content. Its whole text is archived first
    with a store; an output cut before is cut again from its archived original when there
    is one, and its notice keeps the original's size either way."""
    text = text_of(m.get("content"))
    bound = binding(m)
    source, ref, original = text, None, stamp(text, bound)
    store = runtime.offloader
    if store is not None:
        earlier = offloaded(text, bound) if original is not None else None
        try:
            if earlier is not None and original is not None:
                ref = earlier
                archived = store.read(runtime.session, ref).text
                if len(archived) != original[0]:  # a quoted notice, not ctxmgmt's own
                    original = None
                    raise CtxmgmtError("not the archive this notice states")
                source, original = archived, None
        except CtxmgmtError:  # not this session's archive: store what is here instead
            ref = None
        if ref is None:
            ref = store.store_tool_result(runtime.session, text, tool_call_id=m.get("tool_call_id"))
            runtime.details.setdefault("offloaded", []).append(ref)
    cut_text = cut(
        source,
        runtime.counter,
        bound,
        max_chars=max(64, len(text)),
        max_tokens=tokens,
        ref=ref,
        original=original,
    )
    return with_text(m, cut_text)


def _too_large(context: Context, runtime: Runtime, window: int, reserve: int, looped: bool) -> ContextError:
    """The error for a context that cannot fit, in the provider's tokens (calibrated);
    ``looped``: the head of a thinking loop is among what must stay."""
    counter = runtime.counter
    ratio = runtime.environment.window_ratio(context.model)
    messages = counter.messages(context.messages)[0]
    opening = _opening_tokens(context, counter)
    parts = [counter.system_prompt(context.system_prompt) + opening, counter.tools(context.tools)]
    parts.append(messages - opening)
    parts.append(counter.context(context)[0] - sum(parts))  # the reply's priming
    parts.append(runtime.constraints.hidden_tokens(context.messages))
    prompt, tools, kept, priming, thinking = (round(n * ratio) for n in parts)
    need = prompt + tools + kept + priming + thinking + reserve  # the parts, as named, add up
    what = "the task and system messages"
    if looped:
        what += ", and the first call of a tool loop that opens with thinking, with its results"
    thought = f", the thinking of the turn in progress (about {thinking:,})" if thinking else ""
    budget = ", lower the model's thinking budget (budget_tokens)" if thinking else ""
    return ContextError(
        [
            Problem(
                "/context_window",
                f"the request cannot fit: the system prompt ({prompt:,} tokens), the tool schemas "
                f"({tools:,}), the messages that must stay ({what}: "
                f"{kept:,}){thought}, the reply's priming ({priming:,}) and the reserve for the reply "
                f"({reserve:,}) need {need:,} tokens, "
                f"and the window is {window:,}; shorten the system prompt or the task, send fewer "
                f"tools{budget}, lower settings.reserve_output_tokens, or use a model with a larger window",
            )
        ]
    )
