"""Agents unchanged but for their base URL: LangChain's ChatOpenAI and ChatAnthropic, and the
OpenAI Agents SDK with its own client, through the proxy."""

from __future__ import annotations

import asyncio

import pytest

from .test_proxy import SYSTEM, TASK
from .upstream import Reply


@pytest.mark.parametrize("stream", [False, True])
def test_langchain_chat_openai_with_a_base_url(proxy, upstream, stream):
    """ChatOpenAI pointed at the proxy answers as the upstream did, streamed or not."""
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="gpt-test", base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-lc", max_retries=0
    )
    upstream.replies.append(Reply("from upstream"))
    prompt = [("system", SYSTEM), ("human", TASK)]
    text = "".join(c.content for c in model.stream(prompt)) if stream else model.invoke(prompt).content
    assert text.strip() == "from upstream"
    assert upstream.seen[-1].body["messages"][0] == {"role": "system", "content": SYSTEM}


def test_langchain_chat_anthropic_with_a_base_url(proxy, upstream):
    """ChatAnthropic pointed at the proxy, with a tool call back."""
    from langchain_anthropic import ChatAnthropic

    model = ChatAnthropic(
        model="claude-test", base_url=f"{proxy.url}/proxy/default", api_key="sk-ant", max_retries=0
    )
    upstream.replies.append(Reply(calls=[("read_file", {"path": "src/app/parser.py"})]))
    answer = model.invoke([("system", SYSTEM), ("human", TASK)])
    assert answer.tool_calls[0]["args"] == {"path": "src/app/parser.py"}
    assert upstream.seen[-1].body["system"] == SYSTEM


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_agents_sdk_with_its_own_client(proxy, upstream, api):
    """An Agents SDK agent whose client's base URL is the proxy runs a tool loop through it."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-agents", max_retries=0)
    kind = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    ran = []

    @function_tool
    def run_tests(path: str) -> str:
        """Run the tests at a path."""
        ran.append(path)
        return "1 failed: tests/test_parser.py::test_quotes - AssertionError"

    agent = Agent(
        name="coder",
        instructions=SYSTEM,
        tools=[run_tests],
        model=kind(model="gpt-test", openai_client=client),
    )
    upstream.replies.extend(
        [Reply(calls=[("run_tests", {"path": "tests/test_parser.py"})]), Reply("found it")]
    )

    async def run():  # type: ignore[no-untyped-def]
        async with client:  # its connections closed on the loop that opened them
            return await Runner.run(agent, TASK)

    result = asyncio.run(run())
    assert result.final_output == "found it"
    assert ran == ["tests/test_parser.py"]
    last = upstream.seen[-1]
    assert last.path == ("/v1/chat/completions" if api == "chat" else "/v1/responses")
    assert "AssertionError" in str(last.body["messages" if api == "chat" else "input"])
