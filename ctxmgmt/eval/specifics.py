"""The specifics an agent needs again: paths, commands, error lines, numbers and ids.

Each extractor is a pure function of a text (or of a message) that returns the specifics
it finds, normalised, in order of appearance, without repeats. The patterns are RE2
(linear time) and built once; every text is scanned up to :data:`MAX_SCAN` characters and
every extractor returns at most :data:`MAX_PER_TEXT` specifics of at most
:data:`MAX_SPECIFIC` characters, so a hostile tool output costs what its bound allows.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import re2  # type: ignore[import-untyped]

from ..messages import SHELL_KEYS, command_lines, shell_keys, text_of, without_escapes

__all__ = [
    "CATEGORIES",
    "MAX_PER_TEXT",
    "MAX_SCAN",
    "MAX_SPECIFIC",
    "SHELL_KEYS",
    "commands",
    "error_lines",
    "message_specifics",
    "message_text",
    "numbers",
    "paths",
]

CATEGORIES = ("paths", "commands", "error_lines", "numbers")
"""The categories, in the report's order (``numbers`` holds numbers and ids)."""
MAX_SCAN = 200_000
"""Characters of one text the extractors read (a longer tool output: its start)."""
MAX_PER_TEXT = 400
"""Specifics of one category one text may give."""
MAX_SPECIFIC = 240
"""Characters of one specific (a longer error line or command is kept by its start)."""
_EXT = r"[A-Za-z][A-Za-z0-9]{1,7}|[ch]"
# A URL first (leftmost-first alternation): its path parts are not file paths.
_PATHS = re2.compile(
    r"(?P<url>[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s\"'<>()\[\]{}]+)"
    r"|(?P<win>\b[A-Za-z]:\\(?:[\w.\-]+\\)*[\w.\-]+)"
    r"|(?P<posix>(?:~|\.{1,2})?/?(?:[\w.\-@+]+/)+[\w.\-@+]*)"
    rf"|(?P<file>\b[\w\-]+(?:\.[\w\-]+)*\.(?:{_EXT})\b)"
)
# A line that reports a failure: a traceback's lines, an exception or error class with its
# message, a log level or a tool's failure word, an exit status, an OS error's wording. One
# pass over the whole text (multi-line: ``^`` is a line's start, after any timestamp).
_STAMP = (
    r"(?:\[?\d{4}-\d\d-\d\d[T ][0-9:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]*"
    r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?[ \t]*)?"
)
_ERROR = re2.compile(
    rf"(?m)^{_STAMP}[ \t]*(?:E[ \t]+)?[\w.$]*(?:Error|Exception|Failure|Interrupt|Exit)(?:\[\w+\])?"
    r"(?::|\r?$)"
    rf"|^{_STAMP}[ \t]*File \"[^\"\n]+\", line \d+|^{_STAMP}Exception in thread\b"
    rf"|^{_STAMP}[ \t]*E[ \t]{{2,}}\S"
    r"|\b(?:[Ee]rror|ERROR)(?:\[\w+\])?:|\[(?:ERROR|FATAL|CRITICAL|error|fatal)\]|\bERROR\b|\bERR!"
    r"|\b(?:FAILED|FAIL|FATAL|PANIC)\b|\bfatal(?: error)?:|\bpanic(?:ked)?(?::| at\b)"
    r"|\b[Ee]rrno\b|No such file or directory|Permission denied|command not found"
    r"|Segmentation fault|core dumped|\bexit(?:ed with)? (?:code|status) [1-9]|[Cc]onnection refused"
    r"|\bAborted\b"
)
# Code that names an error without reporting one: a statement that raises, catches, defines
# or logs it, a comment, an assignment.
_CODE = re2.compile(
    r"^\s*(?:raise|except|catch|throw|try|class|def|fn|func|function|if|elif|else|for|while|return"
    r"|import|from|assert|const|let|var|case|with|async|await|pub|public|private|protected|static"
    r"|new)\b"
    r"|^\s*(?:#|//|/\*|\*|@|[})\]],?\s*$)"
    r"|(?:Error|Exception|error|exception|fatal|warn|warning)\s*\("
    r"|[;{]\s*$|^\s*[\w.\[\]\"']+\s*(?::\s*[\w.\[\]]+\s*)?(?:=|:=|\+=)[^=]"
)
# A line already shaped like a report is one, whatever code-like text it holds (a message
# with ``key=value``, a call in parentheses, a dict cut at ``{``): an exception class and its
# message at the line's start, an upper-case level or failure word, pytest's ``E   assert``.
_REPORT = re2.compile(
    r"^(?:E\s+)?(?:[\w$]+\.)*(?:[A-Z][\w$]*)?(?:Error|Exception|Failure|Interrupt|Exit)(?:\[\w+\])?:\s*[^=\s]"
    r"|^(?:ERROR|FATAL|CRITICAL|PANIC|FAILED|FAIL)(?:\[\w+\])?(?::\s*|\s+)[^=\s]"
    r"|^\[(?:ERROR|FATAL|CRITICAL)\]|^E\s+assert\b"
)
_LEADING_STAMP = re2.compile(
    r"^(?:\[?\d{4}-\d\d-\d\d[T ][0-9:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s*|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s*)"
)
_NUMBERS = re2.compile(
    r"(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<line>\b[\w.\-/]+\.[A-Za-z][A-Za-z0-9]{0,7}:\d+(?::\d+)?\b)"
    r"|(?P<port>\b(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z][\w\-]*(?:\.[\w\-]+)*):\d{2,5}\b)"
    r"|(?P<version>\b(?:v\d+(?:\.\d+){1,3}|\d+(?:\.\d+){2,3})(?:[\-+][0-9A-Za-z.]+)?\b)"
    r"|(?P<hex>\b(?:0x)?[0-9a-fA-F]{7,64}\b)"
    r"|(?P<long>\b\d{4,}\b)"
)
_LOCATION = re2.compile(r"\(\d+(?:,\d+)?\)[:<]")
"""A file's line (and column) after its name, as compilers and debuggers write it:
``main.cpp(12):``, ``Program.cs(10,5):``, ``main.py(5)<module>()``."""
_GENERIC_LINES = frozenset({"Traceback (most recent call last):", "During handling of the above exception"})


def _scan(text: str) -> str:
    """The start of a text that is searched, as RE2 can read it (a lone surrogate, which UTF-8
    cannot hold, as ``?``)."""
    text = text[:MAX_SCAN] if len(text) > MAX_SCAN else text
    if text.isascii():
        return text
    return text.encode("utf-8", "replace").decode("utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _add(out: dict[str, None], item: str) -> bool:
    """Add one specific; False when the text gave its share."""
    if item:
        out.setdefault(item[:MAX_SPECIFIC], None)
    return len(out) < MAX_PER_TEXT


_CODE_EXTENSIONS = frozenset(
    [
        "ts",
        "tsx",
        "jsx",
        "cjs",
        "mts",
        "vue",
        "svelte",
        "rs",
        "go",
        "java",
        "kt",
        "kts",
        "scala",
        "swift",
        "m",
        "mm",
        "cc",
        "cpp",
        "cxx",
        "hpp",
        "hh",
        "cs",
        "fs",
        "rb",
        "php",
        "lua",
        "r",
        "jl",
        "ex",
        "exs",
        "erl",
        "hs",
        "ml",
        "dart",
        "zig",
        "nim",
        "sol",
        "pyi",
        "pyx",
        "ipynb",
        "toml",
        "yaml",
        "yml",
        "ini",
        "cfg",
        "conf",
        "lock",
        "env",
        "properties",
        "gradle",
        "mod",
        "sum",
        "md",
        "rst",
        "adoc",
        "log",
        "jsonl",
        "ndjson",
        "parquet",
        "sqlite",
        "db",
        "sql",
        "proto",
        "tf",
        "hcl",
        "dockerfile",
        "mk",
        "cmake",
        "bazel",
        "bzl",
        "patch",
        "diff",
        "pem",
        "crt",
        "key",
        "whl",
        "gz",
        "bz2",
        "xz",
        "zst",
        "tgz",
        "jar",
        "ps1",
        "psm1",
        "bat",
        "cmd",
        "fish",
        "zsh",
        "bash",
    ]
)
"""Source, configuration and data file extensions the stdlib's type map does not know."""


@cache
def _file_extensions() -> frozenset[str]:
    """The extensions a file type registry knows: the stdlib's built-in map (not the machine's
    ``mime.types``, so that the figures do not depend on it) and :data:`_CODE_EXTENSIONS`."""
    types = mimetypes.MimeTypes(filenames=())
    known = {e.lstrip(".").lower() for table in types.types_map for e in table}
    return frozenset(known | _CODE_EXTENSIONS)


def _is_file_name(name: str, before: str) -> bool:
    """Whether a bare ``name.ext`` (no slash) is shaped like a file: its extension is a file
    type's, it is not a host (``example.com``, an email's domain), an attribute
    (``require.main``) nor a library's name (``Node.js``: a capital, then lower case only)."""
    if before == "@":
        return False
    stem, _, ext = name.rpartition(".")
    if ext.lower() not in _file_extensions() or stem.replace(".", "").isdigit():
        return False
    first = stem.split(".", 1)[0]
    return not (ext == "js" and "." not in stem and first[:1].isupper() and first[1:].islower())


def _in_diff_header(text: str, at: int) -> bool:
    """Whether ``at`` is a path's place in a diff's header line (``--- a/x``, ``+++ b/x``,
    ``diff --git a/x b/x``)."""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    return line in ("--- ", "+++ ") or (line.startswith("diff --git ") and line.count(" ") <= 3)


_DEVICES = frozenset(
    [
        "/dev/null",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
        "/dev/stdin",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/tty",
    ]
)
"""Devices a shell line names for its streams (``2>/dev/null``): no file an agent works on."""


def paths(text: str) -> list[str]:
    """POSIX and Windows paths and file names (``src/app.py``, ``/etc/hosts``,
    ``C:\\x\\y.txt``, ``setup.cfg``); not the paths inside URLs, not a bare word with
    slashes (``and/or``), not a stream device (``/dev/null``), numbers with slashes
    (``3.5/4.4``) nor an attribute chain or a call (``df.Amount.sum()``): a path starts at
    ``/``, ``~`` or ``.``, or its last part has an extension; and a bare name without a slash
    only when it is shaped like a file (:func:`_is_file_name`: not ``example.com``,
    ``require.main`` or ``Node.js``)."""
    out: dict[str, None] = {}
    scanned = _scan(text)
    for m in _PATHS.finditer(scanned):
        if m.group("url"):
            continue
        found = m.group(0).rstrip(".,:;")
        if found.startswith(("a/", "b/")) and _in_diff_header(scanned, m.start()):
            found = found[2:]  # a diff's notation for the file's two sides: the path is the file's
        if m.group("posix"):
            if found in _DEVICES or found.startswith("/dev/fd/") or not any(map(str.isalpha, found)):
                continue  # a device every command line names, or numbers with slashes (3.5/4.4)
            last = found.rstrip("/").rsplit("/", 1)[-1]
            if found.startswith(("/", "~", "./", "../")):
                if len(found) < 2 or found.strip("/.~") == "":
                    continue
            elif "." not in last.strip("."):
                continue
        elif m.group("file"):
            start, end = m.span()
            before = scanned[start - 1 : start] if start else ""
            if before == "." and start >= 2 and (scanned[start - 2].isalnum() or scanned[start - 2] in "_)]"):
                continue  # an attribute chain (df[m].Amount.sum)
            if scanned[end : end + 1] == "(" and not _LOCATION.match(scanned, end):
                continue  # a method call (x.log(1)); main.cpp(12): is a file's line
            if not _is_file_name(found, before):
                continue
            if before == ".":
                found = "." + found  # a dotfile (.eslintrc.json)
        if not _add(out, found):
            break
    return list(out)


def _command_lines(script: str) -> Iterable[str]:
    """The script's command lines (:func:`ctxmgmt.messages.command_lines`: not a
    here-document's body), whitespace collapsed."""
    return map(_flat, command_lines(script))


def commands(message: Mapping[str, Any]) -> list[str]:
    """The shell commands of a message: each line of a shell-like tool call's argument
    (:func:`ctxmgmt.messages.shell_keys`; a list of words is one command; not the lines of a
    Python or notebook tool's ``code``), and the text lines that start with ``$ ``. Whitespace
    is collapsed."""
    out: dict[str, None] = {}
    for call in message.get("tool_calls") or ():
        arguments = _arguments(call)
        if not isinstance(arguments, Mapping):
            continue
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        for key in shell_keys(name if isinstance(name, str) else "", arguments):
            value = arguments.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = " ".join(value)
            if isinstance(value, str):
                for line in _command_lines(_scan(value)):
                    if not _add(out, line):
                        return list(out)
    for line in _scan(text_of(message.get("content"))).splitlines():
        stripped = line.strip()
        if stripped.startswith("$ ") and not _add(out, _flat(stripped[2:])):
            break
    return list(out)


def error_lines(text: str) -> list[str]:
    """The lines that report a failure (a traceback's lines, ``KeyError: 'a'``, ``error:``,
    ``ERROR``, ``FAILED``, ``panic:``, ``fatal:``, errno, an exit status, ...), normalised: a
    leading timestamp dropped, whitespace collapsed. Not code that merely names an error
    (``except KeyError:``, ``raise ValueError(x)``, ``log.error(...)``, ``status = "FAILED"``)."""
    out: dict[str, None] = {}
    scanned = _scan(text)
    end = -1
    for m in _ERROR.finditer(scanned):
        if m.start() <= end:
            continue  # a line already looked at
        start = scanned.rfind("\n", 0, m.start()) + 1
        end = scanned.find("\n", m.start())
        end = len(scanned) if end < 0 else end
        line = _flat(_LEADING_STAMP.sub("", scanned[start:end].strip(), count=1))
        if len(line) < 8 or line in _GENERIC_LINES or (_CODE.search(line) and not _REPORT.match(line)):
            continue
        if not _add(out, line):
            break
    return list(out)


def numbers(text: str) -> list[str]:
    """Numbers and ids: UUIDs, hex ids (7+ digits, with a digit and a letter: commit
    hashes, container ids), file line references (``app.py:42``), host ports
    (``localhost:8080``), versions (``1.2.3``, ``v2.0``; not ``3.14``), and numbers of 4+ digits."""
    out: dict[str, None] = {}
    for m in _NUMBERS.finditer(_scan(text)):
        found = m.group(0)
        if m.group("hex"):
            body = found[2:] if found.startswith("0x") else found
            if body.isdigit():
                if len(body) < 4:
                    continue
            elif not any(c.isdigit() for c in body) or not any(c.isalpha() for c in body):
                continue
        if not _add(out, found):
            break
    return list(out)


def _arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    raw = function.get("arguments") if isinstance(function, Mapping) else None
    if isinstance(raw, Mapping):
        return raw
    if not isinstance(raw, str) or len(raw) > MAX_SCAN:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    if isinstance(value, str):
        out.append(value)
    elif depth < 4 and isinstance(value, Mapping):
        for v in value.values():
            _strings(v, out, depth + 1)
    elif depth < 4 and isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)


def message_text(message: Mapping[str, Any]) -> str:
    """What a model reads of a message, as text: its content, and each tool call's name and
    argument values decoded from their JSON (so a command is found as it was typed); without
    a terminal's escape sequences (a coloured ``ERROR`` is the same specific as a plain one)."""
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        parts.append(str(function.get("name") or ""))
        arguments = _arguments(call)
        if arguments is None:
            raw = function.get("arguments")
            parts.append(raw[:MAX_SCAN] if isinstance(raw, str) else "")
        else:
            _strings(arguments, parts)
    return without_escapes("\n".join(p for p in parts if p))


def message_specifics(message: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Every category's specifics of one message."""
    text = message_text(message)
    return {
        "paths": frozenset(paths(text)),
        "commands": frozenset(commands(message)),
        "error_lines": frozenset(error_lines(text)),
        "numbers": frozenset(numbers(text)),
    }
