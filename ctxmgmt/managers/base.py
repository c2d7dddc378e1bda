"""What the built-in managers share: their schemas, their target, the no-store message.

The manager base itself (:class:`~ctxmgmt.manager.ContextManager`, :class:`~ctxmgmt.manager.Runtime`,
:class:`~ctxmgmt.manager.Environment`) is the engine's, in :mod:`ctxmgmt.manager`; it is
re-exported here and from :mod:`ctxmgmt.managers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import manager as _manager
from .._deprecated import moved
from .._resources import schema
from ..manager import ContextManager, Environment, Runtime

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["NO_STORE", "ContextManager", "Environment", "Runtime", "builtin_schema", "target_tokens"]

NO_STORE = (
    "needs an offload store "
    "(offload: in the configuration, --offload DIR for ctxmgmt apply, or offloader= in Python)"
)


def target_tokens(config: Mapping[str, Any], context: Context, runtime: Runtime) -> int | None:
    """The tokens a reducing manager cuts the whole request down to when it fires (its
    hysteresis: a target below its trigger keeps it quiet for many calls): ``target_tokens``,
    ``target_ratio`` of the window, or the smaller of the two; in counted tokens (a ratio of
    the window is divided by the calibration). None when neither is given."""
    given = []
    if config.get("target_tokens") is not None:
        given.append(int(config["target_tokens"]))
    ratio = config.get("target_ratio")
    if ratio is not None and context.context_window:
        calibrated = runtime.environment.window_ratio(context.model)
        given.append(int(float(ratio) * context.context_window / calibrated))
    return min(given) if given else None


def builtin_schema(type_name: str) -> Mapping[str, Any]:
    return schema(f"managers/{type_name}.schema.json")  # type: ignore[no-any-return]


__getattr__ = moved(__name__, _manager.__name__, names=("DEFAULT_ENVIRONMENT", "with_defaults"))
