"""OpenAI Responses input items: ``message``, ``function_call``, ``function_call_output``,
``reasoning``, and every other call with its output (``custom_tool_call``, ``computer_call``,
``local_shell_call``, ...: an item ``*_call`` with a ``call_id``, answered by ``*_call_output``).

To the internal form: a run of calls becomes one assistant message with those tool calls
(parallel calls stay one group), an output a tool message, a message item a message of its
role. A ``reasoning`` item rides along in the origin of the internal message made from the
item after it, so the two are kept or removed together, and never shown to a summariser.
Items that carry their own result (``web_search_call``, ``mcp_call`` and the like) and other
item types are counted, kept or removed whole, never edited: with the model's items of the
same response after them (its answer, its calls), as the API wants one response's items
together with their reasoning; alone, as assistant messages with no text of their own.

Back: an internal message that comes back as it went is its items again, the same objects;
an edited one keeps its reasoning and the fields of its items, with the new text.

Validity: each call has exactly one output after it, with only other outputs of its group
in between; a ``reasoning`` item is followed by the model's item it reasoned about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import Problem
from ..history import History, starts_with
from ._common import (
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

__all__ = ["NAME", "advance", "back", "check", "check_system", "system_text", "to_internal"]

NAME = "openai_responses"
CALL_INPUTS = {"function_call": "arguments", "custom_tool_call": "input"}
"""Call types whose input is a text a manager may read, and the field holding it."""
ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = frozenset({"input_text", "output_text", "refusal"})
PARTS = frozenset({*TEXT_PARTS, "input_image", "input_file", "input_audio"})
_MEMO = memo()


# -- validity ---------------------------------------------------------------------------
def check(items: Sequence[Any], system: Any = None, *, partial_tail: bool = False) -> list[Problem]:
    """Everything the Responses API would reject in a list of input items."""
    problems = check_system(system)
    _check_items(items, 0, problems)
    if problems:
        return problems  # pairs are checked on well-formed items only
    pending: dict[str, int] = {}  # call_id -> index, for the newest turn's calls
    at = 0
    for group, classes in _classed_groups(items):
        _check_group(group, classes, at, pending, problems)
        at += len(group)
    if not partial_tail:
        _unanswered(pending, problems)
    return problems


def check_system(system: Any) -> list[Problem]:
    """What the Responses API would reject in the instructions."""
    if system is not None and not isinstance(system, str):
        return [Problem("/system_prompt", "must be a string (Responses' instructions)")]
    return []


def _check_items(items: Sequence[Any], start: int, problems: list[Problem]) -> None:
    """Check each item from ``start`` on by itself."""
    for i in range(start, len(items)):
        item = items[i]
        where = f"/messages/{i}"
        kind = _kind(item)
        if kind is None:
            problems.append(_bad_item(item, where))
        elif kind in CALL_INPUTS:
            field = CALL_INPUTS[kind]
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", field)):
                problems.append(Problem(where, f"a {kind} needs call_id, name and {field} (strings)"))
        elif kind.endswith("_output") and ("call_id" in item or "id" in item):
            if answers(item) is None and _class(item) != "hosted":  # a server's search answers none
                problems.append(Problem(f"{where}/call_id", f"a {kind} needs a call_id string"))
            output = item.get("output")
            if kind not in _PART_OUTPUTS:
                pass  # its own structure (a shell's stdout and stderr, a screenshot): passed on as it is
            elif isinstance(output, list):
                _check_parts(output, f"{where}/output", "input", problems)
            elif not isinstance(output, str):
                problems.append(Problem(f"{where}/output", "output must be a string or a list of parts"))
        elif kind == "message":
            _check_message(item, where, problems)


_PART_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
"""The outputs whose list is content parts; another's list is its own structure (a
``shell_call_output``'s stdout, stderr and outcome of each command)."""


def _text_output(item: Mapping[str, Any]) -> bool:
    """Whether an output is text a manager may edit: a string, or content parts."""
    output = item.get("output")
    return isinstance(output, str) or (isinstance(output, list) and item.get("type") in _PART_OUTPUTS)


def _check_group(
    group: Sequence[Any],
    classes: Sequence[str],
    first: int,
    pending: dict[str, int],
    problems: list[Problem],
) -> None:
    """Check the pairs of one group of well-formed items (at index ``first``; ``classes``
    their :func:`_class`), ``pending`` being the calls of the turn before it that are not
    answered yet (call_id -> index)."""
    if len(group) == 1 and classes[0] == "message":  # the commonest group: nothing to pair
        _unanswered(pending, problems)
        return
    main = [(i, x, c) for i, (x, c) in enumerate(zip(group, classes, strict=True), first) if c != "reasoning"]
    if len(main) < len(group) and (not main or main[0][2] in ("output", "message")):
        problems.append(
            Problem(
                f"/messages/{first}",
                "a reasoning item must be followed by the model's item it reasoned about",
            )
        )
    if main and main[0][2] == "output":
        i, x, _ = main[0]
        if pending.pop(answers(x) or "", None) is None:
            problems.append(
                Problem(
                    f"/messages/{i}/call_id",
                    f"{_kind(x)} {answers(x)!r} answers no call of the turn right before it",
                )
            )
        return
    _unanswered(pending, problems)
    for i, x, c in main:
        if c == "call":
            if x["call_id"] in pending:
                problems.append(
                    Problem(
                        f"/messages/{i}/call_id",
                        f"two calls of one turn share the call_id {x['call_id']!r}",
                    )
                )
            pending[x["call_id"]] = i


def _kind(item: Any) -> str | None:
    """The item's type ('message' for an easy input message), or None when it is not an item."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message" if "tool_calls" not in item and item.get("role") != "tool" else None
    return kind if isinstance(kind, str) and kind else None


_HOSTED_KINDS = frozenset(("mcp_list_tools", "mcp_approval_request"))
"""The model's items with their own result that are not named ``*_call``."""


def _class(item: Any) -> str:
    """What an item is to the grouping and the pairs (each item's told once)."""
    # reasoning; call (``*_call`` with a call_id, which an output answers); hosted (the
    # model's item with its own result, which no output answers: a web or file search, an MCP
    # call, an image generation, the MCP tools listed, an approval asked, a tool search the
    # server ran and what it found); answer (the model's message); message (another's);
    # output (``*_output`` with the call id it answers); reference (an item_reference); other
    # (any other item); bad (no item).
    kind = _kind(item)
    if kind is None:
        return "bad"
    if kind == "message":
        return "answer" if item.get("role") == "assistant" else "message"
    if kind.endswith("_call"):
        return "call" if isinstance(item.get("call_id"), str) else "hosted"
    if kind.endswith("_output"):
        if not isinstance(item.get("call_id"), str) and (
            item.get("execution") == "server" or kind == "tool_search_output"
        ):  # what a search the server ran found: no call's answer (execution may be left out)
            return "hosted"
        return "output" if answers(item) is not None else "other"
    if kind == "reasoning":
        return "reasoning"
    if kind == "item_reference":
        return "reference"
    return "hosted" if kind in _HOSTED_KINDS else "other"


_OPENS_CALLS = frozenset(("call", "hosted", "answer"))
"""The classes of the model's items after which its later items join its group: a call, the
assistant's text, an item with its own result."""


def is_call(item: Any) -> bool:
    """A call that an output answers: ``*_call`` with a ``call_id``."""
    return _class(item) == "call"


def is_output(item: Any) -> bool:
    """An item that answers a call: ``*_call_output`` with a ``call_id`` (or, as a local
    shell call's output has it, an ``id``)."""
    return _class(item) == "output"


def answers(item: Mapping[str, Any]) -> str | None:
    """The call id an output answers."""
    for key in ("call_id", "id"):
        value = item.get(key)
        if isinstance(value, str):
            return value
    return None


def _bad_item(item: Any, where: str) -> Problem:
    if not isinstance(item, dict):
        return Problem(where, "an input item must be an object")
    if item.get("role") == "tool":
        return Problem(
            f"{where}/role",
            "'role: tool' is OpenAI chat's format; Responses' tool results are function_call_output items",
        )
    if "tool_calls" in item:
        return Problem(
            f"{where}/tool_calls",
            "tool_calls is OpenAI chat's format; Responses' calls are function_call items",
        )
    return Problem(f"{where}/type", "an input item needs a type (or a role, for a message)")


def _unanswered(group: dict[str, int], problems: list[Problem]) -> None:
    for call_id, asked in group.items():
        problems.append(Problem(f"/messages/{asked}", f"call {call_id!r} has no output after it"))
    group.clear()


def _check_message(item: Mapping[str, Any], where: str, problems: list[Problem]) -> None:
    role = item.get("role")
    if not isinstance(role, str) or role not in ROLES:
        problems.append(Problem(f"{where}/role", f"role must be one of {', '.join(sorted(ROLES))}"))
    content = item.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        problems.append(Problem(f"{where}/content", "content must be a string or a list of parts"))
        return
    _check_parts(content, f"{where}/content", "output" if role == "assistant" else "input", problems)


def _check_parts(parts: Sequence[Any], where: str, side: str, problems: list[Problem]) -> None:
    """Content parts: known types, their text a string; output_text only in the assistant's."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in PARTS:
            hint = " (that is OpenAI chat's format)" if kind in ("text", "image_url") else ""
            problems.append(
                Problem(
                    f"{where}/{j}/type",
                    f"{kind!r} is not a Responses content part{hint}; "
                    f"the parts are {', '.join(sorted(PARTS))}",
                )
            )
        elif kind in TEXT_PARTS and not isinstance(part.get("text", part.get("refusal")), str):
            problems.append(Problem(f"{where}/{j}", f"a {kind} part needs its text as a string"))
        elif side == "input" and kind in ("output_text", "refusal"):
            problems.append(Problem(f"{where}/{j}/type", f"{kind!r} is the assistant's; use input_text"))


def system_text(system: Any) -> str | None:
    return system if isinstance(system, str) else None


# -- to the internal form ---------------------------------------------------------------
def _classed_groups(items: Sequence[Any]) -> list[tuple[tuple[Any, ...], tuple[str, ...]]]:
    """The items an internal message is made of each, with their classes (:func:`_class`,
    told once an item): one model turn's items together (its reasoning, the items with their
    own result such as a web search, its assistant message and calls), as the API wants them
    back together: an item of a response is refused without the reasoning before it."""
    groups: list[tuple[tuple[Any, ...], tuple[str, ...]]] = []
    pending: list[Any] = []
    reasons: list[str] = []
    for item in items:
        c = _class(item)
        if c == "reasoning":
            pending.append(item)
            reasons.append(c)
            continue
        if groups:
            group, classes = groups[-1]
            last = classes[-1]
            if (
                # a call or an item with its own result after any item of the model's, the
                # model's message after an item with its own result (a web search, then the answer)
                ((c == "call" or c == "hosted") and last in _OPENS_CALLS)
                or (c == "answer" and last == "hosted")
                # A run of references to items OpenAI stored (the calls) and the outputs after
                # them: one group, kept or removed together, never an output without its reference.
                or (c == "output" and _references(classes))
                or (c == "reference" and _references(classes, answered=False))
            ):
                groups[-1] = ((*group, *pending, item), (*classes, *reasons, c))
                pending, reasons = [], []
                continue
        groups.append(((*pending, item), (*reasons, c)))
        pending, reasons = [], []
    if pending:
        groups.append((tuple(pending), tuple(reasons)))
    return groups


def _references(classes: tuple[str, ...], *, answered: bool = True) -> bool:
    """Whether a group (its items' classes) is a run of references to stored items, with the
    outputs after them if ``answered`` (else none yet)."""
    main = [c for c in classes if c != "reasoning"]
    return (
        bool(main)
        and main[0] == "reference"
        and all(c == "reference" or (answered and c == "output") for c in main)
    )


def to_internal(items: Sequence[Any]) -> list[dict[str, Any]]:
    """The internal messages of a valid list of input items (each group converted once,
    then memoised by the identity of its items)."""
    return [_converted(group, classes)[0] for group, classes in _classed_groups(items)]


def _converted(group: tuple[Any, ...], classes: tuple[str, ...]) -> tuple[dict[str, Any], int]:
    """A group's internal message, and about how many bytes its items keep alive."""
    key = group[0]
    hit = _MEMO.get(id(key), key)
    if hit is not None and len(hit[0]) == len(group) and starts_with(group, hit[0]):
        return hit[1], hit[2]
    internal = _convert(group, classes)
    made(internal[ORIGIN], (internal,))
    size = sum(rough_size(x) for x in group)
    internal[ORIGIN].size = size  # the token counter sizes its memo by it, without a walk
    _MEMO.put(id(key), key, (group, internal, size), size)
    return internal, size


def advance(items: Sequence[Any], grown: Grown | None) -> Grown | None:
    """What is known of ``items`` that start with ``grown``'s (None: nothing is known): only
    the items after them are checked, and converted from the start of the last turn, which
    new items may join. None when those break a rule (the full check names the problems)."""
    if grown is not None and len(items) == grown.k + 1 and not grown.pending:
        # The common case: a user's (or a system or developer) message after a closed turn, or
        # after the model's answer with no call (which it closes). It checks and converts by
        # itself, and no later item can join it. _advance does the same, slower.
        item, open_ = items[-1], grown.k - grown.restart
        if (
            type(item) is dict
            and item.get("type", "message") == "message"
            and isinstance(role := item.get("role"), str)
            and role in _OWN_TURN
            and type(item.get("content")) is str
            and "tool_calls" not in item
            and grown.inner_restart == len(grown.inner) - open_
            and (open_ == 0 or (open_ == 1 and _class(items[grown.restart]) == "answer"))
        ):
            internal, size = _converted((item,), ("message",))
            inner = grown.inner.append(internal)
            return Grown(len(items), inner, len(items), len(inner), {}, grown.bytes + 2 * size)
    return _advance(items, grown)


_OWN_TURN = frozenset(("user", "system", "developer"))
"""The roles of a message that is a turn of its own (a user's, a system or developer note)."""


def _advance(items: Sequence[Any], grown: Grown | None) -> Grown | None:
    """:func:`advance`, every case."""
    k, restart = (grown.k, grown.restart) if grown is not None else (0, 0)
    problems: list[Problem] = []
    _check_items(items, k, problems)
    if problems:
        return None
    groups = _classed_groups(items[restart:])
    last = max(len(groups) - 1, 0)  # the last turn (a trailing reasoning item waits for its item)
    while last > 0 and all(c == "reasoning" for c in groups[last][1]):
        last -= 1
    pending = dict(grown.pending) if grown is not None and grown.pending else {}
    at, kept = restart, pending
    for g, (group, classes) in enumerate(groups):
        if g == last:
            restart, kept = at, dict(pending)
        _check_group(group, classes, at, pending, problems)
        at += len(group)
    if problems:
        return None
    if groups and groups[-1][1][-1] not in _OPENS_CALLS and groups[-1][1][-1] != "reasoning":
        restart, kept, last = at, pending, len(groups)  # no new item can join the last turn
    size = grown.bytes if grown is not None else 0
    tail: list[dict[str, Any]] = []
    at = grown.restart if grown is not None else 0
    for group, classes in groups:
        internal, bytes_ = _converted(group, classes)
        tail.append(internal)
        if at < k:  # the last turn before: only its new items are new bytes
            bytes_ = sum(rough_size(x) for x in group[k - at :])
        size += 2 * bytes_
        at += len(group)
    final = grown.inner_restart if grown is not None else 0
    inner = grown.inner if grown is not None else History()
    old = inner[final:] if final < len(inner) else ()
    # The last turn as it was: only new items are appended; else new items joined it.
    as_it_was = starts_with(tail, old)
    inner = inner.append(*tail[len(old) :]) if as_it_was else inner.prefix(final).append(*tail)
    return Grown(len(items), inner, restart, final + last, kept, size)


def _convert(group: tuple[Any, ...], classes: tuple[str, ...]) -> dict[str, Any]:
    main = [(x, c) for x, c in zip(group, classes, strict=True) if c != "reasoning"]
    first = main[0][0] if main else group[0]
    if not main:  # reasoning with nothing after it yet
        return {"role": "assistant", "content": "", ORIGIN: Origin(first, group=group)}
    calls = [_call(x) for x, c in main if c == "call"]
    message = next((x for x, c in main if c == "message" or c == "answer"), None)
    # Items with their own result (a web search, an MCP call) or of another type: counted
    # whole, never edited.
    whole = [x for x, c in main if x is not message and c != "call"]
    if calls:
        text = _text(_content(message["content"])) if message is not None else None
        hidden = [x for x, c in main if c == "call" and _kind(x) not in CALL_INPUTS]
        return {
            "role": "assistant",
            "content": text or None,
            "tool_calls": calls,
            ORIGIN: Origin(first, group=group, plain=_counted([*hidden, *whole])),
        }
    if main[0][1] == "output":
        output = first.get("output")
        text_output = _text_output(first)  # else a screenshot, a shell's outputs: counted, never edited
        content = _content(output) if text_output else ""
        counted = None if text_output else _counted([output])
        return {
            "role": "tool",
            "tool_call_id": answers(first),
            "content": content,
            ORIGIN: Origin(first, group=group, plain=counted),
        }
    if message is not None:
        # The answer after a web search: its text, the search counted whole.
        counted = {"source": whole, "counted_tokens": estimate_tokens(whole)} if whole else None
        return {
            "role": message["role"],
            "content": _content(message["content"]),
            ORIGIN: Origin(first, group=group, plain=counted),
        }
    return {
        "role": "assistant",
        "content": "",
        ORIGIN: Origin(first, group=group, plain=_counted([x for x, _ in main])),
    }


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    """The internal tool call for a call item; a call whose input is not text (a computer
    action) shows its type, and its input is counted apart."""
    field = CALL_INPUTS.get(_kind(item) or "")
    arguments = item[field] if field is not None else "{}"
    name = item.get("name") if isinstance(item.get("name"), str) else _kind(item)
    return {"id": item["call_id"], "type": "function", "function": {"name": name, "arguments": arguments}}


def _counted(values: Sequence[Any]) -> dict[str, Any] | None:
    """What the provider counts of items no manager edits (an estimate), and the items
    themselves, referenced, for an archive."""
    if not values:
        return None
    return {"source": list(values), "counted_tokens": estimate_tokens(values)}


def _content(content: Any) -> Any:
    """Chat content for Responses content (text parts joined, images as images, their address
    kept for the archive, files as file parts with their data, counted from its size)."""
    if isinstance(content, str):
        return content
    if all(isinstance(p, dict) and p.get("type") in TEXT_PARTS for p in content):
        return "\n".join(p.get("text", p.get("refusal", "")) for p in content)
    parts: list[dict[str, Any]] = []
    for p in content:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in TEXT_PARTS:
            parts.append({"type": "text", "text": p.get("text", p.get("refusal", ""))})
        elif kind == "input_image":
            url = p.get("image_url") or p.get("file_id") or ""
            parts.append(
                {"type": "image_url", "image_url": {"url": str(url), "detail": p.get("detail", "auto")}}
            )
        else:
            data = p.get("file_data") if isinstance(p, dict) else None  # counted from its size
            name = (
                p.get("filename") if isinstance(p, dict) and isinstance(p.get("filename"), str) else str(kind)
            )
            parts.append(
                {"type": "file", "file": {"filename": name, "file_data": data or p.get("file_id") or ""}}
            )
    return parts


# -- back -------------------------------------------------------------------------------
def back(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The input items for an internal list: a message that comes back as the conversion
    made it (see ``Origin.made``) is its items again, the very objects."""
    out: list[Any] = []
    for m in messages:
        same_origin = unchanged(m)
        if same_origin is not None:
            out.extend(same_origin.group)  # unchanged: the very items that came in
            continue
        out.extend(_rebuild(m, origin_of(m)))
    return out


def _rebuild(m: Mapping[str, Any], origin: Origin | None) -> list[Any]:
    originals = origin.group if origin is not None else ()
    main = [x for x in originals if _kind(x) != "reasoning"]
    role = m.get("role")
    calls = m.get("tool_calls")
    if role == "assistant" and calls:
        return _rebuild_turn(m, originals, calls)
    out: list[Any] = [x for x in originals if _kind(x) == "reasoning"]  # kept with their item, unedited
    if role == "tool":
        base = dict(main[0]) if main else {"type": "function_call_output", "call_id": m["tool_call_id"]}
        original = base.get("output", "")
        if main and not _text_output(base):
            return [*out, main[0]]  # a structured output (a screenshot, a shell's): never edited
        base["output"] = _parts_back(
            m.get("content"), original if isinstance(original, list) else [], "input"
        )
        return [*out, base]
    message = next((x for x in main if _kind(x) == "message"), None)
    if main and message is None:
        return [*out, *main]  # an item with its own result: nothing of it is text a manager edits
    content = m.get("content")
    if message is not None:
        item = dict(message)
        original = item.get("content")
        if isinstance(original, list):
            text_kind = "output" if role == "assistant" else "input"
            item["content"] = _parts_back(content, original, text_kind)
        else:
            item["content"] = _text(content)
        return [item if x is message else x for x in originals]  # in their order, reasoning too
    if isinstance(content, list):
        return [
            *out,
            {"role": role, "content": _parts_back(content, [], "output" if role == "assistant" else "input")},
        ]
    return [*out, {"role": role, "content": content if content is not None else ""}]


def _rebuild_turn(m: Mapping[str, Any], originals: Sequence[Any], calls: Sequence[Any]) -> list[Any]:
    """An edited model turn: its reasoning as it was, its text and calls as they are now."""
    out: list[Any] = []
    text = _text(m.get("content"))
    by_id = {c["id"]: c for c in calls}
    for x in originals:
        kind = _kind(x)
        if kind == "message":
            if text:
                same = _text(_content(x.get("content"))) == text
                out.append(x if same else {**x, "content": _parts_back(text, x.get("content"), "output")})
            text = ""
        elif is_call(x):
            call = by_id.pop(x.get("call_id"), None)
            if call is not None:
                field = CALL_INPUTS.get(kind or "")
                arguments = (call.get("function") or {}).get("arguments")
                edited = field is not None and x.get(field) != arguments
                out.append({**x, field: arguments} if edited else x)
        else:
            out.append(x)  # reasoning, kept with its turn and never edited
    if text:
        out.insert(0, {"role": "assistant", "content": text})
    for call in by_id.values():
        fn = call.get("function") or {}
        out.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
        )
    return out


def _parts_back(content: Any, originals: Sequence[Any], text_kind: str) -> Any:
    """Responses content for chat content: a string stays a string when the original was
    one; text parts become ``<text_kind>_text`` parts, the others the original non-text
    parts they stood for, in order."""
    if isinstance(content, str):
        if not originals:
            return content
        return [_text_part(text_kind, content)]
    rest = iter(p for p in originals if isinstance(p, dict) and p.get("type") not in TEXT_PARTS)
    out: list[Any] = []
    for p in content or ():
        if isinstance(p, dict) and p.get("type") == "text":
            out.append(_text_part(text_kind, p.get("text", "")))
        else:
            original = next(rest, None)
            if original is not None:
                out.append(original)
    return out


def _text_part(kind: str, text: str) -> dict[str, Any]:
    if kind == "output":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        p.get("text", "") for p in content or () if isinstance(p, dict) and p.get("type") == "text"
    )
