"""Small windows, call by call: how often the fit step acts, how much of each request the
provider's cache can reuse, and whether a request that fits is ever refused.

Each run is replayed as the runner would: for each assistant message of the run, the managed
context of the previous call is carried forward, the new messages are appended, ``post_tool``
runs once after a turn's tool results, then ``pre_llm``, and the request is measured
(:meth:`ctxmgmt.cache.PromptCache.measure`: the prefix identical to the previous request).
Each user message starts an execution (``max_per_execution`` counts per execution), as
the runner does. The reusable share is the mean over calls of each request's reusable
prefix over its tokens ("weighted": summed tokens over summed tokens). A ``ContextError``
counts as a refusal; it is *wrong* when the system prompt, tool schemas, system messages,
the task and the reserve fit the window (the next call goes on from the
unmanaged context, as a caller that retries would).

Runs: generated coding-agent runs (``tests.agent_runs``) with every tool result padded to
1.5k-6k tokens of build and test log lines; and, with ``--eval FILE`` (an Inspect AI
``.eval`` log, a zip with ``samples/*.json`` holding ``messages``), real runs.

    python bench/bench_small_windows.py [--runs N] [--turns N] [--eval FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxmgmt import Context, ContextError, get_counter, load_definition
from ctxmgmt.cache import PromptCache
from ctxmgmt.fit import reserve_tokens
from ctxmgmt.managers.base import Environment
from ctxmgmt.messages import SYSTEM_ROLES, last_task_index
from ctxmgmt.offload import LocalOffloader
from tests.agent_runs import padded_run

MODEL = "gpt-4o"
SYSTEM = "You are a coding agent. Work in small steps; run the tests after each change."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }
    for name in ("read_file", "run", "search", "edit_file", "fetch", "list_dir")
]


def eval_runs(path: Path, limit: int) -> Iterator[list[dict[str, Any]]]:
    """The chat messages of an Inspect AI .eval log's samples (OpenAI-like roles kept)."""
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.startswith("samples/") and n.endswith(".json"))
        for name in names[:limit]:
            sample = json.loads(archive.read(name))
            yield _chat(sample.get("messages") or [])


def _chat(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    answered: set[str] = set()
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text") or p.get("reasoning") or "") for p in content)
        role = m.get("role")
        if role == "system":
            continue
        if role == "tool":
            if m.get("tool_call_id") in answered or not out:
                continue
            answered.add(str(m.get("tool_call_id")))
            out.append({"role": "tool", "tool_call_id": str(m.get("tool_call_id")), "content": str(content)})
        elif role == "assistant" and m.get("tool_calls"):
            calls = [
                {
                    "id": str(c["id"]),
                    "type": "function",
                    "function": {
                        "name": str(c["function"]),
                        "arguments": json.dumps(c.get("arguments") or {}),
                    },
                }
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": str(content or "") or None, "tool_calls": calls})
        elif role in ("user", "assistant"):
            out.append({"role": role, "content": str(content or "")})
    # Drop calls left unanswered (an interrupted sample): the request would be invalid.
    ids = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    for k, m in enumerate(out):
        if m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if c["id"] in ids]
            out[k] = (
                {**m, "tool_calls": calls} if calls else {"role": "assistant", "content": m["content"] or "."}
            )
    return out


@dataclass
class Figures:
    calls: int = 0
    fit: int = 0
    refused: int = 0
    wrong: int = 0
    errors: int = 0
    reusable: int = 0
    sent: int = 0
    share: float = 0.0  # the sum of each request's reusable share

    def row(self, name: str, window: int) -> str:
        calls = max(1, self.calls)
        return (
            f"{name:26s} {window:>7,d} {self.calls:6d} {100 * self.fit / calls:6.1f}% "
            f"{100 * self.share / calls:8.1f}% {100 * self.reusable / max(1, self.sent):8.1f}% "
            f"{self.refused:8d} {self.wrong:6d} {self.errors:7d}"
        )


def _fixed_fits(context: Context, window: int, settings: Mapping[str, Any]) -> bool:
    """Whether the system prompt, tools, system messages, task and reserve fit the window."""
    counter = get_counter(MODEL)
    msgs = context.messages
    task = last_task_index(msgs)
    fixed = [m for i, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES or i == task]
    tokens = counter.context(Context(context.system_prompt, fixed, context.tools, MODEL, window))[0]
    return tokens + reserve_tokens(window, settings) <= window


def replay(
    messages: Sequence[Mapping[str, Any]], name: str, window: int, store: bool, figures: Figures
) -> None:
    """One run, call by call, as the runner would make its calls (see the module docstring)."""
    definition = load_definition(name)
    counter = get_counter(MODEL)
    cache = PromptCache(clock=lambda: 0.0)
    with tempfile.TemporaryDirectory() as folder:
        env = Environment(offloader=LocalOffloader(folder) if store else None, session="s", cache=cache)
        ctx = Context(SYSTEM, [], TOOLS, MODEL, window)
        for m in messages:
            if m.get("role") == "user":  # each user message starts an execution, as in the runner
                env = replace(env, execution=f"x{figures.calls}")
            if m.get("role") == "assistant" and ctx.messages:
                if ctx.messages[-1].get("role") == "tool":
                    result = definition.apply("post_tool", ctx, environment=env)
                    figures.errors += sum(1 for e in result.trace if e.get("error"))
                    ctx = result.context
                figures.calls += 1
                try:
                    result = definition.apply("pre_llm", ctx, environment=env)
                except ContextError:
                    figures.refused += 1
                    figures.wrong += _fixed_fits(ctx, window, definition.settings)
                else:
                    figures.errors += sum(1 for e in result.trace if e.get("error"))
                    figures.fit += any(e["type"] == "fit" and e["activated"] for e in result.trace)
                    ctx = result.context
                    total = counter.context(ctx)[0]
                    reusable = cache.measure(ctx, counter)
                    figures.reusable += reusable
                    figures.sent += total
                    figures.share += reusable / total
            ctx = ctx.append(m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--eval", type=Path, help="an Inspect AI .eval log: its samples as real runs")
    parser.add_argument("--definitions", default="default,cache-aware,long-running-agent")
    parser.add_argument("--windows", default="4096,8192,16384")
    args = parser.parse_args()
    corpora = {
        "generated, results 1.5k-6k tokens": [padded_run(args.turns, seed=s) for s in range(args.runs)]
    }
    if args.eval:
        corpora[f"real: {args.eval.name}"] = list(eval_runs(args.eval, 50))
    header = " ".join(
        f"{h:>{w}s}"
        for h, w in (
            ("window", 7),
            ("calls", 6),
            ("fit", 7),
            ("reusable", 9),
            ("weighted", 9),
            ("refused", 8),
        )
    )
    header = f"{'definition':26s} {header} {'wrong':>6s} {'errors':>7s}"
    for title, runs in corpora.items():
        print(f"\n{title}: {len(runs)} runs")
        print(header)
        for name in args.definitions.split(","):
            for window in (int(w) for w in args.windows.split(",")):
                for store in (False, True):
                    figures = Figures()
                    for run in runs:
                        replay(run, name, window, store, figures)
                    print(figures.row(name + (" +store" if store else ""), window))


if __name__ == "__main__":
    main()
