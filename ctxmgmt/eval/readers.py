"""Conversations to replay, read from the logs agents leave behind.

:func:`read_conversations` reads files and folders, one conversation at a time (memory is
bounded by the largest conversation, never by the number of files):

- JSON or JSONL in the three provider formats: OpenAI chat (a list of messages, or
  ``{"messages": [...], "tools": [...]}``), Anthropic Messages (``{"system", "messages"}``),
  Responses input items (a list, or ``{"input": [...], "instructions"}``); the format is
  detected by :func:`ctxmgmt.formats.detect` and converted by ctxmgmt's own converters;
- Inspect AI logs: ``.eval`` zips (flat ``samples/{id}_epoch_{n}.json`` or the chunked
  ``samples/{id}_epoch_{n}/`` layout; deflate or zstd entries) and ``.json`` logs
  (``{"samples": [...]}``), and Inspect message lists (an agent state dump);
- tau-bench results (``{"traj": [...]}``: OpenAI chat messages);
- NeMo Gym rollouts (``*rollouts.jsonl``: ``{"responses_create_params", "response"}``, the
  request's input items then the run's output items, in the Responses format);
- Claude Code session JSONL (``~/.claude/projects/*/*.jsonl``).

:func:`read_memories` reads conversations an agent had through ctxmgmt's runner, from a
store (a database URL) or a server (a :class:`ctxmgmt.Client`).

Every conversation comes out as valid OpenAI chat messages (``ctxmgmt.messages.check_messages``
finds nothing): what a log holds that a provider would refuse to be sent again (a tool
result that answers no call, a call left without its result when the run stopped) is
repaired the way the provider needs it, and each repair is counted in ``metadata["repairs"]``.
Reasoning is not kept: providers do not resend earlier turns' reasoning (it is encrypted or
dropped), so only visible text is replayed; its size is in ``metadata["reasoning_chars"]``.

Every file is bounded: JSON and JSONL files by :data:`MAX_FILE_BYTES`; a zip by its number
of entries (:data:`MAX_ENTRIES`) and, per entry and per sample, by declared and by actual
uncompressed bytes (:data:`MAX_SAMPLE_BYTES`, :data:`MAX_ARCHIVE_BYTES` for the whole
file): a zip bomb stops at the limit. Nothing is extracted to disk. A bad file is a
:class:`ReaderError` naming the file and what is wrong.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
import struct
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import ContextError, Problem
from ..formats import anthropic, detect, openai_responses
from ..formats._common import ORIGIN
from ..loader import _bytes, _read_file, _Unreadable, json_depth
from ..messages import check_messages

if TYPE_CHECKING:
    from ..client import Client

__all__ = [
    "MAX_ARCHIVE_BYTES",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_SAMPLE_BYTES",
    "Conversation",
    "ReaderError",
    "read_conversations",
    "read_memories",
]

MAX_FILE_BYTES = 64 << 20
"""A JSON or JSONL file is at most 64 MiB (it is read whole)."""
MAX_SAMPLE_BYTES = 64 << 20
"""One sample of an ``.eval`` zip uncompresses to at most 64 MiB (its entries together)."""
MAX_ARCHIVE_BYTES = 256 << 20
"""An ``.eval`` zip uncompresses to at most 256 MiB in what is read of it."""
MAX_ENTRIES = 100_000
"""An ``.eval`` zip has at most this many entries."""
EXTENSIONS = (".json", ".jsonl", ".eval")
"""The files a folder is searched for."""
RAISE_WITH = "--max-input-mb, or max_bytes in Python,"
"""How the message about a file over the limit says to raise it."""
_ZSTD = 93
_LOG = logging.getLogger("ctxmgmt.eval")


class ReaderError(ContextError):
    """A log file cannot be read as conversations; ``.problems`` name the file and the place."""

    what = "log file"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One agent run: valid OpenAI chat messages, what went with them, and what was repaired."""

    id: str
    """Where it came from: the file, and the sample and epoch (``log.eval#86_epoch_1``) or line."""
    source: str
    """The format read: openai_chat, anthropic, openai_responses, inspect_eval, inspect_json,
    inspect_messages, tau_bench, nemo_gym, claude_code or memory."""
    messages: tuple[dict[str, Any], ...]
    """OpenAI chat messages (no leading system message: that is ``system_prompt``)."""
    system_prompt: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    """OpenAI tool schemas, when the log has them."""
    model: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """``repairs`` (what was changed to make the messages valid, by kind, counted),
    ``reasoning_chars`` (reasoning text not kept), and the source's own details."""


# -- files and folders ----------------------------------------------------------------
def read_conversations(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    on_error: Callable[[ReaderError], None] | None = None,
    max_bytes: int = MAX_FILE_BYTES,
) -> Iterator[Conversation]:
    """Every conversation in these files and folders, one at a time, in order.

    A file named here that cannot be read raises :class:`ReaderError`. A bad file found in
    a folder is handed to ``on_error`` (by default it is logged on ``ctxmgmt.eval``) and
    the others are read: one bad log does not stop a folder.

    ``max_bytes`` bounds each JSON or JSONL file, and each sample of an ``.eval`` zip
    uncompressed (the whole zip: four times that). A conversation found in a folder is named
    by its path within the folder (``more.jsonl:2``, ``logs/run.eval#7_epoch_1``): short, and
    the same wherever the folder is.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1 (got {max_bytes})")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for found in _files(path):
                try:
                    for conversation in _read_file_conversations(found, max_bytes):
                        yield _named_within(conversation, str(found), found.relative_to(path).as_posix())
                except ReaderError as exc:
                    if on_error is None:
                        _LOG.warning("%s", exc)
                    else:
                        on_error(exc)
        else:
            yield from _read_file_conversations(path, max_bytes)


def _named_within(conversation: Conversation, name: str, short: str) -> Conversation:
    """The conversation with its id's file part (``name``) replaced by ``short``."""
    if not conversation.id.startswith(name):
        return conversation
    return replace(conversation, id=short + conversation.id[len(name) :])


def _files(folder: Path) -> Iterator[Path]:
    """The log files under a folder, sorted; links to folders are not followed."""
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(EXTENSIONS) and not name.startswith("."):
                yield Path(root, name)


def _error(source: str, message: str, pointer: str = "") -> ReaderError:
    return ReaderError([Problem(pointer, message, source=source)])


def _read_file_conversations(path: Path, max_bytes: int) -> Iterator[Conversation]:
    """A file's conversations; a shape no reader foresaw is a ReaderError too, never a traceback."""
    try:
        yield from _read_one_file(path, max_bytes)
    except ReaderError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError) as exc:
        raise _error(
            str(path),
            f"cannot be read as a conversation: an unexpected shape ({type(exc).__name__}: {exc})"[:500],
        ) from None


def _read_one_file(path: Path, max_bytes: int) -> Iterator[Conversation]:
    name = str(path)
    if name.endswith(".eval"):
        yield from _read_eval(path, max_bytes)
        return
    text = _text(path, max_bytes)
    if name.endswith(".jsonl"):
        yield from _read_jsonl(name, text)
        return
    yield from _from_document(name, _json(text, name), name)


def _text(path: Path, limit: int) -> str:
    try:
        return _read_file(path, limit, RAISE_WITH)
    except _Unreadable as exc:
        raise _error(str(path), str(exc)) from None


def _json(text: str, source: str, line: int | None = None) -> Any:
    """JSON text of a log, strictly bounded and leniently read: nesting deeper than
    :data:`MAX_DEPTH` is refused; ``NaN`` and ``Infinity`` (which Inspect writes for an
    undefined metric) read as null, and a lone surrogate (half a character, as a tool's
    binary output may leave) as U+FFFD, so that one odd value does not lose a run."""
    deep = _error(source, f"nests deeper than {MAX_DEPTH} levels; this is not a log ctxmgmt reads")
    try:
        data = json.loads(text, parse_constant=lambda _: None)
    except json.JSONDecodeError as exc:
        raise ReaderError(
            [Problem("", f"JSON syntax error: {exc.msg}", line if line is not None else exc.lineno, source)]
        ) from None
    except RecursionError:
        raise deep from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise _error(source, f"cannot be read as JSON: {exc}"[:300]) from None
    if json_depth(text) > MAX_DEPTH:
        raise deep
    return _whole_characters(data) if _SURROGATE_ESCAPE.search(text) else data


MAX_DEPTH = 200
"""Mappings and lists in a log nest at most this deep (Inspect's events nest deeper than a
definition may)."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _whole_characters(value: Any) -> Any:
    """The value with every lone surrogate in its strings replaced by U+FFFD (the nesting
    was checked: this recursion is bounded)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_characters(v) for v in value]
    return value


def _from_document(name: str, data: Any, cid: str) -> Iterator[Conversation]:
    """The conversations of one parsed JSON document of any known shape."""
    if isinstance(data, list):
        if data and all(_holds_conversation(item) for item in data):  # a list of conversations
            for k, item in enumerate(data):
                yield from _from_document(name, item, f"{cid}#{k}")
            return
        yield _provider(name, cid, data, None, (), None, {}, at="")
        return
    if not isinstance(data, dict):
        raise _error(name, "is neither a message list nor an object holding one")
    if isinstance(data.get("samples"), list):  # an Inspect .json log
        model = _inspect_model(data)
        for i, sample in enumerate(data["samples"]):
            if not isinstance(sample, dict):
                raise _error(name, "a sample must be an object", f"/samples/{i}")
            yield _inspect_sample(name, sample, model, "inspect_json", f"/samples/{i}")
        return
    if isinstance(data.get("traj"), list):  # a tau-bench result
        info: dict[str, Any] = data["info"] if isinstance(data.get("info"), dict) else {}
        meta = {k: data[k] for k in ("task_id", "reward", "trial") if k in data and _plain(data[k])}
        yield _provider(
            name, cid, data["traj"], None, (), info.get("model"), meta, source="tau_bench", at="/traj"
        )
        return
    rollout = _nemo_gym_rollout(name, cid, data)
    if rollout is not None:
        yield rollout
        return
    for key in ("messages", "input"):
        if isinstance(data.get(key), list):
            _check_request_fields(cid, data)
            system = data.get("system", data.get("instructions"))
            tools: list[Any] = data.get("tools") or []
            yield _provider(name, cid, data[key], system, tools, data.get("model"), {}, at=f"/{key}")
            return
        if data.get(key) is not None:
            raise _error(
                cid, "must be a list of messages (OpenAI chat, Anthropic or Responses format)", f"/{key}"
            )
    raise _error(
        name,
        "no conversation found: expected a message list, {messages: [...]}, {input: [...]}, "
        "an Inspect log {samples: [...]}, a tau-bench result {traj: [...]} or a NeMo Gym "
        "rollout {responses_create_params: {input}, response: {output}}",
    )


def _nemo_gym_rollout(name: str, cid: str, data: Mapping[str, Any]) -> Conversation | None:
    """A NeMo Gym rollout (``{"responses_create_params": {"input", "instructions", "tools"},
    "response": {"output": [...]}}``, one a line of its ``*rollouts.jsonl``): the request's
    input items then the run's output items, in the Responses format; None for another shape."""
    params, response = data.get("responses_create_params"), data.get("response")
    if not isinstance(params, dict):
        return None
    if not isinstance(response, dict):
        raise _error(cid, "a NeMo Gym rollout holds its run as {output: [...]} here", "/response")
    given, output = params.get("input"), response.get("output")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    lists: list[list[Any]] = []
    for pointer, value in (("/responses_create_params/input", items), ("/response/output", output)):
        if not isinstance(value, list):
            raise _error(cid, "must be a list of Responses items", pointer)
        bad = next((k for k, item in enumerate(value) if not isinstance(item, dict)), None)
        if bad is not None:
            raise _error(cid, "an item must be an object", f"{pointer}/{bad}")
        lists.append(value)
    _check_request_fields(cid, {k: params.get(k) for k in ("model", "tools", "instructions")})
    meta = {k: data[k] for k in ("task_id", "reward") if k in data and _plain(data[k])}
    model = params.get("model") or response.get("model") or None
    return _provider(
        name,
        cid,
        [*lists[0], *lists[1]],
        params.get("instructions"),
        params.get("tools") or [],
        model,
        meta,
        source="nemo_gym",
        fmt="openai_responses",
        at="",
    )


def _holds_conversation(item: Any) -> bool:
    """An object with messages (or input) and no role: a conversation, not a message."""
    return isinstance(item, dict) and "role" not in item and ("messages" in item or "input" in item)


def _check_request_fields(cid: str, data: Mapping[str, Any]) -> None:
    """The fields that go with a message list in a request body: ``model`` a string, ``tools``
    a list of objects, ``system`` / ``instructions`` text (a string or a list of text blocks)."""
    if data.get("model") is not None and not isinstance(data["model"], str):
        raise _error(cid, f"must be a string naming the model, not {type(data['model']).__name__}", "/model")
    tools = data.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _error(cid, "must be a list of tool schemas (objects)", "/tools")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise _error(
                    cid, f"a tool schema must be an object, not {type(tool).__name__}", f"/tools/{i}"
                )
    for key in ("system", "instructions"):
        if data.get(key) is not None and not isinstance(data[key], (str, list)):
            raise _error(cid, "must be text: a string or a list of text blocks", f"/{key}")


def _plain(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def _read_jsonl(name: str, text: str) -> Iterator[Conversation]:
    """A Claude Code session (its first line tells), or one conversation per line, parsed
    one line at a time."""
    lines = ((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip())
    first = next(lines, None)
    if first is None:
        raise _error(name, "the file is empty; give one JSON object per line")
    record = _json(first[1], name, first[0])
    if _claude_code_record(record):
        yield _claude_code(name, [(first[0], record), *((n, _json(line, name, n)) for n, line in lines)])
        return
    yield from _from_document(name, record, f"{name}:{first[0]}")
    for n, line in lines:
        yield from _from_document(name, _json(line, name, n), f"{name}:{n}")


# -- provider formats -----------------------------------------------------------------
def _provider(
    name: str,
    cid: str,
    messages: list[Any],
    system: Any,
    tools: Sequence[Any],
    model: Any,
    meta: dict[str, Any],
    *,
    source: str | None = None,
    fmt: str | None = None,
    at: str = "/messages",
) -> Conversation:
    """A message list in a provider's format (or Inspect's), as a checked chat conversation;
    ``at`` is the list's JSON pointer in the document."""
    if not all(isinstance(m, dict) for m in messages):
        bad = next(i for i, m in enumerate(messages) if not isinstance(m, dict))
        raise _error(cid, "a message must be an object with a role and content", f"{at}/{bad}")
    repairs: dict[str, int] = {}
    if fmt is not None:
        pass
    elif _looks_inspect(messages):
        fmt = "inspect_messages"
        model = model or next((m["model"] for m in messages if isinstance(m.get("model"), str)), None)
    else:
        try:
            fmt = detect(messages, system)
        except Exception:  # detection reads shapes only; a shape it chokes on is chat's problem
            fmt = "openai_chat"
    reasoning = 0
    if fmt == "anthropic":
        messages = _repair_anthropic(_anthropic_turns(messages), repairs)
        problems = anthropic.check(messages, system, partial_tail=True)
        if problems:
            raise ReaderError([Problem(p.pointer, p.message, p.line, cid) for p in problems])
        chat = anthropic.to_internal(messages)
        system_text = anthropic.system_text(system)
        reasoning = sum(_thinking_chars(m) for m in messages)
    elif fmt == "openai_responses":
        messages = _repair_responses(messages, repairs)
        problems = openai_responses.check(messages, None, partial_tail=True)
        if problems:
            raise ReaderError([Problem(p.pointer, p.message, p.line, cid) for p in problems])
        chat = openai_responses.to_internal(messages)
        system_text = system if isinstance(system, str) else None
    else:
        chat, reasoning = _chat(messages, {})
        system_text = system if isinstance(system, str) else None
    return _finish(
        name,
        cid,
        source or fmt,
        [_plain_message(m) for m in chat],
        system_text,
        _tool_schemas(tools),
        model if isinstance(model, str) else None,
        {**meta, "reasoning_chars": reasoning},
        repairs,
    )


def _thinking_chars(m: Mapping[str, Any]) -> int:
    content = m.get("content")
    if not isinstance(content, list):
        return 0
    return sum(
        len(b.get("thinking") or "")
        for b in content
        if isinstance(b, dict) and b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    )


def _plain_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """An internal message without ctxmgmt's origin reference (a conversation is plain JSON)."""
    return {k: v for k, v in m.items() if k != ORIGIN}


def _tool_schemas(tools: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """OpenAI tool schemas for the tools of a log (OpenAI's, Anthropic's or Inspect's shape)."""
    out = []
    for t in tools:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "function" and isinstance(t.get("function"), dict):
            out.append(t)
        elif isinstance(t.get("name"), str):
            params = t.get("parameters", t.get("input_schema"))
            fn: dict[str, Any] = {"name": t["name"], "description": str(t.get("description") or "")}
            fn["parameters"] = params if isinstance(params, dict) else {"type": "object", "properties": {}}
            out.append({"type": "function", "function": fn})
    return tuple(out)


# -- Inspect messages and plain chat --------------------------------------------------
def _looks_inspect(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Inspect ChatMessages: a tool call's ``function`` is the name, arguments an object."""
    for m in messages:
        calls = m.get("tool_calls")
        if isinstance(calls, list) and any(
            isinstance(c, dict) and isinstance(c.get("function"), str) for c in calls
        ):
            return True
        if m.get("role") == "tool" and ("function" in m or "error" in m):
            return True
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "reasoning" for p in content
        ):
            return True
    return False


def _chat(
    messages: Sequence[Mapping[str, Any]], attachments: Mapping[str, str]
) -> tuple[list[dict[str, Any]], int]:
    """Chat messages from OpenAI chat or Inspect messages: visible text kept, reasoning
    counted and dropped, Inspect's tool calls and errors in chat's shape, attachment
    references resolved. Returns (messages, reasoning characters)."""
    out: list[dict[str, Any]] = []
    reasoning = 0
    for m in messages:
        role = m.get("role")
        content, dropped = _content(m.get("content"), attachments)
        reasoning += dropped
        msg: dict[str, Any] = {"role": role, "content": content}
        raw = m.get("tool_calls")
        if role == "assistant" and raw is not None and not isinstance(raw, list):
            msg["tool_calls"] = raw  # the check names it
        elif role == "assistant":
            calls = [_call(c, attachments) for c in raw or () if isinstance(c, dict)]
            if calls:
                msg["tool_calls"] = calls
                if content == "":
                    msg["content"] = None
        elif role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            error = m.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                message = _resolve(error["message"], attachments)
                if isinstance(content, list):  # parts (an image): the error as one more
                    msg["content"] = [*content, {"type": "text", "text": message}]
                else:
                    msg["content"] = f"{content}\n{message}" if content else message
            if isinstance(m.get("function", m.get("name")), str):
                msg["name"] = m.get("function", m.get("name"))
        if isinstance(m.get("name"), str) and role in ("user", "assistant", "system"):
            msg["name"] = m["name"]
        out.append(msg)
    return out, reasoning


def _content(content: Any, attachments: Mapping[str, str]) -> tuple[Any, int]:
    """Chat content and the reasoning characters left out."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return _resolve(content, attachments), 0
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False), 0
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    dropped = 0
    for p in content:
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(p.get("text"), str):
            texts.append(_resolve(p["text"], attachments))
        elif kind in ("reasoning", "thinking"):
            value = p.get("reasoning", p.get("thinking"))
            dropped += len(value) if isinstance(value, str) else 0
        elif kind == "image_url" and isinstance(p.get("image_url"), dict):
            parts.append(p)
        elif kind == "image" and isinstance(p.get("image"), str):
            url = _resolve(p["image"], attachments)
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "refusal" and isinstance(p.get("refusal"), str):
            texts.append(p["refusal"])
        else:  # audio, video, documents, server tool data: described, not replayed
            texts.append(f"[{kind}]" if isinstance(kind, str) else "[content]")
    text = "\n".join(texts)
    if not parts:
        return text, dropped
    return ([{"type": "text", "text": text}] if text else []) + parts, dropped


def _call(c: Mapping[str, Any], attachments: Mapping[str, str]) -> dict[str, Any]:
    fn = c.get("function")
    if isinstance(fn, dict):  # OpenAI chat
        name, arguments = fn.get("name"), fn.get("arguments")
    else:  # Inspect: the name, and the arguments as an object
        name, arguments = fn, c.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(
            _resolve_all(arguments if arguments is not None else {}, attachments), ensure_ascii=False
        )
    return {"id": c.get("id"), "type": "function", "function": {"name": name, "arguments": arguments}}


_ATTACHMENT = "attachment://"


def _resolve(text: str, attachments: Mapping[str, str]) -> str:
    if text.startswith(_ATTACHMENT):
        return attachments.get(text[len(_ATTACHMENT) :], text)
    return text


def _resolve_all(value: Any, attachments: Mapping[str, str], depth: int = 0) -> Any:
    if isinstance(value, str):
        return _resolve(value, attachments)
    if depth > MAX_DEPTH:  # the nesting was checked when the file was read
        return value
    if isinstance(value, dict):
        return {k: _resolve_all(v, attachments, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_all(v, attachments, depth + 1) for v in value]
    return value


# -- repairs and the check ------------------------------------------------------------
def _finish(
    name: str,
    cid: str,
    source: str,
    messages: list[dict[str, Any]],
    system_prompt: str | None,
    tools: tuple[dict[str, Any], ...],
    model: str | None,
    meta: dict[str, Any],
    repairs: dict[str, int] | None = None,
) -> Conversation:
    """Repair, split off the leading system messages, and check: the result is valid chat."""
    system_parts = [system_prompt] if system_prompt else []
    repairs = {} if repairs is None else repairs
    messages = _repair(messages, repairs)
    start = 0
    while start < len(messages) and messages[start].get("role") in ("system", "developer"):
        text = messages[start].get("content")
        text = text if isinstance(text, str) else _text_parts(text)
        if text:
            system_parts.append(text)
        start += 1
    repaired = messages[start:]
    problems = check_messages(repaired)
    if problems:  # the pointers are the conversation's messages' (repaired, the system prompt apart)
        raise ReaderError([Problem(p.pointer, p.message, source=cid) for p in problems[:20]])
    if not any(m.get("role") not in ("system", "developer") for m in repaired):
        raise _error(cid, "the conversation has no messages besides the system prompt")
    return Conversation(
        id=cid,
        source=source,
        messages=tuple(repaired),
        system_prompt="\n\n".join(system_parts) or None,
        tools=tools,
        model=model,
        metadata={**meta, "repairs": repairs},
    )


def _text_parts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))


def _tally(repairs: dict[str, int], kind: str, n: int = 1) -> None:
    """Counts ``n`` repairs of a kind (none: nothing is written)."""
    if n:
        repairs[kind] = repairs.get(kind, 0) + n


def _repair(messages: list[dict[str, Any]], repairs: dict[str, int]) -> list[dict[str, Any]]:
    """What a provider would refuse, repaired: a tool result that answers no call of the
    assistant message right before it is dropped (``orphan_results``); a call that gets no
    result is dropped from its message (``unanswered_calls``), and a message left empty
    with it (``empty_messages``); a repeated result for a call is dropped (``duplicate_results``)."""

    out: list[dict[str, Any]] = []
    asking: int | None = None  # index in out of the assistant message whose calls are open
    pending: set[str] = set()
    answered: set[str] = set()

    def close() -> None:
        nonlocal asking
        if asking is not None and pending:
            m = out[asking]
            calls = [c for c in m["tool_calls"] if c.get("id") not in pending]
            _tally(repairs, "unanswered_calls", len(m["tool_calls"]) - len(calls))
            if calls:
                out[asking] = {**m, "tool_calls": calls}
            else:
                rest = {k: v for k, v in m.items() if k != "tool_calls"}
                if rest.get("content") in (None, ""):
                    del out[asking]
                    _tally(repairs, "empty_messages")
                else:
                    out[asking] = rest
        asking = None
        pending.clear()
        answered.clear()

    for m in messages:
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id in pending:
                pending.discard(call_id)
                answered.add(call_id)
                out.append(m)
            elif call_id in answered:
                _tally(repairs, "duplicate_results")
            else:
                _tally(repairs, "orphan_results")
            continue
        close()
        calls_given = m.get("tool_calls")
        if (
            role == "assistant"
            and isinstance(calls_given, list)
            and calls_given
            and all(isinstance(c, dict) for c in calls_given)
        ):  # else the check names what is wrong
            ids = [c.get("id") for c in m["tool_calls"]]
            if len(set(ids)) != len(ids):  # a call id given twice: the first is kept
                seen: set[Any] = set()
                calls = []
                for c in m["tool_calls"]:
                    if c.get("id") not in seen:
                        seen.add(c.get("id"))
                        calls.append(c)
                _tally(repairs, "duplicate_calls", len(ids) - len(calls))
                m = {**m, "tool_calls": calls}
            out.append(m)
            asking = len(out) - 1
            pending.update(c.get("id") for c in m["tool_calls"])
        else:
            out.append(m)
    close()
    return out


def _repair_responses(items: list[Any], repairs: dict[str, int]) -> list[Any]:
    """Responses items repaired as :func:`_repair` repairs chat: an output that answers no
    call of the turn before it is dropped (``orphan_results``), and a second one for a call
    (``duplicate_results``); a call that gets no output before the next turn (a message, or
    a call after outputs) is dropped (``unanswered_calls``), and a repeated call id within a
    turn (``duplicate_calls``). Real logs hold all of these: a harness that recorded one of
    eleven parallel outputs, a run stopped mid-turn."""

    out: list[Any] = []
    waiting: dict[str, int] = {}  # the turn's calls without their output: call id -> index in out
    answered: set[str] = set()
    outputs = False  # outputs came since the turn's calls: a call now begins a new turn

    def close() -> None:
        nonlocal outputs
        for at in sorted(waiting.values(), reverse=True):
            del out[at]
        _tally(repairs, "unanswered_calls", len(waiting))
        waiting.clear()
        answered.clear()
        outputs = False

    for item in items:
        if openai_responses.is_output(item):
            call_id = openai_responses.answers(item)
            if call_id in waiting:
                del waiting[call_id]
                answered.add(call_id)
                out.append(item)
                outputs = True
            else:
                _tally(repairs, "duplicate_results" if call_id in answered else "orphan_results")
        elif openai_responses.is_call(item):
            if outputs:
                close()
            if item["call_id"] in waiting or item["call_id"] in answered:
                _tally(repairs, "duplicate_calls")
                continue
            waiting[item["call_id"]] = len(out)
            out.append(item)
        else:  # a message (or reasoning after outputs) begins the next turn
            if outputs or not (isinstance(item, dict) and item.get("type") == "reasoning"):
                close()
            out.append(item)
    close()
    return out


# -- Inspect AI logs ------------------------------------------------------------------
def _inspect_model(log: Mapping[str, Any]) -> str | None:
    spec = log.get("eval")
    model = spec.get("model") if isinstance(spec, dict) else None
    return model if isinstance(model, str) else None


def _inspect_sample(
    name: str,
    sample: Mapping[str, Any],
    model: str | None,
    source: str,
    at: str,
    messages: Any = None,
    attachments: Mapping[str, str] | None = None,
) -> Conversation:
    cid = f"{name}#{sample.get('id')}_epoch_{sample.get('epoch', 1)}"
    messages = sample.get("messages") if messages is None else messages
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise _error(name, f"{cid}: the sample has no message list", f"{at}/messages")
    if attachments is None:
        found = sample.get("attachments")
        attachments = (
            {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}
        )
    chat, reasoning = _chat(messages, attachments)
    own = next((m.get("model") for m in messages if isinstance(m.get("model"), str)), None)
    limit = sample.get("limit")
    meta: dict[str, Any] = {
        "reasoning_chars": reasoning,
        "sample_id": sample.get("id"),
        "epoch": sample.get("epoch"),
    }
    if isinstance(limit, dict):
        meta["limit"] = {k: v for k, v in limit.items() if _plain(v)}
    return _finish(name, cid, source, chat, None, _inspect_tools(sample.get("events")), own or model, meta)


def _inspect_tools(events: Any) -> tuple[dict[str, Any], ...]:
    """The tools of the last model call recorded in a sample's events (Inspect's ToolInfo)."""
    if not isinstance(events, list):
        return ()
    for event in reversed(events):
        if isinstance(event, dict) and event.get("event") == "model" and isinstance(event.get("tools"), list):
            return _tool_schemas(event["tools"])
    return ()


_FLAT = re.compile(r"samples/([^/]{1,200})_epoch_(\d{1,9})\.json")
_CHUNK = re.compile(
    r"samples/([^/]{1,200})_epoch_(\d{1,9})/(sample|messages/(\d{1,9})|attachments/(\d{1,9}))\.json"
)


def _read_eval(path: Path, max_bytes: int = MAX_SAMPLE_BYTES) -> Iterator[Conversation]:
    name = str(path)
    with _Zip(path, max_bytes) as z:
        header = z.json("header.json") if "header.json" in z.names else None
        if header is None and "_journal/start.json" in z.names:
            header = z.json("_journal/start.json")
        model = _inspect_model(header) if isinstance(header, dict) else None
        flat: list[str] = []
        chunked: dict[str, dict[str, Any]] = {}
        for entry in z.names:
            if _FLAT.fullmatch(entry):
                flat.append(entry)
                continue
            match = _CHUNK.fullmatch(entry)
            if match:
                key = f"{match[1]}_epoch_{match[2]}"
                parts = chunked.setdefault(key, {"sample": None, "messages": [], "attachments": []})
                if match[3] == "sample":
                    parts["sample"] = entry
                elif match[4] is not None:
                    parts["messages"].append((int(match[4]), entry))
                else:
                    parts["attachments"].append((int(match[5]), entry))
        if not flat and not chunked:
            raise _error(name, "the .eval file holds no samples (samples/{id}_epoch_{n}.json)")
        for entry in flat:
            z.start_sample()
            sample = z.json(entry)
            if not isinstance(sample, dict):
                raise _error(name, "a sample must be an object", f"/{entry}")
            yield _inspect_sample(name, sample, model, "inspect_eval", f"/{entry}")
        for key, parts in chunked.items():
            z.start_sample()
            if parts["sample"] is None:
                raise _error(name, f"the chunked sample {key} has no sample.json")
            yield _chunked_sample(name, z, parts, model)


def _chunked_sample(name: str, z: _Zip, parts: dict[str, Any], model: str | None) -> Conversation:
    sample = z.json(parts["sample"])
    if not isinstance(sample, dict):
        raise _error(name, "a sample must be an object", f"/{parts['sample']}")
    pool = _pooled(name, z, parts["messages"])
    attachments = {
        str(i): v for i, v in enumerate(_pooled(name, z, parts["attachments"])) if isinstance(v, str)
    }
    refs = sample.get("message_refs")
    if refs is None:
        messages = pool
    else:
        if not isinstance(refs, list):
            raise _error(name, "message_refs must be a list of [start, end] ranges", f"/{parts['sample']}")
        messages = []
        for i, ref in enumerate(refs):
            ok = isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref)
            if not ok or not 0 <= ref[0] <= ref[1] <= len(pool):
                raise _error(
                    name,
                    f"message_refs/{i} is not a range [start, end] within the {len(pool)} messages stored",
                    f"/{parts['sample']}",
                )
            messages.extend(pool[ref[0] : ref[1]])
    return _inspect_sample(name, sample, model, "inspect_eval", f"/{parts['sample']}", messages, attachments)


def _pooled(name: str, z: _Zip, chunks: list[tuple[int, str]]) -> list[Any]:
    """The items of numbered chunks (``messages/{k}.json`` holds items k, k+1, ...), in order."""
    pool: list[Any] = []
    for start, entry in sorted(chunks):
        if start != len(pool):
            raise _error(
                name, f"the chunk starts at item {start}, but {len(pool)} items came before it", f"/{entry}"
            )
        items = z.json(entry)
        if not isinstance(items, list):
            raise _error(name, "a chunk must be a list", f"/{entry}")
        pool.extend(items)
    return pool


def _declared_entries(f: IO[bytes], size: int) -> int | None:
    """The number of entries a zip's end record declares (read before Python's zipfile
    builds an object per entry), or None when there is no end record to read."""
    tail = min(size, 22 + 0xFFFF)
    f.seek(size - tail)
    data = f.read(tail)
    at = data.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(data):
        return None
    (count,) = struct.unpack("<H", data[at + 10 : at + 12])
    if count == 0xFFFF and at >= 20 and data[at - 20 : at - 16] == b"PK\x06\x07":  # zip64
        (offset,) = struct.unpack("<Q", data[at - 12 : at - 4])
        f.seek(offset)
        head = f.read(56)
        if len(head) == 56 and head[:4] == b"PK\x06\x06":
            (count,) = struct.unpack("<Q", head[32:40])
    return int(count)


class _Zip:
    """A zip read within bounds: a regular file, at most :data:`MAX_ENTRIES` entries, each
    entry and each sample within ``max_bytes`` (:data:`MAX_SAMPLE_BYTES`) declared and actual,
    the whole within four times that (:data:`MAX_ARCHIVE_BYTES`). Entries are read by their
    exact name, never extracted."""

    def __init__(self, path: Path, max_bytes: int = MAX_SAMPLE_BYTES) -> None:
        self.name = str(path)
        self.sample_limit = max_bytes
        self.archive_limit = max_bytes * (MAX_ARCHIVE_BYTES // MAX_SAMPLE_BYTES)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _error(self.name, f"cannot read the file: {exc.strerror or exc}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise _error(
                self.name, "is not a regular file (a folder, device, FIFO or socket, or a link to one)"
            )
        self.file = os.fdopen(fd, "rb")
        entries = _declared_entries(self.file, info.st_size)
        if entries is not None and entries > MAX_ENTRIES:
            self.file.close()
            raise _error(self.name, f"the zip has {entries:,} entries; the limit is {MAX_ENTRIES:,}")
        try:
            self.zip = zipfile.ZipFile(self.file)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            self.file.close()
            raise _error(self.name, f"is not a readable .eval file (a zip): {exc}") from None
        infos = self.zip.infolist()
        if len(infos) > MAX_ENTRIES:
            self.close()
            raise _error(self.name, f"the zip has {len(infos):,} entries; the limit is {MAX_ENTRIES:,}")
        self.infos = {i.filename: i for i in infos}
        self.names = list(self.infos)
        self.total = 0
        self.sample = 0

    def __enter__(self) -> _Zip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.zip.close()
        self.file.close()

    def start_sample(self) -> None:
        self.sample = 0

    def json(self, entry: str) -> Any:
        data = self.read(entry)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _error(self.name, "the entry is not UTF-8 JSON", f"/{entry}") from None
        return _json(text, f"{self.name}/{entry}")

    def read(self, entry: str) -> bytes:
        info = self.infos[entry]
        limit = min(self.sample_limit - self.sample, self.archive_limit - self.total)
        if info.file_size > limit:
            raise self._too_large(entry, info.file_size)
        try:
            if info.compress_type == _ZSTD:
                data = self._zstd(info, limit)
            else:
                with self.zip.open(info) as stream:
                    data = stream.read(limit + 1)
        except ReaderError:
            raise
        except NotImplementedError as exc:
            raise _error(
                self.name, f"the entry uses a compression this reader lacks: {exc}", f"/{entry}"
            ) from None
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError) as exc:
            raise _error(self.name, f"the entry cannot be read: {exc}", f"/{entry}") from None
        if len(data) > limit:
            raise self._too_large(entry, None)
        self.sample += len(data)
        self.total += len(data)
        return data

    def _too_large(self, entry: str, declared: int | None) -> ReaderError:
        size = f"{declared:,} bytes" if declared is not None else "more than it declares"
        return _error(
            self.name,
            f"the entry uncompresses to {size}: past the limit of {_bytes(self.sample_limit)} per sample "
            f"and {_bytes(self.archive_limit)} per file (a damaged file or a zip bomb; "
            f"{RAISE_WITH} raises it)",
            f"/{entry}",
        )

    def _zstd(self, info: zipfile.ZipInfo, limit: int) -> bytes:
        """A zstd entry (zip method 93, which Python's zipfile reads only from 3.14)."""
        try:
            import zstandard
        except ImportError:
            raise _error(
                self.name,
                "the file's entries are zstd-compressed; install the zstandard package "
                "(pip install 'ctxmgmt[eval]') to read it",
            ) from None
        self.file.seek(info.header_offset)
        head = self.file.read(30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise _error(self.name, "the entry's local header is damaged", f"/{info.filename}")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        self.file.seek(info.header_offset + 30 + name_len + extra_len)
        raw = io.BytesIO(self.file.read(info.compress_size))
        try:
            with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                chunks: list[bytes] = []
                size = 0
                while size <= limit:
                    chunk = reader.read(min(1 << 20, limit + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
        except zstandard.ZstdError as exc:
            raise _error(self.name, f"the entry's zstd data is damaged: {exc}", f"/{info.filename}") from None
        return b"".join(chunks)


# -- Claude Code sessions ---------------------------------------------------------------
_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "attachment", "progress"})
"""Lines of a session linked by uuid."""
_CLAUDE_UNLINKED = frozenset({"summary", "file-history-snapshot", "queue-operation", "custom-title"})
"""Lines of a session without a uuid."""


def _claude_code_record(record: Any) -> bool:
    return isinstance(record, dict) and (
        record.get("type") in _CLAUDE_UNLINKED or (record.get("type") in _CLAUDE_TYPES and "uuid" in record)
    )


def _claude_code(name: str, records: list[tuple[int, Any]]) -> Conversation:
    """A Claude Code session: the chain of ``parentUuid`` links from the last message of the
    main thread back to the first (a "redo" leaves a branch: the last one is the session's;
    a compaction starts a new root whose ``logicalParentUuid`` leads on to the history
    before it, and the summary Claude Code wrote there is left out), sidechains (subagents)
    and meta messages left out, then Anthropic messages (one line per content block, merged
    into turns) converted by ctxmgmt's converter. A subagent's own file (every line a
    sidechain) is read as its conversation."""
    by_uuid: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] | None = None
    last_side: dict[str, Any] | None = None
    model: str | None = None
    for _, r in records:
        if isinstance(r.get("uuid"), str):
            by_uuid[r["uuid"]] = r
        if r.get("type") in ("user", "assistant") and isinstance(r.get("uuid"), str):
            if r.get("isSidechain"):
                last_side = r
            else:
                last = r
    main = last is not None
    last = last or last_side
    if last is None:
        raise _error(name, "the Claude Code session has no user or assistant message")
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    node: dict[str, Any] | None = last
    compactions = 0
    while node is not None and node["uuid"] not in seen:
        seen.add(node["uuid"])
        chain.append(node)
        parent = node.get("parentUuid")
        if parent is None and node.get("subtype") == "compact_boundary":
            parent = node.get("logicalParentUuid")
            compactions += 1
        node = by_uuid.get(parent) if isinstance(parent, str) else None
    chain.reverse()
    turns: list[dict[str, Any]] = []
    meta_skipped = 0
    for r in chain:
        message = r.get("message")
        if r.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        if r.get("isMeta") or r.get("isCompactSummary") or (main and r.get("isSidechain")):
            meta_skipped += 1
            continue
        role = message.get("role", r["type"])
        if role not in ("user", "assistant"):
            continue
        if (
            role == "assistant"
            and isinstance(message.get("model"), str)
            and message["model"] != "<synthetic>"
        ):
            model = message["model"]
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            continue
        blocks = [b for b in blocks if isinstance(b, dict)]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})
    if not turns:
        raise _error(name, "the Claude Code session has no conversation on its main thread")
    session = next((r.get("sessionId") for _, r in records if isinstance(r.get("sessionId"), str)), None)
    meta = {"meta_skipped": meta_skipped, "compactions": compactions}
    cid = f"{name}#{session or 'session'}"
    return _provider(name, cid, turns, None, (), model, meta, source="claude_code", fmt="anthropic")


def _anthropic_turns(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fresh Anthropic turns to repair, with only the blocks that are objects."""
    turns = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [b for b in content if isinstance(b, dict)]
        turns.append({"role": m.get("role"), "content": content})
    return turns


def _blocks(content: Any) -> list[Any]:
    """Anthropic content as blocks (text as one text block); [] for what is neither."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _repair_anthropic(turns: list[dict[str, Any]], repairs: dict[str, int]) -> list[dict[str, Any]]:
    """Anthropic turns a provider takes: a tool_result block answers a tool_use of the turn
    right before it (others are dropped: ``orphan_results``), a tool_use gets its result in
    the next turn (or is dropped: ``unanswered_calls``), blank text blocks go, and so do
    turns left empty (``empty_messages``) or an assistant turn first (``leading_assistant``);
    turns of one role in a row are merged. A turn whose content is not a block list is left
    for the check to name."""

    def blocks(turn: dict[str, Any] | None, role: str) -> list[dict[str, Any]]:
        ok = turn is not None and turn["role"] == role and isinstance(turn["content"], list)
        return turn["content"] if ok and turn is not None else []

    for i, turn in enumerate(turns):
        if turn["role"] != "user" or not isinstance(turn["content"], list):
            continue
        asked = {
            b.get("id")
            for b in blocks(turns[i - 1] if i else None, "assistant")
            if b.get("type") == "tool_use"
        }
        kept = [b for b in turn["content"] if b.get("type") != "tool_result" or b.get("tool_use_id") in asked]
        _tally(repairs, "orphan_results", len(turn["content"]) - len(kept))
        # the results first, as Anthropic asks; the turn's text after them
        turn["content"] = [b for b in kept if b.get("type") == "tool_result"] + [
            b for b in kept if b.get("type") != "tool_result"
        ]
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant" or not isinstance(turn["content"], list):
            continue
        nxt = turns[i + 1] if i + 1 < len(turns) else None
        got = {b.get("tool_use_id") for b in blocks(nxt, "user") if b.get("type") == "tool_result"}
        kept = [b for b in turn["content"] if b.get("type") != "tool_use" or b.get("id") in got]
        _tally(repairs, "unanswered_calls", len(turn["content"]) - len(kept))
        turn["content"] = kept
    out: list[dict[str, Any]] = []
    for turn in turns:
        content = turn["content"]
        if isinstance(content, str) and not content.strip():
            _tally(repairs, "empty_messages")
            continue
        if isinstance(content, list):
            content = [
                b for b in content if not (b.get("type") == "text" and not str(b.get("text") or "").strip())
            ]
            if all(b.get("type") in ("thinking", "redacted_thinking") for b in content):
                _tally(repairs, "empty_messages")
                continue
        if out and out[-1]["role"] == turn["role"] and _blocks(out[-1]["content"]) and _blocks(content):
            out[-1]["content"] = [*_blocks(out[-1]["content"]), *_blocks(content)]
        elif not out and turn["role"] == "assistant":
            _tally(repairs, "leading_assistant")
        else:
            out.append({"role": turn["role"], "content": content})
    return out


# -- execution records ------------------------------------------------------------------
def read_memories(source: str | Client, ids: Iterable[str] | None = None) -> Iterator[Conversation]:
    """The conversations agents had through ctxmgmt's runner, from a store (a database URL)
    or a server (a :class:`ctxmgmt.Client`): each memory's full original messages, with its
    agent's system prompt. ``ids`` are memory ids; without them, every memory of the store
    (a server needs ids)."""
    if isinstance(source, str):
        yield from _store_memories(source, ids)
        return
    if ids is None:
        raise ContextError([Problem("/ids", "name the memory ids to read from a server")])
    for memory_id in ids:
        messages: list[Any] = []
        while True:
            page = source.memory_messages(memory_id, from_=len(messages), size=100)
            batch = page.get("messages") or []
            messages.extend(batch)
            if not batch or len(messages) >= int(page.get("total", 0)):
                break
        yield _memory(memory_id, messages, None)


def _store_memories(url: str, ids: Iterable[str] | None) -> Iterator[Conversation]:
    from sqlalchemy import select

    from ..store import AgentStore, MemoryStore, connect
    from ..store.models import memories

    engine = connect(url)
    try:
        store, agents = MemoryStore(engine), AgentStore(engine)
        if ids is None:
            with engine.connect() as conn:
                rows = conn.execute(
                    select(memories.c.memory_id).order_by(memories.c.created_time, memories.c.memory_id)
                ).all()
            ids = [r.memory_id for r in rows]
        for memory_id in ids:
            agent_id = store.owner(memory_id)
            messages, _, _ = store.load(memory_id, agent_id)
            try:
                agent: Mapping[str, Any] | None = agents.get(agent_id)
            except LookupError:
                agent = None
            yield _memory(memory_id, messages, agent)
    finally:
        engine.dispose()


def _memory(memory_id: str, messages: list[Any], agent: Mapping[str, Any] | None) -> Conversation:
    system = agent.get("system_prompt") if agent else None
    cid = f"memory#{memory_id}"
    conv = _provider(cid, cid, messages, system if isinstance(system, str) else None, (), None, {})
    return Conversation(
        conv.id,
        "memory",
        conv.messages,
        conv.system_prompt,
        conv.tools,
        conv.model,
        {**conv.metadata, "format": conv.source, "agent": agent.get("name") if agent else None},
    )
