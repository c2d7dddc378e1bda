"""Faults in the local store: a full disk, a torn record, a planted link lose nothing."""

import errno
import json
import os
import time

import pytest

from ctxmgmt import Context, OffloadError, load_definition
from ctxmgmt.archive import session_key
from ctxmgmt.offload import LocalOffloader

MESSAGES = [{"role": "user", "content": f"message {i} " + "x" * 200} for i in range(3)]


def full_disk_after(monkeypatch, n_bytes):
    """os.write writes ``n_bytes`` of the next write, then fails with ENOSPC."""
    real = os.write
    state = {"left": n_bytes}

    def write(fd, data):
        if state["left"] is None:
            return real(fd, data)
        if state["left"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: state["left"]]))
        state["left"] -= n
        return n

    monkeypatch.setattr(os, "write", write)
    return state


def test_a_full_disk_mid_append_acknowledges_nothing_and_tears_nothing(tmp_path, monkeypatch):
    """ENOSPC after a short write: the append raises, the partial line is removed, and the
    archives before and after it read back whole, even after space is freed."""
    store = LocalOffloader(tmp_path)
    before = store.store_messages("s", MESSAGES)
    state = full_disk_after(monkeypatch, 40)
    with pytest.raises(OffloadError, match="No space left"):
        store.store_messages("s", MESSAGES)
    state["left"] = None  # space is freed
    after = store.store_messages("s", MESSAGES)
    assert json.loads(store.read("s", before).text) == MESSAGES
    assert json.loads(store.read("s", after).text) == MESSAGES
    assert [e["ref"] for e in store.list("s")] == [before, after]
    assert store.search("s", "^message 2 ")[0]["ref"] == before


def test_a_failed_archive_removes_nothing(tmp_path, monkeypatch):
    """A summariser whose archive hits a full disk leaves the context as it was; the trace says why."""
    store = LocalOffloader(tmp_path)
    full_disk_after(monkeypatch, 0)
    d = load_definition({"name": "s", "hooks": {"pre_llm": [{"type": "SummarizationManager"}]}})
    msgs = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"step {i} " + "y" * 300} for i in range(30)
    ]
    result = d.apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
    assert result.context.messages == tuple(msgs)
    assert "No space left" in result.trace[0]["error"]


def test_a_torn_tail_from_a_crash_is_skipped_and_never_poisons_other_records(tmp_path):
    """A record cut short by a crash is skipped by list and search, reads as damaged by its
    reference, and the records before and after it stay whole."""
    store = LocalOffloader(tmp_path)
    before = store.store_messages("s", MESSAGES)
    folder = tmp_path / session_key("s")
    with open(folder / "messages.jsonl", "ab") as f:
        f.write(b'{"ref": "m-' + b"0" * 32 + b'", "messages": [{"role": "us')  # a crash mid-write
    with open(folder / "index.jsonl", "ab") as f:
        f.write(b'{"ref": "m-0000')
    after = store.store_messages("s", MESSAGES)
    assert [e["ref"] for e in store.list("s")] == [before, after]
    assert json.loads(store.read("s", after).text) == MESSAGES
    assert len(store.search("s", "^message 1 ")) == 2


def test_gc_never_follows_a_link_out_of_its_root(tmp_path):
    """A link planted in the root or in a session folder is left alone, reported, and what it
    points to is never deleted."""
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious.txt"
    precious.write_text("keep me")
    old = time.time() - 90 * 86400
    os.utime(precious, (old, old))
    root = tmp_path / "root"
    store = LocalOffloader(root)
    store.store_tool_result("s", "old output")
    folder = root / session_key("s")
    (root / ("a" * 40)).symlink_to(outside, target_is_directory=True)
    (folder / "t-link.txt").symlink_to(precious)
    for path in folder.iterdir():
        os.utime(path, (old, old), follow_symlinks=False)
    report = store.gc(30 * 86400)
    assert precious.read_text() == "keep me"
    assert "a" * 40 in report.skipped and f"{folder.name}/t-link.txt" in report.skipped
    assert report.files >= 1


def big_results(n):
    msgs = [{"role": "user", "content": "task"}]
    for i in range(n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i} " + "z" * 3000})
    return msgs


COMPACT = {"name": "c", "hooks": {"pre_llm": [{"type": "ToolResultCompactionManager"}]}}


def test_one_manager_run_archives_in_one_batched_durable_write(tmp_path, monkeypatch):
    """A compaction that archives dozens of results writes them with two fsyncs in all (the
    archive file, then its index), not one or more per result; every archive reads back whole."""
    store = LocalOffloader(tmp_path)
    store.store_messages("s", MESSAGES)  # the session's files exist already
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    msgs = big_results(40)
    result = load_definition(COMPACT).apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
    [entry, *_] = result.trace
    refs = entry["details"]["offloaded"]
    assert entry["error"] is None and len(refs) >= 30
    assert len(synced) == 2
    originals = [m["content"] for m in msgs if m["role"] == "tool"]
    assert [store.read("s", ref).text for ref in refs] == originals[: len(refs)]


def test_a_batch_that_fails_to_commit_removes_nothing_and_leaves_no_archive(tmp_path, monkeypatch):
    """A full disk at the batched write: the manager's output is not used, the trace says why,
    and no archive of that run is left behind, whole or torn."""
    store = LocalOffloader(tmp_path)
    before = store.store_messages("s", MESSAGES)
    state = full_disk_after(monkeypatch, 5000)
    msgs = big_results(10)
    result = load_definition(COMPACT).apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
    assert result.context.messages == tuple(msgs)
    assert "No space left" in result.trace[0]["error"]
    state["left"] = None
    listing = store.list("s")
    assert [e["ref"] for e in listing] == [before] and listing.damaged == 0
    assert json.loads(store.read("s", before).text) == MESSAGES


def test_a_torn_record_is_reported_in_the_trace_the_listing_and_the_search(tmp_path):
    """A record torn by a crash is counted where it is met: the next run's trace says it
    closed it off, and the listing and the search say they skipped it."""
    store = LocalOffloader(tmp_path)
    store.store_messages("s", MESSAGES)
    folder = tmp_path / session_key("s")
    with open(folder / "messages.jsonl", "ab") as f:
        f.write(b'{"ref": "t-' + b"1" * 32 + b'", "bytes": 900, "crc32": 1}\nhalf of a resu')
    with open(folder / "index.jsonl", "ab") as f:
        f.write(b'{"ref": "t-1111')
    result = load_definition(COMPACT).apply(
        "pre_llm", Context(messages=big_results(10)), offloader=store, session="s"
    )
    assert result.trace[0]["details"]["torn_records_closed"] == 2
    assert store.list("s").damaged == 1
    hits = store.search("s", "^output 1 ")
    assert hits.damaged == 1 and len(hits) == 1


def test_a_damaged_body_reads_as_damaged_never_as_other_text(tmp_path):
    """A record whose body no longer matches its checksum is refused by reference, and the
    records around it read back whole."""
    store = LocalOffloader(tmp_path)
    first = store.store_tool_result("s", "first output")
    middle = store.store_tool_result("s", "middle output")
    last = store.store_tool_result("s", "last output")
    path = tmp_path / session_key("s") / "messages.jsonl"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"middle output", b"MIDDLE output"))
    with pytest.raises(OffloadError, match="damaged"):
        store.read("s", middle)
    assert store.read("s", first).text == "first output"
    assert store.read("s", last).text == "last output"


def test_archives_of_the_earlier_layout_still_read(tmp_path):
    """A store written by an earlier version (a file per tool result, a batch per JSON line)
    reads, searches and lists as before, and new archives go beside it."""
    folder = tmp_path / session_key("s")
    folder.mkdir()
    old_t, old_m = "t-" + "a" * 32, "m-" + "b" * 32
    (folder / f"{old_t}.txt").write_text("old tool output")
    line = json.dumps({"ref": old_m, "messages": MESSAGES}) + "\n"
    (folder / "messages.jsonl").write_text(line)
    index = [
        {"ref": old_t, "kind": "tool_result", "tool_call_id": "c", "bytes": 15, "time": 1.0},
        {"ref": old_m, "kind": "messages", "offset": 0, "count": 3, "bytes": len(line), "time": 1.0},
    ]
    (folder / "index.jsonl").write_text("".join(json.dumps(e) + "\n" for e in index))
    store = LocalOffloader(tmp_path)
    new = store.store_tool_result("s", "new tool output")
    assert store.read("s", old_t).text == "old tool output"
    assert json.loads(store.read("s", old_m).text) == MESSAGES
    assert store.read("s", new).text == "new tool output"
    assert [h["ref"] for h in store.search("s", "tool output")] == [old_t, new]
