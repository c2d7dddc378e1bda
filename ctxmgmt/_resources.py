"""Where the shipped schemas and definitions are: inside the wheel, or the checkout."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    """``schemas`` or ``definitions``: ``ctxmgmt/_data/<name>`` in a wheel, else the repo's."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"ctxmgmt's {name}/ folder is missing from the installation")


@cache
def schema(relative: str) -> Any:
    """A JSON Schema from ``schemas/``, by its path relative to that folder."""
    with open(data_dir("schemas") / relative, encoding="utf-8") as f:
        return json.load(f)
