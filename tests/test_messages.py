from ctxmgmt.messages import check_messages, last_task_index, units


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
        {"role": "user", "content": "[ctxmgmt:summary] s"},
    ]
    assert last_task_index(msgs) == 2
