"""History (the O(1)-append message sequence) and Context.splice: what they promise to hold."""

import threading
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, History, get_counter, load_definition
from ctxmgmt import history as history_module
from ctxmgmt.context import runs
from ctxmgmt.history import IS_CHAT, IS_VALID
from ctxmgmt.messages import (
    check_changes,
    check_grown,
    check_messages,
    trailing_tool_run,
    units,
    units_from_end,
)
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


# -- lists handed again (History.of) --------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 10**6)),
        st.tuples(st.just("replace"), st.integers(0, 10**6)),
        st.tuples(st.just("delete"), st.integers(0, 10**6)),
        st.tuples(st.just("insert"), st.integers(0, 10**6)),
        st.tuples(st.just("again"), st.just(0)),
        st.tuples(st.just("new list"), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=25,
)
TRUNCATE = load_definition(
    {
        "name": "t",
        "settings": {"fit": False},
        "hooks": {"pre_llm": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 80}}]},
    }
)


def mutate(lst: list, op: str, at: int, pool: list) -> list:
    """One change a caller may make to a list it handed over, in place (or a new list)."""
    new = {**pool[at % len(pool)]}  # always a new object
    i = at % (len(lst) + 1)
    if op == "append":
        lst.append(new)
    elif op == "replace" and lst:
        lst[i % len(lst)] = new
    elif op == "delete" and lst:
        del lst[i % len(lst)]
    elif op == "insert":
        lst.insert(i, new)
    elif op == "truncate":
        del lst[i:]
    elif op == "new list":
        return list(lst)
    return lst


def from_scratch(messages: list) -> dict:
    """Counts, checks and a truncation of a deep copy, with caches no earlier list reached."""
    fresh = [{**m} for m in messages]
    ctx = Context(messages=History(fresh))
    problems = check_messages(fresh, partial_tail=True)
    out = TRUNCATE.apply("pre_llm", ctx).context.messages
    return {
        "count": fresh_counter().context(ctx),
        "problems": {(p.pointer, p.message) for p in problems},
        "truncated": [m.get("content") for m in out],
    }


def handed(messages: list, counter: TokenCounter) -> dict:
    """The same, for the list handed again as it is: whatever it shares with earlier lists."""
    ctx = Context(messages=messages)
    assert list(ctx.messages) == messages  # its messages (an equal one may stand for a replaced one)
    out = TRUNCATE.apply("pre_llm", ctx).context.messages
    return {
        "count": counter.context(ctx),
        "problems": {(p.pointer, p.message) for p in check_grown(ctx.messages)},
        "truncated": [m.get("content") for m in out],
    }


@FAST
@given(conversations(max_turns=12), conversations(max_turns=6), OPS)
@example(
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    [{"role": "tool", "tool_call_id": "x", "content": "orphan " * 40}],
    [("again", 0), ("replace", 0), ("again", 0), ("replace", 1), ("again", 0)],
)
def test_a_list_handed_again_after_any_change_counts_and_checks_as_from_scratch(start, pool, ops):
    """A plain list changed in place (append, replace, delete, insert, truncate) or copied, and
    handed again after each change, holds its messages, and counts, checks and truncates
    as a deep copy does from scratch: what an earlier list taught is never stale."""
    counter = fresh_counter()
    lst = list(start)
    handed(lst, counter)
    for op, at in ops:
        lst = mutate(lst, op, at, pool + start)
        assert handed(lst, counter) == from_scratch(lst)


@FAST
@given(conversations(max_turns=12), conversations(max_turns=6), OPS)
@example(
    [{"role": r, "content": ""} for r in ("user", "user", "assistant", "user", "user", "user", "user")],
    [{"role": "user", "content": ""}],
    [("delete", 2), ("insert", 1)],
)
def test_past_the_exact_size_a_history_is_never_counted_for_other_messages(start, pool, ops):
    """With the sampled comparison (shrunk here to a few messages), a history made from a list
    is counted and checked for the messages it holds, whatever the list went through; and, until
    the middle changes, it holds the list's messages after every change."""
    small = {"EXACT_UP_TO": 3, "EDGE": 1, "SAMPLES": 2}
    with patch.multiple(history_module, **small):  # type: ignore[arg-type]
        counter = fresh_counter()
        lst = list(start)
        Context(messages=lst)
        replaced_inside = False
        for op, at in ops:
            before = len(lst)
            lst = mutate(lst, op, at, pool + start)
            ctx = Context(messages=lst)
            held = list(ctx.messages)
            assert counter.context(ctx) == fresh_counter().context(Context(messages=[{**m} for m in held]))
            checked = {(p.pointer, p.message) for p in check_grown(ctx.messages)}
            assert checked == {(p.pointer, p.message) for p in check_messages(held, partial_tail=True)}
            index = at % (before + 1) % before if before else 0
            # A replacement in the middle, or an insertion or removal there that a later change
            # may cancel (the length and both ends as they were for an older list): past the
            # exact size, the sample finds those within known // SAMPLES hand-overs.
            replaced_inside |= op in ("replace", "insert", "delete") and 0 < index < before - 1
            if not replaced_inside:
                assert held == lst


def test_a_long_list_finds_a_message_replaced_in_the_middle_within_its_sample_turns():
    """Past EXACT_UP_TO, a message replaced in the middle of a list handed again is found
    within known // SAMPLES hand-overs; one replaced among the newest, and any removal, at once."""
    from ctxmgmt.history import EDGE, EXACT_UP_TO, SAMPLES

    lst = make_conversation(EXACT_UP_TO + 904, seed=3)
    k = len(lst)
    Context(messages=lst)
    lst[k - EDGE // 2] = {"role": "user", "content": "new near the end"}
    assert Context(messages=lst).messages[k - EDGE // 2] is lst[k - EDGE // 2]
    del lst[10]
    assert list(Context(messages=lst).messages) == lst
    lst[k // 2] = {"role": "user", "content": "new in the middle"}
    turns = next(t for t in range(1, k) if Context(messages=lst).messages[k // 2] is lst[k // 2])
    assert turns <= k // SAMPLES + 1


def test_handing_the_same_list_again_shares_what_was_learnt():
    """A list handed again with one more message shares its log with the history made before:
    the new history's running totals already cover the old part."""
    lst = make_conversation(50, seed=4)
    first = Context(messages=lst)
    get_counter(None).context(first)
    lst.append({"role": "user", "content": "more"})
    second = Context(messages=lst).messages
    assert second.totals(get_counter(None).tokenizer.name)[0][49] > 0
    assert first.messages.is_prefix_of(second)


def test_interleaved_conversations_handed_again_count_only_their_new_messages():
    """Eight conversations, each a plain list grown and handed again in turn, each find their
    own log: the running totals already cover every message but the new one; and a firing
    apply of a provider's format never takes the place of a list handed in."""
    from ctxmgmt import tokens

    tokens.clear_caches()
    name = get_counter(None).tokenizer.name
    lists = [make_conversation(30, seed=c) for c in range(8)]
    for lst in lists:
        get_counter(None).context(Context(messages=lst))
    window = load_definition(
        {"name": "w", "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 3}}]}}
    )
    for turn in range(3):
        for c, lst in enumerate(lists):
            lst.append({"role": "user" if len(lst) % 2 else "assistant", "content": f"c{c} turn {turn}"})
            handed = Context(messages=lst).messages
            assert len(handed.totals(name)[0]) == len(lst) - 1, (turn, c)
            get_counter(None).context(Context(messages=handed))
            asks = [{"role": ("user", "assistant")[i % 2], "content": f"q{i}"} for i in range(9)]
            out = window.apply("pre_llm", Context(messages=asks, format="anthropic"))
            assert len(out.context.messages) < 9  # it fired
            assert not any(log is out.context.messages._log for log in history_module._handed)


def test_the_lists_kept_to_be_found_again_are_bounded_in_messages(monkeypatch):
    """The histories History.of keeps hold at most HANDED_MESSAGES messages in all (the
    newest is kept whatever its length), and at most HANDED_KEPT histories."""
    from ctxmgmt import tokens

    tokens.clear_caches()
    monkeypatch.setattr(history_module, "HANDED_MESSAGES", 100)
    for c in range(10):
        History.of(make_conversation(30, seed=c))
    assert sum(len(log.items) for log in history_module._handed) <= 100
    assert len(history_module._handed) == 3
    History.of(make_conversation(500, seed=99))
    assert len(history_module._handed) == 1
    monkeypatch.setattr(history_module, "HANDED_MESSAGES", 10**9)
    for c in range(100):
        History.of([{"role": "user", "content": str(c)}])
    assert len(history_module._handed) == history_module.HANDED_KEPT


def test_the_incremental_protocol_facts_memo_and_totals():
    """known/mark record a property of the first messages; a shorter view sees only its part;
    the memo and the totals are shared by the views of one log, and a branch keeps its part."""
    base = History([{"role": "user", "content": str(i)} for i in range(3)])
    assert base.known(IS_VALID) == 0
    base.mark(IS_VALID)
    longer = base.append({"role": "user", "content": "3"})
    assert base.known(IS_VALID) == 3 and longer.known(IS_VALID) == 3 and longer.known(IS_CHAT) == 0
    longer.mark(IS_VALID)
    assert base.known(IS_VALID) == 3 and longer.known(IS_VALID) == 4
    branch = base.append({"role": "user", "content": "other"})
    assert branch.known(IS_VALID) == 3 and branch.memo is not base.memo
    assert longer.memo is base.memo
    totals, counts = base.totals("k")
    totals.extend([1, 2, 3, 4])
    counts.extend([1, 2, 3, 4])
    assert list(base.append({"role": "user", "content": "x"}).totals("k")[0]) == [1, 2, 3]


def test_no_module_reaches_into_a_history():
    """The incremental machinery is used through History's named protocol: no module but
    history.py touches its private fields."""
    import pathlib
    import re

    private = re.compile(r"\._(log|n|mark_valid|mark_checked|derived|valid|checked|prefix_of|own|view)\b")
    root = pathlib.Path(history_module.__file__).parent
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "history.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line) and "self._n" not in line
    ]
    assert found == []


@FAST
@given(conversations(max_turns=10), st.lists(st.sampled_from(["user", "tool", "assistant"]), max_size=12))
def test_the_newest_tool_run_of_a_grown_history_is_the_whole_lists(msgs, roles):
    """Where the newest tool results are, remembered and extended message by message, is where
    a walk over the whole list finds them, for the history and every shorter view of it."""
    ctx = Context(messages=msgs)
    views = [ctx.messages]
    for i, role in enumerate(roles):
        m = {"role": role, "content": str(i)}
        if role == "tool":
            m["tool_call_id"] = f"x{i}"
        ctx = ctx.append(m)
        trailing_tool_run(ctx.messages)
        views.append(ctx.messages)
    for view in [*views, *reversed(views)]:
        assert trailing_tool_run(view) == trailing_tool_run(list(view))


def test_starts_with_compares_by_identity_and_is_prefix_of_by_equality():
    """starts_with (the conversions' test) takes only the very objects as the same start, while
    is_prefix_of counts an equal message as the same (its last one by identity); both refuse a
    longer head."""
    from ctxmgmt.history import starts_with

    a = {"role": "user", "content": "x"}
    b = {"role": "assistant", "content": "y"}
    copy = dict(a)
    assert starts_with([a, b], [a]) and starts_with(History([a, b]), History([a])) and starts_with([a], ())
    assert not starts_with([copy, b], [a]) and not starts_with([a], [a, b]) and not starts_with((b, a), (a,))
    assert History([a, b]).is_prefix_of([copy, b, a]) and not History([a, b]).is_prefix_of([a])


def test_recent_histories_are_bounded_by_messages_in_all():
    """The format detection's recent histories hold at most their bound of messages: the
    oldest go first, a history longer than the bound is not kept at all, and what is kept is
    the list as it was added, not the log its conversation grows."""
    import gc
    import weakref

    from ctxmgmt.history import Recent

    class Message(dict):
        """A message that can be watched for being freed."""

    recent = Recent(kept=4, max_messages=10)
    small = [History([{"role": "user", "content": str(i)} for i in range(4)]) for _ in range(3)]
    for h in small:
        recent.add(h)
    assert recent.prefix_of(list(small[0])) is None  # 12 messages: the oldest went
    found = recent.prefix_of([*small[2], {"role": "user", "content": "more"}])
    assert found is not None and len(found) == 4 and found.is_prefix_of(small[2])
    huge = History([{"role": "user", "content": "x"}] * 11)
    recent.add(huge)
    assert recent.prefix_of(list(huge)) is None
    assert recent.prefix_of(list(small[1])) is not None
    grown = History([Message(role="user", content="start")])
    recent.add(grown)
    later = Message(role="assistant", content="a later message")
    watch = weakref.ref(later)
    grown = grown.append(later)
    del grown, later
    gc.collect()
    assert watch() is None  # the grown log was not kept alive


def test_a_history_and_a_context_pickle_and_deep_copy_as_their_messages():
    """A History holds a lock and what is known of its messages; pickled or deep-copied it is a
    new history of equal messages (a Context with it too), where both raised TypeError."""
    import copy
    import pickle

    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ctx = Context(system_prompt="sys", messages=messages, model="gpt-4o", state={"k": 1})
    get_counter("gpt-4o").context(ctx)  # counts known: the copy does not share them
    for copied in (pickle.loads(pickle.dumps(ctx)), copy.deepcopy(ctx)):
        assert copied._counts == {}  # counted anew, in the process it is in
        assert isinstance(copied.messages, History) and list(copied.messages) == messages
        assert (copied.system_prompt, copied.model, copied.state) == ("sys", "gpt-4o", {"k": 1})
        assert get_counter("gpt-4o").context(copied) == get_counter("gpt-4o").context(ctx)

    class Mine(Context):
        pass

    mine = Mine(messages=messages)
    object.__setattr__(mine, "tag", "run-7")  # a subclass's own state
    copied_mine = copy.deepcopy(mine)
    assert type(copied_mine) is Mine and copied_mine.tag == "run-7"
    restored = pickle.loads(pickle.dumps(History(messages)))
    more = {"role": "user", "content": "x"}
    assert list(restored.append(more)) == [*messages, more]
