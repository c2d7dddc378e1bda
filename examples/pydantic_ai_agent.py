"""A pydantic-ai agent whose context ctxmgmt manages (pip install 'ctxmgmt[pydantic-ai]').

Runs offline with pydantic-ai's own FunctionModel, which calls a log-reading tool three times
and answers. For a real model, pass ``"openai:gpt-4.1"`` (or any model name) to ``Agent``.
"""

import asyncio
import logging

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor

calls: list[int] = []


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Three tool calls, then the answer; prints what each request carried."""
    calls.append(len(messages))
    print(f"model call {len(calls)} sees {len(messages)} messages")
    if len(calls) <= 3:
        return ModelResponse(
            parts=[
                ToolCallPart("read_log", {"name": f"app-{len(calls)}.log"}, tool_call_id=f"call_{len(calls)}")
            ]
        )
    return ModelResponse(parts=[TextPart("The database refuses connections.")])


# Cut tool outputs to 2,000 characters as they arrive; keep the newest 4 messages past 6.
definition = {
    "name": "pydantic-ai-demo",
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
processor = ContextManagementProcessor(definition, context_window=128_000)
agent = Agent(
    FunctionModel(scripted),
    instructions="You find why services fail.",
    capabilities=[ProcessHistory(processor)],
)


@agent.tool_plain
def read_log(name: str) -> str:
    """Read a log file."""
    return f"== {name} ==\n" + "2026-11-24 ERROR connection refused (db:5432)\n" * 2000


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    result = await agent.run("Why does checkout fail?")
    print("answer:", result.output)
    print("managed history:", len(result.all_messages()), "messages")


asyncio.run(main())
