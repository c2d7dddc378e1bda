"""The provider-compatible proxy, driven by the real openai and anthropic SDKs over real HTTP
(uvicorn) against a recording upstream on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ctxmgmt.api import create_app
from ctxmgmt.api.config import ServerConfig
from ctxmgmt.api.proxy import DEFINITION_HEADER
from ctxmgmt.formats import anthropic as anthropic_format
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.messages import check_messages
from ctxmgmt.store import ExecutionStore

from ..conftest import LiveServer, shipped
from .conftest import models_for, post_text, stored_record
from .upstream import Reply, Upstream, input_tokens

SYSTEM = "You are a careful coding agent. Keep the user's constraints."
TASK = "Fix the failing test in src/app/parser.py; run pytest -x tests/test_parser.py after each change."


def _log_line(i: int) -> str:
    return (
        f"2026-11-25T10:{i % 60:02d}:00 INFO worker-{i % 7} processed batch {i} from /var/data/in/{i}.json ok"
    )


def _tool_output(i: int, lines: int = 120) -> str:
    return "\n".join(_log_line(i * 1000 + j) for j in range(lines))


def test_openai_sdk_chat_unchanged_through_the_proxy(proxy, upstream):
    """The OpenAI SDK with only its base URL changed gets the upstream's answer as it was sent."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-client")
    upstream.replies.append(Reply("the parser is fixed"))
    answer = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    )
    assert answer.choices[0].message.content == "the parser is fixed"
    assert answer.model == "gpt-upstream"
    seen = upstream.seen[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.body["model"] == "gpt-upstream"
    assert seen.headers["authorization"] == "Bearer sk-client"  # no key configured: the client's


def test_an_agent_that_adds_a_reminder_every_turn_keeps_being_answered(proxy, upstream):
    """An agent that adds a system reminder every turn, through the proxy at a 16k window:
    once the reminders alone pass the window, the oldest go (it was a 400 "cannot fit" for
    every request from then on); the system prompt and the newest reminder go upstream."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-client")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(150):
        todo = f"<reminder> turn {i}: time 12:{i % 60:02d}; todo: " + "item " * 60 + "</reminder>"
        messages += [{"role": "system", "content": todo}]
        messages.append({"role": "user", "content": f"question {i} " + "w " * 50})
        messages.append({"role": "assistant", "content": f"answer {i} " + "w " * 50})
    messages.append({"role": "user", "content": "final question"})
    upstream.replies.append(Reply("answered"))
    answer = client.chat.completions.create(model="gpt-test", messages=messages)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "answered"
    sent = upstream.seen[-1].body["messages"]
    assert sent[0] == messages[0] and messages[-4] in sent and sent[-1] == messages[-1]
    assert sum(1 for m in sent if m["role"] == "system") < 150
    assert input_tokens(upstream.seen[-1].body) + 4_000 <= 16_000


def test_openais_count_and_compaction_go_upstream_as_sent(proxy, upstream):
    """The OpenAI SDK's ``responses.input_tokens.count`` and ``responses.compact`` (Codex
    compacts so) reach the model's upstream as the client sent them, the upstream's model
    written in, and come back as the upstream answered; nothing is recorded."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-client")
    items = [{"role": "user", "content": TASK}, {"role": "assistant", "content": "on it"}]
    count = client.responses.input_tokens.count(model="gpt-test", input=items)
    assert count.input_tokens == input_tokens({"input": items})
    assert upstream.seen[-1].path == "/v1/responses/input_tokens"
    compacted = client.responses.compact(model="gpt-test", input=items, instructions="terse")
    seen = upstream.seen[-1]
    assert seen.path == "/v1/responses/compact" and seen.headers["authorization"] == "Bearer sk-client"
    assert seen.body == {"model": "gpt-upstream", "input": items, "instructions": "terse"}
    assert len(compacted.output) == 2 and compacted.output[-1].type == "compaction"


def test_a_background_response_is_refused_saying_why(proxy, upstream):
    """A background response is made upstream after its request, where the proxy could not
    manage it: a 400 that says so, nothing sent."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-client", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="/background: a background response is made upstream"):
        client.responses.create(model="gpt-test", input=TASK, background=True)
    assert upstream.seen == []


def test_what_openai_keeps_by_id_goes_to_its_upstream_as_asked(proxy, upstream):
    """The SDK's calls on what OpenAI keeps (a stored response, its input items, a cancel, a
    delete; conversations; stored chat completions) go to the one OpenAI upstream with their
    method, path, query, body and the client's key, and its answers come back (they were a 404)."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-client", max_retries=0)
    assert client.responses.retrieve("resp_1", include=["reasoning.encrypted_content"]).status == "completed"
    client.responses.input_items.list("resp_1", limit=5)
    assert client.responses.cancel("resp_1").status == "cancelled"
    client.responses.delete("resp_1")
    made = client.conversations.create(items=[{"type": "message", "role": "user", "content": "hi"}])
    assert made.id == "conv_1"
    assert client.conversations.retrieve("conv_9").id == "conv_9"
    assert client.conversations.delete("conv_9").deleted is True
    client.chat.completions.messages.list("chatcmpl_1")
    asked = [(s.path, s.body) for s in upstream.seen]
    assert asked == [
        ("GET /v1/responses/resp_1?include%5B%5D=reasoning.encrypted_content", {}),
        ("GET /v1/responses/resp_1/input_items?limit=5", {}),
        ("POST /v1/responses/resp_1/cancel", {}),
        ("DELETE /v1/responses/resp_1", {}),
        ("POST /v1/conversations", {"items": [{"type": "message", "role": "user", "content": "hi"}]}),
        ("GET /v1/conversations/conv_9", {}),
        ("DELETE /v1/conversations/conv_9", {}),
        ("GET /v1/chat/completions/chatcmpl_1/messages", {}),
    ]
    assert all(s.headers["authorization"] == "Bearer sk-client" for s in upstream.seen)


def test_what_openai_keeps_goes_where_the_client_says_among_several_upstreams(store, upstream):
    """With two OpenAI upstreams, a request for a kept object names the model of the one that
    keeps it in X-Ctxmgmt-Model (a 400 says so without it, a 404 names an unknown one); a path
    segment that is no id's (``..``) is a 400: nothing goes upstream but the named request."""
    with Upstream() as other:
        models = ModelsConfig.from_dict(
            {
                "models": {
                    "gpt-a": {"base_url": upstream.base_url, "model": "a", "context_window": 16_000},
                    "gpt-b": {"base_url": other.base_url, "model": "b", "context_window": 16_000},
                }
            }
        )
        with LiveServer(create_app(store, models=models)) as server:
            base = f"{server.url}/proxy/default/v1"
            client = openai.OpenAI(base_url=base, api_key="sk-client", max_retries=0)
            with pytest.raises(openai.BadRequestError, match="name one of its models in X-Ctxmgmt-Model"):
                client.responses.retrieve("resp_1")
            with pytest.raises(openai.NotFoundError, match="'gpt-z' is not an openai model"):
                client.responses.retrieve("resp_1", extra_headers={"X-Ctxmgmt-Model": "gpt-z"})
            got = client.responses.retrieve("resp_7", extra_headers={"X-Ctxmgmt-Model": "gpt-b"})
            assert got.id == "resp_7"
            for bad in ("%2E%2E/%2E%2E/admin", "resp_1%2F%2E%2E", "a%20b"):
                answer = httpx.get(f"{base}/responses/{bad}", headers={"X-Ctxmgmt-Model": "gpt-a"})
                assert answer.status_code == 400, answer.text
                assert "an id is 1-200 of" in answer.json()["error"]["message"]
            # A definition may be named v1 (/proxy/v1/v1/...): the path is the route's, not a split.
            store.seed("v1", shipped("default"))
            answer = httpx.get(
                f"{server.url}/proxy/v1/v1/responses/resp_8/", headers={"X-Ctxmgmt-Model": "gpt-b"}
            )
            assert answer.status_code == 200 and answer.json()["id"] == "resp_8", answer.text
        assert [s.path for s in other.seen] == ["GET /v1/responses/resp_7", "GET /v1/responses/resp_8"]
        assert upstream.seen == []


@pytest.mark.parametrize("definition", ["default", "cache-aware"])
def test_the_definition_manages_an_80_step_tool_loop_at_16k(proxy, upstream, definition):
    """An 80-step tool loop at a 16k window: every upstream request fits, is valid, keeps the
    system prompt and the task, and the client receives exactly what the upstream sent; with
    cache-aware, the median request shares at least half of itself with the one before."""
    from ctxmgmt import Context
    from ctxmgmt.tokens import get_counter

    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/{definition}/v1", api_key="sk-client")
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    counter = get_counter("gpt-4o")
    for step in range(80):
        upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/data/in/{step}.log"})]))
        raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=messages)
        assert raw.http_response.content == upstream.sent[-1]
        answer = raw.parse()
        call = answer.choices[0].message.tool_calls[0]
        messages.append(answer.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": _tool_output(step)})
        sent = upstream.seen[-1].body["messages"]
        assert check_messages(sent) == []
        assert sent[0] == {"role": "system", "content": SYSTEM}
        assert any(m.get("content") == TASK for m in sent)
        assert counter.context(Context(messages=sent))[0] <= 16_000
    assert len(messages) > 160
    shares = []
    for before, after in zip(upstream.seen, upstream.seen[1:], strict=False):
        a, b = before.raw, after.raw
        common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        shares.append(common / len(b))
    if definition == "cache-aware":
        assert sorted(shares)[len(shares) // 2] >= 0.5


@pytest.mark.parametrize(
    ("definition", "reminders"),
    [
        ("default", False),
        ("cache-aware", False),
        ("default", True),
        ("tool-heavy", True),
        ("long-conversation", True),
        ("long-running-agent", True),
    ],
)
def test_an_anthropic_tool_loop_with_thinking_keeps_opening_with_its_thinking(
    store, proxy, upstream, definition, reminders
):
    """A 60-step Anthropic tool loop with thinking on, the model thinking at the loop's start only
    (not interleaved), far over a 16k window: every upstream request is one Anthropic takes (the
    test upstream refuses, as Anthropic does, a final turn that does not open with thinking).
    With an agent's reminder beside each step's results (Claude Code's): a reminder whose
    results were removed goes into the results message before it, where it continues the turn
    (sent as a user message of its own, the test upstream refused it as a new turn that opened
    without thinking)."""
    store.seed(definition, shipped(definition))
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/{definition}", api_key="k")
    thinking = {"type": "enabled", "budget_tokens": 1024}
    messages: list[dict] = [{"role": "user", "content": TASK}]
    for step in range(60):
        upstream.replies.append(
            Reply(thinking=step == 0, calls=[("bash", {"cmd": f"cat /var/data/in/{step}.log"})])
        )
        answer = client.messages.create(
            model="claude-test", max_tokens=2048, system=SYSTEM, messages=messages, thinking=thinking
        )
        messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]}
        )
        call = answer.content[-1]
        result = {"type": "tool_result", "tool_use_id": call.id, "content": _tool_output(step)}
        reminder = {"type": "text", "text": f"<system-reminder>step {step} of the plan</system-reminder>"}
        messages.append({"role": "user", "content": [result, reminder] if reminders else [result]})
        sent = upstream.seen[-1].body
        assert anthropic_format.check(sent["messages"]) == []
        assert sent["messages"][0]["content"] == TASK and sent["system"] == SYSTEM
        assert input_tokens(sent) <= 16_000
    assert len(upstream.seen) == 60 and len(upstream.seen[-1].body["messages"]) < len(messages) - 1


def _history(api: str, rounds: int) -> list[dict[str, Any]]:
    """A task and ``rounds`` tool calls with long results, in ``api``'s own format."""
    out: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i in range(rounds):
        call, args, result = f"call_{i}", json.dumps({"cmd": f"cat {i}.log"}), _tool_output(i, 40)
        if api == "chat":
            function = {"name": "bash", "arguments": args}
            out.append(
                {"role": "assistant", "tool_calls": [{"id": call, "type": "function", "function": function}]}
            )
            out.append({"role": "tool", "tool_call_id": call, "content": result})
        elif api == "responses":
            out.append({"type": "function_call", "call_id": call, "name": "bash", "arguments": args})
            out.append({"type": "function_call_output", "call_id": call, "output": result})
        else:
            use = {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": f"cat {i}.log"}}
            out.append({"role": "assistant", "content": [use]})
            out.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": result}]}
            )
    return out


LIMIT = 7_000
"""More than the 4,000 the definition reserves of a 16k window, less than half of it."""
_LIMITED = [
    ("chat", "/v1/chat/completions", "gpt-test", "messages", "max_completion_tokens"),
    ("chat", "/v1/chat/completions", "gpt-test", "messages", "max_tokens"),
    ("responses", "/v1/responses", "gpt-test", "input", "max_output_tokens"),
    ("messages", "/v1/messages", "claude-test", "messages", "max_tokens"),
]


@pytest.mark.parametrize(("api", "path", "model", "field", "limit"), _LIMITED)
@pytest.mark.parametrize("definition", ["fit-only", "default"])
def test_the_request_keeps_room_for_the_reply_limit_it_asks(
    proxy, store, upstream, api, path, model, field, limit, definition
):
    """A request asking for a reply longer than the definition reserves (7,000 of a 16k window)
    is managed so that its input and that limit together fit the window, as providers require
    (Anthropic refuses input + max_tokens past the window); the limit goes upstream unchanged."""
    hooks = {"post_memory": [{"type": "SlidingWindowManager", "config": {}}]}
    store.seed("fit-only", {"name": "fit-only", "hooks": hooks})  # pre_llm: the fit step alone
    body: dict[str, Any] = {"model": model, field: _history(api, 40), limit: LIMIT}
    body["system" if api == "messages" else "instructions"] = SYSTEM
    if api == "chat":
        body.pop("instructions")
    upstream.replies.append(Reply("done"))
    r = httpx.post(f"{proxy.url}/proxy/{definition}{path}", json=body, timeout=60)
    assert r.status_code == 200, r.text
    sent = upstream.seen[-1].body
    assert sent[limit] == LIMIT
    assert input_tokens(sent) + LIMIT <= 16_000, input_tokens(sent)


@pytest.mark.parametrize(("api", "path", "model", "field", "limit"), _LIMITED)
@pytest.mark.parametrize("bad", [0, -1, 2.5, "4096", True])
def test_a_reply_limit_that_is_no_count_is_a_400_naming_it(
    proxy, upstream, api, path, model, field, limit, bad
):
    """A reply limit that is not a whole number >= 1 is refused in the provider's shape, naming
    its field, and never goes upstream."""
    body = {"model": model, field: [{"role": "user", "content": TASK}], limit: bad}
    r = httpx.post(f"{proxy.url}/proxy/default{path}", json=body, timeout=30)
    assert r.status_code == 400
    assert f"/{limit}" in r.json()["error"]["message"]
    assert upstream.seen == []


def test_streamed_chat_passes_through_in_order(proxy, upstream):
    """A streamed answer reaches the client event by event, byte for byte."""
    upstream.replies.append(Reply("one two three four"))
    body = {
        "model": "gpt-test",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": TASK}],
    }
    with httpx.stream("POST", f"{proxy.url}/proxy/default/v1/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        got = b"".join(r.iter_bytes())
    assert got == upstream.sent[-1]
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("alpha beta"))
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": TASK}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.split() == ["alpha", "beta"]


def test_anthropic_sdk_messages_streamed_and_not(proxy, upstream):
    """The Anthropic SDK pointed at /proxy/default gets the answer, streamed and not."""
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="sk-ant-client")
    upstream.replies.append(Reply("done"))
    answer = client.messages.create(
        model="claude-test", max_tokens=100, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
    )
    assert answer.content[0].text == "done"
    seen = upstream.seen[-1]
    assert seen.path == "/v1/messages"
    # the client's key, in the header its SDK version uses
    assert "sk-ant-client" in (seen.headers.get("x-api-key"), seen.headers.get("authorization", "")[7:])
    assert seen.body["system"] == SYSTEM and seen.body["model"] == "claude-upstream"
    assert anthropic_format.check(seen.body["messages"]) == []
    upstream.replies.append(Reply(calls=[("read_file", {"path": "src/app/parser.py"})]))
    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": TASK}]
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"path": "src/app/parser.py"}


def test_an_anthropic_request_ending_in_an_empty_assistant_message_goes_upstream_as_sent(proxy, upstream):
    """A request whose final assistant message has no content (a prefill of nothing, which the
    Messages API takes) is proxied, that message as the client sent it."""
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="k")
    upstream.replies.append(Reply("done"))
    messages = [{"role": "user", "content": TASK}, {"role": "assistant", "content": []}]
    answer = client.messages.create(model="claude-test", max_tokens=100, messages=messages)
    assert answer.content[0].text == "done"
    assert upstream.seen[-1].body["messages"] == messages


def test_the_clients_query_goes_upstream(proxy, upstream):
    """The client's query string goes upstream as it sent it: the TypeScript SDK's beta client
    (Claude Code's) sends ``?beta=true``, Azure OpenAI needs ``?api-version=``."""
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="k")
    upstream.replies.append(Reply("done"))
    answer = client.messages.create(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": TASK}],
        extra_query={"beta": "true"},
    )
    assert answer.content[0].text == "done" and upstream.seen[-1].path == "/v1/messages?beta=true"
    openai_client = openai.OpenAI(
        base_url=f"{proxy.url}/proxy/default/v1", api_key="k", default_query={"api-version": "2024-10-21"}
    )
    openai_client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": TASK}])
    assert upstream.seen[-1].path == "/v1/chat/completions?api-version=2024-10-21"


def test_openai_sdk_responses_streamed_and_not(proxy, upstream):
    """The Responses API through the proxy: input items managed, the answer unchanged; a
    string input no manager changed goes upstream as the string it was."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("fine"))
    answer = client.responses.create(model="gpt-test", instructions=SYSTEM, input=TASK)
    assert answer.output_text == "fine"
    assert upstream.seen[-1].path == "/v1/responses"
    assert upstream.seen[-1].body["instructions"] == SYSTEM
    assert upstream.seen[-1].body["input"] == TASK
    upstream.replies.append(Reply("streamed fine"))
    events = list(
        client.responses.create(model="gpt-test", input=[{"role": "user", "content": TASK}], stream=True)
    )
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "streamed fine"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("held", ["previous_response_id", "conversation"])
def test_a_responses_request_continuing_a_conversation_the_upstream_keeps_goes_as_written(
    proxy, upstream, store, stream, held
):
    """With previous_response_id (or conversation) the request holds only its new items, a
    tool's output for a call the upstream remembers: nothing to manage or check. It goes
    upstream as the client wrote it (the model's name written in), the answer comes back, and
    the request is recorded with the upstream's usage."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("sunny"))
    items = [{"type": "function_call_output", "call_id": "call_9", "output": '{"sky": "clear"}'}]
    asked = {"model": "gpt-test", "input": items, held: "resp_1" if held != "conversation" else "conv_1"}
    if stream:
        events = list(client.responses.create(**asked, stream=True))
        assert events[-1].response.output_text == "sunny"
    else:
        assert client.responses.create(**asked).output_text == "sunny"
    sent = upstream.seen[-1].body
    assert sent["input"] == items and sent[held] == asked[held] and sent["model"] == "gpt-upstream"
    record = stored_record(store)
    assert record["status"] == "finished" and record["calls"][0]["unmanaged"] == held
    assert record["calls"][0]["reported"] > 0  # the upstream's usage


LEGACY = [
    {"role": "user", "content": "What time is it?"},
    {"role": "assistant", "content": None, "function_call": {"name": "get_time", "arguments": "{}"}},
    {"role": "function", "name": "get_time", "content": "12:00"},
]
FUNCTIONS = [{"name": "get_time", "parameters": {"type": "object", "properties": {}}}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_request_with_the_deprecated_function_calling_goes_as_written(proxy, upstream, store, stream):
    """A chat request in the deprecated function calling (``functions``, an assistant's
    ``function_call``, a ``function`` message), which OpenAI still takes: it goes upstream as
    the client wrote it (the model's name written in), unmanaged and recorded so; it was a 400
    from the second turn on, which broke the clients that still use it."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("It is noon."))
    asked = {"model": "gpt-test", "messages": LEGACY, "functions": FUNCTIONS}
    if stream:
        chunks = list(client.chat.completions.create(**asked, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() == "It is noon."
    else:
        assert client.chat.completions.create(**asked).choices[0].message.content == "It is noon."
    sent = upstream.seen[-1].body
    assert sent["messages"] == LEGACY and sent["functions"] == FUNCTIONS and sent["model"] == "gpt-upstream"
    record = stored_record(store)
    assert record["status"] == "finished" and record["calls"][0]["unmanaged"] == "function_call"


CUSTOM_TOOLS = [{"type": "custom", "custom": {"name": "apply_patch", "description": "apply a patch"}}]
CUSTOM_CALL = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}


def test_a_chat_request_with_a_custom_tool_call_goes_as_written(proxy, upstream, store):
    """A chat conversation with GPT-5's custom (free-form) tools: the request after the
    model's custom tool call (the call and its result in the history, which OpenAI takes) goes
    upstream as the client wrote it, unmanaged and recorded so; it was a 400."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k", max_retries=0)
    messages = [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": None, "tool_calls": [CUSTOM_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "patched"},
    ]
    upstream.replies.append(Reply("Done."))
    answer = client.chat.completions.create(model="gpt-test", messages=messages, tools=CUSTOM_TOOLS)
    assert answer.choices[0].message.content == "Done."
    sent = upstream.seen[-1].body
    assert sent["messages"] == messages and sent["tools"] == CUSTOM_TOOLS
    record = stored_record(store)
    assert record["status"] == "finished" and record["calls"][0]["unmanaged"] == "custom_tool_call"


def test_the_deprecated_function_calling_is_found_after_a_moved_breakpoint(proxy, upstream, store):
    """A conversation whose next request moves its breakpoint off a message (read past the
    previous body's first messages only) and then calls a function the deprecated way: it is
    found among the messages read anew, and the request goes upstream unmanaged (it was looked
    for past the previous body's end only, missed, and refused with a 400)."""
    first = [
        {"role": "user", "content": "What time is it? " * 150},
        {"role": "assistant", "content": "Let me check."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "please", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    then = [*first[:2], {"role": "user", "content": [{"type": "text", "text": "please"}]}, *LEGACY[1:]]
    for messages in (first, then):
        upstream.replies.append(Reply("ok"))
        text = json.dumps(
            {"model": "gpt-test", "messages": messages, "functions": FUNCTIONS}, separators=(",", ":")
        )
        r = post_text(proxy.url, text)
        assert r.status_code == 200, r.text
    assert upstream.seen[-1].body["messages"] == then


def test_a_chat_request_that_only_mentions_function_call_is_managed(proxy, upstream, store):
    """A message whose text holds "function_call" (a user pasting JSON) is no deprecated call:
    the request is managed as any other."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("ok"))
    said = 'Why does my payload {"function_call": "auto"} fail?'
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": said}])
    assert upstream.seen[-1].body["messages"] == [{"role": "user", "content": said}]
    assert "unmanaged" not in stored_record(store)["calls"][0]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "asked",
    [
        {"prompt": {"id": "pmpt_123", "variables": {"city": "Paris"}}},
        {"previous_response_id": "resp_1"},
    ],
    ids=["stored-prompt", "continued-only"],
)
def test_a_responses_request_without_input_goes_as_written(proxy, upstream, store, stream, asked):
    """A Responses request without ``input`` (a stored prompt's, or one that only continues a
    stored response: ``input`` is optional) holds nothing to manage: it goes upstream as written
    (the model's name written in) and is recorded, where it was a 400 asking for input."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    upstream.replies.append(Reply("from the prompt"))
    if stream:
        events = list(client.responses.create(model="gpt-test", **asked, stream=True))
        assert events[-1].response.output_text == "from the prompt"
    else:
        assert client.responses.create(model="gpt-test", **asked).output_text == "from the prompt"
    sent = upstream.seen[-1].body
    assert sent == {**asked, "model": "gpt-upstream", **({"stream": True} if stream else {})}
    record = stored_record(store)
    assert record["status"] == "finished"
    assert record["calls"][0]["unmanaged"] == next(iter(asked)).replace("prompt", "input")


@pytest.mark.parametrize(
    ("messages", "pointer", "said"),
    [
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "/messages/0/content/0/text",
            "needs a string text",
        ),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": {}}],
            "/messages/1/tool_calls",
            "tool_calls must be a list of calls",
        ),
    ],
    ids=["text-part", "no-calls"],
)
def test_a_chat_error_says_what_is_wrong_and_where_and_nothing_else(proxy, upstream, messages, pointer, said):
    """A chat request the proxy refuses: the message names the pointer and what is wrong,
    OpenAI's ``param`` is that pointer, and
    no advice about pairing tool results comes with a problem that is not one."""
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions",
        json={"model": "gpt-test", "messages": messages},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith(f"{pointer}: ") and said in error["message"]
    assert error["param"] == pointer
    assert "each tool result must follow" not in error["message"]
    assert upstream.seen == []


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("chat/completions", {"stream": None}),
        ("responses", {"stream": None}),
        ("chat/completions", {"tools": None}),
        ("chat/completions", {"calls": None}),
        ("chat/completions", {"calls": []}),
    ],
    ids=["chat-stream", "responses-stream", "tools", "tool-calls-null", "tool-calls-empty"],
)
def test_a_null_the_api_allows_goes_upstream_as_sent(proxy, upstream, path, fields):
    """``stream: null``, ``tools: null`` and an assistant message's ``tool_calls`` of null or []
    (as OpenAI-compatible servers answer and clients send back) mean none: the request goes
    upstream as the client sent it, not refused."""
    user = {"role": "user", "content": "x"}
    said = (
        {"role": "assistant", "content": "hi", "tool_calls": fields.pop("calls")}
        if "calls" in fields
        else None
    )
    messages = [user, said, user] if said is not None else [user]
    body = {"model": "gpt-test", "input" if path == "responses" else "messages": messages, **fields}
    r = httpx.post(f"{proxy.url}/proxy/default/v1/{path}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert upstream.seen[-1].body == {**body, "model": upstream.seen[-1].body["model"]}


def test_a_chat_error_about_a_result_without_its_call_says_how_to_mend_it(proxy, upstream):
    """A tool result that answers no call: the pairing problem, then how to mend it."""
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c9", "content": "x"}]
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions",
        json={"model": "gpt-test", "messages": messages},
        timeout=30,
    )
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "/messages/1/tool_call_id"
    assert "does not answer a call" in error["message"] and "each tool result must follow" in error["message"]


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "openai"), ("/v1/responses", "openai"), ("/v1/messages", "anthropic")],
)
def test_errors_come_in_the_providers_shape(proxy, upstream, path, shape):
    """An unknown definition, an unknown model and a bad body are 4xx in the provider's shape."""
    model = "claude-test" if shape == "anthropic" else "gpt-test"
    field = "input" if "responses" in path else "messages"
    good = {"model": model, "max_tokens": 10, field: [{"role": "user", "content": "hi"}]}
    cases = [
        (f"/proxy/no-such-definition{path}", good, {}, 404),
        (f"/proxy/default{path}", {**good, "model": "nope"}, {}, 404),
        (f"/proxy/default{path}", {**good, field: 5}, {}, 400),
        (f"/proxy/default{path}", good, {"x-ctxmgmt-definition": "missing"}, 404),
    ]
    for url, body, headers, status in cases:
        r = httpx.post(proxy.url + url, json=body, headers=headers, timeout=30)
        assert r.status_code == status, r.text
        data = r.json()
        if shape == "anthropic":
            assert data["type"] == "error" and data["error"]["message"]
        else:
            assert data["error"]["message"] and data["error"]["type"]
    assert upstream.seen == []
    r = httpx.post(
        f"{proxy.url}/proxy/default{path}",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400


def test_an_unknown_definition_is_said_before_an_unknown_model(proxy):
    """A request whose definition and model are both unknown is told of the definition, the
    path's (with the nearest name stored); a known definition, of the model."""
    body = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{proxy.url}/proxy/defualt/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 404 and "'defualt' not found" in r.json()["error"]["message"]
    assert "did you mean 'default'" in r.json()["error"]["message"]
    r = httpx.post(f"{proxy.url}/proxy/default/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 404 and "/model: 'nope'" in r.json()["error"]["message"]
    # A model's name where the definition goes: said, with where the stored names are listed.
    r = httpx.post(f"{proxy.url}/proxy/gpt-4o/v1/chat/completions", json=body, timeout=30)
    said = r.json()["error"]["message"]
    assert r.status_code == 404 and "not a model" in said and "ctxmgmt definitions list" in said


def test_an_upstream_error_comes_back_unchanged(proxy, upstream):
    """The upstream's own error status and body reach the client as they were."""
    upstream.status = 429
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions",
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert r.status_code == 429
    assert r.json() == {"error": {"message": "upstream says no"}}
    assert "set-cookie" not in r.headers


def test_each_request_is_an_execution_record_without_keys(store, proxy, upstream):
    """Every proxied request is an execution record with the upstream's usage; the client's key
    is in no record."""
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="sk-secret-client-key")
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": TASK}])
    total, listed = ExecutionStore(store.engine).list("proxy-default")
    assert total == 1
    record = ExecutionStore(store.engine).get(listed[0]["execution_id"])
    assert record["status"] == "finished" and record["calls"][0]["reported"] > 0
    assert "sk-secret" not in json.dumps(record)


def test_project_keys_protect_the_proxy(store, upstream):
    """With API keys configured, the proxy needs a write or proxy key; a read key is refused."""
    import hashlib

    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": "reader", "scope": "read", "key_sha256": hashlib.sha256(b"r-key").hexdigest()},
                {"name": "agent", "scope": "proxy", "key_sha256": hashlib.sha256(b"p-key").hexdigest()},
            ]
        }
    )
    with LiveServer(create_app(store, models=models_for(upstream), config=config)) as server:
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{server.url}/proxy/default/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=30).status_code == 401
        assert httpx.post(url, json=body, headers={"x-ctxmgmt-key": "r-key"}, timeout=30).status_code == 403
        r = httpx.post(
            url, json=body, headers={"x-ctxmgmt-key": "p-key", "authorization": "Bearer sk-up"}, timeout=30
        )
        assert r.status_code == 200
        assert upstream.seen[-1].headers["authorization"] == "Bearer sk-up"
        assert "x-ctxmgmt-key" not in upstream.seen[-1].headers
        for twice in ({"authorization": "Bearer p-key"}, {"x-api-key": "p-key"}):  # ours, sent twice
            r = httpx.post(url, json=body, headers={"x-ctxmgmt-key": "p-key", **twice}, timeout=30)
            assert r.status_code == 200
            assert "p-key" not in json.dumps(upstream.seen[-1].headers)  # never goes upstream


def test_a_proxied_request_shows_in_the_cli(proxy, upstream):
    """`ctxmgmt executions list proxy-default` and `ctxmgmt trace ID` read a proxied request's record."""
    import subprocess
    import sys

    openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k").chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": TASK}]
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ctxmgmt.cli", *args, "--url", proxy.url]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    listed = cli("executions", "list", "proxy-default")
    assert listed.returncode == 0, listed.stderr
    execution_id = json.loads(listed.stdout)["executions"][0]["execution_id"]
    traced = cli("trace", execution_id)
    assert traced.returncode == 0, traced.stderr
    assert "call 1" in traced.stdout or "1" in traced.stdout


def test_the_proxys_records_before_any_request_are_an_empty_list(proxy):
    """`proxy-NAME` before anything was proxied through NAME lists nothing (it said there was
    no such agent); through a definition that is not stored, a 404 that says what it names."""
    empty = httpx.get(f"{proxy.url}/_plugins/_ml/agents/proxy-default/executions")
    assert empty.status_code == 200, empty.text
    assert empty.json() == {"total": 0, "executions": []}
    unknown = httpx.get(f"{proxy.url}/_plugins/_ml/agents/proxy-nosuch/executions")
    assert unknown.status_code == 404
    assert "no definition named 'nosuch'" in unknown.text and "ctxmgmt definitions list" in unknown.text
    for typo in ("proxy-defualt", "proxy-Default"):  # a name's typo, or no name's form at all
        r = httpx.get(f"{proxy.url}/_plugins/_ml/agents/{typo}/executions")
        assert r.status_code == 404 and "did you mean 'default'?" in r.text and "proxy-NAME" in r.text, r.text


def _keys(store, upstream):
    import hashlib

    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": "agent", "scope": "proxy", "key_sha256": hashlib.sha256(b"p-key").hexdigest()},
            ]
        }
    )
    app = create_app(store, models=models_for(upstream), config=config)
    return app, LiveServer(app)


def test_a_proxy_key_reads_definitions_and_nothing_of_the_conversations(store, upstream):
    """A proxy key (handed to an agent) lists and reads definitions, and is refused with a 403
    that says what it may do on records, memory, archives and agents: one agent's key reads
    no other conversation."""
    headers = {"authorization": "Bearer p-key"}
    _, live = _keys(store, upstream)
    with live as server:
        base = f"{server.url}/_plugins/_ml"
        allowed = [
            httpx.get(f"{base}/context_management", headers=headers, timeout=30),
            httpx.get(f"{base}/context_management/default", headers=headers, timeout=30),
        ]
        refused = [
            httpx.get(f"{base}/executions/_search", headers=headers, timeout=30),
            httpx.get(f"{base}/executions/{'a' * 32}", headers=headers, timeout=30),
            httpx.get(f"{base}/memory/{'a' * 32}/messages", headers=headers, timeout=30),
            httpx.get(f"{base}/offload", params={"session": "s"}, headers=headers, timeout=30),
            httpx.get(f"{base}/agents/{'a' * 32}", headers=headers, timeout=30),
            httpx.post(f"{base}/agents/_register", json={"name": "x"}, headers=headers, timeout=30),
        ]
    assert [r.status_code for r in allowed] == [200, 200], [r.text for r in allowed]
    for r in refused:
        assert r.status_code == 403, (r.request.url, r.status_code, r.text)
        assert "proxy key" in r.text and "read or write key" in r.text


def test_what_openai_keeps_is_listed_with_the_servers_key_by_a_write_key_only(store, upstream, monkeypatch):
    """The list of stored chat completions, asked with the server's own upstream key (the
    model's api_key_env), holds every agent's: a proxy key (an agent's) is refused with a 403
    saying why, nothing sent; a write key's list goes. An object asked by its id goes for an
    agent's key too (the id is the client's to know, as a Responses request's
    previous_response_id is). With a model that has no key of its own, an agent's request
    goes with its own upstream key. A POST with no id (a create on the object routes) is a 404."""
    import hashlib

    monkeypatch.setenv("CTXMGMT_TEST_UPSTREAM_KEY", "sk-server")
    keys = [("agent", "proxy", b"p-key"), ("admin", "write", b"w-key")]
    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": n, "scope": s, "key_sha256": hashlib.sha256(k).hexdigest()} for n, s, k in keys
            ]
        }
    )
    for keyed in (True, False):
        upstream.seen.clear()
        models = {"base_url": upstream.base_url, "model": "gpt-upstream", "context_window": 16_000}
        if keyed:
            models["api_key_env"] = "CTXMGMT_TEST_UPSTREAM_KEY"
        app = create_app(
            store, models=ModelsConfig.from_dict({"models": {"gpt-test": models}}), config=config
        )
        with LiveServer(app) as server:
            base = f"{server.url}/proxy/default/v1"
            agent = {"x-ctxmgmt-key": "p-key", "authorization": "Bearer sk-agent"}
            listed = httpx.get(f"{base}/chat/completions", headers=agent, timeout=30)
            by_id = httpx.get(f"{base}/responses/resp_1", headers=agent, timeout=30)
            admin = httpx.get(f"{base}/chat/completions", headers={"x-ctxmgmt-key": "w-key"}, timeout=30)
            create = httpx.post(f"{base}/responses/", headers=agent, json={"model": "gpt-test"}, timeout=30)
        assert admin.status_code == by_id.status_code == 200, (admin.text, by_id.text)
        assert create.status_code == 404, create.text
        seen = [(s.path, s.headers.get("authorization")) for s in upstream.seen]
        if keyed:
            assert listed.status_code == 403, listed.text
            assert "may not list what OpenAI keeps with the server's own key" in listed.text
            assert seen == [
                ("GET /v1/responses/resp_1", "Bearer sk-server"),
                ("GET /v1/chat/completions", "Bearer sk-server"),
            ]
        else:
            assert listed.status_code == 200, listed.text
            assert seen[:2] == [
                ("GET /v1/chat/completions", "Bearer sk-agent"),
                ("GET /v1/responses/resp_1", "Bearer sk-agent"),
            ]


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer p-key"},
        {"authorization": "bearer  p-key"},
        {"x-api-key": "p-key"},
        {"authorization": "Bearer", "x-api-key": "p-key"},
        {"authorization": "Basic cDpw", "x-api-key": "p-key"},
    ],
)
def test_the_proxy_and_the_api_read_a_key_the_same_way(store, upstream, headers):
    """A key the REST API reads from Authorization or x-api-key is the proxy's key too, in
    every form; and a wrong one is refused by both."""
    _, live = _keys(store, upstream)
    with live as server:
        api = httpx.get(f"{server.url}/_plugins/_ml/context_management", headers=headers, timeout=30)
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{server.url}/proxy/default/v1/chat/completions"
        # the model has no upstream key and the client's key is ours: refused, but past the key check
        proxied = httpx.post(url, json=body, headers=headers, timeout=30)
        wrong = {k: v.replace("p-key", "x-key") for k, v in headers.items()}
        refused = httpx.get(f"{server.url}/_plugins/_ml/context_management", headers=wrong, timeout=30)
        refused_proxy = httpx.post(url, json=body, headers=wrong, timeout=30)
    assert api.status_code == 200, api.text
    assert proxied.status_code == 400 and "api_key_env" in proxied.json()["error"]["message"]
    assert (refused.status_code, refused_proxy.status_code) == (401, 401)


def test_a_request_refused_for_its_keys_runs_keeps_and_records_nothing(store, upstream):
    """A request whose client key is the project's while the model has no upstream key is a 400
    before any hook runs: no body kept, no conversation state, no record, nothing upstream."""
    from sqlalchemy import func, select

    from ctxmgmt.store.models import proxy_sessions

    app, live = _keys(store, upstream)
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi " * 200}] * 9, "stream": True}
    with live as server:
        r = httpx.post(
            f"{server.url}/proxy/default/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer p-key"},
            timeout=30,
        )
    assert r.status_code == 400, r.text
    assert app.state.proxy_bodies.find(json.dumps(body)) is None and not app.state.proxy_bodies._order
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(proxy_sessions)).scalar() == 0
    assert ExecutionStore(store.engine).list("proxy-default")[0] == 0
    assert upstream.seen == []


@pytest.mark.parametrize(
    "text",
    [
        '{"messages": [1, NaN]}',
        '{"messages": [1e999]}',
        '{"messages": [1,\n  2,, 3]}',
        '{"model": "m", "messages": [{"role": "user",}]}',
        '{"messages": ' + "[" * 200 + "]" * 200 + "}",
        '{"messages": [{"role": "user", "content": "\\ud800"}]}',
    ],
)
def test_a_bad_json_body_is_refused_by_the_proxy_as_by_the_api(proxy, text):
    """The proxy's incremental body reader and the REST API's refuse the same bad value with
    the same 400 message (one decoder, one mapping of its errors)."""
    headers = {"content-type": "application/json"}
    api = httpx.post(
        f"{proxy.url}/_plugins/_ml/context_management/_validate", content=text, headers=headers, timeout=30
    )
    proxied = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions", content=text, headers=headers, timeout=30
    )
    assert (api.status_code, proxied.status_code) == (400, 400), (api.text, proxied.text)
    assert proxied.json()["error"]["message"] == api.json()["error"]["reason"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_proxied_call_is_recorded_with_the_fields_the_runner_writes(store, proxy, upstream, stream):
    """A proxied call's entry in its execution record is the runner's (one call_entry): the
    tokens before and after, calibrated, the upstream's report, its cache figures and the
    reusable prefix."""
    from ctxmgmt.agents.conversation import usage_record
    from ctxmgmt.agents.records import call_entry

    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    messages: Any = [{"role": "user", "content": TASK}]
    if stream:
        for _ in client.chat.completions.create(
            model="gpt-test", messages=messages, stream=True, stream_options={"include_usage": True}
        ):
            pass
    else:
        client.chat.completions.create(model="gpt-test", messages=messages)
    client.close()
    entry = stored_record(store)["calls"][0]
    optional = {"cached_tokens", "cache_write_tokens"}  # when the upstream reports them
    assert set(entry) - optional == set(call_entry(1, 0, 1.0, usage_record(0, 1.0, 0), {}))
    assert entry["reported"] == input_tokens(upstream.seen[0].body) > 0
    assert 0 < entry["tokens_after"] <= entry["tokens_before"] and entry["calibrated"] > 0
    assert entry["usage"]["input"] == entry["reported"]
    assert entry["cached_tokens"] == entry["usage"]["cached"]  # as the runner lifts the cache figures


_STREAMED = {
    "chat": (
        "v1/chat/completions",
        {"model": "gpt-test", "messages": [{"role": "user", "content": TASK}]},
        b"data: [DONE]",
    ),
    "messages": (
        "v1/messages",
        {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": TASK}]},
        b"event: message_stop",
    ),
    "responses": ("v1/responses", {"model": "gpt-test", "input": TASK}, b"event: response.completed"),
}
"""Per API: the path, a streamed request's body, and the line of the event that ends the answer."""


def _leave(proxy: LiveServer, api: str, after: bytes | None) -> None:
    """Stream one request of ``api`` through the proxy and close the connection as soon as a
    line starting with ``after`` arrived (None: after the first event)."""
    path, body, _ = _STREAMED[api]
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy.url}/proxy/default/{path}", json={**body, "stream": True}) as r,
    ):
        assert r.status_code == 200
        for line in r.iter_lines():
            if (after is None and not line.strip()) or (
                after is not None and line.startswith(after.decode())
            ):
                break  # and close at once, while the upstream still holds its stream open


@pytest.mark.parametrize("api", sorted(_STREAMED))
def test_a_stream_whose_client_leaves_after_its_last_event_is_still_recorded(store, proxy, upstream, api):
    """A client that closes as soon as it has read the answer's last event, while the upstream
    is slow to end its stream, cancels the proxy's stream: the record is stored all the same,
    finished, with its call."""
    upstream.linger = 1.0
    _leave(proxy, api, _STREAMED[api][2])
    record = stored_record(store)
    assert record["status"] == "finished" and record["calls"][0]["tokens_before"] > 0


@pytest.mark.parametrize("api", sorted(_STREAMED))
def test_a_stream_whose_client_leaves_mid_answer_is_recorded_as_cut_short(store, proxy, upstream, api):
    """A client that closes after the first event, while the model is slow to go on, is recorded
    as an error that says the client went away before the answer's end (not "finished")."""
    upstream.linger, upstream.pause_after = 1.0, 1
    _leave(proxy, api, None)
    record = stored_record(store)
    assert record["status"] == "error", record
    assert record["error"] == "the client went away before the answer's end"
    assert record["calls"][0]["tokens_before"] > 0


def test_a_stream_of_n_choices_left_after_the_first_is_recorded_as_cut_short(store, proxy, upstream):
    """A chat stream of two choices sent one after another, whose client leaves once the first
    has finished (the model slow to begin the second), is recorded as cut short."""
    upstream.linger, upstream.pause_after = 1.0, 4  # its role, two words, the first finish
    upstream.replies.append(Reply(text="hello there"))
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": TASK}], "n": 2, "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy.url}/proxy/default/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if '"finish_reason": "stop"' in line:
                assert '"index": 0' in line
                break
    record = stored_record(store)
    assert record["status"] == "error", record
    assert record["error"] == "the client went away before the answer's end"


@pytest.mark.parametrize("header", ["origin", "host"])
def test_the_host_and_origin_guard_answers_a_providers_client_in_its_shape(proxy, upstream, header):
    """A page of another origin, or a Host this server is not, is refused under /proxy/ in the
    provider's shape: each SDK raises its own PermissionDeniedError with the guard's reason,
    and nothing goes upstream."""
    value = "https://evil.example" if header == "origin" else "evil.example"
    said = "cross-origin" if header == "origin" else "DNS rebinding"
    claude = anthropic.Anthropic(
        base_url=f"{proxy.url}/proxy/default", api_key="k", default_headers={header: value}, max_retries=0
    )
    with pytest.raises(anthropic.PermissionDeniedError, match=said):
        claude.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": TASK}]
        )
    gpt = openai.OpenAI(
        base_url=f"{proxy.url}/proxy/default/v1", api_key="k", default_headers={header: value}, max_retries=0
    )
    with pytest.raises(openai.PermissionDeniedError, match=said):
        gpt.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": TASK}])
    claude.close()
    gpt.close()
    assert upstream.seen == []
    r = httpx.get(f"{proxy.url}/_plugins/_ml/context_management/default", headers={header: value}, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["type"] == "security_exception"  # the API's own


def test_the_models_are_listed_as_each_sdk_reads_them(proxy):
    """``GET .../v1/models``: the configured models of the client's provider, in its own list
    shape, read by the real SDKs (a client that lets its user pick a model asks first)."""
    openai_client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    listed = openai_client.models.list()
    assert [m.id for m in listed.data] == ["gpt-test"]  # not the Anthropic endpoint's model
    assert listed.data[0].model_extra["context_window"] == 16_000
    assert openai_client.models.retrieve("gpt-test").id == "gpt-test"
    refused = r"'claude-test' is not among the proxy's openai models \(configured: gpt-test\)"
    with pytest.raises(openai.NotFoundError, match=refused):
        openai_client.models.retrieve("claude-test")
    anthropic_client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="k")
    page = anthropic_client.models.list()
    assert [m.id for m in page.data] == ["claude-test"] and page.has_more is False
    assert page.data[0].max_input_tokens == 16_000
    assert anthropic_client.models.retrieve("claude-test").type == "model"
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.models.retrieve("gpt-test")
    with pytest.raises(openai.NotFoundError, match=r"'defualt' not found.*did you mean 'default'"):
        openai.OpenAI(base_url=f"{proxy.url}/proxy/defualt/v1", api_key="k").models.list()
    r = httpx.get(
        f"{proxy.url}/proxy/defualt/v1/models", headers={"anthropic-version": "2023-06-01"}, timeout=30
    )
    assert r.status_code == 404 and r.json()["type"] == "error"


def test_project_keys_protect_the_models_list(store, upstream):
    """The models list needs a project key, of any scope (a read key too: it calls no model);
    the definition header names the definition, as for the proxy's other routes."""
    import hashlib

    keys = [
        {"name": n, "scope": scope, "key_sha256": hashlib.sha256(k.encode()).hexdigest()}
        for n, scope, k in (("agent", "proxy", "p-key"), ("reader", "read", "r-key"))
    ]
    config = ServerConfig.from_dict({"api_keys": keys})
    with LiveServer(create_app(store, models=models_for(upstream), config=config)) as server:
        url = f"{server.url}/proxy/default/v1/models"
        assert httpx.get(url, timeout=30).status_code == 401
        assert httpx.get(url, headers={"authorization": "Bearer nope"}, timeout=30).status_code == 401
        for key in ("p-key", "r-key"):
            r = httpx.get(url, headers={"authorization": f"Bearer {key}"}, timeout=30)
            assert r.json()["data"][0]["id"] == "gpt-test"
        named = {"authorization": "Bearer r-key", DEFINITION_HEADER: "default"}
        assert httpx.get(f"{server.url}/proxy/nope/v1/models", headers=named, timeout=30).status_code == 200
        chat = f"{server.url}/proxy/default/v1/chat/completions"
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(chat, json=body, headers={"x-ctxmgmt-key": "r-key"}, timeout=30).status_code == 403


def test_claude_codes_token_count_goes_to_the_upstream(proxy, upstream):
    """``POST /v1/messages/count_tokens?beta=true`` (Claude Code weighs its context's parts
    with it; a 404 made it guess): the upstream's own count, asked with the upstream's model
    name and the client's query and key; nothing is recorded. Errors in Anthropic's shape."""
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="sk-ant-client")
    counted = client.messages.count_tokens(
        model="claude-test",
        system=SYSTEM,
        messages=[{"role": "user", "content": TASK}],
        extra_query={"beta": "true"},
    )
    seen = upstream.seen[-1]
    assert seen.path == "/v1/messages/count_tokens?beta=true" and seen.body["model"] == "claude-upstream"
    assert counted.input_tokens == input_tokens(seen.body) > 0
    assert "sk-ant-client" in (seen.headers.get("x-api-key"), seen.headers.get("authorization", "")[7:])
    with pytest.raises(anthropic.NotFoundError, match="not in the proxy's models configuration"):
        client.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="an openai endpoint"):
        client.messages.count_tokens(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    kind = {"content-type": "application/json"}
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/messages/count_tokens", content=b"[1]", headers=kind, timeout=30
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = httpx.post(
        f"{proxy.url}/proxy/defualt/v1/messages/count_tokens", json={"model": "claude-test"}, timeout=30
    )
    assert r.status_code == 404 and "did you mean 'default'" in r.json()["error"]["message"]
    for odd in ({"model": "claude-test"}, {"model": "claude-test", "messages": "hi"}):
        httpx.post(f"{proxy.url}/proxy/default/v1/messages/count_tokens", json=odd, timeout=30)
        sent = upstream.seen[-1].body  # as the client wrote it, never made an empty conversation
        assert sent == {**odd, "model": "claude-upstream"}, sent
    upstream.status = 503
    with pytest.raises(anthropic.InternalServerError):  # the upstream's answer, as it came
        client.with_options(max_retries=0).messages.count_tokens(
            model="claude-test", messages=[{"role": "user", "content": "hi"}]
        )


def test_a_query_too_long_to_go_upstream_is_refused_first(proxy, upstream):
    """A query string over 8 KB is the client's fault, said at once in the provider's shape (a
    414), before any hook runs or the upstream is asked (past 64 KB, httpx builds no URL)."""
    long_query = "?q=" + "x" * 10_000
    body = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = httpx.post(f"{proxy.url}/proxy/default{path}{long_query}", json=body, timeout=30)
        assert r.status_code == 414 and r.json()["type"] == "error", path
        assert "over 8192 bytes" in r.json()["error"]["message"]
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions{long_query}",
        json={**body, "model": "gpt-test"},
        timeout=30,
    )
    assert r.status_code == 414 and "over 8192 bytes" in r.json()["error"]["message"]
    assert upstream.seen == []


def test_a_base_url_with_a_query_is_refused_when_the_config_loads():
    """The paths are appended to base_url: one with a query or fragment would be mangled."""
    from ctxmgmt.llm import ModelsConfig
    from ctxmgmt.llm.config import ConfigError

    spec = {"base_url": "https://x.example/v1?api-version=1", "model": "m", "context_window": 1000}
    with pytest.raises(ConfigError, match="/models/m/base_url") as refused:
        ModelsConfig.from_dict({"models": {"m": spec}})
    assert "without a query or fragment" in str(refused.value) and "^https" not in str(refused.value)


def test_a_large_count_is_read_off_the_event_loop_and_counted(proxy, upstream):
    """A count of a long conversation (its body read and written in a worker thread) is the
    upstream's count of what the client sent."""
    client = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="k")
    messages = [{"role": "user", "content": f"step {i}: " + "word " * 200} for i in range(1, 200, 2)]
    counted = client.messages.count_tokens(model="claude-test", messages=messages)
    assert len(upstream.seen[-1].raw) > 65_536 and upstream.seen[-1].body["messages"] == messages
    assert counted.input_tokens == input_tokens(upstream.seen[-1].body)


def test_a_model_named_with_slashes_is_served_on_every_route(store, upstream):
    """Routers name models ``vendor/model`` (OpenRouter, LiteLLM, Bedrock's ``us.anthropic...``):
    such a configured name is a model of the Messages route, its count and the models list."""
    spec = {"base_url": upstream.base_url, "model": "claude-upstream", "provider": "anthropic"}
    models = ModelsConfig.from_dict({"models": {"anthropic/claude-x:1": {**spec, "context_window": 16_000}}})
    with LiveServer(create_app(store, models=models)) as server:
        client = anthropic.Anthropic(base_url=f"{server.url}/proxy/default", api_key="k")
        upstream.replies.append(Reply(text="done"))
        said = client.messages.create(
            model="anthropic/claude-x:1", max_tokens=10, messages=[{"role": "user", "content": TASK}]
        )
        assert said.content[0].text == "done" and upstream.seen[-1].body["model"] == "claude-upstream"
        counted = client.messages.count_tokens(
            model="anthropic/claude-x:1", messages=[{"role": "user", "content": TASK}]
        )
        assert counted.input_tokens > 0 and upstream.seen[-1].path == "/v1/messages/count_tokens"
        assert client.models.retrieve("anthropic/claude-x:1").id == "anthropic/claude-x:1"
        assert [m.id for m in client.models.list().data] == ["anthropic/claude-x:1"]


def test_a_bad_model_name_is_refused_in_words_when_the_config_loads():
    """A models key that no client could send is named, with the characters a name may hold."""
    from ctxmgmt.llm.config import ConfigError

    with pytest.raises(ConfigError, match="/models: 'gpt 4o' is not a model name") as refused:
        ModelsConfig.from_dict({"models": {"gpt 4o": {"base_url": "http://x.example/v1", "model": "m"}}})
    assert "anthropic/claude-sonnet-4-5" in str(refused.value) and "^[" not in str(refused.value)


def test_claude_codes_system_turns_and_tool_references_go_upstream_as_sent(proxy, upstream):
    """Claude Code (2.1.x) sends its environment as a mid-conversation system message after the
    task (with a cache breakpoint and a per-turn ``output_config``) and, after tool search, a
    tool_result of ``tool_reference`` blocks: both were 400s. They go upstream byte for byte,
    request after request."""
    system_turn = {
        "role": "system",
        "content": [
            {
                "type": "text",
                "text": "# Environment\nPrimary working directory: /srv/app",
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "output_config": {"effort": "medium"},
    }
    messages = [{"role": "user", "content": [{"type": "text", "text": TASK}]}, system_turn]
    url = f"{proxy.url}/proxy/default/v1/messages?beta=true"
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "mid-conversation-tool-changes-2026-07-01",
        "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
        "x-app": "cli",
        "x-api-key": "k",
    }
    for step in range(3):
        body = {"model": "claude-test", "max_tokens": 100, "system": SYSTEM, "messages": messages}
        upstream.replies.append(Reply(calls=[("ToolSearch", {"query": f"select:Tool{step}"})]))
        sent = json.dumps(body).encode()
        r = httpx.post(url, content=sent, headers={**headers, "content-type": "application/json"}, timeout=30)
        assert r.status_code == 200, r.text
        seen = upstream.seen[-1]
        assert seen.path == "/v1/messages?beta=true" and seen.body["messages"] == messages
        assert seen.headers["user-agent"] == headers["user-agent"] and seen.headers["x-app"] == "cli"
        assert seen.raw == sent.replace(b'"claude-test"', b'"claude-upstream"')
        call = next(b for b in r.json()["content"] if b["type"] == "tool_use")
        reference = {"type": "tool_reference", "tool_name": f"Tool{step}"}
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": [reference]}
        messages = [
            *messages,
            {"role": "assistant", "content": r.json()["content"]},
            {"role": "user", "content": [result]},
        ]


def test_a_clients_own_headers_go_upstream_and_the_upstreams_come_back(proxy, upstream):
    """The client's API and session headers go upstream as they came (Codex's originator,
    session_id and x-codex-* feature headers, an SDK's own), and the provider's answer headers
    come back (its model, request id, a client's turn state), streamed or not; anything else
    stays here (this hop's own, cookies, the project's, a method override), never a redirect's
    Location or a value that is not ASCII, and the proxy keeps no upstream cookie (they went
    out with every client's next request)."""
    upstream.answer_headers = {
        "openai-model": "gpt-5-upstream",
        "x-codex-turn-state": "t1",
        "server": "up/1",
        "location": "http://elsewhere.example/steal",  # an SDK would follow it with the key
        "openai-note": "caf\xe9",  # not ASCII: it would fail the client's answer
    }
    sent = {
        "originator": "codex_exec",
        "session_id": "0199a-session",
        "x-codex-beta-features": "remote_compaction_v2",
        "x-stainless-retry-count": "0",
        "cookie": "sid=secret",
        "x-forwarded-for": "10.0.0.9",
        "x-ctxmgmt-session": "s1",
        "referer": "https://page.example/",
        "connection": "keep-alive, x-hop",
        "x-hop": "this hop only",
        "x-http-method-override": "DELETE",  # not the client's to steer beside a configured key
        "authorization": "Bearer sk-client",
    }
    body = {"model": "gpt-test", "input": [{"role": "user", "content": TASK}]}
    for stream in (False, True):
        r = httpx.post(
            f"{proxy.url}/proxy/default/v1/responses",
            json={**body, "stream": stream},
            headers=sent,
            timeout=30,
        )
        assert r.status_code == 200
        seen = upstream.seen[-1].headers
        for name in ("originator", "session_id", "x-codex-beta-features", "x-stainless-retry-count"):
            assert seen.get(name) == sent[name], name
        for name in (
            "cookie",
            "x-forwarded-for",
            "x-ctxmgmt-session",
            "referer",
            "x-hop",
            "x-http-method-override",
        ):
            assert name not in seen, name
        assert seen["authorization"] == "Bearer sk-client"
        assert r.headers["openai-model"] == "gpt-5-upstream" and r.headers["x-codex-turn-state"] == "t1"
        assert "set-cookie" not in r.headers and r.headers.get("server") != "up/1"
        assert "location" not in r.headers and "openai-note" not in r.headers


def test_a_base_url_itself_says_the_server_is_there(proxy):
    """``HEAD`` or ``GET`` of a base URL (Claude Code sends ``HEAD`` to its base URL first) is
    a 200 naming the APIs served; a definition not stored is a 404 in the provider's shape."""
    for path in ("/proxy/default", "/proxy/default/v1"):
        assert httpx.head(f"{proxy.url}{path}").status_code == 200
        r = httpx.get(f"{proxy.url}{path}", timeout=30)
        assert r.status_code == 200 and r.json()["apis"]["anthropic"] == "/proxy/default/v1/messages"
    r = httpx.get(f"{proxy.url}/proxy/defualt", headers={"anthropic-version": "2023-06-01"}, timeout=30)
    assert r.status_code == 404 and r.json()["type"] == "error" and "did you mean 'default'" in r.text


def test_a_config_setting_not_known_is_named_with_the_nearest_one():
    """A typo in the models configuration is named in words with the setting meant, and its
    pointer escapes a model name's '/' (JSON Pointer's ~1)."""
    from ctxmgmt.llm.config import ConfigError

    spec = {"base_url": "http://x.example/v1", "model": "m", "context_windw": 8000}
    with pytest.raises(ConfigError) as refused:
        ModelsConfig.from_dict({"models": {"vendor/m": spec}})
    problem = refused.value.problems[0]
    assert problem.pointer == "/models/vendor~1m"
    assert "'context_windw' is not a setting here (did you mean 'context_window'?)" in problem.message


def test_a_streams_state_that_cannot_be_stored_is_logged_and_the_answer_goes_on(
    proxy, upstream, store, monkeypatch, caplog
):
    """A stream's conversation state is written while the upstream starts to answer; when the
    store refuses it, the client still gets the whole stream (the state is made again from the
    next request), the failure is logged, and the request's record is stored as ever."""
    from ctxmgmt.store.sessions import SessionStore

    def refused(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(SessionStore, "put", refused)
    upstream.replies.append(Reply("alpha beta"))
    client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k")
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": TASK}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).split() == ["alpha", "beta"]
    assert any("could not store the proxy's conversation state" in r.getMessage() for r in caplog.records)
    assert stored_record(store)["status"] == "finished"


def test_a_client_key_that_is_not_ascii_is_refused_in_words(proxy, upstream):
    """A key header the upstream could not be sent is a 400 naming it, not dropped (the
    upstream's 401 would not say why)."""
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions",
        json={"model": "gpt-test", "messages": [{"role": "user", "content": TASK}]},
        headers={"authorization": "Bearer sk-caf\u00e9".encode()},
        timeout=30,
    )
    assert r.status_code == 400 and "authorization" in r.json()["error"]["message"]
    assert upstream.seen == []


def test_an_untouched_message_goes_as_written_when_a_member_before_the_conversation_changes(proxy, upstream):
    """A member before ``messages`` that changes between requests (Anthropic's SDKs write
    ``max_tokens`` first) makes the body read anew, or from an older body than the one the
    conversation's view was made from: the client's messages still go upstream as it wrote
    them (they were written again as JSON, escapes and spacing changed)."""
    url = f"{proxy.url}/proxy/default/v1/messages"
    own = '{"role":"user","content":"caf\\u00e9 \\/ 1.0e2 ' + "long " * 300 + '"}'
    messages = [own, '{"role":"assistant","content":"ok"}', '{"role":"user","content":"and?"}']
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    for step, max_tokens in enumerate((100, 200, 100, 100)):
        text = f'{{"max_tokens":{max_tokens},"messages":[{",".join(messages)}],"model":"claude-test"}}'
        r = httpx.post(url, content=text.encode(), headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        assert own.encode() in upstream.seen[-1].raw, step
        messages += ['{"role":"assistant","content":"so"}', f'{{"role":"user","content":"then {step}?"}}']
    assert len(upstream.seen) == 4


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("thread", ["create", "continue"])
def test_an_anthropic_message_thread_is_refused_so_the_sdk_sends_the_whole_history(
    proxy, upstream, stream, thread
):
    """A request with ``thread`` (Anthropic's message threads: the upstream keeps the history,
    and the next request holds only what is new) is a 400 with the ``error_code`` on which
    Anthropic's SDKs go on without a thread, sending the whole history each time; a continued
    thread's new messages alone (a tool result) are refused so, not as a history without the
    call."""
    new = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    body = {
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "thread": {"type": "create"}
        if thread == "create"
        else {"type": "continue", "previous_message_id": "m1"},
        "messages": [{"role": "user", "content": "hi"}] if thread == "create" else [new],
    }
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/messages",
        json=body,
        headers={"anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and "thread" in error["message"]
    assert error["details"] == {"error_code": "thread_unsupported_request"}
    assert upstream.seen == []
