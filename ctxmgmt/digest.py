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
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]

from ._memo import BY_CONTENT, Memo, content_key
from .messages import is_summary, text_of

__all__ = ["digest", "error_lines"]

Sections = dict[str, list[str]]

_ITEM_CHARS = 300
_MAX_ITEMS = 400
"""At most this many items per section are kept before ranking, against hostile input."""

# A line that reports a failure: exception names, error labels of compilers, test runners,
# shells and package managers, HTTP error statuses, signals and exit codes.
_FAILURE = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception|Failure|Fault|Violation)\b(?!\w)"
    r"|\bpanicked at\b|^[ \t]*\d+:\d+[ \t]+error[ \t]|\bunbound variable\b|\bsyntax error\b|\bError \d+\b"
    r"|\b[Ff]ailed to\b|^[ \t]*[\w./-]{1,255}:\d+:\d+: (?!warning|note|info)|\b(?:does not|doesn't) exist\b"
    r"|\bno such\b|\bmissing [\w.]{1,100} entry\b|:\d+:\d+: [A-Z]{1,3}\d{3,4}\b|\bFAIL\s"
    r"|\b(?:error|ERROR|Error|fatal|FATAL|Fatal|panic|PANIC|FAILED|FAIL|Failed|failed)\b"
    r"[ \t]?(?:\[[\w-]{1,40}\]|\(\w{1,40}\))?[ \t]?[:!\-]"
    r"|\berror(?:\[\w+\]| TS\d+| [A-Z]{1,3}\d{3,5})"
    r"|^[ \t]*(?:E[ \t]{2,}|FAILED |FAIL |ERR!|npm ERR!|not ok |[✗✖✕×] )"
    r"|\bnpm ERR!|\berror\[E\d+\]|\bpanic:|\bSegmentation fault|\bcore dumped"
    r"|\bcommand not found|\bNo such file or directory|\bPermission denied|\bnot found\b"
    r"|\b[Cc]onnection refused|\b[Cc]ouldn't connect|\bE: |\btimed out\b|\b[Cc]annot find\b"
    r"|\b[Cc]ould not\b|\b[Uu]nable to\b"
    r"|\bundefined reference\b|\bis not defined\b|\bHTTP/\d(?:\.\d)? [45]\d\d\b"
    r"|\b[45]\d\d (?:Bad|Unauthorized|Forbidden|Not Found|Internal|Service|Gateway|Conflict|Too Many"
    r"|Unprocessable)|\bexit (?:code|status):? [1-9]\d*|\bexited with (?:code )?[1-9]\d*"
    r"|\bassert [^\n]{0,200}? ==|\bFAILED[ \t]*$",
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
    r"|[;{}(]\s*$|\b(?:new \w*Error\(|errors\.New|fmt\.Errorf|Err\(|console\.error|log(?:ger)?\.\w+\()",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_PATH = re.compile(
    r"(?<![\w/.:@+-])(?:~|\.{1,2})?/?(?:[\w@.+-]{1,255}/){1,64}[\w@.+-]{1,255}\.\w{1,16}"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|mjs|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|conf|md|rst|txt|csv|sql|sh"
    r"|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|html|css|xml|lock|env|tf|proto|gradle)\b"
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
    of a text over 400,000 characters, the first and last 200,000. Only lines that hold one
    of the words every failure pattern needs are searched (see :func:`_candidate_lines`)."""
    if len(text) > 2 * _SCAN_CHARS:  # a huge output: its head and tail (the whole is archived)
        return list(dict.fromkeys([*error_lines(text[:_SCAN_CHARS]), *error_lines(text[-_SCAN_CHARS:])]))
    found: dict[str, None] = {}
    pos = 0
    for line_start in _candidate_lines(text):
        if len(found) >= _MAX_ITEMS:
            break
        if line_start < pos:
            continue
        stop = text.find("\n", line_start)
        stop = len(text) if stop < 0 else stop + 1
        if _FAILURE_SUPERSET.search(text[line_start:stop]) is None:
            continue
        match = _FAILURE.search(text, line_start, stop)
        if match is None:
            continue
        start = text.rfind("\n", max(line_start, match.start() - 2000), match.start()) + 1
        start = start or max(line_start, match.start() - 2000)
        end = text.find("\n", match.end(), match.end() + 2000)
        line = text[start : match.end() + 2000 if end < 0 else end].strip()
        if len(line) > 3 and not _NOT_FAILURE.search(line):
            found.setdefault(line if len(line) <= _ITEM_CHARS else line[: _ITEM_CHARS - 1] + "…", None)
        following = text.find("\n", match.end())
        pos = len(text) if following < 0 else following + 1
    return list(found)


# Every alternative of _FAILURE holds one of these words (compared in lower case) or matches
# _FAILURE_SHAPES: a line with neither cannot match, and is not searched. The big pattern
# costs ~0.2 us per character; finding these costs a few nanoseconds. Keep them in step.
_FAILURE_WORDS = (
    "error", "exception", "fail", "fault", "violation", "panic", "unbound variable", "exist",
    "no such", "missing ", "fatal", "err!", "not ok ", "✗", "✖", "✕", "×", "segmentation fault",
    "core dumped", "not found", "permission denied", "connection refused", "couldn't connect",
    "timed out", "cannot find", "could not", "unable to", "undefined reference", "is not defined",
    "http/", "exit", "assert ", "bad", "unauthorized", "forbidden", "internal", "service",
    "gateway", "conflict", "too many", "unprocessable",
)  # fmt: skip
_FAILURE_SHAPES = re.compile(r":\d+:\d+: |^[ \t]*E[ \t]{2}|\bE: ", re.MULTILINE)


# _FAILURE without its assertions (\b, ^, $, lookarounds), with \w, \d and \s widened to
# every non-ASCII character: whatever _FAILURE matches, this matches too. RE2 runs it in
# linear time at ~1 GB/s, so that a line with a failure word (a generated log with "error" on
# every line) is searched by the slow exact pattern only when this finds something.
_W = r"[0-9A-Za-z_\x{80}-\x{10FFFF}]"
_D = r"[0-9\x{80}-\x{10FFFF}]"
_FAILURE_SUPERSET = re2.compile(
    rf"[A-Z]{_W}*(?:Error|Exception|Failure|Fault|Violation)|panicked at|{_D}+:{_D}+[ \t]+error[ \t]"
    rf"|unbound variable|syntax error|Error {_D}|[Ff]ailed to|:{_D}+:{_D}+: |(?:does not|doesn't) exist"
    r"|no such|missing [.0-9A-Za-z_\x{80}-\x{10FFFF}]{1,100} entry|FAIL[\s\x{80}-\x{10FFFF}]"
    r"|(?:error|ERROR|Error|fatal|FATAL|Fatal|panic|PANIC|FAILED|FAIL|Failed|failed)"
    r"[ \t]?(?:\[[^\]\n]{1,40}\]|\([^)\n]{1,40}\))?[ \t]?[:!\-]"
    r"|error(?:\[| TS| [A-Z])|E[ \t]{2}|FAILED |FAIL |ERR!|not ok |[✗✖✕×] |panic:|Segmentation fault"
    r"|core dumped|not found|No such file|Permission denied|[Cc]onnection refused|[Cc]ouldn't connect"
    r"|E: |timed out|[Cc]annot find|[Cc]ould not|[Uu]nable to|undefined reference|is not defined|HTTP/"
    rf"|[45]{_D}{_D} (?:Bad|Unauthorized|Forbidden|Not Found|Internal|Service|Gateway|Conflict|Too Many"
    r"|Unprocessable)|exit (?:code|status)|exited with|assert [^\n]{0,200} ==|FAILED"
)


def _candidate_lines(text: str) -> list[int]:
    """The starts of the lines that may hold a failure, in order."""
    low = text.lower()
    if len(low) != len(text):  # lower-casing changed some lengths: positions would not match
        return _line_starts(text)
    starts: set[int] = set()
    for word in _FAILURE_WORDS:
        i = low.find(word)
        while i >= 0:
            starts.add(text.rfind("\n", 0, i) + 1)
            following = text.find("\n", i)
            if following < 0:
                break
            i = low.find(word, following + 1)  # the next line, at the earliest
    for shape in _FAILURE_SHAPES.finditer(text):
        starts.add(text.rfind("\n", 0, shape.start()) + 1)
    return sorted(starts)


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in _NEWLINE.finditer(text) if m.end() < len(text))]


_NEWLINE = re.compile("\n")


_FACTS: Memo[tuple[list[str], list[str]]] = Memo(16 * 1024 * 1024, shared=True)
"""What was read from each long text, by a digest of it: a text is read once however many
summaries it goes into, and equal texts of different requests share the reading. Bounded by
the bytes of what was read (the texts themselves are not kept)."""
_FACTS_MIN_CHARS = 512


def _result_facts(result: str) -> tuple[list[str], list[str]]:
    """A tool result's error lines and URLs."""
    key = content_key(result) if len(result) >= _FACTS_MIN_CHARS else None
    if key is not None:
        hit = _FACTS.get(key, BY_CONTENT)
        if hit is not None:
            return hit
    facts = (error_lines(result), [u.rstrip(".,;:") for u in _URL.findall(result[:100_000])])
    if key is not None:
        _FACTS.put(key, BY_CONTENT, facts, sum(map(len, facts[0])) + sum(map(len, facts[1])) + 200)
    return facts


@dataclass(frozen=True, slots=True)
class _TextFacts:
    """What the reader takes from a user's or an assistant's text, in order."""

    constraints: list[str]
    decisions: list[str]
    next: list[str]
    errors: list[str]
    urls: list[str]
    marked: list[str]
    paths: list[str]

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
        constraints,
        decisions,
        following,
        error_lines(text) if user and len(text) > _ITEM_CHARS else [],
        [u.rstrip(".,;:") for u in _URL.findall(scanned)],
        _BACKTICK.findall(scanned),
        [p.rstrip(".,;:") for p in _PATH.findall(_URL.sub(" ", scanned))],
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
    return [k if counts[k] < 2 else f"{k} (×{counts[k]})" for k in ranked[:_MAX_ITEMS]]


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


def _uncontained(items: list[str]) -> list[str]:
    """Items without those another item contains verbatim (``KeyError: 'x'`` in
    ``E   KeyError: 'x'``), in their order; a dropped item's count goes to its container."""
    keys = [split_count(i)[0] for i in items]
    longest = sorted(range(len(items)), key=lambda i: -len(keys[i]))
    kept: list[int] = []
    for i in longest:
        if not any(keys[i] in keys[j] for j in kept):
            kept.append(i)
    return [items[i] for i in sorted(kept)]


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


class _Reader:
    """Collects the candidates of one stretch of messages."""

    def __init__(self) -> None:
        self.asks: list[str] = []
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

    def _error(self, line: str) -> None:
        self._see(self.errors, line)

    def _see(self, counter: Counter[str], item: str) -> None:
        counter[item] += 1
        self.seen += 1
        self.order[item] = self.seen

    def user(self, text: str) -> None:
        limit = 1000 if not self.asks else _ITEM_CHARS
        self.asks.append(_clip(text, limit))
        facts = _text_facts(text, user=True)
        for s in facts.constraints:
            self.constraints.setdefault(s, None)
        if len(text) > limit:  # a user pasting a log: its error lines (the ask holds the rest)
            for line in facts.errors:
                self._error(line)
        self._identifiers(facts)

    def assistant(self, text: str, last: bool) -> None:
        facts = _text_facts(text, user=False)
        for s in facts.decisions:
            self.decisions.setdefault(s, None)
        if last:
            self.next.extend(facts.next)
        self._identifiers(facts)

    def call(self, call: Mapping[str, Any], result: str | None) -> None:
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
        if result is not None:
            tool["last"] = "failed" if errors else "ok"
        if errors:
            tool["failed"] += 1
            command = next((v for k in _COMMAND_KEYS if isinstance(v := args.get(k), str) and v), None)
            if command:
                self.failed.setdefault(_clip(command, 120), None)
        for line in errors:
            self._error(line)
        for url in _URL.findall(raw):
            self._see(self.urls, url.rstrip(".,;:"))
        for url in urls:
            self._see(self.urls, url)

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
            "goal": self.asks[:1] + self.asks[: -_ASKS_KEPT - 1 : -1][: len(self.asks) - 1],
            "constraints": list(self.constraints)[-_MAX_ITEMS:],
            "errors": [
                *_uncontained(_counted(self.errors, order, specific=True)),
                *_failed_commands(list(self.failed)),
            ],
            "files_changed": files,
            "progress": progress,
            "key_decisions": list(reversed(self.decisions))[:_MAX_ITEMS],
            "next_steps": self.next[-5:],
            "critical_context": [*_counted(self.urls, order), *_counted(names, order)],
        }


def digest(messages: Sequence[Mapping[str, Any]]) -> Sections:
    """The ranked sections of a stretch of conversation (see the module docstring)."""
    reader = _Reader()
    results = {m.get("tool_call_id"): text_of(m.get("content")) for m in messages if m.get("role") == "tool"}
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    for i, m in enumerate(messages):
        if is_summary(m):
            continue
        role = m.get("role")
        text = text_of(m.get("content"))
        if role == "user":
            reader.user(text)
        elif role == "assistant":
            reader.assistant(text, i == last)
            for call in m.get("tool_calls") or ():
                if isinstance(call, dict):
                    reader.call(call, results.get(call.get("id")))
    sections = reader.sections()
    # No item repeats another section's: the goal holds the user's words already.
    goal = "\n".join(sections["goal"])
    sections["constraints"] = [c for c in sections["constraints"] if c not in goal]
    return sections
