"""The pydantic-ai history processor in a real agent tool loop, with pydantic-ai's FunctionModel."""

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor, from_chat, to_chat
from ctxmgmt.messages import check_messages

DEFINITION = {
    "name": "pa",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}],
        "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4}}],
    },
}


def make_agent(
    seen: list[list[ModelMessage]], processor: ContextManagementProcessor, rounds: int = 3
) -> Agent:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(seen)
        if (n - 1) % (rounds + 1) < rounds:  # ``rounds`` tool rounds, then the answer
            return ModelResponse(
                parts=[
                    ToolCallPart("read_log", {"name": f"a{n}"}, tool_call_id=f"c{n}a"),
                    ToolCallPart("read_log", {"name": f"b{n}"}, tool_call_id=f"c{n}b"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(processor)])

    @agent.tool_plain
    def read_log(name: str) -> str:
        """Read a log file."""
        return f"{name}: " + "ERROR connection refused\n" * 300

    return agent


def test_every_request_is_managed_and_valid():
    """Each model request gets valid, managed messages: results cut, old rounds windowed; the
    processor's own output is valid (pydantic-ai would silently drop an orphaned return)."""
    seen: list[list[ModelMessage]] = []
    processor = ContextManagementProcessor(DEFINITION)
    agent = make_agent(seen, processor)
    result = asyncio.run(agent.run("Why does the login fail?"))
    assert result.output == "done" and len(seen) == 4
    for messages in seen:
        chat, _ = to_chat(messages)
        assert not check_messages(chat)
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        assert all(len(p.model_response_str()) <= 400 for p in returns)
        assert len([d for d in chat if d["role"] != "system"]) <= 5
    assert not check_messages(processor.last.messages)
    assert any(e["activated"] and e["type"] == "SlidingWindowManager" for e in processor.last.trace)
    # The task is pinned: the question reaches every request.
    assert all(any(d.get("content") == "Why does the login fail?" for d in to_chat(m)[0]) for m in seen)


def test_a_second_run_continues_from_the_managed_history():
    """message_history=result.all_messages() continues from the managed messages."""
    seen: list[list[ModelMessage]] = []
    processor = ContextManagementProcessor(DEFINITION)
    agent = make_agent(seen, processor, rounds=1)

    async def both():
        first = await agent.run("first question")
        return await agent.run("second question", message_history=first.all_messages())

    second = asyncio.run(both())
    assert second.output == "done"
    chat, _ = to_chat(seen[-1])
    assert not check_messages(chat) and chat[0]["content"] == "second question"
    # Every request starts with the user's (Claude, Gemini and Bedrock want it so).
    assert all(to_chat(messages)[0][0]["role"] == "user" for messages in seen)


def test_untouched_messages_come_back_as_the_same_objects():
    """A conversion with no change gives back the very messages; an edited return keeps its
    tool name and timestamp."""
    request = ModelRequest(parts=[ToolReturnPart("read_log", "x" * 5000, tool_call_id="c1")])
    messages = [
        ModelRequest.user_text_prompt("q")
        if hasattr(ModelRequest, "user_text_prompt")
        else ModelRequest(parts=[]),
        ModelResponse(parts=[ToolCallPart("read_log", {"name": "a"}, tool_call_id="c1")]),
        request,
    ]
    chat, _ = to_chat(messages)
    back = from_chat(chat, messages)
    assert all(a is b for a, b in zip(messages, back, strict=True))
    edited = [*chat[:-1], {**chat[-1], "content": "short"}]
    out = from_chat(edited, messages)
    part = out[-1].parts[0]
    assert out[:-1] == messages[:-1] and part.content == "short"
    assert part.tool_name == "read_log" and part.timestamp == request.parts[0].timestamp


def test_reported_usage_calibrates_the_counts_of_its_own_conversation():
    """Each response's reported input tokens calibrate the next request's counts, and only the
    conversation's own: a processor shared by two conversations pairs no report with the
    other's request."""
    from pydantic_ai import RequestUsage

    processor = ContextManagementProcessor(DEFINITION)
    calls = [0]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        chat, _ = to_chat(messages)
        tokens = round(1.3 * sum(len(str(d.get("content") or "")) + 20 for d in chat) / 4)
        usage = RequestUsage(input_tokens=tokens, output_tokens=5, cache_read_tokens=tokens // 2)
        calls[0] += 1
        if calls[0] % 3:  # two tool rounds, then the answer
            call = ToolCallPart("read_log", {"name": "x"}, tool_call_id=f"c{calls[0]}")
            return ModelResponse(parts=[call], usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(processor)])

    @agent.tool_plain
    def read_log(name: str) -> str:
        """Read a log file."""
        return "ERROR " * 500

    async def two_users():
        a = await agent.run("A asks")
        b = await agent.run("B asks")
        await agent.run("A again", message_history=a.all_messages())
        await agent.run("B again", message_history=b.all_messages())

    asyncio.run(two_users())
    assert processor.usage and all(0.8 < u["reported"] / u["counted"] < 2.0 for u in processor.usage)
    assert all(u["cached_tokens"] == u["reported"] // 2 for u in processor.usage)
    assert any(u["reusable_prefix_tokens"] > 0 for u in processor.usage)


@pytest.mark.parametrize(
    ("dropped", "pointer"),
    [(ToolCallPart, "/messages/1/tool_call_id"), (ToolReturnPart, "/messages/1/tool_calls")],
)
def test_a_history_the_model_would_refuse_is_refused_before_the_model_call(dropped, pointer):
    """pydantic-ai repairs a message_history it is given, but not what an earlier history
    processor makes: an orphan tool return (its call dropped) or a dangling call (its return
    dropped) reaching the processor is a ContextError with its pointer, as the Agents SDK
    adapter gives, and the model is never called with it."""
    from ctxmgmt import ContextError

    def without(messages: list[ModelMessage]) -> list[ModelMessage]:
        """A user's history processor that drops every message holding a ``dropped`` part."""
        return [m for m in messages if not any(isinstance(p, dropped) for p in m.parts)]

    calls: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(messages)
        if len(calls) == 1:
            return ModelResponse(parts=[ToolCallPart("read_log", {"name": "x"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    processor = ContextManagementProcessor(DEFINITION)
    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(without), ProcessHistory(processor)])

    @agent.tool_plain
    def read_log(name: str) -> str:
        """Read a log file."""
        return "ERROR connection refused"

    with pytest.raises(ContextError) as refused:
        asyncio.run(agent.run("why?"))
    assert refused.value.problems[0].pointer == pointer and len(calls) == 1


def test_a_caller_keeping_the_whole_history_costs_what_is_new_while_a_window_fires(monkeypatch):
    """A caller that passes its own complete history to every run (not the managed one) with
    a window cutting the view at every request: each request translates only the messages
    new since the last, and the model sees the newest ones."""
    import ctxmgmt.adapters.pydantic_ai as adapter

    translated: list[ModelMessage] = []
    chat_of = adapter._chat_of
    monkeypatch.setattr(adapter, "_chat_of", lambda m: translated.append(m) or chat_of(m))
    window = {
        "name": "w",
        "hooks": {
            "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4, "pin": "none"}}]
        },
    }
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(ContextManagementProcessor(window))])
    history: list[ModelMessage] = []
    for k in range(6):
        translated.clear()
        result = asyncio.run(agent.run(f"question {k}", message_history=history))
        history = [*history, *result.new_messages()]  # the caller's own record, whole
        if k > 0:  # the answer before and the new question
            assert len(translated) == 2, [type(m).__name__ for m in translated]
        assert len(seen[-1]) <= 4 and seen[-1][-1].parts[-1].content == f"question {k}"


def test_a_tool_result_made_anew_is_named_after_its_call_in_the_view_or_the_record():
    """A tool message with no pydantic-ai origin (made by a manager) becomes a ToolReturnPart
    named after its call: the nearest one before it in the managed view (a call id used
    twice names each result after its own call), else the record's."""
    record: list[ModelMessage] = [
        ModelRequest.user_text_prompt("go"),
        ModelResponse(parts=[ToolCallPart("old_tool", {}, tool_call_id="r1")]),
    ]
    managed = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "v1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "v1", "content": "found"},
        {"role": "tool", "tool_call_id": "r1", "content": "older"},
        {"role": "tool", "tool_call_id": "nowhere", "content": "?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "v1", "type": "function", "function": {"name": "again", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "v1", "content": "second"},
    ]
    out = from_chat(managed, record)
    returns = [
        p for m in out if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert [(p.tool_name, p.tool_call_id, p.content) for p in returns] == [
        ("lookup", "v1", "found"),
        ("old_tool", "r1", "older"),
        ("", "nowhere", "?"),
        ("again", "v1", "second"),
    ]


def test_a_thinking_tool_loop_keeps_its_first_response_at_every_request():
    """Claude thinks at the start of a tool loop only, and refuses a final turn that does not
    open with thinking: a window inside the loop keeps the loop's first response (its
    ThinkingPart first) and that response's results, at every request of a real agent."""
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(seen)
        if n > 8:
            return ModelResponse(parts=[TextPart("done")])
        parts: list = (
            [ThinkingPart("which file?", signature="EqQB", provider_name="anthropic")] if n == 1 else []
        )
        return ModelResponse(
            parts=[*parts, ToolCallPart("read_log", {"name": f"f{n}"}, tool_call_id=f"c{n}")]
        )

    processor = ContextManagementProcessor(DEFINITION)
    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(processor)])

    @agent.tool_plain
    def read_log(name: str) -> str:
        """Read a log file."""
        return f"{name}: " + "ERROR connection refused\n" * 300

    asyncio.run(agent.run("Why does the login test fail?"))  # run_sync leaves its loop open
    assert len(seen) == 9
    for request in seen[1:]:
        first = next(m for m in request if isinstance(m, ModelResponse))
        assert isinstance(first.parts[0], ThinkingPart), [type(p).__name__ for p in first.parts]
        assert any(isinstance(p, UserPromptPart) for p in request[0].parts)  # the task, first
    assert len(seen[-1]) < 17  # the window did cut inside the loop


def test_a_response_with_thinking_is_marked_with_how_much_and_whether_first():
    """A response's ThinkingParts mark its chat message (never its text): that it carries
    thinking, how many characters (counted while its turn goes on), and whether it opens with it."""
    call = ToolCallPart("read_log", {"name": "a"}, tool_call_id="c1")
    first = ModelResponse(parts=[ThinkingPart("why? " * 8), call])
    later = ModelResponse(parts=[TextPart("Reading."), ThinkingPart("hm"), call])
    chat, _ = to_chat([first, later, ModelResponse(parts=[call])])
    assert dict(chat[0]["_ctxmgmt"]) == {"thinking": True, "thinking_chars": 40, "thinking_first": True}
    assert dict(chat[1]["_ctxmgmt"]) == {"thinking": True, "thinking_chars": 2}
    assert dict(chat[2]["_ctxmgmt"]) == {} and chat[1]["content"] == "Reading."


def test_the_fit_keeps_room_for_the_reply_limit_the_run_asks():
    """A run whose model settings ask more max_tokens than the definition reserves gets
    requests whose input and that limit together fit the window."""
    from ctxmgmt import Context, get_counter

    definition = {"name": "fit", "hooks": {"post_memory": [{"type": "SlidingWindowManager", "config": {}}]}}
    seen: list[list[ModelMessage]] = []
    processor = ContextManagementProcessor(definition, context_window=8000)
    agent = make_agent(seen, processor)
    asyncio.run(
        agent.run("Why does the login fail?", model_settings={"max_tokens": 3500})
    )  # not run_sync: it leaves its loop open
    counter = get_counter()
    counted = [counter.context(Context(messages=to_chat(call)[0]))[0] for call in seen]
    assert len(counted) == 4 and max(counted) > 500, counted
    assert all(n + 3500 <= 8000 for n in counted), counted
