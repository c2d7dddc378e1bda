"""Token counts calibrated by what the provider reports.

ctxmgmt counts with tiktoken; Claude, Gemini and open models tokenize otherwise (LangChain's
users see Claude under-counted by 22%, CJK text by 2-3x). After each model call, the
provider's reported input tokens of that one request (never a sum across calls, the mistake
that made LangChain revert #35001) are compared with ctxmgmt's count of the same request.
Per model, a smoothed ratio of the two is kept:

- the first report seeds it, and each later one moves it towards the new sample, the more
  so the larger its request was next to the previous one (a request of the same size
  moves it two thirds of the way): a small request's ratio is mostly fixed per-message
  costs, a large one's is the tokenizer's, so the ratio is within a few percent from the
  second or third call on;
- a report whose ratio is outside 0.5-3.0 is not this request's count (a fixed or cached
  figure, a proxy's) and is ignored, as is a response without usage.

Activation rules compare ``counted x ratio`` with their limits. The fit step and the
runner's window check use the ratio only when it is above 1: a provider that counts more
than ctxmgmt gets a request that fits its own count, and one that reports fewer never lets
a request grow past ctxmgmt's count of the window.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["Calibration", "reported_input_tokens"]

MIN_RATIO = 0.5
MAX_RATIO = 3.0
DECAY = 0.5
"""How much the previous request's size still weighs against the newest one's."""
MODELS_KEPT = 256
"""Models remembered per calibration (model names come from clients)."""


MAX_REPORTED = 2**31 - 1
"""A reported token count above this is not a real count (a broken or hostile endpoint): no
window is near it, and an execution's record keeps its largest request in a 32-bit column."""


class Calibration:
    """Per model, a smoothed ratio of reported to counted input tokens (see the module)."""

    def __init__(self, ratios: Mapping[str, Any] | None = None) -> None:
        self._ratios: dict[str, tuple[float, int, int]] = {}  # model -> (ratio, calls, last counted)
        self._lock = threading.Lock()
        for model, value in (ratios or {}).items():
            entry = _entry(value)
            if isinstance(model, str) and entry is not None and len(self._ratios) < MODELS_KEPT:
                self._ratios[model] = entry

    def ratio(self, model: str | None) -> float:
        """The factor to apply to counted tokens for this model (1.0 before any report)."""
        entry = self._ratios.get(model or "")
        return entry[0] if entry is not None else 1.0

    def window_ratio(self, model: str | None) -> float:
        """The factor for checking a request against its window: the ratio, never below 1."""
        return max(1.0, self.ratio(model))

    def observe(self, model: str | None, counted: int, reported: Any) -> float | None:
        """Take one response's reported input tokens for a request ctxmgmt counted as
        ``counted``; returns the new ratio, or None when the report says nothing."""
        if (
            isinstance(reported, bool)
            or not isinstance(reported, (int, float))
            or not 0 < reported <= MAX_REPORTED  # before isfinite: a huge int is no float
            or not math.isfinite(reported)
            or counted <= 0
        ):
            return None
        sample = reported / counted
        if not MIN_RATIO <= sample <= MAX_RATIO:
            return None  # not this request's count: ignored, never clamped into the ratio
        key = model or ""
        with self._lock:
            old = self._ratios.get(key)
            if old is None:
                if len(self._ratios) >= MODELS_KEPT:
                    self._ratios.pop(next(iter(self._ratios)))
                new = (sample, 1, counted)
            else:
                weight = counted / (counted + DECAY * old[2])
                new = (old[0] + weight * (sample - old[0]), old[1] + 1, counted)
            self._ratios[key] = new
        return new[0]

    def calls(self, model: str | None) -> int:
        """How many reports the model's ratio is made of."""
        entry = self._ratios.get(model or "")
        return entry[1] if entry is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for the memory (``Calibration(saved)`` reads it back)."""
        return {
            model: {"ratio": round(r, 6), "calls": n, "counted": c}
            for model, (r, n, c) in self._ratios.items()
        }


def _entry(value: Any) -> tuple[float, int, int] | None:
    """A stored entry, or None when it is not one (a stored state is checked like input)."""
    if not isinstance(value, Mapping):
        return None
    ratio = value.get("ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
        return None
    calls, counted = (_positive(value.get(k)) for k in ("calls", "counted"))
    return min(MAX_RATIO, max(MIN_RATIO, float(ratio))), calls, counted


def _positive(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def reported_input_tokens(usage: Mapping[str, Any] | None) -> int | None:
    """The input tokens a response reports for its request: ``prompt_tokens`` (OpenAI chat)
    or ``input_tokens`` (Responses, and Anthropic, which adds its cache reads and writes),
    or None when it reports none."""
    if not isinstance(usage, Mapping):
        return None
    for key in ("prompt_tokens", "input_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_REPORTED:
            extra = 0
            if key == "input_tokens":  # Anthropic counts its cache apart
                for cached in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                    more = usage.get(cached)
                    if isinstance(more, int) and not isinstance(more, bool) and 0 < more <= MAX_REPORTED:
                        extra += more
            return value + extra
    return None
