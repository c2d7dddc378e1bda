"""Deprecated: the agent runner is :mod:`ctxmgmt.agents.runner` (this path works, warning,
for one release)."""

from ._deprecated import moved

__getattr__ = moved(__name__, "ctxmgmt.agents.runner")
