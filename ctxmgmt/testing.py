"""Helpers for testing context managers, ctxmgmt's own and plugins alike.

- :func:`make_conversation`: a deterministic agent conversation of any size, with
  parallel tool calls and large tool outputs.
- :func:`assert_valid_messages`: fails when a message list is one the OpenAI chat
  API would reject.
- :func:`assert_invariants`: applies a definition and checks what every manager
  must guarantee (valid output, pairs kept, system prompt kept, tokens never grow,
  a second run changes nothing).
- :func:`conversations` (needs hypothesis): a strategy of generated conversations.
- :class:`ChatServer`: a scripted chat endpoint (OpenAI-compatible or Anthropic).
- :class:`RawServer`: a model endpoint on raw sockets that misbehaves on purpose: it
  trickles, floods, stalls, or answers bytes no HTTP library would write.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .context import ApplyResult, Context
from .definitions import Definition
from .formats import check as check_format
from .formats import internal, name_of
from .types import Hook

__all__ = [
    "ChatServer",
    "RawServer",
    "assert_invariants",
    "assert_valid_messages",
    "conversations",
    "make_conversation",
]

_WORDS = [
    "agent",
    "context",
    "window",
    "token",
    "summary",
    "tool",
    "result",
    "error",
    "file",
    "path",
    "query",
    "index",
    "search",
    "build",
    "test",
    "deploy",
    "config",
    "value",
    "user",
    "request",
    "plan",
    "step",
    "output",
    "input",
    "retry",
    "cache",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def make_conversation(
    messages: int = 200,
    *,
    seed: int = 0,
    tool_output_words: int = 60,
    max_parallel: int = 3,
) -> list[dict[str, Any]]:
    """A valid agent conversation of about ``messages`` messages: a task, then turns of
    assistant text, single and parallel tool calls with their results, and user follow-ups."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "user", "content": "Task: " + _text(rng, 30)}]
    call = 0
    while len(out) < messages:
        kind = rng.random()
        if kind < 0.55:
            n = rng.randint(1, max_parallel)
            ids = [f"call_{call + i}" for i in range(n)]
            call += n
            out.append(
                {
                    "role": "assistant",
                    "content": None if rng.random() < 0.5 else _text(rng, 12),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": rng.choice(("search", "read_file", "run")),
                                "arguments": json.dumps(
                                    {"q": _text(rng, 6), "path": f"src/m{rng.randint(0, 99)}.py"}
                                ),
                            },
                        }
                        for i in ids
                    ],
                }
            )
            out += [
                {
                    "role": "tool",
                    "tool_call_id": i,
                    "content": _text(rng, rng.randint(tool_output_words // 2, tool_output_words * 2)),
                }
                for i in ids
            ]
        elif kind < 0.85:
            out.append({"role": "assistant", "content": _text(rng, rng.randint(10, 60))})
        else:
            out.append({"role": "user", "content": _text(rng, rng.randint(5, 30))})
    return out


def assert_valid_messages(
    messages: Sequence[Any], *, partial_tail: bool = False, format: str = "openai_chat", system: Any = None
) -> None:
    """Fail with every problem when the provider (OpenAI chat unless ``format`` says another)
    would reject ``messages``."""
    problems = check_format(
        Context(messages=messages, system_prompt=system, format=format), partial_tail=partial_tail
    )
    assert not problems, "invalid message list:\n  " + "\n  ".join(map(str, problems))


def _chat(context: Context) -> Sequence[Any]:
    """The context's messages in the internal form (OpenAI chat)."""
    way = internal(context)
    return way.context.messages if way is not None else context.messages


def _pairs(messages: Sequence[Any]) -> tuple[set[str], set[str]]:
    calls = {c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in messages if m.get("role") == "tool"}
    return calls, results


def assert_invariants(
    definition: Definition, hook: str | Hook, context: Context, *, idempotent: bool = True
) -> ApplyResult:
    """Apply ``definition`` and check the invariants every manager must keep."""
    fmt = name_of(context)
    before_valid = not check_format(context, partial_tail=True)
    result = definition.apply(hook, context)
    out = result.context
    errors = [e["error"] for e in result.trace if e["error"]]
    assert not errors, f"a manager failed: {errors}"
    if before_valid:
        assert_valid_messages(out.messages, partial_tail=True, format=fmt, system=out.system_prompt)
    assert out.system_prompt == context.system_prompt, "the system prompt changed"
    chat_in, chat_out = _chat(context), _chat(replace(out, format=fmt))
    calls, results = _pairs(chat_out)
    assert results <= calls, f"tool results lost their calls: {sorted(results - calls)}"
    kept_calls = calls & _pairs(chat_in)[1]
    assert kept_calls <= results, f"tool calls lost their results: {sorted(kept_calls - results)}"
    _assert_system_kept(context.messages, out.messages, result.trace)
    _assert_turns_whole(context.messages, out.messages, fmt)
    if result.trace:
        assert result.trace[-1]["tokens_after"] <= result.trace[0]["tokens_before"], "tokens grew"
    if idempotent:
        again = definition.apply(hook, out)
        fired = [e for e in again.trace if e["activated"]]
        if not fired or all(e["type"] != "SummarizationManager" for e in fired):
            assert list(again.context.messages) == list(out.messages), "a second run changed the messages"
    return result


def _assert_system_kept(before: Sequence[Any], after: Sequence[Any], trace: Sequence[Any]) -> None:
    """System and developer messages are kept: the system prompt (the first message) and the
    newest always, the others unless the fit step says it removed them (the request could not
    fit otherwise)."""
    systems = [m for m in before if m.get("role") in ("system", "developer")]
    kept = {id(m) for m in after}
    dropped = [m for m in systems if id(m) not in kept]
    if not dropped:
        return
    allowed = sum(e["details"].get("system_removed", 0) for e in trace if e["type"] == "fit")
    assert len(dropped) <= allowed, f"a system message was dropped: {dropped[0]}"
    always = [systems[-1], *(before[:1] if before[0] is systems[0] else ())]
    assert all(id(m) in kept for m in always), "the system prompt or the newest system message was dropped"


def _assert_turns_whole(before: Sequence[Any], after: Sequence[Any], fmt: str) -> None:
    """Thinking blocks and reasoning items are kept whole with their turn, or removed with it."""
    if fmt == "anthropic":
        for m in after:
            content = m.get("content")
            thinking = [b for b in content or () if isinstance(content, list) and b.get("type") in _THINKING]
            if thinking:
                assert any(m is k for k in before), f"an assistant turn with thinking was edited: {m}"
        if _opens_thinking(before):
            assert _opens_thinking(after, empty=True), "the final turn no longer starts with its thinking"
    elif fmt == "openai_responses":
        follows = {id(x): before[i + 1] if i + 1 < len(before) else None for i, x in enumerate(before)}
        for i, x in enumerate(after):
            if x.get("type") == "reasoning":
                nxt = after[i + 1] if i + 1 < len(after) else None
                assert id(x) in follows, "a reasoning item was edited"
                assert nxt is follows[id(x)], "a reasoning item lost the item it reasoned about"
        # The other way: the API refuses an item of a response without the reasoning item that
        # came before it in that response (a web search between them or not).
        # A second assistant message after one is read as another answer (the API's rule for
        # it is not documented; a window may keep it apart).
        kept = {_item_key(x) for x in after}
        reasoning, said = None, False
        for x in before:
            answer = x.get("type", "message") == "message" and x.get("role") == "assistant"
            if x.get("type") == "reasoning":
                reasoning, said = x, False
            elif not _models(x) or (answer and said):
                reasoning = None  # the response ended: an input, an output, a reference
            elif reasoning is not None and _item_key(x) in kept:
                assert _item_key(reasoning) in kept, (
                    f"{_item_key(x)!r} was kept without the reasoning before it"
                )
            said = said or answer


def _item_key(item: Mapping[str, Any]) -> Any:
    """A Responses item's id, which an edited copy keeps (else the object's identity)."""
    return item["id"] if isinstance(item.get("id"), str) else id(item)


def _models(item: Mapping[str, Any]) -> bool:
    """Whether a Responses item is the model's (a call, an item with its own result, the
    assistant's message), as opposed to an input, an output or a reference."""
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return isinstance(kind, str) and (
        kind.endswith("_call") or kind in ("mcp_list_tools", "mcp_approval_request")
    )


_THINKING = ("thinking", "redacted_thinking")


def _opens_thinking(messages: Sequence[Any], *, empty: bool = False) -> bool:
    """Whether an Anthropic list's final turn (after its last user message that holds no tool
    results, consecutive user messages read as one, as Anthropic merges them) starts with a
    thinking block, as Anthropic requires with thinking on (``empty``: or holds no assistant
    message: the model opens it)."""
    merged: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if merged and merged[-1]["role"] == m.get("role") == "user":
            merged[-1]["content"] = [*merged[-1]["content"], *blocks]
        else:
            merged.append({"role": m.get("role"), "content": blocks})
    messages = merged
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        content = m.get("content")
        if m.get("role") == "user" and not (
            isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
        ):
            start = i + 1
            break
    first = next((m for m in messages[start:] if m.get("role") == "assistant"), None)
    if first is None:
        return empty
    content = first.get("content")
    return isinstance(content, list) and bool(content) and content[0].get("type") in _THINKING


def conversations(max_turns: int = 30, format: str = "openai_chat") -> Any:
    """A hypothesis strategy of valid conversations (list of messages), with parallel
    tool calls, multimodal parts, empty content, and system/developer messages."""
    from hypothesis import strategies as st

    text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300)
    content = st.one_of(
        text,
        st.just(""),
        st.lists(
            st.one_of(
                st.builds(lambda t: {"type": "text", "text": t}, text),
                st.just(
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
                ),
            ),
            min_size=1,
            max_size=3,
        ),
    )

    @st.composite
    def turn(draw: Any, n: int) -> list[dict[str, Any]]:
        kind = draw(st.sampled_from(("user", "assistant", "tools", "tools", "developer")))
        if kind == "user":
            return [{"role": "user", "content": draw(content)}]
        if kind == "developer":
            return [{"role": "developer", "content": draw(text)}]
        if kind == "assistant":
            return [{"role": "assistant", "content": draw(text)}]
        count = draw(st.integers(1, 4))
        ids = [f"t{n}_{i}" for i in range(count)]
        order = draw(st.permutations(ids))
        return [
            {
                "role": "assistant",
                "content": draw(st.one_of(st.none(), text)),
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": "f", "arguments": json.dumps({"x": draw(text)})},
                    }
                    for i in ids
                ],
            },
            *(
                {
                    "role": "tool",
                    "tool_call_id": i,
                    "content": draw(st.one_of(text, st.text(min_size=200, max_size=3000))),
                }
                for i in order
            ),
        ]

    @st.composite
    def conversation(draw: Any) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": draw(text)}]
        for n in range(draw(st.integers(0, max_turns))):
            msgs += draw(turn(n))
        if format == "anthropic":
            return _to_anthropic(msgs, draw)
        if format == "openai_responses":
            return _to_responses(msgs, draw)
        return msgs

    return conversation()


def _to_anthropic(chat: list[dict[str, Any]], draw: Any) -> list[dict[str, Any]]:
    """An Anthropic conversation with the shape of a chat one: thinking before some tool
    calls, tool results with is_error, text after tool results in the same user turn."""
    from hypothesis import strategies as st

    out: list[dict[str, Any]] = []
    chat = [m for m in chat if m["role"] != "developer"]
    i = 0
    while i < len(chat):
        m = chat[i]
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = []
            if draw(st.booleans()):
                blocks.append(
                    {"type": "thinking", "thinking": "I should call the tool", "signature": f"sig{i}"}
                )
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": blocks})
            results: list[dict[str, Any]] = []
            while i < len(chat) and chat[i]["role"] == "tool":
                t = chat[i]
                i += 1
                content: Any = (
                    t["content"] if draw(st.booleans()) else [{"type": "text", "text": t["content"]}]
                )
                result = {"type": "tool_result", "tool_use_id": t["tool_call_id"], "content": content}
                if draw(st.booleans()):
                    result["is_error"] = True
                results.append(result)
            if i < len(chat) and chat[i]["role"] == "user" and draw(st.booleans()):
                results += _anthropic_blocks(chat[i]["content"])
                i += 1
            out.append({"role": "user", "content": results})
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": m["content"] or "ok"})
        else:
            content = m["content"]
            out.append(
                {
                    "role": "user",
                    "content": content if isinstance(content, str) else _anthropic_blocks(content),
                }
            )
    return out


def _anthropic_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [
        {"type": "text", "text": p["text"]}
        if p["type"] == "text"
        else {"type": "image", "source": {"type": "url", "url": p["image_url"]["url"]}}
        for p in content
    ]


def _to_responses(chat: list[dict[str, Any]], draw: Any) -> list[dict[str, Any]]:
    """Responses input items with the shape of a chat conversation: reasoning before some
    turns, typed and easy messages, function calls with their outputs."""
    from hypothesis import strategies as st

    out: list[dict[str, Any]] = []
    for n, m in enumerate(chat):
        role = m["role"]
        if role == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        # A server tool with its own result, before or after the turn's reasoning (a response's
        # output reads reasoning, web_search_call, then the message or the calls).
        searched = role == "assistant" and draw(st.integers(0, 4)) == 0
        search = {
            "type": "web_search_call",
            "id": f"ws_{n}",
            "status": "completed",
            "action": {"type": "search"},
        }
        first = draw(st.booleans()) if searched else False
        if searched and first:
            out.append(search)
        if role == "assistant" and draw(st.booleans()):
            out.append({"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"enc{n}"})
        if searched and not first:
            out.append(search)
        text = m.get("content")
        if role == "assistant":
            if text:
                part = {"type": "output_text", "text": text, "annotations": []}
                out.append({"type": "message", "role": "assistant", "id": f"msg_{n}", "content": [part]})
            out += [
                {"type": "function_call", "id": f"fc_{c['id']}", "call_id": c["id"], **c["function"]}
                for c in m.get("tool_calls") or ()
            ]
            if not text and not m.get("tool_calls"):
                out.append({"role": "assistant", "content": "ok"})
        elif isinstance(text, str):
            out.append({"role": role, "content": text})
        else:
            parts = [
                {"type": "input_text", "text": p["text"]}
                if p["type"] == "text"
                else {"type": "input_image", "image_url": p["image_url"]["url"], "detail": "low"}
                for p in text or ()
            ]
            out.append({"type": "message", "role": role, "content": parts})
    return out


class ChatServer:
    """A scripted OpenAI-compatible chat-completions server on 127.0.0.1, or with
    ``provider="anthropic"`` an Anthropic Messages API one (replies are given in chat form,
    as the client returns them, and answered as Messages API content blocks). The Anthropic
    one refuses, with a 400 as the real API does, a request without ``max_tokens``, with more
    than four ``cache_control`` breakpoints, or whose messages break the API's rules.

    Queue replies with :meth:`reply` (a message or text), :meth:`fail` (a status and
    error), :meth:`raw` (any body, e.g. malformed JSON) and ``delay`` (seconds
    before answering). Unscripted requests get a 500. ``requests`` holds every
    request body received, ``received`` the path and headers of each. Use it as a
    context manager::

        with ChatServer() as server:
            server.reply('{"goal": []}')
            ...  # base_url = server.base_url
    """

    def __init__(self, port: int = 0, *, provider: str = "openai") -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.provider = provider
        self.requests: list[dict[str, Any]] = []
        self.received: list[tuple[str, dict[str, str]]] = []
        """(path, headers) of each request, in order."""
        self.connections = 0
        """TCP connections accepted so far (clients keep them alive, as with a real endpoint)."""
        self._open: set[Any] = set()
        self._script: list[tuple[int, Any, float]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real endpoint

            def setup(self) -> None:
                import socket

                super().setup()
                # The status line, headers and body are separate writes: without this, a
                # kept-alive connection waits on the client's delayed ACK (Nagle).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with server._lock:
                    server.connections += 1
                    server._open.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._open.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                import time as _time

                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                with server._lock:
                    server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                    try:
                        server.requests.append(json.loads(body))
                    except ValueError:
                        server.requests.append({"_raw": body.decode("utf-8", "replace")})
                    refused = _refused(server.requests[-1]) if server.provider == "anthropic" else None
                    if refused is not None:  # as the real API: a 400, and the script waits
                        step = (400, refused, 0.0)
                    elif server._script:
                        step = server._script.pop(0)
                    else:
                        step = (500, b'{"error": {"message": "unscripted request"}}', 0.0)
                status, payload, delay = step
                if callable(payload):
                    payload = payload(server.requests[-1])
                if delay:
                    _time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def reply(
        self, message: str | dict[str, Any], *, usage: dict[str, int] | None = None, delay: float = 0.0
    ) -> None:
        """Queue an assistant message (or text) as the next completion."""
        self.raw(self._completion(message, usage), delay=delay)

    def respond(self, make: Any, *, usage: Any = None, delay: float = 0.0) -> None:
        """Queue a reply computed from the request received: ``make(request_body)``
        returns a message (or text), as :meth:`reply` takes; ``usage`` is the usage to
        report, or ``usage(request_body)`` computes it (a provider's own count)."""

        def build(request: dict[str, Any]) -> bytes:
            return self._completion(make(request), usage(request) if callable(usage) else usage)

        with self._lock:
            self._script.append((200, build, delay))

    def _completion(self, message: str | dict[str, Any], usage: dict[str, int] | None = None) -> bytes:
        msg = {"role": "assistant", "content": message} if isinstance(message, str) else message
        if self.provider == "anthropic":
            return json.dumps(_messages_answer(msg, usage, len(self.requests))).encode()
        body = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": msg,
                    "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                }
            ],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        return json.dumps(body).encode()

    def fail(self, status: int, message: str = "server error", *, delay: float = 0.0) -> None:
        if self.provider == "anthropic":
            error = {"type": "error", "error": {"type": "api_error", "message": message}}
            self.raw(json.dumps(error).encode(), status=status, delay=delay)
            return
        self.raw(json.dumps({"error": {"message": message}}).encode(), status=status, delay=delay)

    def raw(self, body: bytes, *, status: int = 200, delay: float = 0.0) -> None:
        with self._lock:
            self._script.append((status, body, delay))

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import contextlib
        import socket

        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._open)
        for conn in open_connections:  # kept-alive connections end with the server
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _messages_answer(msg: dict[str, Any], usage: dict[str, int] | None, n: int) -> dict[str, Any]:
    """A chat-form assistant message as an Anthropic Messages API answer."""
    blocks: list[dict[str, Any]] = []
    if isinstance(msg.get("content"), str) and msg["content"]:
        blocks.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": fn.get("name"),
                "input": json.loads(fn.get("arguments") or "{}"),
            }
        )
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "stop_reason": "tool_use" if msg.get("tool_calls") else "end_turn",
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def _refused(body: Any) -> bytes | None:
    """Why the Messages API would refuse a request body (an error answer), or None."""
    from .formats import anthropic

    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        why = "messages: a list is required"
    elif not isinstance(body.get("max_tokens"), int):
        why = "max_tokens: Field required"
    else:
        marks = json.dumps(body).count('"cache_control"')
        problems = anthropic.check(body["messages"], body.get("system"))
        if marks > anthropic.MAX_BREAKPOINTS:
            why = f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        elif problems:
            why = f"messages{problems[0].pointer}: {problems[0].message}"
        else:
            return None
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": why}}
    return json.dumps(error).encode()


class RawServer:
    """A model endpoint on raw sockets (a thread per connection, on 127.0.0.1) that
    misbehaves on purpose, one scripted behaviour per request, for testing what a client does
    with an endpoint it cannot trust:

    - :meth:`answer`: a status and these exact bytes (any JSON, malformed or not);
    - :meth:`trickle`: the headers, then one byte of body every ``interval`` seconds;
    - :meth:`trickle_headers`: the status line, then one byte of headers every ``interval``;
    - :meth:`flood`: ``size`` bytes of a JSON-looking body, without a content-length, as fast
      as the client reads them, generated as it goes (the server holds one chunk);
    - :meth:`stall`: read the request and never answer.

    Unscripted requests get a 500. ``requests`` counts the requests read. A behaviour ends
    when the client goes away or the server closes::

        with RawServer() as server:
            server.trickle(interval=1.0)
            ...  # base_url = server.base_url
    """

    def __init__(self) -> None:
        import socket
        import threading

        self.requests = 0
        self._script: list[Any] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._conns: set[Any] = set()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    # -- behaviours --------------------------------------------------------------------------
    def answer(self, body: bytes, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
        """Answer with exactly ``body`` (with its content-length)."""
        head = {
            "content-type": "application/json",
            "content-length": str(len(body)),
            "connection": "close",
            **(headers or {}),
        }
        self._add(lambda send, wait: send(_head(status, head) + body))

    def trickle(
        self,
        *,
        interval: float = 1.0,
        start: bytes = b'{"choices": [',
        content_type: str = "application/json",
    ) -> None:
        """The headers (no content-length), ``start``, then a space every ``interval`` seconds
        (``content_type="text/event-stream"``: a stream that stops sending events)."""

        def run(send: Any, wait: Any) -> None:
            send(_head(200, {"content-type": content_type, "connection": "close"}) + start)
            while not wait(interval):
                send(b" ")

        self._add(run)

    def trickle_headers(self, *, interval: float = 1.0) -> None:
        """The status line, then one more byte of a header every ``interval`` seconds."""

        def run(send: Any, wait: Any) -> None:
            send(b"HTTP/1.1 200 OK\r\nx-slow: ")
            while not wait(interval):
                send(b"a")

        self._add(run)

    def flood(self, size: int, *, chunk: int = 1 << 16, content_type: str = "application/json") -> None:
        """``size`` bytes: a chat completion whose content never ends, until the client goes
        (``content_type="text/event-stream"``: chat chunks of ``chunk`` bytes each, whole
        events that never end the answer)."""

        def run(send: Any, wait: Any) -> None:
            send(_head(200, {"content-type": content_type, "connection": "close"}))
            events = content_type.startswith("text/event-stream")
            start = b"" if events else b'{"choices": [{"message": {"role": "assistant", "content": "'
            send(start)
            block = b"a" * chunk
            if events:
                head = b'data: {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "'
                block = head + b"a" * max(1, chunk - len(head) - 9) + b'"}}]}\n\n'
            left = size - len(start)
            while left > 0 and not self._closed.is_set():
                send(block[: min(chunk, left)])
                left -= chunk

        self._add(run)

    def stall(self) -> None:
        """Read the request, then say nothing until the client goes."""
        self._add(lambda send, wait: wait(3600))

    def _add(self, behaviour: Any) -> None:
        with self._lock:
            self._script.append(behaviour)

    # -- the server ----------------------------------------------------------------------------
    def _accept(self) -> None:
        import threading

        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        import contextlib

        try:
            while self._read_request(conn):
                with self._lock:
                    self.requests += 1
                    behaviour = self._script.pop(0) if self._script else None
                if behaviour is None:
                    body = b'{"error": {"message": "unscripted request"}}'
                    conn.sendall(_head(500, {"content-length": str(len(body))}) + body)
                    continue
                behaviour(conn.sendall, self._closed.wait)
                return  # one answer per connection: behaviours may leave the stream open-ended
        except OSError:
            pass  # the client went away: what these tests expect
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _read_request(conn: Any) -> bool:
        """Read one request (headers and its content-length body); False at the end."""
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(65536)
            if not got:
                return False
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            got = conn.recv(65536)
            if not got:
                return False
            body += got
        return True

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import contextlib
        import socket

        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {'OK' if status < 400 else 'Error'}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")  # as HTTP/1.1 reads headers
