"""Context-management definitions: validated values that apply their hooks to a context."""

from __future__ import annotations

import asyncio
import copy
import difflib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._resources import data_dir
from .context import ApplyResult, Context
from .errors import ContextError, DefinitionError, Problem
from .formats import CHAT, Internal, internal
from .hooks import Entry, arun_hook, awaits, run_hook
from .loader import Document, load_document
from .manager import DEFAULT_ENVIRONMENT, Environment, with_defaults
from .registry import ManagerRegistry, default_registry
from .rules import Activation
from .tokens import get_counter
from .types import HOOK_NAMES, Hook
from .validation import validate_definition

if TYPE_CHECKING:
    from .archive import Archive

__all__ = ["Definition", "ManagerSpec", "Resolver", "load_definition", "parse_hook"]


def parse_hook(hook: str | Hook) -> Hook:
    """A hook from its name in any case."""
    if type(hook) is str:
        found = _HOOKS.get(hook)
        if found is not None:
            return found
    try:
        return Hook(hook.lower()) if isinstance(hook, str) else Hook(hook)
    except ValueError:
        close = difflib.get_close_matches(str(hook).lower(), HOOK_NAMES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ContextError(
            [Problem("/hook", f"unknown hook {hook!r}; {hint}hooks are {', '.join(HOOK_NAMES)}")]
        ) from None


_HOOKS: dict[str, Hook] = {h.value: h for h in Hook}
"""Hooks by their own (lower-case) names: the common case, without an Enum lookup."""


@dataclass(frozen=True, slots=True)
class ManagerSpec:
    """One entry of a hook, as written: type, config, activation, error policy."""

    type: str
    config: Mapping[str, Any]
    activation: Activation
    on_error: str = "skip"
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, eq=False)
class Definition:
    """A validated context-management definition.

    Build one with :func:`load_definition`. Manager instances are built once per
    definition, one per entry, on first use.
    """

    name: str
    description: str
    hooks: Mapping[Hook, tuple[ManagerSpec, ...]]
    settings: Mapping[str, Any]
    registry: ManagerRegistry = field(default=default_registry, repr=False)
    _plans: dict[Hook, tuple[Entry, ...]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        registry: ManagerRegistry | None = None,
        document: Document | None = None,
    ) -> Definition:
        """Validate a definition document and build it; raise DefinitionError listing
        every problem."""
        registry = registry or default_registry
        problems = validate_definition(document or data, registry=registry)
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            raise DefinitionError(errors)
        hooks: dict[Hook, tuple[ManagerSpec, ...]] = {}
        for key, entries in data["hooks"].items():
            hooks[Hook(key.lower())] = tuple(_spec(e) for e in entries)
        return cls(
            name=data["name"],
            description=data.get("description", ""),
            hooks=hooks,
            settings=dict(data.get("settings", {})),
            registry=registry,
        )

    def to_dict(self) -> dict[str, Any]:
        """The definition as a document, hook names normalised to lower case."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.settings:
            out["settings"] = dict(self.settings)
        out["hooks"] = {
            h.value: [copy.deepcopy(dict(s.raw)) for s in specs] for h, specs in self.hooks.items()
        }
        return out

    @property
    def tokenizer(self) -> str:
        return str(self.settings.get("tokenizer", "auto"))

    def _plan(self, hook: Hook) -> tuple[Entry, ...]:
        plan = self._plans.get(hook)
        if plan is None:
            with self._lock:
                plan = self._plans.get(hook)
                if plan is None:
                    plan = tuple(self._build(i, spec) for i, spec in enumerate(self.hooks.get(hook, ())))
                    self._plans[hook] = plan
        return plan

    def _build(self, index: int, spec: ManagerSpec) -> Entry:
        cls = self.registry.get(spec.type)
        if cls is None:  # a plugin that was unregistered since validation
            raise DefinitionError([Problem(f"/hooks/{index}/type", f"unknown manager type {spec.type!r}")])
        config = with_defaults(cls.config_schema, spec.config)
        return Entry(index, spec.type, cls(config), spec.activation, spec.on_error)

    def apply(
        self,
        hook: str | Hook,
        context: Context,
        *,
        environment: Environment | None = None,
        models: Mapping[str, Any] | None = None,
        offloader: Archive | None = None,
        session: str = "default",
        execution: str | None = None,
    ) -> ApplyResult:
        """Run the hook's managers on the context. Returns the new context and the trace;
        the input is never changed. The caller's environment is given whole as
        ``environment``, or field by field (``models``, ``offloader``, ``session``,
        ``execution``) for a one-off call."""
        env = _environment(environment, models, offloader, session, execution)
        run, back = self._run(hook, context)
        return back(run_hook(*run, env, self.settings, constraints=back.constraints))

    async def aapply(
        self,
        hook: str | Hook,
        context: Context,
        *,
        environment: Environment | None = None,
        models: Mapping[str, Any] | None = None,
        offloader: Archive | None = None,
        session: str = "default",
        execution: str | None = None,
    ) -> ApplyResult:
        """The async form of :meth:`apply`: nothing of it blocks the event loop (the format
        conversions, the managers' work and the archive writes run in worker threads; a
        summariser's model calls are awaited)."""
        env = _environment(environment, models, offloader, session, execution)
        if not await self.aawaits_in(hook):  # CPU work only: one worker thread for all of it
            return await asyncio.to_thread(self.apply, hook, context, environment=env)
        run, back = await asyncio.to_thread(self._run, hook, context)
        result = await arun_hook(*run, env, self.settings, constraints=back.constraints)
        return back(result) if back is _SAME else await asyncio.to_thread(back, result)

    async def aawaits_in(self, hook: str | Hook | None = None) -> bool:
        """Whether a manager of the hook (of any hook, with None) awaits I/O with its config
        (a summary by a model): otherwise an async run is CPU work from end to end. The
        managers are built off the event loop the first time (a constructor may be slow)."""
        hooks = self.hooks if hook is None else (parse_hook(hook),)

        def ask() -> bool:
            return any(awaits(entry.manager) for h in hooks for entry in self._plan(h))

        return ask() if all(h in self._plans for h in hooks) else await asyncio.to_thread(ask)

    def _run(
        self, hook: str | Hook, context: Context
    ) -> tuple[tuple[str, Hook, tuple[Entry, ...], Context, Any], Internal | _Same]:
        """What a hook run is given besides the caller's environment (the plan, the context in
        the internal form, the counter for its model), and the way back to the context's format."""
        h = parse_hook(hook)
        way = internal(context)
        back: Internal | _Same = way if way is not None else _SAME
        inner = way.context if way is not None else context
        return (self.name, h, self._plan(h), inner, get_counter(inner.model, self.tokenizer)), back

    @property
    def archives(self) -> bool:
        """Whether an entry archives what it removes when given an offload store: its class
        declares ``archives`` (see :class:`~ctxmgmt.ContextManager`), or ``offload: true``."""
        return any(
            s.config.get("offload") or getattr(self.registry.get(s.type), "archives", False) is True
            for specs in self.hooks.values()
            for s in specs
        )

    @property
    def offloads(self) -> bool:
        """Whether the definition may archive what it removes when given an offload store (an
        archiving entry, or the fit step), so that the model may need the recall tools."""
        return self.settings.get("fit", True) is not False or self.archives


class _Same:
    """The way back from OpenAI chat, which is the internal form: none."""

    constraints = CHAT

    def __call__(self, result: ApplyResult) -> ApplyResult:
        return result


_SAME = _Same()


RESOLVED_KEPT = 1024
RESOLVED_BYTES = 8 << 20
"""A :class:`Resolver`'s bounds: definitions kept built, and bytes of their keys."""


class Resolver:
    """Definitions built from their documents, each rebuilt only when its version changes:
    the one resolver under the store (by name and stored version), a registry server's
    definition in the adapters (by its version) and the runner's inline definitions (by
    their text). Thread-safe; at most ``kept`` definitions and ``max_bytes`` of keys, the
    least recently used forgotten first."""

    def __init__(
        self,
        registry: ManagerRegistry | None = None,
        *,
        kept: int = RESOLVED_KEPT,
        max_bytes: int = RESOLVED_BYTES,
    ) -> None:
        self.registry = registry
        self.kept = kept
        self.max_bytes = max_bytes
        self._built: OrderedDict[str, tuple[Hashable, Definition]] = OrderedDict()
        self._bytes = 0
        self._forgotten = 0  # forgets so far: a build that began before one is not kept
        self._lock = threading.Lock()

    def resolve(
        self, key: str, version: Hashable, load: Callable[[], tuple[Mapping[str, Any], Hashable]]
    ) -> tuple[Definition, Hashable]:
        """The definition under ``key`` at ``version``: the one built before when its version
        is that, else built from ``load()`` (the document and the version it is at, which
        may be newer than the one asked for: it is the one kept and returned)."""
        with self._lock:
            hit = self._built.get(key)
            if hit is not None and hit[0] == version:
                self._built.move_to_end(key)
                return hit[1], hit[0]
            forgotten = self._forgotten
        document, loaded = load()
        definition = Definition.from_dict(document, registry=self.registry)  # outside the lock
        with self._lock:
            if self._forgotten != forgotten:  # deleted meanwhile: its build is not kept
                return definition, loaded
            if key not in self._built:
                self._bytes += len(key)
            self._built[key] = (loaded, definition)
            self._built.move_to_end(key)
            while len(self._built) > self.kept or self._bytes > self.max_bytes:
                gone, _ = self._built.popitem(last=False)
                self._bytes -= len(gone)
        return definition, loaded

    def forget(self, key: str) -> None:
        """Drop what was built under ``key`` (its definition was deleted)."""
        with self._lock:
            self._forgotten += 1
            if self._built.pop(key, None) is not None:
                self._bytes -= len(key)


def _environment(
    environment: Environment | None,
    models: Mapping[str, Any] | None,
    offloader: Archive | None,
    session: str,
    execution: str | None,
) -> Environment:
    if environment is None:
        if models is None and offloader is None and session == "default" and execution is None:
            return DEFAULT_ENVIRONMENT  # frozen: one for every plain call
        return Environment(models, offloader, session, execution)
    if models is not None or offloader is not None or session != "default" or execution is not None:
        raise TypeError("give the environment whole or field by field, not both")
    return environment


def _spec(entry: Mapping[str, Any]) -> ManagerSpec:
    config = dict(entry.get("config") or {})
    nested = config.pop("activation", None)
    activation = entry.get("activation", nested)
    return ManagerSpec(
        type=entry["type"],
        config=config,
        activation=Activation.parse(activation),
        on_error=entry.get("on_error", "skip"),
        raw=entry,
    )


def load_definition(
    source: str | Path | Mapping[str, Any],
    *,
    registry: ManagerRegistry | None = None,
) -> Definition:
    """A validated definition from a YAML/JSON file path, the name of a shipped
    definition (``"default"``), or a mapping.

    Raises DefinitionError with every problem, each with its JSON pointer (and its
    line, for files).
    """
    if isinstance(source, Mapping):
        return Definition.from_dict(source, registry=registry)
    document = load_document(_path(source))
    if document.problems and document.data is None:
        raise DefinitionError(document.problems)
    if not isinstance(document.data, Mapping):
        raise DefinitionError(validate_definition(document, registry=registry))
    return Definition.from_dict(document.data, registry=registry, document=document)


def shipped_definitions() -> dict[str, Path]:
    """The definitions that ship with ctxmgmt, by name."""
    return {p.stem: p for p in sorted(data_dir("definitions").glob("*.yaml"))}


def _path(source: str | Path) -> Path:
    """A file, or else the shipped definition of that name."""
    path = Path(source)
    if path.exists() or not _SHIPPED_NAME.fullmatch(str(source).lower()):
        return path
    shipped = shipped_definitions()
    if str(source) in shipped:
        return shipped[str(source)]
    close = difflib.get_close_matches(str(source).lower(), list(shipped), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise DefinitionError(
        [
            Problem(
                "",
                f"no such file, and no shipped definition has that name "
                f"({hint}shipped: {', '.join(shipped)})",
                source=str(source),
            )
        ]
    )


_SHIPPED_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,48}")


def check_definition(
    source: str | Path | Mapping[str, Any],
    *,
    registry: ManagerRegistry | None = None,
    model_ids: Iterable[str] | None = None,
) -> list[Problem]:
    """Every problem of a definition file or mapping, errors and warnings, without raising."""
    document = source if isinstance(source, Mapping) else load_document(source)
    return validate_definition(document, registry=registry, model_ids=model_ids)
