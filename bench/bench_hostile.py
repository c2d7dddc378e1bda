"""Hostile searches against a live server: pathological patterns must not stall it.

Archives a session that holds ``("a" * 26 + "!\\n") * 3`` (and 2 MB of other lines), starts
``ctxmgmt serve`` on 127.0.0.1 with that offload root, then runs 40 searches for ``(a+)+$``
in parallel while timing ``/_health`` (the baseline in the same run).

    python bench/bench_hostile.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from _serve import start

from ctxmgmt.offload import LocalOffloader

PARALLEL = 40
HEALTH_PINGS = 200


def p99(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.99) - 1] * 1000


def summariser_scaling() -> None:
    """The offline summariser on hostile texts: 10x the size should cost about 10x."""
    from ctxmgmt.digest import digest

    shapes = {
        "blank lines": "\n",
        "'@' runs": "@",
        "dotted word": "a.",
        "open calls": "a(",
        "assert runs": "assert ",
        "numbered": "1:2:",
        "fake notices": "[truncated: original 1 chars",
    }
    print("offline summariser on hostile text, one user and one tool message (head and tail of 400 kB)")
    for name, unit in shapes.items():
        times = []
        for size in (20_000, 200_000):
            text = unit * (size // len(unit))
            call = {"id": "c", "type": "function", "function": {"name": "run", "arguments": "{}"}}
            msgs = [
                {"role": "user", "content": text},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": text},
            ]
            t0 = time.perf_counter()
            digest(msgs)
            times.append(time.perf_counter() - t0)
        print(
            f"  {name:14} 20 kB {times[0] * 1000:7.1f} ms, 200 kB {times[1] * 1000:7.1f} ms "
            f"({times[1] / times[0]:4.1f}x)"
        )


def main() -> None:
    summariser_scaling()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "offload"
        store = LocalOffloader(root)
        store.store_tool_result("victim", ("a" * 26 + "!\n") * 3)
        store.store_tool_result("victim", "ordinary log line with some words in it\n" * 50_000)
        (Path(folder) / "config.yaml").write_text(f"offload:\n  root: {root}\n")
        server, base = start("--config", "config.yaml", cwd=folder)
        try:
            with httpx.Client(timeout=60) as client:

                def health() -> float:
                    t0 = time.perf_counter()
                    client.get(f"{base}/_health").raise_for_status()
                    return time.perf_counter() - t0

                def search(_: int) -> float:
                    t0 = time.perf_counter()
                    r = client.get(
                        f"{base}/_plugins/_ml/offload/_search",
                        params={"session": "victim", "pattern": "(a+)+$"},
                    )
                    r.raise_for_status()
                    return time.perf_counter() - t0

                idle = [health() for _ in range(HEALTH_PINGS)]
                with ThreadPoolExecutor(PARALLEL + 1) as pool:
                    searches = pool.map(search, range(PARALLEL))
                    busy = [health() for _ in range(HEALTH_PINGS)]
                    took = list(searches)
            print(f"{PARALLEL} parallel searches for (a+)+$ over a 2 MB session")
            print(
                f"  search latency: median {statistics.median(took) * 1000:.0f} ms, "
                f"max {max(took) * 1000:.0f} ms (goal < 1,000 ms)"
            )
            print(
                f"  /_health p99: idle {p99(idle):.1f} ms, during the searches {p99(busy):.1f} ms "
                f"({p99(busy) / p99(idle):.1f}x; goal < 100 ms)"
            )
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
