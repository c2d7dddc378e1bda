"""Activation rules: pure functions of the context's size that gate a manager."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .history import History
from .messages import trailing_tool_run

if TYPE_CHECKING:
    from .context import Context
    from .tokens import TokenCounter

__all__ = ["ALWAYS", "Activation", "Facts"]


class Facts:
    """The numbers rules compare, computed on first use."""

    __slots__ = ("_context", "_counter", "_counts", "_tool_tokens", "hidden", "ratio")

    def __init__(
        self,
        context: Context,
        counter: TokenCounter,
        counts: tuple[int, int] | None = None,
        ratio: float = 1.0,
        hidden: int = 0,
    ) -> None:
        self._context = context
        self._counter = counter
        self._counts = counts
        self._tool_tokens: int | None = None
        self.ratio = ratio
        """The calibration factor: token facts are counted tokens times this."""
        self.hidden = hidden
        """Counted tokens the provider reads that are no message's text (the thinking of the
        turn in progress): in :attr:`tokens` and :attr:`window_tokens`."""

    def _both(self) -> tuple[int, int]:
        if self._counts is None:
            self._counts = self._counter.context(self._context)
        return self._counts

    @property
    def context(self) -> Context:
        """The context these are the facts of."""
        return self._context

    @property
    def tokens_counted(self) -> int:
        """The context's tokens as ctxmgmt counts them (not calibrated)."""
        return (self._counts or self._both())[0]

    @property
    def tokens(self) -> int:
        """The context's tokens, calibrated by the provider's reports when there are any."""
        counted = (self._counts or self._both())[0] + self.hidden
        return counted if self.ratio == 1.0 else round(counted * self.ratio)

    @property
    def window_tokens(self) -> int:
        """The tokens to check against the window: calibrated, never below ctxmgmt's count."""
        counted = self._both()[0] + self.hidden
        return counted if self.ratio <= 1.0 else round(counted * self.ratio)

    @property
    def message_count(self) -> int:
        """Messages other than system and developer ones, tool results included."""
        return (self._counts or self._both())[1]

    @property
    def tool_output_tokens(self) -> int:
        """Tokens of the newest tool results: the trailing tool messages."""
        if self._tool_tokens is None:
            msgs = self._context.messages
            message = self._counter.message
            start, end = trailing_tool_run(msgs)
            totals = msgs.totals(self._counter.tokenizer.name)[0] if isinstance(msgs, History) else ()
            if start == end:
                counted = 0
            elif len(totals) >= end:  # the counter's running totals over these messages
                counted = totals[end - 1] - (totals[start - 1] if start else 0)
            else:
                counted = sum(message(msgs[i], i) for i in range(start, end))  # tool messages only
            self._tool_tokens = counted if self.ratio == 1.0 else round(counted * self.ratio)
        return self._tool_tokens

    @property
    def context_window(self) -> int | None:
        return self._context.context_window


class Gate(Protocol):
    """What decides whether an entry runs: an :class:`Activation`, or the fit step's own check."""

    def evaluate(self, facts: Facts) -> tuple[bool, dict[str, Any]]: ...


def _value(rule: str, facts: Facts) -> float | None:
    if rule == "tokens_exceed":
        return facts.tokens
    if rule == "message_count_exceed":
        return facts.message_count
    if rule == "tool_output_tokens_exceed":
        return facts.tool_output_tokens
    if rule == "tokens_ratio_exceed":
        window = facts.context_window
        return None if not window else round(facts.tokens / window, 4)
    raise AssertionError(rule)


@dataclass(frozen=True, slots=True)
class Activation:
    """Rules that are ANDed, plus ``any_of`` alternatives. No rules means always."""

    rules: tuple[tuple[str, float], ...] = ()
    any_of: tuple[Activation, ...] = ()
    enabled: bool = True
    """False for ``always: false``: the entry never runs."""

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None) -> Activation:
        """Build from a validated activation mapping."""
        if not data:
            return ALWAYS
        enabled = data.get("always", True) is not False
        rules = tuple(
            (key, value) for key, value in data.items() if key not in ("always", "rule_type", "any_of")
        )
        any_of = tuple(cls.parse(alt) for alt in data.get("any_of", ()))
        return cls(rules, any_of, enabled)

    def evaluate(self, facts: Facts) -> tuple[bool, dict[str, Any]]:
        """Whether the rules fire, and the values that decided it."""
        if not self.enabled:
            return False, {"always": False}
        if not self.rules and not self.any_of:
            return True, {"always": True}
        fired = True
        reason: dict[str, Any] = {}
        for rule, limit in self.rules:
            value = _value(rule, facts)
            met = value is not None and value > limit
            entry: dict[str, Any] = {"limit": limit, "value": value, "met": met}
            if value is None:
                entry["note"] = "the context window is unknown; set context_window"
            reason[rule] = entry
            fired = fired and met
        if self.any_of:
            results = [alt.evaluate(facts) for alt in self.any_of]
            reason["any_of"] = [r for _, r in results]
            fired = fired and any(ok for ok, _ in results)
        return fired, reason


ALWAYS = Activation()
