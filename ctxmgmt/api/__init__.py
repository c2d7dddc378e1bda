"""The REST API: an ASGI application over a definition store.

The app is imported when first asked for, so that the clients read the route table
(:mod:`ctxmgmt.api.routes`) without assembling the server."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .config import ServerConfig, load_config

__all__ = ["ServerConfig", "create_app", "load_config"]
_FROM = {"create_app": ".app", "ServerConfig": ".config", "load_config": ".config"}


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FROM[name], __name__), name)
