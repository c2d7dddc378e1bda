"""Message-list structure: tool-call groups, safe cut points, pinning, validity.

A *unit* is the smallest run of messages a manager may keep or remove whole: a
single message, or an assistant message with tool calls together with the tool
results that answer it (parallel calls included).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .errors import ContextError, Problem
from .history import IS_CHAT, IS_VALID, History, items, scan
from .marks import PLACEHOLDER, STAMP, binding, find, offloaded, sign

__all__ = [
    "SHELL_KEYS",
    "SYSTEM_ROLES",
    "check_messages",
    "is_shell_call",
    "last_task_index",
    "shell_keys",
    "text_of",
    "units",
    "without_escapes",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SYSTEM_ROLES = frozenset({"system", "developer"})
SUMMARY_PREFIX = "[ctxmgmt:summary]"
SUMMARY_HEAD = re.compile(
    r"\A\[ctxmgmt:summary\] Summary of \d{1,12} earlier messages, which are no longer shown\. "
    r"#k=(?P<tag>[0-9a-f]{16})$",
    re.MULTILINE,
)
"""The first line of a summary ctxmgmt wrote, with its tag (see :mod:`ctxmgmt.marks`)."""
RECALL_TOOLS = frozenset({"context_read", "context_search"})
"""Tools that read archived context back: their results are never archived again (they are
cut and fitted like any other result)."""
_RECALLED = re.compile(
    r"\[[tm]-[0-9a-f]{32}: (?:chars|lines) from \d+ of \d+; "
    r"|[tm]-[0-9a-f]{32} (?:message \d+ )?line \d+: |no match in the archived context"
)
"""How a recall tool's result begins (:func:`ctxmgmt.agents.tools.recall_tools`): a read's
header with its reference (``[t-…: chars from 0 of 5000; …]``, references as
:data:`ctxmgmt.offload.base.REF` makes them), a search's first hit, or its "no match"."""
_READ_HEAD = re.compile(
    r"\[([tm]-[0-9a-f]{32}): (chars|lines) from (\d{1,15}) of \d{1,15}; [^\]\n]{0,300}\]\n"
)
"""A read's header: the archive, the unit and the offset its text was read from."""
_SHORT = 200
"""A recall-shaped result this short is taken as one without asking the store: no cut of it
could lose anything (a search's "no match")."""

Holds = Callable[[str, int, str, str], bool]
"""Whether an archive holds a text: ``holds(ref, offset, unit, text)``, ``text`` read from
``offset`` (in ``unit``, chars or lines) of archive ``ref`` of the conversation."""


CACHE_CONTROL = "cache_control"
"""A prompt-cache breakpoint (Anthropic's, and gateways' that take it in chat parts): a client
moves it to its newest message on every request (Claude Code does), so it tells nothing of
which message is which: fingerprints of messages are made without it."""


def without_cache_control(value: Any) -> Any:
    """``value`` (a message, a block, or a list of either: a history, a system prompt) with
    every ``cache_control`` taken out where a provider reads one: on a message, on its
    content's blocks, and on the blocks of a block's own content (a tool result's); never
    from a tool's input or other data that holds the word. The same object when it holds
    none; else a copy of what holds one."""
    return _uncached(value, 3)


def holds_cache_control(value: Any) -> bool:
    """Whether :func:`without_cache_control` takes anything out of ``value``: found without a
    copy (most messages hold none)."""
    return any(True for _ in cache_control_values(value))


def cache_controls(value: Any) -> int:
    """How many ``cache_control`` members :func:`without_cache_control` takes out of ``value``."""
    return sum(1 for _ in cache_control_values(value))


def cache_control_values(value: Any, depth: int = 3) -> Iterator[Any]:
    """The values of the ``cache_control`` members :func:`without_cache_control` takes out of
    ``value``, in order (``null`` ones too), down ``depth`` levels of ``content`` (3 from a
    message, 2 from a block)."""
    if isinstance(value, list):
        for v in value:
            yield from cache_control_values(v, depth)
        return
    if not isinstance(value, dict):
        return
    if CACHE_CONTROL in value:
        yield value[CACHE_CONTROL]
    content = value.get("content")
    if depth > 1 and isinstance(content, list):
        yield from cache_control_values(content, depth - 1)


def _uncached(value: Any, depth: int) -> Any:
    """:func:`without_cache_control` down ``depth`` more levels of ``content``."""
    if isinstance(value, list):
        items = [_uncached(v, depth) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if not isinstance(value, dict):
        return value
    content = value.get("content")
    inner = _uncached(content, depth - 1) if depth > 1 and isinstance(content, list) else content
    if CACHE_CONTROL not in value and inner is content:
        return value
    out = {k: v for k, v in value.items() if k != CACHE_CONTROL}
    if inner is not content:
        out["content"] = inner
    return out


def is_recalled(name: str | None, message: Mapping[str, Any], holds: Holds | None = None) -> bool:
    """Whether a tool result is what a recall tool read back from an archive, which holds it:
    its call bears a recall tool's name and its text begins as a recall result does. A
    result of a tool of the client's own with that name (a proxy's client may declare its
    own ``context_search``) is the client's: archived like any other before it is cut.

    ``holds``: whether the conversation's archive holds a text. Given, a result is taken for
    a recall only when the archive it names holds its text where its header says (a read's;
    others, a search's hits or the runner's cut of a recall, are archived like any result
    before they are cut): a text can begin as a recall result does, naming a real archive
    (the unsigned header is content's to copy), and what the archive does not hold must be
    archived before it is cut."""
    if name not in RECALL_TOOLS:
        return False
    content = message.get("content")
    text = content if isinstance(content, str) else text_of(content)
    if _RECALLED.match(text[:200]) is not None or text.startswith(_RUNNER_CUT):
        if holds is None or len(text) <= _SHORT:
            return True
        head = _READ_HEAD.match(text)
        return head is not None and holds(head[1], int(head[3]), head[2], text[head.end() :])
    # Cut by ctxmgmt since (a tail keeps no header, a notice comes first): its signed stamp
    # says so, and what it was cut from is archived (a recall result's archive, or its own).
    return find(STAMP, text, binding(message)) is not None


CUT_OUTPUT = "[ctxmgmt: the output of "
"""How the runner's notice of a tool output it cut begins (over the turn's bytes): the tool's
name follows (:class:`ctxmgmt.agents.tools.OutputReader`)."""
_RUNNER_CUT = CUT_OUTPUT + "context_"


RECALL_LIMIT = 20_000
"""The most characters (or lines) one ``context_read`` returns, whatever limit it is given."""
RECALL_DEFAULT = 4_000
"""What ``context_read`` returns when it is given no limit."""


SHELL_KEYS = ("cmd", "command", "bash", "commands", "shell", "script", "code")
"""The tool-call arguments that may hold a shell command (or a script, one command a line).
``script`` and ``code`` (:data:`_PROGRAM_KEYS`) only for a shell tool (:data:`_SHELL_TOOL`):
a Python or notebook tool's code is a program, whose lines are no commands."""
_PROGRAM_KEYS = frozenset({"script", "code"})
_SHELL_TOOL = re.compile(r"(?i)bash|shell|\bsh\b|_sh\b|terminal|console|exec|run|cmd|command")
_CODE_TOOL = re.compile(
    r"(?i)python|ipython|jupyter|notebook|kernel|\bcell|code|repl\b|interpreter|\bnode\b|javascript|eval"
)
"""A tool that runs a program, not a shell line (``python``, ``execute_code``, ``run_code``,
``jupyter_execute``, ``code_interpreter``)."""


def shell_keys(name: str, args: Mapping[str, Any]) -> list[str]:
    """The arguments of a call to tool ``name`` that hold a shell command: a string or a list
    of words, under one of :data:`SHELL_KEYS`; ``script`` and ``code`` only when the tool is
    a shell's (its name says so: ``bash``, ``run_shell``, ``exec``) and not a program runner's
    (``python``, ``execute_code``, ``run_code``, ``jupyter``)."""
    shell: bool | None = None
    found = []
    for key in SHELL_KEYS:
        value = args.get(key)
        words = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not (isinstance(value, str) or words):
            continue
        if key in _PROGRAM_KEYS:
            if shell is None:
                head = name[:200]
                shell = _SHELL_TOOL.search(head) is not None and _CODE_TOOL.search(head) is None
            if not shell:
                continue
        found.append(key)
    return found


_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*['\"]?(\w+)['\"]?")
"""A here-document's start (not a here-string, ``<<<``): its terminator (quotes taken off)."""


def command_lines(script: str) -> Iterator[str]:
    """The command lines of a shell script, stripped: not blank lines, comments, the body and
    terminator of a here-document (``python3 - <<'EOF'`` … ``EOF``), nor the lines of a
    quoted argument that spans lines (``python3 -c "`` … ``"``): those are a program's lines,
    which a command reads, not commands."""
    body = None  # a here-document's terminator while its body is read
    quote = None  # the quote a quoted argument spanning lines is open with
    for ln in script.splitlines():
        stripped = ln.strip()
        if body is not None:
            body = None if stripped == body else body
            continue
        inside = quote is not None
        quote = _quote_after(ln, quote)
        if inside or not stripped or stripped.startswith("#"):
            continue
        yield stripped
        heredoc = _HEREDOC.search(stripped) if quote is None else None
        body = heredoc[1] if heredoc else None


_QUOTING = re.compile(r"""\\.|["']|(?:^|(?<=\s))#""")


def _quote_after(line: str, quote: str | None) -> str | None:
    """The quote still open at the end of a shell line that starts with ``quote`` open (None:
    none): a backslash escapes outside single quotes, ``#`` after a blank starts a comment."""
    for found in _QUOTING.finditer(line):
        token = found[0]
        if quote is None:
            if token == "#":
                return None
            if token in ("'", '"'):
                quote = token
        elif quote == "'":
            if token == "'" or token.endswith("'"):  # no escape inside single quotes
                quote = None
        elif token == '"':
            quote = None
    return quote


def is_shell_call(name: str, args: Mapping[str, Any]) -> bool:
    """Whether a call to tool ``name`` with ``args`` runs a shell command (:func:`shell_keys`)."""
    return bool(shell_keys(name, args))


def summary_line(summarized: int) -> str:
    """The first line of a summary covering ``summarized`` messages, its tag unsigned."""
    return (
        f"{SUMMARY_PREFIX} Summary of {summarized} earlier messages, which are no longer shown. "
        + PLACEHOLDER
    )


def summary_message(role: str, text: str) -> dict[str, Any]:
    """The summary message of ``role`` for a rendered summary: its mark signed for it."""
    return {"role": role, "content": sign(text, (role, ""), text.index(PLACEHOLDER))}


def tool_names(messages: Sequence[Any], start: int = 0) -> dict[str, str]:
    """Tool-call id -> function name, for the calls from ``start`` on (and the one before)."""
    names: dict[str, str] = {}
    for m in messages[max(0, start - 1) :]:
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or ():
                if isinstance(c, dict):
                    names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
    return names


def call_ids(m: Any) -> list[str]:
    """The tool-call ids an assistant message asks for."""
    calls = m.get("tool_calls") if m.get("role") == "assistant" else None
    if not calls or not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def units(messages: Sequence[Any]) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` that cover the list; a tool-call group is one span."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if call_ids(messages[i]):
            while j < n and messages[j].get("role") == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans


def units_from_end(messages: Sequence[Any], end: int | None = None) -> Iterator[tuple[int, int]]:
    """The spans of :func:`units`, newest first, found by walking back from ``end``: a
    caller that keeps the newest units pays for what it looks at, not for the list."""
    i = len(messages) if end is None else end
    while i > 0:
        if messages[i - 1].get("role") != "tool":
            yield i - 1, i
            i -= 1
            continue
        k = i - 1
        while k > 0 and messages[k - 1].get("role") == "tool":
            k -= 1
        if k > 0 and call_ids(messages[k - 1]):
            yield k - 1, i
            i = k - 1
        else:  # tool results that answer no call: each is a unit of its own, as units() has it
            for j in range(i - 1, k - 1, -1):
                yield j, j + 1
            i = k


def pinned_positions(messages: Sequence[Any]) -> list[int]:
    """Indices of the system and developer messages and the summaries, which managers keep."""
    return scan(messages, "pinned", _always_kept)


def _always_kept(m: Any) -> bool:
    return m.get("role") in SYSTEM_ROLES or is_summary(m)


def gaps(end: int, kept: Sequence[int]) -> list[tuple[int, int]]:
    """The runs of ``range(end)`` between the sorted indices ``kept``."""
    out: list[tuple[int, int]] = []
    pos = 0
    for k in kept:
        if k >= end:
            break
        if k > pos:
            out.append((pos, k))
        pos = k + 1
    if pos < end:
        out.append((pos, end))
    return out


_ANSI = re.compile(
    r"\x1b(?:\[[0-?]{0,64}[ -/]{0,8}[@-~]"  # CSI: colours, styles, cursor moves
    r"|\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)?"  # OSC: a title, a hyperlink (within its line)
    r"|[PX^_][^\x1b\n]{0,4096}(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|[ -/]{1,3}[0-~]"  # a character set's choice: tput sgr0's ESC(B
    r"|[0-~])"  # the rest are two characters
)
"""A terminal's escape sequence: CSI (``ESC[1;31m``), OSC (``ESC]8;;URL ESC\\``, never past
its line: an unterminated one hides nothing after it), DCS, SOS, PM and APC strings, a
character set's choice (``ESC(B``), or a two-character one. Tools print them when forced to
(``--color=always``, ``FORCE_COLOR``, CI runners): ``ESC[31mERROR ESC[0m`` is an error line,
and ``ESC[01;34msrc ESC[0m`` a path, only without them."""


def without_escapes(text: str) -> str:
    """A text without its terminal escape sequences (itself when it holds none)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def is_summary(m: Any) -> bool:
    """Whether a message is a summary written by ctxmgmt: a user or assistant message, with
    no tool calls, whose text starts with the summary marker signed for it by ctxmgmt. A
    message that merely starts with the marker (a tool output, a model reply, a user's
    message, a copy of a real summary in another role) is never taken for one."""
    content = m.get("content")
    return (
        isinstance(content, str)
        and content.startswith(SUMMARY_PREFIX)
        and m.get("role") in ("user", "assistant")
        and not m.get("tool_calls")
        and find(SUMMARY_HEAD, content, binding(m)) is not None
    )


def mentions_archive(m: Mapping[str, Any]) -> bool:
    """Whether a message is ctxmgmt's and names an archive: a summary with its guide to the
    archived messages, or a tool result with a notice that says where its original is."""
    content = m.get("content")
    if type(content) is str and "#k=" not in content:  # ctxmgmt signs every mark it writes
        return False
    if m.get("role") == "tool":
        return offloaded(text_of(m.get("content")), binding(m)) is not None
    return is_summary(m) and "\n## Archived messages\n" in str(m.get("content"))


def last_task_index(messages: Sequence[Any]) -> int | None:
    """Index of the current task: the most recent user message that is not a summary."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user" and not is_summary(m):
            return i
    return None


def trailing_tool_start(messages: Sequence[Any]) -> int:
    """Index where the newest tool results begin: the trailing run of tool messages, or the
    run right before trailing user messages (Anthropic's turn holds the user's text after
    its results). The length when there are none."""
    start, end = trailing_tool_run(messages)
    return start if start < end else len(messages)


def trailing_tool_run(messages: Sequence[Any]) -> tuple[int, int]:
    """``(start, end)`` of the newest tool results (see :func:`trailing_tool_start`); empty
    (``start == end``) when there are none. A History remembers the answer with how many
    messages it saw, so later calls walk back over the new messages only, however many
    user messages trail."""
    n = len(messages)
    memo = messages.memo if isinstance(messages, History) else None
    known = memo.get(_TOOL_RUN) if memo is not None else None
    msgs = messages  # indexed a few times from the end: no list of it is made
    if known is not None and known[1] <= n:
        start, end, seen = known
        if n <= seen:  # the messages from end to seen are user messages
            return start, end
        j = n
        while j > seen and _role(msgs[j - 1]) == "user":
            j -= 1
        if j == seen:  # only user messages since
            if memo is not None:
                memo[_TOOL_RUN] = (start, end, n)
            return start, end
        end = j
    else:
        end = n
        while end > 0 and _role(msgs[end - 1]) == "user":
            end -= 1
    i = end
    while i > 0 and _role(msgs[i - 1]) == "tool":
        i -= 1
    if memo is not None:
        memo[_TOOL_RUN] = (i, end, n)
    return i, end


_TOOL_RUN = object()
"""The key of a History's newest tool run in its memo: ``(start, end, messages seen)``."""


def text_of(content: Any) -> str:
    """The text of a message content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def check_messages(messages: Sequence[Any], *, partial_tail: bool = False, offset: int = 0) -> list[Problem]:
    """Everything the OpenAI chat API would reject in a message list.

    With ``partial_tail``, tool calls at the end that are still waiting for results
    are allowed: that is the state at ``post_tool`` between parallel results. ``offset``
    is the index of the first message, when ``messages`` is a part of a list.
    """
    problems: list[Problem] = []
    pending: dict[str, int] = {}  # call id -> index of the assistant message asking

    def unanswered() -> None:
        for call_id, asked in pending.items():
            problems.append(
                Problem(f"/messages/{asked}/tool_calls", f"tool call {call_id!r} has no tool result")
            )
        pending.clear()

    for i, m in enumerate(messages, offset):
        where = f"/messages/{i}"
        if not isinstance(m, dict):
            problems.append(Problem(where, "a message must be an object"))
            continue
        foreign = foreign_format(m, where)
        if foreign is not None:
            problems.append(foreign)
            continue
        role = m.get("role")
        if role == "function":
            problems.append(Problem(f"{where}/role", _FUNCTIONS))
            continue
        if not isinstance(role, str) or role not in ROLES:
            problems.append(Problem(f"{where}/role", f"role must be one of {', '.join(sorted(ROLES))}"))
            continue
        if role != "tool" and pending:
            unanswered()
        problems.extend(_check_content(m, role, where))
        if role == "assistant" and m.get("tool_calls") not in (None, []):  # null or []: no calls
            problems.extend(_check_calls(m.get("tool_calls"), where))
            pending = dict.fromkeys(call_ids(m), i)
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                problems.append(Problem(f"{where}/tool_call_id", "a tool message needs a tool_call_id"))
            elif call_id not in pending:
                problems.append(
                    Problem(
                        f"{where}/tool_call_id",
                        f"tool result {call_id!r} does not answer a call of the assistant "
                        "message right before it",
                    )
                )
            else:
                del pending[call_id]
    if pending and not partial_tail:
        unanswered()
    return problems


CHAT_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"})
"""The content part types of OpenAI chat messages."""
_ANTHROPIC_PARTS = frozenset(
    {
        "tool_use",
        "tool_result",
        "image",
        "document",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "search_result",
        "container_upload",
    }
)
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "summary_text"})
_LABELS = {"anthropic": "Anthropic's", "openai_responses": "OpenAI Responses'", "gemini": "Gemini's"}


def foreign_kind(m: Any) -> tuple[str, str, str] | None:
    """``(format, pointer suffix, what shows it)`` when a message is in another provider's
    format (``anthropic``, ``openai_responses`` or ``gemini``), else None."""
    if not isinstance(m, dict):
        return None
    if "role" not in m and isinstance(m.get("type"), str) and m["type"]:
        return "openai_responses", "/type", f"{m['type']!r} (an item)"
    if m.get("role") == "model" or ("parts" in m and "content" not in m):
        return "gemini", "", "'role: model'" if m.get("role") == "model" else "'parts'"
    content = m.get("content")
    for j, part in enumerate(content if isinstance(content, list) else ()):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            continue
        if kind in _ANTHROPIC_PARTS:
            return "anthropic", f"/content/{j}/type", repr(kind)
        if kind in _RESPONSES_PARTS:
            return "openai_responses", f"/content/{j}/type", repr(kind)
    return None


def foreign_format(m: Any, where: str) -> Problem | None:
    """Why a message in an OpenAI chat list is in another provider's format, or None. The
    problem names the format and points at the first part that shows it."""
    found = foreign_kind(m)
    if found is None:
        return None
    name, suffix, shown = found
    if name == "gemini":
        fix = "ctxmgmt takes OpenAI chat, Anthropic and OpenAI Responses messages"
    else:
        fix = f"the list is taken as OpenAI chat; leave format out to detect it, or set format: {name}"
    return Problem(where + suffix, f"{shown} is {_LABELS[name]} format; {fix}")


def check_changes(messages: Sequence[Any], spans: Sequence[tuple[int, int]]) -> list[Problem]:
    """What :func:`check_messages` would find that a change made, given where the changed
    messages are (``start == end`` where messages were only removed) in a list made from a
    valid one: the changed messages and the whole tool-call groups at each seam."""
    n = len(messages)
    windows: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if windows and start - 1 <= windows[-1][1]:
            # Within (or next to) the last window: extend it, never walk its group again
            # (many changed results of one large parallel group cost the group once).
            hi = max(windows[-1][1], end)
            while hi < n and _role(messages[hi]) == "tool":
                hi += 1
            windows[-1] = (windows[-1][0], hi)
            continue
        lo = max(0, start - 1)  # the message before the seam, and the start of its group
        while lo > 0 and _role(messages[lo]) == "tool":
            lo -= 1
        hi = end  # and every tool result that follows
        while hi < n and _role(messages[hi]) == "tool":
            hi += 1
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
        else:
            windows.append((lo, hi))
    problems: list[Problem] = []
    for lo, hi in windows:
        part = messages[lo:hi]
        problems.extend(check_messages(part, partial_tail=hi == n, offset=lo))
    return problems


def check_grown(messages: Sequence[Any]) -> list[Problem]:
    """``check_messages(messages, partial_tail=True)``; a History remembers how much of it
    was valid, so one that grew by appends costs only its new messages."""
    if not isinstance(messages, History):
        return check_messages(messages, partial_tail=True)
    n, done = len(messages), messages.known(IS_VALID)
    if done >= n:
        return []
    msgs = items(messages)
    lo = max(0, done - 1)  # from the group that was open at the end of the valid part
    while lo > 0 and _role(msgs[lo]) == "tool":
        lo -= 1
    problems = check_messages(msgs[lo:n], partial_tail=True, offset=lo)
    if not problems:
        messages.mark(IS_VALID)
    return problems


def _role(m: Any) -> Any:
    return m.get("role") if isinstance(m, dict) else None


def check_format(messages: Sequence[Any]) -> None:
    """Raise ContextError at the first message in another provider's format (a History
    remembers how far it was checked, so a grown one costs only its new messages)."""
    history = messages if isinstance(messages, History) else None
    for i in range(history.known(IS_CHAT) if history is not None else 0, len(messages)):
        problem = foreign_format(messages[i], f"/messages/{i}")
        if problem is not None:
            raise ContextError([problem])
    if history is not None:
        history.mark(IS_CHAT)


def _check_content(m: dict[str, Any], role: str, where: str) -> list[Problem]:
    content = m.get("content")
    if content is None:
        if role == "assistant" and (m.get("tool_calls") or "refusal" in m or m.get("audio")):
            return []  # its calls, its refusal or its spoken answer (``audio: {id}``) say it
        if role == "assistant" and m.get("function_call") is not None:
            return [Problem(f"{where}/function_call", _FUNCTIONS)]
        return [
            Problem(
                f"{where}/content", f"{'an' if role == 'assistant' else 'a'} {role} message needs content"
            )
        ]
    if isinstance(content, str):
        return []
    if isinstance(content, list):
        problems = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if not isinstance(kind, str):
                problems.append(Problem(f"{where}/content/{j}", "a content part needs a string type"))
            elif kind not in CHAT_PARTS:
                problems.append(
                    Problem(
                        f"{where}/content/{j}/type",
                        f"{kind!r} is not a chat content part type ({', '.join(sorted(CHAT_PARTS))})",
                    )
                )
            elif kind in ("text", "refusal") and not isinstance(part.get(kind), str):
                problems.append(
                    Problem(f"{where}/content/{j}/{kind}", f"a {kind} part needs a string {kind}")
                )
        return problems
    return [Problem(f"{where}/content", "content must be a string, a list of parts or null")]


_FUNCTIONS = (
    "the deprecated function calling (an assistant's function_call, role 'function') is not "
    "managed: send the calls as tool_calls and their results as role 'tool' messages"
)
_CUSTOM_CALLS = (
    "a custom tool call (type 'custom') is not managed in chat messages: declare the tool as a "
    "function tool, or use the Responses API, whose custom_tool_call items are"
)


def is_custom_call(call: Any) -> bool:
    """A chat tool call of a custom tool (``{"type": "custom", "custom": {name, input}}``: its
    input free text, not JSON arguments), which chat messages are not managed with."""
    return isinstance(call, Mapping) and call.get("type") == "custom" and call.get("function") is None


def _check_calls(calls: Any, where: str) -> list[Problem]:
    if not isinstance(calls, list):
        return [Problem(f"{where}/tool_calls", "tool_calls must be a list of calls (or null: none)")]
    problems = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if is_custom_call(call):
            problems.append(Problem(f"{where}/tool_calls/{j}", _CUSTOM_CALLS))
        elif (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)
        ):
            problems.append(
                Problem(
                    f"{where}/tool_calls/{j}",
                    "a tool call needs id, type 'function' and function {name, arguments (a JSON string)}",
                )
            )
    return problems
