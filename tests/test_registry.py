import sys
import textwrap

import pytest

from ctxmgmt import Context, ContextManager, ManagerRegistry, RegistryError, load_definition
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
