"""A client that moves its prompt-cache breakpoint, against one whose breakpoint stays put.

Claude Code (and Anthropic's own advice) puts the ``cache_control`` breakpoint on the newest
message of every request, so the message that held it in the previous request changes. A
tool loop of ``--calls`` Anthropic Messages requests runs through the proxy (in this process,
an in-process uvicorn, the upstream answering at once) from a history of N messages, once
with the breakpoint on the first message (it stays) and once moved to the newest message at
every request. Prints the median time per request of each, and their ratio (goal: about 1x;
it was 5x at 3,000 messages when a moved breakpoint made every request read and convert the
whole history again).

    python bench/bench_breakpoints.py [--calls 20] [--sizes 500,3000,8000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quiet import QUIET

from ctxmgmt.api import create_app
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.store import DefinitionStore
from tests.conftest import LiveServer
from tests.proxy.upstream import Reply, Upstream

MARK = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": MARK}]


def history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the tests."}]}]
    i = 0
    while len(out) < n:
        use = {"type": "tool_use", "id": f"h{i}", "name": "bash", "input": {"cmd": f"pytest -k t{i}"}}
        result = {
            "type": "tool_result",
            "tool_use_id": f"h{i}",
            "content": f"t{i} passed in 0.{i % 90:02d}s " * 8,
        }
        out += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
        i += 1
    return out


def marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    return {**message, "content": [*content[:-1], {**content[-1], "cache_control": MARK}]}


def loop(client: httpx.Client, url: str, upstream: Upstream, n: int, calls: int, move: bool) -> float:
    """The median time of ``calls`` requests of one tool loop (the first three left out)."""
    messages = history(n)
    times = []
    for step in range(calls):
        upstream.replies.append(Reply(calls=[("bash", {"cmd": f"s{step}"})]))
        sent = [*messages[:-1], marked(messages[-1])] if move else [marked(messages[0]), *messages[1:]]
        body = {"model": "a", "max_tokens": 1000, "system": SYSTEM, "messages": sent}
        started = time.perf_counter()
        r = client.post(url, json=body)
        times.append(time.perf_counter() - started)
        r.raise_for_status()
        content = r.json()["content"]
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok " * 40} for b in content]
        messages = [
            *messages,
            {"role": "assistant", "content": content},
            {"role": "user", "content": results},
        ]
    return statistics.median(times[3:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--sizes", default="500,3000,8000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Upstream() as upstream:
        store = DefinitionStore.open(f"sqlite:///{tmp}/bench.db")
        store.seed("quiet", QUIET)
        entry = {
            "base_url": upstream.base_url,
            "model": "a",
            "provider": "anthropic",
            "context_window": 2_000_000,
        }
        models = ModelsConfig.from_dict({"models": {"a": entry}})
        with LiveServer(create_app(store, models=models)) as proxy, httpx.Client(timeout=120) as client:
            url = f"{proxy.url}/proxy/quiet/v1/messages"
            loop(client, url, upstream, 50, 5, False)  # warm
            print(f"{args.calls} requests per size through /proxy/quiet, medians, in one process")
            print(f"{'messages':>9} {'stays':>10} {'moves':>10} {'ratio':>6}")
            for n in (int(s) for s in args.sizes.split(",")):
                stays = loop(client, url, upstream, n, args.calls, False)
                moves = loop(client, url, upstream, n, args.calls, True)
                print(f"{n:>9,} {stays * 1000:>8.1f}ms {moves * 1000:>8.1f}ms {moves / stays:>5.2f}x")


if __name__ == "__main__":
    main()
