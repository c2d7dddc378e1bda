"""Every invariant in every format, each with its own validity rules, over generated conversations."""

import tempfile

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import assert_invariants, assert_valid_messages, conversations
from tests.test_properties import HOOKS, SHIPPED, summarize, truncate, window

FORMATS = ("anthropic", "openai_responses")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYSTEM = {"anthropic": [{"type": "text", "text": "sys"}], "openai_responses": "sys"}


def in_every_format(draw_entries):
    return st.sampled_from(FORMATS).flatmap(
        lambda fmt: st.tuples(st.just(fmt), conversations(format=fmt), draw_entries)
    )


@FAST
@given(
    in_every_format(st.lists(st.one_of(window, truncate, summarize), min_size=1, max_size=3)),
    HOOKS,
    st.booleans(),
)
def test_every_combination_keeps_the_invariants_in_every_format(case, hook, declared):
    """Any mix of the built-ins, on Anthropic or Responses messages: the output is valid for that
    provider, no tool result loses its call, the system prompt is kept, thinking and reasoning
    stay whole with their turn, tokens never grow, and a second run changes nothing."""
    fmt, messages, entries = case
    definition = load_definition({"name": "p", "hooks": {hook: entries}})
    context = Context(system_prompt=SYSTEM[fmt], messages=messages, format=fmt if declared else None)
    assert_invariants(definition, hook, context)


@settings(FAST, max_examples=80)
@given(
    st.sampled_from(FORMATS).flatmap(lambda f: st.tuples(st.just(f), conversations(format=f))),
    st.sampled_from(SHIPPED),
    HOOKS,
    st.sampled_from([None, 1_500, 3_000, 8_000]),
    st.booleans(),
)
def test_every_shipped_definition_holds_in_every_format(case, name, hook, window, store):
    """Every shipped definition, at every hook, in every format: the output is valid for the
    provider, fits its window after pre_llm, and a second run changes nothing."""
    fmt, messages = case
    definition = load_definition(name)
    ctx = Context(
        system_prompt=SYSTEM[fmt], messages=messages, model="gpt-4o-mini", context_window=window, format=fmt
    )
    with tempfile.TemporaryDirectory() as folder:
        options = {"offloader": LocalOffloader(folder), "session": "s"} if store else {}
        try:
            first = definition.apply(hook, ctx, **options)
        except ContextError:
            assume(False)  # the task alone exceeds this tiny window
        again = definition.apply(hook, first.context, **options)
    out = first.context
    assert_valid_messages(out.messages, partial_tail=True, format=fmt, system=out.system_prompt)
    assert not [e["error"] for e in first.trace if e["error"]]
    if hook == "pre_llm" and window is not None and first.trace:
        assert first.trace[-1]["tokens_after"] <= window
    assert list(again.context.messages) == list(out.messages)
