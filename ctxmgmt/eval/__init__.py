"""``ctxmgmt eval``: replay recorded conversations through definitions, call by call, and
report what each would have sent, cost and kept of what the agent needed again.

>>> import ctxmgmt
>>> report = ctxmgmt.eval(conversations, ["default", "cache-aware"], windows=[16000, 32000])
>>> print(report.table()); report.to_dict(); report.svg()

``ctxmgmt.eval(...)`` and ``ctxmgmt.evaluate(...)`` are the same function (the package is
callable, so its parts stay importable as ``ctxmgmt.eval.<name>``; type checkers know the
function by its name ``evaluate``, also ``ctxmgmt.eval.run``).
"""

import sys
import types
from typing import Any

from .replay import BASELINE_MASKING, BASELINE_WINDOW, Call, Chat, ConversationLike, Row
from .report import SCHEMA, Report, evaluate

run = evaluate

__all__ = [
    "BASELINE_MASKING",
    "BASELINE_WINDOW",
    "SCHEMA",
    "Call",
    "Chat",
    "ConversationLike",
    "Report",
    "Row",
    "evaluate",
    "run",
]


class _Callable(types.ModuleType):
    """This package, callable as :func:`evaluate` (``ctxmgmt.eval(...)``, as documented)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
