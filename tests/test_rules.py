import pytest

from ctxmgmt import Context, load_definition
from ctxmgmt.rules import Activation, Facts
from ctxmgmt.tokens import get_counter


def facts(messages, **kw):
    return Facts(Context(messages=messages, **kw), get_counter(None))


MSGS = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "b"},
]


def test_no_activation_means_always():
    """An entry without activation always runs."""
    assert Activation.parse(None).evaluate(facts(MSGS)) == (True, {"always": True})


@pytest.mark.parametrize("data", [{"always": True}, {"rule_type": "always"}])
def test_always_forms(data):
    """always: true and rule_type: always both fire."""
    assert Activation.parse(data).evaluate(facts(MSGS))[0]


def test_always_false_disables():
    """always: false never fires."""
    assert not Activation.parse({"always": False}).evaluate(facts(MSGS))[0]


def test_message_count_is_strict_and_skips_system_messages():
    """message_count_exceed compares with > and leaves out system and developer messages."""
    f = facts(MSGS)
    assert not Activation.parse({"message_count_exceed": 2}).evaluate(f)[0]
    fired, reason = Activation.parse({"message_count_exceed": 1}).evaluate(f)
    assert fired and reason == {"message_count_exceed": {"limit": 1, "value": 2, "met": True}}


def test_tokens_exceed_is_strict():
    """tokens_exceed fires only above the limit, never at it."""
    f = facts(MSGS)
    assert not Activation.parse({"tokens_exceed": f.tokens}).evaluate(f)[0]
    assert Activation.parse({"tokens_exceed": f.tokens - 1}).evaluate(f)[0]


def test_keys_are_anded_and_any_of_ors():
    """Several keys must all hold; any_of needs one."""
    f = facts(MSGS)
    assert not Activation.parse({"message_count_exceed": 1, "tokens_exceed": 10**6}).evaluate(f)[0]
    fired, reason = Activation.parse(
        {"any_of": [{"tokens_exceed": 10**6}, {"message_count_exceed": 1}]}
    ).evaluate(f)
    assert fired and len(reason["any_of"]) == 2


def test_tokens_ratio_uses_the_context_window():
    """tokens_ratio_exceed is a fraction of context_window; unknown window never fires."""
    f = facts(MSGS, context_window=20)
    assert Activation.parse({"tokens_ratio_exceed": 0.5}).evaluate(f)[0] == (f.tokens / 20 > 0.5)
    fired, reason = Activation.parse({"tokens_ratio_exceed": 0.5}).evaluate(facts(MSGS))
    assert not fired and "context_window" in reason["tokens_ratio_exceed"]["note"]


def test_tool_output_tokens_counts_the_trailing_results():
    """tool_output_tokens_exceed looks at the newest tool results only."""
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    msgs = [*MSGS, call, {"role": "tool", "tool_call_id": "a", "content": "word " * 200}]
    assert facts(msgs).tool_output_tokens > 200
    assert facts([*msgs, {"role": "assistant", "content": "x"}]).tool_output_tokens == 0


def test_message_count_fires_at_pre_llm():
    """message_count_exceed works at pre_llm (it never can in OpenSearch)."""
    d = load_definition(
        {
            "name": "w",
            "hooks": {
                "pre_llm": [
                    {
                        "type": "SlidingWindowManager",
                        "config": {"max_messages": 1},
                        "activation": {"message_count_exceed": 1},
                    }
                ]
            },
        }
    )
    result = d.apply("pre_llm", Context(messages=MSGS))
    assert result.trace[0]["activated"] and len(result.context.messages) == 2


def test_post_tool_tokens_include_the_new_output():
    """At post_tool the token count includes the new tool output."""
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    small = [*MSGS, call]
    big = [*small, {"role": "tool", "tool_call_id": "a", "content": "word " * 500}]
    limit = facts(small).tokens + 100
    d = load_definition(
        {
            "name": "t",
            "hooks": {
                "post_tool": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 100},
                        "activation": {"tokens_exceed": limit},
                    }
                ]
            },
        }
    )
    assert d.apply("post_tool", Context(messages=big)).trace[0]["activated"]
