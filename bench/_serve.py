"""Start ``ctxmgmt serve`` on a free port of 127.0.0.1 for a benchmark, and wait for it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str, cwd: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """The server process and its base URL; ``args`` are passed to ``ctxmgmt serve``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port), *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for _ in range(300):
        try:
            httpx.get(f"{url}/_health")
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")
