"""ToolResultCompactionManager: large tool results become a preview and a reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..archive import sizing_ref
from ..context import Context
from ..errors import CtxmgmtError, OffloadError
from ..manager import ContextManager, Runtime
from ..marks import PLACEHOLDER, TAG, binding, offloaded, stamp
from ..messages import is_recalled, text_of, tool_names
from ..truncation import with_text
from .base import NO_STORE, builtin_schema
from .truncate import ToolsOutputTruncateManager


class ToolResultCompactionManager(ContextManager):
    """Replaces tool results over their cap with a preview plus the reference of the
    archived original: a generous cap for the newest ``recent_n`` results, a small one
    for older results. The original is stored first; a compacted result carries its
    notice, so a second run changes nothing. A result compacted under the generous
    cap is re-cut from its archive when it becomes old. With ``clear_at_least`` it
    compacts only when that frees at least so many tokens (fewer, larger edits). The
    recall tools' results are compacted too, without a second archive. With
    ``without_store: cut`` and no store, results are cut to the same previews, nothing
    archived (the notice gives the original's size, no reference).
    """

    type_name = "ToolResultCompactionManager"
    config_schema = builtin_schema(type_name)
    archives = True
    trusted = True

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._tiers = {
            cap: ToolsOutputTruncateManager(
                {
                    "max_output_length": cap,
                    "mode": config["preview"],
                    "offload": True,
                    "without_store": config.get("without_store", "fail"),
                }
            )
            for cap in (config["recent_max_chars"], config["old_max_chars"])
        }

    def apply(self, context: Context, runtime: Runtime) -> Context:
        if runtime.offloader is None and self.config.get("without_store") != "cut":
            raise OffloadError(f"compaction {NO_STORE}, or without_store: cut")
        msgs = context.messages
        names = tool_names(msgs)
        excluded = set(self.config["exclude_tools"])
        results = [i for i, m in enumerate(msgs) if m.get("role") == "tool"]
        recent = (
            set(results[max(0, len(results) - self.config["recent_n"]) :])
            if self.config["recent_n"]
            else set()
        )
        todo: list[tuple[int, int]] = []
        for i in results:
            m = msgs[i]
            if names.get(str(m.get("tool_call_id"))) in excluded:
                continue
            cap = self.config["recent_max_chars"] if i in recent else self.config["old_max_chars"]
            if len(text_of(m.get("content"))) > cap:
                todo.append((i, cap))
        at_least: int = self.config["clear_at_least"]
        if at_least and todo:
            freed = sum(self._saving(msgs[i], i, cap, runtime) for i, cap in todo)
            if freed < at_least:
                runtime.details["compacted"] = 0
                runtime.details["note"] = (
                    f"would free {freed:,} tokens, less than clear_at_least ({at_least:,})"
                )
                return context
        changed: dict[int, Mapping[str, Any]] = {}
        for i, cap in todo:
            recalled = is_recalled(names.get(str(msgs[i].get("tool_call_id"))), msgs[i], runtime.holds)
            new = self._compact(msgs[i], cap, runtime, recalled=recalled)
            if new is not None:
                changed[i] = new
        runtime.details["compacted"] = len(changed)
        if not changed:
            return context
        return context.splice((i, i + 1, (m,)) for i, m in sorted(changed.items()))

    def _saving(self, m: Mapping[str, Any], index: int, cap: int, runtime: Runtime) -> int:
        """The tokens compacting a result would free at least (its notice sized with the
        reference that takes the most tokens)."""
        text = text_of(m.get("content"))
        cut = self._tiers[cap].cut(text, runtime.counter, binding(m), sizing_ref("tool_result"))
        cut = TAG.sub(PLACEHOLDER, cut)  # and its tag as the dearest: the real one is drawn later
        return max(0, runtime.counter.message(m, index) - runtime.counter.message(with_text(m, cut)))

    def _compact(
        self, m: Mapping[str, Any], cap: int, runtime: Runtime, *, recalled: bool = False
    ) -> dict[str, Any] | None:
        text = text_of(m.get("content"))
        if len(text) <= cap:
            return None
        tier = self._tiers[cap]
        bound = binding(m)
        ref = offloaded(text, bound)
        size = stamp(text, bound)
        if recalled:  # what the model recalled is in its archive already: cut, not archived again
            return with_text(m, tier.cut(text, runtime.counter, bound, None, size))
        if runtime.offloader is None and size is not None:
            # No store: a preview cut before is cut again, keeping the original's size.
            return with_text(m, tier.cut(text, runtime.counter, bound, None, size))
        if ref is not None and size is not None:
            # Archived under a larger cap: cut the original again, same reference; only when
            # the notice is ctxmgmt's own (signed for this result) and the archive is this
            # session's, with the size the notice states.
            assert runtime.offloader is not None
            try:
                original = runtime.offloader.read(runtime.session, ref).text
            except CtxmgmtError:
                original = None
            if original is not None and len(original) == size[0]:
                return {**m, "content": tier.cut(original, runtime.counter, bound, ref)}
        return tier._truncate(m, runtime)  # plain content, whatever notice it quotes
