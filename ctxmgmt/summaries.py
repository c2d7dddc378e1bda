"""Structured summaries: sections, rendering, parsing, merging and bounding.

A summary is a set of sections, each a list of short items, most important first:
goal, constraints, errors, files changed, progress, key decisions, next steps and
critical context, and the ledger of specifics (calls with their outcome, paths with what
was done to them, ids). The offline summariser (:mod:`ctxmgmt.digest`) fills them without
an LLM; a model fills them through the same schema. When a summary is over its
budget, the least important sections give way first: progress, then next steps,
critical context, specifics, decisions, files, constraints, errors, and the goal last.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .archive import sizing_ref
from .context import runs
from .digest import (
    FAILED_COMMANDS,
    digest,
    fold_errors,
    merge_failed_commands,
    merge_ledger,
    merge_tool_lines,
    specificity,
    split_count,
    uncontained,
    with_count,
)
from .messages import is_summary, summary_line, summary_message, text_of, without_cache_control

if TYPE_CHECKING:
    from .context import Context
    from .manager import Runtime
    from .tokens import TokenCounter

__all__ = ["DEFAULT_PROMPT", "SECTIONS", "merge", "parse_rendered", "render", "summarize_offline"]

STATE_KEY = "summary"
"""Context state key of the running summary: its sections, how many messages it covers,
and the archives it guides to."""

Sections = dict[str, list[str]]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal", "Goal"),
    ("constraints", "Constraints"),
    ("errors", "Errors"),
    ("specifics", "Specifics"),
    ("files_changed", "Files changed"),
    ("progress", "Progress"),
    ("key_decisions", "Key decisions"),
    ("next_steps", "Next steps"),
    ("critical_context", "Critical context"),
)
DEFAULT_PROMPT = (
    "You maintain the running summary of an AI agent's conversation. Merge the previous "
    "summary with the new messages into one summary. Keep every file path, URL, command, "
    "error line, identifier and number verbatim. Be brief. Answer with only a JSON object "
    "whose keys are goal, constraints, errors (error lines and failed commands), specifics "
    "(commands with their outcome, paths with what was done to them, ids, versions, ports, "
    "line numbers), files_changed, progress, key_decisions, next_steps and critical_context, "
    "each a list of short strings."
)
"""The summariser model's system prompt: it answers with these sections, as JSON."""

_TITLES = {title: key for key, title in SECTIONS}
_GOAL_ITEMS = 31
_COUNTED = frozenset({"errors", "files_changed", "critical_context"})
"""Sections whose items carry how often they were seen, ``(×N)``: merges add the counts."""


def summarize_offline(messages: Sequence[Mapping[str, Any]], previous: Sections | None = None) -> Sections:
    """A structured summary of ``messages``, merged into ``previous``."""
    return merge(previous, digest(messages))


def merge(previous: Mapping[str, Sequence[str]] | None, new: Mapping[str, Sequence[str]]) -> Sections:
    """One summary from an earlier one and a newer one, ranked again: counted items add
    their counts and are ordered by them, tool lines add their calls, the goal keeps its
    first task, next steps are the newer ones when there are any (old plans go stale)."""
    out: Sections = {}
    previous = previous or {}
    # The default sections first, then any other field (a summary_schema of the definition).
    keys = [k for k, _ in SECTIONS]
    keys += [k for k in [*previous, *new] if k not in keys]
    for key in dict.fromkeys(keys):
        if key not in previous and key not in new and key not in _DEFAULT_KEYS:
            continue
        old, fresh = _items(previous.get(key, ())), _items(new.get(key, ()))
        if key == "next_steps" and fresh:
            old = []
        if key in _COUNTED:
            # The failed-commands item of each side merges into one, oldest commands first.
            old_rest, old_failed = _split_failed(old)
            fresh_rest, fresh_failed = _split_failed(fresh)
            counted = _add_counts(old_rest, fresh_rest)
            if key == "errors":  # the telling lines first; near-identical ones fold into one
                telling = sorted(counted, key=lambda i: -specificity(split_count(i)[0]))
                counted = fold_errors(uncontained(telling))
            out[key] = merge_failed_commands([*counted, *old_failed, *fresh_failed])
        elif key == "specifics":  # a path Files changed lists is not listed twice
            changed = [*_items(previous.get("files_changed", ())), *_items(new.get("files_changed", ()))]
            out[key] = merge_ledger(old, fresh, {split_count(f)[0] for f in changed})
        elif key == "progress":
            out[key] = merge_tool_lines(old, fresh)
        elif key == "key_decisions":
            out[key] = _dedupe([*fresh, *old])  # newest first
        elif key == "goal" and old:
            # The first task stays first; the newer stretch's requests come before older ones.
            out[key] = _dedupe([old[0], *fresh[1:], *fresh[:1], *old[1:]])[:_GOAL_ITEMS]
        else:
            out[key] = _dedupe([*old, *fresh])
    return out


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _split_failed(items: list[str]) -> tuple[list[str], list[str]]:
    failed = [i for i in items if i.startswith(FAILED_COMMANDS)]
    return [i for i in items if not i.startswith(FAILED_COMMANDS)], failed


def _add_counts(old: list[str], fresh: list[str]) -> list[str]:
    """Counted items of both, counts added, most frequent first, then the newer."""
    counts: dict[str, int] = {}
    recency: dict[str, int] = {}
    for rank, item in enumerate([*reversed(old), *reversed(fresh)]):
        key, n = split_count(item)
        counts[key] = counts.get(key, 0) + n
        recency[key] = rank
    ranked = sorted(counts, key=lambda k: (-counts[k], -recency[k]))
    return [with_count(k, counts[k]) for k in ranked]


MAX_GUIDE = 20


_DEFAULT_KEYS = frozenset(k for k, _ in SECTIONS)


_ONE_LINE = dict.fromkeys(map(ord, "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"), " ")
"""Every character at which str.splitlines breaks a line, as a space: an item or a title is one
line of the summary whoever wrote it (a summariser model steered by what it read could write
a section of ctxmgmt's own, "## Archived messages", into an item)."""


def _items(value: Any) -> list[str]:
    """A field's value as a list of one-line strings (a model may answer a string or an
    object, and an item of several lines): what the state keeps is what is rendered."""
    if isinstance(value, str):
        values: Sequence[Any] = [value] if value else []
    elif isinstance(value, (list, tuple)):
        values = value
    else:
        values = [] if value is None else [value]
    return [
        (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)).translate(_ONE_LINE) for v in values
    ]


def _title(key: str) -> str:
    return dict(SECTIONS).get(key) or key.replace("_", " ").capitalize()


def render(
    sections: Mapping[str, Sequence[str]], summarized: int, archives: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The summary message text. It starts with a marker that identifies it (its tag unsigned:
    :func:`~ctxmgmt.messages.summary_message` signs it), and ends with a guide to the
    archived messages, when they were offloaded. Each item and title is one line."""
    lines = [summary_line(summarized)]
    keys = [k for k, _ in SECTIONS if k in sections] + [k for k in sections if k not in _DEFAULT_KEYS]
    for key in keys:
        items = sections.get(key) or ()
        if items:
            lines.append(f"## {_title(key)}".translate(_ONE_LINE))
            lines += [f"- {item}".translate(_ONE_LINE) for item in items]
    if archives:
        # How to read one, said once: a line per archive costs half the tokens.
        lines += ["## Archived messages", 'context_read(ref="m-…") returns an archive\'s messages:']
        lines += [f"- {a['ref']}: {a['count']} messages" for a in list(archives)[-MAX_GUIDE:]]
    return "\n".join(lines)


_COUNT = re.compile(r"Summary of (\d+) earlier messages")


_GUIDE = re.compile(r"^- (m-[0-9a-f]{32}): (\d+) messages(?:;|$)")
"""A guide's line: as rendered now, or as before with how to read it on every line."""


def parse_rendered(text: str) -> tuple[Sections, int, list[dict[str, Any]]]:
    """The sections, message count and archive guide of a rendered summary (the inverse of
    render), so that a client that sends back only the messages keeps the references."""
    sections: Sections = {key: [] for key, _ in SECTIONS}
    archives: list[dict[str, Any]] = []
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = _TITLES.get(
                line[3:].strip(), "archives" if line[3:].strip() == "Archived messages" else None
            )
        elif current == "archives":
            found = _GUIDE.match(line)
            if found:
                archives.append({"ref": found.group(1), "count": int(found.group(2))})
        elif current and line.startswith("- "):
            sections[current].append(line[2:])
    match = _COUNT.search(text)
    return sections, int(match.group(1)) if match else 0, archives


# Which sections give way first when a summary is over its size bound.
_TRIM_ORDER = (
    "progress",
    "next_steps",
    "critical_context",
    "specifics",
    "key_decisions",
    "files_changed",
    "constraints",
    "errors",
    "goal",
)


def _trim_order(sections: Sections) -> list[str]:
    """Custom fields give way first, then the default sections in _TRIM_ORDER."""
    return [k for k in sections if k not in _DEFAULT_KEYS] + list(_TRIM_ORDER)


# The share of the budget a section keeps while others are still over theirs, so that a
# flood of one kind of item (a thousand error lines) cannot push out every other section.
_SHARES = {
    "goal": 0.25,
    "constraints": 0.2,
    "errors": 0.4,
    "specifics": 0.45,
    "files_changed": 0.15,
    "critical_context": 0.15,
    "key_decisions": 0.1,
    "next_steps": 0.05,
    "progress": 0.05,
}


_FLOORED = frozenset({"specifics", "errors"})


def bound(
    sections: Sections,
    summarized: int,
    limit: int,
    count: Callable[[str], int],
    per_line: Callable[[str], int] | None = None,
) -> Sections:
    """Drop items until the rendered summary is within ``limit`` tokens: first from the
    sections over their share of the budget, then the least important sections first; within
    a section its last (least important) items. ``count`` counts the rendered summary,
    ``per_line`` (``count`` by default) an item's line: a memoised count, since the same
    items are weighed again at every fitting."""
    out = {k: list(v) for k, v in sections.items()}
    line = per_line or count
    total = count(render(out, summarized))
    for key in _trim_order(out):
        if total <= limit:
            break
        if key == "goal":
            continue  # the task goes last, not down to a share
        size = sum(line(f"- {item}\n") for item in out.get(key, ()))
        share = int(limit * _SHARES.get(key, 0.05))
        while size > share and total > limit and out.get(key):
            cost = line(f"- {out[key].pop()}\n")
            size -= cost
            total -= cost
    # Then the least important sections first, down to a floor for the ranked lists of
    # specifics and errors (their first items are what an agent needs most), then wholly.
    for floored in (True, False):
        for key in _trim_order(out):
            keep = 1 if key == "goal" else 0  # the task itself is shortened below, not dropped
            floor = int(limit * _SHARES[key] / 3) if floored and key in _FLOORED else 0
            size = sum(line(f"- {item}\n") for item in out.get(key, ())) if floor else 0
            while total > limit and len(out.get(key) or ()) > keep and (not floor or size > floor):
                item = out[key].pop()
                cost = line(f"- {item}\n")
                total -= cost
                size -= cost
                if not out[key]:
                    total = count(render(out, summarized))
            if total <= limit:
                break
        if total <= limit:
            break
    # Re-count exactly (per-item subtraction is an estimate), dropping in batches the size
    # of the overshoot, so that a summary of many items costs a few renders, not one each.
    while (over := count(render(out, summarized)) - limit) > 0 and any(out.values()):
        key = next(k for k in _trim_order(out) if out.get(k))
        if key == "goal" and len(out["goal"]) == 1:
            break  # the task itself: shortened below rather than dropped
        while over > 0 and len(out[key]) > (1 if key == "goal" else 0):
            over -= line(f"- {out[key].pop()}\n")
    goal = out.get("goal")
    if goal and count(render(out, summarized)) > limit:
        text = goal[0]
        low, high = 0, len(text)
        while low < high:  # the longest head of the task that fits
            mid = (low + high + 1) // 2
            out["goal"] = [text[:mid] + "…"]
            low, high = (mid, high) if count(render(out, summarized)) <= limit else (low, mid - 1)
        out["goal"] = [text[:low] + "…"] if low else []
    return out


SUMMARY_CAP = 8000
"""The fit step's summary: at most this many tokens, and at most a fifth of the room.
Measured on the real-run corpus (``bench/bench_retention.py``): a fifth keeps more of the
needed paths than an eighth or a sixth at every window (16k: 88% -> 91%; a sliding window of 6
messages that summarises what it removes: 86% -> 90%); a quarter keeps fewer at 16k (90%)."""


def fit_room(room: int) -> int:
    """The tokens the fit step gives its own summary in a request with ``room`` tokens for
    its input."""
    return min(SUMMARY_CAP, max(64, room // 5))


def floor_room(room: int) -> int:
    """The fewest tokens a summariser squeezes a summary to, in a request with ``room`` tokens
    for its input, when what it keeps leaves less (see SummarizationManager): an eighth, so that
    what it keeps beside the summary usually still fits and the fit step has nothing to do."""
    return min(SUMMARY_CAP, max(64, room // 8))


def fitted(
    sections: Sections,
    summarized: int,
    archives: Sequence[Mapping[str, Any]],
    room: int,
    role: str,
    counter: TokenCounter,
) -> tuple[dict[str, Any], Sections]:
    """The summary message within ``room`` tokens when it can be, and its sections: the guide
    to the archives takes at most a quarter of the room (its older entries give way; the
    newest stays while it fits), the sections the rest (their least important items first,
    down to the first line). When not even the first line fits, that line: the caller
    decides whether it stays."""
    bare = render({}, summarized)
    guides = [list(archives)[-n:] if n else [] for n in (MAX_GUIDE, 5, 1, 0)]
    for guide in [g for i, g in enumerate(guides) if g not in guides[:i]]:
        # What the message costs beyond its sections' text: the overhead, the tag, the guide.
        # Every reference ctxmgmt draws, and every tag, takes the same tokens (see
        # archive.new_ref), so what the sections keep never depends on which were drawn.
        unsigned = {"role": role, "content": render({}, summarized, guide)}
        extra = counter.message(unsigned) - counter.text(bare)
        if len(guide) > 1 and extra > room // 4:
            continue  # the guide to older archives gives way before the summary's items
        limit = room - extra
        for _ in range(4):
            if limit < counter.text(bare):
                break
            kept = bound(sections, summarized, limit, counter.text, counter.repeated)
            message = summary_message(role, render(kept, summarized, guide))
            over = counter.message(message) - room
            if over <= 0:
                return message, kept
            limit -= over  # tokens can merge differently across a join: take off the excess
    return summary_message(role, render({}, summarized)), {}


def previous(context: Context) -> tuple[Sections | None, int, list[dict[str, Any]]]:
    """The running summary of a context: (sections, messages it covers, archives). From the
    state when kept there, else read back from the newest summary message."""
    state = context.state.get(STATE_KEY)
    kept = _state(state)
    if kept is not None:
        return kept
    for m in reversed(context.messages):
        if is_summary(m):
            return parse_rendered(text_of(m.get("content")))
    return None, 0, []


def _state(state: Any) -> tuple[Sections, int, list[dict[str, Any]]] | None:
    """The running summary kept in a context's state, or None when there is none or it is not
    one ctxmgmt wrote (a client may send any state): then the summary message is read back."""
    if not isinstance(state, dict) or not isinstance(state.get("sections"), dict):
        return None
    sections = state["sections"]
    summarized = state.get("summarized", 0)
    archives = state.get("archives", [])
    if (
        not all(isinstance(k, str) and isinstance(v, list) for k, v in sections.items())
        or not all(isinstance(i, str) for v in sections.values() for i in v)
        or isinstance(summarized, bool)
        or not isinstance(summarized, int)
        or not isinstance(archives, list)
        or not all(
            isinstance(a, dict) and isinstance(a.get("ref"), str) and isinstance(a.get("count"), int)
            for a in archives
        )
    ):
        return None
    return {k: list(v) for k, v in sections.items()}, summarized, [dict(a) for a in archives]


def with_summary(
    context: Context,
    removed: Iterable[int],
    cut: int,
    summary: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    seen: bool = True,
    before: int | None = None,
) -> Context:
    """The context with the ``removed`` messages (all before ``cut``) and every earlier
    summary replaced by ``summary``, placed after the kept messages before ``cut``
    (the system messages and the pinned task), or right before the kept message ``before``
    when that comes first (the head of a turn the summary must not split, see
    :meth:`~ctxmgmt.formats.Constraints.head`); ``state`` becomes the running summary,
    which also records the newest message it has seen (with ``seen``; else the record stays)."""
    msgs = context.messages
    gone = set(removed)
    gone.update(i for i, m in enumerate(msgs) if is_summary(m))
    at = cut if before is None or before >= cut or before in gone else before
    changes: list[tuple[int, int, tuple[Mapping[str, Any], ...]]] = []
    for start, end in runs(i for i in gone if i < at):
        changes.append((start, end, ()))
    # The summary goes at the cut, after the kept head.
    if changes and changes[-1][1] == at:
        changes[-1] = (changes[-1][0], at, (summary,))
    else:
        changes.append((at, at, (summary,)))
    changes.extend((start, end, ()) for start, end in runs(i for i in gone if i >= at))
    old = context.state.get(STATE_KEY)
    merged = {**(old if isinstance(old, dict) else {}), **state}
    if isinstance(merged.get("archives"), list):  # bounded: the guide shows the newest only
        merged["archives"] = merged["archives"][-MAX_GUIDE:]
    if seen:
        newest = next((msgs[i] for i in range(len(msgs) - 1, cut - 1, -1) if i not in gone), summary)
        merged["upto"] = message_key(newest)
    return context.splice(changes, state={**context.state, STATE_KEY: merged})


Draft = tuple[Sections, int, list[dict[str, Any]], str]
"""The running summary with what is removed merged in: (sections, messages covered, archives,
role), before it is fitted to a room."""


def fold(
    context: Context,
    removed: Sequence[int],
    cut: int,
    room: int,
    runtime: Runtime,
    *,
    seen: bool = True,
    strict: bool = False,
    keep: int | None = None,
    draft: Draft | None = None,
) -> tuple[Context | None, str | None]:
    """The context with the ``removed`` messages (all before ``cut``) merged into the running
    summary by the offline summariser, the summary within ``room`` tokens, and the reference of
    their archive (written first when the runtime has a store: the summary's guide names it).
    What the fit step and a sliding window with ``summarize_removed`` do with what they remove:
    nothing goes without a trace.

    ``seen``: the summary records the newest message as seen (a summariser does not run again
    before a new one arrives); a window that summarises on its way leaves the mark as it was.
    ``strict``: (None, None), with nothing archived, when the summary within ``room`` would
    show no item (its first line alone, or not even that). ``keep``: the room the running
    summary's items are kept for, when larger than ``room`` (a later summary with more room
    shows them again). ``draft``: what :func:`folded_size` drew for the same ``removed``."""
    msgs = context.messages
    gone = [msgs[i] for i in removed]
    sections, summarized, archives, role = draft or _draft(context, gone, runtime)
    counter = runtime.counter
    if strict:
        tokens, shown = _trial(sections, summarized, archives, len(gone), room, role, runtime)
        if tokens > room or not any(shown.values()):
            return None, None
    ref = None
    if runtime.offloader is not None:
        ref = runtime.offloader.store_messages(runtime.session, [dict(m) for m in gone])
        archives.append({"ref": ref, "count": len(gone)})
    if keep is not None and keep > room:
        sections = fitted(sections, summarized, archives, keep, role, counter)[1]
    summary, shown = fitted(sections, summarized, archives, room, role, counter)
    running = sections if keep is not None and keep > room else shown
    state = {"sections": running, "summarized": summarized, "archives": archives}
    before = runtime.constraints.head(context.messages)[1]
    return with_summary(context, removed, cut, summary, state, seen=seen, before=before), ref


def folded_size(
    context: Context, removed: Sequence[int], room: int, runtime: Runtime
) -> tuple[int, Draft] | None:
    """The tokens of the summary :func:`fold` would write for ``removed`` within ``room``
    (its archive's reference sized at its longest), without writing anything, and the draft
    it was made from (for :func:`fold` of the same ``removed``); None when it would hold no
    item (nothing said of what was removed but its count)."""
    gone = [context.messages[i] for i in removed]
    draft = _draft(context, gone, runtime)
    sections, summarized, archives, role = draft
    if not any(sections.values()):
        return None
    return _trial(sections, summarized, archives, len(gone), room, role, runtime)[0], draft


def _draft(context: Context, gone: Sequence[Mapping[str, Any]], runtime: Runtime) -> Draft:
    """The running summary with ``gone`` merged in: (sections, messages covered, archives, role)."""
    sections, summarized, archives = previous(context)
    role = next((str(m.get("role")) for m in context.messages if is_summary(m)), "user")
    if runtime.constraints.user_first:
        role = "user"
    return summarize_offline(gone, sections), summarized + len(gone), archives, role


def _trial(
    sections: Sections,
    summarized: int,
    archives: list[dict[str, Any]],
    count: int,
    room: int,
    role: str,
    runtime: Runtime,
) -> tuple[int, Sections]:
    """The tokens of the summary within ``room``, its new archive's reference (when there is a
    store) sized at its longest, and the sections it shows."""
    entry = {"ref": sizing_ref("messages"), "count": count}
    pending = [*archives, entry] if runtime.offloader is not None else archives
    message, shown = fitted(sections, summarized, pending, room, role, runtime.counter)
    return runtime.counter.message(message), shown


def last_message_key(context: Context) -> str | None:
    """A fingerprint of the newest message: a summary records it, so that a second run
    with no new message does not summarise again. Bounded work whatever the message's size:
    its text counts by length, head and tail; everything else (role, ids, calls) whole."""
    return message_key(context.messages[-1]) if context.messages else None


def message_key(m: Mapping[str, Any]) -> str:
    """The fingerprint :func:`last_message_key` gives a message (its prompt-cache breakpoints
    left out: a client moves them)."""
    last = dict(without_cache_control(m))
    content = last.pop("content", None)
    text = text_of(content)
    if isinstance(content, list):  # images and other parts count whole
        last["parts"] = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
    if len(text) > 2 * _KEY_CHARS:
        text = f"{len(text)}:{text[:_KEY_CHARS]}{text[-_KEY_CHARS:]}"
    data = json.dumps([last, text], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_KEY_CHARS = 4096
