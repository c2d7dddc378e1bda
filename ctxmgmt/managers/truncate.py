"""ToolsOutputTruncateManager: cut long tool results, marker included in the limit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .. import marks as _marks
from .._deprecated import moved
from ..context import Context
from ..errors import OffloadError
from ..history import History, items
from ..manager import ContextManager, Runtime
from ..marks import binding, stamp
from ..messages import is_recalled, text_of, tool_names, trailing_tool_start
from ..tokens import TokenCounter
from ..truncation import cut, with_text
from ..types import Hook
from .base import NO_STORE, builtin_schema
from .clearing import cleared

_WINDOWS_KEPT = 16
"""Windows an entry with ``max_output_ratio`` keeps its scaled form for (one per model, in practice)."""


class ToolsOutputTruncateManager(ContextManager):
    """Truncates tool results longer than ``max_output_length`` characters (and, when
    set, ``max_output_tokens`` tokens), keeping the head, the tail or both.

    The result, marker included, stays within both limits; the marker gives the
    original length in characters, and in tokens when a token limit applies. At
    ``post_tool`` only the newest results (the trailing tool messages) are looked
    at; at other hooks, every tool result. Content already within the limits is
    left alone, and content that any entry cut before is recognised by its marker
    and never cut again, so a second run changes nothing and the marker always
    gives the original's size. With ``max_output_ratio`` the token limit is that share of
    the context window (when it is known). Only ctxmgmt's own signed marker counts (see
    :mod:`ctxmgmt.marks`): a notice written by a tool or a model is plain content.
    The recall tools' results are cut like any other (never archived again).
    """

    type_name = "ToolsOutputTruncateManager"
    config_schema = builtin_schema(type_name)
    trusted = True  # archives only with offload: true in its config

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._by_window: dict[int, ToolsOutputTruncateManager] = {}
        # The key of its output in a History's memo: what the output depends on (its type and
        # config), never the instance, so that a definition loaded again (each call, from a
        # file) finds the entry an equal one made instead of adding one per instance.
        self._memo_key = (type(self), json.dumps(dict(config), sort_keys=True, default=repr))

    def _for_window(self, window: int) -> ToolsOutputTruncateManager:
        """This entry with ``max_output_ratio`` of ``window`` as its token limit (one instance
        per window, so that its memo of cut results lasts)."""
        found = self._by_window.get(window)
        if found is None:
            limit = max(64, int(float(self.config["max_output_ratio"]) * window))
            tokens = self.config.get("max_output_tokens")
            config = {k: v for k, v in self.config.items() if k != "max_output_ratio"}
            config["max_output_tokens"] = limit if tokens is None else min(int(tokens), limit)
            if len(self._by_window) >= _WINDOWS_KEPT:
                self._by_window.clear()
            found = self._by_window[window] = ToolsOutputTruncateManager(config)
        return found

    def apply(self, context: Context, runtime: Runtime) -> Context:
        if self.config.get("max_output_ratio") is not None and context.context_window:
            return self._for_window(context.context_window).apply(context, runtime)
        history = context.messages
        if (
            runtime.hook is not Hook.POST_TOOL
            and not self.config.get("offload")
            and isinstance(history, History)
        ):
            return self._grown(context, history, runtime)
        msgs = context.messages
        start = trailing_tool_start(msgs) if runtime.hook is Hook.POST_TOOL else 0
        changed: dict[int, Mapping[str, Any]] = {}
        names: dict[str, str] | None = None
        for i in range(start, len(msgs)):
            m = msgs[i]
            if m.get("role") != "tool" or self.fits(m, runtime.counter, i):
                continue
            names = tool_names(msgs, start) if names is None else names
            # What the model recalled is cut like any result, but not archived again: the
            # archive it came from holds it (its first line names the reference).
            recalled = is_recalled(names.get(str(m.get("tool_call_id"))), m, runtime.holds)
            changed[i] = self._truncate(m, runtime, archive=not recalled)
        runtime.details["truncated"] = len(changed)
        if not changed:
            return context
        return context.splice((i, i + 1, (m,)) for i, m in sorted(changed.items()))

    def _grown(self, context: Context, history: History, runtime: Runtime) -> Context:
        """Every result cut (none is archived here), remembering the output for this list of
        messages: each message's result depends only on itself, so a list that grew by
        appends costs its new messages, and the same list again costs nothing."""
        key = (*self._memo_key, runtime.counter.tokenizer.name)
        derived = history.memo
        n = len(history)
        done, out, truncated = derived.get(key, (0, None, 0))
        if done > n:  # an older view of these messages
            done, out, truncated = 0, None, 0
        if done < n:
            msgs = items(history)
            new: list[Mapping[str, Any]] = []
            for i in range(done, n):
                m = msgs[i]
                if m.get("role") == "tool" and not self.fits(m, runtime.counter, i):
                    m = self._truncate(m, runtime)
                    truncated += 1
                new.append(m)
            if out is None and truncated:
                out = History.own([*msgs[:done], *new])
            elif out is not None:
                out = out.append(*new)
            done = n
            derived[key] = (done, out, truncated)
        runtime.details["truncated"] = truncated
        if out is None:
            return context
        return context.with_messages(out)

    def fits(self, m: Mapping[str, Any], counter: TokenCounter, index: int | None = None) -> bool:
        """Whether a tool result is within the limits, or was already cut with its notice (or
        cleared: the clearing's notice may be longer than a small cap, and is cut no further)."""
        text = text_of(m.get("content"))
        if len(text) > self.config["max_output_length"]:
            return stamp(text, binding(m)) is not None or cleared(m)
        limit = self.config.get("max_output_tokens")
        # Cheap sufficient checks first: every token is at least one byte, and a message
        # counts at least its content's tokens (its count is memoised per message).
        if limit is None or (text.isascii() and len(text) <= limit) or counter.message(m, index) <= limit:
            return True
        # Memoised by content: counting the message encoded it, and the cut's notice reads it.
        return counter.text(text) <= int(limit) or stamp(text, binding(m)) is not None or cleared(m)

    def _truncate(self, m: Mapping[str, Any], runtime: Runtime, *, archive: bool = True) -> dict[str, Any]:
        """The result cut to the limits (archived first with offload). It must not fit."""
        text = text_of(m.get("content"))
        counter = runtime.counter
        ref = None
        store = runtime.offloader if self.config.get("offload") and archive else None
        if (
            self.config.get("offload")
            and archive
            and store is None
            and self.config.get("without_store") != "cut"
        ):
            raise OffloadError(f"offload: true {NO_STORE}, or without_store: cut")
        if store is not None:
            # Archive first: nothing is cut unless the whole output is safely stored.
            ref = store.store_tool_result(runtime.session, text, tool_call_id=m.get("tool_call_id"))
            runtime.details.setdefault("offloaded", []).append(ref)
        return with_text(m, self.cut(text, counter, binding(m), ref))

    def cut(
        self,
        text: str,
        counter: TokenCounter,
        bound: Sequence[str],
        ref: str | None = None,
        original: tuple[int, str | None] | None = None,
    ) -> str:
        """``text`` cut to this entry's limits (see :func:`ctxmgmt.truncation.cut`)."""
        return cut(
            text,
            counter,
            bound,
            max_chars=self.config["max_output_length"],
            max_tokens=self.config.get("max_output_tokens"),
            mode=self.config["mode"],
            ref=ref,
            original=original,
        )


__all__ = ["ToolsOutputTruncateManager"]

__getattr__ = moved(__name__, _marks.__name__, names=("OFFLOADED", "STAMP", "offloaded"))
