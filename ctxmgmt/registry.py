"""Manager types by name: the built-ins, entry-point plugins, and registered classes.

A type is checked when it registers, not when it runs: its name, its config
schema (valid Draft 2020-12, an object), its interface, and the capabilities it
declares (see :mod:`ctxmgmt.manager`). Built-ins cannot be shadowed.

The registry knows the built-ins by name (:data:`BUILTINS`, ``"module:Class"``) and
imports each on first use: importing ctxmgmt registers nothing, and the engine
imports no built-in manager.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import threading
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import RegistryError
from .manager import CAPABILITIES, ContextManager

__all__ = ["BUILTINS", "ENTRY_POINT_GROUP", "ManagerRegistry", "default_registry", "register_manager"]

log = logging.getLogger("ctxmgmt.registry")

ENTRY_POINT_GROUP = "ctxmgmt.managers"
_TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,99}")

BUILTINS: Mapping[str, str] = {
    "AutoCompactManager": "ctxmgmt.managers.autocompact:AutoCompactManager",
    "SlidingWindowManager": "ctxmgmt.managers.sliding_window:SlidingWindowManager",
    "SummarizationManager": "ctxmgmt.managers.summarization:SummarizationManager",
    "ToolResultClearingManager": "ctxmgmt.managers.clearing:ToolResultClearingManager",
    "ToolResultCompactionManager": "ctxmgmt.managers.compaction:ToolResultCompactionManager",
    "ToolsOutputTruncateManager": "ctxmgmt.managers.truncate:ToolsOutputTruncateManager",
}
"""The built-in manager types: name -> ``"module:Class"``, imported when first asked for. The
one list of them: :data:`ctxmgmt.managers.BUILTINS` (the classes) is made from it."""


class ManagerRegistry:
    """Maps manager type names to classes."""

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self.group = group
        self._types: dict[str, type[Any]] = {}
        self._plugins_loaded = False
        self._lock = threading.RLock()
        self.load_errors: dict[str, str] = {}
        """Entry points that failed to load: name -> reason."""

    def register(self, cls: type[Any], *, plugin: str | None = None, builtin: bool = False) -> type[Any]:
        """Register a manager class after checking it. Returns the class, so it can decorate.
        ``builtin``: the class is the one :data:`BUILTINS` names for its type."""
        name = _check_manager_class(cls, plugin)
        if builtin and BUILTINS.get(name) != f"{cls.__module__}:{cls.__qualname__}":
            raise RegistryError(
                f"{name!r} is not a built-in manager type ({', '.join(BUILTINS)} are): "
                "register it without builtin=True",
                plugin=plugin or _where(cls),
            )
        with self._lock:
            if name in BUILTINS and not builtin:
                raise RegistryError(
                    f"{name!r} is a built-in manager type and cannot be replaced; "
                    "give your manager another type_name",
                    plugin=plugin or _where(cls),
                )
            existing = self._types.get(name)
            if existing is not None and existing is not cls:
                raise RegistryError(
                    f"manager type {name!r} is already registered by {_where(existing)}",
                    plugin=plugin or _where(cls),
                )
            self._types[name] = cls
        return cls

    def get(self, name: str) -> type[Any] | None:
        cls = self._types.get(name)
        if cls is None and name in BUILTINS:
            cls = self._load_builtin(name)
        if cls is None and not self._plugins_loaded:
            self.load_entrypoints()
            cls = self._types.get(name)
        return cls

    def names(self) -> list[str]:
        for name in BUILTINS:
            self.get(name)
        self.load_entrypoints()
        return sorted(self._types)

    def is_builtin(self, name: str) -> bool:
        return name in BUILTINS

    def _load_builtin(self, name: str) -> type[Any]:
        """Import a built-in by its ``"module:Class"`` and register it (checked like any)."""
        module, _, qualname = BUILTINS[name].partition(":")
        cls = getattr(importlib.import_module(module), qualname)
        if getattr(cls, "type_name", None) != name:
            raise RegistryError(
                f"the built-in {name!r} names {module}:{qualname}, whose type_name is "
                f"{getattr(cls, 'type_name', None)!r}",
                plugin=f"{module}:{qualname}",
            )
        return self.register(cls, builtin=True)

    def load_entrypoints(self) -> None:
        """Load the plugins of the entry-point group, once. A broken plugin is logged
        and remembered in ``load_errors``; it does not stop the others."""
        with self._lock:
            if self._plugins_loaded:
                return
            self._plugins_loaded = True
            for ep in entry_points(group=self.group):
                plugin = f"{ep.value} (entry point {ep.name!r})"
                try:
                    cls = ep.load()
                    if getattr(cls, "type_name", None) != ep.name:
                        raise RegistryError(
                            f"the entry point is named {ep.name!r} but the class's type_name "
                            f"is {getattr(cls, 'type_name', None)!r}; make them equal",
                            plugin=plugin,
                        )
                    self.register(cls, plugin=plugin)
                except Exception as exc:
                    self.load_errors[ep.name] = str(exc)
                    log.warning("manager plugin %s failed to load: %s", plugin, exc)


def _where(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_manager_class(cls: Any, plugin: str | None) -> str:
    if not inspect.isclass(cls):
        raise RegistryError(f"expected a class, got {cls!r}", plugin=plugin)
    where = plugin or _where(cls)
    name = getattr(cls, "type_name", None)
    if not isinstance(name, str) or not _TYPE_NAME.fullmatch(name):
        raise RegistryError(
            "type_name must be a string of letters, digits, _ . and -, starting with a letter",
            plugin=where,
        )
    schema = getattr(cls, "config_schema", None)
    if not isinstance(schema, Mapping):
        raise RegistryError(f"{name}: config_schema must be a JSON Schema object", plugin=where)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise RegistryError(
            f"{name}: config_schema is not a valid JSON Schema: {exc.message}", plugin=where
        ) from exc
    if schema.get("type") != "object":
        raise RegistryError(f'{name}: config_schema must have "type": "object"', plugin=where)
    apply = getattr(cls, "apply", None)
    if not callable(apply) or apply is ContextManager.apply:
        raise RegistryError(f"{name}: the class must implement apply(context, runtime)", plugin=where)
    try:
        inspect.signature(cls).bind({})
    except TypeError as exc:
        raise RegistryError(f"{name}: the class must be constructible as cls(config)", plugin=where) from exc
    _check_capabilities(cls, name, where)
    return name


def _check_capabilities(cls: Any, name: str, where: str) -> None:
    """The capabilities a class declares (:data:`~ctxmgmt.manager.CAPABILITIES`) must be
    bools, and only a class of :data:`BUILTINS` may be trusted."""
    declared = {cap: getattr(cls, cap, False) for cap in CAPABILITIES}
    for cap, value in declared.items():
        if not isinstance(value, bool):
            raise RegistryError(
                f"{name}: {cap} must be True or False, not {value!r}; declare it as a class attribute",
                plugin=where,
            )
    if declared["trusted"] and f"{cls.__module__}:{cls.__qualname__}" not in BUILTINS.values():
        owner = next(c for c in cls.__mro__ if "trusted" in vars(c))
        how = "declares" if owner is cls else f"inherits from {owner.__qualname__}"
        raise RegistryError(
            f"{name}: {how} trusted = True, which is for ctxmgmt's built-in managers only "
            "(their output is checked only where it changed); set trusted = False in the class: "
            "a plugin's output is checked whole",
            plugin=where,
        )


default_registry = ManagerRegistry()


def register_manager(cls: type[Any]) -> type[Any]:
    """Register a third-party manager class in the default registry (usable as a decorator)."""
    return default_registry.register(cls)
