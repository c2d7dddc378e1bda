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
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .calibration import MAX_REPORTED
from .history import History
from .tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from .context import Context
    from .tokens import TokenCounter

__all__ = [
    "ANTHROPIC_RATIOS",
    "OPENAI_RATIOS",
    "Pricing",
    "PromptCache",
    "cache_figures",
    "output_tokens",
    "ratios_for",
]

MAX_EXPECTED_CALLS = 50
"""The horizon of the cost comparison: an edit is judged on at most this many later calls."""
MIN_GROWTH = 64
"""Tokens a conversation is taken to grow by per call at least (a step adds a message)."""
GROWTH_SAMPLES = 20
REQUESTS_KEPT = 4
"""Requests kept to match the next one against (several conversations may share an adapter)."""
DEFAULT_TTL = 300.0
"""Seconds a request's prefix stays cached: Anthropic's default lifetime (OpenAI: 5-10 minutes)."""
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
        input_tokens = max(0, min(input_tokens, MAX_REPORTED))
        output = max(0, min(output, MAX_REPORTED))
        if cached is None and written is None:
            reusable = max(0, min(reusable, input_tokens))
            return (
                reusable * self.read + (input_tokens - reusable) * self.write + output * self.output
            ) / 1e6
        # A report of more cached (or written) tokens than the input is not believed beyond it.
        cached = max(0, min(cached or 0, input_tokens))
        written = max(0, min(written or 0, input_tokens - cached))
        fresh = input_tokens - cached - written
        return (fresh * self.input + cached * self.read + written * self.write + output * self.output) / 1e6

    def fresh(self, input_tokens: int, output: int = 0) -> float:
        """A call with no cache (the summariser's)."""
        return (input_tokens * self.input + output * self.output) / 1e6


ANTHROPIC_RATIOS = Pricing(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25)
"""Relative prices when none are configured: Anthropic's cache read (0.1x) and write (1.25x)."""
OPENAI_RATIOS = Pricing(input=1.0, output=4.0, cache_read=0.5, cache_write=1.0)
"""OpenAI's: a cached read at half the price or less (0.5x for gpt-4o, 0.25x for gpt-4.1,
0.1x for gpt-5), no write premium. The conservative end, when no pricing is configured."""


def ratios_for(provider: str | None) -> Pricing:
    """The relative prices for a provider without configured pricing."""
    return ANTHROPIC_RATIOS if provider == "anthropic" else OPENAI_RATIOS


def _int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED
    return value if ok else None


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


def clean_usage(usage: Any, depth: int = 0) -> dict[str, Any]:
    """A provider's usage report as it may be stored and answered: JSON-safe (finite numbers
    from 0 to MAX_REPORTED, short strings, at most 64 keys and 3 levels); the rest dropped."""
    out: dict[str, Any] = {}
    if not isinstance(usage, Mapping) or depth > 2:
        return out
    for key, value in list(usage.items())[:64]:
        if not isinstance(key, str) or len(key) > 100:
            continue
        if isinstance(value, bool) or value is None:
            out[key] = value
        elif isinstance(value, int):
            if 0 <= value <= MAX_REPORTED:  # counts and prices: never negative
                out[key] = value
        elif isinstance(value, float):
            if math.isfinite(value) and 0 <= value <= MAX_REPORTED:
                out[key] = value
        elif isinstance(value, str):
            out[key] = value[:200]
        elif isinstance(value, Mapping):
            out[key] = clean_usage(value, depth + 1)
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


def _growth(sent: _Sent | None) -> float:
    """The mean growth per call of a request's conversation (at least MIN_GROWTH)."""
    grown = sent.grown if sent is not None else ()
    return max(float(MIN_GROWTH), sum(grown) / len(grown)) if grown else float(MIN_GROWTH)


def _kept(messages: Sequence[Any]) -> Sequence[Any]:
    """A request's messages as they were: a History is an immutable view already."""
    return messages if isinstance(messages, History) else tuple(messages)


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b


def digest(value: Any) -> str:
    """A short fingerprint of tool schemas or a system prompt ("" for none)."""
    if not value:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


@dataclass(slots=True)
class _Sent:
    """A request that was sent: the fingerprints of its tools and system prompt, its messages
    (kept by reference), their tokens, when it was sent, and its conversation's lineage: the
    growth per call and the postponed entries, carried to the request that extends it."""

    tools: str
    system: str
    messages: Sequence[Any]
    body: int | None
    total: int | None
    at: float
    grown: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=GROWTH_SAMPLES))
    waiting: dict[tuple[str, int], float] = field(default_factory=dict)
    sampled: bool = False
    """Whether the growth since this request was sampled (once, before any edit)."""


class PromptCache:
    """The requests a conversation sent (the last few, within the cache's lifetime), to
    measure what the next one reuses and to weigh edits of that prefix. The runner keeps one
    per execution, the adapters one per conversation; hook runs get it through
    :class:`~ctxmgmt.manager.Environment`.

    Like a provider's cache it is keyed by content: a request reuses the longest prefix it
    shares with any request kept (so one adapter serving several conversations measures each
    against its own), and a request older than ``ttl`` seconds (Anthropic's default lifetime
    is five minutes) serves nothing."""

    def __init__(
        self,
        pricing: Pricing | None = None,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pricing = pricing or ANTHROPIC_RATIOS
        self.ttl = ttl
        self._clock = clock
        self._sent: collections.deque[_Sent] = collections.deque(maxlen=REQUESTS_KEPT)
        self._keys: dict[int, tuple[Any, str]] = {}  # id -> (object, digest): one digest per object
        self._lock = threading.RLock()

    # -- matching -------------------------------------------------------------------------
    def _key(self, value: Any) -> str:
        found = self._keys.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        key = digest(value)
        if len(self._keys) >= 4 * REQUESTS_KEPT:
            self._keys.clear()
        self._keys[id(value)] = (value, key)
        return key

    def _live(self) -> list[_Sent]:
        now = self._clock()
        while self._sent and now - self._sent[0].at > self.ttl:
            self._sent.popleft()
        return list(reversed(self._sent))  # the newest first

    def _common_with(self, sent: _Sent, context: Context) -> int:
        if self._key(context.tools or None) != sent.tools:
            return NO_PREFIX
        if self._key(context.system_prompt or None) != sent.system:
            return TOOLS_ONLY
        previous, messages = sent.messages, context.messages
        n = min(len(previous), len(messages))
        if n == len(previous):  # the common case, a request that grew: compared at C speed
            if isinstance(previous, History) and previous.is_prefix_of(messages):
                return n
            if list(messages[:n]) == list(previous):
                return n
        i = 0
        while i < n and _same(messages[i], previous[i]):
            i += 1
        return i

    def _match(self, context: Context) -> tuple[_Sent | None, int]:
        """The kept request sharing the longest prefix with the context, and its length (see
        :meth:`common`)."""
        best: tuple[_Sent | None, int] = (None, NO_PREFIX)
        for sent in self._live():
            common = self._common_with(sent, context)
            if common > best[1]:
                best = (sent, common)
            if common == len(sent.messages):
                break  # it extends the newest request it can: the usual step of a conversation
        return best

    def common(self, context: Context) -> int:
        """How many of the context's messages a kept request starts with; -1 when only the
        tools match (the system prompt differs), -2 when nothing does."""
        with self._lock:
            return self._match(context)[1]

    def prefix_tokens(self, context: Context, counter: TokenCounter, upto: int) -> int:
        """The tokens of the request's tools, system prompt and first ``upto`` messages (see
        :meth:`common` for ``upto`` below 0)."""
        if upto == NO_PREFIX:
            return 0
        if upto == TOOLS_ONLY:
            return counter.tools(context.tools)
        fixed = counter.tools(context.tools) + counter.system_prompt(context.system_prompt)
        message = counter.message
        messages = context.messages
        return fixed + sum(message(messages[i]) for i in range(upto))

    def _prefix(self, sent: _Sent | None, context: Context, counter: TokenCounter, upto: int) -> int:
        if sent is not None and upto == len(sent.messages) and sent.body is not None:
            fixed = counter.tools(context.tools) + counter.system_prompt(context.system_prompt)
            return fixed + sent.body  # all of that request's messages: their count is known
        return self.prefix_tokens(context, counter, upto)

    # -- requests ---------------------------------------------------------------------------
    def seed(self, tools: Any, system: Any, messages: Sequence[Any], *, at: float | None = None) -> None:
        """Take a request sent before this object existed (an earlier execution of the memory,
        an adapter's saved state), sent at ``at`` (now when not given)."""
        self._remember(
            _Sent(
                self._key(tools or None),
                self._key(system or None),
                _kept(messages),
                None,
                None,
                at or self._clock(),
            )
        )

    def restore(self, saved: Any, messages: Sequence[Any]) -> None:
        """Take the request :meth:`export` described, whose messages are ``messages`` (a
        saved state is checked like input: anything else is ignored)."""
        if not isinstance(saved, Mapping):
            return
        tools, system, at = saved.get("tools"), saved.get("system"), saved.get("at")
        if isinstance(tools, str) and isinstance(system, str) and isinstance(at, (int, float)):
            body = saved.get("body")
            body = body if isinstance(body, int) and not isinstance(body, bool) else None
            self._remember(_Sent(tools, system, _kept(messages), body, None, float(at)))

    def export(self) -> dict[str, Any] | None:
        """The newest request, JSON-able, without its messages (a saved view holds them)."""
        with self._lock:
            live = self._live()
            if not live:
                return None
            sent = live[0]
            return {"tools": sent.tools, "system": sent.system, "at": sent.at, "body": sent.body}

    def _remember(self, sent: _Sent) -> None:
        with self._lock:
            self._sent.append(sent)

    def measure(self, context: Context, counter: TokenCounter) -> int:
        """The reusable prefix of a request about to be sent, which is then kept (its count is
        memoised on the context: the hooks and the window check made it)."""
        total = counter.context(context)[0]
        fixed = counter.tools(context.tools) + counter.system_prompt(context.system_prompt)
        with self._lock:
            sent, common = self._match(context)
            reusable = self._prefix(sent, context, counter, common)
            new = _Sent(
                self._key(context.tools or None),
                self._key(context.system_prompt or None),
                _kept(context.messages),
                total - fixed - REPLY_PRIMING,
                total,
                self._clock(),
            )
            if sent is not None and (common == len(sent.messages) or sent.sampled):
                new.grown = sent.grown  # the same conversation, edited or not
            if sent is not None and common == len(sent.messages):  # it extends that request
                new.waiting = sent.waiting  # (an edit of the prefix wakes the postponed entries)
                if not sent.sampled and sent.total is not None and total >= sent.total:
                    sent.grown.append(total - sent.total)  # nothing sampled it before an edit
                if sent in self._sent:
                    self._sent.remove(sent)  # the lineage goes on in the new request
            self._sent.append(new)
            return reusable

    def note_growth(self, context: Context, counter: TokenCounter) -> None:
        """Sample what the conversation added since its previous request, before any edit of
        this call (a hook run does it first): the growth per call, also when every call edits."""
        with self._lock:
            sent, common = self._match(context)
            if sent is None or sent.sampled or sent.total is None or common != len(sent.messages):
                return
            total = counter.context(context)[0]
            if total >= sent.total:
                sent.grown.append(total - sent.total)
                sent.sampled = True

    def growth(self, context: Context | None = None) -> float:
        """Tokens a request grows by per call in the context's conversation: the mean over
        its last calls (one with many parallel results is one of them, not the new rate)."""
        with self._lock:
            if context is not None:
                sent = self._match(context)[0]
            else:
                live = self._live()
                sent = live[0] if live else None
            return _growth(sent)

    # -- edits ------------------------------------------------------------------------------
    def weigh(
        self,
        before: Context,
        after: Context,
        counter: TokenCounter,
        limit: int | None,
        expected_calls: int | None = None,
        refire: int | None = None,
    ) -> dict[str, Any] | None:
        """Whether an entry's edit (``before`` -> ``after``) should wait: the numbers, with
        ``postpone`` true or false; None when the edit leaves the reusable prefix alone.
        ``refire``: the tokens past which the entry fires again (its trigger), when known.

        It waits while the unedited request fits (``limit``: the window less the reply's
        reserve, with room for one more call's growth) and the tokens it frees, times the
        calls expected before the next edit, are worth less at the cache-read price than
        rewriting the cache now costs. ``expected_calls``: None estimates them as the calls
        until the edited request would reach its entry's trigger again, or ``limit``, at the
        growth per call seen so far (an entry still over its trigger edits again next call)."""
        with self._lock:
            sent, cached = self._match(before)
            if sent is None:
                return None
            edited = self._common_with(sent, after)
            if edited >= cached:
                return None  # the edit changes only what is new since that request
            total_before = counter.context(before)[0]
            total_after = counter.context(after)[0]
            kept_before = self._prefix(sent, before, counter, cached)
            kept_after = self._prefix(sent, after, counter, edited)
            growth = _growth(sent)
        freed = max(0, total_before - total_after)
        p = self.pricing
        cost_now = kept_after * p.read + (total_after - kept_after) * p.write
        cost_wait = kept_before * p.read + (total_before - kept_before) * p.write
        rewrite = cost_now - cost_wait
        horizon = min((x for x in (limit, refire) if x is not None), default=None)
        if expected_calls is not None:
            calls = expected_calls
        elif horizon is not None:
            calls = max(1, min(MAX_EXPECTED_CALLS, math.floor((horizon - total_after) / growth)))
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

    def postponed(self, key: str, index: int, context: Context, tokens: int, limit: int | None) -> None:
        """Remember an entry that was postponed at ``tokens`` in the context's conversation: it
        is not run again until the request has grown by a quarter of its remaining room (at
        least four calls' growth), or no longer fits, or its prefix was edited anyway."""
        with self._lock:
            sent = self._match(context)[0]
            if sent is None:
                return
            step = max(4 * _growth(sent), (limit - tokens) / 4 if limit else 0.0)
            sent.waiting[(key, index)] = tokens + step

    def waiting(
        self, key: str, index: int, context: Context, tokens: int, limit: int | None
    ) -> dict[str, Any] | None:
        """``{"until_tokens": N}`` while a postponed entry waits; None when it runs."""
        with self._lock:
            sent, common = self._match(context)
            if sent is None or common < len(sent.messages):
                return None  # its prefix was edited: the rewrite is paid, the entry may run
            until = sent.waiting.get((key, index))
            if until is None:
                return None
            if tokens >= until or (limit is not None and tokens + _growth(sent) > limit):
                del sent.waiting[(key, index)]
                return None
            return {"until_tokens": round(until)}
