"""AutoCompactManager: compaction first, then compression if that was not enough."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..context import Context
from ..errors import LLMError, OffloadError
from ..manager import ContextManager, Runtime, with_defaults
from ..summaries import last_message_key
from .base import builtin_schema
from .compaction import ToolResultCompactionManager
from .summarization import SummarizationManager

STATE_KEY = "autocompact"


class AutoCompactManager(ContextManager):
    """Runs ToolResultCompactionManager; when tokens after / tokens before is still above
    ``compact_ratio_threshold``, summarises the compacted context. Unlike ReMe's auto
    mode, the compaction results are kept. If the summary fails, the compacted
    context stands and the trace says why.
    """

    type_name = "AutoCompactManager"
    config_schema = builtin_schema(type_name)
    archives = True
    trusted = True

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._compact = ToolResultCompactionManager(
            with_defaults(ToolResultCompactionManager.config_schema, config.get("compaction", {}))
        )
        self._summarize = SummarizationManager(
            with_defaults(SummarizationManager.config_schema, config.get("summarization", {}))
        )

    def _compacted(self, context: Context, runtime: Runtime) -> tuple[Context, bool]:
        """The compacted context, and whether to summarise it too."""
        compacted = self._compact.apply(context, runtime)
        before = runtime.counter.context(context)[0]
        after = runtime.counter.context(compacted)[0]
        ratio = after / before if before else 1.0
        runtime.details["compact_ratio"] = round(ratio, 4)
        key = last_message_key(compacted)
        if ratio > self.config["compact_ratio_threshold"]:
            if context.state.get(STATE_KEY) != {"enough": key}:
                return compacted, True
            # Compaction was enough for these very messages last time: with no new
            # message, a second run changes nothing.
            runtime.details["note"] = "compaction was enough and no message has arrived since"
            return compacted, False
        return replace(compacted, state={**compacted.state, STATE_KEY: {"enough": key}}), False

    def apply(self, context: Context, runtime: Runtime) -> Context:
        compacted, more = self._compacted(context, runtime)
        if not more:
            return compacted
        try:
            return self._summarize.apply(compacted, runtime)
        except (LLMError, OffloadError) as exc:
            runtime.details["summary_error"] = f"{type(exc).__name__}: {exc}"
            return compacted

    @property
    def awaits(self) -> bool:
        """As its summariser, or a subclass's own ``aapply``."""
        return type(self).aapply is not AutoCompactManager.aapply or self._summarize.awaits

    async def aapply(self, context: Context, runtime: Runtime) -> Context:
        compacted, more = self._compacted(context, runtime)
        if not more:
            return compacted
        try:
            return await self._summarize.aapply(compacted, runtime)
        except (LLMError, OffloadError) as exc:
            runtime.details["summary_error"] = f"{type(exc).__name__}: {exc}"
            return compacted
