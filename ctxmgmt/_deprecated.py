"""Old import paths of moved names and modules: they keep working for one release, with a
DeprecationWarning naming where to import each name from."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["moved"]


def moved(old: str, *new: str, names: Collection[str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that serves a name from the first of the ``new``
    modules that has it (imported at first use), warning. ``names``: only these moved (the
    old module still holds the rest); by default every name of the new modules is served."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or (names is not None and name not in names):
            # import machinery and introspection are not a use of the module
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        for home in new:
            module = importlib.import_module(home)
            if hasattr(module, name):
                break
        else:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {home}.{name}: import {name} from {home} "
            "(the old path goes away in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(module, name)

    return __getattr__
