import pytest

from ctxmgmt import Context, ContextError
from ctxmgmt.messages import check_messages, command_lines, last_task_index, summary_message, units
from ctxmgmt.summaries import render


def call(*ids):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def result(i):
    return {"role": "tool", "tool_call_id": i, "content": "ok"}


def test_units_keep_parallel_calls_with_their_results():
    """An assistant message with parallel calls and its results form one unit."""
    msgs = [
        {"role": "user", "content": "q"},
        call("a", "b"),
        result("b"),
        result("a"),
        {"role": "assistant", "content": "done"},
    ]
    assert units(msgs) == [(0, 1), (1, 4), (4, 5)]


def test_valid_conversation_has_no_problems():
    """A well-formed conversation passes."""
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        call("a"),
        result("a"),
        {"role": "assistant", "content": "done"},
    ]
    assert check_messages(msgs) == []


def test_orphan_result_is_reported():
    """A tool result whose call is gone is a problem at its pointer."""
    problems = check_messages([{"role": "user", "content": "q"}, result("a")])
    assert [p.pointer for p in problems] == ["/messages/1/tool_call_id"]


def test_unanswered_call_is_reported_unless_partial_tail():
    """A call with no result is a problem, except at the tail while results arrive."""
    msgs = [{"role": "user", "content": "q"}, call("a", "b"), result("a")]
    assert [p.pointer for p in check_messages(msgs)] == ["/messages/1/tool_calls"]
    assert check_messages(msgs, partial_tail=True) == []
    interrupted = [*msgs, {"role": "user", "content": "again"}]
    assert check_messages(interrupted, partial_tail=True) != []


def test_bad_roles_and_content_are_reported():
    """Unknown roles and missing content are problems."""
    problems = check_messages([{"role": "bot", "content": "x"}, {"role": "user"}])
    assert [p.pointer for p in problems] == ["/messages/0/role", "/messages/1/content"]


def test_task_is_the_last_user_message():
    """The current task is the most recent user message that is not a summary."""
    msgs = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "second"},
        summary_message("user", render({"goal": ["s"]}, 2)),
    ]
    assert last_task_index(msgs) == 2


ANTHROPIC = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"}]},
    {"role": "assistant", "content": "It is 18 C."},
]


def test_a_list_declared_as_chat_in_another_format_is_named_with_the_fix():
    """Anthropic blocks in a context declared as OpenAI chat are a clear error naming the
    first offending block, the format, and how to fix the declaration."""
    with pytest.raises(ContextError) as raised:
        Context.from_dict({"messages": ANTHROPIC, "format": "openai_chat"})
    problem, *more = raised.value.problems
    assert [p.pointer for p in more] == ["/messages/2/content/0/type"]
    assert problem.pointer == "/messages/1/content/0/type"
    assert problem.message == (
        "'tool_use' is Anthropic's format; the list is taken as OpenAI chat; "
        "leave format out to detect it, or set format: anthropic"
    )


@pytest.mark.parametrize(
    ("message", "pointer", "says"),
    [
        (
            {"type": "function_call_output", "call_id": "c", "output": "x"},
            "/messages/0/call_id",
            "answers no",
        ),
        (
            {"role": "user", "content": [{"type": "input_image", "text": "hi"}], "tool_calls": []},
            "/messages/0/tool_calls",
            "OpenAI chat's format",
        ),
        ({"role": "model", "parts": [{"text": "hi"}]}, "/messages/0", "Gemini"),
        (
            {"role": "user", "content": [{"type": "video", "url": "x"}]},
            "/messages/0/content/0/type",
            "not a chat",
        ),
    ],
)
def test_other_formats_and_unknown_parts_are_named(message, pointer, says):
    """Broken Responses items, Gemini messages and unknown part types each get their own clear error."""
    with pytest.raises(ContextError) as raised:
        Context.from_dict([message])
    problem = raised.value.problems[0]
    assert problem.pointer == pointer and says in problem.message


def test_a_list_handed_again_with_messages_added_is_detected_from_where_it_was():
    """Format detection of a plain list that grew (a new list each call, as a caller keeps
    one) looks at the new messages only: an Anthropic message added later is still found."""
    from ctxmgmt import Context
    from ctxmgmt.formats import detect

    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert detect(Context(messages=history).messages) == "openai_chat"
    history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]})
    assert detect(Context(messages=history).messages) == "anthropic"


@pytest.mark.parametrize(
    ("script", "lines"),
    [
        (
            "cd /tmp && python3 - <<'EOF'\nimport re\nprint(1)\nEOF\npytest -q",
            ["cd /tmp && python3 - <<'EOF'", "pytest -q"],
        ),
        (
            'cd /tmp && python3 -c "\nimport openpyxl\nprint(wb)\n"\nls -la',
            ['cd /tmp && python3 -c "', "ls -la"],
        ),
        ("echo \"it's fine\"\nls  # don't\ngit status", ['echo "it\'s fine"', "ls  # don't", "git status"]),
        (
            "awk '{print $1}' f.txt\ncat <<EOF > out.txt\nhello 'x\nEOF\nnext",
            ["awk '{print $1}' f.txt", "cat <<EOF > out.txt", "next"],
        ),
        ('echo "a \\" b"\nnext', ['echo "a \\" b"', "next"]),
        ("grep -n 'def \\' x.py\nafter", ["grep -n 'def \\' x.py", "after"]),
        ("# comment\n\n  ls -la  \n", ["ls -la"]),
    ],
)
def test_command_lines_are_the_scripts_commands_not_the_programs_they_read(script, lines):
    """A here-document's body and a quoted argument spanning lines (``python3 -c "…"``) are a
    program's lines, not commands; quotes inside the other kind, escaped quotes and an
    apostrophe in a comment open nothing."""
    assert list(command_lines(script)) == lines


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("\x1b[1;31mERROR\x1b[0m: x", "ERROR: x"),
        ("\x1b(B\x1b[mERROR: disk full", "ERROR: disk full"),  # tput sgr0 on xterm
        ("\x1b]8;;file:///a.py\x1b\\a.py\x1b]8;;\x1b\\", "a.py"),  # a hyperlink
        ("\x1b]0;title\x07done", "done"),
        ("\x1bPq#0;2;0;0;0\x1b\\ERROR: x", "ERROR: x"),  # DCS (sixel)
        ("\x1b_Gf=100;AAAA\x1b\\ok", "ok"),  # APC (kitty's graphics)
        ("a\x1b7b\x1b8c", "abc"),  # save and restore the cursor
        # an unterminated OSC (a stray ESC], a cut hyperlink) hides nothing past its line
        ("log\n\x1b]0;title\nstep 1\nERROR: compile failed\n", "log\n\nstep 1\nERROR: compile failed\n"),
        ("no escapes at all", "no escapes at all"),
    ],
)
def test_a_terminals_escape_sequences_are_left_out(text, plain):
    """What a summary and the measure read of a coloured output: the text a terminal shows."""
    from ctxmgmt.messages import without_escapes

    assert without_escapes(text) == plain


def test_an_assistant_message_that_speaks_needs_no_content():
    """An assistant's spoken answer (``audio: {id}``, content null) is a valid chat message:
    it was refused as 'a assistant message needs content'."""
    spoken = [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
        {"role": "user", "content": "Again."},
    ]
    assert check_messages(spoken) == []
    problems = check_messages([{"role": "user", "content": "x"}, {"role": "assistant", "content": None}])
    assert [p.message for p in problems] == ["an assistant message needs content"]


def test_a_recall_result_is_told_by_its_name_and_how_it_begins():
    """A result of context_read or context_search is a recall result (held by its archive) when
    it begins as one does; a tool of a client's own with that name, returning anything else,
    is not."""
    from ctxmgmt.messages import is_recalled

    ref = "t-" + "ab" * 16
    read = {"role": "tool", "tool_call_id": "c", "content": f"[{ref}: lines from 10 of 300; end]\nx"}
    hit = {"role": "tool", "tool_call_id": "c", "content": f"{ref} message 3 line 7: ERROR x"}
    none = {"role": "tool", "tool_call_id": "c", "content": "no match in the archived context"}
    parts = {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": read["content"]}]}
    wiki = {"role": "tool", "tool_call_id": "c", "content": "VPN: see https://wiki/vpn\n" * 100}
    assert is_recalled("context_read", read) and is_recalled("context_read", parts)
    assert is_recalled("context_search", hit) and is_recalled("context_search", none)
    assert not is_recalled("context_search", wiki) and not is_recalled("read_file", read)


def test_a_recall_result_cut_by_ctxmgmt_is_still_a_recall_result():
    """A recall result that ctxmgmt cut since (its tail kept, so its header is gone; or the
    runner's notice first) is still told by its signed stamp: never archived a second time."""
    from ctxmgmt import Context, load_definition
    from ctxmgmt.messages import is_recalled

    ref = "t-" + "cd" * 16
    call = {"id": "r", "type": "function", "function": {"name": "context_read", "arguments": "{}"}}
    read = {
        "role": "tool",
        "tool_call_id": "r",
        "content": f"[{ref}: chars from 0 of 90000; end]\n" + "row " * 5000,
    }
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        read,
    ]
    entry = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 500, "mode": "tail"}}
    cut = load_definition({"name": "t", "hooks": {"post_tool": [entry]}}).apply(
        "post_tool", Context(messages=msgs)
    )
    result = cut.context.messages[-1]
    assert ref not in result["content"] and is_recalled("context_read", result)
    runner = {**read, "content": "[ctxmgmt: the output of context_read was cut: more than 9 bytes]\nrow"}
    assert is_recalled("context_read", runner)
    forged = {**read, "content": "[truncated: original 99 chars #k=0123456789abcdef]\nmine"}
    assert not is_recalled("context_search", forged)  # a stamp ctxmgmt did not sign
