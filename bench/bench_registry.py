"""Registry benchmark: requests per second and p99 latency against a running server.

Starts `ctxmgmt serve` on 127.0.0.1 (SQLite, and PostgreSQL when
CTXMGMT_TEST_POSTGRES_URL is set), then runs bounded loops of GET, list and
create requests from 4 client threads. Ratios are against GET /_health on the
same server (the HTTP stack alone). Also measures resolve-by-name in process:
cached (one version query) and uncached (read, validate and build).

    python bench/bench_registry.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml
from _serve import start

ROOT = Path(__file__).resolve().parent.parent
BASE = "/_plugins/_ml/context_management"
REQUESTS = 400
THREADS = 4
DOC = yaml.safe_load((ROOT / "definitions" / "default.yaml").read_text())


def load(url: str, request: Callable[[httpx.Client, int], httpx.Response]) -> tuple[float, float]:
    """(requests per second, p99 latency in ms) of REQUESTS requests from THREADS threads."""
    latencies: list[float] = []

    def worker(t: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            for i in range(t, REQUESTS, THREADS):
                t0 = time.perf_counter()
                r = request(http, i)
                latencies.append(time.perf_counter() - t0)
                assert r.status_code < 400, r.text

    t0 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(worker, range(THREADS)))
    elapsed = time.perf_counter() - t0
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000
    return REQUESTS / elapsed, p99


def measure(db: str, workers: int) -> dict[str, tuple[float, float]]:
    """(req/s, p99 ms) per operation against ``ctxmgmt serve --workers N``."""
    proc, url = start("--db", db, "--workers", str(workers))
    try:
        time.sleep(1.0 if workers > 1 else 0.0)  # every worker up
        run = f"{time.time_ns()}"
        return {
            "_health": load(url, lambda h, i: h.get("/_health")),
            "GET": load(url, lambda h, i: h.get(f"{BASE}/default")),
            "list": load(url, lambda h, i: h.get(f"{BASE}?size=50")),
            "create": load(url, lambda h, i: h.post(f"{BASE}/b{run[-8:]}-{i}", json=DOC)),
        }
    finally:
        proc.terminate()
        proc.wait(10)


def bench_server(label: str, db: str) -> None:
    one, two = measure(db, 1), measure(db, 2)
    print(f"\n{label}: {REQUESTS} requests per operation, {THREADS} client threads (in this process)")
    print(f"  {'operation':10} {'1 worker':>17} {'2 workers':>17} {'2 vs 1':>7}  {'1w vs /_health':>14}")
    for name in one:
        (rps1, p1), (rps2, p2) = one[name], two[name]
        print(
            f"  {name:10} {rps1:6.0f}/s {p1:6.2f}ms {rps2:6.0f}/s {p2:6.2f}ms {rps2 / rps1:6.2f}x"
            f"  {rps1 / one['_health'][0]:13.2f}x"
        )


def bench_resolve(label: str, db: str) -> None:
    from ctxmgmt.store import DefinitionStore

    store = DefinitionStore.open(db)
    if not store.exists("bench-resolve"):
        store.create("bench-resolve", DOC)

    def timed(fn: Callable[[], object], n: int = 300) -> float:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6

    def select_one() -> None:  # on the same pool: a checkout and one round trip, no compiling
        with store.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1").scalar()

    raw = timed(select_one)
    store.resolve("bench-resolve")
    cached = timed(lambda: store.resolve("bench-resolve"))

    def uncached() -> None:
        store._cache.clear()
        store.resolve("bench-resolve")

    cold = timed(uncached)
    print(
        f"  resolve by name: cached {cached:7.0f} us ({cached / raw:4.1f}x a bare SELECT 1 on the pool, "
        f"{raw:.0f} us), "
        f"uncached {cold:7.0f} us ({cold / cached:4.1f}x cached)"
    )
    store.engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = f"sqlite:///{tmp}/bench.db"
        bench_server("SQLite", sqlite)
        bench_resolve("SQLite", sqlite)
    pg = os.environ.get("CTXMGMT_TEST_POSTGRES_URL")
    if pg:
        bench_server("PostgreSQL", pg)
        bench_resolve("PostgreSQL", pg)
    else:
        print("\nPostgreSQL: skipped (set CTXMGMT_TEST_POSTGRES_URL, e.g. from .ci/postgres.sh)")


if __name__ == "__main__":
    main()
