"""Provider formats: the cost of managing Anthropic messages and Responses items against
the same conversation as OpenAI chat messages, in the same process, at several sizes.

Paths (median of repeated runs), each a ratio to the chat figure of the same path:
- steady: ``ctx = ctx.append(message)`` then apply a definition that does not fire;
- firing: a sliding window that keeps the newest half, on a list not seen before.

The chat path needs no conversion; a history in another format converts and checks only
what is new since the history it grew from (a list handed again, starting with the same
message objects, counts as grown from it). The last lines give each path's figure at the
largest size over its figure at 2,000 (or the smallest size): 1.0 is flat, O(new).

    python bench/bench_formats.py            # 500, 2,000 and 10,000 messages
    python bench/bench_formats.py 500 2000
"""

from __future__ import annotations

import sys
from typing import Any

from bench_apply import timed

from ctxmgmt import Context, load_definition
from ctxmgmt.formats import anthropic, openai_responses
from ctxmgmt.testing import make_conversation

SIZES = (500, 2_000, 10_000)
QUIET = load_definition(
    {
        "name": "quiet",
        "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "activation": {"tokens_exceed": 10**9}}]},
    }
)


def window(n: int) -> Any:
    return load_definition(
        {
            "name": "w",
            "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": n // 2}}]},
        }
    )


def in_format(chat: list[dict[str, Any]], name: str) -> list[Any]:
    """The chat conversation in another format (the formats' own way back, with no origins)."""
    if name == "anthropic":
        return anthropic.back(chat)
    return openai_responses.back(chat)


def measure(n: int) -> dict[str, dict[str, float]]:
    chat = make_conversation(n, seed=n)
    lists = {
        "openai_chat": chat,
        "anthropic": in_format(chat, "anthropic"),
        "openai_responses": in_format(chat, "openai_responses"),
    }
    extra = {"openai_chat": {"role": "user", "content": "x " * 150}}
    extra["anthropic"] = extra["openai_chat"]
    extra["openai_responses"] = extra["openai_chat"]
    out: dict[str, dict[str, float]] = {}
    for name, msgs in lists.items():
        out[name] = {"steady": steady(msgs, name, extra[name]), "firing": firing(msgs, name, window(n))}
    return out


def steady(msgs: list[Any], name: str, message: dict[str, Any]) -> float:
    ctx = Context(messages=msgs, format=name)
    QUIET.apply("pre_llm", ctx)  # warm: counted and converted once

    def step() -> None:
        nonlocal ctx
        ctx = ctx.append(message)
        QUIET.apply("pre_llm", ctx)

    return timed(step, 101)


def firing(msgs: list[Any], name: str, definition: Any) -> float:
    return timed(lambda: definition.apply("pre_llm", Context(messages=list(msgs), format=name)), 11)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    print(f"{'path':28} " + " ".join(f"{n:>12,}" for n in sizes))
    results = {n: measure(n) for n in sizes}
    for path in ("steady", "firing"):
        for name in ("openai_chat", "anthropic", "openai_responses"):
            cells = " ".join(f"{results[n][name][path] * 1000:>10.3f}ms" for n in sizes)
            print(f"{path + ' ' + name:28} {cells}")
        for name in ("anthropic", "openai_responses"):
            cells = " ".join(
                f"{results[n][name][path] / results[n]['openai_chat'][path]:>11.1f}x" for n in sizes
            )
            print(f"{path + ' ' + name + ' / chat':28} {cells}")
    base = 2_000 if 2_000 in sizes else min(sizes)
    top = max(sizes)
    if top != base:
        for path in ("steady", "firing"):
            for name in ("openai_chat", "anthropic", "openai_responses"):
                ratio = results[top][name][path] / results[base][name][path]
                print(f"{path + ' ' + name + f' {top:,}/{base:,}':44} {ratio:>8.2f}x")


if __name__ == "__main__":
    main()
