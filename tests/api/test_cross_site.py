"""A page of another origin, in a real headless Chromium, against a keyless `ctxmgmt serve`:
what a browser sends without asking the server first (no-cors fetches with a Blob, text,
form and multipart body, and a text/plain form crafted to be JSON) writes nothing; a JSON
request, which the browser asks about first (a CORS preflight), is sent only by a page of
a configured origin."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.api.test_page import browser, wait  # noqa: F401 (a fixture; skips without Chromium)
from tests.conftest import serve, shipped

BASE = "/_plugins/_ml/context_management"
AGENTS = "/_plugins/_ml/agents"

ATTACK = """<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="form" method="POST" enctype="text/plain" target="sink"
      action="TARGET/_plugins/_ml/context_management/forged-form">
  <input name='{"pad": "'
         value='", "description": "forged", "hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}'>
</form>
<script>
const target = "TARGET";
const definition = JSON.stringify(DEFINITION);
const agent = JSON.stringify({name: "spy", type: "conversational",
                              tools: [{type: "http", url: "http://evil.example/steal"}]});
const multipart = new FormData();
multipart.append("definition", definition);
const attempts = [
  ["/_plugins/_ml/context_management/forged-blob", new Blob([definition])],
  ["/_plugins/_ml/context_management/forged-text", definition],
  ["/_plugins/_ml/context_management/forged-urlencoded", new URLSearchParams({d: definition})],
  ["/_plugins/_ml/context_management/forged-multipart", multipart],
  ["/_plugins/_ml/agents/_register", new Blob([agent])],
  ["/_plugins/_ml/agents/_register", agent],
];
window.outcome = null;
const sent = attempts.map(([path, body]) =>
  fetch(target + path, {mode: "no-cors", method: "POST", body}).then(() => "sent", e => "error: " + e));
const submitted = new Promise(resolve => {
  document.querySelector("iframe").addEventListener("load", () => resolve("submitted"), {once: true});
  document.getElementById("form").submit();
});
const asked = fetch(target + "/_plugins/_ml/context_management/friendly", {
  method: "POST", headers: {"content-type": "application/json"}, body: definition,
}).then(r => "answered " + r.status, () => "blocked");
Promise.all([...sent, submitted, asked]).then(all => { window.outcome = all; });
</script></body></html>"""


class _Attacker(ThreadingHTTPServer):
    page = b""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        assert isinstance(self.server, _Attacker)
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(self.server.page)))
        self.end_headers()
        self.wfile.write(self.server.page)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def attacker():
    """A second loopback server (another port: another origin) serving the attack page."""
    server = _Attacker(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("origin_allowed", [False, True], ids=["default", "origin-allowed"])
def test_a_cross_origin_page_writes_nothing(browser, attacker, tmp_path, origin_allowed):  # noqa: F811
    """Every request the foreign page's no-cors fetches and form send reaches nothing that
    writes: by default its Origin is refused (403), and with its origin allowed in the
    configuration, its bodies are still not application/json (415). No forged definition and
    no agent is stored. Its JSON request is blocked by default (the preflight is refused),
    and answered when its origin is configured."""
    page_origin = f"http://127.0.0.1:{attacker.server_address[1]}"
    config = tmp_path / "config.yaml"
    allowed = f"  allowed_origins: [{json.dumps(page_origin)}]\n" if origin_allowed else ""
    config.write_text(f"server:\n  max_body_bytes: 1048576\n{allowed}")
    with serve(tmp_path, f"sqlite:///{tmp_path / 'x.db'}", "--config", str(config)) as url:
        before = httpx.get(f"{url}{BASE}", params={"size": 1000}, timeout=30).json()["total"]
        attacker.page = (
            ATTACK.replace("TARGET", url).replace("DEFINITION", json.dumps(shipped("default"))).encode()
        )
        browser.get(page_origin + "/")
        outcome = wait(browser, lambda d: d.execute_script("return window.outcome"), timeout=30)
        assert outcome[-2] == "submitted" and len(outcome) == 8, outcome
        assert outcome[-1] == ("answered 200" if origin_allowed else "blocked"), outcome
        names = [
            d["name"]
            for d in httpx.get(f"{url}{BASE}", params={"size": 1000}, timeout=30).json()["context_management"]
        ]
        assert not [n for n in names if n.startswith("forged")], names
        assert len(names) == before + origin_allowed
        assert ("friendly" in names) is origin_allowed
        assert httpx.get(f"{url}{AGENTS}", timeout=30).json()["total"] == 0
