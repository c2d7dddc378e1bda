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
