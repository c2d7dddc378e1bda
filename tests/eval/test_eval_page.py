"""A report saved by `ctxmgmt eval --save`: served read-only by the API and shown by the web page."""

import re
import subprocess
import sys
from pathlib import Path

import httpx

from ctxmgmt.api import create_app
from ctxmgmt.store import DefinitionStore
from tests.api.test_page import browser, no_console_errors, wait  # noqa: F401  (skips without chromium)
from tests.conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"


def _saved(url):
    run = subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "eval", str(EXAMPLE), "-w", "8000", "--save", "--db", url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    found = re.search(r"saved as ([0-9a-f]{32})", run.stderr)
    assert found, run.stderr
    return found.group(1)


def test_a_saved_report_is_served_and_shown(tmp_path, browser):  # noqa: F811
    """--save stores the report; the route answers it whole (404 for an unknown id); the page shows it."""
    from selenium.webdriver.common.by import By

    url = f"sqlite:///{tmp_path / 'eval.db'}"
    report_id = _saved(url)
    store = DefinitionStore.open(url)
    try:
        with LiveServer(create_app(store)) as live:
            got = httpx.get(
                f"{live.url}/_plugins/_ml/context_management/_eval/{report_id}", timeout=30
            ).json()
            assert got["report_id"] == report_id and got["schema"] == "ctxmgmt.eval/1"
            assert [r["name"] for r in got["rows"]] == ["default", "sliding-window", "observation-masking"]
            missing = httpx.get(f"{live.url}/_plugins/_ml/context_management/_eval/{'0' * 32}", timeout=30)
            odd = httpx.get(f"{live.url}/_plugins/_ml/context_management/_eval/..%2F..", timeout=30)
            assert (missing.status_code, odd.status_code) == (404, 404)
            browser.get(f"{live.url}/ui#/eval/{report_id}")
            table = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr"))
            cells = [r.find_elements(By.TAG_NAME, "td")[0].text for r in table]
            assert cells == ["default", "sliding-window (= default)", "observation-masking"]
            assert len(browser.find_elements(By.CSS_SELECTOR, "polyline.eval-line")) == 3
            no_console_errors(browser)
    finally:
        store.engine.dispose()
