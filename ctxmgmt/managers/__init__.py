"""The built-in context managers, one module each."""

import importlib

from ..manager import ContextManager, Environment, Runtime
from ..registry import BUILTINS as _BUILTIN_TYPES
from .autocompact import AutoCompactManager
from .clearing import ToolResultClearingManager
from .compaction import ToolResultCompactionManager
from .sliding_window import SlidingWindowManager
from .summarization import SummarizationManager
from .truncate import ToolsOutputTruncateManager

BUILTINS: tuple[type[ContextManager], ...] = tuple(
    getattr(importlib.import_module(module), name)
    for module, _, name in (path.partition(":") for path in _BUILTIN_TYPES.values())
)
"""The built-in manager classes, made from the registry's one list
(:data:`ctxmgmt.registry.BUILTINS`, which names each without importing it)."""

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
