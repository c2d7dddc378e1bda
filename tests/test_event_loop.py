"""The execution's work never blocks the event loop: hook runs and archive writes happen in
worker threads, a model reply with thousands of tool calls costs linear work, and the
server answers /_health while it runs."""

from __future__ import annotations

import gc
import json
import threading
import time

import httpx
import pytest

from ctxmgmt import ModelConfig, ModelsConfig
from ctxmgmt.agents.runner import Runner
from ctxmgmt.api import create_app
from ctxmgmt.managers.truncate import ToolsOutputTruncateManager
from ctxmgmt.offload import LocalOffloader
from tests.conftest import LiveServer, shipped

CALLS = 4000


def many_calls(n: int, name: str = "echo") -> dict:
    """An assistant message with ``n`` parallel tool calls."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"i": i})}}
            for i in range(n)
        ],
    }


@pytest.fixture
def big_models(chat_server) -> ModelsConfig:
    """A model with a window large enough for thousands of tool results."""
    return ModelsConfig(
        {"chat": ModelConfig(id="chat", base_url=chat_server.base_url, model="m", context_window=1_000_000)}
    )


def spy_threads(monkeypatch) -> tuple[dict[str, set[bool]], list[threading.Thread]]:
    """Spies on the truncation manager's apply and the local archive's write: for each, whether
    it ran on the thread put in the returned list (the event loop's)."""
    seen: dict[str, set[bool]] = {"apply": set(), "append": set()}
    loop_thread: list[threading.Thread] = []
    apply, append = ToolsOutputTruncateManager.apply, LocalOffloader._append

    def spy_apply(self, context, runtime):
        seen["apply"].add(threading.current_thread() in loop_thread)
        return apply(self, context, runtime)

    def spy_append(self, folder, name, data):
        seen["append"].add(threading.current_thread() in loop_thread)
        return append(self, folder, name, data)

    monkeypatch.setattr(ToolsOutputTruncateManager, "apply", spy_apply)
    monkeypatch.setattr(LocalOffloader, "_append", spy_append)
    return seen, loop_thread


def test_hooks_and_archive_writes_run_off_the_event_loop(
    store, big_models, chat_server, tools, tmp_path, monkeypatch
):
    """A post_tool manager's apply and its archive's write and fsync run in worker threads,
    never on the thread of the execution's event loop."""
    seen, loop_thread = spy_threads(monkeypatch)
    store.create(
        "cut",
        {
            "hooks": {
                "post_tool": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 1000, "offload": True},
                    }
                ]
            }
        },
    )
    runner = Runner(store, big_models, tools, offloader=LocalOffloader(tmp_path))
    agent_id = runner.register(
        {
            "name": "t",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "big"}],
            "context_management_name": "cut",
        }
    )
    chat_server.reply(many_calls(3, "big"))
    chat_server.reply("done")

    import asyncio

    async def main():
        loop_thread.append(threading.current_thread())
        return await runner.aexecute(agent_id, "go")

    result = asyncio.run(main())
    (post_tool,) = [t for t in result.trace if t["hook"] == "post_tool"]
    assert result.response == "done" and len(post_tool["entries"][0]["details"]["offloaded"]) == 3
    assert seen == {"apply": {False}, "append": {False}}


def test_post_tool_runs_once_per_group_of_results(store, big_models, chat_server, tools):
    """A reply with 4,000 calls: one post_tool run sees all 4,000 results (not one run per
    result over the whole group, which was quadratic)."""
    seen: list[int] = []
    apply = ToolsOutputTruncateManager.apply

    def spy(self, context, runtime):
        seen.append(len(context.messages))
        return apply(self, context, runtime)

    store.create("default", {"hooks": {"post_tool": shipped("default")["hooks"]["post_tool"]}})
    runner = Runner(store, big_models, tools)
    agent_id = runner.register(
        {
            "name": "t",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "echo"}],
            "context_management_name": "default",
        }
    )
    chat_server.reply(many_calls(CALLS))
    chat_server.reply("done")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ToolsOutputTruncateManager, "apply", spy)
        result = runner.execute(agent_id, "go")
    # One run over the question, the call and its 4,000 results (max_output_ratio hands the
    # run to an instance sized for the window: that apply is the same run).
    assert set(seen) == {CALLS + 2} and len(seen) <= 2, seen
    assert [(t["hook"], t["iteration"]) for t in result.trace if t["hook"] == "post_tool"] == [
        ("post_tool", 1)
    ]
    sent = [m for m in chat_server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(sent) == CALLS and sent[-1] == {
        "role": "tool",
        "tool_call_id": f"c{CALLS - 1}",
        "content": '{"i": 3999}',
    }


@pytest.fixture
def frozen_heap():
    """The objects alive now are left out of every garbage collection until the test ends."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def test_the_server_answers_health_while_an_execution_runs_4000_tool_calls(
    store, big_models, chat_server, tools, tmp_path, monkeypatch, frozen_heap
):
    """Under uvicorn, /_health keeps answering while an execution works through a 4,000-call
    reply, and no step of the server's event loop holds it with work of its own: each callback
    uses under 0.1 s of its thread's CPU (CPU time, so a loaded machine cannot fail it; the
    benchmark measures the wall-clock p99). The test process's own heap, grown by the tests
    before this one, is frozen first: a full collection over it is no work of the server's."""
    import asyncio.events

    steps: list[float] = []
    run = asyncio.events.Handle._run

    def timed(handle):  # type: ignore[no-untyped-def]
        started = time.thread_time()
        try:
            return run(handle)
        finally:
            if threading.current_thread().name != "MainThread":  # the server's loop
                steps.append(time.thread_time() - started)

    monkeypatch.setattr(asyncio.events.Handle, "_run", timed)
    store.create("default", shipped("default"))
    app = create_app(store, models=big_models, tools=tools, offloader=LocalOffloader(tmp_path))
    chat_server.reply(many_calls(CALLS))
    chat_server.reply("done")
    # asyncio's loop, whose handles are timed above (uvicorn would take uvloop when installed).
    with LiveServer(app, loop="asyncio") as server, httpx.Client(base_url=server.url, timeout=120) as http:
        agent_id = http.post(
            "/_plugins/_ml/agents/_register",
            json={
                "name": "t",
                "llm": {"model_id": "chat"},
                "tools": [{"type": "echo"}],
                "context_management_name": "default",
            },
        ).json()["agent_id"]
        answer: list[httpx.Response] = []

        def execute() -> None:
            with httpx.Client(base_url=server.url, timeout=120) as own:
                answer.append(
                    own.post(
                        f"/_plugins/_ml/agents/{agent_id}/_execute", json={"parameters": {"question": "go"}}
                    )
                )

        worker = threading.Thread(target=execute)
        worker.start()
        answered = 0
        while worker.is_alive():
            answered += http.get("/_health").status_code == 200
            time.sleep(0.005)
        worker.join()
    assert answer[0].status_code == 200, answer[0].text
    assert len(chat_server.requests) == 2 and answered >= 10
    assert len(steps) > 1000 and max(steps) < 0.1, sorted(steps)[-5:]


def test_recall_reads_and_searches_run_off_the_event_loop(tmp_path, monkeypatch):
    """context_read and context_search touch the store in a worker thread, never on the loop's."""
    import asyncio

    from ctxmgmt.agents.tools import recall_tools

    store = LocalOffloader(tmp_path)
    ref = store.store_tool_result("s", "line one\nneedle two\n" * 50)
    on_loop: dict[str, bool] = {}
    read, search = LocalOffloader.read, LocalOffloader.search

    def spy(name, real):
        def run(self, *args, **kwargs):
            on_loop[name] = threading.current_thread() is threading.main_thread()
            return real(self, *args, **kwargs)

        return run

    monkeypatch.setattr(LocalOffloader, "read", spy("read", read))
    monkeypatch.setattr(LocalOffloader, "search", spy("search", search))
    tools = {t.name: t for t in recall_tools(store, "s")}

    async def both() -> tuple[str, str]:
        return (
            await tools["context_read"].run({"ref": ref, "limit": 20}),
            await tools["context_search"].run({"pattern": "needle"}),
        )

    got_read, got_search = asyncio.run(both())
    assert "line one" in got_read and "needle" in got_search
    assert on_loop == {"read": False, "search": False}


def test_the_conversation_engine_runs_hooks_and_archive_writes_off_the_event_loop(tmp_path, monkeypatch):
    """Under every adapter, the engine's aprepare runs a manager's apply and its archive's write
    and fsync in worker threads, never on the thread of the framework's event loop."""
    import asyncio

    from ctxmgmt.agents.conversation import Conversation

    seen, loop_thread = spy_threads(monkeypatch)
    definition = {
        "name": "cut",
        "hooks": {
            "post_tool": [
                {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 1000, "offload": True}}
            ]
        },
    }
    conversation = Conversation(definition, offloader=LocalOffloader(tmp_path), session="s")
    calls = many_calls(3, "big")
    record = [
        {"role": "user", "content": "go"},
        calls,
        *({"role": "tool", "tool_call_id": c["id"], "content": "x" * 5000} for c in calls["tool_calls"]),
    ]

    async def main():
        loop_thread.append(threading.current_thread())
        return await conversation.aprepare(record)

    turn = asyncio.run(main())
    (entry,) = [e for e in turn.trace if e["hook"] == "post_tool"]
    assert len(entry["details"]["offloaded"]) == 3
    assert seen == {"apply": {False}, "append": {False}}


def test_a_new_view_of_a_long_record_is_built_off_the_event_loop():
    """The engine translates and counts a record it has not seen (a new view) in a worker
    thread; a record that continues the live view costs its new messages (off the loop too,
    with no manager that awaits a model)."""
    import asyncio

    from ctxmgmt.agents.conversation import Conversation

    threads: list[bool] = []
    loop_thread: list[threading.Thread] = []

    def translate(m):
        threads.append(threading.current_thread() in loop_thread)
        return [m]

    conversation = Conversation(
        {
            "name": "w",
            "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 1000}}]},
        }
    )
    record = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(101)]

    async def main():
        loop_thread.append(threading.current_thread())
        await conversation.aprepare(record, translate=translate)
        cold = list(threads)
        threads.clear()
        await conversation.aprepare([*record, {"role": "assistant", "content": "ok"}], translate=translate)
        return cold

    cold = asyncio.run(main())
    assert len(cold) >= 101 and not any(cold)
    assert threads == [False]


def test_a_hook_of_cpu_work_runs_whole_in_one_worker_thread(monkeypatch):
    """A hook whose managers await nothing with their config (an offline summary) runs its
    managers, the fit step and the checks in one worker thread: one hop off the loop, not
    one per step; a summary by a model is awaited on the loop."""
    import asyncio

    from ctxmgmt import Context, ContextManager, Definition
    from ctxmgmt.hooks import awaits
    from ctxmgmt.managers.autocompact import AutoCompactManager
    from ctxmgmt.managers.summarization import SummarizationManager

    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):
        hops.append(getattr(func, "__name__", type(func).__name__))
        return await to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    offline = {"type": "SummarizationManager", "config": {"preserve_recent_messages": 2}}
    definition = Definition.from_dict(
        {
            "name": "cpu",
            "hooks": {"pre_llm": [offline, {"type": "SlidingWindowManager", "config": {"max_messages": 6}}]},
        }
    )
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} of src/m{i}.py"}
        for i in range(40)
    ]
    context = Context("sys", messages, (), "gpt-4o", 100_000)
    loop_thread: list[threading.Thread] = []
    seen: set[bool] = set()
    apply = SummarizationManager.apply

    def spy(self, context, runtime):
        seen.add(threading.current_thread() in loop_thread)
        return apply(self, context, runtime)

    monkeypatch.setattr(SummarizationManager, "apply", spy)

    async def main():
        loop_thread.append(threading.current_thread())
        return await definition.aapply("pre_llm", context)

    built: list[bool] = []
    init = SummarizationManager.__init__

    def spy_init(self, config):
        built.append(threading.current_thread() in loop_thread)
        init(self, config)

    monkeypatch.setattr(SummarizationManager, "__init__", spy_init)
    result = asyncio.run(main())
    # The first run builds the managers off the loop to ask whether any awaits; then one hop.
    assert hops == ["ask", "apply"] and seen == {False} and built == [False]
    hops.clear()
    asyncio.run(main())
    assert hops == ["apply"] and built == [False]
    assert len(result.context.messages) < len(messages)
    assert [t["type"] for t in result.trace if t["activated"]][:1] == ["SummarizationManager"]

    with_model = SummarizationManager({**offline["config"], "summarization_model_id": "m"})
    assert not awaits(SummarizationManager(offline["config"])) and awaits(with_model)
    remote = AutoCompactManager({"summarization": {"summarization_model_id": "m"}})
    assert not awaits(AutoCompactManager({})) and awaits(remote)

    class Plain(ContextManager):
        type_name = "Plain"
        config_schema = {"type": "object"}

        def apply(self, context, runtime):
            return context

    class Remote(Plain):
        async def aapply(self, context, runtime):
            return context

    class Duck:
        async def aapply(self, context, runtime):
            return context

    class OwnService(SummarizationManager):  # a plugin's summary by its own service
        async def aapply(self, context, runtime):
            return context

    class OwnCompact(AutoCompactManager):
        async def aapply(self, context, runtime):
            return context

    assert not awaits(Plain({})) and awaits(Remote({})) and awaits(Duck())
    assert awaits(OwnService(offline["config"])) and awaits(OwnCompact({}))
