"""Small windows, call by call: how often the fit step acts, how much of each request the
provider's cache can reuse, and whether a request that fits is ever refused.

Each run is replayed by ``ctxmgmt eval``'s replay (:mod:`ctxmgmt.eval.replay`: the runner's
own bookkeeping, call by call, ``post_tool`` after each turn's results, then ``pre_llm``), with
and without an offload store. The reusable share is the mean over the requests sent of each
one's reusable prefix (the prefix identical to the previous request) over its tokens
("weighted": summed tokens over summed tokens). "fit" is the share of calls on which the fit
step changed the request. A refusal is *wrong* when the system prompt, tool schemas, system
messages, the task and the reserve fit the window.

Runs: generated coding-agent runs (``tests.agent_runs.padded_run``) with every tool result
1.5k-6k tokens of build and test log lines; with ``--real``, the real-run corpus
(``scripts/fetch_corpus.py``: ``$CTXMGMT_CORPUS`` or ``~/.cache/ctxmgmt/corpus``) read by
``ctxmgmt eval``'s readers, or the files and folders given.

    python bench/bench_small_windows.py [--runs N] [--turns N] [--real [PATH ...]]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxmgmt import evaluate, load_definition
from ctxmgmt.eval import Chat, ConversationLike, Report
from ctxmgmt.eval.readers import read_conversations
from ctxmgmt.eval.replay import Call, _Prepared
from ctxmgmt.fit import reserve_tokens
from ctxmgmt.messages import SYSTEM_ROLES, last_task_index
from scripts.fetch_corpus import corpus_paths
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


def _fixed_fits(prep: _Prepared, i: int, window: int, settings: dict[str, object]) -> bool:
    """Whether the system prompt, tools, system messages, the task and the reserve fit."""
    msgs = prep.messages[:i]
    task = last_task_index(msgs)
    fixed = sum(prep.tokens[j] for j, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES or j == task)
    return prep.fixed + fixed + reserve_tokens(window, settings) <= window


def reusable_shares(calls: Sequence[Call]) -> tuple[float, float]:
    """(the mean over the requests sent of each one's reusable share, summed reusable tokens
    over summed tokens): a refused call sent nothing, so it counts in neither."""
    sent = [c for c in calls if c.refused is None]
    mean = sum(c.reusable / c.tokens for c in sent if c.tokens) / max(1, len(sent))
    return mean, sum(c.reusable for c in sent) / max(1, sum(c.tokens for c in sent))


def measure(runs: Sequence[ConversationLike], report: Report, name: str, window: int, store: bool) -> str:
    """One line: the definition over every run at one window."""
    definition = load_definition(name)
    calls = report.row(definition.name, window).calls
    sent = [c for c in calls if c.refused is None]
    preps = {}
    wrong = 0
    for c in calls:
        if c.refused is not None:
            run = next(r for r in runs if str(r.id) == c.conversation)
            prep = preps.setdefault(c.conversation, _Prepared(run))
            wrong += _fixed_fits(prep, prep.calls[c.call - 1], window, dict(definition.settings))
    n = max(1, len(calls))
    fit = sum(1 for c in calls if c.fired.get("fit"))
    share, weighted = reusable_shares(calls)
    label = name + (" +store" if store else "")
    return (
        f"{label:26s} {window:>7,d} {len(calls):6d} {100 * fit / n:6.1f}% {100 * share:8.1f}% "
        f"{100 * weighted:8.1f}% {len(calls) - len(sent):8d} {wrong:6d} "
        f"{sum(c.trace_errors for c in calls):7d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--real", nargs="*", metavar="PATH", help="also the real-run corpus (or these files)")
    parser.add_argument("--definitions", default="default,cache-aware,long-running-agent")
    parser.add_argument("--windows", default="4096,8192,16384,32768")
    parser.add_argument("--no-store", action="store_true", help="only without an offload store")
    args = parser.parse_args()
    corpora: dict[str, list[ConversationLike]] = {
        "generated, results 1.5k-6k tokens": [
            Chat(f"gen-{s}", padded_run(args.turns, seed=s), SYSTEM, TOOLS, MODEL) for s in range(args.runs)
        ]
    }
    if args.real is not None:
        paths = corpus_paths(args.real)
        corpora[f"real: {', '.join(p.name for p in paths)}"] = list(read_conversations(paths))
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
        names, windows = args.definitions.split(","), [int(w) for w in args.windows.split(",")]
        stores = (False,) if args.no_store else (False, True)
        # Every definition at every window in one replay per store setting (no baselines).
        reports = {s: evaluate(runs, names, windows, baselines=False, store=s) for s in stores}
        for name in names:
            for window in windows:
                for store in stores:
                    print(measure(runs, reports[store], name, window, store))


if __name__ == "__main__":
    main()
