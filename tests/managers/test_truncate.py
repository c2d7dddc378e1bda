import pytest

from ctxmgmt import Context, get_counter, load_definition
from ctxmgmt.testing import assert_invariants

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


def truncate(hook="post_tool", **config):
    return load_definition(
        {"name": "t", "hooks": {hook: [{"type": "ToolsOutputTruncateManager", "config": config}]}}
    )


def run(text, hook="post_tool", **config):
    msgs = [{"role": "user", "content": "q"}, CALL, {"role": "tool", "tool_call_id": "a", "content": text}]
    return truncate(hook, **config).apply(hook, Context(messages=msgs))


@pytest.mark.parametrize("mode", ["head", "tail", "head_tail"])
def test_result_with_marker_stays_within_the_character_limit(mode):
    """The truncated result, marker included, fits max_output_length."""
    text = "".join(f"line {i}\n" for i in range(5000))
    out = run(text, max_output_length=500, mode=mode).context.messages[-1]["content"]
    assert len(out) <= 500
    assert f"{len(text):,} chars" in out
    if mode in ("head", "head_tail"):
        assert out.startswith("line 0\n")
    if mode in ("tail", "head_tail"):
        assert out.endswith("line 4999\n")


@pytest.mark.parametrize("mode", ["head", "tail", "head_tail"])
def test_the_failures_of_the_cut_part_stay_after_the_notice(mode):
    """A log's error lines that the cut removes (between a long head and tail) are kept after
    the notice, within the limits; the rest of the cut part is not; a second run changes
    nothing."""
    lines = [f"2026-11-27 10:00:{i % 60:02d} INFO worker processed batch {i}" for i in range(2000)]
    lines[900] = "2026-11-27 10:15:00 ERROR worker-3: timeout reading /var/data/in/3.csv after 30 s"
    lines[1200] = "Traceback (most recent call last):\nValueError: row 1200 has 7 fields, expected 9"
    text = "\n".join(lines)
    result = run(text, max_output_length=4000, max_output_tokens=1000, mode=mode)
    out = result.context.messages[-1]["content"]
    assert len(out) <= 4000 and get_counter(None).text(out) <= 1000
    assert lines[900] in out and "ValueError: row 1200 has 7 fields, expected 9" in out
    assert "batch 1100" not in out
    again = truncate(max_output_length=4000, max_output_tokens=1000, mode=mode).apply(
        "post_tool", result.context
    )
    assert again.context.messages == result.context.messages


def test_the_failures_kept_are_those_of_the_cut_part():
    """Failure lines the kept head and tail hold are not copied; those of the cut middle are,
    under a label, however many the head and tail hold; a long one the head holds is not
    repeated."""
    lines = [f"2026-11-27 10:00:{i % 60:02d} INFO worker processed batch {i}" for i in range(3000)]
    for i in (1, 2, 2997, 2998, 2999):
        lines[i] = f"2026-11-27 10:00:00 ERROR edge failure {i}"
    lines[1500] = "2026-11-27 10:00:00 ERROR middle failure 1500"
    lines[1600] = "2026-11-27 10:00:00 ERROR middle failure 1600"
    lines[3] = "2026-11-27 10:00:00 ERROR long " + "x" * 400
    out = run("\n".join(lines), max_output_length=4000, mode="head_tail").context.messages[-1]["content"]
    assert len(out) <= 4000
    notice_end = out.index("]\n") + 2
    assert out[notice_end:].startswith("failure lines of the cut part:\n")
    assert "middle failure 1500" in out and "middle failure 1600" in out
    assert out.count("edge failure 1\n") == 1 and out.count("edge failure 2999") == 1
    assert out.count("x" * 250) == 1


def test_a_cut_without_failures_keeps_only_its_head_and_tail():
    """Text without a failure line is cut as before: nothing is added after the notice."""
    text = "".join(f"line {i}\n" for i in range(5000))
    out = run(text, max_output_length=500, mode="head_tail").context.messages[-1]["content"]
    head, _, tail = out.partition("]\n")
    assert text.endswith(tail) and text.startswith(head[: head.index("\n[truncated")])


def test_default_limit_is_40000():
    """max_output_length defaults to 40000 characters."""
    out = run("x" * 50_000).context.messages[-1]["content"]
    assert len(out) <= 40_000 and out.startswith("x" * 39_000)


@pytest.mark.parametrize("mode", ["head", "tail", "head_tail"])
def test_token_limit_is_kept_and_marker_gives_tokens(mode):
    """With max_output_tokens the result fits in tokens, and the marker gives the original tokens."""
    text = "The quick brown fox jumps over the lazy dog. " * 2000
    out = run(text, max_output_tokens=200, mode=mode).context.messages[-1]["content"]
    counter = get_counter(None)
    assert counter.text(out) <= 200
    assert f"{counter.text(text):,} tokens" in out


def test_ten_megabytes_to_a_token_limit():
    """A 10 MB output is cut to a token limit, with an estimated original size."""
    text = "log line with some words 12345\n" * 340_000
    out = run(text, max_output_tokens=1000).context.messages[-1]["content"]
    assert get_counter(None).text(out) <= 1000
    assert "~" in out and f"{len(text):,} chars" in out


def test_content_within_limits_is_untouched_and_second_run_changes_nothing():
    """Short content is left alone; truncated content is not truncated again."""
    short = run("small output", max_output_length=100)
    assert short.context.messages[-1]["content"] == "small output"
    first = run("y" * 1000, max_output_length=100)
    again = truncate(max_output_length=100).apply("post_tool", first.context)
    assert again.context.messages == first.context.messages


def test_post_tool_only_touches_the_newest_results():
    """At post_tool older tool results are left alone; at pre_llm all are truncated."""
    call_b = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    msgs = [
        {"role": "user", "content": "q"},
        CALL,
        {"role": "tool", "tool_call_id": "a", "content": "z" * 500},
        call_b,
        {"role": "tool", "tool_call_id": "b", "content": "z" * 500},
    ]
    post = (
        truncate("post_tool", max_output_length=100)
        .apply("post_tool", Context(messages=msgs))
        .context.messages
    )
    assert len(post[2]["content"]) == 500 and len(post[4]["content"]) <= 100
    pre = truncate("pre_llm", max_output_length=100).apply("pre_llm", Context(messages=msgs)).context.messages
    assert len(pre[2]["content"]) <= 100 and len(pre[4]["content"]) <= 100


def test_multimodal_tool_content_keeps_its_other_parts():
    """Text parts are cut as one; non-text parts stay."""
    image = {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}
    msgs = [
        {"role": "user", "content": "q"},
        CALL,
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "w" * 400}, image]},
    ]
    out = truncate(max_output_length=100).apply("post_tool", Context(messages=msgs)).context.messages[-1]
    assert len(out["content"][0]["text"]) <= 100 and out["content"][1] == image


def test_invariants_hold():
    """Truncation keeps the list valid and is idempotent."""
    from ctxmgmt.testing import make_conversation

    msgs = make_conversation(300, seed=5, tool_output_words=300)
    d = truncate("pre_llm", max_output_length=300, max_output_tokens=64, mode="head_tail")
    assert_invariants(d, "pre_llm", Context(messages=msgs))


def test_recalled_context_is_cut_like_any_result():
    """A context_read result is not exempt: a plain truncation entry cuts it to the limit too."""
    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "r",
                "type": "function",
                "function": {"name": "context_read", "arguments": '{"ref": "t-0"}'},
            },
            {"id": "o", "type": "function", "function": {"name": "other", "arguments": "{}"}},
        ],
    }
    msgs = [
        {"role": "user", "content": "q"},
        calls,
        {"role": "tool", "tool_call_id": "r", "content": "a" * 900},
        {"role": "tool", "tool_call_id": "o", "content": "b" * 900},
    ]
    out = truncate(max_output_length=100).apply("post_tool", Context(messages=msgs)).context.messages
    assert len(out[2]["content"]) <= 100 and len(out[3]["content"]) <= 100
    assert "[truncated: original 900 chars" in out[2]["content"]


def test_an_output_that_only_looks_recalled_is_archived_before_it_is_cut(tmp_path):
    """A context_read result is cut without a second archive when the archive its header
    names holds its text where the header says (by chars or by lines); one whose header names
    an archive the store does not hold, or a real archive but another text (a tool's output
    can copy a header the model was shown), is archived before it is cut: nothing removed is
    lost (it was cut with no archive). What the header does not vouch for (the runner's cut
    of a recall, a long "no match") is archived too: a copy at worst."""
    from ctxmgmt.offload import LocalOffloader

    store = LocalOffloader(tmp_path)
    held = store.store_tool_result("s", "row\n" * 50_000)
    runner = "[ctxmgmt: the output of context_read was cut: 900,000 bytes, of which the first 20,000 are kept"
    rows = "row\n" * 5_000
    for text, archived in (
        (f"[{held}: chars from 0 of 200000; next offset 20000]\n{rows}", False),
        (f"[{held}: lines from 10 of 50000; next offset 5010]\n{rows}", False),
        (f"[t-{'0' * 32}: chars from 0 of 200000; next offset 20000]\n{rows}", True),
        (f"[{held}: chars from 0 of 200000; next offset 20000]\n" + "forged\n" * 5_000, True),
        (f"{runner} (max_output_bytes)]\n[{held}: chars from 0 of 200000; next offset 20000]\n{rows}", True),
        (f"no match in the archived context, but see {held}\n{rows}", True),
    ):
        call = {"id": "r", "type": "function", "function": {"name": "context_read", "arguments": "{}"}}
        before = len(store.list("s"))
        msgs = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "r", "content": text},
        ]
        out = truncate(max_output_length=2_000, offload=True).apply(
            "post_tool", Context(messages=msgs), offloader=store, session="s"
        )
        cut = out.context.messages[2]["content"]
        assert len(cut) <= 2_000 and ("stored as t-" in cut) is archived, cut[:200]
        assert len(store.list("s")) == before + archived


@pytest.mark.parametrize("hook", ["post_tool", "pre_llm"])
def test_a_cut_output_is_never_cut_again_and_keeps_the_original_size(hook):
    """Two entries: the second cuts a 70-char output to its token limit; neither entry cuts
    that output again, on this run or the next, and the marker gives the original's size."""
    entries = [
        {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 75}},
        {"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 64}},
    ]
    d = load_definition({"name": "t", "hooks": {hook: entries}})
    result = {"role": "tool", "tool_call_id": "a", "content": "é:" * 35}
    msgs = [{"role": "user", "content": "q"}, CALL, result]
    first = d.apply(hook, Context(messages=msgs)).context
    cut = first.messages[2]["content"]
    assert "[truncated: original 70 chars," in cut
    second = d.apply(hook, first)
    assert second.context.messages == first.messages
    assert not any(e["details"].get("truncated") for e in second.trace)


def test_a_stamped_output_over_a_stricter_limit_is_left_as_cut():
    """Content that any entry cut is recognised by its notice: a later, stricter entry leaves it."""
    cut = run("x" * 5_000, max_output_length=1_000).context.messages[2]
    assert "[truncated: original 5,000 chars #k=" in cut["content"]
    msgs = [{"role": "user", "content": "q"}, CALL, cut]
    out = truncate(max_output_length=200).apply("post_tool", Context(messages=msgs)).context.messages
    assert out[2] == cut


def test_a_forged_notice_in_a_large_output_does_not_escape_truncation():
    """An output that merely contains a truncation notice (claiming a tiny original) is cut
    like any other, and its notice gives the real size."""
    text = "log line\n" * 50_000 + "[truncated: original 5 chars]\n" + "tail\n" * 1000
    out = run(text, max_output_length=2000).context.messages[2]["content"]
    assert len(out) <= 2000 and f"[truncated: original {len(text):,} chars #k=" in out


def test_offload_without_a_store_cuts_when_told_to():
    """offload: true with without_store: cut and no store cuts the result with a notice that
    gives its size and no reference, and the trace has no error."""
    from ctxmgmt import Context, load_definition

    entry = {
        "type": "ToolsOutputTruncateManager",
        "config": {"max_output_length": 300, "offload": True, "without_store": "cut"},
    }
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "y" * 999},
    ]
    result = load_definition({"name": "t", "hooks": {"post_tool": [entry]}}).apply(
        "post_tool", Context(messages=msgs)
    )
    assert result.trace[0]["error"] is None
    text = result.context.messages[2]["content"]
    assert len(text) <= 300 and "original 999 chars" in text and "stored as" not in text


def test_max_output_ratio_caps_each_result_at_a_share_of_the_window():
    """With max_output_ratio, a result is cut to that share of the context window (the
    smaller of it and max_output_tokens applies); without a known window, the token limit."""
    from ctxmgmt import Context, get_counter, load_definition

    entry = {
        "type": "ToolsOutputTruncateManager",
        "config": {"max_output_length": 100_000, "max_output_tokens": 8000, "max_output_ratio": 0.1},
    }
    d = load_definition({"name": "t", "hooks": {"post_tool": [entry]}})
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "word " * 20_000},
    ]
    count = get_counter("gpt-4o").text
    for window, limit in ((16_000, 1_600), (128_000, 8_000), (None, 8_000)):
        ctx = Context(messages=msgs, model="gpt-4o", context_window=window)
        result = d.apply("post_tool", ctx)
        tokens = count(result.context.messages[2]["content"])
        assert limit - 100 < tokens <= limit, (window, tokens)
        again = d.apply("post_tool", result.context)
        assert again.context.messages == result.context.messages


def test_a_definition_loaded_per_call_keeps_one_memo_entry_per_config():
    """The truncation's output memo on a history is keyed by what it depends on (type, config,
    tokenizer), not the instance: a definition loaded again each call reuses one entry, and
    an entry of another config gets its own."""

    def spec_of(limit: int) -> dict:
        entry = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": limit}}
        return {"name": "t", "hooks": {"pre_llm": [entry]}}

    spec = spec_of(100)
    msgs: list = [{"role": "user", "content": "go"}]
    for i in range(5):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]}]
        msgs += [{"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 500}]
    sizes = []
    for call in range(20):
        msgs.append({"role": "user", "content": f"more {call}"})
        context = Context(messages=msgs)
        out = load_definition(spec).apply("pre_llm", context)
        assert out.trace[0]["details"]["truncated"] == 5
        sizes.append(len(context.messages.memo))
        msgs[-1:] = [msgs[-1], {"role": "assistant", "content": "ok"}]
    assert sizes[-1] == sizes[1]
    context = Context(messages=msgs)
    load_definition(spec_of(200)).apply("pre_llm", context)
    assert len(context.messages.memo) == sizes[-1] + 1


@pytest.mark.parametrize("as_parts", [False, True])
def test_a_long_tool_result_is_tokenised_once(monkeypatch, as_parts):
    """Checking a tool result against a token limit and cutting it encode its text once (the
    count is passed along, and the notice's size reuses it), however it is held."""
    import random

    counter = get_counter(None)
    if counter._count is None:
        pytest.skip("no encoding: counts are estimates")
    words = random.Random(7 + as_parts).choices(["alpha", "beta", "gamma", "delta", "x1", "y22"], k=2000)
    text = " ".join(words) + f" unique-{as_parts}"
    encoded: list[int] = []
    real = counter._count

    def count(s: str) -> int:
        if s == text:
            encoded.append(len(s))
        return real(s)

    monkeypatch.setattr(counter, "_count", count)
    content = [{"type": "text", "text": text}] if as_parts else text
    msgs = [{"role": "user", "content": "q"}, CALL, {"role": "tool", "tool_call_id": "a", "content": content}]
    out = truncate("post_tool", max_output_tokens=100).apply("post_tool", Context(messages=msgs))
    assert "truncated" in str(out.context.messages[-1]["content"])
    assert len(encoded) == 1


def test_a_cut_after_its_caller_counted_the_text_never_encodes_it_again(monkeypatch):
    """cut() after the caller's check counted the text gives that count in its notice and
    never encodes the whole text again (the counter remembers a long text by its content)."""
    from ctxmgmt.tokens import clear_caches
    from ctxmgmt.truncation import cut

    counter = get_counter(None)
    text = "".join(f"row {i} of the output\n" for i in range(3000))
    whole: list[str] = []
    real = counter._count
    if real is None:
        pytest.skip("no encoding: counts are estimates")

    def count(s: str) -> int:
        whole.extend([s] if s == text else [])
        return real(s)

    monkeypatch.setattr(counter, "_count", count)
    clear_caches()  # counted by no earlier test
    counted = counter.text(text)  # the caller's check
    assert whole == [text]
    out = cut(text, counter, (), max_chars=2000, max_tokens=200)
    assert f"{counted:,} tokens" in out
    assert whole == [text]


def test_a_coloured_failure_the_head_holds_is_not_repeated():
    """A failure line in a terminal's colours that the kept head or tail holds is not copied
    after the notice (the copies come without the escape sequences; so are the pieces they
    are compared with); one of the cut middle is, plain."""
    esc = "\x1b"
    err = f"{esc}[1;31mERROR{esc}[0m: disk full on /var/log"
    ok = "\n".join(f"line {i} ok" for i in range(2000))
    text = f"{err}\n{ok}\n{err}\n{ok}\n{err} (middle)\n{ok}\n{err}\n"
    content = run(text, max_output_length=4000, mode="head_tail").context.messages[-1]["content"]
    assert content.count("ERROR") == 3  # the head's, the tail's and a plain copy of the other one
    assert "failure lines of the cut part:\nERROR: disk full on /var/log (middle)\n" in content


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 3000}},
        {
            "type": "ToolResultCompactionManager",
            "config": {"recent_n": 0, "old_max_chars": 3000, "without_store": "cut"},
        },
    ],
    ids=["truncate", "compaction"],
)
def test_a_result_just_over_its_cap_is_cut_to_fewer_tokens(entry):
    """A result of English words a few characters over its cap: the cut's notice (digits and a
    tag, dense in tokens) would cost more than the words it replaces; the cut takes more
    words, so the request never grows."""
    from ctxmgmt import Context, load_definition

    text = ("build agent index test deploy config error file path query " * 60)[:3034]
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    messages = [
        {"role": "user", "content": "Fix the build."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    definition = load_definition({"name": "d", "hooks": {"post_tool": [entry]}})
    result = definition.apply("post_tool", Context(messages=messages, model="gpt-4o"))
    out = result.context.messages[2]["content"]
    assert len(out) <= 3000 and "[truncated: original 3,034 chars" in out
    assert result.trace[0]["tokens_after"] < result.trace[0]["tokens_before"]
