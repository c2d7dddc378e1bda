"""Execution records in SQL: stored whole, listed newest first, collected past their retention."""

import subprocess
import sys

import pytest

from ctxmgmt.store import ExecutionStore
from ctxmgmt.store.repository import now_ms, relaxed


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


def _durability(conn) -> str:
    if conn.dialect.name == "sqlite":
        return str(conn.exec_driver_sql("PRAGMA synchronous").scalar())
    return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar())


def test_a_relaxed_transaction_commits_and_leaves_every_other_one_durable(store):
    """What a relaxed transaction writes is there after it (and gone when it fails); only its
    own commit skips the wait for the disk: the connection goes back to the pool durable."""
    executions = ExecutionStore(store.engine)
    with store.engine.connect() as conn:
        durable = _durability(conn)
    assert durable in ("2", "on")  # SQLite's FULL, PostgreSQL's default
    with relaxed(store.engine) as conn:
        assert _durability(conn) in ("1", "off")  # NORMAL / off, for this transaction
        executions.save(record(1), conn=conn)
        pooled = conn.connection.dbapi_connection
    assert executions.get(f"{1:032x}")["llm_calls"] == 1
    with pytest.raises(RuntimeError), relaxed(store.engine) as conn:
        executions.save(record(2), conn=conn)
        raise RuntimeError("a failure after the write")
    total, _ = executions.list("a" * 32)
    assert total == 1  # rolled back
    with store.engine.connect() as conn:  # the pool's last one back: the relaxed one
        assert conn.connection.dbapi_connection is pooled
        assert _durability(conn) == durable
