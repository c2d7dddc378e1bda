"""Prompt-cache benchmark: what a long agent run costs under each context-management strategy.

A 300-call coding-agent run (``tests.agent_runs.agent_run``, its tool results padded with
build and test log lines to about 3,000 tokens on average) is replayed through the runner
against the local chat server: the server answers with the run's own assistant turns, the
tools return the run's own results, and each user message of the run starts a new execution
of the same memory (the prompt cache carries across them). The model's window is 128k.

Each call is priced at Anthropic's ratios (per million tokens: input 3, cached read 0.30,
cache write 3.75, output 15): the reusable prefix (tools, system prompt, then messages,
identical to the previous request) is read from the cache, the rest written to it. For each
strategy the table gives the input tokens, the share of them that is reusable, the
estimated cost, the largest request, the requests over the window, and the planted facts
still in the context at the end (verbatim) or recoverable from the offload store (the same
probes as ``bench/bench_quality.py``).

Strategies: the fit step only; clearing on every call once over 100k tokens, the newest 3
results kept (LangChain's ``ClearToolUsesEdit``); observation masking (results older than
the last 10 turns become a placeholder); the shipped ``default``; the shipped ``cache-aware``.

    python bench/bench_cache.py [--seed N] [--plot docs/bench_cache.svg]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_quality import CATEGORIES, SYSTEM_PROMPT, messages_text, overall, store_text

from ctxmgmt import Context, ModelConfig, ModelsConfig, Runner, ToolRegistry, register_manager, register_tool
from ctxmgmt._resources import data_dir
from ctxmgmt.cache import Pricing
from ctxmgmt.loader import load_document
from ctxmgmt.managers import ContextManager, Runtime
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.store import DefinitionStore
from ctxmgmt.testing import ChatServer
from tests.agent_runs import agent_run

MODEL = "gpt-4o"
WINDOW = 128_000
TURNS = 300
PRICING = Pricing(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75)
CALLS_PER_EXECUTION = 90
"""An execution makes at most this many calls (max_iteration); a longer stretch continues."""
MASK_KEEP_TURNS = 10


# -- the conversation ---------------------------------------------------------------------


@dataclass
class Stretch:
    """One execution: its question, the assistant turns the server answers with, and the
    tool results in the order the runner asks for them."""

    question: str
    replies: list[dict[str, Any]] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)  # (tool name, content)


def padded(text: str, rng: random.Random) -> str:
    """A tool result made as long as real ones: build and test log lines after it."""
    lines = [text]
    for n in range(rng.choice((0, 60, 120, 200, 260, 320, 400, 520))):
        test = f"tests/unit/test_module_{n % 37}.py::test_case_{n}"
        lines.append(f"[{n:04d}] ok   {test} PASSED ({n % 9}.{n % 7}0s)")
    return "\n".join(lines)


def stretches(seed: int) -> tuple[list[Stretch], dict[str, list[str]], int]:
    messages, facts = agent_run(TURNS, seed=seed)
    rng = random.Random(seed)
    names: dict[str, str] = {}
    out: list[Stretch] = []
    calls = 0
    for m in messages:
        if m["role"] == "user":
            out.append(Stretch(m["content"]))
        elif m["role"] == "assistant":
            current = out[-1]
            if len(current.replies) >= CALLS_PER_EXECUTION:
                current = Stretch("Continue.")
                out.append(current)
            reply = {"role": "assistant", "content": m.get("content")}
            if m.get("tool_calls"):
                reply["tool_calls"] = m["tool_calls"]
                for c in m["tool_calls"]:
                    names[c["id"]] = c["function"]["name"]
            current.replies.append(reply)
            calls += 1
        elif m["role"] == "tool":
            out[-1].results.append((names[m["tool_call_id"]], padded(m["content"], rng)))
    for s in out:  # an execution ends with an answer
        if not s.replies or s.replies[-1].get("tool_calls"):
            s.replies.append({"role": "assistant", "content": "Done with this part; what next?"})
            calls += 1
    return out, facts, calls


# -- strategies ------------------------------------------------------------------------------


class ObservationMasking(ContextManager):
    """Every tool result older than the last 10 assistant turns becomes a placeholder
    ("The Complexity Trap", JetBrains 2025; SWE-agent's simple baseline)."""

    type_name = "ObservationMasking"
    config_schema: Mapping[str, Any] = {"type": "object"}
    TEXT = "[old tool output omitted]"

    def apply(self, context: Context, runtime: Runtime) -> Context:
        msgs = context.messages
        turns = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
        if len(turns) <= MASK_KEEP_TURNS:
            return context
        cutoff = turns[-MASK_KEEP_TURNS]
        changes = [
            (i, i + 1, ({**m, "content": self.TEXT},))
            for i, m in enumerate(msgs[:cutoff])
            if m.get("role") == "tool" and m.get("content") != self.TEXT
        ]
        return context.splice(changes) if changes else context


register_manager(ObservationMasking)


def shipped(name: str) -> dict[str, Any]:
    doc = load_document(data_dir("definitions") / f"{name}.yaml")
    return {k: v for k, v in doc.data.items() if k not in ("name", "$schema")}


FIT_ONLY = {"pre_llm": [{"type": "SlidingWindowManager", "activation": {"always": False}}]}
STRATEGIES: list[tuple[str, dict[str, Any]]] = [
    ("fit step only", {"hooks": FIT_ONLY}),
    (
        "clear every call (100k, keep 3)",
        {
            "hooks": {
                "pre_llm": [{"type": "ToolResultClearingManager", "config": {"trigger": 100_000, "keep": 3}}]
            }
        },
    ),
    (f"mask observations ({MASK_KEEP_TURNS})", {"hooks": {"pre_llm": [{"type": "ObservationMasking"}]}}),
    (
        "  the same, cache: aware",
        {"settings": {"cache": "aware"}, "hooks": {"pre_llm": [{"type": "ObservationMasking"}]}},
    ),
    ("default", shipped("default")),
    ("cache-aware", shipped("cache-aware")),
]


# -- running ------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    calls: int = 0
    input_tokens: int = 0
    reusable: int = 0
    cost: float = 0.0
    largest: int = 0
    over: int = 0
    failures: list[str] = field(default_factory=list)
    in_context: float = 0.0
    recoverable: float = 0.0
    per_call: list[float] = field(default_factory=list)
    rewrites: int = 0
    """Calls whose reusable prefix is shorter than the previous request by more than 10%."""
    postponed: int = 0
    seconds: float = 0.0


def run(name: str, definition: dict[str, Any], plan: list[Stretch], facts: dict[str, list[str]]) -> Outcome:
    out = Outcome(name)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ChatServer() as server:
        store = DefinitionStore.open(f"sqlite:///{tmp}/bench.db")
        store.create("strategy", definition)
        models = ModelsConfig(
            {
                "m": ModelConfig(
                    id="m", base_url=server.base_url, model=MODEL, context_window=WINDOW, pricing=PRICING
                )
            }
        )
        results: collections.deque[tuple[str, str]] = collections.deque()
        tools = ToolRegistry(group="ctxmgmt.bench-none")
        names = sorted({n for s in plan for n, _ in s.results})

        def tool(name: str) -> Any:
            def run_tool(**_: Any) -> str:
                expected, content = results.popleft()
                assert expected == name, (expected, name)
                return content

            return run_tool

        for n in names:
            register_tool(n, tool(n), registry=tools)
        offloader = LocalOffloader(f"{tmp}/offload")
        runner = Runner(store, models, tools, offloader=offloader)
        agent_id = runner.register(
            {
                "name": "bench",
                "system_prompt": SYSTEM_PROMPT,
                "llm": {"model_id": "m", "parameters": {"max_iteration": 100}},
                "tools": [{"type": n} for n in names],
                "context_management_name": "strategy",
            }
        )
        memory_id = None
        previous = 0
        for stretch in plan:
            results.extend(stretch.results)
            for reply in stretch.replies:
                server.respond(lambda _req, r=reply: r, usage={"completion_tokens": 120})
            try:
                result = runner.execute(agent_id, stretch.question, memory_id=memory_id)
            except Exception as exc:  # a failure is a result to report
                out.failures.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                break
            memory_id = result.memory_id
            priced = {c["call"]: c["estimated_cost"] for c in result.cache.get("calls", ())}
            for u in result.usage:
                out.rewrites += u["reusable_prefix_tokens"] < 0.9 * previous
                previous = u["counted"]
                out.calls += 1
                out.input_tokens += u["calibrated"]
                out.reusable += u["reusable_prefix_tokens"]
                out.largest = max(out.largest, u["calibrated"])
                out.over += u["calibrated"] > WINDOW
                out.per_call.append(priced.get(u["iteration"], 0.0))
            out.cost += result.cache.get("estimated_cost", 0.0)
            out.postponed += sum(
                e["details"].get("postponed") == "cache" for run in result.trace for e in run["entries"]
            )
        if memory_id is not None:
            view = runner.view(memory_id)["view"]
            text = SYSTEM_PROMPT + "\n" + messages_text(view)
            out.in_context = overall(facts, text)
            out.recoverable = overall(facts, text + "\n" + store_text(offloader, memory_id))
    out.seconds = time.perf_counter() - t0
    return out


# -- output ---------------------------------------------------------------------------------


def plot(outcomes: Sequence[Outcome], path: Path) -> None:
    """Cost per call for each strategy, one panel each on one scale, as SVG (no plotting
    library needed): spikes are cache rewrites, the floor is reading the cached prefix."""
    width, left, right, panel, gap, top = 900, 60, 20, 70, 26, 34
    n = max(len(o.per_call) for o in outcomes)
    peak = max(max(o.per_call, default=0.0) for o in outcomes) or 1.0
    height = top + len(outcomes) * (panel + gap) + 20
    colours = ("#888888", "#d62728", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c")
    span = width - left - right
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">Estimated cost of each LLM call (USD at Anthropic prices), '
        f"{n} calls, 128k window</text>",
    ]
    for k, (o, colour) in enumerate(zip(outcomes, colours, strict=False)):
        y0 = top + k * (panel + gap) + gap
        share = o.reusable / o.input_tokens if o.input_tokens else 0.0
        label = f"{o.name.strip()}: ${o.cost:.2f} in all, {share:.0%} of input reusable"
        parts.append(f'<text x="{left}" y="{y0 - 6}" font-weight="bold">{label}</text>')
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y0 + panel}" y2="{y0 + panel}" stroke="#999"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y0 + 8}" text-anchor="end">{peak:.2f}</text>')
        parts.append(f'<text x="{left - 6}" y="{y0 + panel}" text-anchor="end">0</text>')
        points = " ".join(
            f"{left + span * i / max(1, n - 1):.1f},{y0 + panel * (1 - v / peak):.1f}"
            for i, v in enumerate(o.per_call)
        )
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{points}"/>')
    base = top + len(outcomes) * (panel + gap)
    for k in range(0, n + 1, 50):
        x = left + span * k / max(1, n - 1)
        parts.append(f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">{k}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, help="write the cost-per-call chart (SVG) here")
    args = parser.parse_args()
    plan, facts, calls = stretches(args.seed)
    n_facts = sum(len(facts[c]) for c in CATEGORIES)
    print(
        f"agent run: seed {args.seed}, {calls} LLM calls in {len(plan)} executions of one memory, "
        f"{sum(len(s.results) for s in plan)} tool results, {n_facts} planted facts; "
        f"window {WINDOW:,}; {MODEL} counts"
    )
    print(
        f"prices per million tokens: input {PRICING.input}, cached read {PRICING.read}, "
        f"cache write {PRICING.write}, output {PRICING.output}"
    )
    outcomes = [run(name, definition, plan, facts) for name, definition in STRATEGIES]
    head = (
        f"{'strategy':32} {'calls':>5} {'input tokens':>12} {'reusable':>8} {'cost $':>7} {'largest':>8} "
        f"{'over':>4} {'facts in ctx':>12} {'recoverable':>11} {'rewrites':>8} {'postponed':>9}"
    )
    print(head)
    for o in outcomes:
        share = o.reusable / o.input_tokens if o.input_tokens else 0.0
        print(
            f"{o.name:32} {o.calls:5d} {o.input_tokens:12,d} {share:8.1%} {o.cost:7.2f} {o.largest:8,d} "
            f"{o.over:4d} {o.in_context:12.1%} {o.recoverable:11.1%} {o.rewrites:8d} {o.postponed:9d}"
        )
        for failure in o.failures:
            print(f"    failed: {failure}")
    base = next(o for o in outcomes if o.name == "default")
    aware = next(o for o in outcomes if o.name == "cache-aware")
    cheapest = min((o for o in outcomes if not o.name.startswith(" ")), key=lambda o: o.cost)
    share = aware.reusable / aware.input_tokens if aware.input_tokens else 0.0
    print(
        f"cache-aware: {aware.cost / base.cost:.2f}x the cost of default; cheapest: {cheapest.name}; "
        f"reusable {share:.1%}; over the window {aware.over}; facts in context {aware.in_context:.1%} "
        f"vs default's {base.in_context:.1%}"
    )
    goals = {
        "lowest cost": cheapest is aware,
        ">= 85% reusable": share >= 0.85,
        "0 over the window": aware.over == 0 and not aware.failures,
        "facts >= default": aware.in_context >= base.in_context,
    }
    print("goals: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in goals.items()))
    print("seconds per strategy: " + ", ".join(f"{o.name} {o.seconds:.0f}" for o in outcomes))
    if args.plot:
        plot(outcomes, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
