"""The OpenAI Agents SDK filter in a real Runner tool loop, with the SDK's own ScriptedModel."""

import asyncio
import json

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_trace_processors, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import TracingProcessor

from ctxmgmt.adapters.openai_agents import ContextManagementFilter
from ctxmgmt.testing import assert_valid_messages

DEFINITION = {
    "name": "oa",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}],
        "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4}}],
    },
}


class Spans(TracingProcessor):
    """Keeps the spans the SDK would export, so nothing leaves the machine."""

    def __init__(self):
        self.spans = []

    def on_trace_start(self, trace):
        pass

    def on_trace_end(self, trace):
        pass

    def on_span_start(self, span):
        pass

    def on_span_end(self, span):
        self.spans.append(span.export())

    def shutdown(self):
        pass

    def force_flush(self):
        pass


@function_tool
def read_log(name: str) -> str:
    """Read a log file."""
    return f"{name}: " + "ERROR connection refused\n" * 300


def steps(turn: int) -> list:
    calls = [function_call("read_log", {"name": f"t{turn}_{k}"}, call_id=f"c{turn}_{k}") for k in range(3)]
    return [[calls[0], calls[1]], [calls[2]], [assistant_message(f"answer {turn}")]]


def test_the_filter_manages_every_model_call_and_the_history_stays_whole():
    """Each model call gets valid, managed Responses items (outputs cut, old turns windowed,
    the task pinned); the SDK's history keeps every output whole; the trace is a span."""
    spans = Spans()
    set_trace_processors([spans])
    set_tracing_disabled(False)  # another test (tests/proxy/test_clients.py) may have turned it off
    model = ScriptedModel([*steps(1), *steps(2)])
    agent = Agent(name="logs", instructions="You read logs.", model=model, tools=[read_log])
    managed = ContextManagementFilter(DEFINITION)
    config = RunConfig(call_model_input_filter=managed)

    async def run():
        first = await Runner.run(agent, "Why does the login fail?", run_config=config, hooks=managed.hooks)
        history = [*first.to_input_list(), {"role": "user", "content": "And the signup?"}]
        return await Runner.run(agent, history, run_config=config, hooks=managed.hooks)

    second = asyncio.run(run())
    assert len(model.calls) == 6
    for call in model.calls:
        assert_valid_messages(call.input, format="openai_responses")
        outputs = [i for i in call.input if i.get("type") == "function_call_output"]
        assert all(len(i["output"]) <= 400 for i in outputs)
    assert model.calls[-1].input[0]["content"] == "And the signup?"
    history = [i for i in second.to_input_list() if i.get("type") == "function_call_output"]
    assert len(history) == 6 and all(len(i["output"]) > 6000 for i in history)
    # The scripted model reports no usage: each call is recorded without a report, and nothing
    # is calibrated.
    assert len(managed.hooks.usage) == 6 and all(u["reported"] is None for u in managed.hooks.usage)
    assert managed.conversation.calibration.to_dict() == {}
    fired = [s for s in spans.spans if s["span_data"].get("name") == "ctxmgmt"]
    assert len(fired) == 6 and any(
        e["type"] == "SlidingWindowManager" for s in fired for e in s["span_data"]["data"]["trace"]
    )
    assert json.dumps(managed.saved)  # JSON-able, to persist


def test_a_new_filter_continues_from_a_saved_view():
    """What one process saved, another loads: the next call continues from the managed view,
    so results cut before are not cut again (post_tool runs on the new ones only)."""
    model = ScriptedModel([*steps(1)])
    agent = Agent(name="logs", instructions="You read logs.", model=model, tools=[read_log])
    first = ContextManagementFilter(DEFINITION)
    result = asyncio.run(Runner.run(agent, "Why?", run_config=RunConfig(call_model_input_filter=first)))
    saved = json.loads(json.dumps(first.saved))
    history = [*result.to_input_list(), {"role": "user", "content": "More?"}]
    model.extend([[assistant_message("more")]])
    loaded = ContextManagementFilter(DEFINITION)
    loaded.load(saved)
    asyncio.run(Runner.run(agent, history, run_config=RunConfig(call_model_input_filter=loaded)))
    outputs = [i for i in model.calls[-1].input if i.get("type") == "function_call_output"]
    assert outputs and all(len(i["output"]) <= 400 for i in outputs)  # the view, cut before
    model.extend([[assistant_message("more")]])
    fresh = ContextManagementFilter(DEFINITION)  # nothing loaded: a new view of the history
    asyncio.run(Runner.run(agent, history, run_config=RunConfig(call_model_input_filter=fresh)))
    outputs = [i for i in model.calls[-1].input if i.get("type") == "function_call_output"]
    assert outputs and all(len(i["output"]) > 400 for i in outputs)


def test_reported_usage_calibrates_the_counts():
    """Each response's usage (the SDK's on_llm_end) calibrates the next call's counts."""
    from agents import Usage
    from agents.testing import ModelStep
    from openai.types.responses.response_usage import InputTokensDetails

    def reply(output):
        def respond(call):
            tokens = round(1.3 * len(json.dumps(call.input)) / 4)
            return ModelStep(
                output=output,
                usage=Usage(
                    requests=1,
                    input_tokens=tokens,
                    output_tokens=5,
                    total_tokens=tokens + 5,
                    input_tokens_details=InputTokensDetails(cached_tokens=tokens // 2, cache_write_tokens=3),
                ),
            )

        return ModelStep.respond(respond)

    model = ScriptedModel([reply(step) for step in steps(1)])
    agent = Agent(name="logs", instructions="You read logs.", model=model, tools=[read_log])
    managed = ContextManagementFilter(DEFINITION)
    asyncio.run(
        Runner.run(agent, "Why?", run_config=RunConfig(call_model_input_filter=managed), hooks=managed.hooks)
    )
    assert len(managed.hooks.usage) == len(model.calls)  # every call is recorded, with its report
    # A report far from any tokenizer's count is recorded, and ignored by the calibration.
    plausible = [u for u in managed.hooks.usage if 0.5 <= u["reported"] / u["counted"] <= 3]
    assert len(plausible) >= 2
    assert managed.conversation.calibration.calls(None) == len(plausible)
    # The provider's cached tokens, and the prefix ctxmgmt saw repeated, are in each record.
    assert all(u["cached_tokens"] == u["reported"] // 2 for u in managed.hooks.usage)
    assert all(u["cache_write_tokens"] == 3 for u in managed.hooks.usage)
    assert managed.hooks.usage[-1]["reusable_prefix_tokens"] > 0


@pytest.mark.parametrize("where", ["agent", "run_config"])
def test_the_fit_keeps_room_for_the_reply_limit_the_agent_asks(where):
    """An agent whose model settings (or the run's, handed to the filter too) ask more
    max_tokens than the definition reserves gets requests whose input and that limit
    together fit the window; the run's limit wins over the agent's, as the SDK resolves them."""
    from agents import ModelSettings

    from ctxmgmt import Context, get_counter

    definition = {"name": "fit", "hooks": {"post_memory": [{"type": "SlidingWindowManager", "config": {}}]}}
    model = ScriptedModel([*steps(1)])
    agents_own = ModelSettings(max_tokens=1900 if where == "agent" else 100)
    agent = Agent(
        name="logs", instructions="You read logs.", model=model, tools=[read_log], model_settings=agents_own
    )
    if where == "agent":
        managed = ContextManagementFilter(definition, context_window=4000)
        config = RunConfig(call_model_input_filter=managed)
    else:
        managed = ContextManagementFilter(definition, context_window=4000, max_tokens=1900)
        config = RunConfig(call_model_input_filter=managed, model_settings=ModelSettings(max_tokens=1900))
    asyncio.run(Runner.run(agent, "Why does the login fail?", run_config=config, hooks=managed.hooks))
    counter = get_counter()
    counted = [counter.context(Context(messages=c.input, format="openai_responses"))[0] for c in model.calls]
    assert len(counted) == 3 and all(n + 1900 <= 4000 for n in counted), counted
    assert any(e["type"] == "fit" and e["activated"] for e in managed.last.trace)


def test_the_run_configs_model_is_the_one_counted_for():
    """A model named in RunConfig(model=...), which a filter is not shown, is given to it as
    ContextManagementFilter(model=): the turns are counted for that model (its tokenizer, its
    calibration), not for the agent's; a model that is no name is refused when it is made."""
    from ctxmgmt.errors import ContextError

    definition = {"name": "m", "hooks": {"post_memory": [{"type": "SlidingWindowManager", "config": {}}]}}
    agent = Agent(
        name="logs", instructions="You read logs.", model=ScriptedModel([*steps(1)]), tools=[read_log]
    )
    managed = ContextManagementFilter(definition, context_window=4000, model="gpt-4o")
    config = RunConfig(call_model_input_filter=managed)
    asyncio.run(Runner.run(agent, "Why does the login fail?", run_config=config, hooks=managed.hooks))
    assert managed.last is not None and managed.last.context.model == "gpt-4o"
    with pytest.raises(ContextError, match="/model: must be a model's name"):
        ContextManagementFilter(definition, model=5)
