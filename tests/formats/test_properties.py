"""Every invariant in every format, each with its own validity rules, over generated conversations."""

import json
import tempfile

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import assert_invariants, assert_valid_messages, conversations
from tests.test_properties import HOOKS, SHIPPED, summarize, truncate, window

FORMATS = ("anthropic", "openai_responses")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYSTEM = {"anthropic": [{"type": "text", "text": "sys"}], "openai_responses": "sys"}


def _use(i, x="a"):
    return {"type": "tool_use", "id": i, "name": "f", "input": {"x": x}}


def _result(i, n):
    return {"type": "tool_result", "tool_use_id": i, "content": [{"type": "text", "text": "r" * n}]}


IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
# The fit step once removed units past the newest tool-call group kept, so the summary went
# after it and the list began with the assistant's tool call, which Anthropic rejects.
USER_FIRST_REPRO = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": [{"type": "text", "text": "t" * 40}, _use("t0_0")]},
    {"role": "user", "content": [_result("t0_0", 180)]},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "ok"},
    {
        "role": "assistant",
        "content": [_use("t3_0"), _use("t3_1", "b" * 80), _use("t3_2", "c" * 30), _use("t3_3")],
    },
    {
        "role": "user",
        "content": [_result("t3_1", 10), _result("t3_2", 1300), _result("t3_0", 1460), _result("t3_3", 40)],
    },
    {"role": "assistant", "content": "k"},
    {"role": "user", "content": [{"type": "text", "text": "q" * 20}]},
    {"role": "assistant", "content": [_use("t10_0")]},
    {"role": "user", "content": [_result("t10_0", 2200)]},
    {"role": "user", "content": [IMAGE, IMAGE, IMAGE]},
    {"role": "user", "content": "end"},
    {"role": "assistant", "content": "done!"},
]


def in_every_format(draw_entries):
    return st.sampled_from(FORMATS).flatmap(
        lambda fmt: st.tuples(st.just(fmt), conversations(format=fmt), draw_entries)
    )


# A window that kept everything after the model's newest turn kept a reply its user-first
# start then removed: the second run kept less (its newest turn was gone).
PLAIN_REPLY = [
    {"role": "user", "content": ""},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": ""},
    {"role": "user", "content": ""},
]


@FAST
@example(
    (
        "anthropic",
        PLAIN_REPLY,
        [{"type": "SlidingWindowManager", "config": {"max_messages": 1, "pin": "none"}}],
    ),
    "pre_llm",
    True,
)
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
@example(("anthropic", USER_FIRST_REPRO), "default", "pre_llm", 1_500, False)
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


def _result_text(block):
    """The text of an Anthropic tool_result or a Responses function_call_output."""
    content = block.get("content", block.get("output"))
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if isinstance(p, dict))


@FAST
@given(
    st.sampled_from(FORMATS).flatmap(lambda f: st.tuples(st.just(f), conversations(format=f))),
    st.sampled_from([64, 300, 2_000]),
)
def test_a_cut_leaves_every_other_block_byte_identical(case, cap):
    """Truncation cuts only the results over its cap: in every format every other block (or
    item) of every message comes back byte for byte, a cut result keeps its other fields, and
    a message with nothing cut is the very message that came in."""
    fmt, messages = case
    before = json.dumps(messages)
    entry = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": cap}}
    definition = load_definition({"name": "p", "hooks": {"pre_llm": [entry]}})
    out = definition.apply("pre_llm", Context(system_prompt=SYSTEM[fmt], messages=messages, format=fmt))
    assert json.dumps(messages) == before
    after = list(out.context.messages)
    assert len(after) == len(messages)  # truncation removes nothing
    for old, new in zip(messages, after, strict=True):
        if fmt == "anthropic":
            olds = old["content"] if isinstance(old["content"], list) else [old["content"]]
            news = new["content"] if isinstance(new["content"], list) else [new["content"]]
            cut = any(
                isinstance(b, dict) and b.get("type") == "tool_result" and len(_result_text(b)) > cap
                for b in olds
            )
        else:
            olds, news = [old], [new]
            cut = old.get("type") == "function_call_output" and len(_result_text(old)) > cap
        if not cut:
            assert new is old
            continue
        assert len(news) == len(olds)
        for a, b in zip(olds, news, strict=True):
            if len(_result_text(a)) > cap and a.get("type") in ("tool_result", "function_call_output"):
                assert {k: v for k, v in a.items() if k not in ("content", "output")} == {
                    k: v for k, v in b.items() if k not in ("content", "output")
                }
                assert type(b.get("content", b.get("output"))) is type(a.get("content", a.get("output")))
                assert len(_result_text(b)) <= cap
            else:
                assert json.dumps(a) == json.dumps(b)


ALL_FORMATS = ("openai_chat", *FORMATS)
SYSTEM_OF = {**SYSTEM, "openai_chat": "sys"}
SMALL = settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@SMALL
@example(("anthropic", USER_FIRST_REPRO), "default", 1_500, False)
@given(
    st.sampled_from(ALL_FORMATS).flatmap(lambda f: st.tuples(st.just(f), conversations(format=f))),
    st.sampled_from(SHIPPED),
    st.integers(1_000, 4_000),
    st.booleans(),
)
def test_every_shipped_definition_fits_small_windows_in_every_format(case, name, window, store):
    """In every format, every shipped definition's pre_llm on a tool-heavy conversation in a
    1,000-4,000 token window raises no ManagerError (only the fit step's ContextError when
    the fixed part alone cannot fit), keeps the system prompt and
    the task, and gives a list valid in that format (user first for Anthropic)."""
    from ctxmgmt.messages import last_task_index

    fmt, messages = case
    definition = load_definition(name)
    ctx = Context(
        system_prompt=SYSTEM_OF[fmt],
        messages=messages,
        model="gpt-4o-mini",
        context_window=window,
        format=fmt,
    )
    task = last_task_index(list(ctx.messages))
    with tempfile.TemporaryDirectory() as folder:
        options = {"offloader": LocalOffloader(folder), "session": "s"} if store else {}
        try:
            result = definition.apply("pre_llm", ctx, **options)
        except ContextError:  # the fit step's refusal: the fixed part alone exceeds the window
            assume(False)
    out = result.context
    assert_valid_messages(out.messages, partial_tail=True, format=fmt, system=out.system_prompt)
    assert not [e["error"] for e in result.trace if e["error"]]
    assert out.system_prompt == ctx.system_prompt
    if task is not None and fmt == "openai_chat":  # the task's index is the chat view's
        assert list(ctx.messages)[task] in list(out.messages)


def _with_system_turns(messages, picks):
    """``messages`` with a mid-conversation system message after the user turns ``picks``
    chooses among those Anthropic allows one after (followed by an assistant turn, or last)."""
    places = [
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and (i + 1 == len(messages) or messages[i + 1]["role"] == "assistant")
    ]
    chosen = {places[k % len(places)] for k in picks} if places else set()
    out = []
    for i, m in enumerate(messages):
        out.append(m)
        if i in chosen:
            text = f"# Reminder {i}\nwork in /srv/app-{i}"
            block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
            content = text if i % 2 else [block]
            out.append({"role": "system", "content": content})
    return out


def _system_texts(messages):
    texts = []
    for m in messages:
        if m["role"] == "system":
            content = m["content"]
            texts += [content] if isinstance(content, str) else [b["text"] for b in content]
    return texts


# A window that removed every user turn before a system message left it first in the internal
# list: the rule refused what the way back places after the next user turn.
SYSTEM_FIRST_REPRO = [
    *[{"role": "user", "content": "x " * 3000} for _ in range(7)],
    {"role": "assistant", "content": "ok"},
    *[{"role": "user", "content": "u"} for _ in range(4)],
    {"role": "assistant", "content": "ok"},
]


@settings(FAST, max_examples=80)
@example(SYSTEM_FIRST_REPRO, [0], "long-conversation", "pre_llm", None)
@given(
    conversations(format="anthropic"),
    st.lists(st.integers(0, 50), min_size=1, max_size=3),
    st.sampled_from(SHIPPED),
    HOOKS,
    st.sampled_from([None, 1_500, 3_000, 8_000]),
)
def test_mid_conversation_system_messages_are_kept_where_anthropic_takes_them(
    messages, picks, name, hook, window
):
    """Anthropic's mid-conversation system messages (Claude Code sends them): every shipped
    definition keeps each one, whole and in order (unless the request could not fit with
    them: then the fit step removes the oldest and says so, and the newest stays), the output
    is valid for Anthropic (after a user turn, before an assistant turn or last, never two
    together), and a second run changes nothing."""
    messages = _with_system_turns(messages, picks)
    ctx = Context(
        system_prompt=SYSTEM["anthropic"],
        messages=messages,
        model="gpt-4o-mini",
        context_window=window,
        format="anthropic",
    )
    definition = load_definition(name)
    try:
        first = definition.apply(hook, ctx)
    except ContextError:
        assume(False)  # the task and the system messages alone exceed this tiny window
    again = definition.apply(hook, first.context)
    out = first.context
    assert_valid_messages(out.messages, partial_tail=True, format="anthropic", system=out.system_prompt)
    assert not [e["error"] for e in first.trace if e["error"]]
    kept, texts = _system_texts(out.messages), _system_texts(messages)
    if any(e["details"].get("system_removed") for e in first.trace if e["type"] == "fit"):
        rest = iter(texts)
        assert all(text in rest for text in kept) and kept[-1:] == texts[-1:] and len(kept) < len(texts)
    else:
        assert kept == texts
    assert list(again.context.messages) == list(out.messages)


@FAST
@given(
    st.sampled_from(("openai_chat", *FORMATS)).flatmap(
        lambda f: st.tuples(st.just(f), conversations(format=f))
    ),
    window,
    st.booleans(),
)
def test_a_window_never_removes_the_results_of_the_newest_call(case, entry, summarize_removed):
    """Whatever max_messages, max_tokens and pin say, a window keeps the model's newest call and
    its results when it called tools last (the model has not read them: without them it calls
    again), in every format, with the invariants."""
    from ctxmgmt.testing import _chat

    fmt, messages = case
    entry["config"]["summarize_removed"] = summarize_removed
    context = Context(system_prompt=SYSTEM.get(fmt, "sys"), messages=messages, format=fmt)
    chat = _chat(context)
    last = next((m for m in reversed(chat) if m.get("role") == "assistant"), None)
    wanted = {c["id"] for c in (last or {}).get("tool_calls") or ()}
    assume(wanted)
    definition = load_definition({"name": "p", "hooks": {"pre_llm": [entry]}})
    out = assert_invariants(definition, "pre_llm", context).context
    kept = {m["tool_call_id"] for m in _chat(out) if m.get("role") == "tool"}
    assert wanted <= kept, sorted(wanted - kept)
