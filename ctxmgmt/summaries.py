"""Structured summaries: the offline summariser, rendering, parsing and merging.

A summary has six sections, each a list of short items: goal, constraints,
progress, key decisions, next steps and critical context. The offline summariser
needs no LLM: it picks sentences by cue words and keeps identifiers verbatim
(file paths, URLs, commands, error lines, numbers the user gave).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .messages import SUMMARY_PREFIX, is_summary, text_of

if TYPE_CHECKING:
    from .context import Context

__all__ = ["SECTIONS", "merge", "parse_rendered", "render", "summarize_offline"]

STATE_KEY = "summary"
"""Context state key of the running summary: its sections, how many messages it covers,
and the archives it guides to."""

Sections = dict[str, list[str]]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal", "Goal"),
    ("constraints", "Constraints"),
    ("progress", "Progress"),
    ("key_decisions", "Key decisions"),
    ("next_steps", "Next steps"),
    ("critical_context", "Critical context"),
)
_TITLES = {title: key for key, title in SECTIONS}
_ITEM_CHARS = 400

_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_PATH = re.compile(
    r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w@.+-]+/)+[\w@.+-]+"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|conf|md|rst|txt|csv"
    r"|log|sh|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|sql|html|css|xml|lock|env)\b"
)
_BACKTICK = re.compile(r"`([^`\n]{2,200})`")
_SHELL = re.compile(r"^\s*\$ (.{2,200})$", re.MULTILINE)
# An error: from an exception name or an error label to the end of its sentence or line.
_ERROR_LINE = re.compile(
    r"(?:\b[A-Z]\w*(?:Error|Exception)\b|\b(?:error|Error|ERROR|fatal|FATAL|FAILED|panic)(?:\[\w+\])?:)"
    r"[^\n]{0,200}?(?=\.\s|\n|$)"
)
_NUMBER = re.compile(
    r"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?(?:\s?(?:%|[kKMG]B|ms|s|k|tokens|USD|EUR))?(?![\w.])"
)
# A sentence ends at . ! or ? followed by white space (so "session.py" stays whole).
_SENTENCE = re.compile(r"\S(?:[^\n]*?)(?:[.!?](?=\s)|(?=\n)|$)")
_CONSTRAINT = re.compile(
    r"\b(must|should|shall|never|always|only|don't|do not|without|at most|at least|no more than"
    r"|limit|avoid|require|required|keep|make sure|ensure)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(decided|decide|chose|choose|will use|going to|instead|switch(?:ed)? to|opted|prefer|settled on"
    r"|approach)\b",
    re.IGNORECASE,
)
_NEXT = re.compile(r"\b(next|then|todo|remaining|still need|will|plan to|after that)\b", re.IGNORECASE)


def _clip(text: str, limit: int = _ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sentences(text: str, cue: re.Pattern[str]) -> list[str]:
    return [_clip(s.strip()) for s in _SENTENCE.findall(text) if cue.search(s) and len(s.strip()) > 3]


def identifiers(text: str, *, numbers: bool) -> list[str]:
    """Identifiers in a text, verbatim: URLs, paths, commands, error lines, numbers."""
    found: list[str] = []
    found += [u.rstrip(".,;:") for u in _URL.findall(text)]
    without_urls = _URL.sub(" ", text)
    found += [p.rstrip(".,;:") for p in _PATH.findall(without_urls) if not p.startswith("//")]
    found += _BACKTICK.findall(text)
    found += _SHELL.findall(text)
    found += [line.strip() for line in _ERROR_LINE.findall(text) if line.strip()]
    if numbers:
        found += [n.strip() for n in _NUMBER.findall(without_urls) if len(n.strip()) > 1 or n.isdigit()]
    return found


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def summarize_offline(messages: Sequence[Mapping[str, Any]], previous: Sections | None = None) -> Sections:
    """A structured summary of ``messages``, merged into ``previous``."""
    new: Sections = {key: [] for key, _ in SECTIONS}
    results = {m.get("tool_call_id"): text_of(m.get("content")) for m in messages if m.get("role") == "tool"}
    last_assistant = ""
    for m in messages:
        if is_summary(m):
            continue
        role = m.get("role")
        text = text_of(m.get("content"))
        if role == "user":
            if not new["goal"] and not (previous or {}).get("goal"):
                new["goal"].append(_clip(text, 1000))
            new["constraints"] += _sentences(text, _CONSTRAINT)
            new["critical_context"] += identifiers(text, numbers=True)
        elif role == "assistant":
            if text:
                last_assistant = text
                new["key_decisions"] += _sentences(text, _DECISION)
                new["critical_context"] += identifiers(text, numbers=False)
                if not m.get("tool_calls"):
                    first = _SENTENCE.findall(text)
                    if first:
                        new["progress"].append(_clip("assistant: " + first[0].strip(), 160))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                args = fn.get("arguments", "")
                args = args if isinstance(args, str) else json.dumps(args)
                new["critical_context"] += identifiers(args, numbers=False)
                result = results.get(call.get("id"), "")
                new["progress"].append(
                    _clip(f"{fn.get('name')}({_clip(args, 80)}) -> {_outcome(result)}", 240)
                )
        elif role == "tool":
            new["critical_context"] += identifiers(text, numbers=False)
        elif role in ("system", "developer"):
            continue
    if last_assistant:
        new["next_steps"] = _sentences(last_assistant, _NEXT)[-5:]
    return merge(previous, new)


def _outcome(result: str) -> str:
    if not result.strip():
        return "(no output)"
    errors = _ERROR_LINE.findall(result)
    if errors:
        return "error: " + _clip(errors[0], 160)
    return _clip(result.strip().splitlines()[0], 100)


def merge(previous: Mapping[str, Sequence[str]] | None, new: Mapping[str, Sequence[str]]) -> Sections:
    """Previous items first, then new ones; duplicates dropped. Next steps are replaced
    by the newer ones when there are any, since old plans go stale."""
    out: Sections = {}
    # The default sections first, then any other field (a summary_schema of the definition).
    keys = [k for k, _ in SECTIONS]
    keys += [k for k in [*(previous or {}), *new] if k not in keys]
    for key in dict.fromkeys(keys):
        if key not in (previous or {}) and key not in new and key not in _DEFAULT_KEYS:
            continue
        old = _items((previous or {}).get(key, ()))
        fresh = _items(new.get(key, ()))
        if key == "next_steps" and fresh:
            old = []
        if key == "goal" and old:
            fresh = []
        out[key] = _dedupe([*old, *fresh])
    return out


MAX_GUIDE = 20


_DEFAULT_KEYS = frozenset(k for k, _ in SECTIONS)


def _items(value: Any) -> list[str]:
    """A field's value as a list of strings (a model may answer a string or an object)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, (list, tuple)):
        return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]
    return [] if value is None else [json.dumps(value, ensure_ascii=False)]


def _title(key: str) -> str:
    return dict(SECTIONS).get(key) or key.replace("_", " ").capitalize()


def render(
    sections: Mapping[str, Sequence[str]], summarized: int, archives: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The summary message text. It starts with a marker that identifies it, and ends
    with a guide to the archived messages, when they were offloaded."""
    lines = [f"{SUMMARY_PREFIX} Summary of {summarized} earlier messages, which are no longer shown."]
    keys = [k for k, _ in SECTIONS if k in sections] + [k for k in sections if k not in _DEFAULT_KEYS]
    for key in keys:
        items = sections.get(key) or ()
        if items:
            lines.append(f"## {_title(key)}")
            lines += [f"- {item}" for item in items]
    if archives:
        lines.append("## Archived messages")
        lines += [
            f'- {a["ref"]}: {a["count"]} messages; context_read(ref="{a["ref"]}") returns them'
            for a in list(archives)[-MAX_GUIDE:]
        ]
    return "\n".join(lines)


_COUNT = re.compile(r"Summary of (\d+) earlier messages")


def parse_rendered(text: str) -> tuple[Sections, int]:
    """The sections and message count of a rendered summary (the inverse of render)."""
    sections: Sections = {key: [] for key, _ in SECTIONS}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = _TITLES.get(line[3:].strip())
        elif current and line.startswith("- "):
            sections[current].append(line[2:])
    match = _COUNT.search(text)
    return sections, int(match.group(1)) if match else 0


# Which sections give way first when a summary is over its size bound.
_TRIM_ORDER = ("progress", "key_decisions", "constraints", "critical_context", "next_steps", "goal")


def _trim_order(sections: Sections) -> list[str]:
    """Custom fields give way first, then the default sections in _TRIM_ORDER."""
    return [k for k in sections if k not in _DEFAULT_KEYS] + list(_TRIM_ORDER)


def bound(sections: Sections, summarized: int, limit: int, count: Callable[[str], int]) -> Sections:
    """Drop the oldest items, least critical sections first, until the rendered
    summary is within ``limit`` tokens."""
    out = {k: list(v) for k, v in sections.items()}
    total = count(render(out, summarized))
    for key in _trim_order(out):
        while total > limit and out.get(key):
            item = out[key].pop(0)
            total -= count(f"- {item}\n")
            if not out[key]:
                total = count(render(out, summarized))
        if total <= limit:
            break
    # Re-count exactly: per-item subtraction is an estimate.
    while count(render(out, summarized)) > limit and any(out.values()):
        key = next(k for k in _trim_order(out) if out.get(k))
        out[key].pop(0)
    return out


def previous(context: Context) -> tuple[Sections | None, int, list[dict[str, Any]]]:
    """The running summary of a context: (sections, messages it covers, archives). From the
    state when kept there, else read back from the newest summary message."""
    state = context.state.get(STATE_KEY)
    if isinstance(state, dict) and isinstance(state.get("sections"), dict):
        archives = [a for a in state.get("archives", ()) if isinstance(a, dict)]
        sections = {k: list(v) for k, v in state["sections"].items()}
        return sections, int(state.get("summarized", 0)), archives
    for m in reversed(context.messages):
        if is_summary(m):
            sections, count = parse_rendered(text_of(m.get("content")))
            return sections, count, []
    return None, 0, []


def with_summary(
    context: Context, removed: Iterable[int], cut: int, summary: Mapping[str, Any], state: Mapping[str, Any]
) -> Context:
    """The context with the ``removed`` messages (all before ``cut``) and every earlier
    summary replaced by ``summary``, placed after the kept messages before ``cut``
    (the system messages and the pinned task); ``state`` becomes the running summary,
    which also records the newest message it has seen."""
    msgs = context.messages
    gone = set(removed)
    head = [m for i, m in enumerate(msgs[:cut]) if i not in gone and not is_summary(m)]
    tail = [m for m in msgs[cut:] if not is_summary(m)]
    old = context.state.get(STATE_KEY)
    merged = {**(old if isinstance(old, dict) else {}), **state}
    new = context.with_messages([*head, summary, *tail])
    merged["upto"] = last_message_key(new)
    return replace(new, state={**context.state, STATE_KEY: merged})


def last_message_key(context: Context) -> str | None:
    """A fingerprint of the newest message: a summary records it, so that a second run
    with no new message does not summarise again."""
    if not context.messages:
        return None
    data = json.dumps(context.messages[-1], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]
