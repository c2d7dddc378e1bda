"""Write examples/conversation.json: a coding agent's session with large tool outputs."""

import json
from pathlib import Path

FILES = ["src/auth/session.py", "src/auth/tokens.py", "src/api/routes.py", "tests/test_session.py"]


def tool_round(n: int, path: str) -> list[dict]:
    read, run = f"call_{n}_read", f"call_{n}_test"
    source = "\n".join(f"{i:4} | def handler_{i}(request):  # {path}" for i in range(1, 400))
    failure = (
        "============================= FAILURES =============================\n"
        f"___ test_refresh_{n} ___\n"
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/{path}", line {40 + n}, in refresh\n'
        "    token = store[session_id]\n"
        "KeyError: 'session_id'\n"
    ) * 20
    return [
        {
            "role": "assistant",
            "content": f"Reading {path} and running its tests in parallel.",
            "tool_calls": [
                {
                    "id": read,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
                },
                {
                    "id": run,
                    "type": "function",
                    "function": {
                        "name": "run",
                        "arguments": json.dumps({"command": f"pytest tests/test_session.py -k refresh_{n}"}),
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": read, "content": source},
        {"role": "tool", "tool_call_id": run, "content": failure},
        {
            "role": "assistant",
            "content": f"I decided to guard the lookup in {path} instead of changing the store. "
            "Next I will re-run the failing test.",
        },
    ]


messages = [
    {
        "role": "user",
        "content": (
            "The login refresh fails with KeyError: 'session_id' in /srv/app/src/auth/session.py. "
            "Fix it. You must not change the database schema, and keep the public API of src/api/routes.py. "
            "Our SLO is 250 ms p99."
        ),
    }
]
for n in range(15):
    messages += tool_round(n, FILES[n % len(FILES)])
messages.append({"role": "user", "content": "Also make sure tests/test_session.py passes on Python 3.11."})

doc = {
    "system_prompt": "You are a careful coding agent working in the repository at /srv/app.",
    "model": "gpt-4o-mini",
    "context_window": 128000,
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "run",
                "description": "Run a shell command",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            },
        },
    ],
    "messages": messages,
}
Path(__file__).with_name("conversation.json").write_text(json.dumps(doc, indent=1) + "\n")
