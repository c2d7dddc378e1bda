"""Anthropic Messages in, Anthropic Messages out: byte-identical where untouched, thinking
blocks whole, tool results in the user turn after their tool_use, a user message first."""

import json
from dataclasses import replace

import pytest

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.definitions import shipped_definitions
from ctxmgmt.formats import anthropic
from ctxmgmt.testing import assert_valid_messages

SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
THINKING = {"type": "thinking", "thinking": "SECRET-REASONING about the bug", "signature": "EqQBCkgIARAB"}


def turn(n: int, size: int = 4000, *, thinking: bool = True) -> list[dict]:
    """One tool round: the assistant thinks and calls read_file; the user turn holds the result."""
    blocks = [THINKING] if thinking else []
    blocks += [
        {"type": "text", "text": f"Reading file {n}."},
        {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {"path": f"f{n}.py"}},
    ]
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"line {n}\n" * (size // 8)}
    if n % 2:
        result["is_error"] = True
    return [{"role": "assistant", "content": blocks}, {"role": "user", "content": [result]}]


def conversation(rounds: int = 6, size: int = 4000) -> list[dict]:
    msgs = [{"role": "user", "content": "Fix the failing login test."}]
    for n in range(rounds):
        msgs += turn(n, size)
    return msgs


def definition(*entries: dict, hook: str = "pre_llm"):
    return load_definition({"name": "t", "hooks": {hook: list(entries)}})


def test_the_format_is_detected_and_the_output_comes_back_in_it():
    """A list with Anthropic blocks is managed as Anthropic and comes back as Anthropic
    messages, valid for Anthropic, with the system blocks as they were."""
    msgs = conversation()
    d = definition({"type": "SlidingWindowManager", "config": {"max_messages": 5}})
    out = d.apply("pre_llm", Context(system_prompt=SYSTEM, messages=msgs)).context
    assert out.system_prompt is SYSTEM
    assert_valid_messages(out.messages, format="anthropic", system=out.system_prompt)
    assert [m["role"] for m in out.messages] == ["user", "assistant", "user", "assistant", "user"]


def test_untouched_messages_come_back_byte_identical():
    """Truncating one result rebuilds only its user turn: every other message is the very
    object that came in, and the edited turn keeps its is_error and other fields."""
    msgs = conversation(3, size=200)
    msgs[-1]["content"][0]["content"] = "x" * 20_000
    msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    d = definition(
        {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 1000}}, hook="post_tool"
    )
    before = json.dumps(msgs)
    out = d.apply("post_tool", Context(messages=msgs, format="anthropic")).context
    assert json.dumps(msgs) == before  # the input is never changed
    assert all(a is b for a, b in zip(msgs[:-1], out.messages[:-1], strict=True))
    block = out.messages[-1]["content"][0]
    assert block["tool_use_id"] == "toolu_2" and block["cache_control"] == {"type": "ephemeral"}
    assert "[truncated: original 20,000 chars #k=" in block["content"] and len(block["content"]) <= 1000


def test_thinking_blocks_stay_whole_and_are_never_summarised_as_text():
    """The summariser reads the turns' text and tool calls, never the thinking; kept turns
    keep their thinking blocks with their signatures, untouched."""
    msgs = conversation(8)
    d = definition(
        {"type": "SummarizationManager", "config": {"summary_ratio": 0.5, "preserve_recent_messages": 4}}
    )
    out = d.apply("pre_llm", Context(messages=msgs)).context
    summary = out.messages[1]["content"]
    assert summary.startswith("[ctxmgmt:summary]") and "SECRET-REASONING" not in summary
    assert "SECRET-REASONING" not in json.dumps(out.state)
    for m in out.messages:
        if m["role"] == "assistant":
            assert any(m is k for k in msgs) and m["content"][0] == THINKING
    assert_valid_messages(out.messages, format="anthropic")


def test_a_window_without_the_pinned_task_still_starts_with_a_user_message():
    """With pin: none the window keeps fewer rather than start with an assistant turn; and when
    no user message would be kept at all, it keeps from the newest one on."""
    msgs = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    three = definition({"type": "SlidingWindowManager", "config": {"max_messages": 3, "pin": "none"}})
    assert three.apply("pre_llm", Context(messages=msgs, format="anthropic")).context.messages == msgs[2:]
    one = definition({"type": "SlidingWindowManager", "config": {"max_messages": 1, "pin": "none"}})
    assert one.apply("pre_llm", Context(messages=msgs, format="anthropic")).context.messages == msgs[2:]
    # The same window on OpenAI chat messages keeps exactly one message.
    assert len(one.apply("pre_llm", Context(messages=msgs)).context.messages) == 1


def test_an_assistant_summary_is_a_user_message_for_anthropic():
    """summary_role: assistant would put an assistant message first; Anthropic gets a user one."""
    msgs = conversation(8)
    d = definition(
        {
            "type": "SummarizationManager",
            "config": {
                "summary_ratio": 0.8,
                "preserve_recent_messages": 2,
                "pin": "none",
                "summary_role": "assistant",
            },
        }
    )
    out = d.apply("pre_llm", Context(messages=msgs, format="anthropic")).context
    assert out.messages[0]["role"] == "user"
    assert_valid_messages(out.messages, format="anthropic")


def test_a_plugin_that_breaks_the_first_message_rule_is_skipped():
    """The hook runner refuses a plugin's output that Anthropic would reject, and says why."""
    from ctxmgmt import ContextManager, ManagerRegistry

    class DropFirst(ContextManager):
        type_name = "DropFirst"
        config_schema = {"type": "object"}

        def apply(self, context, runtime):
            return context.with_messages(list(context.messages)[1:])

    registry = ManagerRegistry()
    registry.register(DropFirst)
    d = load_definition({"name": "p", "hooks": {"pre_llm": [{"type": "DropFirst"}]}}, registry=registry)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    result = d.apply("pre_llm", Context(messages=msgs, format="anthropic"))
    assert result.context.messages == msgs
    assert "not a user message, as Anthropic requires" in result.trace[0]["error"]


def test_fit_keeps_anthropic_requests_within_the_window():
    """The fit step works in Anthropic's form: the request fits and stays valid."""
    msgs = conversation(30, size=6000)
    d = load_definition("default")
    ctx = Context(system_prompt=SYSTEM, messages=msgs, model="claude-sonnet-4-5", context_window=16_000)
    result = d.apply("pre_llm", ctx)
    assert result.trace[-1]["tokens_after"] + 4000 <= 16_000
    assert_valid_messages(result.context.messages, format="anthropic", system=SYSTEM)


def _system(content) -> dict:
    return {"role": "system", "content": content}


def _after_task(*messages: dict) -> list[dict]:
    """A task, then ``messages``: where a misplaced message is named."""
    return [{"role": "user", "content": "q"}, *messages]


@pytest.mark.parametrize(
    ("messages", "pointer", "says"),
    [
        ([{"role": "assistant", "content": "hi"}], "/messages/0/role", "first message must be a user"),
        ([{"role": "system", "content": "x"}], "/messages/0/role", "give it as the system prompt"),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
            "/messages/0/content/0/tool_use_id",
            "answers no tool_use",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                {"role": "user", "content": "no result"},
            ],
            "/messages/1/content",
            "has no tool_result",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "t"}],
                },
            ],
            "/messages/2/content/1",
            "before any other block",
        ),
        (
            [{"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}],
            "/messages/0/content/0/type",
            "may not hold a 'thinking' block",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
            ],
            "/messages/1/content/0",
            "signature",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "/messages/0/content/0/type",
            "OpenAI chat's format",
        ),
        (_after_task({"role": "developer", "content": "x"}), "/messages/1/role", "no developer messages"),
        (
            _after_task({"role": "assistant", "content": "a"}, _system("x")),
            "/messages/2/role",
            "must follow a user",
        ),
        (
            _after_task(_system("x"), {"role": "user", "content": "u"}),
            "/messages/1",
            "followed by an assistant turn",
        ),
        (_after_task(_system("x"), _system("y")), "/messages/2/role", "next to each other"),
        (
            _after_task(_system([{"type": "image", "source": {}}])),
            "/messages/1/content/0",
            "text blocks only",
        ),
        (
            [{"role": "user", "content": [{"type": "Not A Type"}]}],
            "/messages/0/content/0/type",
            "may not hold",
        ),
    ],
)
def test_invalid_anthropic_messages_are_named_with_a_pointer(messages, pointer, says):
    """Each thing Anthropic would reject is a ContextError with its JSON pointer and a fix."""
    with pytest.raises(ContextError) as raised:
        Context.from_dict({"messages": messages, "format": "anthropic"})
    problem = raised.value.problems[0]
    assert problem.pointer == pointer and says in problem.message, problem


@pytest.mark.parametrize("name", sorted(shipped_definitions()))
def test_an_empty_final_assistant_message_passes_as_the_api_allows_it(name):
    """A final assistant message of no content (``content: []``, a prefill of nothing, which the
    Messages API takes) is managed like any other request: it comes back the very object, and
    the request is valid and fits, whichever shipped definition runs."""
    empty = {"role": "assistant", "content": []}
    msgs = [*conversation(30, size=6000), empty]
    ctx = Context(system_prompt=SYSTEM, messages=msgs, model="claude-sonnet-4-5", context_window=16_000)
    out = load_definition(name).apply("pre_llm", ctx).context
    assert out.messages[-1] is empty
    assert_valid_messages(out.messages, format="anthropic", system=SYSTEM)


def test_an_empty_assistant_message_is_refused_once_it_is_no_longer_final():
    """An assistant message of no content is the final one's only: one with a message after it
    is a ContextError naming it (as the API refuses it), also when the history grew past it."""
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": []}]
    grown = Context.from_dict({"messages": msgs, "format": "anthropic"})
    later = {"role": "user", "content": "more"}
    with pytest.raises(ContextError) as raised:
        Context.from_dict({"messages": [*msgs, later], "format": "anthropic"})
    assert raised.value.problems[0].pointer == "/messages/1/content"
    assert "final assistant" in raised.value.problems[0].message
    d = definition({"type": "SlidingWindowManager", "config": {"max_messages": 50}})
    d.apply("pre_llm", grown)
    with pytest.raises(ContextError) as raised:
        d.apply("pre_llm", grown.append(later))
    assert raised.value.problems[0].pointer == "/messages/1/content"


def test_system_blocks_are_checked():
    """A system prompt that is neither a string nor text blocks names the block."""
    problems = anthropic.check([{"role": "user", "content": "q"}], [{"type": "image"}])
    assert problems[0].pointer == "/system_prompt/0"


def test_removed_documents_and_images_are_archived_with_their_data(tmp_path):
    """A window that removes a user turn with a text document and an image archives the
    document's text (searchable) and the image's data, not placeholders."""
    from ctxmgmt.offload import LocalOffloader

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "CONTRACT CLAUSE 7: no refunds"},
    }
    msgs = [
        {"role": "user", "content": [document, image, {"type": "text", "text": "Read these."}]},
        {"role": "assistant", "content": "Read."},
        {"role": "user", "content": "Summarise clause 7."},
    ]
    store = LocalOffloader(tmp_path)
    d = definition({"type": "SlidingWindowManager", "config": {"max_messages": 1, "pin": "task"}})
    out = d.apply("pre_llm", Context(messages=msgs, format="anthropic"), offloader=store, session="s")
    assert out.context.messages == msgs[2:]
    (hit,) = [h for h in store.search("s", "CONTRACT CLAUSE 7")]
    archived = store.read("s", hit["ref"]).text
    assert "iVBORw0KGgo=" in archived


def test_documents_and_server_tool_results_are_counted():
    """A plain-text document and a code-execution result count by their text, so the fit step
    sees them: a request of them alone far over the window is made to fit."""
    stdout = "line of output\n" * 8000
    msgs = [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "word " * 20000},
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "server_tool_use",
                    "id": "srv_1",
                    "name": "code_execution",
                    "input": {"code": "run()"},
                },
                {
                    "type": "code_execution_tool_result",
                    "tool_use_id": "srv_1",
                    "content": {"type": "code_execution_result", "stdout": stdout},
                },
                {"type": "text", "text": "Ran it."},
            ],
        },
        {"role": "user", "content": "So?"},
    ]
    ctx = Context(messages=msgs, format="anthropic", context_window=8000)
    result = load_definition("default").apply("pre_llm", ctx)
    assert result.trace[0]["tokens_before"] > 40_000
    assert result.trace[-1]["tokens_after"] <= 8000 - 2000
    assert_valid_messages(result.context.messages, format="anthropic")


# What Claude Code sends (2.1.x): its environment as a system turn after the task, with a
# cache breakpoint and a per-turn setting, and tool search's references in a tool result.
SYSTEM_TURN = {
    "role": "system",
    "content": [
        {"type": "text", "text": "# Environment\ncwd: /srv/app", "cache_control": {"type": "ephemeral"}}
    ],
    "output_config": {"effort": "medium"},
}
TOOL_SEARCH = [
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_s", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_s",
                "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
            }
        ],
    },
]


def test_mid_conversation_system_messages_and_new_blocks_pass_as_they_came():
    """A system turn after a user turn (Anthropic's mid-conversation system messages), a
    tool_reference in a tool result and block types this version does not know are valid, and
    a definition that changes nothing returns the very messages."""
    unknown = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}, {"type": "tool_search_tool_result", "x": 1}],
    }
    msgs = [{"role": "user", "content": "Fix the failing login test."}, SYSTEM_TURN, *TOOL_SEARCH, unknown]
    assert anthropic.check(msgs, SYSTEM) == []
    d = definition({"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 1000}})
    out = d.apply("pre_llm", Context(system_prompt=SYSTEM, messages=msgs, format="anthropic")).context
    assert all(a is b for a, b in zip(msgs, out.messages, strict=True))


def test_a_system_turn_whose_surroundings_were_removed_goes_before_the_next_assistant_turn():
    """A window that removes the turns around a system message keeps it (as the system prompt
    is kept) and puts it where Anthropic takes it: after a user turn, before an assistant turn;
    two that meet become one, their blocks in order."""
    later = {"role": "system", "content": "Auto-approve mode is now on."}
    msgs = [
        {"role": "user", "content": "Fix the failing login test."},
        SYSTEM_TURN,
        *turn(0, 400),
        {"role": "user", "content": "and the signup test"},
        later,
        *turn(1, 400),
        *turn(2, 400),
    ]
    assert anthropic.check(msgs, SYSTEM) == []
    d = definition({"type": "SlidingWindowManager", "config": {"max_messages": 3}})
    out = d.apply("pre_llm", Context(system_prompt=SYSTEM, messages=msgs, format="anthropic")).context
    assert_valid_messages(out.messages, format="anthropic", system=SYSTEM)
    systems = [m for m in out.messages if m["role"] == "system"]
    assert len(systems) == 1 and out.messages[1] is systems[0]
    assert [b["text"] for b in systems[0]["content"]] == [
        "# Environment\ncwd: /srv/app",
        "Auto-approve mode is now on.",
    ]
    assert systems[0]["output_config"] == {"effort": "medium"}
    assert out.messages[2]["role"] == "assistant"


def loop(rounds: int, size: int = 2000, *, text_beside: bool = False) -> list[dict]:
    """One task, then a tool loop that thinks at its start only (thinking not interleaved):
    the first assistant message opens with thinking, the later ones call tools straight away;
    ``text_beside`` puts a reminder beside each result (text beside results continues a turn)."""
    msgs = conversation(rounds=1, size=size)  # the task, then a round that thinks first
    for n in range(1, rounds):
        assistant, user = turn(n, size, thinking=False)
        if text_beside:
            user["content"].append({"type": "text", "text": f"<reminder>round {n}</reminder>"})
        msgs += [assistant, user]
    return msgs


THINKING_TURN = [
    {"type": "SlidingWindowManager", "config": {"max_messages": 8}},
    {"type": "SlidingWindowManager", "config": {"max_messages": 8, "summarize_removed": True}},
    {"type": "SummarizationManager", "config": {"summary_ratio": 0.6, "preserve_recent_messages": 4}},
    {"type": "SummarizationManager", "config": {"reserve_tokens": 3000}},
]


@pytest.mark.parametrize("text_beside", [False, True], ids=["results", "results-and-text"])
@pytest.mark.parametrize("entry", THINKING_TURN, ids=lambda e: json.dumps(e["config"]))
def test_a_cut_inside_a_thinking_tool_loop_keeps_the_loop_opening_with_its_thinking(entry, text_beside):
    """With thinking on, Anthropic refuses a final turn that does not start with a thinking
    block, and a tool loop is one turn that thinks at its start only: every built-in that
    removes messages keeps the loop's first assistant message (the very object, with its
    results and its task) and puts a summary before it, never inside the turn. A reminder whose
    results went stays in the turn: in the results message before it, not a user message of
    its own (which a strict reading of the rule takes for a new turn); the client's messages
    are not changed in place."""
    msgs = loop(30, text_beside=text_beside)
    given = json.dumps(msgs)
    ctx = Context(system_prompt=SYSTEM, messages=msgs, context_window=16_000)
    out = definition(entry).apply("pre_llm", ctx).context
    assert len(out.messages) < len(msgs) and json.dumps(msgs) == given
    assert_valid_messages(out.messages, format="anthropic", system=out.system_prompt)
    at = next(i for i, m in enumerate(out.messages) if m["role"] == "assistant")
    assert out.messages[at] is msgs[1] and msgs[1]["content"][0] == THINKING
    assert out.messages[at + 1]["content"][0]["tool_use_id"] == "toolu_0"  # its result stays with it
    assert not any(m["role"] == "user" and isinstance(m["content"], str) for m in out.messages[at:])
    for m in out.messages[at:]:  # each user message of the turn carries results
        assert m["role"] == "assistant" or any(b["type"] == "tool_result" for b in m["content"]), m


@pytest.mark.parametrize("name", sorted(shipped_definitions()))
def test_a_thinking_tool_loop_fits_its_window_and_still_opens_with_thinking(name):
    """The shipped definitions, the fit step included, at a window the loop is many times over:
    the request fits, and its final turn still starts with the loop's thinking."""
    msgs = loop(80, size=3000, text_beside=True)
    ctx = Context(system_prompt=SYSTEM, messages=msgs, context_window=16_000)
    result = load_definition(name).apply("pre_llm", ctx)
    out = result.context
    assert_valid_messages(out.messages, format="anthropic", system=out.system_prompt)
    assert result.trace[-1]["tokens_after"] <= 16_000
    opener = next(m for m in out.messages if m["role"] == "assistant")
    assert opener is msgs[1]
    assert out.messages[0]["content"] == "Fix the failing login test."


def test_the_turn_head_is_found_after_the_last_user_message_of_its_own():
    """The head of a tool loop: its user message, its first assistant message and that message's
    results, when that message opens with thinking and a later one does not (thinking not
    interleaved) or none came yet; a user message after an answer starts a new turn, one right after results
    continues the turn (Anthropic merges consecutive user messages)."""
    from ctxmgmt.formats import internal

    msgs = loop(4, text_beside=True)

    def inner_of(messages: list[dict]) -> list:
        return internal(Context(messages=messages)).context.messages

    inner = inner_of(msgs)
    user, first, end = anthropic.turn_head(inner)
    assert inner[user]["content"] == "Fix the failing login test."
    assert inner[first]["tool_calls"][0]["id"] == "toolu_0" and inner[end - 1]["role"] == "tool"
    assert anthropic.turn_head(inner_of([*msgs, {"role": "user", "content": "next"}]))[:2] == (user, first)
    done = {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}
    later = [*msgs, done, {"role": "user", "content": "now the docs"}, *turn(9, thinking=False)]
    assert anthropic.turn_head(inner_of(later)) is None
    # One call so far: the loop may go on without thinking, so its first call is the head.
    head = (len(inner) + 1, len(inner) + 2, len(inner) + 4)
    assert anthropic.turn_head(inner_of([*later[:-2], *turn(9)])) == head
    assert anthropic.turn_head(inner_of([*later[:-2], *turn(9), *turn(10, thinking=False)])) == head
    assert anthropic.turn_head(inner_of([*later[:-2], *turn(9), *turn(10)])) is None  # interleaved
    answered = {
        "role": "assistant",
        "content": [{**THINKING, "thinking": "t"}, {"type": "text", "text": "Done."}],
    }
    assert anthropic.turn_head(inner_of([*later[:-2], answered])) is None  # an answer: no loop
    assert anthropic.turn_head(inner_of(conversation(4))) is None  # interleaved: any cut opens with thinking


def test_a_chat_form_loop_an_adapter_marked_as_thinking_first_has_a_head():
    """In chat form (a framework in front of Claude) an assistant message that its adapter
    marked as opening with thinking starts a head, live or restored from saved state (the
    mark as a plain dict); an unmarked loop has none."""
    from ctxmgmt.formats import USER_FIRST
    from ctxmgmt.formats._common import ORIGIN, Origin

    def step(k: int, mark: object = None) -> list[dict]:
        fn = {"name": "read", "arguments": "{}"}
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{k}", "type": "function", "function": fn}],
        }
        if mark is not None:
            call[ORIGIN] = mark
        return [call, {"role": "tool", "tool_call_id": f"c{k}", "content": "ok"}]

    task = {"role": "user", "content": "Fix it."}
    for mark in (Origin(plain={"thinking_first": True}), {"thinking_first": True}):
        msgs = [task, *step(0, mark), *step(1), *step(2)]
        assert USER_FIRST.head(msgs) == (frozenset({0, 1, 2}), 1)
    assert USER_FIRST.head([task, *step(0), *step(1)]) == (frozenset(), None)


@pytest.mark.parametrize("name", sorted(shipped_definitions()))
def test_text_beside_tool_results_is_no_task_the_users_request_stays(name):
    """An agent's reminders beside its tool results (Claude Code's ``<system-reminder>``) continue
    the turn; the task every definition keeps is the user's own request before the loop."""
    msgs = [{"role": "user", "content": "Fix the failing login test."}]
    for n in range(80):
        assistant, user = turn(n, 3000, thinking=False)
        user["content"].append({"type": "text", "text": f"<system-reminder>round {n}</system-reminder>"})
        msgs += [assistant, user]
    ctx = Context(system_prompt=SYSTEM, messages=msgs, context_window=16_000)
    result = load_definition(name).apply("pre_llm", ctx)
    out = result.context
    assert_valid_messages(out.messages, format="anthropic", system=out.system_prompt)
    assert result.trace[-1]["tokens_after"] <= 16_000 and len(out.messages) < len(msgs)
    assert out.messages[0] is msgs[0]


def test_the_task_of_an_anthropic_list_is_its_last_user_message_of_its_own():
    """The task is the last user message that is neither text beside tool results nor a
    summary; a History finds it again from its new messages only."""
    from ctxmgmt.formats import internal
    from ctxmgmt.history import History

    msgs = loop(3, text_beside=True)
    inner = internal(Context(messages=msgs)).context.messages
    assert isinstance(inner, History) and anthropic.task_index(inner) == 0
    done = {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}
    grown = [*msgs, done, {"role": "user", "content": "And the docs."}, *turn(7, thinking=False)]
    again = internal(Context(messages=grown)).context.messages
    assert again[anthropic.task_index(again)]["content"] == "And the docs."
    assert anthropic.task_index(inner.append(*again[len(inner) :])) == len(inner) + 1
    # Two user messages in a row are one Anthropic turn: its task starts with the first.
    twice = [*grown[:-2], {"role": "user", "content": "<note>on main</note>"}, *turn(8, thinking=False)]
    assert anthropic.task_index(internal(Context(messages=twice)).context.messages) == len(inner) + 1


@pytest.mark.parametrize("summarize", [False, True])
def test_a_small_window_keeps_the_newest_round_beside_a_thinking_loops_head(summarize):
    """The head a thinking loop keeps is counted apart from max_messages, as system messages
    are: a window of 3 still keeps the newest round (it kept the head alone, every call)."""
    msgs = loop(10, size=200)
    config = {"max_messages": 3, "summarize_removed": summarize}
    out = (
        definition({"type": "SlidingWindowManager", "config": config})
        .apply("pre_llm", Context(system_prompt=SYSTEM, messages=msgs))
        .context
    )
    assert_valid_messages(out.messages, format="anthropic", system=out.system_prompt)
    assert any(m is msgs[1] for m in out.messages) and any(m is msgs[-2] for m in out.messages)
    assert out.messages[-1] is msgs[-1]


def test_a_thinking_loop_whose_first_call_cannot_fit_is_an_error_that_names_it():
    """A loop that thinks at its start only keeps its first call: when that call alone is over
    the window, the error names it among what must stay (not only the task)."""
    msgs = loop(6, size=200)
    msgs[1]["content"][2]["input"] = {"path": "src/" + "deep/" * 6_000 + "f.py"}  # a call no cut shortens
    ctx = Context(system_prompt=SYSTEM, messages=msgs, context_window=4_000)
    with pytest.raises(ContextError, match="the first call of a tool loop that opens with thinking"):
        definition({"type": "SlidingWindowManager", "config": {"max_messages": 4}}).apply("pre_llm", ctx)


def test_the_thinking_of_the_turn_in_progress_counts_against_the_window():
    """Anthropic counts the thinking of the turn in progress (a tool loop's) as input, which no
    manager sees as text: the fit step leaves room for it, and earlier turns' thinking (which
    Anthropic does not count) costs nothing."""
    from ctxmgmt import get_counter
    from ctxmgmt.formats import internal
    from ctxmgmt.formats._turns import thinking_tokens

    msgs = loop(12, size=2000)
    msgs[1] = {
        **msgs[1],
        "content": [{**THINKING, "thinking": "consider each part. " * 1000}, *msgs[1]["content"][1:]],
    }
    inner = internal(Context(messages=msgs)).context.messages
    assert thinking_tokens(inner) == -(-20_000 // 4)
    later = [*msgs, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Now the docs."}]
    assert thinking_tokens(internal(Context(messages=later)).context.messages) == 0
    window, reserve = 12_000, 1_000
    quiet = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 100_000}}
    settings = {"reserve_output_tokens": reserve}
    d = load_definition({"name": "t", "settings": settings, "hooks": {"pre_llm": [quiet]}})
    out = d.apply("pre_llm", Context(messages=msgs, model="gpt-4o", context_window=window)).context
    assert any(m is msgs[1] for m in out.messages)  # the loop's head, with its thinking
    managed = internal(out).context
    counted = get_counter("gpt-4o").context(managed)[0]
    assert thinking_tokens(managed.messages) == 5_000
    assert counted + 5_000 <= window - reserve
    assert counted > window - reserve - 5_000 - 2_500  # it used the room, a unit at most apart


def test_a_request_whose_thinking_leaves_no_room_says_so():
    """When the loop's head and its thinking cannot fit, the error names the thinking with the
    rest of what must stay."""
    msgs = loop(12, size=2000)
    msgs[1] = {
        **msgs[1],
        "content": [{**THINKING, "thinking": "consider each part. " * 1000}, *msgs[1]["content"][1:]],
    }
    quiet = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 100_000}}
    settings = {"reserve_output_tokens": 1_000}
    d = load_definition({"name": "t", "settings": settings, "hooks": {"pre_llm": [quiet]}})
    with pytest.raises(ContextError, match=r"the thinking of the turn in progress \(about 5,000\)"):
        d.apply("pre_llm", Context(messages=msgs, model="gpt-4o", context_window=6_000))


def test_a_loop_one_call_long_whose_thinking_cannot_fit_is_an_error_not_a_dropped_call():
    """A loop one call long may go on without thinking (Claude then needs its first call): when
    that call's thinking alone is over the room, the error says so. The fit step removed the
    call instead, and the loop's next call opened the turn without thinking (refused)."""
    msgs = loop(1, size=200)
    msgs[1] = {
        **msgs[1],
        "content": [{**THINKING, "thinking": "consider each part. " * 3000}, *msgs[1]["content"][1:]],
    }
    quiet = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 100_000}}
    d = load_definition(
        {"name": "t", "settings": {"reserve_output_tokens": 1_000}, "hooks": {"pre_llm": [quiet]}}
    )
    ctx = Context(system_prompt=SYSTEM, messages=msgs, model="gpt-4o", context_window=12_000)
    with pytest.raises(
        ContextError, match=r"opens with thinking.*the thinking of the turn in progress \(about 15,000\)"
    ) as caught:
        d.apply("pre_llm", ctx)
    assert "thinking budget (budget_tokens)" in str(caught.value)
    # With room for it, nothing is removed.
    out = d.apply("pre_llm", replace(ctx, context_window=20_000)).context
    assert out.messages == msgs


def test_a_summary_that_took_the_task_opens_the_turn_whose_thinking_head_stays():
    """When the task went into ctxmgmt's summary (every call opened with thinking, so no head
    had to stay), the summary is the user message that opens the turn for the provider: once
    later calls open without thinking, the loop's first call (its thinking) stays."""
    from ctxmgmt.testing import assert_invariants

    def call(i, think):
        thinking = [{"type": "thinking", "thinking": f"step {i}: look at the log", "signature": f"sig{i}"}]
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"command": f"cat log{i}"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"line {i} " * 40}
        return [
            {"role": "assistant", "content": [*(thinking if think else []), use]},
            {"role": "user", "content": [result]},
        ]

    entry = {
        "type": "SummarizationManager",
        "config": {"pin": "none", "preserve_recent_messages": 2, "summary_ratio": 0.5},
    }
    d = load_definition({"name": "d", "hooks": {"pre_llm": [entry]}})
    history = [{"role": "user", "content": "Fix the build."}]
    for i in range(1, 5):
        history += call(i, True)
    first = d.apply("pre_llm", Context(messages=history, format="anthropic", model="gpt-4o")).context
    assert str(first.messages[0]["content"]).startswith("[ctxmgmt:summary]")  # the task went into it
    grown = list(first.messages)
    for i in range(5, 8):
        grown += call(i, False)
    assert_invariants(
        d, "pre_llm", Context(messages=grown, format="anthropic", model="gpt-4o"), idempotent=False
    )
