"""Recall in a streamed answer: its events pass through as they arrive until one starts a tool
call (any: a recall call may follow the client's own); from there the proxy reads the rest,
building the whole answer from the events. An answer that calls no recall tool is then passed
on as it came; else the proxy answers the recall calls with whole upstream requests and ends
the client's stream with the final answer's content as events of the same message.

Each provider's events are built and read as its SDKs do: OpenAI chat chunks (``delta``s by
choice, tool calls by index), Anthropic message events (content blocks by index), Responses
events (output items by index, ``response.completed`` holding the whole response).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_CHOICES",
    "MAX_EVENT_BYTES",
    "Accumulator",
    "Ending",
    "EventTooDeep",
    "EventTooLong",
    "Events",
    "continuation",
    "event_bytes",
    "unsent",
    "with_data",
]


MAX_EVENT_BYTES = 8 << 20
"""One event's bytes at most: a delta, or a whole response with its echoed instructions and
tools. A longer one ends a stream the proxy watches for recall calls with an error (it cannot
be read, and may hide a call); in one the proxy only passes on it goes on unread (its usage,
if it held any, is lost) and the events after it are read (:meth:`Events.skip`)."""

# An event ends at an empty line: a line's end followed by another, each CRLF, LF or CR (the
# LF of a CRLF never ends a second line).
_SEPARATOR = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")
_LINE = re.compile(rb"\r\n|\n|\r")
_CR = 13
_LONGEST = 4
"""The longest separator (CRLF CRLF): fewer bytes than this at a buffer's end may start one."""


class EventTooLong(ValueError):
    """An event longer than the splitter's bound."""


class EventTooDeep(ValueError):
    """An event nested deeper than the JSON parser goes, where it must be read (see
    :class:`Events`)."""


class Events:
    """A server-sent event stream split into events as its bytes arrive, once for every reader
    of it (usage, recall): each event's bytes as received and its data's JSON (None when it has
    none, or none that parses). Every byte is searched once (the last three again with the next
    chunk; an overlong event's held bytes once more when it is skipped), and one event is
    bounded by ``max_bytes`` (:class:`EventTooLong`)."""

    def __init__(self, max_bytes: int = MAX_EVENT_BYTES, *, refuse_deep: bool = False) -> None:
        self.max_bytes = max_bytes
        self.refuse_deep = refuse_deep
        """Whether an event nested deeper than the parser goes is refused
        (:class:`EventTooDeep`) rather than passed on unread: where one may hold a recall call."""
        self._buffer = bytearray()
        self._scan = 0
        """Where the search for the next separator resumes."""
        self._skipping = False
        """Whether the bytes up to the next separator are an overlong event's, dropped."""
        self.skipped = 0
        """How many overlong events were dropped unread (one may have ended the answer)."""
        self._ended = 0
        """Of the bytes held, how many make an event that has ended, held for the LF that may
        follow its last CR (passed on: a client reads it whole)."""

    def feed(self, chunk: bytes, *, skip: bool = False) -> list[tuple[bytes, Any]]:
        """The events ``chunk`` completes. An event over the bound raises
        :class:`EventTooLong`, or with ``skip`` is dropped unread (see :meth:`skip`)."""
        try:
            return self._feed(chunk)
        except EventTooLong:
            if not skip:
                raise
        while True:  # each skip drops an overlong event, or all the bytes held: it ends
            try:
                return self.skip()
            except EventTooLong:
                continue

    def _feed(self, chunk: bytes) -> list[tuple[bytes, Any]]:
        buffer = self._buffer
        buffer += chunk
        if self._skipping:
            found = _SEPARATOR.search(buffer, self._scan)
            if found is None:  # the overlong event goes on: only a separator's start is kept
                del buffer[: max(0, len(buffer) - (_LONGEST - 1))]
                self._scan = 0
                return []
            # (A CR ending the buffer may have its LF in the next chunk: that LF then only makes
            # an empty line before the next event, which no reader of it minds.)
            del buffer[: found.end()]
            self._skipping = False
            self._scan = 0
        out: list[tuple[bytes, Any]] = []
        start = 0
        pos = self._scan
        ended = 0  # the end of an event held only for the LF its CR may have next
        while True:
            found = _SEPARATOR.search(buffer, pos)
            if found is None:
                pos = max(start, len(buffer) - (_LONGEST - 1))
                break
            end = found.end()
            if end == len(buffer) and buffer[end - 1] == _CR:  # its LF may be in the next chunk
                pos, ended = found.start(), end
                break
            if end - start > self.max_bytes and out:  # refused with the next chunk
                pos = start
                break
            try:
                out.append(self._event(bytes(buffer[start:end])))
            except EventTooDeep:
                if not out:
                    raise
                pos = start  # the events before it go out first; refused with the next chunk
                break
            start = pos = end
        if len(buffer) - start > self.max_bytes and not out:  # else with the next chunk
            raise EventTooLong(f"an event of the upstream's stream is over {self.max_bytes} bytes")
        del buffer[:start]
        self._scan = pos - start
        self._ended = ended - start if ended else 0
        return out

    @property
    def unfinished(self) -> int:
        """How many of the bytes fed so far belong to an event that has not ended yet: a
        pass-through holds them back, so that a stream that breaks off never leaves its client
        half an event (which its SDK would try to parse) before the error event. 0 while an
        overlong event is skipped: its bytes are not held, and go on as they come."""
        return 0 if self._skipping else len(self._buffer) - self._ended

    def skip(self) -> list[tuple[bytes, Any]]:
        """After :class:`EventTooLong`: the overlong event dropped to its end (which may come
        with later chunks), and the events after it that the bytes held so far complete."""
        self.skipped += 1
        self._skipping = True
        self._scan = 0
        return self._feed(b"")

    def finish(self, *, skip: bool = False) -> list[tuple[bytes, Any]]:
        """The events the bytes held still complete (a chunk's events after an overlong one
        wait for the next chunk), and the last event, when the stream ended without an empty
        line after it. With ``skip``, an overlong one is dropped, not refused (with it, the
        bytes held are never over the bound: :meth:`feed` skips them first)."""
        out: list[tuple[bytes, Any]] = []
        while got := self.feed(b"", skip=skip):
            out += got
        rest = b"" if self._skipping else bytes(self._buffer)
        self._buffer.clear()
        self._scan = self._ended = 0
        self._skipping = False
        return [*out, self._event(rest)] if rest else out

    def _event(self, event: bytes) -> tuple[bytes, Any]:
        if len(event) > self.max_bytes:
            raise EventTooLong(f"an event of the upstream's stream is over {self.max_bytes} bytes")
        data = b"\n".join(
            line[6:] if line.startswith(b"data: ") else line[5:]
            for line in _LINE.split(event)
            if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            return event, None
        try:
            return event, json.loads(data)
        except ValueError:  # passed on unread: no client reads it either
            return event, None
        except RecursionError:  # valid JSON, which a client may read
            if self.refuse_deep:
                raise EventTooDeep(
                    "an event of the upstream's stream is nested deeper than the proxy reads, "
                    "and recall tools were offered: it cannot be told whether it calls one"
                ) from None
            return event, None


_LAST = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed"})
"""The events that end an Anthropic message or a response."""
ENDS = {
    "chat": "data: [DONE] nor a finish_reason for every choice",
    "messages": "message_stop",
    "responses": "response.completed, .incomplete or .failed",
}
"""What ends each API's stream (:class:`Ending`), in the words of an error that says it did not come."""


MAX_CHOICES = 128
"""The most choices a chat request asks for (OpenAI's bound for ``n``)."""


class Ending:
    """Whether the events so far end the answer: a chat stream's ``[DONE]``, or a
    ``finish_reason`` for every choice it has begun (``n`` > 1 finishes each on its own);
    ``message_stop``; a response's last event. A client that leaves once it has them has had
    the whole answer. With ``choices`` (a chat request's ``n``), that many must have finished:
    an upstream may send its choices one after another."""

    def __init__(self, api: str, choices: int = 1) -> None:
        self.api = api
        self.choices = choices
        self._open: set[Any] = set()
        """The chat choices begun and not finished."""
        self._finished: set[Any] = set()
        self.ended = False
        """Whether an event so far ended the answer."""

    def event(self, event: bytes, data: Any) -> bool:
        """Take one event (its bytes, its data as :class:`Events` reads it); True when the
        answer has ended with it."""
        ended = self._ends(event, data)
        self.ended = self.ended or ended
        return ended

    def _ends(self, event: bytes, data: Any) -> bool:
        if not isinstance(data, Mapping):
            return self.api == "chat" and any(
                line.strip() in (b"data: [DONE]", b"data:[DONE]") for line in _LINE.split(event)
            )
        if self.api != "chat":
            return data.get("type") in _LAST
        choices = data.get("choices")
        if not isinstance(choices, list):
            return False
        for choice in choices:
            if isinstance(choice, Mapping):
                index = choice.get("index", 0)
                index = index if isinstance(index, int) else repr(index)
                if choice.get("finish_reason"):
                    self._open.discard(index)
                    self._finished.add(index)
                elif index not in self._finished:
                    self._open.add(index)
        return len(self._finished) >= self.choices and not self._open


def with_data(event: bytes, data: Any) -> bytes:
    """``event`` (its bytes as received) with ``data`` (JSON) for its data: its other fields
    (``event:``, ``id:``, ``retry:``, comments) kept as they came, in their order."""
    lines: list[bytes] = []
    written = False
    for line in _LINE.split(event):
        if not line.startswith(b"data:"):
            lines.append(line)
        elif not written:  # at the first data line, once
            lines.append(b"data: " + json.dumps(data, ensure_ascii=False).encode())
            written = True
    while lines and not lines[-1]:
        lines.pop()
    return b"\n".join(lines) + b"\n\n"


def event_bytes(data: Any, event: Any = None) -> bytes:
    """A server-sent event of ``data`` (JSON), named ``event`` when it is a string."""
    head = f"event: {event}\n" if isinstance(event, str) and event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


_SAID = frozenset({"text", "thinking", "redacted_thinking", "message", "reasoning"})
"""Content blocks and output items that only say something: any other may be a tool call."""


_PIECES = frozenset({"text", "thinking", "partial"})
"""A content block's members that grow by deltas (kept as pieces)."""


def _listed(value: Any) -> list[Any]:
    """A member an event should hold as a list, or none (an upstream may send anything there)."""
    return value if isinstance(value, list) else []


class Accumulator:
    """The whole answer a stream's events make, and where its first tool call starts: from
    there the events are held, since a recall call may follow a client's (the model's history
    must hold the calls the client saw)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.held: int | None = None
        """Where the events stopped being passed on: the tool-call, block or item index of
        the first tool call (or of the reasoning item before it: see ``tentative``)."""
        self.tentative = False
        """Responses: the hold began at a reasoning item, which must go wherever the item after
        it goes (OpenAI refuses a reasoning item without its following item): a call after
        it makes the hold firm; anything else lets it go (``held`` is None again), and the
        held events are passed on."""
        self.base: dict[str, Any] = {}
        self.content: list[str] = []
        """The pieces of each text, joined once by :meth:`answer` (a text grown by ``+=`` costs
        its length at every delta: a million one-token deltas would cost minutes)."""
        self.calls: dict[int, dict[str, Any]] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.items: dict[int, Any] = {}
        self.finish: Any = None
        self.sequence = 0
        self.completed: dict[str, Any] | None = None
        self.unreadable: set[str] = set()
        """Anthropic: the ids of the tool calls whose streamed input was no JSON object (the
        answer holds ``{}`` for them, as the API wants an object back; a recall call among
        them is told its arguments were unreadable)."""

    def event(self, data: Any) -> bool:
        """Take one event; True when it starts the first tool call (it and what follows are
        held until the answer is whole: passed on as they came when it calls no recall tool)."""
        if not isinstance(data, Mapping):
            return False
        if self.api == "chat":
            return self._chat(data)
        if self.api == "messages":
            return self._messages(data)
        return self._responses(data)

    def _chat(self, data: Mapping[str, Any]) -> bool:
        if not self.base:
            self.base = {k: data.get(k) for k in ("id", "object", "created", "model")}
        starts = False
        for choice in _listed(data.get("choices")):
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                continue
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for part in _listed(delta.get("tool_calls")):
                if not isinstance(part, Mapping) or not isinstance(part.get("index"), int):
                    continue
                if self.held is None:
                    self.held, starts = part["index"], True
                call = self.calls.setdefault(part["index"], {"id": None, "name": "", "arguments": []})
                fn = part.get("function")
                fn = fn if isinstance(fn, Mapping) else {}
                if isinstance(part.get("id"), str) and part["id"]:
                    call["id"] = part["id"]
                if isinstance(fn.get("name"), str):
                    call["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["arguments"].append(fn["arguments"])
            self.finish = choice.get("finish_reason") or self.finish
        return starts

    def _messages(self, data: Mapping[str, Any]) -> bool:
        kind = data.get("type")
        index = data.get("index")
        if kind == "message_start" and isinstance(data.get("message"), Mapping):
            self.base = dict(data["message"])
        elif kind == "content_block_start" and isinstance(index, int):
            opened = data.get("content_block")
            if not isinstance(opened, Mapping):
                return False
            block = dict(opened)
            if block.get("type") == "tool_use":
                block["partial"] = []
            self.blocks[index] = block
            if block.get("type") not in _SAID and self.held is None:
                self.held = index
                return True
        elif kind == "content_block_delta" and isinstance(index, int) and index in self.blocks:
            block, delta = self.blocks[index], data.get("delta")
            if not isinstance(delta, Mapping):
                return False
            for key, into in (("text", "text"), ("thinking", "thinking"), ("partial_json", "partial")):
                if isinstance(delta.get(key), str):
                    pieces = block.get(into)
                    if not isinstance(pieces, list):  # the start's own text is the first piece
                        pieces = block[into] = [pieces] if isinstance(pieces, str) else []
                    pieces.append(delta[key])
            if isinstance(delta.get("signature"), str):
                block["signature"] = delta["signature"]
        elif kind == "message_delta" and isinstance(data.get("delta"), Mapping):
            self.finish = data["delta"].get("stop_reason")
        return False

    def _responses(self, data: Mapping[str, Any]) -> bool:
        if isinstance(data.get("sequence_number"), int):
            self.sequence = max(self.sequence, data["sequence_number"])
        kind = data.get("type")
        if kind == "response.created" and isinstance(data.get("response"), Mapping):
            self.base = dict(data["response"])
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item, index = data.get("item"), data.get("output_index")
            if isinstance(item, Mapping) and isinstance(index, int):
                self.items[index] = item
                if kind.endswith("added"):
                    return self._added(item.get("type"), index)
        elif kind in ("response.completed", "response.incomplete") and isinstance(
            data.get("response"), Mapping
        ):
            self.completed = dict(data["response"])
        return False

    def _added(self, kind: Any, index: int) -> bool:
        """A Responses output item begins: True when the hold starts here."""
        if kind not in _SAID:  # a call: held from here, or from the reasoning before it
            if self.held is None:
                self.held = index
                return True
            self.tentative = False
        elif kind == "reasoning" and self.held is None:
            self.held, self.tentative = index, True
            return True
        elif self.tentative and kind != "reasoning":  # reasoning, then text: nothing to hold
            self.held, self.tentative = None, False
        return False

    def started(self) -> list[str]:
        """The names of the function calls started so far (as far as they have arrived): a
        recall call is one of them (a hosted tool's call, nameless, never is)."""
        if self.api == "chat":
            return [c["name"] for c in self.calls.values()]
        if self.api == "messages":
            return [str(b.get("name") or "") for b in self.blocks.values() if b.get("type") == "tool_use"]
        return [
            str(i.get("name") or "")
            for i in self.items.values()
            if isinstance(i, Mapping) and i.get("type") == "function_call"
        ]

    def answer(self) -> dict[str, Any]:
        """The whole answer, as the API's unstreamed answer holds it."""
        if self.api == "chat":
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "".join(c["arguments"])},
                }
                for _, c in sorted(self.calls.items())
            ]
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
            if calls:
                message["tool_calls"] = calls
            return {**self.base, "choices": [{"index": 0, "message": message, "finish_reason": self.finish}]}
        if self.api == "messages":
            content = []
            for _, block in sorted(self.blocks.items()):
                block = {
                    k: "".join(v) if isinstance(v, list) and k in _PIECES else v for k, v in block.items()
                }
                if block.get("type") == "tool_use":
                    partial = block.pop("partial", "")
                    try:
                        value = json.loads(partial) if partial else block.get("input", {})
                    except (ValueError, RecursionError):
                        value = None
                    if not isinstance(value, Mapping):
                        self.unreadable.add(str(block.get("id")))
                        value = {}
                    block["input"] = value
                content.append(block)
            return {**self.base, "content": content, "stop_reason": self.finish}
        if self.completed is not None:
            return self.completed
        return {**self.base, "output": [item for _, item in sorted(self.items.items())]}


def unsent(acc: Accumulator, final: Mapping[str, Any], nothing: str) -> dict[str, Any]:
    """The first answer itself as ``final`` (no recall round could be sent; its recall calls
    taken out) without what was passed on before ``acc.held``: the chat text, the blocks or
    items before the hold (``nothing``: the text said for an answer that said nothing else,
    which was not passed on)."""
    held = acc.held or 0
    if acc.api == "chat":
        choice = dict(final["choices"][0])
        message = dict(choice["message"])
        if message.get("content") != nothing:
            message["content"] = None
        message["tool_calls"] = list(message.get("tool_calls") or ())[held:] or None
        return {**final, "choices": [{**choice, "message": message}]}
    key = "content" if acc.api == "messages" else "output"
    return {**final, key: list(final.get(key) or ())[held:]}


def continuation(acc: Accumulator, final: Mapping[str, Any], usage: bool) -> list[bytes]:
    """The events that end the client's stream with ``final`` (the last whole answer), after
    the events passed on before ``acc.held``. ``usage``: the chat client asked for it."""
    held = acc.held or 0
    if acc.api == "chat":
        base = {**acc.base, "object": "chat.completion.chunk"}
        choice = (final.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        out = []
        if isinstance(message.get("content"), str) and message["content"]:
            text = message["content"]
            said = next((piece for piece in reversed(acc.content) if piece), "")
            if said and not said[-1].isspace() and not text[0].isspace():
                text = "\n\n" + text  # one message's text: the words before the read, then these
            out.append(
                event_bytes(
                    {**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
                )
            )
        for i, call in enumerate(message.get("tool_calls") or ()):
            part = {
                "index": held + i,
                "id": call.get("id"),
                "type": "function",
                "function": call.get("function"),
            }
            out.append(
                event_bytes(
                    {
                        **base,
                        "choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}],
                    }
                )
            )
        out.append(
            event_bytes(
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]}
            )
        )
        if usage and isinstance(final.get("usage"), Mapping):
            out.append(event_bytes({**base, "choices": [], "usage": final["usage"]}))
        out.append(b"data: [DONE]\n\n")
        return out
    if acc.api == "messages":
        out = []
        for i, block in enumerate(final.get("content") or ()):
            index = held + i
            kind = block.get("type")
            if kind == "text":
                out.append(
                    event_bytes(
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                        "content_block_start",
                    )
                )
                delta = {"type": "text_delta", "text": block.get("text", "")}
                out.append(
                    event_bytes(
                        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
                    )
                )
            elif kind == "tool_use":
                opened = {**block, "input": {}}
                out.append(
                    event_bytes(
                        {"type": "content_block_start", "index": index, "content_block": opened},
                        "content_block_start",
                    )
                )
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
                out.append(
                    event_bytes(
                        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
                    )
                )
            else:  # thinking and the rest: whole, as they start
                out.append(
                    event_bytes(
                        {"type": "content_block_start", "index": index, "content_block": block},
                        "content_block_start",
                    )
                )
            out.append(event_bytes({"type": "content_block_stop", "index": index}, "content_block_stop"))
        used: Mapping[str, Any] = final["usage"] if isinstance(final.get("usage"), Mapping) else {}
        done = {
            "type": "message_delta",
            "delta": {"stop_reason": final.get("stop_reason"), "stop_sequence": final.get("stop_sequence")},
            "usage": {"output_tokens": used.get("output_tokens", 0)},
        }
        return [
            *out,
            event_bytes(done, "message_delta"),
            event_bytes({"type": "message_stop"}, "message_stop"),
        ]
    sequence = acc.sequence
    out = []
    items = [item for i, item in sorted(acc.items.items()) if i < held]
    for i, item in enumerate(final.get("output") or ()):
        index = held + i
        deltas = _text_deltas(item, index)  # a message's text streams as deltas, as clients show it
        shown = {**item, "content": []} if deltas else item  # added empty, as the API adds it
        for kind in ("response.output_item.added", "response.output_item.done"):
            if kind.endswith("done"):
                for delta in deltas:
                    sequence += 1
                    out.append(event_bytes({**delta, "sequence_number": sequence}, delta["type"]))
                shown = item
            sequence += 1
            out.append(
                event_bytes(
                    {"type": kind, "sequence_number": sequence, "output_index": index, "item": shown}, kind
                )
            )
        items.append(item)
    sequence += 1
    # The response the stream began (its id, as SDKs check), holding the final answer.
    same: dict[str, Any] = {k: acc.base[k] for k in ("id", "created_at") if k in acc.base}
    completed: dict[str, Any] = {**final, "output": items, **same}
    out.append(
        event_bytes(
            {"type": "response.completed", "sequence_number": sequence, "response": completed},
            "response.completed",
        )
    )
    return out


def _text_deltas(item: Any, index: int) -> list[dict[str, Any]]:
    """The events that stream a Responses message item's text parts (without sequence numbers):
    each part added, its text as one delta, done."""
    if (
        not isinstance(item, Mapping)
        or item.get("type") != "message"
        or not isinstance(item.get("content"), list)
    ):
        return []
    out: list[dict[str, Any]] = []
    where = {"item_id": item.get("id"), "output_index": index}
    for j, part in enumerate(item["content"]):
        if (
            not isinstance(part, Mapping)
            or part.get("type") != "output_text"
            or not isinstance(part.get("text"), str)
        ):
            continue
        at = {**where, "content_index": j}
        empty = {**part, "text": ""}
        out.append({"type": "response.content_part.added", **at, "part": empty})
        out.append({"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []})
        out.append({"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []})
        out.append({"type": "response.content_part.done", **at, "part": dict(part)})
    return out
