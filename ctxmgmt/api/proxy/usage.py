"""The upstream's reported usage, read from its answer: whole, or one event of a stream (split
by :class:`ctxmgmt.api.proxy.streams.Events`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...calibration import MAX_REPORTED

__all__ = ["usage_of"]


def _int(value: Any) -> int | None:
    """A reported count, or None: no whole number from 0 to MAX_REPORTED (a broken or hostile
    upstream's figure is no report: the record is stored without it)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED:
        return value
    return None


def usage_of(api: str, data: Any) -> dict[str, int] | None:
    """``{input, output, cached, written}`` from a whole answer or one event, when it holds usage."""
    if not isinstance(data, Mapping):
        return None
    if api == "messages":
        kind = data.get("type")
        if kind == "message_start":
            data = data.get("message") or {}
        usage = data.get("usage") if isinstance(data, Mapping) else None
        if not isinstance(usage, Mapping):
            return None
        read = _int(usage.get("cache_read_input_tokens")) or 0
        written = _int(usage.get("cache_creation_input_tokens")) or 0
        fresh = _int(usage.get("input_tokens"))
        out = {"output": _int(usage.get("output_tokens")) or 0}
        if fresh is not None and fresh + read + written <= MAX_REPORTED:  # (message_delta has
            # output tokens only; parts that add up past the bound are no report, as a part is)
            out.update(input=fresh + read + written, cached=read, written=written)
        return out
    if api == "responses":
        if data.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            data = data.get("response") or {}
        usage = data.get("usage") if isinstance(data, Mapping) else None
        if not isinstance(usage, Mapping) or _int(usage.get("input_tokens")) is None:
            return None
        details = usage.get("input_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
        return {
            "input": _int(usage["input_tokens"]) or 0,
            "output": _int(usage.get("output_tokens")) or 0,
            "cached": cached or 0,
        }
    usage = data.get("usage")
    if not isinstance(usage, Mapping) or _int(usage.get("prompt_tokens")) is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    return {
        "input": _int(usage["prompt_tokens"]) or 0,
        "output": _int(usage.get("completion_tokens")) or 0,
        "cached": cached or 0,
    }
