import asyncio

import pytest

from ctxmgmt import Context, ContextManager, ManagerError, ManagerRegistry, load_definition
from ctxmgmt.managers import BUILTINS

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
MSGS = [
    {"role": "user", "content": "task"},
    CALL,
    {"role": "tool", "tool_call_id": "a", "content": "r"},
    {"role": "assistant", "content": "done"},
]


class Tag(ContextManager):
    """Appends its label to state['order'], to observe order and instances."""

    type_name = "test.Tag"
    config_schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    instances = 0

    def __init__(self, config):
        super().__init__(config)
        Tag.instances += 1

    def apply(self, context, runtime):
        order = [*context.state.get("order", []), self.config["label"]]
        return context.with_messages(context.messages, state={**context.state, "order": order})


class Boom(ContextManager):
    type_name = "test.Boom"
    config_schema = {"type": "object", "properties": {"mode": {"type": "string"}}}

    def apply(self, context, runtime):
        mode = self.config.get("mode", "raise")
        if mode == "raise":
            raise RuntimeError("secret internal detail")
        if mode == "orphan":
            return context.with_messages(context.messages[2:])
        if mode == "system":
            return context.with_messages(context.messages, system_prompt="hijacked")
        return "not a context"


@pytest.fixture
def registry():
    reg = ManagerRegistry(group="ctxmgmt.test-none")
    for cls in BUILTINS:
        reg.register(cls, builtin=True)
    reg.register(Tag)
    reg.register(Boom)
    return reg


def define(registry, *entries, hook="pre_llm"):
    return load_definition({"name": "t", "hooks": {hook: list(entries)}}, registry=registry)


def test_entries_run_in_order_one_instance_each(registry):
    """Entries run top to bottom; two entries of one type are two instances."""
    Tag.instances = 0
    d = define(
        registry,
        {"type": "test.Tag", "config": {"label": "a"}},
        {"type": "test.Tag", "config": {"label": "b"}},
    )
    result = d.apply("pre_llm", Context(messages=MSGS))
    assert result.context.state["order"] == ["a", "b"]
    d.apply("pre_llm", Context(messages=MSGS))
    assert Tag.instances == 2


def test_trace_has_the_documented_fields(registry):
    """Each entry gets a trace entry with the stable field names."""
    d = define(
        registry,
        {"type": "test.Tag", "config": {"label": "a"}},
        {"type": "SlidingWindowManager", "activation": {"tokens_exceed": 10**6}},
    )
    trace = d.apply("pre_llm", Context(messages=MSGS)).trace
    assert set(trace[0]) >= {
        "hook",
        "index",
        "type",
        "activated",
        "reason",
        "tokens_before",
        "tokens_after",
        "messages_before",
        "messages_after",
        "duration_ms",
        "error",
    }
    assert [(e["index"], e["type"], e["activated"]) for e in trace] == [
        (0, "test.Tag", True),
        (1, "SlidingWindowManager", False),
    ]
    assert trace[1]["reason"]["tokens_exceed"]["met"] is False


@pytest.mark.parametrize("mode", ["raise", "orphan", "system", "type"])
def test_skip_keeps_the_context_and_traces_the_error(registry, mode):
    """With on_error skip, a failing or invariant-breaking manager leaves the context as it was."""
    d = define(
        registry,
        {"type": "test.Boom", "config": {"mode": mode}},
        {"type": "test.Tag", "config": {"label": "after"}},
    )
    ctx = Context(system_prompt="sys", messages=MSGS)
    result = d.apply("pre_llm", ctx)
    assert result.trace[0]["error"]
    assert result.context.messages == ctx.messages
    assert result.context.system_prompt == "sys"
    assert result.context.state["order"] == ["after"]
    text = str(result.context.to_dict())
    assert "secret internal detail" not in text and "Error" not in text


def test_fail_raises_with_the_culprit(registry):
    """With on_error fail, the error names the definition, hook, index and type."""
    d = define(
        registry, {"type": "test.Tag", "config": {"label": "a"}}, {"type": "test.Boom", "on_error": "fail"}
    )
    with pytest.raises(ManagerError) as info:
        d.apply("PRE_LLM", Context(messages=MSGS))
    assert (info.value.hook, info.value.index, info.value.type) == ("pre_llm", 1, "test.Boom")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_input_context_is_never_mutated(registry):
    """Applying leaves the given context and its messages unchanged."""
    d = define(registry, {"type": "SlidingWindowManager", "config": {"max_messages": 1}})
    msgs = [dict(m) for m in MSGS]
    ctx = Context(messages=msgs, state={"k": 1})
    result = d.apply("pre_llm", ctx)
    assert ctx.messages == tuple(MSGS) and ctx.state == {"k": 1}
    assert result.context is not ctx


def test_hook_without_entries_returns_the_same_context(registry):
    """A hook the definition does not configure changes nothing and traces nothing."""
    d = define(registry, {"type": "test.Tag", "config": {"label": "a"}})
    ctx = Context(messages=MSGS)
    result = d.apply("post_memory", ctx)
    assert result.context is ctx and result.trace == ()


def test_unknown_hook_is_a_clear_error(registry):
    """Applying an unknown hook names the valid ones."""
    from ctxmgmt import ContextError

    with pytest.raises(ContextError, match="pre_llm, post_tool, post_memory"):
        define(registry, {"type": "test.Tag"}).apply("pre_lm", Context())


def test_aapply_matches_apply(registry):
    """The async form gives the same result as the sync one."""
    d = define(
        registry,
        {"type": "SlidingWindowManager", "config": {"max_messages": 2}},
        {"type": "test.Tag", "config": {"label": "a"}},
    )
    ctx = Context(messages=MSGS)
    sync = d.apply("pre_llm", ctx)
    asyn = asyncio.run(d.aapply("pre_llm", ctx))
    assert sync.context.messages == asyn.context.messages
    assert [e["activated"] for e in sync.trace] == [e["activated"] for e in asyn.trace]
