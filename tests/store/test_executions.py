"""Execution records in SQL: stored whole, listed newest first, collected past their retention."""

import subprocess
import sys

from ctxmgmt.store import ExecutionStore
from ctxmgmt.store.repository import now_ms


def record(n: int, agent: str = "a" * 32, ended: int | None = None) -> dict:
    t = now_ms() - 1000 * (100 - n)
    return {
        "execution_id": f"{n:032x}",
        "agent_id": agent,
        "memory_id": "m" * 32,
        "definition": "default",
        "definition_version": 3,
        "definition_source": "agent",
        "started_time": t,
        "ended_time": ended if ended is not None else t + 10,
        "status": "finished",
        "llm_calls": n,
        "max_request_tokens": 1000 * n,
        "context_window": 16000,
        "calls": [{"call": k + 1} for k in range(n)],
        "hooks": [],
    }


def test_records_are_stored_whole_and_listed_newest_first(store):
    """get returns every field stored; list pages an agent's records, newest first."""
    executions = ExecutionStore(store.engine)
    saved = [record(n) for n in range(1, 6)]
    for r in saved:
        executions.save(r)
    executions.save(record(9, agent="b" * 32))
    assert executions.get(f"{3:032x}") == saved[2]
    total, rows = executions.list("a" * 32, offset=1, limit=2)
    assert total == 5 and [r["llm_calls"] for r in rows] == [4, 3]
    assert "calls" not in rows[0]  # a listing shows the summary only


def test_gc_deletes_records_past_the_retention(store, tmp_path):
    """ctxmgmt gc deletes the records of executions that ended before the retention age,
    and keeps the others."""
    executions = ExecutionStore(store.engine)
    executions.save(record(1, ended=now_ms() - 40 * 86_400_000))
    executions.save(record(2))
    assert executions.gc(30 * 86400) == 1
    assert executions.list("a" * 32)[0] == 1
    executions.save(record(3, ended=now_ms() - 5 * 86_400_000))
    url = str(store.engine.url.render_as_string(hide_password=False))
    run = subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "gc", "--db", url, "--max-age-days", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "gc: 1 execution records older than 1 days deleted" in run.stdout
    assert executions.list("a" * 32)[0] == 1
