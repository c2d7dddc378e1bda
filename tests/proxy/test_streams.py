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
from .conftest import models_for, stored_record

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


@pytest.mark.parametrize("size", [1, 3, 100, 4096, 10_000])
def test_after_an_event_over_the_bound_is_skipped_the_next_ones_are_read(size):
    """A stream only passed on skips an event over the bound (never held whole, whichever
    separator ends it, however the bytes arrive) and reads the events after it: the usage and
    the end of the answer are not lost."""
    for separator in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        big = b'data: {"text": "' + b"x" * 5000 + b'"}' + separator
        stream = b'data: {"usage": 1}\n\n' + big + big + b'data: {"usage": 2}\n\ndata: [DONE]\n\n'
        events = Events(max_bytes=1024)
        got = []
        for at in range(0, len(stream), size):
            got += events.feed(stream[at : at + size], skip=True)
            assert len(events._buffer) <= 1024 + size
        got += events.finish(skip=True)
        assert [d for _, d in got if d is not None] == [{"usage": 1}, {"usage": 2}], (separator, size)
        assert got[-1][0].strip() == b"data: [DONE]"


def test_a_stream_that_ends_inside_a_skipped_event_gives_no_event_of_it():
    """A stream that ends while an overlong event is being skipped ends with no event: the
    skipped bytes are never read as one."""
    events = Events(max_bytes=64)
    with pytest.raises(EventTooLong):
        events.feed(b"data: " + b"y" * 200)
    assert events.skip() == [] and events.feed(b"y" * 100) == []
    assert events.finish() == []


def test_a_trailing_overlong_event_is_dropped_when_skipping_and_refused_otherwise():
    """At a stream's end, the events held are read and an unended last event over the bound
    is dropped (with skip) or refused; the events before it are never lost with it."""
    tail = b'data: {"usage": 3}\n\ndata: ' + b"z" * 200
    events = Events(max_bytes=64)
    assert events.feed(tail, skip=True) == [(b'data: {"usage": 3}\n\n', {"usage": 3})]
    assert events.finish(skip=True) == []
    events = Events(max_bytes=64)
    assert len(events.feed(tail)) == 1
    with pytest.raises(EventTooLong):
        events.finish()


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


def _oversized(store, monkeypatch, path, model, *, recall, tmp_path=None):
    """A stream with an event over a lowered bound, through the proxy: (what the upstream sent,
    what the client got). ``recall``: the proxy watches the events for recall calls."""
    from ctxmgmt.offload import LocalOffloader

    from ..conftest import shipped

    monkeypatch.setattr(streams, "MAX_EVENT_BYTES", 4096)
    first = b'data: {"id": "c", "object": "chat.completion.chunk", "choices": []}\n\n'
    # After the oversized event: the usage, as chat and as Anthropic report it (each API's
    # reader takes its own), then the answer's end.
    usage = (
        b'data: {"id": "c", "object": "chat.completion.chunk", "choices": [], '
        b'"usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}\n\n'
        b'event: message_delta\ndata: {"type": "message_delta", '
        b'"usage": {"input_tokens": 11, "output_tokens": 3}}\n\n'
    )
    # Then the answer's end, as each API ends it.
    end = b'event: message_stop\ndata: {"type": "message_stop"}\n\ndata: [DONE]\n\n'
    body = first + b'data: {"text": "' + b"x" * 20_000 + b'"}\n\n' + usage + end
    definition, offloader, messages = "default", None, [{"role": "user", "content": "hi"}]
    if recall:  # an archiving definition, and a history with something archived
        store.seed("long-running-agent", shipped("long-running-agent"))
        definition, offloader = "long-running-agent", LocalOffloader(tmp_path)
        big = "\n".join(f"line {i}: build log entry {i:05d}" for i in range(6000))
        if model == "claude-test":
            messages = [
                {"role": "user", "content": "Build it."},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": big}]},
            ]
        else:
            call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            messages = [
                {"role": "user", "content": "Build it."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": big},
            ]
    app = create_app(store, models=models_for(raw_up := RawServer().__enter__()), offloader=offloader)
    try:
        with LiveServer(app) as server:
            raw_up.answer(body, headers={"content-type": "text/event-stream"})
            request = {"model": model, "max_tokens": 10, "stream": True, "messages": messages}
            url = f"{server.url}/proxy/{definition}{path}"
            with httpx.stream("POST", url, json=request, timeout=30) as r:
                got = b"".join(r.iter_bytes())
    finally:
        raw_up.__exit__(None, None, None)
    return body, got


PATHS = [("/v1/chat/completions", "gpt-test"), ("/v1/messages", "claude-test")]


@pytest.mark.parametrize(("path", "model"), PATHS)
def test_an_oversized_event_is_passed_on_unread_when_nothing_watches_the_stream(
    store, monkeypatch, path, model
):
    """With no recall to watch for, an event over the bound reaches the client as it came,
    and so does the rest of the stream; the events after it are read: the record has the
    usage the upstream reported after it, and is finished."""
    body, got = _oversized(store, monkeypatch, path, model, recall=False)
    assert got == body, got[-300:]
    record = stored_record(store)
    assert record["status"] == "finished", record
    assert record["calls"][0]["usage"]["output"] == 3, record["calls"][0]


@pytest.mark.parametrize(("path", "model"), PATHS)
def test_an_oversized_event_ends_a_watched_stream_with_an_error_event(
    store, monkeypatch, tmp_path, path, model
):
    """With recall offered, an upstream event over the bound (it cannot be read, and may hide
    a call) ends the client's stream with the provider's error event (a 502 llm_exception
    naming the bound), after the events before it."""
    body, got = _oversized(store, monkeypatch, path, model, recall=True, tmp_path=tmp_path)
    assert got.startswith(body[: body.index(b"\n\n") + 2]) and got != body
    last = Events().feed(got)[-1]
    error = last[1]["error"]
    assert "over 4096 bytes" in error["message"]
    assert error["type"] == "api_error" if model == "claude-test" else error["code"] == "llm_exception"
    assert (b"event: error" in last[0]) == (model == "claude-test")


def test_a_hosted_tools_nameless_call_is_no_recall_call():
    """A Responses stream that starts a hosted tool's call (no name) and then the client's own
    function: neither may be a recall call, so a broken stream passes the client's call on;
    a function call whose name has not arrived, or begins a recall tool's, may be one."""
    from ctxmgmt.api.proxy.handler import _may_be_recall
    from ctxmgmt.api.proxy.streams import Accumulator

    acc = Accumulator("responses")
    for index, item in enumerate(
        [{"type": "web_search_call", "id": "ws"}, {"type": "function_call", "name": "get_weather"}]
    ):
        acc.event({"type": "response.output_item.added", "output_index": index, "item": item})
    assert acc.started() == ["get_weather"] and not _may_be_recall(acc.started())
    assert _may_be_recall(["context_r"]) and _may_be_recall([""]) and not _may_be_recall(["get_weather"])


def _chunk(*choices: tuple[int, str | None]) -> bytes:
    data = {"choices": [{"index": i, "delta": {"content": "x"}, "finish_reason": f} for i, f in choices]}
    return f"data: {json.dumps(data)}\n\n".encode()


@pytest.mark.parametrize(
    ("api", "events", "ends_at"),
    [
        # n=2: the first choice's finish_reason does not end the answer; the second's does.
        ("chat", [_chunk((0, None), (1, None)), _chunk((0, "stop")), _chunk((1, "stop"))], 2),
        ("chat", [_chunk((0, None)), _chunk((0, "stop"))], 1),
        ("chat", [_chunk((0, None)), b"data: [DONE]\n\n"], 1),
        # [DONE] on a line that ends with a bare CR, after another line of the event.
        ("chat", [_chunk((0, None)), b"event: done\rdata: [DONE]\r\r"], 1),
        ("chat", [_chunk((0, None)), b'data: "[DONE] is a word"\n\n'], None),
        (
            "messages",
            [
                b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "x"}}\n\n',
                b'event: message_stop\ndata: {"type": "message_stop"}\n\n',
            ],
            1,
        ),
        (
            "responses",
            [
                b'data: {"type": "response.output_text.delta", "delta": "x"}\n\n',
                b'data: {"type": "response.completed", "response": {}}\n\n',
            ],
            1,
        ),
    ],
)
def test_the_event_that_ends_an_answer_is_told_in_each_api(api, events, ends_at):
    """The answer ends at chat's [DONE] (whatever its line ends) or when every choice begun has
    its finish_reason, at message_stop, at a response's last event; not before."""
    ending = streams.Ending(api)
    split = Events()
    read = [event for chunk in events for event in split.feed(chunk)] + split.finish()
    told = [ending.event(*event) for event in read]
    assert told == [k == ends_at for k in range(len(events))]


def test_a_chat_answer_of_n_choices_ends_when_each_has_finished():
    """With n choices sent one after another, the answer has not ended when the first has
    finished (a client leaving then has not had it all); it has when the n-th finishes,
    and a finished choice's later chunk does not open it again."""

    def chunk(index: int, finish: str | None = None) -> tuple[bytes, dict]:
        data = {"choices": [{"index": index, "delta": {"content": "x"}, "finish_reason": finish}]}
        return b"", data

    ending = streams.Ending("chat", 2)
    told = [ending.event(*e) for e in (chunk(0), chunk(0, "stop"), chunk(0), chunk(1), chunk(1, "stop"))]
    assert told == [False, False, False, False, True]
    assert [streams.Ending("chat").event(*e) for e in (chunk(0), chunk(0, "stop"))] == [False, True]


def test_an_accumulated_answer_takes_deep_json_and_many_deltas():
    """A tool call's arguments nested deeper than the parser goes are read as none (no error
    escapes the stream), and many one-character deltas make the whole text (joined once:
    bench-free, a text grown by += costs its length at every delta)."""
    from ctxmgmt.api.proxy.streams import Accumulator

    acc = Accumulator("messages")
    acc.event({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant"}})
    acc.event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    for _ in range(200_000):
        acc.event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}})
    tool = {"type": "tool_use", "id": "t", "name": "context_read", "input": {}}
    acc.event({"type": "content_block_start", "index": 1, "content_block": tool})
    deep = "[" * 100_000 + "]" * 100_000
    acc.event(
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": deep},
        }
    )
    answer = acc.answer()
    assert answer["content"][0]["text"] == "x" * 200_000 and answer["content"][1]["input"] == {}
    chat = Accumulator("chat")
    call = {"index": 0, "id": "c", "function": {"name": "context_read", "arguments": deep}}
    chat.event({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    from ctxmgmt.api.proxy.recall import calls_of

    assert calls_of("chat", chat.answer()) == [("c", "context_read", None)]  # no object: said to the model


@pytest.mark.parametrize(
    "odd",
    [
        {"id": "c", "choices": 5},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": 5}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [5, {"index": "x"}]}}]},
        {
            "id": "c",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 5}}]}}],
        },
        {
            "id": "c",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 7, "function": []}]}}],
        },
    ],
)
def test_a_chat_chunk_with_members_of_odd_types_is_read_around(odd):
    """A chat chunk whose choices, tool calls, name or id are of the wrong type (a broken or
    hostile upstream) is read around while the proxy watches for recall calls: the answer the
    other chunks make is whole (it raised a TypeError that cut the client's stream)."""
    from ctxmgmt.api.proxy.recall import calls_of
    from ctxmgmt.api.proxy.streams import Accumulator

    chat = Accumulator("chat")
    call = {"index": 0, "id": "c1", "function": {"name": "context_read", "arguments": '{"ref": "t-1"}'}}
    chat.event({"id": "c", "choices": [{"index": 0, "delta": {"content": "Let me look."}}]})
    chat.event(odd)
    chat.event({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    chat.event({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    answer = chat.answer()
    assert answer["choices"][0]["message"]["content"] == "Let me look."
    assert calls_of("chat", answer) == [("c1", "context_read", {"ref": "t-1"})]


def test_a_rewritten_event_keeps_its_other_fields_as_they_came():
    """An event whose data the proxy rewrites (a Responses echo without the recall tools) keeps
    its event name, id, retry and comments, in order, CRLF or LF; its data, once, as JSON
    (the event was remade from its data alone: a client's Last-Event-ID was lost)."""
    from ctxmgmt.api.proxy.streams import with_data

    for eol in (b"\n", b"\r\n"):
        event = eol.join(
            [
                b": keep-alive",
                b"event: response.created",
                b"id: 7",
                b'data: {"type":',
                b"data: 1}",
                b"retry: 900",
            ]
        )
        event += eol + eol
        out = with_data(event, {"type": "response.created", "tools": []})
        assert out == (
            b": keep-alive\nevent: response.created\nid: 7\n"
            b'data: {"type": "response.created", "tools": []}\nretry: 900\n\n'
        )
        [(raw, data)] = Events().feed(out)
        assert raw == out and data == {"type": "response.created", "tools": []}


def test_an_event_too_deep_to_read_is_refused_after_the_events_before_it():
    """With refuse_deep, the events a chunk completes before one nested too deep are returned
    first; the deep one is refused when it is read again (with the next chunk, or at the end),
    as an overlong event is (they were dropped with it)."""
    from ctxmgmt.api.proxy.streams import EventTooDeep

    deep = b'data: {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n\n"
    events = Events(refuse_deep=True)
    got = events.feed(b'data: {"n": 1}\n\n' + deep)
    assert [data for _, data in got] == [{"n": 1}]
    with pytest.raises(EventTooDeep, match="nested deeper"):
        events.finish()
    assert [data for _, data in Events().feed(b'data: {"n": 1}\n\n' + deep)] == [{"n": 1}, None]


@pytest.mark.parametrize(
    ("chunks", "held"),
    [
        ([b"data: 1\n\ndata: 2"], [7]),
        ([b"data: 1\n"], [8]),
        ([b"data: 1\n", b"\n"], [8, 0]),
        ([b"data: 1\r\r"], [0]),  # ended: held only for an LF its CR may have next
        ([b"data: 1\r\n\r", b"\n"], [0, 0]),
        ([b"data: 1\r\r", b"\ndata: 2"], [0, 7]),
        ([b"data: 1\r", b"\r"], [8, 0]),
    ],
)
def test_the_bytes_of_an_unended_event_are_told_whatever_its_separators(chunks, held):
    """What a pass-through holds back is the bytes of the event that has not ended, never an
    event that has (one that ends with a CR, held for the LF that may follow it, was held back
    a chunk: a stream of CR separators reached its client one event late)."""
    events = Events()
    got = []
    for chunk in chunks:
        events.feed(chunk, skip=True)
        got.append(events.unfinished)
    assert got == held
