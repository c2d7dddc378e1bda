"""An OpenAI Agents SDK agent whose context ctxmgmt manages (pip install 'ctxmgmt[openai-agents]').

Runs offline with the SDK's own ScriptedModel, which calls a log-reading tool three times and
answers. For a real model, drop ``model=`` (the SDK's default OpenAI model) and set
OPENAI_API_KEY.
"""

import asyncio
import logging

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from ctxmgmt.adapters.openai_agents import ContextManagementFilter


@function_tool
def read_log(name: str) -> str:
    """Read a log file."""
    return f"== {name} ==\n" + "2026-11-24 ERROR connection refused (db:5432)\n" * 2000


model = ScriptedModel(
    [
        *[[function_call("read_log", {"name": f"app-{k}.log"}, call_id=f"call_{k}")] for k in range(3)],
        [assistant_message("The database refuses connections.")],
    ]
)
agent = Agent(name="oncall", instructions="You find why services fail.", model=model, tools=[read_log])

# Cut tool outputs to 2,000 characters as they arrive; keep the newest 4 items past 6.
definition = {
    "name": "agents-demo",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 2000}}],
        "pre_llm": [
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 4},
                "activation": {"message_count_exceed": 6},
            }
        ],
    },
}
managed = ContextManagementFilter(definition, context_window=128_000)


async def main() -> None:
    set_tracing_disabled(True)  # offline: the SDK would export its traces to OpenAI
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    result = await Runner.run(
        agent,
        "Why does checkout fail?",
        run_config=RunConfig(call_model_input_filter=managed),
        hooks=managed.hooks,
    )
    for n, call in enumerate(model.calls, 1):
        kinds = [i.get("type") or i.get("role") for i in call.input]
        print(f"model call {n} sees {len(call.input)} items: {', '.join(kinds)}")
    print("answer:", result.final_output)
    print("history keeps", len(result.to_input_list()), "items, whole")


asyncio.run(main())
