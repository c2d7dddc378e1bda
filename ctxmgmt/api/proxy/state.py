"""A proxied conversation's managed state, between requests.

The client resends its whole history on every request, so the state stores only what the
definition made of it: the saved view as runs of the client's own messages (by position) and
the messages the managers wrote (summaries, cut results). A request's state is rebuilt from
the history it brings. Each stored state has a generation; a process keeps the conversations
it served last in memory (bounded in bytes) and uses one only while the store still holds the
generation it wrote, so several processes on one store stay consistent.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ...agents.conversation import Conversation
from .body import positions

__all__ = ["LIVE_BYTES", "Live", "pack", "unpack"]

LIVE_BYTES = 256 << 20
"""The conversations a process keeps in memory, by the size of their last requests."""


def pack(saved: Mapping[str, Any], record: Sequence[Any]) -> dict[str, Any]:
    """The state to store: the view as ``[start, end]`` runs of ``record`` and ``{"m": message}``
    for the messages the managers wrote, and a new ``generation``."""
    out = {k: v for k, v in saved.items() if k != "view"}
    out["generation"] = uuid.uuid4().hex
    view = saved.get("view")
    if not isinstance(view, list):
        return out
    parts: list[Any] = []
    for m, i in zip(view, positions(view, record), strict=True):
        last = parts[-1] if parts else None
        if i is None:
            parts.append({"m": m})  # a message the managers wrote
        elif isinstance(last, list) and last[1] == i:
            last[1] = i + 1
        else:
            parts.append([i, i + 1])
    out["packed"] = parts
    return out


def unpack(stored: Mapping[str, Any], record: Sequence[Any]) -> dict[str, Any] | None:
    """The saved state :func:`pack` stored, with its view rebuilt from this request's
    ``record``; None when it does not fit the record (a new view is made)."""
    state = {k: v for k, v in stored.items() if k not in ("packed", "generation")}
    packed = stored.get("packed")
    if packed is None:
        return state
    if not isinstance(packed, list):
        return None
    view: list[Any] = []
    for part in packed:
        if isinstance(part, list) and len(part) == 2 and all(type(x) is int for x in part):
            start, end = part
            if not 0 <= start < end <= len(record):
                return None
            view.extend(record[start:end])
        elif isinstance(part, Mapping) and isinstance(part.get("m"), Mapping):
            view.append(part["m"])
        else:
            return None
    state["view"] = view
    return state


class Live:
    """The conversations this process served last, by key, with the generation it stored."""

    def __init__(self, max_bytes: int = LIVE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[Any, Conversation, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, key: str, generation: Any, version: Any, body: object) -> Conversation | None:
        """The conversation kept for ``key`` when the store still holds its generation, the
        definition is the same version, and ``body`` is the very body it was made from (its
        view holds that body's objects, which go upstream as the client's own text; a body
        read from another holds other objects). It leaves the cache: a request in flight owns
        it until :meth:`keep`."""
        with self._lock:
            found = self._items.pop(key, None)
            if found is None:
                return None
            self._bytes -= found[2]
            (kept_generation, kept_version, made_from) = found[0]
            fresh = generation is not None and (kept_generation, kept_version) == (generation, version)
            return found[1] if fresh and made_from is body else None

    def keep(self, key: str, stamp: tuple[Any, Any, object], conversation: Conversation, size: int) -> None:
        """Keep a conversation with ``(generation, definition version, the body it was made
        from)``, within the bytes."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            if size > self.max_bytes:
                return
            self._items[key] = (stamp, conversation, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, _, gone) = self._items.popitem(last=False)
                self._bytes -= gone
