"""ctxmgmt: declarative, hook-based context management for LLM agents.

>>> import ctxmgmt
>>> definition = ctxmgmt.load_definition("definitions/token-aware-truncation.yaml")
>>> result = definition.apply("pre_llm", ctxmgmt.Context(messages=[...]))
>>> result.context.messages, result.trace
>>> report = ctxmgmt.eval(conversations, ["default"], windows=[16000])  # replay recorded runs
"""

# The public names are imported at first use (PEP 562): ``import ctxmgmt`` (and so every
# ``import ctxmgmt.<module>``) costs what the errors, the types and the formats cost (~60 ms),
# not the SQL store, the HTTP client and the evaluation's imports (~0.7 s), which a user of
# the engine or of an adapter never needs.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import formats  # noqa: F401  (hands Context.from_dict its provider check: context.checks_formats)
from ._version import __version__
from .errors import (
    AgentError,
    ApiError,
    ConfigError,
    Conflict,
    ContextError,
    CtxmgmtError,
    DefinitionError,
    ExecutionTimeoutError,
    LLMError,
    LLMTimeoutError,
    ManagerError,
    NotFound,
    OffloadError,
    Problem,
    RegistryError,
    StoreError,
    ToolError,
)
from .types import Hook, Message, TraceEntry

if TYPE_CHECKING:
    from . import eval
    from .agents.runner import ExecutionResult, Runner
    from .agents.tools import Tool, ToolRegistry, register_tool
    from .cache import Pricing, PromptCache
    from .calibration import Calibration
    from .client import AsyncClient, Client
    from .context import ApplyResult, Context
    from .definitions import Definition, ManagerSpec, check_definition, load_definition
    from .eval import evaluate
    from .history import History
    from .llm import ChatClient, ModelConfig, ModelsConfig, load_models
    from .manager import ContextManager, Environment, Runtime
    from .managers import (
        AutoCompactManager,
        SlidingWindowManager,
        SummarizationManager,
        ToolResultClearingManager,
        ToolResultCompactionManager,
        ToolsOutputTruncateManager,
    )
    from .messages import check_messages
    from .registry import ManagerRegistry, default_registry, register_manager
    from .store import DefinitionStore
    from .tokens import TokenCounter, Tokenizer, get_counter

_LAZY = {
    "ApplyResult": ".context",
    "AsyncClient": ".client",
    "AutoCompactManager": ".managers",
    "Calibration": ".calibration",
    "ChatClient": ".llm",
    "Client": ".client",
    "Context": ".context",
    "ContextManager": ".manager",
    "Definition": ".definitions",
    "DefinitionStore": ".store",
    "Environment": ".manager",
    "ExecutionResult": ".agents.runner",
    "History": ".history",
    "ManagerRegistry": ".registry",
    "ManagerSpec": ".definitions",
    "ModelConfig": ".llm",
    "ModelsConfig": ".llm",
    "Pricing": ".cache",
    "PromptCache": ".cache",
    "Runner": ".agents.runner",
    "Runtime": ".manager",
    "SlidingWindowManager": ".managers",
    "SummarizationManager": ".managers",
    "TokenCounter": ".tokens",
    "Tokenizer": ".tokens",
    "Tool": ".agents.tools",
    "ToolRegistry": ".agents.tools",
    "ToolResultClearingManager": ".managers",
    "ToolResultCompactionManager": ".managers",
    "ToolsOutputTruncateManager": ".managers",
    "check_definition": ".definitions",
    "check_messages": ".messages",
    "default_registry": ".registry",
    "eval": ".eval",
    "evaluate": ".eval",
    "get_counter": ".tokens",
    "load_definition": ".definitions",
    "load_models": ".llm",
    "register_manager": ".registry",
    "register_tool": ".agents.tools",
}
"""Each public name the package imports at first use, and the module (relative to the
package) it comes from."""


if not TYPE_CHECKING:  # a type checker sees the imports above, and no name that is not one

    def __getattr__(name: str) -> Any:
        home = _LAZY.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(home, __name__)
        value = module if name == "eval" else getattr(module, name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AgentError",
    "ApiError",
    "ApplyResult",
    "AsyncClient",
    "AutoCompactManager",
    "Calibration",
    "ChatClient",
    "Client",
    "ConfigError",
    "Conflict",
    "Context",
    "ContextError",
    "ContextManager",
    "CtxmgmtError",
    "Definition",
    "DefinitionError",
    "DefinitionStore",
    "Environment",
    "ExecutionResult",
    "ExecutionTimeoutError",
    "History",
    "Hook",
    "LLMError",
    "LLMTimeoutError",
    "ManagerError",
    "ManagerRegistry",
    "ManagerSpec",
    "Message",
    "ModelConfig",
    "ModelsConfig",
    "NotFound",
    "OffloadError",
    "Pricing",
    "Problem",
    "PromptCache",
    "RegistryError",
    "Runner",
    "Runtime",
    "SlidingWindowManager",
    "StoreError",
    "SummarizationManager",
    "TokenCounter",
    "Tokenizer",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResultClearingManager",
    "ToolResultCompactionManager",
    "ToolsOutputTruncateManager",
    "TraceEntry",
    "__version__",
    "check_definition",
    "check_messages",
    "default_registry",
    "eval",
    "evaluate",
    "get_counter",
    "load_definition",
    "load_models",
    "register_manager",
    "register_tool",
]
