"""Old import paths of moved names: they keep working for one release, with a warning."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["moved"]


def moved(old: str, homes: Mapping[str, ModuleType]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that serves each name of ``homes`` from its new
    module, with a DeprecationWarning naming where to import it from."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {home.__name__}.{name}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(home, name)

    return __getattr__
