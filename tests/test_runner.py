"""The agent loop through the Python API, against the local chat server over HTTP."""

import asyncio

import pytest

from ctxmgmt import AgentError, Context, ContextError, LLMError, NotFound, get_counter
from ctxmgmt.agents.runner import Runner
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.managers.summarization import SummarizationManager
from tests.conftest import shipped, tool_call

ALWAYS = {"activation": {"always": True}}
EVERY_HOOK = {
    "hooks": {
        "post_memory": [{"type": "SlidingWindowManager", "config": {"max_messages": 100}, **ALWAYS}],
        "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 100}, **ALWAYS}],
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 200}, **ALWAYS}],
    }
}


@pytest.fixture
def runner(store, agent_models, tools):
    return Runner(store, agent_models, tools)


def agent(runner, **extra):
    body = {
        "name": "helper",
        "type": "conversational",
        "llm": {"model_id": "chat"},
        "tools": [{"type": "big"}, {"type": "boom"}, {"type": "echo"}],
        "system_prompt": "Be brief.",
        **extra,
    }
    return runner.register(body)


def test_hooks_run_around_every_call_and_tool_result(runner, chat_server, store):
    """post_memory once, pre_llm before every LLM call (the first too), post_tool once the results are in."""
    store.create("every-hook", EVERY_HOOK)
    agent_id = agent(runner, context_management_name="every-hook")
    chat_server.reply(tool_call(("echo", {"a": 1}), ("big", {"size": 4000})))
    chat_server.reply("done")
    result = runner.execute(agent_id, "go")
    assert (result.response, result.finished, result.definition, result.definition_source) == (
        "done",
        True,
        "every-hook",
        "agent",
    )
    assert [(t["hook"], t["iteration"]) for t in result.trace] == [
        ("post_memory", 0),
        ("pre_llm", 1),
        ("post_tool", 1),
        ("pre_llm", 2),
    ]
    first, second = chat_server.requests
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["tools"][0]["function"]["name"] == "big"
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert results[0]["content"] == '{"a": 1}'
    assert len(results[1]["content"]) <= 200  # truncated by post_tool before the model saw it
    assert [u["iteration"] for u in result.usage] == [1, 2]


def test_memory_keeps_the_original_and_continues(runner, chat_server, store):
    """The memory stores tool results in full; a later execution continues it with the managed view."""
    store.create("every-hook", EVERY_HOOK)
    agent_id = agent(runner, context_management_name="every-hook")
    chat_server.reply(tool_call(("big", {"size": 4000})))
    chat_server.reply("first answer")
    first = runner.execute(agent_id, "question one")
    messages, _, length = runner.memory.load(first.memory_id, agent_id)
    assert length == 4 and len(messages[2]["content"]) == 4000
    chat_server.reply("second answer")
    second = runner.execute(agent_id, "question two", memory_id=first.memory_id)
    assert second.memory_id == first.memory_id
    sent = chat_server.requests[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["question one", "question two"]
    assert runner.memory.load(first.memory_id, agent_id)[2] == 6


def test_an_answer_without_text_finishes_and_the_memory_stays_a_valid_history(runner, chat_server, store):
    """A final answer with null content (a refusal, a reply cut at its length) finishes the
    execution; the memory keeps it as an empty answer, and the next execution sends it."""
    store.create("every-hook", EVERY_HOOK)
    agent_id = agent(runner, context_management_name="every-hook")
    chat_server.reply(tool_call(("big", {"size": 4000})))
    chat_server.reply({"role": "assistant", "content": None})
    first = runner.execute(agent_id, "question one")
    assert first.finished
    messages, _, length = runner.memory.load(first.memory_id, agent_id)
    assert length == 4 and messages[-1] == {"role": "assistant", "content": ""}
    chat_server.reply("second answer")
    second = runner.execute(agent_id, "question two", memory_id=first.memory_id)
    assert second.finished and second.response == "second answer"
    assert {"role": "assistant", "content": ""} in chat_server.requests[-1]["messages"]


def test_tool_errors_become_results_the_model_reads(runner, chat_server):
    """A failing tool, an unknown tool and bad JSON arguments become readable tool results."""
    agent_id = agent(runner)
    bad_json = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "echo", "arguments": "{not json"}}
        ],
    }
    chat_server.reply(tool_call(("boom", {}), ("nope", {})))
    chat_server.reply(bad_json)
    chat_server.reply("ok")
    runner.execute(agent_id, "go")
    second = [m["content"] for m in chat_server.requests[1]["messages"] if m["role"] == "tool"]
    assert second == [
        "error: RuntimeError: disk on fire",
        "error: there is no tool named 'nope'; the tools are: big, boom, echo",
    ]
    third = [m["content"] for m in chat_server.requests[2]["messages"] if m["role"] == "tool"]
    assert third[-1].startswith("error: the arguments are not valid JSON")


@pytest.mark.parametrize(
    "script",
    [
        lambda s: [s.fail(500), s.fail(503)],
        lambda s: s.raw(b"not json at all"),
        lambda s: [s.reply("slow", delay=6), s.reply("slow", delay=6)],  # past the 5 s deadline
    ],
)
def test_llm_errors_end_the_execution_and_keep_memory_consistent(runner, chat_server, script):
    """An LLM failure raises LLMError; the memory holds only whole rounds."""
    agent_id = agent(runner)
    chat_server.reply(tool_call(("echo", {"x": 1})))
    script(chat_server)
    memory_id = runner.memory.create(agent_id)
    with pytest.raises(LLMError):
        runner.execute(agent_id, "go", memory_id=memory_id)
    messages, _, _ = runner.memory.load(memory_id, agent_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


def test_max_iteration_stops_the_loop(runner, chat_server):
    """With max_iteration 2 the loop stops after two LLM calls and says so."""
    agent_id = agent(runner, llm={"model_id": "chat", "parameters": {"max_iteration": 2}})
    for _ in range(3):
        chat_server.reply(tool_call(("echo", {})))
    result = runner.execute(agent_id, "go")
    assert not result.finished and "max_iteration=2" in result.response
    assert len(chat_server.requests) == 2


def test_resolution_order(runner, chat_server, store):
    """Request name, then the agent's name, then the inline definition, then none."""
    store.create("a", shipped("long-conversation"))
    store.create("b", shipped("tool-heavy"))
    named = agent(runner, context_management_name="a")
    inline = agent(runner, context_management=shipped("tool-heavy"))
    bare = agent(runner)
    for _ in range(4):
        chat_server.reply("ok")
    assert runner.execute(named, "q").definition == "a"
    assert runner.execute(named, "q", context_management_name="b").definition_source == "request"
    assert runner.execute(inline, "q").definition_source == "inline"
    assert runner.execute(bare, "q").definition_source == "none"
    with pytest.raises(NotFound, match="'missing' not found"):
        runner.execute(named, "q", context_management_name="missing")


def test_registration_checks(runner, store):
    """Unknown tool types, both definition forms, unknown names and models are refused with pointers."""
    store.create("a", shipped("default"))
    cases = [
        ({"tools": [{"type": "teleport"}]}, "/tools/0/type"),
        ({"context_management_name": "a", "context_management": shipped("default")}, "/context_management"),
        ({"context_management_name": "nope"}, "/context_management_name"),
        ({"llm": {"model_id": "gpt-99"}}, "/llm/model_id"),
        ({"llm": {"model_id": "chat", "parameters": {"max_iteration": 0}}}, "/llm/parameters/max_iteration"),
        (
            {"llm": {"model_id": "chat", "parameters": {"max_iteration": 101}}},
            "/llm/parameters/max_iteration",
        ),
        ({"context_management": {"hooks": {"pre_llm": []}}}, "/context_management/hooks/pre_llm"),
        ({"tools": [{"type": "http", "parameters": {"url": "ftp://x"}}]}, "/tools/0/parameters/url"),
    ]
    for extra, pointer in cases:
        with pytest.raises(AgentError) as info:
            agent(runner, **extra)
        assert pointer in {p.pointer for p in info.value.problems}, (extra, info.value.problems)


def test_missing_question_and_unknown_agent(runner):
    """An empty question is an AgentError; an unknown agent is NotFound."""
    agent_id = agent(runner)
    with pytest.raises(AgentError, match="question"):
        runner.execute(agent_id, "  ")
    with pytest.raises(NotFound):
        runner.execute("0" * 32, "q")


def test_http_tool_calls_its_url(runner, chat_server):
    """The built-in http tool posts the arguments as JSON and returns the answer text."""
    from ctxmgmt.testing import ChatServer

    with ChatServer() as endpoint:
        endpoint.raw(b'{"temperature": 21}')
        agent_id = agent(
            runner,
            tools=[
                {"type": "http", "name": "weather", "parameters": {"url": endpoint.base_url + "/weather"}}
            ],
        )
        chat_server.reply(tool_call(("weather", {"city": "Oslo"})))
        chat_server.reply("21 degrees")
        assert runner.execute(agent_id, "weather?").response == "21 degrees"
        assert endpoint.requests == [{"city": "Oslo"}]
    sent = [m for m in chat_server.requests[1]["messages"] if m["role"] == "tool"]
    assert sent[0]["content"] == '{"temperature": 21}'


def test_async_execute(runner, chat_server):
    """aexecute runs the same loop without blocking the event loop."""
    agent_id = agent(runner)
    chat_server.reply("async ok")
    assert asyncio.run(runner.aexecute(agent_id, "q")).response == "async ok"


def test_an_execution_reuses_one_kept_alive_connection(runner, chat_server):
    """Every LLM call of an execution goes over one pooled keep-alive connection, not a new
    client and connection per call; the connection is closed when the execution ends."""
    agent_id = agent(runner)
    for i in range(4):
        chat_server.reply(tool_call(("echo", {"n": i})))
    chat_server.reply("done")
    before = chat_server.connections
    assert runner.execute(agent_id, "go").response == "done"
    assert len(chat_server.requests) == 5 and chat_server.connections - before == 1


def test_a_runner_with_a_pool_shares_connections_across_executions(store, agent_models, tools, chat_server):
    """Given a pool (the server's), executions on one loop share its connections."""
    from ctxmgmt.llm import HTTPPool

    async def three() -> list[str]:
        pool = HTTPPool()
        runner = Runner(store, agent_models, tools, pool=pool)
        agent_id = agent(runner)
        try:
            return [(await runner.aexecute(agent_id, f"q{i}")).response for i in range(3)]
        finally:
            await pool.aclose()

    for i in range(3):
        chat_server.reply(f"answer {i}")
    before = chat_server.connections
    assert asyncio.run(three()) == ["answer 0", "answer 1", "answer 2"]
    assert chat_server.connections - before == 1


def test_long_run_stays_under_the_context_window(runner, chat_server, store):
    """200 tool calls with 50k-character outputs: every request the model gets fits its window."""
    store.create(
        "fit",
        {
            "hooks": {
                "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 1500}}],
                "pre_llm": [
                    {
                        "type": "SlidingWindowManager",
                        "config": {"max_messages": 400, "max_tokens": 12000},
                        "activation": {"tokens_ratio_exceed": 0.7},
                    }
                ],
            }
        },
    )
    agent_id = agent(
        runner, context_management_name="fit", llm={"model_id": "chat", "parameters": {"max_iteration": 60}}
    )
    for i in range(50):  # 50 rounds of 4 parallel calls: 200 tool calls
        chat_server.reply(tool_call(*[("big", {"size": 50_000 + i + j}) for j in range(4)]))
    chat_server.reply("finished")
    result = runner.execute(agent_id, "Collect every row.")
    assert result.finished and len(chat_server.requests) == 51
    counter = get_counter("fake-model")
    tools = chat_server.requests[0]["tools"]
    from ctxmgmt import Context

    for request in chat_server.requests:
        system, *messages = request["messages"]
        tokens = counter.context(Context(system_prompt=system["content"], messages=messages, tools=tools))[0]
        assert tokens <= 16000, tokens
    stored, _, _ = runner.memory.load(result.memory_id, agent_id)
    assert sum(1 for m in stored if m["role"] == "tool") == 200
    assert all(len(m["content"]) >= 50_000 for m in stored if m["role"] == "tool")


def test_state_persists_with_the_memory(runner, chat_server, store):
    """Managers' state (a running summary) is saved with the memory and read back next time."""
    store.create(
        "summarize",
        {
            "hooks": {
                "pre_llm": [
                    {
                        "type": "SummarizationManager",
                        "config": {"preserve_recent_messages": 2, "summary_ratio": 0.8},
                        "activation": {"message_count_exceed": 6},
                    }
                ]
            }
        },
    )
    agent_id = agent(runner, context_management_name="summarize")
    for _ in range(4):
        chat_server.reply(tool_call(("echo", {"path": "/srv/app/main.py"})))
    chat_server.reply("done")
    first = runner.execute(agent_id, "Fix /srv/app/main.py please")
    _, state, _ = runner.memory.load(first.memory_id, agent_id)
    assert "/srv/app/main.py" in str(state["summary"]["sections"])
    chat_server.reply("again")
    runner.execute(agent_id, "and now?", memory_id=first.memory_id)
    sent = chat_server.requests[-1]["messages"]
    assert any(str(m.get("content", "")).startswith("[ctxmgmt:summary]") for m in sent)


def test_api_key_never_appears_in_errors(store, chat_server, tools, monkeypatch):
    """An endpoint's error carries its reason, never the API key."""
    from ctxmgmt import ModelConfig, ModelsConfig

    monkeypatch.setenv("SECRET_KEY_VAR", "sk-very-secret-123")
    models = ModelsConfig(
        {
            "chat": ModelConfig(
                id="chat",
                base_url=chat_server.base_url,
                model="m",
                api_key_env="SECRET_KEY_VAR",
                timeout=2,
                max_retries=0,
            )
        }
    )
    runner = Runner(store, models, tools)
    agent_id = runner.register({"name": "k", "llm": {"model_id": "chat"}})
    chat_server.fail(401, "invalid api key")
    with pytest.raises(LLMError) as info:
        runner.execute(agent_id, "q")
    assert "invalid api key" in str(info.value) and "sk-very-secret" not in str(info.value)
    assert chat_server.requests  # the key was sent, as a header only


def test_next_execution_continues_from_the_managed_view(runner, chat_server, store):
    """A later execution starts from what the model last saw, not from the whole record again."""
    store.create(
        "window", {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 3}}]}}
    )
    agent_id = agent(runner, context_management_name="window")
    for i in range(3):
        chat_server.reply(tool_call(("echo", {"i": i})))
    chat_server.reply("first done")
    first = runner.execute(agent_id, "first question")
    chat_server.reply("second done")
    runner.execute(agent_id, "second question", memory_id=first.memory_id)
    sent = chat_server.requests[-1]["messages"]
    assert len([m for m in sent if m["role"] != "system"]) <= 3
    stored, state, _ = runner.memory.load(first.memory_id, agent_id)
    assert len(stored) == 10 and state["_view"]["upto"] == 10  # the record stays complete


def test_an_execution_that_changes_nothing_leaves_the_stored_view_and_loses_nothing(
    runner, chat_server, store
):
    """With no manager firing, the stored view is not written again; the next execution still
    continues from exactly what the model saw, plus what was said after."""
    window = {"type": "SlidingWindowManager", "config": {"max_messages": 2}}
    # It fires once, before the model's last call: the newest call and its result stay.
    store.create("window", {"hooks": {"pre_llm": [{**window, "activation": {"message_count_exceed": 8}}]}})
    agent_id = agent(runner, context_management_name="window")
    for i in range(4):
        chat_server.reply(tool_call(("echo", {"i": i})))
    chat_server.reply("first done")
    first = runner.execute(agent_id, "first question")
    assert any(e["activated"] for t in first.trace for e in t["entries"])
    _, state, _ = runner.memory.load(first.memory_id, agent_id)
    chat_server.reply("second done")
    second = runner.execute(agent_id, "q2", memory_id=first.memory_id)
    assert not any(e["activated"] for t in second.trace for e in t["entries"])
    _, after, length = runner.memory.load(first.memory_id, agent_id)
    assert after["_view"] == state["_view"] and state["_view"]["upto"] < length  # not written again
    seen = [m for m in chat_server.requests[-1]["messages"] if m["role"] != "system"]
    base, *_ = runner._continue(first.memory_id, agent_id)
    assert base == [*seen, {"role": "assistant", "content": "second done"}]


@pytest.mark.parametrize("fires", [False, True])
def test_continuing_a_memory_nobody_wrote_since_reads_no_stored_message(
    runner, chat_server, store, agent_models, tools, monkeypatch, fires
):
    """A runner continues a memory its last execution left, unwritten since, from what it
    kept: no stored message or view is read again, and the model is sent what a runner that
    reads it all back sends (whether a manager changed the view or not)."""
    window = {"type": "SlidingWindowManager", "config": {"max_messages": 4}}
    activation = {"activation": {"message_count_exceed": 4 if fires else 99}}
    store.create("window", {"hooks": {"pre_llm": [{**window, **activation}]}})
    agent_id = agent(runner, context_management_name="window")
    memories = []
    for _ in range(2):  # two memories, the same conversation
        for i in range(3):
            chat_server.reply(tool_call(("echo", {"i": i})))
        chat_server.reply("first done")
        memories.append(runner.execute(agent_id, "first question").memory_id)
    reads = []
    for name in ("head", "messages"):
        original = getattr(runner.memory, name)
        monkeypatch.setattr(
            runner.memory, name, lambda *a, _o=original, _n=name, **k: reads.append(_n) or _o(*a, **k)
        )
    sent = []
    for who, memory_id in ((runner, memories[0]), (Runner(store, agent_models, tools), memories[1])):
        chat_server.reply(tool_call(("echo", {"i": 9})))
        chat_server.reply("second done")
        who.execute(agent_id, "second question", memory_id=memory_id)
        sent.append(chat_server.requests[-2:])
    assert reads == []
    assert sent[0] == sent[1]
    assert runner.memory.load(memories[0], agent_id)[:2] == runner.memory.load(memories[1], agent_id)[:2]


@pytest.mark.parametrize("fires", [False, True])
def test_after_a_failed_execution_what_was_kept_is_what_the_store_reads_back(
    runner, chat_server, store, agent_models, tools, fires
):
    """An execution that failed midway (its model erred after a tool round) leaves this
    runner's kept memory equal to what another runner reads back from the store: the next
    execution sends the same requests either way."""
    window = {"type": "SlidingWindowManager", "config": {"max_messages": 4}}
    activation = {"activation": {"message_count_exceed": 4 if fires else 99}}
    store.create("window", {"hooks": {"pre_llm": [{**window, **activation}]}})
    agent_id = agent(runner, context_management_name="window")
    memories = []
    for _ in range(2):
        chat_server.reply("first done")
        memory_id = runner.execute(agent_id, "first question").memory_id
        chat_server.reply(tool_call(("echo", {"i": 1})))
        chat_server.fail(500)
        with pytest.raises(LLMError):
            runner.execute(agent_id, "second question", memory_id=memory_id)
        memories.append(memory_id)
    sent = []
    for who, memory_id in ((runner, memories[0]), (Runner(store, agent_models, tools), memories[1])):
        chat_server.reply("third done")
        who.execute(agent_id, "third question", memory_id=memory_id)
        sent.append(chat_server.requests[-1])
    assert sent[0] == sent[1]


def test_a_memory_written_elsewhere_is_read_back_not_continued_from_what_was_kept(
    runner, chat_server, store, agent_models, tools
):
    """When another runner (another process) wrote the memory after this runner's last
    execution of it, this runner reads it back: the model sees what the other one added."""
    agent_id = agent(runner)
    chat_server.reply("one")
    memory_id = runner.execute(agent_id, "first").memory_id
    other = Runner(store, agent_models, tools)
    chat_server.reply("two")
    other.execute(agent_id, "second", memory_id=memory_id)
    chat_server.reply("three")
    runner.execute(agent_id, "third", memory_id=memory_id)
    said = [m["content"] for m in chat_server.requests[-1]["messages"] if m["role"] != "system"]
    assert said == ["first", "one", "second", "two", "third"]


def test_two_writes_in_one_millisecond_give_a_memory_two_versions(store, monkeypatch):
    """Every write changes a memory's (length, last modified), even two in one millisecond
    that keep its length (a compaction): a runner never mistakes the second for the first."""
    from ctxmgmt.store import AgentStore, MemoryStore, agents

    memory = MemoryStore(store.engine)
    agent_id = AgentStore(store.engine).register(
        {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}}
    )
    memory_id = memory.create(agent_id)
    later = agents.now_ms() + 60_000  # one millisecond, after the memory's creation
    monkeypatch.setattr(agents, "now_ms", lambda: later)
    first = memory.append(memory_id, [{"role": "user", "content": "q"}], {}, expected_length=0)
    second = memory.append(memory_id, [], {"x": 1}, expected_length=1)
    assert (first, second) == (later, later + 1) and memory.version(memory_id, agent_id) == (1, second)


def test_a_write_since_a_memory_was_read_is_a_conflict_though_its_length_is_the_same(store):
    """An execution's write names the version it read: a compaction in between (same length)
    makes it a Conflict, and nothing of it is stored."""
    from ctxmgmt import Conflict
    from ctxmgmt.store import AgentStore, MemoryStore

    memory = MemoryStore(store.engine)
    agent_id = AgentStore(store.engine).register(
        {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}}
    )
    memory_id = memory.create(agent_id)
    read = memory.append(memory_id, [{"role": "user", "content": "q"}], {}, expected_length=0)
    memory.append(memory_id, [], {"compacted": True}, expected_length=1)  # same length
    with pytest.raises(Conflict):
        memory.append(
            memory_id, [{"role": "user", "content": "late"}], {}, expected_length=1, expected_modified=read
        )
    messages, state, length = memory.load(memory_id, agent_id)
    assert (len(messages), state, length) == (1, {"compacted": True}, 1)


def test_manual_compact_with_an_instruction(runner, chat_server, store, tmp_path):
    """compact summarises now, passes the extra instruction, archives, and the next run continues from it."""
    from ctxmgmt.offload import LocalOffloader

    runner.offloader = LocalOffloader(tmp_path)
    store.create(
        "summ",
        {
            "hooks": {
                "pre_llm": [
                    {
                        "type": "SummarizationManager",
                        "config": {"summarization_model_id": "summarizer", "preserve_recent_messages": 2},
                        "activation": {"tokens_exceed": 10**9},
                    }
                ]
            }
        },
    )
    agent_id = agent(runner, context_management_name="summ")
    for i in range(6):
        chat_server.reply(tool_call(("big", {"size": 3000 + i})))
    chat_server.reply("done")
    memory_id = runner.execute(agent_id, "Refactor the app in /srv/app/f0.py").memory_id
    chat_server.reply(
        '{"goal": ["refactor"], "constraints": [], "progress": ["6 steps"], "key_decisions": [], '
        '"next_steps": [], "critical_context": ["/srv/app/f0.py"]}'
    )
    result = runner.compact(agent_id, memory_id, instruction="Keep every file path.")
    assert result["compacted"] and result["tokens_after"] < result["tokens_before"]
    system = chat_server.requests[-1]["messages"][0]["content"]
    assert system == f"{SummarizationManager.DEFAULT_PROMPT}\nExtra instruction: Keep every file path."
    assert "## Archived messages" in result["summary"]
    chat_server.reply("continuing")
    runner.execute(agent_id, "next?", memory_id=memory_id)
    sent = chat_server.requests[-1]["messages"]
    assert any(str(m.get("content", "")).startswith("[ctxmgmt:summary]") for m in sent)
    assert len(runner.memory.load(memory_id, agent_id)[0]) == 16  # the record is complete


def test_a_request_that_cannot_fit_never_reaches_the_model(runner, chat_server, store):
    """A question larger than the window is a ContextError naming the numbers, with or without
    a definition, and the LLM is never called."""
    store.create("default", shipped("default"))
    huge = "word " * 20_000
    for extra in ({"context_management_name": "default"}, {}):
        agent_id = agent(runner, **extra)
        with pytest.raises(ContextError, match=r"window is 16,000"):
            runner.execute(agent_id, huge)
    assert chat_server.requests == []


def test_a_conversation_past_its_window_is_fitted_before_each_call(runner, chat_server, store):
    """With the default definition, every request the model receives fits its 16k window and
    the reserve, however large the tool results grow."""
    store.create("default", shipped("default"))
    agent_id = agent(runner, context_management_name="default")
    for _ in range(8):
        chat_server.reply(tool_call(("big", {"size": 30_000})))
    chat_server.reply("done")
    result = runner.execute(agent_id, "read them all")
    assert result.finished
    counter = get_counter("fake-model")
    for request in chat_server.requests:
        ctx = Context(messages=request["messages"], tools=request.get("tools", ()))
        assert counter.context(ctx)[0] + 4000 <= 16_000


def test_the_runner_keeps_room_for_the_reply_limit_its_model_asks(store, agent_models, tools, chat_server):
    """A model configured with a max_tokens larger than the definition's reserve gets requests
    whose input and that limit together fit its window (Anthropic refuses more)."""
    from dataclasses import replace

    models = ModelsConfig({**agent_models, "chat": replace(agent_models["chat"], max_tokens=7_000)})
    runner = Runner(store, models, tools)
    hooks = {"post_memory": [{"type": "SlidingWindowManager", "config": {}}]}
    store.create("fit-only", {"hooks": hooks})  # pre_llm: the fit step alone
    agent_id = agent(runner, context_management_name="fit-only")
    for _ in range(6):
        chat_server.reply(tool_call(("big", {"size": 15_000})))
    chat_server.reply("done")
    assert runner.execute(agent_id, "read them all").finished
    counter = get_counter("fake-model")
    counted = []
    for request in chat_server.requests:
        assert request["max_tokens"] == 7_000
        counted.append(
            counter.context(Context(messages=request["messages"], tools=request.get("tools", ())))[0]
        )
    assert all(n + 7_000 <= 16_000 for n in counted) and max(counted) > 6_000, counted


def test_a_hook_runs_changes_are_the_same_from_the_edit_and_from_the_lists():
    """What a hook run removed and added, read from the splice that made its output, is what
    comparing the two lists finds."""
    from ctxmgmt.agents.conversation import _changes
    from ctxmgmt.testing import make_conversation

    view = Context(messages=make_conversation(60, seed=3))
    spliced = view.splice([(1, 5, ()), (10, 11, ({"role": "user", "content": "cut"},))])
    by_edit = _changes(view, spliced)
    by_lists = _changes(view, Context(messages=list(spliced.messages)))
    assert by_edit == by_lists and by_edit["removed"] == 5 and by_edit["added"] == 1


def test_the_record_keeps_a_reduction_that_made_the_recall_tools_appear(
    store, agent_models, tools, chat_server, tmp_path
):
    """When a pre_llm manager archives and the recall tools are shown, the call's record still
    shows the reduction (before > after), with the tools' schemas counted in 'before'."""
    from ctxmgmt.offload import LocalOffloader

    runner = Runner(store, agent_models, tools, offloader=LocalOffloader(tmp_path / "off"))
    store.create(
        "compact",
        {"hooks": {"pre_llm": [{"type": "ToolResultCompactionManager", "config": {"recent_n": 0}}]}},
    )
    agent_id = agent(runner, context_management_name="compact")
    chat_server.reply(tool_call(("big", {"size": 20_000})))
    chat_server.reply("done")
    result = runner.execute(agent_id, "go")
    record = runner.executions.get(result.execution_id)
    second = record["calls"][1]
    assert second["tokens_before"] > second["tokens_after"]
    assert record["archived"] and any(
        t["name"] == "context_read" for t in chat_server.requests[1]["tools"] for t in [t["function"]]
    )


def test_an_execution_that_loses_the_race_to_store_its_memory_is_recorded_as_an_error(
    runner, chat_server, store
):
    """Two executions on one memory at once: the one whose memory write conflicts raises
    Conflict and its record says error, never finished."""
    from ctxmgmt import Conflict

    store.create("every-hook", EVERY_HOOK)
    agent_id = agent(runner, context_management_name="every-hook")
    chat_server.reply("first")
    memory_id = runner.execute(agent_id, "start").memory_id
    chat_server.reply("one", delay=0.2)
    chat_server.reply("two", delay=0.2)

    async def both():
        return await asyncio.gather(
            runner.aexecute(agent_id, "a", memory_id=memory_id),
            runner.aexecute(agent_id, "b", memory_id=memory_id),
            return_exceptions=True,
        )

    outcomes = asyncio.run(both())
    assert sorted(type(o).__name__ for o in outcomes) == ["Conflict", "ExecutionResult"]
    assert any(isinstance(o, Conflict) for o in outcomes)
    statuses = sorted(e["status"] for e in runner.executions.list(agent_id, limit=10)[1])
    assert statuses == ["error", "finished", "finished"]


def test_the_reusable_prefix_carries_across_executions_of_one_memory(runner, chat_server, store):
    """Each call's usage says how much of its request repeats the previous one; the first call
    of the next execution of the memory reuses the whole last request of the one before."""
    from ctxmgmt.tokens import REPLY_PRIMING

    store.create("every-hook", EVERY_HOOK)
    agent_id = agent(runner, context_management_name="every-hook")
    chat_server.reply(tool_call(("echo", {"a": 1})))
    chat_server.reply("done")
    first = runner.execute(agent_id, "go")
    assert first.usage[0]["reusable_prefix_tokens"] == 0
    assert first.usage[1]["reusable_prefix_tokens"] == first.usage[0]["counted"] - REPLY_PRIMING
    chat_server.reply("again")
    second = runner.execute(agent_id, "more", memory_id=first.memory_id)
    assert second.usage[0]["reusable_prefix_tokens"] == first.usage[1]["counted"] - REPLY_PRIMING
    assert second.cache["llm_calls"] == 1 and "estimated_cost" not in second.cache  # no pricing


def test_an_edit_postponed_for_the_cache_shows_in_the_trace_and_the_record(
    agent_models, tools, chat_server, store
):
    """cache: aware through the runner, at Anthropic's prices: clearing a small old result would
    rewrite more than it saves, so it waits; the execution's trace, its record and `ctxmgmt
    trace` say 'postponed: cache' with the numbers, and the model got the result untouched."""
    from dataclasses import replace

    from ctxmgmt import ModelsConfig
    from ctxmgmt.cache import Pricing
    from ctxmgmt.cli import trace_lines
    from ctxmgmt.store import ExecutionStore

    priced = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    runner = Runner(store, ModelsConfig({"chat": replace(agent_models["chat"], pricing=priced)}), tools)

    store.create(
        "aware",
        {
            "settings": {"cache": "aware", "cache_expected_calls": 1},
            "hooks": {
                "pre_llm": [{"type": "ToolResultClearingManager", "config": {"trigger": 0, "keep": 1}}]
            },
        },
    )
    agent_id = agent(runner, context_management_name="aware")
    chat_server.reply(tool_call(("echo", {"text": "first " * 80})))
    chat_server.reply(tool_call(("echo", {"text": "second"})))
    chat_server.reply("done")
    result = runner.execute(agent_id, "go")
    postponed = [
        e for run in result.trace for e in run["entries"] if e["details"].get("postponed") == "cache"
    ]
    assert (
        postponed
        and postponed[0]["details"]["cache"]["saving"] < postponed[0]["details"]["cache"]["rewrite_cost"]
    )
    last = chat_server.requests[-1]["messages"]
    assert next(m["content"] for m in last if m["role"] == "tool").count("first") == 80
    record = ExecutionStore(store.engine).get(result.execution_id)
    assert any("postponed: cache (would free" in line for line in trace_lines(record))


def test_with_cache_aware_the_recall_tools_are_there_from_the_first_call(
    agent_models, tools, chat_server, store, tmp_path
):
    """Adding tools mid-conversation voids the whole cached prefix: with cache: aware and an
    offload store the recall tools are in every request from the first; without, only once
    there is something to recall."""
    from ctxmgmt.offload import LocalOffloader

    runner = Runner(store, agent_models, tools, offloader=LocalOffloader(tmp_path))
    window = [{"type": "SlidingWindowManager", "config": {"max_messages": 50}}]
    for name, settings in (("aware", {"cache": "aware"}), ("plain", {})):
        store.create(name, {"settings": settings, "hooks": {"pre_llm": window}})
        agent_id = agent(runner, context_management_name=name)
        chat_server.reply("done")
        runner.execute(agent_id, "go")
        names = {t["function"]["name"] for t in chat_server.requests[-1]["tools"]}
        assert ("context_read" in names) is (name == "aware")


def test_a_summariser_model_call_is_priced_as_fresh_input_and_listed_apart(
    agent_models, tools, chat_server, store
):
    """The summariser's own model call is in the execution's cache figures apart from the
    agent's calls, priced at its model's prices as fresh input, and counted in the total."""
    import json
    from dataclasses import replace

    from ctxmgmt import ModelsConfig
    from ctxmgmt.cache import Pricing

    prices = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    models = ModelsConfig({k: replace(agent_models[k], pricing=prices) for k in ("chat", "summarizer")})
    runner = Runner(store, models, tools)
    summariser = {
        "type": "SummarizationManager",
        "config": {"summarization_model_id": "summarizer", "preserve_recent_messages": 1},
        "activation": {"tokens_exceed": 1000},
    }
    store.create("priced", {"settings": {"fit": False}, "hooks": {"pre_llm": [summariser]}})
    agent_id = agent(runner, context_management_name="priced")
    chat_server.reply(tool_call(("big", {"size": 8000})), usage={"completion_tokens": 5})
    chat_server.reply(tool_call(("echo", {"a": 1})), usage={"completion_tokens": 5})
    keys = ("goal", "constraints", "errors", "files_changed", "progress", "key_decisions", "next_steps")
    summary = json.dumps({k: ["read the big log"] for k in (*keys, "critical_context")})
    chat_server.reply(summary, usage={"prompt_tokens": 2100, "completion_tokens": 60})
    chat_server.reply("done", usage={"completion_tokens": 5})
    result = runner.execute(agent_id, "Read the big log.")
    (call,) = result.cache["summarizer_calls"]
    fresh = (2100 * 3.0 + 60 * 15.0) / 1e6
    assert call == {
        "call": 3,
        "type": "SummarizationManager",
        "model_id": "summarizer",
        "input_tokens": 2100,
        "output_tokens": 60,
        "estimated_cost": pytest.approx(fresh),
    }
    agents_own = sum(c["estimated_cost"] for c in result.cache["calls"])
    assert result.cache["estimated_cost"] == pytest.approx(agents_own + fresh)


def test_the_runner_and_an_adapter_record_the_same_usage_for_the_same_exchange(
    runner, chat_server, store, monkeypatch
):
    """One question to the same model, answered with the same usage report (input tokens and
    cached tokens), is recorded alike by the runner and by the LangChain middleware: counted,
    calibrated, reported, reusable prefix and cache figures."""
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    import ctxmgmt.adapters.langchain as adapter
    from ctxmgmt.agents.conversation import USAGE_FIELDS

    quiet = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 100}}]}}
    store.create("quiet", quiet)
    agent_id = runner.register(
        {
            "name": "plain",
            "type": "conversational",
            "llm": {"model_id": "chat"},
            "system_prompt": "Be brief.",
            "context_management_name": "quiet",
        }
    )
    recorded = []
    extended = adapter._extended

    def spy(response, conversation, turn):
        out = extended(response, conversation, turn)
        recorded.append(turn.usage)
        return out

    monkeypatch.setattr(adapter, "_extended", spy)
    report = {"prompt_tokens": 31, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 12}}
    for reported in (report, {"completion_tokens": 2}):  # with a report, and without one
        chat_server.reply("ok", usage=reported)
        (ran,) = runner.execute(agent_id, "Why does the build fail?").usage
        recorded.clear()
        chat_server.reply("ok", usage=reported)
        model = ChatOpenAI(model="fake-model", base_url=chat_server.base_url, api_key="k", max_retries=0)
        middleware = adapter.ContextManagementMiddleware({"name": "quiet", **quiet})
        create_agent(model, [], system_prompt="Be brief.", middleware=[middleware]).invoke(
            {"messages": [("user", "Why does the build fail?")]}
        )
        assert recorded and recorded[0] == {k: ran[k] for k in USAGE_FIELDS if k in ran}
        assert ran["reported"] == reported.get("prompt_tokens")
