"""Deprecated: agent tools are :mod:`ctxmgmt.agents.tools` (this path works, warning, for
one release)."""

from ._deprecated import moved

__getattr__ = moved(__name__, "ctxmgmt.agents.tools")
__dir__ = __getattr__.dir
