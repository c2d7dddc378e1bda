"""Old import paths of moved modules: each name still resolves, with a DeprecationWarning,
for one release."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def moved(old: str, *new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that hands out the names of the ``new`` modules
    (the first that has it), warning."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # import machinery and introspection: not a use of the module
            raise AttributeError(name)
        for home in new:
            module = importlib.import_module(home)
            if hasattr(module, name):
                break
        else:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        value = getattr(module, name)
        warnings.warn(
            f"{old} is deprecated and goes away in the next release: import {name} from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__
