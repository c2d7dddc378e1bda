"""The proxy at its edges: upstreams that trickle, stall or flood end at the model's deadline or
size limit, with an answer in the provider's shape; bodies are bounded."""

from __future__ import annotations

import gzip
import json
import time
import zlib

import httpx
import pytest

from ctxmgmt.api import create_app
from ctxmgmt.api.config import ServerConfig
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.testing import RawServer

from ..conftest import LiveServer
from .conftest import stored_record

TIMEOUT = 1.5
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def raw():
    with RawServer() as server:
        yield server


def _models(raw) -> ModelsConfig:
    """The models of these tests: a chat one and an Anthropic one, both the raw server."""
    return ModelsConfig.from_dict(
        {
            "models": {
                "m": {
                    "base_url": raw.base_url,
                    "model": "up",
                    "context_window": 8000,
                    "timeout": TIMEOUT,
                    "max_retries": 0,
                    "max_response_bytes": 1 << 20,
                    "max_stream_bytes": 4 << 20,
                },
                "a": {
                    "base_url": raw.base_url,
                    "model": "up",
                    "provider": "anthropic",
                    "context_window": 8000,
                    "timeout": TIMEOUT,
                },
            }
        }
    )


@pytest.fixture
def proxy(store, raw):
    models = _models(raw)
    config = ServerConfig.from_dict({"proxy_max_body_bytes": 4096})
    with LiveServer(create_app(store, models=models, config=config)) as server:
        yield server


def _streamed(proxy, body=BODY, path="/v1/chat/completions") -> bytes:
    """The bytes of a streamed answer to ``body``, whole."""
    with httpx.stream(
        "POST", f"{proxy.url}/proxy/default{path}", json={**body, "stream": True}, timeout=30
    ) as r:
        return b"".join(r.iter_bytes())


def _post(proxy, body, path="/v1/chat/completions"):
    started = time.monotonic()
    r = httpx.post(f"{proxy.url}/proxy/default{path}", json=body, timeout=30)
    return r, time.monotonic() - started


@pytest.mark.parametrize("behaviour", ["trickle_headers", "trickle", "stall"])
def test_a_slow_upstream_ends_at_the_deadline_with_a_504(proxy, raw, behaviour):
    """Headers or a body that trickle, or no answer at all: a 504 in the provider's shape at the
    model's deadline for the whole call."""
    getattr(raw, behaviour)(**({"interval": 0.2} if behaviour != "stall" else {}))
    r, took = _post(proxy, BODY)
    assert r.status_code == 504
    assert "did not" in r.json()["error"]["message"]
    assert TIMEOUT <= took < TIMEOUT + 10  # a margin for a loaded machine (never ends by itself)


def test_a_stream_that_stops_ends_at_the_deadline_with_an_error_event(proxy, raw):
    """A streamed answer whose events stop coming ends at the deadline: what came is passed on,
    then an error event the client's SDK raises."""
    first = b'data: {"id": "c", "object": "chat.completion.chunk", "choices": []}\n\n'
    raw.trickle(interval=0.2, start=first, content_type="text/event-stream")
    started = time.monotonic()
    got = _streamed(proxy)
    # The trickle never ends by itself: any end is the deadline's (the margin for a loaded
    # machine, where the request's own work before the deadline starts takes seconds).
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 10
    assert got.startswith(first)
    assert b'"error"' in got.rsplit(b"data: ", 1)[-1]


def test_a_stream_read_late_ends_with_its_error_event_not_torn(proxy, raw, store):
    """A client that reads nothing until past the model's deadline, while the upstream's
    events fill the connection, then reads: what came, then the error event at its end (the
    stream is not torn off mid-chunk), and the record says the upstream's deadline passed."""
    raw.flood(50 << 20, content_type="text/event-stream")
    with httpx.stream(
        "POST", f"{proxy.url}/proxy/default/v1/chat/completions", json={**BODY, "stream": True}, timeout=30
    ) as r:
        time.sleep(TIMEOUT + 0.5)  # the server's sends wait on this client meanwhile
        got = b"".join(r.iter_bytes())
    assert got.rstrip().endswith(b"}") and b'"error"' in got[-600:], got[-300:]
    assert stored_record(store)["status"] == "error"


def test_a_client_that_reads_nothing_is_cut_off_after_the_deadline(proxy, raw, store):
    """A client that never reads a stream holds no upstream answer for ever: once the model's
    deadline and as long again have passed, the connection is closed and the record says why."""
    import socket

    raw.flood(50 << 20, content_type="text/event-stream")
    host, port = proxy.url.removeprefix("http://").split(":")
    data = json.dumps({**BODY, "stream": True})
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(
            (
                f"POST /proxy/default/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n{data}"
            ).encode()
        )
        record = stored_record(store)  # waits up to 10 s, reading nothing
    assert "did not read the answer" in record["error"], record["error"]
    assert httpx.get(f"{proxy.url}/_health", timeout=10).status_code == 200


_CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "hel"}}],
}
_CUT = {
    "chat": ("/v1/chat/completions", "m", f"data: {json.dumps(_CHUNK)}\n\n"),
    "messages": (
        "/v1/messages",
        "a",
        'event: message_start\ndata: {"type": "message_start", "message": {"id": "x", "type": "message", '
        '"role": "assistant", "content": [], "model": "up"}}\n\n',
    ),
    "responses": (
        "/v1/responses",
        "m",
        'event: response.created\ndata: {"type": "response.created", "response": {"id": "r"}}\n\n',
    ),
    "no events": ("/v1/chat/completions", "m", ""),
}


@pytest.mark.parametrize("api", list(_CUT))
def test_a_stream_that_ends_before_its_answer_does_ends_with_an_error_event(proxy, raw, store, api):
    """A stream closed whole by the upstream before the event that ends its answer ([DONE] or
    a finish_reason, message_stop, response.completed; or no event at all) is no whole
    answer: an error event follows what came (a client would take a cut call for a whole one),
    and the record says so."""
    path, model, events = _CUT[api]
    raw.answer(events.encode(), headers={"content-type": "text/event-stream"})
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    if api == "responses":
        body = {"model": model, "input": "hi"}
    got = _streamed(proxy, body, path)
    assert got.startswith(events.encode()) and b"before the answer's end" in got[len(events) :], got
    assert "before the answer's end" in stored_record(store)["error"]


@pytest.mark.parametrize(
    ("path", "model", "event", "said"),
    [
        (
            "/v1/messages",
            "a",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "Overloaded",
        ),
        (
            "/v1/responses",
            "m",
            {"type": "error", "code": "server_error", "message": "try again"},
            "try again",
        ),
        (
            "/v1/responses",
            "m",
            {"type": "response.failed", "response": {"error": {"message": "no quota"}}},
            "no quota",
        ),
    ],
    ids=["anthropic-error", "responses-error", "responses-failed"],
)
def test_each_apis_error_event_is_recorded_with_its_message(proxy, raw, store, path, model, event, said):
    """An upstream's error event in each API's own shape (Anthropic's ``error``, a Responses
    stream's ``error`` with its message at the top, ``response.failed``) is passed on as it
    came, no error event of the proxy's after it, and recorded with its message."""
    events = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
    raw.answer(events, headers={"content-type": "text/event-stream"})
    body = (
        {"model": model, "input": "hi"}
        if path == "/v1/responses"
        else {**BODY, "model": "a", "max_tokens": 5}
    )
    assert _streamed(proxy, body, path) == events
    assert said in stored_record(store)["error"]


def test_an_upstream_error_event_is_recorded_and_passed_on_alone(proxy, raw, store):
    """The upstream's own error event in a stream reaches the client as it came, with no error
    event of the proxy's after it, and the record says the stream failed."""
    events = (
        f"data: {json.dumps(_CHUNK)}\n\n"
        'data: {"error": {"message": "Overloaded", "type": "server_error"}}\n\n'
    ).encode()
    raw.answer(events, headers={"content-type": "text/event-stream"})
    assert _streamed(proxy) == events
    assert "Overloaded" in stored_record(store)["error"]


def test_a_stream_whose_end_event_went_by_unread_gets_no_error_event(proxy, raw, store, monkeypatch):
    """An end event too long to read (a response.completed that repeats many large output
    items) goes by unread: the stream may well have ended, so no error event is added after
    it, and a chunk with ``"error": null`` is no error."""
    from ctxmgmt.api.proxy import streams

    monkeypatch.setattr(streams, "MAX_EVENT_BYTES", 4096)
    done = {"type": "response.completed", "response": {"id": "r", "output": [{"text": "x" * 8000}]}}
    events = (
        "event: response.created\n"
        'data: {"type": "response.created", "response": {"id": "r"}, "error": null}\n\n'
        f"event: response.completed\ndata: {json.dumps(done)}\n\n"
    ).encode()
    raw.answer(events, headers={"content-type": "text/event-stream"})
    assert _streamed(proxy, {"model": "m", "input": "hi"}, "/v1/responses") == events
    assert stored_record(store)["status"] == "finished"


def test_an_error_a_router_answers_with_200_is_named_in_the_502(proxy, raw):
    """A 200 whose JSON object is an error (some routers answer so) is a 502 that carries the
    upstream's message, not only that the answer holds no choices."""
    raw.answer(json.dumps({"error": {"message": "provider overloaded: try later", "code": 429}}).encode())
    r = httpx.post(f"{proxy.url}/proxy/default/v1/chat/completions", json=BODY, timeout=30)
    assert r.status_code == 502 and "provider overloaded: try later" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "model", "answer", "said"),
    [
        ("/v1/chat/completions", "m", {"id": "c", "object": "chat.completion"}, "'choices'"),
        ("/v1/chat/completions", "m", {"id": "c", "choices": None}, "'choices'"),
        ("/v1/messages", "a", {"id": "x", "type": "message", "content": "hi"}, "'content'"),
        ("/v1/responses", "m", {"id": "r", "object": "response"}, "'output'"),
    ],
)
def test_a_success_that_is_not_the_apis_answer_is_a_502(proxy, raw, path, model, answer, said):
    """A 200 JSON object without the API's answer (no choices, content or output list) is the
    upstream's fault: a 502 that names what is missing, not an empty success."""
    raw.answer(json.dumps(answer).encode())
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/responses":
        body = {"model": model, "input": "hi"}
    r = httpx.post(f"{proxy.url}/proxy/default{path}", json=body, timeout=30)
    assert r.status_code == 502 and said in r.text, r.text


def test_one_json_answer_to_a_streamed_request_is_a_502(proxy, raw):
    """An upstream that answers a streamed request with one JSON object (it does not stream)
    is a 502 that says so: a client's SDK reads no event of it (an empty answer, or a crash)."""
    answer = {"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    raw.answer(json.dumps(answer).encode())
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions", json={**BODY, "stream": True}, timeout=30
    )
    assert r.status_code == 502 and "not server-sent events" in r.json()["error"]["message"]


def test_a_flooding_upstream_is_cut_at_its_size_limit(proxy, raw):
    """An answer larger than max_response_bytes is refused as it arrives: a 502, not read whole."""
    raw.flood(50 << 20)
    r, _ = _post(proxy, BODY)
    assert r.status_code == 502
    assert "max_response_bytes" in r.json()["error"]["message"]


COUNT = {"model": "a", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("behaviour", ["trickle_headers", "trickle", "stall"])
def test_a_slow_upstream_count_ends_at_the_deadline_with_a_504(proxy, raw, behaviour):
    """The token count's upstream call has the model's deadline for the whole call too: a
    504 in Anthropic's shape when its answer trickles or never comes."""
    getattr(raw, behaviour)(**({"interval": 0.2} if behaviour != "stall" else {}))
    r, took = _post(proxy, COUNT, "/v1/messages/count_tokens")
    assert r.status_code == 504 and r.json()["type"] == "error"
    assert "did not answer within 1.5 s" in r.json()["error"]["message"]
    assert TIMEOUT <= took < TIMEOUT + 10  # a margin for a loaded machine (never ends by itself)


def test_a_flooding_count_is_cut_at_its_size_limit(proxy, raw):
    """A count's answer larger than the model's max_response_bytes is a 502, not read whole."""
    raw.flood(50 << 20)
    r, _ = _post(proxy, COUNT, "/v1/messages/count_tokens")
    assert r.status_code == 502 and r.json()["type"] == "error"
    assert "max_response_bytes" in r.json()["error"]["message"]


def test_a_count_with_its_upstream_down_is_a_502(store):
    """No server at the model's base_url: the count is a 502 in Anthropic's shape."""
    from ..conftest import free_port

    port = free_port()
    spec = {"base_url": f"http://user:s3cret@127.0.0.1:{port}/v1", "provider": "anthropic", "model": "up"}
    models = ModelsConfig.from_dict({"models": {"a": spec}})
    with LiveServer(create_app(store, models=models)) as server:
        r = httpx.post(f"{server.url}/proxy/default/v1/messages/count_tokens", json=COUNT, timeout=30)
        lost = httpx.post(
            f"{server.url}/v1/messages", json=COUNT, timeout=30
        )  # a client given the wrong base URL
        other = httpx.get(f"{server.url}/_plugins/_ml/nothing/messages/x", timeout=30)  # no provider's path
    said = r.json()["error"]["message"]
    assert r.status_code == 502 and r.json()["type"] == "error"
    assert (
        f"could not reach the upstream of 'a' at http://127.0.0.1:{port}/v1" in said
        and "check its base_url" in said
    )
    assert "s3cret" not in said and "user" not in said  # a URL's credentials are never shown
    assert lost.status_code == 404 and "/proxy/{definition}/v1" in lost.text
    assert other.status_code == 404 and "/proxy/{definition}" not in other.text


def test_a_body_over_the_proxy_limit_is_a_413_in_the_providers_shape(proxy, raw):
    """A request body over server.proxy_max_body_bytes is refused before any upstream call."""
    big = {"model": "a", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 8000}]}
    r, _ = _post(proxy, big, "/v1/messages")
    assert r.status_code == 413
    assert r.json()["type"] == "error" and "proxy_max_body_bytes" in r.json()["error"]["message"]
    assert raw.requests == 0


def _compressed(proxy, data: bytes, encoding: str, path="/v1/chat/completions") -> httpx.Response:
    headers = [("content-type", "application/json")]
    headers += [("content-encoding", e.strip()) for e in encoding.split(";") if e.strip()]
    return httpx.post(f"{proxy.url}/proxy/default{path}", content=data, headers=headers, timeout=30)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_is_read_as_the_client_sent_it(proxy, raw, encoding):
    """A request body sent with Content-Encoding gzip or deflate is read decompressed, and goes
    upstream as JSON (never with the client's encoding)."""
    import zlib

    raw.answer(json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode())
    text = json.dumps(BODY).encode()
    data = zlib.compress(text, wbits=31 if encoding == "gzip" else 15)
    r = _compressed(proxy, data, encoding)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok" and raw.requests == 1


def test_a_compressed_body_is_bounded_by_what_it_holds(proxy, raw):
    """A small compressed body that holds more than server.proxy_max_body_bytes (a 200 MB bomb
    in 200 KB) is a 413 naming the limit, read no further than the limit, at once."""
    import zlib

    bomb = zlib.compressobj(9, wbits=31)
    data = bomb.compress(b'{"model": "m", "messages": [') + bomb.compress(b" " * (200 << 20)) + bomb.flush()
    assert len(data) < 400_000
    started = time.monotonic()
    r = _compressed(proxy, data, "gzip")
    assert r.status_code == 413 and "proxy_max_body_bytes" in r.json()["error"]["message"], r.text
    assert time.monotonic() - started < 5 and raw.requests == 0
    small = zlib.compress(b'{"model": "m", "messages": [' + b" " * (2 << 20), wbits=31)
    assert len(small) < 4096  # within the limit on the wire: what it unpacks to is over
    r = _compressed(proxy, small, "gzip")
    said = r.json()["error"]["message"]
    assert r.status_code == 413 and "the body unpacks to more than the limit of 4096 bytes" in said, r.text


def test_a_gzip_body_of_several_members_is_read_whole(proxy, raw):
    """A gzip body made of several members (RFC 1952: a streaming writer's, pigz's) is read
    whole; padding zeros after a member are passed over."""
    raw.answer(json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode())
    text = json.dumps(BODY).encode()
    data = gzip.compress(text[:10]) + b"\x00" * 4 + gzip.compress(text[10:])
    r = _compressed(proxy, data, "gzip")
    assert r.status_code == 200 and raw.requests == 1, r.text


def test_a_gzip_body_of_very_many_members_is_refused_at_once(proxy, raw):
    """A body of thousands of tiny gzip members (each costs a decompressor: seconds of CPU
    for a few MiB) is a 400 naming the bound on members, at once."""
    from ctxmgmt.llm.decoding import MAX_MEMBERS

    data = gzip.compress(b"{") + gzip.compress(b"") * 20_000
    started = time.monotonic()
    r = _compressed(proxy, data, "gzip")
    assert r.status_code == 400 and f"more than {MAX_MEMBERS} gzip members" in r.text, r.text
    assert time.monotonic() - started < 2 and raw.requests == 0


def test_bytes_after_the_compressed_data_are_refused_unheld(proxy, raw):
    """What follows a compressed body's end that is no gzip member (junk, 8 MiB of it on the
    wire, in chunks) is a 400 at the first byte of it; more than the limit on the wire a 413."""

    def chunks(junk: int):
        yield zlib.compress(json.dumps(BODY).encode())
        for _ in range(junk // 65536):
            yield b"j" * 65536

    headers = {"content-type": "application/json", "content-encoding": "deflate"}
    url = f"{proxy.url}/proxy/default/v1/chat/completions"
    r = httpx.post(url, content=chunks(1 << 20), headers=headers, timeout=30)
    assert r.status_code == 400 and "goes on after the end of its compressed data" in r.text, r.text
    headers["content-encoding"] = "gzip"
    zeros = gzip.compress(json.dumps(BODY).encode()) + b"\x00" * (9 << 20)
    r = httpx.post(url, content=zeros, headers=headers, timeout=30)
    assert r.status_code == 413, r.text
    assert raw.requests == 0


@pytest.mark.parametrize(
    ("data", "encoding", "status", "said"),
    [
        (b"\x1b\x00\x00", "br", 415, "Content-Encoding 'br' is not one ctxmgmt reads"),
        (b"{}", "gzip, br", 415, "send the body uncompressed, or as gzip or deflate"),
        (gzip.compress(b"{}"), "gzip; identity", 415, "'gzip, identity' is not one ctxmgmt reads"),
        (b"not gzip at all", "gzip", 400, "the body's compressed data is invalid"),
        (gzip.compress(json.dumps(BODY).encode())[:-12], "gzip", 400, "ends early"),
        (
            gzip.compress(json.dumps(BODY).encode()),
            "",
            400,
            "the body is gzip data: send it with Content-Encoding: gzip",
        ),
    ],
    ids=["brotli", "layers", "two-headers", "not-gzip", "cut-short", "unlabelled"],
)
def test_a_body_it_cannot_decompress_is_a_4xx_that_says_why(proxy, raw, data, encoding, status, said):
    """An encoding the proxy cannot bound is a 415 naming the ones it reads; compressed data
    that is invalid or cut short a 400; in the provider's shape, with no upstream call."""
    r = _compressed(proxy, data, encoding)
    assert r.status_code == status and said in r.json()["error"]["message"], r.text
    assert raw.requests == 0


@pytest.mark.parametrize(
    "path", ["/proxy/default/v1/chat/completions", "/_plugins/_ml/context_management/_validate"]
)
def test_a_client_gone_before_its_body_is_whole_is_no_fault(proxy, raw, caplog, path):
    """A client that closes its connection in the middle of its body is no error of the
    server's: nothing logged as one, no upstream call, and the server goes on answering."""
    import socket

    host, port = proxy.url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall((head + 'Content-Length: 100\r\n\r\n{"model":').encode())
    deadline = time.monotonic() + 2  # the server sees the close on its own time
    while time.monotonic() < deadline and not any(r.levelno >= 40 for r in caplog.records):
        time.sleep(0.05)
    assert httpx.get(f"{proxy.url}/_health", timeout=10).status_code == 200
    assert not [r for r in caplog.records if r.name.startswith("ctxmgmt") and r.levelno >= 40], caplog.text
    assert raw.requests == 0


def test_the_bodies_held_at_once_are_bounded_over_all_requests(store, raw):
    """Past server.bodies_in_flight_bytes of bodies held by requests in progress, another
    body is a 429 (with Retry-After, in the provider's shape); once those requests have their
    answers their bytes are given back, and a body is read again."""
    import threading

    models = _models(raw)
    config = ServerConfig.from_dict(
        {"max_body_bytes": 4096, "proxy_max_body_bytes": 4096, "bodies_in_flight_bytes": 5000}
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 3000}]}
    raw.stall()  # the first request holds its body until the model's deadline
    with LiveServer(create_app(store, models=models, config=config)) as server:
        url = f"{server.url}/proxy/default/v1/chat/completions"
        first: list[httpx.Response] = []
        worker = threading.Thread(target=lambda: first.append(httpx.post(url, json=body, timeout=30)))
        worker.start()
        deadline = time.monotonic() + 10
        while raw.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        busy = httpx.post(url, json=body, timeout=30)
        worker.join(30)
        raw.answer(json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode())
        again = httpx.post(url, json=body, timeout=30)
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1", busy.text
    assert busy.headers["connection"] == "close"  # answered before its body was read: not kept
    assert busy.json()["error"]["type"] == "rate_limit_error"
    assert "server.bodies_in_flight_bytes" in busy.json()["error"]["message"]
    assert first[0].status_code == 504 and again.status_code == 200, (first[0].text, again.text)


def _budgeted(store, raw) -> LiveServer:
    """A server that holds 5,000 bytes of request bodies at once."""
    config = ServerConfig.from_dict(
        {"max_body_bytes": 4096, "proxy_max_body_bytes": 4096, "bodies_in_flight_bytes": 5000}
    )
    return LiveServer(create_app(store, models=_models(raw), config=config))


def test_a_body_the_budget_has_no_room_for_is_refused_before_it_is_sent(store, raw):
    """A body whose Content-Length the bodies held at once leave no room for is a 429 as soon
    as its headers are read: the client does not upload it first."""
    import socket
    import threading

    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 3000}]}
    raw.stall()
    with _budgeted(store, raw) as server:
        url = f"{server.url}/proxy/default/v1/chat/completions"
        worker = threading.Thread(target=lambda: httpx.post(url, json=body, timeout=30))
        worker.start()
        deadline = time.monotonic() + 10
        while raw.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(
                (
                    f"POST /proxy/default/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 3100\r\n\r\n"
                ).encode()
            )
            answer = sock.recv(65536)  # no byte of the body sent: a timeout here fails the test
        raw.answer(json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode())
        worker.join(30)
    assert answer.startswith(b"HTTP/1.1 429"), answer[:200]
    assert b"retry-after: 1" in answer.lower()


def test_a_streamed_answer_gives_its_body_bytes_back(store, raw):
    """The bytes a streamed request's body held are given back once its stream is done: the
    next body that needs them is read (not a 429)."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "ok"}}],
    }
    raw.answer(
        f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(),
        headers={"content-type": "text/event-stream"},
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 3000}]}
    with _budgeted(store, raw) as server:
        url = f"{server.url}/proxy/default/v1/chat/completions"
        streamed = httpx.post(url, json={**body, "stream": True}, timeout=30)
        raw.answer(json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode())
        after = httpx.post(url, json=body, timeout=30)
    assert streamed.status_code == 200 and b"[DONE]" in streamed.content, streamed.text
    assert after.status_code == 200, after.text


def test_an_unreachable_upstream_is_a_502(store):
    """No server at the model's base_url: a 502 in the provider's shape."""
    from ..conftest import free_port

    models = ModelsConfig.from_dict(
        {
            "models": {
                "m": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "up", "context_window": 8000}
            }
        }
    )
    with LiveServer(create_app(store, models=models)) as server:
        r = httpx.post(f"{server.url}/proxy/default/v1/chat/completions", json=BODY, timeout=30)
    assert r.status_code == 502 and "could not reach" in r.json()["error"]["message"]


def test_an_invalid_history_is_a_400_naming_the_message(proxy, raw):
    """A tool result without its call is refused with its JSON pointer; nothing goes upstream."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "x", "content": "r"},
        ],
    }
    r, _ = _post(proxy, body)
    assert r.status_code == 400
    assert "/messages/1" in r.json()["error"]["message"]
    assert raw.requests == 0


def test_a_responses_problem_points_into_input(proxy, raw):
    """A Responses request's invalid history is named by its pointer into ``input``."""
    body = {"model": "m", "input": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]}
    r, _ = _post(proxy, body, "/v1/responses")
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("/input/0")
    assert raw.requests == 0


HOSTILE = [
    {"model": "m", "messages": [1, "x", None]},
    {"model": "m", "messages": [{"role": "user", "content": {"$": 1}}]},
    {"model": "m", "messages": [{"role": "user"}]},
    {"model": "m", "messages": [{"role": "wizard", "content": "hi"}]},
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}]},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": "nope"},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
    {"model": ["m"], "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}] * 3},
    {"model": "m", "messages": {"role": "user"}},
    {"model": "m"},
]
HOSTILE_RAW = [
    b'{"model": "m", "messages": [' + b"[" * 100 + b"]" * 100 + b"]}",
    b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
    b"[1, 2]",
    b'"text"',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]} trailing',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "messages": 5}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}',
    b'{"model": NaN, "messages": []}',
    b"\xff\xfe",
]


def test_hostile_bodies_are_4xx_in_the_providers_shape_and_never_go_upstream(proxy, raw):
    """Malformed, mistyped or invalid bodies get a 4xx in OpenAI's shape naming the problem;
    nothing reaches the upstream."""
    url = f"{proxy.url}/proxy/default/v1/chat/completions"
    answers = [httpx.post(url, json=b, timeout=30) for b in HOSTILE]
    answers += [
        httpx.post(url, content=b, headers={"content-type": "application/json"}, timeout=30)
        for b in HOSTILE_RAW
    ]
    for r in answers:
        assert 400 <= r.status_code < 500, r.text
        assert r.json()["error"]["message"], r.text
    assert raw.requests == 0


def _faults():
    import errno

    from sqlalchemy.exc import OperationalError

    from ctxmgmt.errors import LLMError, LLMTimeoutError, ManagerError

    def caused(cause):
        try:
            raise ManagerError(
                "the summary failed", definition="d", hook="pre_llm", index=0, type="s"
            ) from cause
        except ManagerError as exc:
            return exc

    return [
        pytest.param(OperationalError("select", {}, Exception("could not connect")), 503, id="db-down"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), 507, id="disk-full"),
        pytest.param(caused(LLMError("the summariser answered 500", model_id="m")), 502, id="manager-llm"),
        pytest.param(
            caused(LLMTimeoutError("the summariser timed out", model_id="m")), 504, id="manager-timeout"
        ),
        pytest.param(caused(ValueError("a bug")), 422, id="manager"),
    ]


@pytest.mark.parametrize(("fault", "status"), _faults())
def test_a_fault_is_answered_by_the_proxy_as_by_the_api(proxy, store, monkeypatch, fault, status):
    """A storage fault (503 with retry-after, 507) or a manager's model failure (502/504) gets
    the same status from the proxy as from the REST API, in each one's shape."""

    def fail(*args, **kwargs):
        raise fault

    monkeypatch.setattr(type(store), "resolve_version", fail)
    monkeypatch.setattr(type(store), "list", fail)
    rest = httpx.get(f"{proxy.url}/_plugins/_ml/context_management", timeout=10)
    proxied = httpx.post(f"{proxy.url}/proxy/default/v1/chat/completions", json=BODY, timeout=10)
    assert (rest.status_code, proxied.status_code) == (status, status), proxied.text
    assert rest.headers.get("retry-after") == proxied.headers.get("retry-after")
    assert rest.json()["error"]["type"] in proxied.text  # the kind, in the provider's shape
    if status == 422:
        assert proxied.json()["error"]["message"] == rest.json()["error"]["reason"]


SUMMARISING = {
    "name": "summarising",
    "hooks": {
        "pre_llm": [
            {
                "type": "SummarizationManager",
                "config": {"summarization_model_id": "s", "preserve_recent_messages": 1},
                "activation": {"message_count_exceed": 2},
                "on_error": "fail",
            }
        ]
    },
}


@pytest.mark.parametrize(("behaviour", "status"), [("stall", 504), ("fail", 502)])
def test_a_summarisers_upstream_failure_is_the_models_fault(store, raw, behaviour, status):
    """A summariser (on_error: fail) whose model stalls or fails makes the proxied request a
    504 or a 502 in the provider's shape (not a 422), and nothing goes to the main model."""
    store.seed("summarising", SUMMARISING)
    shared = {"base_url": raw.base_url, "model": "up", "timeout": TIMEOUT, "max_retries": 0}
    models = ModelsConfig.from_dict(
        {"models": {"m": {**shared, "context_window": 8000}, "s": {**shared, "context_window": 8000}}}
    )
    if behaviour == "stall":
        raw.stall()
    else:
        raw.answer(b'{"error": {"message": "overloaded"}}', status=500)
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20} for i in range(7)
    ]
    with LiveServer(create_app(store, models=models)) as server:
        r = httpx.post(
            f"{server.url}/proxy/summarising/v1/chat/completions",
            json={"model": "m", "messages": history},
            timeout=30,
        )
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == ("llm_timeout" if status == 504 else "llm_exception"), error
    assert error["type"] == ("timeout_error" if status == 504 else "server_error")
    assert raw.requests == 1  # the summariser's request only


def test_a_websocket_handshake_is_told_at_once_to_use_http(proxy, raw):
    """The Codex CLI tries the Responses API's WebSocket mode first and falls back to HTTP on a
    426 (a bare 403 made it retry five times, 6.7 s): every handshake gets a 426 at once, its
    body in the path's provider shape, and the connection serves HTTP after it."""
    handshake = {
        "connection": "Upgrade",
        "upgrade": "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "openai-beta": "responses_websockets=2026-02-06",
    }
    with httpx.Client(base_url=proxy.url, timeout=10) as client:
        r = client.get("/proxy/default/v1/responses", headers=handshake)
        assert r.status_code == 426 and r.json()["error"]["code"] == "upgrade_required"
        r = client.get("/proxy/default/v1/messages", headers=handshake)
        assert r.status_code == 426 and r.json()["type"] == "error"
        said = {
            "id": "c",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
        }
        raw.answer(json.dumps(said).encode())
        r = client.post("/proxy/default/v1/chat/completions", json=BODY)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    assert raw.requests == 1  # the handshakes went nowhere


def test_a_server_that_speaks_websocket_denies_the_handshake_with_the_426():
    """Mounted in a server that does speak WebSocket, the app denies a handshake with the same
    426 (ASGI's WebSocket denial response), or closes it where the server cannot send one."""
    import asyncio

    from ctxmgmt.api.upgrades import NoWebSockets

    async def handshake(extensions: dict) -> list[dict]:
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "websocket.connect"}

        async def send(message: dict) -> None:
            sent.append(message)

        async def never(scope, receive, send) -> None:
            raise AssertionError("the app behind is never called")

        scope = {
            "type": "websocket",
            "path": "/proxy/default/v1/responses",
            "headers": [],
            "extensions": extensions,
        }
        await NoWebSockets(never)(scope, receive, send)
        return sent

    denied = asyncio.run(handshake({"websocket.http.response": {}}))
    assert denied[0]["type"] == "websocket.http.response.start" and denied[0]["status"] == 426
    assert json.loads(denied[1]["body"])["error"]["code"] == "upgrade_required"
    assert asyncio.run(handshake({})) == [{"type": "websocket.close", "code": 1008}]


@pytest.mark.parametrize(
    ("raw_body", "says"),
    [
        (b'{"model": "a", "messages": [{"role": "user", "content": "hi"}], "x": NaN}', "NaN"),
        (b'{"model": "a", "messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
        (b'{"model": "a", "model": "b", "messages": []}', "given twice"),
        (b'{"model": "a", "messages": ' + b"[" * 200 + b"]" * 200 + b"}", "nested deeper"),
    ],
)
def test_a_count_body_is_checked_as_a_messages_body(proxy, raw, raw_body, says):
    """The token count reads its body as the Messages route does: invalid JSON a provider
    would refuse (NaN, a lone surrogate, a key given twice, nesting past the bound) is a 400
    naming it, never a 500 and never sent upstream."""
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/messages/count_tokens",
        content=raw_body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["type"] == "error" and says in r.json()["error"]["message"]
    assert raw.requests == 0


def _bomb(size: int) -> bytes:
    """``size`` zero bytes, gzipped (a few KB on the wire for a GB)."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()


@pytest.mark.parametrize(
    ("path", "body", "stream"),
    [
        ("/v1/chat/completions", BODY, False),
        ("/v1/chat/completions", BODY, True),
        ("/v1/messages/count_tokens", COUNT, False),
    ],
)
def test_a_compressed_answer_is_unpacked_within_its_size_limit(proxy, raw, path, body, stream):
    """A gzipped answer that unpacks to 1 GiB (1 MB on the wire) is refused once its first
    max_response_bytes (a stream's max_stream_bytes) are unpacked: a 502 (or an error event)
    naming the limit, the server's
    memory never holding the whole."""
    import tracemalloc

    kind = "text/event-stream" if stream else "application/json"
    raw.answer(_bomb(1 << 30), headers={"content-type": kind, "content-encoding": "gzip"})
    tracemalloc.start()  # the server is this process's thread: its allocations are traced
    try:
        if stream:
            got = _streamed(proxy, body, path)
            assert b"max_stream_bytes" in got.rsplit(b"data: ", 1)[-1]
        else:
            r, _ = _post(proxy, body, path)
            assert r.status_code == 502 and "max_response_bytes" in r.text
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # the limit is 1 MiB (about 20 MiB traced in all); httpx unpacked 150 MiB


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("encoding", ["gzip, gzip", "br", "zstd"])
def test_an_answer_in_an_encoding_that_cannot_be_bounded_is_a_502(proxy, raw, encoding, stream):
    """The proxy asks for identity; an answer in layers of gzip, or in br or zstd, whose size
    cannot be bounded as it is unpacked, is a 502 naming its encoding, a stream's before any
    event (not a 200 ended by an error event)."""
    kind = "text/event-stream" if stream else "application/json"
    raw.answer(b"\x1f\x8b whatever", headers={"content-type": kind, "content-encoding": encoding})
    r, _ = _post(proxy, {**BODY, "stream": stream})
    assert r.status_code == 502 and repr(encoding) in r.json()["error"]["message"]


def test_a_gzipped_answer_within_its_limit_is_passed_on_unpacked(proxy, raw):
    """A gateway that gzips anyway: its answer reaches the client unpacked and whole."""
    import gzip

    answer = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
    raw.answer(
        gzip.compress(json.dumps(answer).encode()),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    r, _ = _post(proxy, BODY)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize(
    ("path", "body", "answer", "content_type"),
    [
        ("/v1/chat/completions", BODY, b"<html><body>Welcome to nginx!</body></html>", "text/html"),
        ("/v1/chat/completions", BODY, b'{"id": "c", "object": "chat.completion", "choi', "application/json"),
        ("/v1/chat/completions", BODY, b"", "application/json"),
        ("/v1/chat/completions", {**BODY, "stream": True}, b"<html>login</html>", "text/html"),
        (
            "/v1/messages",
            {**BODY, "model": "a", "max_tokens": 16},
            b'["not", "an", "object"]',
            "application/json",
        ),
        ("/v1/messages/count_tokens", COUNT, b"<html>Welcome</html>", "text/html"),
    ],
)
def test_a_success_that_is_no_json_object_is_a_502_that_says_what_came(
    proxy, raw, store, path, body, answer, content_type
):
    """An upstream that answers 200 with an HTML page, a cut-off or empty body, or JSON that is
    no object (also to a token count): a 502 in the provider's shape that names what came and
    where to look (the client's SDK would fail to parse it, and retries a 502), and the
    execution's record says so."""
    raw.answer(answer, headers={"content-type": content_type})
    r = httpx.post(f"{proxy.url}/proxy/default{path}", json=body, timeout=30)
    assert r.status_code == 502
    error = r.json()["error"]
    assert content_type in error["message"] and "base_url" in error["message"]
    if path.startswith("/v1/messages"):
        assert r.json()["type"] == "error"
    if path != "/v1/messages/count_tokens":  # a count is no execution: nothing is recorded
        assert "not a JSON object" in json.dumps(stored_record(store))


@pytest.mark.parametrize("stream", [False, True])
def test_a_valid_answer_nested_deeper_than_the_parser_goes_is_passed_on(proxy, raw, stream, caplog):
    """An upstream's answer with a member nested 100,000 deep is valid JSON the proxy cannot
    parse for its usage: it reaches the client as it came (no 502, no error event, nothing
    logged as a failure)."""
    deep = "[" * 100_000 + "]" * 100_000
    answer = (
        '{"id": "c", "object": "chat.completion.chunk", "choices": [], "extra": ' + deep + "}"
        if stream
        else '{"id": "c", "object": "chat.completion", "choices": [], "extra": ' + deep + "}"
    )
    body = f"data: {answer}\n\ndata: [DONE]\n\n".encode() if stream else answer.encode()
    raw.answer(body, headers={"content-type": "text/event-stream" if stream else "application/json"})
    if stream:
        got = _streamed(proxy)
        assert got == body
    else:
        r, _ = _post(proxy, BODY)
        assert r.status_code == 200 and r.content == body
    assert not [
        rec
        for rec in caplog.records
        if rec.name.startswith(("ctxmgmt.api", "ctxmgmt.proxy")) and rec.levelno >= 30
    ]


def test_a_deep_json_object_answering_a_streamed_request_is_a_502(proxy, raw):
    """One JSON object nested deeper than the parser goes, answering a streamed request: no
    events, whatever it holds, so a 502 that says so (it went to the client as a 200 of
    application/json, which its SDK cannot read as a stream)."""
    deep = "[" * 100_000 + "]" * 100_000
    raw.answer(('{"id": "c", "object": "chat.completion", "choices": [], "extra": ' + deep + "}").encode())
    r, _ = _post(proxy, {**BODY, "stream": True})
    assert r.status_code == 502, r.text[:200]
    assert "not server-sent events" in r.json()["error"]["message"]


@pytest.mark.parametrize("status", [301, 307, 308])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "location",
    [
        "https://user:pw@elsewhere.test/v1/chat/completions?token=s3cret",
        "//user:pw@elsewhere.test/v1/chat/completions#access_token=s3cret",
    ],
)
def test_an_upstream_redirect_is_a_502_that_names_it_and_is_not_followed(
    proxy, raw, status, stream, location
):
    """An upstream that redirects is not followed (the key and the prompt would go along): a
    502 in the provider's shape that names the status and where it points (without its user,
    password, query or fragment), and the one request the upstream got."""
    raw.answer(b"moved", status=status, headers={"location": location})
    r = httpx.post(
        f"{proxy.url}/proxy/default/v1/chat/completions", json={**BODY, "stream": stream}, timeout=30
    )
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert str(status) in message and "//elsewhere.test/v1/chat/completions" in message
    assert "s3cret" not in message and "pw" not in message and "base_url" in message
    assert "location" not in r.headers
    assert raw.requests == 1


@pytest.mark.parametrize(
    "kind", ["Text/Event-Stream", "TEXT/EVENT-STREAM; charset=utf-8", "text/plain", None]
)
def test_a_stream_under_an_odd_content_type_reaches_the_client_as_it_came(proxy, raw, kind):
    """A streamed answer whose content type is written in capitals (media types are
    case-insensitive), another type or none, is passed on as it came (not refused as an
    answer that is no JSON object)."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
    events = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    raw.answer(events, headers={"content-type": kind} if kind else {})
    assert _streamed(proxy) == events


@pytest.mark.parametrize("reported", [3_000_000_000, 10**20])
def test_an_absurd_usage_report_is_no_report_and_the_record_is_stored(proxy, raw, store, reported):
    """A Responses request the upstream continues (``previous_response_id``) whose answer
    reports billions of input tokens: the answer comes back, and the execution is recorded
    with no report (the figure overflowed the record's column: the record was lost)."""
    answer = {
        "id": "resp_2",
        "object": "response",
        "status": "completed",
        "output": [],
        "usage": {"input_tokens": reported, "output_tokens": 1, "total_tokens": reported + 1},
    }
    raw.answer(json.dumps(answer).encode(), headers={"content-type": "application/json"})
    body = {"model": "m", "input": "and now?", "previous_response_id": "resp_1"}
    r = httpx.post(f"{proxy.url}/proxy/default/v1/responses", json=body, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["input_tokens"] == reported
    record = stored_record(store)
    assert record["calls"][0]["reported"] is None


@pytest.mark.parametrize("model", [None, "", 5])
def test_a_request_with_no_model_name_is_told_the_configured_ones(proxy, model):
    """A request without a model's name (missing, empty, not a string) is a 400 naming /model and
    the models the proxy has, as an unknown model's 404 does."""
    body = {"messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    r = httpx.post(f"{proxy.url}/proxy/default/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert message == "/model: must be the name of a configured model (configured: a, m)"


def test_anthropic_usage_parts_that_add_up_past_the_bound_are_no_report():
    """An Anthropic report's input is the sum of its parts (fresh, cache read, cache written):
    parts that are each in bounds but add up past 2^31 - 1 are no report, as one part past it
    is (it was clamped to the bound and kept as a true figure)."""
    from ctxmgmt.api.proxy.usage import usage_of

    def used(**parts: int) -> dict | None:
        return usage_of("messages", {"type": "message", "usage": {"output_tokens": 1, **parts}})

    big = {"input_tokens": 2_000_000_000, "cache_read_input_tokens": 2_000_000_000}
    assert "input" not in used(**big)
    assert "input" not in used(input_tokens=3_000_000_000)
    fine = used(input_tokens=5, cache_read_input_tokens=7, cache_creation_input_tokens=11)
    assert fine == {"output": 1, "input": 23, "cached": 7, "written": 11}


def test_the_upstreams_retry_advice_reaches_the_client(proxy, raw):
    """x-should-retry and retry-after-ms (which the SDKs obey) come back as the upstream sent
    them, with retry-after and the request id; a Set-Cookie or a Location does not."""
    advice = {
        "x-should-retry": "false",
        "retry-after-ms": "10",
        "retry-after": "1",
        "x-request-id": "req_1",
        "set-cookie": "s=1",
        "location": "http://elsewhere.test/",
    }
    raw.answer(b'{"error": {"message": "slow down"}}', status=429, headers=advice)
    r, _ = _post(proxy, BODY)
    assert r.status_code == 429
    for name in ("x-should-retry", "retry-after-ms", "retry-after", "x-request-id"):
        assert r.headers.get(name) == advice[name]
    assert "set-cookie" not in r.headers and "location" not in r.headers


def test_a_stream_is_bounded_by_max_stream_bytes_not_max_response_bytes(proxy, raw):
    """A stream passed on as it arrives may be larger than a whole answer may (its events are
    many times the answer's bytes): 3 MiB of events reach the client whole under a 1 MiB
    max_response_bytes; past max_stream_bytes (4 MiB) an error event names that limit."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "?"}}],
    }
    event = b"data: " + json.dumps(chunk).encode().replace(b"?", b"x" * 900) + b"\n\n"
    for count, whole in ((3 << 10, True), (5 << 10, False)):
        body = event * count + (b"data: [DONE]\n\n" if whole else b"")
        raw.answer(body, headers={"content-type": "text/event-stream"})
        got = _streamed(proxy)
        if whole:
            assert got == body
        else:
            assert b"max_stream_bytes" in got.rsplit(b"data: ", 1)[-1]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("path", "body"), [("/v1/chat/completions", BODY), ("/v1/messages", {**COUNT, "max_tokens": 5})]
)
@pytest.mark.parametrize("status", [600, 999])
def test_an_upstream_status_that_is_no_http_status_is_a_502(proxy, raw, path, body, stream, status):
    """An upstream answering three digits past 599 (httpx reads any) gets a 502 in the
    provider's shape that names the status, never a dropped connection."""
    raw.answer(b"{}", status=status, headers={"content-type": "application/json", "content-length": "2"})
    r = httpx.post(f"{proxy.url}/proxy/default{path}", json={**body, "stream": stream}, timeout=30)
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert f"status {status}, which is no HTTP status" in message


def test_a_client_given_the_wrong_base_url_reads_the_right_one_in_its_sdks_error(proxy):
    """An SDK pointed at the server's root instead of /proxy/{definition} (the commonest slip)
    gets a 404 its SDK reads: the OpenAI SDK shows the error's message, which names the base
    URLs; so does the Anthropic SDK; the model list too."""
    import anthropic
    import openai

    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError) as chat:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError) as models:
        client.models.list()
    claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as messages:
        claude.messages.create(model="a", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    for caught in (chat, models, messages):
        assert "/proxy/{definition}/v1" in str(caught.value), str(caught.value)


_TORN = {
    "chat": (
        b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up", '
        b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": "the"}}]}\n\n'
        b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up", '
        b'"choices": [{"index": 0, "delta": {"content": " zqxw'
    ),
    "anthropic": (
        b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", '
        b'"type": "message", "role": "assistant", "model": "up", "content": [], "stop_reason": null, '
        b'"stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 1}}}\n\n'
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        b'"content_block": {"type": "text", "text": ""}}\n\n'
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": '
        b'{"type": "text_delta", "text": "the zqxw'
    ),
}


def _sdk_stream(proxy, api: str) -> list[object]:
    """The events the provider's own SDK reads from a streamed answer through the proxy."""
    import anthropic
    import openai

    if api == "chat":
        client = openai.OpenAI(base_url=f"{proxy.url}/proxy/default/v1", api_key="k", max_retries=0)
        return list(client.chat.completions.create(model="m", messages=BODY["messages"], stream=True))
    claude = anthropic.Anthropic(base_url=f"{proxy.url}/proxy/default", api_key="k", max_retries=0)
    return list(claude.messages.create(model="a", max_tokens=5, messages=BODY["messages"], stream=True))


@pytest.mark.parametrize("api", ["chat", "anthropic"])
@pytest.mark.parametrize("how", ["closed", "stalled"])
def test_a_stream_torn_mid_event_ends_with_an_error_the_sdk_raises(proxy, raw, api, how):
    """An upstream stream that breaks off in the middle of an event (the connection closed, or
    its deadline passed while the event trickled): the client gets the whole events before it,
    never half of one, then the error event, which the provider's SDK raises as its API error
    (half an event before it made the SDKs fail parsing JSON); past the deadline, of the type a
    504 has (``timeout_error``: it was Anthropic's ``api_error``)."""
    import anthropic
    import openai

    if how == "closed":
        raw.answer(_TORN[api], headers={"content-type": "text/event-stream"})
    else:
        raw.trickle(interval=0.2, start=_TORN[api], content_type="text/event-stream")
    error = openai.APIError if api == "chat" else anthropic.APIError
    with pytest.raises(error) as caught:
        _sdk_stream(proxy, api)
    assert "stream" in str(caught.value), str(caught.value)
    path = "/v1/chat/completions" if api == "chat" else "/v1/messages"
    body = BODY if api == "chat" else {**BODY, "model": "a", "max_tokens": 5}
    if how == "closed":
        raw.answer(_TORN[api], headers={"content-type": "text/event-stream"})
    else:
        raw.trickle(interval=0.2, start=_TORN[api], content_type="text/event-stream")
    got = _streamed(proxy, body, path)
    whole = _TORN[api][: _TORN[api].rindex(b"\n\n") + 2]
    assert got.startswith(whole) and b"zqxw" not in got, got[-300:]
    # The deadline passed: the error's type says so, as a request not streamed says it (504).
    assert (b'"timeout_error"' in got) is (how == "stalled"), got[-300:]


@pytest.mark.parametrize("path", ["/proxy/default/v1/chat/completions", "/_plugins/_ml/context_management/x"])
def test_a_number_too_long_to_read_is_a_400_that_says_where(store, raw, path):
    """A whole number of 5,000 digits in a body: a 400 that gives its line and column and says
    to send it as a string (it was Python's "use sys.set_int_max_str_digits()")."""
    text = (
        '{"model": "m",\n "messages": [{"role": "user", "content": "hi,'
        + "7" * 5000  # digits in a string are no number: not where the error points
        + '"}], "seed": '
        + "7" * 5000
        + "}"
    )
    column = text.split("\n")[1].index('"seed": ') + len('"seed": ') + 1
    method = "POST" if "proxy" in path else "PUT"
    with LiveServer(create_app(store, models=_models(raw))) as server:
        r = httpx.request(
            method, f"{server.url}{path}", content=text, headers={"content-type": "application/json"}
        )
    assert r.status_code == 400, r.text[:300]
    said = json.dumps(r.json())
    assert (
        f"line 2 column {column}: a number of 5,000 digits (at most 4,300); send a longer one as a string"
        in said
    )
    assert "sys." not in said
