"""LLM access: the models configuration, kept-alive connections, and one chat client
(OpenAI-compatible chat completions or Anthropic's Messages API) over httpx."""

from .._deprecated import moved
from .client import ChatClient, ChatResponse, HTTPPool, parse_json_object
from .config import CONFIG_ENV, ModelConfig, ModelsConfig, load_models

__all__ = [
    "CONFIG_ENV",
    "ChatClient",
    "ChatResponse",
    "HTTPPool",
    "ModelConfig",
    "ModelsConfig",
    "load_models",
    "parse_json_object",
]

# The private names of the former module ctxmgmt/llm.py, for one release.
__getattr__ = moved(__name__, "ctxmgmt.llm.client", "ctxmgmt.llm.config")
__dir__ = __getattr__.dir
