"""YAML and JSON files to raw documents, with the line of every JSON pointer.

Every file from outside goes through here, and is held to the same bounds whatever reads
it (a definition, ``--config``, ``validate``, ``serve --definitions``, a conversation):

- it is read through ``open`` + ``fstat``: a regular file (a symlink to one is fine), never
  a device, FIFO or socket, and at most ``limit`` bytes (:data:`MAX_FILE_BYTES` for
  definitions and configuration, :data:`MAX_INPUT_BYTES` for conversations);
- YAML anchors and aliases are refused (an alias makes a small text a huge tree: "billion
  laughs"), and so is nesting deeper than :data:`MAX_DEPTH` (PyYAML's scanner costs length
  times nesting, and its composer recurses);
- integers longer than :data:`MAX_DIGITS` digits, JSON's ``NaN``/``Infinity``, numbers too
  large for a float, and lone surrogates (``"\\ud800"``, which no encoder can write) are
  problems with their pointer and line.

Nothing here raises for bad input: every problem is a :class:`~ctxmgmt.errors.Problem`.
"""

from __future__ import annotations

import json
import operator
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import replace
from itertools import accumulate, count
from pathlib import Path
from typing import IO, Any

import yaml

from .errors import Problem

__all__ = [
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MAX_FILE_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_NODES",
    "Document",
    "load_document",
    "load_json",
    "lone_surrogate",
    "parse_document",
    "parse_json",
]

MAX_FILE_BYTES = 1 << 20
"""A definition or configuration file is at most 1 MiB (the shipped ones are a few KiB)."""
MAX_INPUT_BYTES = 16 << 20
"""A conversation file is at most 16 MiB by default (``ctxmgmt apply --max-input-mb``)."""
MAX_DEPTH = 64
"""Mappings and lists nest at most this deep (as the REST API's JSON bodies)."""
MAX_DIGITS = 1000
"""An integer is written with at most this many digits."""
MAX_NODES = 20_000
"""A YAML document holds at most this many values (building each costs ~20 µs)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class Document:
    """A parsed file: its data, the line of each pointer, and parse problems."""

    __slots__ = ("data", "lines", "problems", "source")

    def __init__(self, data: Any, lines: dict[str, int], problems: list[Problem], source: str | None) -> None:
        self.data = data
        self.lines = lines
        self.problems = problems
        self.source = source

    def line_of(self, pointer: str) -> int | None:
        """The line of a pointer, or of its nearest ancestor that the file has."""
        while True:
            if pointer in self.lines:
                return self.lines[pointer]
            if not pointer:
                return None
            pointer = pointer.rsplit("/", 1)[0]


def escape(token: object) -> str:
    """One JSON-pointer reference token (RFC 6901); a lone surrogate in it as its escape, so
    that the pointer itself can be written."""
    text = str(token).replace("~", "~0").replace("/", "~1")
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def _failed(message: str, source: str | None, line: int | None = None, pointer: str = "") -> Document:
    return Document(None, {}, [Problem(pointer, message, line, source)], source)


# -- reading -------------------------------------------------------------------------
class _Unreadable(Exception):
    """A file that is not read: the reason, and how to fix it."""


def _read_file(path: str | Path, limit: int, raise_with: str = "") -> str:
    """A regular file's text, at most ``limit`` bytes of UTF-8. O_NONBLOCK: opening a FIFO
    does not wait for a writer (it is then refused, as a device or socket is)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _Unreadable(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _Unreadable("is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable(
                "is not a regular file (a device, FIFO or socket, or a link to one); give a file"
            )
        if info.st_size > limit:
            raise _Unreadable(_too_large(info.st_size, limit, raise_with))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may grow while it is read
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Unreadable(f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise _Unreadable(_too_large(size, limit, raise_with))
    return _decode(b"".join(chunks))


def _read_stream(stream: IO[bytes], limit: int, raise_with: str) -> str:
    """A binary stream's text (stdin), at most ``limit`` bytes of UTF-8."""
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        raise _Unreadable(f"cannot read the input: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _Unreadable(_too_large(len(data), limit, raise_with))
    return _decode(data)


def _too_large(size: int, limit: int, raise_with: str) -> str:
    # What was read stops one byte past the limit: its size is then only "more than".
    length = f"more than {_bytes(limit)}" if size == limit + 1 else _bytes(size)
    fix = f" ({raise_with} raises it)" if raise_with else ""
    return f"the file is {length} long; the limit is {_bytes(limit)}{fix}"


def _bytes(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _Unreadable(
            f"line {line}: the file is not UTF-8 text (byte {exc.start:,}); save it as UTF-8"
        ) from None


# -- YAML ----------------------------------------------------------------------------
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: ~10x faster


class _Loader(_Base):  # type: ignore[misc]
    """The safe loader, refusing integers longer than MAX_DIGITS digits."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        digits = len(str(node.value).replace("_", "").lstrip("+-"))
        if digits > MAX_DIGITS:
            raise _Refused(
                f"an integer of {digits:,} digits; at most {MAX_DIGITS:,} are accepted (quote it for text)",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


class _Refused(Exception):
    """What the loader refuses, with its place in the text."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else None


_TOO_DEEP = f"nests deeper than {MAX_DEPTH} levels; flatten the document"


def _screen(text: str) -> None:
    """Refuse, before anything is built, what would make a small text costly: anchors and
    aliases (an alias can make a small text a huge tree: "billion laughs"), nesting deeper
    than MAX_DEPTH and more than MAX_NODES values. A pass over the parser's events."""
    depth = nodes = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                "YAML anchors or aliases (& and *) are not accepted; write the value out in full",
                event.start_mark,
            )
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(
                    f"nests deeper than {MAX_DEPTH} levels; flatten the document", event.start_mark
                )
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            nodes += 1
            if nodes > MAX_NODES:
                raise _Refused(
                    f"holds more than {MAX_NODES:,} values; a definition or configuration is far smaller",
                    event.start_mark,
                )


def parse_document(text: str, source: str | None = None) -> Document:
    """Parse YAML (JSON is YAML too) into data and a pointer-to-line map.

    Duplicate keys, which PyYAML silently resolves to the last one, are problems.
    """
    try:
        yaml.reader.Reader(text)  # refuses characters YAML does not allow, saying which
        _screen(text)
        loader = _Loader(text)
    except _Refused as exc:
        return _failed(str(exc), source, exc.line)
    except yaml.MarkedYAMLError as exc:
        return _syntax(exc, source)
    except yaml.YAMLError as exc:
        return _failed(f"YAML error: {exc}", source)
    try:
        node = loader.get_single_node()
        if node is None:
            return _failed("the file is empty", source, 1)
        data = loader.construct_document(node)
    except _Refused as exc:
        return _failed(str(exc), source, exc.line)
    except yaml.MarkedYAMLError as exc:
        return _syntax(exc, source)
    except yaml.YAMLError as exc:
        return _failed(f"YAML error: {exc}", source)
    except (ValueError, OverflowError, RecursionError) as exc:  # a date or number YAML cannot build
        reason = str(exc).split("\n")[0][:200] or type(exc).__name__
        return _failed(f"YAML value that cannot be read: {reason}", source)
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    problems: list[Problem] = []
    _walk(node, "", lines, problems, source)
    refused = _check_values(data, source, lines)
    return Document(None if refused else data, lines, problems + refused, source)


def _syntax(exc: yaml.MarkedYAMLError, source: str | None) -> Document:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    if "nesting depth" in str(exc.problem):  # libyaml's own limit, met while looking ahead
        return _failed(_TOO_DEEP, source, line)
    if "invalid Unicode character escape" in str(exc.problem):  # libyaml, for \ud800
        return _failed(
            "an escape that is no character (a lone surrogate such as \\ud800, or past U+10FFFF); "
            "write the character itself, or \\U0001F600 for one past U+FFFF",
            source,
            line,
        )
    reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
    return _failed(f"YAML syntax error: {reason}", source, line)


def _walk(
    node: yaml.Node, pointer: str, lines: dict[str, int], problems: list[Problem], source: str | None
) -> None:
    lines[pointer] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            child = f"{pointer}/{escape(key)}"
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(child, f"duplicate key (first given on line {seen[key]})", line, source)
                )
            seen[key] = line
            _walk(value_node, child, lines, problems, source)
            lines[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, f"{pointer}/{i}", lines, problems, source)


def _check_values(
    data: Any, source: str | None, lines: dict[str, int] | None = None, max_depth: int = MAX_DEPTH
) -> list[Problem]:
    """Nesting deeper than ``max_depth`` and lone surrogates in keys or texts: the first of
    each, with its pointer. Iterative; only containers are stacked."""
    deep = _find(data, lambda value, depth: depth > max_depth and isinstance(value, (dict, list)))
    lone = lone_surrogate(data)
    problems = []
    if deep is not None:
        problems.append(_at(deep, f"nests deeper than {max_depth} levels; flatten it", source, lines))
    if lone is not None:
        problems.append(_at(lone, _SURROGATE_FIX, source, lines))
    return problems


def lone_surrogate(data: Any) -> str | None:
    """The pointer of the first text (or key: its mapping's pointer) that holds a lone
    surrogate, which no encoder can write, or None. Python values too: tuples and mappings
    are walked, and a value shared or holding itself once."""
    return _find(data, lambda value, depth: isinstance(value, str) and _SURROGATE.search(value) is not None)


def _find(data: Any, bad: Any) -> str | None:
    """The pointer of the first value in document order (or key: its mapping's pointer) for
    which ``bad(value, depth)`` holds; each container once."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    walked: set[int] = set()
    while stack:
        value, pointer, depth = stack.pop()
        if bad(value, depth):
            return pointer
        if not isinstance(value, (Mapping, list, tuple)) or id(value) in walked:
            continue
        walked.add(id(value))
        if isinstance(value, Mapping):
            children = []
            for key, item in value.items():
                if bad(key, depth):
                    return pointer or "/"
                children.append((item, f"{pointer}/{escape(key)}", depth + 1))
        else:
            children = [(item, f"{pointer}/{i}", depth + 1) for i, item in enumerate(value)]
        stack.extend(reversed(children))  # the first child is looked at first
    return None


_SURROGATE_FIX = (
    "a text holds a lone surrogate (such as \\ud800), which is not a character; "
    "write the whole character, or its pair of escapes"
)


def _at(pointer: str, message: str, source: str | None, lines: dict[str, int] | None) -> Problem:
    line = Document(None, lines or {}, [], source).line_of(pointer) if lines else None
    return Problem(pointer, message, line, source)


# -- JSON ----------------------------------------------------------------------------
def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _BadNumber(text, f"an integer of {digits:,} digits; at most {MAX_DIGITS:,} are accepted")
    return int(text)


def _float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise _BadNumber(text, f"the number {text[:20]} is too large for a float")
    return number


def _constant(text: str) -> Any:
    raise _BadNumber(text, f"{text} is not a JSON number; write a number or null")


class _BadNumber(ValueError):
    """A number JSON allows that we do not, with its text (to find its line)."""

    def __init__(self, number: str, message: str) -> None:
        super().__init__(message)
        self.number = number


def parse_json(text: str, source: str | None = None, *, max_depth: int = MAX_DEPTH) -> Document:
    """Parse JSON strictly: the data and its problems (no lines but the syntax error's)."""
    try:
        data = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        return _failed(f"JSON syntax error: {exc.msg}", source, exc.lineno)
    except _BadNumber as exc:
        at = text.find(exc.number)  # its first occurrence: the first the parser met, or before
        return _failed(str(exc), source, text.count("\n", 0, at) + 1 if at >= 0 else None)
    except RecursionError:
        return _failed(f"nests deeper than {max_depth} levels; flatten it", source)
    refused: list[Problem] = []
    if _ESCAPED_SURROGATE.search(text) or json_depth(text) > max_depth:  # else nothing to find
        refused = _check_values(data, source, max_depth=max_depth)
    return Document(None if refused else data, {}, refused, source)


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""How a JSON text writes a surrogate (strict UTF-8 decoding lets no raw one through)."""
# What is not a bracket: a string (brackets in it do not count), or a run of anything else.
_NOT_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}]+', re.DOTALL)
_ONE_KIND = str.maketrans({"{": "[", "}": "]", '"': None})  # a stray quote (invalid JSON) is no bracket


def json_depth(text: str) -> int:
    """How deep a JSON text nests, in one pass and without parsing it (a deep text costs no
    recursion): its strings and all but its brackets taken out, the depth before each closing
    bracket is the opening ones so far less the closing ones before it (counted in C: no
    Python step per value). The one depth count of the package: files, bodies and replies."""
    bare = _NOT_BRACKET.sub("", text).translate(_ONE_KIND)
    opened = accumulate(map(len, bare.split("]")))  # "[" so far, before each "]" (and at the end)
    return max(map(operator.sub, opened, count()), default=0)


def json_containers(text: str, at_most: int) -> int:
    """How many arrays and objects a JSON text holds, exactly when that is more than
    ``at_most`` (else a bound no larger than ``at_most``: the brackets in the text, strings
    included, counted in C without taking its strings out)."""
    bound = text.count("[") + text.count("{")
    if bound <= at_most:
        return bound
    return _NOT_BRACKET.sub("", text).translate(_ONE_KIND).count("[")


def load_document(path: str | Path, *, limit: int = MAX_FILE_BYTES) -> Document:
    """Read a YAML or JSON file. A file that cannot be read is a problem, not an exception."""
    source = str(path)
    try:
        text = _read_file(path, limit)
    except _Unreadable as exc:
        return _failed(str(exc), source)
    if source.endswith(".json"):
        parsed = parse_json(text, source)
        if parsed.problems and all(p.line is not None for p in parsed.problems):
            return parsed
        # Parse again as YAML only to learn lines; JSON is a YAML subset, but for its UTF-16
        # surrogate escapes, which YAML refuses: each becomes a same-length placeholder.
        located = parse_document(_SURROGATE_ESCAPE.sub(r"\\u0020", text), source)
        problems = [p if p.line else replace(p, line=located.line_of(p.pointer)) for p in parsed.problems]
        return Document(parsed.data, located.lines, problems, source)
    return parse_document(text, source)


def load_json(
    source: str | Path | IO[bytes], *, limit: int = MAX_INPUT_BYTES, raise_with: str = "", name: str = ""
) -> Document:
    """Read a JSON file or binary stream (a conversation, stdin), held to the same bounds as
    every file; a file too large names ``raise_with``, the option that raises the limit."""
    shown = name or (str(source) if isinstance(source, (str, Path)) else "<stdin>")
    try:
        if isinstance(source, (str, Path)):
            text = _read_file(source, limit, raise_with)
        else:
            text = _read_stream(source, limit, raise_with)
    except _Unreadable as exc:
        return _failed(str(exc), shown)
    return parse_json(text, shown)
