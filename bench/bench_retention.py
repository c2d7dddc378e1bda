"""Retention benchmark: of the specifics the agent needs again, how many each request still holds.

Each conversation is replayed call by call, as the runner does: before each assistant message
the managed context is carried forward, the new messages are added (``post_tool`` after each
new group of tool results), then ``pre_llm`` runs at the given window. At each call a *needed
specific* is a path, shell command, error line, or number/id of a message sent before the call
that the request no longer holds as it was (removed, summarised or cut), which the agent itself
uses again at that call or later (its own text or tool-call arguments); it is *kept* when the
request still holds it verbatim (system prompt and summary included). The baseline is a plain
sliding window sending as many tokens as the definition did (the task, then the newest whole
units).

Conversations: real runs shipped inside public packages (an Inspect AI ``.eval`` log and a
tau-bench trajectory, found under ``CTXMGMT_AGENTLOGS``, default ``/tmp/agentlogs``), converted
to OpenAI chat here, and generated runs (``tests/agent_runs.py``).

    python bench/bench_retention.py [definition ...]
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxmgmt import Context, load_definition
from ctxmgmt.digest import error_lines
from ctxmgmt.messages import text_of
from ctxmgmt.tokens import REPLY_PRIMING, get_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.agent_runs import agent_run

MODEL = "gpt-4o-mini"
WINDOWS = (2000, 4000, 8000, 16000, 32000)
CATEGORIES = ("paths", "commands", "errors", "numbers")
_PATH = re.compile(
    r"(?<![\w/.:@-])(?:~|\.{1,2})?/?(?:[\w@.+-]+/)+[\w@.+-]*\w|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b"
)
_NUMBER = re.compile(
    r"\b[\w.-]+\.[A-Za-z]\w{0,7}:\d+\b|\b(?:localhost|\d{1,3}(?:\.\d{1,3}){3}):\d{2,5}\b"
    r"|\bv?\d+(?:\.\d+){2,3}\b|\b(?=\w*\d)(?=\w*[A-Za-z])[\w-]{6,64}\b|\b\d{4,}\b"
)
_SHELL = ("cmd", "command", "bash", "code")


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = (call.get("function") or {}).get("arguments")
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message_text(m: Mapping[str, Any]) -> str:
    """A message's text and its tool calls' argument values."""
    parts = [text_of(m.get("content"))]
    for call in m.get("tool_calls") or ():
        parts += [v if isinstance(v, str) else json.dumps(v) for v in _arguments(call).values()]
    return "\n".join(parts)


def specifics(m: Mapping[str, Any]) -> dict[str, set[str]]:
    """Every category's specifics of one message."""
    text = message_text(m)[:200_000]
    commands = {
        " ".join(line.split())
        for call in m.get("tool_calls") or ()
        for k in _SHELL
        if isinstance(v := _arguments(call).get(k), str)
        for line in v.splitlines()
        if line.strip() and not line.strip().startswith("#")
    }
    paths = {p.rstrip(".,:;") for p in _PATH.findall(re.sub(r"https?://\S+", " ", text))}
    return {
        "paths": {p for p in paths if len(p) > 3 and not p.replace(".", "").isdigit()},
        "commands": commands,
        "errors": {" ".join(line.split()) for line in error_lines(text) if len(line) >= 8},
        "numbers": set(_NUMBER.findall(text)),
    }


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- conversations -----------------------------------------------------------------------------
def _chat(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Inspect AI / tau-bench messages as OpenAI chat: text content, JSON-string arguments,
    unique call ids, each call answered (unanswered calls dropped), nothing else."""
    out: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    answered = {str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"}
    for n, m in enumerate(messages):
        role = m.get("role")
        text = text_of(m.get("content")) if not isinstance(m.get("content"), str) else m["content"]
        if role == "assistant":
            calls = []
            for k, c in enumerate(m.get("tool_calls") or ()):
                if str(c.get("id")) not in answered:
                    continue
                fn = c.get("function")
                name, args = (
                    (fn.get("name"), fn.get("arguments"))
                    if isinstance(fn, dict)
                    else (fn, c.get("arguments"))
                )
                ids[str(c.get("id"))] = new = f"call_{n}_{k}"
                calls.append(
                    {
                        "id": new,
                        "type": "function",
                        "function": {"name": str(name), "arguments": json.dumps(args or {})},
                    }
                )
            out.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
        elif role == "tool":
            if str(m.get("tool_call_id")) in ids:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": ids[str(m.get("tool_call_id"))],
                        "content": text or "(empty)",
                    }
                )
        elif role in ("system", "user"):
            out.append({"role": role, "content": text})
    return out


def real_runs(root: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The real runs found under ``root``: Inspect AI logs and tau-bench trajectories."""
    for log in sorted(root.rglob("docent*/**/log.eval")):
        with zipfile.ZipFile(log) as z:
            for name in sorted(n for n in z.namelist() if n.startswith("samples/")):
                yield f"inspect:{Path(name).stem}", _chat(json.loads(z.read(name))["messages"])
    for traj in sorted(root.rglob("docent*/**/tb_airline.json")):
        yield "tau:airline", _chat(json.loads(traj.read_text())["traj"])


def generated_runs() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for turns, seed in ((40, 0), (40, 1)):
        yield f"gen:{turns}/{seed}", agent_run(turns, seed=seed)[0]


# -- replay ------------------------------------------------------------------------------------
def replay(
    messages: list[dict[str, Any]], definition: Any, window: int
) -> Iterator[tuple[int, list[Any], int]]:
    """(position of the call, the request's messages, its tokens) for each assistant message."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    body = messages[1:] if system is not None else messages
    counter = get_counter(MODEL)
    context = Context(system_prompt=system, messages=[], model=MODEL, context_window=window)
    done = 0
    for i, m in enumerate(body):
        if m["role"] != "assistant" or i == 0:
            continue
        for j in range(done, i):
            context = context.append(body[j])
            if body[j]["role"] == "tool" and (j + 1 == i or body[j + 1]["role"] != "tool"):
                context = definition.apply("post_tool", context).context
        done = i
        context = definition.apply("pre_llm", context).context
        yield i, list(context.messages), counter.context(context)[0]


def sliding(body: list[dict[str, Any]], i: int, budget: int, counter: Any, fixed: int) -> list[Any]:
    """The task, then the newest whole units within ``budget`` tokens."""
    task = next((j for j, m in enumerate(body[:i]) if m["role"] == "user"), None)
    used = fixed + (counter.message(body[task]) if task is not None else 0)
    start = i
    floor = task + 1 if task is not None else 0
    while start > floor:
        s = start - 1
        while s > floor and body[s]["role"] == "tool":
            s -= 1
        cost = sum(counter.message(body[k]) for k in range(s, start))
        if used + cost > budget:
            break
        used += cost
        start = s
    return [*([body[task]] if task is not None else []), *body[start:i]]


def measure(
    messages: list[dict[str, Any]], definition: Any, window: int, tally: dict[str, list[int]]
) -> None:
    """Adds (needed, kept by the definition, kept by the sliding window) per category."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    body = messages[1:] if system else messages
    found = [specifics(m) for m in body]
    last: dict[tuple[str, str], int] = {}
    for j, (m, f) in enumerate(zip(body, found, strict=True)):
        if m["role"] == "assistant":
            for cat, items in f.items():
                for s in items:
                    last[cat, s] = j
    counter = get_counter(MODEL)
    fixed = counter.system_prompt(system) + REPLY_PRIMING
    for i, request, tokens in replay(messages, definition, window):
        for name, sent in (("def", request), ("win", sliding(body, i, tokens, counter, fixed))):
            ids = {id(m) for m in sent}
            text = _flat(system + "\n" + "\n".join(message_text(m) for m in sent))
            absent = [j for j in range(i) if id(body[j]) not in ids]
            needed = {
                (cat, s)
                for j in absent
                for cat, items in found[j].items()
                for s in items
                if last.get((cat, s), -1) >= i
            }
            for cat, s in needed:
                row = tally.setdefault(f"{name}:{cat}", [0, 0])
                row[0] += 1
                row[1] += _flat(s) in text


def main(names: Sequence[str]) -> None:
    root = Path(os.environ.get("CTXMGMT_AGENTLOGS", "/tmp/agentlogs"))
    runs = {"real": list(real_runs(root)), "generated": list(generated_runs())}
    print(f"real runs: {len(runs['real'])}, generated: {len(runs['generated'])}")
    for name in names:
        definition = load_definition(name)
        for kind, convs in runs.items():
            if not convs:
                continue
            print(f"\n{name} on {kind} runs: needed specifics kept, definition % / sliding window % (needed)")
            print(f"{'window':>7}  " + "  ".join(f"{c:>20}" for c in CATEGORIES))
            for window in WINDOWS:
                tally: dict[str, list[int]] = {}
                for _, messages in convs:
                    measure(messages, definition, window, tally)
                cells = []

                def pct(r: list[int]) -> str:
                    return f"{100 * r[1] / r[0]:3.0f}" if r[0] else "  -"

                for cat in CATEGORIES:
                    d, w = tally.get(f"def:{cat}", [0, 0]), tally.get(f"win:{cat}", [0, 0])
                    cells.append(f"{pct(d)} / {pct(w)} ({max(d[0], w[0]):5d})")
                print(f"{window:>7}  " + "  ".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main(sys.argv[1:] or ["default"])
