"""Offload: removed context is archived first, and can be read back exactly."""

from .base import GcReport, Offloader, OffloadError, Recall
from .local import LocalOffloader
from .sql import SQLOffloader

__all__ = ["GcReport", "LocalOffloader", "OffloadError", "Offloader", "Recall", "SQLOffloader"]
