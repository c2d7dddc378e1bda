"""Offload benchmark: compaction, appends, 10 MB truncation, and planted-fact recall.

Ratios are against operations of the core engine measured in the same process.

    python bench/bench_offload.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ctxmgmt import Context, load_definition
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.summaries import render, summarize_offline
from ctxmgmt.testing import make_conversation


def median_ms(fn: Callable[[], Any], n: int = 5) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def one(entry: dict[str, Any]) -> Any:
    return load_definition({"name": "b", "hooks": {"pre_llm": [entry]}})


def planted() -> tuple[list[dict[str, Any]], list[str]]:
    """An agent run with planted facts: paths, errors, constraints, numbers, decisions."""
    facts = [
        "/srv/billing/invoice_renderer.py",
        "https://status.example.com/incidents/4821",
        "KeyError: 'customer_vat_id'",
        "ModuleNotFoundError: No module named 'weasyprint'",
        "pytest tests/billing/test_invoice.py -k vat",
        "src/billing/templates/invoice.html",
        "1250",
        "19.5%",
        "/var/log/billing/worker.log",
        "ERROR: connection refused to db-replica-2:5432",
    ]
    msgs: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": (
                f"The invoice job fails with {facts[2]} in {facts[0]}. Do not change the database schema. "
                f"Invoices above {facts[6]} EUR need VAT of {facts[7]}. See {facts[1]}."
            ),
        }
    ]
    filler = make_conversation(160, seed=3, tool_output_words=150)[1:]
    msgs += filler[:40]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "f1",
                    "type": "function",
                    "function": {"name": "run", "arguments": json.dumps({"command": facts[4]})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "f1", "content": f"collected 3 items\n{facts[3]}\nFAILED"},
        {
            "role": "assistant",
            "content": f"I decided to render {facts[5]} without weasyprint. Next I will read {facts[8]}.",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "f2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": facts[8]})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "f2",
            "content": f"2026-11-20 10:00 {facts[9]}\n" + "retrying\n" * 50,
        },
    ]
    msgs += filler[40:]
    return msgs, facts


def main() -> None:
    messages = make_conversation(2000, seed=1, tool_output_words=120)
    ctx = Context(system_prompt="sys", messages=messages)
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalOffloader(tmp)
        window = one({"type": "SlidingWindowManager", "config": {"max_messages": 200}})
        compact = one(
            {"type": "ToolResultCompactionManager", "config": {"recent_n": 3, "old_max_chars": 300}}
        )
        window.apply("pre_llm", ctx)  # warm the token memo for both
        # A new context each time: the window's work, not what it remembers of one list.
        base = median_ms(lambda: window.apply("pre_llm", Context(system_prompt="sys", messages=messages)))
        t0 = time.perf_counter()
        compacted = compact.apply("pre_llm", ctx, offloader=store, session="bench")
        first = (time.perf_counter() - t0) * 1000
        again = median_ms(
            lambda: compact.apply("pre_llm", compacted.context, offloader=store, session="bench")
        )
        trace = compacted.trace[0]
        print(
            f"compaction of {len(messages)} messages: {trace['details']['compacted']} results archived, "
            f"{trace['tokens_before']:,} -> {trace['tokens_after']:,} tokens"
        )
        print(
            f"  first run {first:8.1f} ms ({first / base:5.1f}x a sliding-window apply of {base:.1f} ms); "
            f"second run {again:.1f} ms (nothing left to do)"
        )

        def append() -> float:
            t = time.perf_counter()
            store.store_messages("appends", [{"role": "user", "content": "x" * 2000}])
            return (time.perf_counter() - t) * 1e6

        early = [append() for _ in range(50)]
        for _ in range(1000):
            append()
        late = [append() for _ in range(50)]
        print(
            f"offload append: first 50 median {statistics.median(early):6.0f} us, "
            f"after 1,000 more {statistics.median(late):6.0f} us "
            f"({statistics.median(late) / statistics.median(early):.2f}x)"
        )

        big = "log line 12345 with some words and numbers 3.14\n" * 210_000  # ~10 MB
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
        tctx = Context(
            messages=[
                {"role": "user", "content": "q"},
                call,
                {"role": "tool", "tool_call_id": "a", "content": big},
            ]
        )
        plain = one({"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 2000}})
        offloading = one(
            {"type": "ToolsOutputTruncateManager", "config": {"max_output_tokens": 2000, "offload": True}}
        )
        # New message objects each time: truncation remembers its output for a message it has
        # cut (by identity), so that the same list again is not a cut.
        core = median_ms(
            lambda: plain.apply("pre_llm", Context(messages=[dict(m) for m in tctx.messages])), 3
        )
        with_offload = median_ms(lambda: offloading.apply("pre_llm", tctx, offloader=store, session="big"), 3)
        print(
            f"truncation of {len(big) / 1e6:.1f} MB to 2,000 tokens: core engine {core:.1f} ms, "
            f"with offload (archive first) {with_offload:.1f} ms ({with_offload / core:.1f}x)"
        )

        msgs, facts = planted()
        summarize = one(
            {"type": "SummarizationManager", "config": {"summary_ratio": 0.8, "preserve_recent_messages": 10}}
        )
        out = summarize.apply("pre_llm", Context(messages=msgs), offloader=store, session="facts")
        visible = "\n".join(str(m.get("content")) for m in out.context.messages)
        archive = "".join(store.read("facts", e["ref"]).text for e in store.list("facts"))
        in_context = sum(f in visible for f in facts) / len(facts)
        recoverable = sum(
            f in visible or f in archive or json.dumps(f)[1:-1] in archive for f in facts
        ) / len(facts)
        t = out.trace[0]
        print(
            f"planted facts: {in_context:.0%} still in context, "
            f"{recoverable:.0%} recoverable through references; "
            f"tokens {t['tokens_before']:,} -> {t['tokens_after']:,} "
            f"({1 - t['tokens_after'] / t['tokens_before']:.0%} saved)"
        )
        sections = summarize_offline(msgs)
        text = render(sections, len(msgs))
        survived = [f for f in facts if f in text]
        print(
            f"offline summariser alone: {len(survived)}/{len(facts)} planted identifiers verbatim "
            f"({len(survived) / len(facts):.0%}; goal >= 95%)"
        )
        missing = [f for f in facts if f not in survived]
        if missing:
            print("  missing:", "; ".join(missing))


if __name__ == "__main__":
    main()
