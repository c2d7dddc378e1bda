"""Runner benchmark: the loop's own overhead per step, with a 2,000-message memory.

An agent with a three-manager definition continues a 2,000-message conversation
(about 200k tokens). The local chat server answers each LLM call with a tool call,
then a final answer. Time inside the chat client is the LLM round trip; the rest is
the runner's overhead: hooks, tools, memory, bookkeeping. Also measures definition
resolution by name, cached and right after an update.

    python bench/bench_runner.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from typing import Any

from ctxmgmt import ModelConfig, ModelsConfig, Runner, ToolRegistry, register_tool
from ctxmgmt.llm import ChatClient
from ctxmgmt.store import DefinitionStore, ExecutionStore
from ctxmgmt.testing import ChatServer, make_conversation

STEPS = 20
RUNS = 7
DEFINITION = {
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 2000}}],
        "pre_llm": [
            {"type": "SummarizationManager", "activation": {"tokens_exceed": 10_000_000}},
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 5000},
                "activation": {"message_count_exceed": 10_000},
            },
        ],
    }
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, ChatServer() as server:
        store = DefinitionStore.open(f"sqlite:///{tmp}/bench.db")
        store.create("bench", DEFINITION)
        models = ModelsConfig(
            {"chat": ModelConfig(id="chat", base_url=server.base_url, model="gpt-4", timeout=30)}
        )
        tools = ToolRegistry(group="ctxmgmt.bench-none")
        register_tool("lookup", lambda **kw: "result " * 200, registry=tools)
        runner = Runner(store, models, tools)
        agent_id = runner.register(
            {
                "name": "bench",
                "llm": {"model_id": "chat", "parameters": {"max_iteration": 50}},
                "tools": [{"type": "lookup"}],
                "context_management_name": "bench",
            }
        )
        memory_id = runner.memory.create(agent_id)
        runner.memory.append(
            memory_id, make_conversation(2000, seed=1, tool_output_words=120), {}, expected_length=0
        )

        llm_time: list[float] = []
        original = ChatClient.acomplete

        async def timed(self: ChatClient, messages: list[dict[str, Any]], **params: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await original(self, messages, **params)
            finally:
                llm_time.append(time.perf_counter() - t0)

        ChatClient.acomplete = timed  # type: ignore[method-assign]
        record_time: list[float] = []
        save = ExecutionStore.save

        def timed_save(self: ExecutionStore, record: Any) -> None:
            t0 = time.perf_counter()
            try:
                save(self, record)
            finally:
                record_time.append(time.perf_counter() - t0)

        ExecutionStore.save = timed_save  # type: ignore[method-assign]
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})},
                }
            ],
        }
        # Warm-up execution: the stored memory gets its managed view, and its texts' counts
        # are memoised (by content: every execution loads the memory as new objects).
        server.reply("warm")
        runner.execute(agent_id, "warm up", memory_id=memory_id)
        totals, overheads, trips = [], [], []
        for _ in range(RUNS):
            llm_time.clear()
            for _ in range(STEPS - 1):
                server.reply(call)
            server.reply("done")
            t0 = time.perf_counter()
            result = runner.execute(agent_id, "go", memory_id=memory_id)
            total = time.perf_counter() - t0
            assert result.finished and len(llm_time) == STEPS
            totals.append(total)
            overheads.append((total - sum(llm_time)) / STEPS)
            trips.append(statistics.median(llm_time))
        overhead, trip = statistics.median(overheads), statistics.median(trips)
        print(
            f"memory: {2000 + 2} messages before the first run; {STEPS} loop steps (LLM call + tool + hooks) "
            f"per execution; medians of {RUNS} executions"
        )
        print(f"LLM round trip to the local server (median)  {trip * 1e3:8.2f} ms")
        print(
            f"runner overhead per step (all but the LLM)    {overhead * 1e3:8.2f} ms   "
            f"{overhead / trip:5.2f}x the round trip"
        )
        whole = statistics.median(totals)
        print(f"whole execution: {whole * 1e3:.0f} ms (load memory, {STEPS} steps, save memory and record)")
        stored = statistics.median(record_time)
        print(
            f"storing the execution record (one INSERT)   {stored * 1e3:8.2f} ms   "
            f"{stored / whole * 100:5.1f}% of the execution"
        )

        def median_us(fn: Any, n: int = 200) -> float:
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t)
            return statistics.median(samples) * 1e6

        cached = median_us(lambda: store.resolve("bench"))

        def after_update() -> None:
            store.replace("bench", DEFINITION)
            t = time.perf_counter()
            store.resolve("bench")
            after.append(time.perf_counter() - t)

        after: list[float] = []
        for _ in range(50):
            after_update()
        updated = statistics.median(after) * 1e6
        print(
            f"resolve by name: cached {cached:6.0f} us; right after an update {updated:6.0f} us "
            f"({updated / cached:.1f}x cached)"
        )
        store.engine.dispose()


if __name__ == "__main__":
    main()
