"""The extension surface: what a context manager is, and what it is handed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .._resources import schema
from ..formats import CHAT, Constraints
from ..types import Hook

if TYPE_CHECKING:
    from ..cache import PromptCache
    from ..calibration import Calibration
    from ..context import Context
    from ..llm import HTTPPool, ModelsConfig
    from ..offload import Offloader
    from ..tokens import TokenCounter

__all__ = ["ContextManager", "Environment", "Runtime"]

NO_STORE = (
    "needs an offload store "
    "(offload: in the configuration, --offload DIR for ctxmgmt apply, or offloader= in Python)"
)


@dataclass(frozen=True, slots=True)
class Environment:
    """What the caller of a hook run gives it, built once by the caller (the runner, an
    adapter, :meth:`~ctxmgmt.Definition.apply`) and handed on whole."""

    models: ModelsConfig | None = None
    """Where the summariser's model is configured."""
    offloader: Offloader | None = None
    """Where removed content is archived first, when offload is configured."""
    session: str = "default"
    """The conversation the offloaded content belongs to (the runner uses the memory id)."""
    execution: str | None = None
    """The agent execution this hook run belongs to (None outside the runner)."""
    pool: HTTPPool | None = None
    """Open HTTP clients for model calls; their owner closes them. Without one, sync calls
    use the process's pool and each async call opens and closes a client of its own."""
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
    offloader: Offloader | None = None
    """Where removed content is archived first (for this manager run: its archives are
    written in one batch), or None."""
    constraints: Constraints = CHAT
    """What the provider asks of the list beyond the chat rules (``user_first``)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Facts a manager reports for its trace entry (``runtime.details["removed"] = 3``)."""

    @property
    def models(self) -> ModelsConfig | None:
        return self.environment.models

    @property
    def session(self) -> str:
        """The conversation the offloaded content belongs to."""
        return self.environment.session

    @property
    def execution(self) -> str | None:
        return self.environment.execution

    @property
    def pool(self) -> HTTPPool | None:
        return self.environment.pool


class ContextManager:
    """Base class for context managers. Subclass it, set ``type_name`` and
    ``config_schema`` (a JSON Schema, Draft 2020-12, for ``config``), implement
    :meth:`apply`, and register the class (entry-point group ``ctxmgmt.managers``
    or :func:`ctxmgmt.register_manager`).

    One instance is built per definition entry, with the entry's config, schema
    defaults filled in. ``apply`` returns a new :class:`~ctxmgmt.Context`; it must
    not mutate its input, and must keep tool calls with their results.
    """

    type_name: ClassVar[str]
    config_schema: ClassVar[Mapping[str, Any]]

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def apply(self, context: Context, runtime: Runtime) -> Context:
        raise NotImplementedError

    async def aapply(self, context: Context, runtime: Runtime) -> Context:
        """The async form; override only when the manager does I/O."""
        return self.apply(context, runtime)


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


def with_defaults(schema: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with the schema's top-level defaults filled in, and its whole-number floats
    made integers where the schema wants one (JSON Schema takes 2.0 as an integer; slices
    and ranges do not)."""
    import copy

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
