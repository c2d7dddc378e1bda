"""Recall through the proxy: the model reads archived content back through context_read, which
the proxy answers itself; the client never sees a recall call."""

from __future__ import annotations

import json
import re
import time

import anthropic
import httpx
import openai
import pytest

from ctxmgmt import load_definition
from ctxmgmt.api import create_app
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.offload import LocalOffloader

from ..conftest import LiveServer, shipped
from .conftest import models_for, stored_record
from .upstream import Reply, input_tokens

SECRET_LINE = "line 1733: the checksum of build 9f3e2a is 0xC0FFEE"


def _history() -> list[dict]:
    big = "\n".join(f"line {i}: build log entry {i:05d} with some detail" for i in range(3000))
    big = big.replace("line 1733: build log entry 01733 with some detail", SECRET_LINE)
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}
    return [
        {"role": "system", "content": "You build software."},
        {"role": "user", "content": "Build it and tell me the checksum."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": big},
    ]


def _ask(server: LiveServer) -> httpx.Response:
    """The chat history of :func:`_history` through the archiving definition's proxy."""
    return httpx.post(
        f"{server.url}/proxy/long-running-agent/v1/chat/completions",
        json={"model": "gpt-test", "messages": _history()},
        timeout=60,
    )


def _names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def test_a_request_that_names_no_archive_is_counted_and_calibrated_as_it_went(store, archiving, upstream):
    """A request that may be offered recall is managed with the recall tools, but one that names
    no archive goes without them: its record counts what went, and the provider's report
    calibrates against that (the tools' ~200 tokens were counted as sent: a 9-token request
    recorded as 234, and the ratio taken low; its record showed the tools' tokens as freed)."""
    from ctxmgmt import Context, get_counter
    from ctxmgmt.store import ExecutionStore

    upstream.replies.extend([Reply("hello"), Reply("again")])
    messages = [{"role": "user", "content": "hi there, " + "please look at this. " * 100}]
    url = f"{archiving.url}/proxy/long-running-agent/v1/chat/completions"
    r = httpx.post(url, json={"model": "gpt-test", "messages": messages}, timeout=60)
    assert r.status_code == 200
    sent = upstream.seen[-1].body
    assert "tools" not in sent  # no recall tools went
    counted = get_counter("gpt-upstream").context(Context(messages=sent["messages"]))[0]
    call = stored_record(store, "proxy-long-running-agent")["calls"][0]
    assert call["tokens_after"] == counted == call["tokens_before"]  # nothing was managed
    assert call["reported"] == input_tokens(sent)
    messages += [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]
    r = httpx.post(url, json={"model": "gpt-test", "messages": messages}, timeout=60)
    assert r.status_code == 200
    executions = ExecutionStore(store.engine)
    _, listed = executions.list("proxy-long-running-agent")
    calls = [executions.get(e["execution_id"])["calls"][0] for e in listed]
    again = next(c for c in calls if c["tokens_after"] != counted)
    # Calibrated on the first request as it went: reported / counted, not / counted + tools.
    assert again["calibrated"] == round(again["tokens_after"] * input_tokens(sent) / counted)


def test_the_proxy_answers_recall_calls_itself(archiving, upstream):
    """The cut output's reference is offered with context_read; the model's read is answered by
    the proxy from the archive and the upstream asked again; the client gets the final answer."""

    def read_it(body: dict) -> Reply:
        assert "context_read" in _names(body)
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        ref = re.search(r"\bt-[0-9a-f]+", notice).group(0)
        assert SECRET_LINE not in notice  # cut
        return Reply(calls=[("context_read", {"ref": ref, "offset": 1730, "limit": 10, "unit": "lines"})])

    def answer(body: dict) -> Reply:
        result = body["messages"][-1]
        assert result["role"] == "tool" and SECRET_LINE in result["content"]
        return Reply("the checksum is 0xC0FFEE")

    upstream.replies.extend([read_it, answer])
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    got = client.chat.completions.create(model="gpt-test", messages=_history())
    assert got.choices[0].message.content == "the checksum is 0xC0FFEE"
    assert got.choices[0].message.tool_calls is None
    assert len(upstream.seen) == 2


def test_recall_rounds_end_and_the_last_request_offers_no_recall_tool(archiving, upstream):
    """A model that keeps reading gets at most four recall rounds; the fifth request offers no
    recall tool, so the client's answer never calls one."""

    def keep_reading(body: dict) -> Reply:
        if "context_read" in _names(body):
            return Reply(calls=[("context_search", {"pattern": "checksum"})])
        return Reply("giving up on reading")

    upstream.replies.extend([keep_reading] * 6)
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/chat/completions",
        json={
            "model": "gpt-test",
            "messages": _history(),
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        },
        timeout=60,
    )
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "giving up on reading"
    assert len(upstream.seen) == 5
    assert _names(upstream.seen[-1].body) == ["bash"]  # the client's own tool stays
    assert "checksum" in json.dumps(upstream.seen[1].body["messages"][-1])  # the search's hits


def _read_then_answer(upstream, field: str, call_name: str = "context_read"):
    """Script: a streamed answer that says a word and calls context_read on the cut output's
    reference; then (asked whole) the final answer, which needs the recalled line."""

    def read_it(body: dict) -> Reply:
        assert body.get("stream") is True
        text = json.dumps(body[field])
        ref = re.search(r"\bt-[0-9a-f]{32}", text).group(0)
        return Reply(
            preface="Let me look.",
            calls=[(call_name, {"ref": ref, "offset": 1730, "limit": 10, "unit": "lines"})],
        )

    def answer(body: dict) -> Reply:
        assert not body.get("stream")
        assert SECRET_LINE in json.dumps(body[field])
        return Reply("the checksum is 0xC0FFEE")

    upstream.replies.extend([read_it, answer])


def test_the_recall_calls_of_an_answer_and_their_results_are_bounded(archiving, upstream, monkeypatch):
    """An answer of many recall calls has MAX_CALLS of them run and the rest answered with an
    error that says to call again; results past the request's RECALL_CHARS are an error that
    says to answer with what was read. Every call gets its result."""
    from ctxmgmt.api.proxy import handler

    monkeypatch.setattr(handler, "RECALL_CHARS", 5000)
    ref = {}

    def read_many(body: dict) -> Reply:
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        ref["ref"] = re.search(r"\bt-[0-9a-f]+", notice).group(0)
        args = {"ref": ref["ref"], "offset": 0, "limit": 2000, "unit": "chars"}
        return Reply(calls=[("context_read", args)] * 40)

    def answer(body: dict) -> Reply:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"][1:]
        assert len(results) == 40
        read = [r for r in results if not r.startswith("error:")]
        assert len(read) == 3 and sum(map(len, read[:2])) + len(read[2].split("\n[cut: ")[0]) == 5000
        assert read[2].endswith("characters of recall are spent]")  # 2,000 + 2,000 + what was left, said
        assert all("are spent" in r for r in results[3:16])
        assert all("at most 16 recall calls" in r for r in results[16:])
        return Reply("done")

    upstream.replies.extend([read_many, answer])
    r = _ask(archiving)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "done"


def _names_no_archive(sent: dict) -> None:
    """The request's long output was cut, and nothing in it names an archive or a recall tool
    (the model could not read one back)."""
    text = json.dumps(sent)
    assert "[truncated: original" in text and SECRET_LINE not in text  # cut
    assert "context_read" not in text and not re.search(r"\b[tm]-[0-9a-f]{32}", text)


def test_a_chat_request_for_several_choices_is_offered_no_recall(archiving, upstream):
    """With ``n`` > 1 each choice could call recall and one answer goes back: no recall tool
    is offered, nothing sent names an archive, and the choices reach the client as the
    upstream sent them."""
    upstream.replies.append(lambda body: Reply("seen"))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/chat/completions",
        json={"model": "gpt-test", "messages": _history(), "n": 2},
        timeout=60,
    )
    assert r.status_code == 200
    sent = upstream.seen[0].body
    assert "context_read" not in json.dumps(sent.get("tools") or []) and sent["n"] == 2
    _names_no_archive(sent)


def test_a_conversation_that_archived_then_asks_several_choices_names_no_archive(archiving, upstream):
    """A conversation whose earlier request archived, continued by one that cannot be offered
    recall (``n`` > 1), gets a view made anew: nothing sent names the archive made before."""
    url = f"{archiving.url}/proxy/long-running-agent/v1/chat/completions"
    upstream.replies.append(lambda body: Reply("done"))
    assert httpx.post(url, json={"model": "gpt-test", "messages": _history()}, timeout=60).status_code == 200
    assert re.search(r"\bt-[0-9a-f]{32}", json.dumps(upstream.seen[-1].body))  # archived, named
    history = [*_history(), {"role": "assistant", "content": "done"}, {"role": "user", "content": "again"}]
    upstream.replies.append(lambda body: Reply("done"))
    r = httpx.post(url, json={"model": "gpt-test", "messages": history, "n": 2}, timeout=60)
    assert r.status_code == 200, r.text
    _names_no_archive(upstream.seen[-1].body)


def test_a_clients_own_tool_named_as_a_recall_tool_stays_its_own(archiving, upstream):
    """A client that declares its own ``context_search`` (a wiki search) keeps it: no recall is
    offered beside it, its definition goes upstream as it is, and the model's call of it
    reaches the client, never answered by the proxy. Nothing sent names an archive: the model
    would call the client's tool for it."""
    mine = {
        "type": "function",
        "function": {
            "name": "context_search",
            "description": "Search MY company wiki",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    upstream.replies.append(lambda body: Reply(calls=[("context_search", {"q": "vpn"})]))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/chat/completions",
        json={"model": "gpt-test", "messages": _history(), "tools": [mine]},
        timeout=60,
    )
    assert r.status_code == 200 and len(upstream.seen) == 1
    assert upstream.seen[0].body["tools"] == [mine]
    _names_no_archive(upstream.seen[0].body)
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "context_search", "arguments": '{"q": "vpn"}'}


def test_a_clients_own_recall_named_tool_has_its_long_result_cut_naming_no_archive(archiving, upstream):
    """The long result of a client's own ``context_search`` is cut like any result; no recall
    is offered beside the client's tool, so its cut part is not archived and nothing sent
    names an archive (that such a result is archived where there is recall: the test below)."""
    mine = {"type": "function", "function": {"name": "context_search", "parameters": {"type": "object"}}}
    *start, _, result = _history()
    call = {"id": "c1", "type": "function", "function": {"name": "context_search", "arguments": "{}"}}
    messages = [*start, {"role": "assistant", "content": None, "tool_calls": [call]}, result]
    upstream.replies.append(lambda body: Reply("seen"))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/chat/completions",
        json={"model": "gpt-test", "messages": messages, "tools": [mine]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    _names_no_archive(upstream.seen[0].body)


def test_a_tool_of_its_own_named_as_a_recall_tool_has_its_long_result_archived(tmp_path):
    """With an archive (the library, a runner), the long result of an agent's own
    ``context_search`` is archived before it is cut, a reference in its notice: it is not
    taken for a recall result, which the archive holds already."""
    from ctxmgmt import Context

    *start, _, result = _history()
    call = {"id": "c1", "type": "function", "function": {"name": "context_search", "arguments": "{}"}}
    messages = [*start, {"role": "assistant", "content": None, "tool_calls": [call]}, result]
    definition = load_definition(shipped("long-running-agent"))
    out = definition.apply(
        "post_tool", Context(messages=messages), offloader=LocalOffloader(tmp_path / "a"), session="s"
    )
    notice = out.context.messages[-1]["content"]
    assert SECRET_LINE not in notice and re.search(r"stored as t-[0-9a-f]{32}", notice), notice[:300]


def test_a_recall_tool_echoed_back_with_fields_of_its_own_is_the_proxys(archiving, upstream):
    """A Responses client that sends back the recall tools as the answer echoed them (with
    ``strict`` added) gets recall as before: each tool declared once, the proxy's."""
    from ctxmgmt.agents.tools import recall_tools
    from ctxmgmt.api.proxy.recall import schemas

    echoed = [{**tool, "strict": True} for tool in schemas("responses", recall_tools(None, "s"))]
    _, ask, _, result = _history()
    items = [
        ask,
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd": "make"}'},
        {"type": "function_call_output", "call_id": "c1", "output": result["content"]},
    ]
    upstream.replies.append(lambda body: Reply("done"))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/responses",
        json={"model": "gpt-test", "input": items, "tools": echoed},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    names = [t["name"] for t in upstream.seen[0].body["tools"]]
    assert sorted(names) == ["context_read", "context_search"]
    assert all("strict" not in t for t in upstream.seen[0].body["tools"])


def test_a_clients_tool_with_the_recall_tools_words_but_its_own_parameters_is_its_own():
    """A client's context_search that reuses ctxmgmt's description with parameters of its own
    is the client's: no recall beside it (only ``strict`` may differ in an echo)."""
    from ctxmgmt.agents.tools import recall_tools
    from ctxmgmt.api.proxy.recall import schemas, with_recall

    declared = schemas("chat", recall_tools(None, "s"))
    echo = {**declared[1], "function": {**declared[1]["function"], "strict": True}}
    assert with_recall("chat", [echo], declared) == declared
    own = {**declared[1], "function": {**declared[1]["function"], "parameters": {"type": "object"}}}
    assert with_recall("chat", [own], declared) is None


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_recall_is_not_offered_past_openais_128_tools(archiving, upstream, api):
    """A client with 127 tools of its own: the recall tools would make 129, more than OpenAI
    takes, so none is offered; with 126 both fit."""
    for own in (127, 126):
        upstream.seen.clear()
        upstream.replies.append(lambda body: Reply("done"))
        if api == "chat":
            tools = [
                {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}}
                for i in range(own)
            ]
            body = {"model": "gpt-test", "messages": _history(), "tools": tools}
        else:
            named = ({"type": "function", "name": f"tool_{i}"} for i in range(own))
            tools = [{**tool, "parameters": {"type": "object"}} for tool in named]
            _, ask, _, result = _history()
            items = [
                ask,
                {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd": "make"}'},
                {"type": "function_call_output", "call_id": "c1", "output": result["content"]},
            ]
            body = {"model": "gpt-test", "input": items, "instructions": "You build.", "tools": tools}
        path = "chat/completions" if api == "chat" else "responses"
        r = httpx.post(f"{archiving.url}/proxy/long-running-agent/v1/{path}", json=body, timeout=60)
        assert r.status_code == 200, r.text
        sent = upstream.seen[0].body["tools"]
        assert len(sent) == (127 if own == 127 else 128)
        assert ("context_read" in json.dumps(sent)) is (own == 126)
        # Cut unarchived with 127 tools; with 126 (recall offered) the view is made anew and
        # the cut part archived, its reference in the notice.
        named = re.search(r"stored as t-[0-9a-f]{32}", json.dumps(upstream.seen[0].body))
        assert (named is not None) is (own == 126)


def test_a_streamed_response_the_upstream_stores_is_offered_no_recall(archiving, upstream):
    """A streamed Responses request that the upstream stores (``store`` not false) is offered no
    recall tool: its stream must complete the response it began, and a client may continue
    that response by its id, which would end in a recall call."""
    upstream.replies.append(lambda body: Reply("seen"))
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    events = list(client.responses.create(model="gpt-test", input=_responses_history(), stream=True))
    assert events[-1].response.output_text == "seen"
    sent = upstream.seen[0].body
    assert "context_read" not in json.dumps(sent.get("tools") or [])
    _names_no_archive(sent)


def test_a_streamed_chat_answer_that_reads_ends_with_the_final_answer(archiving, upstream):
    """The OpenAI SDK streaming through the proxy: the words before the recall call arrive as
    they came, the recall is answered by the proxy, and the same message ends with the final
    answer, a blank line between them; the client never sees context_read."""
    _read_then_answer(upstream, "messages")
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    chunks = list(
        client.chat.completions.create(
            model="gpt-test", messages=_history(), stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me look.\n\nthe checksum is 0xC0FFEE"  # one message: the two parts apart
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert chunks[-1].usage is not None
    assert len({c.id for c in chunks}) == 1  # one message


def test_a_streamed_anthropic_answer_that_reads_ends_with_the_final_answer(archiving, upstream):
    """The Anthropic SDK's stream helper assembles one message: the text before the read, then
    the final answer's text; no tool_use block."""
    _read_then_answer(upstream, "messages")
    client = anthropic.Anthropic(base_url=f"{archiving.url}/proxy/long-running-agent", api_key="k")
    history = _anthropic_history()
    with client.messages.stream(model="claude-test", max_tokens=100, messages=history) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "text"]
    assert final.content[1].text == "the checksum is 0xC0FFEE"
    assert final.stop_reason == "end_turn"


def test_a_streamed_anthropic_recall_call_whose_input_is_no_json_is_told_so(archiving, upstream):
    """Through the proxy: a streamed Anthropic recall call whose input deltas make no JSON
    object is answered, in the round the proxy sends, with the error that says so (and
    ``{}`` in its place, an object as the API wants); the client gets the final answer."""
    told = []

    def answer(body: dict) -> Reply:
        told.append(json.dumps(body["messages"][-1]))
        return Reply("asked again")

    upstream.replies.extend([Reply(preface="Let me look.", calls=[("context_read", "{not json")]), answer])
    client = anthropic.Anthropic(base_url=f"{archiving.url}/proxy/long-running-agent", api_key="k")
    with client.messages.stream(model="claude-test", max_tokens=100, messages=_anthropic_history()) as stream:
        final = stream.get_final_message()
    assert final.content[-1].text == "asked again"
    assert "arguments are not a JSON object" in told[0], told
    calls = [
        b
        for m in upstream.seen[1].body["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_use"
    ]
    assert calls[-1]["name"] == "context_read" and calls[-1]["input"] == {}


def test_a_streamed_responses_answer_that_reads_ends_with_the_final_answer(archiving, upstream):
    """The Responses API streamed: the final response holds the words before the read and the
    final answer, and no function call."""
    _read_then_answer(upstream, "input")
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    events = list(
        client.responses.create(model="gpt-test", input=_responses_history(), stream=True, store=False)
    )
    assert events[-1].type == "response.completed"
    final = events[-1].response
    assert [item.type for item in final.output] == ["message", "message"]
    assert final.output_text == "Let me look.the checksum is 0xC0FFEE"
    assert not any(e.type == "response.output_item.added" and e.item.type == "function_call" for e in events)
    # the final answer's text streams as deltas too, as a client that shows deltas reads it
    said = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert said == "Let me look.the checksum is 0xC0FFEE"
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert added[-1].type == "message" and added[-1].content == []  # added empty, as the API adds it
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert final.id == events[0].response.id  # the response the stream began (a new call's id before)
    _read_then_answer(upstream, "input")
    with client.responses.stream(model="gpt-test", input=_responses_history(), store=False) as stream:
        assert stream.get_final_response().output_text == "Let me look.the checksum is 0xC0FFEE"


def _anthropic_history() -> list[dict]:
    chat = _history()
    return [
        {"role": "user", "content": chat[1]["content"]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "make"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": chat[3]["content"]}],
        },
    ]


def _responses_history() -> list[dict]:
    chat = _history()
    return [
        {"role": "user", "content": chat[1]["content"]},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd": "make"}'},
        {"type": "function_call_output", "call_id": "c1", "output": chat[3]["content"]},
    ]


def test_an_answer_that_reads_nothing_comes_back_as_it_was(archiving, upstream):
    """Recall offered but not used: the upstream's answer reaches the client byte for byte."""
    upstream.replies.append(Reply("no need to read"))
    r = _ask(archiving)
    assert "context_read" in _names(upstream.seen[-1].body)
    assert r.status_code == 200 and r.content == upstream.sent[-1]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("reads", [False, True], ids=["reads-nothing", "reads"])
def test_a_responses_answer_echoes_none_of_the_recall_tools(archiving, upstream, stream, reads):
    """A Responses answer echoes the request's tools: the client's come back, the recall
    tools the proxy offered never do (in the whole response, and in every streamed event that
    holds it), whether the model read or not."""
    if reads:
        _read_then_answer(upstream, "input")
    else:
        upstream.replies.append(Reply("no need to read"))
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    own = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    asked = {"model": "gpt-test", "input": _responses_history(), "tools": [own], "store": False}
    if stream:
        events = list(client.responses.create(**asked, stream=True))
        echoes = [e.response.tools for e in events if getattr(e, "response", None) is not None]
        assert [e.type for e in events if getattr(e, "response", None) is not None][
            -1
        ] == "response.completed"
    else:
        echoes = [client.responses.create(**asked).tools]
    assert "context_read" in [t.get("name") for t in upstream.seen[0].body["tools"]]  # it was offered
    assert echoes and all([t.name for t in tools] == ["get_weather"] for tools in echoes), echoes


@pytest.mark.parametrize("status", [400, 413])
def test_an_upstream_that_refuses_a_recall_round_is_a_502_not_the_clients_error(
    store, archiving, upstream, status
):
    """A recall round is the proxy's own request: the upstream refusing it (a 400, a 413 "prompt
    is too long") is a 502 that says so, not the client's 4xx (on which a client such as
    Claude Code would compact or give up, though its request was fine), and it is recorded
    with the report of the answer that called recall (the calibration keeps its sample)."""

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]+", json.dumps(body["messages"])).group(0)
        upstream.status = status  # the next request, the recall round, is refused
        return Reply(calls=[("context_read", {"ref": ref})])

    upstream.replies.append(read_it)
    r = _ask(archiving)
    assert len(upstream.seen) == 2
    assert r.status_code == 502 and "recall round" in r.json()["error"]["message"]
    record = stored_record(store, "proxy-long-running-agent")
    assert "recall round" in record["error"]
    assert record["calls"][0]["reported"] == input_tokens(upstream.seen[0].body)


@pytest.fixture
def raw_archiving(store, tmp_path):
    """The archiving definition's proxy before an upstream that answers the bytes it is given."""
    from ctxmgmt.testing import RawServer

    store.seed("long-running-agent", shipped("long-running-agent"))
    with RawServer() as raw:
        entry = {"base_url": raw.base_url, "model": "up", "context_window": 16_000, "max_retries": 0}
        models = ModelsConfig.from_dict({"models": {"gpt-test": entry}})
        app = create_app(store, models=models, offloader=LocalOffloader(tmp_path / "archive"))
        with LiveServer(app) as server:
            yield raw, server


def _chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    chunk["choices"][0]["finish_reason"] = finish
    return f"data: {json.dumps({**chunk, **extra})}\n\n".encode()


def _streamed(server: LiveServer) -> str:
    body = {"model": "gpt-test", "messages": _history(), "stream": True}
    url = f"{server.url}/proxy/long-running-agent/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        assert r.status_code == 200
        return r.read().decode()


_DEEP = "[" * 100_000 + "]" * 100_000


def test_an_answer_too_deep_to_read_is_a_502_when_recall_was_offered(store, raw_archiving):
    """An answer nested deeper than the parser goes (a model may write such a tool input) is
    passed on unread when no recall was offered; with recall offered it may hold a recall
    call the client must never get: a 502 that says why, recorded."""
    raw, server = raw_archiving
    answer = '{"id": "c", "object": "chat.completion", "choices": [], "extra": ' + _DEEP + "}"
    raw.answer(answer.encode(), headers={"content-type": "application/json"})
    r = _ask(server)
    assert r.status_code == 502 and "nested deeper" in r.json()["error"]["message"]
    assert "nested deeper" in json.dumps(stored_record(store, "proxy-long-running-agent"))


def test_a_streamed_event_too_deep_to_read_ends_the_stream_when_recall_was_offered(store, raw_archiving):
    """The same in a stream: an event nested deeper than the parser goes, recall offered, ends
    the stream with an error event that says why (it was passed on unread, and a recall call
    in it would have reached the client); recorded."""
    raw, server = raw_archiving
    deep = _chunk({"content": "x"}).replace(b'"delta"', b'"extra": ' + _DEEP.encode() + b', "delta"')
    events = _chunk({"content": "Let me look."}) + deep + _chunk({}, "stop") + b"data: [DONE]\n\n"
    raw.answer(events, headers={"content-type": "text/event-stream"})
    got = _streamed(server)
    assert "Let me look." in got and _DEEP not in got
    assert "nested deeper" in got.rsplit("data: ", 1)[-1]
    assert "nested deeper" in json.dumps(stored_record(store, "proxy-long-running-agent"))


def test_events_under_another_content_type_never_pass_a_recall_call_on(raw_archiving):
    """Events the upstream sends under another content type than text/event-stream (text/plain)
    are read as a stream's are, recall offered: the model's recall call is answered by the
    proxy, the client gets the answer after it, never the call."""
    raw, server = raw_archiving
    call = {"index": 0, "id": "r1", "type": "function"}
    call["function"] = {"name": "context_search", "arguments": '{"pattern": "checksum"}'}
    events = _chunk({"tool_calls": [call]}) + _chunk({}, "tool_calls") + b"data: [DONE]\n\n"
    raw.answer(events, headers={"content-type": "text/plain"})
    final = {
        "id": "c2",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "the checksum"}}],
    }
    final["choices"][0]["finish_reason"] = "stop"
    raw.answer(json.dumps(final).encode(), headers={"content-type": "application/json"})
    got = _streamed(server)
    assert "context_search" not in got and "the checksum" in got, got
    assert got.rstrip().endswith("data: [DONE]")


def test_a_recall_rounds_answer_that_is_not_the_apis_is_a_502(store, raw_archiving):
    """The upstream's answer to a recall round (the proxy's own request) that is no chat
    answer (no choices) is a 502 that says so, recorded: not passed on as the client's 200."""
    raw, server = raw_archiving
    call = {"id": "r1", "type": "function", "function": {"name": "context_search", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    first = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    raw.answer(json.dumps(first).encode())
    raw.answer(b'{"id": 1}')
    r = _ask(server)
    assert r.status_code == 502 and "'choices'" in r.json()["error"]["message"], r.text
    assert raw.requests == 2
    assert "'choices'" in json.dumps(stored_record(store, "proxy-long-running-agent"))


def test_an_error_event_in_a_held_recall_call_ends_the_stream_as_failed(store, raw_archiving):
    """A stream that breaks off with the upstream's error event while a recall call was coming
    (its arguments cut) is no whole answer: no recall round is made of the cut call, the
    client gets an error event that says the upstream's and never the call, and the record
    says the stream failed."""
    raw, server = raw_archiving
    call = {"index": 0, "id": "r1", "type": "function"}
    call["function"] = {"name": "context_search", "arguments": '{"pattern": "chec'}
    events = _chunk({"tool_calls": [call]}) + b'data: {"error": {"message": "Overloaded"}}\n\n'
    raw.answer(events, headers={"content-type": "text/event-stream"})
    got = _streamed(server)
    assert raw.requests == 1 and "context_search" not in got, got
    assert "Overloaded" in got.rsplit("\n\n", 2)[-2]  # the proxy's error event says the upstream's
    assert stored_record(store, "proxy-long-running-agent")["status"] == "error"


def test_a_failed_response_holding_a_recall_call_ends_the_stream_as_failed(store, raw_archiving):
    """The same with a Responses stream that ends with response.failed (an event that ends the
    stream) while its recall call was coming: no round, the upstream's reason in the proxy's
    error event, the record failed."""
    raw, server = raw_archiving
    item = {"type": "function_call", "id": "fc1", "call_id": "r1", "name": "context_search", "arguments": ""}
    failed = {"type": "response.failed", "response": {"id": "r", "error": {"message": "Overloaded"}}}
    events = [
        {"type": "response.created", "response": {"id": "r"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"pattern": "ch'},
        failed,
    ]
    raw.answer(
        b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events),
        headers={"content-type": "text/event-stream"},
    )
    body = {"model": "gpt-test", "input": _responses_history(), "stream": True, "store": False}
    url = f"{server.url}/proxy/long-running-agent/v1/responses"
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        got = r.read().decode()
    assert raw.requests == 1 and "context_search" not in got, got
    assert "Overloaded" in got.rsplit("\n\n", 2)[-2]
    assert "Overloaded" in stored_record(store, "proxy-long-running-agent")["error"]


def test_each_whole_answer_is_parsed_once(archiving, upstream, monkeypatch):
    """A whole upstream answer is JSON-parsed once, for its usage and its recall calls alike."""
    from ctxmgmt.api.proxy import upstream as upstream_module

    parsed: list[bytes] = []
    original = upstream_module.answer_of

    def counting(data: bytes, response, *args, **kwargs):
        parsed.append(data)
        return original(data, response, *args, **kwargs)

    monkeypatch.setattr(upstream_module, "answer_of", counting)

    def read_it(body: dict) -> Reply:
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        return Reply(calls=[("context_read", {"ref": re.search(r"\bt-[0-9a-f]+", notice).group(0)})])

    upstream.replies.extend([read_it, Reply("done")])
    r = _ask(archiving)
    assert r.json()["choices"][0]["message"]["content"] == "done"
    assert len(upstream.seen) == 2
    assert len(parsed) == 2  # two answers, each parsed once


def _client_call_then_read(upstream, field: str, read: bool):
    """Script: a streamed answer that calls the client's ``get_weather`` (then, with ``read``,
    context_read on the cut output); asked again whole, the final answer."""

    def first(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(body[field])).group(0)
        calls = [("get_weather", {"city": "Oslo"})]
        if read:
            calls.append(("context_read", {"ref": ref, "offset": 1730, "limit": 10, "unit": "lines"}))
        return Reply(preface="Let me look.", calls=calls)

    upstream.replies.extend([first, Reply("the checksum is 0xC0FFEE")])


def _weather(api: str) -> dict:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    if api == "chat":
        return {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
    if api == "messages":
        return {"name": "get_weather", "input_schema": schema}
    return {"type": "function", "name": "get_weather", "parameters": schema}


def _seen_calls(api: str, body: dict) -> list[str]:
    """The tool calls of the last assistant turn in a request the upstream received."""
    if api == "chat":
        turn = [m for m in body["messages"] if m.get("role") == "assistant"][-1]
        return [c["function"]["name"] for c in turn.get("tool_calls") or ()]
    if api == "messages":
        turn = [m for m in body["messages"] if m.get("role") == "assistant"][-1]
        return [b["name"] for b in turn["content"] if b.get("type") == "tool_use"]
    return [i["name"] for i in body["input"] if i.get("type") == "function_call"][1:]  # [0]: the history's


def _stream_with_sdk(archiving, api: str) -> tuple[str, list[str]]:
    """Stream one answer through the proxy with the provider's real SDK: (its text, the tool
    calls the client got)."""
    base = f"{archiving.url}/proxy/long-running-agent"
    if api == "messages":
        client = anthropic.Anthropic(base_url=base, api_key="k")
        with client.messages.stream(
            model="claude-test", max_tokens=100, messages=_anthropic_history(), tools=[_weather(api)]
        ) as stream:
            final = stream.get_final_message()
        text = "".join(b.text for b in final.content if b.type == "text")
        return text, [b.name for b in final.content if b.type == "tool_use"]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k")
    if api == "responses":
        events = list(
            client.responses.create(
                model="gpt-test",
                input=_responses_history(),
                tools=[_weather(api)],
                stream=True,
                store=False,  # a stored streamed response is offered no recall
            )
        )
        response = events[-1].response
        return response.output_text, [i.name for i in response.output if i.type == "function_call"]
    chunks = list(
        client.chat.completions.create(
            model="gpt-test", messages=_history(), tools=[_weather(api)], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [
        call.function.name
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or ()
        if call.function and call.function.name
    ]
    return text, calls


@pytest.mark.parametrize(
    ("api", "field"), [("chat", "messages"), ("messages", "messages"), ("responses", "input")]
)
def test_a_client_call_streamed_before_a_recall_call_never_reaches_the_client(
    archiving, upstream, api, field
):
    """With recall offered, a streamed answer that calls the client's tool and then recall: the
    client (the real SDK) gets the final answer only, never a call the model's history drops;
    the recall round's request holds the recall call alone."""
    _client_call_then_read(upstream, field, read=True)
    text, calls = _stream_with_sdk(archiving, api)
    assert calls == []
    assert text.startswith("Let me look.") and text.endswith("the checksum is 0xC0FFEE")
    assert len(upstream.seen) == 2
    assert _seen_calls(api, upstream.seen[1].body) == ["context_read"]


@pytest.mark.parametrize(
    ("api", "field"), [("chat", "messages"), ("messages", "messages"), ("responses", "input")]
)
def test_a_streamed_client_call_without_recall_reaches_the_client_whole(archiving, upstream, api, field):
    """With recall offered but not called, a streamed client tool call is held to the stream's
    end and then reaches the client (the real SDK) as the upstream sent it."""
    _client_call_then_read(upstream, field, read=False)
    text, calls = _stream_with_sdk(archiving, api)
    assert calls == ["get_weather"]
    assert text.strip() == "Let me look."
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("tool", ["get_weather", "context_read"])
def test_a_stream_broken_off_while_holding_passes_on_the_clients_call_then_an_error(
    archiving, upstream, tool
):
    """With recall offered, a stream that breaks off after a tool call started: the client's
    own call reaches the client as it came, then an error event; a recall call never does."""
    upstream.replies.append(Reply(preface="Let me look.", calls=[(tool, {"city": "Oslo"})]))
    upstream.break_after = 4  # the role, the preface, the call's start and its arguments
    body = {"model": "gpt-test", "messages": _history(), "tools": [_weather("chat")], "stream": True}
    url = f"{archiving.url}/proxy/long-running-agent/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=30) as r:
        got = b"".join(r.iter_bytes())
    assert b"Let me look." in got
    assert (b'"get_weather"' in got and b"Oslo" in got) == (tool == "get_weather")
    assert b'"context_read"' not in got
    assert b'"error"' in got.rsplit(b"data: ", 1)[-1]


def test_an_answer_holding_anything_where_its_calls_go_has_no_recall_calls():
    """An upstream answer whose output, content, choices or message hold anything but a list
    or an object is read as calling no recall tool (never a failed stream)."""
    from ctxmgmt.api.proxy.recall import calls_of

    for bad in (1, "x", {"a": 1}, None, True):
        assert calls_of("responses", {"output": bad}) == []
        assert calls_of("messages", {"content": bad}) == []
        assert calls_of("chat", {"choices": [{"message": bad}]}) == []
        assert calls_of("chat", {"choices": [{"message": {"tool_calls": bad}}]}) == []


def _items_seen(events: list) -> list[str]:
    return [e.item.type for e in events if e.type == "response.output_item.added"]


def test_a_reasoning_item_goes_where_the_item_after_it_goes(archiving, upstream):
    """A reasoning model's reasoning item before a recall call is held with the call, and never
    reaches the client: its next request would hold a reasoning item without its following
    item, which OpenAI refuses. Before text, it is passed on as it came, in order."""

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(body["input"])).group(0)
        return Reply(
            calls=[("context_read", {"ref": ref, "offset": 1730, "limit": 10, "unit": "lines"})],
            reasoning=True,
        )

    upstream.replies.extend([read_it, Reply("the checksum is 0xC0FFEE", reasoning=True)])
    client = openai.OpenAI(base_url=f"{archiving.url}/proxy/long-running-agent/v1", api_key="k")
    events = list(
        client.responses.create(model="gpt-test", input=_responses_history(), stream=True, store=False)
    )
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].id == "rs_2"  # the final answer's own reasoning, not the read's
    assert _items_seen(events) == ["reasoning", "message"]
    upstream.replies.append(Reply("no need to read", reasoning=True))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/responses",
        json={"model": "gpt-test", "input": _responses_history(), "stream": True},
        timeout=60,
    )
    assert r.content == upstream.sent[-1]  # reasoning, then text: as it came


def test_recall_tools_come_when_something_is_archived_and_stay_as_the_conversation_grows(
    archiving, upstream, store, tmp_path
):
    """Nothing archived: no recall tool. Once a result is cut and archived, context_read is
    offered, and still in the next requests (a view that only grew keeps its answer), and in
    a process that starts from the stored state (it reads the view)."""
    upstream.replies.extend([Reply("looking"), Reply("built"), Reply("done"), Reply("still done")])
    url = f"{archiving.url}/proxy/long-running-agent/v1/chat/completions"
    start, big = _history()[:3], _history()[3]
    history = [*start, {"role": "tool", "tool_call_id": "c1", "content": "make: starting"}]
    seen = []
    for step in range(3):
        answer = httpx.post(url, json={"model": "gpt-test", "messages": history}, timeout=60).json()
        seen.append("context_read" in _names(upstream.seen[-1].body))
        history = [*history, answer["choices"][0]["message"]]
        if step == 0:  # the next request brings the build's long output
            call = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append({**big, "tool_call_id": "c2"})
        else:
            history.append({"role": "user", "content": "and then?"})
    assert seen == [False, True, True]
    # Another process on the same store: it restores the view and reads it.
    app = create_app(store, models=models_for(upstream), offloader=LocalOffloader(tmp_path / "archive"))
    with LiveServer(app) as other:
        httpx.post(
            f"{other.url}/proxy/long-running-agent/v1/chat/completions",
            json={"model": "gpt-test", "messages": history},
            timeout=60,
        ).raise_for_status()
    assert "context_read" in _names(upstream.seen[-1].body)


def test_the_events_held_to_watch_for_recall_are_bounded_by_max_response_bytes(store, upstream, tmp_path):
    """With recall offered, a streamed answer's events from its first tool call on are held in
    memory: past the model's max_response_bytes the stream ends with an error event naming
    it, as a whole answer that large would be refused."""
    store.seed("long-running-agent", shipped("long-running-agent"))
    spec = {"base_url": upstream.base_url, "model": "gpt-upstream", "context_window": 16_000}
    models = ModelsConfig.from_dict({"models": {"gpt-test": {**spec, "max_response_bytes": 4096}}})
    app = create_app(store, models=models, offloader=LocalOffloader(tmp_path / "archive"))
    upstream.replies.append(lambda body: Reply(calls=[("bash", {"cmd": "echo " + "x" * 20_000})]))
    body = {"model": "gpt-test", "messages": _history(), "stream": True}
    with (
        LiveServer(app) as server,
        httpx.stream(
            "POST", f"{server.url}/proxy/long-running-agent/v1/chat/completions", json=body, timeout=30
        ) as r,
    ):
        got = b"".join(r.iter_bytes())
    assert "context_read" in json.dumps(upstream.seen[0].body.get("tools"))  # recall was offered
    last = got.rsplit(b"data: ", 1)[-1]
    assert b"held to watch for recall calls" in last and b"max_response_bytes" in last


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_anthropic_answer_after_recall_opens_with_the_thinking_its_turn_began_with(
    archiving, upstream, stream
):
    """With thinking on (not interleaved), the model thinks in the first round only: the answer the
    client gets after a recall round opens with that round's thinking block, so that the turn the
    client sends back opens with it, as Anthropic requires (a 400 otherwise, which the test
    upstream gives as Anthropic does)."""
    chat = _history()
    thought = {"type": "thinking", "thinking": "I should build first.", "signature": "sig_0"}
    history = [
        {"role": "user", "content": chat[1]["content"]},
        {
            "role": "assistant",
            "content": [thought, {"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "make"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": chat[3]["content"]}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Built."}]},
        {"role": "user", "content": "Now check the checksum against the release."},
    ]

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(body["messages"])).group(0)
        return Reply(
            thinking=True,
            calls=[("context_read", {"ref": ref, "offset": 1730, "limit": 10, "unit": "lines"})],
        )

    upstream.replies.extend([read_it, Reply(calls=[("bash", {"cmd": "cat RELEASE"})])])
    client = anthropic.Anthropic(base_url=f"{archiving.url}/proxy/long-running-agent", api_key="k")
    thinking = {"type": "enabled", "budget_tokens": 1024}
    if stream:
        with client.messages.stream(
            model="claude-test", max_tokens=2048, messages=history, thinking=thinking
        ) as events:
            got = events.get_final_message()
    else:
        got = client.messages.create(
            model="claude-test", max_tokens=2048, messages=history, thinking=thinking
        )
    assert [b.type for b in got.content] == ["thinking", "tool_use"]
    assert got.content[0].signature == "sig_1" and got.content[1].name == "bash"
    upstream.replies.append(Reply("it matches"))
    call = got.content[1]
    history += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in got.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "0xC0FFEE"}]},
    ]
    again = client.messages.create(model="claude-test", max_tokens=2048, messages=history, thinking=thinking)
    assert again.content[0].text == "it matches"


def test_recall_rounds_stay_within_the_models_window(archiving, upstream):
    """Recall results (which no hook sees) are cut to what the model's window leaves beside the
    managed request, then refused with an error that says so: 16 reads of 20,000 characters made
    an 88,000-token request for a 16,000-token window (the provider refuses it). Every call gets
    its result."""
    from .upstream import input_tokens

    def read_many(body: dict) -> Reply:
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        ref = re.search(r"\bt-[0-9a-f]+", notice).group(0)
        return Reply(
            calls=[("context_read", {"ref": ref, "offset": k * 20_000, "limit": 20_000}) for k in range(16)]
        )

    upstream.replies.extend([read_many, Reply("done")])
    r = _ask(archiving)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "done"
    second = upstream.seen[1].body
    assert input_tokens(second) <= 16_000
    results = [m["content"] for m in second["messages"] if m.get("role") == "tool"][1:]
    assert len(results) == 16
    assert results[0].endswith("read a narrower part]") or len(results[0]) > 1_000
    assert results[-1].startswith("error: the model's window has no room left")


@pytest.mark.parametrize("limit", [6_000, 8_000])
def test_each_recall_round_and_the_reply_limit_it_asks_fit_the_window(archiving, upstream, limit):
    """A request asking a reply limit of its own (up to half of a 16k window) that is offered
    recall: every upstream request of it, the recall tools and each round's reads included,
    fits the window with that limit (the fit counts the tools, and the rounds get what the
    fit left, not more)."""
    from .upstream import input_tokens

    history = _history()
    for r in range(2, 7):  # more long outputs, so the window binds
        call = {
            "id": f"c{r}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": f"make m{r}"})},
        }
        log = "\n".join(f"line {i}: module {r} build log entry {i:05d} with some detail" for i in range(3000))
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{r}", "content": log},
        ]

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]+", json.dumps(body["messages"])).group(0)
        return Reply(calls=[("context_read", {"ref": ref, "offset": 0, "limit": 3000, "unit": "lines"})])

    upstream.replies.extend([read_it, Reply("done")])
    url = f"{archiving.url}/proxy/long-running-agent/v1/chat/completions"
    r = httpx.post(url, json={"model": "gpt-test", "messages": history, "max_tokens": limit}, timeout=60)
    assert r.status_code == 200, r.text
    assert len(upstream.seen) == 2 and "context_read" in _names(upstream.seen[0].body)
    for seen in upstream.seen:
        assert input_tokens(seen.body) + limit <= 16_000, input_tokens(seen.body)
    assert input_tokens(upstream.seen[1].body) > input_tokens(upstream.seen[0].body) + 500  # it read


def test_recall_rounds_leave_room_for_the_thinking_of_the_turn_in_progress(archiving, upstream):
    """An Anthropic turn in progress holds thinking, which the provider counts and no step may
    free: the recall rounds' reads get what the window leaves beside it too, so every upstream
    request with its reply limit fits the window (the rounds were given the thinking's room a
    second time)."""
    from .upstream import input_tokens

    chat = _history()
    thought = {"type": "thinking", "thinking": "I will read every line. " * 600, "signature": "sig_0"}
    use = {"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "make"}}
    history = [
        {"role": "user", "content": chat[1]["content"]},
        {"role": "assistant", "content": [thought, use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": chat[3]["content"]}],
        },
    ]

    def read_all(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]+", json.dumps(body["messages"])).group(0)
        reads = [{"ref": ref, "offset": k * 500, "limit": 500, "unit": "lines"} for k in range(6)]
        return Reply(calls=[("context_read", read) for read in reads])

    upstream.replies.extend([read_all, Reply("done")])
    body = {
        "model": "claude-test",
        "max_tokens": 1024,
        "messages": history,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    r = httpx.post(f"{archiving.url}/proxy/long-running-agent/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert len(upstream.seen) == 2 and "context_read" in json.dumps(upstream.seen[0].body["tools"])
    for seen in upstream.seen:
        assert input_tokens(seen.body) + 1024 <= 16_000, input_tokens(seen.body)
    assert input_tokens(upstream.seen[1].body) > input_tokens(upstream.seen[0].body) + 500  # it read


def test_recall_rounds_share_the_requests_one_deadline(store, upstream, tmp_path):
    """The model's ``timeout`` is the whole proxied request's deadline, recall rounds included:
    a model that keeps reading, each answer slow but within the timeout, is a 504 once the
    rounds together pass it (each round had a fresh timeout: five rounds took five)."""
    store.seed("long-running-agent", shipped("long-running-agent"))
    # Wide enough that a loaded machine's first request (its managers) leaves room for a
    # second round: at 2 s and 0.7 s a round, one run in a busy CI saw one round only.
    models = models_for(upstream, timeout=4)
    app = create_app(store, models=models, offloader=LocalOffloader(tmp_path / "archive"))

    def keep_reading(body: dict) -> Reply:
        time.sleep(1.2)  # after the request is seen: each round's arrival is recorded at once
        return Reply(calls=[("context_search", {"pattern": "checksum"})])

    upstream.replies.extend([keep_reading] * 6)
    with LiveServer(app) as server:
        r = _ask(server)
    assert r.status_code == 504, r.text
    assert "within 4 s" in r.json()["error"]["message"]
    assert 2 <= len(upstream.seen) < 5


def test_the_answer_a_recall_round_sends_back_is_counted_in_its_window(archiving, upstream):
    """What the answer that called said besides its calls (its text, its thinking) goes back in
    the next round and takes room from the results: an answer of 5,000 tokens of text and three
    long reads made a request over the window."""
    from .upstream import input_tokens

    said = " ".join(f"word{k}" for k in range(2500))

    def read_long(body: dict) -> Reply:
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        ref = re.search(r"\bt-[0-9a-f]+", notice).group(0)
        reads = [("context_read", {"ref": ref, "offset": k * 20_000, "limit": 20_000}) for k in range(3)]
        return Reply(preface=said, calls=reads)

    upstream.replies.extend([read_long, Reply("done")])
    r = _ask(archiving)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "done"
    second = upstream.seen[1].body
    assert second["messages"][-4]["content"] == said
    assert input_tokens(second) <= 16_000
    assert any(m["content"].endswith("read a narrower part]") for m in second["messages"][-3:])


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_the_last_recall_round_keeps_the_tools_its_history_calls(archiving, upstream, api):
    """A client that offers no tool of its own, and a model that keeps reading: the last round
    keeps the recall tools defined (its history holds their calls, and a request with tool
    calls but no tools is refused) and lets the model call none."""
    field = {"chat": "messages", "messages": "messages", "responses": "input"}[api]
    history = {"chat": _history, "messages": _anthropic_history, "responses": _responses_history}[api]()
    path = {"chat": "chat/completions", "messages": "messages", "responses": "responses"}[api]
    names = {
        "chat": lambda b: [t["function"]["name"] for t in b.get("tools", [])],
        "messages": lambda b: [t["name"] for t in b.get("tools", [])],
        "responses": lambda b: [t["name"] for t in b.get("tools", [])],
    }[api]

    def keep_reading(body: dict) -> Reply:
        if "context_search" in names(body) and body.get("tool_choice") in (None, "auto"):
            return Reply(calls=[("context_search", {"pattern": "checksum"})])
        return Reply("giving up on reading")

    upstream.replies.extend([keep_reading] * 6)
    body = {"model": "claude-test" if api == "messages" else "gpt-test", field: history, "max_tokens": 512}
    r = httpx.post(f"{archiving.url}/proxy/long-running-agent/v1/{path}", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert "giving up on reading" in r.text
    assert len(upstream.seen) == 5
    last = upstream.seen[-1].body
    assert sorted(names(last)) == ["context_read", "context_search"]
    assert last["tool_choice"] == ({"type": "none"} if api == "messages" else "none")
    assert "tool_choice" not in upstream.seen[-2].body


def test_a_responses_recall_round_drops_the_clients_calls_of_every_kind(archiving, upstream):
    """An answer that calls the client's custom tool and asks its approval for an MCP call
    beside a recall call goes on with the recall call only: the client's call of any kind
    would be a call without its output, which OpenAI refuses. The reasoning before them goes
    with the items kept."""

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(body["input"])).group(0)
        return Reply(
            preface="Let me look.", calls=[("context_read", {"ref": ref, "offset": 1730, "limit": 10})]
        )

    def with_client_calls(data: bytes) -> bytes:
        answer = json.loads(data)
        answer["output"][:0] = [
            {"type": "reasoning", "id": "rs_c", "summary": [], "encrypted_content": "xyz"},
            {
                "type": "custom_tool_call",
                "id": "ctc_1",
                "call_id": "cc1",
                "name": "apply_patch",
                "input": "*** Begin",
            },
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "name": "deploy",
                "arguments": "{}",
                "server_label": "s",
            },
        ]
        return json.dumps(answer).encode()

    upstream.replies.extend([read_it, Reply("the checksum is 0xC0FFEE")])
    upstream.rewrite = with_client_calls
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent/v1/responses",
        json={"model": "gpt-test", "input": _responses_history()},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    sent = upstream.seen[1].body["input"][len(_responses_history()) :]
    assert [item["type"] for item in sent] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_last_round_answer_that_calls_recall_anyway_reaches_the_client_without_the_call(
    archiving, upstream, api
):
    """A server that ignores ``tool_choice`` (many OpenAI-compatible ones do) may call recall
    in the last round: the client gets the answer without that call, ended as an answer that
    calls nothing, never a call of a tool it does not know."""
    field = "input" if api == "responses" else "messages"
    history = {"chat": _history, "messages": _anthropic_history, "responses": _responses_history}[api]()
    path = {"chat": "chat/completions", "messages": "messages", "responses": "responses"}[api]
    upstream.replies.extend(
        [Reply(preface="still reading", calls=[("context_search", {"pattern": "checksum"})])] * 5
    )
    body = {"model": "claude-test" if api == "messages" else "gpt-test", field: history, "max_tokens": 512}
    r = httpx.post(f"{archiving.url}/proxy/long-running-agent/v1/{path}", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert len(upstream.seen) == 5
    answer = r.json()
    said = json.dumps(answer.get("choices") or answer.get("content") or answer.get("output"))
    assert "context_search" not in said and "still reading" in said
    if api == "chat":
        assert answer["choices"][0]["finish_reason"] == "stop"
        assert answer["choices"][0]["message"].get("tool_calls") is None
    elif api == "messages":
        assert answer["stop_reason"] == "end_turn"
        assert [b["type"] for b in answer["content"]] == ["text"]
    else:
        assert [item["type"] for item in answer["output"]] == ["message"]


def _fc(call_id: str, name: str) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


RS = {"type": "reasoning", "id": "rs_1", "summary": []}


@pytest.mark.parametrize(
    ("output", "sent", "client_gets"),
    [
        # the reasoning goes with the recall call it was followed by, after the client's call
        ([RS, _fc("c1", "bash"), _fc("r1", "context_read")], ["rs_1", "r1"], ["rs_1", "c1"]),
        # ... and with the client's call it was followed by, after the recall call
        ([RS, _fc("r1", "context_read"), _fc("c1", "bash")], ["rs_1", "r1"], ["rs_1", "c1"]),
        # a hosted call holds its own result: it goes back too
        (
            [RS, {"type": "web_search_call", "id": "ws_1", "status": "completed"}, _fc("r1", "context_read")],
            ["rs_1", "ws_1", "r1"],
            ["rs_1", "ws_1"],
        ),
        # nothing but recall: the client gets a message that says so, no lone reasoning
        ([RS, _fc("r1", "context_read")], ["rs_1", "r1"], ["msg_ctxmgmt"]),
    ],
)
def test_a_reasoning_item_goes_with_the_items_it_reasoned_about(output, sent, client_gets):
    """A Responses reasoning item is kept when any item after it (to the next reasoning) is,
    in the round sent back and in the answer the client gets without its recall calls:
    OpenAI refuses a reasoning item without its item, and a call without its reasoning."""
    from ctxmgmt.api.proxy.recall import reply_of, without_recall_calls

    def ids(items: list[dict]) -> list[str]:
        return [x.get("call_id") or x["id"] for x in items]

    answer = {"output": output}
    assert ids(reply_of("responses", answer, {"r1"})) == sent
    assert ids(without_recall_calls("responses", answer)["output"]) == client_gets


def test_an_answer_of_recall_calls_only_is_never_left_empty():
    """Taken out of an answer that said nothing else, the recall calls leave an answer the
    client can send back: chat content, an Anthropic text block after the thinking (a turn may
    not end with thinking)."""
    from ctxmgmt.api.proxy.recall import NOTHING_SAID, without_recall_calls

    call = {"id": "r1", "type": "function", "function": {"name": "context_read", "arguments": "{}"}}
    chat = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    message = without_recall_calls("chat", chat)["choices"][0]["message"]
    assert message["content"] == NOTHING_SAID and message["tool_calls"] is None
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    use = {"type": "tool_use", "id": "r1", "name": "context_read", "input": {}}
    blocks = without_recall_calls("messages", {"content": [thinking, use], "stop_reason": "tool_use"})
    assert blocks["content"] == [thinking, {"type": "text", "text": NOTHING_SAID}]
    assert blocks["stop_reason"] == "end_turn"


def test_an_answer_that_leaves_no_room_for_a_round_is_the_last(archiving, upstream):
    """An answer whose own text leaves the window no room for even an error per call is not
    sent back for a round (that request would be over the window): the client gets it, its
    recall calls taken out."""
    said = "word " * 14_500

    def read_it(body: dict) -> Reply:
        notice = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
        ref = re.search(r"\bt-[0-9a-f]+", notice).group(0)
        return Reply(preface=said, calls=[("context_read", {"ref": ref})])

    upstream.replies.append(read_it)
    r = _ask(archiving)
    assert r.status_code == 200, r.text
    assert len(upstream.seen) == 1
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == said and choice["message"].get("tool_calls") is None
    assert choice["finish_reason"] == "stop"


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_streamed_answer_that_leaves_no_room_for_a_round_is_said_once(archiving, upstream, api):
    """Streamed, an answer that leaves no room for a round ends with what it held but its
    recall calls: its text, passed on before the call began, is not said again (the client's
    SDK assembles it once)."""
    said = "word " * 14_500
    field = "input" if api == "responses" else "messages"

    def read_it(body: dict) -> Reply:
        ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(body[field])).group(0)
        return Reply(preface=said, calls=[("context_read", {"ref": ref})])

    upstream.replies.append(read_it)
    base = f"{archiving.url}/proxy/long-running-agent"
    if api == "chat":
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k")
        chunks = client.chat.completions.create(model="gpt-test", messages=_history(), stream=True)
        got = [c.choices[0].delta for c in chunks if c.choices]
        text = "".join(d.content or "" for d in got)
        assert not any(d.tool_calls for d in got)
    elif api == "messages":
        claude = anthropic.Anthropic(base_url=base, api_key="k")
        with claude.messages.stream(
            model="claude-test", max_tokens=512, messages=_anthropic_history()
        ) as events:
            final = events.get_final_message()
        assert [b.type for b in final.content] == ["text"] and final.stop_reason == "end_turn"
        text = final.content[0].text
    else:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k")
        events = list(
            client.responses.create(model="gpt-test", input=_responses_history(), stream=True, store=False)
        )
        output = events[-1].response.output
        assert [item.type for item in output] == ["message"]
        text = events[-1].response.output_text
    assert len(upstream.seen) == 1
    assert text.strip() == said.strip()


def test_recall_is_offered_only_with_room_to_read(store, upstream, tmp_path):
    """A request whose window leaves less than a round's worth beside it (MIN_RECALL_ROOM) goes
    without the recall tools, though it names an archive: a model that called one could read
    nothing, and its answer was cut to a made-up 'no answer' that ended the client's turn.
    With room, they are offered."""

    def big(k: int) -> str:
        return "\n".join(f"BBB row {j} of {k}" for j in range(300))

    def history(n: int) -> list[dict]:
        out: list[dict] = [{"role": "user", "content": "TASK BBB"}]
        for k in range(n):
            use = {"type": "tool_use", "id": f"t{k}", "name": "run", "input": {}}
            out += [
                {"role": "assistant", "content": [use]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": big(k)}],
                },
            ]
        return out

    app = create_app(store, models=models_for(upstream, window=8000), offloader=LocalOffloader(tmp_path))
    with LiveServer(app) as server:
        client = anthropic.Anthropic(base_url=f"{server.url}/proxy/default", api_key="k", max_retries=0)
        for n in range(1, 14):
            client.messages.create(model="claude-test", max_tokens=400, messages=history(n))
    offered = []
    for seen in upstream.seen:
        text = json.dumps(seen.body)
        if re.search(r"\b[mt]-[0-9a-f]{16,}", text):  # it names an archive
            offered.append("context_read" in [t["name"] for t in seen.body.get("tools", [])])
    assert True in offered and False in offered, offered


def test_a_request_that_fits_only_without_the_recall_tools_goes_without_them(store, upstream, tmp_path):
    """A request whose task and system prompt leave no room for the recall tools (~225 tokens)
    at its window goes upstream without them, not refused as one that cannot fit (the error
    counted ctxmgmt's own tools among the client's, and told it to send fewer)."""
    from .upstream import input_tokens

    app = create_app(store, models=models_for(upstream, window=1000), offloader=LocalOffloader(tmp_path))
    system = "You are careful. " + " ".join(f"rule{k}" for k in range(280))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "go"}]
    with LiveServer(app) as server:
        r = httpx.post(
            f"{server.url}/proxy/default/v1/chat/completions",
            json={"model": "gpt-test", "messages": messages, "max_tokens": 100},
            timeout=30,
        )
    assert r.status_code == 200, r.text
    sent = upstream.seen[-1].body
    assert _names(sent) == [] and input_tokens(sent) <= 1000


def test_a_watched_stream_torn_mid_event_passes_on_no_half_event(store, tmp_path):
    """With recall offered, an upstream stream that breaks off in the middle of an event ends
    with the whole events before it and the error event, never the torn event's half (which the
    client's SDK would fail to parse)."""
    from ctxmgmt.testing import RawServer

    torn = (
        b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up", '
        b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": "the"}}]}\n\n'
        b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up", '
        b'"choices": [{"index": 0, "delta": {"content": " zqxw'
    )
    store.seed("long-running-agent", shipped("long-running-agent"))
    with RawServer() as raw:
        models = ModelsConfig.from_dict(
            {
                "models": {
                    "gpt-test": {
                        "base_url": raw.base_url,
                        "model": "up",
                        "context_window": 16_000,
                        "timeout": 5,
                    }
                }
            },
        )
        app = create_app(store, models=models, offloader=LocalOffloader(tmp_path / "archive"))
        raw.answer(torn, headers={"content-type": "text/event-stream", "content-length": str(len(torn))})
        with LiveServer(app) as server:
            got = httpx.post(
                f"{server.url}/proxy/long-running-agent/v1/chat/completions",
                json={"model": "gpt-test", "messages": _history(), "stream": True},
                timeout=60,
            )
    assert got.status_code == 200
    assert any((tmp_path / "archive").rglob("*.*")), "the result was archived: recall was offered"
    assert got.content.startswith(torn[: torn.rindex(b"\n\n") + 2]), got.content[:300]
    assert b"zqxw" not in got.content and b"ended before the answer's end" in got.content, got.content[-300:]


@pytest.mark.parametrize(
    ("partial", "started"), [("{not json", {}), ("[1, 2]", {}), ('"ref"', {}), (None, []), (None, None)]
)
def test_a_streamed_anthropic_recall_call_whose_input_is_no_json_object_is_told_so(partial, started):
    """A streamed Anthropic recall call whose input deltas make no JSON object: the answer
    holds ``{}`` for it (the API wants an object back in the next round), and the call is
    told its arguments are no JSON object (it was told "ref is missing")."""
    from ctxmgmt.api.proxy.recall import calls_of
    from ctxmgmt.api.proxy.streams import Accumulator

    acc = Accumulator("messages")
    start = {"type": "tool_use", "id": "toolu_1", "name": "context_read", "input": started}
    acc.event({"type": "message_start", "message": {"id": "m", "role": "assistant", "content": []}})
    acc.event({"type": "content_block_start", "index": 0, "content_block": start})
    if partial is not None:  # else its start's input is all it has
        delta = {"type": "input_json_delta", "partial_json": partial}
        acc.event({"type": "content_block_delta", "index": 0, "delta": delta})
    acc.event({"type": "content_block_stop", "index": 0})
    whole = acc.answer()
    assert whole["content"][0]["input"] == {}
    assert calls_of("messages", whole, acc.unreadable) == [("toolu_1", "context_read", None)]


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", '"ref"'])
def test_a_recall_call_whose_arguments_are_no_json_object_is_told_so(arguments):
    """A model's recall call whose arguments are not a JSON object is answered with an error
    that says so (it was told "ref is missing", as if it had sent {})."""
    import asyncio

    from ctxmgmt.api.proxy.handler import _recall
    from ctxmgmt.api.proxy.recall import calls_of

    call = {"id": "c1", "type": "function", "function": {"name": "context_read", "arguments": arguments}}
    answer = {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}
    [(call_id, name, args)] = calls_of("chat", answer)
    assert (call_id, name, args) == ("c1", "context_read", None)
    said = asyncio.run(_recall([], name, args, float("inf")))
    assert said == "error: context_read's arguments are not a JSON object; call it again with them as one"
