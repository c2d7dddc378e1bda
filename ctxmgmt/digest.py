"""The offline summariser: what matters in a stretch of conversation, ranked, no LLM.

It reads the messages for the kind of content an agent produces and keeps, verbatim:

- **goal**: the first task, then each later request of the user;
- **constraints**: the user's rules, and every sentence where the user gave a number;
- **errors**: error and failure lines from tool results (compiler, test runner, shell,
  package manager, HTTP, stack traces), once each with how often they were seen, and
  the commands that failed;
- **files changed**: paths given to tools that write, edit, patch, move or delete;
- **progress**: one line per tool, aggregated (``read_file ×31 (src/a.py … src/z.py)``,
  ``run_tests ×12: 9 failed, last passed``), never raw previews;
- **key decisions** and **next steps**: the assistant's sentences that state them;
- **critical context**: URLs, and identifiers the conversation kept using.

Items come most important first within a section; :func:`ctxmgmt.summaries.bound`
drops the least important sections' last items first.

A stretch longer than ``_READ_CHARS`` (a first call on a long history) is read in full from
its newest message back to that size; the older messages for what counts most: every user
message, each call with its arguments and outcome (commands, the paths they acted on, files
changed, what failed) and the error lines and URLs of its result; not the paths and ids that
results show, nor the assistant's text (decisions, the names it wrote).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import re2  # type: ignore[import-untyped]

from . import marks
from ._memo import BY_CONTENT, Memo, content_key
from .messages import command_lines, is_shell_call, is_summary, shell_keys, text_of, without_escapes
from .types import MARK_MEMBER

__all__ = ["digest", "error_lines", "fold_errors", "merge_ledger", "outcome", "trace_line"]

Sections = dict[str, list[str]]

_ITEM_CHARS = 300
_MAX_ITEMS = 400
"""At most this many items per section are kept before ranking, against hostile input."""

# A line that reports a failure: exception names, error labels of compilers, test runners,
# shells and package managers, HTTP error statuses, signals and exit codes.
_LEVELS = "(?:ERROR|FATAL|CRITICAL|SEVERE|EMERG|ALERT|CRIT)"
"""The error levels of logs, as loggers write them (upper case: "error" in prose is no level)."""
_NAMED_LEVELS = "(?:error|fatal|crit|critical|emerg|alert|panic|ERROR|FATAL|CRITICAL)"
_LOGGED_LEVEL = (
    rf"(?:^|[ \t])(?:level|lvl)={_NAMED_LEVELS}\b"
    rf'|"(?:log\.)?(?:level|severity|lvl)"[ \t]?:[ \t]?(?:"{_NAMED_LEVELS}"|[56]0\b)'
)
"""A record's error level as a field's value: logfmt's ``level=error`` (not a flag's
``--log-level=error``), a JSON record's ``"level": "error"`` (ECS' ``log.level``, pino's 50
and 60)."""
_LOGGED = re.compile(_LOGGED_LEVEL)
_FAILURE = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception|Failure|Fault|Violation)\b(?!\w)"
    r"|\bpanicked at\b|^[ \t]*\d+:\d+[ \t]+error[ \t]|\bunbound variable\b|\bsyntax error\b|\bError \d+\b"
    r"|\b[Ff]ailed to\b|^[ \t]*[\w./-]{1,255}:\d+:\d+: (?!warning|note|info)|\b(?:does not|doesn't) exist\b"
    r"|\bno such\b|\bmissing [\w.]{1,100} entry\b|:\d+:\d+: [A-Z]{1,3}\d{3,4}\b|\bFAIL\s"
    r"|\b(?:error|ERROR|Error|fatal|FATAL|Fatal|panic|PANIC|FAILED|FAIL|Failed|failed)\b"
    r"[ \t]?(?:\[[\w-]{1,40}\]|\(\w{1,40}\))?[ \t]?(?:[:!]|-(?!-))"  # not a flag's --next
    r"|\berror(?:\[\w+\]| TS\d+| [A-Z]{1,3}\d{3,5})"
    r"|^[ \t]*(?:E[ \t]{2,}|FAILED |FAIL |ERR!|npm ERR!|not ok |[✗✖✕×] )"
    r"|\bnpm ERR!|\berror\[E\d+\]|\bpanic:|\bSegmentation fault|\bcore dumped"
    r"|\bcommand not found|\bNo such file or directory|\bPermission denied|\bnot found\b"
    r"|\b[Cc]onnection refused|\b[Cc]ouldn't connect|\bE: |\btimed out\b|\b[Cc]annot find\b"
    r"|\b[Cc]ould not\b|\b[Uu]nable to\b"
    r"|\bundefined reference\b|\bis not defined\b|\bHTTP/\d(?:\.\d)? [45]\d\d\b"
    r"|\b[45]\d\d (?:Bad|Unauthorized|Forbidden|Not Found|Internal|Service|Gateway|Conflict|Too Many"
    r"|Unprocessable)|\bexit (?:code|status):? [1-9]\d*|\bexited with (?:code )?[1-9]\d*"
    r"|\bassert [^\n]{0,200}? ==|\bFAILED[ \t]*$"
    # A log's line at an error level: after its time (and up to three fields: a host, a
    # process, a thread, a logger), or opening the line; glog's E/F and logrus' ERRO lines;
    # logfmt's and JSON's level (see _LOGGED).
    r"|^[^\n]{0,40}?\d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:[ \t]?(?:Z|[+-]\d{2}:?\d{2}))?:?\]?[ \t]+"
    r"(?:(?!(?:INFO|DEBUG|WARN|WARNING|TRACE|NOTICE)\b)"
    r"(?:\[[^\]\n]{1,60}\]|[\w.:@/-]{1,60}(?:\[\d{1,10}\])?):?[ \t]+)"
    rf"{{0,3}}?(?:\[?{_LEVELS}\]?|\[(?:error|crit|alert|emerg|fatal)\]|ERR\])(?=[ \t:\]|/-]|$)"
    rf"|^[ \t]*(?:\[{_LEVELS}\]|(?:ERROR|FATAL)\b(?![ \t]*=)|{_LEVELS}:|(?:ERRO|FATA|PANI)\[\d{{1,10}}\])"
    r"|^[EF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\b"
    rf"|{_LOGGED_LEVEL}",
    re.MULTILINE,
)
# Not a failure although it matches: counts of zero, passing tests, and source code that
# merely mentions errors (a file shown by a read tool, numbered or not, or a diff of it).
# Every repetition is bounded or anchored, so that a line costs time linear in its length.
_NOT_FAILURE = re.compile(
    r"\b(?:0|no|zero) (?:errors?|failures?|failed)\b|\b(?:errors?|failures?|failed):? 0\b"
    r"|\bPASS(?:ED)?\b|\b\d+ passed\b|^[ \t]*ok\b|✓|^[ \t]*>[ \t]{2,}|^[ \t]*E[ \t]+\+[ \t]"
    r"|^[ \t]*Traceback \(most recent|^[ \t]*=== RUN\b|:=|^[ \t]*\d+(?:\t|[ \t]*[|│])"
    r"|^[ \t]*(?:[\w/.-]{1,255}:)?(?:\d{1,9}(?::\d{1,9})?[ \t]*[|:]?[ \t]*)?"
    r"(?:(?:raise|throw|except|catch|return|def|class|import|from|if|elif|else|for|while|func|fn|let|const"
    r"|var|pub|impl|struct|type|interface|case|assert!?)\b|#|//|/\*|\*[ \t]|@|[-+](?:[ \t]{2,}|\t))"
    r"|[;{}(]\s*$"
    r"|\b(?:new \w*Error\(|errors\.New|fmt\.Errorf|Err\(|console\.error|log(?:ger)?\.\w+\()",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_PATH = re.compile(
    r"(?<![\w/.:@+-])(?:~|\.{1,2})?/?(?:[\w@.+-]{1,255}/){1,64}[\w@.+-]{1,255}\.\w{1,16}"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|mjs|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|conf|md|rst|txt|csv|sql|sh"
    r"|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|html|css|xml|lock|env|tf|proto|gradle)\b"
    # Without an extension: from the root, home or here (``/testbed``, ``~/.config/app``,
    # ``/v1/users/``; one part of three characters at least, not ``/s``), not a closing tag;
    # a bare ``a/b/c`` may be prose (``TCP/IP/UDP``).
    r"|(?<![\w/.:@+<-])(?:~/|\.{1,2}/|/)(?:(?:[\w@.+-]{1,255}/){1,63}[\w@.+-]{1,255}/?|[\w@.+-]{3,255}/?)"
)
_DIFF_FILE = re.compile(r"^(?:\+\+\+ b/|\*\*\* (?:Update|Add|Delete) File: )(\S+)", re.MULTILINE)
_BACKTICK = re.compile(r"`([^`\n]{2,120})`")
# A sentence ends at . ! or ? before white space ("session.py" and "24.2.0" stay whole).
_SENTENCE = re.compile(r"(?:[^\n.!?]|[.!?](?=\S))+(?:[.!?]+(?=\s|$))?")
_NUMBER = re.compile(r"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?(?![\w.]*\w)|\b\d[\d,.]*\s?(?:%|[a-zA-Z]+)")
_CONSTRAINT = re.compile(
    r"\b(must|should|shall|never|always|only|don't|do not|doesn't|without|at most|at least|no more than"
    r"|no less than|limit|avoid|require[sd]?|keep|make sure|ensure|stay|not allowed|forbidden|compatib\w+"
    r"|instead of|rather than|against|prefer)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(decided|decide|chose|choose|I'll use|I will use|we'll use|will use|going with|go with|instead of"
    r"|switch(?:ed)? to|opted|prefer|settled on|rather than|because)\b"
    r"|\b(?:I'll|I will|we'll|we will|let's)\b[^.!?\n]{0,200}\b(?:so|so that|to keep|to avoid|in order to)\b",
    re.IGNORECASE,
)
_NEXT = re.compile(
    r"\b(next|then|todo|remaining|still need|plan to|after that|will now|going to)\b", re.IGNORECASE
)
_WRITES = re.compile(
    r"write|edit|create|patch|replace|insert|update|modify|append|save|move|rename|delete|remove|mkdir|touch"
    r"|str_replace|apply|put|upload",
    re.IGNORECASE,
)
_PATH_KEYS = (
    "path",
    "file_path",
    "filepath",
    "file",
    "filename",
    "target",
    "target_file",
    "dest",
    "destination",
)
_COMMAND_KEYS = ("cmd", "command", "script", "commands", "shell", "code", "query", "url")
_ASKS_KEPT = 30
"""The user's later requests kept in the goal, newest first."""
_SCAN_CHARS = 200_000
"""Identifiers are looked for in the first this many characters of a message."""
_COUNT = re.compile(r" \(×(\d+)\)$")


def error_lines(text: str) -> list[str]:
    """The lines of a text that report a failure, in order, each once. Linear in the text:
    each line is looked at once, and at most 2,000 characters either side of its match;
    of a text over 400,000 characters, the first and last 200,000. Only the lines where a fast
    superset of the failure pattern finds something are searched (see :func:`_candidate_lines`).
    A terminal's colours and styles (ANSI escape sequences) are read past, and left out of the
    lines."""
    if len(text) > 2 * _SCAN_CHARS:  # a huge output: its head and tail (the whole is archived)
        return list(dict.fromkeys([*error_lines(text[:_SCAN_CHARS]), *error_lines(text[-_SCAN_CHARS:])]))
    text = without_escapes(text)
    found: dict[str, None] = {}
    pos = 0
    for line_start in _candidate_lines(text):
        if len(found) >= _MAX_ITEMS:
            break
        if line_start < pos:
            continue
        stop = text.find("\n", line_start)
        stop = len(text) if stop < 0 else stop + 1
        match = _reported(text, line_start, stop)
        if match is None:
            continue
        line = _error_item(text, match)
        if line is not None:
            found.setdefault(line, None)
        following = text.find("\n", match.end())
        pos = len(text) if following < 0 else following + 1
    return list(found)


_PROSE = re.compile(
    r"not found|[Cc]ould not|[Uu]nable to|no such|timed out|[Cc]annot find|(?:does not|doesn't) exist"
    r"|is not defined|[Ff]ailed to|[45]\d\d [A-Z][a-z]+(?: [A-Z][a-z]+)?"
)
"""The failure phrases that prose says too (a web page's text: "I could not find a good
calculator", "Page not found"): one of them reports a failure only where a tool, a log or a
shell would write it (see :func:`_reported`)."""
_PROSE_AT = 160
_PROSE_LINE = 1000
"""A prose failure phrase more than _PROSE_AT characters into a line of more than
_PROSE_LINE characters is a page's text, not a report: a log line that ends with a status
(an access log's long URL, then ``404 Not Found``) is shorter."""
_MARKUP = re.compile(
    r"[ \t]*<(?:!DOCTYPE|!--|/?(?:html|head|title|body|div|span|p|h[1-6]|a|center|meta|link|script|style"
    r"|ul|ol|li|table|tr|td|th|br|hr|img|pre|section|article|nav|header|footer|main|form|button|label"
    r"|strong|em|b|i)(?:[ \t][^>\n]{0,500})?/?>)",
    re.IGNORECASE,
)
"""A line that opens with an HTML element's tag: a page's markup (``<title>Page not found``,
``<h1>404 Not Found</h1>``); not ``<urlopen error timed out>`` nor an XML report's tags."""


def _reported(text: str, line_start: int, stop: int) -> re.Match[str] | None:
    """The first match of _FAILURE in a line that reports a failure: not a prose phrase of a
    web page's text (:data:`_PROSE`) far into a long line or in its markup."""
    match = _FAILURE.search(text, line_start, stop)
    while (
        match is not None
        and _PROSE.fullmatch(match.group())
        and (
            (match.start() - line_start > _PROSE_AT and stop - line_start > _PROSE_LINE)
            or _MARKUP.match(text, line_start, stop)
        )
    ):
        match = _FAILURE.search(text, match.end(), stop)
    return match


def _error_item(text: str, match: re.Match[str]) -> str | None:
    """The line of a failure, as the summary shows it: whole up to _ITEM_CHARS, else clipped;
    from a third of the item before the failure when it is further in (a long line's start
    does not say it). None for a line that merely mentions a failure (see _NOT_FAILURE)."""
    start = text.rfind("\n", max(0, match.start() - 2000), match.start()) + 1
    start = start or max(0, match.start() - 2000)
    end = text.find("\n", match.end(), match.end() + 2000)
    raw = text[start : match.end() + 2000 if end < 0 else end]
    line = raw.strip()
    if len(line) <= 3 or (_NOT_FAILURE.search(line) and not _LOGGED.search(line)):  # a JSON record ends in }
        return None
    if len(line) <= _ITEM_CHARS:
        return line
    at = match.start() - start - (len(raw) - len(raw.lstrip()))
    if at > _ITEM_CHARS // 3:
        line = "…" + line[at - _ITEM_CHARS // 3 :].lstrip()
    return line[: _ITEM_CHARS - 1] + "…" if len(line) > _ITEM_CHARS else line


# _FAILURE without its assertions (\b, ^, $, lookarounds), with \w, \d and \s widened to
# every non-ASCII character: whatever _FAILURE matches, this matches too. RE2 runs it in
# linear time at ~1 GB/s, so that a line with a failure word (a generated log with "error" on
# every line) is searched by the slow exact pattern only when this finds something.
_W = r"[0-9A-Za-z_\x{80}-\x{10FFFF}]"
_D = r"[0-9\x{80}-\x{10FFFF}]"
_FAILURE_SUPERSET = re2.compile(
    rf"[A-Z]{_W}*(?:Error|Exception|Failure|Fault|Violation)|panicked at|{_D}+:{_D}+[ \t]+error[ \t]"
    rf"|unbound variable|syntax error|Error {_D}|[Ff]ailed to|:{_D}+:{_D}+: |(?:does not|doesn't) exist"
    r"|no such|missing [.0-9A-Za-z_\x{80}-\x{10FFFF}]{1,100} entry|FAIL[\s\x0b\x1c-\x1f\x{80}-\x{10FFFF}]"
    r"|(?:error|ERROR|Error|fatal|FATAL|Fatal|panic|PANIC|FAILED|FAIL|Failed|failed)"
    r"[ \t]?(?:\[[^\]\n]{1,40}\]|\([^)\n]{1,40}\))?[ \t]?[:!\-]"
    r"|error(?:\[| TS| [A-Z])|E[ \t]{2}|FAILED |FAIL |ERR!|not ok |[✗✖✕×] |panic:|Segmentation fault"
    r"|ERROR|FATAL|CRITICAL|SEVERE|EMERG|ALERT|CRIT|ERRO|ERR\]|FATA|PANI|\[(?:error|crit|alert|emerg|fatal)\]"
    r"|level=|lvl=|(?:level|severity|lvl)\"[ \t]?:"
    rf"|[EF]{_D}{{4}} {_D}"
    r"|core dumped|not found|No such file|Permission denied|[Cc]onnection refused|[Cc]ouldn't connect"
    r"|E: |timed out|[Cc]annot find|[Cc]ould not|[Uu]nable to|undefined reference|is not defined|HTTP/"
    rf"|[45]{_D}{_D} (?:Bad|Unauthorized|Forbidden|Not Found|Internal|Service|Gateway|Conflict|Too Many"
    r"|Unprocessable)|exit (?:code|status)|exited with|assert |FAILED"
)


def _may_hold(superset: Any, text: str) -> bool:
    """Whether an RE2 prefilter finds something in a text, so that the exact pattern it stands
    for must look: True also for a text RE2 cannot read (a lone surrogate, which UTF-8 cannot
    hold), which the exact pattern reads instead."""
    try:
        return superset.search(text) is not None
    except UnicodeEncodeError:
        return True


def _candidate_lines(text: str) -> list[int]:
    """The starts of the lines that may hold a failure, in order: those where the RE2 superset
    finds something, searched line after line (a line found, the search goes on at the next
    one: however many matches a line holds, it costs one search), in UTF-8 with RE2, in time
    linear in the text. A lone surrogate (bytes decoded with ``surrogateescape``), which UTF-8
    cannot hold, is searched as ``?``: one character still one byte, and the exact pattern
    matches a surrogate only where a character class excludes something (``[^\n]``), as the
    superset's does, which ``?`` matches too."""
    data = text.encode("utf-8", "replace")
    ascii_only = len(data) == len(text)
    starts: list[int] = []
    pos = 0  # in bytes
    line_b = line_c = 0  # the start of the last line found, in bytes and in characters
    while (found := _FAILURE_SUPERSET.search(data, pos)) is not None:
        start = data.rfind(b"\n", pos, found.start()) + 1 or pos
        if ascii_only:
            line_c = start
        else:  # the same line in characters: as many newlines on from the last one found
            for _ in range(data.count(b"\n", line_b, start)):
                line_c = text.index("\n", line_c) + 1
        line_b = start
        starts.append(line_c)
        following = data.find(b"\n", found.start())
        if following < 0:
            break
        pos = following + 1
    return starts


_FACTS: Memo[tuple[tuple[str, ...], tuple[str, ...]]] = Memo(16 * 1024 * 1024, shared=True)
"""What was read from each long text, by a digest of it: a text is read once however many
summaries it goes into, and equal texts of different requests share the reading. Bounded by
the bytes of what was read (the texts themselves are not kept). What the memos keep is
tuples, and one shared pair for a text without any: the garbage collector stops tracking a
tuple of strings, and a first call that reads 10,000 messages into them does not set off
full collections of its caller's whole heap (40% of that call in a LangChain agent)."""
_NOTHING: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
_FACTS_MIN_CHARS = 512


_FAILURES: Memo[tuple[str, ...]] = Memo(4 * 1024 * 1024, shared=True)


def failure_lines(text: str) -> list[str]:
    """:func:`error_lines` of a text, memoised by content for a long one (a result cut again
    and again, as compaction weighs what a cut would save at every call)."""
    key = content_key(text) if len(text) >= _FACTS_MIN_CHARS else None
    if key is not None:
        hit = _FAILURES.get(key, BY_CONTENT)
        if hit is not None:
            return list(hit)
    found = error_lines(text)
    if key is not None:
        _FAILURES.put(key, BY_CONTENT, tuple(found), sum(map(len, found)) + 100)
    return found


def _result_facts(result: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A tool result's error lines and URLs."""
    key = content_key(result) if len(result) >= _FACTS_MIN_CHARS else None
    if key is not None:
        hit = _FACTS.get(key, BY_CONTENT)
        if hit is not None:
            return hit
    head = without_escapes(result[:100_000])
    urls = [u.rstrip(".,;:") for u in _URL.findall(head)] if "http" in head else ()
    errors = error_lines(result)
    facts = (tuple(errors), tuple(urls)) if errors or urls else _NOTHING
    if key is not None:
        _FACTS.put(key, BY_CONTENT, facts, sum(map(len, facts[0])) + sum(map(len, facts[1])) + 200)
    return facts


@dataclass(frozen=True, slots=True)
class _TextFacts:
    """What the reader takes from a user's or an assistant's text, in order."""

    constraints: tuple[str, ...]
    decisions: tuple[str, ...]
    next: tuple[str, ...]
    errors: tuple[str, ...]
    urls: tuple[str, ...]
    marked: tuple[str, ...]
    paths: tuple[str, ...]

    def size(self) -> int:
        parts = (self.constraints, self.decisions, self.next, self.errors, self.urls, self.marked, self.paths)
        return sum(len(x) + 60 for part in parts for x in part)


_TEXTS: Memo[_TextFacts] = Memo(16 * 1024 * 1024, shared=True)


def _text_facts(text: str, user: bool) -> _TextFacts:
    """A user's (or an assistant's) text: its sentences of each kind, its error lines and
    identifiers, read once per text however many summaries it goes into."""
    key = (content_key(text), user) if len(text) >= _FACTS_MIN_CHARS // 4 else None
    if key is not None:
        hit = _TEXTS.get(key, BY_CONTENT)
        if hit is not None:
            return hit
    text = without_escapes(text)
    constraints, decisions, following = [], [], []
    for s in _sentences(text):
        if user:
            if _CONSTRAINT.search(s) or _NUMBER.search(s):
                constraints.append(s)
            continue
        if _DECISION.search(s):
            decisions.append(s)
        if _NEXT.search(s):
            following.append(s)
    scanned = text[:_SCAN_CHARS]
    facts = _TextFacts(
        tuple(constraints),
        tuple(decisions),
        tuple(following),
        tuple(error_lines(text)) if user and len(text) > _ITEM_CHARS else (),
        tuple(u.rstrip(".,;:") for u in _URL.findall(scanned)),
        tuple(_BACKTICK.findall(scanned)),
        tuple(p.rstrip(".,;:") for p in _paths(_URL.sub(" ", scanned))),
    )
    if key is not None:
        _TEXTS.put(key, BY_CONTENT, facts, facts.size() + 200)
    return facts


def _clip(text: str, limit: int = _ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _sentences(text: str) -> Iterable[str]:
    for s in _SENTENCE.findall(text):
        s = s.strip()
        if len(s) > 3:
            yield _clip(s)


def _counted(counts: Counter[str], order: Mapping[str, int], *, specific: bool = False) -> list[str]:
    """Items with their counts, most frequent first, then the most recent. With ``specific``,
    items that say something particular (see :func:`specificity`) come before generic ones."""
    ranked = sorted(counts, key=lambda k: (-specificity(k) if specific else 0, -counts[k], -order[k]))
    return [with_count(k, counts[k]) for k in ranked[:_MAX_ITEMS]]


_SPECIFIC = re.compile(
    r"['\"`\u2018\u201c].+['\"`\u2019\u201d]|[\w/.-]+\.\w+[:(]\d+|\b\w+(?:_\w+|[a-z][A-Z]\w*|::\w+)|\d{2,}"
)


def specificity(line: str) -> int:
    """How much an error line says beyond its label: 2 with a quoted name, a file and line,
    an identifier or a number and some words; 1 with some words; 0 for a bare label such
    as ``[exit code: 1]`` or ``error: could not compile``."""
    words = len(line.split())
    if _SPECIFIC.search(line) and words >= 3:
        return 2
    return 1 if words >= 6 else 0


FAILED_COMMANDS = "failed commands: "
_SHOWN = 5


def _failed_commands(commands: list[str], earlier: int = 0) -> list[str]:
    """One item naming the commands that failed, the newest five verbatim."""
    if not commands:
        return []
    shown = ", ".join(f"`{c}`" for c in commands[-_SHOWN:])
    more = earlier + max(0, len(commands) - _SHOWN)
    return [f"{FAILED_COMMANDS}{shown}" + (f" (and {more} earlier)" if more else "")]


def merge_failed_commands(items: list[str]) -> list[str]:
    """Items with every "failed commands" item merged into one, last, in order."""
    commands: list[str] = []
    earlier = 0
    rest = []
    for item in items:
        if not item.startswith(FAILED_COMMANDS):
            rest.append(item)
            continue
        commands += [c for c in re.findall(r"`([^`]*)`", item) if c not in commands]
        found = re.search(r"\(and (\d+) earlier\)$", item)
        earlier += int(found.group(1)) if found else 0
    return [*rest, *_failed_commands(commands, earlier)]


# A progress line: tool ×calls (paths): N failed, last ok|failed
_TOOL = re.compile(
    r"^(?P<name>\S+) ×(?P<calls>\d+)(?: \((?P<paths>.*?)(?:; (?P<count>\d+) paths)?\))?"
    r"(?:: (?P<failed>\d+) failed, last (?P<last>ok|failed))?$"
)


def tool_line(name: str, calls: int, paths: list[str], failed: int, last_failed: bool, count: int = 0) -> str:
    """``read_file ×31 (src/a.py, src/b.py, … src/z.py; 12 paths)``, ``run ×12: 9 failed, last ok``."""
    line = f"{name} ×{calls}"
    count = max(count, len(paths))
    if paths:
        shown = ", ".join(paths) if count <= 3 else f"{paths[0]}, {paths[1]}, … {paths[-1]}; {count} paths"
        line += f" ({shown})"
    if failed:
        line += f": {failed} failed, last {'failed' if last_failed else 'ok'}"
    return line


def merge_tool_lines(old: list[str], fresh: list[str]) -> list[str]:
    """Progress lines of two stretches, one per tool: calls, paths and failures added up."""
    merged: dict[str, dict[str, Any]] = {}
    for item in [*old, *fresh]:
        found = _TOOL.match(item)
        if found is None:
            merged[item] = {"raw": item}
            continue
        paths = [p.removeprefix("… ") for p in (found["paths"] or "").split(", ") if p]
        failed = int(found["failed"] or 0)
        tool = merged.setdefault(
            found["name"], {"calls": 0, "paths": [], "failed": 0, "last": False, "count": 0}
        )
        tool["calls"] += int(found["calls"])
        tool["paths"] = list(dict.fromkeys([*tool["paths"], *paths]))
        tool["count"] = max(tool["count"], int(found["count"] or 0), len(tool["paths"]))
        tool["failed"] += failed
        tool["last"] = found["last"] == "failed"
    return [
        t["raw"]
        if "raw" in t
        else tool_line(name, t["calls"], t["paths"], t["failed"], t["last"], t["count"])
        for name, t in merged.items()
    ]


# -- the outcome of a tool call ----------------------------------------------------------------
# An exit status stated by the tool or its harness: "[exit code: 1]", "exit status 2",
# "Process exited with code 0", "returncode=1", "Exit code: 127".
_EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?: with)?[ _-]?(?:code|status)|return[ _-]?code|returncode)\b"
    r"[\]:= ]{0,3}(-?\d{1,3})\b",
    re.IGNORECASE,
)
# The shape of a line that ends (or opens) a failed run: a Python exception line, an error
# label at the start of the line, a failed test summary, a shell's complaint.
_FAILED_SHAPE = re.compile(
    r"^(?:[\w.]{0,100}(?:Error|Exception)(?::|$)|(?:error|fatal|Error|Fatal)(?:\[\w+\])?:"
    r"|Traceback \(most recent call last\)|panic:|npm ERR!|E: |FAILED\b|FAIL\b"
    r"|=+ .{0,200}\b\d+ (?:failed|errors?)\b|[\w./: -]{0,200}: (?:command not found|No such file or directory"
    r"|Permission denied)$|Segmentation fault|Killed$|Aborted"
    r"|[\w.-]{1,100}(?:\[\d+\])?: \*\*\* .{0,300}Error \d+$)"
)
_EDGE_LINES = 3


def _exit_status(line: str) -> re.Match[str] | None:
    """_EXIT's match in a line; an ASCII line without its words is not searched (a search
    ignoring case costs ~40 ns a character)."""
    if line.isascii():
        low = line.lower()
        if "exit" not in low and "return" not in low:
            return None
    return _EXIT.search(line)


_FLAGS = ("is_error", "error")


def outcome(result: str | None, message: Mapping[str, Any] | None = None) -> str:
    """A tool call's outcome: ``ok``, ``failed`` or ``exit N``, never from the mere presence of
    the word "error" in its output. The tool's own flag first (``is_error``, ``error``,
    ``status``); then an exit status stated in the first or last lines; then the shape of the
    last (or first) lines: an exception, an error label at the line's start, a failed-test
    summary. A log that merely contains ``ERROR`` lines, read successfully, is ``ok``."""
    if message is not None:
        status = message.get("status")
        if any(message.get(k) for k in _FLAGS) or status in ("error", "failed", "incomplete"):
            return "failed"
        origin = message.get(MARK_MEMBER)  # a provider's flag kept by its conversion (is_error)
        if isinstance(origin, Mapping) and any(origin.get(k) is True for k in _FLAGS):
            return "failed"
    text = without_escapes(result or "").strip()
    if not text:
        return "ok"
    lines = [ln.strip() for ln in text[:4000].splitlines()[:_EDGE_LINES] if ln.strip()]
    tail = [ln.strip() for ln in text[-4000:].splitlines()[-_EDGE_LINES:] if ln.strip()]
    for line in dict.fromkeys([*reversed(tail), *lines]):  # a short text's lines are both
        found = _exit_status(line[:300])
        if found:
            code = int(found.group(1))
            return "ok" if code == 0 else f"exit {code}"
    if any(_FAILED_SHAPE.match(line[:300]) for line in [*tail[-2:], *lines[:1]]):
        return "failed"
    return "ok"


# -- error lines folded ---------------------------------------------------------------------------
_FOLD_AT = 3
# A leading timestamp: lines that differ only in it and a counter are the same event.
_STAMP = re.compile(
    r"^\[?\d{4}-\d\d-\d\d[T ][0-9:.,]{1,20}(?:Z|[+-]\d\d:?\d\d)?\]?\s*"
    r"|^\[?\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\]?\s*"
)
_DIGITS = re.compile(r"\d{1,18}(?:\.\d{1,18})?(?:\u2013\d{1,18}(?:\.\d{1,18})?)?")
_HOLE = "\ue000"


def fold_errors(items: list[str]) -> list[str]:
    """Near-identical lines folded into one: three or more lines the same but for one whole
    number that counts (see :func:`_counter`), shown as its range: ``connection refused
    (attempt 1\u201330) (×30)`` (an en dash); two or more the same but for how long they
    took, as that range: ``✕ parses dates (3\u201335 ms) (×7)``. A range folded earlier widens.
    In order of each group's first line; a folded line without its leading timestamp."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for k, item in enumerate(_fold_durations(items)):
        line, n = split_count(item)
        text = _STAMP.sub("", line, count=1)
        # A number's place is a character no line holds (a line's own '#' stays itself); a
        # line that holds it is a group of its own.
        key = _DIGITS.sub(_HOLE, text) if _HOLE not in text else f"{k}{_HOLE}{text}"
        groups.setdefault(key, []).append((line, n))
    out = []
    for template, members in groups.items():
        values = [_DIGITS.findall(_STAMP.sub("", line, count=1)) for line, _ in members]
        varying = [k for k in range(len(values[0])) if len({v[k] for v in values}) > 1]
        spans = [_span(v[varying[0]]) for v in values] if len(varying) == 1 else []
        if len(members) < _FOLD_AT or not _counter(spans):
            out += [with_count(line, n) for line, n in members]
            continue
        low, high = min(s[0] for s in spans if s), max(s[1] for s in spans if s)
        numbers = list(values[0])  # the numbers that do not vary, as the lines say them
        numbers[varying[0]] = str(low) if low == high else f"{low}\u2013{high}"
        parts = template.split(_HOLE)
        text = parts[0] + "".join(number + part for number, part in zip(numbers, parts[1:], strict=True))
        out.append(f"{text} (×{sum(n for _, n in members)})")
    return out


def _counter(spans: list[tuple[int, int] | None]) -> bool:
    """Whether the one number the lines differ in counts (attempt 1, 2, … 30: its values cover
    at least half of their range): scattered ports, ids or line numbers say something
    different every time, and are not folded (a run of them, ports 8000-8004, is); nor is a
    decimal (a measure)."""
    if not spans or None in spans:
        return False
    values = {n for v in spans if v for n in range(v[0], min(v[1], v[0] + 10_000) + 1)}
    return max(values) - min(values) + 1 <= 2 * len(values)


def _span(value: str) -> tuple[int, int] | None:
    """A whole number or a range of them (either way round), low first; None for a decimal."""
    if "." in value:
        return None
    low, _, high = value.partition("\u2013")
    a, b = int(low), int(high or low)
    return (a, b) if a <= b else (b, a)


def _fold_durations(items: list[str]) -> list[str]:
    """Lines the same but for the one duration they hold, in one unit, folded into one with
    the durations' range, without a leading timestamp: how long a test took says nothing about
    its failure. Not a duration that is set rather than measured (a timeout, a wait, a limit:
    ``timed out after 30s`` and ``after 60s`` say different things)."""
    groups: dict[str, list[tuple[str, int, re.Match[str] | None]]] = {}
    for k, item in enumerate(items):
        line, n = split_count(item)
        text = _STAMP.sub("", line, count=1)
        found = list(_DURATION.finditer(text))
        if len(found) == 1 and _HOLE not in text and not _SET_TIME.search(text, 0, found[0].start()):
            key = f"{found[0][2]}{_HOLE}{text[: found[0].start()]}{_HOLE}{text[found[0].end() :]}"
            groups.setdefault(key, []).append((text, n, found[0]))
        else:
            groups.setdefault(f"{k}{_HOLE}{line}", []).append((line, n, None))  # a group of its own
    out = []
    for members in groups.values():
        first = members[0][2]
        if len(members) < 2 or first is None:
            out += [with_count(line, n) for line, n, _ in members]
            continue
        values = [v for _, _, m in members if m for v in m[1].split("\u2013")]
        low, high = min(values, key=float), max(values, key=float)
        span = low if low == high else f"{low}\u2013{high}"
        text = members[0][0]
        out.append(f"{text[: first.start(1)]}{span}{text[first.end(1) :]} (×{sum(n for _, n, _ in members)})")
    return out


_AMOUNT = r"\d{1,9}(?:\.\d{1,9})?"
_DURATION = re.compile(
    rf"(?<![\w.])({_AMOUNT}(?:\u2013{_AMOUNT})?) ?(ms|[µμ]s|us|ns|s|secs?|seconds|min)(?![\w-])"
)
_SET_TIME = re.compile(r"time ?out|timed out|after|every|within|limit|deadline|wait|retry in", re.IGNORECASE)


def uncontained(items: list[str]) -> list[str]:
    """Error items without those another item contains verbatim (``KeyError: 'x'`` in
    ``E   KeyError: 'x'``), or says as the message of a test's failure but for pytest's ``E``
    margin (``E   KeyError: 'x'`` and ``FAILED t.py::test_a - KeyError: 'x'``: the same failure,
    the line that names the test says more), in their order. The line kept has the larger
    count of the two (the failure was seen at least that often)."""
    split = [split_count(i) for i in items]
    keys, counts = [k for k, _ in split], [n for _, n in split]
    said = [k.partition(" - ")[2] if k.startswith("FAILED ") else "" for k in keys]
    longest = sorted(range(len(items)), key=lambda i: -len(keys[i]))
    kept: list[int] = []
    for i in longest:
        core = _MARGIN.sub("", keys[i], count=1)
        holder = next((j for j in kept if keys[i] in keys[j] or (core != keys[i] and core == said[j])), None)
        if holder is None:
            kept.append(i)
        else:
            counts[holder] = max(counts[holder], counts[i])
    return [with_count(keys[i], counts[i]) for i in sorted(kept)]


_MARGIN = re.compile(r"^E\s+(?=\S)")


def with_count(item: str, n: int) -> str:
    """An item with its ``(×N)`` suffix when it was seen more than once (see :func:`split_count`)."""
    return item if n < 2 else f"{item} (×{n})"


def split_count(item: str) -> tuple[str, int]:
    """An item without its ``(×N)`` suffix, and N (1 without one)."""
    found = _COUNT.search(item)
    return (item[: found.start()], int(found.group(1))) if found else (item, 1)


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments", "")
    if isinstance(args, dict):
        return args
    try:
        value = json.loads(args) if isinstance(args, str) and args.strip().startswith("{") else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- the ledger of specifics -----------------------------------------------------------------------
LEDGER_ITEMS = 120
"""Ledger items kept before the summary's budget ranks them out."""
_LEDGER_SCAN = 8_000
"""Characters of a tool result read for paths and ids (the ledger is about what was used)."""
_LEDGER_HELD = 4 * _MAX_ITEMS
_LEDGER_PRUNED = 3 * _MAX_ITEMS
"""Entries a ledger holds while it reads (against hostile input), and how many of its best a
full one keeps (:meth:`_Ledger._prune`): a sort per ``_MAX_ITEMS`` new entries at most."""
_CALL_CHARS = 160
_ARG_CHARS = 300
"""An argument longer than this (a file's content, a patch) is not read for ids."""
_SHORT_RESULT = 2000
_VALUE_CHARS = 60
"""An argument longer than this is shown in a call's ledger item by its key only."""
_ID = re.compile(
    r"(?<![\w.-])(?:[\w.-]{1,100}\.[A-Za-z]\w{0,7}:\d{1,7}(?::\d{1,5})?"
    r"|(?:localhost|\d{1,3}(?:\.\d{1,3}){3}):\d{2,5}|v?\d{1,5}(?:\.\d{1,5}){2,3}|\d{4}-\d\d-\d\d"
    r"|(?=[\w-]{0,63}\d)(?=[\w-]{0,63}[A-Za-z])[A-Za-z0-9][\w-]{4,63}|\d{4,40})(?![\w-])"
)
_MIXED = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]|\d[a-z][A-Z]")
_SEPARATED = re.compile(r"[_.:-]")
_READ_CMD = re.compile(
    r"^\s*(?:cat|head|tail|less|more|grep|rg|wc|file|strings|xxd|hexdump|diff|ls|stat|sed -n)\b"
)
_RUN_CMD = re.compile(r"^\s*(?:python\d?|node|bash|sh|\./|go run|cargo run|ruby|perl|java|pytest|npx)\b")
_WRITE_CMD = re.compile(r"(?:^|\s)(?:sed -i|tee|cp|mv|touch|mkdir|chmod|patch)\b")
# A redirect that writes a file (> f, >> f, 2> f, &> f, >| f, >& f): its target. Not one to
# /dev/null, a device or another descriptor (2>&1, >&2, >&-).
_REDIRECT = re.compile(
    r"(?<![-=<>])(?:\d|&)?>>?(?:\||&(?![\d-]))?\s*(?!/dev/(?:null|stdout|stderr|tty|fd/\d)\b)"
    r"(?P<target>[^\s&|;<>()'\"`]+)"
)
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")


def _redirects(command: str) -> tuple[str, set[str]]:
    """A shell command without the redirects that write files, and their targets (as written,
    quotes taken off, and the paths they hold); a '>' that is quoted is no redirect (``python
    -c "print(1>0)"``, ``awk '$1 > 5'``), a quoted target is one (``> "$out/a.txt"``)."""
    masked = _QUOTED.sub(lambda q: "_" * len(q[0]), command)  # same length: spans carry over
    targets: set[str] = set()
    spans = []
    for found in _REDIRECT.finditer(masked):
        target = command[found.start("target") : found.end("target")].replace('"', "").replace("'", "")
        if target.isdigit() or target == "-":  # >& 2: a descriptor
            continue
        targets.update([target, *_paths(target)])
        spans.append(found.span())
    for start, end in reversed(spans):
        masked = f"{masked[:start]} {masked[end:]}"
    return masked, targets


_DELETE = re.compile(r"delete|remove|\brm\b", re.IGNORECASE)
_CREATE = re.compile(r"create|write|new|mkdir|touch|save", re.IGNORECASE)
_LEDGER_ITEM = re.compile(
    r"^(?:`(?P<call>.+)` → (?P<outcome>ok|failed|exit -?\d+)|(?P<path>\S+): (?P<done>[a-z, ]+)|(?P<id>\S+))$"
)
_ACTIONS = ("created", "edited", "deleted", "ran", "read", "named", "seen")
"""What was done to a path, most telling first: ``named`` by the user or the agent (in a
message, a command, a file it wrote), ``seen`` in an output only."""
_IMPLIED = frozenset({"read", "named", "seen"})
"""Actions a path's item leaves out when it says a stronger one."""
_OFTEN = 2
"""Outputs a path only seen is seen in for it to rank with what was named (tier 1): one that
comes up again (a listing, then grep hits, a traceback) is one the task turns on. Measured on
generated 300-call runs: 2 keeps more of the paths the agent used again than 3 or 4, and
nothing less of the rest."""


def _action(tool: str, args: Mapping[str, Any], command: str | None) -> str:
    """What a call did to the paths it names."""
    if command is not None:
        if _WRITE_CMD.search(command):
            return "edited"
        if re.match(r"\s*rm\b", command):
            return "deleted"
        if _RUN_CMD.match(command):
            return "ran"
        return "read" if _READ_CMD.match(command) else "seen"
    if _DELETE.search(tool):
        return "deleted"
    if _WRITES.search(tool):
        return "created" if _CREATE.search(tool) and not args.get("old_str") else "edited"
    return "read"


def _call_text(name: str, args: Mapping[str, Any], shells: list[str] | None = None) -> list[str]:
    """The ledger's names of a call: each line of a shell command, else ``name(k=v, …)``;
    ``shells``: the call's :func:`~ctxmgmt.messages.shell_keys`, when known."""
    for key in shell_keys(name, args) if shells is None else shells:
        value = args.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return [_clip(" ".join(line.split()), _CALL_CHARS) for line in islice(command_lines(value), 4)]
    # Short values verbatim (ids, names, flags); a long one (a file's content, a patch) by
    # its key only: what it held is in the ledger's paths and ids.
    shown = ", ".join(
        f"{k}={text}"
        if len(text := v if isinstance(v, str) else json.dumps(v)[:400]) <= _VALUE_CHARS
        else f"{k}=…"
        for k, v in list(args.items())[:6]
    )
    return [_clip(f"{name}({shown})", _CALL_CHARS)]


_BARE_CALL = re.compile(r"^[\w.-]{1,100}\((?:\w{1,100}=…(?:, )?)*\)$")
_ID_LIMIT = 40
_FAMILY = 3
"""Ids the same but for their numbers (``handler_1`` … ``handler_49``) the ledger keeps."""
_HAS_DIGIT = re.compile(r"\d").search
_NUMERIC = re.compile(r"[vV]?[\d.,:-]+").fullmatch
"""A number, a version, a date: the family rule (a name the same but for its numbers) is not for it."""
_WORD_CHARS = 300
"""An id is looked for in the words (split at white space) that hold a digit, each's start."""
_SPECIFICS: Memo[tuple[tuple[str, ...], tuple[str, ...]]] = Memo(8 * 1024 * 1024, shared=True)


_OWN = re.compile("|".join((marks.STAMP.pattern, marks.TAG.pattern, r"\b[tm]-[0-9a-f]{32}\b")))
"""ctxmgmt's own marks: a cut result's notice (``[truncated: original 55,012 chars; …
offset=1220, limit=20000) returns them #k=…]``: its sizes and offsets), tags and archive
references are not the agent's specifics (the summary's guide lists the references). A
cleared result's notice stays: its trace holds the specifics of what was cleared."""


# A run of the characters a path may hold (every one _PATH matches, and more: any but white
# space and the ASCII punctuation no path holds) with a dot or a slash in it. Every match of
# _PATH lies within one, and starts and ends where _PATH would find it in the whole text (its
# lookbehind reads the text before the run; the run ends before a character that ends a word).
_RUN = re2.compile(r"[^\s!\"#$%&'()*,:;<=>?\[\\\]^`{|}./]*[./][^\s!\"#$%&'()*,:;<=>?\[\\\]^`{|}]*")
_SPARSE = 60
"""A text with fewer dots and slashes than one in this many characters is searched run by run."""
_RUNS_FROM = 2000
"""Characters from which searching run by run pays (RE2's call costs ~10 us)."""


_OWN_SUPERSET = re2.compile(r"#k=|[tm]-[0-9a-f]{32}")
"""What every match of _OWN holds: a text without it is not searched by _OWN (RE2: ~1 GB/s)."""


def _may_own(text: str) -> bool:
    """Whether a text may hold one of ctxmgmt's own marks (:data:`_OWN_SUPERSET`); a text
    without ``#k=``, ``t-`` or ``m-`` cannot (a substring test costs less than RE2's call)."""
    return ("#k=" in text or "t-" in text or "m-" in text) and _may_hold(_OWN_SUPERSET, text)


def _paths(text: str) -> list[str]:
    """The paths in a text, in order: what ``_PATH`` finds that holds a letter (not ``1/2/3``).
    When dots and slashes are rare (a log with a path here and there), searched only within
    the runs that may hold one: _PATH costs ~80 ns a character it looks at, RE2 finds the
    runs at ~1 GB/s, and a run costs ~3 us."""
    signs = text.count("/") + text.count(".")
    if not signs:  # every path holds one
        return []
    if signs * _SPARSE > len(text) or len(text) < _RUNS_FROM:
        found = _PATH.findall(text)
    else:
        found = _paths_by_runs(text)
    return [p for p in found if _LETTER.search(p)]


_LETTER = re.compile(r"[^\W\d_]")


def _paths_by_runs(text: str) -> list[str]:
    """``_PATH.findall(text)``, searching only the runs that may hold a path."""
    try:
        runs = [m.span() for m in _RUN.finditer(text)]
    except UnicodeEncodeError:  # a lone surrogate, which RE2's UTF-8 cannot hold
        return _PATH.findall(text)
    found: list[str] = []
    for start, end in runs:
        found += _PATH.findall(text, start, end)
    return found


def _specifics_of(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The paths and the id-shaped words (at most 40) of a text's start, read once per text.
    Not a random-looking mix of cases (base64 or binary noise), nor a word with one digit
    (``py3``, ``mock-3``): no agent types those again."""
    if not text:
        return _NOTHING
    # A short text (an argument, a one-line answer) is its own key (a str: no digest, bytes,
    # is equal to it).
    key: Any = content_key(text) if len(text) >= _FACTS_MIN_CHARS else text
    hit = _SPECIFICS.get(key, BY_CONTENT)
    if hit is not None:
        return hit
    scanned = without_escapes(text[:_LEDGER_SCAN])
    if "http" in scanned:  # every URL holds it
        scanned = _URL.sub(" ", scanned)
    if _may_own(scanned):
        scanned = _OWN.sub(" ", scanned)
    paths = list(dict.fromkeys(_clip(p.rstrip(".,;:"), 200) for p in _paths(scanned)))[:_MAX_ITEMS]
    ids: dict[str, None] = {}
    # A word of letters only holds no digit: told by str.isalpha, not a regex call per word.
    numbered = " ".join(w[:_WORD_CHARS] for w in scanned.split() if not w.isalpha() and _HAS_DIGIT(w))
    for found in _ID.findall(numbered):
        if _MIXED.search(found) and not _SEPARATED.search(found):
            continue
        if not found[0].isdigit() and sum(c.isdigit() for c in found) < 2:
            continue
        ids.setdefault(found, None)
        if len(ids) >= _ID_LIMIT:
            break
    facts = (tuple(paths), tuple(ids)[:_ID_LIMIT]) if paths or ids else _NOTHING
    size = (
        sum(len(x) + 60 for part in facts for x in part)
        + 200
        + (len(text) if len(text) < _FACTS_MIN_CHARS else 0)
    )
    _SPECIFICS.put(key, BY_CONTENT, facts, size)
    return facts


class _Ledger:
    """Specifics seen in a stretch: calls with their last outcome, paths with what was done to
    them, ids; each with how often and how recently it was used. An entry's tier says how sure
    it is that the agent needs it: 3 for its shell commands, 2 for the paths its calls acted
    on, 1 for its other calls and what the user or the agent wrote (ids in arguments and in
    short answers included), 0 for what only a long output held; the ranking goes by tier,
    then by recency and use."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], dict[str, Any]] = {}
        self.seen = 0

    def see(self, kind: str, key: str, note: str = "", tier: int = 0) -> None:
        if not key:
            return
        if len(self.entries) >= _LEDGER_HELD and (kind, key) not in self.entries:
            self._prune()
        self.seen += 1
        entry = self.entries.setdefault((kind, key), {"count": 0, "notes": [], "tier": 0})
        entry["count"] += 1
        entry["order"] = self.seen
        entry["tier"] = max(entry["tier"], tier)
        if kind == "call":
            entry["notes"] = [note]  # the last outcome
        elif note and note not in entry["notes"]:
            entry["notes"].append(note)

    def ids(self, text: str, tier: int) -> None:
        for found in _specifics_of(text)[1]:
            self.see("id", found, tier=tier)

    def _ranked(self) -> list[tuple[tuple[str, str], dict[str, Any]]]:
        """The entries, most needed first (see the class docstring)."""
        total = max(1, self.seen)

        def score(kind: str, entry: dict[str, Any]) -> float:
            tier = max(entry["tier"], _seen_often(kind, entry["notes"], entry["count"]))
            if _used_often(kind, entry["notes"], entry["count"]):
                tier = 3
            return float(tier + 0.6 * entry["order"] / total + 0.05 * min(entry["count"], 8))

        return sorted(self.entries.items(), key=lambda kv: -score(kv[0][0], kv[1]))

    def _prune(self) -> None:
        """A full ledger keeps its best entries, ranked as :meth:`items` ranks them, in the
        order they came: a long stretch (a first call on a long history) is read oldest first,
        and its newest specifics must not be refused for the oldest."""
        kept = {kind_key for kind_key, _ in self._ranked()[:_LEDGER_PRUNED]}
        self.entries = {k: e for k, e in self.entries.items() if k in kept}

    def items(self) -> list[str]:
        """The items, most needed first (see the class docstring)."""
        ranked = self._ranked()
        named = "\n".join(key for (kind, key) in self.entries if kind != "id")
        out = []
        families: Counter[str] = Counter()
        for (kind, key), entry in ranked:
            if kind == "id" and key in named:
                continue  # a path or a call holds it already
            if kind == "id" and not _NUMERIC(key):  # handler_1 … handler_49: the family's first
                families[_DIGITS.sub("#", key)] += 1  # few stand for it (a number, a version: none)
                if families[_DIGITS.sub("#", key)] > _FAMILY:
                    continue
            out.append(_ledger_item(kind, key, entry["notes"], entry["count"]))
            if len(out) >= LEDGER_ITEMS:
                break
        return out


def _ledger_item(kind: str, key: str, notes: list[str], count: int) -> str:
    if kind == "call":
        line = f"`{key}` → {notes[-1] if notes else 'ok'}"
    elif kind == "path":
        # What was done to it, most telling first; a path also changed or run was read too,
        # and one acted on was seen too. No count, but for a path only seen, and often: it
        # ranks with what the agent typed (see _OFTEN).
        done = [a for a in _ACTIONS if a in notes]
        done = [a for a in done if a not in _IMPLIED] or done[:1]
        shown = done[:2] if "deleted" not in done[2:] else [done[0], "deleted"]  # never hidden
        line = f"{key}: {', '.join(shown)}"
        often = _seen_often(kind, shown, count) or _used_often(kind, notes, count)
        return f"{line} (×{count})" if often else line
    else:
        line = key
    return with_count(line, count)


_TOOL_CALL = re.compile(r"^[\w.-]{1,100}\(.*\)$")


def _tier(kind: str, key: str, notes: list[str], count: int) -> int:
    """An item's tier as :class:`_Ledger` gives it, read back from the item."""
    if kind == "call":
        return 1 if _TOOL_CALL.match(key) else 3
    if kind == "path":
        if notes == ["seen"]:
            return int(_seen_often(kind, notes, count))
        if _used_often(kind, notes, count):
            return 3
        return 1 if set(notes) <= {"named", "seen"} else 2
    return 1


_USED_OFTEN = 3
"""Uses of a path the agent acted on or named (calls and messages) for it to rank with its
commands (tier 3), its item showing the count (so that a later summary ranks it so too): a
data file read at the start and loaded in program after program is needed as much as any
one command."""


def _used_often(kind: str, notes: Collection[str], count: int) -> bool:
    """Whether an item is a path the agent acted on or named in _USED_OFTEN uses or more."""
    return kind == "path" and count >= _USED_OFTEN and any(note != "seen" for note in notes)


def _seen_often(kind: str, notes: list[str], count: int) -> bool:
    """Whether an item is a path only seen, in _OFTEN outputs or more: it ranks with what was
    named (tier 1), and its item shows the count."""
    return kind == "path" and notes == ["seen"] and count >= _OFTEN


def merge_ledger(old: list[str], fresh: list[str], changed: Collection[str] = ()) -> list[str]:
    """The ledgers of two stretches as one: counts added, a call's outcome the newer one, a
    path's actions joined, ranked again by recency (the newer stretch first) and use. Without
    the items of the paths in ``changed`` (the summary's Files changed) that were only changed
    (and read, named or seen): one line each, not two; one deleted or run keeps its item."""
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for age, items in ((0.0, old), (1.0, fresh)):
        for rank, item in enumerate(items):
            line, n = split_count(item)
            found = _LEDGER_ITEM.match(line)
            if found is None:
                kind, key, notes = "raw", line, []
            elif found["call"] is not None:
                kind, key, notes = "call", found["call"], [found["outcome"]]
            elif found["path"] is not None:
                kind, key, notes = "path", found["path"], [a.strip() for a in found["done"].split(",")]
            else:
                kind, key, notes = "id", found["id"], []
            entry = entries.setdefault((kind, key), {"count": 0, "notes": [], "score": 0.0, "tier": 0})
            entry["count"] += n
            entry["notes"] = notes if kind == "call" else list(dict.fromkeys([*entry["notes"], *notes]))
            tier = _tier(kind, key, notes, n)
            recency = 0.3 * age + 0.3 * (1 - rank / max(1, len(items)))
            entry["score"] = max(entry["score"], tier + recency)
            entry["tier"] = max(entry["tier"], tier)

    def score(kind: str, entry: dict[str, Any]) -> float:
        # A path only seen, in outputs of both stretches: its tier from the counts together.
        seen_again = entry["tier"] == 0 and _seen_often(kind, entry["notes"], entry["count"])
        return float(entry["score"] + seen_again + 0.05 * min(entry["count"], 8))

    listed = {"created", "edited", *_IMPLIED}
    ranked = sorted(
        (
            (kind_key, e)
            for kind_key, e in entries.items()
            if not (kind_key[0] == "path" and kind_key[1] in changed and set(e["notes"]) <= listed)
        ),
        key=lambda kv: -score(kv[0][0], kv[1]),
    )
    return [_ledger_item(kind, key, e["notes"], e["count"]) for (kind, key), e in ranked][:LEDGER_ITEMS]


_TRACE_SPECIFICS = 6
_UNSAFE = re.compile(r"[\]\[\n\r]|#k=|stored as")


def trace_line(call: Mapping[str, Any] | None, result: str, message: Mapping[str, Any], limit: int) -> str:
    """One line of at most ``limit`` characters saying what a removed tool result was: the
    call (a shell command, or the tool and its arguments), its outcome, and the specifics it
    held (its first error line, paths and ids): ``bash `pytest -x` → exit 1; KeyError: 'a';
    src/a.py, 8080``. Brackets, newlines, tag-shaped text and "stored as" are left out, so
    that it can go inside ctxmgmt's own notice and never forge one (nor name its archive)."""
    parts = []
    if call is not None:
        fn = call.get("function") or {}
        name = str(fn.get("name") or "tool")
        args = _arguments(call)
        lines = _call_text(name, args)
        shell = is_shell_call(name, args)
        parts.append((f"{name} `{lines[0]}`" if shell else f"`{lines[0]}`") if lines else name)
    parts[-1:] = [f"{' '.join(parts[-1:])} → {outcome(result, message)}".strip()]
    errors = error_lines(result[:_LEDGER_SCAN])
    if errors:
        parts.append(_clip(errors[-1], 120))
    ledger = _Ledger()
    for path in _specifics_of(result)[0]:
        ledger.see("path", path, "seen", 1)
    ledger.ids(result, 0)
    held = [split_count(i)[0].removesuffix(": seen") for i in ledger.items()[:_TRACE_SPECIFICS]]
    if held:
        parts.append(", ".join(held))
    line = _UNSAFE.sub(" ", "; ".join(parts))
    return _clip(line, limit) if limit > 1 else ""


_OPEN_TAG = re.compile(r"<([A-Za-z][\w.:-]{0,63})(?:\s[^<>]{0,300})?>")
_CLOSE_TAG = re.compile(r"</([A-Za-z][\w.:-]{0,63})>\Z")
_WRAPPED_MAX = 16
"""Tagged elements read off each end of a user message at most."""


def _closing(text: str) -> re.Match[str] | None:
    """The closing tag that ends ``text``, if one does (only its tail is read)."""
    return _CLOSE_TAG.search(text, max(0, len(text) - 70)) if text.endswith(">") else None


def _unwrapped(text: str) -> str:
    """What the user said in a user message, without the context its client wrapped in tagged
    blocks around it: agents put what they add in elements on lines of their own at either end
    (Claude Code's ``<system-reminder>``, Cline's ``<environment_details>``). A message that is
    nothing else stays whole (its blocks may be the ask: Cline's ``<task>``)."""
    rest = text.strip()
    for _ in range(_WRAPPED_MAX):
        opened = _OPEN_TAG.match(rest)
        if opened is None:
            break
        close = f"</{opened.group(1)}>"
        end = rest.find(close, opened.end())
        after = rest[end + len(close) :] if end >= 0 else ""
        if end < 0 or not after.startswith(("\n", "\r\n")):  # inline markup, or the whole message
            break
        rest = after.lstrip()
    for _ in range(_WRAPPED_MAX):
        closed = _closing(rest)
        if closed is None:
            break
        start = rest.rfind(f"<{closed.group(1)}", 0, closed.start())
        opened = _OPEN_TAG.match(rest, start) if start > 0 and rest[start - 1] == "\n" else None
        if opened is None or opened.group(1) != closed.group(1):  # <ab> is no <a>
            break
        rest = rest[:start].rstrip()
    if not rest or (_OPEN_TAG.match(rest) and _closing(rest)):
        return text  # blocks only: which one asks is not known
    return rest


def _blocks_only(text: str) -> bool:
    """Whether a text is tagged blocks and nothing else (no words of its own around them)."""
    rest = text.strip()
    return bool(_OPEN_TAG.match(rest)) and _closing(rest) is not None and _unwrapped(text) is text


_LEAF = re.compile(r"<([A-Za-z][\w.:-]{0,63})(?:\s[^<>]{0,300})?>[^<]{0,4000}</\1>")
_DATA_CHARS = 20_000
"""A longer message is never taken for machine-written data."""


def _data_only(text: str) -> bool:
    """Whether a user message is only elements that hold elements, no prose of their own: the
    data a client writes about where it runs (``<environment_context><cwd>/repo</cwd>
    <shell>bash</shell></environment_context>``), not an ask. A block with text of its own
    (``<task>Fix the login</task>``) is an ask."""
    rest = text.strip()
    if len(rest) > _DATA_CHARS or not rest.startswith("<"):
        return False
    blocks = 0
    while rest:
        opened = _OPEN_TAG.match(rest)
        if opened is None:
            return False
        close = f"</{opened.group(1)}>"
        end = rest.find(close, opened.end())
        if end < 0:
            return False
        inner = rest[opened.end() : end].strip()
        for _ in range(_WRAPPED_MAX):  # its innermost elements taken out, level by level
            if not inner.startswith("<"):
                break
            inner = _LEAF.sub("", inner).strip()
        if inner:  # text of its own, or markup this does not read
            return False
        blocks += 1
        rest = rest[end + len(close) :].strip()
    return blocks > 0


class _Reader:
    """Collects the candidates of one stretch of messages."""

    def __init__(self) -> None:
        self.asks: list[str] = []
        self.data_ask: str | None = None
        """The first message of data only (see :func:`_data_only`): the goal if none asks."""
        self.constraints: dict[str, None] = {}
        self.errors: Counter[str] = Counter()
        self.failed: dict[str, None] = {}
        self.files: Counter[str] = Counter()
        self.urls: Counter[str] = Counter()
        self.names: Counter[str] = Counter()
        self.decisions: dict[str, None] = {}
        self.next: list[str] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self.marked: set[str] = set()  # written as `code` by the user or the assistant
        self.seen = 0
        self.order: dict[str, int] = {}
        self.ledger = _Ledger()

    def _error(self, line: str) -> None:
        self._see(self.errors, line)

    def _see(self, counter: Counter[str], item: str) -> None:
        counter[item] += 1
        self.seen += 1
        self.order[item] = self.seen

    def user(self, text: str, *, beside: bool = False) -> None:
        """A user message; ``beside``: it came with tool results (text in the same turn)."""
        limit = 1000 if not self.asks else _ITEM_CHARS
        # A message of data about where the client runs is no ask: its paths and ids only; nor
        # is one of tagged blocks only beside tool results (what an agent adds to a result:
        # Claude Code's <system-reminder>), while the user's own words there still ask.
        ask = None if _data_only(text) or (beside and _blocks_only(text)) else _clip(_unwrapped(text), limit)
        if ask is None and self.data_ask is None:  # the goal when no message asks otherwise
            self.data_ask = _clip(text.strip(), 1000)
        facts = _text_facts(text, user=True)
        if ask is not None:
            self.asks.append(ask)
            for s in facts.constraints:
                self.constraints.setdefault(s, None)
            if len(text) > limit:  # a user pasting a log: its error lines (the ask holds the rest)
                for line in facts.errors:
                    self._error(line)
        self._identifiers(facts)
        self.ledger.ids(text, 1)
        for path in facts.paths:  # the ones its ask, cut short, does not hold
            if ask is None or path not in ask:
                self.ledger.see("path", _clip(path, 200), "named", 1)

    def assistant(self, text: str, last: bool) -> None:
        facts = _text_facts(text, user=False)
        for s in facts.decisions:
            self.decisions.setdefault(s, None)
        if last:
            self.next.extend(facts.next)
        self._identifiers(facts)
        self.ledger.ids(text, 1)
        for path in facts.paths:
            self.ledger.see("path", _clip(path, 200), "named", 1)

    def call(
        self,
        call: Mapping[str, Any],
        result: str | None,
        message: Mapping[str, Any] | None = None,
        *,
        skim: bool = False,
    ) -> None:
        """A call and its result; skimmed, the result is read for its outcome, error lines and
        URLs only (not for the paths and ids it shows)."""
        fn = call.get("function") or {}
        name = str(fn.get("name") or "tool")
        args = _arguments(call)
        raw = fn.get("arguments", "")
        raw = raw if isinstance(raw, str) else json.dumps(raw)
        tool = self.tools.setdefault(name, {"calls": 0, "failed": 0, "paths": [], "last": None})
        tool["calls"] += 1
        paths = [v for k in _PATH_KEYS if isinstance(v := args.get(k), str) and v]
        if _WRITES.search(name):
            for path in [*paths, *_DIFF_FILE.findall(raw.replace("\\n", "\n"))]:
                self._see(self.files, _clip(path, 200))
        for path in paths:
            tool["paths"].append(path)
            self._see(self.names, path)
        errors, urls = _result_facts(result or "")
        done = outcome(result, message) if result is not None else None
        if done is not None:
            tool["last"] = "ok" if done == "ok" else "failed"
        command = next((v for k in _COMMAND_KEYS if isinstance(v := args.get(k), str) and v), None)
        if done not in (None, "ok"):
            tool["failed"] += 1
            if command:
                self.failed.setdefault(_clip(command, 120), None)
        for line in errors:
            self._error(line)
        for url in _URL.findall(raw):
            self._see(self.urls, url.rstrip(".,;:"))
        for url in urls:
            self._see(self.urls, url)
        self._ledger(name, args, done, None if skim else result, skim)

    def _ledger(
        self, name: str, args: Mapping[str, Any], done: str | None, result: str | None, skim: bool
    ) -> None:
        """The call, the paths it named with what it did to them, and the ids it used or got;
        skimmed, not the paths a file's new content names."""
        ledger = self.ledger
        shells = shell_keys(name, args)
        lines = _call_text(name, args, shells)
        shell = shells[0] if shells else None
        named = [
            v for k in _PATH_KEYS if isinstance(v := args.get(k), str) and ("/" in v or _PATH.fullmatch(v))
        ]
        action = _action(name, args, None)
        if _WRITES.search(name):  # the files a patch names
            named += _DIFF_FILE.findall("\n".join(v for v in args.values() if isinstance(v, str)))
        for path in named:
            ledger.see("path", _clip(path, 200), action, 2)
        # A call that only named its paths, and went well, is said by their items (read, edited).
        only_paths = (
            shell is None
            and done == "ok"
            and named
            and all(
                v in named or not isinstance(v, (str, int)) or len(str(v)) > _VALUE_CHARS
                for v in args.values()
            )
        )
        # A call that went well and shows no value (``update_plan(plan=…)``, ``tool()``)
        # holds no specific: it is counted in the progress, not listed.
        bare = shell is None and done == "ok" and all(_BARE_CALL.match(line) for line in lines)
        if done is not None and not only_paths and not bare:
            for line in lines:
                ledger.see("call", line, done, 3 if shell is not None else 1)
        if shell is not None:
            acted: set[str] = set()
            for line in lines:
                plain, written = _redirects(line)
                act = _action(name, args, plain)
                # A path in the command that it does not act on was named by the agent; the
                # file a redirect writes was edited.
                note, tier = ("named", 1) if act == "seen" else (act, 2)
                for path in _paths(_URL.sub(" ", line)):
                    key = _clip(path.rstrip(".,;:"), 200)
                    acted.add(key)
                    ledger.see("path", key, *(("edited", 2) if path in written else (note, tier)))
            if not skim:
                # The paths of the program a command reads (a here-document's, ``python3 -c
                # "…"``'s lines) and of the lines past the first four: named by the agent.
                for k in shells:
                    value = args.get(k)
                    for path in _specifics_of(value)[0] if isinstance(value, str) else ():
                        if path not in acted:
                            acted.add(path)
                            ledger.see("path", path, "named", 1)
        for key, value in args.items():  # ids the agent typed; not those of a file's new content
            if (
                isinstance(value, (str, int))
                and not isinstance(value, bool)
                and len(str(value)) <= _ARG_CHARS
            ):
                ledger.ids(str(value), 1)
            elif isinstance(value, str) and key not in shells and not skim:
                # The paths a file's new content or a patch names (``"main": "dist/index.js"``)
                # are the ones the agent builds, runs or opens next.
                for path in _specifics_of(value)[0]:
                    ledger.see("path", path, "named", 1)
        if result:
            for path in _specifics_of(result)[0]:
                ledger.see("path", path, "seen", 0)
            # A short answer (a lookup: a user's record, an order) holds ids the agent goes on
            # to use; a long output (a log, a listing) holds many it never will.
            ledger.ids(result, 1 if len(result) <= _SHORT_RESULT else 0)

    def _identifiers(self, facts: _TextFacts) -> None:
        for url in facts.urls:
            self._see(self.urls, url)
        for name in facts.marked:
            self._see(self.names, name)
            self.marked.add(name)
        for path in facts.paths:
            self._see(self.names, path)

    def sections(self) -> Sections:
        order = self.order
        progress = [
            tool_line(name, t["calls"], list(dict.fromkeys(t["paths"])), t["failed"], t["last"] == "failed")
            for name, t in self.tools.items()
        ]
        files = _counted(self.files, order)
        changed = {split_count(f)[0] for f in files}
        names = Counter(
            {k: n for k, n in self.names.items() if (n >= 2 or k in self.marked) and k not in changed}
        )
        return {
            # The first task, then the newest requests first: a tight budget drops the oldest.
            "goal": self.asks[:1] + self.asks[: -_ASKS_KEPT - 1 : -1][: len(self.asks) - 1]
            or ([self.data_ask] if self.data_ask else []),
            "constraints": list(self.constraints)[-_MAX_ITEMS:],
            "errors": [
                *fold_errors(uncontained(_counted(self.errors, order, specific=True))),
                *_failed_commands(list(self.failed)),
            ],
            "specifics": self.ledger.items(),
            "files_changed": files,
            "progress": progress,
            "key_decisions": list(reversed(self.decisions))[:_MAX_ITEMS],
            "next_steps": self.next[-5:],
            "critical_context": [*_counted(self.urls, order), *_counted(names, order)],
        }


_READ_CHARS = 600_000
"""Characters of assistant text and tool results, newest first, that a digest reads in full
(~150k tokens: many times what a summary keeps); older messages are skimmed (see the module
docstring). Reading costs ~150 ns a character, against ~25 for a tokenizer pass: a first call
on a 10,000-message history would otherwise cost 6x the pass its counting does."""


def digest(messages: Sequence[Mapping[str, Any]]) -> Sections:
    """The ranked sections of a stretch of conversation (see the module docstring)."""
    reader = _Reader()
    results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    read_from = min(_read_from(messages), max(last, 0))  # the last call is read in full
    for i, m in enumerate(messages):
        if is_summary(m):
            continue
        role = m.get("role")
        if role == "user":  # right after tool results: beside them (Anthropic's user turn)
            reader.user(text_of(m.get("content")), beside=i > 0 and messages[i - 1].get("role") == "tool")
        elif role == "assistant":
            skim = i < read_from
            if not skim:
                reader.assistant(text_of(m.get("content")), i == last)
            for call in m.get("tool_calls") or ():
                if isinstance(call, dict):
                    answer = results.get(call.get("id"))
                    result = None if answer is None else text_of(answer.get("content"))
                    reader.call(call, result, answer, skim=skim)
    sections = reader.sections()
    # No item repeats another section's: the goal holds the user's words already.
    goal = "\n".join(sections["goal"])
    sections["constraints"] = [c for c in sections["constraints"] if c not in goal]
    return sections


def _read_from(messages: Sequence[Mapping[str, Any]]) -> int:
    """The index from which the messages are read in full: the newest back to ``_READ_CHARS``
    characters of assistant text and tool results (0 when the whole stretch is within it)."""
    size = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") in ("assistant", "tool"):
            content = m.get("content")
            size += len(content) if isinstance(content, str) else len(text_of(content))
            if size > _READ_CHARS:
                return i + 1
    return 0
