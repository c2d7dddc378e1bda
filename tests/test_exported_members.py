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
    """The three built-in managers are registered as built-ins."""
    for name in ("SlidingWindowManager", "SummarizationManager", "ToolsOutputTruncateManager"):
        assert ctxmgmt.default_registry.is_builtin(name)
