"""The conversation engine as the runner drives it: a view begun from memory, post_memory once,
post_tool as soon as a round is in, the window refused, the recall tools shown once needed."""

import pytest

from ctxmgmt.agents.conversation import UNMANAGED, Conversation
from ctxmgmt.errors import ContextError
from ctxmgmt.offload import LocalOffloader

CALL = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
RECALL = [{"type": "function", "function": {"name": "context_read", "parameters": {"type": "object"}}}]
TRIM = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 100}}
WINDOW4 = {"type": "SlidingWindowManager", "config": {"max_messages": 4}}


def _memory(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(n)]


def _round(record: list[dict], output: str) -> None:
    record += [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


def test_a_begun_view_runs_post_memory_once_with_the_question_in():
    """post_memory runs on the memory plus the question, as call 0, and never again."""
    conv = Conversation({"name": "m", "hooks": {"post_memory": [WINDOW4]}}, runs=True)
    conv.begin(_memory(10), post_memory=True, model="gpt-4o")
    record = [{"role": "user", "content": "the question"}]
    turn = conv.prepare(record, model="gpt-4o")
    assert [m["content"] for m in turn.messages][-1] == "the question"
    assert len(turn.messages) == 4
    assert [(r["hook"], r["iteration"]) for r in turn.runs] == [("post_memory", 0)]
    assert turn.runs[0]["removed"] == 7 and conv.changed
    record.append({"role": "assistant", "content": "an answer"})
    conv.advance(record, model="gpt-4o")
    again = conv.prepare([*record, {"role": "user", "content": "more"}], model="gpt-4o")
    assert again.runs == [] and len(again.messages) == 6  # the window is post_memory's only
    assert conv.covered == 3


def test_advance_manages_a_round_at_once_and_the_next_turn_does_not_again():
    """The results of call 1 are cut by post_tool when the round is in (described as call 1);
    the next prepare sends them cut and runs only pre_llm."""
    conv = Conversation({"name": "t", "hooks": {"post_tool": [TRIM]}}, runs=True)
    conv.begin([], model="gpt-4o")
    record = [{"role": "user", "content": "find it"}]
    first = conv.prepare(record, model="gpt-4o")
    assert first.tokens_before == first.counted > 0
    _round(record, "x " * 5000)
    runs = conv.advance(record, model="gpt-4o")
    assert [(r["hook"], r["iteration"]) for r in runs] == [("post_tool", 1)]
    assert runs[0]["changes"][0]["index"] == 0  # per entry: what the truncation removed and added
    second = conv.prepare(record, model="gpt-4o")
    assert second.runs == [] and second.messages[-1]["content"] != record[-1]["content"]
    assert record[-1]["content"] == "x " * 5000  # the record is never changed
    assert conv.covered == len(record) == 3


def test_a_request_over_its_window_is_refused_and_the_view_stays():
    """With window_check, a request whose count exceeds its window raises ContextError naming
    /context_window, after its pre_llm run was kept in the sink; the live view covers what it did."""
    sink: list[dict] = []
    unfit = {"name": "w", "settings": {"fit": False}, "hooks": {"pre_llm": [WINDOW4]}}
    conv = Conversation(unfit, runs=sink, window_check=True)
    conv.begin([], model="gpt-4o", context_window=200)
    record = [{"role": "user", "content": "short"}]
    conv.prepare(record, model="gpt-4o", context_window=200)
    conv.advance(record, model="gpt-4o", context_window=200)
    record.append({"role": "assistant", "content": "word " * 400})
    with pytest.raises(ContextError) as caught:
        conv.prepare(record, model="gpt-4o", context_window=200)
    assert caught.value.problems[0].pointer == "/context_window"
    assert "settings.fit" in caught.value.problems[0].message
    assert [r["hook"] for r in sink] == ["pre_llm", "pre_llm"]
    assert conv.covered == 2  # the refused turn's view is kept: what the managers did stands
    assert conv.context is not None and len(conv.context.messages) == 2 and not conv.changed


def test_an_unmanaged_request_over_its_window_says_to_give_a_definition():
    """Without hooks nothing could have made it fit: the error says to give one."""
    conv = Conversation(UNMANAGED, window_check=True)
    conv.begin([], model="gpt-4o", context_window=50)
    with pytest.raises(ContextError, match="give the agent a context management definition"):
        conv.prepare([{"role": "user", "content": "word " * 100}], model="gpt-4o", context_window=50)


def test_recall_tools_are_shown_once_something_was_archived_and_then_stay():
    """Offered recall tools are not in the request until the conversation archived something;
    from then on every request has them, after the caller's own tools."""
    mine = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    conv = Conversation(UNMANAGED)
    conv.begin([], model="gpt-4o", tools=mine)
    conv.offer_recall(RECALL)
    record = [{"role": "user", "content": "go"}]
    assert list(conv.prepare(record, model="gpt-4o", tools=mine).context.tools) == mine
    _round(record, "a large output, archived whole")
    conv.advance(record, model="gpt-4o", tools=mine)
    conv.archived = True  # the caller archived a tool output
    shown = conv.prepare(record, model="gpt-4o", tools=mine)
    assert list(shown.context.tools) == [*mine, *RECALL]
    assert shown.tokens_before == shown.counted  # the recall tools included, nothing cut
    record.append({"role": "assistant", "content": "done"})
    conv.advance(record, model="gpt-4o", tools=mine)
    record.append({"role": "user", "content": "and?"})
    assert list(conv.prepare(record, model="gpt-4o", tools=mine).context.tools) == [*mine, *RECALL]


def test_recall_offered_now_is_in_the_first_request_and_counted_before_management():
    """offer_recall(now=True): the tools are there from the first call (a cache-aware
    definition never changes its tool list), and in the tokens before pre_llm."""
    conv = Conversation(UNMANAGED, runs=True)
    conv.begin([], model="gpt-4o")
    conv.offer_recall(RECALL, now=True)
    turn = conv.prepare([{"role": "user", "content": "go"}], model="gpt-4o")
    assert list(turn.context.tools) == RECALL
    assert turn.tokens_before == turn.counted


class _Msg:
    """A framework's message object: fields in its __dict__, weakly referenceable."""

    def __init__(self, role: str, content: str) -> None:
        self.role, self.content = role, content


def _chat(m: _Msg) -> list[dict]:
    return [{"role": m.role, "content": m.content}]


def test_a_framework_handing_copies_every_call_is_compared_by_value_without_watching():
    """Copies of the record at every call (pydantic-ai's way) continue the view by their values;
    from the second such call no weak reference is made, and an edited copy still starts a
    new view while the same objects handed again still continue it."""
    from ctxmgmt.agents.conversation import COPIES_UNWATCHED

    conv = Conversation({"name": "q", "hooks": {"pre_llm": [WINDOW4]}, "settings": {"fit": False}})
    record = [_Msg("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(300)]
    conv.prepare(record, translate=_chat, model="gpt-4o")
    for i in range(COPIES_UNWATCHED + 1):
        record = [_Msg(m.role, m.content) for m in record] + [_Msg("user", f"more {i}")]
        turn = conv.prepare(record, translate=_chat, model="gpt-4o")
        assert not turn.fresh  # continued: only the new message was translated
    assert conv._live.covered.refs == []  # no longer watched
    record = [*record, _Msg("assistant", "same objects, grown")]
    assert not conv.prepare(record, translate=_chat, model="gpt-4o").fresh
    edited = [_Msg(m.role, m.content) for m in record]
    edited[150].content = "edited"
    assert conv.prepare(edited, translate=_chat, model="gpt-4o").fresh  # a new view


def test_an_unmanaged_conversation_runs_no_hook(monkeypatch):
    """No pre_llm entry and no fit step: no hook run at all (no trace, no span), only the
    window check."""
    from ctxmgmt.definitions import Definition as D

    def refuse(*args, **kwargs):
        raise AssertionError("a hook ran")

    monkeypatch.setattr(D, "apply", refuse)
    conv = Conversation(UNMANAGED, runs=True, window_check=True)
    conv.begin([], model="gpt-4o", context_window=1000)
    turn = conv.prepare([{"role": "user", "content": "hi"}], model="gpt-4o", context_window=1000)
    assert turn.runs == [] and turn.counted > 0


def test_a_view_of_an_empty_record_is_not_continued_by_a_long_one():
    """Only a begun view covers no record and is continued by any: a view made of an empty
    record (a framework's first call with nothing) is not, so a long record then is a new
    view whose older tool results are not managed again."""
    conv = Conversation({"name": "t", "hooks": {"post_tool": [TRIM]}}, runs=True)
    conv.prepare([], model="gpt-4o")
    record = [{"role": "user", "content": "go"}]
    _round(record, "x " * 5000)
    record.append({"role": "assistant", "content": "again"})
    record.append({"role": "user", "content": "more"})
    _round(record, "y " * 5000)
    turn = conv.prepare(record, model="gpt-4o")
    assert turn.fresh and [r["hook"] for r in turn.runs] == ["post_tool"]
    assert turn.messages[2]["content"] == "x " * 5000  # the older result, as it was


def test_a_provider_format_run_is_described_in_the_form_the_managers_saw():
    """A Responses conversation's hook runs show what was removed and added with their roles
    and text (the internal chat form the managers saw), as a chat conversation's do."""
    record: list[dict] = [{"role": "user", "content": "the task"}]
    for i in range(5):
        record += [
            {"type": "function_call", "call_id": f"c{i}", "name": "grep", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"result {i}"},
        ]
    record.append({"role": "user", "content": "and?"})
    conv = Conversation({"name": "w", "hooks": {"pre_llm": [WINDOW4]}}, format="openai_responses", runs=True)
    turn = conv.prepare(record, model="gpt-4o")
    (run,) = turn.runs
    previews = run["removed_preview"]
    assert previews and all(p["role"] in ("user", "assistant", "tool") for p in previews)
    assert {"role": "tool", "text": "result 0", "chars": 8} in previews


def test_a_call_observed_twice_calibrates_once():
    """A framework that reports one call's usage from two hooks calibrates the next request
    once, and is given the same usage record both times."""
    twice, once = Conversation(UNMANAGED), Conversation(UNMANAGED)
    for conv, times in ((twice, 2), (once, 1)):
        conv.begin([], model="gpt-4o")
        turn = conv.prepare([{"role": "user", "content": "hello there " * 50}], model="gpt-4o")
        records = [conv.observe(round(turn.counted * 1.3)) for _ in range(times)]
        assert all(r == records[0] for r in records)
    assert twice.calibration.to_dict() == once.calibration.to_dict()
    assert twice.calibration.ratio("gpt-4o") != 1.0  # calibrated, once


def test_whether_the_view_names_an_archive_follows_what_post_tool_archived(tmp_path):
    """names_archive: no mark in a view of the client's messages; a result that post_tool cut
    and archived between two turns is seen by the next turn (which only continues the view)."""
    trim = {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 300, "offload": True}}
    conv = Conversation({"name": "t", "hooks": {"post_tool": [trim]}}, offloader=LocalOffloader(tmp_path))
    conv.begin([], model="gpt-4o")
    record = [{"role": "user", "content": "find it"}]
    assert not conv.names_archive(conv.prepare(record, model="gpt-4o"))
    _round(record, "x " * 5000)
    conv.advance(record, model="gpt-4o")
    turn = conv.prepare(record, model="gpt-4o")
    assert turn.extends and conv.names_archive(turn)
    record += [{"role": "assistant", "content": "found"}, {"role": "user", "content": "and?"}]
    grown = conv.prepare(record, model="gpt-4o")
    assert grown.extends and conv.names_archive(grown)
