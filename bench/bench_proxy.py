"""The proxy's own overhead per request, against the same client talking to the upstream directly.

A recording upstream on 127.0.0.1 answers each request after ``--delay`` seconds (20 ms by
default: a fast model's time to answer). A tool loop of ``--calls`` requests runs from a
history of N messages, growing by an assistant call and its tool result per request, once
straight to the upstream and once through the proxy, their requests in turn, with one
kept-alive httpx client. As deployed: the proxy is a ``ctxmgmt serve`` process (SQLite),
the upstream another process, the client this one (``--in-process``: all three in this
process, the proxy an in-process uvicorn, where the three share one interpreter lock).

``bare``: a pass-through that does nothing but forward (``_passthrough.py``, Starlette and
httpx served by uvicorn as ``ctxmgmt serve`` is): the floor of any proxy in this stack.
Through ``/proxy/quiet``: default's managers with triggers these histories never reach, so
the upstream gets the request the client sent, and the difference is the proxy's own
overhead (goal: within 10% of a direct call's time at 2,000 messages). Through
``/proxy/default``: what a user of ``default`` sees, its upstream requests summarised (past
150 messages), so smaller than the client's. Prints the median time per request of each and
the ratios, at several N.

    python bench/bench_proxy.py [--delay 0.02] [--calls 40] [--sizes 200,2000,5000] [--in-process]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _serve
from _quiet import QUIET

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

    def __init__(self, client: httpx.Client, url: str, n: int, upstream: Upstream | None) -> None:
        self.client, self.url, self.upstream = client, url, upstream
        self.messages = history(n)
        self.times: list[float] = []

    def step(self) -> None:
        if self.upstream is not None:  # in this process: its next answer, a call
            self.upstream.replies.append(_call(len(self.times)))
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


def loop(client: httpx.Client, url: str, n: int, calls: int, upstream: Upstream | None) -> list[float]:
    """The times of ``calls`` requests of one loop."""
    one = Loop(client, url, n, upstream)
    for _ in range(calls):
        one.step()
    return one.times


def _call(step: int) -> Reply:
    return Reply(calls=[("bash", {"cmd": f"pytest -k s{step}"})])


class _Endless:
    """An upstream's replies in another process: a call, for ever."""

    def __init__(self) -> None:
        self.steps = itertools.count()

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Reply:
        return _call(next(self.steps))


class _Forgetful(list[Any]):
    """What the upstream saw, not kept (a long run would hold every body)."""

    def append(self, item: Any) -> None:
        pass


def _upstream_process(delay: float, pipe: Any) -> None:
    with Upstream(delay=delay) as upstream:
        upstream.replies = _Endless()  # type: ignore[assignment]
        upstream.seen = _Forgetful()
        upstream.sent = _Forgetful()
        pipe.send(upstream.base_url)
        pipe.recv()  # until told to stop


@contextlib.contextmanager
def separate(delay: float) -> Iterator[tuple[str, str, str]]:
    """The upstream, ``ctxmgmt serve`` and a bare pass-through in processes of their own:
    their base URLs."""
    ours, theirs = multiprocessing.Pipe()
    upstream = multiprocessing.get_context("spawn").Process(target=_upstream_process, args=(delay, theirs))
    upstream.start()
    base_url = ours.recv()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "definitions")
        folder.mkdir()
        (folder / "quiet.yaml").write_text(yaml.safe_dump(QUIET))
        (folder / "default.yaml").write_text(yaml.safe_dump(shipped("default")))
        config = Path(tmp, "config.yaml")
        config.write_text(
            yaml.safe_dump(
                {"models": {"m": {"base_url": base_url, "model": "m", "context_window": 2_000_000}}}
            )
        )
        proc, url = _serve.start(
            "--db", f"sqlite:///{tmp}/bench.db", "--definitions", str(folder), "--config", str(config)
        )
        bare, floor = _serve.start_passthrough(base_url)
        try:
            yield base_url, url, floor
        finally:
            for server in (proc, bare):
                server.terminate()
                server.wait(10)
            ours.send("stop")
            upstream.join(10)


@contextlib.contextmanager
def in_process(delay: float) -> Iterator[tuple[str, str, Upstream]]:
    """The upstream and the proxy (uvicorn) in threads of this process."""
    with tempfile.TemporaryDirectory() as tmp, Upstream(delay=delay) as upstream:
        store = DefinitionStore.open(f"sqlite:///{tmp}/bench.db")
        store.seed("default", shipped("default"))
        store.seed("quiet", QUIET)
        models = ModelsConfig.from_dict(
            {"models": {"m": {"base_url": upstream.base_url, "model": "m", "context_window": 2_000_000}}}
        )
        with LiveServer(create_app(store, models=models)) as proxy:
            yield upstream.base_url, proxy.url, upstream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="history sizes, comma-separated")
    parser.add_argument(
        "--in-process", action="store_true", help="upstream and proxy in threads of this process"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    with contextlib.ExitStack() as stack:
        upstream: Upstream | None = None
        floor = None
        if args.in_process:
            base_url, proxy, upstream = stack.enter_context(in_process(args.delay))
        else:
            base_url, proxy, floor = stack.enter_context(separate(args.delay))
        client = stack.enter_context(httpx.Client(timeout=60))
        urls = {"direct": f"{base_url}/chat/completions"}
        if floor is not None:
            urls["bare"] = f"{floor}/v1/chat/completions"
        urls.update({d: f"{proxy}/proxy/{d}/v1/chat/completions" for d in ("quiet", "default")})
        for url in urls.values():
            loop(client, url, 50, 5, upstream)  # warm: connections, the tokenizer, the definitions
        where = "in one process" if args.in_process else "proxy and upstream in processes of their own"
        print(f"upstream delay {args.delay * 1000:.0f} ms, {args.calls} requests per size, medians; {where}")
        print(
            f"{'messages':>9}"
            + "".join(f" {name:>10}" + ("" if name == "direct" else f" {'ratio':>6}") for name in urls)
        )
        for n in sizes:
            # Step by step, in turn: all loops see the same moments of a noisy machine.
            loops = {name: Loop(client, url, n, upstream) for name, url in urls.items()}
            for _ in range(args.calls):
                for one in loops.values():
                    one.step()
            medians = {name: statistics.median(one.times) for name, one in loops.items()}
            direct = medians["direct"]
            cells = [
                f" {t * 1000:>8.1f}ms" + ("" if name == "direct" else f" {t / direct:>5.2f}x")
                for name, t in medians.items()
            ]
            print(f"{n:>9,}" + "".join(cells))


if __name__ == "__main__":
    main()
