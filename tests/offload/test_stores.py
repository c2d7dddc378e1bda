"""Both offload backends: exact recall, isolation, safety, durability, retention."""

import errno
import json
import os
import re
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxmgmt import OffloadError
from ctxmgmt.offload import LocalOffloader, SQLOffloader


@pytest.fixture(params=["local", "sql"])
def offloader(request, tmp_path, database_url):
    if request.param == "local":
        yield LocalOffloader(tmp_path / "offload")
        return
    from ctxmgmt.store import connect, migrate

    engine = connect(database_url)
    migrate(engine)
    yield SQLOffloader(engine)
    engine.dispose()


def test_tool_results_read_back_exactly_in_chars_and_lines(offloader):
    """A stored output reads back exactly, whole or sliced by characters or lines."""
    text = "".join(f"line {i}: ü€ 😀\n" for i in range(100))
    ref = offloader.store_tool_result("s", text, tool_call_id="call/../x")
    assert ref.startswith("t-")
    assert offloader.read("s", ref).text == text
    part = offloader.read("s", ref, offset=10, limit=25)
    assert part.text == text[10:35] and part.next_offset == 35
    lines = offloader.read("s", ref, offset=5, limit=2, unit="lines")
    assert lines.text == "line 5: ü€ 😀\nline 6: ü€ 😀\n" and lines.total == 100
    assert offloader.read("s", ref, offset=len(text) - 3).next_offset is None


def test_message_batches_read_back(offloader):
    """A batch of removed messages reads back as the same messages."""
    batch = [{"role": "user", "content": "keep /etc/x"}, {"role": "assistant", "content": None}]
    ref = offloader.store_messages("s", batch)
    assert ref.startswith("m-") and json.loads(offloader.read("s", ref).text) == batch


def test_sessions_are_isolated(offloader):
    """Content of one session is not readable or searchable from another."""
    ref = offloader.store_tool_result("alice", "secret token 42")
    with pytest.raises(OffloadError):
        offloader.read("bob", ref)
    assert offloader.search("bob", "secret") == []
    assert offloader.search("alice", r"token \d+")[0]["ref"] == ref


def test_list_delete_and_gc(offloader):
    """list shows a session's artifacts; delete and gc free them."""
    offloader.store_tool_result("s", "a" * 100)
    offloader.store_messages("s", [{"role": "user", "content": "b"}])
    assert len(offloader.list("s")) == 2
    assert offloader.gc(3600).bytes == 0
    report = offloader.gc(0)
    assert (report.files + report.rows) >= 2 and report.bytes >= 100
    assert offloader.delete("s") >= 0


@pytest.mark.parametrize(
    "ref",
    [
        "../etc/passwd",
        "/etc/passwd",
        "t-" + "0" * 31,
        "t-" + "g" * 32,
        "x-" + "0" * 32,
        "t-" + "0" * 32 + "/../x",
        "t-\x00",
        "",
        None,
        5,
    ],
)
def test_bad_references_are_refused(offloader, ref):
    """Only references of the store's own form are accepted."""
    with pytest.raises(OffloadError):
        offloader.read("s", ref)


@pytest.mark.parametrize("pattern", ["", "(", "x" * 201])
def test_bad_patterns_are_refused(offloader, pattern):
    """Empty, invalid or overlong patterns are refused with a reason."""
    with pytest.raises(OffloadError):
        offloader.search("s", pattern)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    session=st.one_of(
        st.sampled_from(
            [
                "../",
                "../../etc",
                "/abs/path",
                "a\x00b",
                "x" * 600,
                "",
                ".",
                "..",
                "日本語/セッション",
                "C:\\temp",
            ]
        ),
        st.text(max_size=80),
    ),
    call_id=st.text(max_size=80),
)
def test_fuzzed_ids_stay_inside_the_root(tmp_path, session, call_id):
    """Whatever the session and tool-call ids, nothing is written outside the root."""
    root = tmp_path / "root"
    store = LocalOffloader(root)
    before = set(os.listdir(tmp_path))
    try:
        ref = store.store_tool_result(session, "payload", tool_call_id=call_id)
        assert store.read(session, ref).text == "payload"
    except OffloadError:
        pass
    assert set(os.listdir(tmp_path)) <= before | {"root"}
    for dirpath, _, files in os.walk(root):
        assert os.path.realpath(dirpath).startswith(os.path.realpath(root))
        for f in files:
            assert f.endswith((".txt", ".jsonl")) and "/" not in f


def test_concurrent_appends_are_all_kept_and_never_rewrite(tmp_path):
    """Parallel writers each get a readable batch; earlier bytes are never rewritten."""
    store = LocalOffloader(tmp_path)
    first = store.store_messages("s", [{"role": "user", "content": "first"}])
    path = next(tmp_path.glob("*/messages.jsonl"))
    head = path.read_bytes()
    refs = []

    def write(i):
        refs.append((i, store.store_messages("s", [{"role": "user", "content": f"message {i}"}])))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_bytes().startswith(head)
    for i, ref in refs:
        assert json.loads(store.read("s", ref).text) == [{"role": "user", "content": f"message {i}"}]
    assert json.loads(store.read("s", first).text)[0]["content"] == "first"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_full_or_read_only_disk_is_an_offload_error(tmp_path, monkeypatch, code):
    """A disk that is full or read-only makes writes raise OffloadError and leaves no partial file."""
    store = LocalOffloader(tmp_path)

    def fail(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OffloadError, match=os.strerror(code)):
        store.store_tool_result("s", "data")
    with pytest.raises(OffloadError):
        store.store_messages("s", [{"role": "user", "content": "x"}])
    assert not list(tmp_path.glob("*/.tmp-*")) and not list(tmp_path.glob("*/t-*.txt"))


def test_gc_command_reports_what_it_freed(tmp_path, capsys):
    """`ctxmgmt offload gc` deletes artifacts past the retention age and reports files and bytes."""
    from ctxmgmt.cli import main

    root = tmp_path / "offload"
    LocalOffloader(root).store_tool_result("s", "x" * 1000)
    day_ago = __import__("time").time() - 86400
    for path in root.rglob("*"):
        os.utime(path, (day_ago, day_ago))
    config = tmp_path / "config.yaml"
    config.write_text(f"offload:\n  backend: local\n  root: {root}\n  retention_days: 30\n")
    assert main(["offload", "gc", "--config", str(config)]) == 0
    assert "0 files" in capsys.readouterr().out
    assert main(["offload", "gc", "--config", str(config), "--max-age-days", "0.5"]) == 0
    out = capsys.readouterr().out
    freed = re.search(r"(\d+) files, 0 rows, ([\d,]+) bytes freed", out)
    assert freed and int(freed.group(1)) >= 1 and int(freed.group(2).replace(",", "")) >= 1000
    assert not any(root.glob("*/t-*.txt"))


def test_archived_messages_are_searched_as_the_model_saw_them(offloader):
    """A batch of messages is searched in its text, not its JSON: quotes, line anchors and
    tool-call arguments match, and the hit names the message and gives the matching line."""
    line = 'Error from server (NotFound): deployments.apps "billing-worker" not found'
    messages = [
        {"role": "user", "content": "deploy it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"cmd": "kubectl get"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": f"NAME READY\n{line}\n"},
    ]
    ref = offloader.store_messages("s", messages)
    [hit] = offloader.search("s", '^Error from server .*"billing-worker" not found$')
    assert hit == {"ref": ref, "message": 2, "line": 1, "text": line}
    [call] = offloader.search("s", 'kubectl get"')
    assert call["message"] == 1 and call["text"] == 'run({"cmd": "kubectl get"})'


def test_search_runs_in_linear_time_and_says_what_it_cannot_do(offloader):
    """Search uses RE2: a pattern that would backtrack exponentially finds its answer, and
    backreferences are a clear error naming the syntax."""
    offloader.store_tool_result("s", ("a" * 26 + "!\n") * 3)
    assert offloader.search("s", "(a+)+$") == []
    assert [h["line"] for h in offloader.search("s", "^(a+)+!$")] == [0, 1, 2]
    with pytest.raises(OffloadError, match="RE2 syntax: no backreferences"):
        offloader.search("s", r"(a)\1")


def test_a_search_scans_a_bounded_amount_and_says_so(offloader, monkeypatch):
    """Past its scan bound a search stops and marks its hits truncated."""
    from ctxmgmt.offload import base

    for i in range(5):
        offloader.store_tool_result("s", f"batch {i}\n" + "filler line\n" * 2000)
    monkeypatch.setattr(base, "SEARCH_BYTES", 30_000)
    hits = offloader.search("s", "^batch", max_results=10)
    assert hits.truncated and 1 <= len(hits) < 5
    monkeypatch.setattr(base, "SEARCH_BYTES", 10**9)
    hits = offloader.search("s", "^batch", max_results=10)
    assert not hits.truncated and len(hits) == 5


def test_a_missing_reference_is_said_to_be_missing(offloader):
    """A read without a reference (a model's call that left ``ref`` out) says that it is
    missing, not that 'None' is no reference."""
    with pytest.raises(OffloadError, match="ref is missing"):
        offloader.read("s", None)
