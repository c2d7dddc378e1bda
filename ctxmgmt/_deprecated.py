"""Old import paths of moved names and modules: they keep working for one release, with a
DeprecationWarning naming where to import each name from."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Collection
from types import ModuleType
from typing import Any

__all__ = ["Moved", "moved"]


class Moved:
    """A module ``__getattr__`` (and ``__dir__``) for the old path ``old`` of moved names: a
    name is served from the first of the ``new`` modules that has it (imported at first
    use), with a DeprecationWarning. ``names``: only these moved (the old module still holds
    the rest). By default the whole module moved: to the first of ``new`` (``import *`` from
    the old path gives its ``__all__``), some of its names further to the others; every name
    of the new modules is served."""

    __slots__ = ("names", "new", "old")

    def __init__(self, old: str, new: tuple[str, ...], names: Collection[str] | None) -> None:
        self.old, self.new, self.names = old, new, None if names is None else frozenset(names)

    def modules(self) -> list[ModuleType]:
        return [importlib.import_module(home) for home in self.new]

    def public(self) -> list[str]:
        """What ``import *`` gives from the old path: what it gives from the new one."""
        module = importlib.import_module(self.new[0])
        return list(getattr(module, "__all__", (n for n in vars(module) if not n.startswith("_"))))

    def __call__(self, name: str) -> Any:
        if name == "__all__" and self.names is None:
            return self.public()
        if name.startswith("__") or (self.names is not None and name not in self.names):
            # import machinery and introspection are not a use of the module
            raise AttributeError(f"module {self.old!r} has no attribute {name!r}")
        for module in self.modules():
            if hasattr(module, name):
                break
        else:
            raise AttributeError(f"module {self.old!r} has no attribute {name!r}")
        home = module.__name__
        warnings.warn(
            f"{self.old}.{name} moved to {home}.{name}: import {name} from {home} "
            "(the old path goes away in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(module, name)

    def dir(self) -> list[str]:
        """The old module's ``__dir__``: its own names and the moved ones."""
        own = set(vars(sys.modules[self.old]))
        if self.names is not None:
            return sorted(own | self.names)
        found = {name for module in self.modules() for name in dir(module) if not name.startswith("__")}
        return sorted(own | found)


def moved(old: str, new: str, *also: str, names: Collection[str] | None = None) -> Moved:
    """The ``__getattr__`` of the old module ``old`` (see :class:`Moved`); set ``__dir__`` to
    its :meth:`Moved.dir` so that ``dir()`` lists the moved names."""
    return Moved(old, (new, *also), names)
