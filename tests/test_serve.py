"""A real `ctxmgmt serve` process, driven by the `ctxmgmt definitions` command."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import ROOT, free_port, serve


@pytest.fixture
def served(tmp_path):
    with serve(tmp_path, f"sqlite:///{tmp_path}/s.db") as url:
        yield url


def cli(url, *args):
    env = {**os.environ, "CTXMGMT_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "definitions", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_serve_loads_the_shipped_definitions_and_answers_the_cli(served):
    """serve stores the shipped definitions; definitions list/get/create/update/delete work against it."""
    listed = json.loads(cli(served, "list").stdout)
    assert {"default", "token-aware-truncation"} <= {d["name"] for d in listed["context_management"]}
    assert json.loads(cli(served, "get", "default").stdout)["version"] == 1
    created = cli(served, "create", "definitions/tool-heavy.yaml", "--name", "copy")
    assert json.loads(created.stdout)["status"] == "created"
    again = cli(served, "create", "definitions/tool-heavy.yaml", "--name", "copy")
    assert again.returncode == 2 and "409" in again.stderr and "Traceback" not in again.stderr
    updated = cli(served, "update", "definitions/default.yaml", "--name", "copy", "--if-version", "1")
    assert json.loads(updated.stdout)["version"] == 2
    assert json.loads(cli(served, "delete", "copy").stdout)["status"] == "deleted"
    missing = cli(served, "get", "copy")
    assert missing.returncode == 2 and "404" in missing.stderr


def test_cli_without_a_server_is_a_clear_error():
    """definitions against a closed port exits 2 with a one-line reason."""
    run = cli(f"http://127.0.0.1:{free_port()}", "list")
    assert run.returncode == 2 and "cannot reach the server" in run.stderr


def children(pid):
    """The process ids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_serve_with_two_workers_shares_one_sqlite_database(tmp_path):
    """--workers 2 runs two worker processes over one SQLite file (WAL, busy timeout): 60
    concurrent creates all land, exactly once each, and every worker sees them all."""
    pids = []
    with serve(tmp_path, f"sqlite:///{tmp_path}/w.db", "--workers", "2", pids=pids) as url:
        deadline = time.monotonic() + 30
        while len([p for p in children(pids[0]) if "spawn" in Path(f"/proc/{p}/cmdline").read_text()]) < 2:
            assert time.monotonic() < deadline, "two workers did not start"
            time.sleep(0.1)
        doc = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}
        base = f"{url}/_plugins/_ml/context_management"

        def create(i):
            with httpx.Client() as http:  # a connection of its own: spread over the workers
                return http.post(f"{base}/wk{i}", json=doc, timeout=60).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(create, range(60))) == {200}
        for _ in range(10):  # each fresh connection may reach either worker
            listed = httpx.get(
                base, params={"q": "wk", "size": 100}, headers={"connection": "close"}, timeout=30
            ).json()
            assert listed["total"] == 60


def test_workers_must_be_a_sensible_number(tmp_path):
    """--workers 0 is a usage error (exit 2), before anything binds or is created."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxmgmt.cli",
            "serve",
            "--workers",
            "0",
            "--db",
            f"sqlite:///{tmp_path}/x.db",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert run.returncode == 2 and "--workers must be from 1 to 64" in run.stderr
    assert not (tmp_path / "x.db").exists()


def test_serve_names_the_models_without_a_context_window_when_it_starts(tmp_path):
    """A model of --config without context_window is named on stderr at start (not first at a
    proxied request), and a request for it is refused in words that say to set it; the banner
    names the models a client may ask for."""
    config = tmp_path / "config.yaml"
    upstream = "http://127.0.0.1:9/v1"  # never called: both requests stop before
    config.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "sized": {"base_url": upstream, "model": "m", "context_window": 8000},
                    "unsized": {"base_url": upstream, "model": "m"},
                }
            }
        )
    )
    said: list[str] = []
    with serve(tmp_path, f"sqlite:///{tmp_path}/c.db", "--config", str(config), said=said) as url:
        asked = {"model": "unsized", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{url}/proxy/default/v1/chat/completions", json=asked, timeout=30)
    assert 400 <= refused.status_code < 500 and "context_window" in refused.json()["error"]["message"]
    warning = next(line for line in said[0].splitlines() if "without context_window" in line)
    assert warning.endswith(": unsized")
    banner = next(line for line in said[0].splitlines() if line.startswith("serving on"))
    assert "proxy: /proxy/{definition}/v1, models sized, unsized;" in banner
