"""Any agent, unchanged: a client that knows nothing of ctxmgmt talks to the proxy of
`ctxmgmt serve` as it would talk to OpenAI, here against a scripted local model.

Starts a scripted OpenAI-compatible model (``ctxmgmt.testing.ChatServer``) and
``ctxmgmt serve`` with a models configuration that sends ``gpt-4o`` to it at a 16,000-token
window, then runs a client's tool loop through ``http://127.0.0.1:PORT/proxy/default/v1``
with plain HTTP (the OpenAI SDK's ``OpenAI(base_url=...)`` sends the same requests), and
prints what the client sent and what reached the model.

    .venv/bin/python examples/proxy_demo.py
"""

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from ctxmgmt import Context, get_counter
from ctxmgmt.testing import ChatServer

STEPS = 60
WINDOW = 16_000


def output(step: int) -> str:
    """A tool's output: a log of ~200 lines, one of them the error the agent is after."""
    lines = [
        f"2026-11-27 10:{step % 60:02d}:{i % 60:02d} worker-{step} processed batch {i}" for i in range(200)
    ]
    lines[150] = f"ERROR worker-{step}: timeout reading /var/data/in/{step}.csv after 30 s"
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ctxmgmt-proxy-") as tmp, ChatServer() as model:
        config = Path(tmp, "proxy.yaml")
        config.write_text(
            yaml.safe_dump(
                {
                    "models": {
                        "gpt-4o": {"base_url": model.base_url, "model": "gpt-4o", "context_window": WINDOW}
                    }
                }
            )
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port)]
        command += ["--db", f"sqlite:///{tmp}/demo.db", "--config", str(config)]
        serve = subprocess.Popen(
            command,
            cwd=tmp,  # its offload folder goes there too
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            run(f"http://127.0.0.1:{port}", model)
        finally:
            serve.terminate()
            serve.wait(10)


def run(server: str, model: ChatServer) -> None:
    for _ in range(100):  # until it answers
        try:
            httpx.get(f"{server}/_health")
            break
        except httpx.TransportError:
            time.sleep(0.1)
    url = f"{server}/proxy/default/v1/chat/completions"  # base_url + /chat/completions
    messages = [
        {"role": "system", "content": "You are a data-pipeline agent."},
        {"role": "user", "content": "Find why the nightly import fails and fix it."},
    ]
    counter = get_counter("gpt-4o")
    with httpx.Client(timeout=60) as client:
        for step in range(STEPS):
            call = {
                "id": f"call_{step}",
                "type": "function",
                "function": {
                    "name": "bash",
                    "arguments": f'{{"cmd": "tail -n 200 /var/log/import/{step}.log"}}',
                },
            }
            model.reply({"role": "assistant", "content": None, "tool_calls": [call]})
            answer = client.post(url, json={"model": "gpt-4o", "messages": messages})
            answer.raise_for_status()
            message = answer.json()["choices"][0]["message"]
            messages += [
                {k: v for k, v in message.items() if v is not None},
                {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": output(step)},
            ]
    sent, seen = messages[:-2], model.requests[-1]["messages"]
    print(f"the client sent {len(sent)} messages, {counter.context(Context(messages=sent))[0]:,} tokens")
    print(f"the model got   {len(seen)} messages, {counter.context(Context(messages=seen))[0]:,} tokens")
    summary = next(
        (m["content"] for m in seen if str(m.get("content", "")).startswith("[ctxmgmt:summary]")), None
    )
    if summary:
        print(
            "of which ctxmgmt's summary of what it removed:\n"
            + "\n".join(summary.splitlines()[:40])
            + "\n..."
        )


if __name__ == "__main__":
    main()
