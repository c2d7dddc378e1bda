"""Offload: removed context is archived first, and can be read back exactly.

The engine archives through :class:`ctxmgmt.archive.Archive`; these stores implement it
(and the rest of :class:`Offloader`): on local files, or in the SQL database.
"""

from .base import GcReport, Offloader, OffloadError, Recall
from .local import LocalOffloader
from .sql import SQLOffloader

__all__ = ["GcReport", "LocalOffloader", "OffloadError", "Offloader", "Recall", "SQLOffloader"]
