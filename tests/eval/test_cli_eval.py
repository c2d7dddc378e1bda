"""`ctxmgmt eval`, run as a real subprocess."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"
ORPHAN = {"role": "tool", "tool_call_id": "a", "content": "y"}


def ctxmgmt(*args):
    return subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "eval", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_eval_prints_a_row_per_definition_window_and_baseline(tmp_path):
    """Two definitions at two windows: a row each, their sliding windows and masking; JSON and SVG."""
    out_json, out_svg = tmp_path / "r.json", tmp_path / "r.svg"
    run = ctxmgmt(
        str(EXAMPLE),
        "-d",
        "default",
        "-d",
        "cache-aware",
        "-w",
        "8000,32000",
        "--json",
        str(out_json),
        "--svg",
        str(out_svg),
    )
    assert run.returncode == 0, run.stderr
    rows = run.stdout.splitlines()[2:]
    assert len(rows) == 2 * (2 + 2 + 1)
    assert rows[0].startswith("default ") and rows[1].startswith("sliding-window (= default)")
    report = json.loads(out_json.read_text())
    assert report["schema"] == "ctxmgmt.eval/1" and report["windows"] == [8000, 32000]
    assert [r["name"] for r in report["rows"]][:5] == [
        "default",
        "sliding-window",
        "cache-aware",
        "sliding-window",
        "observation-masking",
    ]
    assert ET.parse(out_svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_eval_json_to_stdout_is_the_report_alone():
    """--json - prints the report as JSON and no table."""
    run = ctxmgmt(str(EXAMPLE), "--json", "-", "--pricing", "3,15,0.3,3.75")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["pricing"] == {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
    assert report["rows"][0]["estimated_cost"] > 0


def test_eval_reads_a_folder_of_json_and_jsonl(tmp_path):
    """A folder's .json and .jsonl conversations are all replayed, one entry each in the report."""
    data = json.loads(EXAMPLE.read_text())
    (tmp_path / "one.json").write_text(json.dumps(data))
    (tmp_path / "more.jsonl").write_text(json.dumps(data) + "\n" + json.dumps(data["messages"][:9]) + "\n")
    run = ctxmgmt(str(tmp_path), "--json", "-", "--no-baselines")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert [c["id"] for c in report["conversations"]] == ["more.jsonl:1", "more.jsonl:2", "one.json"]
    assert [r["kind"] for r in report["rows"]] == ["definition"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["missing.json"], "missing.json: /: cannot read the file: No such file"),
        ([str(EXAMPLE), "-w", "0"], "--window: '0' is not a whole number"),
        ([str(EXAMPLE), "-w", "16k"], "--window: '16k' is not a whole number"),
        ([str(EXAMPLE), "--mask-last", "-1"], "--mask-last: must be a whole number"),
        ([str(EXAMPLE), "--pricing", "1,x"], "--pricing: '1,x' is neither"),
        ([str(EXAMPLE), "--pricing", "1,2,3,4,5"], "--pricing: give 2 to 4 prices"),
        ([str(EXAMPLE), "-d", "no-such-definition"], "no-such-definition"),
        ([str(EXAMPLE), "--svg", "/no/such/dir/x.svg"], "--svg: /no/such/dir is not a folder"),
        ([str(EXAMPLE), "--max-input-mb", "0"], "--max-input-mb: must be more than 0"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, reason):
    """A bad argument is exit 2 with one line that names it, and no traceback."""
    run = ctxmgmt(*args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert reason in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "bad.json:1: /: JSON syntax error"),
        ('{"messages": 3}', "/messages: must be a list of messages"),
        ('{"messages": [], "model": 7}', "/model: must be a string naming the model, not int"),
        ('{"messages": [{"role": "user", "content": "x"}], "tools": {}}', "/tools: must be a list"),
        ('{"input": [{"role": "user", "content": "x"}], "instructions": 7}', "/instructions: must be text"),
        ("[1, 2]", "/0: a message must be an object with a role"),
        ('{"messages": [{"role": "user", "content": "x"}, 7]}', "/messages/1: a message must be an object"),
        ("7", "/: is neither a message list nor an object holding one"),
        ('{"messages": []}', "/: the conversation has no messages"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}, ORPHAN, 5]}), "/messages/2"),
        ("\udcff", "is not UTF-8"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [7]}),
            "/tools/0: a tool schema",
        ),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}), "/messages/0/role"),
    ],
)
def test_bad_files_exit_2_naming_the_file_and_pointer(tmp_path, content, reason):
    """A malformed conversation file is exit 2 with one line naming the file (or run) and what is wrong."""
    path = tmp_path / "bad.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    run = ctxmgmt(str(path))
    assert run.returncode == 2, run.stdout + run.stderr
    assert reason in run.stderr and "bad" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_file_over_the_limit_is_refused(tmp_path):
    """A conversation file larger than --max-input-mb is refused with the option to raise."""
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 300_000}]}))
    run = ctxmgmt(str(path), "--max-input-mb", "0.1")
    assert run.returncode == 2 and "big.json" in run.stderr, run.stderr
    assert "the limit is 104,857 bytes (--max-input-mb" in run.stderr and "raises it" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert ctxmgmt(str(path), "--max-input-mb", "0.5", "--json", "-").returncode == 0


def test_no_conversation_is_exit_2(tmp_path):
    """An empty JSONL file, or a folder without logs, holds no conversation: exit 2, not an empty table."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    run = ctxmgmt(str(path))
    assert run.returncode == 2 and "empty.jsonl: /: the file is empty" in run.stderr, run.stderr
    folder = tmp_path / "nothing"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a log")
    run = ctxmgmt(str(folder))
    assert run.returncode == 2 and "nothing: no conversations found" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
