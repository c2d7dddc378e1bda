"""SlidingWindowManager: keep the newest messages, whole tool-call groups only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..context import Context
from ..messages import SYSTEM_ROLES, is_summary, last_task_index, units
from ..tokens import REPLY_PRIMING
from .base import ContextManager, Runtime, builtin_schema


class SlidingWindowManager(ContextManager):
    """Keeps at most ``max_messages`` non-system messages (and, with ``max_tokens``,
    a context within that many tokens), newest first.

    System and developer messages are always kept. With ``pin: task`` the current
    task (the most recent user message) is kept and counts towards the cap, and a
    ctxmgmt summary is kept likewise unless ``keep_summary`` is false. A tool call
    and its results are kept or dropped together: when the newest N messages would
    start inside a group, the window starts after it and keeps fewer. With an offload
    store, what it removes is archived first (``context_search`` finds it).
    """

    type_name = "SlidingWindowManager"
    config_schema = builtin_schema(type_name)

    def apply(self, context: Context, runtime: Runtime) -> Context:
        msgs = context.messages
        max_messages: int = self.config["max_messages"]
        max_tokens: int | None = self.config.get("max_tokens")
        pinned = self._pinned(msgs)
        count = runtime.counter.message

        used = sum(1 for i in pinned if msgs[i].get("role") not in SYSTEM_ROLES)
        keep = set(pinned)
        budget = None
        if max_tokens is not None:
            budget = max_tokens - (
                runtime.counter.system_prompt(context.system_prompt)
                + runtime.counter.tools(context.tools)
                + REPLY_PRIMING
                + sum(count(msgs[i], i) for i in pinned)
            )
        for start, end in reversed(units(msgs)):
            if start in pinned and end - start == 1:
                continue
            size = end - start
            if used + size > max_messages:
                break
            if budget is not None:
                cost = sum(count(msgs[i], i) for i in range(start, end))
                if cost > budget:
                    break
                budget -= cost
            used += size
            keep.update(range(start, end))
        if len(keep) == len(msgs):
            runtime.details["removed"] = 0
            return context
        if runtime.offloader is not None:
            # Archive first: nothing is removed unless it is safely stored.
            gone = [dict(m) for i, m in enumerate(msgs) if i not in keep]
            runtime.details["offloaded"] = runtime.offloader.store_messages(runtime.session, gone)
        runtime.details["removed"] = len(msgs) - len(keep)
        runtime.details["kept"] = len(keep)
        if budget is not None and budget < 0:
            runtime.details["note"] = "the pinned messages alone exceed max_tokens"
        return context.with_messages([m for i, m in enumerate(msgs) if i in keep])

    def _pinned(self, msgs: Sequence[Mapping[str, Any]]) -> set[int]:
        pinned = {i for i, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES}
        if self.config["pin"] == "task":
            task = last_task_index(msgs)
            if task is not None:
                pinned.add(task)
        if self.config["keep_summary"]:
            pinned.update(i for i, m in enumerate(msgs) if is_summary(m))
        return pinned
