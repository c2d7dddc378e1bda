"""Turns, for providers whose turn runs from a user message to the next (Anthropic, and
Claude behind a framework): where the current task is, and the head of the final turn that
must stay when the model thinks at the start of a tool loop.

A tool loop is one turn: its tool results go back as user messages that continue it, and so
does text beside them (an agent's reminders). With thinking on, the final assistant turn must
open with a thinking block; the model thinks at the loop's start only (unless its thinking is
interleaved), so a cut that took the loop's first message would leave a turn that opens with
a ``tool_use``, which the provider refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..history import History, items, scan
from ..messages import is_summary
from ._common import ORIGIN, Origin

__all__ = [
    "THINKING",
    "THINKING_BLOCKS",
    "THINKING_FIRST",
    "signed",
    "task_index",
    "thinking_mark",
    "thinking_tokens",
    "thinks_first",
    "turn_head",
    "unmarked",
]

THINKING = "thinking"
"""The plain item of an internal message's origin by which a framework adapter says that its
message carries thinking or reasoning (a pydantic-ai ``ThinkingPart``, a LangChain thinking or
reasoning block): its turn must go to the provider as it was, tool inputs included."""
THINKING_FIRST = "thinking_first"
"""The plain item by which an adapter says that its message opens with thinking."""
THINKING_CHARS = "thinking_chars"
"""The plain item by which an adapter says how many characters of thinking its message holds."""
CHARS_PER_TOKEN = 4
"""An estimate of thinking's tokens from its characters (English prose; the calibration by the
provider's reports corrects it)."""
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Anthropic's thinking block types."""


def turn_head(messages: Sequence[Mapping[str, Any]]) -> tuple[int, int, int] | None:
    """The head of the final turn, in an internal list, that must stay as it is for the provider
    to take the list with thinking on: ``(its user message, its first assistant message, the
    end of that message's tool results)``, when that assistant message opens with a thinking
    block (:func:`thinks_first`); else None. The turn starts at the current task
    (:func:`task_index`). A History remembers what was found, so later calls look at the new
    messages only."""
    n = len(messages)
    msgs = items(messages)
    found = task_index(messages)
    if found is None:  # no user message of its own: ctxmgmt's summary, a user message, opens it
        found = _summary_start(msgs)
    user = -1 if found is None else found
    first = user + 1
    while first < n and msgs[first].get("role") != "assistant":
        if msgs[first].get("role") == "tool":
            return None  # tool results of no call here: no loop
        first += 1  # the rest of its user turn, a summary, a system message
    if user < 0 or first >= n:
        return None
    if not thinks_first(msgs[first]):
        return None
    # Thinking interleaved through the whole loop (each assistant message opens with its own):
    # any cut leaves a turn that opens with thinking, and nothing needs to stay. A loop one
    # call long may go on either way: its first call stays (removed, the next call, one that
    # opens without thinking, would open the turn).
    memo = messages.memo if isinstance(messages, History) else None
    known = memo.get(_BARE) if memo is not None else None
    bare, later, seen = False, False, first + 1
    if known is not None and known[0] == first and known[1] is msgs[first] and known[4] <= n:
        bare, later, seen = known[2], known[3], known[4]  # the same turn: only its new messages
    for i in range(seen, n):
        if bare:
            break
        if msgs[i].get("role") == "assistant":
            later = True
            bare = not thinks_first(msgs[i])
    if memo is not None:
        memo[_BARE] = (first, msgs[first], bare, later, n)
    if later and not bare:
        return None
    if not later and not msgs[first].get("tool_calls"):
        return None  # an answer that ends its turn: no loop
    end = first + 1
    while end < n and msgs[end].get("role") == "tool":
        end += 1
    return user, first, end


def _summary_start(msgs: Sequence[Mapping[str, Any]]) -> int | None:
    """The summary that opens the final turn when no user message of its own does (the task
    went into it): the provider reads it as the turn's user message. None when there is none."""
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "user" and is_summary(msgs[i]):
            return i if _user_run(msgs, i) is not None else None
    return None


_BARE = object()
"""The key of a History's memo of whether its final turn has an assistant message after the
first that opens without thinking: ``(first, its message, found, any assistant message after
the first, messages seen)``."""


def thinking_mark(*, first: bool, chars: int) -> dict[str, Any]:
    """The plain items of an origin that say its message carries thinking (``first``: opens
    with it; ``chars``: how much). They stay in a framework's saved state, never in what the
    model reads."""
    mark: dict[str, Any] = {THINKING: True, THINKING_CHARS: chars}
    if first:
        mark[THINKING_FIRST] = True
    return mark


def thinking_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """About how many tokens of thinking the final turn's assistant messages hold (from the
    current task on): the provider counts the thinking of the turn in progress (a tool loop's)
    as input, not that of earlier turns, and no manager sees it as text. A History remembers
    what it found, so later calls look at the new messages only."""
    n = len(messages)
    if not n or not scan(messages, "thinking", _thinks):  # none at all: the common case, at once
        return 0
    msgs = items(messages)
    found = task_index(messages)
    start = 0 if found is None else found + 1
    memo = messages.memo if isinstance(messages, History) else None
    known = memo.get(_THOUGHT) if memo is not None else None
    opener = msgs[start - 1] if start else None
    chars, seen = 0, start
    if known is not None and known[0] == start and known[1] is opener and start <= known[2] <= n:
        chars, seen = known[3], known[2]  # the same turn: only its new messages are read
    for i in range(seen, n):
        if msgs[i].get("role") == "assistant":
            chars += _thought_chars(msgs[i])
    if memo is not None:
        memo[_THOUGHT] = (start, opener, n, chars)
    return -(-chars // CHARS_PER_TOKEN)


_THOUGHT = object()
"""The key of a History's memo of its final turn's thinking: ``(start, the message before
it, messages seen, characters)``."""


def _thinks(m: Mapping[str, Any]) -> bool:
    return m.get("role") == "assistant" and _thought_chars(m) > 0


def _thought_chars(m: Mapping[str, Any]) -> int:
    """Characters of thinking an internal assistant message stands for: its adapter's mark, or
    its Anthropic source's thinking blocks (a redacted one by its data)."""
    origin = m.get(ORIGIN)
    if not isinstance(origin, Mapping):
        return 0
    marked = origin.get(THINKING_CHARS)
    if isinstance(marked, int) and not isinstance(marked, bool):
        return max(0, marked)
    source = origin.message if isinstance(origin, Origin) else None
    blocks = source.get("content") if isinstance(source, Mapping) else None
    total = 0
    for b in blocks if isinstance(blocks, list) else ():
        if isinstance(b, dict) and b.get("type") in THINKING_BLOCKS:
            text = b.get("thinking") if b.get("type") == "thinking" else b.get("data")
            total += len(text) if isinstance(text, str) else 0
    return total


def unmarked(m: dict[str, Any]) -> dict[str, Any]:
    """The message without the thinking marks of its origin (for an archive, which the model
    may read back: the marks are ctxmgmt's own); itself when it has none."""
    origin = m.get(ORIGIN)
    if not isinstance(origin, Mapping) or (THINKING not in origin and THINKING_FIRST not in origin):
        return m
    out = {k: v for k, v in m.items() if k != ORIGIN}
    rest = {k: v for k, v in origin.items() if k not in (THINKING, THINKING_FIRST, THINKING_CHARS)}
    if rest:
        out[ORIGIN] = rest
    return out


def signed(m: Mapping[str, Any]) -> bool:
    """Whether an internal message's adapter marked it as carrying thinking (:func:`thinking_mark`)."""
    origin = m.get(ORIGIN)
    return isinstance(origin, Mapping) and origin.get(THINKING) is True


def thinks_first(m: Mapping[str, Any]) -> bool:
    """Whether an internal assistant message stands for one that opens with thinking: an
    Anthropic message whose first block is thinking, or a framework's message its adapter
    marked so (:data:`THINKING_FIRST` among its origin's plain items)."""
    origin = m.get(ORIGIN)
    if not isinstance(origin, Mapping):
        return False
    if origin.get(THINKING_FIRST) is True:
        return True
    source = origin.message if isinstance(origin, Origin) else None
    blocks = source.get("content") if isinstance(source, Mapping) else None
    return (
        isinstance(blocks, list)
        and bool(blocks)
        and isinstance(blocks[0], dict)
        and blocks[0].get("type") in THINKING_BLOCKS
    )


def task_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the current task in an internal list: the last user message of its own (not
    text beside tool results, which continues the turn: an agent's reminders, a note on a
    file that changed; not a summary). A History remembers where it is, so later calls look
    at the new messages only."""
    n = len(messages)
    memo = messages.memo if isinstance(messages, History) else None
    known = memo.get(_TURN) if memo is not None else None
    msgs = items(messages)
    user, seen = known if known is not None and known[1] <= n else (-1, 0)
    for i in range(n - 1, seen - 1, -1):
        if _opens_turn(msgs[i]):
            start = _user_run(msgs, i)
            if start is not None:
                user = start
                break
    if memo is not None:
        memo[_TURN] = (user, n)
    return None if user < 0 else user


_TURN = object()
"""The key of a History's current task in its memo: ``(index or -1, messages seen)``."""


def _user_run(msgs: Sequence[Mapping[str, Any]], i: int) -> int | None:
    """The first user message of the run of user-side messages that holds ``msgs[i]`` (one
    Anthropic user message: it merges consecutive ones), or None when that run holds tool
    results: then it continues a turn (text left beside results whose calls a manager removed
    is sent as a message of its own, and merged back)."""
    first = i
    j = i - 1
    while j >= 0 and msgs[j].get("role") in ("user", "tool", "system"):
        role = msgs[j].get("role")
        if role == "tool":
            return None
        if role == "user" and not is_summary(msgs[j]):
            first = j
        j -= 1
    return first


def _opens_turn(m: Mapping[str, Any]) -> bool:
    """Whether an internal message may open a turn: a user message, not ctxmgmt's summary
    (which goes between a turn's user message and its loop). Whether results lie beside it
    is read from the list (:func:`_user_run`), not from the message it came from: text whose
    results a manager removed goes to the provider as a message of its own, which opens a
    turn there, and must be read so here too (a second apply reads it so)."""
    return m.get("role") == "user" and not is_summary(m)
