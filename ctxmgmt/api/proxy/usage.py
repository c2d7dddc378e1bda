"""The upstream's reported usage, read from its answer (whole, or as server-sent events as
they pass through) without holding more than one bounded event."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_EVENT_BYTES", "EventReader", "usage_of"]

MAX_EVENT_BYTES = 1 << 20
"""An event longer than this is passed on unread (a long text delta never carries usage)."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


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
        if fresh is not None:  # message_delta has output tokens only
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
            "input": usage["input_tokens"],
            "output": _int(usage.get("output_tokens")) or 0,
            "cached": cached or 0,
        }
    usage = data.get("usage")
    if not isinstance(usage, Mapping) or _int(usage.get("prompt_tokens")) is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    return {
        "input": usage["prompt_tokens"],
        "output": _int(usage.get("completion_tokens")) or 0,
        "cached": cached or 0,
    }


class EventReader:
    """Feeds on a server-sent event stream's bytes as they pass and keeps the usage seen."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.usage: dict[str, int] = {}
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end, size = _boundary(self._buffer)
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:  # too long to be read: skip to its end
                    self._skipping = True
                    del self._buffer[: len(self._buffer) - 4]
                return
            event = bytes(self._buffer[:end])
            del self._buffer[: end + size]
            if self._skipping:
                self._skipping = False
                continue
            self._event(event)

    def _event(self, event: bytes) -> None:
        data = b"\n".join(
            line[5:].lstrip(b" ")
            for line in event.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            return
        try:
            parsed = json.loads(data)
        except ValueError:
            return
        found = usage_of(self.api, parsed)
        if found:
            self.usage.update(found)


def _boundary(buffer: bytearray) -> tuple[int, int]:
    """(where the first event ends, the separator's length), or (-1, 0)."""
    found = [
        (i, n) for sep, n in ((b"\n\n", 2), (b"\r\n\r\n", 4), (b"\r\r", 2)) if (i := buffer.find(sep)) >= 0
    ]
    return min(found) if found else (-1, 0)
