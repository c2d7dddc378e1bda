import re
import sys
import textwrap

import pytest

from ctxmgmt import Context, ContextManager, ManagerRegistry, RegistryError, load_definition
from ctxmgmt.manager import CAPABILITIES
from ctxmgmt.managers import BUILTINS


class Reverse(ContextManager):
    type_name = "test.Reverse"
    config_schema = {
        "type": "object",
        "properties": {"keep": {"type": "integer", "minimum": 0}},
        "additionalProperties": False,
    }

    def apply(self, context, runtime):
        return context.with_messages(context.messages[-self.config.get("keep", 1) :])


def fresh():
    reg = ManagerRegistry(group="ctxmgmt.test-none")
    for cls in BUILTINS:
        reg.register(cls, builtin=True)
    return reg


def test_registered_type_validates_and_runs():
    """A registered plugin's config is validated by its schema and it runs."""
    reg = fresh()
    reg.register(Reverse)
    doc = {"name": "p", "hooks": {"pre_llm": [{"type": "test.Reverse", "config": {"keep": -1}}]}}
    from ctxmgmt import DefinitionError

    with pytest.raises(DefinitionError) as info:
        load_definition(doc, registry=reg)
    assert info.value.problems[0].pointer == "/hooks/pre_llm/0/config/keep"
    doc["hooks"]["pre_llm"][0]["config"]["keep"] = 1
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    out = load_definition(doc, registry=reg).apply("pre_llm", Context(messages=msgs))
    assert out.context.messages == (msgs[1],)


def test_builtins_cannot_be_shadowed():
    """Registering another class under a built-in name fails and says why."""

    class Fake(Reverse):
        type_name = "SlidingWindowManager"

    with pytest.raises(RegistryError, match="built-in"):
        fresh().register(Fake)


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"type_name": "1bad"}, "type_name"),
        (
            {"config_schema": {"type": "object", "properties": {"x": {"type": "nope"}}}},
            "not a valid JSON Schema",
        ),
        ({"config_schema": {"type": "array"}}, '"type": "object"'),
        ({"apply": ContextManager.apply}, "implement apply"),
    ],
)
def test_types_are_checked_when_they_register(attrs, match):
    """A class with a bad name, schema or interface is refused at registration."""
    cls = type("Broken", (Reverse,), {"type_name": "test.Broken", **attrs})
    with pytest.raises(RegistryError, match=match):
        fresh().register(cls)


def test_same_name_twice_is_refused_with_the_owner():
    """A second class under a taken name is refused, naming the first."""
    reg = fresh()
    reg.register(Reverse)
    other = type("Other", (Reverse,), {})
    with pytest.raises(RegistryError, match="already registered"):
        reg.register(other)
    reg.register(Reverse)  # the same class again is fine


def test_entry_point_plugins_load(tmp_path, monkeypatch):
    """A distribution's ctxmgmt.managers entry point is found, loaded and usable."""
    (tmp_path / "demo_plugin.py").write_text(
        textwrap.dedent("""
        from ctxmgmt import ContextManager

        class KeepLast(ContextManager):
            type_name = "KeepLast"
            config_schema = {"type": "object", "additionalProperties": False}

            def apply(self, context, runtime):
                return context.with_messages(context.messages[-1:])
    """)
    )
    dist = tmp_path / "demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ctxmgmt.test-plugins]\nKeepLast = demo_plugin:KeepLast\nBroken = demo_plugin:Missing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = ManagerRegistry(group="ctxmgmt.test-plugins")
    assert reg.get("KeepLast").__name__ == "KeepLast"
    assert "Broken" in reg.load_errors
    doc = {"name": "p", "hooks": {"pre_llm": [{"type": "Broken"}]}}
    from ctxmgmt import check_definition

    [problem] = check_definition(doc, registry=reg)
    assert "failed to load" in problem.message
    sys.modules.pop("demo_plugin", None)


def test_builtins_declare_their_capabilities():
    """Each built-in declares whether it archives and is trusted, as class attributes: one
    source, which the definitions, the hook run and the API all read."""
    reg = fresh()
    declared = {name: tuple(getattr(reg.get(name), cap) for cap in CAPABILITIES) for name in reg.names()}
    assert declared == {
        "AutoCompactManager": (True, True),
        "SlidingWindowManager": (True, True),
        "SummarizationManager": (True, True),
        "ToolResultClearingManager": (True, True),
        "ToolResultCompactionManager": (True, True),
        "ToolsOutputTruncateManager": (False, True),
    }


def test_every_declared_capability_is_read_outside_its_declaration():
    """Each capability a class may declare is read by the engine (a hook run, a definition or
    the API), not only declared and checked: a capability nobody reads is a promise kept by
    nothing."""
    import pathlib

    import ctxmgmt

    root = pathlib.Path(ctxmgmt.__file__).parent
    declaring = {root / "manager.py", root / "registry.py"}
    lines = [line for p in root.rglob("*.py") if p not in declaring for line in p.read_text().splitlines()]
    for cap in CAPABILITIES:
        reads = [line for line in lines if "getattr(" in line and f'"{cap}"' in line]
        assert reads, f"the capability {cap!r} is declared but nothing reads it"


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"trusted": True}, "declares trusted = True, which is for ctxmgmt's built-in managers only"),
        ({"archives": "yes"}, "archives must be True or False, not 'yes'"),
    ],
)
def test_a_plugin_that_declares_a_wrong_capability_is_refused(attrs, match):
    """A plugin claiming trust or declaring a capability that is not a bool is refused at
    registration, the error naming the class."""
    cls = type("Claims", (Reverse,), {"type_name": "test.Claims", **attrs})
    with pytest.raises(RegistryError, match=match) as raised:
        fresh().register(cls)
    assert "test_registry.Claims" in str(raised.value)


def test_a_plugin_can_declare_that_it_archives():
    """A plugin with ``archives = True`` makes its definition one that offloads (so the
    runner gives the model the recall tools), as the archiving built-ins do."""
    reg = fresh()
    reg.register(type("Archiver", (Reverse,), {"type_name": "test.Archiver", "archives": True}))
    reg.register(Reverse)

    def definition(kind):
        doc = {"name": "p", "settings": {"fit": False}, "hooks": {"pre_llm": [{"type": kind}]}}
        return load_definition(doc, registry=reg)

    assert definition("test.Archiver").archives and definition("test.Archiver").offloads
    assert not definition("test.Reverse").archives and not definition("test.Reverse").offloads
    assert definition("SlidingWindowManager").archives
    assert not definition("ToolsOutputTruncateManager").archives


def test_the_registry_knows_its_builtins_without_registering_at_import():
    """Importing ctxmgmt registers nothing (a fresh interpreter); a registry names its
    built-ins from its table and loads one when it is first asked for. (That the registry
    module imports no manager module is tests/test_layers.py's to check.)"""
    import subprocess

    code = textwrap.dedent("""
        import ctxmgmt
        assert not ctxmgmt.default_registry._types, "registered at import"
        reg = ctxmgmt.ManagerRegistry(group="ctxmgmt.test-none")
        assert reg.is_builtin("SlidingWindowManager") and not reg._types
        assert reg.get("SlidingWindowManager") is ctxmgmt.SlidingWindowManager
        assert list(reg._types) == ["SlidingWindowManager"]
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_builtin_table_names_every_manager_class_ctxmgmt_ships():
    """The registry's one list of built-ins names every manager class defined in the modules
    of ctxmgmt.managers (a new built-in cannot be left out), and ctxmgmt.managers.BUILTINS
    is those classes."""
    import importlib
    import inspect
    import pkgutil

    import ctxmgmt.managers
    from ctxmgmt.registry import BUILTINS as TABLE

    shipped = {
        cls.type_name: f"{cls.__module__}:{cls.__qualname__}"
        for info in pkgutil.iter_modules(ctxmgmt.managers.__path__, "ctxmgmt.managers.")
        for _, cls in inspect.getmembers(importlib.import_module(info.name), inspect.isclass)
        if issubclass(cls, ContextManager) and cls.__module__ == info.name and "type_name" in vars(cls)
    }
    assert shipped == dict(TABLE)
    assert {cls.type_name: f"{cls.__module__}:{cls.__qualname__}" for cls in BUILTINS} == dict(TABLE)


def test_only_a_class_the_builtin_table_names_registers_as_a_builtin():
    """register(builtin=True) is refused for a class the table does not name, so a plugin
    can never be marked built-in (and so shadow-proof or trusted) by a registry's caller."""
    with pytest.raises(RegistryError, match=re.escape("'test.Reverse' is not a built-in manager type")):
        fresh().register(Reverse, builtin=True)


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("ctxmgmt.managers.truncate", "offloaded", "ctxmgmt.marks"),
        ("ctxmgmt.managers.truncate", "OFFLOADED", "ctxmgmt.marks"),
        ("ctxmgmt.managers.base", "with_defaults", "ctxmgmt.manager"),
        ("ctxmgmt.offload.base", "Batch", "ctxmgmt.archive"),
        ("ctxmgmt.offload.base", "Item", "ctxmgmt.archive"),
    ],
)
def test_moved_names_keep_their_old_path_with_a_warning(old, name, new):
    """A name that moved is still found at its old path, with a DeprecationWarning naming
    the new one."""
    import importlib

    with pytest.warns(DeprecationWarning, match=f"moved to {new}.{name}"):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)


def test_a_subclass_of_a_builtin_must_give_up_its_trust():
    """A plugin subclassing a built-in inherits ``trusted``: it is refused, the error naming
    the built-in it inherits from and the fix; with ``trusted = False`` it registers."""
    from ctxmgmt import SlidingWindowManager

    inherits = type("MyWindow", (SlidingWindowManager,), {"type_name": "test.MyWindow"})
    with pytest.raises(RegistryError, match="inherits from SlidingWindowManager trusted = True"):
        fresh().register(inherits)
    fixed = type("MyWindow", (SlidingWindowManager,), {"type_name": "test.MyWindow", "trusted": False})
    assert fresh().register(fixed) is fixed
