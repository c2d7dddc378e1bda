"""The import graph of ctxmgmt: no cycle, and no arrow from a layer to one above it.

Every import counts: at module level, inside functions (lazy), and under
``TYPE_CHECKING``. An import of a name from a package counts as an import of the
submodule when there is one of that name (``from . import archive``), else of the
package. Imports made from strings (the registry's table of built-ins) are not
arrows: that is how the registry knows its built-ins without importing them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import ctxmgmt

ROOT = Path(ctxmgmt.__file__).parent

ENGINE = (
    "ctxmgmt._deprecated",
    "ctxmgmt._memo",
    "ctxmgmt._o200k",
    "ctxmgmt._resources",
    "ctxmgmt.archive",
    "ctxmgmt.cache",
    "ctxmgmt.calibration",
    "ctxmgmt.context",
    "ctxmgmt.definitions",
    "ctxmgmt.digest",
    "ctxmgmt.errors",
    "ctxmgmt.fit",
    "ctxmgmt.formats",
    "ctxmgmt.history",
    "ctxmgmt.hooks",
    "ctxmgmt.loader",
    "ctxmgmt.manager",
    "ctxmgmt.marks",
    "ctxmgmt.messages",
    "ctxmgmt.registry",
    "ctxmgmt.rules",
    "ctxmgmt.summaries",
    "ctxmgmt.telemetry",
    "ctxmgmt.tokens",
    "ctxmgmt.truncation",
    "ctxmgmt.types",
    "ctxmgmt.validation",
)
"""The engine: the value types, the formats, the hook pipeline and what it stands on."""

ENTRY_POINTS = (
    "ctxmgmt.adapters",
    "ctxmgmt.agents",
    "ctxmgmt.api",
    "ctxmgmt.cli",
    "ctxmgmt.client",
    "ctxmgmt.eval",
    "ctxmgmt.runner",
    "ctxmgmt.testing",
    "ctxmgmt.tools",
)
"""The ways in, and what only they use: they may import anything below them."""

LAYER_RULES: Mapping[str, tuple[str, ...]] = {
    # The engine knows no plugin (built-in managers included), no store, no archive store and
    # no model client: the registry names its built-ins by string; archives go through
    # ctxmgmt.archive.Archive, which the offload package implements.
    **{
        module: (
            "ctxmgmt.managers",
            "ctxmgmt.offload",
            "ctxmgmt.store",
            "ctxmgmt.llm",
            "ctxmgmt._reply",
            *ENTRY_POINTS,
        )
        for module in ENGINE
    },
    # The built-in managers are plugins of the engine: no store, no entry point.
    "ctxmgmt.managers": ("ctxmgmt.offload", "ctxmgmt.store", *ENTRY_POINTS),
    # The archive stores implement the engine's protocol; the SQL one keeps its table with
    # the store's others (ctxmgmt.store.models) and uses nothing else of the store.
    "ctxmgmt.offload": (
        "ctxmgmt.managers",
        "ctxmgmt.llm",
        "ctxmgmt.store.agents",
        "ctxmgmt.store.evals",
        "ctxmgmt.store.executions",
        "ctxmgmt.store.repository",
        *ENTRY_POINTS,
    ),
    # The store keeps documents and rows, and runs nothing (it builds a definition to resolve
    # one: ctxmgmt.definitions is below it).
    "ctxmgmt.store": (
        "ctxmgmt.hooks",
        "ctxmgmt.fit",
        "ctxmgmt.managers",
        "ctxmgmt.offload",
        "ctxmgmt.llm",
        *ENTRY_POINTS,
    ),
}
"""A module (or every module of a package) -> what it must never import."""


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _package(name: str, path: Path) -> str:
    """The package a module's relative imports start from."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its code."""
    known = set(known)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name, path).split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" for alias in node.names]
            targets = [t if t in known else module for t in targets]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` imports the nearest module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = _modules(root)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of the graph as a path ``[a, b, ..., a]``, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(graph: Mapping[str, Iterable[str]], rules: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Every import that a layer rule forbids, as ``importer -> imported (rule)``."""
    out = []
    for module, targets in sorted(graph.items()):
        for layer, forbidden in rules.items():
            if not _within(module, layer):
                continue
            for target in sorted(targets):
                for never in forbidden:
                    if _within(target, never) and not _within(module, never):
                        out.append(f"{module} -> {target} ({layer} never imports {never})")
    return out


GRAPH = import_graph()


def test_the_package_has_no_import_cycle():
    """No module reaches itself through imports, lazy and TYPE_CHECKING ones included."""
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_packages_have_no_import_cycle():
    """Taken a package at a time (ctxmgmt.formats, ctxmgmt.store, ... each one node), the
    graph has no cycle either: no package reaches back into one that imports it."""
    packages: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        top = ".".join(module.split(".")[:2])
        packages.setdefault(top, set()).update(
            ".".join(t.split(".")[:2]) for t in targets if ".".join(t.split(".")[:2]) != top
        )
    cycle = find_cycle(packages)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or ())


def test_no_layer_imports_one_above_it():
    """The engine imports no built-in manager, store, archive store, model client or entry
    point; the store and the archive stores import no entry point and not each other."""
    assert violations(GRAPH, LAYER_RULES) == []


def test_every_engine_module_exists():
    """The layer rules name real modules (a renamed module cannot slip out of them)."""
    missing = [m for m in [*ENGINE, "ctxmgmt.managers", "ctxmgmt.offload", "ctxmgmt.store"] if m not in GRAPH]
    assert missing == []


def test_the_graph_counts_lazy_and_type_checking_imports(tmp_path):
    """A cycle made only of a function-level import and a TYPE_CHECKING import is found,
    with its path, and a forbidden lazy import is reported."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (pkg / "high.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import low\n"
    )
    (pkg / "side.py").write_text("from . import low\n")
    graph = import_graph(pkg)
    assert find_cycle(graph) in (["pkg.high", "pkg.low", "pkg.high"], ["pkg.low", "pkg.high", "pkg.low"])
    assert violations(graph, {"pkg.low": ("pkg.high",)}) == [
        "pkg.low -> pkg.high (pkg.low never imports pkg.high)"
    ]
    assert graph["pkg.side"] == {"pkg.low"}


@pytest.mark.parametrize("name", ["ctxmgmt.context", "ctxmgmt.hooks", "ctxmgmt.definitions", "ctxmgmt.fit"])
def test_an_engine_module_imports_no_builtin_manager(name):
    """The named engine modules reach no built-in manager through any chain of imports."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(GRAPH[module])
    assert not [m for m in seen if _within(m, "ctxmgmt.managers")]


def test_context_checks_formats_it_does_not_import():
    """Context.from_dict rejects what the provider would, in a fresh interpreter that imports
    only ctxmgmt.context: the formats hand their check in as ctxmgmt is imported."""
    import subprocess
    import sys

    code = (
        "from ctxmgmt.context import Context\n"
        "from ctxmgmt.errors import ContextError\n"
        "try:\n"
        "    Context.from_dict({'messages': [{'role': 'tool', 'content': 'x'}], 'format': 'anthropic'})\n"
        "except ContextError as exc:\n"
        "    print(exc.problems[0].pointer)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("/messages/0"), out.stderr


def test_importing_the_package_imports_no_store_client_or_evaluation():
    """``import ctxmgmt`` (which every ``import ctxmgmt.<module>`` runs first) leaves the SQL
    store, the HTTP client and the evaluation unimported until a name of theirs is used; then
    the name is its home module's object."""
    import subprocess
    import sys

    heavy = ("sqlalchemy", "alembic", "httpx", "jsonschema", "ctxmgmt.store", "ctxmgmt.eval")
    code = (
        "import sys, ctxmgmt\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
        "from ctxmgmt.store import DefinitionStore\n"
        "print(ctxmgmt.DefinitionStore is DefinitionStore, 'ctxmgmt.store' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == ["[]", "True True"], out.stderr
