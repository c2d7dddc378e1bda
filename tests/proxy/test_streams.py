"""Server-sent events split once, as they arrive: every separator, bounded events, linear work."""

from __future__ import annotations

import json

import httpx
import pytest

from ctxmgmt.api import create_app
from ctxmgmt.api.proxy import streams
from ctxmgmt.api.proxy.streams import Events, EventTooLong
from ctxmgmt.testing import RawServer

from ..conftest import LiveServer
from .conftest import models_for

STREAM = b'data: {"a": 1}\n\nevent: x\r\ndata: {"b": 2}\r\n\r\ndata: {"c": 3}\r\rdata: [DONE]\n\n'


def _split(stream: bytes, size: int, **kwargs) -> list[tuple[bytes, object]]:
    events = Events(**kwargs)
    out = [e for at in range(0, len(stream), size) for e in events.feed(stream[at : at + size])]
    return out + events.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, len(STREAM)])
def test_events_end_at_every_separator_however_the_bytes_arrive(size):
    """LF, CRLF and CR blank lines each end an event, also when a separator is split between
    chunks; each event's bytes come as received and its data parsed."""
    got = _split(STREAM, size)
    assert b"".join(e for e, _ in got) == STREAM
    assert [d for _, d in got] == [{"a": 1}, {"b": 2}, {"c": 3}, None]


@pytest.mark.parametrize("size", [100, 4096, 10_000])
def test_an_event_over_the_bound_is_refused_however_it_arrives(size):
    """An event over the bound is refused (never held whole), whether it arrives in pieces or
    in one chunk with its end; the events before it are read."""
    big = b'data: {"text": "' + b"x" * 5000 + b'"}\n\n'
    events = Events(max_bytes=1024)
    stream = b'data: {"usage": 1}\r\r' + big
    got = []
    with pytest.raises(EventTooLong, match="over 1024 bytes"):
        for at in range(0, len(stream), size):
            got += events.feed(stream[at : at + size])
            assert len(events._buffer) <= 1024 + size
        events.finish()
    assert [d for _, d in got] == [{"usage": 1}]


def test_a_trailing_event_without_its_blank_line_is_read_at_the_end():
    """A stream that ends without the blank line after its last event still gives that event;
    a CR at a chunk's end waits for the LF that may follow (no empty event is made)."""
    events = Events()
    assert events.feed(b'data: {"a": 1}\r\n\r') == []
    assert events.feed(b'\ndata: {"b": 2}') == [(b'data: {"a": 1}\r\n\r\n', {"a": 1})]
    assert events.finish() == [(b'data: {"b": 2}', {"b": 2})]


def test_a_long_event_in_small_chunks_is_searched_once(monkeypatch):
    """A 2 MB event arriving in 4 KB chunks is searched for its end once over, not from its
    start on every chunk (the work is linear in the stream)."""
    scanned = [0]
    pattern = streams._SEPARATOR

    class Counting:
        def search(self, buffer, pos):
            scanned[0] += len(buffer) - pos
            return pattern.search(buffer, pos)

    monkeypatch.setattr(streams, "_SEPARATOR", Counting())
    stream = b"data: " + json.dumps({"text": "y" * (2 << 20)}).encode() + b"\n\n"
    got = _split(stream, 4096, max_bytes=4 << 20)
    assert got[0][1] == {"text": "y" * (2 << 20)}
    assert scanned[0] <= 2 * len(stream)


@pytest.mark.parametrize(
    ("path", "model"), [("/v1/chat/completions", "gpt-test"), ("/v1/messages", "claude-test")]
)
def test_an_oversized_event_through_the_proxy_ends_with_an_error_event(store, monkeypatch, path, model):
    """An upstream event over the bound ends the client's stream with the provider's error
    event (a 502 llm_exception naming the bound), after the events before it."""
    monkeypatch.setattr(streams, "MAX_EVENT_BYTES", 4096)
    first = b'data: {"id": "c", "object": "chat.completion.chunk", "choices": []}\n\n'
    body = first + b'data: {"text": "' + b"x" * 20_000 + b'"}\n\ndata: [DONE]\n\n'
    with RawServer() as raw, LiveServer(create_app(store, models=models_for(raw))) as server:
        raw.answer(body, headers={"content-type": "text/event-stream"})
        request = {"model": model, "max_tokens": 10, "stream": True}
        request["messages"] = [{"role": "user", "content": "hi"}]
        with httpx.stream("POST", f"{server.url}/proxy/default{path}", json=request, timeout=30) as r:
            got = b"".join(r.iter_bytes())
    assert got.startswith(first)
    last = Events().feed(got)[-1]
    error = last[1]["error"]
    assert "over 4096 bytes" in error["message"]
    assert error["type"] == "api_error" if model == "claude-test" else error["code"] == "llm_exception"
    assert (b"event: error" in last[0]) == (model == "claude-test")
