"""The runner on Anthropic's Messages API, against a local Anthropic-compatible server."""

import itertools
import json

import pytest

from ctxmgmt import LLMError, ModelConfig, ModelsConfig
from ctxmgmt.agents.runner import Runner
from ctxmgmt.cache import Pricing
from ctxmgmt.formats.anthropic import MAX_BREAKPOINTS, request
from ctxmgmt.llm import ChatClient
from ctxmgmt.messages import SUMMARY_PREFIX
from ctxmgmt.store import ExecutionStore
from ctxmgmt.testing import ChatServer
from tests.conftest import tool_call

KEY_ENV = "CTXMGMT_TEST_ANTHROPIC_KEY"
PRICES = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
SUMMARISE_EARLY = {
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 3000}}],
        "pre_llm": [
            {
                "type": "SummarizationManager",
                "config": {"preserve_recent_messages": 2},
                "activation": {"tokens_exceed": 800},
            }
        ],
    }
}


@pytest.fixture
def anthropic_server():
    with ChatServer(provider="anthropic") as server:
        yield server


@pytest.fixture
def claude(anthropic_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-ant-test")
    return ModelConfig(
        id="claude",
        provider="anthropic",
        base_url=anthropic_server.base_url,
        model="claude-sonnet-4-5",
        api_key_env=KEY_ENV,
        context_window=16_000,
        max_tokens=1024,
        timeout=2.0,
        max_retries=1,
        pricing=PRICES,
    )


def breakpoints(body) -> list[dict]:
    """Every block of a request body that carries cache_control."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            if "cache_control" in value:
                found.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(body)
    return found


def test_the_runner_calls_the_messages_api_with_breakpoints_at_the_stable_prefix(
    store, tools, claude, anthropic_server
):
    """provider: anthropic: POST {base_url}/messages with x-api-key, anthropic-version and the
    model's max_tokens; tools and system in Anthropic's shape; cache_control on the last tool,
    the system prompt, the summary and the last message, never more than four; the answer's
    tool_use blocks run as tool calls; the cache figures it reports are in the usage and the record."""
    store.create("early", SUMMARISE_EARLY)
    runner = Runner(store, ModelsConfig({"claude": claude}), tools)
    agent_id = runner.register(
        {
            "name": "claude-agent",
            "llm": {"model_id": "claude"},
            "tools": [{"type": "big"}, {"type": "echo"}],
            "system_prompt": "Be brief.",
            "context_management_name": "early",
        }
    )

    def usage(request):  # Anthropic's report: its input apart from its cache reads and writes
        total = len(json.dumps(request["messages"])) // 4 + 60
        read, write = total // 2, total // 4
        return {
            "input_tokens": total - read - write,
            "output_tokens": 12,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }

    anthropic_server.respond(lambda _: tool_call(("big", {"size": 6000})), usage=usage)
    anthropic_server.respond(lambda _: tool_call(("echo", {"x": 1}), ("echo", {"x": 2})), usage=usage)
    anthropic_server.respond(lambda _: "All done.", usage=usage)
    result = runner.execute(agent_id, "Read the big log, then echo twice.")
    assert (result.response, result.finished) == ("All done.", True)

    assert [path for path, _ in anthropic_server.received] == ["/v1/messages"] * 3
    for _, headers in anthropic_server.received:
        assert headers["x-api-key"] == "sk-ant-test" and headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in headers
    first, second, third = anthropic_server.requests
    assert first["model"] == "claude-sonnet-4-5" and first["max_tokens"] == 1024
    assert first["system"][-1]["text"] == "Be brief."
    assert [t["name"] for t in first["tools"]] == ["big", "echo"] and "input_schema" in first["tools"][0]
    for body in (first, second, third):
        marks = breakpoints(body)
        assert 0 < len(marks) <= MAX_BREAKPOINTS
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" in body["messages"][-1]["content"][-1]  # the conversation so far
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    # The third request holds a summary (the log pushed it over 800 tokens): marked too.
    summary = [
        m
        for m in third["messages"]
        if any(b.get("text", "").startswith(SUMMARY_PREFIX) for b in m["content"])
    ]
    assert summary and "cache_control" in summary[0]["content"][-1]
    assert len(breakpoints(third)) == 4
    # tool_use answered by tool_result blocks in the next user message, parallel calls together.
    calls = next(
        m
        for m in third["messages"]
        if any(b["type"] == "tool_use" and b["input"] == {"x": 2} for b in m["content"])
    )
    after = third["messages"][third["messages"].index(calls) + 1]
    assert [b["type"] for b in after["content"]] == ["tool_result", "tool_result"]

    reports = [usage(body) for body in anthropic_server.requests]
    assert [u["cached_tokens"] for u in result.usage] == [r["cache_read_input_tokens"] for r in reports]
    assert [u["cache_write_tokens"] for u in result.usage] == [
        r["cache_creation_input_tokens"] for r in reports
    ]
    assert [u["reported"] for u in result.usage] == [
        r["input_tokens"] + r["cache_read_input_tokens"] + r["cache_creation_input_tokens"] for r in reports
    ]
    per_call = [
        (
            r["input_tokens"] * 3.0
            + r["cache_read_input_tokens"] * 0.3
            + r["cache_creation_input_tokens"] * 3.75
            + 12 * 15.0
        )
        / 1e6
        for r in reports
    ]
    assert result.cache["estimated_cost"] == pytest.approx(sum(per_call))
    record = ExecutionStore(store.engine).get(result.execution_id)
    assert [c["cached_tokens"] for c in record["calls"]] == [u["cached_tokens"] for u in result.usage]
    assert record["estimated_cost"] == pytest.approx(sum(per_call))


def test_an_anthropic_error_is_an_llm_error_with_its_message(claude, anthropic_server):
    """Anthropic's error body ({"type": "error", "error": {...}}) gives the LLMError's reason."""
    anthropic_server.fail(400, "max_tokens: must be at most 8192")
    with pytest.raises(LLMError, match="must be at most 8192"):
        ChatClient(claude).complete([{"role": "user", "content": "hi"}])


def test_an_answer_that_is_not_a_messages_answer_is_an_llm_error(claude, anthropic_server):
    """A body without content blocks is a clear error, not a KeyError."""
    anthropic_server.raw(json.dumps({"choices": []}).encode())
    with pytest.raises(LLMError, match="not a Messages API answer"):
        ChatClient(claude).complete([{"role": "user", "content": "hi"}])


def test_max_tokens_defaults_and_a_missing_key_is_named(anthropic_server, monkeypatch):
    """Without max_tokens the documented default (4096) is sent; an unset api_key_env is named."""
    config = ModelConfig(
        id="c", provider="anthropic", base_url=anthropic_server.base_url, model="m", timeout=2.0
    )
    anthropic_server.reply("hi")
    assert ChatClient(config).complete([{"role": "user", "content": "hi"}]).content == "hi"
    assert anthropic_server.requests[-1]["max_tokens"] == 4096
    monkeypatch.delenv(KEY_ENV, raising=False)
    keyed = ModelConfig(
        id="c", provider="anthropic", base_url=anthropic_server.base_url, model="m", api_key_env=KEY_ENV
    )
    with pytest.raises(LLMError, match=KEY_ENV):
        ChatClient(keyed).complete([{"role": "user", "content": "hi"}])


def test_a_request_converts_tool_results_and_a_following_user_message_into_one_turn():
    """Tool results go first in the user turn after their call, the user's text after them;
    system messages become the system blocks; at most four breakpoints."""
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "looking",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"q": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "found"},
        {"role": "user", "content": "and then?"},
    ]
    body = request(
        messages,
        [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        stable=1,
    )
    assert body["system"] == [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "looking"},
        {"type": "tool_use", "id": "a", "name": "f", "input": {"q": 1}},
    ]
    last = body["messages"][2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"] and last[-1]["cache_control"]
    assert len(breakpoints(body)) == 4
    assert breakpoints(request(messages, [], breakpoints=False)) == []


def test_the_models_configuration_reads_provider_max_tokens_and_pricing(tmp_path):
    """provider, max_tokens and pricing load from YAML; cache prices default to the input
    price; a bad price is a ConfigError with its pointer."""
    from ctxmgmt import ConfigError, load_models

    path = tmp_path / "config.yaml"
    path.write_text(
        "models:\n"
        "  claude:\n"
        "    provider: anthropic\n"
        "    base_url: https://api.anthropic.com/v1\n"
        "    model: claude-sonnet-4-5\n"
        "    max_tokens: 8192\n"
        "    pricing: {input: 3, output: 15, cache_read: 0.3}\n"
    )
    claude = load_models(path)["claude"]
    assert (claude.provider, claude.max_tokens, claude.anthropic_version) == ("anthropic", 8192, "2023-06-01")
    assert claude.pricing == Pricing(input=3.0, output=15.0, cache_read=0.3)
    assert (claude.pricing.read, claude.pricing.write) == (0.3, 3.0)
    path.write_text(
        "models:\n  c:\n    provider: bedrock\n    base_url: http://x\n    model: m\n"
        "    pricing: {input: -1}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_models(path)
    pointers = {p.pointer for p in caught.value.problems}
    assert pointers == {"/models/c/provider", "/models/c/pricing/input"}


def test_the_test_server_refuses_what_the_messages_api_refuses(claude, anthropic_server):
    """An assistant turn first, or more than four breakpoints: a 400 naming the rule."""
    with pytest.raises(LLMError, match="400"):
        ChatClient(claude).complete(
            [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "q"}]
        )
    assert anthropic_server.requests[-1]["messages"][0]["role"] == "assistant"


def test_managers_keep_a_user_turn_first_for_an_anthropic_model(store, tools, claude, anthropic_server):
    """With provider: anthropic the runner asks the managers for a user message first: a window
    of two messages without the task pinned still starts every request with a user turn."""
    store.create(
        "tiny",
        {
            "hooks": {
                "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 2, "pin": "none"}}]
            }
        },
    )
    runner = Runner(store, ModelsConfig({"claude": claude}), tools)
    agent_id = runner.register(
        {
            "name": "w",
            "llm": {"model_id": "claude"},
            "tools": [{"type": "echo"}],
            "context_management_name": "tiny",
        }
    )
    for i in range(3):
        anthropic_server.reply(tool_call(("echo", {"i": i})))
    anthropic_server.reply("done")
    assert runner.execute(agent_id, "Echo three times.").response == "done"
    assert all(body["messages"][0]["role"] == "user" for body in anthropic_server.requests)


def test_an_image_in_a_tool_result_reaches_the_messages_api():
    """A tool result with an image part becomes a tool_result with text and image blocks."""
    png = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "shot", "arguments": "{}"}}],
        },
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": [
                {"type": "text", "text": "the page"},
                {"type": "image_url", "image_url": {"url": png}},
            ],
        },
    ]
    (result,) = request(messages, breakpoints=False)["messages"][2]["content"]
    assert [b["type"] for b in result["content"]] == ["text", "image"]
    assert result["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
