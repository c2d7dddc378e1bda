"""History (the O(1)-append message sequence) and Context.splice: what they promise to hold."""

import threading

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, History, get_counter, load_definition
from ctxmgmt.context import runs
from ctxmgmt.messages import check_changes, check_grown, check_messages, units, units_from_end
from ctxmgmt.testing import conversations, make_conversation
from ctxmgmt.tokens import TokenCounter

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fresh_counter() -> TokenCounter:
    shared = get_counter(None)
    return TokenCounter(shared.tokenizer, shared._encoding)


def test_an_append_leaves_the_shorter_history_as_it_was():
    """A history is a value: appending returns a longer one and the first is unchanged."""
    a = History([{"role": "user", "content": "1"}])
    b = a.append({"role": "assistant", "content": "2"})
    assert len(a) == 1 and len(b) == 2
    assert list(a) == [{"role": "user", "content": "1"}]
    assert b[-1] == {"role": "assistant", "content": "2"}


def test_a_branch_from_an_older_history_does_not_change_the_newer_one():
    """Two appends to the same history give two histories that each see only their own message."""
    base = History([{"role": "user", "content": "q"}])
    left = base.append({"role": "assistant", "content": "left"})
    right = base.append({"role": "assistant", "content": "right"})
    assert [m["content"] for m in left] == ["q", "left"]
    assert [m["content"] for m in right] == ["q", "right"]
    assert [m["content"] for m in left.append({"role": "user", "content": "x"})] == ["q", "left", "x"]


def test_a_history_behaves_as_a_tuple():
    """Indexing, negative indices, slices, reversal and equality follow tuple semantics."""
    items = [{"role": "user", "content": str(i)} for i in range(5)]
    h = History(items).append({"role": "user", "content": "5"})
    items.append({"role": "user", "content": "5"})
    assert h[1:4] == tuple(items[1:4]) and h[::-2] == tuple(items[::-2])
    assert h[-1] is h[5] and list(reversed(h)) == items[::-1]
    assert h == tuple(items) and tuple(items) == h and h == items and h == History(items)
    with pytest.raises(IndexError):
        h[6]
    with pytest.raises(TypeError):
        hash(h)


def test_concurrent_appends_to_one_history_each_get_their_own_message():
    """Appends racing on one history never see each other's message (each is a branch or the head)."""
    base = History([{"role": "user", "content": "q"}])
    out: dict[int, History] = {}

    def add(i: int) -> None:
        out[i] = base.append({"role": "user", "content": str(i)})

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(h) == 2 and h[1]["content"] == str(i) for i, h in out.items())


@FAST
@given(conversations(), st.integers(0, 12), st.data())
def test_counts_of_an_appended_history_equal_counts_of_the_whole_list(msgs, cut, data):
    """Running totals give the same (tokens, count) as counting the finished list from scratch,
    whatever mix of appends, branches and new contexts made it."""
    counter = fresh_counter()
    cut = min(cut, len(msgs))
    ctx = Context(messages=msgs[:cut])
    counter.context(ctx)
    for m in msgs[cut:]:
        ctx = ctx.append(m)
        if data.draw(st.booleans()):
            counter.context(ctx)
    assert counter.context(ctx) == fresh_counter().context(Context(messages=list(msgs)))
    # A plain list that extends a counted history reuses its totals and still counts right.
    assert counter.context(Context(messages=list(msgs))) == counter.context(ctx)


@st.composite
def splices(draw):
    msgs = draw(conversations())
    n = len(msgs)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    changes = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        new = draw(st.lists(st.sampled_from(msgs or [{"role": "user", "content": "x"}]), max_size=2))
        changes.append((start, end, [{**m} for m in new]))
    return msgs, changes


@FAST
@given(splices())
def test_a_splice_is_the_list_its_changes_describe(case):
    """splice replaces each range with its messages, and nothing else."""
    msgs, changes = case
    out = Context(messages=msgs).splice(changes)
    expected, pos = [], 0
    for start, end, new in changes:
        expected += msgs[pos:start] + new
        pos = end
    expected += msgs[pos:]
    assert list(out.messages) == expected
    assert out.edit is not None and len(out.edit.spans) == len(changes)


@FAST
@given(splices())
def test_a_spliced_context_counts_as_the_same_list_counted_whole(case):
    """Counts derived from the source's totals and the changes equal a count from scratch."""
    msgs, changes = case
    counter = fresh_counter()
    source = Context(messages=msgs, system_prompt="s")
    counter.context(source)
    out = source.splice(changes)
    assert counter.context(out) == fresh_counter().context(
        Context(messages=list(out.messages), system_prompt="s")
    )


@FAST
@given(splices())
def test_checking_only_the_changes_finds_what_the_full_check_finds(case):
    """For a valid source, the seams' check reports exactly the problems of the whole result."""
    msgs, changes = case
    out = Context(messages=msgs).splice(changes)
    assert out.edit is not None
    full = {(p.pointer, p.message) for p in check_messages(out.messages, partial_tail=True)}
    seams = {(p.pointer, p.message) for p in check_changes(out.messages, out.edit.spans)}
    assert seams == full


def test_a_splice_out_of_order_is_refused():
    """Changes that overlap or run backwards are a programming error, not a silent mix-up."""
    ctx = Context(messages=make_conversation(10, seed=1))
    with pytest.raises(ValueError, match="out of order"):
        ctx.splice([(4, 6, ()), (5, 7, ())])
    with pytest.raises(ValueError, match="outside"):
        ctx.splice([(8, 12, ())])


def test_runs_groups_consecutive_indices():
    """runs turns indices into (start, end) ranges, whatever their order."""
    assert runs([5, 1, 2, 3, 7, 8]) == [(1, 4), (5, 6), (7, 9)]
    assert runs([]) == []


ORPHANS = [
    {"role": "user", "content": "q"},
    {"role": "tool", "tool_call_id": "a", "content": "1"},
    {"role": "tool", "tool_call_id": "b", "content": "2"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c", "content": "3"},
]


@FAST
@given(conversations())
@example(ORPHANS)
@example(ORPHANS[1:3])
def test_units_from_the_end_are_the_units_newest_first(msgs):
    """Walking back from the end finds the same units as the forward walk, orphan results included."""
    assert list(units_from_end(msgs)) == list(reversed(units(msgs)))


@FAST
@given(conversations(), st.integers(0, 40))
def test_a_grown_list_is_checked_as_the_whole_list_would_be(msgs, cut):
    """check_grown on a history that was valid and grew finds what the full check finds."""
    cut = min(cut, len(msgs))
    ctx = Context(messages=msgs[:cut])
    check_grown(ctx.messages)
    grown = ctx.append(*msgs[cut:], {"role": "tool", "tool_call_id": "orphan", "content": "x"})
    full = {(p.pointer, p.message) for p in check_messages(grown.messages, partial_tail=True)}
    assert {(p.pointer, p.message) for p in check_grown(grown.messages)} == full


@FAST
@given(conversations(), st.integers(0, 40), st.integers(64, 400))
def test_truncation_of_a_grown_list_equals_truncation_from_scratch(msgs, cut, limit):
    """The truncation remembered for a list and extended by its new messages gives the same
    messages as truncating the whole list afresh."""
    entry = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": limit}}
    definition = load_definition({"name": "t", "settings": {"fit": False}, "hooks": {"pre_llm": [entry]}})
    cut = min(cut, len(msgs))
    ctx = Context(messages=msgs[:cut])
    definition.apply("pre_llm", ctx)
    grown = ctx.append(*msgs[cut:])
    again = definition.apply("pre_llm", grown)
    fresh = load_definition({"name": "t", "settings": {"fit": False}, "hooks": {"pre_llm": [entry]}})
    assert list(again.context.messages) == list(
        fresh.apply("pre_llm", Context(messages=msgs)).context.messages
    )
    assert definition.apply("pre_llm", grown).trace[0]["details"] == again.trace[0]["details"]
