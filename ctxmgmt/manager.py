"""The extension surface: what a context manager is, what it declares, and what it is handed.

A manager declares its capabilities as class attributes, checked by the registry when it
registers (see :mod:`ctxmgmt.registry`):

- ``archives``: it archives what it removes whenever an offload store is given (so that the
  model may need the recall tools, and a simulation gives it a throwaway store). A manager
  that cannot work without a store says so itself, in :meth:`ContextManager.apply`: an
  :class:`~ctxmgmt.OffloadError` that says how to give one (its config decides, as
  ``without_store: cut`` does for the built-ins), traced or raised per ``on_error``;
- ``trusted``: its output is checked only where it changed. Only the built-ins are trusted:
  a plugin's output is checked whole.

This module is the engine's: it imports no built-in manager, no store and no LLM client.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import OffloadError
from .formats import CHAT, Constraints
from .types import Hook

log = logging.getLogger("ctxmgmt.managers")

if TYPE_CHECKING:
    from .archive import Archive
    from .cache import PromptCache
    from .calibration import Calibration
    from .context import Context
    from .tokens import TokenCounter

__all__ = ["CAPABILITIES", "ContextManager", "Environment", "Runtime", "with_defaults"]

CAPABILITIES = ("archives", "trusted")
"""The capabilities a manager class declares (each a bool class attribute)."""


@dataclass(frozen=True, slots=True)
class Environment:
    """What the caller of a hook run gives it, built once by the caller (the runner, an
    adapter, :meth:`~ctxmgmt.Definition.apply`) and handed on whole."""

    models: Mapping[str, Any] | None = None
    """Where the summariser's model is configured (a :class:`~ctxmgmt.ModelsConfig`)."""
    offloader: Archive | None = None
    """Where removed content is archived first, when offload is configured."""
    session: str = "default"
    """The conversation the offloaded content belongs to (the runner uses the memory id)."""
    execution: str | None = None
    """The agent execution this hook run belongs to (None outside the runner)."""
    pool: object | None = None
    """Open HTTP clients for model calls (a :class:`ctxmgmt.llm.HTTPPool`); their owner closes
    them. Without one, sync calls use the process's pool and each async call opens and
    closes a client of its own."""
    user_first: bool = False
    """The provider wants a user message first (as Anthropic, Gemini and Bedrock do), whatever
    the messages' format: windows and summaries keep one first."""
    calibration: Calibration | None = None
    """Per model, the ratio of the provider's reported tokens to ctxmgmt's count: activation
    rules and the fit step compare calibrated counts (see :mod:`ctxmgmt.calibration`)."""
    cache: PromptCache | None = None
    """The conversation's previous request: with ``settings: {cache: aware}``, a hook run
    postpones edits of its reusable prefix that do not pay (see :mod:`ctxmgmt.cache`)."""

    def ratio(self, model: str | None) -> float:
        """The calibration factor for a model's counts (1.0 without a calibration)."""
        return self.calibration.ratio(model) if self.calibration is not None else 1.0

    def window_ratio(self, model: str | None) -> float:
        """The factor for checking a request against its window: the ratio, never below 1."""
        return self.calibration.window_ratio(model) if self.calibration is not None else 1.0


DEFAULT_ENVIRONMENT = Environment()


@dataclass(slots=True)
class Runtime:
    """What a manager may use during one hook run. Managers do no other I/O."""

    hook: Hook
    counter: TokenCounter
    definition: str
    environment: Environment = DEFAULT_ENVIRONMENT
    offloader: Archive | None = None
    """Where removed content is archived first (for this manager run: its archives are
    written in one batch), or None."""
    constraints: Constraints = CHAT
    """What the provider asks of the list beyond the chat rules (``user_first``)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Facts a manager reports for its trace entry (``runtime.details["removed"] = 3``)."""
    room: int | None = None
    """The counted tokens a request may have (the window less the reply's reserve, as the fit
    step reckons it), or None when the window is unknown: what a manager adds (a summary)
    should leave the rest within it."""

    @property
    def models(self) -> Mapping[str, Any] | None:
        return self.environment.models

    @property
    def session(self) -> str:
        """The conversation the offloaded content belongs to."""
        return self.environment.session

    @property
    def execution(self) -> str | None:
        return self.environment.execution

    def holds(self, ref: str, offset: int, unit: str, text: str) -> bool:
        """Whether the conversation's archive ``ref`` holds ``text`` from ``offset`` (in
        ``unit``: chars or lines) on (:data:`~ctxmgmt.messages.Holds`). No store holds
        anything; nor does one that cannot say: what is cut is then archived, or the
        archive's failure said as any other."""
        if self.offloader is None or unit not in ("chars", "lines"):
            return False
        limit = len(text) if unit == "chars" else len(text.splitlines()) + 1
        try:
            got = self.offloader.read(self.session, ref, offset=offset, limit=limit, unit=unit)  # type: ignore[arg-type]
        except (OffloadError, ValueError):  # not held (or no reference at all)
            return False
        except Exception:
            log.warning("the offload store could not say whether it holds %s", ref, exc_info=True)
            return False
        return got.text.startswith(text)

    @property
    def pool(self) -> object | None:
        return self.environment.pool


class ContextManager:
    """Base class for context managers. Subclass it, set ``type_name`` and
    ``config_schema`` (a JSON Schema, Draft 2020-12, for ``config``), implement
    :meth:`apply`, declare what it does (``archives = True`` for a manager that archives
    what it removes when given a store),
    and register the class (entry-point group ``ctxmgmt.managers`` or
    :func:`ctxmgmt.register_manager`).

    One instance is built per definition entry, with the entry's config, schema
    defaults filled in. ``apply`` returns a new :class:`~ctxmgmt.Context`; it must
    not mutate its input, and must keep tool calls with their results.
    """

    type_name: ClassVar[str]
    config_schema: ClassVar[Mapping[str, Any]]
    archives: ClassVar[bool] = False
    """It archives what it removes whenever an offload store is given."""
    trusted: ClassVar[bool] = False
    """Its output is checked only where it changed; for ctxmgmt's built-ins only."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def apply(self, context: Context, runtime: Runtime) -> Context:
        raise NotImplementedError

    async def aapply(self, context: Context, runtime: Runtime) -> Context:
        """The async form; override only when the manager does I/O."""
        return self.apply(context, runtime)

    @property
    def awaits(self) -> bool:
        """Whether :meth:`aapply` awaits I/O with this config (a model call): such a manager
        is awaited on the event loop, the others run in a worker thread with the rest of the
        hook. By default, whether the class has an ``aapply`` of its own."""
        return type(self).aapply is not ContextManager.aapply


def with_defaults(schema: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with the schema's top-level defaults filled in, and its whole-number floats
    made integers where the schema wants one (JSON Schema takes 2.0 as an integer; slices
    and ranges do not)."""
    properties = schema.get("properties", {})
    out = {
        key: copy.deepcopy(prop["default"])
        for key, prop in properties.items()
        if isinstance(prop, Mapping) and "default" in prop
    }
    out.update(config)
    for key, value in out.items():
        prop = properties.get(key)
        if isinstance(value, float) and isinstance(prop, Mapping) and prop.get("type") == "integer":
            out[key] = int(value)  # valid, so whole
    return out
