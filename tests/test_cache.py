"""The prompt cache: the reusable prefix, prices, and postponing edits that do not pay."""

import pytest

from ctxmgmt import Context, Definition, Environment, get_counter
from ctxmgmt.cache import ANTHROPIC_RATIOS, Pricing, PromptCache, cache_figures, clean_usage, output_tokens

MODEL = "gpt-4o"
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def conversation(results: int, size: int = 4000) -> list[dict]:
    """A task, then `results` tool calls each with a result of about size/4 tokens."""
    msgs: list[dict] = [{"role": "user", "content": "Fix the failing test in billing."}]
    for i in range(results):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i} " * (size // 7)})
    return msgs


def context(msgs: list[dict], window: int | None = 200_000, system: str = "Be brief.") -> Context:
    return Context(system_prompt=system, messages=msgs, tools=TOOLS, model=MODEL, context_window=window)


def test_the_reusable_prefix_is_tools_system_and_the_identical_messages():
    """The first request reuses nothing; the next reuses tools, system prompt and every message
    identical to the previous request's, up to the first difference."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(3)
    first = context(msgs)
    assert cache.measure(first, counter) == 0
    grown = context([*msgs, {"role": "user", "content": "and the docs"}])
    whole = counter.tools(TOOLS) + counter.system_prompt("Be brief.") + sum(counter.message(m) for m in msgs)
    assert cache.measure(grown, counter) == whole
    grown_msgs = list(grown.messages)
    edited = [*grown_msgs[:3], {**grown_msgs[3], "content": "cut"}, *grown_msgs[4:]]
    upto_edit = whole - sum(counter.message(m) for m in msgs[3:])
    assert cache.measure(context(edited), counter) == upto_edit


def test_a_new_system_prompt_leaves_only_the_tools_and_new_tools_nothing():
    """Providers cache tools, then the system prompt, then messages: a change ends the prefix there."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(2)
    cache.measure(context(msgs), counter)
    assert cache.measure(context(msgs, system="Be thorough."), counter) == counter.tools(TOOLS)
    other = Context(system_prompt="Be thorough.", messages=msgs, tools=[], model=MODEL)
    assert cache.measure(other, counter) == 0


def test_equal_messages_loaded_again_are_reusable():
    """Messages read back from storage are new objects: equal ones still count as the prefix."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(2)
    cache.measure(context(msgs), counter)
    copies = [dict(m) for m in msgs]
    assert cache.measure(context(copies), counter) == cache.prefix_tokens(context(msgs), counter, len(msgs))


@pytest.mark.parametrize(
    ("usage", "figures"),
    [
        ({"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 800}}, {"cached_tokens": 800}),
        ({"input_tokens": 900, "input_tokens_details": {"cached_tokens": 640}}, {"cached_tokens": 640}),
        (
            {"input_tokens": 50, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 150},
            {"cached_tokens": 700, "cache_write_tokens": 150},
        ),
        ({"prompt_tokens": 900}, {}),
        ({"prompt_tokens_details": {"cached_tokens": True}}, {}),
        (None, {}),
    ],
)
def test_cache_figures_are_read_from_each_providers_usage(usage, figures):
    """OpenAI chat and Responses report cached_tokens, Anthropic its cache reads and writes."""
    assert cache_figures(usage) == figures


def test_a_call_is_priced_by_the_providers_figures_or_by_the_reusable_prefix():
    """Without cache figures the reusable prefix is read and the rest written; with them, the
    rest of the input is fresh. Output tokens are priced apart."""
    p = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert p.call(1_000_000, 900_000, 1000) == pytest.approx(0.27 + 0.375 + 0.015)
    assert p.call(1_000_000, 0, cached=900_000, written=50_000) == pytest.approx(0.15 + 0.27 + 0.1875)
    assert Pricing(input=2.0).call(1_000_000, 500_000) == pytest.approx(2.0)
    assert p.fresh(1_000_000, 1_000_000) == pytest.approx(18.0)
    assert output_tokens({"completion_tokens": 7}) == output_tokens({"output_tokens": 7}) == 7


# -- postponement ---------------------------------------------------------------------------

MASK_ALL = {
    "settings": {"cache": "aware"},
    "hooks": {
        "pre_llm": [{"type": "ToolResultClearingManager", "config": {"trigger": 0, "keep": 2}}],
    },
}


def sent_then(msgs: list[dict], window: int, new: int = 1):
    """A cache that saw the request without the last `new` messages, and the context now."""
    counter = get_counter(MODEL)
    cache = PromptCache(ANTHROPIC_RATIOS)
    before = context(msgs[: len(msgs) - new], window)
    cache.measure(before, counter)
    return cache, context(msgs, window)


def test_an_edit_of_the_cached_prefix_that_does_not_pay_is_postponed():
    """Clearing one old result deep in a long cached request frees little and rewrites much:
    with cache: aware it waits, the trace says 'postponed: cache' with the numbers, and the
    request is the one sent before plus what is new."""
    msgs = conversation(12, size=400)
    msgs[1:3] = conversation(1, size=20_000)[1:]  # one large old result at the start ...
    msgs[3:3] = [{"role": "user", "content": "long notes " * 3000}]  # ... and a long cached rest
    cache, ctx = sent_then(msgs, window=200_000, new=2)
    definition = Definition.from_dict(
        {"name": "aware", **MASK_ALL, "settings": {"cache": "aware", "cache_expected_calls": 1}}
    )
    result = definition.apply("pre_llm", ctx, environment=Environment(cache=cache))
    entry = result.trace[0]
    assert entry["activated"] and entry["details"]["postponed"] == "cache"
    numbers = entry["details"]["cache"]
    assert numbers["postpone"] and numbers["fits"] and numbers["freed"] > 0
    assert numbers["saving"] < numbers["rewrite_cost"] and numbers["expected_calls"] == 1
    assert result.context.messages == ctx.messages


def test_an_edit_that_pays_for_the_rewrite_is_applied_and_says_why():
    """Clearing many large old results saves more over the calls to come than the rewrite costs."""
    msgs = conversation(12, size=20_000)
    cache, ctx = sent_then(msgs, window=200_000, new=2)
    definition = Definition.from_dict({"name": "aware", **MASK_ALL})
    result = definition.apply("pre_llm", ctx, environment=Environment(cache=cache))
    entry = result.trace[0]
    assert "postponed" not in entry["details"] and entry["details"]["cleared"] == 10
    numbers = entry["details"]["cache"]
    assert not numbers["postpone"] and numbers["saving"] >= numbers["rewrite_cost"]
    assert result.trace[0]["tokens_after"] < result.trace[0]["tokens_before"]


def test_without_cache_aware_the_same_edit_is_applied():
    """The policy is opt-in: without settings.cache the manager edits as it always did."""
    msgs = conversation(12, size=400)
    cache, ctx = sent_then(msgs, window=200_000, new=2)
    definition = Definition.from_dict({"name": "plain", "hooks": MASK_ALL["hooks"]})
    result = definition.apply("pre_llm", ctx, environment=Environment(cache=cache))
    assert result.trace[0]["details"]["cleared"] == 10 and "cache" not in result.trace[0]["details"]


def test_an_edit_of_only_new_messages_is_never_postponed():
    """What the previous request did not have is not cached: editing it costs the cache nothing."""
    msgs = conversation(4, size=40)
    msgs[-1] = {**msgs[-1], "content": "row " * 20_000}  # only the newest result is over the limit
    cache, ctx = sent_then(msgs, window=200_000, new=2)
    definition = Definition.from_dict(
        {
            "name": "new-only",
            "settings": {"cache": "aware", "cache_expected_calls": 1},
            "hooks": {
                "pre_llm": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 100_000, "max_output_tokens": 1000},
                    }
                ]
            },
        }
    )
    result = definition.apply("pre_llm", ctx, environment=Environment(cache=cache))
    assert result.trace[0]["details"]["truncated"] == 1 and "cache" not in result.trace[0]["details"]


def test_fit_overrides_postponement():
    """A request that would not fit is never kept for the cache's sake: the entry that would
    otherwise wait is applied (fits: false in its numbers), and the request fits its window."""
    msgs = conversation(12, size=2000)
    msgs[3:3] = [{"role": "user", "content": "long notes " * 3000}]
    counter = get_counter(MODEL)
    tokens = counter.context(context(msgs))[0]
    window = tokens + 2000  # over window - reserve (min(8192, window/4)): the request does not fit
    cache, ctx = sent_then(msgs, window=window, new=2)
    definition = Definition.from_dict(
        {"name": "aware", **MASK_ALL, "settings": {"cache": "aware", "cache_expected_calls": 1}}
    )
    result = definition.apply("pre_llm", ctx, environment=Environment(cache=cache))
    entry = result.trace[0]
    assert entry["details"]["cache"]["fits"] is False and "postponed" not in entry["details"]
    assert counter.context(result.context)[0] + min(8192, window // 4) <= window

    # And when the entry cannot make room, the fit step does: it is never postponed.
    cache, ctx = sent_then(msgs, window=window, new=2)
    stubborn = Definition.from_dict(
        {
            "name": "stubborn",
            "settings": {"cache": "aware", "cache_expected_calls": 1},
            "hooks": {
                "pre_llm": [{"type": "ToolResultClearingManager", "config": {"trigger": 0, "keep": 100}}]
            },
        }
    )
    result = stubborn.apply("pre_llm", ctx, environment=Environment(cache=cache))
    fit = result.trace[-1]
    assert fit["type"] == "fit" and fit["activated"] and "postponed" not in fit["details"]
    assert counter.context(result.context)[0] + min(8192, window // 4) <= window


def test_a_postponed_entry_waits_until_the_request_has_grown():
    """Once postponed, an entry is not run again on every call: it waits until the request has
    grown by a quarter of its room (or four calls' growth), then is weighed again."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(3)
    ctx = context(msgs)
    cache.measure(ctx, counter)
    cache.postponed("d", 0, ctx, 10_000, limit=90_000)
    assert cache.waiting("d", 0, ctx, 12_000, 90_000) == {"until_tokens": 30_000}
    assert cache.waiting("d", 1, ctx, 12_000, 90_000) is None  # another entry
    assert cache.waiting("d", 0, ctx, 30_000, 90_000) is None  # grown enough: weighed again
    assert cache.waiting("d", 0, ctx, 12_000, 90_000) is None  # and forgotten until postponed again


def test_an_edit_of_the_prefix_wakes_the_waiting_entries():
    """When the prefix is rewritten anyway, the postponed entries run: the rewrite is paid."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(3)
    ctx = context(msgs)
    cache.measure(ctx, counter)
    cache.postponed("d", 0, ctx, 10_000, limit=90_000)
    assert cache.waiting("d", 0, context([*msgs, {"role": "user", "content": "more"}]), 10_001, 90_000)
    assert cache.waiting("d", 0, context(msgs[2:]), 10_001, 90_000) is None


def test_a_request_older_than_the_caches_lifetime_serves_nothing():
    """Past ttl seconds the provider's cache has expired: nothing is reusable, nothing waits."""
    now = [1000.0]
    counter = get_counter(MODEL)
    cache = PromptCache(ttl=300, clock=lambda: now[0])
    msgs = conversation(2)
    cache.measure(context(msgs), counter)
    now[0] += 299
    assert cache.measure(context(msgs), counter) > 0
    now[0] += 301
    assert cache.measure(context(msgs), counter) == 0


def test_each_conversation_is_measured_against_its_own_previous_request():
    """One cache serving two interleaved conversations (an adapter shared by users) measures
    each against its own last request, as a provider's content-keyed cache does."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    a = conversation(2)
    b = [{"role": "user", "content": "Another task entirely."}, *conversation(2)[1:]]
    cache.measure(context(a), counter)
    cache.measure(context(b), counter)
    grown_a = context([*a, {"role": "user", "content": "next"}])
    assert cache.measure(grown_a, counter) == cache.prefix_tokens(grown_a, counter, len(a))


def test_growth_is_measured_on_requests_that_extend_one_another():
    """The growth per call is what a request adds to the one it extends; a seeded request
    (an earlier execution's) gives no sample."""
    counter = get_counter(MODEL)
    cache = PromptCache()
    msgs = conversation(4)
    cache.seed(TOOLS, "Be brief.", msgs[:3])
    cache.measure(context(msgs[:3]), counter)
    assert cache.growth() == 64  # no sample yet: the floor
    cache.measure(context(msgs[:5]), counter)
    added = counter.message(msgs[3]) + counter.message(msgs[4])
    assert cache.growth() == added


def test_usage_from_a_broken_endpoint_is_bounded_and_json_safe():
    """Absurd counts, NaN and deep junk in a usage report are dropped, and a price is always
    a finite number (a huge report once made the answer unserialisable)."""
    import math

    usage = {
        "prompt_tokens": 10**400,
        "completion_tokens": 10**308,
        "x": float("nan"),
        "d": {"e": {"f": {"g": 1}}},
    }
    assert clean_usage(usage) == {"d": {"e": {"f": {}}}}
    assert output_tokens({"completion_tokens": 10**400}) == 0
    p = Pricing(input=3.0, output=15.0, cache_read=0.3)
    assert math.isfinite(p.call(10**400, 0, 10**400, cached=10**400))
    assert p.call(100, 0, cached=5000) == pytest.approx(100 * 0.3 / 1e6)  # cached beyond the input: capped


def test_a_postponed_edit_archives_nothing_and_reports_what_it_would_do(tmp_path):
    """With a store, a postponed clearing writes no archive and its trace entry lists no
    reference (the runner would otherwise show the recall tools and break the prefix itself);
    what it would have done is under 'would'."""
    from ctxmgmt.offload import LocalOffloader

    msgs = conversation(12, size=400)
    msgs[1:3] = conversation(1, size=20_000)[1:]
    msgs[3:3] = [{"role": "user", "content": "long notes " * 3000}]
    cache, ctx = sent_then(msgs, window=200_000, new=2)
    store = LocalOffloader(tmp_path)
    definition = Definition.from_dict(
        {"name": "aware", **MASK_ALL, "settings": {"cache": "aware", "cache_expected_calls": 1}}
    )
    result = definition.apply(
        "pre_llm", ctx, environment=Environment(cache=cache, offloader=store, session="s")
    )
    details = result.trace[0]["details"]
    assert details["postponed"] == "cache" and "offloaded" not in details
    assert details["would"]["cleared"] == 10 and store.list("s") == []


def test_with_cache_aware_the_fit_step_makes_room_for_the_next_calls():
    """A fit step that removed only what this call needs would fire again on every call and
    rewrite the cache each time: with cache: aware it removes old units down to three quarters
    of the room; without, just what is needed."""
    counter = get_counter(MODEL)
    msgs = conversation(40, size=2000)
    window = 12_000
    budget = window - min(8192, window // 4)
    plain = Definition.from_dict({"name": "p", "hooks": FIT_ONLY})
    aware = Definition.from_dict({"name": "a", "settings": {"cache": "aware"}, "hooks": FIT_ONLY})
    tight = counter.context(plain.apply("pre_llm", context(msgs, window)).context)[0]
    roomy = counter.context(aware.apply("pre_llm", context(msgs, window)).context)[0]
    assert roomy <= 0.75 * budget < tight <= budget


FIT_ONLY = {"pre_llm": [{"type": "SlidingWindowManager", "activation": {"always": False}}]}


def test_an_entry_that_would_edit_on_every_call_is_postponed():
    """A clearing that fires on every call once over its trigger (one result more each call) is
    judged on the calls until it fires again, one here: at Anthropic's prices the rewrite does
    not pay, so it waits (growth is sampled before each call's edits, not lost to them)."""
    definition = Definition.from_dict(
        {
            "name": "every-call",
            "settings": {"cache": "aware"},
            "hooks": {
                "pre_llm": [{"type": "ToolResultClearingManager", "config": {"trigger": 10_000, "keep": 3}}]
            },
        }
    )
    cache = PromptCache(ANTHROPIC_RATIOS)
    env = Environment(cache=cache)
    counter = get_counter(MODEL)
    messages = conversation(0)
    verdicts = []
    for step in range(12):
        messages = [*messages, *conversation(1, size=12_000)[1:]]
        messages[-2] = {**messages[-2], "tool_calls": [{**messages[-2]["tool_calls"][0], "id": f"s{step}"}]}
        messages[-1] = {**messages[-1], "tool_call_id": f"s{step}"}
        result = definition.apply("pre_llm", context(messages, 200_000), environment=env)
        verdicts += [e["details"]["cache"] for e in result.trace if "cache" in e["details"]]
        cache.measure(result.context, counter)
        messages = [*result.context.messages, {"role": "assistant", "content": f"step {step}"}]
    assert verdicts and all(v["expected_calls"] <= 2 for v in verdicts)
    assert any(v["postpone"] for v in verdicts)
    assert cache.growth() > 2000  # about one 12,000-character result per call


def test_the_level_an_entry_fires_again_at_reads_its_activation():
    """ANDed token rules: the highest; any_of: the lowest alternative; a rule on messages or no
    rule at all: 0 (it may fire on the next call)."""
    from ctxmgmt.hooks import _token_level
    from ctxmgmt.rules import Activation

    assert (
        _token_level(Activation.parse({"tokens_exceed": 5000, "tokens_ratio_exceed": 0.5}), 20_000) == 10_000
    )
    both = {"any_of": [{"tokens_exceed": 9000}, {"tokens_ratio_exceed": 0.25}]}
    assert _token_level(Activation.parse(both), 20_000) == 5000
    assert _token_level(Activation.parse({"message_count_exceed": 40}), 20_000) == 0
    assert _token_level(Activation.parse({"always": True}), 20_000) == 0
