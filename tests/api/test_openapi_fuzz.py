"""schemathesis against a live `ctxmgmt serve`: /openapi.json matches what the server answers.

Every check is on (no 500, documented statuses and bodies, schema-invalid requests refused,
Allow headers, stateful links); see schemathesis.toml beside this file for the 400s that a
schema cannot describe. The seed is fixed and one worker runs, so every run draws the same
requests: a failure is a real mismatch, never luck.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import serve

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(
    shutil.which("st", path=str(Path(sys.executable).parent)) is None, reason="needs schemathesis"
)
def test_schemathesis_finds_nothing_against_a_live_server(tmp_path, database_url):
    """A bounded schemathesis run (fixed seed, every check) finds no failure and no error,
    on SQLite and on PostgreSQL."""
    st = str(Path(sys.executable).parent / "st")
    with serve(tmp_path, database_url) as url:
        run = subprocess.run(
            [
                st,
                "--config-file",
                str(HERE / "schemathesis.toml"),
                "run",
                f"{url}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "25",
                "--workers",
                "1",
                "--seed",
                "20261124",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=900,
        )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
