"""Hostile files and hostile servers: every path of the ctxmgmt command exits 2 with one line."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ctxmgmt.cli import terminal_safe, trace_lines
from ctxmgmt.loader import MAX_DEPTH, MAX_DIGITS, MAX_NODES, load_document, parse_document, parse_json
from tests.conftest import ROOT, free_port
from tests.test_cli import ctxmgmt

TIMEOUT = 60
"""A hang is what these tests catch: the bounded work takes well under a second, the rest is
the interpreter starting on a shared machine."""


BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g", "h"], "abcdefghi", strict=True)
)


def hostile(folder: Path, kind: str, suffix: str) -> Path:
    """One hostile file of ``kind`` named hostile.<suffix> in ``folder``."""
    path = folder / f"hostile{suffix}"
    if kind == "alias bomb":
        path.write_text(BOMB)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep nesting":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "huge integer":
        path.write_text('{"name": "x", "n": ' + "9" * 5000 + "}")
    elif kind == "lone surrogate":
        path.write_text('{"name": "x", "description": "a\\ud800b"}')
    elif kind == "too large":
        path.write_text("[" + "1, " * (1 << 20) + "1]")
    return path


SAYS = {
    "alias bomb": "anchors or aliases",
    "link to /dev/zero": "not a regular file",
    "fifo": "not a regular file",
    "deep nesting": f"nests deeper than {MAX_DEPTH} levels",
    "huge integer": "5,000 digits",
    "lone surrogate": "lone surrogate",
    "too large": "the limit is 1.0 MiB",
}
KINDS = [
    (kind, suffix)
    for kind in SAYS
    for suffix in (".yaml", ".json")
    if (kind, suffix) != ("alias bomb", ".json")
]


@pytest.fixture
def conversation(tmp_path):
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    return path


def one_line(run, path, says):
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and says in lines[0], run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(("kind", "suffix"), KINDS)
def test_a_hostile_definition_exits_2_with_one_line(tmp_path, conversation, kind, suffix):
    """apply with a hostile definition file exits 2, one line naming the file and the fault, no hang."""
    path = hostile(tmp_path, kind, suffix)
    one_line(ctxmgmt("apply", str(path), "--input", str(conversation)), path, SAYS[kind])


@pytest.mark.parametrize(("kind", "suffix"), KINDS)
def test_a_hostile_config_exits_2_with_one_line(tmp_path, conversation, kind, suffix):
    """--config naming a hostile file exits 2 with one line naming it."""
    path = hostile(tmp_path, kind, suffix)
    run = ctxmgmt("apply", "default", "--config", str(path), "--input", str(conversation))
    one_line(run, path, SAYS[kind])


@pytest.mark.parametrize(("kind", "suffix"), KINDS)
def test_validate_reports_a_hostile_file(tmp_path, kind, suffix):
    """validate prints the one problem of a hostile file, with its file, and exits 2."""
    path = hostile(tmp_path, kind, suffix)
    run = ctxmgmt("validate", str(path))
    assert run.returncode == 2, run.stdout + run.stderr
    [line] = run.stdout.splitlines()
    assert line.startswith(str(path)) and SAYS[kind] in line
    assert run.stderr.strip() == "1 file checked, 1 error"


@pytest.mark.parametrize(("kind", "suffix"), KINDS)
def test_serve_refuses_a_hostile_file_in_its_folder_before_it_binds(tmp_path, kind, suffix):
    """serve --definitions DIR with a hostile file exits 2 naming it, creates no database, serves nothing."""
    folder = tmp_path / "defs"
    folder.mkdir()
    path = hostile(folder, kind, suffix)
    db = tmp_path / "s.db"
    run = ctxmgmt(
        "serve", "--definitions", str(folder), "--port", str(free_port()), "--db", f"sqlite:///{db}"
    )
    one_line(run, path, SAYS[kind])
    assert "serving on" not in run.stdout and not db.exists()


@pytest.mark.parametrize("kind", [k for k in SAYS if k != "alias bomb"])
def test_a_hostile_conversation_exits_2_with_one_line(tmp_path, kind):
    """apply --input with a hostile JSON file exits 2 with one line; the size limit names its option."""
    path = hostile(tmp_path, kind, ".json")
    run = ctxmgmt("apply", "default", "--input", str(path), "--max-input-mb", "1")
    one_line(run, path, SAYS[kind])
    if kind == "too large":
        assert "--max-input-mb raises it" in run.stderr


def test_an_endless_stdin_is_cut_at_the_limit():
    """apply --input - reading /dev/zero stops at the limit and exits 2 naming it."""
    with open("/dev/zero", "rb") as zero:
        run = subprocess.run(
            [sys.executable, "-m", "ctxmgmt.cli", "apply", "default", "--input", "-", "--max-input-mb", "1"],
            stdin=zero,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=TIMEOUT,
        )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "ctxmgmt: error: invalid context: <stdin>: /: the file is more than 1.0 MiB long; "
        "the limit is 1.0 MiB (--max-input-mb raises it)"
    )


# -- the loader's bounds, exactly --------------------------------------------------------
def test_yaml_nesting_is_refused_one_level_past_the_limit_with_its_line():
    """MAX_DEPTH levels of YAML are read; one more is refused on the line that opens it."""

    def nested(levels):
        return "".join(" " * i + "a:\n" for i in range(levels - 1)) + " " * (levels - 1) + "a: 1\n"

    assert not parse_document(nested(MAX_DEPTH)).problems
    [problem] = parse_document(nested(MAX_DEPTH + 1)).problems
    assert problem.line == MAX_DEPTH + 1 and "nests deeper" in problem.message


def test_json_nesting_is_refused_one_level_past_the_limit_with_its_pointer():
    """MAX_DEPTH levels of JSON are read; one more is refused at the pointer of the deepest."""
    assert not parse_json('{"a":' * (MAX_DEPTH - 1) + "[1]" + "}" * (MAX_DEPTH - 1)).problems
    [problem] = parse_json('{"a":' * MAX_DEPTH + "[1]" + "}" * MAX_DEPTH).problems
    assert problem.pointer == "/a" * MAX_DEPTH and problem.message.startswith("nests deeper")


@pytest.mark.parametrize("parse", [parse_json, parse_document])
def test_integers_are_bounded_by_their_digits(parse):
    """An integer of MAX_DIGITS digits is read; one digit more is a problem, in JSON and YAML."""
    assert parse('{"n": ' + "9" * MAX_DIGITS + "}").data == {"n": int("9" * MAX_DIGITS)}
    [problem] = parse('{"n": ' + "9" * (MAX_DIGITS + 1) + "}").problems
    assert f"{MAX_DIGITS + 1:,} digits" in problem.message and problem.line == 1


@pytest.mark.parametrize("text", ['{"n": NaN}', '{"n": -Infinity}', '{"n": 1e999}'])
def test_json_numbers_are_finite(text):
    """JSON's NaN and Infinity, and a number too large for a float, are problems."""
    doc = parse_json(text)
    assert doc.data is None and doc.problems[0].line == 1


def test_a_lone_surrogate_is_refused_with_its_pointer_and_line(tmp_path):
    """A lone surrogate in YAML or JSON is a problem on its line (and at its pointer: libyaml
    refuses the escape itself); a proper pair is text."""
    path = tmp_path / "d.yaml"
    path.write_text('name: x\nhooks:\n  pre_llm:\n    - type: "T\\udc00"\n')
    [problem] = load_document(path).problems
    assert problem.line == 4 and problem.pointer in ("", "/hooks/pre_llm/0/type")
    path = tmp_path / "d.json"
    path.write_text('{\n "name": "x",\n "keys": {"\\ud800": 1}\n}')
    [problem] = load_document(path).problems
    assert (problem.pointer, problem.line) == ("/keys", 3)
    assert parse_json('["\\ud83d\\ude00"]').data == ["\U0001f600"]


def test_yaml_holds_a_bounded_number_of_values():
    """More than MAX_NODES values in one YAML document is a problem, found before building it."""
    [problem] = parse_document("[" + ", ".join(["1"] * MAX_NODES) + "]").problems
    assert "more than 20,000 values" in problem.message
    assert not parse_document("[" + ", ".join(["1"] * (MAX_NODES - 1)) + "]").problems


def test_a_single_anchor_is_refused_too():
    """An anchor without an alias is refused as the REST editor refuses it."""
    [problem] = parse_document("name: x\nhooks: &h {}\n").problems
    assert problem.line == 2 and "anchors or aliases" in problem.message


# -- terminal output ------------------------------------------------------------------------
@given(st.text())
@example("\x1b]0;title\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\x85\u2028\u202e\ud800\r\x7f")
def test_terminal_safe_leaves_nothing_a_terminal_obeys(text):
    """terminal_safe keeps tab and newline, escapes every control, and JSON stays the same JSON."""
    safe = terminal_safe(json.dumps(text, ensure_ascii=False))
    assert json.loads(safe) == text
    assert not any(
        (ord(c) < 32 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029\u202e\u2066"
        for c in safe
    )
    safe.encode("utf-8")  # no lone surrogate left


# -- hostile servers ------------------------------------------------------------------------
class Answers(ThreadingHTTPServer):
    """A loopback HTTP server that answers every GET and POST with ``self.answer``:
    (status, content type, body bytes, or an int: that many bytes streamed)."""

    daemon_threads = True
    answer: tuple[int, str, bytes | int] = (200, "application/json", b"{}")


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.paths.append(self.path)
        status, kind, body = self.server.answer
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(body if isinstance(body, int) else len(body)))
        self.end_headers()
        try:
            if isinstance(body, int):
                chunk = b" " * (1 << 20)
                for _ in range(body >> 20):
                    self.wfile.write(chunk)
            else:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_POST = do_GET


@pytest.fixture
def answers():
    server = Answers(("127.0.0.1", 0), _Handler)
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


GOOD = {
    "execution_id": "e1",
    "agent_id": "a1",
    "memory_id": "m1",
    "definition": "d",
    "definition_source": "agent",
    "status": "finished",
    "context_window": 1000,
    "max_request_tokens": 600,
    "calls": [{"call": 1, "calibrated_before": 900, "calibrated": 600, "tokens_after": 600}],
    "hooks": [],
}
MALFORMED = {
    "wrong type": (200, "application/json", json.dumps({**GOOD, "calls": "many"}).encode()),
    "missing key": (200, "application/json", json.dumps({"execution_id": "e1"}).encode()),
    "entry of the wrong type": (
        200,
        "application/json",
        json.dumps(
            {
                **GOOD,
                "hooks": [
                    {"hook": "pre_llm", "iteration": 1, "entries": [{"type": "T", "tokens_before": "x"}]}
                ],
            }
        ).encode(),
    ),
    "not JSON": (200, "text/plain", b"hello"),
    "an HTML page": (
        200,
        "text/html",
        b"<html><head><title>Welcome</title></head><body>\n<p>hi</p></body></html>",
    ),
    "an HTML error page": (
        502,
        "text/html",
        b"<html>\n<title>502 Bad Gateway</title>\n<h1>nginx</h1></html>",
    ),
    "JSON nested deep": (200, "application/json", b"[" * 100_000 + b"]" * 100_000),
    "NaN": (200, "application/json", json.dumps({**GOOD, "max_request_tokens": float("nan")}).encode()),
    "a huge integer": (200, "application/json", b'{"execution_id": ' + b"1" * 5000 + b"}"),
    "a lone surrogate": (200, "application/json", b'{"execution_id": "\\ud800"}'),
    "a list": (200, "application/json", b"[1, 2]"),
    "a huge answer": (200, "application/json", 65 << 20),
}
COMMANDS = {
    "trace": ("trace", "e1"),
    "executions list": ("executions", "list", "a1"),
    "compact": ("compact", "--agent", "a1", "--memory", "m1"),
    "definitions list": ("definitions", "list"),
    "definitions get": ("definitions", "get", "default"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_malformed_server_answer_exits_2_with_one_line(answers, command, case):
    """trace, executions list, compact and definitions list/get exit 2 with one line on any
    malformed answer, never an internal error."""
    answers.answer = MALFORMED[case]
    run = ctxmgmt(*COMMANDS[command], "--url", answers.url)
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("ctxmgmt: error: ") and "internal error" not in line
    assert run.stdout == ""


def test_a_malformed_answer_names_what_is_wrong(answers):
    """The line names the pointer and the fault of a malformed answer, or the page's title."""
    answers.answer = MALFORMED["wrong type"]
    run = ctxmgmt("trace", "e1", "--url", answers.url)
    assert "gave a malformed answer: /calls: 'many' is not of type 'array'" in run.stderr
    answers.answer = MALFORMED["an HTML error page"]
    run = ctxmgmt("trace", "e1", "--url", answers.url)
    assert run.stderr.strip() == "ctxmgmt: error: 502 http_error: 502 Bad Gateway"
    answers.answer = MALFORMED["an HTML page"]
    run = ctxmgmt("trace", "e1", "--url", answers.url)
    assert "invalid answer (HTTP 200): the answer is text/html, not JSON: Welcome" in run.stderr


HOSTILE_TEXT = "\x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[2J \x9b31m \u202eevil"


def test_trace_prints_control_characters_escaped(answers):
    """Terminal control sequences in a record (set the title, OSC 52, clear the screen, C1 CSI,
    bidi override) are printed as escapes by trace, executions list and executions get."""
    entry = {
        "type": "ToolResultClearingManager",
        "hook": "pre_llm",
        "index": 0,
        "activated": True,
        "tokens_before": 900,
        "tokens_after": 600,
        "messages_before": 4,
        "messages_after": 4,
        "error": HOSTILE_TEXT,
        "details": {},
    }
    run_record = {
        "hook": "pre_llm",
        "iteration": 1,
        "call": 1,
        "entries": [entry],
        "removed": 1,
        "added": 0,
        "removed_preview": [{"role": "tool", "text": HOSTILE_TEXT, "chars": len(HOSTILE_TEXT)}],
    }
    record = {**GOOD, "definition": HOSTILE_TEXT, "error": HOSTILE_TEXT, "hooks": [run_record]}
    answers.answer = (200, "application/json", json.dumps(record).encode())
    trace = ctxmgmt("trace", "e1", "--url", answers.url)
    assert trace.returncode == 0, trace.stderr
    got = ctxmgmt("executions", "get", "e1", "--url", answers.url)
    assert json.loads(got.stdout) == record
    answers.answer = (
        200,
        "application/json",
        json.dumps({"total": 1, "executions": [{**record, "llm_calls": 1}]}).encode(),
    )
    listed = ctxmgmt("executions", "list", "a1", "--url", answers.url)
    for output in (trace.stdout, got.stdout, listed.stderr):
        assert not set(output) & {"\x1b", "\x07", "\x9b", "\u202e"}
    assert (
        "\\u001b]0;pwned\\u0007" in trace.stdout
        and "removed [tool] \\u001b]0;pwned\\u0007 \\u001b]52;c;" in trace.stdout
    )
    assert "\\u009b31m \\u202eevil" in listed.stderr


def test_trace_shows_a_rewritten_summary_as_updated():
    """A hook run that merged into the summary shows it updated, not removed with nothing added."""
    old = "[ctxmgmt:summary] Summary of 4 earlier messages, which are no longer shown."
    new = "[ctxmgmt:summary] Summary of 9 earlier messages, which are no longer shown."
    run = {
        "hook": "pre_llm",
        "iteration": 3,
        "call": 3,
        "entries": [],
        "removed": 2,
        "added": 1,
        "removed_preview": [
            {"role": "user", "text": old, "chars": len(old), "summary": True},
            {"role": "tool", "text": "row row row", "chars": 11},
            {"role": "user", "text": old, "chars": len(old)},  # a user's text forging the marker
        ],
        "added_preview": [{"role": "user", "text": new, "chars": len(new), "summary": True}],
    }
    lines = trace_lines({**GOOD, "hooks": [run]})
    assert "  call 3 pre_llm removed [tool] row row row" in lines
    assert f"  call 3 pre_llm updated the summary [user] {new}" in lines
    assert [line for line in lines if "removed [user]" in line] == [f"  call 3 pre_llm removed [user] {old}"]


@pytest.mark.parametrize("execution_id", ["..", "../../agents/x", "x?size=1#y", "."])
def test_an_id_stays_one_path_segment(answers, execution_id):
    """An id with slashes, dots, ? or # is sent as one percent-encoded path segment, never another route."""
    answers.answer = (200, "application/json", json.dumps(GOOD).encode())
    ctxmgmt("trace", execution_id, "--url", answers.url)
    [path] = answers.paths
    assert path.startswith("/_plugins/_ml/executions/") and "/" not in path.removeprefix(
        "/_plugins/_ml/executions/"
    )
    assert "?" not in path and "#" not in path
