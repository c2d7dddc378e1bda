"""The REST API: an ASGI application over a definition store."""

from .app import create_app
from .config import ServerConfig, load_config

__all__ = ["ServerConfig", "create_app", "load_config"]
