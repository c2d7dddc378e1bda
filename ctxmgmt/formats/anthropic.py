"""Anthropic Messages: ``system`` apart from the messages, content blocks, ``tool_use`` and
``tool_result``, thinking blocks with their signatures.

To the internal form, message by message:

- a user message's ``tool_result`` blocks become tool messages, in order, and its other
  blocks one user message after them (images and documents as image and file parts);
- an assistant message becomes one assistant message: its text as content, its ``tool_use``
  blocks as tool calls. Its thinking blocks ride along untouched in its origin: they are
  never edited, never counted as text and never shown to a summariser, and they go
  wherever their turn goes, removed only with it.

Back: a message whose internal messages all come back as they went is returned as it was,
the same object. Others are rebuilt from their internal messages and their origins' blocks;
within a rebuilt message, every block whose internal message no manager changed is the very
block that came in (one cut tool_result leaves the others byte-identical).

A mid-conversation system message (``{"role": "system"}`` in ``messages``, text only) becomes
an internal system message: kept by every manager, as the system prompt is. On the way back it
stays where it was; when a manager removed what surrounded it, it goes right before the next
assistant turn (or last), two that meet become one, so its placement stays one Anthropic takes.

Validity: the first message is a user message; a ``tool_result`` sits in the user message
right after the assistant message with its ``tool_use``, before any other block; every
``tool_use`` is answered there; a system message follows a user turn (or an assistant turn
that ends in a server tool's call), and is the last message or followed by an assistant turn.
Blocks of types this version does not know (Anthropic adds some every few months:
``tool_reference``, new server tools' results) pass as they came, counted by their size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ContextError, Problem
from ..history import History, items, scan
from ..tokens import AUDIO_OR_FILE_TOKENS
from ._common import (
    BASE64_CHARS_PER_TOKEN,
    ORIGIN,
    Grown,
    Origin,
    estimate_tokens,
    made,
    memo,
    origin_of,
    rough_size,
    unchanged,
)
from ._turns import task_index, turn_head

__all__ = [
    "NAME",
    "advance",
    "back",
    "check",
    "check_system",
    "request",
    "response_message",
    "rule",
    "system_text",
    "task_index",
    "to_internal",
    "turn_head",
]

NAME = "anthropic"
USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result", "container_upload"})
ASSISTANT_BLOCKS = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
RESULT_BLOCKS = frozenset({"text", "image", "document", "search_result", "tool_reference"})
_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""A block type's shape: a type this version does not know passes when it has it."""
_NOT_USER = ASSISTANT_BLOCKS - USER_BLOCKS
_NOT_ASSISTANT = USER_BLOCKS - ASSISTANT_BLOCKS
_CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
_FOREIGN = _CHAT_PARTS | {"input_text", "output_text", "input_image", "input_file"}
"""OpenAI's part types: a client that sends them has the wrong format, said so."""
_RESULT_REFUSED = (USER_BLOCKS | ASSISTANT_BLOCKS) - RESULT_BLOCKS
_MEMO = memo()


# -- validity ---------------------------------------------------------------------------
def check(messages: Sequence[Any], system: Any = None, *, partial_tail: bool = False) -> list[Problem]:
    """Everything Anthropic's Messages API would reject in ``system`` and ``messages``."""
    problems: list[Problem] = check_system(system)
    pending = _check_messages(messages, 0, {}, problems)
    if pending and not partial_tail:
        _unanswered(pending, problems)
    return problems


def _check_messages(
    messages: Sequence[Any], start: int, pending: dict[str, int], problems: list[Problem]
) -> dict[str, int]:
    """Check the messages from ``start`` on, ``pending`` being the tool_use ids asked before it
    and not answered yet (id -> index of the assistant message asking); returns those at the
    end."""
    for i in range(start, len(messages)):
        m = messages[i]
        where = f"/messages/{i}"
        if not isinstance(m, dict):
            problems.append(Problem(where, "a message must be an object"))
            continue
        role = m.get("role")
        if role == "system":
            _check_system_message(messages, i, problems)
            continue
        if role == "developer":
            problems.append(
                Problem(f"{where}/role", "Anthropic has no developer messages; give it as the system prompt")
            )
            continue
        if role == "tool":
            problems.append(
                Problem(
                    f"{where}/role",
                    "'role: tool' is OpenAI chat's format; in Anthropic's, tool results are "
                    "tool_result blocks in the user message after the tool_use",
                )
            )
            continue
        if role not in ("user", "assistant"):
            problems.append(Problem(f"{where}/role", "role must be user or assistant"))
            continue
        if i == 0 and role != "user":
            problems.append(Problem(f"{where}/role", "the first message must be a user message"))
        if role == "user" and i > 0 and _role_of(messages[i - 1]) == "system":
            problems.append(
                Problem(
                    f"/messages/{i - 1}",
                    "a system message must be the last message or be followed by an assistant turn",
                )
            )
        answered = _check_content(m.get("content"), role, where, problems, i == len(messages) - 1)
        if role == "assistant":
            if pending:
                _unanswered(pending, problems)
            ids = _tool_use_ids(m)
            if len(set(ids)) < len(ids):
                problems.append(
                    Problem(f"{where}/content", "two tool_use blocks share an id; each needs its own")
                )
            pending = dict.fromkeys(ids, i)
            continue
        for call_id, j in answered:
            if call_id in pending:
                del pending[call_id]
            else:
                problems.append(
                    Problem(
                        f"{where}/content/{j}/tool_use_id",
                        f"tool_result {call_id!r} answers no tool_use of the assistant message "
                        "right before it",
                    )
                )
        if pending:
            _unanswered(pending, problems)
    return pending


def _unanswered(pending: dict[str, int], problems: list[Problem]) -> None:
    for call_id, asked in pending.items():
        problems.append(
            Problem(
                f"/messages/{asked}/content",
                f"tool_use {call_id!r} has no tool_result in the user message right after it",
            )
        )
    pending.clear()


def _role_of(m: Any) -> Any:
    return m.get("role") if isinstance(m, dict) else None


def _check_system_message(messages: Sequence[Any], i: int, problems: list[Problem]) -> None:
    """A mid-conversation system message: text only, after a user turn (or an assistant turn
    that ends in a server tool's call), never next to another one."""
    where = f"/messages/{i}"
    before = messages[i - 1] if i > 0 else None
    if before is None:
        problems.append(
            Problem(f"{where}/role", "the first message must be a user message; give it as the system prompt")
        )
    elif _role_of(before) == "system":
        problems.append(Problem(f"{where}/role", "two system messages may not be next to each other"))
    elif not (_role_of(before) == "user" or _ends_in_server_call(before)):
        problems.append(
            Problem(
                f"{where}/role",
                "a system message must follow a user message (or an assistant turn that ends in "
                "a server tool's call)",
            )
        )
    content = messages[i].get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        problems.append(
            Problem(f"{where}/content", "content must be a string or a non-empty list of text blocks")
        )
        return
    for j, block in enumerate(content):
        if not (
            isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        ):
            problems.append(Problem(f"{where}/content/{j}", "a system message holds text blocks only"))


def _ends_in_server_call(m: Any) -> bool:
    content = m.get("content") if isinstance(m, dict) and m.get("role") == "assistant" else None
    return (
        isinstance(content, list)
        and bool(content)
        and isinstance(content[-1], dict)
        and (content[-1].get("type") == "server_tool_use")
    )


def check_system(system: Any) -> list[Problem]:
    """What the Messages API would reject in ``system``."""
    if system is None or isinstance(system, str):
        return []
    if not isinstance(system, list):
        return [Problem("/system_prompt", "must be a string or a list of text blocks")]
    return [
        Problem(f"/system_prompt/{j}", "a system block must be {type: text, text: <string>}")
        for j, b in enumerate(system)
        if not (isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    ]


def _check_content(
    content: Any, role: str, where: str, problems: list[Problem], last: bool = False
) -> list[tuple[str, int]]:
    """Check one message's content; returns the (tool_use_id, block index) of its tool results.
    An empty list is the final assistant message's only (a prefill of nothing, as the API
    allows it)."""
    if isinstance(content, str) or (content == [] and last and role == "assistant"):
        return []
    if not isinstance(content, list) or not content:
        problems.append(
            Problem(
                f"{where}/content",
                "content must be a string or a non-empty list of blocks (an empty list only in a "
                "final assistant message)",
            )
        )
        return []
    allowed = USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS
    refused = _NOT_USER if role == "user" else _NOT_ASSISTANT
    results: list[tuple[str, int]] = []
    others = False
    for j, block in enumerate(content):
        at = f"{where}/content/{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            problems.append(Problem(at, "a content block needs a string type"))
            continue
        if not _takes(kind, allowed, refused):
            problems.append(Problem(f"{at}/type", _not_allowed(kind, role, allowed)))
            continue
        if kind == "text" and not isinstance(block.get("text"), str):
            problems.append(Problem(f"{at}/text", "a text block needs a string text"))
        elif kind == "thinking" and not (
            isinstance(block.get("thinking"), str) and isinstance(block.get("signature"), str)
        ):
            problems.append(
                Problem(at, "a thinking block needs its thinking and signature strings, unedited")
            )
        elif kind == "redacted_thinking" and not isinstance(block.get("data"), str):
            problems.append(Problem(f"{at}/data", "a redacted_thinking block needs its data string"))
        elif kind == "tool_use" and not (
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        ):
            problems.append(Problem(at, "a tool_use block needs id, name and input (an object)"))
        elif kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                problems.append(Problem(f"{at}/tool_use_id", "a tool_result block needs a tool_use_id"))
                continue
            if others:
                problems.append(
                    Problem(at, "tool_result blocks must come before any other block of the user message")
                )
            _check_result_content(block.get("content"), at, problems)
            if "is_error" in block and not isinstance(block["is_error"], bool):
                problems.append(Problem(f"{at}/is_error", "is_error must be true or false"))
            results.append((block["tool_use_id"], j))
            continue
        others = True
    return results


def _check_result_content(content: Any, at: str, problems: list[Problem]) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        problems.append(
            Problem(f"{at}/content", "a tool_result's content must be a string or a list of blocks")
        )
        return
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or not _takes(kind, RESULT_BLOCKS, _RESULT_REFUSED):
            problems.append(
                Problem(
                    f"{at}/content/{k}/type",
                    f"a tool_result may hold {', '.join(sorted(RESULT_BLOCKS))} blocks (got {kind!r})",
                )
            )
        elif kind == "text" and not isinstance(part.get("text"), str):
            problems.append(Problem(f"{at}/content/{k}/text", "a text block needs a string text"))


def _takes(kind: str, allowed: frozenset[str], refused: frozenset[str]) -> bool:
    """Whether a place takes a block of ``kind``: its own blocks, and a type this version does
    not know (of a type's shape), never a block known to go elsewhere or OpenAI's."""
    return kind in allowed or not (kind in refused or kind in _FOREIGN or not _KIND.fullmatch(kind))


def _not_allowed(kind: str, role: str, allowed: frozenset[str]) -> str:
    if kind in _CHAT_PARTS:  # a str: the callers checked
        return f"{kind!r} is OpenAI chat's format; Anthropic's blocks are {', '.join(sorted(allowed))}"
    if kind in _FOREIGN:
        return f"{kind!r} is OpenAI Responses' format; Anthropic's blocks are {', '.join(sorted(allowed))}"
    return f"a {role} message may not hold a {kind!r} block ({', '.join(sorted(allowed))})"


def _tool_use_ids(m: Mapping[str, Any]) -> list[str]:
    content = m.get("content")
    if not isinstance(content, list):
        return []
    return [
        b["id"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    ]


def rule(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """What Anthropic would reject in an internal list that the chat rules allow: no user
    message first, a developer message, or a system message that no placement makes valid (a
    History remembers where those are). :func:`back` moves a system message that a manager
    left before a user turn to just before the next assistant turn, and merges those that
    meet, so each run of them is judged once, by what comes right before and after it."""
    if not messages:
        return "no message is left; Anthropic needs at least one user message"
    found = scan(messages, "system-roles", _system_role)
    if not found:
        if messages[0].get("role") != "user":
            return "the first message is not a user message, as Anthropic requires"
        return None
    msgs = items(messages)  # a History's own list: indexing it is a Python call
    n = len(msgs)
    first = 0
    while first < len(found) and found[first] == first:  # a system message goes after a user turn
        first += 1
    if first == n or msgs[first].get("role") != "user":
        return "the first message is not a user message, as Anthropic requires"
    k = 0
    while k < len(found):
        j = k
        while j + 1 < len(found) and found[j + 1] == found[j] + 1:
            j += 1
        if any(msgs[i].get("role") == "developer" for i in found[k : j + 1]):
            return "a developer message, which Anthropic's messages cannot hold"
        if not _run_placeable(msgs, found[k], found[j]):
            return "a system message after an assistant turn with no user turn after it"
        k = j + 1
    return None


def _run_placeable(msgs: Sequence[Mapping[str, Any]], start: int, end: int) -> bool:
    """Whether the run of system messages ``start..end`` has a user turn to follow where
    :func:`back` puts it: the one right after it, else the turn right before it."""
    if end + 1 < len(msgs) and msgs[end + 1].get("role") in ("user", "tool"):
        return True  # it goes after this user turn
    if start == 0:
        return False
    before = msgs[start - 1]
    if before.get("role") != "assistant":
        return True
    origin = origin_of(before)
    return origin is not None and _ends_in_server_call(origin.message)


def _system_role(m: Any) -> bool:
    return m.get("role") in ("system", "developer")


def system_text(system: Any) -> str | None:
    """The system prompt's text, for counting and for managers."""
    if isinstance(system, list):
        return "\n".join(b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    return system if isinstance(system, str) else None


# -- to the internal form ---------------------------------------------------------------
def to_internal(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The internal messages of a valid Anthropic list (each message converted once, then
    memoised by identity: messages are immutable values)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        out.extend(_converted(m)[0])
    return out


def _converted(m: Any) -> tuple[tuple[dict[str, Any], ...], int]:
    """One message's internal messages, and about how many bytes it keeps alive."""
    hit = _MEMO.get(id(m), m)
    if hit is None:
        hit = (_convert(m), rough_size(m))
        for internal in hit[0]:  # the token counter sizes its memo by it, without a walk
            internal[ORIGIN].size = hit[1]
        _MEMO.put(id(m), m, hit, hit[1])
    return hit


def advance(messages: Sequence[Any], grown: Grown | None) -> Grown | None:
    """What is known of ``messages`` that start with ``grown``'s (None: nothing is known):
    only the messages after them are checked and converted. None when those break a rule
    (the full check names the problems)."""
    start = grown.k if grown is not None else 0
    if 0 < start < len(messages) and _empty_final(messages[start - 1]):
        return None  # a final assistant message of no content is one no longer: the check says so
    problems: list[Problem] = []
    pending = _check_messages(
        messages, start, dict(grown.pending) if grown and grown.pending else {}, problems
    )
    if problems:
        return None
    new: list[dict[str, Any]] = []
    size = grown.bytes if grown is not None else 0
    for i in range(start, len(messages)):
        internal, bytes_ = _converted(messages[i])
        new.extend(internal)
        size += 2 * bytes_
    inner = grown.inner.append(*new) if grown is not None else History(new)
    n = len(messages)
    return Grown(n, inner, n, len(inner), pending, size)


def _empty_final(m: Any) -> bool:
    """An assistant message whose content is an empty list: valid as the final message only."""
    return isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") == []


def _convert(m: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    out = _internal(m)
    for x in out:
        made(x[ORIGIN], out)
    return out


def _internal(m: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    role, content = m["role"], m["content"]
    if isinstance(content, str):
        return ({"role": role, "content": content, ORIGIN: Origin(m)},)
    if role == "assistant":
        return (_assistant(m, content),)
    if role == "system":  # mid-conversation: text blocks only, kept by every manager
        return ({"role": "system", "content": _joined(content), ORIGIN: Origin(m, blocks=content)},)
    out: list[dict[str, Any]] = []
    others: list[Any] = []
    for block in content:
        if block.get("type") == "tool_result":
            out.append(_tool(m, block))
        else:
            others.append(block)
    if others:
        parts, counted = _parts(others)
        out.append({"role": "user", "content": parts, ORIGIN: Origin(m, blocks=others, plain=counted)})
    return tuple(out)


def _assistant(m: Mapping[str, Any], content: list[Any]) -> dict[str, Any]:
    texts = [b["text"] for b in content if b.get("type") == "text"]
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)},
        }
        for b in content
        if b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {
        "role": "assistant",
        "content": "\n".join(texts) if texts else (None if calls else ""),
    }
    if calls:
        out["tool_calls"] = calls
    # Server tools' calls and results are counted, never edited; thinking is neither: the
    # API does not count earlier turns' thinking, and it is never text a manager reads.
    server = [b for b in content if b.get("type") not in _OWN_ASSISTANT_BLOCKS]
    counted = {"source": server, "counted_tokens": estimate_tokens(server)} if server else None
    out[ORIGIN] = Origin(m, blocks=content, plain=counted)
    return out


_OWN_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})


def _tool(m: Mapping[str, Any], block: Mapping[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    counted: dict[str, Any] = {}
    if content is None:
        content = ""
    elif isinstance(content, list):
        if all(b.get("type") == "text" for b in content):
            content = _joined(content)
        else:
            content, counted = _parts(content)
    if block.get("is_error"):
        counted["is_error"] = True
    return {
        "role": "tool",
        "tool_call_id": block["tool_use_id"],
        "content": content,
        ORIGIN: Origin(m, block=block, plain=counted),
    }


def _joined(blocks: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(b["text"] for b in blocks)


def _parts(blocks: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Chat content parts standing for Anthropic blocks, and what the provider counts besides:
    text as text; an image as an image; a document or another block as a file, with its text
    counted (a text document's own string, an estimate for a PDF or a search result). The
    blocks themselves stay referenced, not copied, under ``source``: an archive keeps them."""
    parts: list[dict[str, Any]] = []
    texts: list[str] = []
    estimate = 0
    others: list[Mapping[str, Any]] = []
    for b in blocks:
        kind = b.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": b["text"]})
            continue
        others.append(b)
        given = b.get("source")
        source: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        if kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": "anthropic:image"}})
            continue
        data = source.get("data")
        if source.get("type") == "text" and isinstance(data, str):
            texts.append(data)
        elif isinstance(data, str):  # its file part counts AUDIO_OR_FILE_TOKENS: at least that, in all
            estimate += max(0, len(data) // BASE64_CHARS_PER_TOKEN - AUDIO_OR_FILE_TOKENS)
        else:
            estimate += estimate_tokens(b)
        title = b.get("title") if isinstance(b.get("title"), str) else str(kind)
        parts.append({"type": "file", "file": {"filename": title}})
    counted: dict[str, Any] = {}
    if others:
        counted["source"] = others
    if texts:
        counted["counted_text"] = texts[0] if len(texts) == 1 else "\n".join(texts)
    if estimate:
        counted["counted_tokens"] = estimate
    return parts, counted


# -- back -------------------------------------------------------------------------------
def back(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The Anthropic messages for an internal list: a message that comes back as the
    conversion made it (see ``Origin.made``) is its source again, the very object."""
    out: list[Any] = []
    systems = bool(scan(messages, "system-roles", _system_role))
    messages = items(messages)
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        origin = m.get(ORIGIN)
        # The common case inline (a provider message made of this one message, as it was
        # made, whose turn gathers nothing after it): one dict lookup and an id. It is
        # _unchanged_run's k == 1 case, inlined for the firing path (a call per kept message
        # cost 0.5 ms at 10,000): keep the two in step.
        if (
            isinstance(origin, Origin)
            and len(origin.made) == 1
            and origin.made[0] == id(m)
            and (m.get("role") != "tool" or i + 1 == n or messages[i + 1].get("role") != "tool")
        ):
            out.append(origin.message)  # the very message
            i += 1
            continue
        k = _unchanged_run(messages, i)
        if k:
            out.append(origin_of(m).message)  # type: ignore[union-attr]  # the very message
            i += k
            continue
        role = m.get("role")
        if role in ("assistant", "system"):
            turn = [m]
            i += 1
        elif role in ("tool", "user"):
            turn = []
            while i < n and messages[i].get("role") == "tool":
                turn.append(messages[i])
                i += 1
            if (
                i < n
                and messages[i].get("role") == "user"
                and (not turn or _same_source(turn[-1], messages[i]))
            ):
                turn.append(messages[i])
                i += 1
        else:
            raise ContextError(
                [Problem(f"/messages/{i}/role", f"Anthropic's messages cannot hold a {role} message")]
            )
        message = _message(turn)
        if turn[0].get("role") == "user" and out and _beside_results(turn[0], message, out[-1]):
            out[-1] = _with_text(out[-1], message)
        else:
            out.append(message)
    return _placed(out) if systems else out


def _beside_results(m: Mapping[str, Any], message: Any, before: Any) -> bool:
    """Whether a user message left of a message that held tool results beside its text (a
    step removed its results, an agent's reminder stayed) follows a message of other results:
    it goes into that message, where it sat, so that the turn goes on (a user message of text
    alone opens a new turn, whose first assistant message must open with thinking when
    thinking is on; Anthropic reads consecutive user messages as one, but the request is
    unambiguous so)."""
    origin = origin_of(m)
    if origin is None or origin.message is message or not _holds_results(origin.message):
        return False
    return isinstance(before, Mapping) and before.get("role") == "user" and _holds_results(before)


def _holds_results(message: Any) -> bool:
    content = message.get("content") if isinstance(message, Mapping) else None
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
    )


def _with_text(results: Mapping[str, Any], text: Mapping[str, Any]) -> dict[str, Any]:
    """A message of tool results with a user message's blocks after them (a new dict: the
    client's own message is never changed in place)."""
    content = text.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return {**results, "content": [*results["content"], *blocks]}


def _placed(out: list[Any]) -> list[Any]:
    """Each system message where Anthropic takes it: as it was, unless a manager removed what
    followed it; then right before the next assistant turn (or last), two that meet as one."""
    if all(
        m.get("role") != "system"
        or (
            (i + 1 == len(out) or out[i + 1].get("role") == "assistant")
            and (i == 0 or out[i - 1].get("role") != "system")
        )
        for i, m in enumerate(out)
    ):
        return out  # every one where it was: the very list
    placed: list[Any] = []
    held: list[Any] = []  # system messages waiting for the next assistant turn
    for m in out:
        role = m.get("role")
        if role == "system":
            held.append(m)
            continue
        if held and role == "assistant":
            placed.append(_merged(held))
            held = []
        placed.append(m)
    if held:
        placed.append(_merged(held))
    return placed


def _merged(held: list[Any]) -> Any:
    """One system message for several that met: their text blocks in order."""
    if len(held) == 1:
        return held[0]
    merged: dict[str, Any] = {}
    blocks: list[Any] = []
    for m in held:
        merged.update((k, v) for k, v in m.items() if k not in ("role", "content"))
        content = m.get("content")
        blocks.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return {"role": "system", "content": blocks, **merged}


def _unchanged_run(messages: Sequence[Mapping[str, Any]], i: int) -> int:
    """How many internal messages from ``i`` on are all those made of one provider message, as
    they were made, and make a turn of their own (0 when they do not): the common case of the
    way back, with no turn to gather."""
    m = messages[i]
    origin = m.get(ORIGIN)
    if not isinstance(origin, Origin) or not origin.made or origin.made[0] != id(m):
        return 0
    k = len(origin.made)
    if i + k > len(messages) or any(id(messages[i + j]) != origin.made[j] for j in range(1, k)):
        return 0
    last = messages[i + k - 1].get("role")
    if last == "tool" and i + k < len(messages) and messages[i + k].get("role") == "tool":
        return 0  # a turn would gather the results after it
    return k


def _same_source(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    oa, ob = origin_of(a), origin_of(b)
    return oa is not None and ob is not None and oa.message is ob.message


def _message(turn: list[Mapping[str, Any]]) -> Any:
    first = origin_of(turn[0])
    if first is not None and first.made == tuple(id(m) for m in turn):
        return first.message  # unchanged: the very message that came in
    if turn[0].get("role") == "assistant":
        return _rebuild_assistant(turn[0])
    if turn[0].get("role") == "system":
        return {"role": "system", "content": _rebuild_blocks(turn[0])}
    blocks: list[Any] = []
    for m in turn:
        origin = unchanged(m)
        if m.get("role") == "tool":
            # A block no manager changed is the very block that came in (a message with one
            # cut result keeps its other results byte for byte, list content and all).
            blocks.append(
                origin.block if origin is not None and origin.block is not None else _rebuild_result(m)
            )
        else:
            blocks.extend(origin.blocks if origin is not None else _rebuild_blocks(m))
    if (
        len(blocks) == 1
        and blocks[0].get("type") == "text"
        and turn[0].get("role") == "user"
        and all(origin_of(m) is None for m in turn)
    ):
        return {"role": "user", "content": blocks[0]["text"]}  # a new plain message (a summary)
    return {"role": "user", "content": blocks}


def _rebuild_result(m: Mapping[str, Any]) -> dict[str, Any]:
    origin = origin_of(m)
    block: dict[str, Any] = dict(origin.block) if origin is not None and origin.block is not None else {}
    block["type"] = "tool_result"
    block["tool_use_id"] = m["tool_call_id"]
    content = m.get("content")
    if isinstance(content, list):
        was = block.get("content")
        original: list[Any] = was if isinstance(was, list) else []
        block["content"] = _blocks_of(content, original)
    elif isinstance(block.get("content"), list):  # text content given as blocks stays blocks
        block["content"] = [{"type": "text", "text": content if content is not None else ""}]
    else:
        block["content"] = content if content is not None else ""
    if origin is not None and origin.get("is_error"):
        block["is_error"] = True
    return block


def _rebuild_blocks(m: Mapping[str, Any]) -> list[Any]:
    origin = origin_of(m)
    content = m.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return _blocks_of(content or [], origin.blocks if origin is not None else ())


def _blocks_of(parts: Sequence[Any], originals: Sequence[Any]) -> list[Any]:
    """Anthropic blocks for chat parts, in order: a text part as the original text block it
    stood for when its text is unchanged (its cache_control kept), or a new one; the other
    parts as the original non-text blocks they stood for."""
    texts = iter([b for b in originals if b.get("type") == "text"])
    rest = iter([b for b in originals if b.get("type") != "text"])
    out: list[Any] = []
    for p in parts:
        if isinstance(p, dict) and p.get("type") == "text":
            original = next(texts, None)
            text = p.get("text", "")
            out.append(
                original
                if original is not None and original.get("text") == text
                else {"type": "text", "text": text}
            )
        else:
            original = next(rest, None)
            if original is not None:
                out.append(original)
    return out


def _rebuild_assistant(m: Mapping[str, Any]) -> dict[str, Any]:
    """An edited assistant message: its thinking and other blocks as they were, its text and
    tool calls as they are now."""
    origin = origin_of(m)
    originals: Sequence[Any] = origin.blocks if origin is not None else ()
    text = m.get("content")
    text = (
        text
        if isinstance(text, str)
        else "\n".join(
            p.get("text", "") for p in text or () if isinstance(p, dict) and p.get("type") == "text"
        )
    )
    calls = {c["id"]: c for c in m.get("tool_calls") or ()}
    original_text = "\n".join(b["text"] for b in originals if b.get("type") == "text")
    blocks: list[Any] = []
    text_done = False
    for b in originals:
        kind = b.get("type")
        if kind == "text":
            if not text_done and text:
                if text == original_text:
                    blocks.extend(x for x in originals if x.get("type") == "text")
                else:
                    blocks.append({"type": "text", "text": text})
            text_done = True
        elif kind == "tool_use":
            call = calls.pop(b["id"], None)
            if call is not None:
                blocks.append(_tool_use(call, b))
        else:
            blocks.append(b)  # thinking and server tool blocks: never edited
    if text and not text_done:
        at = next((k for k, b in enumerate(blocks) if b.get("type") == "tool_use"), len(blocks))
        blocks.insert(at, {"type": "text", "text": text})
    blocks.extend(_tool_use(c, None) for c in calls.values())
    if not blocks:
        return {"role": "assistant", "content": text or ""}
    return {"role": "assistant", "content": blocks}


def _tool_use(call: Mapping[str, Any], original: Mapping[str, Any] | None) -> dict[str, Any]:
    fn = call.get("function") or {}
    arguments = fn.get("arguments", "{}")
    if original is not None and arguments == json.dumps(original.get("input"), ensure_ascii=False):
        return original  # type: ignore[return-value]  # unchanged: the block as it came
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    if not isinstance(value, dict):
        value = {"arguments": arguments}  # edited into something that is not an object: kept as text
    out = dict(original) if original is not None else {"type": "tool_use", "id": call["id"]}
    out.update(name=fn.get("name", out.get("name")), input=value)
    return out


# -- requests from the internal form -------------------------------------------------------
MAX_BREAKPOINTS = 4
"""Anthropic accepts at most four ``cache_control`` breakpoints per request."""
_EPHEMERAL = {"type": "ephemeral"}


def request(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    *,
    breakpoints: bool = True,
    stable: int | None = None,
) -> dict[str, Any]:
    """A Messages API body (``system``, ``messages``, ``tools``) for a chat-form request: system
    and developer messages become ``system``, tool calls ``tool_use`` blocks, a call's results
    one user message of ``tool_result`` blocks (with a user message that follows them).

    With ``breakpoints``, ``cache_control`` marks the end of the stable prefix: the last tool,
    the system prompt, the message at ``stable`` (the summary) and the last message, so that
    the next request reads all of it from the cache; never more than four."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    stable_block: dict[str, Any] | None = None  # the last block of the message at `stable`
    for i, m in enumerate(messages):
        role = m.get("role")
        if role in ("system", "developer"):
            text = _text(m.get("content"))
            if text:
                system.append({"type": "text", "text": text})
            continue
        if role == "tool":
            content = m.get("content")
            parts = _chat_blocks(content) if isinstance(content, list) else None
            block = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id")),
                # Text, or its blocks when it has images too.
                "content": parts if parts and any(b["type"] != "text" for b in parts) else _text(content),
            }
            if out and out[-1]["role"] == "user" and _only_results(out[-1]["content"]):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif role == "assistant":
            blocks = _chat_blocks(m.get("content"))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                try:
                    value = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    value = None
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": str(fn.get("name")),
                        "input": value if isinstance(value, dict) else {"arguments": fn.get("arguments")},
                    }
                )
            _turn(out, "assistant", blocks or [{"type": "text", "text": "(no text)"}])
        else:  # consecutive user messages are one turn; tool results go first in theirs
            _turn(out, "user", _chat_blocks(m.get("content")) or [{"type": "text", "text": "(empty)"}])
        if stable is not None and i == stable:
            stable_block = out[-1]["content"][-1]
    body: dict[str, Any] = {"messages": out}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [_tool_schema(t) for t in tools]
    if breakpoints:
        marks: list[dict[str, Any]] = [body["tools"][-1]] if tools else []
        if system:
            marks.append(system[-1])
        for mark in (stable_block, out[-1]["content"][-1] if out else None):
            if mark is not None and all(mark is not b for b in marks):
                marks.append(mark)
        for mark in marks[:MAX_BREAKPOINTS]:
            mark["cache_control"] = dict(_EPHEMERAL)
    return body


def _turn(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add blocks as a turn of ``role``, to the previous turn when it has that role."""
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def _only_results(content: list[dict[str, Any]]) -> bool:
    return bool(content) and all(b.get("type") == "tool_result" for b in content)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else str(content)


def _chat_blocks(content: Any) -> list[dict[str, Any]]:
    """Anthropic blocks for chat content: text, and images given as data URLs or URLs."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str) and part["text"]:
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                blocks.append(
                    {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
                )
            elif url.startswith(("http://", "https://")):
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
    return blocks


def _tool_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as an Anthropic tool (one given in Anthropic's shape as it is)."""
    fn = schema.get("function")
    if not isinstance(fn, Mapping):
        return dict(schema)
    out: dict[str, Any] = {
        "name": fn.get("name"),
        "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
    }
    if fn.get("description"):
        out["description"] = fn["description"]
    return out


def response_message(data: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message of a Messages API answer, in chat form: its text blocks joined,
    its ``tool_use`` blocks as tool calls (thinking blocks are not part of the chat form).
    The answer is one the reply validator (``ctxmgmt._reply``) has checked."""
    blocks = data["content"]
    if not isinstance(blocks, list):
        raise TypeError("content is not a list")
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    calls = [
        {
            "id": str(b.get("id")),
            "type": "function",
            "function": {"name": str(b.get("name")), "arguments": json.dumps(b.get("input") or {})},
        }
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out
