"""The built-in context managers, one module each."""

from .autocompact import AutoCompactManager
from .base import ContextManager, Environment, Runtime
from .compaction import ToolResultCompactionManager
from .sliding_window import SlidingWindowManager
from .summarization import SummarizationManager
from .truncate import ToolsOutputTruncateManager

BUILTINS = (
    SlidingWindowManager,
    SummarizationManager,
    ToolsOutputTruncateManager,
    ToolResultCompactionManager,
    AutoCompactManager,
)

__all__ = [
    "BUILTINS",
    "AutoCompactManager",
    "ContextManager",
    "Environment",
    "Runtime",
    "SlidingWindowManager",
    "SummarizationManager",
    "ToolResultCompactionManager",
    "ToolsOutputTruncateManager",
]
