"""The proxy's own overhead per request, against the same client talking to the upstream directly.

A recording upstream on 127.0.0.1 answers each request after ``--delay`` seconds (20 ms by
default: a fast model's time to answer). A tool loop of ``--calls`` requests runs from a
history of N messages, growing by an assistant call and its tool result per request, once
straight to the upstream and once through ``/proxy/default`` (the ``default`` definition at a
window where it does not fire, a SQLite store, in-process uvicorn), their requests in turn,
with one kept-alive httpx client. Prints the median time per request of each and their
ratio, at several N (goal: within 10% of a direct call's time at 2,000 messages).

    python bench/bench_proxy.py [--delay 0.02] [--calls 40]
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
from ctxmgmt.api import create_app
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.store import DefinitionStore
from tests.conftest import LiveServer, shipped
from tests.proxy.upstream import Reply, Upstream

SIZES = (200, 2000, 5000)


def history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests in src/."},
    ]
    i = 0
    while len(out) < n:
        call = {
            "id": f"h{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"cmd": "pytest -k t{i}"}}'},
        }
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append(
            {
                "role": "tool",
                "tool_call_id": f"h{i}",
                "content": f"tests/test_{i}.py::t{i} passed in 0.{i % 90:02d}s " * 8,
            }
        )
        i += 1
    return out


class Loop:
    """A client's tool loop from a history of ``n`` messages, one request a step."""

    def __init__(self, client: httpx.Client, url: str, n: int, upstream: Upstream) -> None:
        self.client, self.url, self.upstream = client, url, upstream
        self.messages = history(n)
        self.times: list[float] = []

    def step(self) -> None:
        step = len(self.times)
        self.upstream.replies.append(Reply(calls=[("bash", {"cmd": f"pytest -k s{step}"})]))
        started = time.perf_counter()
        r = self.client.post(self.url, json={"model": "m", "messages": self.messages})
        self.times.append(time.perf_counter() - started)
        r.raise_for_status()
        message = {k: v for k, v in r.json()["choices"][0]["message"].items() if v is not None}
        self.messages = [
            *self.messages,
            message,
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "ok " * 40},
        ]


def loop(client: httpx.Client, url: str, n: int, calls: int, upstream: Upstream) -> list[float]:
    """The times of ``calls`` requests of one loop."""
    one = Loop(client, url, n, upstream)
    for _ in range(calls):
        one.step()
    return one.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Upstream(delay=args.delay) as upstream:
        store = DefinitionStore.open(f"sqlite:///{tmp}/bench.db")
        store.seed("default", shipped("default"))
        models = ModelsConfig.from_dict(
            {"models": {"m": {"base_url": upstream.base_url, "model": "m", "context_window": 2_000_000}}}
        )
        with LiveServer(create_app(store, models=models)) as proxy, httpx.Client(timeout=60) as client:
            for url in (
                f"{upstream.base_url}/chat/completions",
                f"{proxy.url}/proxy/default/v1/chat/completions",
            ):
                loop(client, url, 50, 5, upstream)  # warm: connections, the tokenizer, the definition
            print(f"upstream delay {args.delay * 1000:.0f} ms, {args.calls} requests per size, medians")
            print(f"{'messages':>9} {'direct':>10} {'proxy':>10} {'ratio':>7}")
            for n in SIZES:
                # Step by step, in turn: both loops see the same moments of a noisy machine.
                direct = Loop(client, f"{upstream.base_url}/chat/completions", n, upstream)
                proxied = Loop(client, f"{proxy.url}/proxy/default/v1/chat/completions", n, upstream)
                for _ in range(args.calls):
                    direct.step()
                    proxied.step()
                d, p = statistics.median(direct.times), statistics.median(proxied.times)
                print(f"{n:>9,} {d * 1000:>8.1f}ms {p * 1000:>8.1f}ms {p / d:>6.2f}x")


if __name__ == "__main__":
    main()
