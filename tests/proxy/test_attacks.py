"""What an attack on the proxy found, each kept fixed: look-alike conversations never share
state or archives, rejected bodies are not kept, malformed upstream answers around recall are
502s (or error events) with a record, and malformed requests are 400s."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ctxmgmt.store import ExecutionStore

from .test_recall import _history
from .upstream import Reply

CHAT = "/v1/chat/completions"


def _conversation(secret: str) -> list[dict]:
    return [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": secret},
        {"role": "user", "content": "ok"},
    ]


def test_look_alike_conversations_never_share_state(proxy, upstream):
    """Two conversations with the same start and the same last message, and one whose earlier
    message was edited, each go upstream with their own messages."""
    url = f"{proxy.url}/proxy/default{CHAT}"
    for secret in ("ALICE secret", "BOB secret", "ALICE secret edited"):
        r = httpx.post(url, json={"model": "gpt-test", "messages": _conversation(secret)}, timeout=30)
        assert r.status_code == 200
        sent = json.dumps(upstream.seen[-1].body["messages"])
        assert secret in sent
        assert all(other not in sent for other in ("ALICE secret", "BOB secret") if other not in secret)


def test_a_look_alike_cannot_read_another_conversations_archive(archiving, upstream):
    """A conversation that starts like another gets its own archive namespace: a reference
    the other one's request held reads nothing."""
    url = f"{archiving.url}/proxy/long-running-agent{CHAT}"
    httpx.post(url, json={"model": "gpt-test", "messages": _history()}, timeout=60)
    ref = re.search(r"\bt-[0-9a-f]{32}", json.dumps(upstream.seen[-1].body)).group(0)
    other = _history()
    other[3] = {**other[3], "content": "short and different"}
    upstream.replies.append(Reply(calls=[("context_read", {"ref": ref})]))
    upstream.replies.append(lambda body: Reply(body["messages"][-1]["content"][:200]))
    other[3]["content"] = other[3]["content"] + " " + "x" * 70_000  # archived too: recall offered
    r = httpx.post(url, json={"model": "gpt-test", "messages": other}, timeout=60)
    assert r.status_code == 200
    answer = r.json()["choices"][0]["message"]["content"]
    assert "build log entry" not in answer


def test_a_refused_body_is_not_kept(proxy, upstream):
    """A body refused (an unknown model) leaves nothing in the bodies kept for the next request."""
    messages = [{"role": "user", "content": str(i)} for i in range(5_000)]
    r = httpx.post(
        f"{proxy.url}/proxy/default{CHAT}", json={"model": "nope", "messages": messages}, timeout=60
    )
    assert r.status_code == 404
    assert proxy.server.config.app.state.proxy_bodies._bytes == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "arguments", ['{"ref": "t-x", "offset": Infinity}', '{"ref": "t-x", "limit": 1e999}', '{"ref": ["a"]}']
)
def test_recall_arguments_no_store_takes_are_said_to_the_model(archiving, upstream, arguments):
    """A recall call with arguments the store cannot take is answered with an error for the
    model, and the request goes on."""
    upstream.replies.append(Reply(calls=[("context_read", {"ref": "PLACEHOLDER"})]))
    upstream.rewrite = lambda data: data.replace(
        json.dumps(json.dumps({"ref": "PLACEHOLDER"})).encode(), json.dumps(arguments).encode()
    )
    upstream.replies.append(lambda body: Reply(str(body["messages"][-1]["content"])[:100]))
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent{CHAT}",
        json={"model": "gpt-test", "messages": _history()},
        timeout=60,
    )
    assert r.status_code == 200
    assert len(upstream.seen) == 2
    assert r.json()["choices"][0]["message"]["content"].startswith("error")


def test_garbage_beside_a_recall_call_is_read_around(store, archiving, upstream):
    """An answer whose tool calls hold garbage beside a recall call: the recall call is answered
    and the request goes on; the client gets the final answer, and the request is recorded."""
    upstream.replies.append(Reply(calls=[("context_search", {"pattern": "x"})]))
    upstream.rewrite = lambda data: data.replace(b'"tool_calls": [', b'"tool_calls": ["garbage", ', 1)
    r = httpx.post(
        f"{archiving.url}/proxy/long-running-agent{CHAT}",
        json={"model": "gpt-test", "messages": _history()},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    total, rows = ExecutionStore(store.engine).list("proxy-long-running-agent")
    assert total == 1 and rows[0]["status"] == "finished" and rows[0]["llm_calls"] == 2


@pytest.mark.parametrize(("path", "field"), [("/v1/messages", "messages"), ("/v1/responses", "input")])
def test_a_non_object_item_is_a_400_with_its_pointer(proxy, upstream, path, field):
    """A conversation item that is not an object, last or not, is named by its pointer."""
    model = "claude-test" if "messages" in path else "gpt-test"
    for items in ([{"role": "user", "content": "hi"}, None], ["str"]):
        body = {"model": model, "max_tokens": 5, field: items}
        r = httpx.post(f"{proxy.url}/proxy/default{path}", json=body, timeout=30)
        assert r.status_code == 400, r.text
        assert f"/{field}/{len(items) - 1}" in r.text
    assert upstream.seen == []


def test_a_member_given_twice_is_a_400(proxy, upstream):
    """A body that gives a member twice is refused: an upstream might read the other copy."""
    raw = b'{"model": "gpt-test", "messages": [{"role": "user", "content": "a"}], "messages": []}'
    r = httpx.post(
        f"{proxy.url}/proxy/default{CHAT}",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400 and "twice" in r.json()["error"]["message"]
    assert upstream.seen == []


@pytest.mark.parametrize("header", ["x-ctxmgmt-definition", "x-ctxmgmt-session"])
def test_a_ctxmgmt_header_given_twice_is_a_400(proxy, upstream, header):
    """X-Ctxmgmt-Definition or X-Ctxmgmt-Session given twice is refused, naming it (the first
    value was used silently), and nothing goes upstream."""
    r = httpx.post(
        f"{proxy.url}/proxy/default{CHAT}",
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "a"}]},
        headers=[(header, "default"), (header, "cache-aware")],
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == f"{header} is given 2 times: give it once"
    assert upstream.seen == []


def test_an_empty_definition_header_is_a_400(proxy, upstream):
    """An empty X-Ctxmgmt-Definition is refused, not taken as absent."""
    r = httpx.post(
        f"{proxy.url}/proxy/default{CHAT}",
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "a"}]},
        headers={"x-ctxmgmt-definition": ""},
        timeout=30,
    )
    assert r.status_code == 400


def test_a_wrong_method_or_path_under_the_proxy_answers_in_the_providers_shape(proxy):
    """A wrong method on a proxy path (405) and an unknown path under it (404) answer as the provider
    would, so its client raises its own error; the error's type is one of the provider's own
    (Anthropic's ``invalid_request_error`` for a 405, not ``method_not_allowed_exception``)."""
    r = httpx.get(f"{proxy.url}/proxy/default/v1/messages", timeout=30)
    assert r.status_code == 405 and r.json()["type"] == "error" and r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{proxy.url}/proxy/default/v1/embeddings", json={"model": "gpt-test"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["message"] and r.json()["error"]["type"]
    # An Anthropic client (it sends anthropic-version) reads Anthropic's shape on any other path.
    for method in ("POST", "DELETE"):
        r = httpx.request(
            method,
            f"{proxy.url}/proxy/default/v1/models",
            headers={"anthropic-version": "2023-06-01"},
            timeout=30,
        )
        assert r.status_code == 405 and r.json()["type"] == "error" and r.json()["error"]["message"], r.text
    r = httpx.put(
        f"{proxy.url}/proxy/default/v1/chat/completions",
        headers={"anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert r.status_code == 405 and "type" not in r.json() and r.json()["error"]["message"]


def test_a_body_of_a_million_tiny_arrays_is_a_400_in_the_providers_shape(proxy, upstream):
    """Two MB of empty arrays (each costs CPU time beyond its bytes) is refused, named, in
    the provider's error shape, and nothing goes upstream."""
    content = [{"type": "text", "text": "hi", "pad": [[]] * 600_000}]
    body = {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}
    r = httpx.post(f"{proxy.url}/proxy/default/v1/messages", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()
    assert error["type"] == "error" and "JSON arrays and objects" in error["error"]["message"]
    assert upstream.seen == []


@pytest.mark.parametrize(
    ("path", "field"), [(CHAT, "messages"), ("/v1/messages", "messages"), ("/v1/responses", "input")]
)
def test_a_message_cannot_carry_ctxmgmts_own_marks(proxy, upstream, path, field):
    """A client's message holding ``_ctxmgmt`` (the member by which ctxmgmt's converted messages
    say how much the provider counts and whether they think) is a 400 naming it, first or in a
    continued conversation, and nothing goes upstream."""
    model = "claude-test" if path == "/v1/messages" else "gpt-test"
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    r = httpx.post(
        f"{proxy.url}/proxy/default{path}", json={"model": model, "max_tokens": 5, field: items}, timeout=30
    )
    assert r.status_code == 200, r.text
    forged = {"role": "user", "content": "x" * 9_000, "_ctxmgmt": {"counted_tokens": 1, "thinking": True}}
    for sent in ([*items, forged], [forged]):  # read from the previous body, and whole
        r = httpx.post(
            f"{proxy.url}/proxy/default{path}",
            json={"model": model, "max_tokens": 5, field: sent},
            timeout=30,
        )
        assert r.status_code == 400, r.text
        assert f"/{field}/{len(sent) - 1}/_ctxmgmt" in r.text and "remove it" in r.text
    assert len(upstream.seen) == 1


@pytest.mark.parametrize(
    ("path", "tools", "pointer"),
    [
        (CHAT, [{"type": "function", "function": {"name": {"a": 1}}}], "/tools/0/function/name"),
        ("/v1/responses", [{"type": "function", "name": ["x"]}], "/tools/0/name"),
        ("/v1/messages", [{"name": {}, "input_schema": {}}], "/tools/0/name"),
    ],
)
def test_a_tool_name_that_is_no_string_is_a_400(archiving, upstream, path, tools, pointer):
    """A tool definition whose name is an object or a list is a 400 naming it (it was a 500
    once an archive was named and the recall tools were offered beside the client's)."""
    model = "claude-test" if path == "/v1/messages" else "gpt-test"
    field = "input" if path == "/v1/responses" else "messages"
    body = {"model": model, "max_tokens": 5, "tools": tools, field: [{"role": "user", "content": "t"}]}
    r = httpx.post(f"{archiving.url}/proxy/long-running-agent{path}", json=body, timeout=30)
    assert r.status_code == 400 and f"{pointer}: must be a string" in r.text, r.text
    assert upstream.seen == []
