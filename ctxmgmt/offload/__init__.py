"""Offload: removed context is archived first, and can be read back exactly."""

from typing import TYPE_CHECKING, Any

from .base import GcReport, Offloader, OffloadError, Recall
from .local import LocalOffloader

if TYPE_CHECKING:
    from .sql import SQLOffloader

__all__ = ["GcReport", "LocalOffloader", "OffloadError", "Offloader", "Recall", "SQLOffloader"]


def __getattr__(name: str) -> Any:
    # The SQL backend needs the store; imported on first use, so that the engine
    # (hooks) can use the offload protocol without importing the store.
    if name == "SQLOffloader":
        from .sql import SQLOffloader

        return SQLOffloader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
