"""`ctxmgmt eval` benchmark: the time to replay a long run through three definitions, against
one raw tokenizer pass over the same conversation (in the same process), and what each
definition keeps of the specifics the agent needed again, beside both baselines.

A generated 300-call coding-agent run (``tests.agent_runs.agent_run``) is replayed through
``default``, ``cache-aware`` and ``long-running-agent`` at a 16k window, with the sliding
window and observation-masking baselines (the report's table is printed). Then the run's
first half is replayed the same way: the managers' work grows with the window, not with
the conversation, and the kept-check is incremental over the calls (a call costs its
request and what came or went since the previous one), so the ratio is about 2.

    python bench/bench_eval.py [--seed N] [--calls 300] [--window 16000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxmgmt import evaluate, get_counter
from ctxmgmt.eval import Chat
from ctxmgmt.eval.specifics import message_text
from ctxmgmt.tokens import clear_caches
from tests.agent_runs import agent_run

DEFINITIONS = ("default", "cache-aware", "long-running-agent")


def raw_pass(messages: list[dict[str, object]]) -> float:
    """CPU seconds to encode every message's text once with the raw tokenizer (no memo)."""
    encoding = get_counter("gpt-4o")._encoding
    started = time.process_time()
    for m in messages:
        encoding.encode_ordinary(message_text(m))
    return time.process_time() - started


def replay(conv: Chat, window: int, repeats: int) -> tuple[float, object]:
    """The least CPU seconds of ``repeats`` replays (CPU time: other processes on a shared
    machine do not count), and the report."""
    best, report = float("inf"), None
    for _ in range(repeats):
        clear_caches()  # every message is counted afresh, as in a new process
        started = time.process_time()
        report = evaluate([conv], DEFINITIONS, [window])
        best = min(best, time.process_time() - started)
    return best, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--window", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    messages, _ = agent_run(args.calls, seed=args.seed)
    calls = sum(1 for m in messages[1:] if m["role"] == "assistant")
    conv = Chat("run", messages, "You are a careful coding agent.", None, "gpt-4o")
    half_at = 1 + next(
        i for i in range(len(messages) // 2, len(messages)) if messages[i]["role"] == "assistant"
    )
    half = Chat("half", messages[:half_at], conv.system_prompt, None, "gpt-4o")
    base = min(raw_pass(messages) for _ in range(3))
    whole, report = replay(conv, args.window, args.repeats)
    part, _ = replay(half, args.window, args.repeats)
    print(report.table())  # type: ignore[attr-defined]
    print()
    names = ", ".join(DEFINITIONS)
    print(f"{calls} calls, {len(messages)} messages; {names} at {args.window:,}, and the baselines")
    print(f"raw tokenizer pass over the conversation: {base * 1000:.1f} ms")
    per_call = whole * 1000 / calls / len(DEFINITIONS)
    print(f"eval: {whole:.2f} s of CPU, best of {args.repeats} ({per_call:.2f} ms per call and definition)")
    print(f"ratio eval / raw tokenizer pass: {whole / base:.0f}x")
    print(f"ratio whole run / first half: {whole / part:.2f} (linear: about 2)")


if __name__ == "__main__":
    main()
