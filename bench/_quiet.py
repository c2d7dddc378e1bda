"""A definition with default's managers whose triggers the benchmarks' histories never reach:
what ctxmgmt costs when it does not fire."""

from __future__ import annotations

QUIET = {
    "name": "quiet",
    "description": "default's managers, never firing in the benchmarks",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 100_000}}],
        "pre_llm": [
            {"type": "SummarizationManager", "activation": {"tokens_exceed": 100_000_000}},
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 500_000},
                "activation": {"message_count_exceed": 1_000_000},
            },
        ],
    },
}
