"""A real `ctxmgmt serve` process, driven by the `ctxmgmt definitions` command."""

import json
import os
import subprocess
import sys

import pytest

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
