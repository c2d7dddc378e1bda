import ctxmgmt


def test_all_is_sorted_and_complete():
    """__all__ is sorted and lists every public name the package exposes."""
    assert ctxmgmt.__all__ == sorted(ctxmgmt.__all__)
    public = {
        name
        for name, value in vars(ctxmgmt).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("ctxmgmt")
    }
    assert public <= set(ctxmgmt.__all__)
    for name in ctxmgmt.__all__:
        assert hasattr(ctxmgmt, name), name


def test_builtins_are_registered():
    """Every built-in manager the package exports is a built-in of the default registry,
    found by its type name."""
    exported = [
        getattr(ctxmgmt, n) for n in ctxmgmt.__all__ if n.endswith("Manager") and n != "ContextManager"
    ]
    assert len(exported) == 6
    for cls in exported:
        assert ctxmgmt.default_registry.is_builtin(cls.type_name)
        assert ctxmgmt.default_registry.get(cls.type_name) is cls


def test_the_extension_surface_is_the_engines():
    """The manager base a plugin subclasses is exported from ctxmgmt, ctxmgmt.manager and
    ctxmgmt.managers as one class."""
    from ctxmgmt import manager, managers

    for name in ("ContextManager", "Environment", "Runtime"):
        assert getattr(ctxmgmt, name) is getattr(manager, name) is getattr(managers, name)


def test_every_lazily_imported_name_is_the_one_type_checkers_see():
    """The names ctxmgmt imports at first use (its ``_LAZY`` table) are those its
    ``TYPE_CHECKING`` imports give type checkers, from the same modules, and with the names
    imported at once they make ``__all__``: a name in one list only would work at run time
    and fail type checks, or the other way round."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(ctxmgmt))
    checked = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = {}
    for node in checked.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            typed[alias.asname or alias.name] = "." + (node.module or "") if node.module else "." + alias.name
    assert typed == ctxmgmt._LAZY
    eager = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    assert set(ctxmgmt.__all__) == (eager - {"formats"}) | set(ctxmgmt._LAZY)
