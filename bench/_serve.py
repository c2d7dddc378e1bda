"""Start ``ctxmgmt serve`` on a free port of 127.0.0.1 for a benchmark, and wait for it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str, cwd: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """The server process and its base URL; ``args`` are passed to ``ctxmgmt serve``."""
    port = free_port()
    return _started([sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port), *args], port, cwd)


def start_passthrough(upstream: str) -> tuple[subprocess.Popen[str], str]:
    """A bare pass-through to ``upstream`` (``_passthrough.py``), served as ``ctxmgmt serve``
    is (uvicorn, h11, asyncio): the process and its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "_passthrough:app", "--port", str(port)]
    command += ["--http", "h11", "--loop", "asyncio", "--log-level", "error"]
    env = {**os.environ, "PASSTHROUGH_UPSTREAM": upstream}
    return _started(command, port, str(Path(__file__).resolve().parent), env)


def _started(
    command: list[str], port: int, cwd: str | None, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )
    for _ in range(300):
        try:
            httpx.get(f"{url}/_health")
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")
