"""Old import paths: one helper (ctxmgmt._deprecated) serves every moved name, warning."""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

import ctxmgmt

ROOT = Path(ctxmgmt.__file__).parent


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("ctxmgmt.runner", "Runner", "ctxmgmt.agents.runner"),
        ("ctxmgmt.llm", "ANTHROPIC_VERSION", "ctxmgmt.llm.config"),
        ("ctxmgmt.managers.truncate", "OFFLOADED", "ctxmgmt.marks"),
        ("ctxmgmt.offload.base", "Batch", "ctxmgmt.archive"),
    ],
)
def test_every_old_path_warns_in_the_same_words(old, name, new):
    """A moved module and a module some names moved out of give the same warning: the old
    name, its new home, and what to import instead."""
    module = importlib.import_module(old)
    expected = f"{old}.{name} moved to {new}.{name}: import {name} from {new} "
    with pytest.warns(DeprecationWarning, match=f"^{re.escape(expected)}"):
        getattr(module, name)


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("ctxmgmt.managers.truncate", "KEY_FILE", "ctxmgmt.marks"),
        ("ctxmgmt.managers.base", "CAPABILITIES", "ctxmgmt.manager"),
        ("ctxmgmt.offload.base", "repeatable_refs", "ctxmgmt.archive"),
    ],
)
def test_a_name_that_did_not_move_is_not_served_from_the_new_home(old, name, new):
    """A module only some names moved out of serves those names only: another name of the
    new home is an AttributeError there, without a warning."""
    module = importlib.import_module(old)
    assert hasattr(importlib.import_module(new), name) and name not in vars(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"has no attribute {name!r}"):
            getattr(module, name)


def test_deprecation_warnings_come_from_one_helper():
    """No module of ctxmgmt but ctxmgmt._deprecated raises a DeprecationWarning itself."""
    raisers = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id == "DeprecationWarning":
                raisers.append(path.relative_to(ROOT).as_posix())
                break
    assert raisers == ["_deprecated.py"]
