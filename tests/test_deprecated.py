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
        ("ctxmgmt.llm", "_tls", "ctxmgmt.llm.client"),  # a private name of the old module too
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


def _shims() -> list[str]:
    """Every module of ctxmgmt that serves moved names (its ``__getattr__`` is the helper's)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__getattr__" for t in node.targets)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "moved"
            ):
                parts = path.relative_to(ROOT.parent).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


SHIMS = _shims()

OLD_NAMES = {
    # The public names each module had before it moved (ctxmgmt 38cdd10^), and where they live now.
    "ctxmgmt.runner": (
        "DEFAULT_EXECUTION_TIMEOUT DEFAULT_MAX_ITERATION EXECUTION_ARCHIVE_BYTES ExecutionResult "
        "INLINE_BYTES INLINE_KEPT MAX_ERROR_CHARS MAX_TOOL_ERROR_CHARS MIN_OUTPUT_BYTES PREVIEWS "
        "PREVIEW_CHARS Runner TURN_OUTPUT_BYTES VIEW_KEY cache_summary execution_record log"
    ),
    "ctxmgmt.tools": (
        "CHUNK_BYTES DEFAULT_MAX_OUTPUT_BYTES DEFAULT_TIMEOUT Factory MAX_ARCHIVE_BYTES MAX_OUTPUT_BYTES "
        "MAX_TIMEOUT MAX_TOOL_THREADS OutputReader TOOLS_GROUP Tool ToolRegistry ToolSpecError "
        "default_tools log recall_tools register_tool"
    ),
    "ctxmgmt.adapters._core": "Conversation DefinitionSource Source Turn log refuse_invalid",
    "ctxmgmt.llm": (
        "ANTHROPIC_VERSION CONFIG_ENV ChatClient ChatResponse DEFAULT_MAX_RESPONSE_BYTES "
        "DEFAULT_MAX_TOKENS HTTPPool ModelConfig ModelsConfig SHARED_POOL load_models parse_json_object"
    ),
}


def test_the_shims_are_found():
    """The scan finds every old path this file pins, and the modules some names moved out of."""
    assert set(OLD_NAMES) <= set(SHIMS)
    assert {"ctxmgmt.managers.base", "ctxmgmt.managers.truncate", "ctxmgmt.offload.base"} <= set(SHIMS)


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_every_name_a_moved_module_had_is_still_reachable_at_its_old_path(old):
    """Each public name a module had before it moved (PREVIEWS, execution_record, ...) is found
    at its old path, with a DeprecationWarning naming its new home, as the object it holds."""
    module = importlib.import_module(old)
    for name in OLD_NAMES[old].split():
        if name in vars(module):  # the old path still defines it (a package's own API)
            continue
        with pytest.warns(DeprecationWarning) as caught:
            value = getattr(module, name)
        found = re.search(rf"import {name} from ([\w.]+)", str(caught[0].message))
        assert found, caught[0].message
        assert getattr(importlib.import_module(found.group(1)), name) is value


@pytest.mark.parametrize("old", SHIMS)
def test_every_public_name_of_the_new_home_is_reachable_from_the_old_path(old):
    """Every public name of the modules a shim serves (all of them for a moved module, the
    listed ones otherwise) is found at the old path with a DeprecationWarning, and dir()
    lists it."""
    module = importlib.import_module(old)
    served = module.__getattr__
    own = vars(module)
    listed = set(dir(module))
    for home in served.modules():
        names = served.names if served.names is not None else [n for n in vars(home) if not n.startswith("_")]
        for name in names:
            if name in own or not hasattr(home, name):
                continue
            first = next(h for h in served.modules() if hasattr(h, name))
            with pytest.warns(DeprecationWarning, match=f"moved to {first.__name__}.{name}"):
                assert getattr(module, name) is getattr(first, name)
            if served.names is None:
                assert name in listed, f"dir({old}) lacks {name}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ctxmgmt.runner", "ctxmgmt.agents.runner"),
        ("ctxmgmt.tools", "ctxmgmt.agents.tools"),
        ("ctxmgmt.adapters._core", "ctxmgmt.agents.conversation"),
    ],
)
def test_import_star_from_a_moved_module_gives_what_its_new_home_gives(old, new):
    """``from <old path> import *`` binds what ``import *`` of the module it moved to binds
    (its ``__all__``, the same objects), warning, and nothing of the shim's own."""
    home = importlib.import_module(new)
    bound: dict = {}
    with pytest.warns(DeprecationWarning):
        exec(f"from {old} import *", bound)  # the statement under test
    bound = {k: v for k, v in bound.items() if not k.startswith("__")}  # __builtins__, __warningregistry__
    assert sorted(bound) == sorted(home.__all__)
    assert all(bound[name] is getattr(home, name) for name in home.__all__)


@pytest.mark.parametrize("old", SHIMS)
def test_a_name_no_new_home_has_is_an_attribute_error_without_a_warning(old):
    """An old path hands out only names its new homes have: any other is an AttributeError,
    and no warning is given for it."""
    module = importlib.import_module(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
            module.no_such_name  # noqa: B018
