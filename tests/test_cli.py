"""The ctxmgmt command, run as a real subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import make_conversation

ROOT = Path(__file__).resolve().parent.parent


def ctxmgmt(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=60,
    )


@pytest.fixture
def conversation(tmp_path):
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps({"system_prompt": "sys", "messages": make_conversation(80, seed=1)}))
    return path


def test_validate_ok_folder():
    """validate on the shipped folder prints ok per file and exits 0."""
    run = ctxmgmt("validate", "definitions")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(": ok") == len(list((ROOT / "definitions").glob("*.yaml")))


def test_validate_errors_exit_2_with_file_line_and_pointer(tmp_path):
    """validate prints every error as file:line: pointer: message and exits 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n      config:\n"
        "        max_messages: 0\n    - type: Nope\n"
    )
    run = ctxmgmt("validate", str(bad))
    assert run.returncode == 2
    assert f"{bad}:6: /hooks/pre_llm/0/config/max_messages: must be >= 1 (got 0)" in run.stdout
    assert f"{bad}:7: /hooks/pre_llm/1/type: unknown manager type 'Nope'" in run.stdout
    assert "Traceback" not in run.stdout + run.stderr


def test_validate_warns_about_unconfigured_models(tmp_path):
    """A summarization model id missing from the configuration is a warning, not an error."""
    d = tmp_path / "d.yaml"
    d.write_text(
        "name: d\nhooks:\n  pre_llm:\n    - type: SummarizationManager\n      config:\n"
        "        summarization_model_id: big\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  small:\n    base_url: http://127.0.0.1:1/v1\n    model: m\n")
    run = ctxmgmt("validate", str(d), "--config", str(config))
    assert run.returncode == 0
    assert "warning: /hooks/pre_llm/0/config/summarization_model_id" in run.stdout


def test_apply_prints_context_and_trace(conversation):
    """apply prints the new context (same fields as the input) and the trace as JSON."""
    run = ctxmgmt("apply", "long-conversation", "--hook", "PRE_LLM", "--input", str(conversation))
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    # The input's fields, and the running summary's state for a later apply to go on from.
    assert set(out["context"]) == {"system_prompt", "messages", "state"}
    assert len(out["context"]["messages"]) == 6
    assert "summary" in out["context"]["state"]
    [entry] = out["trace"]
    assert entry["activated"] and entry["messages_before"] == 80
    assert "SlidingWindowManager: activated" in run.stderr


def test_apply_reads_stdin_and_a_plain_list(tmp_path):
    """apply takes a JSON list of messages on stdin."""
    msgs = make_conversation(30, seed=2)
    run = ctxmgmt(
        "apply",
        str(ROOT / "definitions" / "tool-heavy.yaml"),
        "--hook",
        "post_tool",
        "--input",
        "-",
        stdin=json.dumps(msgs),
    )
    assert run.returncode == 0, run.stderr
    assert set(json.loads(run.stdout)["context"]) == {"messages", "state"}


def test_a_rule_that_needs_the_window_says_how_to_give_it_not_none():
    """Without a window, the summary of why a ratio rule did not fire names the flag to give,
    never a bare None."""
    run = ctxmgmt(
        "apply", "default", "--hook", "pre_llm", "--input", "-", stdin='[{"role":"user","content":"hi"}]'
    )
    assert run.returncode == 0, run.stderr
    assert (
        "tokens_ratio_exceed: the context window is unknown; set context_window (--context-window)"
        in run.stderr
    )
    assert "None" not in run.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "reason"),
    [
        (["apply", "no-such-definition", "--input", "-"], "[]", "no shipped definition has that name"),
        (["apply", "default", "--input", "-"], "{not json", "<stdin>:1: /: JSON syntax error"),
        (
            ["apply", "default", "--input", "-"],
            '{"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]}',
            "/messages/0/tool_call_id",
        ),
        (["apply", "default", "--input", "-"], '{"messages": [], "colour": 1}', "/colour"),
        (["apply", "default", "--input", "-"], '"text"', "expected a list of messages"),
        (["apply", "default", "--hook", "during", "--input", "-"], "[]", "unknown hook"),
        (["apply", "default", "--input", "/no/such/file.json"], None, "cannot read the file"),
        (
            ["apply", "default", "--input", "-", "--config", "/no/such/config.yaml"],
            "[]",
            "cannot read the file",
        ),
        (["validate", "/no/such/path"], None, "no such file or folder"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, stdin, reason):
    """Bad input exits 2 with a one-line reason and no traceback."""
    run = ctxmgmt(*args, stdin=stdin)
    assert run.returncode == 2, run.stderr
    assert reason in run.stderr
    assert "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_list_shows_shipped_definitions():
    """list prints each shipped definition with its description."""
    run = ctxmgmt("list")
    assert run.returncode == 0 and "token-aware-truncation" in run.stdout


def test_apply_offloads_with_a_folder(tmp_path):
    """apply --offload DIR archives what managers remove; without a store long-running-agent
    still compacts (without_store: cut), with no error and nothing archived."""
    run = ctxmgmt("apply", "long-running-agent", "--input", "examples/conversation.json")
    [entry, _] = json.loads(run.stdout)["trace"]
    assert run.returncode == 0 and entry["error"] is None and "offloaded" not in entry["details"]
    assert entry["tokens_after"] < entry["tokens_before"] / 2
    run = ctxmgmt(
        "apply",
        "long-running-agent",
        "--input",
        "examples/conversation.json",
        "--offload",
        str(tmp_path / "archive"),
        "--session",
        "s1",
    )
    assert run.returncode == 0, run.stderr
    [entry, fit] = json.loads(run.stdout)["trace"]
    assert entry["error"] is None and entry["tokens_after"] < entry["tokens_before"] / 2
    assert fit["type"] == "fit" and not fit["activated"]
    store = LocalOffloader(tmp_path / "archive")
    assert [e["ref"] for e in store.list("s1")] == entry["details"]["offloaded"]


def run_in(folder, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [(("serv",), "did you mean 'serve'?"), (("definitions", "lst"), "did you mean 'list'?")],
)
def test_a_mistyped_command_gets_did_you_mean(args, suggestion):
    """A mistyped command or action exits 2 and suggests the closest one."""
    run = ctxmgmt(*args)
    assert run.returncode == 2 and suggestion in run.stderr


@pytest.mark.parametrize(
    ("db", "says"),
    [
        (
            "postgresql://bob:secret@127.0.0.1:1/x",
            "cannot use the database postgresql://bob:***@127.0.0.1:1/x",
        ),
        ("sqlite:////no/such/folder/x.db", "cannot use the database sqlite:////no/such/folder/x.db"),
        ("mysql://bob:secret@host/x", "'mysql' databases are not supported"),
    ],
)
def test_a_bad_database_is_one_line_exit_2_without_the_password(tmp_path, db, says):
    """An unreachable or unsupported database: one line naming the URL, password hidden, exit 2."""
    run = run_in(tmp_path, "db", "upgrade", "--db", db)
    assert run.returncode == 2 and says in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "secret" not in run.stderr


def test_serve_on_a_taken_port_fails_before_creating_the_database(tmp_path):
    """When the port is taken, serve says so, exits 2, prints no 'serving on' and creates no database."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_in(tmp_path, "serve", "--port", str(port))
    assert run.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in run.stderr
    assert "another --port" in run.stderr  # how to fix it
    assert "serving on" not in run.stdout and not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("apply", "default", "--input", "in.json")])
def test_a_mark_key_too_short_stops_the_command_before_it_starts(tmp_path, command):
    """A CTXMGMT_MARK_KEY under 16 characters is exit 2 naming it, before serve listens or apply
    runs: it was an error of every summary (apply exited 0, its context unchanged; serve ran)."""
    (tmp_path / "in.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    run = run_in(tmp_path, *command, env={**os.environ, "CTXMGMT_MARK_KEY": "short"})
    assert run.returncode == 2, run.stderr
    assert "CTXMGMT_MARK_KEY must be at least 16 characters" in run.stderr
    assert "serving on" not in run.stdout and "Traceback" not in run.stderr


def test_bad_input_names_its_file(tmp_path):
    """A broken input is blamed on the input file, with the pointer and what is wrong."""
    path = tmp_path / "in.json"
    path.write_text(json.dumps([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]))
    run = ctxmgmt("apply", "default", "--input", str(path))
    assert run.returncode == 2
    assert f"{path}: /messages/0/content/0/tool_use_id: tool_result 'x' answers no tool_use" in run.stderr


def test_apply_takes_an_anthropic_conversation_with_its_format(tmp_path):
    """The CLI's input object may declare format: anthropic; the output is Anthropic messages,
    with the system blocks and untouched messages as they came."""
    from tests.formats.test_anthropic import SYSTEM, conversation

    msgs = conversation(20, size=8000)
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"system_prompt": SYSTEM, "messages": msgs, "format": "anthropic"}))
    run = ctxmgmt("apply", "default", "--input", str(path), "--context-window", "20000")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)["context"]
    assert out["format"] == "anthropic" and out["system_prompt"] == SYSTEM
    assert out["messages"][0] == msgs[0] and out["messages"][-1] == msgs[-1]
    assert len(out["messages"]) < len(msgs) and "SummarizationManager: activated" in run.stderr


def test_serve_answers_without_waiting_for_delayed_acks():
    """The connections `ctxmgmt serve` accepts send small writes at once (TCP_NODELAY): a
    response's body, written after its head, does not wait ~40 ms for the client's ACK."""
    import socket

    from ctxmgmt.cli import _listen

    with _listen("127.0.0.1", 0) as listener:
        listener.listen(1)
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
