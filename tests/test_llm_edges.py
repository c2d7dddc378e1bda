"""The model boundary against endpoints that misbehave: real loopback servers on raw sockets
that trickle, flood, stall and lie, for the client, the runner, the summariser and the API."""

import asyncio
import gzip
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import zlib
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ctxmgmt import Context, LLMError, LLMTimeoutError, ModelConfig, ModelsConfig, load_definition
from ctxmgmt._reply import MAX_DEPTH, ReplyError, read
from ctxmgmt.agents.runner import Runner
from ctxmgmt.api import create_app
from ctxmgmt.cache import clean_usage
from ctxmgmt.llm import ChatClient
from ctxmgmt.store import ExecutionStore
from ctxmgmt.testing import ChatServer, RawServer, make_conversation
from tests.conftest import LiveServer, free_port, tool_call

HI = [{"role": "user", "content": "hi"}]
AGENTS = "/_plugins/_ml/agents"
MEMORY = "/_plugins/_ml/memory"
DEADLINE = 3.0
"""The models' deadline: what a trickle or a stall is cut at, and what an answer sent at once
must arrive within, through the whole API, on a loaded machine (1 s was not, once)."""
SLACK = 3.0
"""A call with that deadline must end within 6 s (generous: a loaded machine)."""


@pytest.fixture
def raw():
    with RawServer() as server:
        yield server


def model(server, provider="openai", **extra):
    options = {"timeout": DEADLINE, "max_retries": 0, **extra}
    return ModelConfig(id="m", base_url=server.base_url, model="x", provider=provider, **options)


def call(config, mode="async"):
    """One model call through the client, sync or async; the error it raised, and the seconds."""
    started = time.monotonic()
    try:
        if mode == "sync":
            ChatClient(config).complete(HI)
        else:
            asyncio.run(ChatClient(config).acomplete(HI))
    except LLMError as exc:
        return exc, time.monotonic() - started
    raise AssertionError("the call succeeded")


def chat(message, **extra):
    """A chat completion around a message, with any extra top-level keys."""
    return json.dumps({"choices": [{"index": 0, "message": message}], **extra}).encode()


def fn_call(name="echo", arguments="{}", call_id="c1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


DEEP = b"[" * 5000 + b"]" * 5000
# (id, provider, the reply's bytes, what the error must name)
LIES = [
    ("content-nan", "openai", b'{"choices": [{"message": {"role": "assistant", "content": NaN}}]}', "NaN"),
    ("content-surrogate", "openai", chat({"content": "\ud800"}), "/choices/0/message/content"),
    ("content-object", "openai", chat({"content": {"a": 1}}), "/choices/0/message/content: is an object"),
    ("content-number", "openai", chat({"content": 7}), "/choices/0/message/content: is a number"),
    ("content-list-null", "openai", chat({"content": [None]}), "/choices/0/message/content: is a list"),
    ("calls-string", "openai", chat({"content": None, "tool_calls": "x"}), "/choices/0/message/tool_calls"),
    ("calls-object", "openai", chat({"content": None, "tool_calls": {"a": 1}}), "tool_calls: is an object"),
    ("calls-strings", "openai", chat({"content": None, "tool_calls": ["a"]}), "/tool_calls/0: is a string"),
    (
        "function-string",
        "openai",
        chat({"content": None, "tool_calls": [{"id": "c1", "type": "function", "function": "echo"}]}),
        "/tool_calls/0/function: is a string",
    ),
    (
        "id-number",
        "openai",
        chat({"content": None, "tool_calls": [{**fn_call(), "id": 5}]}),
        "/tool_calls/0/id",
    ),
    (
        "arguments-object",
        "openai",
        chat({"content": None, "tool_calls": [{"id": "c1", "function": {"name": "echo", "arguments": {}}}]}),
        "/tool_calls/0/function/arguments: is an object",
    ),
    ("deep", "openai", b'{"choices": [{"message": {"content": ' + DEEP + b"}}]}", "is JSON nested 5004 deep"),
    (
        "deep-arguments",
        "openai",
        chat({"content": None, "tool_calls": [fn_call(arguments=DEEP.decode())]}),
        "/tool_calls/0/function/arguments: is JSON nested 5000 deep",
    ),
    (
        "nan-beside-call",
        "openai",
        chat({"content": None, "tool_calls": [fn_call()]}).replace(b'"index": 0', b'"index": NaN'),
        "the reply holds NaN, which is not JSON",
    ),
    (
        "nan-in-arguments",
        "openai",
        chat({"content": None, "tool_calls": [fn_call(arguments='{"a": NaN}')]}),
        "/tool_calls/0/function/arguments: holds NaN",
    ),
    (
        "surrogate-beside-call",
        "openai",
        chat({"content": "\udfff", "tool_calls": [fn_call()]}),
        "/choices/0/message/content: holds a lone surrogate",
    ),
    (
        "surrogate-in-name",
        "openai",
        chat({"content": None, "tool_calls": [fn_call(name="ec\ud800ho")]}),
        "/tool_calls/0/function/name: holds a lone surrogate",
    ),
    (
        "infinity-in-usage",
        "openai",
        chat({"content": "hi"})[:-1] + b', "usage": {"x": -Infinity}}',
        "Infinity",
    ),
    ("huge-exponent", "openai", chat({"content": "hi"})[:-1] + b', "usage": {"x": 1e400}}', "1e400, beyond"),
    (
        "huge-integer",
        "openai",
        chat({"content": "hi"})[:-1] + b', "usage": {"x": 1%s}}' % (b"0" * 5000),
        "5,001 digits",
    ),
    (
        "huge-in-arguments",
        "openai",
        chat({"content": None, "tool_calls": [fn_call(arguments='{"a": 1e999}')]}),
        "/tool_calls/0/function/arguments: holds the number 1e999",
    ),
    ("not-utf8", "openai", chat({"content": "hi"}).replace(b"hi", b"h\xffi"), "not UTF-8"),
    ("not-json", "openai", b"<html>hello</html>", "is not JSON"),
    ("no-choices", "openai", b'{"choices": []}', "/choices"),
    ("a-list", "openai", b"[1, 2]", "is a list, not a JSON object"),
    (
        "anthropic-nan-input",
        "anthropic",
        b'{"content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {"a": NaN}}]}',
        "NaN",
    ),
    (
        "anthropic-surrogate-text",
        "anthropic",
        json.dumps({"content": [{"type": "text", "text": "ok \udbff"}]}).encode(),
        "/content/0/text: holds a lone surrogate",
    ),
    ("anthropic-content-string", "anthropic", b'{"content": "hi"}', "/content: is a string"),
    ("anthropic-content-empty", "anthropic", b'{"content": []}', "/content: the answer holds no text"),
    (
        "anthropic-thinking-number",
        "anthropic",
        b'{"content": [{"type": "thinking", "thinking": 5}, {"type": "text", "text": "x"}]}',
        "/content/0/thinking: is a number",
    ),
    (
        "anthropic-role-user",
        "anthropic",
        b'{"role": "user", "content": [{"type": "text", "text": "x"}]}',
        "/role",
    ),
    ("role-user", "openai", chat({"role": "user", "content": "x"}), "/choices/0/message/role: is 'user'"),
    ("anthropic-block-number", "anthropic", b'{"content": [3]}', "/content/0: is a number"),
    ("anthropic-unknown-block", "anthropic", b'{"content": [{"type": "magic"}]}', "/content/0/type"),
    ("anthropic-text-null", "anthropic", b'{"content": [{"type": "text", "text": null}]}', "/content/0/text"),
    (
        "anthropic-input-list",
        "anthropic",
        b'{"content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": [1]}]}',
        "/content/0/input: is a list",
    ),
    (
        "anthropic-bad-id",
        "anthropic",
        b'{"content": [{"type": "tool_use", "id": "a b", "name": "echo", "input": {}}]}',
        "/content/0/id",
    ),
]


# -- the deadline -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("behaviour", ["trickle", "trickle_headers", "stall"])
def test_a_slow_endpoint_ends_at_the_calls_deadline(raw, behaviour, mode):
    """Headers then a byte every 0.2 s, headers a byte at a time, or silence: the call ends
    at its deadline (a per-read timeout would never fire), with LLMTimeoutError."""
    if behaviour == "stall":
        raw.stall()
    else:
        getattr(raw, behaviour)(interval=0.2)
    exc, elapsed = call(model(raw), mode)
    assert isinstance(exc, LLMTimeoutError), exc
    assert "timed out" in str(exc) and f"within {DEADLINE:g} s" in str(exc) and "timeout" in str(exc)
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + SLACK


def test_retries_count_inside_the_deadline(chat_server):
    """Each attempt answers 503 after 0.9 s: with 5 retries and a 1 s deadline the call ends
    by the deadline, not after six attempts (5.4 s)."""
    for _ in range(6):
        chat_server.fail(503, "busy", delay=0.9)
    config = ModelConfig(id="m", base_url=chat_server.base_url, model="x", timeout=1.0, max_retries=5)
    exc, elapsed = call(config)
    assert elapsed < 1.0 + SLACK
    assert len(chat_server.requests) <= 2
    assert isinstance(exc, LLMTimeoutError) or "answered 503" in str(exc)


def summariser(model_id):
    """A definition that summarises before every call with the model ``model_id``."""
    spec = {"summarization_model_id": model_id, "preserve_recent_messages": 2}
    entry = {"type": "SummarizationManager", "config": spec, "activation": {"always": True}}
    return load_definition({"name": "s", "hooks": {"pre_llm": [entry]}})


@pytest.mark.parametrize(
    ("status", "headers", "named"),
    [
        (503, {"retry-after": "\u00b2"}, "answered 503"),
        (301, {"location": "http://127.0.0.1:1/v1/chat/completions"}, "answered 301"),
        (200, {"content-length": "\u00b2"}, "failed (RemoteProtocolError)"),
    ],
)
def test_odd_statuses_and_headers_are_clear_errors(raw, status, headers, named):
    """A digit that is not ASCII in retry-after or content-length, or a redirect, is an
    LLMError naming what happened (not a ValueError, not a redirect followed)."""
    for _ in range(2):  # the 503 is retried once (after the usual backoff)
        raw.answer(b'{"error": {"message": "moved"}}', status=status, headers=headers)
    exc, _ = call(model(raw, max_retries=1))
    assert named in str(exc), str(exc)


def test_the_summarisers_model_calls_have_the_deadline(raw):
    """A summariser whose model trickles fails open at the deadline, sync and async: no
    message is removed and the trace says it timed out."""
    definition = summariser("m")
    models = ModelsConfig({"m": model(raw)})
    context = Context(messages=make_conversation(30))
    for run in (
        lambda: definition.apply("pre_llm", context, models=models),
        lambda: asyncio.run(definition.aapply("pre_llm", context, models=models)),
    ):
        raw.trickle(interval=0.2)
        started = time.monotonic()
        result = run()
        assert time.monotonic() - started < DEADLINE + SLACK
        assert result.context.messages == context.messages
        assert "timed out" in result.trace[0]["error"]


def test_a_summary_with_nan_or_deep_nesting_fails_open(chat_server, models):
    """The summariser reads the model's JSON within the reply's bounds: a summary holding NaN,
    or nested 5,000 deep, is refused (after its one retry) and no message is removed."""
    definition = summariser("summarizer")
    context = Context(messages=make_conversation(30))
    for bad, named in (
        ('{"goal": [NaN]}', "holds NaN"),
        ('{"goal": ' + DEEP.decode() + "}", "nested 5001 deep"),
    ):
        chat_server.reply(bad)
        chat_server.reply(bad)
        result = definition.apply("pre_llm", context, models=models)
        assert result.context.messages == context.messages
        assert "not valid JSON" in result.trace[0]["error"] and named in result.trace[0]["error"]


# -- the size limit -------------------------------------------------------------------------
def test_a_flood_is_refused_at_the_limit_as_it_arrives(raw):
    """100 MB without a content-length: refused once 8 MiB arrived, naming the limit and its key."""
    raw.flood(100_000_000)
    exc, elapsed = call(model(raw, timeout=30))
    assert not isinstance(exc, LLMTimeoutError) and elapsed < 30
    assert "larger than 8,388,608 bytes (max_response_bytes)" in str(exc)


def test_a_declared_length_past_the_limit_is_refused_before_reading(raw):
    """A content-length over max_response_bytes is refused from the headers."""
    raw.answer(chat({"content": "a" * 5000}))
    exc, _ = call(model(raw, max_response_bytes=2048))
    assert "larger than 2,048 bytes (max_response_bytes)" in str(exc)


def test_a_compressed_reply_is_bounded_by_its_decoded_size(raw):
    """A gzip or deflate reply is decoded as it arrives: a small one reads, a 50 MB bomb
    (50 KB on the wire) is refused at the limit."""
    raw.answer(gzip.compress(chat({"content": "zipped"})), headers={"content-encoding": "gzip"})
    assert ChatClient(model(raw)).complete(HI).content == "zipped"
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):  # deflate: zlib-wrapped, or raw
        packer = zlib.compressobj(wbits=wbits)
        raw.answer(
            packer.compress(chat({"content": "deflated"})) + packer.flush(),
            headers={"content-encoding": "deflate"},
        )
        assert ChatClient(model(raw)).complete(HI).content == "deflated"
    bomb = gzip.compress(chat({"content": "a" * 50_000_000}), 9)
    assert len(bomb) < 200_000
    raw.answer(bomb, headers={"content-encoding": "gzip"})
    exc, _ = call(model(raw, max_response_bytes=1 << 20))
    assert "larger than 1,048,576 bytes" in str(exc)


def test_an_encoding_that_cannot_be_bounded_is_refused(raw):
    """A content-encoding other than gzip, deflate or identity is a clear error."""
    raw.answer(b"\x00\x01", headers={"content-encoding": "br"})
    exc, _ = call(model(raw))
    assert "content-encoding 'br' is not one ctxmgmt reads" in str(exc)


PEAK = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from ctxmgmt.llm import ChatClient, ModelConfig
    from ctxmgmt.errors import LLMError

    config = ModelConfig(id="m", base_url=sys.argv[1], model="x", timeout=30, max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    ChatClient(config).complete(hi)  # warm: imports, the driver's loop, a connection
    asyncio.run(ChatClient(config).acomplete(hi))
    errors = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    calls = (lambda: ChatClient(config).complete(hi), lambda: asyncio.run(ChatClient(config).acomplete(hi)))
    for call in calls:
        try:
            call()
        except LLMError as exc:
            errors.append(str(exc))
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"grew_kib": grew, "errors": errors}))
    """
)


def test_peak_memory_for_a_100_mb_reply_rises_by_at_most_64_mb(raw, tmp_path):
    """In a fresh process, two 100 MB replies (sync and async) raise the peak RSS by <= 64 MB."""
    raw.answer(chat({"content": "warm"}))
    raw.answer(chat({"content": "warm"}))
    raw.flood(100_000_000)
    raw.flood(100_000_000)
    script = tmp_path / "peak.py"
    script.write_text(PEAK)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run(
        [sys.executable, str(script), raw.base_url], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert len(found["errors"]) == 2 and all("max_response_bytes" in e for e in found["errors"])
    assert found["grew_kib"] <= 64 * 1024, found


# -- the reply validator --------------------------------------------------------------------
@pytest.mark.parametrize(("name", "provider", "body", "named"), LIES, ids=[lie[0] for lie in LIES])
def test_a_malformed_reply_is_an_llm_error_naming_what_is_wrong(raw, name, provider, body, named):
    """Each malformed reply is an LLMError (502) whose message names the fault and where."""
    raw.answer(body)
    exc, _ = call(model(raw, provider))
    assert not isinstance(exc, LLMTimeoutError)
    assert named in str(exc), str(exc)
    kind = "a Messages API answer" if provider == "anthropic" else "a chat completion"
    assert f"is not {kind}" in str(exc)


def test_a_good_reply_is_returned_in_chat_form(raw):
    """Content, tool calls (a missing id, type and empty arguments filled in) and usage come through."""
    calls = [{"function": {"name": "echo", "arguments": ""}}, fn_call("big", '{"n": 1}', "c2")]
    usage = {"prompt_tokens": 3, "completion_tokens": -5, "cached": -0.5}
    raw.answer(chat({"role": "assistant", "content": "x", "tool_calls": calls}, usage=usage))
    reply = ChatClient(model(raw)).complete(HI)
    assert reply.message == {
        "role": "assistant",
        "content": "x",
        "tool_calls": [fn_call("echo", "{}", "call_0"), fn_call("big", '{"n": 1}', "c2")],
    }
    assert clean_usage(reply.usage) == {"prompt_tokens": 3}  # a negative count is no count


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_repeated_call_ids_in_a_turn_are_renamed(provider):
    """Three calls sharing an id (and one already named like the rename) get unique ids."""
    if provider == "openai":
        calls = [fn_call(call_id="c"), fn_call(call_id="c"), fn_call(call_id="c_2"), fn_call(call_id="c")]
        body = chat({"content": None, "tool_calls": calls})
    else:
        block = {"type": "tool_use", "name": "echo", "input": {}}
        body = json.dumps({"content": [{**block, "id": i} for i in ("c", "c", "c_2", "c")]}).encode()
    message, _ = read(body, provider)
    assert [c["id"] for c in message["tool_calls"]] == ["c", "c_3", "c_2", "c_4"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(
    content=JSON,
    calls=JSON | st.lists(st.fixed_dictionaries({"id": JSON, "type": JSON, "function": JSON}), max_size=3),
)
@example(content="\ud800", calls=None)
@example(
    content=None, calls=[{"id": "a", "type": "function", "function": {"name": "n", "arguments": "1"}}] * 2
)
def test_any_reply_is_refused_cleanly_or_read_into_a_valid_message(content, calls):
    """Whatever a chat reply holds, reading it raises ReplyError or gives a message whose
    content is a string or null, whose calls are well formed with unique ids, and whose
    strings are valid UTF-8."""
    body = json.dumps({"choices": [{"message": {"content": content, "tool_calls": calls}}]}).encode()
    try:
        message, _ = read(body, "openai")
    except ReplyError as exc:
        assert exc.pointer.startswith("/") or exc.pointer == ""
        return
    assert message["content"] is None or isinstance(message["content"], str)
    json.dumps(message, ensure_ascii=False).encode("utf-8")  # no lone surrogate anywhere
    ids = [c["id"] for c in message.get("tool_calls", ())]
    assert len(set(ids)) == len(ids)
    for c in message.get("tool_calls", ()):
        assert c["type"] == "function" and isinstance(c["function"]["name"], str)
        assert isinstance(c["function"]["arguments"], str)


def test_nesting_at_the_limit_is_read_and_one_past_it_refused():
    """MAX_DEPTH levels of nesting are accepted; one more is refused; brackets inside strings
    do not count."""
    inner = "[" * (MAX_DEPTH - 4) + "]" * (MAX_DEPTH - 4)
    ok = '{"choices": [{"message": {"content": "[[[[[[", "x": ' + inner + "}}]}"
    assert read(ok.encode(), "openai")[0]["content"] == "[[[[[["
    deeper = ok.replace(inner, "[" + inner + "]")
    with pytest.raises(ReplyError, match=f"nested {MAX_DEPTH + 1} deep"):
        read(deeper.encode(), "openai")


# -- the runner -----------------------------------------------------------------------------
@pytest.fixture
def runner_for(store, tools):
    def build(server, provider="openai", **extra):
        return Runner(
            store, ModelsConfig({"chat": replace(model(server, provider, **extra), id="chat")}), tools
        )

    return build


def register(runner):
    return runner.register(
        {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}, "tools": [{"type": "echo"}]}
    )


SAMPLE = {
    "content-nan",
    "calls-string",
    "deep",
    "surrogate-in-name",
    "anthropic-nan-input",
    "anthropic-surrogate-text",
}


@pytest.mark.parametrize("lie", [lie for lie in LIES if lie[0] in SAMPLE], ids=lambda lie: lie[0])
def test_the_runner_stores_nothing_of_a_malformed_reply(raw, runner_for, store, lie):
    """A malformed reply ends the execution with LLMError; the memory holds the question
    only (nothing of the reply) and the record says the execution failed, naming why."""
    _, provider, body, named = lie
    runner = runner_for(raw, provider)
    agent_id = register(runner)
    memory_id = runner.memory.create(agent_id)
    raw.answer(body)
    with pytest.raises(LLMError, match="is not a"):
        runner.execute(agent_id, "go", memory_id=memory_id)
    messages, _, _ = runner.memory.load(memory_id, agent_id)
    assert messages == [{"role": "user", "content": "go"}]
    assert runner.view(memory_id)["view"] == messages
    _, rows = ExecutionStore(store.engine).list(agent_id)
    record = ExecutionStore(store.engine).get(rows[0]["execution_id"])
    assert record["status"] == "error" and named in record["error"]
    assert record["calls"][0]["failed"] is True


def test_the_runner_ends_at_the_deadline_and_the_record_says_so(raw, runner_for, store):
    """A trickling model: the execution ends by the deadline with LLMTimeoutError, recorded."""
    runner = runner_for(raw)
    agent_id = register(runner)
    raw.trickle(interval=0.2)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError):
        runner.execute(agent_id, "go")
    assert time.monotonic() - started < DEADLINE + SLACK
    _, rows = ExecutionStore(store.engine).list(agent_id)
    record = ExecutionStore(store.engine).get(rows[0]["execution_id"])
    assert record["status"] == "error" and record["error"].startswith("LLMTimeoutError: ")


def test_compacting_now_with_a_failing_model_is_the_models_error(raw, runner_for):
    """_compact whose summariser model trickles ends at the deadline with LLMTimeoutError (504),
    one that lies with LLMError (502), not a definition's error; the view is unchanged."""
    runner = runner_for(raw)
    inline = {
        "hooks": {
            "pre_llm": [
                {
                    "type": "SummarizationManager",
                    "config": {"summarization_model_id": "chat", "preserve_recent_messages": 2},
                    "activation": {"tokens_exceed": 10**9},
                }
            ]
        }
    }
    agent_id = runner.register(
        {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}, "context_management": inline}
    )
    memory_id = None
    for i in range(3):
        raw.answer(chat({"content": f"answer {i}"}))
        memory_id = runner.execute(agent_id, f"question {i}", memory_id=memory_id).memory_id
    before = runner.view(memory_id)["view"]
    raw.trickle(interval=0.2)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError):
        runner.compact(agent_id, memory_id)
    assert time.monotonic() - started < DEADLINE + SLACK
    raw.answer(chat({"content": {"goal": []}}))
    with pytest.raises(LLMError, match="/choices/0/message/content: is an object") as caught:
        runner.compact(agent_id, memory_id)
    assert not isinstance(caught.value, LLMTimeoutError)
    assert runner.view(memory_id)["view"] == before


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_parallel_calls_sharing_an_id_give_a_valid_next_request(runner_for, provider):
    """Two parallel calls with one id: each gets its own id and its own result, so the next
    request is one the provider accepts (the Anthropic server refuses anything else)."""
    with ChatServer(provider=provider) as server:
        runner = runner_for(server, provider, timeout=5.0)
        agent_id = register(runner)
        twice = tool_call(("echo", {"n": 1}), ("echo", {"n": 2}))
        for c in twice["tool_calls"]:
            c["id"] = "same"
        server.reply(twice)
        server.reply("done")
        result = runner.execute(agent_id, "go")
        assert result.response == "done"
        sent = json.dumps(server.requests[-1])
        if provider == "openai":
            messages = server.requests[-1]["messages"]
            assert [c["id"] for c in messages[-3]["tool_calls"]] == ["same", "same_2"]
            assert [(m["tool_call_id"], m["content"]) for m in messages[-2:]] == [
                ("same", '{"n": 1}'),
                ("same_2", '{"n": 2}'),
            ]
        else:
            assert sent.count('"tool_use_id": "same"') == 1 and sent.count('"tool_use_id": "same_2"') == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_keyless_endpoint_gets_no_key_header(runner_for, provider):
    """Without api_key_env the runner calls the endpoint with no key header at all."""
    with ChatServer(provider=provider) as server:
        runner = runner_for(server, provider, timeout=5.0)
        server.reply("hello")
        assert runner.execute(register(runner), "go").response == "hello"
        _, headers = server.received[-1]
        assert "authorization" not in headers and "x-api-key" not in headers


# -- the API, under uvicorn, and `ctxmgmt serve` ------------------------------------------------
def test_the_api_answers_502_or_504_and_memory_routes_stay_200(raw, store, tools, caplog):
    """Every lie is a 502 llm_exception naming the fault, a trickle a 504 llm_timeout within the
    deadline; the memory routes answer 200 after each, and nothing is logged as a traceback."""
    caplog.set_level(logging.WARNING)
    models = ModelsConfig({p: replace(model(raw, p), id=p) for p in ("openai", "anthropic")})
    with (
        LiveServer(create_app(store, models=models, tools=tools)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        agents = {
            p: client.post(
                f"{AGENTS}/_register", json={"name": p, "type": "conversational", "llm": {"model_id": p}}
            ).json()["agent_id"]
            for p in ("openai", "anthropic")
        }
        raw.answer(chat({"content": "first"}))
        first = client.post(f"{AGENTS}/{agents['openai']}/_execute", json={"parameters": {"question": "q"}})
        memory_id = first.json()["inference_results"][0]["output"][0]["result"]
        for name, provider, body, named in LIES:
            raw.answer(body)
            answer = client.post(
                f"{AGENTS}/{agents[provider]}/_execute", json={"parameters": {"question": name}}
            )
            assert answer.status_code == 502, (name, answer.text)
            assert (
                answer.json()["error"]["type"] == "llm_exception"
                and named in answer.json()["error"]["reason"]
            )
        raw.answer(b'{"choices": [{"message": {"content": {"x": NaN}}}]}')
        bad = client.post(
            f"{AGENTS}/{agents['openai']}/_execute",
            json={"parameters": {"question": "again", "memory_id": memory_id}},
        )
        assert bad.status_code == 502
        assert client.get(f"{MEMORY}/{memory_id}").status_code == 200
        stored = client.get(f"{MEMORY}/{memory_id}/messages").json()["messages"]
        assert [m["content"] for m in stored] == ["q", "first", "again"]
        raw.trickle(interval=0.2)
        started = time.monotonic()
        slow = client.post(f"{AGENTS}/{agents['openai']}/_execute", json={"parameters": {"question": "slow"}})
        assert time.monotonic() - started < DEADLINE + SLACK
        assert slow.status_code == 504 and slow.json()["error"]["type"] == "llm_timeout"
        # Unscripted, the endpoint answers 500: its fault, so a 502 for the client.
        upstream = client.post(
            f"{AGENTS}/{agents['openai']}/_execute", json={"parameters": {"question": "x"}}
        )
        assert upstream.status_code == 502 and "answered 500" in upstream.json()["error"]["reason"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_a_summariser_that_must_not_fail_answers_for_its_model(raw, store):
    """A summariser with on_error: fail whose model trickles or lies makes the execution a 504
    or a 502 (the model's fault), not a 422 (the definition's)."""
    entry = {
        "type": "SummarizationManager",
        "config": {"summarization_model_id": "chat", "preserve_recent_messages": 2},
        "activation": {"message_count_exceed": 3},
        "on_error": "fail",
    }
    models = ModelsConfig({"chat": replace(model(raw), id="chat")})
    body = {"name": "a", "llm": {"model_id": "chat"}, "context_management": {"hooks": {"pre_llm": [entry]}}}
    with (
        LiveServer(create_app(store, models=models)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        agent_id = client.post(f"{AGENTS}/_register", json=body).json()["agent_id"]
        memory_id = None
        for status, script in (
            (200, lambda: raw.answer(chat({"content": "a1"}))),
            (200, lambda: raw.answer(chat({"content": "a2"}))),
            (504, lambda: raw.trickle(interval=0.2)),
            (502, lambda: raw.answer(chat({"content": None, "tool_calls": "x"}))),
        ):
            script()
            params = {"question": "q", **({"memory_id": memory_id} if memory_id else {})}
            answer = client.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": params})
            assert answer.status_code == status, answer.text
            if status == 200:
                memory_id = answer.json()["inference_results"][0]["output"][0]["result"]
            else:
                assert "SummarizationManager" in answer.json()["error"]["reason"]


def test_ctxmgmt_serve_holds_against_a_keyless_endpoint_that_misbehaves(raw, tmp_path):
    """`ctxmgmt serve` with a keyless model: a trickle is a 504 within the deadline, a lie a
    502, a 100 MB reply a 502 that raises the server's peak memory by <= 64 MB; the memory
    route stays 200 and the server's log holds no traceback."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"models:\n  chat:\n    base_url: {raw.base_url}\n    model: local\n    timeout: {DEADLINE:g}\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("OPENAI_API_KEY", None)
    command = [sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port), "--config", str(config)]
    command += ["--db", f"sqlite:///{tmp_path}/db.sqlite"]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if client.get("/_health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            agent_id = client.post(
                f"{AGENTS}/_register",
                json={"name": "a", "type": "conversational", "llm": {"model_id": "chat"}},
            ).json()["agent_id"]
            raw.answer(chat({"content": "hello"}))
            first = client.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": {"question": "q"}})
            assert first.status_code == 200, first.text
            memory_id = first.json()["inference_results"][0]["output"][0]["result"]
            again = {"question": "again", "memory_id": memory_id}

            raw.trickle(interval=0.2)
            started = time.monotonic()
            slow = client.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": again})
            assert slow.status_code == 504 and time.monotonic() - started < DEADLINE + SLACK

            raw.answer(chat({"content": 1e308}).replace(b"1e+308", b"Infinity"))
            assert client.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": again}).status_code == 502

            peak = vm_hwm(proc.pid)
            raw.flood(100_000_000)
            flooded = client.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": again})
            assert flooded.status_code == 502 and "max_response_bytes" in flooded.json()["error"]["reason"]
            assert vm_hwm(proc.pid) - peak <= 64 * 1024

            assert client.get(f"{MEMORY}/{memory_id}").status_code == 200
            stored = client.get(f"{MEMORY}/{memory_id}/messages").json()["messages"]
            assert [m["content"] for m in stored] == ["q", "hello", "again", "again", "again"]
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    output = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in output and "is not set" not in output, output


def vm_hwm(pid):
    """A process's peak resident memory in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw deflate"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 4096])
def test_a_compressed_reply_decodes_whatever_its_chunks(encoding, size):
    """A compressed reply decodes the same however the wire splits it (a one-byte first chunk
    of deflate included), an empty one is an empty body, and one cut short is an error."""
    import gzip
    import zlib

    import httpx as _httpx

    from ctxmgmt.llm.decoding import Decoder

    data = b'{"answer": "ok"}' * 500
    packed = {
        "gzip": gzip.compress(data),
        "deflate": zlib.compress(data),
        "raw deflate": zlib.compress(data)[2:-4],
    }[encoding]
    header = _httpx.Headers({"content-encoding": "deflate" if "deflate" in encoding else "gzip"})
    decoder = Decoder(1 << 20, header)
    assert b"".join(decoder.feed(packed[i : i + size]) for i in range(0, len(packed), size)) == data
    decoder.finish()
    Decoder(1 << 20, header).finish()  # nothing came: an empty body
    cut = Decoder(1 << 20, header)
    cut.feed(packed[: len(packed) // 2])
    with pytest.raises(_httpx.DecodingError):
        cut.finish()
