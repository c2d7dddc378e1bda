"""Deprecated: the conversation engine is :mod:`ctxmgmt.agents.conversation` (this path
works, warning, for one release)."""

from .._deprecated import moved

__getattr__ = moved(__name__, "ctxmgmt.agents.conversation")
__dir__ = __getattr__.dir
