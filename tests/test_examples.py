"""The examples the README runs."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_proxy_demo_manages_a_clients_loop_to_the_window():
    """examples/proxy_demo.py: a client's 60-step loop through the proxy reaches the model
    within its 16,000-token window, with a summary whose Errors hold the logs' error lines."""
    run = subprocess.run(
        [sys.executable, "examples/proxy_demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr
    sent = re.search(r"the client sent 120 messages, ([\d,]+) tokens", run.stdout)
    got = re.search(r"the model got +(\d+) messages, ([\d,]+) tokens", run.stdout)
    assert sent and got, run.stdout
    assert int(got.group(2).replace(",", "")) < 16_000 < int(sent.group(1).replace(",", ""))
    assert "## Errors\n- ERROR worker-5" in run.stdout


def test_the_readmes_validation_output_is_what_examples_bad_yaml_gives():
    """The README's Validation section shows `ctxmgmt validate bad.yaml` run in examples/, line
    for line, and it exits 2 (the file did not ship: nobody could run it)."""
    run = subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "validate", "bad.yaml"],
        cwd=ROOT / "examples",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("$ cd examples && ../.venv/bin/ctxmgmt validate bad.yaml\n", 1)[1].split("```", 1)[0]
    assert (run.stdout + run.stderr).splitlines() == shown.splitlines()
