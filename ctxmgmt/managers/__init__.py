"""The built-in context managers, one module each."""

from .base import ContextManager, Runtime
from .compaction import ToolResultCompactionManager
from .sliding_window import SlidingWindowManager
from .summarization import SummarizationManager
from .truncate import ToolsOutputTruncateManager

BUILTINS = (
    SlidingWindowManager,
    SummarizationManager,
    ToolsOutputTruncateManager,
    ToolResultCompactionManager,
)

__all__ = [
    "BUILTINS",
    "ContextManager",
    "Runtime",
    "SlidingWindowManager",
    "SummarizationManager",
    "ToolResultCompactionManager",
    "ToolsOutputTruncateManager",
]
