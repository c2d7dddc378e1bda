"""Quality benchmark: what each shipped definition keeps of an agent run's planted facts.

Each run is a generated coding-agent conversation (``agent_run``) with planted facts: the
task, constraints, numbers, error lines, changed files, URLs and decisions. It is the context
of a ``pre_llm`` call in a window about a third of its size. For every shipped definition,
and for two baselines on the same conversations and window, the table gives:

- the share of each category's facts still verbatim in the context (system prompt,
  message texts and tool-call arguments);
- the share recoverable: in the context, or in what the offload store holds for the session;
- the tokens saved, and in how many runs the result fits: tokens + reserve <= window.

Baselines: observation masking (every tool result older than the last 10 assistant turns
becomes a placeholder; "The Complexity Trap", JetBrains 2025, and SWE-agent's simple
baseline), and LangChain's ``trim_messages`` (strategy "last", start on a human message).

    python bench/bench_quality.py
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ctxmgmt
from ctxmgmt import Context
from ctxmgmt._resources import data_dir
from ctxmgmt.fit import reserve_tokens
from ctxmgmt.messages import check_messages, text_of
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.summaries import summarize_offline
from ctxmgmt.tokens import get_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.agent_runs import agent_run

MODEL = "gpt-4o-mini"
RUNS = [(turns, seed) for turns in (40, 120, 300) for seed in range(3)]
SESSION = "s1"
MASK_KEEP_TURNS = 10
MASK_TEXT = "[old tool output omitted]"
CATEGORIES = ("task", "constraints", "numbers", "error_lines", "files_changed", "urls", "decisions")
HEADS = ("task", "constr", "number", "errors", "files", "urls", "decide")
APPLY_ERRORS = (
    ctxmgmt.CtxmgmtError,
    ArithmeticError,
    AssertionError,
    LookupError,
    OSError,
    RuntimeError,
    TypeError,
    ValueError,
)
SYSTEM_PROMPT = (
    "You are a coding agent working in a git checkout. Use the tools to read, search and edit files and to "
    "run commands. Keep changes minimal, follow the user's constraints, and run the tests before you finish."
)


@dataclass
class Outcome:
    """One method on one run."""

    in_context: dict[str, float]
    recoverable: float
    saved: float
    fits: bool
    fired: bool
    fit_fired: bool = False
    unfound: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class Run:
    turns: int
    seed: int
    messages: list[dict[str, Any]]
    facts: dict[str, list[str]]
    tokens: int
    window: int


# -- texts ------------------------------------------------------------------------------


def messages_text(messages: Sequence[Any]) -> str:
    """Every text of a message list: contents, and tool-call arguments (raw and decoded)."""
    parts: list[str] = []
    for m in messages:
        parts.append(text_of(m.get("content")))
        for call in m.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            if not isinstance(args, str):
                continue
            parts.append(args)
            with contextlib.suppress(ValueError):
                decoded = json.loads(args)
                if isinstance(decoded, dict):
                    parts += [v for v in decoded.values() if isinstance(v, str)]
    return "\n".join(parts)


def context_text(ctx: Context) -> str:
    return (ctx.system_prompt or "") + "\n" + messages_text(ctx.messages)


def store_text(store: LocalOffloader, session: str) -> str:
    """What the store holds for the session: tool results as stored, message batches decoded."""
    parts: list[str] = []
    for entry in store.list(session):
        text = store.read(session, entry["ref"]).text
        if entry["ref"].startswith("m-"):
            parts.append(messages_text(json.loads(text)))
        else:
            parts.append(text)
    return "\n".join(parts)


def shares(facts: dict[str, list[str]], text: str) -> dict[str, float]:
    return {c: sum(f in text for f in facts[c]) / len(facts[c]) for c in CATEGORIES if facts[c]}


def overall(facts: dict[str, list[str]], text: str) -> float:
    every = [f for c in CATEGORIES for f in facts[c]]
    return sum(f in text for f in every) / len(every)


# -- methods ----------------------------------------------------------------------------


def reserve_of(settings: Any, window: int) -> int:
    """The tokens kept free for the reply: the definition's reserve_output_tokens, else the fit
    step's own default (min(8192, window // 4)); before the fit step existed, min(8192, window // 8)."""
    settings = settings or {}
    if reserve_tokens is not None:
        return reserve_tokens(window, settings)
    value = settings.get("reserve_output_tokens")
    return int(value) if value is not None else min(8192, window // 8)


def search_pattern(fact: str) -> str:
    """The fact as a literal regular expression within the store's 200-character limit."""
    pattern = re.escape(fact)
    while len(pattern) > 200:
        fact = fact[:-5]
        pattern = re.escape(fact)
    return pattern


def measure(
    run: Run, ctx: Context, out: Context, store_texts: str = "", fired: bool = True, reserve: int = 0
) -> Outcome:
    counter = get_counter(MODEL)
    after = counter.context(out)[0]
    text = context_text(out)
    problems = [f"invalid output: {p}" for p in check_messages(out.messages)[:3]]
    if out.system_prompt != ctx.system_prompt:
        problems.append("the system prompt changed")
    return Outcome(
        in_context=shares(run.facts, text),
        recoverable=overall(run.facts, text + "\n" + store_texts),
        saved=1 - after / run.tokens,
        fits=after + reserve <= run.window,
        fired=fired,
        problems=problems,
    )


def apply_definition(definition: Any, run: Run, ctx: Context) -> Outcome:
    reserve = reserve_of(definition.settings, run.window)
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalOffloader(tmp)
        try:
            result = definition.apply("pre_llm", ctx, offloader=store, session=SESSION)
        except APPLY_ERRORS as exc:  # a failure is a result to report, not a crash of the benchmark
            outcome = measure(run, ctx, ctx, fired=False, reserve=reserve)
            outcome.problems.append(f"apply raised {type(exc).__name__}: {str(exc)[:160]}")
            return outcome
        stored = store_text(store, SESSION)
        outcome = measure(
            run,
            ctx,
            result.context,
            stored,
            fired=any(e["activated"] for e in result.trace if e["type"] != "fit"),
            reserve=reserve,
        )
        outcome.fit_fired = any(e["activated"] for e in result.trace if e["type"] == "fit")
        outcome.problems += [
            f"{e['type']} failed: {str(e['error'])[:160]}" for e in result.trace if e["error"]
        ]
        # What the model could find with context_search: facts stored but out of the context.
        text = context_text(result.context)
        missing = [f for c in CATEGORIES for f in run.facts[c] if f not in text and f in stored]
        unfound = [f for f in missing if not store.search(SESSION, search_pattern(f), max_results=1)]
        if unfound:
            outcome.problems.append(f"archived facts that context_search does not find, e.g. {unfound[0]!r}")
            outcome.unfound = len(unfound)
    return outcome


def observation_masking(run: Run, ctx: Context) -> Outcome:
    assistants = [i for i, m in enumerate(run.messages) if m["role"] == "assistant"]
    cutoff = assistants[-MASK_KEEP_TURNS] if len(assistants) >= MASK_KEEP_TURNS else 0
    masked = [
        {**m, "content": MASK_TEXT} if m["role"] == "tool" and i < cutoff else m
        for i, m in enumerate(run.messages)
    ]
    out = Context(system_prompt=ctx.system_prompt, messages=masked, model=MODEL, context_window=run.window)
    return measure(run, ctx, out, reserve=reserve_of(None, run.window))


def langchain_trim(run: Run, ctx: Context) -> Outcome:
    from langchain_core.messages import (
        SystemMessage,
        convert_to_messages,
        convert_to_openai_messages,
        trim_messages,
    )

    encoding = get_counter(MODEL)._encoding  # the same encoding ctxmgmt counts with (offline)

    def encode(s: str) -> int:
        return -(-len(s) // 4) if encoding is None else len(encoding.encode_ordinary(s))

    memo: dict[int, tuple[Any, int]] = {}

    def count_one(m: Any) -> int:
        hit = memo.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        n = 4 + encode(m.content if isinstance(m.content, str) else json.dumps(m.content))
        for call in getattr(m, "tool_calls", None) or ():
            n += 3 + encode(call["name"]) + encode(json.dumps(call["args"]))
        call_id = getattr(m, "tool_call_id", None)
        if isinstance(call_id, str):  # ids are counted too (ctxmgmt estimates 1 token per 3 characters)
            n += len(call_id) // 3 + 1
        memo[id(m)] = (m, n)
        return n

    def counter(messages: list[Any]) -> int:
        return 3 + sum(count_one(m) for m in messages)

    reserve = reserve_of(None, run.window)
    history = [SystemMessage(ctx.system_prompt or ""), *convert_to_messages(run.messages)]
    kept = trim_messages(
        history,
        max_tokens=run.window - reserve,
        token_counter=counter,
        strategy="last",
        start_on="human",
        include_system=True,
        allow_partial=False,
    )
    converted = convert_to_openai_messages(kept)
    system = converted[0]["content"] if converted and converted[0]["role"] == "system" else None
    rest = converted[1:] if system is not None else converted
    out = Context(system_prompt=system, messages=rest, model=MODEL, context_window=run.window)
    outcome = measure(run, ctx, out, reserve=reserve)
    if not rest:
        outcome.problems.append("kept no message but the system prompt")
    return outcome


# -- the benchmark ----------------------------------------------------------------------


@contextlib.contextmanager
def deterministic_uuids(seed: int) -> Iterator[None]:
    """Offload references are uuid4s; seeded ones make token counts repeatable."""
    rng = random.Random(seed)
    original = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = original


def make_runs() -> list[Run]:
    counter = get_counter(MODEL)
    runs = []
    for turns, seed in RUNS:
        messages, facts = agent_run(turns, seed=seed)
        tokens = counter.context(Context(system_prompt=SYSTEM_PROMPT, messages=messages, model=MODEL))[0]
        window = max(8000, round(tokens / 3 / 1000) * 1000)
        runs.append(Run(turns, seed, messages, facts, tokens, window))
    return runs


def pct(x: float) -> str:
    return f"{100 * x:.0f}"


def main() -> None:
    t0 = time.perf_counter()
    runs = make_runs()
    counter = get_counter(MODEL)
    reserve = (
        "min(8192, window // 4), the fit step's default"
        if reserve_tokens is not None
        else "min(8192, window // 8)"
    )
    print(f"{len(runs)} agent runs; tokens by {counter.tokenizer}; window = tokens / 3, rounded, >= 8,000")
    print(f"reserve for the reply: the definition's reserve_output_tokens, else {reserve}")
    print(f"{'turns':>5} {'seed':>4} {'messages':>8} {'tokens':>9} {'window':>8}  facts")
    for run in runs:
        n_facts = " ".join(f"{h}={len(run.facts[c])}" for c, h in zip(CATEGORIES, HEADS, strict=True))
        size = f"{run.turns:5d} {run.seed:4d} {len(run.messages):8d} {run.tokens:9,d} {run.window:8,d}"
        print(f"{size}  {n_facts}")

    names = sorted(p.stem for p in data_dir("definitions").glob("*.yaml"))
    methods: list[tuple[str, Callable[[Run, Context], Outcome]]] = []
    for name in names:
        definition = ctxmgmt.load_definition(data_dir("definitions") / f"{name}.yaml")
        methods.append((name, functools.partial(apply_definition, definition)))
    methods.append((f"baseline: mask obs. ({MASK_KEEP_TURNS})", observation_masking))
    try:
        import langchain_core  # noqa: F401
    except ImportError:
        print("(the trim_messages baseline needs langchain-core: pip install -e '.[bench]')")
    else:
        methods.append(("baseline: trim_messages", langchain_trim))

    results: dict[str, list[Outcome]] = {}
    problems: dict[tuple[str, str], list[tuple[Run, str, Outcome]]] = {}
    with deterministic_uuids(0):
        for name, method in methods:
            results[name] = []
            for run in runs:
                ctx = Context(
                    system_prompt=SYSTEM_PROMPT, messages=run.messages, model=MODEL, context_window=run.window
                )
                outcome = method(run, ctx)
                results[name].append(outcome)
                for p in outcome.problems:
                    problems.setdefault((name, p.split(", e.g.")[0]), []).append((run, p, outcome))

    n = len(runs)
    print()
    print("Facts verbatim in the context (%) by category; recov: all facts in the context or the offload")
    print("store (%); saved: tokens saved (%); fits: runs with tokens + reserve <= window; fired: runs where")
    print(
        f"one of the definition's own managers fired; fit: runs where the fit step fired. Mean of {n} runs."
    )
    print(
        f"{'method':<26}"
        + "".join(f"{h:>7}" for h in HEADS)
        + f"{'recov':>7}{'saved':>7}{'fits':>6}{'fired':>7}{'fit':>6}"
    )
    for name, outcomes in results.items():
        cells = []
        for c in CATEGORIES:
            values = [o.in_context[c] for o in outcomes if c in o.in_context]
            cells.append(f"{pct(sum(values) / len(values)):>7}" if values else f"{'-':>7}")
        recov = sum(o.recoverable for o in outcomes) / n
        saved = sum(o.saved for o in outcomes) / n
        fits = sum(o.fits for o in outcomes)
        fired = sum(o.fired for o in outcomes)
        fit = sum(o.fit_fired for o in outcomes)
        print(
            f"{name[:25]:<26}{''.join(cells)}{pct(recov):>7}{pct(saved):>7}{f'{fits}/{n}':>6}"
            f"{f'{fired}/{n}' if name in names else '-':>7}{f'{fit}/{n}' if name in names else '-':>6}"
        )

    print()
    print(
        "Problems:" if problems else "Problems: none (no manager error, every output valid for the chat API)"
    )
    for (name, kind), hits in problems.items():
        where = ", ".join(f"{run.turns}/{run.seed}" for run, _, _ in hits)
        print(f"- {name}: {kind} (runs {where})")
        if "context_search" in kind:
            total = sum(o.unfound for _, _, o in hits)
            print(f"    {total} facts in all; e.g. {hits[0][1].split(', e.g. ', 1)[1][:100]}")
    log_reading()
    print(f"\nfinished in {time.perf_counter() - t0:.1f} s")


def log_reading(calls: int = 10, attempts: int = 30) -> None:
    """A run that reads a log full of retry errors ``calls`` times, successfully: how many calls
    the summary calls failed (right: 0), and how many error lines it lists (right: 1, folded)."""
    log = "\n".join(
        [
            f"2024-05-01 10:00:{i:02d} ERROR db: connection refused (attempt {i})"
            for i in range(1, attempts + 1)
        ]
        + ["2024-05-01 10:01:00 INFO gave up retrying; serving from cache"]
    )
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Find out why the service is slow."}]
    for i in range(calls):
        call = {"id": f"l{i}", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"l{i}", "content": log},
        ]
    sections = summarize_offline(msgs)
    failed = re.search(r": (\d+) failed", " ".join(sections["progress"]))
    errors = sections["errors"]
    print(
        f"\nLog reading ({calls} successful read_log calls, {attempts} retry errors each): the summary says "
        f"{failed.group(1) if failed else 0} failed (right: 0) and lists {len(errors)} error lines "
        f"(right: 1, folded): {errors[0][:90] if errors else '-'}"
    )


if __name__ == "__main__":
    main()
