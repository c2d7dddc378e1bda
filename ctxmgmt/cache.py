"""Prompt caching: what of a request the provider can reuse, what a call costs, and when an
edit is worth rewriting the cache.

Providers cache the prefix of a request, in this order: tool schemas, system prompt, then
messages (OpenAI automatically, Anthropic at ``cache_control`` breakpoints). The next request
reads the part that is identical at a tenth of the price; whatever follows the first
difference is fresh input, and on Anthropic writing it to the cache costs 1.25x.

:class:`PromptCache` follows one conversation: it remembers the previous request and
measures the next one's **reusable prefix** (the tokens of tools, system prompt and messages,
compared message by message, up to the first difference). With ``settings: {cache: aware}``
a hook run asks it whether an entry's edit of that prefix pays for itself
(:meth:`PromptCache.weigh`): the tokens it frees, times the calls expected before the next
edit, against rewriting the cache now. An edit that does not pay is postponed while the
request fits; the fit step is never postponed.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .history import History
from .tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from .context import Context
    from .tokens import TokenCounter

__all__ = ["ANTHROPIC_RATIOS", "Pricing", "PromptCache", "cache_figures", "output_tokens"]

MAX_EXPECTED_CALLS = 50
"""The horizon of the cost comparison: an edit is judged on at most this many later calls."""
MIN_GROWTH = 64
"""Tokens a conversation is taken to grow by per call at least (a step adds a message)."""
GROWTH_SAMPLES = 20
NO_PREFIX, TOOLS_ONLY = -2, -1
"""What :meth:`PromptCache.common` returns when the tools, or only the system prompt, differ."""


@dataclass(frozen=True, slots=True)
class Pricing:
    """A model's prices in currency units per million tokens (``pricing:`` in the models
    configuration). ``cache_read`` and ``cache_write`` default to ``input`` (no discount,
    no premium) when the provider has none."""

    input: float
    output: float = 0.0
    cache_read: float | None = None
    cache_write: float | None = None

    @property
    def read(self) -> float:
        return self.input if self.cache_read is None else self.cache_read

    @property
    def write(self) -> float:
        return self.input if self.cache_write is None else self.cache_write

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pricing:
        return cls(
            input=float(data["input"]),
            output=float(data.get("output", 0.0)),
            cache_read=None if data.get("cache_read") is None else float(data["cache_read"]),
            cache_write=None if data.get("cache_write") is None else float(data["cache_write"]),
        )

    def to_dict(self) -> dict[str, float]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.read,
            "cache_write": self.write,
        }

    def call(
        self,
        input_tokens: int,
        reusable: int,
        output: int = 0,
        *,
        cached: int | None = None,
        written: int | None = None,
    ) -> float:
        """The cost of one call. With the provider's own cache figures (``cached`` read,
        ``written``), the rest of ``input_tokens`` is fresh; without them, the reusable prefix
        is read from the cache and the rest written to it (a breakpoint at the end, as agents
        place it)."""
        if cached is None and written is None:
            reusable = max(0, min(reusable, input_tokens))
            return (
                reusable * self.read + (input_tokens - reusable) * self.write + output * self.output
            ) / 1e6
        cached, written = cached or 0, written or 0
        fresh = max(0, input_tokens - cached - written)
        return (fresh * self.input + cached * self.read + written * self.write + output * self.output) / 1e6

    def fresh(self, input_tokens: int, output: int = 0) -> float:
        """A call with no cache (the summariser's)."""
        return (input_tokens * self.input + output * self.output) / 1e6


ANTHROPIC_RATIOS = Pricing(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25)
"""Relative prices when none are configured: Anthropic's cache read (0.1x) and write (1.25x)."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def cache_figures(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The provider's cache figures in a usage report, by ctxmgmt's names: ``cached_tokens``
    (read from the cache) and ``cache_write_tokens`` (written to it). Empty when it reports
    none. OpenAI: ``prompt_tokens_details.cached_tokens`` (Responses: ``input_tokens_details``);
    Anthropic: ``cache_read_input_tokens`` and ``cache_creation_input_tokens``."""
    out: dict[str, int] = {}
    if not isinstance(usage, Mapping):
        return out
    for details in ("prompt_tokens_details", "input_tokens_details"):
        found = usage.get(details)
        if isinstance(found, Mapping) and _int(found.get("cached_tokens")) is not None:
            out["cached_tokens"] = found["cached_tokens"]
    read, write = _int(usage.get("cache_read_input_tokens")), _int(usage.get("cache_creation_input_tokens"))
    if read is not None:
        out["cached_tokens"] = read
    if write is not None:
        out["cache_write_tokens"] = write
    return out


def output_tokens(usage: Mapping[str, Any] | None) -> int:
    """The output tokens a usage report gives (``completion_tokens`` or ``output_tokens``)."""
    if not isinstance(usage, Mapping):
        return 0
    for key in ("completion_tokens", "output_tokens"):
        value = _int(usage.get(key))
        if value is not None:
            return value
    return 0


def _kept(messages: Sequence[Any]) -> Sequence[Any]:
    """A request's messages as they were: a History is an immutable view already."""
    return messages if isinstance(messages, History) else tuple(messages)


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b


class PromptCache:
    """One conversation's previous request, to measure what the next one reuses and to
    weigh edits of that prefix. The runner and the adapters keep one per conversation and
    hand it to hook runs through :class:`~ctxmgmt.managers.base.Environment`."""

    def __init__(self, pricing: Pricing | None = None) -> None:
        self.pricing = pricing or ANTHROPIC_RATIOS
        self._tools: Any = None
        self._system: Any = None
        self._messages: Sequence[Any] = ()
        """The previous request's messages: a History as it was (immutable), or a tuple."""
        self._body: int | None = None
        """Their tokens, once counted (the prefix when nothing was edited: the common case)."""
        self._sent = False
        self._last_total = 0
        self._grown: collections.deque[int] = collections.deque(maxlen=GROWTH_SAMPLES)
        self._waiting: dict[tuple[str, int], float] = {}
        """Postponed entries (definition, index) -> the tokens at which they are weighed again."""
        self._lock = threading.Lock()

    @property
    def growth(self) -> float:
        """Tokens a request grows by per call: the mean over the last calls (a call with many
        parallel results is one of them, not the new rate)."""
        return max(float(MIN_GROWTH), sum(self._grown) / len(self._grown)) if self._grown else MIN_GROWTH

    @property
    def known(self) -> bool:
        """Whether there is a previous request to compare with."""
        return self._sent

    def seed(self, tools: Any, system: Any, messages: Sequence[Any]) -> None:
        """Take a request sent before this process saw the conversation (an earlier execution)."""
        with self._lock:
            self._tools, self._system, self._sent = tools, system, True
            self._messages, self._body = _kept(messages), None

    def common(self, context: Context) -> int:
        """How many of the context's messages are the previous request's first ones; -1 when
        the system prompt differs (only the tools are reusable), -2 when the tools differ or
        there is no previous request (nothing is)."""
        if not self._sent or not _same(context.tools or None, self._tools or None):
            return NO_PREFIX
        if not _same(context.system_prompt or None, self._system or None):
            return TOOLS_ONLY
        previous, messages = self._messages, context.messages
        n = min(len(previous), len(messages))
        if n == len(previous):  # the common case, a request that grew: compared at C speed
            if isinstance(previous, History) and previous._prefix_of(messages):
                return n
            if list(messages[:n]) == list(previous):
                return n
        i = 0
        while i < n and _same(messages[i], previous[i]):
            i += 1
        return i

    def prefix_tokens(self, context: Context, counter: TokenCounter, upto: int) -> int:
        """The tokens of the request's tools, system prompt and first ``upto`` messages (see
        :meth:`common` for ``upto`` below 0)."""
        if upto == NO_PREFIX:
            return 0
        if upto == TOOLS_ONLY:
            return counter.tools(context.tools)
        fixed = counter.tools(context.tools) + counter.system_prompt(context.system_prompt)
        if upto == len(self._messages) and self._body is not None:
            return fixed + self._body  # the previous request's messages, all of them
        message = counter.message
        messages = context.messages
        return fixed + sum(message(messages[i]) for i in range(upto))

    def measure(self, context: Context, counter: TokenCounter) -> int:
        """The reusable prefix of a request about to be sent, which then becomes the previous
        request (its count is memoised on the context: the hooks and the window check made it)."""
        total = counter.context(context)[0]
        with self._lock:
            common = self.common(context)
            reusable = self.prefix_tokens(context, counter, common)
            if common < len(self._messages):  # the prefix was edited: postponed edits cost less now
                self._waiting.clear()
            if self._sent and total >= self._last_total:  # a call after an edit says nothing of it
                self._grown.append(total - self._last_total)
            self._tools, self._system = context.tools or None, context.system_prompt or None
            self._messages = _kept(context.messages)
            fixed = counter.tools(context.tools) + counter.system_prompt(context.system_prompt)
            self._body = total - fixed - REPLY_PRIMING
            self._sent, self._last_total = True, total
            return reusable

    def weigh(
        self,
        before: Context,
        after: Context,
        counter: TokenCounter,
        limit: int | None,
        expected_calls: int | None = None,
    ) -> dict[str, Any] | None:
        """Whether an entry's edit (``before`` -> ``after``) should wait: the numbers, with
        ``postpone`` true or false; None when the edit leaves the reusable prefix alone.

        It waits while the unedited request fits (``limit``: the window less the reply's
        reserve, with room for one more call's growth) and the tokens it frees, times the
        calls expected before the next edit, are worth less at the cache-read price than
        rewriting the cache now costs. ``expected_calls``: None estimates them as the calls
        until the edited request would reach ``limit`` at the growth per call seen so far."""
        if not self._sent:
            return None
        cached = self.common(before)
        edited = self.common(after)
        if edited >= cached:
            return None  # the edit changes only what is new since the previous request
        total_before = counter.context(before)[0]
        total_after = counter.context(after)[0]
        freed = max(0, total_before - total_after)
        kept_before = self.prefix_tokens(before, counter, cached)
        kept_after = self.prefix_tokens(after, counter, edited)
        p = self.pricing
        cost_now = kept_after * p.read + (total_after - kept_after) * p.write
        cost_wait = kept_before * p.read + (total_before - kept_before) * p.write
        rewrite = cost_now - cost_wait
        growth = self.growth
        if expected_calls is not None:
            calls = expected_calls
        elif limit:
            calls = max(1, min(MAX_EXPECTED_CALLS, math.floor((limit - total_after) / growth)))
        else:
            calls = MAX_EXPECTED_CALLS
        saving = freed * p.read * calls
        fits = limit is None or total_before + growth <= limit
        return {
            "postpone": fits and saving < rewrite,
            "tokens": total_before,
            "freed": freed,
            "reusable_before": kept_before,
            "reusable_after": kept_after,
            "expected_calls": calls,
            # In fresh-input-token equivalents: comparable whatever the currency.
            "saving": round(saving / p.input) if p.input else 0,
            "rewrite_cost": round(rewrite / p.input) if p.input else 0,
            "limit": limit,
            "fits": fits,
        }

    def postponed(self, definition: str, index: int, tokens: int, limit: int | None) -> None:
        """Remember an entry that was postponed at ``tokens``: it is not run again until the
        request has grown by a quarter of its remaining room (at least four calls' growth),
        or no longer fits, or the prefix was edited anyway."""
        growth = self.growth
        step = max(4 * growth, (limit - tokens) / 4 if limit else 0.0)
        with self._lock:
            self._waiting[(definition, index)] = tokens + step

    def waiting(self, definition: str, index: int, tokens: int, limit: int | None) -> dict[str, Any] | None:
        """``{"until_tokens": N}`` while a postponed entry waits; None when it runs."""
        with self._lock:
            until = self._waiting.get((definition, index))
            if until is None:
                return None
            growth = self.growth
            if tokens >= until or (limit is not None and tokens + growth > limit):
                del self._waiting[(definition, index)]
                return None
            return {"until_tokens": round(until)}
