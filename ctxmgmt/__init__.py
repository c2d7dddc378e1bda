"""ctxmgmt: declarative, hook-based context management for LLM agents.

>>> import ctxmgmt
>>> definition = ctxmgmt.load_definition("definitions/token-aware-truncation.yaml")
>>> result = definition.apply("pre_llm", ctxmgmt.Context(messages=[...]))
>>> result.context.messages, result.trace
>>> report = ctxmgmt.eval(conversations, ["default"], windows=[16000])  # replay recorded runs
"""

from . import eval
from ._version import __version__
from .agents.runner import ExecutionResult, Runner
from .agents.tools import Tool, ToolRegistry, register_tool
from .cache import Pricing, PromptCache
from .calibration import Calibration
from .client import AsyncClient, Client
from .context import ApplyResult, Context
from .definitions import Definition, ManagerSpec, check_definition, load_definition
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
from .types import Hook, Message, TraceEntry

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
