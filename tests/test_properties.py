"""Invariants of every manager and every combination, over generated conversations."""

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.eval.readers import read_conversations
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import assert_invariants, conversations
from tests.agent_runs import agent_run, padded_run
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


# -- every shipped definition, with and without a store, on runs it was not written for ----
SHIPPED_WINDOWS = [4_096, 8_192, 16_384, 32_000, 128_000]


def _assistant_cuts(messages: list, parts: int) -> list[int]:
    """Up to ``parts`` cut points before assistant messages (where a runner calls the model)."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    if not starts:
        return [len(messages)]
    picked = sorted({starts[(k * len(starts)) // parts] for k in range(1, parts)})
    return [*picked, len(messages)]


def check_shipped_run(messages, name, window, store, system="You are a coding agent.", tools=()):
    """Replay a run in a few stretches as the runner would (the managed context carried
    forward, post_tool after tool results, then pre_llm) and check every promise."""
    from ctxmgmt.fit import reserve_tokens
    from ctxmgmt.messages import last_task_index
    from ctxmgmt.testing import assert_valid_messages
    from ctxmgmt.tokens import get_counter

    definition = load_definition(name)
    counter = get_counter("gpt-4o")
    with tempfile.TemporaryDirectory() as folder:
        options = {"offloader": LocalOffloader(folder), "session": "s"} if store else {}
        ctx = Context(system, [], list(tools), "gpt-4o", window)
        done = 0
        for cut in _assistant_cuts(list(messages), 3):
            ctx = ctx.append(*messages[done:cut])
            done = cut
            results = []
            if ctx.messages[-1]["role"] == "tool":
                results.append(definition.apply("post_tool", ctx, **options))
                ctx = results[-1].context
            try:
                results.append(definition.apply("pre_llm", ctx, **options))
            except ContextError:
                task = last_task_index(list(ctx.messages))
                fixed = [m for i, m in enumerate(ctx.messages) if m["role"] == "system" or i == task]
                need = counter.context(Context(system, fixed, ctx.tools, "gpt-4o", window))[0]
                assert need + reserve_tokens(window, definition.settings) > window, (
                    "refused a request that fits"
                )
                return
            ctx = results[-1].context
            errors = [e["error"] for r in results for e in r.trace if e["error"]]
            assert not errors, f"{name} (store={store}, window={window}): {errors}"
            assert counter.context(ctx)[0] + reserve_tokens(window, definition.settings) <= window
            assert_valid_messages(ctx.messages)
            assert ctx.system_prompt == system
            task = last_task_index(list(messages[:cut]))
            if task is not None:
                assert any(m is messages[task] for m in ctx.messages), "the task was dropped"
        again = definition.apply("pre_llm", ctx, **options)
    assert list(again.context.messages) == list(ctx.messages), "a second run changed the messages"
    assert not [e["error"] for e in again.trace if e["error"]]


@settings(FAST, max_examples=80)
@given(
    st.sampled_from(SHIPPED),
    st.sampled_from(SHIPPED_WINDOWS),
    st.booleans(),
    st.integers(10, 120),
    st.integers(0, 999),
    st.booleans(),
)
@example("long-running-agent", 16_384, False, 60, 0, False)
@example("long-running-agent", 4_096, False, 40, 1, True)
def test_every_shipped_definition_works_with_and_without_a_store(name, window, store, turns, seed, padded):
    """Every shipped definition, with and without an offload store, at windows of 4k-128k,
    carried call by call over generated agent runs (some with 1.5k-6k token results): no
    manager error in the trace, and the request fits, is valid, keeps the system prompt and
    the task, and a second run changes nothing."""
    messages = padded_run(turns, seed=seed) if padded else agent_run(turns, seed=seed)[0]
    check_shipped_run(messages, name, window, store)


REAL_RUNS_LIMIT = 40
"""Conversations of the real-run corpus replayed per definition and store (bounded time)."""


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_definition_works_on_real_runs(real_runs, name, store):
    """On the real-run corpus (agent logs shipped in public packages), every shipped
    definition with and without a store gives no trace error and keeps its promises."""
    seen = 0
    for conversation in read_conversations(real_runs):
        if seen >= REAL_RUNS_LIMIT:
            break
        seen += 1
        for window in SHIPPED_WINDOWS[seen % 2 :: 2]:  # every window, over alternate runs
            check_shipped_run(
                list(conversation.messages),
                name,
                window,
                store,
                conversation.system_prompt or "",
                conversation.tools,
            )
    assert seen, "the corpus has no conversation"
