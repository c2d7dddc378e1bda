"""The LangChain middleware in a real create_agent tool loop, with LangChain's own fake model."""

import asyncio

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from ctxmgmt.adapters.langchain import ContextManagementMiddleware
from ctxmgmt.messages import check_messages

DEFINITION = {
    "name": "lc",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}],
        "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4}}],
    },
}


FIT_ONLY = {
    "name": "fit",
    "hooks": {"post_memory": [{"type": "SlidingWindowManager", "config": {"max_messages": 999}}]},
}
"""A definition whose pre_llm is the fit step alone."""


class RecordingModel(GenericFakeChatModel):
    """LangChain's fake chat model, recording what each call received."""

    seen: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@tool
def read_log(name: str) -> str:
    """Read a log file."""
    return f"{name}: " + "ERROR connection refused\n" * 300


def script(turn: int, calls: int = 3) -> list[AIMessage]:
    """The model reads ``calls`` logs, one per step (with a parallel pair first), then answers."""
    out = [
        AIMessage(
            content="",
            tool_calls=[
                {"name": "read_log", "args": {"name": f"t{turn}a"}, "id": f"c{turn}_0"},
                {"name": "read_log", "args": {"name": f"t{turn}b"}, "id": f"c{turn}_1"},
            ],
        )
    ]
    out += [
        AIMessage(
            content="",
            tool_calls=[{"name": "read_log", "args": {"name": f"t{turn}_{k}"}, "id": f"c{turn}_{k}"}],
        )
        for k in range(2, calls + 1)
    ]
    return [*out, AIMessage(content=f"answer {turn}")]


class Events(BaseCallbackHandler):
    def __init__(self):
        self.events = []

    def on_custom_event(self, name, data, **kwargs):
        self.events.append((name, data))


def agent_with(model):
    middleware = ContextManagementMiddleware(DEFINITION)
    return create_agent(
        model,
        [read_log],
        system_prompt="You read logs.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )


@pytest.fixture
def translated(monkeypatch):
    """The types of the LangChain messages the middleware translates, in order."""
    import ctxmgmt.adapters.langchain as adapter

    seen: list[str] = []
    group = adapter._group

    def spy(m):
        seen.append(m.type)
        return group(m)

    monkeypatch.setattr(adapter, "_group", spy)
    return seen


def assert_valid(seen):
    for call in seen:
        chat = convert_to_openai_messages(call)
        assert not check_messages(chat), check_messages(chat)


def test_the_managed_messages_reach_the_model_and_the_record_stays_whole():
    """Every model call sees a valid, managed list (results cut, old turns windowed); the agent's
    messages keep every result whole; the view persists in the checkpointed state."""
    model = RecordingModel(messages=iter(script(1) + script(2)))
    agent = agent_with(model)
    config = {"configurable": {"thread_id": "t1"}}
    events = Events()
    agent.invoke({"messages": [HumanMessage("Why does the login fail?")]}, {**config, "callbacks": [events]})
    agent.invoke({"messages": [HumanMessage("And the signup?")]}, {**config, "callbacks": [events]})
    assert len(model.seen) == 8
    assert_valid(model.seen)
    results = [m for call in model.seen for m in call if isinstance(m, ToolMessage)]
    assert results and all(len(m.content) <= 400 for m in results)
    assert all(len([m for m in call if m.type != "system"]) <= 4 for call in model.seen)
    # The task is pinned: the second turn's question reaches every call of that turn.
    assert all(any(m.content == "And the signup?" for m in call) for call in model.seen[4:])
    state = agent.get_state(config).values
    record = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(record) == 8 and all(len(m.content) > 6000 for m in record)
    saved = state["ctxmgmt"]
    assert saved["upto"] == len(state["messages"]) - 1 and len(saved["view"]) <= 5
    fired = [e for _, data in events.events for e in data["trace"] if e["activated"]]
    assert {e["type"] for e in fired} == {"ToolsOutputTruncateManager", "SlidingWindowManager"}


def test_the_async_agent_is_managed_the_same_way():
    """ainvoke runs the same hooks through the async path."""
    model = RecordingModel(messages=iter(script(1)))
    agent = agent_with(model)
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("Why?")]}, {"configurable": {"thread_id": "a"}}))
    assert len(model.seen) == 4
    assert_valid(model.seen)
    assert all(len(m.content) <= 400 for call in model.seen for m in call if isinstance(m, ToolMessage))


def test_a_definition_from_a_registry_server_is_rebuilt_when_its_version_changes(live):
    """(client, name) fetches the stored definition per call and rebuilds it on a new version."""
    from ctxmgmt import Client

    client = Client(live.url)
    client.create("lc", DEFINITION)
    middleware = ContextManagementMiddleware((client, "lc"))
    first = middleware.source.get()
    assert middleware.source.get() is first
    changed = {**DEFINITION, "description": "new"}
    client.update("lc", changed)
    assert middleware.source.get() is not first
    client.close()


@pytest.mark.parametrize("bad", [42, ("client",), ["a"]])
def test_a_definition_in_an_unknown_form_is_a_clear_error(bad):
    """The middleware says which forms a definition may take."""
    with pytest.raises(TypeError, match=r"definition must be|as \(client, name\)"):
        ContextManagementMiddleware(bad)


def test_reported_usage_calibrates_the_counts_and_is_checkpointed():
    """Each response's usage_metadata input_tokens (a provider counting about 1.3x) calibrates
    the next call's counts; the ratio is kept in the checkpointed state."""

    class Reporting(RecordingModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            chars = sum(len(str(m.content)) + 20 for m in messages)
            tokens = round(1.3 * chars / 4)
            result.generations[0].message.usage_metadata = {
                "input_tokens": tokens,
                "output_tokens": 5,
                "total_tokens": tokens + 5,
            }
            return result

    model = Reporting(messages=iter(script(1)))
    agent = agent_with(model)
    config = {"configurable": {"thread_id": "cal"}}
    agent.invoke({"messages": [HumanMessage("Why?")]}, config)
    (entry,) = agent.get_state(config).values["ctxmgmt"]["calibration"].values()
    # chars / 4 undercounts the notices' hex tags (about 2 chars a token): the ratio is near 1
    assert entry["calls"] >= 3 and 0.8 < entry["ratio"] < 2.0


def test_claude_thinking_blocks_in_the_history_reach_the_model_untouched():
    """An AIMessage holding Claude's thinking blocks is managed by its text and tool calls;
    when no manager touches it, the model gets the very message, thinking included."""
    thinking = {"type": "thinking", "thinking": "the db?", "signature": "sig"}
    first = AIMessage(
        content=[thinking, {"type": "text", "text": "Checking."}],
        tool_calls=[{"name": "read_log", "args": {"name": "x"}, "id": "t0"}],
    )
    model = RecordingModel(messages=iter([first, AIMessage(content="done")]))
    agent = agent_with(model)
    agent.invoke({"messages": [HumanMessage("Why?")]}, {"configurable": {"thread_id": "claude"}})
    second_call = model.seen[1]
    kept = [m for m in second_call if isinstance(m, AIMessage)]
    assert kept and kept[0].content[0] == thinking


@pytest.mark.parametrize(
    "thinking",
    [
        {"type": "thinking", "thinking": "which log?", "signature": "sig"},  # ChatAnthropic's own
        {"type": "reasoning", "reasoning": "which log?", "extras": {"signature": "sig"}},  # v1 blocks
        {
            "type": "reasoning_content",
            "reasoning_content": {"text": "which log?", "signature": "sig"},
        },  # Bedrock
    ],
    ids=["thinking", "reasoning", "reasoning_content"],
)
def test_a_thinking_tool_loop_keeps_its_first_message_at_every_call(thinking):
    """Claude thinks at the start of a tool loop only, and refuses a final turn that does not
    open with thinking: a window inside the loop keeps the loop's first AIMessage (thinking
    first, in any of LangChain's forms) and its result, at every model call of a real agent."""
    steps = [
        AIMessage(
            content=[thinking] if k == 0 else "",
            tool_calls=[{"name": "read_log", "args": {"name": f"l{k}"}, "id": f"t{k}"}],
        )
        for k in range(7)
    ]
    model = RecordingModel(messages=iter([*steps, AIMessage(content="done")]))
    agent = agent_with(model)
    agent.invoke({"messages": [HumanMessage("Why?")]}, {"configurable": {"thread_id": "loop"}})
    assert len(model.seen) == 8
    for call in model.seen[1:]:
        first = next(m for m in call if isinstance(m, AIMessage))
        assert isinstance(first.content, list) and first.content[0] == thinking, first.content
        assert isinstance(first.tool_calls, list) and first.tool_calls[0]["id"] == "t0"
        assert any(isinstance(m, HumanMessage) and m.content == "Why?" for m in call)
    assert len(model.seen[-1]) < 16  # the window did cut inside the loop


def test_a_human_message_with_tool_results_keeps_the_order_and_each_message():
    """A HumanMessage holding Anthropic tool_result blocks and text becomes a tool result and a
    user message, in that order; every message reaches the model once, in order."""
    from ctxmgmt.adapters.langchain import _Translation
    from ctxmgmt.agents.conversation import Conversation

    originals = [
        HumanMessage("fix it", id="h1"),
        AIMessage(content="", tool_calls=[{"id": "t1", "name": "read", "args": {}}], id="a1"),
        HumanMessage(
            content=[
                {"type": "tool_result", "tool_use_id": "t1", "content": "file"},
                {"type": "text", "text": "see"},
            ],
            id="h2",
        ),
        AIMessage("I fixed it.", id="a2"),
        HumanMessage("now the tests", id="h3"),
    ]
    conversation = Conversation(
        {
            "name": "n",
            "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 50}}]},
        }
    )
    translation = _Translation()
    turn = conversation.prepare(originals, translate=translation)
    assert [m["role"] for m in turn.messages] == ["user", "assistant", "tool", "user", "assistant", "user"]
    assert not check_messages(turn.messages)
    sent = translation.framework_messages(conversation, turn, originals)
    assert sent == originals and all(a is b for a, b in zip(sent, originals, strict=True))


def test_each_model_call_measures_what_it_reuses_of_the_previous_one():
    """The middleware's conversation is rebuilt at every call from the checkpointed state, and
    the previous request comes with it: each call after the first reuses it (in the event)."""
    middleware = ContextManagementMiddleware(
        {
            "name": "cut",
            "hooks": {
                "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}]
            },
        }
    )
    model = RecordingModel(messages=iter(script(1)))
    agent = create_agent(
        model,
        [read_log],
        system_prompt="You read logs.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    events = Events()
    config = {"configurable": {"thread_id": "reuse"}, "callbacks": [events]}
    agent.invoke({"messages": [HumanMessage("Why does the login fail?")]}, config)
    reused = [data["reusable_prefix_tokens"] for name, data in events.events if name == "ctxmgmt"]
    assert len(reused) == 4 and reused[0] == 0 and all(r > 0 for r in reused[1:])
    assert reused == sorted(reused)  # nothing edited the prefix: each call reuses more


@pytest.mark.parametrize(
    ("history", "pointer"),
    [
        (  # an orphan: a result with no call before it
            [HumanMessage("q"), ToolMessage("old output", tool_call_id="gone"), HumanMessage("why?")],
            "/messages/1/tool_call_id",
        ),
        (  # a dangling call: no result before the next message
            [
                HumanMessage("q"),
                AIMessage("", tool_calls=[{"name": "read_log", "args": {"name": "x"}, "id": "d1"}]),
                HumanMessage("why?"),
            ],
            "/messages/1/tool_calls",
        ),
        (  # a call whose result answers another id
            [
                HumanMessage("q"),
                AIMessage("", tool_calls=[{"name": "read_log", "args": {"name": "x"}, "id": "c1"}]),
                ToolMessage("output", tool_call_id="c2"),
                HumanMessage("why?"),
            ],
            "/messages/2/tool_call_id",
        ),
        (  # a call without an id
            [
                HumanMessage("q"),
                AIMessage("", tool_calls=[{"name": "read_log", "args": {"name": "x"}, "id": None}]),
                HumanMessage("why?"),
            ],
            "/messages/1/tool_calls/0",
        ),
    ],
)
def test_a_history_the_model_would_refuse_is_refused_before_the_model_call(history, pointer):
    """An orphan result, a dangling call, a result for another id or a call without an id is a
    ContextError with its pointer, as the Agents SDK adapter gives: the model never gets it."""
    from ctxmgmt import ContextError

    model = RecordingModel(messages=iter([AIMessage(content="never")]))
    with pytest.raises(ContextError) as refused:
        agent_with(model).invoke({"messages": history}, {"configurable": {"thread_id": "bad"}})
    assert refused.value.problems[0].pointer == pointer and not model.seen


def test_a_checkpointed_thread_continues_its_live_view_and_translates_only_new_messages(translated):
    """Across invocations of one thread, the middleware continues the conversation it kept live
    (the checkpointed state holds what it saved): each model call translates only the messages
    new since the last; another thread starts its own view, managed as the first."""
    model = RecordingModel(messages=iter([AIMessage("a1"), AIMessage("a2"), AIMessage("b1")]))
    agent = create_agent(
        model, [], middleware=[ContextManagementMiddleware(QUIET_LC)], checkpointer=InMemorySaver()
    )
    one = {"configurable": {"thread_id": "one"}}
    agent.invoke({"messages": [HumanMessage("first question")]}, one)
    translated.clear()
    agent.invoke({"messages": [HumanMessage("second question")]}, one)
    assert translated == ["ai", "human"]  # the answer before, and the new question
    translated.clear()
    agent.invoke({"messages": [HumanMessage("other thread")]}, {"configurable": {"thread_id": "two"}})
    assert translated == ["human"]
    assert [m.content for m in model.seen[1]] == ["first question", "a1", "second question"]
    assert [m.content for m in model.seen[2]] == ["other thread"]


QUIET_LC = {
    "name": "quiet",
    "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 100}}]},
}


@pytest.mark.parametrize("live", [True, False])
def test_langchains_context_editing_before_ours_reaches_the_model(live):
    """LangChain's ContextEditingMiddleware clearing earlier tool results before ours (a deep
    copy of every message, the newest equal) makes a new view, live or restored from the
    checkpoint: the model sees the cleared results, never the earlier view's copies."""
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    keep = {
        "name": "q",
        "hooks": {
            "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 7000}}]
        },
    }
    saver, config = InMemorySaver(), {"configurable": {"thread_id": "t"}}
    ours = ContextManagementMiddleware(keep)
    calls = [
        AIMessage(content="", tool_calls=[{"name": "read_log", "args": {"name": f"f{k}"}, "id": f"c{k}"}])
        for k in range(3)
    ]
    first = RecordingModel(messages=iter([*calls, AIMessage("done")]))
    create_agent(first, [read_log], middleware=[ours], checkpointer=saver).invoke(
        {"messages": [("user", "go")]}, config
    )
    if not live:
        ours._threads.clear()  # another worker: restored from the checkpoint
    model = RecordingModel(messages=iter([AIMessage("ok")]))
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=100, keep=1)])
    create_agent(model, [read_log], middleware=[editing, ours], checkpointer=saver).invoke(
        {"messages": [("user", "again")]}, config
    )
    sizes = [len(m.content) for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert sizes[:2] == [len("[cleared]")] * 2 and sizes[2] > 1000
    conversation = ours._threads["t"][0]
    assert conversation.last_counted is not None and conversation.last_counted < 3000


def test_a_manager_firing_at_every_call_translates_only_what_is_new(translated):
    """With a window that cuts the view at every call, each call after the first translates
    only the record's new messages, and the model gets the framework's own messages (their
    ids kept) for all it sees of the record."""
    window = {
        "name": "w",
        "hooks": {
            "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4, "pin": "none"}}]
        },
    }
    model = RecordingModel(messages=iter([AIMessage(f"a{k}", id=f"a{k}") for k in range(5)]))
    agent = create_agent(
        model, [], middleware=[ContextManagementMiddleware(window)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "w"}}
    history = [
        m for k in range(20) for m in (HumanMessage(f"q{k}", id=f"q{k}"), AIMessage(f"r{k}", id=f"r{k}"))
    ]
    agent.invoke({"messages": [*history, HumanMessage("go", id="go")]}, config)
    assert len(translated) == 41
    for k in range(4):
        translated.clear()
        record = agent.invoke({"messages": [HumanMessage(f"more {k}", id=f"m{k}")]}, config)["messages"]
        assert translated == ["ai", "human"]  # the answer before, and the new question
        seen = model.seen[-1]
        kept = record[-1 - len(seen) : -1]  # the newest messages, the answer to this call aside
        assert 2 <= len(seen) <= 4 and [m.id for m in seen] == [m.id for m in kept] and seen == kept


def test_an_earlier_message_edited_in_the_checkpointed_state_is_seen():
    """An earlier message replaced in the checkpointed state (same id, new content: the
    checkpointer hands back copies of every message, the edited one among them) makes a new
    view in the live conversation: the request is counted with the edit, and the model sees it."""
    model = RecordingModel(messages=iter([AIMessage("a1", id="a1"), AIMessage("a2", id="a2")]))
    ours = ContextManagementMiddleware(QUIET_LC)
    agent = create_agent(model, [], middleware=[ours], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "e"}}
    history = [
        m for k in range(6) for m in (HumanMessage(f"q{k}", id=f"q{k}"), AIMessage(f"r{k}", id=f"r{k}"))
    ]
    agent.invoke({"messages": [*history, HumanMessage("go", id="go")]}, config)
    conversation = ours._threads["e"][0]
    before = conversation.last_counted
    assert before is not None and before < 500
    agent.update_state(config, {"messages": [HumanMessage("word " * 2000, id="q2")]})
    agent.invoke({"messages": [HumanMessage("again", id="again")]}, config)
    assert ours._threads["e"][0] is conversation  # the live conversation, not a restored one
    assert conversation.last_counted is not None and conversation.last_counted > 2000
    assert model.seen[-1][4].content == "word " * 2000


def test_without_a_checkpointer_the_record_handed_again_continues_the_live_view(translated):
    """With no checkpointer (LangGraph's state holds ``{}`` for ctxmgmt), a caller handing the
    whole record again each call continues the thread's live view: each call translates only
    the messages new since the last; a record that does not continue it is managed afresh."""
    model = RecordingModel(messages=iter([AIMessage("a1"), AIMessage("a2"), AIMessage("b1")]))
    agent = create_agent(model, [], middleware=[ContextManagementMiddleware(QUIET_LC)])
    record = agent.invoke({"messages": [HumanMessage("first question")]})["messages"]
    translated.clear()
    record = agent.invoke({"messages": [*record, HumanMessage("second question")]})["messages"]
    assert translated == ["ai", "human"]  # the answer before, and the new question
    translated.clear()
    agent.invoke({"messages": [HumanMessage("another conversation")]})
    assert translated == ["human"]
    assert [m.content for m in model.seen[1]] == ["first question", "a1", "second question"]
    assert [m.content for m in model.seen[2]] == ["another conversation"]


_TEXT = st.text(max_size=8)
_ARGS = st.dictionaries(
    st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=6), st.lists(st.booleans()))
)
_CALLS = st.lists(
    st.builds(lambda n, a, i: {"name": n, "args": a, "id": i}, _TEXT, _ARGS, st.text(min_size=1, max_size=4)),
    max_size=3,
)
_KWARGS = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"refusal": _TEXT}),
    st.fixed_dictionaries({"__openai_role__": st.sampled_from(["developer", "system"])}),
    st.fixed_dictionaries({"other": _TEXT}),
)
_CONTENT = st.one_of(
    _TEXT, st.lists(st.one_of(_TEXT, st.builds(lambda t: {"type": "text", "text": t}, _TEXT)))
)
_COMMON = {
    "content": _CONTENT,
    "name": st.none() | _TEXT,
    "id": st.none() | _TEXT,
    "additional_kwargs": _KWARGS,
}
_MESSAGES = st.one_of(
    st.builds(HumanMessage, **_COMMON),
    st.builds(SystemMessage, **_COMMON),
    st.builds(AIMessage, tool_calls=_CALLS, **_COMMON),
    st.builds(ToolMessage, tool_call_id=_TEXT, status=st.sampled_from(["success", "error"]), **_COMMON),
)


@example(AIMessage(content="", tool_calls=[{"name": "run", "args": {"q": "é"}, "id": "c1"}]))
@example(SystemMessage(content="s", additional_kwargs={"__openai_role__": "developer"}))
@example(ToolMessage(content="out", tool_call_id="c1", name="run", id="t1"))
@given(_MESSAGES)
def test_a_plain_message_translates_as_langchains_own_converter_does(message):
    """A message of the four core classes with text content is translated by the fast path to
    the very dict (keys in order too) that ``convert_to_openai_messages`` gives."""
    from ctxmgmt.adapters.langchain import _chat, _group, _not_tool

    theirs = sorted((_chat(d) for d in convert_to_openai_messages([message], include_id=True)), key=_not_tool)
    ours = _group(message)
    assert ours == theirs
    assert [list(d) for d in ours] == [list(d) for d in theirs]


def test_a_message_with_thinking_is_marked_with_how_much_and_whether_first():
    """An AIMessage's thinking blocks (any of LangChain's forms) mark its chat message, never
    its text: that it carries thinking, how many characters, and whether it opens with it."""
    from ctxmgmt.adapters.langchain import _group

    call = [{"name": "read_log", "args": {"name": "x"}, "id": "t0"}]
    thinking = {"type": "thinking", "thinking": "why? " * 8, "signature": "sig"}
    (opens,) = _group(AIMessage(content=[thinking, {"type": "text", "text": "Checking."}], tool_calls=call))
    assert opens["content"] == "Checking."
    assert dict(opens["_ctxmgmt"]) == {"thinking": True, "thinking_chars": 40, "thinking_first": True}
    bedrock = {"type": "reasoning_content", "reasoning_content": {"text": "hm", "signature": "s"}}
    (later,) = _group(AIMessage(content=[{"type": "text", "text": "Now."}, bedrock], tool_calls=call))
    assert dict(later["_ctxmgmt"]) == {"thinking": True, "thinking_chars": 2}
    (plain,) = _group(AIMessage(content=[{"type": "text", "text": "No thought."}], tool_calls=call))
    assert "_ctxmgmt" not in plain


def test_the_fit_keeps_room_for_the_reply_limit_the_model_asks():
    """A chat model whose max_tokens is more than the definition's reserve gets requests whose
    input and that limit together fit the window (Anthropic refuses more)."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from ctxmgmt import Context, get_counter

    class Limited(RecordingModel):
        max_tokens: int = 3500

    model = Limited(messages=iter(script(1, calls=4)))
    middleware = ContextManagementMiddleware(FIT_ONLY, context_window=8000)
    agent = create_agent(model, [read_log], system_prompt="You read logs.", middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Why does the login fail?")]})
    assert len(model.seen) == 5
    counter, tools = get_counter(), [convert_to_openai_tool(read_log)]
    counted = [
        counter.context(Context(messages=convert_to_openai_messages(c), tools=tools))[0] for c in model.seen
    ]
    assert all(n + 3500 <= 8000 for n in counted), counted
    assert max(counted) > 500  # the results were there to cut
