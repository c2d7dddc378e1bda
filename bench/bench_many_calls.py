"""Many tool calls in one model reply, against a live ``ctxmgmt serve``.

The local chat server answers an execution with one reply of N parallel calls of an http
tool (a loopback endpoint that echoes its arguments), then a final answer; the agent runs
the shipped ``default`` definition's ``post_tool`` entry, with an offload store. Measures
the execution's wall time and ``/_health`` latency while it runs, for N = 400 (the baseline)
and N = 4,000 in the same process: linear work gives a time ratio of about 10, and the
server keeps answering (goal: /_health p99 < 100 ms).

    python bench/bench_many_calls.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml
from _serve import start

from ctxmgmt.testing import ChatServer

AGENTS = "/_plugins/_ml/agents"
SIZES = (400, 4000)


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def reply(n: int) -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"i": i})}}
        for i in range(n)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def p99(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(len(samples) * 0.99) - 1)] * 1000


def run(base: str, agent_id: str, chat: ChatServer, n: int) -> tuple[float, list[float]]:
    """(the execution's seconds, /_health latencies while it ran)."""
    chat.reply(reply(n))
    chat.reply("done")
    answer: list[httpx.Response] = []

    def execute() -> None:
        with httpx.Client(timeout=600) as http:
            answer.append(
                http.post(f"{base}{AGENTS}/{agent_id}/_execute", json={"parameters": {"question": "go"}})
            )

    latencies: list[float] = []
    worker = threading.Thread(target=execute)
    t0 = time.perf_counter()
    worker.start()
    with httpx.Client(timeout=60) as http:
        while worker.is_alive():
            t1 = time.perf_counter()
            http.get(f"{base}/_health").raise_for_status()
            latencies.append(time.perf_counter() - t1)
            time.sleep(0.005)
    worker.join()
    took = time.perf_counter() - t0
    answer[0].raise_for_status()
    return took, latencies


def main() -> None:
    echo = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as folder, ChatServer() as chat:
        config = {
            "models": {"chat": {"base_url": chat.base_url, "model": "m", "context_window": 1_000_000}},
            "offload": {"root": str(Path(folder) / "offload")},
        }
        (Path(folder) / "config.yaml").write_text(yaml.safe_dump(config))
        server, base = start("--config", "config.yaml", "--db", f"sqlite:///{folder}/db.sqlite", cwd=folder)
        try:
            with httpx.Client(base_url=base, timeout=60) as http:
                definition = yaml.safe_load(
                    (Path(__file__).parent.parent / "definitions" / "default.yaml").read_text()
                )
                body = {"hooks": {"post_tool": definition["hooks"]["post_tool"]}}
                http.post("/_plugins/_ml/context_management/bench", json=body).raise_for_status()
                url = f"http://127.0.0.1:{echo.server_address[1]}/echo"
                agent_id = http.post(
                    f"{AGENTS}/_register",
                    json={
                        "name": "bench",
                        "llm": {"model_id": "chat"},
                        "tools": [{"type": "http", "name": "echo", "parameters": {"url": url}}],
                        "context_management_name": "bench",
                    },
                ).json()["agent_id"]
                idle = []
                for _ in range(200):
                    t1 = time.perf_counter()
                    http.get("/_health").raise_for_status()
                    idle.append(time.perf_counter() - t1)
            run(base, agent_id, chat, 10)  # warm up: imports, the tokenizer, connections
            figures = {n: run(base, agent_id, chat, n) for n in SIZES}
        finally:
            server.terminate()
            server.wait(10)
            echo.shutdown()
    print("one model reply with N parallel http tool calls, ctxmgmt serve, post_tool of 'default'")
    print(f"  /_health idle: median {statistics.median(idle) * 1000:.1f} ms, p99 {p99(idle):.1f} ms")
    for n, (took, latencies) in figures.items():
        print(
            f"  N={n:>5}: execution {took:6.2f} s ({took / n * 1000:.2f} ms per call); /_health during it: "
            f"{len(latencies)} pings, median {statistics.median(latencies) * 1000:.1f} ms, "
            f"p99 {p99(latencies):.1f} ms, max {max(latencies) * 1000:.1f} ms"
        )
    small, large = (figures[n][0] for n in SIZES)
    linear = SIZES[1] / SIZES[0]
    print(f"  time({SIZES[1]}) / time({SIZES[0]}) = {large / small:.1f} (linear: about {linear:.0f})")


if __name__ == "__main__":
    main()
