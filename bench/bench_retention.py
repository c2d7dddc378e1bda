"""Retention benchmark: of the specifics the agent needs again, how many each request still holds.

The runs are replayed by ``ctxmgmt eval`` (:func:`ctxmgmt.evaluate`: call by call, as the
runner does, every definition at each window in one replay, each baseline once per window).
At each call a *needed specific* is a path, shell command, error line, or number/id of a
message sent before the call that the request no longer holds as it was (removed, summarised
or cut), which the agent itself uses again at that call or later; it is *kept* when the
request still holds it verbatim (system prompt and summary included). The baselines, on the
same calls: a plain sliding window sending as many tokens as the definition did, and
observation masking (tool results older than the newest 3 replaced by a placeholder).

Runs: the real-run corpus (``scripts/fetch_corpus.py``: ``$CTXMGMT_CORPUS`` or
``~/.cache/ctxmgmt/corpus``; or the files and folders given with ``--real``) read by
``ctxmgmt eval``'s readers, and generated runs (``tests/agent_runs.py``).

    python bench/bench_retention.py [definition ...] [--windows 2000,4000,...] [--real PATH ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxmgmt import evaluate
from ctxmgmt.eval import BASELINE_MASKING, BASELINE_WINDOW, Chat, ConversationLike, Report, Row
from ctxmgmt.eval.readers import read_conversations
from ctxmgmt.eval.specifics import CATEGORIES
from scripts.fetch_corpus import corpus_paths
from tests.agent_runs import agent_run

WINDOWS = "2000,4000,8000,16000,32000"


def generated_runs() -> list[ConversationLike]:
    return [
        Chat(f"gen:{turns}/{seed}", agent_run(turns, seed=seed)[0], None, None, "gpt-4o-mini")
        for turns, seed in ((40, 0), (40, 1))
    ]


def _pct(row: Row, cat: str) -> str:
    needed, kept = row.totals.needed[cat], row.totals.kept[cat]
    return f"{100 * kept / needed:3.0f}" if needed else "  -"


def table(report: Report, name: str) -> list[str]:
    """Per window and category: kept % by the definition / the sliding window / masking."""
    lines = [f"{'window':>7}  " + "  ".join(f"{c:>24}" for c in CATEGORIES)]
    for w in report.windows:
        mine = report.row(name, w)
        window = report.row(BASELINE_WINDOW, w, "sliding_window", of=name)
        masking = report.row(BASELINE_MASKING, w, "observation_masking")
        cells = [
            f"{_pct(mine, c)} / {_pct(window, c)} / {_pct(masking, c)} ({mine.totals.needed[c]:4d})"
            for c in CATEGORIES
        ]
        lines.append(f"{w:>7,}  " + "  ".join(f"{c:>24}" for c in cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("definitions", nargs="*", default=["default"])
    parser.add_argument("--windows", default=WINDOWS)
    parser.add_argument("--real", nargs="*", default=[], metavar="PATH", help="real-run files or folders")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    runs = {"real": list(read_conversations(corpus_paths(args.real))), "generated": generated_runs()}
    print(f"real runs: {len(runs['real'])}, generated: {len(runs['generated'])}")
    for kind, convs in runs.items():
        if not convs:
            continue
        report = evaluate(convs, args.definitions, windows, per_call=False)
        for name in report.definitions:
            print(
                f"\n{name} on {kind} runs: needed specifics kept, "
                "definition % / sliding window % / observation masking % (needed)"
            )
            print("\n".join(table(report, name)))


if __name__ == "__main__":
    main()
