"""A provider-format history converts and checks only what is new, and the result is always
what a conversion and a check from scratch give."""

import contextlib
import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, load_definition
from ctxmgmt.formats import anthropic, check, grown, internal, openai_responses
from ctxmgmt.formats._common import ORIGIN, Known, origin_of
from ctxmgmt.history import History
from ctxmgmt.testing import conversations
from ctxmgmt.tokens import clear_caches

MODULES = {"anthropic": anthropic, "openai_responses": openai_responses}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPS = ("append", "append_list", "same_list", "edit", "remove", "mutate", "equal_copy", "replace", "older")
WINDOW = load_definition(
    {"name": "w", "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 3}}]}}
)
QUIET = load_definition(
    {
        "name": "q",
        "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "activation": {"tokens_exceed": 10**9}}]},
    }
)


def _strip(messages):
    return [{k: v for k, v in m.items() if k != ORIGIN} for m in messages]


def _edited(m):
    """An equal-shaped copy of a message with other text where it has a string content."""
    new = copy.deepcopy(m)
    if isinstance(new.get("content"), str):
        new["content"] += " (edited)"
    return new


def _assert_as_from_scratch(fmt, ctx):
    """The context's check and conversion equal a check and conversion of a new list of the
    same message objects with nothing remembered."""
    module = MODULES[fmt]
    messages = list(ctx.messages)
    expected = [str(p) for p in module.check(messages, None, partial_tail=True)]
    assert [str(p) for p in check(ctx)] == expected
    if expected:
        return
    way = internal(ctx)
    assert way is not None
    fresh = module.to_internal(messages)
    got = list(way.context.messages)
    assert _strip(got) == _strip(fresh)
    assert [origin_of(m).message for m in got] == [origin_of(m).message for m in fresh]
    assert all(origin_of(a).message is origin_of(b).message for a, b in zip(got, fresh, strict=True))
    back = module.back(got)
    assert len(back) == len(messages) and all(a is b for a, b in zip(back, messages, strict=True))


@FAST
@given(
    st.sampled_from(sorted(MODULES)).flatmap(lambda f: st.tuples(st.just(f), conversations(format=f))),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10**6)), min_size=1, max_size=12),
    st.integers(0, 10**6),
)
def test_incremental_conversion_and_check_equal_from_scratch(case, ops, cut):
    """Whatever a caller does between calls (appends to a Context, a new list with messages
    added or the same ones, an earlier message edited or removed, the list mutated in place, equal but new
    message objects, another list, an older history again), the check names the same problems
    and the conversion is the same, message for message, as from scratch."""
    fmt, pool = case
    cut %= len(pool) + 1
    lst = list(pool[:cut])
    rest = list(pool[cut:])
    ctx = Context(messages=lst, format=fmt)
    seen = [ctx]
    _assert_as_from_scratch(fmt, ctx)
    for op, n in ops:
        if op == "append" and rest:
            k = 1 + n % len(rest)
            ctx = ctx.append(*rest[:k])
            lst, rest = list(ctx.messages), rest[k:]
        elif op == "append_list" and rest:
            k = 1 + n % len(rest)
            lst, rest = lst + rest[:k], rest[k:]
            ctx = Context(messages=lst, format=fmt)
        elif op == "same_list":
            lst = list(lst)
            ctx = Context(messages=lst, format=fmt)
        elif op == "edit" and lst:
            lst = list(lst)
            lst[n % len(lst)] = _edited(lst[n % len(lst)])
            ctx = Context(messages=lst, format=fmt)
        elif op == "remove" and lst:
            lst = [m for i, m in enumerate(lst) if i != n % len(lst)]
            ctx = Context(messages=lst, format=fmt)
        elif op == "mutate" and lst:
            lst[n % len(lst)] = _edited(lst[n % len(lst)])  # the same list object, changed in place
            lst.append(copy.deepcopy(lst[-1])) if n % 2 else None
            ctx = Context(messages=lst, format=fmt)
        elif op == "equal_copy":
            lst = copy.deepcopy(lst)
            ctx = Context(messages=lst, format=fmt)
        elif op == "replace":
            lst = list(reversed(pool)) if n % 2 else list(pool[: n % (len(pool) + 1)])
            ctx = Context(messages=lst, format=fmt)
        elif op == "older":
            ctx = seen[n % len(seen)]
            lst = list(ctx.messages)
        seen.append(ctx)
        _assert_as_from_scratch(fmt, ctx)


@FAST
@given(
    st.sampled_from(sorted(MODULES)).flatmap(lambda f: st.tuples(st.just(f), conversations(format=f))),
    st.integers(0, 10**6),
    st.sampled_from(["append", "list"]),
)
def test_a_grown_history_is_managed_as_from_scratch(case, cut, how):
    """Applying a definition (firing or not) to a history grown from one applied before gives
    the very output a process that remembers nothing gives: the same items, the same objects."""
    fmt, pool = case
    cut %= len(pool) + 1
    first = Context(messages=pool[:cut], format=fmt)
    for definition in (QUIET, WINDOW):
        with contextlib.suppress(Exception):  # an invalid start: nothing is remembered of it
            definition.apply("pre_llm", first)
    ctx = first.append(*pool[cut:]) if how == "append" else Context(messages=list(pool), format=fmt)
    outs = []
    for _ in range(2):
        outs.append([definition.apply("pre_llm", ctx).context.messages for definition in (QUIET, WINDOW)])
        clear_caches()
        ctx = Context(messages=list(pool), format=fmt)
    for a, b in zip(*outs, strict=True):
        assert json.dumps(list(a)) == json.dumps(list(b))
        same_a = [x is y for x, y in zip(a, pool, strict=False)]
        assert same_a == [x is y for x, y in zip(b, pool, strict=False)]


def test_growth_checks_and_converts_only_the_new_messages(monkeypatch):
    """A history grown from a converted one checks from its first new message, and its internal
    messages start with the very objects of the one it grew from."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
    ]
    ctx = Context(messages=messages, format="anthropic")
    before = grown(ctx.messages, "anthropic")
    starts = []
    real = anthropic._check_messages

    def spy(messages, start, pending, problems):
        starts.append(start)
        return real(messages, start, pending, problems)

    monkeypatch.setattr(anthropic, "_check_messages", spy)
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    for later in (Context(messages=[*messages, answer], format="anthropic"), ctx.append(answer)):
        after = grown(later.messages, "anthropic")
        assert before is not None and after is not None
        assert all(a is b for a, b in zip(before.inner, after.inner, strict=False))
        assert len(after.inner) == len(before.inner) + 1
    # The second growth has the very objects of the first (a list handed again extends the
    # same log): it checks from its new message, or finds it checked already.
    assert starts[0] == 2 and starts[1:] in ([2], [3], [])


def test_a_grown_list_that_breaks_a_rule_is_refused_with_its_pointer():
    """A history valid so far, grown by a message that breaks the format's rules, is refused
    with the pointer of the new message, as from scratch."""
    ctx = Context(messages=[{"role": "user", "content": "hi"}], format="anthropic")
    assert check(ctx) == []
    bad = ctx.append({"role": "tool", "content": "x", "tool_call_id": "a"})
    problems = check(bad)
    assert [p.pointer for p in problems] == ["/messages/1/role"]
    items = Context(messages=[{"role": "user", "content": "hi"}], format="openai_responses")
    assert check(items) == []
    answer = {"type": "function_call_output", "call_id": "nope", "output": "x"}
    assert [p.pointer for p in check(items.append(answer))] == ["/messages/1/call_id"]


def test_the_histories_kept_to_find_a_start_are_bounded_in_bytes_and_count():
    """The registry of converted histories keeps at most its count, within its bytes, and
    never one larger than all its bytes."""
    known = Known(kept=2, max_bytes=10_000)
    histories = [History([{"role": "user", "content": str(i)}]) for i in range(4)]
    for h in histories:
        g = grown(h, "anthropic")
        assert g is not None
        known.add(h, g)
        assert known.prefix_of(h) is g
    assert known.prefix_of(histories[0]) is None  # pushed out by count
    big = History([{"role": "user", "content": "x" * 20_000}])
    g = grown(big, "anthropic")
    assert g is not None and g.bytes > 10_000
    known.add(big, g)
    assert known.prefix_of(big) is None
    assert sum(g.bytes for _, g in known._items) <= 10_000


def test_a_list_handed_again_then_grown_keeps_every_turn():
    """Responses items handed again as a new list of the same items, then grown by a turn,
    convert to every turn (the last turn before the growth is not lost)."""
    items = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    more = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    for ctx in (
        Context(messages=items, format="openai_responses"),
        Context(messages=list(items), format="openai_responses"),
        Context(messages=[*items, *more], format="openai_responses"),
    ):
        _assert_as_from_scratch("openai_responses", ctx)


def test_the_bytes_a_history_keeps_are_counted_however_it_was_converted():
    """What a converted history keeps alive is counted once per message, whether its messages
    were converted before (memoised) or not, so that the registry's byte bound holds."""
    for fmt, module in MODULES.items():
        messages = [{"role": "user", "content": "x" * 5_000}, {"role": "assistant", "content": "ok"}]
        module.to_internal(messages)  # each message converted (and memoised) first
        first = grown(History(messages), fmt)
        again = grown(History(messages).append({"role": "user", "content": "y" * 5_000}), fmt)
        assert first is not None and again is not None
        assert 10_000 <= first.bytes < 20_000 + 2_000
        assert again.bytes >= first.bytes + 10_000


def _turns():
    """Responses items with every way a turn is made: reasoning, text, parallel calls, outputs,
    a server item, reasoning before a call that joins the turn before it."""
    return [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "r1", "summary": [], "encrypted_content": "e1"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "looking"}]},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "reasoning", "id": "r2", "summary": [], "encrypted_content": "e2"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {"type": "web_search_call", "id": "ws", "status": "completed", "action": {"type": "search"}},
        {"role": "assistant", "content": "found"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "C"},
        {"role": "user", "content": "thanks"},
    ]


def _anthropic_turns():
    """Anthropic messages with thinking, parallel tool uses, results with text after them."""
    use = [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ("a", "b")]
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "x"},
                *use,
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "B"}]},
                {"type": "text", "text": "and"},
            ],
        },
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ]


def test_every_split_of_a_conversation_grows_as_from_scratch():
    """A conversation grown from every earlier point, by every step (Responses calls joining
    the turn before them included), converts and checks as from scratch, by append and by a
    new list."""
    for fmt, items in (("openai_responses", _turns()), ("anthropic", _anthropic_turns())):
        for cut in range(len(items) + 1):
            for step in range(1, len(items) - cut + 1):
                for by_append in (True, False):
                    clear_caches()
                    ctx = Context(messages=items[:cut], format=fmt)
                    _assert_as_from_scratch(fmt, ctx)
                    at = cut
                    while at < len(items):
                        more = items[at : at + step]
                        at += len(more)
                        ctx = ctx.append(*more) if by_append else Context(messages=items[:at], format=fmt)
                        _assert_as_from_scratch(fmt, ctx)


ROLES = st.sampled_from(["user", "system", "developer", "assistant"])


@FAST
@given(conversations(format="openai_responses"), ROLES)
def test_a_responses_message_of_its_own_grows_as_every_case_does(pool, role):
    """The fast path of a single new message after a closed turn (a user's, a system or
    developer note) gives what the general step gives, field for field, at every point of a
    conversation, and takes no other message (an assistant's, which calls may join)."""
    for k in range(len(pool) + 1):
        known = openai_responses._advance(pool[:k], None)
        if known is None:
            break
        items = [*pool[:k], {"role": role, "content": f"note {k}"}]
        fast = openai_responses.advance(items, known)
        general = openai_responses._advance(items, known)
        assert (fast is None) == (general is None)
        if fast is not None and general is not None:
            assert (fast.k, fast.restart, fast.inner_restart, dict(fast.pending), fast.bytes) == (
                general.k,
                general.restart,
                general.inner_restart,
                dict(general.pending),
                general.bytes,
            )
            assert _strip(list(fast.inner)) == _strip(list(general.inner))


def test_a_user_message_after_an_answer_takes_the_fast_path(monkeypatch):
    """The common step of a chat in Responses items (a user message after the model's answer)
    does not go through the general step, and its conversion is the message's own."""
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
    ]
    known = openai_responses.advance(items, None)
    assert known is not None

    def general(*args):
        raise AssertionError("the general step ran")

    monkeypatch.setattr(openai_responses, "_advance", general)
    grown_ = openai_responses.advance([*items, {"role": "user", "content": "and?"}], known)
    assert grown_ is not None and grown_.k == grown_.restart == 3
    assert _strip([grown_.inner[-1]]) == [{"role": "user", "content": "and?"}]


def test_a_message_whose_role_is_not_a_string_is_refused_as_the_general_step_refuses_it():
    """A role that is a list or an object is a problem the check names, on the fast path too
    (not a TypeError)."""
    items = [{"role": "user", "content": "hi"}]
    known = openai_responses.advance(items, None)
    for role in (["user"], {"user": 1}):
        grown_items = [*items, {"role": role, "content": "x"}]
        assert openai_responses.advance(grown_items, known) is None
        assert openai_responses._advance(grown_items, known) is None
