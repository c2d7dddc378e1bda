"""Invariants of every manager and every combination, over generated conversations."""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import assert_invariants, conversations
from tests.test_fit import sized_conversation

HOOKS = st.sampled_from(["pre_llm", "post_tool", "post_memory"])

window = st.builds(
    lambda n, t, pin: {
        "type": "SlidingWindowManager",
        "config": {"max_messages": n, "pin": pin, **({"max_tokens": t} if t else {})},
    },
    st.integers(1, 30),
    st.one_of(st.none(), st.integers(50, 3000)),
    st.sampled_from(["task", "none"]),
)
truncate = st.builds(
    lambda n, t, mode: {
        "type": "ToolsOutputTruncateManager",
        "config": {"max_output_length": n, "mode": mode, **({"max_output_tokens": t} if t else {})},
    },
    st.integers(64, 2000),
    st.one_of(st.none(), st.integers(64, 500)),
    st.sampled_from(["head", "tail", "head_tail"]),
)
summarize = st.builds(
    lambda r, keep, role: {
        "type": "SummarizationManager",
        "config": {"summary_ratio": r, "preserve_recent_messages": keep, "summary_role": role},
    },
    st.floats(0.1, 0.8),
    st.integers(0, 12),
    st.sampled_from(["user", "assistant"]),
)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


CUT_TWICE = [  # found by hypothesis: the second entry's marker made the first one cut again
    {"role": "user", "content": "q"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "a", "content": "é:" * 35},
]
TWO_TRUNCATIONS = [
    {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 75, "mode": "head"}},
    {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 40000, "max_output_tokens": 64}},
]


@FAST
@given(conversations(), st.lists(st.one_of(window, truncate), min_size=1, max_size=3), HOOKS)
@example(CUT_TWICE, TWO_TRUNCATIONS, "post_tool")
@example(CUT_TWICE, TWO_TRUNCATIONS, "pre_llm")
def test_window_and_truncation_invariants(messages, entries, hook):
    """Window and truncation: valid output, pairs kept, system prompt kept, tokens never
    grow, and a second run changes nothing."""
    definition = load_definition({"name": "p", "hooks": {hook: entries}})
    assert_invariants(definition, hook, Context(system_prompt="sys", messages=messages))


@FAST
@given(conversations(), st.lists(st.one_of(window, truncate, summarize), min_size=1, max_size=3), HOOKS)
def test_every_combination_keeps_the_invariants(messages, entries, hook):
    """Any mix of the three managers keeps the output valid and never grows tokens."""
    definition = load_definition({"name": "p", "hooks": {hook: entries}})
    assert_invariants(definition, hook, Context(system_prompt="sys", messages=messages))


@FAST
@given(conversations(), summarize)
def test_summarization_is_idempotent_once_its_activation_stops_firing(messages, entry):
    """A summariser whose activation no longer fires on its own output changes nothing on a second run."""
    limit = 8
    entry = {**entry, "activation": {"message_count_exceed": limit}}
    definition = load_definition({"name": "p", "hooks": {"pre_llm": [entry]}})
    first = definition.apply("pre_llm", Context(messages=messages))
    again = definition.apply("pre_llm", first.context)
    if not again.trace[0]["activated"]:
        assert again.context.messages == first.context.messages


SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "definitions").glob("*.yaml"))


@settings(FAST, max_examples=120)
@given(
    st.one_of(
        conversations(), st.builds(sized_conversation, st.integers(2_000, 60_000), st.integers(0, 999))
    ),
    st.sampled_from(SHIPPED),
    HOOKS,
    st.sampled_from([None, 1_500, 3_000, 8_000, 16_000]),
    st.booleans(),
)
# Found by hypothesis: a fit summary without the newest message's key; compaction that is
# enough on the first run; fewer tool results than recent_n.
@example(sized_conversation(12187, 2), "long-running-agent", "pre_llm", 16_000, True)
@example(sized_conversation(18581, 130), "long-running-agent", "pre_llm", 16_000, True)
@example(sized_conversation(2000, 276), "long-running-agent", "pre_llm", 8_000, True)
def test_every_shipped_definition_changes_nothing_on_its_own_output(messages, name, hook, window, store):
    """For every shipped definition and hook, applying the definition to its own output, with
    no new message, changes nothing (with and without an offload store)."""
    definition = load_definition(name)
    ctx = Context(system_prompt="sys", messages=messages, model="gpt-4o-mini", context_window=window)
    with tempfile.TemporaryDirectory() as folder:
        options = {"offloader": LocalOffloader(folder), "session": "s"} if store else {}
        try:
            first = definition.apply(hook, ctx, **options)
        except ContextError:
            assume(False)  # the task alone exceeds this tiny window: nothing to compare
        event("fired: " + ", ".join(e["type"] for e in first.trace if e["activated"]))
        again = definition.apply(hook, first.context, **options)
    assert list(again.context.messages) == list(first.context.messages)
    assert again.context.state == first.context.state
