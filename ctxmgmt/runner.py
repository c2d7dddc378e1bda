"""Deprecated: the agent runner is :mod:`ctxmgmt.agents.runner` (this path works, warning,
for one release; the execution records went to :mod:`ctxmgmt.agents.records`, the hook-run
previews to :mod:`ctxmgmt.agents.conversation`, the tool-call bounds to
:mod:`ctxmgmt.agents.tools`)."""

from ._deprecated import moved

__getattr__ = moved(
    __name__,
    "ctxmgmt.agents.runner",
    "ctxmgmt.agents.records",
    "ctxmgmt.agents.conversation",
    "ctxmgmt.agents.tools",
)
__dir__ = __getattr__.dir
