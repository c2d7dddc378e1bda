"""YAML and JSON files to raw documents, with the line of every JSON pointer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import Problem

__all__ = ["Document", "load_document", "parse_document"]


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
    """One JSON-pointer reference token (RFC 6901)."""
    return str(token).replace("~", "~0").replace("/", "~1")


def parse_document(text: str, source: str | None = None) -> Document:
    """Parse YAML (JSON is YAML too) into data and a pointer-to-line map.

    Duplicate keys, which PyYAML silently resolves to the last one, are problems.
    """
    try:
        loader = yaml.SafeLoader(text)  # refuses characters YAML does not allow, as a YAMLError
    except yaml.YAMLError as exc:
        return Document(None, {}, [Problem("", f"YAML error: {exc}", None, source)], source)
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None, {}, [Problem("", "the file is empty", 1, source)], source)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        return Document(None, {}, [Problem("", f"YAML syntax error: {reason}", line, source)], source)
    except yaml.YAMLError as exc:
        return Document(None, {}, [Problem("", f"YAML error: {exc}", None, source)], source)
    except (ValueError, OverflowError, RecursionError) as exc:  # a date or number YAML cannot build
        reason = str(exc).split("\n")[0][:200] or type(exc).__name__
        return Document(
            None, {}, [Problem("", f"YAML value that cannot be read: {reason}", None, source)], source
        )
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    problems: list[Problem] = []
    _walk(node, "", lines, problems, source)
    return Document(data, lines, problems, source)


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


def load_document(path: str | Path) -> Document:
    """Read a YAML or JSON file. A file that cannot be read is a problem, not an exception."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return Document(None, {}, [Problem("", f"cannot read the file: {reason}", None, source)], source)
    if source.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return Document(
                None, {}, [Problem("", f"JSON syntax error: {exc.msg}", exc.lineno, source)], source
            )
        # Parse again as YAML only to learn lines; JSON is a YAML subset.
        located = parse_document(text, source)
        return Document(data, located.lines, [], source)
    return parse_document(text, source)
