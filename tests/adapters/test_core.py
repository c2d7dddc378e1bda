"""What every adapter shares: the conversation's reusable prefix and its cache figures."""

from ctxmgmt.agents.conversation import Conversation
from ctxmgmt.tokens import REPLY_PRIMING

DEFINITION = {
    "name": "d",
    "hooks": {"post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}]},
}


def test_each_turn_measures_what_it_reuses_of_the_previous_request():
    """The first turn reuses nothing; the next reuses the whole previous request (what the
    framework sent before, identical), and observe() records it with the provider's cache figures."""
    conversation = Conversation(DEFINITION)
    record = [{"role": "user", "content": "Why does the build fail?"}]
    first = conversation.prepare(record, system_prompt="Be brief.", model="gpt-4o")
    assert first.reusable_prefix_tokens == 0
    assert conversation.observe(30, cached=0)["reusable_prefix_tokens"] == 0
    record += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "log", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "ERROR " * 300},
    ]
    second = conversation.prepare(record, system_prompt="Be brief.", model="gpt-4o")
    seen = conversation.observe(60, cached=25, written=35)
    assert seen["counted"] - seen["reusable_prefix_tokens"] > REPLY_PRIMING  # the new messages
    assert second.reusable_prefix_tokens == seen["reusable_prefix_tokens"] > 0
    assert (seen["cached_tokens"], seen["cache_write_tokens"]) == (25, 35)
    other = conversation.prepare(record, system_prompt="Be thorough.", model="gpt-4o")
    assert other.reusable_prefix_tokens == 0  # no tools, and a new system prompt: nothing reused
