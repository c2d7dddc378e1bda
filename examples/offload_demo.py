"""A long agent run with offload and compression, against a scripted local model.

Runs the shipped `long-running-agent` definition for 40 tool calls with 40 kB
outputs, then shows that every request stayed under the model's context window,
prints the summary, and recalls a truncated tool output exactly.

    .venv/bin/python examples/offload_demo.py
"""

import json
import re
import tempfile
from pathlib import Path

from ctxmgmt import Context, DefinitionStore, ModelConfig, ModelsConfig, Runner, ToolRegistry, register_tool
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import ChatServer
from ctxmgmt.tokens import get_counter

WINDOW = 32_000


def report(n: int) -> str:
    return "".join(
        f"[{n}] row {i}: build step {i} of service-{n} finished in {i * 7} ms\n" for i in range(900)
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ctxmgmt-demo-") as tmp:  # removed when done
        run(Path(tmp))


def run(tmp: Path) -> None:
    store = DefinitionStore.open(f"sqlite:///{tmp}/demo.db")
    store.create(
        "long-running-agent",
        __import__("yaml").safe_load(Path("definitions/long-running-agent.yaml").read_text()),
    )
    tools = ToolRegistry(group="demo")
    register_tool("build_report", lambda service: report(service), registry=tools)
    with ChatServer() as model:
        models = ModelsConfig(
            {"chat": ModelConfig(id="chat", base_url=model.base_url, model="gpt-4", context_window=WINDOW)}
        )
        runner = Runner(store, models, tools, offloader=LocalOffloader(tmp / "offload"))
        agent = runner.register(
            {
                "name": "builder",
                "llm": {"model_id": "chat", "parameters": {"max_iteration": 45}},
                "system_prompt": "You build services. Keep /srv/builds/manifest.json consistent.",
                "tools": [{"type": "build_report"}],
                "context_management_name": "long-running-agent",
            }
        )
        for n in range(40):
            model.reply(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": "build_report", "arguments": json.dumps({"service": n})},
                        }
                    ],
                }
            )
        model.reply("All 40 services are built.")
        result = runner.execute(
            agent, "Build all 40 services; never touch /srv/builds/manifest.json by hand."
        )

        counter = get_counter("gpt-4")
        sizes = []
        for request in model.requests:
            system, *messages = request["messages"]
            sizes.append(
                counter.context(
                    Context(
                        system_prompt=system["content"], messages=messages, tools=request.get("tools", [])
                    )
                )[0]
            )
        print(
            f"{len(model.requests)} LLM calls; largest request {max(sizes):,} tokens "
            f"(window {WINDOW:,}; a window-less run would reach ~{40 * 9_000:,})"
        )
        last = model.requests[-1]["messages"]
        summary = next(
            (m["content"] for m in last if str(m.get("content") or "").startswith("[ctxmgmt:summary]")), None
        )
        print("\n--- summary the model saw last ---")
        print(summary or "(no summary)")

        cut = next(m["content"] for m in last if m["role"] == "tool" and "context_read(" in m["content"])
        args = re.search(r'context_read\(ref="(t-[0-9a-f]{32})", offset=(\d+), limit=(\d+)\)', cut)
        ref, offset, limit = args.group(1), int(args.group(2)), int(args.group(3))
        recalled = runner.offloader.read(result.memory_id, ref, offset=offset, limit=limit).text
        stored = {
            m["tool_call_id"]: m["content"]
            for m in runner.memory.load(result.memory_id, agent)[0]
            if m["role"] == "tool"
        }
        call_id = next(m["tool_call_id"] for m in last if m["role"] == "tool" and m["content"] == cut)
        print("\n--- recall ---")
        print(f"context_read(ref={ref!r}, offset={offset}, limit={limit}) returned {len(recalled):,} chars")
        exact = stored[call_id][offset : offset + limit] == recalled
        print(f"equal to the cut part of the original output: {exact}")


if __name__ == "__main__":
    main()
