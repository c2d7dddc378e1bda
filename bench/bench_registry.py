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


def bench_server(label: str, db: str) -> None:
    proc, url = start("--db", db)
    try:
        run = f"{time.time_ns()}"
        health = load(url, lambda h, i: h.get("/_health"))
        create = load(url, lambda h, i: h.post(f"{BASE}/b{run[-8:]}-{i}", json=DOC))
        get = load(url, lambda h, i: h.get(f"{BASE}/default"))
        listed = load(url, lambda h, i: h.get(f"{BASE}?size=50"))
        print(f"\n{label}: {REQUESTS} requests per operation, {THREADS} client threads")
        print(f"  {'operation':10} {'req/s':>8} {'p99 ms':>8} {'req/s vs /_health':>18}")
        for name, (rps, p99) in (("_health", health), ("GET", get), ("list", listed), ("create", create)):
            print(f"  {name:10} {rps:8.0f} {p99:8.2f} {rps / health[0]:17.2f}x")
    finally:
        proc.terminate()
        proc.wait(10)


def bench_resolve(label: str, db: str) -> None:
    from sqlalchemy import text

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

    with store.engine.connect() as conn:
        raw = timed(lambda: conn.execute(text("SELECT 1")).scalar())
    store.resolve("bench-resolve")
    cached = timed(lambda: store.resolve("bench-resolve"))

    def uncached() -> None:
        store._cache.clear()
        store.resolve("bench-resolve")

    cold = timed(uncached)
    print(
        f"  resolve by name: cached {cached:7.0f} us ({cached / raw:4.1f}x a bare SELECT 1 of {raw:.0f} us), "
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
