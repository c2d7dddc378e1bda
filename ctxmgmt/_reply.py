"""The one check of a model's reply, for every provider: what a model endpoint answers is
outside input, so nothing of it enters a conversation before it passed here.

:func:`read` takes the reply's bytes (already bounded in size by the client) and returns
the assistant message in chat form, and the usage:

- the body is UTF-8 JSON, nested at most :data:`MAX_DEPTH` deep (counted before parsing, so
  a deep body costs neither a recursion nor a traceback), with finite numbers only (no
  ``NaN``, ``Infinity`` or ``1e400``, no integer of more than 100 digits), and without a
  lone surrogate (``"\\ud800"``) in any key or string;
- OpenAI chat: ``choices[0].message`` is an object whose ``content`` is a string or null, and
  whose ``tool_calls`` is a list of objects, each with a string ``id`` (``call_{i}`` when
  missing or empty, as some local servers send), ``type`` ``function`` and a ``function``
  object with a non-empty string ``name`` and string ``arguments`` (``{}`` when empty);
- Anthropic: ``content`` is a list of the assistant block types, a text block has its
  ``text`` string, a ``tool_use`` block its id (letters, digits, ``_`` and ``-``), its
  name and an object ``input``;
- arguments that parse as JSON obey the same bounds as the body (they are parsed again by
  the tool loop); arguments that are not JSON are left for the tool loop to explain to the
  model.

Two tool calls of one reply with the same id are renamed, never refused: the second of
``"call_1"`` becomes ``"call_1_2"`` (the next free suffix), so every tool result of the
turn answers exactly one call, and the ids stay valid for both providers.

A reply that fails raises :class:`ReplyError` with a JSON pointer into the reply; the
client turns it into an :class:`~ctxmgmt.errors.LLMError` (HTTP 502).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .formats import anthropic as _anthropic
from .loader import json_depth

__all__ = ["MAX_DEPTH", "ReplyError", "error_message", "read"]

MAX_DEPTH = 64
"""Objects and lists nested deeper than this in a reply (or in a tool call's arguments)
are refused."""
_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
"""Only an escape can make a surrogate: the text itself is strict UTF-8."""
_MAX_DIGITS = 100
_BIG_NUMBER = re.compile(rb"[eE][+-]?\d{3}|\d{%d}" % (_MAX_DIGITS + 1))
"""What a number past a float's range or of too many digits needs (strings may match too)."""
_BLOCK_STRINGS = {"thinking": ("thinking", "signature"), "redacted_thinking": ("data",)}
"""The string fields of the assistant blocks besides text and tool_use."""
_MAX_NAME = 256
"""Characters of a tool call's id or name at most."""


class ReplyError(ValueError):
    """What is wrong with a reply, at a JSON pointer into it."""

    def __init__(self, pointer: str, message: str) -> None:
        self.pointer = pointer
        self.message = message
        super().__init__(f"{pointer}: {message}" if pointer else f"the reply {message}")


class _NotJSON(ReplyError):
    """The text is not JSON at all (tool arguments may be: the tool loop explains them)."""


def read(raw: bytes, provider: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the assistant message in chat form, the usage) of a reply body; ReplyError otherwise."""
    data = parse(raw, "")
    if not isinstance(data, dict):
        raise ReplyError("", f"is {_kind(data)}, not a JSON object")
    message = _anthropic_message(data) if provider == "anthropic" else _chat_message(data)
    usage = data.get("usage")
    return message, usage if isinstance(usage, dict) else {}


def error_message(data: Any) -> str | None:
    """The message of an error a provider answered (``{"error": {"message": …}}``, a plain
    ``{"error": "…"}``, a failed response's ``response.error``, or a Responses stream's
    ``{"type": "error", "message": …}``), at most 300 characters; None when ``data`` holds none."""
    if not isinstance(data, Mapping):
        return None
    inner = data.get("response")
    error = data.get("error") or (inner.get("error") if isinstance(inner, Mapping) else None)
    message = error.get("message") if isinstance(error, Mapping) else error
    if not message and data.get("type") == "error":
        message = data.get("message")
    return str(message)[:300] if message else None


def parse(raw: bytes | str, pointer: str) -> Any:
    """JSON within the bounds: UTF-8, MAX_DEPTH, no NaN/Infinity, no lone surrogate."""
    if isinstance(raw, str):
        text = raw
        encoded = _encode(raw, pointer)
    else:
        encoded = raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReplyError(pointer, f"is not UTF-8 text (byte {exc.start} is invalid)") from None
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise ReplyError(pointer, f"is JSON nested {depth} deep; at most {MAX_DEPTH} levels are accepted")
    try:
        # The number hooks cost a call per number: only where a number could be out of bounds.
        big = _BIG_NUMBER.search(encoded) is not None
        data = json.loads(
            text,
            parse_constant=_constant,
            parse_float=_finite if big else None,
            parse_int=_bounded if big else None,
        )
    except RecursionError:  # belt and braces: the count above should have caught it
        raise ReplyError(pointer, f"is JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise _NotJSON(pointer, f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ReplyError as exc:
        raise ReplyError(pointer, exc.message) from None
    if _ESCAPED_SURROGATE.search(encoded) and not _valid_strings(data):
        _check_strings(data, pointer)  # the slow walk, that names where
    return data


def _constant(name: str) -> Any:
    raise ReplyError("", f"holds {name}, which is not JSON; a reply carries finite numbers only")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses as infinity
        raise ReplyError("", f"holds the number {text[:40]}, beyond a float's range")
    return value


def _bounded(text: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise ReplyError("", f"holds an integer of {len(text):,} digits; at most {_MAX_DIGITS} are accepted")
    return int(text)


def _encode(text: str, pointer: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ReplyError(
            pointer, f"holds a lone surrogate (\\u{ord(text[exc.start]):04x} at character {exc.start})"
        ) from None


def _valid_strings(data: Any) -> bool:
    """Whether every key and string of ``data`` is valid Unicode (a quick walk, no pointers)."""
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if not value.isascii() and not _encodable(value):
                return False
        elif isinstance(value, dict):
            if not all(k.isascii() or _encodable(k) for k in value):
                return False
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_strings(data: Any, pointer: str) -> None:
    """Every key and string of ``data`` is valid Unicode (a lone surrogate is not)."""
    pending: list[tuple[Any, str]] = [(data, pointer)]
    while pending:
        value, at = pending.pop()
        if isinstance(value, str):
            if not value.isascii():
                _encode(value, at)
        elif isinstance(value, dict):
            for key, item in value.items():
                where = f"{at}/{_escape(key)}"
                if not key.isascii():
                    _encode(key, at)
                pending.append((item, where))
        elif isinstance(value, list):
            pending.extend((item, f"{at}/{i}") for i, item in enumerate(value))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1").encode("utf-8", "backslashreplace").decode()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )


# -- OpenAI chat ---------------------------------------------------------------------------
def _chat_message(data: Mapping[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ReplyError("/choices", "a chat completion needs a non-empty list of choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ReplyError("/choices/0", f"is {_kind(choice)}, not an object")
    message = choice.get("message")
    at = "/choices/0/message"
    if not isinstance(message, dict):
        raise ReplyError(at, f"is {_kind(message)}, not an object")
    if message.get("role", "assistant") != "assistant":
        raise ReplyError(f"{at}/role", f"is {message.get('role')!r}; a model's reply is the assistant's")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ReplyError(f"{at}/content", f"is {_kind(content)}; a reply's content is a string or null")
    out: dict[str, Any] = {"role": "assistant", "content": content}
    calls = message.get("tool_calls")
    if calls is None:
        return out
    if not isinstance(calls, list):
        raise ReplyError(f"{at}/tool_calls", f"is {_kind(calls)}, not a list of tool calls")
    read_calls = []
    for i, call in enumerate(calls):
        where = f"{at}/tool_calls/{i}"
        if not isinstance(call, dict):
            raise ReplyError(where, f"is {_kind(call)}, not a tool call object")
        if call.get("type") not in (None, "function"):
            raise ReplyError(f"{where}/type", f"is {call.get('type')!r}; only function calls are known")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise ReplyError(f"{where}/function", f"is {_kind(fn)}, not an object with name and arguments")
        arguments = fn.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise ReplyError(f"{where}/function/arguments", f"is {_kind(arguments)}, not a JSON string")
        call_id = call.get("id")
        if call_id is None or call_id == "":  # some local servers send none: pairing needs one
            call_id = f"call_{i}"
        read_calls.append(
            _call(_name(call_id, f"{where}/id"), _name(fn.get("name"), f"{where}/function/name"))
        )
        if arguments:
            _arguments(arguments, f"{where}/function/arguments")
            read_calls[-1]["function"]["arguments"] = arguments
    if read_calls:
        out["tool_calls"] = _unique(read_calls)
    return out


def _name(value: Any, at: str) -> str:
    if not isinstance(value, str) or not value:
        raise ReplyError(at, f"is {_kind(value)}; a non-empty string is needed")
    if len(value) > _MAX_NAME:
        raise ReplyError(at, f"has {len(value):,} characters; at most {_MAX_NAME} are accepted")
    return value


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def _arguments(arguments: str, at: str) -> None:
    """Arguments that parse obey the reply's bounds; others are the tool loop's to explain."""
    with contextlib.suppress(_NotJSON):
        parse(arguments, at)


def _unique(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls, a repeated id renamed to the next free ``{id}_{n}``."""
    taken = {c["id"] for c in calls}
    seen: set[str] = set()
    for call in calls:
        if call["id"] in seen:
            n = 2
            while f"{call['id']}_{n}" in taken:
                n += 1
            call["id"] = f"{call['id']}_{n}"
            taken.add(call["id"])
        seen.add(call["id"])
    return calls


# -- Anthropic -------------------------------------------------------------------------------
def _anthropic_message(data: Mapping[str, Any]) -> dict[str, Any]:
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise ReplyError("/content", f"is {_kind(blocks)}; a Messages API answer has a list of blocks")
    for i, block in enumerate(blocks):
        at = f"/content/{i}"
        if not isinstance(block, dict):
            raise ReplyError(at, f"is {_kind(block)}, not a content block")
        kind = block.get("type")
        if kind not in _anthropic.ASSISTANT_BLOCKS:
            raise ReplyError(f"{at}/type", f"{kind!r} is not an assistant content block type")
        if kind == "text" and not isinstance(block.get("text"), str):
            raise ReplyError(f"{at}/text", f"is {_kind(block.get('text'))}; a text block needs a string")
        for key in _BLOCK_STRINGS.get(kind, ()):
            if key in block and not isinstance(block[key], str):
                raise ReplyError(f"{at}/{key}", f"is {_kind(block[key])}; a {kind} block's {key} is a string")
        if kind == "tool_use":
            call_id = _name(block.get("id"), f"{at}/id")
            if not _ID.fullmatch(call_id):
                raise ReplyError(f"{at}/id", "a tool_use id is letters, digits, '_' and '-'")
            _name(block.get("name"), f"{at}/name")
            if not isinstance(block.get("input"), dict):
                raise ReplyError(f"{at}/input", f"is {_kind(block.get('input'))}, not an object")
    if data.get("role", "assistant") != "assistant":
        raise ReplyError("/role", f"is {data.get('role')!r}; a model's reply is the assistant's")
    if not any(b.get("type") == "tool_use" or (b.get("type") == "text" and b["text"]) for b in blocks):
        # Sent back, an assistant turn without content is refused by the Messages API.
        raise ReplyError("/content", "the answer holds no text and no tool call")
    message = _anthropic.response_message(data)
    if message.get("tool_calls"):
        message["tool_calls"] = _unique(message["tool_calls"])
    return message
