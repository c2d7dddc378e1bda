"""The built-in context managers, one module each."""

from ..manager import ContextManager, Environment, Runtime
from .autocompact import AutoCompactManager
from .clearing import ToolResultClearingManager
from .compaction import ToolResultCompactionManager
from .sliding_window import SlidingWindowManager
from .summarization import SummarizationManager
from .truncate import ToolsOutputTruncateManager

BUILTINS = (
    SlidingWindowManager,
    SummarizationManager,
    ToolsOutputTruncateManager,
    ToolResultCompactionManager,
    ToolResultClearingManager,
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
    "ToolResultClearingManager",
    "ToolResultCompactionManager",
    "ToolsOutputTruncateManager",
]
