"""Faults in the local store: a full disk, a torn record, a planted link lose nothing."""

import errno
import json
import os
import time

import pytest

from ctxmgmt import Context, OffloadError, load_definition
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.offload.base import session_key

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
