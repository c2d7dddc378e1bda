"""schemathesis against a live `ctxmgmt serve`: /openapi.json matches what the server answers.

Every check is on (no 500, documented statuses and bodies, schema-invalid requests refused,
Allow headers, stateful links). A 400 to a schema-valid request is expected only where the
document itself states one (``x-semantic-400``), so an undeclared one fails the run. The
seed is fixed and one worker runs, so every run draws the same requests: a failure is a
real mismatch, never luck.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ctxmgmt.api.openapi import SEMANTIC_KEY
from tests.conftest import serve

HERE = Path(__file__).resolve().parent
ACCEPTED = ["2xx", "401", "403", "404", "409"]
"""What a schema-valid request may be answered, besides a 400 the document states."""


def config_from(document: dict, into: Path) -> Path:
    """schemathesis.toml, with 400 expected for exactly the operations that declare one."""
    lines = [(HERE / "schemathesis.toml").read_text()]
    for path, item in sorted(document["paths"].items()):
        for method, op in sorted(item.items()):
            if SEMANTIC_KEY in op:
                lines += [
                    "[[operations]]",
                    f"include-path = {json.dumps(path)}",
                    f"include-method = [{json.dumps(method.upper())}]",
                    f"checks.positive_data_acceptance.expected-statuses = {json.dumps([*ACCEPTED, '400'])}",
                    "",
                ]
    into.write_text("\n".join(lines))
    return into


@pytest.mark.skipif(
    shutil.which("st", path=str(Path(sys.executable).parent)) is None, reason="needs schemathesis"
)
@pytest.mark.parametrize(
    ("database_url", "phase"),
    [
        ("sqlite", "coverage"),
        ("sqlite", "fuzzing"),
        ("sqlite", "stateful"),
        pytest.param("postgresql", "coverage", marks=pytest.mark.postgres),
        pytest.param("postgresql", "fuzzing", marks=pytest.mark.postgres),
    ],
    indirect=["database_url"],
)
def test_schemathesis_finds_nothing_against_a_live_server(tmp_path, database_url, phase):
    """A bounded schemathesis phase (fixed seed, every check) finds no failure and no error:
    each phase on SQLite, and the phases that send every operation its edge and random
    values on PostgreSQL (the stateful sequences test the API's logic, the same on both).
    One test per phase, so that parallel test workers share them out."""
    st = str(Path(sys.executable).parent / "st")
    with serve(tmp_path, database_url) as url:
        config = config_from(
            httpx.get(f"{url}/openapi.json", timeout=30).json(), tmp_path / "schemathesis.toml"
        )
        run = subprocess.run(
            [
                st,
                "--config-file",
                str(config),
                "run",
                f"{url}/openapi.json",
                "--phases",
                phase,
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
