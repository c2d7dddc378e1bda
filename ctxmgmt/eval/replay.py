"""Replay recorded conversations call by call through definitions, and measure each request.

Before each assistant message of a recorded conversation (a model call), the request is what
the runner would have sent: the managed view carried forward from the previous call, the new
messages since, ``post_tool`` over each new group of tool results, then ``pre_llm``, at the
given window. The bookkeeping is the one every adapter shares
(:class:`ctxmgmt.agents.conversation.Conversation`), with a throwaway offload store per replay
so that archiving definitions work. Two baselines are measured on the same calls: a sliding
window sending as many tokens as the definition did, and observation masking.

A *needed specific* at a call is a path, command, error line, number or id of a message sent
before that call that the request no longer holds as it was (removed, summarised or cut),
which the agent itself uses again in that call or later (in its own messages or tool calls).
It is *kept* when the request still holds it verbatim (summary and system prompt included).
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..agents.conversation import Conversation
from ..archive import repeatable_refs
from ..cache import Pricing, PromptCache, ratios_for
from ..context import Context
from ..definitions import Definition, load_definition
from ..errors import ContextError, CtxmgmtError, Problem
from ..messages import check_messages, text_of
from ..offload import LocalOffloader
from ..tokens import REPLY_PRIMING, TokenCounter, get_counter
from .specifics import CATEGORIES, message_specifics, message_text

__all__ = [
    "BASELINE_MASKING",
    "BASELINE_WINDOW",
    "MASK_PLACEHOLDER",
    "Call",
    "Chat",
    "ConversationLike",
    "Row",
    "bare_model",
    "evaluate_rows",
]

BASELINE_WINDOW = "sliding-window"
BASELINE_MASKING = "observation-masking"
MASK_PLACEHOLDER = "[earlier tool output omitted]"
FIRINGS = {
    "fit": "fit",
    "SummarizationManager": "summarizer",
    "AutoCompactManager": "summarizer",
    "ToolResultClearingManager": "clearing",
    "ToolResultCompactionManager": "clearing",
    "ToolsOutputTruncateManager": "truncation",
    "SlidingWindowManager": "window",
}
"""A trace entry's type -> the kind of firing the report counts (others: ``other``)."""
FIRING_KINDS = ("fit", "summarizer", "clearing", "truncation", "window", "other")
MAX_WINDOW = 10_000_000


class ConversationLike(Protocol):
    """A recorded conversation, as the readers give it: messages in the OpenAI chat format."""

    @property
    def id(self) -> str: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def messages(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def tools(self) -> Sequence[Mapping[str, Any]] | None: ...
    @property
    def model(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Chat:
    """A plain conversation (what ``ctxmgmt apply`` reads: system prompt, messages, tools)."""

    id: str
    messages: Sequence[Mapping[str, Any]]
    system_prompt: str | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    model: str | None = None
    source: str = ""


@dataclass(slots=True)
class Call:
    """One model call as a definition (or a baseline) would have sent it."""

    conversation: str
    call: int
    """1 for the conversation's first model call."""
    tokens: int = 0
    reusable: int = 0
    cost: float = 0.0
    over_window: bool = False
    invalid: bool = False
    refused: str | None = None
    """Why no request was made (the fit step's "cannot fit", a manager that failed)."""
    trace_errors: int = 0
    fired: dict[str, int] = field(default_factory=dict)
    time_ms: float = 0.0
    needed: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation": self.conversation,
            "call": self.call,
            "tokens": self.tokens,
            "reusable_prefix_tokens": self.reusable,
            "estimated_cost": round(self.cost, 8),
            "over_window": self.over_window,
            "invalid": self.invalid,
            "refused": self.refused,
            "trace_errors": self.trace_errors,
            "fired": dict(self.fired),
            "time_ms": round(self.time_ms, 3),
            "needed": dict(self.needed),
            "kept": dict(self.kept),
        }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


@dataclass(slots=True)
class _Totals:
    calls: int = 0
    tokens: int = 0
    max_tokens: int = 0
    reusable: int = 0
    cost: float = 0.0
    over_window: int = 0
    invalid: int = 0
    refused: int = 0
    trace_errors: int = 0
    fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIRING_KINDS, 0))
    times: list[float] = field(default_factory=list)
    needed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))

    def add(self, c: Call) -> None:
        self.calls += 1
        self.tokens += c.tokens
        self.max_tokens = max(self.max_tokens, c.tokens)
        self.reusable += c.reusable
        self.cost += c.cost
        self.over_window += c.over_window
        self.invalid += c.invalid
        self.refused += c.refused is not None
        self.trace_errors += c.trace_errors
        for kind, n in c.fired.items():
            self.fired[kind] += n
        self.times.append(c.time_ms)
        for cat in CATEGORIES:
            self.needed[cat] += c.needed.get(cat, 0)
            self.kept[cat] += c.kept.get(cat, 0)

    def to_dict(self) -> dict[str, Any]:
        sent = self.calls - self.refused
        needed, kept = sum(self.needed.values()), sum(self.kept.values())
        return {
            "calls": self.calls,
            "tokens_sent": self.tokens,
            "tokens_per_call": {
                "mean": round(self.tokens / sent, 1) if sent else None,
                "max": self.max_tokens,
            },
            "estimated_cost": round(self.cost, 8),
            "reusable_prefix_share": _share(self.reusable, self.tokens),
            "over_window": self.over_window,
            "invalid_requests": self.invalid,
            "refused": self.refused,
            "trace_errors": self.trace_errors,
            "firings": dict(self.fired),
            "time_ms": {
                "median": round(statistics.median(self.times), 3) if self.times else None,
                "max": round(max(self.times), 3) if self.times else None,
            },
            "needed": dict(self.needed),
            "kept": dict(self.kept),
            "kept_share": {cat: _share(self.kept[cat], self.needed[cat]) for cat in CATEGORIES}
            | {"all": _share(kept, needed)},
        }


@dataclass(slots=True)
class Row:
    """One line of the report: a definition at a window, or a baseline."""

    name: str
    kind: str
    """``definition``, ``sliding_window`` (sized like the definition ``of``) or ``observation_masking``."""
    window: int
    of: str | None = None
    totals: _Totals = field(default_factory=_Totals)
    conversations: dict[str, _Totals] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    keep_calls: bool = True

    def add(self, c: Call) -> None:
        self.totals.add(c)
        self.conversations.setdefault(c.conversation, _Totals()).add(c)
        if self.keep_calls:
            self.calls.append(c)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "window": self.window,
            "of": self.of,
            **self.totals.to_dict(),
            "per_conversation": [{"id": cid, **t.to_dict()} for cid, t in self.conversations.items()],
            "per_call": [c.to_dict() for c in self.calls],
        }


def bare_model(model: str | None) -> str | None:
    """The model without a provider prefix: Inspect AI and routers name it ``openai/gpt-4o``
    or ``anthropic/claude-sonnet-4-0``, tiktoken and the price tables ``gpt-4o``."""
    if not model or "/" not in model.rstrip("/"):
        return model
    return model.rstrip("/").rsplit("/", 1)[-1]


# -- one conversation, prepared once for every definition and window ---------------------
class _Prepared:
    """A conversation's messages with what every replay of it needs, computed once: the
    calls' positions, each message's tokens and specifics, where each specific is used last
    by the agent, and the units (a call with its results) the sliding window keeps whole."""

    def __init__(self, conv: ConversationLike, counter: TokenCounter | None = None) -> None:
        messages = list(conv.messages)
        system = conv.system_prompt
        if system is None and messages and messages[0].get("role") in ("system", "developer"):
            system = text_of(messages[0].get("content")) or None
            messages = messages[1:]
        self.id = str(conv.id)
        self.system_prompt = system
        self.tools = list(conv.tools or ())
        self.model = bare_model(conv.model)
        """The model as its provider's API names it (counted, priced and sent so)."""
        self.messages = messages
        file = str(getattr(conv, "source", "") or "")
        where = f"{file} (conversation {self.id})" if file else self.id
        bad = next((k for k, t in enumerate(conv.tools or ()) if not isinstance(t, Mapping)), None)
        if bad is not None:
            raise ContextError([Problem(f"/tools/{bad}", "a tool schema must be an object", source=where)])
        try:  # the fields as a request carries them (types, roles), checked once
            Context(system_prompt=system, messages=messages, tools=list(conv.tools or ()), model=conv.model)
        except ContextError as exc:
            raise ContextError([replace(p, source=where) for p in exc.problems[:5]]) from None
        problems = check_messages(messages, partial_tail=True)
        if problems:
            raise ContextError([replace(p, source=where) for p in problems[:5]])
        self.calls = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
        self.ids = {id(m): j for j, m in enumerate(messages)}
        self.counter = counter = counter or get_counter(self.model)
        self.fixed = counter.tools(self.tools) + counter.system_prompt(system) + REPLY_PRIMING
        self.tokens = [counter.message(m, j) for j, m in enumerate(messages)]
        self.prefix = [0]
        for n in self.tokens:
            self.prefix.append(self.prefix[-1] + n)
        self.task = next((j for j, m in enumerate(messages) if m.get("role") == "user"), None)
        self.unit_start: list[int] = []
        for j, m in enumerate(messages):
            start = j
            if m.get("role") == "tool":
                start = self.unit_start[j - 1] if j else 0
            self.unit_start.append(start)
        self.system_text = _flat(text_of(system) if not isinstance(system, str) else system)
        # The specifics of every message, and where the agent uses each last.
        specifics = [message_specifics(m) for m in messages]
        self.last_use: dict[str, dict[str, int]] = {cat: {} for cat in CATEGORIES}
        for j, found in enumerate(specifics):
            if messages[j].get("role") == "assistant":
                for cat, items in found.items():
                    for s in items:
                        self.last_use[cat][s] = j
        # Only what the agent uses again after a message can be needed from it.
        self.reused: list[dict[str, list[str]]] = [
            {cat: [s for s in items if self.last_use[cat].get(s, -1) > j] for cat, items in found.items()}
            for j, found in enumerate(specifics)
        ]
        self.carriers = [j for j, found in enumerate(self.reused) if any(found.values())]
        """The messages holding a specific the agent uses again later: the only ones to look at."""
        self.is_carrier = [False] * len(messages)
        for j in self.carriers:
            self.is_carrier[j] = True
        self.placeholders: dict[int, dict[str, Any]] = {}

    def tokens_of(self, start: int, end: int) -> int:
        return self.prefix[end] - self.prefix[start]

    def placeholder(self, j: int) -> dict[str, Any]:
        found = self.placeholders.get(j)
        if found is None:
            m = self.messages[j]
            found = {"role": "tool", "tool_call_id": m.get("tool_call_id"), "content": MASK_PLACEHOLDER}
            self.placeholders[j] = found
        return found


def _flat(text: str) -> str:
    return " ".join(text.split())


class _Texts:
    """The flattened text of the messages a replay added (summaries, cut results), by identity."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Any, str]] = {}

    def __call__(self, m: Mapping[str, Any]) -> str:
        hit = self._memo.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        if len(self._memo) > 4096:
            self._memo.clear()
        text = _flat(message_text(m))
        self._memo[id(m)] = (m, text)
        return text


class _Kept:
    """The needed specifics at each call of one replay, and those its request keeps, counted
    incrementally: a call costs its request's messages, the carriers that came or went since
    the previous call and the specifics needed now, not the conversation so far.

    A carrier (a message holding a specific the agent uses again later) before the call is
    *held* when the request has it as it was, else *gone*. A specific is needed at call ``i``
    while a gone carrier holds it and the agent uses it at ``i`` or later; it is kept when a
    held carrier holds it too, or the text the request added (a summary, a cut result, the
    system prompt) quotes it. A carrier may come back (a baseline's window grows again)."""

    def __init__(self, prep: _Prepared) -> None:
        self.prep = prep
        self.texts = _Texts()
        self.next = 0
        """The first of ``prep.carriers`` not yet before a call."""
        self.present: set[int] = set()
        self.held: dict[str, Counter[str]] = {cat: Counter() for cat in CATEGORIES}
        self.gone: dict[str, Counter[str]] = {cat: Counter() for cat in CATEGORIES}
        self.needed: dict[str, dict[str, int]] = {cat: {} for cat in CATEGORIES}
        """Per category, the specifics gone and used again, with where they are used last."""
        self.at = 0

    def _move(self, j: int, into: dict[str, Counter[str]], by: int) -> None:
        for cat, items in self.prep.reused[j].items():
            counts = into[cat]
            for s in items:
                counts[s] += by
                if counts[s] <= 0:
                    del counts[s]

    def _go(self, j: int) -> None:
        self._move(j, self.gone, 1)
        for cat, items in self.prep.reused[j].items():
            last, needed = self.prep.last_use[cat], self.needed[cat]
            for s in items:
                if last[s] >= self.at:
                    needed[s] = last[s]

    def _come_back(self, j: int) -> None:
        self._move(j, self.gone, -1)
        for cat, items in self.prep.reused[j].items():
            gone, needed = self.gone[cat], self.needed[cat]
            for s in items:
                if s not in gone:
                    needed.pop(s, None)

    def measure(self, i: int, request: Sequence[Mapping[str, Any]], call: Call) -> None:
        """The needed specifics at the call at position ``i`` (calls come in order), and those
        the request keeps, into ``call``."""
        prep = self.prep
        ids, messages, carrier = prep.ids, prep.messages, prep.is_carrier
        self.at = i
        present: set[int] = set()
        added: list[str] = [prep.system_text]
        for m in request:
            j = ids.get(id(m))
            if j is not None and j < i and messages[j] is m:
                if carrier[j]:
                    present.add(j)
            else:
                added.append(self.texts(m))
        carriers, k, fresh = prep.carriers, self.next, set()
        while k < len(carriers) and carriers[k] < i:
            fresh.add(carriers[k])
            k += 1
        self.next = k
        for j in fresh - present:
            self._go(j)
        for j in self.present - present:
            self._move(j, self.held, -1)
            self._go(j)
        for j in present - self.present:
            if j not in fresh:
                self._come_back(j)
            self._move(j, self.held, 1)
        self.present = present
        new_text = "\n".join(added)
        for cat in CATEGORIES:
            needed, held = self.needed[cat], self.held[cat]
            for s in [s for s, last in needed.items() if last < i]:
                del needed[s]  # used for the last time before this call
            call.needed[cat] = len(needed)
            call.kept[cat] = sum(1 for s in needed if s in held or s in new_text)


def _scratch() -> str | None:
    """Where a replay's throwaway archives go: memory (tmpfs, where an fsync costs nothing)
    when the system has it, else the temporary folder."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _frozen_clock() -> float:
    return 0.0  # a replay has no wall time: a request never expires from the measured cache


def replay_definition(
    prep: _Prepared,
    definition: Definition,
    window: int,
    pricing: Pricing,
    *,
    models: Any = None,
    store: bool = True,
) -> Iterator[tuple[Call, Sequence[Mapping[str, Any]] | None]]:
    """Each call of the conversation as the definition manages it: (figures, the request's
    messages, or None when it was refused). ``store``: give the definition a (throwaway)
    offload store, as a deployment with one would; without, as one without."""
    counter = get_counter(prep.model, definition.tokenizer)
    kept = _Kept(prep)
    with tempfile.TemporaryDirectory(prefix="ctxmgmt-eval-", dir=_scratch()) as tmp:
        offloader = LocalOffloader(tmp) if store else None
        conv = Conversation(definition, models=models, offloader=offloader, session="eval", pricing=pricing)
        cache = PromptCache(pricing, clock=_frozen_clock)
        conv.cache = cache
        conv.environment = replace(conv.environment, cache=cache)
        # The archives' references are the same every run (a summary lists them, so their
        # tokens decide what else fits): the same input gives the same report.
        numbers = itertools.count()
        seed = f"{prep.id}\x00{definition.name}\x00{window}"
        for n, i in enumerate(prep.calls, 1):
            call = Call(prep.id, n)
            started = time.perf_counter()
            try:
                with repeatable_refs(seed, numbers):
                    turn = conv.prepare(
                        prep.messages[:i],
                        system_prompt=prep.system_prompt,
                        tools=prep.tools,
                        model=prep.model,
                        context_window=window,
                    )
            except CtxmgmtError as exc:
                call.time_ms = (time.perf_counter() - started) * 1000
                problems: Sequence[Problem] = getattr(exc, "problems", ())
                call.refused = str(problems[0].message if problems else exc)[:500]
                yield call, None
                continue
            call.time_ms = (time.perf_counter() - started) * 1000
            request = turn.messages
            call.tokens = counter.context(turn.context)[0]
            call.reusable = turn.reusable_prefix_tokens
            call.cost = pricing.call(call.tokens, call.reusable, prep.tokens[i])
            call.over_window = call.tokens > window
            call.invalid = bool(check_messages(request))
            for entry in turn.trace:
                if entry["error"]:
                    call.trace_errors += 1
                changed = (entry["tokens_before"], entry["messages_before"]) != (
                    entry["tokens_after"],
                    entry["messages_after"],
                )
                if entry["activated"] and changed and not entry["error"]:
                    kind = FIRINGS.get(entry["type"], "other")
                    call.fired[kind] = call.fired.get(kind, 0) + 1
            kept.measure(i, request, call)
            yield call, request


def sliding_window(prep: _Prepared, i: int, budget: int) -> tuple[list[Mapping[str, Any]], list[int]]:
    """The plain sliding window at position ``i`` within ``budget`` tokens: the task (the
    first user message), then the newest messages that fit, never a call without its results."""
    msgs = prep.messages
    if prep.fixed + prep.tokens_of(0, i) <= budget:
        return msgs[:i], prep.tokens[:i]
    task = prep.task if prep.task is not None and prep.task < i else None
    used = prep.fixed + (prep.tokens[task] if task is not None else 0)
    start = i
    floor = task + 1 if task is not None else 0
    while start > floor:
        s = max(prep.unit_start[start - 1], floor)
        cost = prep.tokens_of(s, start)
        if used + cost > budget:
            break
        used += cost
        start = s
    head = [] if task is None else [task]
    positions = [*head, *range(start, i)]
    return [msgs[j] for j in positions], [prep.tokens[j] for j in positions]


def observation_masking(prep: _Prepared, i: int, last: int) -> tuple[list[Mapping[str, Any]], list[int]]:
    """Every message before position ``i``, the tool results older than the newest ``last``
    replaced by a placeholder."""
    msgs = prep.messages
    tools = [j for j in range(i) if msgs[j].get("role") == "tool"]
    masked = set(tools[: max(0, len(tools) - last)])
    out: list[Mapping[str, Any]] = []
    tokens: list[int] = []
    for j in range(i):
        if j in masked:
            ph = prep.placeholder(j)
            out.append(ph)
            tokens.append(prep.counter.message(ph))
        else:
            out.append(msgs[j])
            tokens.append(prep.tokens[j])
    return out, tokens


def _baseline_call(
    prep: _Prepared,
    n: int,
    i: int,
    built: tuple[list[Mapping[str, Any]], list[int]],
    cache: PromptCache,
    window: int,
    pricing: Pricing,
    kept: _Kept,
    started: float,
) -> Call:
    """A baseline's request measured as a definition's is: its tokens, and what of it the
    prompt cache (the baseline's own) serves from its previous request."""
    request, _ = built
    call = Call(prep.id, n)
    context = Context(system_prompt=prep.system_prompt, messages=request, tools=prep.tools, model=prep.model)
    call.tokens = prep.counter.context(context)[0]
    call.reusable = cache.measure(context, prep.counter)
    call.cost = pricing.call(call.tokens, call.reusable, prep.tokens[i])
    call.over_window = call.tokens > window
    call.time_ms = (time.perf_counter() - started) * 1000
    kept.measure(i, request, call)
    return call


def default_pricing(model: str | None) -> Pricing:
    """The relative prices of the model's provider, as the runner uses without configured ones."""
    return ratios_for("anthropic" if model and "claude" in model.lower() else None)


def evaluate_rows(
    conversations: Iterable[ConversationLike],
    definitions: Sequence[Any] = ("default",),
    windows: Sequence[int] = (16_000,),
    *,
    pricing: Pricing | None = None,
    mask_last: int = 3,
    baselines: bool = True,
    per_call: bool = True,
    models: Any = None,
    store: bool = True,
) -> tuple[list[Row], list[dict[str, Any]]]:
    """Replay every conversation (one at a time: memory is bounded by the largest) through
    every definition at every window (``store``: with a throwaway offload store). Returns
    the report's rows and the conversations' list."""
    built = [d if isinstance(d, Definition) else load_definition(d) for d in definitions]
    if not built:
        raise ValueError("give at least one definition")
    windows = list(windows)
    if not windows or any(
        isinstance(w, bool) or not isinstance(w, int) or not 0 < w <= MAX_WINDOW for w in windows
    ):
        raise ValueError(
            f"windows must be whole numbers of tokens from 1 to {MAX_WINDOW:,} (got {windows!r})"
        )
    if isinstance(mask_last, bool) or not isinstance(mask_last, int) or mask_last < 0:
        raise ValueError(f"mask_last must be a whole number >= 0 (got {mask_last!r})")
    rows: dict[tuple[str, str, int], Row] = {}

    def row(name: str, kind: str, window: int, of: str | None = None) -> Row:
        key = (kind, of or name, window)
        if key not in rows:
            rows[key] = Row(name, kind, window, of, keep_calls=per_call)
        return rows[key]

    for w in windows:  # the rows' order does not depend on the conversations
        for d in built:
            row(d.name, "definition", w)
            if baselines:
                row(BASELINE_WINDOW, "sliding_window", w, d.name)
        if baselines:
            row(BASELINE_MASKING, "observation_masking", w)
    listed: list[dict[str, Any]] = []
    for conv in conversations:
        prep = _Prepared(conv)
        price = pricing or default_pricing(prep.model)
        listed.append(
            {
                "id": prep.id,
                "source": str(getattr(conv, "source", "") or ""),
                "messages": len(prep.messages),
                "calls": len(prep.calls),
            }
        )
        for w in windows:
            for d in built:
                target = row(d.name, "definition", w)
                base = row(BASELINE_WINDOW, "sliding_window", w, d.name) if baselines else None
                kept, cache = _Kept(prep), PromptCache(price, clock=_frozen_clock)
                for call, request in replay_definition(prep, d, w, price, models=models, store=store):
                    target.add(call)
                    if base is None:
                        continue
                    i = prep.calls[call.call - 1]
                    started = time.perf_counter()
                    if request is None:  # nothing was sent: the baseline sends nothing either
                        base.add(Call(prep.id, call.call, refused=call.refused))
                        continue
                    made = sliding_window(prep, i, call.tokens)
                    base.add(_baseline_call(prep, call.call, i, made, cache, w, price, kept, started))
            if baselines:
                masking = row(BASELINE_MASKING, "observation_masking", w)
                kept, cache = _Kept(prep), PromptCache(price, clock=_frozen_clock)
                for n, i in enumerate(prep.calls, 1):
                    started = time.perf_counter()
                    made = observation_masking(prep, i, mask_last)
                    masking.add(_baseline_call(prep, n, i, made, cache, w, price, kept, started))
    return list(rows.values()), listed
