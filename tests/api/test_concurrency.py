"""Races against a real HTTP server, on SQLite and PostgreSQL."""

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.conftest import shipped

BASE = "/_plugins/_ml/context_management"
WORKERS = 50


def test_parallel_creates_of_one_name_give_one_success(live):
    """50 parallel creates of one name: exactly one 200, the rest 409."""
    doc = shipped("default")

    def create(i):
        with httpx.Client(base_url=live.url, timeout=60) as http:
            return http.post(f"{BASE}/contested", json={**doc, "description": f"writer {i}"}).status_code

    with ThreadPoolExecutor(WORKERS) as pool:
        statuses = list(pool.map(create, range(WORKERS)))
    assert statuses.count(200) == 1 and statuses.count(409) == WORKERS - 1
    winner = httpx.get(f"{live.url}{BASE}/contested", timeout=30).json()
    assert winner["version"] == 1 and winner["description"].startswith("writer ")


def test_parallel_updates_with_if_match_lose_nothing(live):
    """50 writers each read, then PUT with If-Match, retrying on 409: every update lands once."""
    httpx.post(
        f"{live.url}{BASE}/counter", json={**shipped("default"), "description": ""}, timeout=30
    ).raise_for_status()

    def append(i):
        with httpx.Client(base_url=live.url, timeout=60) as http:
            for _ in range(200):
                current = http.get(f"{BASE}/counter").json()
                doc = {k: current[k] for k in ("description", "hooks")}
                doc["description"] = (current["description"] + f" {i}").strip()
                r = http.put(f"{BASE}/counter", json=doc, headers={"if-match": str(current["version"])})
                if r.status_code == 200:
                    return r.json()["version"]
                assert r.status_code == 409, r.text
            raise AssertionError("gave up after 200 conflicts")

    with ThreadPoolExecutor(WORKERS) as pool:
        versions = list(pool.map(append, range(WORKERS)))
    final = httpx.get(f"{live.url}{BASE}/counter", timeout=30).json()
    assert sorted(versions) == list(range(2, WORKERS + 2))
    assert final["version"] == WORKERS + 1
    assert sorted(map(int, final["description"].split())) == list(range(WORKERS))
