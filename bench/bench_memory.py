"""Memory of a long-running server under distinct conversations: it must level off.

Starts ``ctxmgmt serve`` on 127.0.0.1, sends bounded loops of ``_simulate`` calls, each
with 10 distinct messages of 5 KB, and prints the server's resident memory as it goes,
against the warmed-up server's (the baseline in the same run).

    python bench/bench_memory.py [CALLS]      # 10,000 by default
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from _serve import start

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 500
STEP = 1000
THREADS = 4
DEFINITION = {
    "name": "bench",
    "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 8}}]},
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def body(i: int) -> dict:
    filler = "lorem ipsum dolor sit amet " * 190  # about 5 KB
    messages = [{"role": "user", "content": f"call {i} message {j}: {filler}"} for j in range(10)]
    return {
        "definition": DEFINITION,
        "hook": "pre_llm",
        "context": {"messages": messages, "model": "gpt-4o-mini"},
    }


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as folder:
        server, base = start("--db", f"sqlite:///{folder}/m.db", cwd=folder)
        url = f"{base}/_plugins/_ml/context_management/_simulate"
        try:
            with httpx.Client(timeout=30) as client, ThreadPoolExecutor(THREADS) as pool:

                def send(i: int) -> None:
                    r = client.post(url, json=body(i))
                    assert r.status_code == 200, r.text

                list(pool.map(send, range(WARMUP)))
                base = rss_mb(server.pid)
                print(f"{calls:,} _simulate calls of 10 distinct 5 KB messages, {THREADS} client threads")
                print(f"warmed up ({WARMUP} calls): RSS {base:.0f} MB")
                print(f"{'calls':>8} {'RSS MB':>8} {'vs warm':>8}")
                points = []
                done = WARMUP
                while done < calls:
                    n = min(STEP, calls - done)
                    list(pool.map(send, range(done, done + n)))
                    done += n
                    rss = rss_mb(server.pid)
                    points.append(rss)
                    print(f"{done:>8,} {rss:>8.0f} {rss - base:>+8.0f}")
            half = points[len(points) // 2 :]
            print(
                f"growth over the warmed-up server: {points[-1] - base:+.0f} MB (goal <= 150); "
                f"second half: {min(half):.0f}-{max(half):.0f} MB (spread {max(half) - min(half):.0f} MB)"
            )
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
