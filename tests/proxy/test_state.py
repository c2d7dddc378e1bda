"""A proxied conversation's state between requests: its fingerprint and its packed view."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxmgmt.api.proxy.body import parse, positions, upstream_text
from ctxmgmt.api.proxy.state import pack, unpack

_TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


def _text(messages: list[dict]) -> str:
    return json.dumps({"model": "m", "messages": messages}, ensure_ascii=False)


def _whole(body, upto: int) -> str:
    start, end = body.spans[0][0], body.spans[upto - 1][1]
    return hashlib.sha256(body.text[start:end].encode("utf-8", "surrogatepass")).hexdigest()


@given(
    st.lists(_TEXTS, min_size=1, max_size=6),
    st.lists(st.lists(_TEXTS, min_size=1, max_size=4), min_size=1, max_size=4),
    st.data(),
)
def test_a_grown_body_fingerprints_as_a_fresh_one(first, growths, data):
    """The fingerprint of a body's first N messages is the hash of their text, whichever
    fingerprints it or the bodies it grew from took before (it hashes only what is new)."""
    messages = [{"role": "user", "content": c} for c in first]
    body = parse(_text(messages), "messages")
    for growth in growths:
        upto = data.draw(st.integers(1, len(body.spans)))
        assert body.digest(upto) == _whole(body, upto)
        messages = [*messages, *({"role": "tool", "content": c} for c in growth)]
        body = parse(_text(messages), "messages", body)
    for upto in range(len(body.spans), 0, -1):
        assert body.digest(upto) == _whole(body, upto)
    assert body.digest(0) is None and body.digest(len(body.spans) + 1) is None
    assert body.digest("3") is None


def test_a_fingerprint_hashes_only_the_text_since_the_last_one(monkeypatch):
    """A body that grew from one whose fingerprint was taken hashes only its new messages."""
    messages = [{"role": "user", "content": "x" * 1000} for _ in range(50)]
    body = parse(_text(messages), "messages")
    body.digest(50)
    grown = parse(_text([*messages, {"role": "user", "content": "new"}]), "messages", body)
    hashed: list[int] = []
    real = hashlib.sha256

    class Counting:
        def __init__(self, state=None):
            self.state = state or real()

        def copy(self):
            return Counting(self.state.copy())

        def update(self, data):
            hashed.append(len(data))
            self.state.update(data)

        def hexdigest(self):
            return self.state.hexdigest()

    expected = _whole(grown, 51)
    grown.hashed = [(e, Counting(h)) for e, h in grown.hashed]
    monkeypatch.setattr(hashlib, "sha256", Counting)
    assert grown.digest(51) == expected
    assert sum(hashed) < 100


def test_a_packed_view_unpacks_to_the_same_messages():
    """The view is stored as runs of the request's messages and the messages the managers
    wrote, in order (one out of the record's order stored whole), and rebuilt from the next
    request's messages."""
    record = [{"role": "user", "content": str(i)} for i in range(10)]
    summary = {"role": "user", "content": "[summary]"}
    view = [record[0], summary, *record[5:8], {"role": "tool", "content": "cut"}, record[9], record[2]]
    packed = pack({"view": view, "upto": 10}, record)
    assert packed["packed"] == [[0, 1], {"m": summary}, [5, 8], {"m": view[5]}, [9, 10], [2, 3]]
    state = unpack(json.loads(json.dumps(packed)), record)
    assert state is not None and state["view"] == view and state["upto"] == 10
    assert [m is r for m, r in zip(state["view"], view, strict=True)] == [1, 0, 1, 1, 1, 0, 1, 1]


def test_positions_find_every_message_of_the_request_in_any_order():
    """A view's messages are found in the request however they are ordered (one moved to the
    front does not hide the ones after it), twice if twice; a look-alike copy is not one."""
    items = [{"role": "user", "content": str(i)} for i in range(6)]
    copy = dict(items[3])
    assert positions([items[5], *items[:5]], items) == [5, 0, 1, 2, 3, 4]
    assert positions([items[1], items[1], copy, items[4]], items) == [1, 1, None, 4]
    assert positions([], items) == [] and positions([copy], []) == [None]
    a, b, c = items[:3]
    assert positions([a, b, a], [a, b, c, a, b, a]) == [0, 1, 5]  # the common start and end overlap


@given(st.integers(0, 12), st.lists(st.one_of(st.integers(0, 11), st.none()), max_size=16), st.data())
@example(3, [None, 0, 1, 2], None).via("a summary before the whole record")
@example(4, [0, 1, None, None, 2, 3], None).via("written messages between runs")
def test_positions_name_the_very_object_or_none(n, picks, data):
    """Every object of a view is found at an index of the very same object, and a message no
    item is (a copy, one ctxmgmt wrote) at none: whatever the common start and end."""
    items = [{"role": "user", "content": str(i)} for i in range(n)]
    if n and data is not None and data.draw(st.booleans(), label="an item twice"):
        items.append(items[0])
    view = [items[i] if i is not None and i < len(items) else {"role": "user", "content": "0"} for i in picks]
    found = positions(view, items)
    assert len(found) == len(view)
    for m, k in zip(view, found, strict=True):
        if any(m is item for item in items):
            assert k is not None and items[k] is m
        else:
            assert k is None


def test_an_unchanged_request_goes_upstream_as_the_client_wrote_it():
    """A view that is the client's messages in order is the client's own text, separators
    and all; with a message of ctxmgmt's among them, the rest keep their text."""
    messages = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    text = json.dumps({"model": "m", "messages": messages}, indent=3)
    body = parse(text, "messages")
    items = body.data["messages"]
    assert upstream_text(body, items, {}) == text
    summary = {"role": "user", "content": "summary"}
    out = upstream_text(body, [items[0], summary, *items[3:]], {"model": "up"})
    assert json.loads(out) == {"model": "up", "messages": [messages[0], summary, *messages[3:]]}
    assert text[body.spans[3][0] : body.spans[4][1]] in out  # the run of 3 and 4, as written


@given(st.lists(_TEXTS, min_size=1, max_size=8), st.data())
def test_the_upstream_text_holds_the_view_whatever_its_runs(contents, data):
    """Whatever runs of the client's messages a view keeps, in any order, with ctxmgmt's
    own among them, the upstream's text reads back as the view."""
    messages = [{"role": "user", "content": c} for c in contents]
    body = parse(
        json.dumps({"model": "m", "messages": messages}, indent=data.draw(st.sampled_from([None, 1]))),
        "messages",
    )
    items = body.data["messages"]
    picks = data.draw(st.lists(st.one_of(st.integers(0, len(items) - 1), _TEXTS), max_size=12))
    view = [items[p] if isinstance(p, int) else {"role": "user", "content": p} for p in picks]
    changes = data.draw(st.sampled_from([{}, {"model": "up"}, {"tools": [{"type": "function"}]}]))
    assert json.loads(upstream_text(body, view, changes)) == {"model": "m", "messages": view, **changes}


def _containers(value) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(_containers, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(_containers, value))
    return 0


_BRACKETY = st.text(st.sampled_from('[]{}ab"\\'), max_size=8)


@given(
    st.lists(
        st.lists(st.one_of(_BRACKETY, st.just([[1], {"k": [2]}])), min_size=1, max_size=3),
        min_size=1,
        max_size=6,
    )
)
def test_a_bodys_container_bound_holds_its_prefix_and_does_not_grow_with_its_tail(growths):
    """The arrays and objects a body is said to hold up to its last message are at least as
    many as it holds there, and a tail (``tools``) resent with every request is not summed."""
    messages: list[dict] = []
    tools = [{"name": "t", "input_schema": {"type": "object", "properties": {"a": {}}}}] * 3
    body = None
    for growth in growths:
        messages = [*messages, *({"role": "user", "content": c} for c in growth)]
        text = json.dumps({"model": "m", "messages": messages, "tools": tools})
        body = parse(text, "messages", body)
        held = 1 + _containers(messages)  # the body's object, its messages
        assert held <= body.marks[0] <= text.count("[") + text.count("{")


def test_a_body_of_too_many_arrays_is_refused_before_it_is_decoded(monkeypatch):
    """A body of more arrays and objects than MAX_CONTAINERS is a 400 saying how many, found
    without decoding it; brackets inside strings do not count, and a conversation that grows
    past the budget is refused at the request that crosses it."""
    from ctxmgmt.api.errors import HTTPProblem
    from ctxmgmt.api.proxy import body as module

    monkeypatch.setattr(module, "MAX_CONTAINERS", 100)
    decoded: list[int] = []
    real = module.DECODER.raw_decode
    monkeypatch.setattr(
        module, "DECODER", type("D", (), {"raw_decode": lambda s, t, at: decoded.append(at) or real(t, at)})()
    )
    many = {"model": "m", "messages": [{"role": "user", "content": [[[]]] * 60}]}
    with pytest.raises(HTTPProblem) as refused:
        parse(json.dumps(many), "messages")
    assert refused.value.status == 400
    assert f"holds {_containers(many)} JSON arrays and objects, more than the 100" in refused.value.reason
    assert decoded == []
    brackets = parse(_text([{"role": "user", "content": "[{" * 500}]), "messages")  # strings only
    assert brackets.data["messages"][0]["content"] == "[{" * 500
    messages = [{"role": "user", "content": [[]] * 10}]
    body = parse(_text(messages), "messages")
    for _ in range(3):
        messages = [*messages, {"role": "user", "content": [[]] * 10}]
        body = parse(_text(messages), "messages", body)
    with pytest.raises(HTTPProblem):
        parse(_text([*messages, {"role": "user", "content": [[]] * 60}]), "messages", body)


@pytest.mark.parametrize(
    "item",
    [
        "ab",  # many tiny strings: about 12 times their text as objects
        {"k": 1},  # many tiny mappings
        [1.5],  # floats in lists
        "\U0001f600 wide",  # an escape in an ASCII text: every string of the message wide
        "A long enough line of an agent's prose, as a history mostly holds, with commas, " * 8,
    ],
)
def test_a_kept_bodys_size_bounds_the_memory_its_values_hold(item):
    """size_of is at least the memory a parsed body holds, whatever its values, read whole or
    grown from a previous body; for a history of prose it is within 3 times of it."""
    import tracemalloc

    from ctxmgmt.api.proxy.body import size_of

    def body_of(n: int) -> dict:
        content = [{"type": "tool_use", "id": "t", "name": "n", "input": {"v": [item] * 2000}}]
        return {"model": "m", "messages": [{"role": "assistant", "content": content}] * n, "tools": []}

    import sys

    text = json.dumps(body_of(3))
    grown = parse(text, "messages", parse(json.dumps(body_of(2)), "messages"))
    tracemalloc.start()
    try:
        fresh = parse(text, "messages")
        measured = tracemalloc.get_traced_memory()[0] + sys.getsizeof(text)  # its objects and its text
    finally:
        tracemalloc.stop()
    assert size_of(grown) >= measured and size_of(fresh) >= measured
    assert 2 * len(text) + 1024 * 3 < measured or len(item) > 10  # what it was counted as before
    if isinstance(item, str) and len(item) > 100:
        assert size_of(fresh) <= 3 * measured


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_a_fingerprint_leaves_out_a_moved_cache_breakpoint_and_nothing_else(separators):
    """The fingerprint of a body's first messages is the same whether a message carries the
    client's ``cache_control`` or not (Python's and JavaScript's JSON alike, the member first
    or last), and differs when anything else in them does."""
    from ctxmgmt.messages import without_cache_control

    mark = {"type": "ephemeral", "ttl": "1h"}
    ask = {"role": "user", "content": [{"type": "text", "text": "fix it"}]}
    marked_last = {"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": mark}]}
    marked_first = {"role": "user", "content": [{"cache_control": mark, "type": "text", "text": "fix it"}]}
    other = {"role": "user", "content": [{"type": "text", "text": "fix it!", "cache_control": mark}]}
    answer = {"role": "assistant", "content": "done"}

    def digest(first: dict) -> str | None:
        text = json.dumps({"model": "m", "messages": [first, answer]}, separators=separators)
        return parse(text, "messages").digest(2)

    assert digest(ask) == digest(marked_last) == digest(marked_first) != digest(other)
    assert without_cache_control(marked_first) == ask and without_cache_control(ask) is ask
    nested = {"content": [{"type": "tool_result", "content": [{"type": "text", "cache_control": mark}]}]}
    bare = {"content": [{"type": "tool_result", "content": [{"type": "text"}]}]}
    assert without_cache_control(nested) == bare
    assert nested["content"][0]["content"][0]["cache_control"] == mark  # the input is never changed
    history = [marked_last, answer]
    assert (
        without_cache_control(history) == [ask, answer] and without_cache_control([ask, answer])[1] is answer
    )


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_a_fingerprint_keeps_a_cache_control_member_in_a_tools_input(separators):
    """Two histories that differ only in a member named cache_control inside a tool's input
    (the model's data, which goes upstream) fingerprint apart, with a provider's breakpoint on
    that message or not; a provider's breakpoint moved still leaves a fingerprint the same."""
    mark = {"type": "ephemeral"}

    def call(data: dict, **extra) -> dict:
        use = {"type": "tool_use", "id": "t1", "name": "configure", "input": data, **extra}
        return {"role": "assistant", "content": [use]}

    ask = {"role": "user", "content": "set it up"}

    def digest(message: dict) -> str | None:
        text = json.dumps({"model": "m", "messages": [ask, message]}, separators=separators)
        return parse(text, "messages").digest(2)

    plain, data = call({"ttl": "1h"}), call({"ttl": "1h", "cache_control": mark})
    assert digest(plain) != digest(data)
    assert digest(call({"ttl": "1h"}, cache_control=mark)) == digest(plain)  # a moved breakpoint
    both = digest(call({"ttl": "1h", "cache_control": mark}, cache_control=mark))
    assert both == digest(data) != digest(plain)  # the breakpoint moved: the input's member stays
    # A breakpoint of another value is no reason to take the input's for it.
    odd = digest(call({"ttl": "1h", "cache_control": mark}, cache_control="ephemeral"))
    assert odd != digest(plain) and odd != digest(call({"ttl": "1h"}, cache_control="ephemeral"))


def test_a_large_element_is_parsed_once_to_find_its_breakpoint(monkeypatch):
    """An element of more than a MiB with many members named cache_control in a tool's input
    is parsed once to find which one is its breakpoint (not once per choice, up to 16): a
    miss, when that parse is not it, fingerprints it as written."""
    from ctxmgmt.api.proxy import body

    parsed: list[int] = []

    class Counting(json.JSONDecoder):
        def decode(self, s, *args, **kwargs):  # type: ignore[override]
            parsed.append(len(s))
            return super().decode(s, *args, **kwargs)

    monkeypatch.setattr(body, "DECODER", Counting())
    mark = {"type": "ephemeral"}
    data = {f"k{i}": {"cache_control": mark} for i in range(40)} | {"blob": "x" * (1 << 20)}
    use = {"type": "tool_use", "id": "t1", "name": "configure", "input": data, "cache_control": mark}
    messages = [{"role": "user", "content": "set it up"}, {"role": "assistant", "content": [use]}]
    text = json.dumps({"model": "m", "messages": messages})
    first = parse(text, "messages").digest(2)
    assert len([n for n in parsed if n > 1 << 20]) == 1
    assert first == parse(text, "messages").digest(2) is not None  # the same text, the same print


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_a_client_that_writes_null_breakpoints_keeps_its_fingerprint(separators):
    """A client that writes ``"cache_control": null`` on every block and an object on its
    newest (SDKs that write every optional field) fingerprints its earlier messages alike
    wherever its breakpoint is, and apart from other messages."""

    def block(text: str, mark: dict | None) -> dict:
        return {"role": "user", "content": [{"type": "text", "text": text, "cache_control": mark}]}

    def digest(*messages: dict) -> str | None:
        text = json.dumps({"model": "m", "messages": list(messages)}, separators=separators)
        return parse(text, "messages").digest(2)

    mark = {"type": "ephemeral"}
    marked = digest(block("a", None), block("b", mark))
    moved = digest(block("a", None), block("b", None), block("c", mark))
    assert marked == moved != digest(block("a", None), block("B", None), block("c", mark))


def test_a_tool_input_that_holds_cache_control_keeps_it():
    """Only a provider's breakpoints are taken out (on a message, its blocks, a tool result's
    blocks): a tool's input or a tool result's data that holds a member named cache_control
    is the model's and the tool's own, kept."""
    from ctxmgmt.messages import without_cache_control

    mark = {"type": "ephemeral"}
    call = {
        "type": "tool_use",
        "id": "t1",
        "name": "configure",
        "input": {"cache_control": "no-store", "headers": [{"cache_control": "max-age=0"}]},
        "cache_control": mark,
    }
    said = {"role": "assistant", "content": [call]}
    out = without_cache_control(said)
    assert "cache_control" not in out["content"][0]
    assert out["content"][0]["input"] is call["input"]
    data = {"type": "json", "content": [{"cache_control": "kept", "text": "x"}]}
    deep = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [data]}]}
    assert without_cache_control(deep) is deep  # a block's own content's block's content: data


_VALUES = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["content", "cache_control", "type", "input"]), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
@example([{"content": [{"content": [{"content": [{"cache_control": 1}]}]}]}])
@example({"input": {"cache_control": 1}})
def test_holds_cache_control_says_whether_without_cache_control_takes_one_out(value):
    """The proxy's quick check that a message holds a breakpoint agrees with what
    without_cache_control takes out, at every depth (one could drift from the other)."""
    from ctxmgmt.messages import holds_cache_control, without_cache_control

    assert holds_cache_control(value) == (without_cache_control(value) is not value)


def test_a_fingerprint_is_linear_in_a_long_run_of_whitespace():
    """A body whose message holds ``cache_control`` and megabytes of JSON whitespace (legal
    between tokens) is fingerprinted in one pass: a pattern retried at every blank would take
    hours on it, and it was run on the server's event loop."""
    import threading

    blanks = " " * 4_000_000
    element = (
        '{"role": "user", "content": [{"type": "text", "text": "hi", '
        '"cache_control": {"type": "ephemeral"}}, '
        f'{{"type": "text",{blanks}"text": "x"}}]}}'
    )
    body = parse(f'{{"model": "m", "messages": [{element}]}}', "messages")
    done: list[str | None] = []
    worker = threading.Thread(target=lambda: done.append(body.digest(1)), daemon=True)
    worker.start()
    worker.join(60)  # a deadline, no timing: one pass takes milliseconds
    assert done and done[0] is not None


def _marked(messages: list[dict], at: int) -> list[dict]:
    """``messages`` with a prompt-cache breakpoint on the last block of message ``at``."""
    out = json.loads(json.dumps(messages))
    out[at]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def _turns(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"role": "user", "content": [{"type": "text", "text": f"question {i}"}]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    return out


def test_a_body_whose_breakpoint_moved_reads_only_what_changed_and_keeps_its_objects():
    """A body whose newest messages changed only by a moved breakpoint is read from the
    previous one up to them: the first messages are its very objects, the changed and new
    ones read; the managed conversation (canon) is made of the same objects throughout, none
    holding a breakpoint, and the elements are the client's, breakpoint and all."""
    history = _turns(20)
    first = parse(json.dumps({"model": "m", "messages": _marked(history, 39)}), "messages")
    grown = [*history, {"role": "user", "content": [{"type": "text", "text": "next"}]}]
    second = parse(json.dumps({"model": "m", "messages": _marked(grown, 40)}), "messages", first)
    assert second.grown and not second.extends
    assert all(a is b for a, b in zip(first.data["messages"][:39], second.data["messages"], strict=False))
    assert second.data["messages"][39] is not first.data["messages"][39]  # read again
    assert "cache_control" in json.dumps(second.data["messages"][40])  # the client's, as sent
    assert all(a is b for a, b in zip(first.canon, second.canon[:40], strict=True))  # the same objects
    assert "cache_control" not in json.dumps(second.canon)
    assert second.canon == json.loads(json.dumps(grown))
    full = parse(second.text, "messages")
    assert full.data == second.data and full.spans == second.spans and full.marks == second.marks
    assert full.digest(41) == second.digest(41)


def test_a_body_that_changed_before_its_newest_messages_is_read_whole():
    """A body whose text differs from the previous one's before its last few messages is not
    read from it: every message is read, none taken from the previous body."""
    from ctxmgmt.api.proxy.body import Bodies

    history = _turns(20)
    first = parse(json.dumps({"model": "m", "messages": history}), "messages")
    edited = json.loads(json.dumps(history))
    edited[4]["content"][0]["text"] = "question 2, edited"
    text = json.dumps({"model": "m", "messages": [*edited, {"role": "user", "content": "more"}]})
    bodies = Bodies()
    bodies.keep(first, None)
    assert bodies.find(text) is None
    second = parse(text, "messages", first)
    assert not second.grown
    assert not any(a is b for a, b in zip(first.data["messages"], second.data["messages"], strict=False))


def test_a_body_read_from_another_conversations_start_leaves_that_one_kept():
    """Two conversations with the same start: the second is read from the first's first
    messages, and the first stays kept for its own next request."""
    from ctxmgmt.api.proxy.body import Bodies

    start = _turns(60)  # more than the 1 KB that groups bodies
    one = parse(
        json.dumps({"model": "m", "messages": [*start, {"role": "user", "content": "one"}]}), "messages"
    )
    bodies = Bodies()
    bodies.keep(one, None)
    text = json.dumps({"model": "m", "messages": [*start, {"role": "user", "content": "two"}]})
    previous = bodies.find(text)
    assert previous is one
    two = parse(text, "messages", previous)
    assert two.grown and not two.extends
    bodies.keep(two, previous, replaces=two.extends)
    following = json.dumps(
        {
            "model": "m",
            "messages": [*start, {"role": "user", "content": "one"}, {"role": "assistant", "content": "x"}],
        }
    )
    assert bodies.find(following) is one


def test_a_kept_bodys_size_counts_the_copies_it_holds_without_breakpoints():
    """Every element holding a breakpoint is held twice (as sent, and without it): the
    size of a kept body counts both."""
    from ctxmgmt.api.proxy.body import size_of

    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "x" * 50, "cache_control": {"type": "ephemeral"}}],
        }
    ] * 200
    plain = [{"role": "user", "content": [{"type": "text", "text": "x" * 50}]}] * 200
    marked = parse(json.dumps({"model": "m", "messages": messages}), "messages")
    unmarked = parse(json.dumps({"model": "m", "messages": plain}), "messages")
    assert all(c is not e for c, e in zip(marked.canon, marked.data["messages"], strict=True))
    assert all(c is e for c, e in zip(unmarked.canon, unmarked.data["messages"], strict=True))
    assert size_of(marked) > 1.8 * size_of(unmarked)


def test_a_block_whose_call_id_is_no_string_takes_no_breakpoint_and_raises_nothing():
    """A cut result's breakpoints are copied by call id only where the id is a string: a
    block holding an object or a list there (a 500 before: unhashable) takes none."""
    from ctxmgmt.api.proxy.handler import _breakpoints_of

    mark = {"type": "ephemeral"}
    source = {
        "role": "user",
        "content": [{"type": "text", "text": "a", "tool_use_id": {"x": 1}, "cache_control": mark}],
    }
    cut = {
        "role": "user",
        "content": [{"type": "text", "text": "a", "tool_use_id": [1]}, {"type": "text", "text": "b"}],
    }
    assert _breakpoints_of(source, cut) == cut


def test_a_cut_result_takes_its_breakpoint_wherever_the_client_put_it():
    """A breakpoint the client puts on a result that goes upstream cut is kept: on a chat tool
    message's part (the cut text made a part), on the message itself, and on an Anthropic
    result block when the client put it inside the block's content."""
    from ctxmgmt.api.proxy.handler import _breakpoints_of

    mark = {"type": "ephemeral"}
    chat = {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [{"type": "text", "text": "x" * 90, "cache_control": mark}],
    }
    cut = {"role": "tool", "tool_call_id": "c1", "content": "x[truncated]"}
    assert _breakpoints_of(chat, cut) == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [{"type": "text", "text": "x[truncated]", "cache_control": mark}],
    }
    parts = {**cut, "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert _breakpoints_of(chat, parts)["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": mark},
    ]
    on_message = {"role": "tool", "tool_call_id": "c1", "content": "x" * 90, "cache_control": mark}
    assert _breakpoints_of(on_message, cut) == {**cut, "cache_control": mark}
    assert _breakpoints_of({**chat, "content": "x" * 90}, cut) is cut  # none to keep

    inner = [{"type": "text", "text": "x" * 90, "cache_control": mark}]
    anthropic = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": inner}]}
    shortened = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x[cut]"}],
    }
    assert _breakpoints_of(anthropic, shortened)["content"][0]["cache_control"] == mark


def test_the_upstream_messages_hold_the_clients_breakpoints_once_each():
    """Upstream, the client's own message stands where the view holds its breakpoint-free
    copy; a message ctxmgmt wrote loses a stale breakpoint; and a result the client marks
    lends its breakpoint to one cut message only, the newest that stands for it, when its call
    id repeats (as a client numbering calls per turn does)."""
    from ctxmgmt.api.proxy.handler import _client_messages

    mark = {"type": "ephemeral"}

    def result(text: str, **extra) -> dict:
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_0", "content": text, **extra}],
        }

    given = [{"role": "user", "content": "task"}, result("old"), result("new", cache_control=mark)]
    canon = [given[0], given[1], result("new")]
    stale = {"role": "user", "content": [{"type": "text", "text": "[summary]", "cache_control": mark}]}
    cut_old, cut_new = result("o[cut]"), result("n[cut]")
    out = _client_messages([canon[0], stale, cut_old, cut_new], canon, given, [2])
    assert out[0] is given[0]
    assert out[1] == {"role": "user", "content": [{"type": "text", "text": "[summary]"}]}
    assert out[2] is cut_old and out[3]["content"][0]["cache_control"] == mark
    assert json.dumps(out).count("cache_control") == json.dumps(given).count("cache_control")
    kept = _client_messages([canon[0], cut_old, canon[2]], canon, given, [2])
    assert kept[2] is given[2]  # the client's own where the view keeps its copy: its text as sent
    assert kept[1] is cut_old  # its breakpoint goes upstream on it, not also on an older cut
