"""A recording upstream on 127.0.0.1 that speaks OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages, streamed or not, with text and tool calls: what the proxy sends it is
kept, what it answers is scripted."""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: text, or tool calls ``[(name, arguments), ...]`` (after
    ``preface``, text said before them; arguments given as a str are an Anthropic stream's
    input deltas as they are, JSON or not)."""

    text: str = "ok"
    calls: list[tuple[str, Any]] = field(default_factory=list)
    preface: str | None = None
    reasoning: bool = False
    """Responses: a reasoning item first, as a reasoning model's answer holds (encrypted, as
    with ``store: false``)."""
    thinking: bool = False
    """Anthropic: a thinking block first, as an answer with thinking on opens (the model thinks
    at a turn's start; later rounds of its tool loop do not, unless thinking is interleaved)."""


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed its connection mid-answer (the proxy, for one that left) is not
        an error of the upstream's: anything else is printed as the base class does."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Upstream:
    """``with Upstream() as up:`` serves on ``up.base_url`` (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        """Seconds before each answer (a model's time to answer)."""
        self.seen: list[Seen] = []
        self.replies: deque[Any] = deque()
        """Replies in turn: a :class:`Reply`, or a callable that makes one from the request body."""
        self.sent: list[bytes] = []
        """The bytes of each answer as written (the body, or the whole event stream)."""
        self.status: int | None = None
        self.answer_headers: dict[str, str] = {}
        """Headers sent with every answer besides the usual ones."""
        self.linger = 0.0
        """Seconds a stream stays open after its last event (an upstream slow to close)."""
        self.break_after: int | None = None
        """A stream's events sent before the connection drops (an upstream that breaks off)."""
        self.pause_after: int | None = None
        """A stream's events sent before it pauses for ``linger`` seconds (a model slow mid-answer)."""
        self.rewrite: Any = None
        """A function of the next whole answer's bytes: what goes out instead."""
        self._ids = itertools.count(1)
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out as written (no 40 ms wait for a delayed ACK).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:
                self._kept()

            def do_DELETE(self) -> None:
                self._kept()

            def _kept(self) -> None:
                """What OpenAI keeps by id: the request recorded, an object of its kind answered."""
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                upstream.seen.append(
                    Seen(f"{self.command} {self.path}", headers, json.loads(raw) if raw else {}, raw)
                )
                path = self.path.partition("?")[0]
                last = path.rstrip("/").rsplit("/", 1)[-1]
                if last in ("input_items", "items"):
                    data: dict[str, Any] = {"object": "list", "data": [], "has_more": False}
                elif "/conversations" in path:
                    data = {"id": last if last.startswith("conv_") else "conv_1", "object": "conversation"}
                    data |= {"created_at": 1, "metadata": {}}
                    if self.command == "DELETE":
                        data = {"id": last, "object": "conversation.deleted", "deleted": True}
                else:
                    ident = path.split("/responses/", 1)[-1].split("/", 1)[0]
                    data = {"id": ident, "object": "response", "created_at": 1, "model": "gpt-upstream"}
                    data |= {"status": "cancelled" if last == "cancel" else "completed", "output": []}
                self._send(200, "application/json", json.dumps(data).encode())

            def do_POST(self) -> None:
                if "/conversations" in self.path or self.path.partition("?")[0].endswith("/cancel"):
                    self._kept()
                    return
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                if upstream.delay:
                    time.sleep(upstream.delay)
                body = json.loads(raw)
                upstream.seen.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
                )
                if upstream.status is not None:
                    self._send(
                        upstream.status, "application/json", b'{"error": {"message": "upstream says no"}}'
                    )
                    return
                if self.path.partition("?")[0].endswith("/messages/count_tokens"):  # Anthropic's count
                    self._send(
                        200, "application/json", json.dumps({"input_tokens": input_tokens(body)}).encode()
                    )
                    return
                if self.path.partition("?")[0].endswith("/responses/input_tokens"):  # OpenAI's count
                    count = {"object": "response.input_tokens", "input_tokens": input_tokens(body)}
                    self._send(200, "application/json", json.dumps(count).encode())
                    return
                if self.path.partition("?")[0].endswith("/responses/compact"):  # OpenAI's compaction
                    kept = [x for x in body.get("input") or () if x.get("role") == "user"]
                    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "ENC"}
                    compacted = {
                        "id": "resp_cmp",
                        "object": "response.compaction",
                        "created_at": 1,
                        "output": [*kept, item],
                        "usage": {"input_tokens": input_tokens(body), "output_tokens": 9, "total_tokens": 9},
                    }
                    self._send(200, "application/json", json.dumps(compacted).encode())
                    return
                refused = _thinking_refused(body) if self.path.endswith("/messages") else None
                if refused is not None:  # Anthropic's rule for a request with thinking on
                    error = {"type": "error", "error": {"type": "invalid_request_error", "message": refused}}
                    self._send(400, "application/json", json.dumps(error).encode())
                    return
                reply = upstream.replies.popleft() if upstream.replies else Reply()
                if callable(reply):  # a reply made from the request
                    reply = reply(body)
                n = next(upstream._ids)
                kind = self.path.partition("?")[0].rsplit("/", 1)[-1]
                tokens = input_tokens(body)
                if body.get("stream"):
                    events = list(_STREAMS[kind](reply, n, tokens, body))
                    data = b"".join(events)
                    upstream.sent.append(data)
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("x-request-id", f"req_{n}")
                    for name, value in upstream.answer_headers.items():
                        self.send_header(name, value)
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for k, event in enumerate(events):
                        if upstream.break_after is not None and k >= upstream.break_after:
                            self.close_connection = True  # no last chunk: the stream breaks off
                            return
                        if k == upstream.pause_after:
                            time.sleep(upstream.linger)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                    if upstream.linger and upstream.pause_after is None:
                        time.sleep(upstream.linger)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                data = json.dumps(_WHOLE[kind](reply, n, tokens, body)).encode()
                if upstream.rewrite is not None:  # one answer's bytes changed, as a broken model's
                    data, upstream.rewrite = upstream.rewrite(data), None
                upstream.sent.append(data)
                self._send(200, "application/json", data)

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", "req_x")
                self.send_header("set-cookie", "upstream=secret")
                for name, value in upstream.answer_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def reset(self) -> None:
        """Number the answers' ids from 1 again (a second run of the same conversation)."""
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def input_tokens(body: dict[str, Any]) -> int:
    """The input tokens a provider would report: its text, counted as OpenAI's tokenizer does,
    and a few tokens a message (not the JSON's punctuation, which no provider counts)."""
    from ctxmgmt.tokens import get_counter

    texts: list[str] = []
    _strings({k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}, texts)
    conversation = body.get("messages") or body.get("input") or []
    return max(1, get_counter("gpt-4o").text("\n".join(texts)) + 4 * len(conversation))


def _chat(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.preface if reply.calls else reply.text}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(reply.calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5},
    }


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _chat_stream(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> Iterator[bytes]:
    base = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": body["model"],
    }
    yield _sse(
        {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    )
    if reply.calls and reply.preface:
        yield _sse(
            {**base, "choices": [{"index": 0, "delta": {"content": reply.preface}, "finish_reason": None}]}
        )
    if reply.calls:
        for i, (name, args) in enumerate(reply.calls):
            call = {
                "index": i,
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield _sse(
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
            )
            part = {"index": i, "function": {"arguments": json.dumps(args)}}
            yield _sse(
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}]}
            )
    else:
        for word in reply.text.split(" "):
            yield _sse(
                {**base, "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
            )
    yield _sse(
        {
            **base,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if reply.calls else "stop"}],
        }
    )
    for index in range(1, body.get("n") or 1):  # more choices, one after another
        for delta, finish in (({"role": "assistant", "content": reply.text}, None), ({}, "stop")):
            yield _sse({**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}
        yield _sse({**base, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


def _thinking_refused(body: dict[str, Any]) -> str | None:
    """Anthropic's refusal of a request with thinking on whose final turn (after the last user
    message that is not tool results only) does not open with a thinking block, else None."""
    if (body.get("thinking") or {}).get("type") != "enabled":
        return None
    messages = body.get("messages") or []
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        results = isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
        if messages[i].get("role") == "user" and not results:
            start = i + 1
            break
    for i in range(start, len(messages)):
        if messages[i].get("role") == "assistant":
            content = messages[i].get("content")
            first = content[0].get("type") if isinstance(content, list) and content else "text"
            if first not in ("thinking", "redacted_thinking"):
                return (
                    f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                    f"`{first}`. When `thinking` is enabled, a final `assistant` message must start with "
                    "a thinking block"
                )
            return None
    return None


def _messages(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = (
        [
            {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(reply.calls)
        ]
        if reply.calls
        else [{"type": "text", "text": reply.text}]
    )
    if reply.calls and reply.preface:
        content.insert(0, {"type": "text", "text": reply.preface})
    if reply.thinking:
        content.insert(0, {"type": "thinking", "thinking": f"thought {n}", "signature": f"sig_{n}"})
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "tool_use" if reply.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 5},
    }


def _messages_stream(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> Iterator[bytes]:
    whole = _messages(reply, n, tokens, body)
    start = {
        **whole,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": tokens, "output_tokens": 1},
    }
    yield _sse({"type": "message_start", "message": start}, "message_start")
    for i, block in enumerate(whole["content"]):
        if block["type"] == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            yield _sse(
                {"type": "content_block_start", "index": i, "content_block": opened}, "content_block_start"
            )
            for key, kind in (("thinking", "thinking_delta"), ("signature", "signature_delta")):
                delta = {"type": kind, key: block[key]}
                yield _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        elif block["type"] == "text":
            yield _sse(
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            )
            for word in block["text"].split(" "):
                delta = {"type": "text_delta", "text": word + " "}
                yield _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        else:
            opened = {**block, "input": {}}
            yield _sse(
                {"type": "content_block_start", "index": i, "content_block": opened}, "content_block_start"
            )
            given = block["input"]  # a str: the deltas as a model wrote them (no JSON object, maybe)
            delta = {
                "type": "input_json_delta",
                "partial_json": given if isinstance(given, str) else json.dumps(given),
            }
            yield _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": i}, "content_block_stop")
    done = {
        "type": "message_delta",
        "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": 5},
    }
    yield _sse(done, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def _output_message(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _responses(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = (
        [
            {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": f"call_{n}_{i}",
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for i, (name, args) in enumerate(reply.calls)
        ]
        if reply.calls
        else [_output_message(f"msg_{n}", reply.text)]
    )
    if reply.calls and reply.preface:
        output.insert(0, _output_message(f"msg_{n}_0", reply.preface))
    if reply.reasoning:
        output.insert(
            0, {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"gAAAAB{n}"}
        )
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools", []),
        "usage": {
            "input_tokens": tokens,
            "output_tokens": 5,
            "total_tokens": tokens + 5,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _responses_stream(reply: Reply, n: int, tokens: int, body: dict[str, Any]) -> Iterator[bytes]:
    whole = _responses(reply, n, tokens, body)
    seq = itertools.count()
    pending = {**whole, "status": "in_progress", "output": [], "usage": None}
    yield _sse(
        {"type": "response.created", "sequence_number": next(seq), "response": pending}, "response.created"
    )
    for i, item in enumerate(whole["output"]):
        yield _sse(
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": i,
                "item": item,
            },
            "response.output_item.added",
        )
        if item["type"] == "message":
            text = item["content"][0]["text"]
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": next(seq),
                "item_id": item["id"],
                "output_index": i,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
            yield _sse(delta, "response.output_text.delta")
        yield _sse(
            {
                "type": "response.output_item.done",
                "sequence_number": next(seq),
                "output_index": i,
                "item": item,
            },
            "response.output_item.done",
        )
    yield _sse(
        {"type": "response.completed", "sequence_number": next(seq), "response": whole}, "response.completed"
    )


_WHOLE = {"completions": _chat, "messages": _messages, "responses": _responses}
_STREAMS = {"completions": _chat_stream, "messages": _messages_stream, "responses": _responses_stream}
